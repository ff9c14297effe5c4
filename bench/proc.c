/* SPDX-License-Identifier: MIT */
/* Processes and time for the bench (see proc.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
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

pid_t bench_socket_pid(const char *path)
{
	static const int types[] = { SOCK_SEQPACKET, SOCK_STREAM };
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		int fd = socket(AF_UNIX, types[i] | SOCK_CLOEXEC, 0), r;

		if (fd < 0)
			return -errno;
		r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
		if (r == 0)
			r = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len);
		close(fd);
		if (r == 0)
			return cred.pid;
		if (errno != EPROTOTYPE)
			return -errno;
	}
	return -EPROTOTYPE;
}

/* "0-1,4": the CPUs of set in ranges. */
static void describe_cpus(const cpu_set_t *set, char *out, size_t len)
{
	size_t n = 0;

	out[0] = 0;
	for (int c = 0; c < CPU_SETSIZE && n < len; c++) {
		int e = c;

		if (!CPU_ISSET(c, set))
			continue;
		while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set))
			e++;
		n += (size_t)snprintf(out + n, len - n, e > c ? "%s%d-%d" : "%s%d", n ? "," : "", c,
				      e);
		c = e;
	}
}

int bench_pid_cpus(pid_t pid, cpu_set_t *set, char *describe, size_t len)
{
	long online = sysconf(_SC_NPROCESSORS_ONLN);

	if (describe && len)
		describe[0] = 0;
	if (sched_getaffinity(pid, sizeof(*set), set) < 0)
		return -errno;
	if (online > 0 && CPU_COUNT(set) >= online)
		return 0;
	if (describe && len)
		describe_cpus(set, describe, len);
	return 1;
}

int bench_follow_cpus(pid_t pid)
{
	cpu_set_t set;
	int r = bench_pid_cpus(pid, &set, NULL, 0);

	if (r <= 0)
		return r;
	return sched_setaffinity(0, sizeof(set), &set) < 0 ? -errno : 1;
}
