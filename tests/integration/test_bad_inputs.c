/* SPDX-License-Identifier: MIT */
/*
 * Bad arguments, 2 ranks. Each call must return a negative errno at once
 * (the exact code where the header or collc(3) documents it), leave its ret_*
 * output untouched, and leave the communicator usable: a correct all-reduce
 * follows the bad calls.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "refcheck.h"

#define NRANKS  2
#define COUNT   1024
#define SLOW_NS 1000000000ull /* a bad call that takes a second has hung somewhere */

static struct collc_unique_id uid, uid2;

struct shared {
	struct h_barrier bar;
};
static struct shared *sh;

static int nchecked;

/*
 * want: the exact code, or 0 for "any negative errno". Runs what the
 * expression did, timed.
 */
static int expect(const char *what, int got, int want, uint64_t t0)
{
	uint64_t dt = h_now_ns() - t0;

	nchecked++;
	if (dt > SLOW_NS)
		return h_fail("%s took %.3f s (a bad call must fail at once)", what,
			      (double)dt / 1e9);
	if (want ? got != want : got >= 0)
		return h_fail("%s returned %d (%s), want %s%d", what, got, collc_strerror(got),
			      want ? "" : "a negative errno, e.g. ", want ? want : -EINVAL);
	return 0;
}

#define BAD_ALLREDUCE(desc, want, s, d, n, dt, op)                                                 \
	do {                                                                                       \
		collc_req req_ = 0xfeedfaceull;                                                    \
		uint64_t t0_ = h_now_ns();                                                         \
		int r_ = collc_allreduce(comm, (s), (d), (n), (dt), (op), &req_);                  \
		failed |= expect("collc_allreduce with " desc, r_, (want), t0_);                   \
		if (r_ < 0 && req_ != 0xfeedfaceull)                                               \
			failed |= h_fail("collc_allreduce with " desc                              \
					 ": ret_req changed on failure");                          \
		if (r_ == 0)                                                                       \
			collc_wait(ctx, req_, 2000);                                               \
	} while (0)

static int good_allreduce(struct collc_ctx *ctx, struct collc_comm *comm, int rank, float *send,
			  float *recv, uint64_t seed, const char *when)
{
	struct rc_case c = { COLLC_FLOAT32, COLLC_SUM, COUNT, seed };

	return h_allreduce(&c, ctx, comm, rank, NRANKS, send, recv, when);
}

static int bad_collectives(struct collc_ctx *ctx, struct collc_comm *comm, int rank, float *send,
			   float *recv)
{
	float stack[COUNT];
	collc_req req;
	uint64_t t0;
	int failed = 0, r;

	memset(stack, 0, sizeof(stack));
	BAD_ALLREDUCE("an unknown dtype (99)", 0, send, recv, COUNT, (collc_dtype)99, COLLC_SUM);
	BAD_ALLREDUCE("an unknown dtype (-1)", 0, send, recv, COUNT, (collc_dtype)-1, COLLC_SUM);
	BAD_ALLREDUCE("the first unknown dtype (COLLC_NUM_DTYPES)", 0, send, recv, COUNT,
		      (collc_dtype)COLLC_NUM_DTYPES, COLLC_SUM);
	BAD_ALLREDUCE("an unknown op (99)", 0, send, recv, COUNT, COLLC_FLOAT32, (collc_redop)99);
	BAD_ALLREDUCE("an unknown op (-1)", 0, send, recv, COUNT, COLLC_FLOAT32, (collc_redop)-1);
	BAD_ALLREDUCE("count one past the registered send buffer", 0, send, recv, COUNT + 1,
		      COLLC_FLOAT32, COLLC_SUM);
	BAD_ALLREDUCE("a range running off the end of the registered buffer", 0, send + COUNT - 4,
		      recv, 5, COLLC_FLOAT32, COLLC_SUM);
	BAD_ALLREDUCE("a receive range running off the end of the registration", 0, send,
		      recv + COUNT - 4, 5, COLLC_FLOAT32, COLLC_SUM);
	BAD_ALLREDUCE("count SIZE_MAX", 0, send, recv, SIZE_MAX, COLLC_FLOAT32, COLLC_SUM);
	BAD_ALLREDUCE("count * 4 overflowing size_t", 0, send, recv, SIZE_MAX / 4 + 2,
		      COLLC_FLOAT32, COLLC_SUM);
	BAD_ALLREDUCE("count * 8 overflowing size_t", 0, send, recv, (SIZE_MAX >> 3) + 1,
		      COLLC_FLOAT64, COLLC_SUM);
	BAD_ALLREDUCE("an unregistered send buffer (stack)", -EINVAL, stack, recv, COUNT,
		      COLLC_FLOAT32, COLLC_SUM);
	BAD_ALLREDUCE("an unregistered receive buffer (stack)", -EINVAL, send, stack, COUNT,
		      COLLC_FLOAT32, COLLC_SUM);
	BAD_ALLREDUCE("a NULL send buffer and count > 0", 0, NULL, recv, COUNT, COLLC_FLOAT32,
		      COLLC_SUM);
	BAD_ALLREDUCE("a NULL receive buffer and count > 0", 0, send, NULL, COUNT, COLLC_FLOAT32,
		      COLLC_SUM);
	t0 = h_now_ns();
	r = collc_allreduce(comm, send, recv, COUNT, COLLC_FLOAT32, COLLC_SUM, NULL);
	failed |= expect("collc_allreduce with a NULL ret_req", r, 0, t0);
	t0 = h_now_ns();
	req = 0xfeedfaceull;
	r = collc_allreduce(NULL, send, recv, COUNT, COLLC_FLOAT32, COLLC_SUM, &req);
	failed |= expect("collc_allreduce with a NULL comm", r, 0, t0);
	t0 = h_now_ns();
	r = collc_broadcast(comm, send, recv, COUNT, COLLC_FLOAT32, NRANKS, &req);
	failed |= expect("collc_broadcast with root == nranks", r, 0, t0);
	t0 = h_now_ns();
	r = collc_broadcast(comm, send, recv, COUNT, COLLC_FLOAT32, -1, &req);
	failed |= expect("collc_broadcast with root -1", r, 0, t0);
	t0 = h_now_ns();
	r = collc_reduce(comm, send, recv, COUNT, COLLC_FLOAT32, COLLC_SUM, 7, &req);
	failed |= expect("collc_reduce with root 7 of 2 ranks", r, 0, t0);
	t0 = h_now_ns();
	r = collc_allgather(comm, send, recv, COUNT, COLLC_FLOAT32, &req);
	failed |= expect("collc_allgather whose receive side (count * nranks) exceeds the buffer",
			 r, 0, t0);
	t0 = h_now_ns();
	r = collc_reduce_scatter(comm, send, recv, COUNT, COLLC_FLOAT32, COLLC_SUM, &req);
	failed |= expect("collc_reduce_scatter whose send side (count * nranks) exceeds the buffer",
			 r, 0, t0);
	if (rank == 0 && !failed)
		h_log("bad all-reduce arguments refused at once, ret_req untouched: unknown dtype (99, -1), "
		      "unknown op (99, -1), count past the registration (3 ways), count overflowing size_t "
		      "(3 ways), unregistered stack send/recv buffers (-EINVAL), NULL buffers with count > 0, "
		      "NULL ret_req, NULL comm; bad roots; allgather/reduce_scatter past the buffer");
	return failed;
}

static int bad_requests(struct collc_ctx *ctx, struct collc_comm *comm, int rank, float *send,
			float *recv)
{
	static const collc_req unknown[] = { 0, 12345678, UINT64_MAX, UINT64_MAX - 1 };
	int failed = 0, r;
	collc_req req;
	uint64_t t0;

	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		char what[96];

		snprintf(what, sizeof(what), "collc_wait on unknown request %#llx",
			 (unsigned long long)unknown[i]);
		t0 = h_now_ns();
		failed |= expect(what, collc_wait(ctx, unknown[i], 1000), -EINVAL, t0);
		snprintf(what, sizeof(what), "collc_test on unknown request %#llx",
			 (unsigned long long)unknown[i]);
		t0 = h_now_ns();
		failed |= expect(what, collc_test(ctx, unknown[i]), -EINVAL, t0);
	}
	t0 = h_now_ns();
	failed |= expect("collc_wait with a NULL ctx", collc_wait(NULL, 1, 0), -EINVAL, t0);
	t0 = h_now_ns();
	failed |= expect("collc_test with a NULL ctx", collc_test(NULL, 1), -EINVAL, t0);
	/* Groups: an end without a start; nesting ends only at the outermost end. */
	t0 = h_now_ns();
	failed |= expect("collc_group_end without collc_group_start", collc_group_end(), -EINVAL, t0);
	nchecked++;
	if (collc_group_start() != 0 || collc_group_start() != 0 || collc_group_end() != 0 ||
	    collc_group_end() != 0)
		failed |= h_fail("a nested pair of empty groups did not return 0 four times");
	t0 = h_now_ns();
	failed |= expect("one collc_group_end too many", collc_group_end(), -EINVAL, t0);

	/* A pending request: rank 1 submits only after rank 0 saw -EAGAIN. */
	if (rank == 0) {
		r = collc_allreduce(comm, send, recv, COUNT, COLLC_FLOAT32, COLLC_SUM, &req);
		if (r < 0)
			return h_fail("allreduce: %s", collc_strerror(r));
		t0 = h_now_ns();
		failed |= expect("collc_wait(timeout 0) on a pending request",
				 collc_wait(ctx, req, 0), -EAGAIN, t0);
		t0 = h_now_ns();
		r = collc_test(ctx, req);
		nchecked++;
		if (r != 0)
			failed |= h_fail("collc_test on a pending request returned %d, want 0", r);
		t0 = h_now_ns();
		r = collc_wait(ctx, req, 50);
		{
			uint64_t dt = h_now_ns() - t0;

			failed |= expect("collc_wait(timeout 50 ms) on a pending request", r,
					 -EAGAIN, t0);
			if (dt < 45000000ull)
				failed |= h_fail("collc_wait(timeout 50 ms) returned after %.1f ms",
						 (double)dt / 1e6);
		}
	}
	if (h_barrier_wait(&sh->bar, 10000) < 0)
		return h_fail("barrier timed out");
	if (rank == 1) {
		r = collc_allreduce(comm, send, recv, COUNT, COLLC_FLOAT32, COLLC_SUM, &req);
		if (r < 0)
			return h_fail("allreduce: %s", collc_strerror(r));
	}
	r = collc_wait(ctx, req, 10000);
	if (r < 0)
		failed |= h_fail("rank %d: the request that was pending did not complete: %s", rank,
				 collc_strerror(r));
	t0 = h_now_ns();
	failed |= expect("a second collc_wait on a request already reported done",
			 collc_wait(ctx, req, 0), -EINVAL, t0);
	if (rank == 0 && !failed)
		h_log("unknown requests (0, 12345678, UINT64_MAX, UINT64_MAX-1, one already reported) get "
		      "-EINVAL from collc_wait and collc_test; wait(0) and wait(50 ms) on a pending request "
		      "get -EAGAIN (after >= 50 ms), collc_test 0; the request then completes");
	return failed;
}

static int bad_comm_init(struct collc_ctx *ctx, int rank)
{
	static const struct {
		int nranks, rank;
		const char *what;
	} cases[] = {
		{ 0, 0, "nranks 0" },
		{ 65, 0, "nranks 65" },
		{ -1, 0, "nranks -1" },
		{ 2, 2, "rank == nranks" },
		{ 2, -1, "rank -1" },
		{ 2, 70, "rank 70 of 2" },
		{ INT32_MIN, 0, "nranks INT_MIN" },
	};
	struct collc_comm *comm = (struct collc_comm *)0x1;
	struct collc_unique_id zero;
	int failed = 0;
	uint64_t t0;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char what[96];

		snprintf(what, sizeof(what), "collc_comm_init with %s", cases[i].what);
		t0 = h_now_ns();
		failed |= expect(what,
				 collc_comm_init(ctx, &uid2, cases[i].nranks, cases[i].rank, -1,
						 &comm),
				 0, t0);
		if (comm != (struct collc_comm *)0x1)
			failed |= h_fail("%s: ret_comm changed on failure", what);
	}
	memset(&zero, 0, sizeof(zero));
	t0 = h_now_ns();
	failed |= expect("collc_comm_init with an id that is all zeros",
			 collc_comm_init(ctx, &zero, 2, rank, -1, &comm), 0, t0);
	t0 = h_now_ns();
	failed |= expect("collc_comm_init with a NULL id",
			 collc_comm_init(ctx, NULL, 2, rank, -1, &comm), 0, t0);
	t0 = h_now_ns();
	failed |= expect("collc_comm_init with a NULL ret_comm",
			 collc_comm_init(ctx, &uid2, 2, rank, -1, NULL), 0, t0);
	t0 = h_now_ns();
	failed |= expect("collc_comm_init with a NULL ctx",
			 collc_comm_init(NULL, &uid2, 2, rank, -1, &comm), 0, t0);
	t0 = h_now_ns();
	failed |= expect("collc_comm_init with device -2",
			 collc_comm_init(ctx, &uid2, 2, rank, -2, &comm), 0, t0);
	if (comm != (struct collc_comm *)0x1)
		failed |= h_fail("collc_comm_init: ret_comm changed on failure");
	if (rank == 0 && !failed)
		h_log("collc_comm_init refused at once: nranks 0, 65, -1, INT_MIN; rank -1, == nranks, 70; "
		      "all-zero id, NULL id, NULL ret_comm, NULL ctx, device -2");
	return failed;
}

static int bad_memory(struct collc_ctx *ctx, int rank)
{
	void *p = (void *)0x1;
	int failed = 0;
	uint64_t t0;

	t0 = h_now_ns();
	failed |= expect("collc_mem_alloc of 0 bytes", collc_mem_alloc(ctx, 0, -1, &p), 0, t0);
	t0 = h_now_ns();
	failed |= expect("collc_mem_alloc of SIZE_MAX bytes",
			 collc_mem_alloc(ctx, SIZE_MAX, -1, &p), 0, t0);
	t0 = h_now_ns();
	failed |= expect("collc_mem_alloc with a NULL ret_ptr",
			 collc_mem_alloc(ctx, 4096, -1, NULL), 0, t0);
	t0 = h_now_ns();
	failed |= expect("collc_mem_alloc on device -2", collc_mem_alloc(ctx, 4096, -2, &p), 0, t0);
	if (p != (void *)0x1)
		failed |= h_fail("collc_mem_alloc: ret_ptr changed on failure");
	t0 = h_now_ns();
	failed |= expect("collc_mem_free of NULL", collc_mem_free(ctx, NULL), 0, t0);
	t0 = h_now_ns();
	failed |= expect("collc_mem_free of a stack address", collc_mem_free(ctx, &p), 0, t0);
	t0 = h_now_ns();
	failed |= expect("collc_mem_register of NULL", collc_mem_register(ctx, NULL, 4096, -1), 0,
			 t0);
	t0 = h_now_ns();
	failed |= expect("collc_mem_register of a range wrapping the address space",
			 collc_mem_register(ctx, (void *)(UINTPTR_MAX - 100), 4096, -1), 0, t0);
	if (rank == 0 && !failed)
		h_log("memory calls refused at once: alloc of 0 and SIZE_MAX bytes, NULL ret_ptr, device -2; "
		      "free of NULL and of a stack address; register of NULL and of a wrapping range");
	return failed;
}

static int rank_main(int rank, int nranks, void *arg)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	float *send, *recv;
	int failed = 0;

	(void)arg;
	if (h_join_alloc(&uid, nranks, rank, COUNT * 4, &ctx, &comm, (void **)&send,
			 (void **)&recv) < 0)
		return 1;
	if (good_allreduce(ctx, comm, rank, send, recv, h_seed, "all-reduce before the bad calls"))
		return 1;
	failed |= bad_collectives(ctx, comm, rank, send, recv);
	if (good_allreduce(ctx, comm, rank, send, recv, h_seed + 1,
			   "all-reduce after bad collective arguments"))
		return 1;
	failed |= bad_requests(ctx, comm, rank, send, recv);
	if (good_allreduce(ctx, comm, rank, send, recv, h_seed + 2,
			   "all-reduce after bad requests"))
		return 1;
	failed |= bad_comm_init(ctx, rank);
	failed |= bad_memory(ctx, rank);
	if (good_allreduce(ctx, comm, rank, send, recv, h_seed + 3,
			   "all-reduce after bad comm_init and memory calls"))
		return 1;
	if (rank == 0)
		h_log("%d bad calls checked; the communicator still works: correct all-reduces before, "
		      "between and after them",
		      nchecked);
	h_leave(ctx, comm);
	return failed;
}

int main(int argc, char **argv)
{
	h_init("bad_inputs", argc, argv, 60);
	h_daemon_start(NULL);
	h_unique_id(&uid);
	h_unique_id(&uid2);
	sh = h_shared(sizeof(*sh));
	h_barrier_init(&sh->bar, NRANKS);
	return h_finish(h_run_ranks(NRANKS, rank_main, NULL));
}
