/* SPDX-License-Identifier: MIT */
/*
 * Reliability-test harness: one collcd on a private socket (started, killed,
 * restarted on the same path), forked client processes, a watchdog, seeds,
 * process-shared memory, `collcctl status --json` and what collcd uses
 * (open fds, VmRSS).
 *
 *   rel_init("name", argc, argv, watchdog_s);  seed, watchdog, cleanup
 *   rel_daemon_start(NULL);                     collcd --foreground on rel_sock
 *   pid = rel_spawn(fn, arg);                   a client process
 *   return rel_finish(failed);                  stop collcd (must exit 0), verdict
 *
 * Exit codes: 0 pass, 1 fail, 77 skipped (the reason is printed). On failure
 * the seed, the replay command and the tail of collcd's log are printed;
 * COLLC_TEST_SEED=N (or --seed N) replays a run. COLLC_TEST_KEEP=1 keeps the
 * log. A child that hits its watchdog exits 124.
 */
#ifndef COLLC_REL_H
#define COLLC_REL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <collc.h>

#include "rel_json.h"

#define REL_SKIP 77
#define REL_MAX_CHILDREN 512

extern const char *rel_name;
extern uint64_t rel_seed;
extern char rel_sock[128];
extern pid_t rel_daemon_pid;
extern unsigned rel_watchdog_s;

void rel_init(const char *name, int argc, char **argv, unsigned watchdog_s);
/* An unsigned from the environment, or dflt. */
uint64_t rel_env_u64(const char *name, uint64_t dflt);
/* 1 when this build runs under ASan or TSan (slower: tests scale down). */
int rel_sanitized(void);
/* 1 under TSan only (5-15x slower than a plain build). */
int rel_tsan(void);

void rel_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints FAIL with the seed and pid; returns 1. */
int rel_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints FAIL, collcd's log tail, and exits 1 (from the main process: after cleanup). */
void rel_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void rel_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* The daemon */
/* When > 0, collcd starts with this soft RLIMIT_NOFILE (the hard limit stays). */
extern long rel_daemon_nofile;
void rel_daemon_start(const char *const *extra_args);
int rel_daemon_alive(void);
/* SIGKILL and reap; returns the time of the kill (rel_now_ns). */
uint64_t rel_daemon_kill9(void);
/* SIGTERM; 0 when it exits 0 within 10 s and its log holds no sanitizer report. */
int rel_daemon_stop(void);
/* Open fds and VmRSS (KiB) of collcd; -1 when unreadable. */
int rel_daemon_fds(void);
long rel_daemon_rss_kb(void);
/* The fd count once it held still for 200 ms (sessions close asynchronously). */
int rel_daemon_settled_fds(void);
void rel_daemon_log_tail(int lines);
/* 1 when collcd's log names an ASan/UBSan/TSan/LSan report. */
int rel_daemon_log_has_report(void);
/* Stops collcd, prints PASS or FAIL, returns the exit code. */
int rel_finish(int failed);

/* collcctl --socket rel_sock ARGS; stdout into out. Returns the exit status or -1. */
int rel_ctl(char *out, size_t outlen, const char *args);
/* `collcctl status --json`, parsed; NULL (and a message) on failure. */
struct jv *rel_status(void);
/* The status entry of the client with this pid, of the communicator with this id. */
const struct jv *rel_status_client(const struct jv *st, pid_t pid);
const struct jv *rel_status_comm(const struct jv *st, uint64_t comm_id);

/* Processes */
typedef int (*rel_fn)(void *arg);
/* Forks a child running fn (watchdog armed, dies with the test); it _exits fn's value. */
pid_t rel_spawn(rel_fn fn, void *arg);
/* Waits up to timeout_ms (-1: no limit). 0 with *status, or -ETIMEDOUT. */
int rel_reap(pid_t pid, int timeout_ms, int *status);
/* 0 when the child exited 0; else prints why (with `what`) and returns 1. */
int rel_reap_ok(pid_t pid, int timeout_ms, const char *what);
void rel_describe_status(int st, char *out, size_t len);
/*
 * Waits until process pid sleeps in poll/ppoll (read from /proc/PID/syscall):
 * a libcollc control request has then been sent and waits for its reply.
 * 0, or -ETIMEDOUT.
 */
int rel_wait_in_poll(pid_t pid, int timeout_ms);

/* Memory shared by every process forked afterwards (zeroed). */
void *rel_shared(size_t bytes);
/* Waits until *word >= value; 0, or -ETIMEDOUT. */
int rel_wait_at_least(const uint32_t *word, uint32_t value, int timeout_ms);
void rel_store(uint32_t *word, uint32_t value);
uint32_t rel_load(const uint32_t *word);
uint32_t rel_add(uint32_t *word, uint32_t value); /* returns the new value */

struct rel_barrier {
	uint32_t n, count, gen;
};
void rel_barrier_init(struct rel_barrier *b, uint32_t n);
int rel_barrier_wait(struct rel_barrier *b, int timeout_ms);

/* Time and randomness */
uint64_t rel_now_ns(void);
void rel_sleep_us(uint64_t us);
uint64_t rel_mix(uint64_t x);
uint64_t rel_rand(uint64_t *state);
uint64_t rel_rand_below(uint64_t *state, uint64_t n);

/* Fresh unique ids from the running collcd (connects once, then disconnects). */
void rel_unique_ids(struct collc_unique_id *ids, int n);
/* collc_connect with a bounded number of retries on EAGAIN-like errors. */
int rel_connect(struct collc_ctx **ret_ctx);
/* rel_connect + collc_comm_init; prints and returns <0 on failure. */
int rel_join(const struct collc_unique_id *id, int nranks, int rank, struct collc_ctx **ret_ctx,
	     struct collc_comm **ret_comm);
/* p50 / max of n values (sorts in place). */
uint64_t rel_percentile(uint64_t *v, size_t n, double p);

#endif /* COLLC_REL_H */
