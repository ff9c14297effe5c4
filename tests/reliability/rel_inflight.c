/* SPDX-License-Identifier: MIT */
/*
 * Revocation of a communicator whose collectives are already in the
 * executor: they are abandoned there through the communicator's abort word,
 * not run to their end.
 *
 * Two ranks first time a queue of Q large all-reduces (64 MiB float32 each,
 * Q chosen so that the queue takes about 2 s here) and check the last
 * result. Then, per scenario, they queue the same Q all-reduces again and,
 * once collcd reports them in the executor:
 *   kill   rank 1 is killed with SIGKILL: every one of rank 0's collectives
 *          ends with -EPIPE;
 *   abort  rank 1 calls collc_comm_abort: both ranks' collectives end with
 *          -ECANCELED.
 * The last error must come within COLLC_KILL_BOUND_MS (100; 500 under
 * TSan) of the kill or the abort, a small fraction of the queue's time, and
 * collcd's status must count abandoned work items (totals.aborted_items).
 * Afterwards the survivor and a new process form a new communicator and
 * run the same all-reduce correctly: connections are never reused dirty.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rel.h"
#include "refcheck.h"

#define COUNT     (16u << 20) /* elements: 64 MiB of float32 */
#define MAXQ      64
#define TARGET_NS 2000000000ull

struct shared {
	struct collc_unique_id uid_warm, uid_a, uid_b;
	uint32_t scenario; /* 0 kill, 1 abort */
	uint32_t queue;    /* Q */
	uint32_t warm_done, submitted, go_abort;
	uint64_t warm_ns;       /* rank 0's time for one warm-up queue */
	uint64_t t_event;       /* the kill or the abort */
	uint64_t t_last_err[2]; /* each rank's last error */
	int32_t res[2][MAXQ];
};

static struct shared *S;

/* Queues n all-reduces of the same buffers; returns 0 or a failure. */
static int submit_queue(struct collc_comm *comm, float *send, float *recv, uint32_t n,
			collc_req *reqs, int rank)
{
	for (uint32_t i = 0; i < n; i++) {
		int r = collc_allreduce(comm, send, recv, COUNT, COLLC_FLOAT32, COLLC_SUM,
					&reqs[i]);

		if (r < 0)
			return h_fail("rank %d: submit %u: %s", rank, i, collc_strerror(r));
	}
	return 0;
}

static int check_result(const float *recv, int nranks, uint64_t key, int rank, const char *what)
{
	struct rc_case c = { COLLC_FLOAT32, COLLC_SUM, COUNT, key, nranks };
	char line[160];

	snprintf(line, sizeof(line), "rank %d: %s", rank, what);
	return rc_check(&c, nranks, recv, line, NULL);
}

/* Both ranks: time one queue on a warm-up communicator and check its result. */
static int warm_up(struct collc_ctx *ctx, int rank, float *send, float *recv)
{
	struct collc_comm *comm;
	collc_req reqs[MAXQ];
	uint64_t t0, key = h_seed ^ 0x77;
	uint32_t q = 4;
	int r;

	r = collc_comm_init(ctx, &S->uid_warm, 2, rank, -1, &comm);
	if (r < 0)
		return h_fail("rank %d: warm-up communicator: %s", rank, collc_strerror(r));
	rc_fill(&(struct rc_case){ COLLC_FLOAT32, COLLC_SUM, COUNT, key, 2 }, rank, send);
	t0 = h_now_ns();
	if (submit_queue(comm, send, recv, q, reqs, rank))
		return 1;
	for (uint32_t i = 0; i < q; i++) {
		r = collc_wait(ctx, reqs[i], 120000);
		if (r < 0)
			return h_fail("rank %d: warm-up all-reduce %u: %s", rank, i,
				      collc_strerror(r));
	}
	if (rank == 0) {
		uint64_t per = (h_now_ns() - t0) / q;

		S->warm_ns = per;
		S->queue = (uint32_t)(TARGET_NS / (per ? per : 1)) + 1;
		if (S->queue < 4)
			S->queue = 4;
		if (S->queue > MAXQ)
			S->queue = MAXQ;
	}
	r = check_result(recv, 2, key, rank, "warm-up all-reduce");
	collc_comm_destroy(comm);
	return r;
}

static int rank_main(void *arg)
{
	int rank = (int)(intptr_t)arg, failed = 0, r;
	int want = S->scenario == 0 ? -EPIPE : -ECANCELED;
	struct collc_ctx *ctx;
	struct collc_comm *a;
	collc_req reqs[MAXQ];
	float *send, *recv;
	uint32_t q;

	r = h_connect(&ctx);
	if (r < 0)
		return h_fail("rank %d: connect: %s", rank, collc_strerror(r));
	if ((r = collc_mem_alloc(ctx, (size_t)COUNT * 4, -1, (void **)&send)) < 0 ||
	    (r = collc_mem_alloc(ctx, (size_t)COUNT * 4, -1, (void **)&recv)) < 0)
		return h_fail("rank %d: collc_mem_alloc: %s", rank, collc_strerror(r));
	if (warm_up(ctx, rank, send, recv))
		return 1;
	h_add(&S->warm_done, 1);
	if (h_wait_at_least(&S->warm_done, 2, 120000) < 0)
		return h_fail("rank %d: the other rank's warm-up did not end", rank);
	q = S->queue;

	r = collc_comm_init(ctx, &S->uid_a, 2, rank, -1, &a);
	if (r < 0)
		return h_fail("rank %d: communicator: %s", rank, collc_strerror(r));
	if (submit_queue(a, send, recv, q, reqs, rank))
		return 1;
	h_add(&S->submitted, 1);
	if (rank == 1 && S->scenario == 0) {
		pause(); /* killed here */
		return 1;
	}
	if (rank == 1) {
		/* The parent saw the queue in the executor and set t_event. */
		h_wait_at_least(&S->go_abort, 1, 120000);
		r = collc_comm_abort(a);
		if (r < 0)
			return h_fail("rank 1: collc_comm_abort: %s", collc_strerror(r));
	}
	/*
	 * Those that completed before the revocation end with 0 (a prefix of the
	 * queue: they complete in order); every later one with the error.
	 */
	for (uint32_t i = 0, errs = 0; i < q; i++) {
		r = collc_wait(ctx, reqs[i], 120000);
		S->res[rank][i] = r;
		if (r == want) {
			errs++;
			S->t_last_err[rank] = h_now_ns();
		} else if (r != 0 || errs) {
			failed |= h_fail(
				"rank %d: queued collective %u of %u ended with %d (%s) after %u "
				"ended with %s",
				rank, i, q, r, collc_strerror(r), errs, collc_strerror(want));
		}
	}
	collc_comm_destroy(a);
	if (rank == 1) {
		collc_disconnect(ctx);
		return failed;
	}

	/* A new communicator with a new process: fresh connections, correct results. */
	r = collc_comm_init(ctx, &S->uid_b, 2, 0, -1, &a);
	if (r < 0)
		return h_fail("rank 0: communicator after the revocation: %s", collc_strerror(r));
	rc_fill(&(struct rc_case){ COLLC_FLOAT32, COLLC_SUM, COUNT, h_seed ^ 0xb1, 2 }, 0, send);
	r = collc_allreduce(a, send, recv, COUNT, COLLC_FLOAT32, COLLC_SUM, &reqs[0]);
	if (r == 0)
		r = collc_wait(ctx, reqs[0], 120000);
	if (r < 0)
		return h_fail("rank 0: all-reduce after the revocation: %s", collc_strerror(r));
	failed |= check_result(recv, 2, h_seed ^ 0xb1, 0, "all-reduce on the new communicator");
	collc_comm_destroy(a);
	collc_disconnect(ctx);
	return failed;
}

/* The new communicator's rank 1 (a fresh process). */
static int newcomer(void *arg)
{
	struct collc_ctx *ctx;
	struct collc_comm *b;
	float *send, *recv;
	collc_req req;
	int r, failed;

	(void)arg;
	r = h_connect(&ctx);
	if (r < 0)
		return h_fail("newcomer: connect: %s", collc_strerror(r));
	if ((r = collc_mem_alloc(ctx, (size_t)COUNT * 4, -1, (void **)&send)) < 0 ||
	    (r = collc_mem_alloc(ctx, (size_t)COUNT * 4, -1, (void **)&recv)) < 0)
		return h_fail("newcomer: collc_mem_alloc: %s", collc_strerror(r));
	r = collc_comm_init(ctx, &S->uid_b, 2, 1, -1, &b);
	if (r < 0)
		return h_fail("newcomer: communicator: %s", collc_strerror(r));
	rc_fill(&(struct rc_case){ COLLC_FLOAT32, COLLC_SUM, COUNT, h_seed ^ 0xb1, 2 }, 1, send);
	r = collc_allreduce(b, send, recv, COUNT, COLLC_FLOAT32, COLLC_SUM, &req);
	if (r == 0)
		r = collc_wait(ctx, req, 120000);
	if (r < 0)
		return h_fail("newcomer: all-reduce: %s", collc_strerror(r));
	failed = check_result(recv, 2, h_seed ^ 0xb1, 1, "all-reduce on the new communicator");
	collc_comm_destroy(b);
	collc_disconnect(ctx);
	return failed;
}

static double aborted_items(void)
{
	struct json *st = rel_status();
	double n;

	if (!st)
		return -1;
	n = json_num(json_get(json_get(st, "totals"), "aborted_items"), -1);
	json_free(st);
	return n;
}

/* Waits until collcd reports collectives of some communicator in the executor. */
static int wait_inflight(int timeout_ms)
{
	uint64_t end = h_now_ns() + (uint64_t)timeout_ms * 1000000;

	while (h_now_ns() < end) {
		struct json *st = rel_status();
		const struct json *comms = st ? json_get(st, "comms") : NULL;
		int found = 0;

		for (size_t i = 0; comms && json_at(comms, i); i++)
			if (json_num(json_get(json_at(comms, i), "inflight"), 0) >= 1)
				found = 1;
		json_free(st);
		if (found)
			return 0;
		h_sleep_us(2000);
	}
	return -ETIMEDOUT;
}

static int scenario(uint32_t which, uint64_t bound_ms)
{
	const char *name = which == 0 ? "kill" : "abort";
	pid_t pid[2], nc;
	double before, after;
	uint64_t last, took;
	int failed = 0;

	memset(S, 0, sizeof(*S));
	S->scenario = which;
	h_unique_ids(&S->uid_warm, 1);
	h_unique_ids(&S->uid_a, 1);
	h_unique_ids(&S->uid_b, 1);
	before = aborted_items();
	for (int r = 0; r < 2; r++)
		pid[r] = h_fork(rank_main, (void *)(intptr_t)r);
	nc = h_fork(newcomer, NULL);
	if (h_wait_at_least(&S->submitted, 2, 240000) < 0)
		h_die("%s: the ranks did not queue their all-reduces", name);
	if (wait_inflight(30000) < 0)
		h_die("%s: collcd never reported the queued all-reduces in the executor", name);
	h_log("%s: one queue of %u x 64 MiB all-reduces took %.0f ms in the warm-up; revoking now",
	      name, S->queue, (double)S->warm_ns * S->queue / 1e6);
	if (which == 0) {
		S->t_event = h_now_ns();
		kill(pid[1], SIGKILL);
	} else {
		S->t_event = h_now_ns();
		h_store(&S->go_abort, 1);
	}
	failed |= h_reap_one_ok(pid[0], 240000, "rank 0");
	if (which == 0)
		h_reap_one(pid[1], 10000, NULL);
	else
		failed |= h_reap_one_ok(pid[1], 60000, "rank 1");
	failed |= h_reap_one_ok(nc, 240000, "newcomer");
	if (failed)
		return failed;

	if (!S->t_last_err[0])
		return h_fail("%s: the whole queue of %u completed before the %s: make it longer",
			      name, S->queue, name);
	last = S->t_last_err[0] > S->t_last_err[1] ? S->t_last_err[0] : S->t_last_err[1];
	took = last > S->t_event ? last - S->t_event : 0;
	after = aborted_items();
	h_log("%s: the last of %u queued all-reduces ended %.2f ms after the %s (the queue runs %.0f ms); "
	      "work items abandoned in the executor: %.0f",
	      name, S->queue, (double)took / 1e6, which == 0 ? "kill" : "abort",
	      (double)S->warm_ns * S->queue / 1e6, after - before);
	if (took > bound_ms * 1000000)
		failed |= h_fail("%s: errors came %.1f ms after the %s (bound %" PRIu64 " ms)",
				 name, (double)took / 1e6, name, bound_ms);
	if (!(after > before))
		failed |= h_fail(
			"%s: status counts no abandoned work item (aborted_items %.0f -> %.0f)",
			name, before, after);
	return failed;
}

int main(int argc, char **argv)
{
	uint64_t bound_ms = rel_env_u64("COLLC_KILL_BOUND_MS", h_tsan() ? 500 : 100);
	int failed = 0;

	rel_init("rel_inflight", argc, argv, 600);
	h_daemon_start(NULL);
	S = h_shared(sizeof(*S));
	failed |= scenario(0, bound_ms);
	if (!failed)
		failed |= scenario(1, bound_ms);
	if (!h_daemon_alive())
		failed |= h_fail("collcd died");
	return h_finish(failed);
}
