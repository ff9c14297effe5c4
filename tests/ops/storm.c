/* SPDX-License-Identifier: MIT */
/*
 * The reconfiguration storm: 4 ranks run mixed collectives of random sizes
 * (50,000 by default; COLLC_STORM_COLLECTIVES overrides) with random queue
 * depths while another process changes channels, proto and algo 1,000 times
 * and a third one samples `status --json` and `metrics`. Every collective
 * must succeed with a correct result; the status taken during the traffic
 * must show nonzero queue depths and every field of the status contract (collcctl(8)), and the
 * metrics must parse as Prometheus text.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <collc.h>

#include "client/ctlsock.h"
#include "harness.h"
#include "refcheck.h"

#define NRANKS   4
#define DEPTH    8
#define MAXCOUNT (256u << 10) /* elements of the largest all-reduce */
#define NSETS    1000

struct shared {
	struct h_barrier start;
	uint32_t sets_done;
	uint64_t storm_t0, storm_t1, sets_t0, sets_t1;
	uint32_t max_depth_seen; /* the largest queue depth a status sample showed */
	uint64_t done[NRANKS];
	uint32_t stop_sampling;
};

static struct shared *sh;
static uint64_t ncoll = 50000;
static char status_path[256], metrics_path[256];

struct op {
	int kind; /* enum rc_coll */
	struct rc_case c;
	int root;
};

/* Every rank draws the same sequence of collectives from the run's seed. */
static void draw(uint64_t *rs, struct op *o)
{
	static const collc_dtype dts[] = { COLLC_FLOAT32,  COLLC_INT32, COLLC_FLOAT64,
					   COLLC_BFLOAT16, COLLC_UINT8, COLLC_INT64 };
	uint64_t pick = h_rand_below(rs, 100), n;

	*o = (struct op){ 0 }; /* random data (c.exact 0) */
	o->kind = (int)h_rand_below(rs, RC_NUM_COLLS);
	o->c.dtype = dts[h_rand_below(rs, sizeof(dts) / sizeof(dts[0]))];
	o->c.op = (collc_redop)h_rand_below(rs, 5);
	if (pick < 60)
		n = h_rand_below(rs, 257);
	else if (pick < 92)
		n = 257 + h_rand_below(rs, 16384);
	else
		n = 16641 + h_rand_below(rs, MAXCOUNT - 16641);
	if (o->kind == RC_ALLGATHER || o->kind == RC_REDUCE_SCATTER)
		n /= NRANKS;
	o->c.count = n;
	o->c.seed = h_rand(rs);
	o->root = (int)h_rand_below(rs, NRANKS);
}

static int submit(struct collc_comm *comm, const struct op *o, int rank, void *send, void *recv,
		  collc_req *req)
{
	rc_fill_coll(&o->c, (enum rc_coll)o->kind, NRANKS, rank, send);
	return rc_submit(comm, (enum rc_coll)o->kind, &o->c, o->root, send, recv, req);
}

static int check(const struct op *o, int rank, const void *recv)
{
	return rc_check_coll(&o->c, (enum rc_coll)o->kind, NRANKS, rank, o->root, recv,
			     rc_coll_name((enum rc_coll)o->kind));
}

static int rank_main(int rank, int nranks, void *arg)
{
	const struct collc_unique_id *id = arg;
	size_t maxbytes = (size_t)MAXCOUNT * 8;
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	void *send[DEPTH], *recv[DEPTH];
	struct op ops[DEPTH];
	collc_req reqs[DEPTH];
	uint64_t rs = h_seed, head = 0, tail = 0;
	int r;

	if (h_join(id, nranks, rank, &ctx, &comm) < 0)
		return 1;
	for (int i = 0; i < DEPTH; i++)
		if (collc_mem_alloc(ctx, maxbytes, -1, &send[i]) < 0 ||
		    collc_mem_alloc(ctx, maxbytes, -1, &recv[i]) < 0)
			return h_fail("rank %d: mem_alloc", rank);
	h_barrier_wait(&sh->start, 30000);
	if (rank == 0)
		sh->storm_t0 = h_now_ns();
	while (tail < ncoll) {
		/* A depth of 1..DEPTH, redrawn now and then: queues fill and drain. */
		uint64_t depth = 1 + (h_mix(h_seed ^ (tail / 97)) % DEPTH);

		while (head < ncoll && head - tail < depth) {
			int s = (int)(head % DEPTH);

			draw(&rs, &ops[s]);
			r = submit(comm, &ops[s], rank, send[s], recv[s], &reqs[s]);
			if (r < 0)
				return h_fail(
					"rank %d: collective %llu (kind %d count %zu): submit %s",
					rank, (unsigned long long)head, ops[s].kind, ops[s].c.count,
					collc_strerror(r));
			head++;
		}
		{
			int s = (int)(tail % DEPTH);

			r = collc_wait(ctx, reqs[s], 60000);
			if (r < 0)
				return h_fail(
					"rank %d: collective %llu (kind %d %s %s count %zu): %s",
					rank, (unsigned long long)tail, ops[s].kind,
					rc_dtype_name(ops[s].c.dtype), rc_op_name(ops[s].c.op),
					ops[s].c.count, collc_strerror(r));
			if (check(&ops[s], rank, recv[s]))
				return h_fail(
					"rank %d: collective %llu (kind %d %s %s count %zu) wrong",
					rank, (unsigned long long)tail, ops[s].kind,
					rc_dtype_name(ops[s].c.dtype), rc_op_name(ops[s].c.op),
					ops[s].c.count);
			tail++;
			sh->done[rank] = tail;
		}
	}
	if (rank == 0)
		sh->storm_t1 = h_now_ns();
	h_leave(ctx, comm);
	return 0;
}

static int request(const char *path, uint16_t type, const void *p, size_t len,
		   struct ctl_reply *rep)
{
	uint32_t id = 0;
	int fd, r = ctl_connect(path, &fd);

	if (r < 0)
		return r;
	r = ctl_request(fd, &id, type, p, len, -1, 10000, rep);
	close(fd);
	return r < 0 ? r : rep->status;
}

static int reconfigure_main(int rank, int nranks, void *arg)
{
	static const char *const protos[] = { "auto", "simple", "ll", "ll128" };
	static const char *const algos[] = { "auto", "ring", "oneshot", "twoshot" };
	uint64_t rs = h_seed ^ 0x5eed;
	char admin[160];
	int fd, r;

	snprintf(admin, sizeof(admin), "%s.admin", h_sock);
	if (ctl_connect(admin, &fd) < 0)
		return h_fail("reconfigure: admin socket %s", admin);
	h_barrier_wait(&sh->start, 30000);
	usleep(200000); /* let the traffic build first */
	sh->sets_t0 = h_now_ns();
	for (int i = 0; i < NSETS; i++) {
		char words[128];
		struct ctl_reply rep;
		uint32_t id = 0;

		snprintf(words, sizeof(words), "channels=%u proto=%s algo=%s",
			 1 + (unsigned)h_rand_below(&rs, 4), protos[h_rand_below(&rs, 4)],
			 algos[h_rand_below(&rs, 4)]);
		r = ctl_request(fd, &id, COLLC_MSG_SET, words, strlen(words), -1, 10000, &rep);
		if (r == 0)
			r = rep.status;
		if (r < 0) {
			fprintf(stderr, "set %s: %s\n", words, rep.data ? rep.data : strerror(-r));
			ctl_reply_free(&rep);
			return 1;
		}
		ctl_reply_free(&rep);
		__atomic_store_n(&sh->sets_done, (uint32_t)i + 1, __ATOMIC_RELAXED);
		usleep(1000);
	}
	sh->sets_t1 = h_now_ns();
	close(fd);
	return 0;
}

/* Sum of every queue depth in a status JSON text (sq_depth, inflight, pending, fifo_depth). */
static uint32_t depth_in(const char *json)
{
	static const char *const keys[] = { "\"sq_depth\": ", "\"cq_depth\": ", "\"inflight\": ",
					    "\"pending\": ", "\"fifo_depth\": " };
	uint32_t sum = 0;

	for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
		for (const char *p = strstr(json, keys[k]); p; p = strstr(p + 1, keys[k]))
			sum += (uint32_t)strtoul(p + strlen(keys[k]), NULL, 10);
	return sum;
}

static int sampler_main(int rank, int nranks, void *arg)
{
	struct collc_msg_status_req q = { .flags = COLLC_STATUS_JSON };
	int have_metrics = 0;

	h_barrier_wait(&sh->start, 30000);
	while (!__atomic_load_n(&sh->stop_sampling, __ATOMIC_RELAXED)) {
		struct ctl_reply rep;
		uint32_t d;

		if (request(h_sock, COLLC_MSG_STATUS, &q, sizeof(q), &rep) == 0) {
			d = depth_in(rep.data);
			if (d > sh->max_depth_seen) {
				FILE *f = fopen(status_path, "w");

				sh->max_depth_seen = d;
				if (f) {
					fwrite(rep.data, 1, rep.len, f);
					fclose(f);
				}
			}
		}
		ctl_reply_free(&rep);
		if (!have_metrics && sh->done[0] > ncoll / 2 &&
		    request(h_sock, COLLC_MSG_METRICS, NULL, 0, &rep) == 0) {
			FILE *f = fopen(metrics_path, "w");

			if (f) {
				fwrite(rep.data, 1, rep.len, f);
				fclose(f);
				have_metrics = 1;
			}
			ctl_reply_free(&rep);
		}
		usleep(20000);
	}
	return have_metrics ? 0 : h_fail("no metrics sample taken during the traffic");
}

int main(int argc, char **argv)
{
	struct collc_unique_id id;
	pid_t pids[NRANKS + 2];
	char cmd[600], out[4096];
	int failed;

	h_init("ops_storm", argc, argv, 1200);
	if (getenv("COLLC_STORM_COLLECTIVES"))
		ncoll = strtoull(getenv("COLLC_STORM_COLLECTIVES"), NULL, 10);
	sh = h_shared(sizeof(*sh));
	h_barrier_init(&sh->start, NRANKS + 2);
	h_daemon_start(NULL);
	snprintf(status_path, sizeof(status_path), "%s.status.json", h_sock);
	snprintf(metrics_path, sizeof(metrics_path), "%s.metrics.txt", h_sock);
	h_unique_id(&id);
	for (int r = 0; r < NRANKS; r++)
		pids[r] = h_spawn(rank_main, r, NRANKS, &id);
	pids[NRANKS] = h_spawn(reconfigure_main, 0, 1, NULL);
	pids[NRANKS + 1] = h_spawn(sampler_main, 0, 1, NULL);
	failed = h_reap(pids, NRANKS + 1, NULL, 2000);
	sh->stop_sampling = 1;
	failed += h_reap(pids + NRANKS + 1, 1, NULL, 2000);
	h_log("%llu collectives x %d ranks, %u sets of channels/proto/algo, largest queue depth sampled %u",
	      (unsigned long long)ncoll, NRANKS, sh->sets_done, sh->max_depth_seen);
	if (sh->sets_done != NSETS)
		failed +=
			h_fail("only %u of %d reconfigurations went through", sh->sets_done, NSETS);
	else if (!(sh->storm_t0 < sh->sets_t0 && sh->sets_t1 < sh->storm_t1))
		failed += h_fail("the reconfigurations did not all happen during the traffic "
				 "(storm %.2f..%.2f s, sets %.2f..%.2f s)",
				 0.0, (sh->storm_t1 - sh->storm_t0) / 1e9,
				 ((int64_t)sh->sets_t0 - (int64_t)sh->storm_t0) / 1e9,
				 ((int64_t)sh->sets_t1 - (int64_t)sh->storm_t0) / 1e9);
	if (sh->max_depth_seen == 0)
		failed += h_fail("status never showed a nonzero queue depth during the traffic");
	snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s/check_ops.py %s %s 2>&1", COLLC_OPS_DIR,
		 status_path, metrics_path);
	if (h_run_capture(cmd, out, sizeof(out)) != 0)
		failed += h_fail("status/metrics check: %s", out);
	else
		h_log("%s", out);
	unlink(status_path);
	unlink(metrics_path);
	return h_finish(failed);
}
