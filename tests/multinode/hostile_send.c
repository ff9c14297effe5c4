/* SPDX-License-Identifier: MIT */
/*
 * libcollc-hostile-send.so, preloaded into one collcd (mn_test.sh
 * hostile_direct): plays a peer daemon whose built-in tcp transport lies
 * about a message's length once the links are up. The transport sends each
 * message's 16-byte header (magic "CLTM", tag, size: daemon/net/tcp.c) in a
 * send() of its own; once the file COLLC_HOSTILE_ARM names exists, the next
 * header of a message of at least HOSTILE_MIN bytes goes out with its size
 * HOSTILE_DELTA smaller (the payload still follows whole on the data
 * sockets). Every other send() passes through. Tests only: not installed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#define MSG_MAGIC     0x434c544du /* daemon/net/tcp.c */
#define HOSTILE_MIN   64
#define HOSTILE_DELTA 8

struct msg_hdr {
	uint32_t magic;
	int32_t tag;
	uint64_t size;
};

typedef ssize_t (*send_fn)(int, const void *, size_t, int);

static int fired;

__attribute__((visibility("default"))) ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	static send_fn real;
	const char *arm = getenv("COLLC_HOSTILE_ARM");
	struct msg_hdr h;
	ssize_t n;

	if (!real)
		real = (send_fn)dlsym(RTLD_NEXT, "send");
	if (!real)
		return -1;
	if (len != sizeof(h) || !arm || __atomic_load_n(&fired, __ATOMIC_RELAXED))
		return real(fd, buf, len, flags);
	memcpy(&h, buf, sizeof(h));
	if (h.magic != MSG_MAGIC || h.size < HOSTILE_MIN || access(arm, F_OK) != 0)
		return real(fd, buf, len, flags);
	h.size -= HOSTILE_DELTA;
	n = real(fd, &h, sizeof(h), flags);
	/* Only a header that went out whole lied; a partial one is sent again from buf. */
	if (n == (ssize_t)sizeof(h) && !__atomic_exchange_n(&fired, 1, __ATOMIC_RELAXED))
		fprintf(stderr, "collc-hostile-send: a header said %llu bytes for %llu\n",
			(unsigned long long)h.size, (unsigned long long)h.size + HOSTILE_DELTA);
	return n;
}
