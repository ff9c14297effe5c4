/* SPDX-License-Identifier: MIT */
/*
 * The stream-gate protocol (proto/shm.h: struct collc_gate, COLLC_SQE_STREAM,
 * COLLC_SQE_GRAPH) as collcd keeps it, on the CPU executor: raw clients
 * (tests/common/raw.h) write the SQEs and play their GPU stream's part
 * themselves (store go, wait for done). collcd's gate handling does not care
 * which executor runs the collective, so this is the CI check of what
 * libcollc's stream forms (a GPU only) rely on.
 *
 *  order      2 ranks stream-ordered, and 3 ranks with rank 1 host-ordered:
 *             nothing starts while one stream's go is missing or wrong
 *             (ticket - 1): receive buffers untouched, done not set, no CQE;
 *             then done == ticket, res 0, results right, no CQE for a stream
 *             SQE.
 *  cross      a stream all-reduce whose streams never wrote go, handed to the
 *             executors gated: another communicator's all-reduces on the same
 *             devices still complete (the gated one is skipped for them),
 *             then its go runs it right. After every phase: totals.gated
 *             shows collectives handed to the executors, fired and skipped
 *             there with --set gated_items=1 (the second ctest run), none
 *             without.
 *  b2b        4 stream collectives on 4 gates, 3 times (the gates reused, the
 *             ticket wrapping from 2^32-1 to 1): go by go, the gos written in
 *             reverse order, the gos written before the SQEs; each in order,
 *             each result right.
 *  mismatch   counts that disagree: -EINVAL on both gates; the next is right.
 *  abort      comm_abort with one go missing: -ECANCELED on both gates, and
 *             on a stream SQE after it.
 *  killed     3 ranks, one exits before its go: -EPIPE on the others' gates.
 *  timeout    a comm timeout of 400 ms, one go written, the other never:
 *             -ETIMEDOUT on both gates, not before the timeout; a rank that
 *             submits after the others timed out is released at once; the
 *             communicator goes on.
 *  nogo       every rank in, no go written: no timeout within twice the
 *             timeout, and collcd used under half a core meanwhile; the gos
 *             then run it correctly.
 *  graph      arming answered by a CQE (0; a bad buffer: an error); replays
 *             with new data each time (go = 2 is none); firings matched by
 *             order, not gate (rank 0 fires two gates before rank 1 fires
 *             any); firings interleaved with ordinary and stream SQEs;
 *             destroying the communicator disarms (a later go stays
 *             unanswered; the other rank's replay ends -EPIPE) and collcd
 *             serves a new one.
 *  graph_3    the graph phase on 3 ranks.
 *  graph_*    a firing never matched (-ETIMEDOUT), templates that disagree
 *             (-EINVAL), comm_abort (-ECANCELED), a rank's client gone
 *             (-EPIPE), a template's buffer released (-EINVAL): the fired
 *             gates are released.
 *  graph_flood (alone: `test_gates graph_flood`) a client that rewrites go = 1
 *             whenever collcd clears it, not waiting for done, while its peer
 *             never replays: the firings collcd holds open stay bounded.
 *  dones      done words (proto/shm.h), the other early completion: an
 *             all-reduce's word holds its ticket with the results in place
 *             before its CQE is reaped; none for ticket 0, a failed
 *             collective, all-to-all, send/recv or a stream collective.
 *  leave      a rank whose client saw its done word leaves while the other
 *             rank still runs that all-reduce: the other gets 0 and the
 *             right result, then -EPIPE for what follows.
 *  garbage    stream SQEs with a gate out of range, ticket 0, a ticket past
 *             32 bits, both flags, an unknown flag, stream flags on
 *             all-to-allv, graph flags on all-to-allv and send/recv, graph
 *             SQEs with seq != 0 or a gate out of range: error CQEs, gates
 *             untouched; a stream SQE with a bad buffer: its gate gets the
 *             error; a stream send to itself and its receive wait for both
 *             gates, then deliver. collcd keeps serving.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "json.h"
#include "raw.h"
#include "refcheck.h"

#define REGION   (64u << 10) /* one collective's send or receive buffer */
#define NREGIONS 8u          /* send and receive pairs in each rank's buffer */
/* How long anything that must come may take (sanitizer builds run slower). */
#define WAIT_MS  (h_sanitized() ? 20000 : 5000)

/* What the ranks of one phase share (h_shared memory). */
struct shared {
	struct h_barrier bar;
	uint32_t flag;
	uint64_t t_left; /* leave: when rank 0's client closed */
};

static struct shared *sh;
static struct collc_unique_id uid, uid2;

/* One rank: a raw client on one communicator with one host buffer. */
struct rk {
	struct raw c;
	uint32_t comm;
	uint32_t mr;
	char *buf;
	uint64_t seq; /* the communicator's next sequence number */
	int rank, nranks;
};

static int rk_join(struct rk *k, const struct collc_unique_id *id, int rank, int nranks)
{
	void *p;
	int r;

	memset(k, 0, sizeof(*k));
	k->rank = rank;
	k->nranks = nranks;
	if (raw_open(&k->c))
		return 1;
	if (!k->c.gates || k->c.ngates < COLLC_GATES)
		return h_fail("rank %d: collcd offers no stream gates (features %#x)", rank,
			      k->c.features);
	r = raw_comm_init(&k->c, id, (uint32_t)nranks, (uint32_t)rank, &k->comm);
	if (r < 0)
		return h_fail("rank %d: comm_init: %s", rank, collc_strerror(r));
	r = raw_mem_alloc(&k->c, 2 * REGION * NREGIONS, &k->mr, &p);
	if (r < 0)
		return h_fail("rank %d: mem_alloc: %s", rank, collc_strerror(r));
	k->buf = p;
	return 0;
}

static void rk_leave(struct rk *k)
{
	munmap(k->buf, 2 * REGION * NREGIONS);
	raw_close(&k->c);
}

static char *send_of(struct rk *k, uint32_t reg)
{
	return k->buf + (size_t)reg * 2 * REGION;
}

static char *recv_of(struct rk *k, uint32_t reg)
{
	return send_of(k, reg) + REGION;
}

/* Fresh input in region reg and a canary in its receive side. */
static void prepare(struct rk *k, const struct rc_case *rc, uint32_t reg)
{
	rc_fill(rc, k->rank, send_of(k, reg));
	rc_canary_fill(recv_of(k, reg), REGION, rc->seed ^ reg);
}

static int untouched(struct rk *k, const struct rc_case *rc, uint32_t reg, const char *what)
{
	long at = rc_canary_check(recv_of(k, reg), 0, REGION, rc->seed ^ reg);

	if (at >= 0)
		return h_fail("rank %d, %s: receive buffer written at byte %ld before every go",
			      k->rank, what, at);
	return 0;
}

static int result_ok(struct rk *k, const struct rc_case *rc, uint32_t reg, const char *what)
{
	return rc_check(rc, k->nranks, recv_of(k, reg), what, NULL);
}

/* An all-reduce of rc in region reg; flags and the rest are the caller's. */
static struct collc_sqe coll_sqe(struct rk *k, const struct rc_case *rc, uint32_t reg)
{
	struct collc_sqe e = { 0 };

	e.opcode = COLLC_OP_ALLREDUCE;
	e.dtype = (uint8_t)rc->dtype;
	e.redop = (uint8_t)rc->op;
	e.comm = k->comm;
	e.count = rc->count;
	e.send_mr = e.recv_mr = k->mr;
	e.send_off = (uint64_t)reg * 2 * REGION;
	e.recv_off = e.send_off + REGION;
	return e;
}

static void submit_stream(struct rk *k, const struct rc_case *rc, uint32_t reg, uint32_t gate,
			  uint32_t ticket)
{
	struct collc_sqe e = coll_sqe(k, rc, reg);

	e.flags = COLLC_SQE_STREAM;
	e.gate = gate;
	e.user_data = ticket;
	e.seq = k->seq++;
	raw_publish(&k->c, &e);
}

static void submit_host(struct rk *k, const struct rc_case *rc, uint32_t reg, uint64_t ud)
{
	struct collc_sqe e = coll_sqe(k, rc, reg);

	e.user_data = ud;
	e.seq = k->seq++;
	raw_publish(&k->c, &e);
}

/* The stream's wait on done == value, then res must be want. */
static int gate_expect(struct rk *k, uint32_t gate, uint32_t value, int32_t want, const char *what)
{
	int32_t res;

	if (raw_gate_wait(&k->c, gate, value, WAIT_MS) < 0)
		return h_fail("rank %d, %s: gate %u: done is %u, not %u, after %d ms", k->rank,
			      what, gate, raw_gate_done(&k->c, gate), value, WAIT_MS);
	res = raw_gate_res(&k->c, gate);
	if (res != want)
		return h_fail("rank %d, %s: gate %u: res %d (%s), want %d (%s)", k->rank, what,
			      gate, res, collc_strerror(res), want, collc_strerror(want));
	return 0;
}

static int barrier(void)
{
	if (h_barrier_wait(&sh->bar, 2 * WAIT_MS) < 0)
		return h_fail("the other ranks did not reach the barrier");
	return 0;
}

/* The end of a phase: every rank through the barrier, then leaves. */
static int rk_done(struct rk *k)
{
	if (barrier())
		return 1;
	rk_leave(k);
	return 0;
}

static struct rc_case rc_make(collc_dtype dtype, size_t count, uint64_t salt)
{
	struct rc_case rc = { dtype, COLLC_SUM, count, h_mix(h_seed + salt), 0 };

	return rc;
}

/* A stream all-reduce of rc in region reg that must succeed, on gate with ticket. */
static int stream_ok(struct rk *k, const struct rc_case *rc, uint32_t reg, uint32_t gate,
		     uint32_t ticket, const char *what)
{
	prepare(k, rc, reg);
	submit_stream(k, rc, reg, gate, ticket);
	raw_gate_go(&k->c, gate, ticket);
	return gate_expect(k, gate, ticket, 0, what) || result_ok(k, rc, reg, what);
}

/* An ordinary all-reduce of rc in region reg that must succeed. */
static int host_ok(struct rk *k, const struct rc_case *rc, uint32_t reg, uint64_t ud,
		   const char *what)
{
	int r;

	prepare(k, rc, reg);
	submit_host(k, rc, reg, ud);
	r = raw_completion(&k->c, ud, WAIT_MS);
	if (r != 0)
		return h_fail("rank %d, %s: CQE %d (%s), want 0", k->rank, what, r,
			      r == 1 ? "none came" : collc_strerror(r));
	return result_ok(k, rc, reg, what);
}

/*
 * A send of rc in region reg to peer and its receive from peer (seq 0, as
 * p2p SQEs have it): flags, then the send's gate gs and user_data us, the
 * receive's gr and ur.
 */
static void publish_pair(struct rk *k, const struct rc_case *rc, uint32_t reg, uint32_t peer,
			 uint8_t flags, uint32_t gs, uint64_t us, uint32_t gr, uint64_t ur)
{
	struct collc_sqe s = coll_sqe(k, rc, reg), v;

	s.opcode = COLLC_OP_SEND;
	s.root = (int32_t)peer;
	s.seq = 0;
	s.flags = flags;
	s.gate = gs;
	s.user_data = us;
	v = s;
	v.opcode = COLLC_OP_RECV;
	v.gate = gr;
	v.user_data = ur;
	raw_publish(&k->c, &s);
	raw_publish(&k->c, &v);
}

/* --- order ------------------------------------------------------------------------------- */

static int phase_order(int rank, int nranks, void *arg)
{
	int host_rank = *(int *)arg, late = nranks - 1, stream = rank != host_rank;
	struct rc_case rc = rc_make(COLLC_FLOAT32, 3001, 1);
	uint32_t gate = 10 + (uint32_t)rank, ticket = 7 + (uint32_t)rank;
	uint32_t cq0;
	struct rk k;
	uint64_t t0;

	if (late == host_rank)
		late--;
	if (rk_join(&k, &uid, rank, nranks))
		return 1;
	prepare(&k, &rc, 0);
	cq0 = raw_cq_pending(&k.c);
	if (stream)
		submit_stream(&k, &rc, 0, gate, ticket);
	else
		submit_host(&k, &rc, 0, 0x4242);
	if (barrier())
		return 1;
	/* Every stream but the late one reaches the collective; the late one writes a wrong go. */
	if (stream)
		raw_gate_go(&k.c, gate, rank == late ? ticket - 1 : ticket);
	t0 = h_now_ns();
	while (h_now_ns() - t0 < 300000000ull) {
		if (untouched(&k, &rc, 0, "one go missing"))
			return 1;
		if (stream && raw_gate_done(&k.c, gate) == ticket)
			return h_fail("rank %d: done set while rank %d's go is %u, not %u", rank,
				      late, ticket - 1, ticket);
		if (!stream && raw_cq_pending(&k.c) != cq0)
			return h_fail("rank %d (host-ordered): a CQE while rank %d's go is missing",
				      rank, late);
		usleep(2000);
	}
	if (barrier())
		return 1;
	if (rank == late)
		raw_gate_go(&k.c, gate, ticket);
	if (stream) {
		if (gate_expect(&k, gate, ticket, 0, "every go written"))
			return 1;
	} else {
		int r = raw_completion(&k.c, 0x4242, WAIT_MS);

		if (r != 0)
			return h_fail("rank %d (host-ordered): CQE %d (%s), want 0", rank, r,
				      r == 1 ? "none came" : collc_strerror(r));
	}
	if (result_ok(&k, &rc, 0, "stream-ordered all-reduce"))
		return 1;
	if (stream) {
		usleep(20000);
		if (raw_cq_pending(&k.c) != cq0)
			return h_fail("rank %d: a CQE was posted for a stream SQE", rank);
	}
	return rk_done(&k);
}

/* --- cross ------------------------------------------------------------------------------- */

/*
 * A stream collective of one communicator that every rank submitted but no
 * stream reached goes to the executors gated (sched_gated.c) and holds their
 * FIFOs; another communicator of the same ranks (the same devices) then
 * runs three all-reduces: each asks the leader to skip the gated one, and
 * they must complete while it still waits. Its go then runs it, right.
 */
static int phase_cross(int rank, int nranks, void *arg)
{
	struct rc_case ra = rc_make(COLLC_FLOAT32, 2001, 41);
	struct rc_case rb = rc_make(COLLC_FLOAT64, 777, 42);
	uint32_t gate = 20 + (uint32_t)rank, ticket = 101 + (uint32_t)rank;
	struct rk a, b;

	(void)arg;
	if (rk_join(&a, &uid, rank, nranks) || rk_join(&b, &uid2, rank, nranks))
		return 1;
	prepare(&a, &ra, 0);
	submit_stream(&a, &ra, 0, gate, ticket);
	if (barrier())
		return 1;
	usleep(50000); /* every rank in: the executors hold it */
	for (uint32_t i = 0; i < 3; i++)
		if (host_ok(&b, &rb, 1 + i, 0x900 + i,
			    "another communicator's all-reduce while a stream one waits"))
			return 1;
	if (untouched(&a, &ra, 0, "the stream all-reduce, no go"))
		return 1;
	if (raw_gate_done(&a.c, gate) == ticket)
		return h_fail("rank %d: done set before any go", rank);
	if (barrier())
		return 1;
	raw_gate_go(&a.c, gate, ticket);
	if (gate_expect(&a, gate, ticket, 0, "go after the other communicator ran") ||
	    result_ok(&a, &ra, 0, "the stream all-reduce after its go"))
		return 1;
	if (rk_done(&b))
		return 1;
	return rk_done(&a);
}

/*
 * totals.gated of `collcctl status --json`: handed to the executors, fired
 * there, skipped. With gated items on (the default) the phases above must
 * have used all three (order and b2b write go after submitting; cross
 * forces skips); with them off (the default), none.
 */
static int gated_counts(int on)
{
	char out[65536];
	struct json *root = h_status_json(out, sizeof(out));
	const struct json *g;
	double handed, fired, skipped;
	int r = 0;

	if (!root)
		return 1;
	g = json_get(json_get(root, "totals"), "gated");
	handed = json_num(json_get(g, "handed"), -1);
	fired = json_num(json_get(g, "fired"), -1);
	skipped = json_num(json_get(g, "skipped"), -1);
	if (on && (handed < 1 || fired < 1 || skipped < 1))
		r = h_fail("gated items on: handed %.0f, fired %.0f, skipped %.0f; want each >= 1",
			   handed, fired, skipped);
	if (!on && handed != 0)
		r = h_fail("gated items off: %.0f collectives handed to the executors gated",
			   handed);
	if (!r)
		h_log("gated items: handed %.0f, fired %.0f, skipped %.0f", handed, fired, skipped);
	json_free(root);
	return r;
}

/* --- b2b --------------------------------------------------------------------------------- */

static int phase_b2b(int rank, int nranks, void *arg)
{
	static const uint32_t gates[4] = { 3, 5, 7, 9 };
	static const collc_dtype dt[4] = { COLLC_FLOAT32, COLLC_INT32, COLLC_FLOAT64,
					   COLLC_BFLOAT16 };
	static const size_t counts[4] = { 1, 4099, 777, 10000 };
	struct rc_case rc[4];
	struct rk k;

	(void)arg;
	if (rk_join(&k, &uid, rank, nranks))
		return 1;
	for (uint32_t round = 0; round < 3; round++) {
		/* The last ticket, then the first again (libcollc's tickets wrap past 0). */
		uint32_t ticket = round == 0 ? UINT32_MAX : round;

		for (uint32_t i = 0; i < 4; i++) {
			rc[i] = rc_make(dt[i], counts[i], 100 + 10 * round + i);
			prepare(&k, &rc[i], i);
			/* Round 2: the stream ran ahead, its go is there before the SQE. */
			if (round == 2)
				raw_gate_go(&k.c, gates[i], ticket);
			submit_stream(&k, &rc[i], i, gates[i], ticket);
		}
		if (round == 2) {
			for (uint32_t i = 0; i < 4; i++)
				if (gate_expect(&k, gates[i], ticket, 0, "go before the SQE") ||
				    result_ok(&k, &rc[i], i, "go before the SQE"))
					return 1;
		} else if (round == 0) {
			/* Go by go: each waits for its own, the later ones stay shut. */
			for (uint32_t i = 0; i < 4; i++) {
				raw_gate_go(&k.c, gates[i], ticket);
				if (gate_expect(&k, gates[i], ticket, 0, "back to back"))
					return 1;
				if (result_ok(&k, &rc[i], i, "back to back"))
					return 1;
				for (uint32_t j = i + 1; j < 4; j++)
					if (raw_gate_done(&k.c, gates[j]) == ticket ||
					    untouched(&k, &rc[j], j, "back to back"))
						return h_fail("rank %d: collective %u ran before "
							      "its go",
							      rank, j);
			}
		} else {
			/* Gos in reverse: the window's order holds them until the first. */
			for (uint32_t i = 4; i-- > 1;)
				raw_gate_go(&k.c, gates[i], ticket);
			usleep(100000);
			for (uint32_t i = 1; i < 4; i++)
				if (raw_gate_done(&k.c, gates[i]) == ticket)
					return h_fail(
						"rank %d: collective %u done before collective "
						"0 had its go",
						rank, i);
			raw_gate_go(&k.c, gates[0], ticket);
			for (uint32_t i = 0; i < 4; i++)
				if (gate_expect(&k, gates[i], ticket, 0, "gos in reverse") ||
				    result_ok(&k, &rc[i], i, "gos in reverse"))
					return 1;
		}
		if (barrier())
			return 1;
	}
	if (raw_cq_pending(&k.c))
		return h_fail("rank %d: CQEs for stream SQEs", rank);
	return rk_done(&k);
}

/* --- errors ------------------------------------------------------------------------------ */

static int phase_mismatch(int rank, int nranks, void *arg)
{
	struct rc_case rc = rc_make(COLLC_FLOAT32, 1000 + (size_t)rank, 200);
	struct rc_case good = rc_make(COLLC_FLOAT32, 2000, 201);
	struct rk k;

	(void)arg;
	if (rk_join(&k, &uid, rank, nranks))
		return 1;
	prepare(&k, &rc, 0);
	submit_stream(&k, &rc, 0, 20, 1);
	raw_gate_go(&k.c, 20, 1);
	if (gate_expect(&k, 20, 1, -EINVAL, "counts 1000 and 1001"))
		return 1;
	if (stream_ok(&k, &good, 1, 20, 2, "after the mismatch"))
		return 1;
	return rk_done(&k);
}

static int phase_abort(int rank, int nranks, void *arg)
{
	struct rc_case rc = rc_make(COLLC_FLOAT32, 1000, 300);
	struct rk k;
	int r;

	(void)arg;
	if (rk_join(&k, &uid, rank, nranks))
		return 1;
	prepare(&k, &rc, 0);
	submit_stream(&k, &rc, 0, 30, 5);
	if (rank == 0)
		raw_gate_go(&k.c, 30, 5); /* rank 1's stream never gets there */
	if (barrier())
		return 1;
	if (rank == 0) {
		usleep(50000);
		r = raw_comm_ref(&k.c, COLLC_MSG_COMM_ABORT, k.comm);
		if (r < 0)
			return h_fail("comm_abort: %s", collc_strerror(r));
	}
	if (gate_expect(&k, 30, 5, -ECANCELED, "comm_abort") || untouched(&k, &rc, 0, "comm_abort"))
		return 1;
	/* One after the abort is released at once. */
	submit_stream(&k, &rc, 0, 30, 6);
	if (gate_expect(&k, 30, 6, -ECANCELED, "a stream SQE after comm_abort"))
		return 1;
	return rk_done(&k);
}

static int phase_killed(int rank, int nranks, void *arg)
{
	struct rc_case rc = rc_make(COLLC_FLOAT32, 1000, 400);
	struct rk k;

	(void)arg;
	if (rk_join(&k, &uid, rank, nranks))
		return 1;
	prepare(&k, &rc, 0);
	submit_stream(&k, &rc, 0, 40, 3);
	if (rank == 0)
		raw_gate_go(&k.c, 40, 3);
	if (barrier())
		return 1;
	if (rank == nranks - 1) {
		/* Gone before its stream reached the collective: collcd sees the socket close. */
		raw_close(&k.c);
		return 0;
	}
	if (gate_expect(&k, 40, 3, -EPIPE, "a rank's client gone"))
		return 1;
	rk_leave(&k);
	return 0;
}

#define TIMEOUT_MS 400u

/* The communicator's timeout set to TIMEOUT_MS. */
static int comm_timeout(struct rk *k)
{
	int r = raw_comm_timeout(&k->c, k->comm, TIMEOUT_MS);

	if (r < 0)
		return h_fail("rank %d: comm timeout: %s", k->rank, collc_strerror(r));
	return 0;
}

/* A stream all-reduce that must succeed, on gate with ticket. */
static int good_stream(struct rk *k, uint32_t gate, uint32_t ticket, const char *what)
{
	struct rc_case rc = rc_make(COLLC_FLOAT32, 2500, 1000 + k->seq);

	return stream_ok(k, &rc, 1, gate, ticket, what);
}

static int phase_timeout(int rank, int nranks, void *arg)
{
	struct rc_case rc = rc_make(COLLC_FLOAT32, 1000, 500);
	struct rk k;
	uint64_t t0, ms;

	(void)arg;
	if (rk_join(&k, &uid, rank, nranks) || comm_timeout(&k))
		return 1;
	prepare(&k, &rc, 0);
	submit_stream(&k, &rc, 0, 50, 9);
	if (barrier())
		return 1;
	t0 = h_now_ns();
	if (rank == 0)
		raw_gate_go(&k.c, 50, 9); /* rank 1's never comes */
	if (gate_expect(&k, 50, 9, -ETIMEDOUT, "one go never written"))
		return 1;
	ms = (h_now_ns() - t0) / 1000000;
	if (rank == 0 && ms < TIMEOUT_MS * 9 / 10)
		return h_fail("the gates were released %" PRIu64 " ms after the go, before the "
			      "timeout of %u ms",
			      ms, TIMEOUT_MS);
	if (untouched(&k, &rc, 0, "one go never written"))
		return 1;
	if (barrier() || good_stream(&k, 51, 1, "after a timeout"))
		return 1;
	/* Rank 1 submits only after rank 0's gate timed out: its own is released at once. */
	prepare(&k, &rc, 0);
	if (rank == 0) {
		submit_stream(&k, &rc, 0, 52, 1);
		raw_gate_go(&k.c, 52, 1);
		if (gate_expect(&k, 52, 1, -ETIMEDOUT, "rank 1 never submitted"))
			return 1;
		h_store(&sh->flag, 1);
	} else {
		if (h_wait_at_least(&sh->flag, 1, WAIT_MS) < 0)
			return h_fail("rank 1: rank 0's gate never timed out");
		submit_stream(&k, &rc, 0, 52, 1);
		if (gate_expect(&k, 52, 1, -ETIMEDOUT, "submitted after the others timed out"))
			return 1;
	}
	if (barrier() || good_stream(&k, 51, 2, "after a late submission"))
		return 1;
	return rk_done(&k);
}

/* collcd's CPU time so far in seconds (user and system), or -1. */
static double daemon_cpu_s(void)
{
	unsigned long ut = 0, st = 0;
	char path[64], buf[1024], *p;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)h_daemon_pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	p = fgets(buf, sizeof(buf), f);
	fclose(f);
	/* Fields 14 and 15, counted after the command name's closing parenthesis. */
	if (!p || !(p = strrchr(buf, ')')) ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int phase_nogo(int rank, int nranks, void *arg)
{
	struct rc_case rc = rc_make(COLLC_FLOAT64, 5000, 600);
	double cpu0, cpu, wall;
	struct rk k;
	uint64_t t0;

	(void)arg;
	if (rk_join(&k, &uid, rank, nranks) || comm_timeout(&k))
		return 1;
	prepare(&k, &rc, 0);
	submit_stream(&k, &rc, 0, 60, 1);
	if (barrier())
		return 1;
	/* Every rank is in, no stream got there: no timeout runs yet. */
	t0 = h_now_ns();
	cpu0 = daemon_cpu_s();
	while (h_now_ns() - t0 < 2ull * TIMEOUT_MS * 1000000) {
		if (raw_gate_done(&k.c, 60) == 1)
			return h_fail("rank %d: gate released (res %d) while no stream reached "
				      "the collective",
				      rank, raw_gate_res(&k.c, 60));
		if (untouched(&k, &rc, 0, "no go written"))
			return 1;
		usleep(5000);
	}
	/*
	 * The scheduler polled the waiting gates meanwhile: spinning a little,
	 * then napping (gate_spin_us), not a whole core for as long as a
	 * stream takes to get there.
	 */
	cpu = daemon_cpu_s() - cpu0;
	wall = (double)(h_now_ns() - t0) / 1e9;
	if (rank == 0 && cpu0 >= 0 && cpu > 0.5 * wall)
		return h_fail("collcd used %.0f%% of a core while one collective's gates waited",
			      100.0 * cpu / wall);
	if (rank == 0 && cpu0 >= 0)
		h_log("collcd: %.1f%% of a core over %.2f s of waiting gates", 100.0 * cpu / wall,
		      wall);
	if (barrier())
		return 1;
	raw_gate_go(&k.c, 60, 1);
	if (gate_expect(&k, 60, 1, 0, "gos after twice the timeout") ||
	    result_ok(&k, &rc, 0, "gos after twice the timeout"))
		return 1;
	return rk_done(&k);
}

/* --- graph ------------------------------------------------------------------------------- */

#define GA   1000u
#define GB   900u
#define GC   800u
#define GBAD 1001u

static int arm(struct rk *k, const struct rc_case *rc, uint32_t reg, uint32_t gate, uint64_t ud,
	       int bad, const char *what)
{
	struct collc_sqe e = coll_sqe(k, rc, reg);
	int r;

	e.flags = COLLC_SQE_GRAPH;
	e.gate = gate;
	e.seq = 0;
	e.user_data = ud;
	if (bad)
		e.send_mr = 999;
	raw_publish(&k->c, &e);
	r = raw_completion(&k->c, ud, WAIT_MS);
	if (r == 1)
		return h_fail("rank %d: arming %s: no CQE", k->rank, what);
	if (bad ? r >= 0 : r != 0)
		return h_fail("rank %d: arming %s: CQE %d (%s), want %s", k->rank, what, r,
			      collc_strerror(r), bad ? "an error" : "0");
	return 0;
}

static uint32_t fired(struct rk *k, uint32_t gate)
{
	return __atomic_load_n(&k->c.gates[gate].fired, __ATOMIC_ACQUIRE);
}

/* One replay's end as a graph has it: done == 1 (res want), then the replay clears done. */
static int replay_end(struct rk *k, uint32_t gate, int32_t want, const char *what)
{
	if (gate_expect(k, gate, 1, want, what))
		return 1;
	if (__atomic_load_n(&k->c.gates[gate].go, __ATOMIC_ACQUIRE) != 0)
		return h_fail("rank %d, %s: go not cleared by collcd", k->rank, what);
	__atomic_store_n(&k->c.gates[gate].done, 0u, __ATOMIC_RELEASE);
	return 0;
}

static int wait_fired(struct rk *k, uint32_t gate, uint32_t n)
{
	uint64_t t0 = h_now_ns();

	while (fired(k, gate) < n) {
		if (h_now_ns() - t0 > (uint64_t)WAIT_MS * 1000000)
			return h_fail("rank %d: gate %u fired %u times, not %u", k->rank, gate,
				      fired(k, gate), n);
		usleep(50);
	}
	return 0;
}

/* The templates armed on GB and GC (a replay runs what was armed: dtype, op, count, buffers). */
static struct rc_case tmpl_b(void)
{
	return rc_make(COLLC_FLOAT32, 3000, 720);
}

static struct rc_case tmpl_c(void)
{
	return rc_make(COLLC_INT64, 1500, 721);
}

/*
 * Rank 1 armed the templates the other way round (libcollc's ranks pick gates
 * each for themselves): firings match by order, not by gate.
 */
static uint32_t gate_b(const struct rk *k)
{
	return k->rank == 0 ? GB : GC;
}

static uint32_t gate_c(const struct rk *k)
{
	return k->rank == 0 ? GC : GB;
}

static int graph_order(struct rk *k)
{
	struct rc_case b = tmpl_b(), c = tmpl_c();
	uint64_t t0;

	if (k->rank == 1 && h_wait_at_least(&sh->flag, 1, WAIT_MS) < 0)
		return h_fail("rank 1: rank 0 never fired both");
	prepare(k, &b, 1);
	prepare(k, &c, 2);
	/* Rank 0 fires the higher gate first: matching goes by order, not by gate index. */
	raw_gate_go(&k->c, gate_b(k), 1);
	if (wait_fired(k, gate_b(k), 1))
		return 1;
	raw_gate_go(&k->c, gate_c(k), 1);
	if (wait_fired(k, gate_c(k), 1))
		return 1;
	if (k->rank == 0) {
		t0 = h_now_ns();
		while (h_now_ns() - t0 < 200000000ull) {
			if (raw_gate_done(&k->c, GB) || raw_gate_done(&k->c, GC))
				return h_fail("rank 0: a firing done before rank 1 fired");
			if (untouched(k, &b, 1, "rank 1 not fired") ||
			    untouched(k, &c, 2, "rank 1 not fired"))
				return 1;
			usleep(5000);
		}
		h_store(&sh->flag, 1);
	}
	if (replay_end(k, gate_b(k), 0, "first firing") ||
	    replay_end(k, gate_c(k), 0, "second firing"))
		return 1;
	return result_ok(k, &b, 1, "first firing") || result_ok(k, &c, 2, "second firing");
}

/* Firings, ordinary and stream SQEs of the same communicator, in different orders on the ranks. */
static int graph_interleaved(struct rk *k)
{
	for (uint32_t j = 0; j < 4; j++) {
		struct rc_case g = rc_make(COLLC_FLOAT32, 4000, 730 + j);
		struct rc_case o = rc_make(COLLC_INT32, 3000 + j, 740 + j);
		struct rc_case t = rc_make(COLLC_FLOAT64, 1000 + j, 745 + j);
		uint64_t ud = 0xa000 + j;
		int r;

		prepare(k, &g, 0);
		prepare(k, &o, 3);
		prepare(k, &t, 4);
		/* Rank 0 submits first, the others fire first and their streams come last. */
		if (k->rank == 0) {
			submit_host(k, &o, 3, ud);
			submit_stream(k, &t, 4, 12, j + 1);
			raw_gate_go(&k->c, 12, j + 1);
			raw_gate_go(&k->c, GA, 1);
		} else {
			raw_gate_go(&k->c, GA, 1);
			submit_host(k, &o, 3, ud);
			submit_stream(k, &t, 4, 12, j + 1);
		}
		r = raw_completion(&k->c, ud, WAIT_MS);
		if (r != 0)
			return h_fail("rank %d: ordinary all-reduce %u among firings: %d (%s)",
				      k->rank, j, r, r == 1 ? "no CQE" : collc_strerror(r));
		if (k->rank != 0)
			raw_gate_go(&k->c, 12, j + 1);
		if (replay_end(k, GA, 0, "firing among ordinary SQEs") ||
		    result_ok(k, &g, 0, "firing among ordinary SQEs") ||
		    result_ok(k, &o, 3, "ordinary SQE among firings") ||
		    gate_expect(k, 12, j + 1, 0, "stream SQE among firings") ||
		    result_ok(k, &t, 4, "stream SQE among firings"))
			return 1;
	}
	return 0;
}

/* comm_destroy, then a replay's go on GA (fired n times so far) and on GBAD stay unanswered. */
static int destroy_disarms(struct rk *k, uint32_t n)
{
	uint64_t t0;
	int r = raw_comm_ref(&k->c, COLLC_MSG_COMM_DESTROY, k->comm);

	if (r < 0)
		return h_fail("rank %d: comm_destroy: %s", k->rank, collc_strerror(r));
	raw_gate_go(&k->c, GA, 1);
	raw_gate_go(&k->c, GBAD, 1);
	t0 = h_now_ns();
	while (h_now_ns() - t0 < 300000000ull) {
		if (raw_gate_done(&k->c, GA) || raw_gate_done(&k->c, GBAD) || fired(k, GA) != n ||
		    fired(k, GBAD))
			return h_fail("rank %d: a go after comm_destroy (or on a gate whose arming "
				      "failed) was answered: done %u/%u, fired %u/%u",
				      k->rank, raw_gate_done(&k->c, GA), raw_gate_done(&k->c, GBAD),
				      fired(k, GA), fired(k, GBAD));
		usleep(5000);
	}
	return 0;
}

static int phase_graph(int rank, int nranks, void *arg)
{
	struct rc_case a = rc_make(COLLC_FLOAT32, 4000, 700), b = tmpl_b(), c = tmpl_c();
	struct rk k;
	int r;

	(void)arg;
	if (rk_join(&k, &uid, rank, nranks))
		return 1;
	if (arm(&k, &a, 0, GA, 0x9001, 0, "gate 1000") ||
	    arm(&k, &a, 0, GBAD, 0x9002, 1, "gate 1001 with send handle 999") ||
	    arm(&k, &b, 1, gate_b(&k), 0x9003, 0, "the first of two") ||
	    arm(&k, &c, 2, gate_c(&k), 0x9004, 0, "the second of two"))
		return 1;
	/* Only go == 1 is a replay. */
	raw_gate_go(&k.c, GA, 2);
	usleep(100000);
	if (fired(&k, GA) || raw_gate_done(&k.c, GA))
		return h_fail("rank %d: go = 2 fired gate %u", rank, GA);
	for (uint32_t i = 0; i < 6; i++) {
		struct rc_case rc = rc_make(COLLC_FLOAT32, 4000, 710 + i);

		prepare(&k, &rc, 0);
		raw_gate_go(&k.c, GA, 1);
		if (replay_end(&k, GA, 0, "replay") || result_ok(&k, &rc, 0, "replay"))
			return 1;
		if (fired(&k, GA) != i + 1)
			return h_fail("rank %d: gate %u fired %u times after %u replays", rank, GA,
				      fired(&k, GA), i + 1);
	}
	if (barrier() || graph_order(&k) || barrier() || graph_interleaved(&k) || barrier())
		return 1;
	/*
	 * Rank 0 destroys its communicator first: its gates are disarmed while
	 * rank 1's still are armed, on a communicator revoked by rank 0's leaving,
	 * so a replay there ends at once with -EPIPE. Then rank 1 destroys too.
	 */
	if (rank == 0 && destroy_disarms(&k, 10))
		return 1;
	if (barrier())
		return 1;
	if (rank == 1) {
		raw_gate_go(&k.c, GA, 1);
		if (replay_end(&k, GA, -EPIPE, "a replay after rank 0 destroyed the communicator"))
			return 1;
		if (destroy_disarms(&k, 11))
			return 1;
	}
	/* collcd serves a new communicator, ordinary and stream-ordered. */
	r = raw_comm_init(&k.c, &uid2, (uint32_t)nranks, (uint32_t)rank, &k.comm);
	if (r < 0)
		return h_fail("rank %d: comm_init after the destroy: %s", rank, collc_strerror(r));
	k.seq = 0;
	{
		struct rc_case o = rc_make(COLLC_FLOAT32, 5000, 750);
		struct rc_case s = rc_make(COLLC_FLOAT32, 5000, 751);

		if (host_ok(&k, &o, 4, 0xb000, "all-reduce on a new communicator") ||
		    stream_ok(&k, &s, 5, 11, 1, "stream on a new communicator"))
			return 1;
	}
	return rk_done(&k);
}

/* Errors of graph firings: each releases the fired gates. */
enum { GE_TIMEOUT, GE_MISMATCH, GE_ABORT, GE_KILLED, GE_RELEASED };

static int phase_graph_errors(int rank, int nranks, void *arg)
{
	int mode = *(int *)arg;
	struct rc_case a =
		rc_make(COLLC_FLOAT32, 1000 + (mode == GE_MISMATCH ? (size_t)rank : 0), 760);
	struct rk k;
	uint64_t t0, ms;
	int r;

	if (rk_join(&k, &uid, rank, nranks))
		return 1;
	if (mode == GE_TIMEOUT && comm_timeout(&k))
		return 1;
	if (arm(&k, &a, 0, GA, 0x9101, 0, "gate 1000"))
		return 1;
	prepare(&k, &a, 0);
	if (mode == GE_RELEASED && rank == 1) {
		struct collc_msg_mem_release rel = { .mr = k.mr };

		/* The template's buffer goes after the capture: each replay checks again. */
		r = raw_request(k.c.fd, COLLC_MSG_MEM_RELEASE, &rel, sizeof(rel), NULL, 0, NULL,
				NULL);
		if (r < 0)
			return h_fail("mem_release: %s", collc_strerror(r));
	}
	if (barrier())
		return 1;
	t0 = h_now_ns();
	if (rank == 0 || mode == GE_MISMATCH || mode == GE_RELEASED)
		raw_gate_go(&k.c, GA, 1);
	switch (mode) {
	case GE_TIMEOUT:
		if (rank == 0) {
			/* Rank 1 never replays: the firing expires, the communicator ends. */
			if (replay_end(&k, GA, -ETIMEDOUT, "a firing rank 1 never matched"))
				return 1;
			ms = (h_now_ns() - t0) / 1000000;
			if (ms < TIMEOUT_MS * 9 / 10)
				return h_fail("a graph firing timed out after %" PRIu64
					      " ms, before the timeout of %u ms",
					      ms, TIMEOUT_MS);
		}
		if (barrier())
			return 1;
		if (rank == 1) {
			raw_gate_go(&k.c, GA, 1);
			if (replay_end(&k, GA, -ETIMEDOUT, "a late replay after the timeout"))
				return 1;
		}
		break;
	case GE_MISMATCH:
		if (replay_end(&k, GA, -EINVAL, "templates of counts 1000 and 1001"))
			return 1;
		/* The communicator goes on: an ordinary all-reduce is right. */
		{
			struct rc_case o = rc_make(COLLC_FLOAT32, 3000, 761);

			if (host_ok(&k, &o, 1, 0xc000, "all-reduce after a mismatched firing"))
				return 1;
		}
		break;
	case GE_RELEASED:
		if (replay_end(&k, GA, -EINVAL, "a replay after rank 1 released its buffer"))
			return 1;
		break;
	case GE_ABORT:
		if (rank == 1) {
			usleep(50000);
			r = raw_comm_ref(&k.c, COLLC_MSG_COMM_ABORT, k.comm);
			if (r < 0)
				return h_fail("comm_abort: %s", collc_strerror(r));
			raw_gate_go(&k.c, GA, 1);
		}
		if (replay_end(&k, GA, -ECANCELED, "comm_abort during a replay"))
			return 1;
		break;
	case GE_KILLED:
		if (rank == 1) {
			usleep(50000);
			raw_close(&k.c);
			return 0;
		}
		if (replay_end(&k, GA, -EPIPE, "the other rank's client gone during a replay"))
			return 1;
		break;
	}
	if (mode != GE_KILLED && barrier())
		return 1;
	rk_leave(&k);
	return 0;
}

/* clients[].inflight of this process in `collcctl status --json`: its SQEs and firings not ended. */
static int my_inflight(long *ret)
{
	static char out[1 << 16];
	const struct json *clients;
	struct json *root = h_status_json(out, sizeof(out));
	int found = 0;

	if (!root)
		return 1;
	clients = json_get(root, "clients");
	for (size_t i = 0; clients && i < clients->n; i++) {
		const struct json *c = json_at(clients, i);

		if (json_num(json_get(c, "pid"), -1) == (double)getpid()) {
			*ret = (long)json_num(json_get(c, "inflight"), -1);
			found = 1;
		}
	}
	json_free(root);
	return found ? 0 : h_fail("status --json names no client of pid %d", (int)getpid());
}

/*
 * A client that writes go = 1 again each time collcd cleared it, without
 * waiting for done (no graph replays so): the firings it makes collcd take
 * while its peer never replays must stay bounded (each takes collcd memory
 * and a walk of the communicator's firing list, and by default there is no
 * timeout to end them), and collcd must keep serving.
 */
static int phase_flood(int rank, int nranks, void *arg)
{
	struct rc_case a = rc_make(COLLC_FLOAT32, 1000, 770);
	uint32_t gos = 0;
	struct rk k;
	long inflight = 0;
	uint64_t t0;

	(void)arg;
	if (rk_join(&k, &uid, rank, nranks))
		return 1;
	if (arm(&k, &a, 0, GA, 0x9201, 0, "gate 1000") || barrier())
		return 1;
	if (rank == 0) {
		t0 = h_now_ns();
		while (h_now_ns() - t0 < 500000000ull) {
			if (__atomic_load_n(&k.c.gates[GA].go, __ATOMIC_ACQUIRE) == 0) {
				raw_gate_go(&k.c, GA, 1);
				gos++;
			}
			usleep(20);
		}
		if (my_inflight(&inflight))
			return 1;
		h_log("500 ms of go = 1 without waiting for done: collcd took %u, fired %u, "
		      "%ld still open",
		      gos, fired(&k, GA), inflight);
		if (inflight > 64)
			return h_fail(
				"one armed gate of a client that does not wait for done holds "
				"%ld firings open in collcd (its peer never replayed): "
				"unbounded",
				inflight);
	}
	return rk_done(&k);
}

/* --- garbage ----------------------------------------------------------------------------- */

enum path { WINDOW, GRAPH, P2P };

struct bad {
	const char *what;
	uint8_t opcode;
	uint8_t flags;
	uint32_t gate;
	uint64_t ud;
	uint64_t seq; /* GRAPH: the SQE's; else set as its path wants */
	enum path path;
};

static const struct bad bads[] = {
	{ "stream, gate COLLC_GATES", COLLC_OP_ALLREDUCE, COLLC_SQE_STREAM, COLLC_GATES, 0x51, 0,
	  WINDOW },
	{ "stream, gate 2^32-1", COLLC_OP_ALLREDUCE, COLLC_SQE_STREAM, UINT32_MAX, 0x52, 0,
	  WINDOW },
	{ "stream, ticket 0", COLLC_OP_ALLREDUCE, COLLC_SQE_STREAM, 4, 0, 0, WINDOW },
	{ "stream, ticket 2^32 + 0x53", COLLC_OP_ALLREDUCE, COLLC_SQE_STREAM, 4,
	  (1ull << 32) | 0x53, 0, WINDOW },
	{ "stream and graph flags", COLLC_OP_ALLREDUCE, COLLC_SQE_STREAM | COLLC_SQE_GRAPH, 4, 0x54,
	  0, WINDOW },
	{ "flag 0x4", COLLC_OP_ALLREDUCE, 0x4, 4, 0x55, 0, WINDOW },
	{ "stream all-to-allv", COLLC_OP_ALLTOALLV, COLLC_SQE_STREAM, 4, 0x56, 0, WINDOW },
	{ "graph all-to-allv", COLLC_OP_ALLTOALLV, COLLC_SQE_GRAPH, 4, 0x58, 0, GRAPH },
	{ "graph, seq 3", COLLC_OP_ALLREDUCE, COLLC_SQE_GRAPH, 4, 0x61, 3, GRAPH },
	{ "graph, gate COLLC_GATES", COLLC_OP_ALLREDUCE, COLLC_SQE_GRAPH, COLLC_GATES, 0x62, 0,
	  GRAPH },
	{ "graph, gate 2^32-1", COLLC_OP_ALLREDUCE, COLLC_SQE_GRAPH, UINT32_MAX, 0x63, 0, GRAPH },
};

/* A send to itself and its receive, both with flags: both fail, paired. */
static int bad_pair(struct rk *k, uint8_t flags, uint64_t ud)
{
	struct rc_case rc = rc_make(COLLC_FLOAT32, 100, 800);
	int r;

	publish_pair(k, &rc, 0, 0, flags, 4, ud, 4, ud + 1);
	for (int i = 0; i < 2; i++) {
		r = raw_completion(&k->c, ud + (uint64_t)i, WAIT_MS);
		if (r == 1 || r >= 0)
			return h_fail("%s with flags %#x: %d (%s), want an error CQE",
				      i ? "receive" : "send", flags, r,
				      r == 1 ? "no CQE" : collc_strerror(r));
	}
	return 0;
}

static int phase_garbage(int rank, int nranks, void *arg)
{
	struct rc_case rc = rc_make(COLLC_FLOAT32, 1000, 900);
	struct rk k;
	int r, n = 0;

	(void)arg;
	if (rk_join(&k, &uid, rank, nranks))
		return 1;
	for (size_t i = 0; i < sizeof(bads) / sizeof(bads[0]); i++) {
		const struct bad *b = &bads[i];
		struct collc_sqe e = coll_sqe(&k, &rc, 0);
		struct collc_sqe_args a = { 0 };

		e.opcode = b->opcode;
		e.flags = b->flags;
		e.gate = b->gate;
		e.user_data = b->ud;
		e.seq = b->path == WINDOW ? k.seq++ : b->seq;
		if (b->opcode == COLLC_OP_ALLTOALLV) {
			e.count = 0;
			a.sendcounts[0] = a.recvcounts[0] = 10;
		}
		raw_publish_args(&k.c, &e, &a);
		r = raw_completion(&k.c, b->ud, WAIT_MS);
		if (r == 1 || r >= 0)
			return h_fail("%s: %d (%s), want an error CQE", b->what, r,
				      r == 1 ? "no CQE" : collc_strerror(r));
		n++;
	}
	if (bad_pair(&k, COLLC_SQE_GRAPH, 0x73))
		return 1;
	n += 2;
	if (raw_gate_done(&k.c, 4) || raw_gate_res(&k.c, 4))
		return h_fail("gate 4 written by SQEs with bad flags: done %u, res %d",
			      raw_gate_done(&k.c, 4), raw_gate_res(&k.c, 4));
	/* Good flags, bad buffer: the error goes to the gate, no CQE. */
	{
		struct collc_sqe e = coll_sqe(&k, &rc, 0);
		uint32_t cq0 = raw_cq_pending(&k.c);

		e.flags = COLLC_SQE_STREAM;
		e.gate = 5;
		e.user_data = 9;
		e.send_mr = 999;
		e.seq = k.seq++;
		raw_publish(&k.c, &e);
		if (gate_expect(&k, 5, 9, -EINVAL, "stream SQE with send handle 999"))
			return 1;
		usleep(20000);
		if (raw_cq_pending(&k.c) != cq0)
			return h_fail("stream SQE with send handle 999: a CQE too");
	}
	h_log("%d SQEs with bad flags, gates, tickets or sequence numbers: error CQEs, gates "
	      "untouched; a bad buffer's stream SQE: -EINVAL on its gate",
	      n);
	/* A stream send to itself and its receive: the pair waits for both gates. */
	prepare(&k, &rc, 1);
	memset(recv_of(&k, 1), 0, rc.count * sizeof(float));
	publish_pair(&k, &rc, 1, 0, COLLC_SQE_STREAM, 6, 1, 7, 1);
	raw_gate_go(&k.c, 6, 1);
	usleep(50000);
	if (raw_gate_done(&k.c, 6) || raw_gate_done(&k.c, 7))
		return h_fail("stream send/recv ran with the receive's gate closed");
	raw_gate_go(&k.c, 7, 1);
	if (gate_expect(&k, 6, 1, 0, "stream send to itself") ||
	    gate_expect(&k, 7, 1, 0, "stream receive from itself") ||
	    rc_check_input(&rc, 0, recv_of(&k, 1), "a stream send to itself"))
		return 1;
	/* Still served: a send to itself, a stream and an ordinary all-reduce. */
	prepare(&k, &rc, 1);
	publish_pair(&k, &rc, 1, 0, 0, 0, 0x80, 0, 0x81);
	if ((r = raw_completion(&k.c, 0x80, WAIT_MS)) != 0 ||
	    (r = raw_completion(&k.c, 0x81, WAIT_MS)) != 0)
		return h_fail("a send to itself after the bad ones: %d", r);
	if (rc_check_input(&rc, 0, recv_of(&k, 1), "a send to itself"))
		return 1;
	if (stream_ok(&k, &rc, 2, 4, 1, "a stream all-reduce after the bad ones") ||
	    host_ok(&k, &rc, 3, 0x90, "an all-reduce after the bad ones"))
		return 1;
	rk_leave(&k);
	return 0;
}

/* ----------------------------------------------------------------------------------------- */

struct phase {
	const char *name;
	int nranks;
	h_rank_fn fn;
	int arg;
	const char *done;
	int alone; /* runs only when named on the command line */
};

/* --- send/recv ------------------------------------------------------------------------ */

/*
 * Two ranks exchange at once, every send and receive stream-ordered on its
 * own gate (as NCCL's grouped send/recv): each pair waits for both gates;
 * all four end right.
 */
static int phase_p2p(int rank, int nranks, void *arg)
{
	struct rc_case rc = rc_make(COLLC_FLOAT32, 777, 40);
	uint32_t peer = (uint32_t)(1 - rank);
	struct rk k;

	(void)arg;
	if (nranks != 2 || rk_join(&k, &uid, rank, nranks))
		return 1;
	prepare(&k, &rc, 0);
	memset(recv_of(&k, 0), 0, rc.count * sizeof(float));
	publish_pair(&k, &rc, 0, peer, COLLC_SQE_STREAM, 20, 3, 21, 3);
	if (barrier())
		return 1;
	raw_gate_go(&k.c, 20, 3);
	raw_gate_go(&k.c, 21, 3);
	if (gate_expect(&k, 20, 3, 0, "stream send to the peer") ||
	    gate_expect(&k, 21, 3, 0, "stream receive from the peer"))
		return 1;
	return rc_check_input(&rc, (int)peer, recv_of(&k, 0), "a stream exchange");
}

/* --- dones ------------------------------------------------------------------------------- */

#define DONE_SENTINEL 0xd0d0d0d0u

/* Waits up to WAIT_MS for the done word of ud to hold its ticket: 0, or 1 after reporting. */
static int done_wait(struct rk *k, uint64_t ud, const char *what)
{
	uint64_t t0 = h_now_ns();

	while (raw_done_word(&k->c, ud) != (uint32_t)ud) {
		if (h_now_ns() - t0 > (uint64_t)WAIT_MS * 1000000ull)
			return h_fail("rank %d, %s: done word %#x, not the ticket %#x, after %d ms",
				      k->rank, what, raw_done_word(&k->c, ud), (uint32_t)ud,
				      WAIT_MS);
		sched_yield();
	}
	return 0;
}

/*
 * The CQEs of uds[0..n) must carry want, and their done words must still
 * hold the sentinel: an executor stores a word before the item's
 * work_consumed, so before the CQE, and a word stored at all would show.
 */
static int done_untouched(struct rk *k, const uint64_t *uds, uint32_t n, int want, const char *what)
{
	int res[2];

	raw_completions(&k->c, uds, res, n, WAIT_MS);
	for (uint32_t i = 0; i < n; i++) {
		if (res[i] != want)
			return h_fail("rank %d, %s: CQE %d (%s), want %d (%s)", k->rank, what,
				      res[i], res[i] == 1 ? "none came" : collc_strerror(res[i]),
				      want, collc_strerror(want));
		if (raw_done_word(&k->c, uds[i]) != DONE_SENTINEL)
			return h_fail("rank %d, %s: done word written (%#x)", k->rank, what,
				      raw_done_word(&k->c, uds[i]));
	}
	return 0;
}

/*
 * Done words (proto/shm.h): an all-reduce's word turns to its ticket with
 * its results already in place, before its CQE is reaped, at sizes from 1
 * element to a whole region; no word is written for ticket 0, a collective
 * that fails (mismatch), an all-to-all, a send and a receive, or a
 * stream-ordered collective.
 */
static int phase_dones(int rank, int nranks, void *arg)
{
	static const size_t counts[] = { 1, 77, 3001, REGION / sizeof(float) };
	uint32_t peer = (uint32_t)(1 - rank);
	struct rc_case rc;
	struct collc_sqe e;
	uint64_t ud;
	struct rk k;

	(void)arg;
	if (nranks != 2 || rk_join(&k, &uid, rank, nranks))
		return 1;
	if (!k.c.dones)
		return h_fail("collcd offers no done words (features %#x)", k.c.features);
	for (uint32_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
		char what[64];
		int r;

		snprintf(what, sizeof(what), "all-reduce of %zu floats", counts[i]);
		rc = rc_make(COLLC_FLOAT32, counts[i], 50 + i);
		ud = ((uint64_t)(i + 1) << 32) | (0x100u + i);
		k.c.dones[ud % COLLC_DONES] = DONE_SENTINEL;
		prepare(&k, &rc, i);
		submit_host(&k, &rc, i, ud);
		if (done_wait(&k, ud, what) || result_ok(&k, &rc, i, what))
			return 1;
		r = raw_completion(&k.c, ud, WAIT_MS);
		if (r != 0)
			return h_fail("rank %d, %s: CQE %d (%s) after the done word", rank, what, r,
				      r == 1 ? "none came" : collc_strerror(r));
	}

	rc = rc_make(COLLC_FLOAT32, 500, 60);
	ud = 7ull << 32; /* ticket 0 */
	k.c.dones[0] = DONE_SENTINEL;
	prepare(&k, &rc, 0);
	submit_host(&k, &rc, 0, ud);
	if (done_untouched(&k, &ud, 1, 0, "ticket 0") || result_ok(&k, &rc, 0, "ticket 0"))
		return 1;

	rc = rc_make(COLLC_FLOAT32, 500u + (uint32_t)rank, 61);
	ud = 0x200;
	k.c.dones[ud] = DONE_SENTINEL;
	prepare(&k, &rc, 1);
	submit_host(&k, &rc, 1, ud);
	if (done_untouched(&k, &ud, 1, -EINVAL, "mismatched counts"))
		return 1;

	rc = rc_make(COLLC_FLOAT32, 100, 62);
	ud = 0x201;
	k.c.dones[ud] = DONE_SENTINEL;
	prepare(&k, &rc, 2);
	e = coll_sqe(&k, &rc, 2);
	e.opcode = COLLC_OP_ALLTOALL;
	e.redop = 0;
	e.user_data = ud;
	e.seq = k.seq++;
	raw_publish(&k.c, &e);
	if (done_untouched(&k, &ud, 1, 0, "all-to-all"))
		return 1;

	k.c.dones[0x202] = k.c.dones[0x203] = DONE_SENTINEL;
	prepare(&k, &rc, 3);
	publish_pair(&k, &rc, 3, peer, 0, 0, 0x202, 0, 0x203);
	if (done_untouched(&k, (const uint64_t[]){ 0x202, 0x203 }, 2, 0, "send and receive") ||
	    rc_check_input(&rc, (int)peer, recv_of(&k, 3), "send/recv"))
		return 1;

	k.c.dones[9] = DONE_SENTINEL;
	if (stream_ok(&k, &rc, 4, 30, 9, "stream-ordered"))
		return 1;
	if (raw_done_word(&k.c, 9) != DONE_SENTINEL)
		return h_fail("rank %d: a stream-ordered collective wrote a done word", rank);
	return rk_done(&k);
}

/*
 * A rank whose client has seen its part of a collective end (its done
 * word) and leaves while the other ranks still run that collective: they
 * finish it (0, right results), and only what follows fails (-EPIPE).
 * Rank 0 plays a client that saw its word (it stores its own ticket there)
 * and closes while a 16 MiB all-reduce runs (3 ms after both submitted,
 * tens of ms before it ends on the CPU executor; a run where it ended first
 * says so in the log, as it then checked nothing about the leave).
 */
#define LEAVE_MAX (16u << 20)

static int phase_leave(int rank, int nranks, void *arg)
{
	const uint64_t ud = 0x4c45;
	struct collc_sqe e = { 0 };
	struct rc_case rc;
	struct raw c;
	uint32_t comm, mr;
	char *buf;
	void *p;
	int r;

	(void)arg;
	if (nranks != 2 || raw_open(&c))
		return 1;
	r = raw_comm_init(&c, &uid, 2, (uint32_t)rank, &comm);
	if (r == 0)
		r = raw_mem_alloc(&c, 2 * (size_t)LEAVE_MAX, &mr, &p);
	if (r < 0)
		return h_fail("rank %d: join: %s", rank, collc_strerror(r));
	buf = p;
	rc = rc_make(COLLC_FLOAT32, LEAVE_MAX / sizeof(float), 70);
	rc_fill(&rc, rank, buf);
	e.opcode = COLLC_OP_ALLREDUCE;
	e.dtype = COLLC_FLOAT32;
	e.redop = COLLC_SUM;
	e.comm = comm;
	e.count = rc.count;
	e.send_mr = e.recv_mr = mr;
	e.recv_off = LEAVE_MAX;
	e.user_data = ud;
	raw_publish(&c, &e);
	if (barrier())
		return 1;
	if (rank == 0) {
		/* Long enough for collcd to launch it; far shorter than it runs. */
		usleep(3000);
		c.dones[ud % COLLC_DONES] = (uint32_t)ud;
		raw_close(&c);
		__atomic_store_n(&sh->t_left, h_now_ns(), __ATOMIC_SEQ_CST);
		return barrier();
	}
	r = raw_completion(&c, ud, WAIT_MS);
	if (r != 0)
		return h_fail("rank 1: the all-reduce rank 0 left after its part: CQE %d (%s), "
			      "want 0",
			      r, r == 1 ? "none came" : collc_strerror(r));
	if (h_now_ns() < __atomic_load_n(&sh->t_left, __ATOMIC_SEQ_CST) ||
	    !__atomic_load_n(&sh->t_left, __ATOMIC_SEQ_CST))
		h_log("leave: the all-reduce ended before rank 0 left (not exercised this run)");
	if (rc_check(&rc, 2, buf + LEAVE_MAX, "the all-reduce rank 0 left after its part", NULL))
		return 1;
	if (barrier())
		return 1;
	/* What follows needs rank 0: -EPIPE. */
	e.user_data = ud + 1;
	e.seq = 1;
	raw_publish(&c, &e);
	r = raw_completion(&c, ud + 1, WAIT_MS);
	if (r != -EPIPE)
		return h_fail("rank 1: an all-reduce after rank 0 left: CQE %d (%s), want -EPIPE",
			      r, r == 1 ? "none came" : collc_strerror(r));
	munmap(buf, 2 * (size_t)LEAVE_MAX);
	raw_close(&c);
	return 0;
}

static const struct phase phases[] = {
	{ "order_2", 2, phase_order, -1,
	  "2 stream ranks: held while one go was missing or wrong, then right, no CQE" },
	{ "order_3", 3, phase_order, 1,
	  "3 ranks, rank 1 host-ordered: held while rank 2's go was missing, then right" },
	{ "b2b", 2, phase_b2b, 0, "4 stream collectives on 4 gates, 3 times: in order, right" },
	{ "cross", 2, phase_cross, 0,
	  "another communicator's all-reduces pass a stream one whose go is missing, then it runs" },
	{ "mismatch", 2, phase_mismatch, 0, "mismatched counts: -EINVAL on both gates" },
	{ "abort", 2, phase_abort, 0, "comm_abort: -ECANCELED on both gates" },
	{ "killed", 3, phase_killed, 0, "a rank's client gone: -EPIPE on the others' gates" },
	{ "timeout", 2, phase_timeout, 0,
	  "one go never written, one rank late: -ETIMEDOUT after the timeout, the next right" },
	{ "nogo", 2, phase_nogo, 0, "no go written: no timeout in twice its time, then right" },
	{ "graph", 2, phase_graph, 0,
	  "graph gates: armed, replays right, matched by order, interleaved, disarmed" },
	{ "graph_3", 3, phase_graph, 0, "the same on 3 ranks" },
	{ "graph_timeout", 2, phase_graph_errors, GE_TIMEOUT,
	  "a firing the other rank never matched: -ETIMEDOUT after the timeout" },
	{ "graph_mismatch", 2, phase_graph_errors, GE_MISMATCH,
	  "firings of templates that disagree: -EINVAL on both gates" },
	{ "graph_abort", 2, phase_graph_errors, GE_ABORT, "comm_abort: -ECANCELED on fired gates" },
	{ "graph_killed", 2, phase_graph_errors, GE_KILLED,
	  "a rank's client gone: -EPIPE on the other's fired gate" },
	{ "graph_released", 2, phase_graph_errors, GE_RELEASED,
	  "a template's buffer released after arming: -EINVAL on both fired gates" },
	{ "p2p", 2, phase_p2p, 0, "stream send/recv between two ranks at once: both pairs right" },
	{ "dones", 2, phase_dones, 0,
	  "done words: the ticket with the results in place; none where the end frees nothing" },
	{ "leave", 2, phase_leave, 0,
	  "a rank left after its part ended: the others finished that all-reduce, then -EPIPE" },
	{ "garbage", 1, phase_garbage, 0, "bad stream and graph SQEs refused, collcd serves on" },
	{ "graph_flood", 2, phase_flood, 0, "a client refiring one gate: its open firings bounded",
	  1 },
};

int main(int argc, char **argv)
{
	int failed = 0;

	const char *only = argc > 1 && argv[1][0] != '-' ? argv[1] : NULL;
	const char *dargs[32] = { NULL };
	int ran = 0, gated_on = 0, nd = 0;

	/* "--set KEY=VALUE" pairs go to collcd (gated_items=1: the executors watch the gos). */
	for (int i = 1; i + 1 < argc && nd + 2 < 32; i++)
		if (strcmp(argv[i], "--set") == 0) {
			dargs[nd++] = argv[i];
			dargs[nd++] = argv[++i];
			if (strcmp(argv[i], "gated_items=1") == 0)
				gated_on = 1;
		}
	h_init("gates", argc, argv, 90);
	sh = h_shared(sizeof(*sh));
	h_daemon_start(dargs);
	for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++) {
		const struct phase *p = &phases[i];
		int arg = p->arg, f;

		if (only ? strcmp(only, p->name) != 0 : p->alone)
			continue;
		ran++;

		memset(sh, 0, sizeof(*sh));
		h_barrier_init(&sh->bar, (uint32_t)p->nranks);
		h_unique_id(&uid);
		h_unique_id(&uid2);
		f = h_run_ranks(p->nranks, p->fn, &arg);
		if (f)
			h_fail("phase %s: %d rank(s) failed", p->name, f);
		else
			h_log("%s: %s", p->name, p->done);
		failed |= f != 0;
		if (!h_daemon_alive())
			return h_finish(h_fail("collcd died in phase %s", p->name));
	}
	if (!ran)
		failed |= h_fail("no phase named %s", only);
	else if (!only && !failed)
		failed |= gated_counts(gated_on);
	return h_finish(failed);
}
