/* SPDX-License-Identifier: MIT */
/*
 * collcd killed under load and restarted on the same socket path,
 * COLLC_RESTART_CYCLES times (default 3); with --sigterm, stopped with
 * SIGTERM under the same load instead (a separate ctest entry).
 *
 * Per cycle, client processes are busy in every way a client can be:
 *   pair P    pipelines 8 all-reduces (up to 1 MiB) then waits for all: mostly
 *             submitting or reaping;
 *   pair Q    rank 0 sleeps in collc_wait on a collective rank 1 never
 *             submits;
 *   loner J   blocks in collc_comm_init of a communicator nobody else joins.
 * collcd is SIGKILLed at a random moment. Every client's pending call must
 * return -ECONNRESET or -ENOTCONN within 1 s of the kill (never hang), and
 * so must its next call. Then a new collcd starts on the same path; the
 * clients reconnect (collc_connect works), form new communicators and their
 * all-reduces are correct.
 *
 * --sigterm: SIGTERM while clients hold communicators, registrations, a
 * pending collective and a pending collc_comm_init: collcd must exit 0 (and,
 * in the sanitizer builds, without a report: no use-after-free, no leak), and
 * every client hears of it within 1 s (-ECONNRESET/-ENOTCONN, or -EPIPE for
 * a collective whose communicator collcd revoked on its way out).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rel.h"
#include "refcheck.h"

enum { W_P0, W_P1, W_Q0, W_Q1, W_J, NW };
static const char *const wname[NW] = { "P0 (pipelining)", "P1 (pipelining)", "Q0 (in collc_wait)",
				       "Q1 (idle peer)", "J (in collc_comm_init)" };

struct worker {
	uint32_t ready; /* reached its steady state */
	uint32_t errored;
	int32_t err, err2; /* the first error and the next call's */
	uint64_t t_err;
	uint64_t ops;
	uint32_t reconnected;
};

struct shared {
	struct collc_unique_id uid_p, uid_q, uid_j, uid_p2, uid_q2;
	uint32_t restarted; /* a new collcd serves: reconnect */
	uint32_t graceful;  /* the SIGTERM round: no reconnection */
	struct worker w[NW];
};

static struct shared *S;

#define CAP (1u << 20)

static int conn_err(int r)
{
	return r == -ECONNRESET || r == -ENOTCONN;
}

/* A graceful stop may revoke the communicators before the connections close. */
static int stop_err(int r)
{
	return conn_err(r) || (h_load(&S->graceful) && r == -EPIPE);
}

static void record(struct worker *w, int r)
{
	if (w->errored)
		return;
	w->t_err = h_now_ns();
	w->err = r;
	h_store(&w->errored, 1);
}

/* After collcd came back: a new communicator on a new connection works. */
static int reconnect(int id, const struct collc_unique_id *uid, int rank)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	float *send, *recv;
	struct rc_case c = { COLLC_FLOAT32, COLLC_SUM, 65536,
			     h_mix(h_seed ^ 0x4ec0 ^ (uint64_t)(id - rank)), 2 };
	char what[96];

	if (h_wait_at_least(&S->restarted, 1, 30000) < 0)
		return h_fail("%s: collcd never came back", wname[id]);
	if (h_join_alloc(uid, 2, rank, 65536 * 4, &ctx, &comm, (void **)&send, (void **)&recv) < 0)
		return 1;
	snprintf(what, sizeof(what), "%s: all-reduce after the restart", wname[id]);
	if (h_allreduce(&c, ctx, comm, rank, 2, send, recv, what))
		return 1;
	h_store(&S->w[id].reconnected, 1);
	h_leave(ctx, comm);
	return 0;
}

/* The call after the first error fails the same way, at once. */
static int second_call(int id, struct collc_ctx *ctx, struct collc_comm *comm, void *buf)
{
	struct worker *w = &S->w[id];
	collc_req req;
	uint64_t t0 = h_now_ns();
	int r = collc_allreduce(comm, buf, buf, 16, COLLC_FLOAT32, COLLC_SUM, &req);

	if (r == 0)
		r = collc_wait(ctx, req, 2000);
	w->err2 = r;
	if (!stop_err(r))
		return h_fail(
			"%s: the call after the error returned %d (%s), want -ECONNRESET/-ENOTCONN",
			wname[id], r, collc_strerror(r));
	if (h_now_ns() - t0 > 1000000000ull)
		return h_fail("%s: the call after the error took %.0f ms", wname[id],
			      (double)(h_now_ns() - t0) / 1e6);
	return 0;
}

/*
 * The end of a worker that lost collcd: its error and the call after it say
 * so; it leaves, then (unless collcd was only stopped) joins uid2 on the new
 * collcd. 0, or 1 after saying what was wrong.
 */
static int after_loss(int id, struct collc_ctx *ctx, struct collc_comm *comm, void *buf,
		      const struct collc_unique_id *uid2, int rank)
{
	struct worker *w = &S->w[id];
	int failed = 0;

	if (!stop_err(w->err))
		failed |= h_fail("%s: ended with %d (%s), want -ECONNRESET/-ENOTCONN", wname[id],
				 w->err, collc_strerror(w->err));
	failed |= second_call(id, ctx, comm, buf);
	h_leave(ctx, comm);
	if (failed || h_load(&S->graceful))
		return failed;
	return reconnect(id, uid2, rank);
}

static int pair_p(void *arg)
{
	int id = (int)(intptr_t)arg, rank = id - W_P0;
	struct worker *w = &S->w[id];
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	void *send, *recv;
	uint64_t rng = h_seed ^ 0x9a1e;
	int r = 0;

	if (h_join(&S->uid_p, 2, rank, &ctx, &comm) < 0)
		return 1;
	if ((r = collc_mem_alloc(ctx, 8 * CAP, -1, &send)) < 0 ||
	    (r = collc_mem_alloc(ctx, 8 * CAP, -1, &recv)) < 0)
		return h_fail("%s: collc_mem_alloc: %s", wname[id], collc_strerror(r));
	for (uint64_t it = 0; !w->errored; it++) {
		collc_req req[8];
		int n = 0;

		for (int k = 0; k < 8; k++) {
			size_t count = (size_t)(1 + h_rand_below(&rng, CAP / 4));
			struct rc_case c = { COLLC_FLOAT32, COLLC_SUM, count,
					     h_mix(it * 8 + (uint64_t)k), 2 };

			rc_fill(&c, rank, (char *)send + (size_t)k * CAP);
			r = collc_allreduce(comm, (char *)send + (size_t)k * CAP,
					    (char *)recv + (size_t)k * CAP, count, COLLC_FLOAT32,
					    COLLC_SUM, &req[n]);
			if (r < 0) {
				record(w, r);
				break;
			}
			n++;
		}
		for (int k = 0; k < n; k++) {
			r = collc_wait(ctx, req[k], 5000);
			if (r < 0) {
				record(w, r);
				break;
			}
			w->ops++;
		}
		if (it == 4)
			h_store(&w->ready, 1);
	}
	return after_loss(id, ctx, comm, send, &S->uid_p2, rank);
}

static int pair_q(void *arg)
{
	int id = (int)(intptr_t)arg, rank = id - W_Q0;
	struct worker *w = &S->w[id];
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	void *buf;
	collc_req req;
	int r;

	if (h_join(&S->uid_q, 2, rank, &ctx, &comm) < 0)
		return 1;
	if ((r = collc_mem_alloc(ctx, 4096, -1, &buf)) < 0)
		return h_fail("%s: collc_mem_alloc: %s", wname[id], collc_strerror(r));
	if (rank == 0) {
		/* Rank 1 never submits this one: sleeps in collc_wait until collcd is gone. */
		r = collc_allreduce(comm, buf, buf, 1024, COLLC_FLOAT32, COLLC_SUM, &req);
		h_store(&w->ready, 1);
		if (r == 0)
			r = collc_wait(ctx, req, 30000);
		record(w, r);
	} else {
		h_store(&w->ready, 1);
		/* Idle on a healthy connection: collcd's death shows at its next call. */
		while (!h_load(&S->w[W_Q0].errored))
			h_sleep_us(1000);
		r = collc_allreduce(comm, buf, buf, 1024, COLLC_FLOAT32, COLLC_SUM, &req);
		if (r == 0)
			r = collc_wait(ctx, req, 30000);
		record(w, r);
	}
	return after_loss(id, ctx, comm, buf, &S->uid_q2, rank);
}

static int loner(void *arg)
{
	struct worker *w = &S->w[W_J];
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	int r = h_connect(&ctx);

	(void)arg;
	if (r < 0)
		return h_fail("J: collc_connect: %s", collc_strerror(r));
	h_store(&w->ready, 1);
	r = collc_comm_init(ctx, &S->uid_j, 2, 0, -1, &comm);
	record(w, r);
	if (!stop_err(r))
		return h_fail("J: collc_comm_init ended with %d (%s), want -ECONNRESET/-ENOTCONN",
			      r, collc_strerror(r));
	r = collc_comm_init(ctx, &S->uid_j, 2, 0, -1, &comm);
	w->err2 = r;
	if (!stop_err(r))
		return h_fail("J: the next collc_comm_init returned %d (%s)", r, collc_strerror(r));
	collc_disconnect(ctx);
	return 0;
}

static int run_round(uint64_t *rng, int graceful, int cycle)
{
	static const h_fn fns[NW] = { pair_p, pair_p, pair_q, pair_q, loner };
	pid_t pid[NW];
	uint64_t t_kill, delay_ms;
	int failed = 0;

	memset(S, 0, sizeof(*S));
	S->graceful = (uint32_t)graceful;
	h_unique_ids(&S->uid_p, 1);
	h_unique_ids(&S->uid_q, 1);
	h_unique_ids(&S->uid_j, 1);
	for (int i = 0; i < NW; i++)
		pid[i] = h_fork(fns[i], (void *)(intptr_t)i);
	for (int i = 0; i < NW; i++)
		if (h_wait_at_least(&S->w[i].ready, 1, 20000) < 0)
			return h_fail("cycle %d: %s never got going", cycle, wname[i]);
	if (rel_wait_in_poll(pid[W_J], 10000) < 0)
		failed |= h_fail("cycle %d: J never blocked in collc_comm_init", cycle);
	delay_ms = 50 + h_rand_below(rng, 250);
	h_sleep_us(delay_ms * 1000);
	if (graceful) {
		h_log("SIGTERM to collcd under load (P at %" PRIu64 " all-reduces)",
		      S->w[W_P0].ops);
		t_kill = h_now_ns();
		if (h_daemon_stop() < 0)
			failed |= h_fail(
				"collcd did not stop cleanly with clients connected and a collective pending");
	} else {
		t_kill = rel_daemon_kill9();
	}
	/* Everyone hears of it within 1 s, and nobody hangs. */
	for (int i = 0; i < NW; i++) {
		struct worker *w = &S->w[i];

		if (h_wait_at_least(&w->errored, 1, 3000) < 0) {
			failed |= h_fail("cycle %d: %s still blocked 3 s after collcd died", cycle,
					 wname[i]);
			continue;
		}
		if (w->t_err - t_kill > 1000000000ull)
			failed |= h_fail(
				"cycle %d: %s heard of collcd's death after %.1f ms (want < 1 s)",
				cycle, wname[i], (double)(w->t_err - t_kill) / 1e6);
	}
	h_log("cycle %d: %s %" PRIu64
	      " ms into the load: P0 %d after %.1f ms, P1 %d after %.1f ms, Q0 %d after %.1f ms, Q1 %d, J %d after %.1f ms",
	      cycle, graceful ? "SIGTERM" : "SIGKILL", delay_ms, S->w[W_P0].err,
	      (double)(S->w[W_P0].t_err - t_kill) / 1e6, S->w[W_P1].err,
	      (double)(S->w[W_P1].t_err - t_kill) / 1e6, S->w[W_Q0].err,
	      (double)(S->w[W_Q0].t_err - t_kill) / 1e6, S->w[W_Q1].err, S->w[W_J].err,
	      (double)(S->w[W_J].t_err - t_kill) / 1e6);
	if (!graceful && !failed) {
		h_daemon_start(NULL);
		h_unique_ids(&S->uid_p2, 1);
		h_unique_ids(&S->uid_q2, 1);
		h_store(&S->restarted, 1);
	}
	for (int i = 0; i < NW; i++)
		failed |= h_reap_one_ok(pid[i], 30000, wname[i]);
	if (!graceful && !failed)
		h_log("cycle %d: new collcd on the same path: reconnected, all-reduces correct",
		      cycle);
	return failed;
}

int main(int argc, char **argv)
{
	unsigned cycles = (unsigned)rel_env_u64("COLLC_RESTART_CYCLES", 3);
	int sigterm = argc > 1 && strcmp(argv[1], "--sigterm") == 0;
	uint64_t rng;
	int failed = 0;

	rel_init(sigterm ? "rel_stop_under_load" : "rel_restart", argc, argv, 60 + cycles * 30);
	rng = h_seed;
	S = h_shared(sizeof(*S));
	h_daemon_start(NULL);
	if (sigterm)
		failed |= run_round(&rng, 1, 0);
	for (unsigned c = 0; !sigterm && c < cycles && !failed; c++)
		failed |= run_round(&rng, 0, (int)c);
	return h_finish(failed);
}
