/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/selftest/selftest.h"

int selftest_failures;

void selftest_cfg(struct bench_cfg *cfg, int coll, int nranks, int iters, int depth,
		  uint64_t max_bytes)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->coll = coll;
	cfg->dtype = COLLC_FLOAT32;
	cfg->nranks = nranks;
	cfg->iters = iters;
	cfg->warmup = 2;
	cfg->depth = depth;
	cfg->cuda = 1;
	for (uint64_t b = 8; b <= max_bytes; b *= 2) {
		struct bench_size *sz = &cfg->sizes[cfg->nsizes];

		if (bench_size_of(coll, cfg->dtype, nranks, b, sz) < 0)
			continue;
		cfg->nsizes++;
		if (sz->send_elems > cfg->max_send_elems)
			cfg->max_send_elems = sz->send_elems;
		if (sz->recv_elems > cfg->max_recv_elems)
			cfg->max_recv_elems = sz->recv_elems;
	}
}

int selftest_run_rank(struct bench_cfg *cfg,
		      int (*body)(const struct bench_cfg *cfg, struct shared_results *sr),
		      struct shared_results **ret_sr, long counts[MOCK_NUM_COUNTERS])
{
	long *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct shared_results *sr = shared_results_new(cfg);
	pid_t pid;
	int st;

	if (!sr || shared == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	pid = fork();
	if (pid == 0) {
		int status = body(cfg, sr);
		long (*count)(int, long) = mock_counter();

		for (int i = 0; i < MOCK_NUM_COUNTERS; i++)
			shared[i] = count ? count(i, 0) : -1;
		fflush(NULL);
		_exit(status);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid) {
		perror("fork");
		exit(2);
	}
	memcpy(counts, shared, sizeof(long) * MOCK_NUM_COUNTERS);
	munmap(shared, 4096);
	*ret_sr = sr;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void selftest_expect_all(const struct bench_cfg *cfg, const struct shared_results *sr, int want,
			 const char *msg, const char *what)
{
	for (int s = 0; s < cfg->nsizes; s++) {
		const struct rank_result *res = &sr->res[s * cfg->nranks];

		CHECK(res->status == want, "%s, %llu bytes: status %d, want %d (%s)", what,
		      (unsigned long long)cfg->sizes[s].bytes, res->status, want, res->msg);
		if (msg)
			CHECK(strstr(res->msg, msg), "%s: message \"%s\" lacks \"%s\"", what,
			      res->msg, msg);
		if (want == RES_OK)
			CHECK(res->pipe_s > 0, "%s: no pipelined time", what);
	}
}

void selftest_expect_graphs(const struct bench_cfg *cfg, const long counts[MOCK_NUM_COUNTERS],
			    const char *what)
{
	long n = cfg->nsizes, q = cfg->iters / cfg->depth;

	CHECK(counts[MOCK_CAPTURED] == n * (1 + cfg->depth), "%s: %ld captured", what,
	      counts[MOCK_CAPTURED]);
	/* The pipelined phase's untimed window: one launch of the graph of depth. */
	CHECK(counts[MOCK_GRAPH_RUNS] == n * (1 + cfg->warmup + cfg->iters + 1 + q),
	      "%s: %ld graph launches", what, counts[MOCK_GRAPH_RUNS]);
}

/* The stand-ins, not a real runtime, must be what collc-bench's loader finds. */
void selftest_need_mocks(void)
{
	void *rt = dlopen("libcudart.so", RTLD_NOW | RTLD_LOCAL);

	if (!rt || !dlsym(rt, "mock_count")) {
		fprintf(stderr,
			"the libcudart.so found is not the self-test's stand-in: put its folder "
			"(build/bench/mock-full or mock-old) first on LD_LIBRARY_PATH\n");
		exit(2);
	}
	dlclose(rt);
}
