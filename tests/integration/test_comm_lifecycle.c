/* SPDX-License-Identifier: MIT */
/*
 * Communicator lifecycle, 3 ranks each:
 *  1. collc_comm_abort by rank 2 while ranks 0 and 1 wait in an all-reduce:
 *     both get -ECANCELED within 1 s, and so does every later collective on
 *     that communicator, on every rank (header: "pending and later
 *     collectives end with -ECANCELED");
 *  2. collc_comm_destroy by rank 2 while ranks 0 and 1 wait: they get an
 *     error within 1 s instead of waiting forever;
 *  3. collc_event_fd: it becomes readable when a completion waits, and
 *     collc_test then reports the request done;
 * and after each, a new communicator of the same processes works.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "refcheck.h"

#define NRANKS   3
#define COUNT    4096
#define LIMIT_NS 1000000000ull

struct shared {
	struct h_barrier bar;
	struct collc_unique_id ids[4];
	uint64_t t_event;
};
static struct shared *sh;
static int late_failed;

static int good(struct collc_ctx *ctx, struct collc_comm *comm, int rank, float *send, float *recv,
		uint64_t seed, const char *what)
{
	struct rc_case c = { COLLC_FLOAT32, COLLC_SUM, COUNT, seed };

	return h_allreduce(&c, ctx, comm, rank, NRANKS, send, recv, what);
}

/* Ranks 0 and 1 submit an all-reduce (into *req), then every rank meets at the barrier. */
static int submit_then_meet(struct collc_comm *comm, int rank, float *send, float *recv,
			    collc_req *req)
{
	int r;

	if (rank < 2) {
		r = collc_allreduce(comm, send, recv, COUNT, COLLC_FLOAT32, COLLC_SUM, req);
		if (r < 0)
			return h_fail("rank %d: collc_allreduce: %s", rank, collc_strerror(r));
	}
	if (h_barrier_wait(&sh->bar, 10000) < 0)
		return h_fail("barrier timed out");
	return 0;
}

/* Ranks 0 and 1 wait in an all-reduce; rank 2 aborts (abort=1) or destroys the communicator. */
static int ended_by_rank2(struct collc_ctx *ctx, struct collc_comm *comm, int rank, float *send,
			  float *recv, int abort)
{
	const char *how = abort ? "collc_comm_abort" : "collc_comm_destroy";
	collc_req req;
	uint64_t t0;
	int r;

	if (submit_then_meet(comm, rank, send, recv, &req))
		return 1;
	t0 = h_now_ns();
	if (rank == 2) {
		r = abort ? collc_comm_abort(comm) : collc_comm_destroy(comm);
		if (r < 0)
			return h_fail("rank 2: %s: %s", how, collc_strerror(r));
	} else {
		r = collc_wait(ctx, req, 5000);
		if (abort ? r != -ECANCELED : (r >= 0 || r == -EAGAIN))
			return h_fail(
				"rank %d: rank 2 called %s while this rank waited: collc_wait returned "
				"%d (%s) after %.0f ms, want %s",
				rank, how, r, collc_strerror(r), (double)(h_now_ns() - t0) / 1e6,
				abort ? "-ECANCELED" : "an error");
		if (h_now_ns() - t0 > LIMIT_NS)
			return h_fail("rank %d: %s: the waiter returned only after %.0f ms", rank,
				      how, (double)(h_now_ns() - t0) / 1e6);
		if (rank == 0)
			h_log("rank 2 called %s while ranks 0 and 1 waited: collc_wait returned %d (%s) "
			      "after %.1f ms",
			      how, r, collc_strerror(r), (double)(h_now_ns() - t0) / 1e6);
	}
	if (abort) {
		/* Later collectives on the aborted communicator, on every rank. */
		r = collc_allreduce(comm, send, recv, COUNT, COLLC_FLOAT32, COLLC_SUM, &req);
		if (r == 0)
			r = collc_wait(ctx, req, 2000);
		if (r != -ECANCELED)
			/* Recorded, not fatal: the phases after this one still run. */
			late_failed |=
				h_fail("rank %d: an all-reduce submitted after collc_comm_abort "
				       "returned %d (%s), want -ECANCELED",
				       rank, r, collc_strerror(r));
		else if (rank == 2)
			h_log("all-reduces submitted after collc_comm_abort end with -ECANCELED");
		collc_comm_destroy(comm);
	} else if (rank < 2) {
		collc_comm_destroy(comm);
	}
	return 0;
}

static int rank_main(int rank, int nranks, void *arg)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	float *send, *recv;
	collc_req req;
	int r, efd;

	(void)arg;
	r = collc_connect(h_sock, &ctx);
	if (r < 0)
		return h_fail("rank %d: collc_connect: %s", rank, collc_strerror(r));
	r = collc_mem_alloc(ctx, COUNT * 4, -1, (void **)&send);
	if (r == 0)
		r = collc_mem_alloc(ctx, COUNT * 4, -1, (void **)&recv);
	if (r < 0)
		return h_fail("collc_mem_alloc: %s", collc_strerror(r));
	for (int phase = 0; phase < 2; phase++) {
		r = collc_comm_init(ctx, &sh->ids[phase], nranks, rank, -1, &comm);
		if (r < 0)
			return h_fail("rank %d: collc_comm_init: %s", rank, collc_strerror(r));
		if (good(ctx, comm, rank, send, recv, h_seed + (uint64_t)phase,
			 "all-reduce before"))
			return 1;
		if (ended_by_rank2(ctx, comm, rank, send, recv, phase == 0))
			return 1;
	}
	r = collc_comm_init(ctx, &sh->ids[2], nranks, rank, -1, &comm);
	if (r < 0)
		return h_fail("rank %d: collc_comm_init after abort and destroy: %s", rank,
			      collc_strerror(r));
	if (good(ctx, comm, rank, send, recv, h_seed + 7, "all-reduce on a new communicator"))
		return 1;
	if (rank == 0)
		h_log("a new communicator of the same processes and connections works afterwards");

	/* 3: the event fd. Rank 2 submits last, after rank 0 started polling. */
	efd = collc_event_fd(ctx);
	if (efd < 0)
		return h_fail("rank %d: collc_event_fd: %s", rank, collc_strerror(efd));
	if (submit_then_meet(comm, rank, send, recv, &req))
		return 1;
	if (rank == 2) {
		usleep(50000);
		r = collc_allreduce(comm, send, recv, COUNT, COLLC_FLOAT32, COLLC_SUM, &req);
		if (r < 0)
			return h_fail("rank 2: collc_allreduce: %s", collc_strerror(r));
	}
	if (rank == 0) {
		struct pollfd p = { .fd = efd, .events = POLLIN };
		uint64_t t0 = h_now_ns();

		if (collc_test(ctx, req) != 0)
			return h_fail("rank 0: the all-reduce completed before rank 2 submitted");
		r = poll(&p, 1, 5000);
		if (r != 1 || !(p.revents & POLLIN))
			return h_fail(
				"rank 0: the event fd did not become readable within 5 s of a "
				"completion (poll %d, revents %#x)",
				r, p.revents);
		r = collc_test(ctx, req);
		if (r != 1)
			return h_fail("rank 0: the event fd was readable but collc_test says %d",
				      r);
		h_log("collc_event_fd became readable %.1f ms after polling started (rank 2 submitted "
		      "after 50 ms); collc_test then reported the request done",
		      (double)(h_now_ns() - t0) / 1e6);
	} else {
		r = collc_wait(ctx, req, 10000);
		if (r < 0)
			return h_fail("rank %d: collc_wait: %s", rank, collc_strerror(r));
	}
	h_leave(ctx, comm);
	return late_failed;
}

int main(int argc, char **argv)
{
	h_init("comm_lifecycle", argc, argv, 60);
	sh = h_shared(sizeof(*sh));
	h_barrier_init(&sh->bar, NRANKS);
	return h_run_comm_test(sh->ids, 3, NRANKS, rank_main, NULL);
}
