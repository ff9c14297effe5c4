/* SPDX-License-Identifier: MIT */
/* Processes and time for the bench (see proc.h). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"
#include "bench/proc.h"

double bench_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void bench_sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* Children, for the signal handler: every rank, collcd, mpirun. */
static volatile pid_t children[BENCH_MAX_RANKS + 4];

void bench_child_add(pid_t pid)
{
	for (size_t i = 0; i < sizeof(children) / sizeof(children[0]); i++)
		if (children[i] == 0) {
			children[i] = pid;
			return;
		}
}

void bench_child_del(pid_t pid)
{
	for (size_t i = 0; i < sizeof(children) / sizeof(children[0]); i++)
		if (children[i] == pid)
			children[i] = 0;
}

static void on_signal(int sig)
{
	for (size_t i = 0; i < sizeof(children) / sizeof(children[0]); i++)
		if (children[i] > 0)
			kill(children[i], SIGTERM);
	signal(sig, SIG_DFL);
	raise(sig);
}

void bench_catch_signals(void)
{
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
}

pid_t bench_fork(void)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
	} else if (pid > 0) {
		bench_child_add(pid);
	}
	return pid;
}

void bench_describe_status(int st, char *buf, size_t len)
{
	if (WIFEXITED(st))
		snprintf(buf, len, "exited with status %d", WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(st),
			 strsignal(WTERMSIG(st)));
	else
		snprintf(buf, len, "stopped (status 0x%x)", st);
}
