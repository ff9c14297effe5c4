/* SPDX-License-Identifier: MIT */
/*
 * collcd dies under its clients (SIGKILL, as after a sticky CUDA error, when
 * systemd restarts it):
 *  - a rank waiting in collc_wait gets a negative errno (-ECONNRESET) within
 *    1 s, another rank's next submission or wait fails within 1 s too, and
 *    collc_connect is refused while no collcd runs;
 *  - a new collcd on the same socket path (the dead one left its socket file
 *    behind) serves new processes, and a process of the old generation can
 *    connect again and run collectives with them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "refcheck.h"

#define COUNT    10000
#define LIMIT_NS 1000000000ull

struct shared {
	struct h_barrier bar;
	uint64_t t_kill;
	struct collc_unique_id uid2; /* from the new collcd, made after the old ranks forked */
};
static struct shared *sh;
static struct collc_unique_id uid;

static int allreduce_ok(struct collc_ctx *ctx, struct collc_comm *comm, int rank, int nranks,
			float *send, float *recv, uint64_t seed, const char *what)
{
	struct rc_case c = { COLLC_FLOAT32, COLLC_SUM, COUNT, seed };

	return h_allreduce(&c, ctx, comm, rank, nranks, send, recv, what);
}

static int join_and_run(const struct collc_unique_id *id, int rank, int nranks, const char *what)
{
	struct rc_case c = { COLLC_FLOAT32, COLLC_SUM, COUNT, h_seed };

	return h_join_allreduce(id, &c, 5, rank, nranks, what);
}

static int old_generation(int rank, int nranks, void *arg)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	float *send, *recv;
	collc_req req;
	uint64_t t;
	double ms;
	int r;

	(void)arg;
	if (h_join_alloc(&uid, nranks, rank, COUNT * 4, &ctx, &comm, (void **)&send,
			 (void **)&recv) < 0)
		return 1;
	if (allreduce_ok(ctx, comm, rank, nranks, send, recv, h_seed, "all-reduce before the kill"))
		return 1;
	/* Rank 0 waits in an all-reduce rank 1 never joins; then collcd is killed. */
	if (rank == 0) {
		r = collc_allreduce(comm, send, recv, COUNT, COLLC_FLOAT32, COLLC_SUM, &req);
		if (r < 0)
			return h_fail("rank 0: collc_allreduce: %s", collc_strerror(r));
	}
	if (h_barrier_wait(&sh->bar, 10000) < 0)
		return h_fail("barrier timed out");
	if (rank == 0) {
		r = collc_wait(ctx, req, 5000);
	} else {
		/* Wait for the kill, then submit. */
		while (!__atomic_load_n(&sh->t_kill, __ATOMIC_SEQ_CST))
			usleep(1000);
		usleep(20000);
		r = collc_allreduce(comm, send, recv, COUNT, COLLC_FLOAT32, COLLC_SUM, &req);
		if (r == 0)
			r = collc_wait(ctx, req, 5000);
	}
	t = h_now_ns();
	ms = (double)(t - __atomic_load_n(&sh->t_kill, __ATOMIC_SEQ_CST)) / 1e6;
	if (r >= 0 || r == -EAGAIN)
		return h_fail("rank %d: collcd was killed, yet %s returned %d (%s) %.0f ms later",
			      rank, rank == 0 ? "the pending collc_wait" : "a new all-reduce", r,
			      collc_strerror(r), ms);
	if (ms > LIMIT_NS / 1e6)
		return h_fail("rank %d: the error came %.0f ms after collcd died (limit 1000 ms)",
			      rank, ms);
	h_log("rank %d: %s returned %d (%s) %.1f ms after collcd was killed", rank,
	      rank == 0 ? "collc_wait on the pending all-reduce"
			: "a new all-reduce (submit + wait)",
	      r, collc_strerror(r), ms);
	r = collc_comm_destroy(comm);
	if (r < 0)
		h_log("rank %d: collc_comm_destroy with collcd gone: %s (accepted)", rank,
		      collc_strerror(r));
	collc_disconnect(ctx);
	if (rank == 0) {
		struct collc_ctx *c2;

		r = collc_connect(h_sock, &c2);
		if (r == 0)
			return h_fail("collc_connect succeeded with no collcd running");
		h_log("collc_connect with no collcd running: %d (%s)", r, collc_strerror(r));
	}
	/* Let the parent start the new collcd, then rank 0 comes back with a new connection. */
	if (h_barrier_wait(&sh->bar, 20000) < 0)
		return h_fail("barrier timed out");
	if (rank == 0)
		return join_and_run(&sh->uid2, 0, 2, "an old process after the restart");
	return 0;
}

static int new_generation(int rank, int nranks, void *arg)
{
	(void)arg;
	return join_and_run(&sh->uid2, rank, nranks, "a new process after the restart");
}

int main(int argc, char **argv)
{
	pid_t pids[3];
	int failed;

	h_init("daemon_restart", argc, argv, 60);
	sh = h_shared(sizeof(*sh));
	h_barrier_init(&sh->bar, 3);
	h_daemon_start(NULL);
	h_unique_id(&uid);
	pids[0] = h_spawn(old_generation, 0, 2, NULL);
	pids[1] = h_spawn(old_generation, 1, 2, NULL);
	if (h_barrier_wait(&sh->bar, 20000) < 0) {
		h_reap(pids, 2, NULL, 0);
		return h_finish(h_fail("the ranks did not get ready"));
	}
	usleep(50000);
	__atomic_store_n(&sh->t_kill, h_now_ns(), __ATOMIC_SEQ_CST);
	h_daemon_kill(SIGKILL);
	h_log("collcd killed with SIGKILL");
	usleep(300000);
	h_daemon_start(NULL);
	h_unique_id(&sh->uid2);
	if (h_barrier_wait(&sh->bar, 20000) < 0) {
		h_reap(pids, 2, NULL, 0);
		return h_finish(h_fail("the old ranks did not survive collcd's death"));
	}
	pids[2] = h_spawn(new_generation, 1, 2, NULL);
	failed = h_reap(pids, 3, NULL, 3000);
	if (!failed)
		h_log("a new collcd on the same socket path: an old process reconnected and a new one "
		      "joined it; 5 all-reduces correct");
	return h_finish(failed);
}
