/* SPDX-License-Identifier: MIT */
/*
 * Reliability-test harness: the common test harness (tests/common/harness.h)
 * under the names the reliability tests use, started with this suite's
 * limits, plus `collcctl status --json` and what collcd uses (open fds,
 * VmRSS). One collcd on a private socket (started, killed, restarted on the
 * same path), forked client processes, a watchdog, seeds, process-shared
 * memory.
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

#include "harness.h"
#include "rel_json.h"

#define REL_SKIP H_SKIP
#define REL_MAX_CHILDREN H_MAX_CHILDREN

#define rel_name h_name
#define rel_seed h_seed
#define rel_sock h_sock
#define rel_daemon_pid h_daemon_pid
#define rel_watchdog_s h_watchdog_s

/*
 * The watchdog is not scaled: the tests shorten their own work under the
 * sanitizers. collcd gets 20 s to start and 10 s to exit, and a sanitizer
 * report in its log fails the test.
 */
void rel_init(const char *name, int argc, char **argv, unsigned watchdog_s);
/* An unsigned from the environment, or dflt. */
uint64_t rel_env_u64(const char *name, uint64_t dflt);
#define rel_sanitized h_sanitized
#define rel_tsan h_tsan

#define rel_log h_log
/* Prints FAIL with the seed and pid; returns 1. */
#define rel_fail h_fail
/* Prints FAIL, collcd's log tail, and exits 1 (from the main process: after cleanup). */
#define rel_die h_die
#define rel_skip h_skip

/* The daemon */
/* When > 0, collcd starts with this soft RLIMIT_NOFILE (the hard limit stays). */
#define rel_daemon_nofile h_daemon_nofile
#define rel_daemon_start h_daemon_start
#define rel_daemon_alive h_daemon_alive
/* SIGKILL and reap; returns the time of the kill (rel_now_ns). */
uint64_t rel_daemon_kill9(void);
/* SIGTERM; 0 when it exits 0 within 10 s and its log holds no sanitizer report. */
#define rel_daemon_stop h_daemon_stop
/* Open fds and VmRSS (KiB) of collcd; -1 when unreadable. */
int rel_daemon_fds(void);
long rel_daemon_rss_kb(void);
/* The fd count once it held still for 200 ms (sessions close asynchronously). */
int rel_daemon_settled_fds(void);
#define rel_daemon_log_tail h_daemon_log_tail
/* 1 when collcd's log names an ASan/UBSan/TSan/LSan report. */
#define rel_daemon_log_has_report h_daemon_log_has_report
/* Stops collcd, prints PASS or FAIL, returns the exit code. */
#define rel_finish h_finish

/* collcctl --socket rel_sock ARGS; stdout into out. Returns the exit status or -1. */
int rel_ctl(char *out, size_t outlen, const char *args);
/* `collcctl status --json`, parsed; NULL (and a message) on failure. */
struct jv *rel_status(void);
/* The status entry of the client with this pid, of the communicator with this id. */
const struct jv *rel_status_client(const struct jv *st, pid_t pid);
const struct jv *rel_status_comm(const struct jv *st, uint64_t comm_id);

/* Processes */
typedef h_fn rel_fn;
/* Forks a child running fn (watchdog armed, dies with the test); it _exits fn's value. */
#define rel_spawn h_fork
/* Waits up to timeout_ms (-1: no limit). 0 with *status, or -ETIMEDOUT. */
#define rel_reap h_reap_one
/* 0 when the child exited 0; else prints why (with `what`) and returns 1. */
#define rel_reap_ok h_reap_one_ok
#define rel_describe_status h_describe_status
/*
 * Waits until process pid sleeps in poll/ppoll (read from /proc/PID/syscall):
 * a libcollc control request has then been sent and waits for its reply.
 * 0, or -ETIMEDOUT.
 */
int rel_wait_in_poll(pid_t pid, int timeout_ms);

/* Memory shared by every process forked afterwards (zeroed). */
#define rel_shared h_shared
/* Waits until *word >= value; 0, or -ETIMEDOUT. */
#define rel_wait_at_least h_wait_at_least
#define rel_store h_store
#define rel_load h_load
#define rel_add h_add /* returns the new value */

#define rel_barrier h_barrier
#define rel_barrier_init h_barrier_init
#define rel_barrier_wait h_barrier_wait

/* Time and randomness */
#define rel_now_ns h_now_ns
#define rel_sleep_us h_sleep_us
#define rel_mix h_mix
#define rel_rand h_rand
#define rel_rand_below h_rand_below

/* Fresh unique ids from the running collcd (connects once, then disconnects). */
#define rel_unique_ids h_unique_ids
/* collc_connect with a bounded number of retries on EAGAIN-like errors. */
#define rel_connect h_connect
/* rel_connect + collc_comm_init; prints and returns <0 on failure. */
#define rel_join h_join
/* p50 / max of n values (sorts in place). */
uint64_t rel_percentile(uint64_t *v, size_t n, double p);

#endif /* COLLC_REL_H */
