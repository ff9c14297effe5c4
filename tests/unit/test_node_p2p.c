/* SPDX-License-Identifier: MIT */
/*
 * Sends and receives between two daemons (daemon/node_p2p.c) over an
 * in-process transport, with the host staging of executor memory driven by
 * a fake copy door (plain memcpy from or into a "device" arena). The
 * transport reads a send's bytes only when the matching receive is tested,
 * never copies more than the receive's size, returns no request when a comm
 * has FAKE_REQS in flight (more than the staging slots) and at every
 * FAKE_BUSY-th call, and refuses any pointer into the arena: so a
 * staging slot reused too early, a chunk of the wrong length, a lost
 * retry, or device memory handed to the transport all show. Both daemons
 * post sends and receives to each other at once (the ring of issue 18)
 * with every mix of staged and host buffers, random sizes across several
 * P2P_CHUNKs and zero; then a failing copy fails the communicator, and a
 * count mismatch ends both sides with -EINVAL without a copy.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "daemon/node_p2p.h"
#include "proto/dtype.h"

#define CHUNK     (4u << 20) /* node_p2p.c's P2P_CHUNK: no staged copy is larger */
#define FAKE_REQS 12         /* requests one comm keeps before isend/irecv say "later" */
#define FAKE_BUSY 29         /* and every FAKE_BUSY-th call says "later" anyway */
#define ARENA     ((size_t)320 << 20)
#define MAXQ      64

/* The tcp transport's; no fd here. */
int net_tcp_pollfds(void *comm, struct pollfd *pf, int max)
{
	(void)comm;
	(void)pf;
	(void)max;
	return 0;
}

void net_tcp_poll_seen(void *comm, const struct pollfd *pf, int n)
{
	(void)comm;
	(void)pf;
	(void)n;
}

/* The "device": memory only the copy door may touch. */
static char *arena;

static int in_arena(const void *p, size_t n)
{
	return (const char *)p >= arena && (const char *)p + n <= arena + ARENA;
}

/* In-process transport */

struct freq {
	int used, done, send, size, cap;
	char *ptr;
	struct wire *w;
};

struct wire {
	int used;
	struct freq *sq[MAXQ], *rq[MAXQ];
	int sn, rn;
	int inflight_s, inflight_r;
};

static struct wire wires[8];
static struct freq reqs[512];
static int transport_error, calls;

static struct freq *req_new(void)
{
	for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++)
		if (!reqs[i].used) {
			memset(&reqs[i], 0, sizeof(reqs[i]));
			reqs[i].used = 1;
			return &reqs[i];
		}
	return NULL;
}

static ncclResult_t f_listen(int dev, void *handle, void **lc)
{
	(void)dev;
	for (int i = 0; i < 8; i++)
		if (!wires[i].used) {
			memset(&wires[i], 0, sizeof(wires[i]));
			wires[i].used = 1;
			memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
			*(int *)handle = i;
			*lc = &wires[i];
			return ncclSuccess;
		}
	return ncclSystemError;
}

static ncclResult_t f_connect(int dev, void *handle, void **sc, ncclNetDeviceHandle_v8_t **dh)
{
	(void)dev;
	(void)dh;
	*sc = &wires[*(int *)handle];
	return ncclSuccess;
}

static ncclResult_t f_accept(void *lc, void **rc, ncclNetDeviceHandle_v8_t **dh)
{
	(void)dh;
	*rc = lc;
	return ncclSuccess;
}

static ncclResult_t f_regmr(void *comm, void *data, size_t size, int type, void **mh)
{
	(void)comm;
	(void)type;
	if (in_arena(data, 1) || in_arena((char *)data + size - 1, 1))
		transport_error = 1;
	*mh = data;
	return ncclSuccess;
}

static ncclResult_t f_deregmr(void *comm, void *mh)
{
	(void)comm;
	(void)mh;
	return ncclSuccess;
}

static ncclResult_t f_isend(void *sc, void *data, int size, int tag, void *mh, void **req)
{
	struct wire *w = sc;
	struct freq *q;

	(void)tag;
	(void)mh;
	*req = NULL;
	if (in_arena(data, (size_t)size))
		transport_error = 1;
	if (w->inflight_s >= FAKE_REQS || ++calls % FAKE_BUSY == 0)
		return ncclSuccess;
	q = req_new();
	if (!q || w->sn == MAXQ)
		return ncclInternalError;
	q->send = 1;
	q->ptr = data;
	q->size = size;
	q->w = w;
	w->sq[w->sn++] = q;
	w->inflight_s++;
	*req = q;
	return ncclSuccess;
}

static ncclResult_t f_irecv(void *rc, int n, void **data, int *sizes, int *tags, void **mh,
			    void **req)
{
	struct wire *w = rc;
	struct freq *q;

	(void)tags;
	(void)mh;
	*req = NULL;
	if (n != 1 || in_arena(data[0], (size_t)sizes[0]))
		transport_error = 1;
	if (w->inflight_r >= FAKE_REQS || ++calls % FAKE_BUSY == 0)
		return ncclSuccess;
	q = req_new();
	if (!q || w->rn == MAXQ)
		return ncclInternalError;
	q->ptr = data[0];
	q->cap = sizes[0];
	q->w = w;
	w->rq[w->rn++] = q;
	w->inflight_r++;
	*req = q;
	return ncclSuccess;
}

/* Matches the oldest send with the oldest receive of a wire: the bytes move only now. */
static void wire_progress(struct wire *w)
{
	while (w->sn && w->rn) {
		struct freq *s = w->sq[0], *r = w->rq[0];

		if (s->size > r->cap) {
			transport_error = 1;
			return;
		}
		memcpy(r->ptr, s->ptr, (size_t)s->size);
		s->done = 1;
		r->done = 1;
		r->size = s->size;
		memmove(w->sq, w->sq + 1, (size_t)--w->sn * sizeof(w->sq[0]));
		memmove(w->rq, w->rq + 1, (size_t)--w->rn * sizeof(w->rq[0]));
	}
}

static ncclResult_t f_test(void *request, int *done, int *size)
{
	struct freq *q = request;

	wire_progress(q->w);
	*done = q->done;
	if (q->done) {
		*size = q->size;
		if (q->send)
			q->w->inflight_s--;
		else
			q->w->inflight_r--;
		q->used = 0;
	}
	return ncclSuccess;
}

static ncclResult_t f_close(void *c)
{
	(void)c;
	return ncclSuccess;
}

static ncclResult_t f_close_listen(void *c)
{
	(void)c;
	return ncclSuccess;
}

static const ncclNet_v8_t fake_net = {
	.name = "fake",
	.listen = f_listen,
	.connect = f_connect,
	.accept = f_accept,
	.regMr = f_regmr,
	.deregMr = f_deregmr,
	.isend = f_isend,
	.irecv = f_irecv,
	.test = f_test,
	.closeSend = f_close,
	.closeRecv = f_close,
	.closeListen = f_close_listen,
};

/* Fake copy door */

static int copies, copy_fail_at = -1, maps, unmaps;
static size_t copy_max;

static int fake_copy(uint32_t dev, void *dst, const void *src, size_t bytes)
{
	(void)dev;
	/* Exactly one side is the device's. */
	if (in_arena(dst, bytes) == in_arena(src, bytes))
		transport_error = 1;
	if (copy_fail_at >= 0 && copies >= copy_fail_at)
		return -EIO;
	copies++;
	if (bytes > copy_max)
		copy_max = bytes;
	memcpy(dst, src, bytes);
	return 0;
}

static int fake_host_map(void *p, size_t len, uint64_t *ret_addr, void **ret_handle)
{
	struct {
		void *p;
		size_t len;
	} *h = malloc(sizeof(*h));

	if (!h)
		return -ENOMEM;
	h->p = p;
	h->len = len;
	*ret_addr = (uint64_t)(uintptr_t)p;
	*ret_handle = h;
	maps++;
	return 0;
}

static void fake_host_unmap(void *handle)
{
	struct {
		void *p;
		size_t len;
	} *h = handle;

	munmap(h->p, h->len); /* the executor owns the mapping (exec.h host_map) */
	free(h);
	unmaps++;
}

static struct exec_backend fake_ex = {
	.name = "fake",
	.copy = fake_copy,
	.host_map = fake_host_map,
	.host_unmap = fake_host_unmap,
};

/* Two daemons */

#define MAXDONE 256

struct done_rec {
	uint64_t cookie;
	int err;
};

struct daemon {
	struct np2p *p;
	struct done_rec done[MAXDONE];
	int ndone;
};

static struct daemon dm[2];

static void on_done(void *arg, uint64_t cookie, int err)
{
	struct daemon *d = arg;

	assert_true(d->ndone < MAXDONE);
	d->done[d->ndone].cookie = cookie;
	d->done[d->ndone].err = err;
	d->ndone++;
}

static void pair_up(void)
{
	static const uint8_t owner[2] = { 0, 1 };
	uint8_t h0[2][NCCL_NET_HANDLE_MAXSIZE], h1[2][NCCL_NET_HANDLE_MAXSIZE];
	int up0 = 0, up1 = 0;

	memset(wires, 0, sizeof(wires));
	memset(reqs, 0, sizeof(reqs));
	memset(dm, 0, sizeof(dm));
	transport_error = 0;
	copies = maps = unmaps = 0;
	copy_max = 0;
	copy_fail_at = -1;
	for (int i = 0; i < 2; i++) {
		dm[i].p = np2p_new(&fake_net, 2, 2, (uint32_t)i, owner, on_done, &dm[i]);
		assert_non_null(dm[i].p);
	}
	assert_int_equal(np2p_listen(dm[0].p, h0), 0);
	assert_int_equal(np2p_listen(dm[1].p, h1), 0);
	assert_int_equal(np2p_peer_handle(dm[0].p, 1, h1[0]), 0);
	assert_int_equal(np2p_peer_handle(dm[1].p, 0, h0[1]), 0);
	for (int k = 0; k < 10 && !(up0 == 1 && up1 == 1); k++) {
		up0 = np2p_connect(dm[0].p);
		up1 = np2p_connect(dm[1].p);
	}
	assert_int_equal(up0, 1);
	assert_int_equal(up1, 1);
}

static void pair_down(void)
{
	np2p_free(dm[0].p);
	np2p_free(dm[1].p);
	/* Every slot pinned by host_map was handed back. */
	assert_int_equal(maps, unmaps);
}

/* Steps both until each has want completions; the first error of a step, or 0. */
static int run_until(int want0, int want1)
{
	for (int it = 0; it < 100000; it++) {
		for (int i = 0; i < 2; i++) {
			int busy = 0, pending = 0, r = np2p_step(dm[i].p, &busy, &pending);

			if (r < 0)
				return r;
		}
		if (dm[0].ndone >= want0 && dm[1].ndone >= want1)
			return 0;
	}
	return -ETIMEDOUT;
}

static int done_err(const struct daemon *d, uint64_t cookie)
{
	for (int i = 0; i < d->ndone; i++)
		if (d->done[i].cookie == cookie)
			return d->done[i].err;
	return 1; /* not ended */
}

static uint8_t pat(int from, uint64_t k, size_t b)
{
	uint64_t x = (k + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t)from << 56 ^
		     b * 0xbf58476d1ce4e5b9ull;

	return (uint8_t)(x >> 29);
}

static uint64_t rng = 0x6e703270ull;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

#define NMSG 12

/*
 * Both daemons send NMSG messages to each other and receive NMSG at once,
 * each send and each receive staged or not (both, neither, and either
 * alone all occur).
 */
static void test_ring_staged(void **state)
{
	/* Seven chunks, more than the slots: at k 4 both sides staged, at k 5 the receiver alone. */
	static const size_t fixed[] = {
		0, 1, CHUNK - 1, CHUNK + 1, 6 * (size_t)CHUNK + 5, 6 * (size_t)CHUNK + 3
	};
	size_t size[2][NMSG], off_dev = 0;
	char *sbuf[2][NMSG], *rbuf[2][NMSG];
	int staged_s[2][NMSG], staged_r[2][NMSG], want_copies = 0;

	(void)state;
	pair_up();
	for (int i = 0; i < 2; i++)
		for (int k = 0; k < NMSG; k++) {
			size[i][k] = k < 6 ? fixed[k]
					   : (size_t)(next_rand() % (2 * (size_t)CHUNK + 999));
			/* k % 4: both staged, the receive alone, the send alone, neither. */
			staged_s[i][k] = k % 4 == 0 || k % 4 == 2;
			staged_r[1 - i][k] = k % 4 < 2;
		}
	for (int i = 0; i < 2; i++)
		for (int k = 0; k < NMSG; k++) {
			size_t n = size[i][k];

			/* Sender i's buffer, and its receiver's (daemon 1 - i). */
			if (staged_s[i][k]) {
				sbuf[i][k] = arena + off_dev;
				off_dev += n + 64;
				want_copies += (int)((n + CHUNK - 1) / CHUNK);
			} else {
				sbuf[i][k] = malloc(n + 1);
			}
			if (staged_r[1 - i][k]) {
				rbuf[1 - i][k] = arena + off_dev;
				off_dev += n + 64;
				want_copies += (int)((n + CHUNK - 1) / CHUNK);
			} else {
				rbuf[1 - i][k] = malloc(n + 1);
			}
			assert_true(off_dev <= ARENA);
			for (size_t b = 0; b < n; b++)
				sbuf[i][k][b] = (char)pat(i, k, b);
			memset(rbuf[1 - i][k], 0xa5, n);
		}
	/* Receives first on daemon 0, sends first on daemon 1: every order of CTS and send. */
	for (int k = 0; k < NMSG; k++)
		for (int pass = 0; pass < 2; pass++)
			for (int i = 0; i < 2; i++) {
				int send = (pass == 0) == (i == 1);
				int peer = 1 - i;
				struct node_p2p d = { 0 };

				d.cookie = (uint64_t)(send ? 1000 : 2000) + (uint64_t)k;
				d.pseq = (uint64_t)k;
				d.sender = (uint32_t)(send ? i : peer);
				d.receiver = (uint32_t)(send ? peer : i);
				d.send = (uint32_t)send;
				d.dtype = COLLC_UINT8;
				d.count = d.bytes = size[send ? i : peer][k];
				d.buf = d.bytes ? (send ? sbuf[i][k] : rbuf[i][k]) : NULL;
				if (d.bytes && (send ? staged_s[i][k] : staged_r[i][k])) {
					d.ex = &fake_ex;
					d.dev = 3;
				}
				assert_int_equal(np2p_post(dm[i].p, &d), 0);
			}
	assert_int_equal(run_until(2 * NMSG, 2 * NMSG), 0);
	assert_int_equal(transport_error, 0);
	for (int i = 0; i < 2; i++)
		for (int k = 0; k < NMSG; k++) {
			assert_int_equal(done_err(&dm[i], 1000 + (uint64_t)k), 0);
			assert_int_equal(done_err(&dm[i], 2000 + (uint64_t)k), 0);
		}
	for (int i = 0; i < 2; i++)
		for (int k = 0; k < NMSG; k++) {
			const char *got = rbuf[1 - i][k];

			for (size_t b = 0; b < size[i][k]; b++)
				if ((uint8_t)got[b] != pat(i, k, b))
					fail_msg(
						"message %d from daemon %d: byte %zu is 0x%02x, not 0x%02x",
						k, i, b, (uint8_t)got[b], pat(i, k, b));
		}
	/* One copy per chunk, none larger than a slot; pinned once per link and way. */
	assert_int_equal(copies, want_copies);
	assert_true(copy_max <= CHUNK);
	assert_int_equal(maps, 4);
	pair_down();
	for (int i = 0; i < 2; i++)
		for (int k = 0; k < NMSG; k++) {
			if (!staged_s[i][k])
				free(sbuf[i][k]);
			if (!staged_r[1 - i][k])
				free(rbuf[1 - i][k]);
		}
}

/* A failing device copy fails the communicator (node.c then fails it everywhere). */
static void test_copy_fails(void **state)
{
	const size_t n = 3 * (size_t)CHUNK;
	char *host = malloc(n);
	struct node_p2p d = { 0 };
	int r;

	(void)state;
	pair_up();
	copy_fail_at = 1; /* the second chunk's copy fails */
	d = (struct node_p2p){ .cookie = 1,
			       .pseq = 0,
			       .count = n,
			       .bytes = n,
			       .buf = arena,
			       .ex = &fake_ex,
			       .sender = 0,
			       .receiver = 1,
			       .dtype = COLLC_UINT8,
			       .send = 1 };
	assert_int_equal(np2p_post(dm[0].p, &d), 0);
	d = (struct node_p2p){ .cookie = 2,
			       .pseq = 0,
			       .count = n,
			       .bytes = n,
			       .buf = host,
			       .sender = 0,
			       .receiver = 1,
			       .dtype = COLLC_UINT8,
			       .send = 0 };
	assert_int_equal(np2p_post(dm[1].p, &d), 0);
	r = run_until(1, 1);
	assert_int_equal(r, -EIO);
	assert_int_equal(dm[1].ndone, 0); /* the receive never ends as done */
	pair_down();
	free(host);
}

/* Counts differ: both sides end with -EINVAL and nothing is staged or copied. */
static void test_mismatch(void **state)
{
	struct node_p2p d;

	(void)state;
	pair_up();
	d = (struct node_p2p){ .cookie = 7,
			       .pseq = 0,
			       .count = 100,
			       .bytes = 100,
			       .buf = arena,
			       .ex = &fake_ex,
			       .sender = 1,
			       .receiver = 0,
			       .dtype = COLLC_UINT8,
			       .send = 1 };
	assert_int_equal(np2p_post(dm[1].p, &d), 0);
	d = (struct node_p2p){ .cookie = 8,
			       .pseq = 0,
			       .count = 99,
			       .bytes = 99,
			       .buf = arena + 4096,
			       .ex = &fake_ex,
			       .sender = 1,
			       .receiver = 0,
			       .dtype = COLLC_UINT8,
			       .send = 0 };
	assert_int_equal(np2p_post(dm[0].p, &d), 0);
	assert_int_equal(run_until(1, 1), 0);
	assert_int_equal(done_err(&dm[1], 7), -EINVAL);
	assert_int_equal(done_err(&dm[0], 8), -EINVAL);
	assert_int_equal(copies, 0);
	assert_int_equal(maps, 0);
	assert_int_equal(transport_error, 0);
	pair_down();
}

/* An executor without a copy door cannot stage: refused at posting. */
static void test_no_door(void **state)
{
	struct exec_backend none = { .name = "none" };
	struct node_p2p d = { .cookie = 1,
			      .count = 8,
			      .bytes = 8,
			      .buf = arena,
			      .ex = &none,
			      .sender = 0,
			      .receiver = 1,
			      .dtype = COLLC_UINT8,
			      .send = 1 };

	(void)state;
	pair_up();
	assert_int_equal(np2p_post(dm[0].p, &d), -EINVAL);
	pair_down();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ring_staged),
		cmocka_unit_test(test_copy_fails),
		cmocka_unit_test(test_mismatch),
		cmocka_unit_test(test_no_door),
	};

	arena = malloc(ARENA);
	if (!arena)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
