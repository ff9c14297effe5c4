/* SPDX-License-Identifier: MIT */
/*
 * Reliability-test harness (see rel.h): this suite's limits for the common
 * harness, collcctl status and what collcd uses.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "refcheck.h"
#include "rel.h"

static const struct h_suite rel_suite = {
	.tmpdir = "/tmp/collc-rel-XXXXXX",
	.start_ms = 20000,
	.stop_ms = 10000,
	.command_ms = 20000,
	.connect_tries = 200,
	.stop_checks_log = 1,
};

void rel_init(const char *name, int argc, char **argv, unsigned watchdog_s)
{
	h_init_suite(&rel_suite, name, argc, argv, watchdog_s);
}

uint64_t rel_env_u64(const char *name, uint64_t dflt)
{
	const char *v = getenv(name);

	return v && *v ? strtoull(v, NULL, 0) : dflt;
}

/* The daemon */

uint64_t rel_daemon_kill9(void)
{
	uint64_t t = h_now_ns();

	h_daemon_kill(SIGKILL);
	return t;
}

int rel_daemon_fds(void)
{
	return h_proc_count(h_daemon_pid, "fd");
}

int rel_daemon_settled_fds(void)
{
	int last = rel_daemon_fds(), same = 0;

	for (int i = 0; i < 150 && same < 10; i++) {
		int n;

		h_sleep_us(20000);
		n = rel_daemon_fds();
		same = n == last ? same + 1 : 0;
		last = n;
	}
	return last;
}

long rel_daemon_rss_kb(void)
{
	char path[64], line[256];
	long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)h_daemon_pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

/* collcctl */

int rel_ctl(char *out, size_t outlen, const char *args)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "exec %s --socket %s %s", h_collcctl(), h_sock, args);
	return h_run_capture(cmd, out, outlen);
}

struct json *rel_status(void)
{
	static char buf[1 << 20];
	char err[128];
	struct json *v;
	int r = rel_ctl(buf, sizeof(buf), "status --json");

	if (r != 0) {
		h_fail("collcctl status --json exited %d: %.200s", r, buf);
		return NULL;
	}
	v = json_parse(buf, strlen(buf), err, sizeof(err));
	if (!v)
		h_fail("collcctl status --json printed no valid JSON (%s): %.300s", err, buf);
	return v;
}

/* The entry of the array st.list whose member key is the number want. */
static const struct json *status_entry(const struct json *st, const char *list, const char *key,
				       double want)
{
	const struct json *a = json_get(st, list);

	for (size_t i = 0; a && i < a->n; i++) {
		const struct json *e = json_at(a, i);

		if (json_num(json_get(e, key), -1) == want)
			return e;
	}
	return NULL;
}

const struct json *rel_status_client(const struct json *st, pid_t pid)
{
	return status_entry(st, "clients", "pid", (double)pid);
}

const struct json *rel_status_comm(const struct json *st, uint64_t comm_id)
{
	return status_entry(st, "comms", "id", (double)comm_id);
}

/* Processes */

int rel_wait_in_poll(pid_t pid, int timeout_ms)
{
	uint64_t deadline = h_now_ns() + (uint64_t)timeout_ms * 1000000;
	char path[64], buf[64];

	snprintf(path, sizeof(path), "/proc/%d/syscall", (int)pid);
	while (h_now_ns() < deadline) {
		FILE *f = fopen(path, "re");
		long nr = -1;

		if (f) {
			if (fgets(buf, sizeof(buf), f))
				nr = strtol(buf, NULL, 10);
			fclose(f);
		}
#ifdef SYS_poll
		if (nr == SYS_poll)
			return 0;
#endif
		if (nr == SYS_ppoll)
			return 0;
		h_sleep_us(500);
	}
	return -ETIMEDOUT;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

uint64_t rel_percentile(uint64_t *v, size_t n, double p)
{
	size_t i;

	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_u64);
	i = (size_t)(p * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

/* Steady clients */

int rel_steady_rank(struct rel_steady *s, int rank)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	const size_t cap = 1 << 20;
	void *send, *recv;
	uint64_t rng = h_seed ^ 0x57eadull;
	int r;

	if (h_join(&s->uid, 2, rank, &ctx, &comm) < 0)
		return 1;
	if ((r = collc_mem_alloc(ctx, cap, -1, &send)) < 0 ||
	    (r = collc_mem_alloc(ctx, cap, -1, &recv)) < 0)
		return h_fail("steady rank %d: collc_mem_alloc: %s", rank, collc_strerror(r));
	h_add(&s->joined, 1);
	for (uint32_t it = 0;; it++) {
		uint32_t stop = h_load(&s->stop_at);
		collc_dtype dt = (collc_dtype)h_rand_below(&rng, COLLC_NUM_DTYPES);
		collc_redop op = (collc_redop)h_rand_below(&rng, COLLC_NUM_REDOPS);
		static const size_t sizes[] = { 0, 1, 7, 1000, 4096, 65536, 262144, 1 << 20 };
		/* Mostly small; a 1 MiB one every 16th. */
		size_t count =
			sizes[h_rand_below(&rng, it % 16 == 0 ? 8 : 7)] / collc_dtype_size(dt);
		struct rc_case c = { dt, op, count, h_mix(h_seed ^ it), 2 };
		char what[128];
		collc_req req;

		if (stop && it >= stop)
			break;
		rc_fill(&c, rank, send);
		memset(recv, 0xa5, count * collc_dtype_size(dt));
		r = collc_allreduce(comm, send, recv, count, dt, op, &req);
		if (r == 0)
			r = collc_wait(ctx, req, 20000);
		if (r < 0) {
			s->errors[rank]++;
			return h_fail("steady rank %d: collective %u (%s %s x%zu) ended with %s",
				      rank, it, rc_dtype_name(dt), rc_op_name(op), count,
				      collc_strerror(r));
		}
		snprintf(what, sizeof(what), "steady rank %d: collective %u", rank, it);
		if (rc_check(&c, 2, recv, what, NULL)) {
			s->errors[rank]++;
			return 1;
		}
		s->bytes[rank] += count * collc_dtype_size(dt);
		h_store(&s->progress[rank], it + 1);
		if (s->pause_us)
			h_sleep_us(s->pause_us);
	}
	h_leave(ctx, comm);
	return 0;
}

void rel_steady_stop(struct rel_steady *s)
{
	uint32_t p0 = h_load(&s->progress[0]), p1 = h_load(&s->progress[1]);

	h_store(&s->stop_at, (p0 > p1 ? p0 : p1) + 3);
}
