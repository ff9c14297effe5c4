/* SPDX-License-Identifier: MIT */
/*
 * Soak: many clients and communicators, random collectives, clients killed
 * and restarted, for COLLC_SOAK_SECONDS (default 120).
 *
 * Six client processes persist across rounds (one connection each). Every
 * round the parent draws 3-4 communicators of 2-3 ranks over them (some
 * processes in two) and one global list of collectives: all-reduce, and
 * all-gather / reduce-scatter / broadcast / reduce when a probe at the start
 * shows them working; sizes 0..1 MiB; random dtype, op and root. Every
 * process walks the list in the same order, submitting the entries of its
 * communicators with a random window of 1..4 outstanding requests (so no
 * cross-communicator deadlock is possible), on buffers from collc_mem_alloc
 * or collc_mem_register (re-made every round). Each request has its own
 * data, and its result is checked against a reference.
 *
 * In about half of the rounds one process is SIGKILLed at a random moment
 * and a fresh one takes its place in the next round. Then on the victim's
 * communicators a request may end with 0 (and a correct result) or -EPIPE;
 * on every other communicator each request ends with 0 and a correct
 * result. Any other outcome, a request that never completes (lost), a
 * request that completes twice (collc_test still knows it after collc_wait
 * reported it; per-client completed + errors != submitted in status), or a
 * wrong result, fails the test.
 *
 * collcd's open fds must be equal before the first client and after the
 * last one left, and its VmRSS after the run within +16 MiB of its value
 * after a warm-up (sanitizer builds: +64 MiB, their allocators keep memory).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rel.h"
#include "refcheck.h"

#define NPROC      6
#define MAX_COMMS  4
#define MAX_OPS    160
#define MAX_WINDOW 4
#define BUF_BYTES  (1u << 20)

/* The kinds are refcheck's collectives. */
enum {
	K_ALLREDUCE = RC_ALLREDUCE,
	K_ALLGATHER = RC_ALLGATHER,
	K_REDUCE_SCATTER = RC_REDUCE_SCATTER,
	K_BROADCAST = RC_BROADCAST,
	K_REDUCE = RC_REDUCE,
	K_COUNT = RC_NUM_COLLS
};
#define kind_name(k) rc_coll_name((enum rc_coll)(k))

struct op {
	uint8_t comm, kind, dtype, redop;
	int32_t root;
	uint32_t count; /* the public call's count */
	uint64_t key;
};

struct comm_desc {
	struct collc_unique_id uid;
	uint32_t nranks;
	int32_t member[3];      /* process slot of each rank */
	uint32_t victim_inside; /* a member was killed this round */
};

struct layout {
	uint32_t round;
	uint32_t ncomms, nops;
	struct comm_desc comms[MAX_COMMS];
	struct op ops[MAX_OPS];
	uint32_t window[NPROC];
	uint32_t use_register[NPROC];
};

struct proc_state {
	uint32_t ready_round; /* connected, waiting for this round */
	uint32_t joined_round;
	uint32_t done_round;
	uint32_t failed;
	uint64_t ops_ok, ops_epipe;
	uint64_t by_kind[K_COUNT];
	uint64_t bytes;
};

struct shared {
	struct layout L;
	uint32_t round; /* the parent starts round N by storing N */
	uint32_t quit;
	uint32_t kinds_ok[K_COUNT];
	struct proc_state p[NPROC];
	struct collc_unique_id probe_uid;
};

static struct shared *S;
static int my_slot;

/* Sizes of the buffers an op needs on one rank. */
static void op_bytes(const struct op *o, uint32_t nranks, int rank, size_t *send, size_t *recv)
{
	size_t es = collc_dtype_size((collc_dtype)o->dtype), one = (size_t)o->count * es;

	switch (o->kind) {
	case K_ALLGATHER:
		*send = one;
		*recv = one * nranks;
		break;
	case K_REDUCE_SCATTER:
		*send = one * nranks;
		*recv = one;
		break;
	case K_BROADCAST:
		*send = rank == o->root ? one : 0;
		*recv = one;
		break;
	case K_REDUCE:
		*send = one;
		*recv = rank == o->root ? one : 0;
		break;
	default:
		*send = *recv = one;
	}
}

/* Exact data (every element checked bit for bit); ops without a reduction take SUM's. */
static struct rc_case op_case(const struct op *o, int nranks)
{
	int reduces = o->kind == K_ALLREDUCE || o->kind == K_REDUCE_SCATTER || o->kind == K_REDUCE;

	return (struct rc_case){ (collc_dtype)o->dtype, reduces ? (collc_redop)o->redop : COLLC_SUM,
				 o->count, o->key, nranks };
}

static int submit_op(struct collc_comm *comm, const struct op *o, int rank, int nranks, void *send,
		     void *recv, collc_req *req)
{
	collc_dtype dt = (collc_dtype)o->dtype;
	collc_redop op = (collc_redop)o->redop;
	size_t sb, rb;

	op_bytes(o, (uint32_t)nranks, rank, &sb, &rb);
	/* The send data: element i of rank r is a function of the request's key. */
	if (sb) {
		struct rc_case c = op_case(o, nranks);

		rc_fill_coll(&c, (enum rc_coll)o->kind, nranks, rank, send);
	}
	if (rb)
		memset(recv, 0x5c, rb);
	switch (o->kind) {
	case K_ALLGATHER:
		return collc_allgather(comm, send, recv, o->count, dt, req);
	case K_REDUCE_SCATTER:
		return collc_reduce_scatter(comm, send, recv, o->count, dt, op, req);
	case K_BROADCAST:
		return collc_broadcast(comm, sb ? send : NULL, recv, o->count, dt, o->root, req);
	case K_REDUCE:
		return collc_reduce(comm, send, rb ? recv : NULL, o->count, dt, op, o->root, req);
	default:
		return collc_allreduce(comm, send, recv, o->count, dt, op, req);
	}
}

/* 0 when the result is right, else 1 after saying what is wrong (`what` names the op). */
static int check_op(const struct op *o, int rank, int nranks, const void *recv, const char *what)
{
	struct rc_case c = op_case(o, nranks);

	return rc_check_coll(&c, (enum rc_coll)o->kind, nranks, rank, o->root, recv, what);
}

/* One process */

struct mine {
	int idx; /* index in L.comms */
	int rank;
	struct collc_comm *comm;
	void *send[MAX_WINDOW], *recv[MAX_WINDOW];
	void *raw[2 * MAX_WINDOW];
	collc_req req[MAX_WINDOW];
	int opi[MAX_WINDOW]; /* op index of each outstanding request, -1: none */
	int head, n, win;    /* outstanding requests in a ring of win, oldest at head */
};

static int buf_get(struct collc_ctx *ctx, int use_register, void **ret, void **ret_raw)
{
	int r;

	if (!use_register) {
		*ret_raw = NULL;
		return collc_mem_alloc(ctx, BUF_BYTES, -1, ret);
	}
	/* Private anonymous memory of its own, registered in place. */
	*ret_raw =
		mmap(NULL, BUF_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (*ret_raw == MAP_FAILED)
		return -errno;
	r = collc_mem_register(ctx, *ret_raw, BUF_BYTES, -1);
	if (r < 0)
		munmap(*ret_raw, BUF_BYTES);
	*ret = *ret_raw;
	return r;
}

static void buf_put(struct collc_ctx *ctx, void *p, void *raw)
{
	if (!raw) {
		collc_mem_free(ctx, p);
		return;
	}
	collc_mem_deregister(ctx, raw);
	munmap(raw, BUF_BYTES);
}

static int complete_oldest(struct collc_ctx *ctx, const struct layout *L, struct mine *m,
			   struct proc_state *ps)
{
	int k = m->head, oi = m->opi[k], r, t;
	const struct op *o = &L->ops[oi];
	const struct comm_desc *cd = &L->comms[m->idx];
	char what[192];

	r = collc_wait(ctx, m->req[k], 60000);
	m->head = (m->head + 1) % m->win;
	m->n--;
	m->opi[k] = -1;
	if (r == -EAGAIN)
		return h_fail("round %u: slot %d: %s #%d on communicator %d never completed (lost)",
			      L->round, my_slot, kind_name(o->kind), oi, m->idx);
	/* Reported once: the library forgets it, and no second completion revives it. */
	t = collc_test(ctx, m->req[k]);
	if (t != -EINVAL)
		return h_fail(
			"round %u: slot %d: request of %s #%d still known after collc_wait (%d): duplicated",
			L->round, my_slot, kind_name(o->kind), oi, t);
	if (r == -EPIPE && h_load(&L->comms[m->idx].victim_inside)) {
		ps->ops_epipe++;
		return 0;
	}
	if (r != 0)
		return h_fail(
			"round %u: slot %d: %s #%d (%s %s x%u, comm %d of %u ranks%s) ended with %d (%s)",
			L->round, my_slot, kind_name(o->kind), oi,
			rc_dtype_name((collc_dtype)o->dtype), rc_op_name((collc_redop)o->redop),
			o->count, m->idx, cd->nranks,
			h_load(&cd->victim_inside) ? ", a member was killed" : "", r,
			collc_strerror(r));
	snprintf(what, sizeof(what), "round %u: slot %d rank %d: %s #%d (root %d)", L->round,
		 my_slot, m->rank, kind_name(o->kind), oi, o->root);
	if (check_op(o, m->rank, (int)cd->nranks, m->recv[k], what))
		return 1;
	ps->ops_ok++;
	ps->by_kind[o->kind]++;
	ps->bytes += (uint64_t)o->count * collc_dtype_size((collc_dtype)o->dtype);
	return 0;
}

static int run_round(struct collc_ctx *ctx, const struct layout *L, struct proc_state *ps)
{
	struct mine mine[2];
	int nm = 0, failed = 0, r;
	uint32_t win = L->window[my_slot];

	memset(mine, 0, sizeof(mine));
	for (uint32_t c = 0; c < L->ncomms; c++)
		for (uint32_t k = 0; k < L->comms[c].nranks; k++)
			if (L->comms[c].member[k] == my_slot && nm < 2) {
				mine[nm].idx = (int)c;
				mine[nm].rank = (int)k;
				mine[nm].win = (int)win;
				nm++;
			}
	/* Join in communicator order: no two processes wait on each other. */
	for (int i = 0; i < nm; i++) {
		const struct comm_desc *cd = &L->comms[mine[i].idx];

		r = collc_comm_init(ctx, &cd->uid, (int)cd->nranks, mine[i].rank, -1,
				    &mine[i].comm);
		if (r < 0)
			return h_fail("round %u: slot %d: join communicator %d: %s", L->round,
				      my_slot, mine[i].idx, collc_strerror(r));
		for (uint32_t w = 0; w < win; w++) {
			if ((r = buf_get(ctx, (int)L->use_register[my_slot], &mine[i].send[w],
					 &mine[i].raw[2 * w])) < 0 ||
			    (r = buf_get(ctx, (int)L->use_register[my_slot], &mine[i].recv[w],
					 &mine[i].raw[2 * w + 1])) < 0)
				return h_fail("round %u: slot %d: buffers: %s", L->round, my_slot,
					      collc_strerror(r));
			mine[i].opi[w] = -1;
		}
	}
	h_store(&ps->joined_round, L->round);
	for (uint32_t oi = 0; oi < L->nops && !failed; oi++) {
		const struct op *o = &L->ops[oi];
		struct mine *m = NULL;
		int k;

		for (int i = 0; i < nm; i++)
			if (mine[i].idx == o->comm)
				m = &mine[i];
		if (!m)
			continue;
		if ((uint32_t)m->n == win)
			failed |= complete_oldest(ctx, L, m, ps);
		k = (m->head + m->n) % m->win;
		r = submit_op(m->comm, o, m->rank, (int)L->comms[m->idx].nranks, m->send[k],
			      m->recv[k], &m->req[k]);
		if (r == -EPIPE && h_load(&L->comms[m->idx].victim_inside)) {
			ps->ops_epipe++;
			continue;
		}
		if (r < 0) {
			failed |= h_fail("round %u: slot %d: submit %s #%u: %s", L->round, my_slot,
					 kind_name(o->kind), oi, collc_strerror(r));
			break;
		}
		m->opi[k] = (int)oi;
		m->n++;
	}
	for (int i = 0; i < nm; i++)
		while (mine[i].n > 0 && !failed)
			failed |= complete_oldest(ctx, L, &mine[i], ps);
	for (int i = 0; i < nm; i++) {
		collc_comm_destroy(mine[i].comm);
		for (uint32_t w = 0; w < win; w++) {
			buf_put(ctx, mine[i].send[w], mine[i].raw[2 * w]);
			buf_put(ctx, mine[i].recv[w], mine[i].raw[2 * w + 1]);
		}
	}
	return failed;
}

static int proc_main(void *arg)
{
	struct proc_state *ps;
	struct collc_ctx *ctx;
	uint32_t round;
	int r;

	my_slot = (int)(intptr_t)arg;
	ps = &S->p[my_slot];
	r = h_connect(&ctx);
	if (r < 0)
		return h_fail("slot %d: collc_connect: %s", my_slot, collc_strerror(r));
	round = h_load(&S->round);
	for (;;) {
		h_store(&ps->ready_round, round + 1);
		/* Wait for the next round (or the end). */
		while (h_load(&S->round) <= round && !h_load(&S->quit))
			h_wait_at_least(&S->round, round + 1, 100);
		if (h_load(&S->quit))
			break;
		round = h_load(&S->round);
		if (run_round(ctx, &S->L, ps)) {
			h_store(&ps->failed, 1);
			return 1;
		}
		h_store(&ps->done_round, round);
	}
	collc_disconnect(ctx);
	return 0;
}

/* The probe: which collectives work? */

static int probe_rank(void *arg)
{
	int rank = (int)(intptr_t)arg;
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	void *send, *recv;
	int r;

	if (h_join(&S->probe_uid, 2, rank, &ctx, &comm) < 0)
		return 1;
	if ((r = collc_mem_alloc(ctx, 65536, -1, &send)) < 0 ||
	    (r = collc_mem_alloc(ctx, 65536, -1, &recv)) < 0)
		return h_fail("probe: collc_mem_alloc: %s", collc_strerror(r));
	for (int k = 0; k < K_COUNT; k++) {
		struct op o = {
			0, (uint8_t)k, COLLC_INT32, COLLC_SUM, 1, 1000, h_mix(h_seed + (uint64_t)k)
		};
		char what[64];
		collc_req req;

		r = submit_op(comm, &o, rank, 2, send, recv, &req);
		if (r == 0)
			r = collc_wait(ctx, req, 10000);
		if (r < 0) {
			if (rank == 0)
				h_log("probe: %s ends with %s: left out of the soak", kind_name(k),
				      collc_strerror(r));
			if (r != -ENOSYS && r != -EOPNOTSUPP && r != -EINVAL)
				return h_fail("probe: %s ended with %s", kind_name(k),
					      collc_strerror(r));
			continue;
		}
		snprintf(what, sizeof(what), "probe: %s", kind_name(k));
		if (check_op(&o, rank, 2, recv, what))
			return 1;
		if (rank == 0)
			h_store(&S->kinds_ok[k], 1);
	}
	h_leave(ctx, comm);
	return 0;
}

/* The parent */

static void make_layout(struct layout *L, uint64_t *rng, const int *kinds, int nkinds)
{
	uint32_t count[NPROC] = { 0 };

	memset(L->comms, 0, sizeof(L->comms));
	L->ncomms = 3 + (uint32_t)h_rand_below(rng, 2);
	for (uint32_t c = 0; c < L->ncomms; c++) {
		struct comm_desc *cd = &L->comms[c];
		int order[NPROC], n = 0;

		cd->nranks = 2 + (uint32_t)h_rand_below(rng, 2);
		/* Those in no communicator yet first, then those in one. */
		for (uint32_t want = 0; want < 2; want++) {
			int cand[NPROC], nc = 0;

			for (int p = 0; p < NPROC; p++)
				if (count[p] == want)
					cand[nc++] = p;
			for (int i = nc - 1; i > 0; i--) {
				int j = (int)h_rand_below(rng, (uint64_t)i + 1), t = cand[i];

				cand[i] = cand[j];
				cand[j] = t;
			}
			for (int i = 0; i < nc; i++)
				order[n++] = cand[i];
		}
		if ((uint32_t)n < cd->nranks)
			cd->nranks = (uint32_t)n;
		for (uint32_t k = 0; k < cd->nranks; k++) {
			cd->member[k] = order[k];
			count[order[k]]++;
		}
		/* Ranks need not follow slots: shuffle them. */
		for (int i = (int)cd->nranks - 1; i > 0; i--) {
			int j = (int)h_rand_below(rng, (uint64_t)i + 1), t = cd->member[i];

			cd->member[i] = cd->member[j];
			cd->member[j] = t;
		}
		h_unique_ids(&cd->uid, 1);
	}
	L->nops = 80 + (uint32_t)h_rand_below(rng, MAX_OPS - 80);
	for (uint32_t i = 0; i < L->nops; i++) {
		struct op *o = &L->ops[i];
		size_t es, bytes;
		uint32_t nr;

		o->comm = (uint8_t)h_rand_below(rng, L->ncomms);
		nr = L->comms[o->comm].nranks;
		o->kind = (uint8_t)kinds[h_rand_below(rng, (uint64_t)nkinds)];
		o->dtype = (uint8_t)h_rand_below(rng, COLLC_NUM_DTYPES);
		o->redop = (uint8_t)h_rand_below(rng, COLLC_NUM_REDOPS);
		o->root = (int32_t)h_rand_below(rng, nr);
		es = collc_dtype_size((collc_dtype)o->dtype);
		/* 0..1 MiB in all, mostly small. */
		bytes = h_rand_below(rng, 4) ? h_rand_below(rng, 65536)
					     : h_rand_below(rng, BUF_BYTES + 1);
		if (h_rand_below(rng, 16) == 0)
			bytes = 0;
		if (o->kind == K_ALLGATHER || o->kind == K_REDUCE_SCATTER)
			bytes /= nr;
		o->count = (uint32_t)(bytes / es);
		o->key = h_rand(rng);
	}
	for (int p = 0; p < NPROC; p++) {
		L->window[p] = 1 + (uint32_t)h_rand_below(rng, MAX_WINDOW);
		L->use_register[p] = h_rand_below(rng, 4) == 0;
	}
}

static int status_consistent(uint32_t round)
{
	struct json *st = rel_status();
	const struct json *cl;
	int failed = 0;

	if (!st)
		return 1;
	cl = json_get(st, "clients");
	for (size_t i = 0; cl && i < cl->n; i++) {
		const struct json *c = json_at(cl, i);
		double sub = json_num(json_get(c, "submitted"), -1),
		       done = json_num(json_get(c, "completed"), -1);
		double err = json_num(json_get(c, "errors"), -1),
		       inflight = json_num(json_get(c, "inflight"), -1);

		if (inflight != 0)
			failed |= h_fail(
				"round %u: client pid %.0f has %.0f requests in flight at the round's end",
				round, json_num(json_get(c, "pid"), -1), inflight);
		if (done + err != sub)
			failed |= h_fail(
				"round %u: client pid %.0f: submitted %.0f, completed %.0f + errors %.0f (lost or duplicated completions)",
				round, json_num(json_get(c, "pid"), -1), sub, done, err);
	}
	json_free(st);
	return failed;
}

int main(int argc, char **argv)
{
	uint64_t seconds = rel_env_u64("COLLC_SOAK_SECONDS", 120), rng, t0, t_end;
	pid_t pid[NPROC];
	int kinds[K_COUNT], nkinds = 0, failed = 0, fds0, kills = 0, restarts = 0;
	long rss_warm = -1, rss_end;
	uint64_t rounds = 0, coll = 0, epipe = 0, by_kind[K_COUNT] = { 0 }, bytes = 0, ncomms = 0;
	long bound_kb = (h_sanitized() ? 64 : 16) * 1024;
	pid_t pp[2];

	rel_init("rel_soak", argc, argv, (unsigned)(seconds + 240));
	rng = h_seed;
	h_daemon_start(NULL);
	fds0 = rel_daemon_settled_fds();
	S = h_shared(sizeof(*S));

	h_unique_ids(&S->probe_uid, 1);
	pp[0] = h_fork(probe_rank, (void *)0);
	pp[1] = h_fork(probe_rank, (void *)1);
	failed |= h_reap_one_ok(pp[0], 60000, "probe rank 0");
	failed |= h_reap_one_ok(pp[1], 60000, "probe rank 1");
	if (failed)
		return h_finish(failed);
	for (int k = 0; k < K_COUNT; k++)
		if (S->kinds_ok[k])
			kinds[nkinds++] = k;
	if (!S->kinds_ok[K_ALLREDUCE])
		return h_finish(h_fail("all-reduce does not work: nothing to soak"));
	{
		char list[128] = "";

		for (int i = 0; i < nkinds; i++)
			snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
				 i ? ", " : "", kind_name(kinds[i]));
		h_log("soak: %" PRIu64 " s, %d processes, collectives: %s; fds at start %d",
		      seconds, NPROC, list, fds0);
	}

	for (int p = 0; p < NPROC; p++)
		pid[p] = h_fork(proc_main, (void *)(intptr_t)p);
	t0 = h_now_ns();
	t_end = t0 + seconds * 1000000000ull;
	while (!failed && (rounds == 0 || h_now_ns() < t_end)) {
		uint32_t round = (uint32_t)rounds + 1;
		int victim = -1;
		uint64_t kill_after_us = 0;

		/* Everyone (a fresh process in a killed one's place too) waits for this round. */
		for (int p = 0; p < NPROC; p++)
			if (h_wait_at_least(&S->p[p].ready_round, round, 30000) < 0)
				failed |= h_fail("round %u: slot %d never got ready", round, p);
		if (failed)
			break;
		make_layout(&S->L, &rng, kinds, nkinds);
		S->L.round = round;
		ncomms += S->L.ncomms;
		if (h_rand_below(&rng, 2)) {
			victim = (int)h_rand_below(&rng, NPROC);
			kill_after_us = h_rand_below(&rng, 300000);
		}
		h_store(&S->round, round);
		for (int p = 0; p < NPROC; p++) {
			int in_any = 0;

			for (uint32_t c = 0; c < S->L.ncomms; c++)
				for (uint32_t k = 0; k < S->L.comms[c].nranks; k++)
					in_any |= S->L.comms[c].member[k] == p;
			if (in_any && h_wait_at_least(&S->p[p].joined_round, round, 30000) < 0)
				failed |= h_fail("round %u: slot %d did not join its communicators",
						 round, p);
		}
		if (failed)
			break;
		if (victim >= 0) {
			h_sleep_us(kill_after_us);
			for (uint32_t c = 0; c < S->L.ncomms; c++)
				for (uint32_t k = 0; k < S->L.comms[c].nranks; k++)
					if (S->L.comms[c].member[k] == victim)
						h_store(&S->L.comms[c].victim_inside, 1);
			kill(pid[victim], SIGKILL);
			h_reap_one(pid[victim], -1, NULL);
			pid[victim] = 0;
			kills++;
		}
		/* Every survivor finishes the round; the first failure ends the soak. */
		{
			uint64_t deadline = h_now_ns() + 60000000000ull;

			for (;;) {
				int waiting = 0;

				for (int p = 0; p < NPROC; p++) {
					if (p == victim || pid[p] == 0)
						continue;
					if (h_load(&S->p[p].failed)) {
						h_reap_one_ok(pid[p], 5000, "soak process");
						pid[p] = 0;
						failed = 1;
					} else if (h_load(&S->p[p].done_round) < round) {
						waiting++;
					}
				}
				if (failed || !waiting)
					break;
				if (h_now_ns() > deadline) {
					failed = h_fail(
						"round %u: %d processes did not finish within 60 s (lost completions?)",
						round, waiting);
					break;
				}
				h_sleep_us(2000);
			}
		}
		if (failed)
			break;
		failed |= status_consistent(round);
		if (victim >= 0) {
			/* A fresh process takes the victim's place. */
			memset(&S->p[victim], 0, offsetof(struct proc_state, ops_ok));
			pid[victim] = h_fork(proc_main, (void *)(intptr_t)victim);
			restarts++;
		}
		rounds++;
		if (rounds == 3)
			rss_warm = rel_daemon_rss_kb();
		if (rounds % 10 == 0)
			h_log("%" PRIu64 " rounds (%.0f s), %d kills, collcd %d fds, VmRSS %ld KiB",
			      rounds, (double)(h_now_ns() - t0) / 1e9, kills, rel_daemon_fds(),
			      rel_daemon_rss_kb());
	}
	h_store(&S->quit, 1);
	for (int p = 0; p < NPROC; p++) {
		char what[32];

		snprintf(what, sizeof(what), "soak process %d", p);
		if (pid[p] > 0)
			failed |= h_reap_one_ok(pid[p], 30000, what);
		coll += S->p[p].ops_ok;
		epipe += S->p[p].ops_epipe;
		bytes += S->p[p].bytes;
		for (int k = 0; k < K_COUNT; k++)
			by_kind[k] += S->p[p].by_kind[k];
	}
	h_log("soak size: %d client processes (%d restarts), %" PRIu64
	      " rounds of 3-4 communicators "
	      "(%" PRIu64 " communicators), %" PRIu64 " rank-collectives correct, %" PRIu64
	      " ended -EPIPE "
	      "after a kill, %.1f MiB, %d kills",
	      NPROC, restarts, rounds, ncomms, coll, epipe, (double)bytes / 1048576.0, kills);
	h_log("  by kind: allreduce %" PRIu64 ", allgather %" PRIu64 ", reduce_scatter %" PRIu64
	      ", broadcast %" PRIu64 ", reduce %" PRIu64,
	      by_kind[0], by_kind[1], by_kind[2], by_kind[3], by_kind[4]);
	/* All clients gone: back to the fds of the start; memory flat. */
	{
		uint64_t w0 = h_now_ns();
		int fds_end = -1;
		struct json *st;

		while (h_now_ns() - w0 < 5000000000ull) {
			st = rel_status();
			if (!st)
				break;
			if (json_get(st, "clients")->n == 0 && json_get(st, "comms")->n == 0) {
				json_free(st);
				break;
			}
			json_free(st);
			h_sleep_us(50000);
		}
		fds_end = rel_daemon_settled_fds();
		rss_end = rel_daemon_rss_kb();
		h_log("collcd fds: %d at start, %d at the end; VmRSS: %ld KiB after warm-up, %ld KiB at the end (bound +%ld KiB)",
		      fds0, fds_end, rss_warm, rss_end, bound_kb);
		if (fds_end != fds0)
			failed |= h_fail("collcd holds %d fds with no client left, %d at the start",
					 fds_end, fds0);
		if (rss_warm > 0 && rss_end - rss_warm > bound_kb)
			failed |= h_fail("collcd's VmRSS grew %ld KiB over the run (bound %ld KiB)",
					 rss_end - rss_warm, bound_kb);
	}
	return h_finish(failed);
}
