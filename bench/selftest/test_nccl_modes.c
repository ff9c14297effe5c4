/* SPDX-License-Identifier: MIT */
/*
 * collc-bench's NCCL side without a GPU: the NCCL rank body (run_nccl.c)
 * against the stand-ins of mock_cudart.c and mock_nccl.c (one rank), and
 * the best-of selection of the report (report.c) on made-up numbers.
 *
 *   test_nccl_modes full    every mode and collective checked and counted;
 *                           a graph that runs nothing is caught as wrong
 *   test_nccl_modes old     libraries without windows and graphs: those modes skip
 *   test_nccl_modes report  report_pick_best, report_failed, the table and the CSV
 *
 * "full" and "old" need the stand-ins first on LD_LIBRARY_PATH (ctest sets it).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/report.h"
#include "bench/selftest/selftest.h"

/* NCCL's configuration: nranks ranks against the NCCL peer. */
static void make_cfg(struct bench_cfg *cfg, int coll, int nranks, int iters, int depth,
		     uint64_t max_bytes)
{
	selftest_cfg(cfg, coll, nranks, iters, depth, max_bytes);
	cfg->peer = PEER_NCCL;
}

static int nccl_body(const struct bench_cfg *cfg, struct shared_results *sr)
{
	return nccl_rank_main(cfg, 0, sr);
}

/* One NCCL rank of `mode` in a child, as collc-bench runs it; its exit status and counters. */
static int run_mode(struct bench_cfg *cfg, int mode, struct shared_results **ret_sr,
		    long counts[MOCK_NUM_COUNTERS])
{
	cfg->nccl_mode = mode;
	return selftest_run_rank(cfg, nccl_body, ret_sr, counts);
}

static void test_full(void)
{
	for (int coll = 0; coll < BENCH_NUM_COLLS; coll++) {
		for (int mode = 0; mode < NCCL_NUM_MODES; mode++) {
			/* 10 iterations, depth 4: two replays of the pipelined graph, scaled. */
			int iters = coll % 2 ? 10 : 8, depth = 4, n;
			struct shared_results *sr;
			struct bench_cfg cfg;
			long c[MOCK_NUM_COUNTERS];
			char what[64];
			int status;

			make_cfg(&cfg, coll, 1, iters, depth, 64 << 10);
			n = cfg.nsizes;
			snprintf(what, sizeof(what), "%s, mode %s", bench_coll_names[coll],
				 nccl_mode_names[mode]);
			status = run_mode(&cfg, mode, &sr, c);
			CHECK(status == 0, "%s: exit %d", what, status);
			selftest_expect_all(&cfg, sr, RES_OK, NULL, what);
			if (nccl_mode_graph(mode)) {
				/* Per size: one direct warm-up and one barrier; graphs of 1 and of depth. */
				CHECK(c[MOCK_DIRECT] == 2L * n, "%s: %ld direct", what,
				      c[MOCK_DIRECT]);
				selftest_expect_graphs(&cfg, c, what);
			} else {
				/* The pipelined phase's untimed window: depth more. */
				CHECK(c[MOCK_DIRECT] ==
					      (long)n * (1 + cfg.warmup + 2 * iters + depth + 1),
				      "%s: %ld direct", what, c[MOCK_DIRECT]);
				CHECK(c[MOCK_CAPTURED] == 0 && c[MOCK_GRAPH_RUNS] == 0,
				      "%s: graphs in a mode without", what);
			}
			if (nccl_mode_win(mode)) {
				long colls =
					c[MOCK_DIRECT] + c[MOCK_CAPTURED] - n; /* less barriers */

				CHECK(c[MOCK_WIN_REG] == 1 + depth &&
					      c[MOCK_WIN_DEREG] == 1 + depth,
				      "%s: %ld windows registered, %ld deregistered", what,
				      c[MOCK_WIN_REG], c[MOCK_WIN_DEREG]);
				CHECK(c[MOCK_WINDOWED] == colls, "%s: %ld of %ld in windows", what,
				      c[MOCK_WINDOWED], colls);
			} else {
				CHECK(c[MOCK_WIN_REG] == 0 && c[MOCK_WINDOWED] == 0,
				      "%s: windows in a mode without", what);
			}
			shared_results_free(sr);
		}
	}

	/* A graph that runs nothing: the poisoned receive buffers must fail the check. */
	setenv("MOCK_GRAPH_BROKEN", "1", 1);
	for (int mode = 0; mode < NCCL_NUM_MODES; mode++) {
		struct shared_results *sr;
		struct bench_cfg cfg;
		long c[MOCK_NUM_COUNTERS];
		char what[64];

		make_cfg(&cfg, BENCH_ALLREDUCE, 1, 8, 4, 4 << 10);
		snprintf(what, sizeof(what), "broken graphs, mode %s", nccl_mode_names[mode]);
		run_mode(&cfg, mode, &sr, c);
		/* The first wrong result is the first iteration's: the warm-up before capture hid nothing. */
		selftest_expect_all(&cfg, sr, nccl_mode_graph(mode) ? RES_WRONG : RES_OK,
				    nccl_mode_graph(mode) ? "first iteration" : NULL, what);
		shared_results_free(sr);
	}
	unsetenv("MOCK_GRAPH_BROKEN");
}

static void test_old(void)
{
	static const char *const why[NCCL_NUM_MODES] = { NULL, "lacks ncclMemAlloc",
							 "lacks cudaStreamBeginCapture",
							 "lacks ncclMemAlloc" };

	for (int mode = 0; mode < NCCL_NUM_MODES; mode++) {
		struct shared_results *sr;
		struct bench_cfg cfg;
		long c[MOCK_NUM_COUNTERS];
		char what[64];
		int status;

		make_cfg(&cfg, BENCH_ALLREDUCE, 1, 8, 4, 4 << 10);
		snprintf(what, sizeof(what), "old libraries, mode %s", nccl_mode_names[mode]);
		status = run_mode(&cfg, mode, &sr, c);
		CHECK(status == 0, "%s: exit %d", what, status);
		selftest_expect_all(&cfg, sr, mode == NCCL_MODE_PLAIN ? RES_OK : RES_SKIPPED,
				    why[mode], what);
		if (mode == NCCL_MODE_WIN)
			selftest_expect_all(&cfg, sr, RES_SKIPPED, "NCCL 2.26.5", what);
		shared_results_free(sr);
	}
}

static struct size_stats ok(double p50, double p99, double pipe)
{
	return (struct size_stats){
		.status = RES_OK, .p50_us = p50, .p99_us = p99, .pipe_us = pipe
	};
}

static struct size_stats bad(int status, const char *msg)
{
	struct size_stats st = { .status = status };

	snprintf(st.msg, sizeof(st.msg), "%s", msg);
	return st;
}

/* The CSV's fields of line `line` (0: the header), split in place. */
static int csv_fields(char *text, int line, char **field, int max)
{
	char *p = text, *end;
	int n = 0;

	for (int i = 0; i < line && p; i++) {
		p = strchr(p, '\n');
		p = p ? p + 1 : NULL;
	}
	if (!p || !*p)
		return -1;
	end = strchr(p, '\n');
	if (end)
		*end = 0;
	while (n < max) {
		field[n++] = p;
		p = strchr(p, ',');
		if (!p)
			break;
		*p++ = 0;
	}
	return n;
}

static int field_index(char **names, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (strcmp(names[i], name) == 0)
			return i;
	return -1;
}

static void test_report(void)
{
	static struct bench_cfg cfg;
	static struct report rp;
	char *table = NULL, *csvtext = NULL, path[] = "/tmp/collc-bench-selftest-XXXXXX";
	size_t tlen = 0;
	FILE *f;
	int fd;

	make_cfg(&cfg, BENCH_ALLREDUCE, 2, 100, 8, 32);
	CHECK(cfg.nsizes == 3, "%d sizes", cfg.nsizes);
	rp.cfg = &cfg;
	rp.peer_name = "NCCL";
	rp.backend = "cuda";
	rp.modes = NCCL_MODES_DEFAULT;
	for (int s = 0; s < cfg.nsizes; s++) {
		rp.rows[s].sz = &cfg.sizes[s];
		rp.rows[s].c = ok(10, 20, 5);
	}
	/* 8 B: p50 from win (with win's p99), pipe from graph. */
	rp.rows[0].pm[NCCL_MODE_PLAIN] = ok(10, 11, 5);
	rp.rows[0].pm[NCCL_MODE_WIN] = ok(8, 30, 6);
	rp.rows[0].pm[NCCL_MODE_GRAPH] = ok(9, 12, 4);
	/* 16 B: only plain has numbers; win skipped, graph wrong. */
	rp.rows[1].pm[NCCL_MODE_PLAIN] = ok(10, 11, 5);
	rp.rows[1].pm[NCCL_MODE_WIN] = bad(RES_SKIPPED, "NCCL 2.26.5 lacks ncclMemAlloc");
	rp.rows[1].pm[NCCL_MODE_GRAPH] = bad(RES_WRONG, "rank 0: element 3 wrong");
	/* 32 B: ties go to the mode listed first. */
	rp.rows[2].pm[NCCL_MODE_PLAIN] = ok(7, 9, 3);
	rp.rows[2].pm[NCCL_MODE_WIN] = ok(7, 8, 3);
	rp.rows[2].pm[NCCL_MODE_GRAPH] = ok(7.5, 8, 3);
	/* A mode not run is ignored, whatever its stats hold. */
	rp.rows[0].pm[NCCL_MODE_WIN_GRAPH] = ok(1, 1, 1);
	report_pick_best(&rp);

	CHECK(rp.rows[0].p50_mode == NCCL_MODE_WIN && rp.rows[0].pipe_mode == NCCL_MODE_GRAPH,
	      "8 B: p50 from %d, pipe from %d", rp.rows[0].p50_mode, rp.rows[0].pipe_mode);
	CHECK(rp.rows[0].p.status == RES_OK && rp.rows[0].p.p50_us == 8 &&
		      rp.rows[0].p.p99_us == 30 && rp.rows[0].p.pipe_us == 4,
	      "8 B: best %g/%g/%g", rp.rows[0].p.p50_us, rp.rows[0].p.p99_us, rp.rows[0].p.pipe_us);
	CHECK(rp.rows[1].p50_mode == NCCL_MODE_PLAIN && rp.rows[1].pipe_mode == NCCL_MODE_PLAIN &&
		      rp.rows[1].p.status == RES_OK,
	      "16 B: from %d/%d", rp.rows[1].p50_mode, rp.rows[1].pipe_mode);
	CHECK(rp.rows[2].p50_mode == NCCL_MODE_PLAIN && rp.rows[2].pipe_mode == NCCL_MODE_PLAIN &&
		      rp.rows[2].p.p99_us == 9,
	      "32 B: ties from %d/%d", rp.rows[2].p50_mode, rp.rows[2].pipe_mode);
	CHECK(report_failed(&rp) == 1, "a wrong mode is a failed run");
	rp.rows[1].pm[NCCL_MODE_GRAPH] = bad(RES_SKIPPED, "skipped");
	report_pick_best(&rp);
	CHECK(report_failed(&rp) == 0, "skipped modes are no failure");

	/* The table and the CSV of this report. */
	f = open_memstream(&table, &tlen);
	report_table(f, &rp);
	fclose(f);
	CHECK(strstr(table, "NOTE x pipe: collc's 8 outstanding collectives may overlap"),
	      "the overlap note:\n%s", table);
	CHECK(strstr(table, "p50(us) by") && strstr(table, "busbw1"), "by and busbw1 columns");
	CHECK(strstr(table, "NCCL by mode"), "the table by mode");
	if (getenv("SELFTEST_SHOW"))
		fputs(table, stdout);
	CHECK(strstr(table, "NCCL win at 16 bytes: skipped: NCCL 2.26.5 lacks ncclMemAlloc"),
	      "the skipped mode:\n%s", table);
	CHECK(strstr(table, "collc mode host: collc_allreduce() then collc_wait()"),
	      "the collc mode:\n%s", table);
	fd = mkstemp(path);
	CHECK(fd >= 0, "mkstemp");
	if (fd >= 0) {
		char *hdr[64], *row[64];
		size_t len = 0;
		int nh, nr, i;

		close(fd);
		CHECK(report_csv(path, &rp) == 0, "report_csv");
		f = fopen(path, "re");
		if (f) {
			char *a = NULL, *b = NULL;

			CHECK(getdelim(&csvtext, &len, 0, f) > 0, "reading the CSV");
			fclose(f);
			a = strdup(csvtext);
			b = strdup(csvtext);
			nh = csv_fields(a, 0, hdr, 64);
			nr = csv_fields(b, 1, row, 64);
			CHECK(nh == 45 && nr == nh, "%d header fields, %d in a row", nh, nr);
			CHECK(nh >= 24 && strcmp(hdr[23], "ratio_pipe") == 0,
			      "the first 24 columns stay");
			i = field_index(hdr, nh, "peer_p50_mode");
			CHECK(i > 0 && i < nr && strcmp(row[i], "win") == 0, "peer_p50_mode");
			i = field_index(hdr, nh, "peer_pipe_mode");
			CHECK(i > 0 && i < nr && strcmp(row[i], "graph") == 0, "peer_pipe_mode");
			i = field_index(hdr, nh, "ratio_p50");
			CHECK(i > 0 && i < nr && atof(row[i]) == 0.8, "ratio_p50 %s",
			      i > 0 ? row[i] : "");
			i = field_index(hdr, nh, "peer_busbw1_GBps");
			/* 8 bytes in 8 us, allreduce of 2: factor 1. */
			CHECK(i > 0 && i < nr && atof(row[i]) == 1e-3, "peer_busbw1 %s",
			      i > 0 ? row[i] : "");
			i = field_index(hdr, nh, "nccl_win_graph_status");
			CHECK(i > 0 && i < nr && row[i][0] == 0, "a mode not run is empty");
			i = field_index(hdr, nh, "collc_mode");
			CHECK(i == nh - 1 && i < nr && strcmp(row[i], "host") == 0, "collc_mode %s",
			      i > 0 && i < nr ? row[i] : "");
			free(a);
			free(b);
		}
		unlink(path);
	}
	free(table);
	free(csvtext);

	/* No mode with numbers: the worst status shows; error beats wrong beats skipped. */
	rp.rows[1].pm[NCCL_MODE_PLAIN] = bad(RES_SKIPPED, "skipped");
	rp.rows[1].pm[NCCL_MODE_WIN] = bad(RES_ERROR, "ncclCommWindowRegister failed");
	rp.rows[1].pm[NCCL_MODE_GRAPH] = bad(RES_WRONG, "wrong");
	report_pick_best(&rp);
	CHECK(rp.rows[1].p.status == RES_ERROR && strstr(rp.rows[1].p.msg, "Register") &&
		      rp.rows[1].p50_mode < 0,
	      "worst status %d", rp.rows[1].p.status);
	for (int m = 0; m < NCCL_NUM_MODES; m++)
		rp.rows[1].pm[m] = bad(RES_SKIPPED, "skipped");
	report_pick_best(&rp);
	CHECK(rp.rows[1].p.status == RES_SKIPPED && report_failed(&rp) == 1,
	      "every mode skipped: no NCCL numbers is a failed run");

	/* The stream modes name themselves in the table and the CSV; no overlap note. */
	for (int mode = CMODE_STREAM; mode < CMODE_NUM; mode++) {
		static const char *const want[CMODE_NUM] = {
			NULL, "collc mode stream: collc_allreduce_stream() on a non-blocking CUDA",
			"collc mode graph: collc_allreduce_stream() captured into CUDA graphs"
		};
		char *line = NULL, *hdr[64], *row[64];
		size_t llen = 0;
		int nh, nr;

		cfg.collc_mode = mode;
		table = NULL;
		f = open_memstream(&table, &tlen);
		report_table(f, &rp);
		fclose(f);
		CHECK(strstr(table, want[mode]) && !strstr(table, "NOTE x pipe"), "mode %s:\n%s",
		      collc_mode_names[mode], table);
		free(table);
		strcpy(path, "/tmp/collc-bench-selftest-XXXXXX");
		fd = mkstemp(path);
		CHECK(fd >= 0, "mkstemp");
		if (fd < 0)
			continue;
		close(fd);
		CHECK(report_csv(path, &rp) == 0, "report_csv");
		f = fopen(path, "re");
		if (f) {
			CHECK(getdelim(&line, &llen, 0, f) > 0, "reading the CSV");
			fclose(f);
		}
		unlink(path);
		if (!line)
			continue;
		csvtext = strdup(line);
		nh = csv_fields(line, 0, hdr, 64);
		nr = csv_fields(csvtext, 2, row, 64);
		CHECK(nh == 45 && nr == nh && strcmp(hdr[nh - 1], "collc_mode") == 0 &&
			      strcmp(row[nr - 1], collc_mode_names[mode]) == 0,
		      "CSV mode column: %d/%d fields, %s", nh, nr, nr > 0 ? row[nr - 1] : "");
		free(line);
		free(csvtext);
	}
	cfg.collc_mode = CMODE_HOST;

	/* A peer without modes (MPI): p as given, no mode columns. */
	memset(&rp, 0, sizeof(rp));
	rp.cfg = &cfg;
	rp.peer_name = "MPI";
	rp.backend = "cpu";
	cfg.peer = PEER_MPI;
	for (int s = 0; s < cfg.nsizes; s++) {
		rp.rows[s].sz = &cfg.sizes[s];
		rp.rows[s].c = ok(10, 20, 5);
		rp.rows[s].p = ok(2, 3, 1);
	}
	report_pick_best(&rp);
	CHECK(rp.rows[0].p.status == RES_OK && rp.rows[0].p.p50_us == 2 && rp.rows[0].p50_mode < 0,
	      "MPI's numbers kept");
	CHECK(report_failed(&rp) == 0, "MPI run failed");
	table = NULL;
	f = open_memstream(&table, &tlen);
	report_table(f, &rp);
	fclose(f);
	CHECK(!strstr(table, "p50(us) by") && !strstr(table, "NOTE x pipe"), "MPI table:\n%s",
	      table);
	free(table);
}

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "";

	if (strcmp(what, "full") == 0 || strcmp(what, "old") == 0)
		selftest_need_mocks();
	if (strcmp(what, "full") == 0)
		test_full();
	else if (strcmp(what, "old") == 0)
		test_old();
	else if (strcmp(what, "report") == 0)
		test_report();
	else {
		fprintf(stderr, "usage: %s full|old|report\n", argv[0]);
		return 2;
	}
	if (selftest_failures) {
		fprintf(stderr, "%s: %d checks failed\n", what, selftest_failures);
		return 1;
	}
	printf("%s: all checks passed\n", what);
	return 0;
}
