/* SPDX-License-Identifier: MIT */
/*
 * What the stream-ordered rank bodies (run_collc.c --stream/--graph,
 * run_nccl.c) share: the rank's stream and timing events, the CUDA graphs of
 * one size captured from it (one collective for latency, `depth` of them for
 * pipelined time), and the timed run of back-to-back collectives. Each body
 * brings its own enqueue: one collective on the stream, or recorded while it
 * captures.
 */
#ifndef COLLC_BENCH_GRAPHS_H
#define COLLC_BENCH_GRAPHS_H

#include "bench/cudart.h"
#include "bench/runner.h"

/* Enqueues one collective of sz into receive slot `slot`; 0, or <0 with rn->err set. */
typedef int bench_enqueue_fn(struct runner *rn, const struct bench_size *sz, int slot);

struct bench_stream {
	const struct cudart *rt;
	cuda_stream_t stream;         /* non-blocking, the rank's */
	cuda_event_t ev0, ev1;        /* the pipelined phase's timing */
	int capture_mode;             /* CUDA_CAPTURE_* */
	const struct bench_size *gsz; /* the size the graphs below are of, or NULL */
	cuda_graph_exec_t g_one;      /* one collective into slot 0 */
	cuda_graph_exec_t g_pipe;     /* depth collectives, the j-th into slot j */
};

/* Makes the graphs of sz, if they are not of sz already (each body's own warm-up, then capture). */
typedef int bench_graphs_for_fn(struct runner *rn, const struct bench_size *sz);

/* "what: the runtime's message" in rn->err; returns -EIO. */
int bench_cuda_fail(struct runner *rn, const struct cudart *rt, cuda_err_t e, const char *what);

/* Creates the non-blocking stream and its two timing events; 0 or the runtime's error. */
cuda_err_t bench_stream_create(struct bench_stream *bs);

/* Captures the graphs of size sz (of 1 and of depth collectives); none on failure. */
int bench_graphs_capture(struct runner *rn, struct bench_stream *bs, bench_enqueue_fn *enqueue,
			 const struct bench_size *sz, int depth);
void bench_graphs_drop(struct bench_stream *bs);

/* Graph mode's single collective: the graph of one into slot 0, the only slot it takes. */
int bench_graphs_once(struct runner *rn, struct bench_stream *bs, bench_graphs_for_fn *graphs_for,
		      const struct bench_size *sz, int slot);
/* Graph mode's batch: n collectives, depth outstanding, must fill graphs of `slots`. */
int bench_graphs_fit(struct runner *rn, bench_graphs_for_fn *graphs_for,
		     const struct bench_size *sz, int n, int depth, int slots);

/*
 * Times n collectives of sz back to back on the stream: direct (the j-th into
 * slot j % depth), or with `graph` n / depth replays of g_pipe. *ret_ms: all of it.
 */
int bench_stream_time(struct runner *rn, struct bench_stream *bs, bench_enqueue_fn *enqueue,
		      int graph, const struct bench_size *sz, int n, int depth, float *ret_ms);

#endif /* COLLC_BENCH_GRAPHS_H */
