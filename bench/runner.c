/* SPDX-License-Identifier: MIT */
/*
 * The per-rank measurement loop, the same for collc and NCCL ranks. For each
 * size:
 *   1. data set "first" -> send buffer, poison slot 0, one collective, check;
 *   2. warmup collectives, then `iters` timed ones (end-to-end latency);
 *   3. data set "last" -> send buffer, one untimed window (`depth`
 *      collectives, one into each slot: every slot's pages are in the
 *      daemon's page tables and every path is warm before the clock starts,
 *      as step 2's warmup does for slot 0), poison every slot, a tiny
 *      barrier, `iters` collectives with `depth` outstanding (pipelined
 *      time), check every slot they wrote (slot 0 against the reference, the
 *      others bitwise against slot 0, or against the reference where they
 *      differ).
 * Every rank runs every step of every size even after a wrong result, so the
 * ranks stay in step; the parent refuses to print numbers for that size.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench/proc.h"
#include "bench/runner.h"
#include "refcheck.h"

struct shared_results *shared_results_new(const struct bench_cfg *cfg)
{
	size_t nres = (size_t)cfg->nsizes * (size_t)cfg->nranks;
	size_t hdr = (sizeof(struct shared_results) + 63) & ~(size_t)63;
	size_t res_bytes = (nres * sizeof(struct rank_result) + 63) & ~(size_t)63;
	size_t bytes = hdr + res_bytes + nres * (size_t)cfg->iters * sizeof(double);
	struct shared_results *sr;

	sr = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sr == MAP_FAILED)
		return NULL;
	sr->gate = BENCH_MAX_SIZES;
	sr->res = (struct rank_result *)((char *)sr + hdr);
	sr->lat = (double *)((char *)sr + hdr + res_bytes);
	sr->map_bytes = bytes;
	return sr;
}

void shared_results_free(struct shared_results *sr)
{
	if (sr)
		munmap(sr, sr->map_bytes);
}

void bench_setup_error(struct shared_results *sr, int rank, const char *who, const char *fmt, ...)
{
	struct rank_result *res = &sr->res[rank];
	int n = snprintf(res->msg, sizeof(res->msg), "%s %d: ", who, rank);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(res->msg + n, sizeof(res->msg) - (size_t)n, fmt, ap);
	va_end(ap);
	res->status = RES_ERROR;
}

/* The first mismatch the reference check reports (it prints nothing itself). */
static char first_wrong[sizeof(((struct rank_result *)0)->msg)];

static void keep_first_wrong(int fail, const char *line)
{
	if (fail && !first_wrong[0])
		snprintf(first_wrong, sizeof(first_wrong), "%s", line);
}

/* Size s's data set `last`: random data, sums checked against a long double reference. */
static struct rc_case bench_case(const struct bench_cfg *cfg, int s, int last)
{
	return (struct rc_case){ (collc_dtype)cfg->dtype, COLLC_SUM, cfg->sizes[s].count,
				 bench_seed(s, last), 0 };
}

/*
 * Checks receive slot `slot` against the reference. With `ref` (slot 0 of the
 * same phase, already checked), a bitwise-equal slot passes without
 * recomputing the reference: the check of 1 GiB x depth slots stays cheap.
 */
static int check_slot(const struct bench_cfg *cfg, int rank, struct runner *rn, int s, int slot,
		      int last, void *host, const void *ref, struct rank_result *res)
{
	const struct bench_size *sz = &cfg->sizes[s];
	size_t bytes = sz->recv_elems * collc_dtype_bytes(cfg->dtype);
	struct rc_case c = bench_case(cfg, s, last);
	char what[64];
	int r;

	if (cfg->coll == BENCH_REDUCE && rank != cfg->root)
		return 0;
	r = rn->ops->download(rn, slot, host, bytes);
	if (r < 0)
		return r;
	if (ref && memcmp(host, ref, bytes) == 0)
		return 0;
	snprintf(what, sizeof(what), "rank %d, %s iteration%s", rank, last ? "last" : "first",
		 last ? " (pipelined)" : "");
	first_wrong[0] = '\0';
	if (bench_check(&c, cfg->coll, cfg->nranks, rank, cfg->root, host, what) == 0)
		return 0;
	if (res->status != RES_WRONG) {
		res->status = RES_WRONG;
		snprintf(res->msg, sizeof(res->msg), "%s", first_wrong);
	}
	return 0;
}

static int fill_send(const struct bench_cfg *cfg, int rank, struct runner *rn, int s, int last,
		     void *host)
{
	const struct bench_size *sz = &cfg->sizes[s];
	struct rc_case c = bench_case(cfg, s, last);

	bench_fill(&c, cfg->coll, cfg->nranks, rank, host);
	return rn->ops->upload(rn, host, sz->send_elems * collc_dtype_bytes(cfg->dtype));
}

static int run_size(const struct bench_cfg *cfg, int rank, struct runner *rn,
		    struct shared_results *sr, int s, void *host, void *ref)
{
	const struct bench_size *sz = &cfg->sizes[s];
	struct rank_result *res = &sr->res[s * cfg->nranks + rank];
	double *lat = &sr->lat[((size_t)s * cfg->nranks + rank) * cfg->iters];
	size_t recv_bytes = sz->recv_elems * collc_dtype_bytes(cfg->dtype);
	int depth = cfg->depth < cfg->iters ? cfg->depth : cfg->iters;
	double pipe_s;
	int r;

	if (cfg->coll == BENCH_REDUCE && rank != cfg->root)
		recv_bytes = 0;
	res->status = RES_OK;

	/* 1. The first iteration, checked. */
	r = fill_send(cfg, rank, rn, s, 0, host);
	if (r == 0 && recv_bytes)
		r = rn->ops->poison(rn, 0, recv_bytes);
	if (r == 0)
		r = rn->ops->once(rn, sz, 0);
	if (r == 0)
		r = check_slot(cfg, rank, rn, s, 0, 0, host, NULL, res);
	if (r < 0)
		return r;

	/* 2. End-to-end latency: the call to the completion the rank sees. */
	for (int i = 0; i < cfg->warmup; i++) {
		r = rn->ops->once(rn, sz, 0);
		if (r < 0)
			return r;
	}
	for (int i = 0; i < cfg->iters; i++) {
		double t0 = bench_now();

		r = rn->ops->once(rn, sz, 0);
		lat[i] = bench_now() - t0;
		if (r < 0)
			return r;
	}

	/*
	 * 3. Pipelined, and the last iteration checked in every slot it wrote.
	 * One window first, untimed: the first write to a slot's pages in a
	 * daemon faults them into its mapping (a 16 MiB slot: 4096 faults),
	 * which a steady stream of collectives never pays.
	 */
	r = fill_send(cfg, rank, rn, s, 1, host);
	if (r == 0)
		r = rn->ops->batch(rn, sz, depth, depth, &pipe_s);
	for (int q = 0; r == 0 && recv_bytes && q < depth; q++)
		r = rn->ops->poison(rn, q, recv_bytes);
	if (r == 0)
		r = rn->ops->barrier(rn);
	if (r == 0)
		r = rn->ops->batch(rn, sz, cfg->iters, depth, &pipe_s);
	if (r == 0)
		r = check_slot(cfg, rank, rn, s, 0, 1, ref, NULL, res);
	for (int q = 1; r == 0 && q < depth; q++)
		r = check_slot(cfg, rank, rn, s, q, 1, host, ref, res);
	if (r < 0)
		return r;
	res->pipe_s = pipe_s;
	return 0;
}

/* The longest a rank waits for the parent to open a size (its measurement takes seconds). */
#define GATE_WAIT_S 600

/* Until the parent opens size s (shared_results.gate): 0, or -ETIMEDOUT. */
static int gate_wait(const struct shared_results *sr, int s)
{
	double deadline = bench_now() + GATE_WAIT_S;

	while (__atomic_load_n(&sr->gate, __ATOMIC_ACQUIRE) <= s) {
		if (bench_now() > deadline)
			return -ETIMEDOUT;
		bench_sleep_ms(1);
	}
	return 0;
}

int bench_rank_loop(const struct bench_cfg *cfg, int rank, struct runner *rn,
		    struct shared_results *sr)
{
	size_t es = collc_dtype_bytes(cfg->dtype);
	size_t host_bytes = (cfg->max_send_elems > cfg->max_recv_elems ? cfg->max_send_elems
								       : cfg->max_recv_elems) *
			    es;
	void *host = malloc(host_bytes ? host_bytes : 1);
	void *ref = malloc(cfg->max_recv_elems * es + 1);

	rc_set_report(keep_first_wrong);
	if (!host || !ref) {
		free(host);
		free(ref);
		snprintf(sr->res[rank].msg, sizeof(sr->res[rank].msg), "rank %d: out of memory",
			 rank);
		sr->res[rank].status = RES_ERROR;
		return 1;
	}
	for (int s = 0; s < cfg->nsizes; s++) {
		int r = gate_wait(sr, s);

		if (r == 0)
			r = run_size(cfg, rank, rn, sr, s, host, ref);
		else
			snprintf(rn->err, sizeof(rn->err), "size %d not opened within %d s", s,
				 GATE_WAIT_S);
		__atomic_store_n(&sr->done[rank], s + 1, __ATOMIC_RELEASE);

		if (r < 0) {
			struct rank_result *res = &sr->res[s * cfg->nranks + rank];

			res->status = RES_ERROR;
			snprintf(res->msg, sizeof(res->msg), "rank %d: %s", rank, rn->err);
			free(host);
			free(ref);
			return 1;
		}
	}
	free(host);
	free(ref);
	return 0;
}
