/* SPDX-License-Identifier: MIT */
/*
 * Cases for a tcp transport reached through an ncclNet_v8 table, shared by
 * test_net_tcp (the built-in table) and test_net_plugin (the same code loaded
 * from libnccl-net-collc.so). The including file sets `net` in its setup.
 * Traffic stays on loopback; every wait is bounded by WAIT_MS.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "daemon/net/net.h"

#define WAIT_MS 20000

static const ncclNet_v8_t *net;
static uint64_t seed = 0x5eed0001;

static void test_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
			const char *fmt, ...)
{
	va_list ap;

	if (level > NCCL_LOG_WARN)
		return;
	va_start(ap, fmt);
	fprintf(stderr, "[net %s:%d] ", file, line);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static int64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t rnd(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static void fill(uint8_t *p, size_t n, uint64_t *s)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = (uint8_t)(rnd(s) >> 24);
}

/* Byte by byte; names the first difference. */
static void check_bytes(const uint8_t *want, const uint8_t *got, size_t n, const char *what)
{
	size_t i;

	if (!memcmp(want, got, n))
		return;
	for (i = 0; i < n && want[i] == got[i]; i++)
		;
	fail_msg("%s: byte %zu of %zu differs (%02x != %02x), seed %#llx", what, i, n, want[i],
		 got[i], (unsigned long long)seed);
}

struct pair {
	void *lcomm, *scomm, *rcomm;
};

static void pair_open(struct pair *p)
{
	char handle[NCCL_NET_HANDLE_MAXSIZE];
	int64_t end = ms_now() + WAIT_MS;

	memset(p, 0, sizeof(*p));
	assert_int_equal(net->listen(0, handle, &p->lcomm), ncclSuccess);
	assert_non_null(p->lcomm);
	while (!p->scomm || !p->rcomm) {
		if (!p->scomm)
			assert_int_equal(net->connect(0, handle, &p->scomm, NULL), ncclSuccess);
		if (!p->rcomm)
			assert_int_equal(net->accept(p->lcomm, &p->rcomm, NULL), ncclSuccess);
		assert_true(ms_now() < end);
	}
}

static void pair_close(struct pair *p)
{
	assert_int_equal(net->closeSend(p->scomm), ncclSuccess);
	assert_int_equal(net->closeRecv(p->rcomm), ncclSuccess);
	assert_int_equal(net->closeListen(p->lcomm), ncclSuccess);
}

/*
 * Posting as NCCL's proxy does: a NULL request means none is free yet (a
 * request is reused only once every socket passed it), so try again,
 * within WAIT_MS.
 */
static void *irecv_retry(void *rcomm, int n, void **data, int *sizes, int *tags, void **mhandles)
{
	int64_t end = ms_now() + WAIT_MS;
	void *req = NULL;

	for (;;) {
		assert_int_equal(net->irecv(rcomm, n, data, sizes, tags, mhandles, &req),
				 ncclSuccess);
		if (req)
			return req;
		assert_true(ms_now() < end);
	}
}

static void *isend_retry(void *scomm, void *data, int size, int tag, void *mhandle)
{
	int64_t end = ms_now() + WAIT_MS;
	void *req = NULL;

	for (;;) {
		assert_int_equal(net->isend(scomm, data, size, tag, mhandle, &req), ncclSuccess);
		if (req)
			return req;
		assert_true(ms_now() < end);
	}
}

/* Tests both requests until done; returns the sizes they report. */
static void wait_both(void *sreq, void *rreq, int *ret_ssize, int *ret_rsize)
{
	int sdone = !sreq, rdone = !rreq;
	int64_t end = ms_now() + WAIT_MS;

	while (!sdone || !rdone) {
		if (!sdone)
			assert_int_equal(net->test(sreq, &sdone, ret_ssize), ncclSuccess);
		if (!rdone)
			assert_int_equal(net->test(rreq, &rdone, ret_rsize), ncclSuccess);
		assert_true(ms_now() < end);
	}
}

static void send_one(struct pair *p, size_t size, int tag)
{
	uint8_t *src = malloc(size ? size : 1), *dst = malloc(size + 16);
	void *smr, *rmr, *sreq = NULL, *rreq = NULL;
	int rsize = (int)size + 16, ssize = -1, got = -1, rtag = tag;
	void *dptr = dst;

	assert_non_null(src);
	assert_non_null(dst);
	fill(src, size, &seed);
	memset(dst, 0xa5, size + 16);
	assert_int_equal(net->regMr(p->scomm, src, size, NCCL_PTR_HOST, &smr), ncclSuccess);
	assert_int_equal(net->regMr(p->rcomm, dst, size + 16, NCCL_PTR_HOST, &rmr), ncclSuccess);
	rreq = irecv_retry(p->rcomm, 1, &dptr, &rsize, &rtag, &rmr);
	sreq = isend_retry(p->scomm, src, (int)size, tag, smr);
	wait_both(sreq, rreq, &ssize, &got);
	assert_int_equal(ssize, (int)size);
	assert_int_equal(got, (int)size);
	check_bytes(src, dst, size, "payload");
	for (size_t i = size; i < size + 16; i++)
		assert_int_equal(dst[i], 0xa5); /* nothing written past the message */
	assert_int_equal(net->deregMr(p->scomm, smr), ncclSuccess);
	assert_int_equal(net->deregMr(p->rcomm, rmr), ncclSuccess);
	free(src);
	free(dst);
}

static void t_properties(void **state)
{
	ncclNetProperties_v8_t props;
	int ndev = 0;

	assert_int_equal(net->devices(&ndev), ncclSuccess);
	assert_int_equal(ndev, 1);
	assert_int_equal(net->getProperties(0, &props), ncclSuccess);
	assert_string_equal(props.name, "lo");
	assert_int_equal(props.ptrSupport, NCCL_PTR_HOST);
	assert_true(props.maxRecvs >= 1);
	assert_true(props.speed > 0);
	assert_int_equal(props.netDeviceType, NCCL_NET_DEVICE_HOST);
	assert_int_not_equal(net->getProperties(1, &props), ncclSuccess);
}

static void t_sizes(void **state)
{
	static const size_t sizes[] = { 0, 1, 4095, 1 << 20, 64 << 20 };
	struct pair p;
	size_t i;

	pair_open(&p);
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		send_one(&p, sizes[i], (int)i);
	pair_close(&p);
}

/* Every request slot in flight at once, tags distinct, sizes random. */
static void t_many_in_flight(void **state)
{
	enum { N = NCCL_NET_MAX_REQUESTS };
	uint8_t *src[N], *dst[N];
	void *sreq[N], *rreq[N], *extra = (void *)1;
	int size[N], rsize[N], tag[N], sdone[N] = { 0 }, rdone[N] = { 0 }, left = 2 * N;
	int64_t end = ms_now() + WAIT_MS;
	struct pair p;
	int i;

	pair_open(&p);
	for (i = 0; i < N; i++) {
		size[i] = (int)(rnd(&seed) % (200 << 10));
		tag[i] = 1000 + i;
		rsize[i] = size[i];
		src[i] = malloc(size[i] + 1);
		dst[i] = malloc(size[i] + 1);
		fill(src[i], size[i], &seed);
		void *d = dst[i];
		assert_int_equal(net->irecv(p.rcomm, 1, &d, &rsize[i], &tag[i], NULL, &rreq[i]),
				 ncclSuccess);
		assert_non_null(rreq[i]);
		assert_int_equal(net->isend(p.scomm, src[i], size[i], tag[i], NULL, &sreq[i]),
				 ncclSuccess);
		assert_non_null(sreq[i]);
	}
	/* The pool is full: a further request is not taken, and that is no error. */
	assert_int_equal(net->isend(p.scomm, src[0], 1, 1, NULL, &extra), ncclSuccess);
	assert_null(extra);
	while (left) {
		for (i = 0; i < N; i++) {
			int s = -1;

			if (!sdone[i]) {
				assert_int_equal(net->test(sreq[i], &sdone[i], &s), ncclSuccess);
				if (sdone[i]) {
					assert_int_equal(s, size[i]);
					left--;
				}
			}
			if (!rdone[i]) {
				assert_int_equal(net->test(rreq[i], &rdone[i], &s), ncclSuccess);
				if (rdone[i]) {
					assert_int_equal(s, size[i]);
					left--;
				}
			}
		}
		assert_true(ms_now() < end);
	}
	for (i = 0; i < N; i++) {
		check_bytes(src[i], dst[i], size[i], "in-flight payload");
		free(src[i]);
		free(dst[i]);
	}
	pair_close(&p);
}

/* A group of three receives matched by tag, whatever the send order. */
static void t_grouped(void **state)
{
	uint8_t a[3][5000], b[3][5000];
	int sizes[3] = { 5000, 5000, 5000 }, tags[3] = { 5, 7, 9 }, sent[3] = { 3000, 10, 0 };
	int order[3] = { 1, 2, 0 }, got[3] = { -1, -1, -1 }, done = 0, i;
	void *data[3] = { b[0], b[1], b[2] }, *rreq, *sreq[3];
	int64_t end = ms_now() + WAIT_MS;
	struct pair p;

	pair_open(&p);
	assert_int_equal(net->irecv(p.rcomm, 3, data, sizes, tags, NULL, &rreq), ncclSuccess);
	assert_non_null(rreq);
	for (i = 0; i < 3; i++) {
		int k = order[i];

		fill(a[k], sizeof(a[k]), &seed);
		assert_int_equal(net->isend(p.scomm, a[k], sent[k], tags[k], NULL, &sreq[i]),
				 ncclSuccess);
		assert_non_null(sreq[i]);
	}
	for (i = 0; i < 3; i++)
		wait_both(sreq[i], NULL, NULL, NULL);
	while (!done) {
		assert_int_equal(net->test(rreq, &done, got), ncclSuccess);
		assert_true(ms_now() < end);
	}
	for (i = 0; i < 3; i++) {
		assert_int_equal(got[i], sent[i]);
		check_bytes(a[i], b[i], sent[i], "grouped payload");
	}
	pair_close(&p);
}

/* A message larger than its receive is refused, not truncated silently. */
static void t_oversized_message(void **state)
{
	uint8_t src[200] = { 0 }, dst[100];
	int rsize = sizeof(dst), tag = 3, done = 0;
	void *d = dst, *sreq, *rreq;
	int64_t end = ms_now() + WAIT_MS;
	ncclResult_t rc = ncclSuccess;
	struct pair p;

	pair_open(&p);
	assert_int_equal(net->irecv(p.rcomm, 1, &d, &rsize, &tag, NULL, &rreq), ncclSuccess);
	assert_int_equal(net->isend(p.scomm, src, sizeof(src), tag, NULL, &sreq), ncclSuccess);
	wait_both(sreq, NULL, NULL, NULL);
	while (rc == ncclSuccess && !done) {
		rc = net->test(rreq, &done, NULL);
		assert_true(ms_now() < end);
	}
	assert_int_not_equal(rc, ncclSuccess);
	assert_int_equal(done, 0);
	pair_close(&p);
}

static void t_refusals(void **state)
{
	uint8_t buf[64];
	void *mh = (void *)1, *req = (void *)1, *d = buf;
	int n = sizeof(buf);
	struct pair p;

	pair_open(&p);
	/* CUDA pointers and DMA-BUF are not supported by tcp yet: refused cleanly. */
	assert_int_equal(net->regMr(p.scomm, buf, sizeof(buf), NCCL_PTR_CUDA, &mh),
			 ncclInternalError);
	assert_int_equal(net->regMrDmaBuf(p.scomm, buf, sizeof(buf), NCCL_PTR_DMABUF, 0, -1, &mh),
			 ncclInternalError);
	/* Host memory needs no flush. */
	assert_int_equal(net->iflush(p.rcomm, 1, &d, &n, NULL, &req), ncclSuccess);
	assert_null(req);
	/* Wrong directions and sizes. */
	assert_int_equal(net->isend(p.rcomm, buf, 1, 0, NULL, &req), ncclInvalidArgument);
	assert_int_equal(net->isend(p.scomm, buf, -1, 0, NULL, &req), ncclInvalidArgument);
	assert_int_equal(net->irecv(p.rcomm, 0, &d, &n, &n, NULL, &req), ncclInvalidArgument);
	assert_int_equal(net->irecv(p.rcomm, 1000, &d, &n, &n, NULL, &req), ncclInvalidArgument);
	pair_close(&p);
}

/* The sender goes away: a pending receive fails, it does not hang. */
static void t_peer_closed(void **state)
{
	uint8_t dst[1000];
	int rsize = sizeof(dst), tag = 1, done = 0;
	void *d = dst, *rreq;
	int64_t end = ms_now() + WAIT_MS;
	ncclResult_t rc = ncclSuccess;
	struct pair p;

	pair_open(&p);
	send_one(&p, 100, 1);
	assert_int_equal(net->irecv(p.rcomm, 1, &d, &rsize, &tag, NULL, &rreq), ncclSuccess);
	assert_int_equal(net->closeSend(p.scomm), ncclSuccess);
	while (rc == ncclSuccess) {
		rc = net->test(rreq, &done, NULL);
		assert_int_equal(done, 0);
		assert_true(ms_now() < end);
	}
	assert_int_equal(rc, ncclRemoteError);
	assert_int_equal(net->closeRecv(p.rcomm), ncclSuccess);
	assert_int_equal(net->closeListen(p.lcomm), ncclSuccess);
}

/* Junk on the listening port (a port scan, a stray client) is dropped and
 * the real connection is still accepted. */
static void t_garbage_connection(void **state)
{
	char handle[NCCL_NET_HANDLE_MAXSIZE];
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	void *lcomm, *scomm = NULL, *rcomm = NULL;
	int64_t end = ms_now() + WAIT_MS;
	int i, fds[4];

	assert_int_equal(net->listen(0, handle, &lcomm), ncclSuccess);
	/* The tcp handle holds the listener's sockaddr at byte 16 (struct tcp_handle). */
	memcpy(&ss, handle + 16, sizeof(struct sockaddr_in6));
	len = ((struct sockaddr *)&ss)->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
							      : sizeof(struct sockaddr_in);
	for (i = 0; i < 4; i++) {
		static const char junk[] = "GET / HTTP/1.0\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxx";

		fds[i] = socket(((struct sockaddr *)&ss)->sa_family, SOCK_STREAM, 0);
		assert_true(fds[i] >= 0);
		assert_int_equal(connect(fds[i], (struct sockaddr *)&ss, len), 0);
		if (i % 2 == 0)
			assert_true(write(fds[i], junk, sizeof(junk)) > 0);
	}
	for (i = 0; i < 20; i++)
		assert_int_equal(net->accept(lcomm, &rcomm, NULL), ncclSuccess);
	assert_null(rcomm);
	while (!scomm || !rcomm) {
		if (!scomm)
			assert_int_equal(net->connect(0, handle, &scomm, NULL), ncclSuccess);
		if (!rcomm)
			assert_int_equal(net->accept(lcomm, &rcomm, NULL), ncclSuccess);
		assert_true(ms_now() < end);
	}
	for (i = 0; i < 4; i++)
		close(fds[i]);
	{
		struct pair p = { lcomm, scomm, rcomm };

		send_one(&p, 70000, 42);
		pair_close(&p);
	}
}

/* Several connections of one listener's device at once stay apart. */
static void t_two_connections(void **state)
{
	struct pair a, b;

	pair_open(&a);
	pair_open(&b);
	send_one(&a, 300000, 1);
	send_one(&b, 5, 2);
	send_one(&a, 0, 3);
	pair_close(&b);
	pair_close(&a);
}

#define TCP_CASES                                                                                  \
	cmocka_unit_test(t_properties), cmocka_unit_test(t_sizes),                                 \
		cmocka_unit_test(t_many_in_flight), cmocka_unit_test(t_grouped),                   \
		cmocka_unit_test(t_oversized_message), cmocka_unit_test(t_refusals),               \
		cmocka_unit_test(t_peer_closed), cmocka_unit_test(t_garbage_connection),           \
		cmocka_unit_test(t_two_connections)
