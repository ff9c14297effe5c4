/* SPDX-License-Identifier: MIT */
/*
 * Processes and time for the bench: the children a signal must stop, a
 * monotonic clock, a sleep.
 */
#ifndef COLLC_BENCH_PROC_H
#define COLLC_BENCH_PROC_H

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

#endif /* COLLC_BENCH_PROC_H */
