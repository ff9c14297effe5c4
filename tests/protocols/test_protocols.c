/* SPDX-License-Identifier: MIT */
/*
 * Every collective x dtype x op on one forced protocol and algorithm of the
 * CPU executor, against references computed from the inputs alone.
 *
 *   test_protocols [--proto P] [--algo A] [--ranks 2,3,5,8] [--set KEY=VALUE]...
 *                  [--big] [--quick] [--hot] [--mixed] [--seed N]
 *
 * A real collcd runs with `--set proto=P --set algo=A` (and the extra --set
 * pairs); for each rank count, one process per rank joins a fresh
 * communicator and runs the same case list: every (collective, dtype, op) at
 * counts from 0 up (odd ones, and ones spanning several steps and chunks of
 * each protocol), half of them in place, at odd element offsets, with canaries
 * around every buffer. Each rank checks its own result (integers exactly,
 * floats within a bound derived from the format, see refcheck.c), that its
 * send buffer is unchanged out of place, and that nothing outside its buffers
 * was written. All-reduce results must be bitwise identical on every rank.
 * Afterwards `collcctl status --json` must show that the forced algorithm and
 * protocol ran (totals.by_algo, totals.by_proto), following the fallbacks of
 * daemon/plan.h: two-shot runs all-reduce only (the others ring); two-shot
 * carries Simple only, one-shot Simple and, for all-reduce, LL (pushed lines).
 *
 * --big adds cases of several MB (several Simple chunks) up to 5 ranks; --quick runs every
 * 7th case only (for wide rank counts); --hot keeps one collcd and switches
 * protocol and algorithm with `collcctl set` between rounds; --mixed runs two
 * communicators over shared devices with every collective outstanding at once
 * (under algo and proto auto: one-shot, two-shot and ring, Simple, LL and
 * LL128 interleaved in the same work FIFOs).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "json.h"
#include "refcheck.h"
#include "proto/shm.h"
#include "proto/work.h"

#define MAX_CASES 512
#define MAX_RANKS 64
#define GUARD     64
#define ELEM_SKEW 8 /* cases start at element offsets 0..7 */

struct tcase {
	int coll; /* COLLC_OP_* */
	collc_dtype dtype;
	collc_redop op;
	size_t count; /* elements, as the public call names them */
	int inplace;
	int root;
	size_t skew; /* elements */
	uint64_t seed;
};

/* The collectives swept: COLLC_OP_ALLREDUCE .. COLLC_OP_REDUCE (copies: tests/integration). */
#define NCOLL_OPS (COLLC_OP_REDUCE + 1)

static const char *const coll_names[NCOLL_OPS] = { "nop",       "allreduce",
						   "allgather", "reduce_scatter",
						   "broadcast", "reduce" };
/* The algo key takes the names before "hier" (the scheduler's across daemons alone). */
static const char *const algo_names[COLLC_ALGO_MAX] = { "auto", "ring", "oneshot", "twoshot",
							"hier" };
static const char *const proto_names[COLLC_PROTO_MAX] = { "auto", "simple", "ll", "ll128" };

static struct {
	int proto, algo; /* forced values, COLLC_*_AUTO when not */
	int big, quick, hot, mixed;
	int ranks[16], nranks_list;
	const char *sets[16];
	int nsets;
} opt;

static struct collc_unique_id uid, uid2;
static uint64_t *hashes; /* shared: [case * MAX_RANKS + rank] */

/* Cases */

static const size_t counts[] = { 0, 1, 3, 17, 255, 1001, 4099, 33333 };
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))

static int has_op(int coll)
{
	return coll != COLLC_OP_ALLGATHER && coll != COLLC_OP_BROADCAST;
}

static int make_cases(int nranks, struct tcase *tc)
{
	static const struct {
		int coll;
		collc_dtype dtype;
		collc_redop op;
		size_t count;
		int inplace;
	} big[] = {
		{ COLLC_OP_ALLREDUCE, COLLC_FLOAT32, COLLC_SUM, 1200001, 0 },
		{ COLLC_OP_ALLREDUCE, COLLC_BFLOAT16, COLLC_AVG, 700001, 1 },
		{ COLLC_OP_ALLREDUCE, COLLC_INT64, COLLC_PROD, 200000, 0 },
		{ COLLC_OP_REDUCE_SCATTER, COLLC_FLOAT32, COLLC_MAX, 150001, 0 },
		{ COLLC_OP_REDUCE_SCATTER, COLLC_INT32, COLLC_SUM, 100003, 1 },
		{ COLLC_OP_ALLGATHER, COLLC_FLOAT64, COLLC_SUM, 60000, 1 },
		{ COLLC_OP_ALLGATHER, COLLC_UINT8, COLLC_SUM, 250001, 0 },
		{ COLLC_OP_BROADCAST, COLLC_FLOAT16, COLLC_SUM, 1500001, 1 },
		{ COLLC_OP_BROADCAST, COLLC_INT32, COLLC_SUM, 300000, 0 },
		{ COLLC_OP_REDUCE, COLLC_FLOAT32, COLLC_SUM, 400000, 1 },
		{ COLLC_OP_REDUCE, COLLC_UINT64, COLLC_MIN, 100000, 0 },
	};
	int n = 0, k = 0;

	for (int coll = COLLC_OP_ALLREDUCE; coll < NCOLL_OPS; coll++)
		for (int dt = 0; dt < COLLC_NUM_DTYPES; dt++)
			for (int op = 0; op < (has_op(coll) ? COLLC_NUM_REDOPS : 1); op++, k++) {
				struct tcase *c = &tc[n];

				if (opt.quick && k % 7 != (int)(h_seed % 7))
					continue;
				c->coll = coll;
				c->dtype = (collc_dtype)dt;
				c->op = (collc_redop)op;
				/* Products of n inputs in [0.5, 2) leave float16's range beyond 2^15. */
				if (c->dtype == COLLC_FLOAT16 && c->op == COLLC_PROD && nranks > 15)
					c->op = COLLC_SUM;
				c->count = counts[((size_t)k * 3 + (size_t)nranks) % NCOUNTS];
				c->inplace = ((k / (int)NCOUNTS) + k) & 1;
				c->root = (k * 5 + 1) % nranks;
				c->skew = (size_t)(k * 7) % ELEM_SKEW;
				c->seed = h_mix(h_seed ^ ((uint64_t)nranks << 40) ^ (uint64_t)k);
				n++;
			}
	/* Several MB a rank: enough chunks at a few ranks, and the time to check them stays short. */
	for (size_t i = 0; opt.big && nranks <= 5 && i < sizeof(big) / sizeof(big[0]); i++, k++) {
		struct tcase *c = &tc[n++];

		c->coll = big[i].coll;
		c->dtype = big[i].dtype;
		c->op = big[i].op;
		c->count = big[i].count;
		c->inplace = big[i].inplace;
		c->root = (int)(i % (size_t)nranks);
		c->skew = i % ELEM_SKEW;
		c->seed = h_mix(h_seed ^ ((uint64_t)nranks << 40) ^ (uint64_t)k);
	}
	return n;
}

static void describe(const struct tcase *c, int rank, int nranks, char *out, size_t len)
{
	snprintf(out, len, "%s %s%s%s count %zu%s%s skew %zu, rank %d/%d", coll_names[c->coll],
		 rc_dtype_name(c->dtype), has_op(c->coll) ? " " : "",
		 has_op(c->coll) ? rc_op_name(c->op) : "", c->count, c->inplace ? " in place" : "",
		 c->coll == COLLC_OP_BROADCAST || c->coll == COLLC_OP_REDUCE ? " rooted" : "",
		 c->skew, rank, nranks);
}

/*
 * fp8 cases alternate (by seed) between random data, checked within its bound, and exact
 * data, checked bit for bit (refcheck.c), since the bound grows loose at many ranks.
 */
static struct rc_case plain_case(const struct tcase *c, int nranks)
{
	int fp8 = c->dtype == COLLC_FLOAT8_E4M3 || c->dtype == COLLC_FLOAT8_E5M2;

	return (struct rc_case){ c->dtype, has_op(c->coll) ? c->op : COLLC_SUM, c->count, c->seed,
				 fp8 && (c->seed & 1) ? nranks : 0 };
}

/* refcheck's number of the collective (COLLC_OP_* - 1). */
static enum rc_coll rc_coll_of(const struct tcase *c)
{
	return (enum rc_coll)(c->coll - COLLC_OP_ALLREDUCE);
}

/* Bytes of the send and receive buffers of one rank. */
static void sizes_of(const struct tcase *c, int nranks, size_t *send, size_t *recv)
{
	size_t b = c->count * rc_size(c->dtype);

	*send = *recv = b;
	if (c->coll == COLLC_OP_ALLGATHER)
		*recv = b * (size_t)nranks;
	if (c->coll == COLLC_OP_REDUCE_SCATTER)
		*send = b * (size_t)nranks;
}

/* Where a case's buffers lie in a rank's region, and how far the canaries reach. */
struct layout {
	size_t send_off, send_len, recv_off, recv_len, end;
};

static struct layout layout_of(const struct tcase *c, int rank, int nranks)
{
	size_t es = rc_size(c->dtype), s, r, b = c->count * es, base = GUARD + c->skew * es;
	struct layout l;

	sizes_of(c, nranks, &s, &r);
	l.send_len = s;
	l.recv_len = r;
	if (!c->inplace) {
		l.send_off = base;
		l.recv_off = base + s + GUARD;
		l.end = l.recv_off + r + GUARD;
		return l;
	}
	l.send_off = l.recv_off = base;
	if (c->coll == COLLC_OP_ALLGATHER)
		l.send_off = base + (size_t)rank * b; /* sendbuf == recvbuf + rank * sendcount */
	if (c->coll == COLLC_OP_REDUCE_SCATTER)
		l.recv_off = base + (size_t)rank * b; /* recvbuf == sendbuf + rank * recvcount */
	l.end = base + (s > r ? s : r) + GUARD;
	return l;
}

static uint64_t hash_bytes(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

/* One collective on one rank: fill, submit, wait, check. */

static int fill(const struct tcase *c, int rank, int nranks, char *buf, const struct layout *l)
{
	struct rc_case pc = plain_case(c, nranks);

	rc_canary_fill(buf, l->end, c->seed);
	if (c->coll != COLLC_OP_BROADCAST || rank == c->root)
		rc_fill_coll(&pc, rc_coll_of(c), nranks, rank, buf + l->send_off);
	return 0;
}

static int submit(struct collc_comm *comm, const struct tcase *c, char *send, char *recv,
		  collc_req *req)
{
	switch (c->coll) {
	case COLLC_OP_ALLREDUCE:
		return collc_allreduce(comm, send, recv, c->count, c->dtype, c->op, req);
	case COLLC_OP_ALLGATHER:
		return collc_allgather(comm, send, recv, c->count, c->dtype, req);
	case COLLC_OP_REDUCE_SCATTER:
		return collc_reduce_scatter(comm, send, recv, c->count, c->dtype, c->op, req);
	case COLLC_OP_BROADCAST:
		return collc_broadcast(comm, send, recv, c->count, c->dtype, c->root, req);
	case COLLC_OP_REDUCE:
		return collc_reduce(comm, send, recv, c->count, c->dtype, c->op, c->root, req);
	}
	return -EINVAL;
}

static int check_canaries(const struct tcase *c, const char *buf, const struct layout *l,
			  const char *what)
{
	size_t lo = l->send_off < l->recv_off ? l->send_off : l->recv_off;
	long bad;

	if (!c->inplace) {
		if ((bad = rc_canary_check(buf, 0, l->send_off, c->seed)) >= 0 ||
		    (bad = rc_canary_check(buf, l->send_off + l->send_len, l->recv_off, c->seed)) >=
			    0 ||
		    (bad = rc_canary_check(buf, l->recv_off + l->recv_len, l->end, c->seed)) >= 0)
			return h_fail("%s: byte %ld outside the buffers changed", what, bad);
		return 0;
	}
	if ((bad = rc_canary_check(buf, 0, lo, c->seed)) >= 0 ||
	    (bad = rc_canary_check(buf, l->end - GUARD, l->end, c->seed)) >= 0)
		return h_fail("%s: byte %ld outside the buffer changed", what, bad);
	return 0;
}

static int check(const struct tcase *c, int rank, int nranks, const char *buf,
		 const struct layout *l, const char *what)
{
	const char *send = buf + l->send_off, *recv = buf + l->recv_off;
	struct rc_case pc = plain_case(c, nranks);
	int bad = rc_check_coll(&pc, rc_coll_of(c), nranks, rank, c->root, recv, what), send_kept;

	/* Where send and recv are apart, the input must still be there (a non-root's broadcast has none). */
	send_kept = !c->inplace;
	if (c->coll == COLLC_OP_BROADCAST)
		send_kept = !c->inplace && rank == c->root;
	if (c->coll == COLLC_OP_REDUCE)
		send_kept = !c->inplace || rank != c->root;
	if (c->coll == COLLC_OP_REDUCE && rank != c->root && !c->inplace) {
		long at = rc_canary_check(buf, l->recv_off, l->recv_off + l->recv_len, c->seed);

		if (at >= 0)
			bad = h_fail("%s: a non-root's receive buffer changed at byte %ld", what,
				     at);
	}
	if (send_kept && !bad)
		bad = rc_check_send(&pc, rc_coll_of(c), nranks, rank, send, what);
	return bad | check_canaries(c, buf, l, what);
}

static int run_case(struct collc_ctx *ctx, struct collc_comm *comm, const struct tcase *c, int ci,
		    int rank, int nranks, char *buf)
{
	struct layout l = layout_of(c, rank, nranks);
	char what[160];
	collc_req req;
	int r;

	describe(c, rank, nranks, what, sizeof(what));
	fill(c, rank, nranks, buf, &l);
	r = submit(comm, c, buf + l.send_off, buf + l.recv_off, &req);
	if (r == 0)
		r = collc_wait(ctx, req, 60000);
	if (r < 0)
		return h_fail("%s: %s", what, collc_strerror(r));
	if (check(c, rank, nranks, buf, &l, what))
		return 1;
	if (c->coll == COLLC_OP_ALLREDUCE)
		hashes[(size_t)ci * MAX_RANKS + (size_t)rank] =
			hash_bytes(buf + l.recv_off, l.recv_len);
	return 0;
}

static size_t region_bytes(const struct tcase *tc, int n, int nranks)
{
	size_t need = 0;

	for (int i = 0; i < n; i++) {
		struct layout l = layout_of(&tc[i], nranks - 1, nranks);

		if (l.end > need)
			need = l.end;
	}
	return need;
}

static int rank_main(int rank, int nranks, void *arg)
{
	static struct tcase tc[MAX_CASES];
	int n = make_cases(nranks, tc), failed = 0;
	size_t cap = region_bytes(tc, n, nranks);
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	char *buf;
	int r;

	(void)arg;
	if (h_join(&uid, nranks, rank, &ctx, &comm) < 0)
		return 1;
	r = collc_mem_alloc(ctx, cap, -1, (void **)&buf);
	if (r < 0)
		return h_fail("rank %d: collc_mem_alloc(%zu): %s", rank, cap, collc_strerror(r));
	for (int i = 0; i < n && !failed; i++)
		failed = run_case(ctx, comm, &tc[i], i, rank, nranks, buf);
	collc_mem_free(ctx, buf);
	h_leave(ctx, comm);
	return failed;
}

/*
 * What the plan runs for a case under the forced values (daemon/plan.h); -1:
 * size decides. With algo auto, a forced protocol the size's algorithm cannot
 * carry runs ring; LL is carried by ring and by one-shot all-reduce, allgather
 * and reduce-scatter, so a forced LL one of those runs one or the other, by
 * size, and LL either way.
 */
static void expected_plan(const struct tcase *c, int nranks, int *algo, int *proto)
{
	int a = opt.algo, p = opt.proto, ar = c->coll == COLLC_OP_ALLREDUCE;
	int oll = ar || c->coll == COLLC_OP_ALLGATHER || c->coll == COLLC_OP_REDUCE_SCATTER;

	if (nranks == 1 || a == COLLC_ALGO_RING || (a == COLLC_ALGO_TWOSHOT && !ar))
		a = COLLC_ALGO_RING;
	else if (a == COLLC_ALGO_AUTO)
		a = p == COLLC_PROTO_LL128 || (p == COLLC_PROTO_LL && !oll) ? COLLC_ALGO_RING : -1;
	*algo = a;
	if (a == COLLC_ALGO_TWOSHOT)
		*proto = COLLC_PROTO_SIMPLE;
	else if (a == COLLC_ALGO_ONESHOT && p != COLLC_PROTO_AUTO)
		*proto = p == COLLC_PROTO_LL && oll ? COLLC_PROTO_LL : COLLC_PROTO_SIMPLE;
	else if (a == COLLC_ALGO_ONESHOT)
		*proto = oll && nranks <= 8 ? -1 : COLLC_PROTO_SIMPLE; /* PLAN_OLL_MAX_RANKS */
	else
		*proto = p != COLLC_PROTO_AUTO ? p
					       : -1; /* ring or, by size, any: what was forced */
}

struct totals {
	uint64_t algo[COLLC_ALGO_MAX], proto[COLLC_PROTO_MAX], completed, errors;
};

static int num(const struct json *obj, const char *key, uint64_t *out)
{
	const struct json *v = obj ? json_get(obj, key) : NULL;

	if (!v || v->type != JSON_NUMBER)
		return h_fail("status --json: no number \"%s\"", key);
	*out = (uint64_t)v->number;
	return 0;
}

static int read_totals(struct totals *t)
{
	static char out[1 << 20];
	const char *ctl = getenv("COLLCCTL") ? getenv("COLLCCTL") : COLLCCTL_PATH;
	const struct json *tot, *ba, *bp;
	char cmd[512], err[128];
	struct json *root;
	int r = 0;

	snprintf(cmd, sizeof(cmd), "%s --socket %s status --json", ctl, h_sock);
	if (h_run_capture(cmd, out, sizeof(out)) != 0)
		return h_fail("%s failed", cmd);
	root = json_parse(out, strlen(out), err, sizeof(err));
	if (!root)
		return h_fail("status --json: %s", err);
	memset(t, 0, sizeof(*t));
	tot = json_get(root, "totals");
	ba = tot ? json_get(tot, "by_algo") : NULL;
	bp = tot ? json_get(tot, "by_proto") : NULL;
	for (int a = COLLC_ALGO_RING; a < COLLC_ALGO_MAX && r == 0; a++)
		r = num(ba, algo_names[a], &t->algo[a]);
	for (int p = COLLC_PROTO_SIMPLE; p < COLLC_PROTO_MAX && r == 0; p++)
		r = num(bp, proto_names[p], &t->proto[p]);
	if (r == 0)
		r = num(tot, "completed", &t->completed);
	if (r == 0)
		r = num(tot, "errors", &t->errors);
	json_free(root);
	return r;
}

/* Runs the case list with nranks processes; adds what the plan should have run to want. */
static int run_ranks(int nranks, struct totals *want, int *known_algo, int *known_proto)
{
	static struct tcase tc[MAX_CASES];
	int n = make_cases(nranks, tc), failed;
	uint64_t t0 = h_now_ns();

	memset(hashes, 0, (size_t)MAX_CASES * MAX_RANKS * sizeof(*hashes));
	h_unique_id(&uid);
	failed = h_run_ranks(nranks, rank_main, NULL);
	if (failed)
		return h_fail("%d ranks: %d rank processes failed", nranks, failed);
	for (int i = 0; i < n; i++) {
		int a, p;

		if (tc[i].coll == COLLC_OP_ALLREDUCE)
			for (int r = 1; r < nranks; r++)
				if (hashes[(size_t)i * MAX_RANKS + (size_t)r] !=
				    hashes[(size_t)i * MAX_RANKS]) {
					char what[160];

					describe(&tc[i], r, nranks, what, sizeof(what));
					return h_fail("%s: result differs bitwise from rank 0's",
						      what);
				}
		expected_plan(&tc[i], nranks, &a, &p);
		if (a < 0)
			*known_algo = 0;
		else
			want->algo[a]++;
		if (p < 0)
			*known_proto = 0;
		else
			want->proto[p]++;
		want->completed += (uint64_t)nranks;
	}
	h_log("%d ranks: %d collectives correct on every rank (%.1f s)", nranks, n,
	      (double)(h_now_ns() - t0) / 1e9);
	return 0;
}

static int check_totals(const struct totals *before, const struct totals *want, int known_algo,
			int known_proto)
{
	struct totals now;
	uint64_t sum_a = 0, sum_p = 0, ncoll = 0;

	if (read_totals(&now))
		return 1;
	for (int a = COLLC_ALGO_RING; a < COLLC_ALGO_MAX; a++) {
		uint64_t got = now.algo[a] - before->algo[a];

		sum_a += got;
		ncoll += want->algo[a];
		if (known_algo && got != want->algo[a])
			return h_fail("status: by_algo.%s grew by %" PRIu64 ", want %" PRIu64,
				      algo_names[a], got, want->algo[a]);
	}
	for (int p = COLLC_PROTO_SIMPLE; p < COLLC_PROTO_MAX; p++) {
		uint64_t got = now.proto[p] - before->proto[p];

		sum_p += got;
		if (known_proto && got != want->proto[p])
			return h_fail("status: by_proto.%s grew by %" PRIu64 ", want %" PRIu64,
				      proto_names[p], got, want->proto[p]);
	}
	if (sum_a != sum_p || (known_algo && sum_a != ncoll))
		return h_fail("status: %" PRIu64 " collectives by algorithm, %" PRIu64
			      " by protocol",
			      sum_a, sum_p);
	if (now.completed - before->completed != want->completed || now.errors != before->errors)
		return h_fail("status: %" PRIu64 " completions and %" PRIu64
			      " errors, want %" PRIu64 " and none",
			      now.completed - before->completed, now.errors - before->errors,
			      want->completed);
	h_log("status: by_algo ring %" PRIu64 " oneshot %" PRIu64 " twoshot %" PRIu64
	      ", by_proto simple %" PRIu64 " ll %" PRIu64 " ll128 %" PRIu64 "%s",
	      now.algo[1] - before->algo[1], now.algo[2] - before->algo[2],
	      now.algo[3] - before->algo[3], now.proto[1] - before->proto[1],
	      now.proto[2] - before->proto[2], now.proto[3] - before->proto[3],
	      known_algo && known_proto ? " (as forced)"
	      : known_algo              ? " (algorithm as forced)"
					: "");
	return 0;
}

static int run_matrix(void)
{
	struct totals before, want = { 0 };
	int known_algo = 1, known_proto = 1;

	if (read_totals(&before))
		return 1;
	for (int i = 0; i < opt.nranks_list; i++)
		if (run_ranks(opt.ranks[i], &want, &known_algo, &known_proto))
			return 1;
	return check_totals(&before, &want, known_algo, known_proto);
}

/* --hot: one collcd, protocol and algorithm switched with collcctl set between rounds. */
static int run_hot(void)
{
	static const struct {
		int proto, algo;
	} combos[] = {
		{ COLLC_PROTO_LL, COLLC_ALGO_RING },     { COLLC_PROTO_SIMPLE, COLLC_ALGO_ONESHOT },
		{ COLLC_PROTO_LL128, COLLC_ALGO_RING },  { COLLC_PROTO_AUTO, COLLC_ALGO_TWOSHOT },
		{ COLLC_PROTO_SIMPLE, COLLC_ALGO_RING }, { COLLC_PROTO_LL, COLLC_ALGO_TWOSHOT },
		{ COLLC_PROTO_LL128, COLLC_ALGO_AUTO },  { COLLC_PROTO_AUTO, COLLC_ALGO_AUTO },
	};
	const char *ctl = getenv("COLLCCTL") ? getenv("COLLCCTL") : COLLCCTL_PATH;

	for (size_t i = 0; i < sizeof(combos) / sizeof(combos[0]); i++) {
		char cmd[512], out[256];

		opt.proto = combos[i].proto;
		opt.algo = combos[i].algo;
		snprintf(cmd, sizeof(cmd), "%s --socket %s set proto=%s algo=%s channels=%zu", ctl,
			 h_sock, proto_names[opt.proto], algo_names[opt.algo], 1 + i % 3);
		if (h_run_capture(cmd, out, sizeof(out)) != 0)
			return h_fail("%s: %s", cmd, out);
		h_log("collcctl set proto=%s algo=%s channels=%zu", proto_names[opt.proto],
		      algo_names[opt.algo], 1 + i % 3);
		if (run_matrix())
			return 1;
	}
	return 0;
}

/*
 * --mixed: NPROC processes, communicator A (rank = process) and B (ranks
 * reversed), so every device's FIFO carries both. Each process submits every
 * case of both communicators before waiting for any (distinct buffers), then
 * checks them all.
 */
#define MIXED_PROCS 4
#define MIXED_OPS   40

static int mixed_main(int proc, int nprocs, void *arg)
{
	static struct tcase tc[2][MIXED_OPS];
	struct collc_ctx *ctx[2];
	struct collc_comm *comm[2];
	char *bufs[2][MIXED_OPS];
	collc_req reqs[2][MIXED_OPS];
	int ranks[2] = { proc, nprocs - 1 - proc };
	int failed = 0, r;

	(void)arg;
	if (h_join(&uid, nprocs, ranks[0], &ctx[0], &comm[0]) < 0 ||
	    h_join(&uid2, nprocs, ranks[1], &ctx[1], &comm[1]) < 0)
		return 1;
	for (int m = 0; m < 2; m++) {
		uint64_t rng = h_seed ^ (uint64_t)m;

		for (int i = 0; i < MIXED_OPS; i++) {
			struct tcase *c = &tc[m][i];
			/* Sizes around the automatic thresholds: one-shot, two-shot, LL, LL128, Simple. */
			static const size_t bytes[] = { 0,     8,      1000,    40000,
							70000, 300000, 1100000, 2500000 };

			/* Every collective at every size, in an order that differs between A and B. */
			c->coll = 1 + (i + m) % (NCOLL_OPS - 1);
			c->dtype = (collc_dtype)h_rand_below(&rng, COLLC_NUM_DTYPES);
			c->op = (collc_redop)h_rand_below(&rng, COLLC_NUM_REDOPS);
			if (c->dtype == COLLC_FLOAT16 && c->op == COLLC_PROD)
				c->op = COLLC_MAX;
			c->count = bytes[(size_t)(i / (NCOLL_OPS - 1) + 3 * m) % 8] /
				   rc_size(c->dtype);
			if (c->coll == COLLC_OP_ALLGATHER || c->coll == COLLC_OP_REDUCE_SCATTER)
				c->count /= (size_t)nprocs;
			c->inplace = (int)h_rand_below(&rng, 2);
			c->root = (int)h_rand_below(&rng, (uint64_t)nprocs);
			c->skew = h_rand_below(&rng, ELEM_SKEW);
			c->seed = h_rand(&rng);
		}
	}
	for (int i = 0; i < MIXED_OPS && !failed; i++)
		for (int m = 0; m < 2 && !failed; m++) {
			struct tcase *c = &tc[m][i];
			struct layout l = layout_of(c, ranks[m], nprocs);

			r = collc_mem_alloc(ctx[m], l.end, -1, (void **)&bufs[m][i]);
			if (r < 0)
				return h_fail("collc_mem_alloc(%zu): %s", l.end, collc_strerror(r));
			fill(c, ranks[m], nprocs, bufs[m][i], &l);
			r = submit(comm[m], c, bufs[m][i] + l.send_off, bufs[m][i] + l.recv_off,
				   &reqs[m][i]);
			if (r < 0)
				return h_fail("submit: %s", collc_strerror(r));
		}
	for (int i = 0; i < MIXED_OPS && !failed; i++)
		for (int m = 0; m < 2 && !failed; m++) {
			struct tcase *c = &tc[m][i];
			struct layout l = layout_of(c, ranks[m], nprocs);
			char what[192];

			describe(c, ranks[m], nprocs, what, sizeof(what));
			strncat(what, m ? " (comm B)" : " (comm A)",
				sizeof(what) - strlen(what) - 1);
			r = collc_wait(ctx[m], reqs[m][i], 60000);
			if (r < 0)
				return h_fail("%s: %s", what, collc_strerror(r));
			failed = check(c, ranks[m], nprocs, bufs[m][i], &l, what);
			collc_mem_free(ctx[m], bufs[m][i]);
		}
	for (int m = 0; m < 2; m++) {
		collc_comm_destroy(comm[m]);
		collc_disconnect(ctx[m]);
	}
	return failed;
}

static int run_mixed(void)
{
	struct totals before, now;
	int failed;

	if (read_totals(&before))
		return 1;
	h_unique_id(&uid);
	h_unique_id(&uid2);
	failed = h_run_ranks(MIXED_PROCS, mixed_main, NULL);
	if (failed)
		return h_fail("%d processes failed", failed);
	if (read_totals(&now))
		return 1;
	for (int a = COLLC_ALGO_RING; a < COLLC_ALGO_HIER; a++)
		if (now.algo[a] == before.algo[a])
			return h_fail("status: no collective ran %s", algo_names[a]);
	for (int p = COLLC_PROTO_SIMPLE; p < COLLC_PROTO_MAX; p++)
		if (now.proto[p] == before.proto[p])
			return h_fail("status: no collective ran %s", proto_names[p]);
	h_log("two communicators, %d collectives each outstanding at once: correct; by_algo ring %" PRIu64
	      " oneshot %" PRIu64 " twoshot %" PRIu64 ", by_proto simple %" PRIu64 " ll %" PRIu64
	      " ll128 %" PRIu64,
	      MIXED_OPS, now.algo[1] - before.algo[1], now.algo[2] - before.algo[2],
	      now.algo[3] - before.algo[3], now.proto[1] - before.proto[1],
	      now.proto[2] - before.proto[2], now.proto[3] - before.proto[3]);
	return 0;
}

static void parse(int argc, char **argv)
{
	opt.ranks[0] = 2, opt.ranks[1] = 3, opt.ranks[2] = 5, opt.ranks[3] = 8;
	opt.nranks_list = 4;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "--proto") == 0 && v) {
			opt.proto = rc_name_index(proto_names, COLLC_PROTO_MAX, v);
			i++;
		} else if (strcmp(a, "--algo") == 0 && v) {
			opt.algo = rc_name_index(algo_names, COLLC_ALGO_HIER, v);
			i++;
		} else if (strcmp(a, "--ranks") == 0 && v) {
			char *s = strdup(v), *save, *t;

			opt.nranks_list = 0;
			for (t = strtok_r(s, ",", &save); t && opt.nranks_list < 16;
			     t = strtok_r(NULL, ",", &save))
				opt.ranks[opt.nranks_list++] = atoi(t);
			free(s);
			i++;
		} else if (strcmp(a, "--set") == 0 && v && opt.nsets < 14) {
			opt.sets[opt.nsets++] = v;
			i++;
		} else if (strcmp(a, "--seed") == 0 && v) {
			i++;
		} else if (strcmp(a, "--big") == 0) {
			opt.big = 1;
		} else if (strcmp(a, "--quick") == 0) {
			opt.quick = 1;
		} else if (strcmp(a, "--hot") == 0) {
			opt.hot = 1;
		} else if (strcmp(a, "--mixed") == 0) {
			opt.mixed = 1;
		} else {
			fprintf(stderr, "test_protocols: unknown argument '%s'\n", a);
			exit(2);
		}
	}
	if (opt.proto < 0 || opt.algo < 0) {
		fprintf(stderr, "test_protocols: bad --proto or --algo\n");
		exit(2);
	}
	for (int i = 0; i < opt.nranks_list; i++)
		if (opt.ranks[i] < 1 || opt.ranks[i] > MAX_RANKS) {
			fprintf(stderr, "test_protocols: ranks must be 1..%d\n", MAX_RANKS);
			exit(2);
		}
}

int main(int argc, char **argv)
{
	static char name[96], kv[2][32];
	const char *args[40];
	int n = 0, failed;

	parse(argc, argv);
	snprintf(name, sizeof(name), "protocols %s/%s%s%s", algo_names[opt.algo],
		 proto_names[opt.proto], opt.hot ? " hot" : "", opt.mixed ? " mixed" : "");
	h_init(name, argc, argv, 330);
	hashes = h_shared((size_t)MAX_CASES * MAX_RANKS * sizeof(*hashes));
	snprintf(kv[0], sizeof(kv[0]), "proto=%s", proto_names[opt.proto]);
	snprintf(kv[1], sizeof(kv[1]), "algo=%s", algo_names[opt.algo]);
	args[n++] = "--set";
	args[n++] = kv[0];
	args[n++] = "--set";
	args[n++] = kv[1];
	for (int i = 0; i < opt.nsets; i++) {
		args[n++] = "--set";
		args[n++] = opt.sets[i];
	}
	args[n] = NULL;
	h_daemon_start(args);
	if (opt.hot)
		failed = run_hot();
	else if (opt.mixed)
		failed = run_mixed();
	else
		failed = run_matrix();
	return h_finish(failed);
}
