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
#include "rel_data.h"

#define ITERS 24
#define BYTES (1u << 20)

static struct collc_unique_id *UID;

static int rank_main(void *arg)
{
	int rank = (int)(intptr_t)arg, failed = 0, r;
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	size_t count = BYTES / 2 / sizeof(float);

	if (rel_join(UID, 2, rank, &ctx, &comm) < 0)
		return 1;
	for (int it = 0; it < ITERS && !failed; it++) {
		int use_malloc = it % 4 >= 2; /* mmap, mmap, malloc, malloc, ... */
		char *buf = use_malloc ? malloc(BYTES)
				       : mmap(NULL, BYTES, PROT_READ | PROT_WRITE,
					      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		float *send, *recv;
		uint64_t key = rel_mix(rel_seed + (uint64_t)it), got, want;
		collc_req req;
		long bad;

		if (!buf || buf == MAP_FAILED)
			return rel_fail("rank %d: no memory", rank);
		send = (float *)buf;
		recv = (float *)(buf + BYTES / 2);
		rd_fill(send, count, COLLC_FLOAT32, COLLC_SUM, 2, rank, key, 0);
		memset(recv, 0x5c, count * sizeof(float));
		r = collc_mem_register(ctx, buf, BYTES, -1);
		if (r < 0)
			return rel_fail("rank %d: iteration %d: collc_mem_register(%p): %s", rank, it,
					(void *)buf, collc_strerror(r));
		r = collc_allreduce(comm, send, recv, count, COLLC_FLOAT32, COLLC_SUM, &req);
		if (r == 0)
			r = collc_wait(ctx, req, 10000);
		if (r < 0)
			return rel_fail("rank %d: iteration %d: all-reduce: %s", rank, it, collc_strerror(r));
		bad = rd_check_allreduce(recv, count, COLLC_FLOAT32, COLLC_SUM, 2, key, &got, &want);
		if (bad >= 0)
			failed = rel_fail("rank %d: iteration %d (%s at %p): result wrong at %ld: %#" PRIx64
					  ", want %#" PRIx64 "%s",
					  rank, it, use_malloc ? "malloc" : "mmap", (void *)buf, bad, got, want,
					  got == 0x5c5c5c5c ? " (the receive buffer was never written: collcd "
							      "wrote into other memory)" : "");
		r = collc_mem_deregister(ctx, buf);
		if (r < 0)
			failed |= rel_fail("rank %d: collc_mem_deregister: %s", rank, collc_strerror(r));
		if (use_malloc)
			free(buf);
		else
			munmap(buf, BYTES);
	}
	if (!failed)
		rel_log("rank %d: %d register / all-reduce / deregister / give back cycles correct", rank,
			ITERS);
	collc_comm_destroy(comm);
	collc_disconnect(ctx);
	return failed;
}

int main(int argc, char **argv)
{
	pid_t pid[2];
	int failed = 0;

	rel_init("rel_regchurn", argc, argv, 60);
	rel_daemon_start(NULL);
	UID = rel_shared(sizeof(*UID));
	rel_unique_ids(UID, 1);
	pid[0] = rel_spawn(rank_main, (void *)0);
	pid[1] = rel_spawn(rank_main, (void *)1);
	failed |= rel_reap_ok(pid[0], 40000, "rank 0");
	failed |= rel_reap_ok(pid[1], 40000, "rank 1");
	return rel_finish(failed);
}
