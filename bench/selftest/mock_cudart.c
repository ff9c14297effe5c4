/* SPDX-License-Identifier: MIT */
/*
 * The CUDA runtime as collc-bench's self-test sees it (mock.h). Built twice:
 * with CUDA graphs, and with -DMOCK_OLD without them (a runtime the graph
 * mode must skip). MOCK_GRAPH_BROKEN=1 in the environment makes a graph
 * launch do nothing: the bench's check must then report wrong results.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/selftest/mock.h"

static long counters[MOCK_NUM_COUNTERS];

/* Read by the self-test (dlsym), bumped by the NCCL stand-in. */
long mock_count(int which, long add)
{
	if (which < 0 || which >= MOCK_NUM_COUNTERS)
		return -1;
	counters[which] += add;
	return counters[which];
}

int cudaGetDeviceCount(int *n)
{
	*n = 1;
	return 0;
}

int cudaSetDevice(int dev)
{
	return dev == 0 ? 0 : 101; /* cudaErrorInvalidDevice */
}

int cudaMalloc(void **p, size_t bytes)
{
	*p = malloc(bytes ? bytes : 1);
	return *p ? 0 : 2; /* cudaErrorMemoryAllocation */
}

int cudaFree(void *p)
{
	free(p);
	return 0;
}

int cudaMemcpy(void *dst, const void *src, size_t bytes, int kind)
{
	(void)kind;
	memcpy(dst, src, bytes);
	return 0;
}

int cudaMemset(void *p, int v, size_t bytes)
{
	memset(p, v, bytes);
	return 0;
}

int cudaDeviceSynchronize(void)
{
	return 0;
}

int cudaStreamCreateWithFlags(void **s, unsigned flags)
{
	(void)flags;
	*s = calloc(1, sizeof(struct mock_stream));
	return *s ? 0 : 2;
}

int cudaStreamDestroy(void *s)
{
	free(s);
	return 0;
}

int cudaStreamSynchronize(void *s)
{
	/* cudaErrorStreamCaptureUnsupported */
	return ((struct mock_stream *)s)->capturing ? 900 : 0;
}

int cudaStreamWaitEvent(void *s, void *e, unsigned flags)
{
	(void)s;
	(void)e;
	return flags ? 1 : 0;
}

struct mock_event {
	double t;
};

int cudaEventCreate(void **e)
{
	*e = calloc(1, sizeof(struct mock_event));
	return *e ? 0 : 2;
}

int cudaEventDestroy(void *e)
{
	free(e);
	return 0;
}

int cudaEventRecord(void *e, void *s)
{
	struct timespec ts;

	(void)s;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	((struct mock_event *)e)->t = ts.tv_sec + ts.tv_nsec * 1e-9;
	return 0;
}

int cudaEventSynchronize(void *e)
{
	(void)e;
	return 0;
}

int cudaEventElapsedTime(float *ms, void *a, void *b)
{
	*ms = (float)((((struct mock_event *)b)->t - ((struct mock_event *)a)->t) * 1e3);
	return 0;
}

const char *cudaGetErrorString(int e)
{
	return e ? "mock CUDA error" : "no error";
}

#ifndef MOCK_OLD
struct mock_graph {
	int nops;
	struct mock_op *ops;
};

int cudaStreamBeginCapture(void *sp, int mode)
{
	struct mock_stream *s = sp;

	/* cudaStreamCaptureModeGlobal (NCCL's ranks), ThreadLocal (collc's) or Relaxed. */
	if (s->capturing || mode < 0 || mode > 2)
		return 1; /* cudaErrorInvalidValue */
	s->capturing = 1;
	s->nops = 0;
	return 0;
}

int cudaStreamEndCapture(void *sp, void **g)
{
	struct mock_stream *s = sp;
	struct mock_graph *mg;

	if (!s->capturing)
		return 1;
	s->capturing = 0;
	mg = calloc(1, sizeof(*mg));
	if (!mg)
		return 2;
	mg->nops = s->nops;
	mg->ops = s->ops; /* the graph takes the recording */
	s->ops = NULL;
	s->nops = s->cap = 0;
	*g = mg;
	return 0;
}

int cudaGraphInstantiateWithFlags(void **x, void *g, unsigned long long flags)
{
	struct mock_graph *mg = g, *mx;

	if (flags)
		return 1;
	mx = calloc(1, sizeof(*mx));
	if (!mx)
		return 2;
	mx->ops = malloc(sizeof(*mx->ops) * (size_t)(mg->nops ? mg->nops : 1));
	if (!mx->ops) {
		free(mx);
		return 2;
	}
	memcpy(mx->ops, mg->ops, sizeof(*mx->ops) * (size_t)mg->nops);
	mx->nops = mg->nops;
	*x = mx;
	return 0;
}

int cudaGraphLaunch(void *x, void *s)
{
	struct mock_graph *mx = x;
	const char *broken = getenv("MOCK_GRAPH_BROKEN");

	(void)s;
	counters[MOCK_GRAPH_RUNS]++;
	if (broken && strcmp(broken, "1") == 0)
		return 0;
	for (int i = 0; i < mx->nops; i++)
		mx->ops[i].run(&mx->ops[i]);
	return 0;
}

static void graph_free(struct mock_graph *mg)
{
	free(mg->ops);
	free(mg);
}

int cudaGraphExecDestroy(void *x)
{
	graph_free(x);
	return 0;
}

int cudaGraphDestroy(void *g)
{
	graph_free(g);
	return 0;
}
#endif /* MOCK_OLD */
