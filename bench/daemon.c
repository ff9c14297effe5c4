/* SPDX-License-Identifier: MIT */
/*
 * --spawn-daemon: collcd on a socket in a fresh temporary directory, its
 * output in a log there. Ready when a client can connect; stopped with
 * SIGTERM (SIGKILL after 10 s). The log is kept, and named, when something
 * went wrong.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <collc.h>

#include "bench/bench.h"
#include "bench/daemon.h"
#include "bench/proc.h"

#define READY_TIMEOUT_S 60.0 /* CUDA initialization of every GPU can take a while */

static void print_log(const struct bench_daemon *d)
{
	char line[512];
	FILE *f = fopen(d->log, "re");

	if (!f)
		return;
	fprintf(stderr, "---- %s ----\n", d->log);
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fprintf(stderr, "----\n");
	fclose(f);
}

static void cleanup_dir(struct bench_daemon *d)
{
	unlink(d->log);
	unlink(d->sock);
	{
		char admin[160];

		snprintf(admin, sizeof(admin), "%s.admin", d->sock);
		unlink(admin);
	}
	rmdir(d->dir);
}

int daemon_spawn(const char *collcd, const char *backend, char *const *extra, int nextra,
		 struct bench_daemon *d)
{
	char *argv[8 + BENCH_MAX_EXTRA];
	double t0;
	int argc = 0, st;

	memset(d, 0, sizeof(*d));
	if (access(collcd, X_OK) < 0) {
		fprintf(stderr,
			"collc-bench: collcd not found at %s (build it, or pass --collcd PATH)\n",
			collcd);
		return -1;
	}
	snprintf(d->dir, sizeof(d->dir), "/tmp/collc-bench.XXXXXX");
	if (!mkdtemp(d->dir)) {
		fprintf(stderr, "collc-bench: mkdtemp: %s\n", strerror(errno));
		return -1;
	}
	snprintf(d->sock, sizeof(d->sock), "%s/collcd.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/collcd.log", d->dir);
	argv[argc++] = (char *)collcd;
	argv[argc++] = "--socket";
	argv[argc++] = d->sock;
	argv[argc++] = "--foreground";
	argv[argc++] = "--backend";
	argv[argc++] = (char *)backend;
	for (int i = 0; i < nextra; i++)
		argv[argc++] = extra[i];
	argv[argc] = NULL;

	fprintf(stderr, "collc-bench: starting");
	for (int i = 0; i < argc; i++)
		fprintf(stderr, " %s", argv[i]);
	fprintf(stderr, "\n");
	d->pid = fork();
	if (d->pid < 0) {
		fprintf(stderr, "collc-bench: fork: %s\n", strerror(errno));
		rmdir(d->dir);
		return -1;
	}
	if (d->pid == 0) {
		int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		/* Not in the bench's process group: a ^C reaches it through the bench's handler. */
		setpgid(0, 0);
		execv(collcd, argv);
		fprintf(stderr, "exec %s: %s\n", collcd, strerror(errno));
		_exit(127);
	}
	bench_child_add(d->pid);
	t0 = bench_now();
	for (;;) {
		struct collc_ctx *ctx;
		pid_t w = waitpid(d->pid, &st, WNOHANG);

		if (w == d->pid) {
			char why[96];

			bench_child_del(d->pid);
			bench_describe_status(st, why, sizeof(why));
			fprintf(stderr, "collc-bench: collcd %s before it was ready\n", why);
			print_log(d);
			cleanup_dir(d);
			d->pid = 0;
			return -1;
		}
		if (collc_connect(d->sock, &ctx) == 0) {
			collc_disconnect(ctx);
			break;
		}
		if (bench_now() - t0 > READY_TIMEOUT_S) {
			fprintf(stderr, "collc-bench: collcd not accepting clients after %.0f s\n",
				READY_TIMEOUT_S);
			daemon_stop(d);
			return -1;
		}
		bench_sleep_ms(20);
	}
	fprintf(stderr, "collc-bench: collcd ready on %s after %.2f s\n", d->sock,
		bench_now() - t0);
	return 0;
}

int daemon_stop(struct bench_daemon *d)
{
	double t0 = bench_now();
	int st = 0, killed = 0;
	char why[96];

	if (d->pid <= 0)
		return 0;
	if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
		/* It did not wait for us: a crash during the run is a finding, not noise. */
		bench_child_del(d->pid);
		d->pid = 0;
		bench_describe_status(st, why, sizeof(why));
		fprintf(stderr, "collc-bench: collcd %s during the run; its log: %s\n", why,
			d->log);
		print_log(d);
		return -1;
	}
	kill(d->pid, SIGTERM);
	for (;;) {
		pid_t w = waitpid(d->pid, &st, WNOHANG);

		if (w == d->pid || (w < 0 && errno != EINTR))
			break;
		if (!killed && bench_now() - t0 > 10.0) {
			fprintf(stderr, "collc-bench: collcd ignored SIGTERM for 10 s: SIGKILL\n");
			kill(d->pid, SIGKILL);
			killed = 1;
		}
		bench_sleep_ms(10);
	}
	bench_child_del(d->pid);
	d->pid = 0;
	if (!killed && WIFEXITED(st) && WEXITSTATUS(st) == 0) {
		cleanup_dir(d);
		return 0;
	}
	bench_describe_status(st, why, sizeof(why));
	fprintf(stderr, "collc-bench: collcd %s on SIGTERM; its log: %s\n", why, d->log);
	print_log(d);
	return -1;
}
