/* SPDX-License-Identifier: MIT */
/*
 * The measurement loop every rank runs (runner.c) and the systems under
 * test it drives: collc (run_collc.c) and NCCL (run_nccl.c).
 */
#ifndef COLLC_BENCH_RUNNER_H
#define COLLC_BENCH_RUNNER_H

#include <stddef.h>

#include "bench/bench.h"

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
	int (*batch)(struct runner *rn, const struct bench_size *sz, int n, int depth,
		     double *ret_s);
	/* A tiny collective on its own buffers: every rank leaves it at about the same time. */
	int (*barrier)(struct runner *rn);
	int (*upload)(struct runner *rn, const void *host, size_t bytes);
	int (*download)(struct runner *rn, int slot, void *host, size_t bytes);
	int (*poison)(struct runner *rn, int slot, size_t bytes);
};

/* Runs every size on this rank; returns 0, or 1 after an error that ended the run. */
int bench_rank_loop(const struct bench_cfg *cfg, int rank, struct runner *rn,
		    struct shared_results *sr);

/* Rank process bodies (return the exit status). */
int collc_rank_main(const struct bench_cfg *cfg, const void *uid, int rank,
		    struct shared_results *sr);
int nccl_rank_main(const struct bench_cfg *cfg, int rank, struct shared_results *sr);

/* Records an error before the first size, "<who> <rank>: ...": the parent reports it as the run's. */
void bench_setup_error(struct shared_results *sr, int rank, const char *who, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif /* COLLC_BENCH_RUNNER_H */
