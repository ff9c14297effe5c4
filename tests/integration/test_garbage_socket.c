/* SPDX-License-Identifier: MIT */
/*
 * Garbage on collcd's socket, from raw SOCK_SEQPACKET connections: random
 * datagrams, a truncated header, bad magic and version, a length that does
 * not match the datagram (longer, shorter, 4 GiB), an oversized datagram,
 * unknown and reply-flagged types, known types with wrong payload sizes,
 * surplus and bogus file descriptors, bogus requests after a real hello, a
 * second hello, randomly mutated valid messages, and an empty datagram. (A
 * client that leaves while its comm_init waits is test_client_killed's.) Afterwards collcd must still run,
 * serve a normal 2-rank all-reduce and `collcctl status`, and hold no more
 * file descriptors than before.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "proto/wire.h"
#include "refcheck.h"

#define COUNT 50000

static struct collc_unique_id uid;
static uint64_t rng;
static int nsent, nreplies, nclosed;

static int raw_connect(void)
{
	int fd = h_raw_connect();

	if (fd < 0) {
		h_fail("raw connect to %s: %s", h_sock, strerror(-fd));
		exit(h_finish(1));
	}
	return fd;
}

/* Reads whatever replies wait (closing any fds they carry); 0, or -1 once collcd hung up. */
static int drain(int fd, int wait_ms)
{
	for (;;) {
		char buf[COLLC_MSG_MAX];
		ssize_t n = h_recv_fds(fd, buf, sizeof(buf), NULL, 0, NULL, wait_ms);

		if (n == -ETIMEDOUT || n == -EAGAIN)
			return 0;
		if (n <= 0)
			return -1;
		nreplies++;
		wait_ms = 0;
	}
}

/* Sends one datagram (with fds); a connection collcd closed is replaced by a new one. */
static void sendit(int *fd, const void *buf, size_t len, const int *fds, int nfds)
{
	if (h_send_fds(*fd, buf, len, fds, nfds, MSG_NOSIGNAL) < 0 || drain(*fd, 2) < 0) {
		/* collcd may drop a connection that sent garbage: that is allowed. */
		close(*fd);
		nclosed++;
		*fd = raw_connect();
	}
	nsent++;
	if (getenv("COLLC_GARBAGE_TRACE")) {
		/* Debugging aid: find the datagram that kills collcd. */
		usleep(20000);
		if (!h_daemon_alive()) {
			h_fail("collcd died after datagram %d (%zu bytes, %d fds)", nsent, len,
			       nfds);
			exit(h_finish(1));
		}
	}
}

static size_t msg(void *buf, uint32_t magic, uint16_t version, uint16_t type, uint32_t length,
		  const void *payload, size_t plen)
{
	struct collc_msg_hdr h = { magic, version, type, length, (uint32_t)h_rand(&rng) };

	memcpy(buf, &h, sizeof(h));
	if (plen)
		memcpy((char *)buf + sizeof(h), payload, plen);
	return sizeof(h) + plen;
}

static size_t good(void *buf, uint16_t type, const void *payload, size_t plen)
{
	return msg(buf, COLLC_WIRE_MAGIC, COLLC_WIRE_VERSION, type, (uint32_t)plen, payload, plen);
}

/* Garbage that needs no session state; usable before and after hello. */
static void stateless_garbage(int *fd, int with_hello)
{
	static char buf[COLLC_MSG_MAX + 4096];
	char payload[256];
	size_t n;
	int pfd[2], fds[6];

	for (int i = 0; i < 300; i++) {
		n = 1 + h_rand_below(&rng, 300);
		for (size_t k = 0; k < n; k++)
			buf[k] = (char)h_rand(&rng);
		sendit(fd, buf, n, NULL, 0);
	}
	n = good(buf, COLLC_MSG_STATUS, NULL, 0);
	sendit(fd, buf, 8, NULL, 0);                                /* truncated header */
	sendit(fd, buf, sizeof(struct collc_msg_hdr) - 1, NULL, 0); /* one byte short */
	n = msg(buf, 0xdeadbeef, COLLC_WIRE_VERSION, COLLC_MSG_STATUS, 8, payload, 8);
	sendit(fd, buf, n, NULL, 0); /* bad magic */
	n = msg(buf, COLLC_WIRE_MAGIC, 99, COLLC_MSG_STATUS, 8, payload, 8);
	sendit(fd, buf, n, NULL, 0); /* bad version */
	memset(payload, 0, sizeof(payload));
	n = msg(buf, COLLC_WIRE_MAGIC, COLLC_WIRE_VERSION, COLLC_MSG_STATUS, 1000, payload, 8);
	sendit(fd, buf, n, NULL, 0); /* length too long */
	n = msg(buf, COLLC_WIRE_MAGIC, COLLC_WIRE_VERSION, COLLC_MSG_STATUS, 4, payload, 8);
	sendit(fd, buf, n, NULL, 0); /* length too short */
	n = msg(buf, COLLC_WIRE_MAGIC, COLLC_WIRE_VERSION, COLLC_MSG_STATUS, UINT32_MAX, payload,
		8);
	sendit(fd, buf, n, NULL, 0); /* length 4 GiB */
	n = msg(buf, COLLC_WIRE_MAGIC, COLLC_WIRE_VERSION, COLLC_MSG_GET, COLLC_MSG_MAX + 100, NULL,
		0);
	memset(buf + n, 'k', COLLC_MSG_MAX + 100);
	sendit(fd, buf, n + COLLC_MSG_MAX + 100, NULL, 0); /* larger than any message */
	for (uint32_t t = 0; t < 6; t++) {
		static const uint16_t types[] = {
			0,     999, COLLC_MSG_TYPE_MAX, 0x7fff, COLLC_MSG_REPLY | COLLC_MSG_STATUS,
			0xffff
		};

		n = good(buf, types[t], payload, 8);
		sendit(fd, buf, n, NULL, 0); /* unknown or reply types */
	}
	/* Known types with wrong payload sizes. */
	for (uint16_t t = COLLC_MSG_HELLO; t < COLLC_MSG_TYPE_MAX; t++) {
		static const size_t lens[] = { 0, 1, 3, 7, 9, 100, 255 };

		if (t == COLLC_MSG_HELLO && !with_hello)
			continue; /* a hello with a valid size would make this a client */
		for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
			for (size_t b = 0; b < lens[k]; b++)
				payload[b] = (char)h_rand(&rng);
			n = good(buf, t, payload, lens[k]);
			sendit(fd, buf, n, NULL, 0);
		}
	}
	n = good(buf, COLLC_MSG_GET, NULL, 0);
	memset(buf + n, 'x', 5000);
	((struct collc_msg_hdr *)buf)->length = 5000;
	sendit(fd, buf, n + 5000, NULL, 0); /* a 5000-byte key */
	/* Surplus and bogus fds: collcd must close what it does not keep. */
	if (pipe2(pfd, O_CLOEXEC) == 0) {
		for (int k = 0; k < 6; k++)
			fds[k] = k & 1 ? pfd[1] : pfd[0];
		n = good(buf, COLLC_MSG_STATUS, payload, 8);
		sendit(fd, buf, n, fds, 6); /* six fds with a status */
		for (int k = 0; k < 8; k++)
			payload[k] = 0;
		sendit(fd, buf, 3, fds, 2); /* fds with a runt */
		n = good(buf, 999, payload, 8);
		sendit(fd, buf, n, fds, 1); /* fds with an unknown type */
		close(pfd[0]);
		close(pfd[1]);
	}
}

/* After a real hello: requests that name nothing real, bogus fds, a second hello. */
static void session_garbage(int *fd)
{
	static char buf[4096];
	struct collc_msg_hello hello = { .api_version = COLLC_API_VERSION };
	struct collc_msg_mem mem = { .size = 1 << 20, .device = -1 };
	struct collc_msg_mem_release rel = { .mr = 12345 };
	struct collc_msg_comm_ref ref = { .comm = 777 };
	struct collc_msg_comm_init ci = { 0 };
	size_t n;
	int pfd[2], mfd, r;

	n = good(buf, COLLC_MSG_HELLO, &hello, sizeof(hello));
	/* The real hello and a second one before its reply: one client, nothing leaked. */
	r = h_send_fds(*fd, buf, n, NULL, 0, MSG_NOSIGNAL);
	if (r < 0)
		h_die("the real hello: %s", strerror(-r));
	sendit(fd, buf, n, NULL, 0); /* a second hello */
	sendit(fd, buf, n, NULL, 0); /* and a third, after it */
	n = good(buf, COLLC_MSG_MEM_REGISTER, &mem, sizeof(mem));
	sendit(fd, buf, n, NULL, 0); /* register without an fd */
	if (pipe2(pfd, O_CLOEXEC) == 0) {
		sendit(fd, buf, n, &pfd[0], 1); /* register a pipe */
		close(pfd[0]);
		close(pfd[1]);
	}
	mfd = memfd_create("small", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (mfd >= 0 && ftruncate(mfd, 4096) == 0) {
		sendit(fd, buf, n, &mfd, 1); /* memfd smaller than claimed */
		mem.size = 0;
		n = good(buf, COLLC_MSG_MEM_REGISTER, &mem, sizeof(mem));
		sendit(fd, buf, n, &mfd, 1); /* size 0 */
		mem.size = UINT64_MAX;
		n = good(buf, COLLC_MSG_MEM_REGISTER, &mem, sizeof(mem));
		sendit(fd, buf, n, &mfd, 1); /* size 2^64-1 */
		mem.size = 4096;
		mem.device = 5;
		n = good(buf, COLLC_MSG_MEM_REGISTER, &mem, sizeof(mem));
		sendit(fd, buf, n, &mfd, 1); /* a device we do not have */
		mem.device = -1;
		mem.flags = 0xffff;
		n = good(buf, COLLC_MSG_MEM_REGISTER, &mem, sizeof(mem));
		sendit(fd, buf, n, &mfd, 1); /* unknown flags */
		close(mfd);
	}
	mem = (struct collc_msg_mem){ .size = UINT64_MAX, .device = -1 };
	n = good(buf, COLLC_MSG_MEM_ALLOC, &mem, sizeof(mem));
	sendit(fd, buf, n, NULL, 0); /* alloc 2^64-1 bytes */
	n = good(buf, COLLC_MSG_MEM_RELEASE, &rel, sizeof(rel));
	sendit(fd, buf, n, NULL, 0); /* release an unknown mr */
	rel.mr = 0;
	n = good(buf, COLLC_MSG_MEM_RELEASE, &rel, sizeof(rel));
	sendit(fd, buf, n, NULL, 0); /* release mr 0 */
	n = good(buf, COLLC_MSG_COMM_DESTROY, &ref, sizeof(ref));
	sendit(fd, buf, n, NULL, 0); /* destroy an unknown comm */
	n = good(buf, COLLC_MSG_COMM_ABORT, &ref, sizeof(ref));
	sendit(fd, buf, n, NULL, 0); /* abort an unknown comm */
	n = good(buf, COLLC_MSG_COMM_INIT, &ci, sizeof(ci));
	sendit(fd, buf, n, NULL, 0); /* comm_init, zero uid */
	memcpy(&ci.uid, uid.bytes, sizeof(ci.uid));
	ci.uid.nonce[0] ^= 0x55; /* not the id the ranks use later */
	ci.nranks = 0;
	n = good(buf, COLLC_MSG_COMM_INIT, &ci, sizeof(ci));
	sendit(fd, buf, n, NULL, 0); /* nranks 0 */
	ci.nranks = 1000;
	n = good(buf, COLLC_MSG_COMM_INIT, &ci, sizeof(ci));
	sendit(fd, buf, n, NULL, 0); /* nranks 1000 */
	ci.nranks = 4;
	ci.rank = 9;
	n = good(buf, COLLC_MSG_COMM_INIT, &ci, sizeof(ci));
	sendit(fd, buf, n, NULL, 0); /* rank 9 of 4 */
	ci.rank = 0;
	ci.flags = 0xff;
	n = good(buf, COLLC_MSG_COMM_INIT, &ci, sizeof(ci));
	sendit(fd, buf, n, NULL, 0); /* unknown flags */
	ci.flags = 0;
	ci.nranks = 1;
	ci.device = 3;
	n = good(buf, COLLC_MSG_COMM_INIT, &ci, sizeof(ci));
	sendit(fd, buf, n, NULL, 0); /* a GPU the CPU backend lacks */
	n = good(buf, COLLC_MSG_SET_EVENTFD, NULL, 0);
	sendit(fd, buf, n, NULL, 0);
	sendit(fd, buf, n, NULL, 0); /* eventfd twice */
}

/* Valid messages with 1-4 random bytes changed, or cut short. */
static void mutated(int *fd, int count)
{
	struct collc_msg_hello hello = { .api_version = COLLC_API_VERSION };
	struct collc_msg_mem mem = { .size = 4096, .device = -1 };
	struct collc_msg_mem_release rel = { .mr = 1 };
	struct collc_msg_comm_ref ref = { .comm = 1 };
	struct collc_msg_status_req st = { .flags = COLLC_STATUS_JSON };
	struct collc_msg_comm_init ci = { .nranks = 2 };
	static char buf[4096];
	struct {
		uint16_t type;
		const void *p;
		size_t len;
	} base[] = {
		{ COLLC_MSG_HELLO, &hello, sizeof(hello) },
		{ COLLC_MSG_MEM_ALLOC, &mem, sizeof(mem) },
		{ COLLC_MSG_MEM_RELEASE, &rel, sizeof(rel) },
		{ COLLC_MSG_COMM_DESTROY, &ref, sizeof(ref) },
		{ COLLC_MSG_COMM_ABORT, &ref, sizeof(ref) },
		{ COLLC_MSG_STATUS, &st, sizeof(st) },
		{ COLLC_MSG_COMM_INIT, &ci, sizeof(ci) },
		{ COLLC_MSG_GET, "channels", 8 },
		{ COLLC_MSG_METRICS, NULL, 0 },
	};

	for (int i = 0; i < count; i++) {
		int b = (int)h_rand_below(&rng, sizeof(base) / sizeof(base[0]));
		size_t n = good(buf, base[b].type, base[b].p, base[b].len);
		int flips = 1 + (int)h_rand_below(&rng, 4);

		for (int f = 0; f < flips; f++)
			buf[h_rand_below(&rng, n)] ^= (char)(1 + h_rand_below(&rng, 255));
		if (h_rand_below(&rng, 8) == 0)
			n = h_rand_below(&rng, n) + 1;
		sendit(fd, buf, n, NULL, 0);
	}
}

static int rank_main(int rank, int nranks, void *arg)
{
	struct rc_case c = { COLLC_FLOAT32, COLLC_SUM, COUNT, h_seed };

	(void)arg;
	return h_join_allreduce(&uid, &c, 1, rank, nranks, "all-reduce after the garbage");
}

int main(int argc, char **argv)
{
	static char out[1 << 16];
	char cmd[512];
	int fd, fd2, failed = 0, fds0, fds1, st;

	h_init("garbage_socket", argc, argv, 90);
	rng = h_seed;
	h_daemon_start(NULL);
	h_unique_id(&uid);
	usleep(100000);
	fds0 = h_proc_count(h_daemon_pid, "fd");

	fd = raw_connect();
	stateless_garbage(&fd, 0);
	h_log("no hello: %d datagrams of garbage sent (random bytes, truncated header, bad magic, bad "
	      "version, length too long/short/4 GiB, oversized datagram, unknown and reply types, "
	      "wrong payload sizes for every type, surplus/bogus fds)",
	      nsent);
	fd2 = raw_connect();
	session_garbage(&fd2);
	stateless_garbage(&fd2, 1);
	mutated(&fd2, 2000);
	h_log("after a real hello: bogus memory and communicator requests, a second hello, "
	      "garbage again, 2000 mutated valid messages; "
	      "%d datagrams in all, %d replies read, %d connections dropped by collcd",
	      nsent, nreplies, nclosed);
	/* An empty datagram (reads as end of file on SEQPACKET), then hang up. */
	if (send(fd, "", 0, MSG_NOSIGNAL) < 0)
		h_log("sending an empty datagram: %s", strerror(errno));
	close(fd);
	close(fd2);
	usleep(200000);

	if (!h_daemon_alive())
		return h_finish(h_fail("collcd died from the garbage"));
	failed |= h_run_ranks(2, rank_main, NULL);
	if (!failed)
		h_log("a 2-rank all-reduce of %d floats after the garbage: correct", COUNT);
	snprintf(cmd, sizeof(cmd), "%s --socket %s status", h_collcctl(), h_sock);
	st = h_run_capture(cmd, out, sizeof(out));
	if (st != 0 || !strstr(out, "totals"))
		failed |=
			h_fail("collcctl status after the garbage: exit %d, output:\n%s", st, out);
	snprintf(cmd, sizeof(cmd), "%s --socket %s status --json", h_collcctl(), h_sock);
	st = h_run_capture(cmd, out, sizeof(out));
	if (st != 0 || out[0] != '{')
		failed |= h_fail("collcctl status --json after the garbage: exit %d, output:\n%s",
				 st, out);
	if (!failed)
		h_log("collcctl status and status --json still work");
	/*
	 * Closed sessions are torn down asynchronously: give collcd up to 3 s
	 * (15 s under a sanitizer, which slows its loop several times).
	 */
	for (int i = 0, n = h_sanitized() ? 150 : 30; i < n; i++) {
		usleep(100000);
		fds1 = h_proc_count(h_daemon_pid, "fd");
		if (fds1 <= fds0)
			break;
	}
	if (fds0 >= 0 && fds1 > fds0)
		failed |= h_fail(
			"collcd holds %d file descriptors after the garbage connections closed, "
			"%d before: %d leaked",
			fds1, fds0, fds1 - fds0);
	else if (fds0 >= 0)
		h_log("collcd's open file descriptors: %d before, %d after (none leaked)", fds0,
		      fds1);
	if (!h_daemon_alive())
		failed |= h_fail("collcd is gone");
	return h_finish(failed);
}
