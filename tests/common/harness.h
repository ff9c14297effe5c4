/* SPDX-License-Identifier: MIT */
/*
 * Test harness of the integration, reliability, protocol and operations
 * tests: a real collcd on a private socket (started, killed, restarted on the
 * same path), processes forked from the test, a watchdog, deterministic seeds,
 * process-shared memory and a barrier.
 *
 * A test runs in its own process (one ctest entry per executable):
 *
 *   h_init("name", argc, argv, timeout_s);   seed, watchdog, cleanup hooks
 *   h_daemon_start(NULL);                      collcd --foreground on h_sock
 *   h_run_ranks(n, rank_main, arg);            fork n ranks, collect exit codes
 *   return h_finish(failed);                   stop collcd, PASS/FAIL/exit code
 *
 * The reliability tests reach the same code under their own names (rel.h),
 * started by h_init_suite with the limits of their suite.
 *
 * Exit codes: 0 pass, 1 fail, 77 skipped (h_skip says why); a child that hits
 * its watchdog exits 124. On failure the seed and the tail of collcd's log are
 * printed; COLLC_TEST_SEED=N (or --seed N) replays a run. COLLCD=PATH and
 * COLLCCTL=PATH run other binaries, COLLC_TEST_DAEMON_ARGS="--set k=v ..."
 * passes collcd more arguments, COLLC_TEST_DEBUG=1 adds --log-level debug,
 * COLLC_TEST_KEEP=1 keeps its log, COLLC_TEST_TIMEOUT_SCALE=N stretches
 * h_init's watchdog (sanitizer builds of the integration tests do x4).
 */
#ifndef COLLC_TEST_HARNESS_H
#define COLLC_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <collc.h>

#define H_SKIP         77
#define H_MAX_CHILDREN 512
/* File descriptors h_send_fds passes at most. */
#define H_MAX_SEND_FDS 8 /* SCM_SEND_MAX_FDS */

extern const char *h_name; /* the test's name, prefixes every line */
extern uint64_t h_seed;    /* the run's seed */
extern char h_sock[128];   /* collcd's socket (in a directory of the test's own) */
extern pid_t h_daemon_pid; /* 0 when no collcd runs */
extern unsigned h_watchdog_s;
/* When > 0, collcd starts with this soft RLIMIT_NOFILE (the hard limit stays). */
extern long h_daemon_nofile;

/* What a suite sets differently; h_init uses the integration suite's. */
struct h_suite {
	const char *tmpdir;  /* mkdtemp template of the directory for socket and log */
	int start_ms;        /* collcd accepts connections within, or the test fails */
	int stop_ms;         /* collcd exits within, after SIGTERM */
	int command_ms;      /* h_run_capture kills a command after */
	int connect_tries;   /* h_connect tries this often, 5 ms apart, while collcd is not there */
	int stop_checks_log; /* a sanitizer report in collcd's log fails h_daemon_stop */
};

/*
 * Seed from --seed N or COLLC_TEST_SEED, else one derived from the name; arms
 * the watchdog (timeout_s, scaled for sanitizer builds and by
 * COLLC_TEST_TIMEOUT_SCALE).
 */
void h_init(const char *name, int argc, char **argv, unsigned timeout_s);
/* The same with a suite's limits and the watchdog as given. */
void h_init_suite(const struct h_suite *suite, const char *name, int argc, char **argv,
		  unsigned watchdog_s);

/* Starts collcd (extra arguments may be NULL) and waits until collc_connect works. */
void h_daemon_start(const char *const *extra_args);
/*
 * The "--set KEY=VALUE" pairs among argv[2..] as collcd arguments in dargs (at
 * most 30 entries, then NULL), and the test's name "<base>_<nranks>ranks" with
 * "_KEY=VALUE" for each pair (malloc'ed).
 */
char *h_daemon_sets(const char *base, int nranks, int argc, char **argv, const char **dargs);
/* `collcctl status --json` counts each of ops under totals.by_op: 0, else a failure. */
int h_check_by_op(const char *const *ops, int nops);
struct json;
/*
 * `collcctl status --json` of the collcd on h_sock, its text in out and
 * parsed (json_free() it); NULL after an h_fail().
 */
struct json *h_status_json(char *out, size_t outlen);
/*
 * Waits until `collcctl status --json` lists a forming communicator of
 * nranks ranks with exactly the ranks of joined_mask joined: 0, or a failure
 * after timeout_ms.
 */
int h_wait_forming(uint32_t nranks, uint64_t joined_mask, int timeout_ms);
/* 1 while the collcd started by h_daemon_start still runs. */
int h_daemon_alive(void);
/*
 * SIGTERM, then SIGKILL after the suite's stop_ms. Returns 0 when collcd had
 * not died on its own and exited 0 (and, where the suite asks, logged no
 * sanitizer report).
 */
int h_daemon_stop(void);
/* Kills collcd with sig on purpose and reaps it (no failure is reported). */
void h_daemon_kill(int sig);
/* Prints the last lines collcd logged (stdout and stderr). */
void h_daemon_log_tail(int lines);
/* 1 when collcd's log names an ASan/UBSan/TSan/LSan report. */
int h_daemon_log_has_report(void);

/* Stops collcd, reports PASS or FAIL (with seed and collcd's log), returns the exit code. */
int h_finish(int failed);
/* Prints why and exits 77 after cleaning up. */
void h_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Prints "FAIL" with the seed and the pid; returns 1 (for `return h_fail(...)`). */
int h_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints FAIL and exits 1: the main process after collcd's log tail and cleanup. */
void h_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* One informative line, prefixed by the test name. */
void h_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Processes */
typedef int (*h_fn)(void *arg);
typedef int (*h_rank_fn)(int rank, int nranks, void *arg);
/* Forks a child running fn (watchdog armed, dies with the test); it _exits fn's value. */
pid_t h_fork(h_fn fn, void *arg);
/* h_fork of fn(rank, nranks, arg). */
pid_t h_spawn(h_rank_fn fn, int rank, int nranks, void *arg);
/*
 * Waits for the children; once one fails, the others get `grace_ms` before
 * they are killed. Statuses (from waitpid) go to status[] when not NULL.
 * Returns the number of children that did not exit 0.
 */
int h_reap(const pid_t *pids, int n, int *status, int grace_ms);
/* h_spawn for ranks 0..nranks-1, then h_reap. Returns the number of failed ranks. */
int h_run_ranks(int nranks, h_rank_fn fn, void *arg);
/*
 * The usual test after h_init: collcd (no extra arguments), nids fresh
 * communicator ids into ids[], h_run_ranks, and h_finish's exit code.
 */
int h_run_comm_test(struct collc_unique_id *ids, int nids, int nranks, h_rank_fn fn, void *arg);
/* Waits for one child up to timeout_ms (-1: no limit). 0 with *status, or -ETIMEDOUT. */
int h_reap_one(pid_t pid, int timeout_ms, int *status);
/* 0 when the child exited 0; else prints why (with `what`) and returns 1. */
int h_reap_one_ok(pid_t pid, int timeout_ms, const char *what);
/* h_reap_one_ok of each of pids[0..n), named "<what> 0", "<what> 1", ...: 1 when one failed. */
int h_reap_all_ok(const pid_t *pids, int n, int timeout_ms, const char *what);
void h_describe_status(int st, char *out, size_t len);
/* Entries of /proc/PID/<dir> ("fd": open files, "task": threads); -1 when unreadable. */
int h_proc_count(pid_t pid, const char *dir);

/* Ranks */
/* collc_connect, tried as often as the suite says while collcd is not there. */
int h_connect(struct collc_ctx **ret_ctx);
/* Fresh unique ids from the running collcd (the parent calls this before forking). */
void h_unique_ids(struct collc_unique_id *ids, int n);
void h_unique_id(struct collc_unique_id *id);
/* h_connect + collc_comm_init; prints and returns <0 on failure. */
int h_join(const struct collc_unique_id *id, int nranks, int rank, struct collc_ctx **ret_ctx,
	   struct collc_comm **ret_comm);
/* h_join undone: collc_comm_destroy(comm), then collc_disconnect(ctx). */
void h_leave(struct collc_ctx *ctx, struct collc_comm *comm);
/*
 * h_join, then host buffers of `bytes` each from collc_mem_alloc (the second
 * only when ret_recv is not NULL); prints and returns <0 on failure.
 */
int h_join_alloc(const struct collc_unique_id *id, int nranks, int rank, size_t bytes,
		 struct collc_ctx **ret_ctx, struct collc_comm **ret_comm, void **ret_send,
		 void **ret_recv);

struct rc_case;
/*
 * rc_fill of rank's input (refcheck.h) into send, an all-reduce of it into
 * recv waited for up to 10 s, rc_check of the result: 0, or prints (naming
 * `what`) and returns 1.
 */
int h_allreduce(const struct rc_case *c, struct collc_ctx *ctx, struct collc_comm *comm, int rank,
		int nranks, void *send, void *recv, const char *what);
/*
 * A rank of communicator id: joins, runs h_allreduce of c `times` times (the
 * seed one higher each time) and leaves. 0 when every result was right, else
 * 1 (after saying why).
 */
int h_join_allreduce(const struct collc_unique_id *id, const struct rc_case *c, int times, int rank,
		     int nranks, const char *what);

/* Memory shared by every process forked afterwards (MAP_SHARED | MAP_ANONYMOUS, zeroed). */
void *h_shared(size_t bytes);
/* Words in h_shared memory; stores and adds wake the waiters. */
void h_store(uint32_t *word, uint32_t value);
uint32_t h_load(const uint32_t *word);
uint32_t h_add(uint32_t *word, uint32_t value); /* returns the new value */
/* Waits until *word >= value; 0, or -ETIMEDOUT (timeout_ms -1: no limit). */
int h_wait_at_least(const uint32_t *word, uint32_t value, int timeout_ms);

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
void h_sleep_us(uint64_t us);
uint64_t h_mix(uint64_t x); /* splitmix64 finalizer */
/* Byte b of what rank `from` sends rank `to` in case k, from h_seed (point-to-point tests). */
uint8_t h_pattern(uint64_t k, uint32_t from, uint32_t to, uint64_t b);
uint64_t h_rand(uint64_t *state);
/* A value in [0, n). */
uint64_t h_rand_below(uint64_t *state, uint64_t n);

/* 1 when this build runs under ASan or TSan (slower: tests scale down). */
int h_sanitized(void);
/* 1 under TSan only (5-15x slower than a plain build). */
int h_tsan(void);

/* The collcctl binary: $COLLCCTL, else the one this tree built. */
const char *h_collcctl(void);
/* Runs a command line with /bin/sh, its stdout into out (NUL-terminated). Returns the exit status or -1. */
int h_run_capture(const char *cmd, char *out, size_t outlen);

/*
 * One datagram on a raw connection to collcd, with up to H_MAX_SEND_FDS file
 * descriptors (SCM_RIGHTS); flags go to sendmsg. 0 or -errno.
 */
int h_send_fds(int fd, const void *buf, size_t len, const int *fds, int nfds, int flags);
/* A raw SOCK_SEQPACKET connection to collcd's socket, no hello yet: the fd, or -errno. */
int h_raw_connect(void);
/*
 * Writes a wire header (this version's magic, type, id, length len) and the
 * payload into buf (room for COLLC_MSG_MAX); returns the datagram's length.
 */
size_t h_raw_msg(void *buf, uint16_t type, uint32_t id, const void *payload, size_t len);
/*
 * One datagram from fd into buf, waiting up to timeout_ms for it; up to
 * max_fds of the descriptors it carries go to fds[] and *nfds says how many
 * (fds and nfds both NULL: all are closed), the others are closed. Returns
 * its length, 0 when collcd hung up, -ETIMEDOUT or -errno.
 */
ssize_t h_recv_fds(int fd, void *buf, size_t len, int *fds, int max_fds, int *nfds, int timeout_ms);

#endif /* COLLC_TEST_HARNESS_H */
