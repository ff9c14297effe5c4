/* SPDX-License-Identifier: MIT */
/*
 * Stand-ins for the CUDA runtime and NCCL (mock_cudart.c, mock_nccl.c) that
 * let collc-bench's NCCL ranks run on a machine without a GPU: "device"
 * memory is host memory, every call completes before it returns, and NCCL
 * has one rank, so each collective copies its count elements from the send
 * to the receive buffer. Stream capture records the collectives; a graph
 * replays them. What they share: the stream, and the counters the self-test
 * reads back (mock_count()).
 */
#ifndef COLLC_BENCH_MOCK_H
#define COLLC_BENCH_MOCK_H

#include <dlfcn.h>
#include <stddef.h>

struct mock_op {
	void (*run)(const struct mock_op *op);
	const void *src;
	void *dst;
	size_t bytes;
};

struct mock_stream {
	int capturing;
	int nops, cap;
	struct mock_op *ops; /* while capturing: the collectives recorded */
};

enum mock_counter {
	MOCK_DIRECT,     /* collectives run at once */
	MOCK_CAPTURED,   /* collectives recorded into a graph */
	MOCK_GRAPH_RUNS, /* cudaGraphLaunch calls */
	MOCK_WINDOWED,   /* collectives whose buffers both lie in registered windows */
	MOCK_WIN_REG,    /* ncclCommWindowRegister calls */
	MOCK_WIN_DEREG,
	MOCK_NUM_COUNTERS,
};

/* The counters live in the CUDA runtime stand-in, loaded first: its mock_count, or NULL. */
static inline long (*mock_counter(void))(int which, long add)
{
	void *rt = dlopen("libcudart.so", RTLD_NOW | RTLD_NOLOAD);

	return rt ? (long (*)(int, long))dlsym(rt, "mock_count") : NULL;
}

/* Counts one event of `which` (the libcollc and NCCL stand-ins). */
static inline void mock_bump(int which)
{
	static long (*f)(int, long);

	if (!f)
		f = mock_counter();
	if (f)
		f(which, 1);
}

#endif /* COLLC_BENCH_MOCK_H */
