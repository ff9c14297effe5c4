/* SPDX-License-Identifier: MIT */
/*
 * collc-bench's collc side in its stream modes without a GPU: the collc rank
 * body (run_collc.c) against the stand-ins of mock_collc.c (libcollc, one
 * rank) and mock_cudart.c (the CUDA runtime).
 *
 *   test_collc_modes full  every mode and collective checked and counted; a
 *                          graph that runs nothing is caught as wrong; an
 *                          asynchronous error and running out of graph gates
 *                          end the run with their message
 *   test_collc_modes old   a runtime without graphs: --graph fails with why
 *
 * Both need the CUDA stand-in first on LD_LIBRARY_PATH (ctest sets it).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <collc.h>

#include "bench/selftest/selftest.h"

/* collc's configuration: one rank, a short timeout, the collc side in `mode`. */
static void make_cfg(struct bench_cfg *cfg, int coll, int mode, int iters, int depth,
		     uint64_t max_bytes)
{
	selftest_cfg(cfg, coll, 1, iters, depth, max_bytes);
	cfg->timeout_ms = 1000;
	cfg->collc_mode = mode;
}

static int collc_body(const struct bench_cfg *cfg, struct shared_results *sr)
{
	struct collc_unique_id uid = { { 0 } };

	return collc_rank_main(cfg, &uid, 0, sr);
}

/* The only collc rank in a child, as collc-bench runs it; its exit status and counters. */
static int run_rank(struct bench_cfg *cfg, struct shared_results **ret_sr,
		    long counts[MOCK_NUM_COUNTERS])
{
	return selftest_run_rank(cfg, collc_body, ret_sr, counts);
}

static void test_full(void)
{
	for (int coll = 0; coll < BENCH_NUM_COLLS; coll++) {
		for (int mode = 0; mode < CMODE_NUM; mode++) {
			/* 10 iterations, depth 4: two replays of the pipelined graph, scaled. */
			int iters = coll % 2 ? 10 : 8, depth = 4, n;
			struct shared_results *sr;
			struct bench_cfg cfg;
			long c[MOCK_NUM_COUNTERS];
			char what[64];
			int status;

			if (mode == CMODE_GRAPH && coll == BENCH_SENDRECV)
				continue; /* refused by collc-bench's option checks */
			make_cfg(&cfg, coll, mode, iters, depth, 64 << 10);
			n = cfg.nsizes;
			snprintf(what, sizeof(what), "%s, collc mode %s", bench_coll_names[coll],
				 collc_mode_names[mode]);
			status = run_rank(&cfg, &sr, c);
			CHECK(status == 0, "%s: exit %d", what, status);
			selftest_expect_all(&cfg, sr, RES_OK, NULL, what);
			if (mode == CMODE_GRAPH) {
				/* Per size: one direct call before capture; graphs of 1 and of depth. */
				CHECK(c[MOCK_DIRECT] == n, "%s: %ld direct", what, c[MOCK_DIRECT]);
				selftest_expect_graphs(&cfg, c, what);
			} else if (mode == CMODE_STREAM) {
				/*
				 * Every collective stream-ordered (the pipelined phase's
				 * untimed window too); the barrier is a host form.
				 */
				CHECK(c[MOCK_DIRECT] ==
					      (long)n * (1 + cfg.warmup + 2 * iters + depth),
				      "%s: %ld direct", what, c[MOCK_DIRECT]);
				CHECK(c[MOCK_CAPTURED] == 0 && c[MOCK_GRAPH_RUNS] == 0,
				      "%s: graphs in stream mode", what);
			} else {
				CHECK(c[MOCK_DIRECT] == 0 && c[MOCK_CAPTURED] == 0 &&
					      c[MOCK_GRAPH_RUNS] == 0,
				      "%s: stream-ordered calls in host mode", what);
			}
			shared_results_free(sr);
		}
	}

	/* A graph that runs nothing: the poisoned receive buffers must fail the check. */
	setenv("MOCK_GRAPH_BROKEN", "1", 1);
	for (int mode = CMODE_STREAM; mode < CMODE_NUM; mode++) {
		struct shared_results *sr;
		struct bench_cfg cfg;
		long c[MOCK_NUM_COUNTERS];
		char what[64];

		make_cfg(&cfg, BENCH_ALLREDUCE, mode, 8, 4, 4 << 10);
		snprintf(what, sizeof(what), "broken graphs, collc mode %s",
			 collc_mode_names[mode]);
		run_rank(&cfg, &sr, c);
		/* The first wrong result is the first iteration's: the call before capture hid nothing. */
		selftest_expect_all(&cfg, sr, mode == CMODE_GRAPH ? RES_WRONG : RES_OK,
				    mode == CMODE_GRAPH ? "first iteration" : NULL, what);
		shared_results_free(sr);
	}
	unsetenv("MOCK_GRAPH_BROKEN");

	/* An asynchronous error ends the run with collc_comm_get_async_error's word. */
	setenv("MOCK_COLLC_ASYNC", "1", 1);
	for (int mode = CMODE_STREAM; mode < CMODE_NUM; mode++) {
		struct shared_results *sr;
		struct bench_cfg cfg;
		long c[MOCK_NUM_COUNTERS];
		char what[64];
		int status;

		make_cfg(&cfg, BENCH_ALLREDUCE, mode, 8, 4, 64);
		snprintf(what, sizeof(what), "async error, collc mode %s", collc_mode_names[mode]);
		status = run_rank(&cfg, &sr, c);
		CHECK(status == 1, "%s: exit %d", what, status);
		CHECK(sr->res[0].status == RES_ERROR &&
			      strstr(sr->res[0].msg, "collc_comm_get_async_error") &&
			      strstr(sr->res[0].msg, "Broken pipe"),
		      "%s: status %d, %s", what, sr->res[0].status, sr->res[0].msg);
		shared_results_free(sr);
	}
	unsetenv("MOCK_COLLC_ASYNC");

	/* More captured collectives than graph gates: the run ends saying so. */
	{
		struct shared_results *sr;
		struct bench_cfg cfg;
		long c[MOCK_NUM_COUNTERS];
		int status, s;

		make_cfg(&cfg, BENCH_ALLREDUCE, CMODE_GRAPH, 64, 64, 4 << 10); /* 10 sizes x 65 */
		status = run_rank(&cfg, &sr, c);
		for (s = 0; s < cfg.nsizes && sr->res[s].status == RES_OK; s++)
			;
		CHECK(status == 1 && s == 7 && s < cfg.nsizes && sr->res[s].status == RES_ERROR &&
			      strstr(sr->res[s].msg,
				     "collc_allreduce_stream: Device or resource busy"),
		      "out of graph gates: exit %d, size %d: %s", status, s,
		      s < cfg.nsizes ? sr->res[s].msg : "none failed");
		shared_results_free(sr);
	}
}

static void test_old(void)
{
	struct shared_results *sr;
	struct bench_cfg cfg;
	long c[MOCK_NUM_COUNTERS];
	int status;

	make_cfg(&cfg, BENCH_ALLREDUCE, CMODE_GRAPH, 8, 4, 64);
	status = run_rank(&cfg, &sr, c);
	CHECK(status == 1 && sr->res[0].status == RES_ERROR &&
		      strstr(sr->res[0].msg, "lacks cudaStreamBeginCapture: no CUDA graphs"),
	      "old runtime, --graph: exit %d, %s", status, sr->res[0].msg);
	shared_results_free(sr);
	make_cfg(&cfg, BENCH_ALLREDUCE, CMODE_STREAM, 8, 4, 64);
	status = run_rank(&cfg, &sr, c);
	CHECK(status == 0, "old runtime, --stream: exit %d", status);
	selftest_expect_all(&cfg, sr, RES_OK, NULL, "old runtime, --stream");
	shared_results_free(sr);
}

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "";

	selftest_need_mocks();
	if (strcmp(what, "full") == 0)
		test_full();
	else if (strcmp(what, "old") == 0)
		test_old();
	else {
		fprintf(stderr, "usage: %s full|old\n", argv[0]);
		return 2;
	}
	if (selftest_failures) {
		fprintf(stderr, "collc %s: %d checks failed\n", what, selftest_failures);
		return 1;
	}
	printf("collc %s: all checks passed\n", what);
	return 0;
}
