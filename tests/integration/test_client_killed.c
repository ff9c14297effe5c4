/* SPDX-License-Identifier: MIT */
/*
 * A client killed mid-collective.
 *
 *   test_client_killed
 *     1. 2 ranks: rank 0 submits an all-reduce; rank 1 SIGKILLs itself
 *        without submitting. Rank 0's collc_wait returns -EPIPE within 1 s of
 *        the kill; later submissions on that communicator fail with -EPIPE
 *        too, at once.
 *     2. 3 ranks: rank 2 dies; both survivors get -EPIPE within 1 s; and
 *        again, but rank 1 submits its part only after rank 2 died: -EPIPE too.
 *     3. 2 ranks, 8 all-reduces of 4 MiB in flight on both sides, then rank 1
 *        dies: each of rank 0's requests ends, either with -EPIPE within 1 s
 *        of the kill or (one collcd was already running) with 0 and a
 *        correct result; nothing hangs.
 *     4. after all that, a NEW communicator with new processes works on the
 *        same collcd.
 *   test_client_killed init
 *     5. a rank killed while its collc_comm_init waits for the others (collcctl
 *        status --json lists the forming communicator with it joined): collcd
 *        keeps running; with 3 ranks, the rank that joined too gets an error
 *        from collc_comm_init within 1 s instead of waiting forever; a new
 *        communicator works afterwards.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "refcheck.h"

#define LIMIT_NS  1000000000ull
#define BIG_COUNT (1u << 20) /* 4 MiB of float32 */
#define NBIG      8

struct shared {
	struct h_barrier bar;
	uint64_t t_kill;
	int victim;
};
static struct shared *sh;
static struct collc_unique_id uid;

static int die_now(void)
{
	__atomic_store_n(&sh->t_kill, h_now_ns(), __ATOMIC_SEQ_CST);
	raise(SIGKILL);
	return 1;
}

static double ms_since_kill(uint64_t t)
{
	uint64_t k = __atomic_load_n(&sh->t_kill, __ATOMIC_SEQ_CST);

	return k && t > k ? (double)(t - k) / 1e6 : 0;
}

/* Phases 1 and 2: the victim never submits. */
static int rank_unsubmitted(int rank, int nranks, void *arg)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	float *buf;
	collc_req req;
	uint64_t t;
	int r;

	(void)arg;
	if (h_join_alloc(&uid, nranks, rank, 4096, &ctx, &comm, (void **)&buf, NULL) < 0)
		return 1;
	if (rank == sh->victim) {
		/* Die once every survivor has submitted. */
		if (h_barrier_wait(&sh->bar, 10000) < 0)
			return h_fail("barrier timed out");
		return die_now();
	}
	r = collc_allreduce(comm, buf, buf, 1000, COLLC_FLOAT32, COLLC_SUM, &req);
	if (r < 0)
		return h_fail("rank %d: collc_allreduce: %s", rank, collc_strerror(r));
	if (h_barrier_wait(&sh->bar, 10000) < 0)
		return h_fail("barrier timed out");
	r = collc_wait(ctx, req, 5000);
	t = h_now_ns();
	if (r != -EPIPE)
		return h_fail(
			"rank %d of %d: rank %d was killed while this rank waited in an all-reduce "
			"that needs it: collc_wait returned %d (%s) after %.1f ms, want -EPIPE",
			rank, nranks, sh->victim, r, collc_strerror(r), ms_since_kill(t));
	if (ms_since_kill(t) > LIMIT_NS / 1e6)
		return h_fail("rank %d: -EPIPE came %.1f ms after the kill (limit 1000 ms)", rank,
			      ms_since_kill(t));
	h_log("rank %d of %d: collc_wait returned -EPIPE %.2f ms after rank %d was killed", rank,
	      nranks, ms_since_kill(t), sh->victim);
	/* Later collectives on the revoked communicator fail at once. */
	t = h_now_ns();
	r = collc_allreduce(comm, buf, buf, 1000, COLLC_FLOAT32, COLLC_SUM, &req);
	if (r == 0)
		r = collc_wait(ctx, req, 2000);
	if (r != -EPIPE)
		return h_fail(
			"rank %d: an all-reduce on the communicator after its rank died returned "
			"%d (%s), want -EPIPE",
			rank, r, collc_strerror(r));
	if (h_now_ns() - t > LIMIT_NS)
		return h_fail("rank %d: the later all-reduce took %.1f ms to fail", rank,
			      (double)(h_now_ns() - t) / 1e6);
	r = collc_comm_destroy(comm);
	if (r < 0 && r != -EPIPE)
		h_log("rank %d: collc_comm_destroy on the revoked communicator: %s (accepted)",
		      rank, collc_strerror(r));
	collc_disconnect(ctx);
	return 0;
}

/*
 * Phase 2b: 3 ranks; rank 0 waits in an all-reduce, rank 2 dies, and only
 * then rank 1 submits its part of that same all-reduce: it must learn that a
 * peer died (-EPIPE), like rank 0.
 */
static int rank_late(int rank, int nranks, void *arg)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	float *buf;
	collc_req req;
	int r = 0;

	(void)arg;
	if (h_join_alloc(&uid, nranks, rank, 4096, &ctx, &comm, (void **)&buf, NULL) < 0)
		return 1;
	if (rank == 0) {
		r = collc_allreduce(comm, buf, buf, 1000, COLLC_FLOAT32, COLLC_SUM, &req);
		if (r < 0)
			return h_fail("rank 0: collc_allreduce: %s", collc_strerror(r));
	}
	if (h_barrier_wait(&sh->bar, 10000) < 0)
		return h_fail("barrier timed out");
	if (rank == sh->victim)
		return die_now();
	if (rank == 1) {
		while (!__atomic_load_n(&sh->t_kill, __ATOMIC_SEQ_CST))
			usleep(1000);
		usleep(100000); /* collcd has noticed the death by now */
		r = collc_allreduce(comm, buf, buf, 1000, COLLC_FLOAT32, COLLC_SUM, &req);
		if (r < 0 && r != -EPIPE)
			return h_fail("rank 1: collc_allreduce after the peer died: %s",
				      collc_strerror(r));
	}
	if (r == 0)
		r = collc_wait(ctx, req, 5000);
	if (r != -EPIPE)
		return h_fail(
			"rank %d of 3: rank 2 died; %s returned %d (%s), want -EPIPE", rank,
			rank == 0 ? "the pending all-reduce"
				  : "rank 1's part of that all-reduce, submitted after the death,",
			r, collc_strerror(r));
	h_log("rank %d of 3: %s -EPIPE", rank,
	      rank == 0 ? "waiting when rank 2 died:" : "submitting its part after rank 2 died:");
	h_leave(ctx, comm);
	return 0;
}

/* Phase 3: collectives in flight on both sides when the victim dies. */
static int rank_inflight(int rank, int nranks, void *arg)
{
	struct rc_case c[NBIG];
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	collc_req req[NBIG];
	char *send, *recv;
	int r, ok = 0, epipe = 0;

	(void)arg;
	if (h_join_alloc(&uid, nranks, rank, (size_t)NBIG * BIG_COUNT * 4, &ctx, &comm,
			 (void **)&send, (void **)&recv) < 0)
		return 1;
	for (int i = 0; i < NBIG; i++) {
		c[i] = (struct rc_case){ COLLC_FLOAT32, COLLC_SUM, BIG_COUNT,
					 h_seed + (uint64_t)i };
		rc_fill(&c[i], rank, send + (size_t)i * BIG_COUNT * 4);
	}
	if (h_barrier_wait(&sh->bar, 10000) < 0)
		return h_fail("barrier timed out");
	for (int i = 0; i < NBIG; i++) {
		r = collc_allreduce(comm, send + (size_t)i * BIG_COUNT * 4,
				    recv + (size_t)i * BIG_COUNT * 4, BIG_COUNT, COLLC_FLOAT32,
				    COLLC_SUM, &req[i]);
		if (r < 0)
			return h_fail("rank %d: collc_allreduce %d: %s", rank, i,
				      collc_strerror(r));
	}
	if (rank == 1)
		return die_now();
	/*
	 * Poll all of them: a collective that was still waiting for the dead
	 * rank ends with -EPIPE within 1 s; one already running in collcd may
	 * finish instead (then with correct data), but nothing may hang.
	 */
	{
		uint64_t t_done[NBIG] = { 0 };
		int res[NBIG], left = NBIG;

		while (left > 0) {
			for (int i = 0; i < NBIG; i++) {
				if (t_done[i])
					continue;
				r = collc_test(ctx, req[i]);
				if (r == 0)
					continue;
				t_done[i] = h_now_ns();
				res[i] = r == 1 ? 0 : r;
				left--;
			}
			if (left && ms_since_kill(h_now_ns()) > 10000)
				return h_fail(
					"rank 0: %d of %d all-reduces still pending 10 s after the peer "
					"was killed",
					left, NBIG);
			usleep(100);
		}
		for (int i = 0; i < NBIG; i++) {
			double ms = ms_since_kill(t_done[i]);

			if (res[i] != 0 && res[i] != -EPIPE)
				return h_fail("rank 0: all-reduce %d: %d (%s), want 0 or -EPIPE", i,
					      res[i], collc_strerror(res[i]));
			if (res[i] == -EPIPE && ms > LIMIT_NS / 1e6)
				return h_fail(
					"rank 0: all-reduce %d ended with -EPIPE %.1f ms after the kill "
					"(limit 1000 ms)",
					i, ms);
			if (res[i] == 0) {
				ok++;
				if (rc_check(&c[i], nranks, recv + (size_t)i * BIG_COUNT * 4,
					     "an all-reduce that completed although its peer died",
					     NULL))
					return 1;
				h_log("rank 0: all-reduce %d (running when the peer died) completed %.1f ms "
				      "after the kill, correct",
				      i, ms);
			} else {
				epipe++;
			}
		}
	}
	h_log("rank 0: %d all-reduces of 4 MiB in flight when rank 1 was killed: %d completed with "
	      "correct results, %d ended with -EPIPE within 1 s of the kill",
	      NBIG, ok, epipe);
	h_leave(ctx, comm);
	return 0;
}

/* A plain, healthy communicator. */
static int rank_healthy(int rank, int nranks, void *arg)
{
	struct rc_case c = { COLLC_FLOAT32, COLLC_SUM, 100000, (h_seed ^ 42) + 1 };

	(void)arg;
	return h_join_allreduce(&uid, &c, 10, rank, nranks, "all-reduce on a new communicator");
}

/* Phase 5: joins and waits in collc_comm_init; the parent kills the victim meanwhile. */
static int rank_joiner(int rank, int nranks, void *arg)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	uint64_t t;
	int r;

	(void)arg;
	r = collc_connect(h_sock, &ctx);
	if (r < 0)
		return h_fail("rank %d: collc_connect: %s", rank, collc_strerror(r));
	r = collc_comm_init(ctx, &uid, nranks, rank, -1, &comm);
	t = h_now_ns();
	if (r == 0)
		return h_fail(
			"rank %d: collc_comm_init succeeded although rank %d died and rank %d never "
			"came",
			rank, sh->victim, nranks - 1);
	if (ms_since_kill(t) > LIMIT_NS / 1e6)
		return h_fail(
			"rank %d: collc_comm_init failed only %.1f ms after a joined rank died",
			rank, ms_since_kill(t));
	h_log("rank %d: collc_comm_init returned %d (%s) %.1f ms after rank %d was killed while joining",
	      rank, r, collc_strerror(r), ms_since_kill(t), sh->victim);
	collc_disconnect(ctx);
	return 0;
}

static int run_killed(int nranks, int victim, h_rank_fn fn)
{
	pid_t pids[8];
	int st[8], failed = 0;

	h_unique_id(&uid);
	h_barrier_init(&sh->bar, (uint32_t)nranks);
	sh->victim = victim;
	sh->t_kill = 0;
	for (int r = 0; r < nranks; r++)
		pids[r] = h_spawn(fn, r, nranks, NULL);
	h_reap(pids, nranks, st, 10000);
	for (int r = 0; r < nranks; r++) {
		int killed = WIFSIGNALED(st[r]) && WTERMSIG(st[r]) == SIGKILL;

		if (r == victim ? !killed : !(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == 0)) {
			failed = 1;
			h_log("rank %d: unexpected exit status %#x", r, st[r]);
		}
	}
	return failed;
}

static int healthy(const char *when)
{
	int failed;

	if (!h_daemon_alive())
		return h_fail("collcd is not running any more (%s)", when);
	h_unique_id(&uid);
	failed = h_run_ranks(3, rank_healthy, NULL);
	if (!failed)
		h_log("a new 3-rank communicator with new processes, %s: 10 all-reduces correct",
		      when);
	return failed;
}

static int killed_in_init(void)
{
	pid_t pids[2];
	int st[2], failed = 0;

	/* 5a: the only rank that joined a 2-rank communicator dies while it waits. */
	h_unique_id(&uid);
	sh->victim = 0;
	sh->t_kill = 0;
	pids[0] = h_spawn(rank_joiner, 0, 2, NULL);
	/* Kill it only once collcd holds its join: status lists the forming communicator. */
	if (h_wait_forming(2, 0x1, 10000)) {
		kill(pids[0], SIGKILL);
		h_reap(pids, 1, st, 1000);
		return 1;
	}
	sh->t_kill = h_now_ns();
	kill(pids[0], SIGKILL);
	h_reap(pids, 1, st, 1000);
	usleep(300000);
	if (!h_daemon_alive())
		return h_fail(
			"collcd died after a client was killed while its collc_comm_init waited "
			"for the other rank");
	h_log("a rank killed while alone in collc_comm_init of a 2-rank communicator: collcd still runs");
	failed |= healthy("after a rank died in collc_comm_init");
	if (failed)
		return failed;

	/* 5b: 3 ranks; ranks 0 and 1 join, rank 1 dies, rank 2 never comes. */
	h_unique_id(&uid);
	sh->victim = 1;
	sh->t_kill = 0;
	pids[0] = h_spawn(rank_joiner, 0, 3, NULL);
	pids[1] = h_spawn(rank_joiner, 1, 3, NULL);
	/*
	 * Kill rank 1 only once collcd holds both joins: killed before its
	 * comm_init reached collcd, rank 1 would be a rank that never came, and
	 * rank 0 would rightly wait for it.
	 */
	if (h_wait_forming(3, 0x3, 10000)) {
		kill(pids[0], SIGKILL);
		kill(pids[1], SIGKILL);
		h_reap(pids, 2, st, 1000);
		return 1;
	}
	{
		static char out[1 << 16];
		char cmd[512];

		snprintf(cmd, sizeof(cmd), "%s --socket %s status", h_collcctl(), h_sock);
		if (h_run_capture(cmd, out, sizeof(out)) != 0 ||
		    !strstr(out, "forming: 2 joined here (ranks 0,1)"))
			failed |= h_fail("collcctl status does not show the forming communicator "
					 "with ranks 0 and 1 joined:\n%s",
					 out);
	}
	sh->t_kill = h_now_ns();
	kill(pids[1], SIGKILL);
	h_reap(pids, 2, st, 3000);
	if (!(WIFEXITED(st[0]) && WEXITSTATUS(st[0]) == 0))
		failed |= h_fail("rank 0, left waiting in collc_comm_init: exit status %#x", st[0]);
	if (!h_daemon_alive())
		return h_fail(
			"collcd died after a client was killed while its collc_comm_init waited");
	failed |= healthy("after a joined rank died in collc_comm_init");
	return failed;
}

int main(int argc, char **argv)
{
	int init = argc > 1 && strcmp(argv[1], "init") == 0;
	int failed = 0;

	h_init(init ? "client_killed_in_init" : "client_killed", argc, argv, 90);
	sh = h_shared(sizeof(*sh));
	h_daemon_start(NULL);
	if (init)
		return h_finish(killed_in_init());
	/* Each phase has its own communicator: run them all while collcd lives. */
	failed |= run_killed(2, 1, rank_unsubmitted);
	if (h_daemon_alive())
		failed |= run_killed(3, 2, rank_unsubmitted);
	if (h_daemon_alive())
		failed |= run_killed(3, 2, rank_late);
	if (h_daemon_alive())
		failed |= run_killed(2, 1, rank_inflight);
	failed |= healthy("after four communicators lost a rank");
	return h_finish(failed);
}
