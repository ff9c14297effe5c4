/* SPDX-License-Identifier: MIT */
/*
 * Registration churn, as an application does it: every iteration each of two
 * ranks gets fresh private memory (mmap, or malloc of a large block), fills
 * it, registers it with collc_mem_register, all-reduces from and into it,
 * checks the result, deregisters it and gives it back (munmap / free). The
 * kernel hands the same addresses out again, so this checks that a
 * registration always describes the memory there *now*, never memory that
 * was there before a deregistration.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "rel.h"
#include "refcheck.h"

#define ITERS 24
#define BYTES (1u << 20)

static struct collc_unique_id *UID;

static int rank_main(void *arg)
{
	int rank = (int)(intptr_t)arg, failed = 0, r;
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	size_t count = BYTES / 2 / sizeof(float);

	if (h_join(UID, 2, rank, &ctx, &comm) < 0)
		return 1;
	for (int it = 0; it < ITERS && !failed; it++) {
		int use_malloc = it % 4 >= 2; /* mmap, mmap, malloc, malloc, ... */
		char *buf = use_malloc ? malloc(BYTES)
				       : mmap(NULL, BYTES, PROT_READ | PROT_WRITE,
					      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		float *send, *recv;
		struct rc_case c = { COLLC_FLOAT32, COLLC_SUM, count, h_mix(h_seed + (uint64_t)it),
				     2 };
		char what[128];
		collc_req req;

		if (!buf || buf == MAP_FAILED)
			return h_fail("rank %d: no memory", rank);
		send = (float *)buf;
		recv = (float *)(buf + BYTES / 2);
		rc_fill(&c, rank, send);
		memset(recv, 0x5c, count * sizeof(float));
		r = collc_mem_register(ctx, buf, BYTES, -1);
		if (r < 0)
			return h_fail("rank %d: iteration %d: collc_mem_register(%p): %s", rank, it,
				      (void *)buf, collc_strerror(r));
		r = collc_allreduce(comm, send, recv, count, COLLC_FLOAT32, COLLC_SUM, &req);
		if (r == 0)
			r = collc_wait(ctx, req, 10000);
		if (r < 0)
			return h_fail("rank %d: iteration %d: all-reduce: %s", rank, it,
				      collc_strerror(r));
		snprintf(what, sizeof(what), "rank %d: iteration %d (%s at %p)", rank, it,
			 use_malloc ? "malloc" : "mmap", (void *)buf);
		if (rc_check(&c, 2, recv, what, NULL)) {
			uint32_t first;

			memcpy(&first, recv, sizeof(first));
			failed = first == 0x5c5c5c5c
					 ? h_fail("%s: the receive buffer was never written: "
						  "collcd wrote into other memory",
						  what)
					 : 1;
		}
		r = collc_mem_deregister(ctx, buf);
		if (r < 0)
			failed |= h_fail("rank %d: collc_mem_deregister: %s", rank,
					 collc_strerror(r));
		if (use_malloc)
			free(buf);
		else
			munmap(buf, BYTES);
	}
	if (!failed)
		h_log("rank %d: %d register / all-reduce / deregister / give back cycles correct",
		      rank, ITERS);
	h_leave(ctx, comm);
	return failed;
}

int main(int argc, char **argv)
{
	pid_t pid[2];
	int failed = 0;

	rel_init("rel_regchurn", argc, argv, 60);
	h_daemon_start(NULL);
	UID = h_shared(sizeof(*UID));
	h_unique_ids(UID, 1);
	pid[0] = h_fork(rank_main, (void *)0);
	pid[1] = h_fork(rank_main, (void *)1);
	failed |= h_reap_one_ok(pid[0], 40000, "rank 0");
	failed |= h_reap_one_ok(pid[1], 40000, "rank 1");
	return h_finish(failed);
}
