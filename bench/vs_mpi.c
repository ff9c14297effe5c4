/* SPDX-License-Identifier: MIT */
/*
 * --vs-mpi: runs collc-mpi-peer (mpi_peer.c) under mpirun with the same
 * collective, dtype, sizes, iterations and depth, and parses the lines its
 * rank 0 prints:
 *   COLLC-PEER-INFO <MPI library version>
 *   COLLC-PEER <size index> <bytes> ok <p50 us> <p99 us> <pipelined us>
 *   COLLC-PEER <size index> <bytes> wrong|error <message>
 * Other output passes through to stderr.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/proc.h"
#include "bench/vs_mpi.h"

static void parse_line(const struct bench_cfg *cfg, char *line, struct size_stats *st)
{
	int idx, n = 0;
	unsigned long long bytes;
	char word[16];
	struct size_stats *s;

	if (strncmp(line, "COLLC-PEER-INFO ", 16) == 0) {
		fprintf(stderr, "collc-bench: peer: %s", line + 16);
		return;
	}
	if (sscanf(line, "COLLC-PEER %d %llu %15s %n", &idx, &bytes, word, &n) != 3 || !n) {
		fprintf(stderr, "mpi: %s", line);
		return;
	}
	if (idx < 0 || idx >= cfg->nsizes || bytes != cfg->sizes[idx].bytes) {
		fprintf(stderr, "collc-bench: peer line for an unknown size: %s", line);
		return;
	}
	s = &st[idx];
	line[strcspn(line, "\n")] = 0;
	if (strcmp(word, "ok") == 0 &&
	    sscanf(line + n, "%lf %lf %lf", &s->p50_us, &s->p99_us, &s->pipe_us) == 3) {
		s->status = RES_OK;
	} else {
		s->status = strcmp(word, "wrong") == 0 ? RES_WRONG : RES_ERROR;
		snprintf(s->msg, sizeof(s->msg), "MPI: %s", line + n);
	}
}

int mpi_peer_run(const struct bench_cfg *cfg, const struct mpi_opts *mo, struct size_stats *st)
{
	char np[16], iters[16], warmup[16], depth[16], root[16];
	char *sizes, *argv[40 + BENCH_MAX_EXTRA], line[1024];
	size_t off = 0, cap = (size_t)cfg->nsizes * 24 + 1;
	int argc = 0, pfd[2], status;
	FILE *f;
	pid_t pid;

	if (!mo->peer || access(mo->peer, X_OK) < 0) {
		fprintf(stderr,
			"collc-bench: --vs-mpi needs collc-mpi-peer (%s); build with MPI found by "
			"CMake (Debian: openmpi-bin libopenmpi-dev) or pass --mpi-peer PATH\n",
			mo->peer ? mo->peer : "not built");
		return -1;
	}
	sizes = malloc(cap);
	if (!sizes)
		return -1;
	sizes[0] = 0;
	for (int i = 0; i < cfg->nsizes; i++)
		off += (size_t)snprintf(sizes + off, cap - off, "%s%" PRIu64, i ? "," : "",
					cfg->sizes[i].bytes);
	snprintf(np, sizeof(np), "%d", cfg->nranks);
	snprintf(iters, sizeof(iters), "%d", cfg->iters);
	snprintf(warmup, sizeof(warmup), "%d", cfg->warmup);
	snprintf(depth, sizeof(depth), "%d", cfg->depth);
	snprintf(root, sizeof(root), "%d", cfg->root);
	argv[argc++] = (char *)mo->mpirun;
	argv[argc++] = "--oversubscribe";
	argv[argc++] = "--allow-run-as-root";
	argv[argc++] = "-np";
	argv[argc++] = np;
	/* ob1 over the shared-memory BTL (vader in Open MPI 4, "sm" in 5) or over TCP. */
	argv[argc++] = "--mca";
	argv[argc++] = "pml";
	argv[argc++] = "ob1";
	argv[argc++] = "--mca";
	argv[argc++] = "btl";
	argv[argc++] = (char *)(mo->btl ? mo->btl : "self,vader");
	for (int i = 0; i < mo->nextra; i++)
		argv[argc++] = mo->extra[i];
	argv[argc++] = (char *)mo->peer;
	argv[argc++] = "--coll";
	argv[argc++] = (char *)bench_coll_names[cfg->coll];
	argv[argc++] = "--dtype";
	argv[argc++] = (char *)bench_dtype_names[cfg->dtype];
	argv[argc++] = "--root";
	argv[argc++] = root;
	argv[argc++] = "--iters";
	argv[argc++] = iters;
	argv[argc++] = "--warmup";
	argv[argc++] = warmup;
	argv[argc++] = "--depth";
	argv[argc++] = depth;
	argv[argc++] = "--sizes";
	argv[argc++] = sizes;
	argv[argc] = NULL;

	fprintf(stderr, "collc-bench: running");
	for (int i = 0; i < argc; i++)
		fprintf(stderr, " %s", i == argc - 1 && strlen(argv[i]) > 60 ? "<sizes>" : argv[i]);
	fprintf(stderr, "\n");
	if (pipe2(pfd, O_CLOEXEC) < 0) {
		free(sizes);
		return -1;
	}
	pid = bench_fork();
	if (pid == 0) {
		dup2(pfd[1], 1);
		setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
		setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
		execvp(argv[0], argv);
		fprintf(stderr, "collc-bench: exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(pfd[1]);
	free(sizes);
	if (pid < 0) {
		close(pfd[0]);
		return -1;
	}
	f = fdopen(pfd[0], "r");
	while (f && fgets(line, sizeof(line), f))
		parse_line(cfg, line, st);
	if (f)
		fclose(f);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	bench_child_del(pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "collc-bench: mpirun %s %d\n",
			WIFEXITED(status) ? "exited with status" : "killed by signal",
			WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
		return -1;
	}
	return 0;
}
