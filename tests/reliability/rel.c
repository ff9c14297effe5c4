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

struct jv *rel_status(void)
{
	static char buf[1 << 20];
	struct jv *v;
	int r = rel_ctl(buf, sizeof(buf), "status --json");

	if (r != 0) {
		h_fail("collcctl status --json exited %d: %.200s", r, buf);
		return NULL;
	}
	v = jv_parse(buf);
	if (!v)
		h_fail("collcctl status --json printed no valid JSON: %.300s", buf);
	return v;
}

/* The entry of the array st.list whose member key is the number want. */
static const struct jv *status_entry(const struct jv *st, const char *list, const char *key,
				     double want)
{
	const struct jv *a = jv_get(st, list);

	for (size_t i = 0; a && i < a->n; i++) {
		const struct jv *e = jv_at(a, i);

		if (jv_num(jv_get(e, key), -1) == want)
			return e;
	}
	return NULL;
}

const struct jv *rel_status_client(const struct jv *st, pid_t pid)
{
	return status_entry(st, "clients", "pid", (double)pid);
}

const struct jv *rel_status_comm(const struct jv *st, uint64_t comm_id)
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
