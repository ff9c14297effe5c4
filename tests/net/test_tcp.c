/* SPDX-License-Identifier: MIT */
/* The built-in tcp transport over loopback; includes tcp.c for its statics. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "daemon/net/tcp.c"
#include "tcp_cases.h"

/* --helpers: every comm's data sockets move in its helper thread (tcp.c). */
static int helpers;

static int use_lo(int nstreams)
{
	struct net_tcp_opts o = { .ifname = "lo", .nstreams = nstreams, .helpers = helpers };

	if (net_tcp_configure(&o) < 0 || net_tcp.init(test_logger) != ncclSuccess)
		return -1;
	net = &net_tcp;
	return 0;
}

/* Before the group, and after each test that configures the transport (pass or fail). */
static int setup(void **state)
{
	return use_lo(NET_TCP_DEFAULT_STREAMS);
}

/* Stream shares tile the message exactly, for any size and stream count. */
static void t_share(void **state)
{
	static const size_t sizes[] = { 0,
					1,
					MIN_CHUNK - 1,
					MIN_CHUNK,
					MIN_CHUNK + 1,
					1 << 20,
					(1 << 20) + 3,
					64 << 20,
					0x7fffffff };
	size_t i, b, e, at;
	int n, s;

	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		for (n = 1; n <= NET_TCP_MAX_STREAMS; n++) {
			at = 0;
			for (s = 0; s < n; s++) {
				share(sizes[i], n, s, &b, &e);
				assert_true(b == at || b == sizes[i]);
				assert_true(e >= b && e <= sizes[i]);
				if (e > b)
					assert_int_equal(b, at);
				at = e > at ? e : at;
			}
			assert_int_equal(at, sizes[i]);
		}
	}
	/* Small messages take one stream. */
	share(1000, 4, 0, &b, &e);
	assert_int_equal(e - b, 1000);
	share(1000, 4, 1, &b, &e);
	assert_int_equal(e - b, 0);
}

static void t_options(void **state)
{
	struct net_tcp_opts h = { .ifname = "lo", .nstreams = 1, .helpers = 2 };
	struct net_tcp_opts o = { .ifname = "lo", .nstreams = 0 };

	/* A helper per comm or none. */
	assert_int_equal(net_tcp_configure(&h), -EINVAL);
	h.helpers = -1;
	assert_int_equal(net_tcp_configure(&h), -EINVAL);
	assert_int_equal(net_tcp_configure(&o), -EINVAL);
	o.nstreams = NET_TCP_MAX_STREAMS + 1;
	assert_int_equal(net_tcp_configure(&o), -EINVAL);
	o.nstreams = 2;
	o.ifname = "an-interface-name-too-long-for-linux";
	assert_int_equal(net_tcp_configure(&o), -EINVAL);
	/* An interface that does not exist fails init, like NCCL_SOCKET_IFNAME. */
	o.ifname = "nosuchif0";
	assert_int_equal(net_tcp_configure(&o), 0);
	assert_int_equal(net_tcp.init(NULL), ncclInvalidArgument);
	/* The default is an up interface with an address; lo only when no other. */
	o.ifname = NULL;
	assert_int_equal(net_tcp_configure(&o), 0);
	assert_int_equal(net_tcp.init(NULL), ncclSuccess);
	assert_true(g.ifname[0] != 0);
}

/* 1, 3 and the most streams move the same bytes. */
static void t_streams(void **state)
{
	static const int counts[] = { 1, 3, NET_TCP_MAX_STREAMS };
	size_t i;

	for (i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
		struct pair p;

		assert_int_equal(use_lo(counts[i]), 0);
		pair_open(&p);
		send_one(&p, (4 << 20) + 17, 1);
		send_one(&p, 3, 2);
		pair_close(&p);
	}
}

/* A handle that is not a tcp handle is refused by connect. */
static void t_bad_handle(void **state)
{
	char handle[NCCL_NET_HANDLE_MAXSIZE];
	void *scomm = (void *)1;

	memset(handle, 0x5a, sizeof(handle));
	assert_int_equal(net->connect(0, handle, &scomm, NULL), ncclInvalidArgument);
	assert_null(scomm);
}

/* Small socket buffers: sends and receives of a share are partial, so the
 * paths that resume mid-way run. (Below loopback's MSS of ~64 KiB, TCP's
 * silly-window avoidance stalls on persist timers, which tests nothing.) */
static void pair_buffers(struct pair *p, int small, int nsocks)
{
	struct tcp_comm *sc = p->scomm, *rc = p->rcomm;

	for (int i = 0; i < nsocks; i++) {
		assert_int_equal(
			setsockopt(sc->fd[i], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
		assert_int_equal(
			setsockopt(rc->fd[i], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
	}
}

static void pair_small_buffers(struct pair *p)
{
	pair_buffers(p, 128 << 10, ((struct tcp_comm *)p->scomm)->nsocks);
}

static void t_partial_io(void **state)
{
	struct pair p;

	pair_open(&p);
	pair_small_buffers(&p);
	send_one(&p, (3 << 20) + 5, 1);
	send_one(&p, 0, 2);
	send_one(&p, MIN_CHUNK + 1, 3);
	pair_close(&p);
}

/*
 * The read-ahead (collc__net_ra_recv()) on a nonblocking socket pair, as
 * collcd's control connections read: a small read takes what follows it
 * too, later reads come from the buffer byte for byte, a large one goes
 * straight to its vectors, a short fill answers "would block" between
 * messages without a call (even with bytes waiting, which poll() reports),
 * and the peer's close reads as 0.
 */
static ssize_t ra_read(int fd, struct net_ra *ra, uint8_t *dst, size_t a, size_t b, int between)
{
	struct iovec v[2] = { { dst, a }, { dst + a, b } };
	struct msghdr mh = { .msg_iov = v, .msg_iovlen = b ? 2 : 1 };

	return collc__net_ra_recv(fd, ra, &mh, a + b, between);
}

static void t_read_ahead(void **state)
{
	enum { CAP = 256, TOTAL = 3 * CAP + 77 };
	uint8_t src[TOTAL], dst[TOTAL], buf[CAP];
	struct net_ra ra = { .buf = buf, .cap = CAP };
	size_t got = 0;
	ssize_t n;
	int sv[2];

	(void)state;
	for (size_t i = 0; i < TOTAL; i++)
		src[i] = (uint8_t)(i * 131 + 7);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	/* Nothing there: a real EAGAIN, and no fill. */
	n = ra_read(sv[0], &ra, dst, 16, 0, 1);
	assert_int_equal(n, -1);
	assert_int_equal(errno, EAGAIN);
	assert_int_equal(write(sv[1], src, 2 * CAP + 40), 2 * CAP + 40);
	/* A 16-byte header fills the buffer whole; the next two reads take from it, split over two vectors. */
	assert_int_equal(ra_read(sv[0], &ra, dst, 16, 0, 1), 16);
	assert_int_equal(ra.len, CAP);
	assert_int_equal(ra.drained, 0);
	assert_int_equal(ra_read(sv[0], &ra, dst + 16, 10, 30, 0), 40);
	got = 56;
	/* More than the buffer holds: the rest of it (200 bytes), then the socket straight. */
	assert_int_equal(ra_read(sv[0], &ra, dst + got, CAP, 0, 0), CAP - 56);
	got = CAP;
	assert_int_equal(ra_read(sv[0], &ra, dst + got, CAP, 0, 0), CAP);
	got += CAP;
	/* 40 bytes left there: a small read fills short (drained) and takes 8 of them. */
	assert_int_equal(ra_read(sv[0], &ra, dst + got, 8, 0, 1), 8);
	assert_int_equal(ra.drained, 1);
	assert_int_equal(ra_read(sv[0], &ra, dst + got + 8, 32, 0, 0), 32);
	got += 40;
	assert_memory_equal(dst, src, got);
	/* Between messages after a short fill: "would block" without asking, though bytes wait. */
	assert_int_equal(write(sv[1], src + got, TOTAL - got), TOTAL - got);
	n = ra_read(sv[0], &ra, dst + got, 16, 0, 1);
	assert_int_equal(n, -1);
	assert_int_equal(errno, EAGAIN);
	/* Once (poll() said readable): the bytes come, across the buffer's bound. */
	assert_int_equal(ra_read(sv[0], &ra, dst + got, 16, 0, 1), 16);
	got += 16;
	while (got < TOTAL) {
		n = ra_read(sv[0], &ra, dst + got, TOTAL - got, 0, 0);
		assert_true(n > 0);
		got += (size_t)n;
	}
	assert_memory_equal(dst, src, TOTAL);
	/* Mid-message a drained fill does not stop a read: it asks the socket (EAGAIN is real here). */
	n = ra_read(sv[0], &ra, dst, 16, 0, 0);
	assert_int_equal(n, -1);
	assert_int_equal(errno, EAGAIN);
	close(sv[1]);
	assert_int_equal(ra_read(sv[0], &ra, dst, 16, 0, 0), 0);
	close(sv[0]);
}

/*
 * A header and its inline payload leave in one call (xfer2()). With
 * socket 0's buffers smaller than a message, the socket takes the header and
 * part of the payload: the message's empty shares on the other sockets must
 * still end once its header is gone, and the rest of the payload follow.
 */
static void t_inline_blocked(void **state)
{
	enum { N = 12 };
	static uint8_t src[N][INLINE_MAX], dst[N][INLINE_MAX];
	void *sreq[N], *rreq[N];
	int sdone[N] = { 0 }, rdone[N] = { 0 }, left = 2 * N;
	int64_t end = ms_now() + WAIT_MS;
	struct pair p;

	pair_open(&p);
	assert_true(((struct tcp_comm *)p.scomm)->nsocks > 1);
	pair_buffers(&p, 2048, 1); /* the kernel's least: a few KiB */
	/* Sent before any receive is posted: the socket fills mid-message. */
	for (int i = 0; i < N; i++) {
		fill(src[i], sizeof(src[i]), &seed);
		sreq[i] = isend_retry(p.scomm, src[i], INLINE_MAX - i, 10 + i, NULL);
		assert_int_equal(net->test(sreq[i], &sdone[i], NULL), ncclSuccess);
	}
	for (int i = 0; i < N; i++) {
		void *d = dst[i];
		int size = INLINE_MAX, tag = 10 + i;

		rreq[i] = irecv_retry(p.rcomm, 1, &d, &size, &tag, NULL);
	}
	for (int i = 0; i < N; i++)
		left -= sdone[i];
	while (left) {
		for (int i = 0; i < N; i++) {
			int got = -1;

			if (!sdone[i]) {
				assert_int_equal(net->test(sreq[i], &sdone[i], NULL), ncclSuccess);
				left -= sdone[i];
			}
			if (!rdone[i]) {
				assert_int_equal(net->test(rreq[i], &rdone[i], &got), ncclSuccess);
				if (rdone[i]) {
					assert_int_equal(got, INLINE_MAX - i);
					left--;
				}
			}
		}
		assert_true(ms_now() < end);
	}
	for (int i = 0; i < N; i++)
		check_bytes(src[i], dst[i], INLINE_MAX - i, "inline payload over a full socket");
	pair_close(&p);
}

/*
 * Payloads up to INLINE_MAX follow their header on socket 0; larger ones take
 * the data sockets. net_tcp_pollfds() names the sockets a comm waits on: a
 * posted receive waits on socket 0 until its header arrives, and socket 0
 * turns readable when a message is sent.
 */
static void t_inline_pollfds(void **state)
{
	static const size_t sizes[] = { 1, INLINE_MAX - 1, INLINE_MAX, INLINE_MAX + 1, 0 };
	struct pollfd pf[MAX_SOCKS];
	struct pair p;
	uint8_t src[64] = { 0 }, dst[64];
	void *dptr = dst, *sreq = NULL, *rreq = NULL;
	int rsize = sizeof(dst), rtag = 7, done = 0, got = -1, n;
	struct tcp_comm *rc;
	size_t i;

	pair_open(&p);
	rc = p.rcomm;
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		send_one(&p, sizes[i], (int)i + 1);
	/* Nothing posted: nothing to wait for. */
	assert_int_equal(net_tcp_pollfds(p.rcomm, pf, MAX_SOCKS), 0);
	assert_int_equal(net_tcp_pollfds(p.scomm, pf, MAX_SOCKS), 0);
	assert_int_equal(net->irecv(p.rcomm, 1, &dptr, &rsize, &rtag, NULL, &rreq), ncclSuccess);
	assert_non_null(rreq);
	n = net_tcp_pollfds(p.rcomm, pf, MAX_SOCKS);
	assert_int_equal(n, 1);
	assert_int_equal(pf[0].fd, rc->fd[0]);
	assert_int_equal(pf[0].events, POLLIN);
	assert_int_equal(poll(pf, 1, 0), 0);
	fill(src, sizeof(src), &seed);
	assert_int_equal(net->isend(p.scomm, src, sizeof(src), 7, NULL, &sreq), ncclSuccess);
	assert_non_null(sreq);
	assert_int_equal(poll(pf, 1, WAIT_MS), 1);
	assert_true(pf[0].revents & POLLIN);
	{
		int64_t end = ms_now() + WAIT_MS;

		while (!done) {
			assert_int_equal(net->test(rreq, &done, &got), ncclSuccess);
			assert_true(ms_now() < end);
		}
		done = 0;
		while (!done) {
			assert_int_equal(net->test(sreq, &done, NULL), ncclSuccess);
			assert_true(ms_now() < end);
		}
	}
	assert_int_equal(got, (int)sizeof(src));
	check_bytes(src, dst, sizeof(src), "inline payload");
	assert_int_equal(net_tcp_pollfds(p.rcomm, pf, MAX_SOCKS), 0);
	pair_close(&p);
}

/* One test() of a send in flight; *sreq becomes NULL once it is done. */
static void send_poll(void **sreq)
{
	int sd = 0;

	assert_int_equal(net->test(*sreq, &sd, NULL), ncclSuccess);
	if (sd)
		*sreq = NULL;
}

/* Random sizes, random group sizes, tags matched out of order, many rounds. */
static void t_soak(void **state)
{
	enum { ROUNDS = 60, MAXN = MAX_RECVS, MAXSZ = 300 << 10 };
	static uint8_t src[MAXN][MAXSZ], dst[MAXN][MAXSZ];
	struct pair p;
	int r;

	pair_open(&p);
	for (r = 0; r < ROUNDS; r++) {
		int n = 1 + (int)(rnd(&seed) % MAXN), i, done = 0;
		int sizes[MAXN], tags[MAXN], maxs[MAXN], got[MAXN], perm[MAXN];
		void *data[MAXN], *rreq, *sreq[MAXN];
		int64_t end = ms_now() + WAIT_MS;

		for (i = 0; i < n; i++) {
			sizes[i] = (int)(rnd(&seed) % MAXSZ);
			if (rnd(&seed) % 4 == 0)
				sizes[i] = (int)(rnd(&seed) % 3);
			maxs[i] = MAXSZ;
			tags[i] = r * 100 + i;
			data[i] = dst[i];
			perm[i] = i;
			fill(src[i], sizes[i], &seed);
		}
		for (i = n - 1; i > 0; i--) {
			int j = (int)(rnd(&seed) % (i + 1)), t = perm[i];

			perm[i] = perm[j];
			perm[j] = t;
		}
		rreq = irecv_retry(p.rcomm, n, data, maxs, tags, NULL);
		for (i = 0; i < n; i++) {
			int k = perm[i];

			sreq[i] = isend_retry(p.scomm, src[k], sizes[k], tags[k], NULL);
		}
		while (!done) {
			assert_int_equal(net->test(rreq, &done, got), ncclSuccess);
			for (i = 0; i < n; i++)
				if (sreq[i])
					send_poll(&sreq[i]);
			assert_true(ms_now() < end);
		}
		for (i = 0; i < n; i++)
			while (sreq[i]) {
				send_poll(&sreq[i]);
				assert_true(ms_now() < end);
			}
		for (i = 0; i < n; i++) {
			assert_int_equal(got[i], sizes[i]);
			check_bytes(src[i], dst[i], sizes[i], "soak payload");
		}
	}
	pair_close(&p);
}

/* Nobody listens: connect fails within the bound instead of spinning. */
static void t_connect_refused(void **state)
{
	char handle[NCCL_NET_HANDLE_MAXSIZE];
	void *lcomm, *scomm = NULL;
	int64_t end = ms_now() + WAIT_MS;
	ncclResult_t rc = ncclSuccess;

	assert_int_equal(net->listen(0, handle, &lcomm), ncclSuccess);
	assert_int_equal(net->closeListen(lcomm), ncclSuccess);
	while (rc == ncclSuccess && !scomm) {
		rc = net->connect(0, handle, &scomm, NULL);
		assert_true(ms_now() < end);
	}
	assert_int_equal(rc, ncclRemoteError);
	assert_null(scomm);
	assert_null(((struct tcp_handle *)handle)->stage);
}

/* The receiver goes away: the sender's request fails, without SIGPIPE. */
static void t_receiver_closed(void **state)
{
	static uint8_t src[8 << 20];
	struct pair p;
	void *sreq;
	int done = 0;
	int64_t end = ms_now() + WAIT_MS;
	ncclResult_t rc = ncclSuccess;

	pair_open(&p);
	assert_int_equal(net->closeRecv(p.rcomm), ncclSuccess);
	assert_int_equal(net->isend(p.scomm, src, sizeof(src), 1, NULL, &sreq), ncclSuccess);
	while (rc == ncclSuccess && !done) {
		rc = net->test(sreq, &done, NULL);
		assert_true(ms_now() < end);
	}
	assert_int_equal(rc, ncclRemoteError);
	assert_int_equal(net->closeSend(p.scomm), ncclSuccess);
	assert_int_equal(net->closeListen(p.lcomm), ncclSuccess);
}

/* A connection that did not come from the handle (wrong token) is hung up
 * on, and the real one is accepted after it. */
static void t_impostor(void **state)
{
	char handle[NCCL_NET_HANDLE_MAXSIZE], fake[NCCL_NET_HANDLE_MAXSIZE], byte;
	struct pair p = { 0 };
	struct tcp_comm *f = NULL;
	int64_t end = ms_now() + WAIT_MS;
	int i;

	assert_int_equal(net->listen(0, handle, &p.lcomm), ncclSuccess);
	memcpy(fake, handle, sizeof(fake));
	((struct tcp_handle *)fake)->token ^= 0x5a5a;
	while (!f) {
		assert_int_equal(net->connect(0, fake, (void **)&f, NULL), ncclSuccess);
		assert_true(ms_now() < end);
	}
	for (i = 0; i < 20; i++)
		assert_int_equal(net->accept(p.lcomm, &p.rcomm, NULL), ncclSuccess);
	assert_null(p.rcomm);
	for (i = 0; i < f->nsocks; i++) {
		ssize_t n;

		while ((n = recv(f->fd[i], &byte, 1, MSG_DONTWAIT)) < 0 && errno == EAGAIN) {
			assert_int_equal(net->accept(p.lcomm, &p.rcomm, NULL), ncclSuccess);
			assert_null(p.rcomm);
			assert_true(ms_now() < end);
		}
		assert_true(n <= 0); /* EOF or reset: the listener closed it */
	}
	assert_int_equal(net->closeSend(f), ncclSuccess);
	while (!p.scomm || !p.rcomm) {
		if (!p.scomm)
			assert_int_equal(net->connect(0, handle, &p.scomm, NULL), ncclSuccess);
		if (!p.rcomm)
			assert_int_equal(net->accept(p.lcomm, &p.rcomm, NULL), ncclSuccess);
		assert_true(ms_now() < end);
	}
	send_one(&p, 1000, 1);
	pair_close(&p);
}

/* Both comms' sockets with work, through poll() and back (what collcd's node thread does). */
static void poll_both(struct pair *p, int timeout_ms)
{
	struct pollfd pf[2 * MAX_SOCKS];
	int n = net_tcp_pollfds(p->rcomm, pf, MAX_SOCKS);

	n += net_tcp_pollfds(p->scomm, pf + n, MAX_SOCKS);
	if (n && poll(pf, (nfds_t)n, timeout_ms) > 0) {
		net_tcp_poll_seen(p->rcomm, pf, n);
		net_tcp_poll_seen(p->scomm, pf, n);
	}
}

/* Posts a receive of up to 4 MiB into dptr and a send of size random bytes from src, tagged tag. */
static void post_both(struct pair *p, uint8_t *src, void *dptr, size_t size, int tag, void **sreq,
		      void **rreq)
{
	int rsize = 4 << 20;

	fill(src, size, &seed);
	*rreq = irecv_retry(p->rcomm, 1, &dptr, &rsize, &tag, NULL);
	*sreq = isend_retry(p->scomm, src, (int)size, tag, NULL);
}

/*
 * poll_driven: a socket that would block is not tried again until poll()
 * says it is ready, so a message that arrived meanwhile stays unread until
 * the caller polls; then every size, through small socket buffers (many
 * partial transfers), completes by polling and testing alone.
 */
static void t_poll_driven(void **state)
{
	static const size_t sizes[] = { 5, INLINE_MAX + 1, (3u << 20) + 7, MIN_CHUNK, 0 };
	struct net_tcp_opts o = { .ifname = "lo",
				  .nstreams = NET_TCP_DEFAULT_STREAMS,
				  .poll_driven = 1 };
	int rsize, tag = 3, got = -1, done = 0;
	struct pair p;
	uint8_t *src = malloc(4u << 20), *dst = malloc(4u << 20);
	void *dptr = dst, *sreq = NULL, *rreq = NULL;

	assert_non_null(src);
	assert_non_null(dst);
	assert_int_equal(net_tcp_configure(&o), 0);
	pair_open(&p);
	pair_small_buffers(&p);
	/* Nothing sent yet: the receive would block, and its socket is left alone after. */
	rsize = 64;
	assert_int_equal(net->irecv(p.rcomm, 1, &dptr, &rsize, &tag, NULL, &rreq), ncclSuccess);
	assert_int_equal(net->test(rreq, &done, &got), ncclSuccess);
	assert_false(done);
	fill(src, 64, &seed);
	assert_int_equal(net->isend(p.scomm, src, 64, tag, NULL, &sreq), ncclSuccess);
	for (int k = 0; k < 50 && sreq; k++) {
		send_poll(&sreq);
		usleep(1000);
	}
	assert_null(sreq);
	assert_int_equal(net->test(rreq, &done, &got), ncclSuccess);
	assert_false(done); /* the bytes are there, but nobody polled */
	for (int64_t end = ms_now() + WAIT_MS; !done; poll_both(&p, 100)) {
		assert_true(ms_now() < end);
		assert_int_equal(net->test(rreq, &done, &got), ncclSuccess);
	}
	assert_int_equal(got, 64);
	check_bytes(src, dst, 64, "poll-driven message");
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		int sd = 0, rd = 0;

		post_both(&p, src, dptr, sizes[i], (int)i + 10, &sreq, &rreq);
		for (int64_t end = ms_now() + WAIT_MS; !sd || !rd; poll_both(&p, 100)) {
			assert_true(ms_now() < end);
			if (!sd)
				assert_int_equal(net->test(sreq, &sd, NULL), ncclSuccess);
			if (!rd)
				assert_int_equal(net->test(rreq, &rd, &got), ncclSuccess);
		}
		assert_int_equal(got, (int)sizes[i]);
		check_bytes(src, dst, sizes[i], "poll-driven sizes");
	}
	pair_close(&p);
	free(src);
	free(dst);
}

/*
 * Helpers under a poll-driven caller, as collcd's node thread runs them: the
 * caller's poll set names socket 0 and the helper's completion eventfd, never
 * a data socket, and every size completes through small socket buffers by
 * polling and testing alone (the helper's completions wake the caller).
 */
static void t_helper_poll(void **state)
{
	static const size_t sizes[] = { 5, INLINE_MAX + 1, (3u << 20) + 7, MIN_CHUNK, 0, 1u << 20 };
	struct net_tcp_opts o = {
		.ifname = "lo", .nstreams = NET_TCP_MAX_STREAMS, .poll_driven = 1, .helpers = 1
	};
	int got = -1;
	struct pair p;
	uint8_t *src = malloc(4u << 20), *dst = malloc(4u << 20);
	void *sreq = NULL, *rreq = NULL;

	assert_non_null(src);
	assert_non_null(dst);
	assert_int_equal(net_tcp_configure(&o), 0);
	pair_open(&p);
	pair_small_buffers(&p);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		int sd = 0, rd = 0;

		post_both(&p, src, dst, sizes[i], (int)i + 20, &sreq, &rreq);
		for (int64_t end = ms_now() + WAIT_MS;;) {
			struct pollfd pf[2 * MAX_SOCKS];
			const struct tcp_comm *sc = p.scomm, *rc = p.rcomm;
			int n;

			assert_true(ms_now() < end);
			if (!sd)
				assert_int_equal(net->test(sreq, &sd, NULL), ncclSuccess);
			if (!rd)
				assert_int_equal(net->test(rreq, &rd, &got), ncclSuccess);
			if (sd && rd)
				break;
			n = net_tcp_pollfds(p.rcomm, pf, MAX_SOCKS);
			n += net_tcp_pollfds(p.scomm, pf + n, MAX_SOCKS);
			for (int k = 0; k < n; k++)
				for (int j = 1; j < sc->nsocks; j++) {
					assert_int_not_equal(pf[k].fd, sc->fd[j]);
					assert_int_not_equal(pf[k].fd, rc->fd[j]);
				}
			/* Something pending always wakes the caller: a socket or the helper (H2). */
			assert_true(n > 0);
			assert_true(poll(pf, (nfds_t)n, 5000) > 0);
			net_tcp_poll_seen(p.rcomm, pf, n);
			net_tcp_poll_seen(p.scomm, pf, n);
		}
		assert_int_equal(got, (int)sizes[i]);
		check_bytes(src, dst, sizes[i], "helper sizes");
	}
	pair_close(&p);
	free(src);
	free(dst);
}

/*
 * Many small messages one at a time: each is inline, so the helper's share
 * of it is empty. The message completes without the helper, but its
 * request is reused only once the helper passed that share, which it does
 * when it sees the header, arriving at any point of its loop (H1/H1'): a
 * helper that missed one would leave the pool full and the posts failing.
 */
static void t_helper_inline_storm(void **state)
{
	struct pair p;
	uint8_t src[64], dst[64];

	pair_open(&p);
	for (int k = 0; k < 20000; k++) {
		void *dptr = dst, *sreq, *rreq;
		int rsize = sizeof(dst), tag = k & 0xffff, ssize = -1, got = -1;
		size_t n = 1 + (size_t)k % sizeof(src);

		fill(src, n, &seed);
		rreq = irecv_retry(p.rcomm, 1, &dptr, &rsize, &tag, NULL);
		sreq = isend_retry(p.scomm, src, (int)n, tag, NULL);
		wait_both(sreq, rreq, &ssize, &got);
		assert_int_equal(got, (int)n);
		check_bytes(src, dst, n, "inline storm");
	}
	pair_close(&p);
}

/*
 * Only shares with bytes count: with both helpers held off (as if never
 * scheduled), an inline message completes on socket 0 alone, a larger one
 * does not; its requests stay out of the pool until the data sockets
 * passed them (R1/R1'), and once the helpers run again everything
 * completes and is retired.
 */
static void t_helper_inline_alone(void **state)
{
	uint8_t *src = malloc(1 << 20), *dst = malloc(4 << 20), small[100];
	void *sreq, *rreq, *bsreq, *brreq;
	struct tcp_comm *sc, *rc;
	int got = -1, done = 0;
	struct pair p;

	assert_non_null(src);
	assert_non_null(dst);
	pair_open(&p);
	sc = p.scomm;
	rc = p.rcomm;
	assert_true(sc->helper_on && rc->helper_on);
	helper_stop(sc);
	helper_stop(rc);
	sc->helper_on = rc->helper_on = 1; /* the data sockets are a helper's, which does not run */

	post_both(&p, small, dst, sizeof(small), 1, &sreq, &rreq);
	wait_both(sreq, rreq, NULL, &got);
	assert_int_equal(got, (int)sizeof(small));
	check_bytes(small, dst, sizeof(small), "inline without the helper");
	/* Reported done, yet not back in the pool: the data sockets have not passed them. */
	assert_int_equal(((struct tcp_req *)sreq)->head.used, 1);
	assert_int_equal(((struct tcp_req *)rreq)->head.used, 1);
	assert_int_equal(net->test(sreq, &done, NULL), ncclInvalidArgument);

	post_both(&p, src, dst, 1 << 20, 2, &bsreq, &brreq);
	for (int k = 0; k < 200; k++) {
		assert_int_equal(net->test(brreq, &done, NULL), ncclSuccess);
		assert_int_equal(done, 0);
	}
	sc->helper_on = rc->helper_on = 0;
	helper_start(sc);
	helper_start(rc);
	assert_true(sc->helper_on && rc->helper_on);
	wait_both(bsreq, brreq, NULL, &got);
	assert_int_equal(got, 1 << 20);
	check_bytes(src, dst, 1 << 20, "after the helpers ran");
	/* The next post retires all four. */
	post_both(&p, small, dst, 7, 3, &sreq, &rreq);
	wait_both(sreq, rreq, NULL, &got);
	assert_int_equal(got, 7);
	assert_int_equal(sc->qtail - sc->qhead, 1);
	assert_int_equal(rc->qtail - rc->qhead, 1);
	pair_close(&p);
	free(src);
	free(dst);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_share),
		cmocka_unit_test_teardown(t_options, setup),
		cmocka_unit_test_teardown(t_streams, setup),
		cmocka_unit_test(t_bad_handle),
		cmocka_unit_test(t_partial_io),
		cmocka_unit_test(t_read_ahead),
		cmocka_unit_test(t_inline_blocked),
		cmocka_unit_test(t_soak),
		cmocka_unit_test(t_connect_refused),
		cmocka_unit_test(t_receiver_closed),
		cmocka_unit_test(t_impostor),
		cmocka_unit_test(t_inline_pollfds),
		cmocka_unit_test_teardown(t_poll_driven, setup),
		TCP_CASES,
	};
	/* The same traffic with a helper thread per comm (net_tcp_helpers). */
	const struct CMUnitTest helper_tests[] = {
		cmocka_unit_test_teardown(t_streams, setup),
		cmocka_unit_test(t_partial_io),
		cmocka_unit_test(t_inline_blocked),
		cmocka_unit_test(t_soak),
		cmocka_unit_test(t_receiver_closed),
		cmocka_unit_test_teardown(t_helper_poll, setup),
		cmocka_unit_test(t_helper_inline_storm),
		cmocka_unit_test(t_helper_inline_alone),
		TCP_CASES,
	};

	if (argc > 1 && !strcmp(argv[1], "--helpers")) {
		helpers = 1;
		return cmocka_run_group_tests(helper_tests, setup, NULL);
	}
	return cmocka_run_group_tests(tests, setup, NULL);
}
