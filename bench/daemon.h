/* SPDX-License-Identifier: MIT */
/*
 * collcd for the bench, spawned on a temporary socket and stopped again.
 */
#ifndef COLLC_BENCH_DAEMON_H
#define COLLC_BENCH_DAEMON_H

#include <sys/types.h>

/* collcd, spawned on a temporary socket. */
struct bench_daemon {
	pid_t pid;
	char dir[64];
	char sock[128];
	char log[128];
};

int daemon_spawn(const char *collcd, const char *backend, char *const *extra, int nextra,
		 struct bench_daemon *d);
int daemon_stop(struct bench_daemon *d); /* 0 when it exited cleanly */

#endif /* COLLC_BENCH_DAEMON_H */
