/* SPDX-License-Identifier: MIT */
/*
 * SIGSTOP of a rank with the operation timeout firing, twice:
 *   A. op_timeout_ms=300 set at run time with `collcctl set`;
 *   B. op_timeout_ms back to 0 and collc_comm_set_timeout(comm, 300).
 *
 * Rank 1 joins, then SIGSTOPs itself before submitting. Rank 0's all-reduce
 * must end with -ETIMEDOUT after 250 ms..2 s; `collcctl status --json` then
 * names rank 1 in the communicator's timed_out_ranks. After SIGCONT, rank 1's
 * late submission of that collective ends with -ETIMEDOUT too, and the next
 * collective on the same communicator succeeds for both, with the right
 * result. Scenario A also checks that a slow rank *within* the limit is not
 * timed out.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rel.h"
#include "refcheck.h"

#define COUNT 4096

struct shared {
	struct collc_unique_id uid;
	int use_comm_timeout;
	uint32_t joined, stopped, timed_out, late_done, ready_next;
	uint64_t elapsed_ns;
	int32_t res0, late_res;
};

static struct shared *S;

static int one_allreduce(struct collc_ctx *ctx, struct collc_comm *comm, float *send, float *recv,
			 int rank, uint64_t key, int *ret_res, uint64_t *ret_ns)
{
	struct rc_case c = { COLLC_FLOAT32, COLLC_SUM, COUNT, key, 2 };
	char what[32];
	collc_req req;
	uint64_t t0;
	int r;

	rc_fill(&c, rank, send);
	t0 = h_now_ns();
	r = collc_allreduce(comm, send, recv, COUNT, COLLC_FLOAT32, COLLC_SUM, &req);
	if (r == 0)
		r = collc_wait(ctx, req, 15000);
	*ret_ns = h_now_ns() - t0;
	*ret_res = r;
	snprintf(what, sizeof(what), "rank %d: result", rank);
	return r == 0 ? rc_check(&c, 2, recv, what, NULL) : 0;
}

static int rank_main(void *arg)
{
	int rank = (int)(intptr_t)arg, res, failed = 0;
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	float *send, *recv;
	uint64_t ns;
	int r;

	if (h_join_alloc(&S->uid, 2, rank, COUNT * 4, &ctx, &comm, (void **)&send, (void **)&recv) <
	    0)
		return 1;
	if (S->use_comm_timeout && rank == 0) {
		r = collc_comm_set_timeout(comm, 300);
		if (r < 0)
			return h_fail("collc_comm_set_timeout(300): %s", collc_strerror(r));
	}
	/* Within the limit nothing times out: rank 1 is 100 ms late once. */
	if (!S->use_comm_timeout) {
		if (rank == 1)
			h_sleep_us(100000);
		failed |= one_allreduce(ctx, comm, send, recv, rank, h_seed ^ 1, &res, &ns);
		if (res != 0)
			return h_fail(
				"rank %d: a collective 100 ms late (limit 300 ms) ended with %s",
				rank, collc_strerror(res));
	}
	h_add(&S->joined, 1);
	h_wait_at_least(&S->joined, 2, 10000);
	if (rank == 1) {
		raise(SIGSTOP);
		/* Resumed: the others gave up on this collective long ago. */
		failed |= one_allreduce(ctx, comm, send, recv, rank, h_seed ^ 2, &res, &ns);
		S->late_res = res;
		if (res != -ETIMEDOUT)
			failed |= h_fail(
				"rank 1: late submission ended with %d (%s), want -ETIMEDOUT", res,
				collc_strerror(res));
		else
			h_log("rank 1: late submission ended with -ETIMEDOUT after %.1f ms",
			      (double)ns / 1e6);
		h_store(&S->late_done, 1);
	} else {
		if (h_wait_at_least(&S->stopped, 1, 10000) < 0)
			return h_fail("rank 0: rank 1 never stopped");
		failed |= one_allreduce(ctx, comm, send, recv, rank, h_seed ^ 2, &res, &ns);
		S->res0 = res;
		S->elapsed_ns = ns;
		h_store(&S->timed_out, 1);
		if (h_wait_at_least(&S->late_done, 1, 20000) < 0)
			return h_fail("rank 0: rank 1 never came back");
	}
	/* The next collective on the same communicator works for both. */
	h_add(&S->ready_next, 1);
	h_wait_at_least(&S->ready_next, 2, 10000);
	failed |= one_allreduce(ctx, comm, send, recv, rank, h_seed ^ 3, &res, &ns);
	if (res != 0)
		failed |= h_fail(
			"rank %d: the collective after the timeout ended with %d (%s), want 0",
			rank, res, collc_strerror(res));
	h_leave(ctx, comm);
	return failed;
}

static int scenario(int use_comm_timeout)
{
	const char *name = use_comm_timeout ? "collc_comm_set_timeout(300)"
					    : "collcctl set op_timeout_ms=300";
	char out[256];
	pid_t pid[2];
	int failed = 0, st;
	struct json *status;

	memset(S, 0, sizeof(*S));
	S->use_comm_timeout = use_comm_timeout;
	h_log("scenario: %s", name);
	if (rel_ctl(out, sizeof(out),
		    use_comm_timeout ? "set op_timeout_ms=0" : "set op_timeout_ms=300") != 0)
		return h_fail("collcctl set op_timeout_ms: %s", out);
	if (rel_ctl(out, sizeof(out), "get op_timeout_ms") != 0 ||
	    atoi(out) != (use_comm_timeout ? 0 : 300))
		return h_fail("collcctl get op_timeout_ms printed '%s'", out);
	h_unique_ids(&S->uid, 1);
	pid[0] = h_fork(rank_main, (void *)0);
	pid[1] = h_fork(rank_main, (void *)1);
	/* Rank 1 stops itself. */
	if (waitpid(pid[1], &st, WUNTRACED) != pid[1] || !WIFSTOPPED(st)) {
		failed = h_fail("rank 1 did not stop");
		goto out;
	}
	h_store(&S->stopped, 1);
	if (h_wait_at_least(&S->timed_out, 1, 10000) < 0) {
		failed = h_fail("rank 0's collective did not end within 10 s");
		goto out;
	}
	if (S->res0 != -ETIMEDOUT)
		failed |= h_fail("rank 0: collective ended with %d (%s), want -ETIMEDOUT", S->res0,
				 collc_strerror(S->res0));
	if (S->elapsed_ns < 250000000ull || S->elapsed_ns > 2000000000ull)
		failed |= h_fail("rank 0: -ETIMEDOUT after %.1f ms, want 250 ms..2 s",
				 (double)S->elapsed_ns / 1e6);
	h_log("rank 0: -ETIMEDOUT after %.1f ms (limit 300 ms)", (double)S->elapsed_ns / 1e6);
	status = rel_status();
	if (!status) {
		failed = 1;
	} else {
		const struct json *comms = json_get(status, "comms"), *cm = NULL;

		for (size_t i = 0; comms && i < comms->n; i++)
			if (json_num(json_get(json_at(comms, i), "timeouts"), 0) >= 1)
				cm = json_at(comms, i);
		if (!cm) {
			failed |= h_fail("status --json: no communicator with timeouts >= 1");
		} else {
			const struct json *tr = json_get(cm, "timed_out_ranks");

			if (!tr || tr->n != 1 || !json_has_num(tr, 1))
				failed |= h_fail("status --json: timed_out_ranks should be [1]");
			if (use_comm_timeout && json_num(json_get(cm, "timeout_ms"), -2) != 300)
				failed |= h_fail("status --json: timeout_ms %.0f, want 300",
						 json_num(json_get(cm, "timeout_ms"), -2));
			h_log("status: communicator %.0f: timeouts %.0f, timed_out_ranks [1], timeout_ms %.0f",
			      json_num(json_get(cm, "id"), -1),
			      json_num(json_get(cm, "timeouts"), -1),
			      json_num(json_get(cm, "timeout_ms"), -2));
		}
		json_free(status);
	}
	kill(pid[1], SIGCONT);
out:
	kill(pid[1], SIGCONT);
	failed |= h_reap_all_ok(pid, 2, 20000, "rank");
	return failed;
}

int main(int argc, char **argv)
{
	int failed = 0;

	rel_init("rel_timeout", argc, argv, 90);
	h_daemon_start(NULL);
	S = h_shared(sizeof(*S));
	failed |= scenario(0);
	if (!failed)
		failed |= scenario(1);
	return h_finish(failed);
}
