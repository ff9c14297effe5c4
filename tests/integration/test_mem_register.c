/* SPDX-License-Identifier: MIT */
/*
 * All-reduce on malloc'ed memory registered with collc_mem_register, 3 ranks:
 *  - registration keeps the contents (and the bytes around the range);
 *  - a large (mmap'ed by malloc) and a small (heap) buffer, out of place and in place;
 *  - a range that starts and ends inside pages of an mmap'ed region;
 *  - after collc_mem_deregister the memory stays usable (and free() works),
 *    and a collective on it is refused with -EINVAL (it is no longer registered);
 *  - with "pages": two small buffers that share a page, registered one after
 *    the other; a buffer registered again after it was deregistered.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "refcheck.h"

#define NRANKS 3

static struct collc_unique_id uid;

/* Shared by the ranks: whether a registration worked everywhere decides whether to run the collective. */
struct shared {
	struct h_barrier bar;
	int failed[2][NRANKS];
};
static struct shared *sh;

/* 1 when every rank reported ok for `phase` (a barrier across the ranks). */
static int all_ok(int phase, int rank, int ok)
{
	sh->failed[phase][rank] = !ok;
	if (h_barrier_wait(&sh->bar, 20000) < 0)
		return 0;
	for (int r = 0; r < NRANKS; r++)
		if (sh->failed[phase][r])
			return 0;
	return 1;
}

/* An all-reduce of c from s into d, waited for; 0 when d holds the right result. */
static int allreduce_check(struct collc_ctx *ctx, struct collc_comm *comm, const struct rc_case *c,
			   const void *s, void *d, const char *what)
{
	collc_req req;
	int r = collc_allreduce(comm, s, d, c->count, c->dtype, c->op, &req);

	if (r < 0)
		return h_fail("%s: collc_allreduce: %s", what, collc_strerror(r));
	r = collc_wait(ctx, req, 10000);
	if (r < 0)
		return h_fail("%s: collc_wait: %s", what, collc_strerror(r));
	return rc_check(c, NRANKS, d, what, NULL);
}

/* Registers [p, p + bytes) of a buffer that holds rank's input for c; checks nothing moved. */
static int register_keeps_data(struct collc_ctx *ctx, const struct rc_case *c, int rank, void *p,
			       size_t bytes, const char *what)
{
	int r = collc_mem_register(ctx, p, bytes, -1);

	if (r < 0)
		return h_fail("%s: collc_mem_register(%p, %zu): %s", what, p, bytes,
			      collc_strerror(r));
	return rc_check_input(c, rank, p, what);
}

static int phase_out_of_place(struct collc_ctx *ctx, struct collc_comm *comm, int rank,
			      collc_dtype dt, collc_redop op, size_t count, uint64_t seed,
			      const char *what)
{
	struct rc_case c = { dt, op, count, seed };
	size_t bytes = count * rc_size(dt);
	/*
	 * Large: two malloc'ed buffers, each registered. Smaller: one malloc'ed
	 * block holding both, registered once (two small buffers that share a
	 * page are phase_two_small's business).
	 */
	int one_block = bytes < (1u << 20);
	char *send = malloc(one_block ? 2 * bytes : bytes);
	char *recv = one_block ? send + bytes : malloc(bytes);
	int r;

	if (!send || !recv)
		return h_fail("%s: malloc", what);
	rc_fill(&c, rank, send);
	memset(recv, 0x5a, bytes);
	if (register_keeps_data(ctx, &c, rank, send, one_block ? 2 * bytes : bytes, what))
		return 1;
	r = one_block ? 0 : collc_mem_register(ctx, recv, bytes, -1);
	if (r < 0)
		return h_fail("%s: registering the receive buffer: %s", what, collc_strerror(r));
	if (allreduce_check(ctx, comm, &c, send, recv, what) ||
	    rc_check_input(&c, rank, send, what))
		return 1;
	/* In place on the same registered memory. */
	c.seed ^= 0x1234;
	rc_fill(&c, rank, send);
	if (allreduce_check(ctx, comm, &c, send, send, what))
		return 1;
	r = collc_mem_deregister(ctx, send);
	if (r == 0 && !one_block)
		r = collc_mem_deregister(ctx, recv);
	if (r < 0)
		return h_fail("%s: collc_mem_deregister: %s", what, collc_strerror(r));
	/* The memory stays the user's: readable, writable, freeable. */
	if (rc_check(&c, NRANKS, send, what, NULL))
		return 1;
	memset(send, 0x11, bytes);
	memset(recv, 0x22, bytes);
	{
		collc_req req;

		r = collc_allreduce(comm, send, recv, count, dt, op, &req);
		if (r != -EINVAL)
			return h_fail(
				"%s: all-reduce on deregistered memory returned %d (%s), want -EINVAL",
				what, r, collc_strerror(r));
	}
	free(send);
	if (!one_block)
		free(recv);
	if (rank == 0)
		h_log("%s: %s %s count %zu on malloc'ed registered memory: data kept by registration, "
		      "out-of-place and in-place results correct, deregistered memory refused and freed",
		      what, rc_dtype_name(dt), rc_op_name(op), count);
	return 0;
}

/* A range that starts and ends inside pages: the bytes around it must survive. */
static int phase_unaligned(struct collc_ctx *ctx, struct collc_comm *comm, int rank)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), count = 3000, bytes = count * 4;
	struct rc_case c = { COLLC_FLOAT32, COLLC_SUM, count, h_seed ^ 77 };
	char *region =
		mmap(NULL, 8 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *buf = region + pg + 100;
	const char *what = "unaligned range";
	long bad;
	int r;

	if (region == MAP_FAILED)
		return h_fail("mmap: %s", strerror(errno));
	rc_canary_fill(region, 8 * pg, 9);
	rc_fill(&c, rank, buf);
	if (register_keeps_data(ctx, &c, rank, buf, bytes, what))
		return 1;
	if ((bad = rc_canary_check(region, 0, (size_t)(buf - region), 9)) >= 0 ||
	    (bad = rc_canary_check(region, (size_t)(buf - region) + bytes, 8 * pg, 9)) >= 0)
		return h_fail("%s: registration changed byte %ld of the region outside the range",
			      what, bad);
	if (allreduce_check(ctx, comm, &c, buf, buf, what))
		return 1;
	if ((bad = rc_canary_check(region, 0, (size_t)(buf - region), 9)) >= 0 ||
	    (bad = rc_canary_check(region, (size_t)(buf - region) + bytes, 8 * pg, 9)) >= 0)
		return h_fail("%s: the all-reduce wrote byte %ld of the region outside the range",
			      what, bad);
	r = collc_mem_deregister(ctx, buf);
	if (r < 0)
		return h_fail("%s: collc_mem_deregister: %s", what, collc_strerror(r));
	munmap(region, 8 * pg);
	if (rank == 0)
		h_log("registered range starting and ending inside pages (offset 100 of page 1 of an mmap): "
		      "contents and the bytes around it preserved, in-place all-reduce correct");
	return 0;
}

/*
 * Two small buffers side by side in one page of private anonymous memory, as
 * malloc hands out two 4000-byte blocks, registered one after the other.
 * Fresh pages (mmap) keep this independent of what earlier phases did to the heap.
 */
static int phase_two_small(struct collc_ctx *ctx, struct collc_comm *comm, int rank)
{
	size_t count = 500, bytes = count * 8, pg = (size_t)sysconf(_SC_PAGESIZE);
	struct rc_case c = { COLLC_INT64, COLLC_SUM, count, h_seed ^ 99 };
	char *region =
		mmap(NULL, 4 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *send = region + 64, *recv = region + 64 + bytes;
	int r;

	if (region == MAP_FAILED)
		return h_fail("mmap: %s", strerror(errno));
	rc_fill(&c, rank, send);
	r = collc_mem_register(ctx, send, bytes, -1);
	if (r < 0)
		h_fail("two small buffers: registering the first (%p, %zu bytes): %s", (void *)send,
		       bytes, collc_strerror(r));
	else if ((r = collc_mem_register(ctx, recv, bytes, -1)) < 0)
		h_fail("two small buffers: registering a second, disjoint range of private anonymous "
		       "memory (%zu bytes right after the first, sharing its page) failed: %d (%s)",
		       bytes, r, collc_strerror(r));
	if (!all_ok(0, rank, r == 0))
		return 1;
	if (allreduce_check(ctx, comm, &c, send, recv, "two small buffers"))
		return 1;
	collc_mem_deregister(ctx, send);
	collc_mem_deregister(ctx, recv);
	munmap(region, 4 * pg);
	if (rank == 0)
		h_log("two small buffers sharing a page, registered one after the other: all-reduce correct");
	return 0;
}

/*
 * register, deregister, register again: the same buffer (fresh pages). The
 * same happens when malloc hands out memory that an earlier, deregistered
 * and freed buffer used.
 */
static int phase_reregister(struct collc_ctx *ctx, struct collc_comm *comm, int rank)
{
	size_t count = 100000, bytes = count * 4;
	struct rc_case c = { COLLC_UINT32, COLLC_MAX, count, h_seed ^ 1234 };
	char *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int r;

	if (buf == MAP_FAILED)
		return h_fail("mmap: %s", strerror(errno));
	rc_fill(&c, rank, buf);
	r = collc_mem_register(ctx, buf, bytes, -1);
	if (r == 0)
		r = collc_mem_deregister(ctx, buf);
	if (r < 0)
		return h_fail("re-register: first register/deregister: %s", collc_strerror(r));
	r = collc_mem_register(ctx, buf, bytes, -1);
	if (r < 0)
		h_fail("re-register: registering a buffer again after collc_mem_deregister failed: "
		       "%d (%s)",
		       r, collc_strerror(r));
	if (!all_ok(1, rank, r == 0))
		return 1;
	if (allreduce_check(ctx, comm, &c, buf, buf, "re-register"))
		return 1;
	collc_mem_deregister(ctx, buf);
	munmap(buf, bytes);
	if (rank == 0)
		h_log("a buffer registered, deregistered and registered again: all-reduce correct");
	return 0;
}

static int pages_only;

static int rank_main(int rank, int nranks, void *arg)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	void *p;
	int r, failed = 0;

	(void)arg;
	if (h_join(&uid, nranks, rank, &ctx, &comm) < 0)
		return 1;
	if (pages_only) {
		/* Two independent findings: run both, report both. */
		failed |= phase_two_small(ctx, comm, rank);
		failed |= phase_reregister(ctx, comm, rank);
		goto out;
	}
	/* A large malloc (served by mmap) and a small one (from the heap). */
	if (phase_out_of_place(ctx, comm, rank, COLLC_FLOAT32, COLLC_SUM, 1u << 20, h_seed ^ 1,
			       "large") ||
	    phase_out_of_place(ctx, comm, rank, COLLC_INT32, COLLC_PROD, 1000, h_seed ^ 2,
			       "small") ||
	    phase_out_of_place(ctx, comm, rank, COLLC_BFLOAT16, COLLC_AVG, 12345, h_seed ^ 3,
			       "medium") ||
	    phase_unaligned(ctx, comm, rank))
		return 1;
	/* Misuse of the memory calls: refused, nothing else changes. */
	p = malloc(64);
	r = collc_mem_deregister(ctx, p);
	if (r != -EINVAL)
		failed |= h_fail(
			"collc_mem_deregister of memory never registered: %d, want -EINVAL", r);
	r = collc_mem_register(ctx, &r, sizeof(r), -1);
	if (r >= 0)
		failed |=
			h_fail("collc_mem_register of a stack variable succeeded; the stack is not "
			       "private anonymous memory the header allows");
	r = collc_mem_register(ctx, p, 0, -1);
	if (r >= 0)
		failed |= h_fail("collc_mem_register of 0 bytes succeeded");
	free(p);
	if (collc_mem_alloc(ctx, 4096, -1, &p) == 0) {
		r = collc_mem_deregister(ctx, p);
		if (r != -EINVAL)
			failed |= h_fail(
				"collc_mem_deregister of collc_mem_alloc memory: %d, want -EINVAL",
				r);
		r = collc_mem_free(ctx, p);
		if (r < 0)
			failed |= h_fail("collc_mem_free: %s", collc_strerror(r));
		r = collc_mem_free(ctx, p);
		if (r != -EINVAL)
			failed |=
				h_fail("second collc_mem_free of one buffer: %d, want -EINVAL", r);
	}
	if (rank == 0 && !failed)
		h_log("misuse refused: deregister of unknown memory, register of the stack or of 0 bytes, "
		      "deregister of collc_mem_alloc memory, double collc_mem_free");
out:
	h_leave(ctx, comm);
	return failed;
}

/*
 *   test_mem_register          registration, all-reduce, deregistration, misuse
 *   test_mem_register pages    two ranges sharing a page; registering again
 */
int main(int argc, char **argv)
{
	pages_only = argc > 1 && strcmp(argv[1], "pages") == 0;
	h_init(pages_only ? "mem_register_shared_pages" : "mem_register", argc, argv, 60);
	sh = h_shared(sizeof(*sh));
	h_barrier_init(&sh->bar, NRANKS);
	return h_run_comm_test(&uid, 1, NRANKS, rank_main, NULL);
}
