/* SPDX-License-Identifier: MIT */
/*
 * Threads sharing one collc_ctx (the library has locks for this).
 *
 *   test_threads
 *     2 processes x 4 threads, one ctx per process; thread t uses
 *     communicator t (created one after the other by the main thread). The
 *     threads run 2000 all-reduces each at the same time, half of them
 *     waited with collc_wait and half polled with collc_test; every result
 *     is checked.
 *   test_threads init
 *     2 processes, one ctx each. While a thread waits in collc_comm_init for
 *     a rank that comes 1.5 s later, another thread's collc_mem_alloc on the
 *     same ctx must not wait for it (< 500 ms). Then 2 threads per process:
 *     thread t joins communicator t; process 0 starts thread 0 first, process
 *     1 starts thread 1 first (the other thread follows 300 ms later): both
 *     collc_comm_init calls must return (within 5 s).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "refcheck.h"

#define NTHREADS 4
#define ITERS    2000
#define COUNT    256

struct shared {
	struct collc_unique_id ids[NTHREADS + 1];
};
static struct shared *sh;

struct thr {
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	int proc, t, nprocs, failed, delay_ms;
	uint64_t t_done;
};

/* Traffic */

static void *traffic(void *arg)
{
	struct thr *th = arg;
	float *send, *recv;
	int r;

	r = collc_mem_alloc(th->ctx, COUNT * 4, -1, (void **)&send);
	if (r == 0)
		r = collc_mem_alloc(th->ctx, COUNT * 4, -1, (void **)&recv);
	if (r < 0) {
		th->failed = h_fail("process %d thread %d: collc_mem_alloc: %s", th->proc, th->t,
				    collc_strerror(r));
		return NULL;
	}
	for (int it = 0; it < ITERS; it++) {
		struct rc_case c = { COLLC_FLOAT32, COLLC_SUM, COUNT,
				     h_seed ^ ((uint64_t)th->t << 40) ^ (uint64_t)it };
		char what[96];
		collc_req req;

		rc_fill(&c, th->proc, send);
		r = collc_allreduce(th->comm, send, recv, COUNT, COLLC_FLOAT32, COLLC_SUM, &req);
		if (r == 0 && (it & 1)) {
			uint64_t t0 = h_now_ns();

			while ((r = collc_test(th->ctx, req)) == 0 &&
			       h_now_ns() - t0 < 10000000000ull)
				sched_yield();
			r = r == 1 ? 0 : r == 0 ? -ETIMEDOUT : r;
		} else if (r == 0) {
			r = collc_wait(th->ctx, req, 10000);
		}
		if (r < 0) {
			th->failed = h_fail("process %d thread %d: all-reduce %d: %s", th->proc,
					    th->t, it, collc_strerror(r));
			return NULL;
		}
		snprintf(what, sizeof(what), "process %d thread %d all-reduce %d", th->proc, th->t,
			 it);
		if (rc_check(&c, th->nprocs, recv, what, NULL)) {
			th->failed = 1;
			return NULL;
		}
	}
	return NULL;
}

static int proc_traffic(int proc, int nprocs, void *arg)
{
	struct thr th[NTHREADS];
	pthread_t tid[NTHREADS];
	struct collc_ctx *ctx;
	int r, failed = 0;

	(void)arg;
	r = collc_connect(h_sock, &ctx);
	if (r < 0)
		return h_fail("collc_connect: %s", collc_strerror(r));
	for (int t = 0; t < NTHREADS; t++) {
		th[t] = (struct thr){ .ctx = ctx, .proc = proc, .t = t, .nprocs = nprocs };
		r = collc_comm_init(ctx, &sh->ids[t], nprocs, proc, -1, &th[t].comm);
		if (r < 0)
			return h_fail("process %d: collc_comm_init %d: %s", proc, t,
				      collc_strerror(r));
	}
	for (int t = 0; t < NTHREADS; t++)
		pthread_create(&tid[t], NULL, traffic, &th[t]);
	for (int t = 0; t < NTHREADS; t++) {
		pthread_join(tid[t], NULL);
		failed |= th[t].failed;
		collc_comm_destroy(th[t].comm);
	}
	collc_disconnect(ctx);
	if (proc == 0 && !failed)
		h_log("%d threads per process on one ctx, one communicator each: %d all-reduces each, at "
		      "the same time, half waited and half polled: every result correct",
		      NTHREADS, ITERS);
	return failed;
}

/* comm_init from several threads */

static void *joiner(void *arg)
{
	struct thr *th = arg;
	int r;

	if (th->delay_ms)
		usleep((useconds_t)th->delay_ms * 1000);
	r = collc_comm_init(th->ctx, &sh->ids[th->t], th->nprocs, th->proc, -1, &th->comm);
	th->t_done = h_now_ns();
	if (r < 0)
		th->failed = h_fail("process %d thread %d: collc_comm_init: %s", th->proc, th->t,
				    collc_strerror(r));
	return NULL;
}

static int join_within(pthread_t tid, int ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	return pthread_timedjoin_np(tid, NULL, &ts);
}

static int proc_init(int proc, int nprocs, void *arg)
{
	struct thr th[2];
	pthread_t tid[2];
	struct collc_ctx *ctx;
	uint64_t t0;
	void *p;
	int r, failed = 0;

	(void)arg;
	r = collc_connect(h_sock, &ctx);
	if (r < 0)
		return h_fail("collc_connect: %s", collc_strerror(r));
	/*
	 * A thread waiting in comm_init must not hold up another thread's
	 * mem_alloc. First, because the crossed-order joins below may never end.
	 */
	th[0] = (struct thr){ .ctx = ctx, .proc = proc, .t = NTHREADS, .nprocs = nprocs };
	th[0].delay_ms = proc == 1 ? 1500 : 0;
	pthread_create(&tid[0], NULL, joiner, &th[0]);
	if (proc == 0) {
		usleep(200000); /* thread 0 now waits for process 1 */
		t0 = h_now_ns();
		r = collc_mem_alloc(ctx, 4096, -1, &p);
		if (r < 0)
			failed |= h_fail("collc_mem_alloc: %s", collc_strerror(r));
		else if (h_now_ns() - t0 > 500000000ull)
			failed |= h_fail(
				"collc_mem_alloc took %.0f ms while another thread of the process waited "
				"in collc_comm_init (want < 500 ms): control requests on a ctx queue "
				"behind a comm_init that waits for other ranks",
				(double)(h_now_ns() - t0) / 1e6);
		else
			h_log("collc_mem_alloc took %.1f ms while another thread waited in collc_comm_init",
			      (double)(h_now_ns() - t0) / 1e6);
	}
	pthread_join(tid[0], NULL);
	failed |= th[0].failed;

	/* Crossed start order: process 0 starts thread 0 first, process 1 thread 1. */
	for (int t = 0; t < 2; t++) {
		th[t] = (struct thr){ .ctx = ctx, .proc = proc, .t = t, .nprocs = nprocs };
		th[t].delay_ms = (proc == 0) == (t == 0) ? 0 : 300;
		pthread_create(&tid[t], NULL, joiner, &th[t]);
	}
	for (int t = 0; t < 2; t++)
		if (join_within(tid[t], 5000) != 0) {
			h_fail("process %d: thread %d's collc_comm_init (communicator %d) has not returned "
			       "after 5 s: two threads' comm_inits on one ctx, started in crossed order in "
			       "two processes, deadlock",
			       proc, t, t);
			fflush(NULL);
			_exit(1);
		}
	for (int t = 0; t < 2; t++)
		failed |= th[t].failed;
	if (proc == 0)
		h_log("two threads per process joined two communicators on one ctx in crossed order: "
		      "both collc_comm_init calls returned");
	collc_disconnect(ctx);
	return failed;
}

int main(int argc, char **argv)
{
	int init = argc > 1 && strcmp(argv[1], "init") == 0;

	h_init(init ? "threads_comm_init" : "threads", argc, argv, 90);
	sh = h_shared(sizeof(*sh));
	return h_run_comm_test(sh->ids, NTHREADS + 1, 2, init ? proc_init : proc_traffic, NULL);
}
