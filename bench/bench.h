/* SPDX-License-Identifier: MIT */
/*
 * collc-bench's data: the run's configuration, the results the rank
 * processes leave in shared memory for the parent, and the statistics of a
 * size. Every module of the bench has a header of its own (runner.h,
 * daemon.h, vs_mpi.h, report.h, proc.h, cudart.h); this one names what they
 * pass each other.
 */
#ifndef COLLC_BENCH_H
#define COLLC_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "bench/sizes.h"

#define BENCH_MAX_SIZES   64
#define BENCH_MAX_RANKS   64
#define BENCH_MAX_EXTRA   32
#define BENCH_MAX_SOCKETS 16

enum bench_peer { PEER_NONE, PEER_NCCL, PEER_MPI };

/*
 * The ways --vs-nccl runs NCCL, each in ranks of its own, one after the other
 * (--nccl-modes picks; the table's NCCL columns show the best of them).
 */
enum nccl_mode {
	NCCL_MODE_PLAIN,     /* cudaMalloc'd buffers, launches on one stream */
	NCCL_MODE_WIN,       /* ncclMemAlloc'd buffers registered as symmetric windows */
	NCCL_MODE_GRAPH,     /* cudaMalloc'd buffers, launches replayed from CUDA graphs */
	NCCL_MODE_WIN_GRAPH, /* both */
	NCCL_NUM_MODES,
};
#define NCCL_MODES_DEFAULT                                                                         \
	((1u << NCCL_MODE_PLAIN) | (1u << NCCL_MODE_WIN) | (1u << NCCL_MODE_GRAPH))

static const char *const nccl_mode_names[NCCL_NUM_MODES] = { "plain", "win", "graph", "win+graph" };

static inline int nccl_mode_win(int mode)
{
	return mode == NCCL_MODE_WIN || mode == NCCL_MODE_WIN_GRAPH;
}

static inline int nccl_mode_graph(int mode)
{
	return mode == NCCL_MODE_GRAPH || mode == NCCL_MODE_WIN_GRAPH;
}

/*
 * How collc's ranks submit (--stream, --graph; one per run). host: the
 * request API, collc_<coll>() then collc_wait(); stream: the stream-ordered
 * forms on a non-blocking CUDA stream of the rank; graph: those forms
 * captured into CUDA graphs and replayed. NCCL's ranks measure the same way
 * in every mode of theirs: launch on a stream, cudaStreamSynchronize, events.
 */
enum collc_bench_mode { CMODE_HOST, CMODE_STREAM, CMODE_GRAPH, CMODE_NUM };

static const char *const collc_mode_names[CMODE_NUM] = { "host", "stream", "graph" };

struct bench_cfg {
	int coll;  /* enum bench_coll */
	int dtype; /* collc_dtype */
	int nranks;
	int root;  /* broadcast and reduce */
	int iters; /* timed iterations per phase */
	int warmup;
	int depth;                /* collectives kept outstanding in the pipelined phase */
	int timeout_ms;           /* one collective, collc only */
	int cuda;                 /* one process per GPU, device buffers */
	int ngpus;                /* --gpus: entries of gpu[]; 0: rank r on GPU r */
	int gpu[BENCH_MAX_RANKS]; /* --gpus: the GPU of each rank */
	int peer;                 /* enum bench_peer */
	unsigned nccl_modes;      /* --vs-nccl: 1 << enum nccl_mode for each mode to run */
	int nccl_mode;            /* in an NCCL rank: the mode it runs */
	int collc_mode;           /* enum collc_bench_mode */
	const char *socket;       /* collcd's socket (spawned or given); sockets[0] when several */
	/* --socket A,B,...: rank r joins through sockets[r % nsockets]; the id comes from sockets[0]. */
	const char *sockets[BENCH_MAX_SOCKETS];
	int nsockets;
	int nsizes;
	struct bench_size sizes[BENCH_MAX_SIZES];
	uint64_t max_send_elems, max_recv_elems;
};

/*
 * What one rank reports for one size. Written by the rank, read by the parent after it exits.
 * RES_SKIPPED: the system cannot run this way here (an NCCL mode its library lacks); no failure.
 */
enum { RES_NOT_RUN = 0, RES_OK = 1, RES_WRONG = 2, RES_ERROR = 3, RES_SKIPPED = 4 };

/* Which status a summary of several shows: error beats wrong beats not run beats skipped beats ok. */
static inline int bench_status_rank(int status)
{
	switch (status) {
	case RES_OK:
		return 0;
	case RES_SKIPPED:
		return 1;
	case RES_NOT_RUN:
		return 2;
	case RES_WRONG:
		return 3;
	default:
		return 4;
	}
}

struct rank_result {
	int32_t status;
	int32_t pad;
	double pipe_s; /* the whole pipelined phase: iters collectives */
	char msg[360]; /* what went wrong: the reference check names the element */
};

/*
 * One system's results (collc or NCCL), in a MAP_SHARED anonymous mapping
 * made before the fork: result (size s, rank r) at res[s * nranks + r]; the
 * latency of iteration i at lat[(s * nranks + r) * iters + i], in seconds.
 */
struct shared_results {
	volatile int32_t id_ready; /* NCCL: rank 0 published the unique id */
	/*
	 * The sizes the ranks may start: size s once gate > s. BENCH_MAX_SIZES
	 * from the start, unless the parent measures something around some
	 * sizes while every rank waits (collc_bench.c gate_sizes()); done[r]:
	 * the sizes rank r finished.
	 */
	volatile int32_t gate;
	int32_t pad;
	volatile int32_t done[BENCH_MAX_RANKS];
	unsigned char id[128];
	struct rank_result *res; /* pointers into the same mapping */
	double *lat;
	size_t map_bytes;
};

/* Per-size statistics for the table, from either system. */
struct size_stats {
	int status; /* RES_* (RES_OK: numbers valid) */
	char msg[360];
	double p50_us, p99_us, pipe_us;
};

/* The control socket of rank's collcd. */
static inline const char *bench_rank_socket(const struct bench_cfg *cfg, int rank)
{
	return cfg->nsockets > 1 ? cfg->sockets[rank % cfg->nsockets] : cfg->socket;
}

#endif /* COLLC_BENCH_H */
