/* SPDX-License-Identifier: MIT */
/* Shared (not private) futexes: the words live in memory several processes map. */
#ifndef COLLC_COMMON_FUTEX_H
#define COLLC_COMMON_FUTEX_H

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Sleeps while *word == expected, at most timeout_ns (< 0: no limit). */
static inline int futex_wait(uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
	struct timespec ts, *tsp = NULL;

	if (timeout_ns >= 0) {
		ts.tv_sec = timeout_ns / 1000000000;
		ts.tv_nsec = timeout_ns % 1000000000;
		tsp = &ts;
	}
	if (syscall(SYS_futex, word, FUTEX_WAIT, expected, tsp, NULL, 0) < 0)
		return -errno;
	return 0;
}

static inline int futex_wake(uint32_t *word, int nwake)
{
	long r = syscall(SYS_futex, word, FUTEX_WAKE, nwake, NULL, NULL, 0);

	return r < 0 ? -errno : (int)r;
}

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif /* COLLC_COMMON_FUTEX_H */
