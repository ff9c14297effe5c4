/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>

#include "bench/graphs.h"

int bench_cuda_fail(struct runner *rn, const struct cudart *rt, cuda_err_t e, const char *what)
{
	snprintf(rn->err, sizeof(rn->err), "%s: %s", what, cudart_strerror(rt, e));
	return -EIO;
}

cuda_err_t bench_stream_create(struct bench_stream *bs)
{
	cuda_err_t e = bs->rt->StreamCreateWithFlags(&bs->stream, CUDA_STREAM_NON_BLOCKING);

	if (e == 0)
		e = bs->rt->EventCreate(&bs->ev0);
	if (e == 0)
		e = bs->rt->EventCreate(&bs->ev1);
	return e;
}

/* Captures n collectives of size sz (the j-th into slot j) and instantiates them. */
static int capture(struct runner *rn, struct bench_stream *bs, bench_enqueue_fn *enqueue,
		   const struct bench_size *sz, int n, cuda_graph_exec_t *ret)
{
	const struct cudart *rt = bs->rt;
	cuda_graph_t g = NULL;
	int r = 0;
	cuda_err_t e = rt->StreamBeginCapture(bs->stream, bs->capture_mode);

	if (e)
		return bench_cuda_fail(rn, rt, e, "cudaStreamBeginCapture");
	for (int j = 0; j < n && r == 0; j++)
		r = enqueue(rn, sz, j);
	/* Even after a failed call: the stream must leave capture mode (rn->err says why). */
	e = rt->StreamEndCapture(bs->stream, &g);
	if (r < 0) {
		if (e == 0 && g)
			rt->GraphDestroy(g);
		return r;
	}
	if (e)
		return bench_cuda_fail(rn, rt, e, "cudaStreamEndCapture");
	e = rt->GraphInstantiateWithFlags(ret, g, 0);
	rt->GraphDestroy(g); /* the executable graph keeps what it needs */
	return e ? bench_cuda_fail(rn, rt, e, "cudaGraphInstantiateWithFlags") : 0;
}

int bench_graphs_capture(struct runner *rn, struct bench_stream *bs, bench_enqueue_fn *enqueue,
			 const struct bench_size *sz, int depth)
{
	int r = capture(rn, bs, enqueue, sz, 1, &bs->g_one);

	if (r == 0)
		r = capture(rn, bs, enqueue, sz, depth, &bs->g_pipe);
	if (r < 0) {
		bench_graphs_drop(bs);
		return r;
	}
	bs->gsz = sz;
	return 0;
}

void bench_graphs_drop(struct bench_stream *bs)
{
	if (bs->g_one)
		bs->rt->GraphExecDestroy(bs->g_one);
	if (bs->g_pipe)
		bs->rt->GraphExecDestroy(bs->g_pipe);
	bs->g_one = bs->g_pipe = NULL;
	bs->gsz = NULL;
}

int bench_graphs_once(struct runner *rn, struct bench_stream *bs, bench_graphs_for_fn *graphs_for,
		      const struct bench_size *sz, int slot)
{
	int r = slot == 0 ? graphs_for(rn, sz) : -EINVAL;
	cuda_err_t e;

	if (r == -EINVAL)
		snprintf(rn->err, sizeof(rn->err),
			 "graph mode runs single collectives into slot 0 only");
	if (r < 0)
		return r;
	e = bs->rt->GraphLaunch(bs->g_one, bs->stream);
	return e ? bench_cuda_fail(rn, bs->rt, e, "cudaGraphLaunch") : 0;
}

int bench_graphs_fit(struct runner *rn, bench_graphs_for_fn *graphs_for,
		     const struct bench_size *sz, int n, int depth, int slots)
{
	int r = depth == slots && n / depth > 0 ? graphs_for(rn, sz) : -EINVAL;

	if (r == -EINVAL)
		snprintf(rn->err, sizeof(rn->err),
			 "graph mode: %d collectives with %d outstanding do not fill graphs of %d",
			 n, depth, slots);
	return r;
}

int bench_stream_time(struct runner *rn, struct bench_stream *bs, bench_enqueue_fn *enqueue,
		      int graph, const struct bench_size *sz, int n, int depth, float *ret_ms)
{
	const struct cudart *rt = bs->rt;
	cuda_err_t e = rt->EventRecord(bs->ev0, bs->stream);
	int r;

	if (e)
		return bench_cuda_fail(rn, rt, e, "cudaEventRecord");
	for (int j = 0; j < (graph ? n / depth : n); j++) {
		if (graph) {
			e = rt->GraphLaunch(bs->g_pipe, bs->stream);
			if (e)
				return bench_cuda_fail(rn, rt, e, "cudaGraphLaunch");
		} else {
			r = enqueue(rn, sz, j % depth);
			if (r < 0)
				return r;
		}
	}
	e = rt->EventRecord(bs->ev1, bs->stream);
	if (e == 0)
		e = rt->EventSynchronize(bs->ev1);
	if (e == 0)
		e = rt->EventElapsedTime(ret_ms, bs->ev0, bs->ev1);
	return e ? bench_cuda_fail(rn, rt, e, "timing events") : 0;
}
