/* SPDX-License-Identifier: MIT */
/*
 * Submitting more collectives than the rings hold, without waiting in
 * between: 2 ranks each submit 6000 small all-reduces back to back (more
 * than the SQ's 1024 entries, the communicator window's 1024 and the CQ's
 * 4096 entries). Each collc_allreduce must return promptly: 0, or a
 * negative errno such as -EBUSY / -EAGAIN ("too many requests in progress")
 * after which the rank waits for its oldest request and tries again. It
 * must never block forever. Then every request is waited for and checked.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define NRANKS       2
#define N            6000
#define COUNT        4
#define CALL_LIMIT_S 5

static struct collc_unique_id uid;
static volatile int current_call = -1, current_rank = -1;

static void on_stuck(int sig)
{
	char msg[256];
	int n;

	(void)sig;
	n = snprintf(
		msg, sizeof(msg),
		"[backpressure] FAIL: rank %d: collc_allreduce number %d (none waited for yet) has "
		"not returned for %d s: submission blocks forever once the rings are full\n",
		current_rank, current_call, CALL_LIMIT_S);
	if (write(STDOUT_FILENO, msg, (size_t)n) < 0) {
		/* nothing to do */
	}
	_exit(1);
}

static uint32_t val(int r, int it, int k)
{
	return (uint32_t)it * 2654435761u + (uint32_t)r * 40503u + (uint32_t)k;
}

static int rank_main(int rank, int nranks, void *arg)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	uint32_t *send, *recv;
	collc_req *req = calloc(N, sizeof(*req));
	int r, next_wait = 0, busy = 0, first_busy = -1;

	(void)arg;
	current_rank = rank;
	signal(SIGALRM, on_stuck);
	if (h_join_alloc(&uid, nranks, rank, (size_t)N * COUNT * 4, &ctx, &comm, (void **)&send,
			 (void **)&recv) < 0)
		return 1;
	for (int i = 0; i < N; i++)
		for (int k = 0; k < COUNT; k++)
			send[i * COUNT + k] = val(rank, i, k);
	for (int i = 0; i < N; i++) {
		current_call = i;
		alarm(CALL_LIMIT_S);
		r = collc_allreduce(comm, send + i * COUNT, recv + i * COUNT, COUNT, COLLC_UINT32,
				    COLLC_SUM, &req[i]);
		alarm(0);
		if (r == 0)
			continue;
		if (r != -EBUSY && r != -EAGAIN && r != -ENOBUFS)
			return h_fail("rank %d: collc_allreduce %d: %d (%s)", rank, i, r,
				      collc_strerror(r));
		/* Refused for now: make room by waiting for the oldest, then try again. */
		if (first_busy < 0)
			first_busy = i;
		busy++;
		if (next_wait >= i)
			return h_fail(
				"rank %d: collc_allreduce %d refused with nothing in flight: %s",
				rank, i, collc_strerror(r));
		r = collc_wait(ctx, req[next_wait], 10000);
		if (r < 0)
			return h_fail("rank %d: collc_wait %d: %s", rank, next_wait,
				      collc_strerror(r));
		next_wait++;
		i--;
	}
	for (int i = next_wait; i < N; i++) {
		r = collc_wait(ctx, req[i], 10000);
		if (r < 0)
			return h_fail("rank %d: collc_wait %d: %s", rank, i, collc_strerror(r));
	}
	for (int i = 0; i < N; i++)
		for (int k = 0; k < COUNT; k++) {
			uint32_t want = 0;

			for (int q = 0; q < nranks; q++)
				want += val(q, i, k);
			if (recv[i * COUNT + k] != want)
				return h_fail("rank %d: all-reduce %d element %d is %u, want %u",
					      rank, i, k, recv[i * COUNT + k], want);
		}
	if (rank == 0) {
		if (busy)
			h_log("%d all-reduces submitted back to back: the first refusal (%s-style) came at "
			      "number %d, %d refusals in all, each resolved by waiting for the oldest; every "
			      "result correct",
			      N, "EBUSY", first_busy, busy);
		else
			h_log("%d all-reduces submitted back to back without a refusal or a block; every "
			      "result correct",
			      N);
	}
	h_leave(ctx, comm);
	free(req);
	return 0;
}

int main(int argc, char **argv)
{
	h_init("backpressure", argc, argv, 60);
	return h_run_comm_test(&uid, 1, NRANKS, rank_main, NULL);
}
