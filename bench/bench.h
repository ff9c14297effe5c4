/* SPDX-License-Identifier: MIT */
/*
 * collc-bench internals: the run's configuration, the results the rank
 * processes leave in shared memory for the parent, and the per-rank
 * measurement loop that collc and NCCL ranks share.
 */
#ifndef COLLC_BENCH_H
#define COLLC_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "bench/check.h"

#define BENCH_MAX_SIZES 64
#define BENCH_MAX_RANKS 64
#define BENCH_MAX_EXTRA 32

enum bench_peer { PEER_NONE, PEER_NCCL, PEER_MPI };

struct bench_cfg {
	int coll;                 /* enum bench_coll */
	int dtype;                /* enum bench_dtype */
	int nranks;
	int root;                 /* broadcast and reduce */
	int iters;                /* timed iterations per phase */
	int warmup;
	int depth;                /* collectives kept outstanding in the pipelined phase */
	int timeout_ms;           /* one collective, collc only */
	int cuda;                 /* one process per GPU, device buffers */
	int peer;                 /* enum bench_peer */
	const char *socket;       /* collcd's socket (spawned or given) */
	int nsizes;
	struct bench_size sizes[BENCH_MAX_SIZES];
	uint64_t max_send_elems, max_recv_elems;
};

/* What one rank reports for one size. Written by the rank, read by the parent after it exits. */
enum { RES_NOT_RUN = 0, RES_OK = 1, RES_WRONG = 2, RES_ERROR = 3 };

struct rank_result {
	int32_t status;
	int32_t pad;
	double pipe_s;            /* the whole pipelined phase: iters collectives */
	char msg[200];
};

/*
 * One system's results (collc or NCCL), in a MAP_SHARED anonymous mapping
 * made before the fork: result (size s, rank r) at res[s * nranks + r]; the
 * latency of iteration i at lat[(s * nranks + r) * iters + i], in seconds.
 */
struct shared_results {
	volatile int32_t id_ready;  /* NCCL: rank 0 published the unique id */
	int32_t pad;
	unsigned char id[128];
	struct rank_result *res;    /* pointers into the same mapping */
	double *lat;
	size_t map_bytes;
};

struct shared_results *shared_results_new(const struct bench_cfg *cfg);
void shared_results_free(struct shared_results *sr);

/*
 * A system under test, as seen by the measurement loop. Every call returns 0
 * or a negative code and then leaves a message in `err`.
 */
struct runner {
	const struct runner_ops *ops;
	void *st;
	char err[160];
};

struct runner_ops {
	/* Runs one collective of size sz into receive slot `slot` and waits for it. */
	int (*once)(struct runner *rn, const struct bench_size *sz, int slot);
	/* Runs n collectives (the j-th into slot j % depth), `depth` outstanding; *ret_s: all of it. */
	int (*batch)(struct runner *rn, const struct bench_size *sz, int n, int depth, double *ret_s);
	/* A tiny collective on its own buffers: every rank leaves it at about the same time. */
	int (*barrier)(struct runner *rn);
	int (*upload)(struct runner *rn, const void *host, size_t bytes);
	int (*download)(struct runner *rn, int slot, void *host, size_t bytes);
	int (*poison)(struct runner *rn, int slot, size_t bytes);
};

/* Runs every size on this rank; returns 0, or 1 after an error that ended the run. */
int bench_rank_loop(const struct bench_cfg *cfg, int rank, struct runner *rn,
		    struct shared_results *sr);

double bench_now(void);

/* Rank process bodies (return the exit status). */
int collc_rank_main(const struct bench_cfg *cfg, const void *uid, int rank,
		    struct shared_results *sr);
int nccl_rank_main(const struct bench_cfg *cfg, int rank, struct shared_results *sr);

/* In a child process: how many GPUs this process sees; <0 with a message when none. */
int cuda_probe(char *msg, size_t len);

/* collcd, spawned on a temporary socket. */
struct bench_daemon {
	pid_t pid;
	char dir[64];
	char sock[128];
	char log[128];
};

int daemon_spawn(const char *collcd, const char *backend, char *const *extra, int nextra,
		 struct bench_daemon *d);
int daemon_stop(struct bench_daemon *d); /* 0 when it exited cleanly */

/* Per-size statistics for the table, from either system. */
struct size_stats {
	int status;               /* RES_* (RES_OK: numbers valid) */
	char msg[240];
	double p50_us, p99_us, pipe_us;
};

/* --vs-mpi: runs mpi_peer through mpirun and parses its lines into st[nsizes]. */
struct mpi_opts {
	const char *mpirun;
	const char *peer;
	char *const *extra;
	int nextra;
};

int mpi_peer_run(const struct bench_cfg *cfg, const struct mpi_opts *mo, struct size_stats *st);

/* The table, the CSV and the plot. */
struct report_row {
	const struct bench_size *sz;
	struct size_stats c;      /* collc */
	struct size_stats p;      /* the peer, when there is one */
};

struct report {
	const struct bench_cfg *cfg;
	const char *peer_name;    /* "NCCL", "MPI" or NULL */
	const char *backend;
	struct report_row rows[BENCH_MAX_SIZES];
};

void report_table(FILE *f, const struct report *rp);
int report_csv(const char *path, const struct report *rp);
/* Plots a CSV written by report_csv (gnuplot, else python3-matplotlib). */
int report_plot(const char *csv, const char *png, const char *title);

/* Remembers a child for the signal handler, which stops them all on SIGINT/SIGTERM. */
void bench_child_add(pid_t pid);
void bench_child_del(pid_t pid);

#endif /* COLLC_BENCH_H */
