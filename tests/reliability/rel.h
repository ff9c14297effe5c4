/* SPDX-License-Identifier: MIT */
/*
 * What only the reliability tests need on top of the common test harness
 * (tests/common/harness.h, which starts collcd, forks the clients and judges
 * the run): this suite's limits, `collcctl status --json`, what collcd uses
 * (open fds, VmRSS) and a pair of steady clients.
 *
 *   rel_init("name", argc, argv, watchdog_s);  h_init with this suite's limits
 *   h_daemon_start(NULL);                       collcd --foreground on h_sock
 *   pid = h_fork(fn, arg);                      a client process
 *   return h_finish(failed);                    stop collcd (must exit 0), verdict
 *
 * Their results are checked with tests/common/refcheck.h, mostly on exact
 * data (rc_case.exact): every element bit for bit.
 */
#ifndef COLLC_REL_H
#define COLLC_REL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <collc.h>

#include "harness.h"
#include "json.h"

/*
 * The watchdog is not scaled: the tests shorten their own work under the
 * sanitizers. collcd gets 20 s to start and 10 s to exit, and a sanitizer
 * report in its log fails the test.
 */
void rel_init(const char *name, int argc, char **argv, unsigned watchdog_s);
/* An unsigned from the environment, or dflt. */
uint64_t rel_env_u64(const char *name, uint64_t dflt);

/* The daemon */
/* SIGKILL and reap; returns the time of the kill (h_now_ns). */
uint64_t rel_daemon_kill9(void);
/* Open fds and VmRSS (KiB) of collcd; -1 when unreadable. */
int rel_daemon_fds(void);
long rel_daemon_rss_kb(void);
/* The fd count once it held still for 200 ms (sessions close asynchronously). */
int rel_daemon_settled_fds(void);

/* collcctl --socket h_sock ARGS; stdout into out. Returns the exit status or -1. */
int rel_ctl(char *out, size_t outlen, const char *args);
/* `collcctl status --json`, parsed (json_free it); NULL (and a message) on failure. */
struct json *rel_status(void);
/* The status entry of the client with this pid, of the communicator with this id. */
const struct json *rel_status_client(const struct json *st, pid_t pid);
const struct json *rel_status_comm(const struct json *st, uint64_t comm_id);

/*
 * Waits until process pid sleeps in poll/ppoll (read from /proc/PID/syscall):
 * a libcollc control request has then been sent and waits for its reply.
 * 0, or -ETIMEDOUT.
 */
int rel_wait_in_poll(pid_t pid, int timeout_ms);

/* p50 / max of n values (sorts in place). */
uint64_t rel_percentile(uint64_t *v, size_t n, double p);

/*
 * A pair of processes running correct all-reduces of random dtype, op and
 * size (0..1 MiB, pause_us apart) on their own communicator, checking every
 * result, until rel_steady_stop(). Both ranks draw the same sequence.
 */
struct rel_steady {
	struct collc_unique_id uid;
	uint32_t pause_us;
	uint32_t joined;
	uint32_t stop_at;     /* 0: run on */
	uint32_t progress[2]; /* collectives done by each rank */
	uint32_t errors[2];
	uint64_t bytes[2];
};
/* The body of rank `rank` (0 or 1): 0 when every collective was correct. */
int rel_steady_rank(struct rel_steady *s, int rank);
/* Makes both ranks stop after the same collective (they are at most one apart). */
void rel_steady_stop(struct rel_steady *s);

#endif /* COLLC_REL_H */
