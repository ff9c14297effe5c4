/* SPDX-License-Identifier: MIT */
/*
 * All-reduce correctness: every dtype x every op on random data at counts
 * 0, 1, 7, 1023, 65537 and two random ones, then one 16 MiB float32 SUM;
 * `nranks` ranks (the first argument). Buffers come from collc_mem_alloc;
 * send and receive sit at random element offsets inside them, surrounded by
 * canary bytes that must survive, and the send buffer must stay unchanged.
 *
 *   test_allreduce NRANKS [--set KEY=VALUE]... [--seed N]
 *
 * --set goes to collcd, e.g. to force an algorithm, a protocol or many channels.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "json.h"
#include "refcheck.h"

#define GUARD     256
#define MAX_OFF   (15 * 8)
#define BIG_COUNT (16u << 20) / 4                               /* 16 MiB of float32 */
#define MAX_CASES (COLLC_NUM_DTYPES * COLLC_NUM_REDOPS * 7 + 1) /* make_cases */

struct tcase {
	struct rc_case rc;
	size_t send_off, recv_off; /* bytes, multiples of the element size */
};

static struct tcase cases[MAX_CASES];
static int ncases;
static struct collc_unique_id uid;

static void add_case(collc_dtype dt, collc_redop op, size_t count, uint64_t *rng)
{
	struct tcase *t = &cases[ncases++];

	t->rc = (struct rc_case){ dt, op, count, h_rand(rng) };
	t->send_off = rc_size(dt) * h_rand_below(rng, 16);
	t->recv_off = rc_size(dt) * h_rand_below(rng, 16);
}

static void make_cases(void)
{
	uint64_t rng = h_seed;

	for (int dt = 0; dt < COLLC_NUM_DTYPES; dt++)
		for (int op = 0; op < COLLC_NUM_REDOPS; op++) {
			static const size_t fixed[] = { 0, 1, 7, 1023, 65537 };
			size_t es = rc_size((collc_dtype)dt);

			for (size_t k = 0; k < sizeof(fixed) / sizeof(fixed[0]); k++)
				add_case((collc_dtype)dt, (collc_redop)op, fixed[k], &rng);
			add_case((collc_dtype)dt, (collc_redop)op, 2 + h_rand_below(&rng, 4095),
				 &rng);
			add_case((collc_dtype)dt, (collc_redop)op,
				 4097 + h_rand_below(&rng, (131072 / es) - 4096), &rng);
		}
	add_case(COLLC_FLOAT32, COLLC_SUM, BIG_COUNT, &rng);
}

static int run_case(struct collc_ctx *ctx, struct collc_comm *comm, int rank, int nranks,
		    const struct tcase *t, char *send, char *recv, double *worst)
{
	size_t bytes = t->rc.count * rc_size(t->rc.dtype);
	char what[160];
	collc_req req;
	long bad;
	int r;

	snprintf(what, sizeof(what), "rank %d/%d %s %s count %zu (send+%zu recv+%zu)", rank, nranks,
		 rc_dtype_name(t->rc.dtype), rc_op_name(t->rc.op), t->rc.count, t->send_off,
		 t->recv_off);
	rc_canary_fill(send, t->send_off + bytes + GUARD, 1);
	rc_fill(&t->rc, rank, send + t->send_off);
	/* The whole receive side starts as canary: every result byte must be written. */
	rc_canary_fill(recv, t->recv_off + bytes + GUARD, 3);
	r = collc_allreduce(comm, send + t->send_off, recv + t->recv_off, t->rc.count, t->rc.dtype,
			    t->rc.op, &req);
	if (r < 0)
		return h_fail("%s: collc_allreduce: %s", what, collc_strerror(r));
	r = collc_wait(ctx, req, -1);
	if (r < 0)
		return h_fail("%s: collc_wait: %s", what, collc_strerror(r));
	if (rc_check(&t->rc, nranks, recv + t->recv_off, what, worst))
		return 1;
	if ((bad = rc_canary_check(recv, 0, t->recv_off, 3)) >= 0)
		return h_fail("%s: receive buffer written %ld bytes before the result", what,
			      (long)t->recv_off - bad);
	bad = rc_canary_check(recv, t->recv_off + bytes, t->recv_off + bytes + GUARD, 3);
	if (bad >= 0)
		return h_fail("%s: receive buffer written %ld bytes past the result", what,
			      bad - (long)(t->recv_off + bytes) + 1);
	if (rc_check_input(&t->rc, rank, send + t->send_off, what))
		return 1;
	if (rc_canary_check(send, 0, t->send_off, 1) >= 0 ||
	    rc_canary_check(send, t->send_off + bytes, t->send_off + bytes + GUARD, 1) >= 0)
		return h_fail("%s: send buffer written outside the input", what);
	return 0;
}

static int rank_main(int rank, int nranks, void *arg)
{
	size_t cap = (size_t)BIG_COUNT * 4 + MAX_OFF + GUARD;
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	double worst_dt[COLLC_NUM_DTYPES] = { 0 };
	char *send, *recv;
	int r;

	(void)arg;
	if (h_join_alloc(&uid, nranks, rank, cap, &ctx, &comm, (void **)&send, (void **)&recv) < 0)
		return 1;
	for (int i = 0; i < ncases; i++) {
		const struct tcase *t = &cases[i];

		if (i + 1 == ncases && rank == 0)
			h_log("%d ranks: float64 x {sum,prod,max,min,avg} x counts {0,1,7,1023,65537,2 random} "
			      "correct on every rank; largest float error %.2f of its bound",
			      nranks, worst_dt[COLLC_FLOAT64]);
		double w = 0;

		if (run_case(ctx, comm, rank, nranks, t, send, recv, &w))
			return 1;
		if (w > worst_dt[t->rc.dtype])
			worst_dt[t->rc.dtype] = w;
		if (rank == 0 && i + 2 < ncases && cases[i + 1].rc.dtype != t->rc.dtype)
			h_log("%d ranks: %s x {sum,prod,max,min,avg} x counts {0,1,7,1023,65537,2 random} "
			      "correct on every rank; largest float error %.2f of its bound",
			      nranks, rc_dtype_name(t->rc.dtype), worst_dt[t->rc.dtype]);
	}
	if (rank == 0)
		h_log("%d ranks: 16 MiB float32 sum correct", nranks);
	collc_mem_free(ctx, send);
	collc_mem_free(ctx, recv);
	r = collc_comm_destroy(comm);
	if (r < 0)
		return h_fail("rank %d: collc_comm_destroy: %s", rank, collc_strerror(r));
	collc_disconnect(ctx);
	return 0;
}

/* With algo=X or proto=Y forced, collcd's totals must show X or Y was used. */
static int check_forced(const char *kv)
{
	static char out[1 << 20];
	const char *eq = strchr(kv, '='), *section;
	const struct json *totals, *by, *n;
	struct json *root;
	char key[32];
	int r = 0;

	if (strncmp(kv, "algo=", 5) == 0)
		section = "by_algo";
	else if (strncmp(kv, "proto=", 6) == 0)
		section = "by_proto";
	else
		return 0;
	snprintf(key, sizeof(key), "%s", eq + 1);
	if (strcmp(key, "auto") == 0)
		return 0;
	root = h_status_json(out, sizeof(out));
	if (!root)
		return 1;
	totals = json_get(root, "totals");
	by = json_get(totals, section);
	n = json_get(by, key);
	if (!n || n->type != JSON_NUMBER)
		h_log("NOTE: status --json has no totals.%s.%s: cannot confirm %s took effect",
		      section, key, kv);
	else if (n->number <= 0)
		r = h_fail("%s was set, but totals.%s.%s is %.0f: every all-reduce ran another way",
			   kv, section, key, n->number);
	else
		h_log("%s took effect: totals.%s.%s = %.0f collectives", kv, section, key,
		      n->number);
	json_free(root);
	return r;
}

int main(int argc, char **argv)
{
	int nranks = argc > 1 ? atoi(argv[1]) : 2;
	const char *dargs[32];
	int failed;

	/* Further arguments "--set KEY=VALUE" go to collcd: a forced algorithm, protocol, channels. */
	h_init(h_daemon_sets("allreduce", nranks, argc, argv, dargs), argc, argv, 240);
	if (nranks < 2 || nranks > 64)
		return h_fail("usage: test_allreduce NRANKS (2..64) [--set KEY=VALUE]...");
	make_cases();
	h_daemon_start(dargs);
	h_unique_id(&uid);
	h_log("%d cases (send/receive at random element offsets, canaries around both)", ncases);
	failed = h_run_ranks(nranks, rank_main, NULL);
	for (int i = 1; !failed && dargs[i - 1]; i += 2)
		failed |= check_forced(dargs[i]);
	return h_finish(failed);
}
