/* SPDX-License-Identifier: MIT */
/*
 * What the bench self-tests (test_collc_modes.c, test_nccl_modes.c) share:
 * the check macro and its failure count, a configuration of one collective
 * over powers of two, a rank body run in a child as collc-bench runs it with
 * the stand-ins' counters read back, and the check of every size's status.
 */
#ifndef COLLC_BENCH_SELFTEST_H
#define COLLC_BENCH_SELFTEST_H

#include <stdint.h>
#include <stdio.h>

#include "bench/runner.h"
#include "bench/selftest/mock.h"

extern int selftest_failures;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);            \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, "\n");                                                     \
			selftest_failures++;                                                       \
		}                                                                                  \
	} while (0)

/* coll in fp32 on nranks, the sizes from 8 B to max_bytes that it takes; a GPU run. */
void selftest_cfg(struct bench_cfg *cfg, int coll, int nranks, int iters, int depth,
		  uint64_t max_bytes);

/* Runs body(cfg, sr) in a child; its exit status, the results and the stand-ins' counters. */
int selftest_run_rank(struct bench_cfg *cfg,
		      int (*body)(const struct bench_cfg *cfg, struct shared_results *sr),
		      struct shared_results **ret_sr, long counts[MOCK_NUM_COUNTERS]);

/* Every size of rank 0 has status `want`; a message containing `msg` if given. */
void selftest_expect_all(const struct bench_cfg *cfg, const struct shared_results *sr, int want,
			 const char *msg, const char *what);

/*
 * A graph mode's counters: per size, a graph of one collective and one of
 * depth captured; the first launched 1 + warmup + iters times, the second
 * iters / depth times.
 */
void selftest_expect_graphs(const struct bench_cfg *cfg, const long counts[MOCK_NUM_COUNTERS],
			    const char *what);

/* Exits 2 unless the libcudart.so the loader finds is the stand-in. */
void selftest_need_mocks(void);

#endif /* COLLC_BENCH_SELFTEST_H */
