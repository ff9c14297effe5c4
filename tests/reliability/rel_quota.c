/* SPDX-License-Identifier: MIT */
/*
 * Per-client quotas: registrations (count: 4096), communicators (256) and
 * bytes (1 TiB). A client goes up to each quota, gets -EDQUOT (and nothing
 * else) one past it, frees some and succeeds again; another client is not
 * limited by the first one's use; a collective on existing objects still
 * works at the quota; a collc_mem_register refused for the quota leaves the
 * user's data in place.
 *
 *   rel_quota                 as above
 *   rel_quota --nofile 1024   collcd runs with a soft RLIMIT_NOFILE of 1024 (a
 *                             systemd service's default): the registration
 *                             quota must still be what ends the client's
 *                             registrations (-EDQUOT, not -EMFILE), and a
 *                             second client must still connect and work.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rel.h"

#define QUOTA_MRS   4096
#define QUOTA_COMMS 256

struct shared {
	struct collc_unique_id uid_pair;
	struct collc_unique_id uids[QUOTA_COMMS + 8];
	uint32_t first_at_quota, second_done;
};

static struct shared *S;

/* A 1-rank all-reduce on comm: correct? */
static int solo_allreduce(struct collc_ctx *ctx, struct collc_comm *comm, float *buf,
			  const char *what)
{
	collc_req req;
	int r;

	for (int i = 0; i < 256; i++)
		buf[i] = (float)i;
	r = collc_allreduce(comm, buf, buf + 256, 256, COLLC_FLOAT32, COLLC_SUM, &req);
	if (r == 0)
		r = collc_wait(ctx, req, 10000);
	if (r < 0)
		return h_fail("%s: %s", what, collc_strerror(r));
	for (int i = 0; i < 256; i++)
		if (buf[256 + i] != (float)i)
			return h_fail("%s: wrong result at %d", what, i);
	return 0;
}

static int registrations(void *arg)
{
	static void *p[QUOTA_MRS + 16];
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	int n = 0, r = 0, failed = 0;
	uint64_t t0 = h_now_ns();
	char *user;

	(void)arg;
	if (h_join(&S->uids[0], 1, 0, &ctx, &comm) < 0)
		return 1;
	/* Up to the quota: every one succeeds, the next one gets -EDQUOT. */
	while (n < QUOTA_MRS + 16) {
		r = collc_mem_alloc(ctx, 4096, -1, &p[n]);
		if (r < 0)
			break;
		n++;
	}
	h_log("registrations: %d succeeded, then %d (%s) after %.0f ms", n, r, collc_strerror(r),
	      (double)(h_now_ns() - t0) / 1e6);
	if (r != -EDQUOT || n != QUOTA_MRS) {
		if (r != -EDQUOT)
			failed = h_fail(
				"registration %d failed with %d (%s), want -EDQUOT at the quota", n,
				r, collc_strerror(r));
		else
			failed = h_fail("-EDQUOT after %d registrations, the quota is %d", n,
					QUOTA_MRS);
		/* Whatever stopped it: can another client still work meanwhile? */
		h_store(&S->first_at_quota, 1);
		h_wait_at_least(&S->second_done, 1, 60000);
		return failed;
	}
	/* At the quota, existing registrations still work. */
	failed |= solo_allreduce(ctx, comm, p[0], "all-reduce at the registration quota");
	/* A registration of user memory refused for the quota keeps the user's data. */
	user = malloc(3 * 4096);
	for (int i = 0; i < 3 * 4096; i++)
		user[i] = (char)(i * 7);
	r = collc_mem_register(ctx, user + 4096, 4096, -1);
	if (r != -EDQUOT)
		failed |= h_fail("collc_mem_register at the quota: %d (%s), want -EDQUOT", r,
				 collc_strerror(r));
	for (int i = 0; i < 3 * 4096; i++)
		if (user[i] != (char)(i * 7)) {
			failed |= h_fail("a refused collc_mem_register changed the user's byte %d",
					 i);
			break;
		}
	/* Another client is not limited by this one. */
	h_store(&S->first_at_quota, 1);
	if (h_wait_at_least(&S->second_done, 1, 60000) < 0)
		failed |= h_fail("the second client did not finish");
	/* Free 10: 10 more succeed, then -EDQUOT again. */
	for (int i = 0; i < 10; i++) {
		r = collc_mem_free(ctx, p[--n]);
		if (r < 0)
			return h_fail("collc_mem_free: %s", collc_strerror(r));
	}
	for (int i = 0; i < 10; i++) {
		r = collc_mem_alloc(ctx, 4096, -1, &p[n]);
		if (r < 0)
			return h_fail("registration after freeing 10 (%d/10): %s", i,
				      collc_strerror(r));
		n++;
	}
	r = collc_mem_alloc(ctx, 4096, -1, &p[n]);
	if (r != -EDQUOT)
		return h_fail("registration past the quota again: %d (%s), want -EDQUOT", r,
			      collc_strerror(r));
	/* Free everything: registering works again. */
	while (n > 0) {
		r = collc_mem_free(ctx, p[--n]);
		if (r < 0)
			return h_fail("collc_mem_free: %s", collc_strerror(r));
	}
	r = collc_mem_alloc(ctx, 1 << 20, -1, &p[0]);
	if (r < 0)
		return h_fail("registration after freeing all: %s", collc_strerror(r));
	failed |= solo_allreduce(ctx, comm, p[0], "all-reduce after freeing all registrations");
	collc_mem_free(ctx, p[0]);
	h_leave(ctx, comm);
	free(user);
	return failed;
}

/* Runs while the first client sits at its registration quota. */
static int second_client(void *arg)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	void *buf;
	int r, failed = 0;

	(void)arg;
	if (h_wait_at_least(&S->first_at_quota, 1, 120000) < 0)
		return h_fail("the first client never reached its quota");
	if (h_join(&S->uids[1], 1, 0, &ctx, &comm) < 0) {
		h_store(&S->second_done, 1);
		return 1;
	}
	r = collc_mem_alloc(ctx, 1 << 20, -1, &buf);
	if (r < 0)
		failed |= h_fail(
			"a second client cannot register while the first is at its quota: %s",
			collc_strerror(r));
	else
		failed |= solo_allreduce(ctx, comm, buf, "second client's all-reduce");
	if (!failed)
		h_log("a second client registers and all-reduces while the first sits at its quota");
	h_store(&S->second_done, 1);
	collc_disconnect(ctx);
	return failed;
}

static int communicators(void *arg)
{
	static struct collc_comm *c[QUOTA_COMMS + 8];
	struct collc_ctx *ctx;
	void *buf;
	int n = 0, r = 0, failed = 0, next_uid = 2;

	(void)arg;
	r = h_connect(&ctx);
	if (r < 0)
		return h_fail("collc_connect: %s", collc_strerror(r));
	r = collc_mem_alloc(ctx, 4096, -1, &buf);
	if (r < 0)
		return h_fail("collc_mem_alloc: %s", collc_strerror(r));
	while (n < QUOTA_COMMS + 4) {
		r = collc_comm_init(ctx, &S->uids[next_uid], 1, 0, -1, &c[n]);
		if (r < 0)
			break;
		next_uid++;
		n++;
	}
	h_log("communicators: %d joined, then %d (%s)", n, r, collc_strerror(r));
	if (r != -EDQUOT)
		return h_fail("communicator %d failed with %d (%s), want -EDQUOT at the quota", n,
			      r, collc_strerror(r));
	if (n != QUOTA_COMMS)
		return h_fail("-EDQUOT after %d communicators, the quota is %d", n, QUOTA_COMMS);
	failed |= solo_allreduce(ctx, c[0], buf, "all-reduce at the communicator quota");
	failed |= solo_allreduce(ctx, c[n - 1], buf, "all-reduce on the last communicator");
	/* Destroy one: one more joins, then -EDQUOT again. */
	r = collc_comm_destroy(c[--n]);
	if (r < 0)
		return h_fail("collc_comm_destroy: %s", collc_strerror(r));
	r = collc_comm_init(ctx, &S->uids[next_uid++], 1, 0, -1, &c[n]);
	if (r < 0)
		return h_fail("a communicator after destroying one: %s", collc_strerror(r));
	n++;
	{
		struct collc_comm *extra;

		r = collc_comm_init(ctx, &S->uids[next_uid++], 1, 0, -1, &extra);
		if (r != -EDQUOT)
			return h_fail("a communicator past the quota again: %d (%s), want -EDQUOT",
				      r, collc_strerror(r));
	}
	while (n > 0) {
		r = collc_comm_destroy(c[--n]);
		if (r < 0)
			return h_fail("collc_comm_destroy: %s", collc_strerror(r));
	}
	r = collc_comm_init(ctx, &S->uids[next_uid++], 1, 0, -1, &c[0]);
	if (r < 0)
		return h_fail("a communicator after destroying all: %s", collc_strerror(r));
	failed |= solo_allreduce(ctx, c[0], buf, "all-reduce after destroying all communicators");
	collc_comm_destroy(c[0]);
	collc_disconnect(ctx);
	return failed;
}

/* The byte quota: one 1 TiB allocation (sparse) is the whole of it. */
static int bytes(void *arg)
{
	struct collc_ctx *ctx;
	void *big, *small;
	int r;

	(void)arg;
	r = h_connect(&ctx);
	if (r < 0)
		return h_fail("collc_connect: %s", collc_strerror(r));
	r = collc_mem_alloc(ctx, 1ull << 40, -1, &big);
	if (r == -ENOMEM) {
		h_log("bytes: a 1 TiB (sparse) allocation is refused here (%s): byte quota not tested",
		      collc_strerror(r));
		collc_disconnect(ctx);
		return 0;
	}
	if (r < 0)
		return h_fail("a 1 TiB allocation (the byte quota exactly): %s", collc_strerror(r));
	r = collc_mem_alloc(ctx, 4096, -1, &small);
	if (r != -EDQUOT)
		return h_fail("an allocation past the 1 TiB byte quota: %d (%s), want -EDQUOT", r,
			      collc_strerror(r));
	r = collc_mem_free(ctx, big);
	if (r < 0)
		return h_fail("collc_mem_free(1 TiB): %s", collc_strerror(r));
	r = collc_mem_alloc(ctx, 4096, -1, &small);
	if (r < 0)
		return h_fail("an allocation after freeing the 1 TiB: %s", collc_strerror(r));
	h_log("bytes: 1 TiB allocated, 4 KiB more refused with -EDQUOT, accepted after the free");
	collc_disconnect(ctx);
	return 0;
}

int main(int argc, char **argv)
{
	int failed = 0;
	pid_t a, b;

	if (argc > 2 && strcmp(argv[1], "--nofile") == 0)
		h_daemon_nofile = atol(argv[2]);
	rel_init(h_daemon_nofile ? "rel_quota_fdlimit" : "rel_quota", argc, argv, 200);
	h_daemon_start(NULL);
	if (h_daemon_nofile)
		h_log("collcd runs with a soft RLIMIT_NOFILE of %ld", h_daemon_nofile);
	S = h_shared(sizeof(*S));
	h_unique_ids(S->uids, QUOTA_COMMS + 8);
	a = h_fork(registrations, NULL);
	b = h_fork(second_client, NULL);
	failed |= h_reap_one_ok(a, 150000, "registration client");
	h_store(&S->first_at_quota, 1);
	failed |= h_reap_one_ok(b, 30000, "second client");
	if (!h_daemon_nofile) {
		a = h_fork(communicators, NULL);
		failed |= h_reap_one_ok(a, 120000, "communicator client");
		a = h_fork(bytes, NULL);
		failed |= h_reap_one_ok(a, 60000, "byte-quota client");
	}
	if (!h_daemon_alive())
		failed |= h_fail("collcd died");
	return h_finish(failed);
}
