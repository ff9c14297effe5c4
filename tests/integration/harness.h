/* SPDX-License-Identifier: MIT */
/*
 * Integration-test harness: a real collcd on a private socket, rank processes
 * forked from the test, a watchdog, deterministic seeds, shared memory and a
 * barrier for the ranks.
 *
 * A test runs in its own process (one ctest entry per executable):
 *
 *   h_init("name", argc, argv, timeout_s);   seed, watchdog, cleanup hooks
 *   h_daemon_start(NULL);                      collcd --foreground on h_sock
 *   h_run_ranks(n, rank_main, arg);            fork n ranks, collect exit codes
 *   return h_finish(failed);                   stop collcd, PASS/FAIL/exit code
 *
 * Exit codes: 0 pass, 1 fail, 77 skipped (h_skip says why). On failure the
 * seed and the tail of collcd's log are printed; COLLC_TEST_SEED=N (or
 * --seed N) replays a run. COLLCD=PATH and COLLCCTL=PATH run other binaries,
 * COLLC_TEST_DAEMON_ARGS="--set k=v ..." passes it more arguments,
 * COLLC_TEST_DEBUG=1 adds --log-level debug, COLLC_TEST_KEEP=1 keeps its log,
 * COLLC_TEST_TIMEOUT_SCALE=N stretches the watchdog (sanitizer builds do x4).
 */
#ifndef COLLC_TEST_HARNESS_H
#define COLLC_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <collc.h>

#define H_SKIP 77
#define H_MAX_CHILDREN 256

extern const char *h_name;   /* the test's name, prefixes every line */
extern uint64_t h_seed;      /* the run's seed */
extern char h_sock[128];     /* the running collcd's socket */
extern pid_t h_daemon_pid;   /* 0 when no collcd runs */

/* Seed from --seed N or COLLC_TEST_SEED, else a fixed default; arms the watchdog. */
void h_init(const char *name, int argc, char **argv, unsigned timeout_s);

/* Starts collcd (extra arguments may be NULL) and waits until collc_connect works. */
void h_daemon_start(const char *const *extra_args);
/* 1 while the collcd started by h_daemon_start still runs. */
int h_daemon_alive(void);
/* SIGTERM, then SIGKILL after 5 s. Returns 0 when collcd had not died on its own and exited 0. */
int h_daemon_stop(void);
/* Kills collcd with sig on purpose and reaps it (no failure is reported). */
void h_daemon_kill(int sig);
/* Prints the last lines collcd logged (stdout and stderr). */
void h_daemon_log_tail(int lines);

/* Stops collcd, reports PASS or FAIL (with seed and collcd's log), returns the exit code. */
int h_finish(int failed);
/* Prints why and exits 77 after cleaning up. */
void h_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Prints "FAIL" with the seed and the test name; returns 1 (for `return h_fail(...)`). */
int h_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* One informative line, prefixed by the test name. */
void h_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Processes */
typedef int (*h_rank_fn)(int rank, int nranks, void *arg);
/* Forks one child that runs fn and _exits with its return value. */
pid_t h_spawn(h_rank_fn fn, int rank, int nranks, void *arg);
/*
 * Waits for the children; once one fails, the others get `grace_ms` before
 * they are killed. Statuses (from waitpid) go to status[] when not NULL.
 * Returns the number of children that did not exit 0.
 */
int h_reap(const pid_t *pids, int n, int *status, int grace_ms);
/* h_spawn for ranks 0..nranks-1, then h_reap. Returns the number of failed ranks. */
int h_run_ranks(int nranks, h_rank_fn fn, void *arg);

/* Ranks */
/* A fresh unique id from the running collcd (the parent calls this before forking). */
void h_unique_id(struct collc_unique_id *id);
/* collc_connect + collc_comm_init; prints and returns <0 on failure. */
int h_join(const struct collc_unique_id *id, int nranks, int rank, struct collc_ctx **ret_ctx,
	   struct collc_comm **ret_comm);

/* Memory shared by every process forked afterwards (MAP_SHARED | MAP_ANONYMOUS, zeroed). */
void *h_shared(size_t bytes);

/* A barrier across processes, in h_shared memory. */
struct h_barrier {
	uint32_t n;
	uint32_t count;
	uint32_t gen;
};
void h_barrier_init(struct h_barrier *b, uint32_t n);
/* 0, or -ETIMEDOUT when the others did not arrive within timeout_ms. */
int h_barrier_wait(struct h_barrier *b, int timeout_ms);

/* Time and randomness */
uint64_t h_now_ns(void);
uint64_t h_mix(uint64_t x); /* splitmix64 finalizer */
uint64_t h_rand(uint64_t *state);
/* A value in [0, n). */
uint64_t h_rand_below(uint64_t *state, uint64_t n);

/* The collcctl binary: $COLLCCTL, else the one this tree built. */
const char *h_collcctl(void);

/* Runs a command line with /bin/sh, its stdout into out (NUL-terminated). Returns the exit status or -1. */
int h_run_capture(const char *cmd, char *out, size_t outlen);

#endif /* COLLC_TEST_HARNESS_H */
