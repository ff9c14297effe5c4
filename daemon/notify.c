/* SPDX-License-Identifier: MIT */
/*
 * sd_notify(3) glue. WATCHDOG=1 goes out only while the scheduler keeps
 * passing its loop: it wakes at least twice a second even when idle, so a
 * frozen pass counter means it is wedged, and the pings stop.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/log.h"
#include "daemon/notify.h"
#include "daemon/sched.h"

#ifdef COLLC_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#else
#define SD_LISTEN_FDS_START 3
static int sd_notify(int unset, const char *state)
{
	(void)unset;
	(void)state;
	return 0;
}
static int sd_listen_fds_with_names(int unset, char ***names)
{
	(void)unset;
	*names = NULL;
	return 0;
}
static int sd_watchdog_enabled(int unset, uint64_t *usec)
{
	(void)unset;
	(void)usec;
	return 0;
}
#endif

static uv_timer_t timer;
static int timer_started;
static uint64_t watchdog_usec;
static uint64_t last_loops;
static int fds[8];
static int admin[8];

int notify_listen_fds(const int **ret_fds, const int **ret_admin)
{
	char **names = NULL;
	int n = sd_listen_fds_with_names(1, &names), k = 0;

	for (int i = 0; i < n; i++) {
		if (k == (int)(sizeof(fds) / sizeof(fds[0]))) {
			log_warn("%d activated sockets: serving the first %d", n, k);
			break;
		}
		/* The socket named "admin" grants admin verbs to whoever may open it. */
		admin[k] = names && names[i] && strcmp(names[i], "admin") == 0;
		fds[k++] = SD_LISTEN_FDS_START + i;
	}
	if (names)
		for (int i = 0; i < n; i++)
			free(names[i]);
	free(names);
	*ret_fds = fds;
	*ret_admin = admin;
	return k;
}

static void on_timer(uv_timer_t *t)
{
	struct sched_counters c;
	char buf[256];

	sched_counters(&c);
	snprintf(buf, sizeof(buf),
		 "STATUS=%u clients, %u communicators, %u in flight, %" PRIu64
		 " completed, %" PRIu64 " errors",
		 c.clients, c.comms, c.inflight, c.completed, c.errors);
	sd_notify(0, buf);
	if (watchdog_usec && c.loops != last_loops)
		sd_notify(0, "WATCHDOG=1");
	else if (watchdog_usec)
		log_warn("scheduler made no pass since the last check: watchdog not fed");
	last_loops = c.loops;
}

int notify_init(uv_loop_t *loop)
{
	uint64_t period_ms = 2000;

	if (sd_watchdog_enabled(0, &watchdog_usec) > 0 && watchdog_usec) {
		/* Check twice per watchdog period; the scheduler passes at least every 500 ms. */
		period_ms = watchdog_usec / 2000;
		if (period_ms < 600)
			period_ms = 600;
	} else {
		watchdog_usec = 0;
	}
	uv_timer_init(loop, &timer);
	uv_unref((uv_handle_t *)&timer);
	uv_timer_start(&timer, on_timer, period_ms, period_ms);
	timer_started = 1;
	return 0;
}

void notify_fini(void)
{
	if (!timer_started)
		return;
	uv_timer_stop(&timer);
	uv_close((uv_handle_t *)&timer, NULL);
	timer_started = 0;
}

void notify_ready(void)
{
	struct sched_counters c;
	char buf[128];

	sched_counters(&c);
	last_loops = c.loops;
	snprintf(buf, sizeof(buf), "READY=1\nSTATUS=serving: %u clients", c.clients);
	sd_notify(0, buf);
}

void notify_reloading(void)
{
	struct timespec ts;
	char buf[64];

	clock_gettime(CLOCK_MONOTONIC, &ts);
	snprintf(buf, sizeof(buf), "RELOADING=1\nMONOTONIC_USEC=%" PRIu64,
		 (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000);
	sd_notify(0, buf);
}

void notify_stopping(void)
{
	sd_notify(0, "STOPPING=1");
}
