/* SPDX-License-Identifier: MIT */
/*
 * Processes and time for the bench: the children a signal must stop, a
 * monotonic clock, a sleep.
 */
#ifndef COLLC_BENCH_PROC_H
#define COLLC_BENCH_PROC_H

#include <sched.h>
#include <stddef.h>
#include <sys/types.h>

double bench_now(void);
void bench_sleep_ms(int ms);

/* Remembers a child for the signal handler, which stops them all on SIGINT/SIGTERM. */
void bench_child_add(pid_t pid);
void bench_child_del(pid_t pid);
/* Installs that handler (collc-bench's main process). */
void bench_catch_signals(void);
/* fork(); the child gets the default signal handling back, the parent remembers it. */
pid_t bench_fork(void);
/* A waitpid status in words. */
void bench_describe_status(int st, char *buf, size_t len);

/* The pid of the process behind a unix socket (SO_PEERCRED): collcd. -errno on failure. */
pid_t bench_socket_pid(const char *path);
/*
 * The CPUs pid may run on: 1 when narrower than the online CPUs (a daemon
 * pinned to its "node's" CPUs; with describe, in words: "0-1,4"), 0 when
 * it may run anywhere, -errno.
 */
int bench_pid_cpus(pid_t pid, cpu_set_t *set, char *describe, size_t len);
/*
 * Across daemons, a process runs where the daemon of its node runs: the
 * caller takes pid's CPUs when bench_pid_cpus() says they are narrower.
 * 1 when it did, 0 when not, -errno.
 */
int bench_follow_cpus(pid_t pid);

#endif /* COLLC_BENCH_PROC_H */
