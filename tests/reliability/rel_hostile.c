/* SPDX-License-Identifier: MIT */
/*
 * A hostile client next to two honest ones.
 *
 * The hostile process speaks proto/wire.h itself: HELLO, the shared region
 * and the doorbell arrive by SCM_RIGHTS and are mapped; it allocates two
 * buffers and forms a 1-rank communicator of its own (so some of its
 * entries are valid and run). For COLLC_HOSTILE_SECONDS (default 8) it then
 * scribbles at random:
 *   - sq_tail far ahead, behind, wrapping; random SQE bytes;
 *   - valid-looking SQEs naming communicator and registration handles it does
 *     not own (the honest clients' handles have the same numbers: handles are
 *     per client), huge counts and offsets, bad roots, stale sequence numbers;
 *   - bad cq_head values; its header's sq_head, sq_flags, sq_dropped, cq_tail
 *     and the read-only fields overwritten; the doorbell bumped in a loop;
 *   - control garbage on its session and on a second raw connection: random
 *     bytes, bad headers, wrong lengths, oversized datagrams, too many fds,
 *     requests naming foreign handles, releases of buffers in use;
 *   - memory registrations that must be refused (memfd without sealing, a
 *     memfd sealed against new seals, a tmpfile, a pipe, a size past the end,
 *     two fds) and one that is accepted, after which shrinking the memfd must
 *     fail (collcd sealed it) and collectives on it still run.
 * Then it floods requests without reading a single reply.
 *
 * Meanwhile two honest processes run correct all-reduces on their own
 * communicator and check every result. Assertions: the honest pair sees
 * only correct results; collcd stays alive and keeps serving (a new
 * communicator works afterwards; it exits 0 on SIGTERM); `collcctl status
 * --json` shows the hostile client's bad_entries > 0 and totals.bad_entries
 * > 0; collcd's memory stays bounded (+64 MiB) through a flood of
 * COLLC_HOSTILE_FLOOD (200000) status requests whose replies are never read.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "proto/shm.h"
#include "proto/wire.h"
#include "rel.h"

struct shared {
	struct rel_steady steady;
	uint32_t hostile_ready, scribbled, may_exit;
	pid_t hostile_pid;
	uint64_t sqes_written, ctl_sent, refused_ok, accepted_ok, fresh_comms;
};

static struct shared *S;

/* The wire, by hand */

struct hreply {
	struct collc_msg_hdr h;
	int32_t status;
	uint8_t body[COLLC_MSG_MAX];
	size_t blen;
	int fds[4];
	int nfds;
};

static uint32_t next_id = 1;

/* Non-blocking: the flood sees -EAGAIN once collcd stops reading. */
static int hsend_raw(int fd, const void *buf, size_t len, const int *fds, int nfds)
{
	return h_send_fds(fd, buf, len, fds, nfds, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static int hsend(int fd, uint16_t type, const void *payload, uint32_t len, const int *fds, int nfds,
		 uint32_t *ret_id)
{
	uint8_t buf[COLLC_MSG_MAX];
	uint32_t id = next_id++;

	if (ret_id)
		*ret_id = id;
	return hsend_raw(fd, buf, h_raw_msg(buf, type, id, payload, len), fds, nfds);
}

/* One datagram within timeout_ms; its fds are closed unless rep keeps them. */
static int hrecv(int fd, struct hreply *rep, int timeout_ms)
{
	uint8_t buf[COLLC_MSG_MAX];
	ssize_t n = h_recv_fds(fd, buf, sizeof(buf), rep->fds, 4, &rep->nfds, timeout_ms);

	if (n <= 0)
		return n == 0 ? -ECONNRESET : (int)n;
	if ((size_t)n < sizeof(rep->h) + 8)
		return -EPROTO;
	memcpy(&rep->h, buf, sizeof(rep->h));
	memcpy(&rep->status, buf + sizeof(rep->h), 4);
	rep->blen = (size_t)n - sizeof(rep->h);
	memcpy(rep->body, buf + sizeof(rep->h), rep->blen);
	return 0;
}

static void close_fds(struct hreply *rep)
{
	for (int i = 0; i < rep->nfds; i++)
		close(rep->fds[i]);
	rep->nfds = 0;
}

/* Request and its reply (other replies in between are dropped). */
static int hrequest(int fd, uint16_t type, const void *payload, uint32_t len, const int *fds,
		    int nfds, struct hreply *rep)
{
	uint32_t id;
	int r = hsend(fd, type, payload, len, fds, nfds, &id);
	uint64_t deadline = h_now_ns() + 10000000000ull;

	if (r < 0)
		return r;
	while (h_now_ns() < deadline) {
		r = hrecv(fd, rep, 1000);
		if (r == -ETIMEDOUT)
			continue;
		if (r < 0)
			return r;
		if (rep->h.id == id && (rep->h.type & ~COLLC_MSG_REPLY) == type)
			return 0;
		close_fds(rep);
	}
	return -ETIMEDOUT;
}

static void drain(int fd)
{
	static struct hreply rep;

	while (hrecv(fd, &rep, 0) == 0)
		close_fds(&rep);
}

static int raw_connect(void)
{
	int fd = h_raw_connect();

	return fd < 0 ? -1 : fd;
}

/* The hostile client */

struct hostile {
	int fd, g; /* its session; a raw connection without hello */
	struct collc_shm_hdr *hdr;
	struct collc_sqe *sqes;
	struct collc_doorbell *db;
	uint32_t sq_entries, cq_entries;
	uint32_t tail;
	uint32_t comm; /* its own 1-rank communicator */
	uint64_t seq;
	uint32_t mr[3];
	uint64_t mr_size[3];
	uint64_t rng;
	int late; /* the last tenth: anything goes */
	uint64_t own_calls;
};

static int mem_alloc(struct hostile *H, uint64_t size, uint32_t *ret_mr)
{
	struct collc_msg_mem q = { .size = size, .device = -1 };
	struct collc_msg_mem_reply mr;
	static struct hreply rep;
	int r = hrequest(H->fd, COLLC_MSG_MEM_ALLOC, &q, sizeof(q), NULL, 0, &rep);

	if (r < 0)
		return r;
	if (rep.status < 0)
		return rep.status;
	memcpy(&mr, rep.body, sizeof(mr));
	close_fds(&rep);
	*ret_mr = mr.mr;
	return 0;
}

/* 0 / -errno as collcd answered a registration of fd (or of fds). */
static int mem_register(struct hostile *H, const int *fds, int nfds, uint64_t size,
			uint32_t *ret_mr)
{
	struct collc_msg_mem q = { .size = size, .device = -1 };
	struct collc_msg_mem_reply mr;
	static struct hreply rep;
	int r = hrequest(H->fd, COLLC_MSG_MEM_REGISTER, &q, sizeof(q), fds, nfds, &rep);

	if (r < 0)
		return r;
	close_fds(&rep);
	if (rep.status == 0 && ret_mr) {
		memcpy(&mr, rep.body, sizeof(mr));
		*ret_mr = mr.mr;
	}
	return rep.status;
}

static void bump_doorbell(struct hostile *H)
{
	__atomic_fetch_add(&H->db->seq, 1, __ATOMIC_SEQ_CST);
	syscall(SYS_futex, &H->db->seq, FUTEX_WAKE, 1, NULL, NULL, 0);
}

static void publish(struct hostile *H, uint32_t tail)
{
	H->tail = tail;
	__atomic_store_n(&H->hdr->sq_tail, tail, __ATOMIC_RELEASE);
	bump_doorbell(H);
}

static void random_bytes(uint64_t *rng, void *p, size_t n)
{
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = h_rand(rng);

		memcpy((char *)p + i, &v, n - i < 8 ? n - i : 8);
	}
}

static uint64_t pick(uint64_t *rng, const uint64_t *vals, size_t n)
{
	return vals[h_rand_below(rng, n)];
}

/* An entry whose fields look right but name things it does not own, or too much. */
static void plausible_sqe(struct hostile *H, struct collc_sqe *e)
{
	static const uint64_t comms[] = { 0, 1, 2, 3, 7, 100, 0xffffffffu };
	static const uint64_t counts[] = {
		0, 1, 1024, 1u << 20, 1ull << 32, 1ull << 61, UINT64_MAX
	};
	static const uint64_t offs[] = { 0,        8,          4096,           (1u << 20) - 8,
					 1u << 20, 1ull << 40, UINT64_MAX - 7, UINT64_MAX };
	uint64_t *rng = &H->rng;

	memset(e, 0, sizeof(*e));
	e->opcode = (uint8_t)(1 + h_rand_below(rng, COLLC_OP_MAX - 1));
	e->dtype = (uint8_t)h_rand_below(rng, COLLC_NUM_DTYPES);
	e->redop = (uint8_t)h_rand_below(rng, COLLC_NUM_REDOPS);
	e->comm = h_rand_below(rng, 3) ? H->comm : (uint32_t)pick(rng, comms, 7);
	/* Mostly the next sequence number of its own communicator: those get furthest. */
	e->seq = h_rand_below(rng, 4) ? H->seq : h_rand(rng) % 4;
	e->count = h_rand_below(rng, 2) ? h_rand_below(rng, 4096) : pick(rng, counts, 7);
	e->send_mr = (uint32_t)h_rand_below(rng, 12);
	e->recv_mr = (uint32_t)h_rand_below(rng, 12);
	if (h_rand_below(rng, 8) == 0)
		e->send_mr = 0xffffffffu;
	e->send_off = h_rand_below(rng, 2) ? h_rand_below(rng, 1u << 20) : pick(rng, offs, 8);
	e->recv_off = h_rand_below(rng, 2) ? h_rand_below(rng, 1u << 20) : pick(rng, offs, 8);
	e->user_data = h_rand(rng);
	e->root = (int32_t)h_rand_below(rng, 4) - 1;
}

static void submit_n(struct hostile *H, int n, int plausible)
{
	for (int i = 0; i < n; i++) {
		struct collc_sqe e;

		if (plausible) {
			plausible_sqe(H, &e);
			/* The ones on its own communicator with the right number advance it. */
			if (e.comm == H->comm && e.seq == H->seq)
				H->seq++;
		} else {
			random_bytes(&H->rng, &e, sizeof(e));
		}
		memcpy(&H->sqes[(H->tail + (uint32_t)i) & (H->sq_entries - 1)], &e, sizeof(e));
	}
	S->sqes_written += (uint64_t)n;
	publish(H, H->tail + (uint32_t)n);
}

static void control_garbage(struct hostile *H)
{
	uint8_t buf[COLLC_MSG_MAX + 64];
	uint64_t *rng = &H->rng;
	int which = (int)h_rand_below(rng, 14), fd = h_rand_below(rng, 2) ? H->fd : H->g;
	struct collc_msg_hdr h = { COLLC_WIRE_MAGIC, COLLC_WIRE_VERSION, 0, 0, next_id++ };
	size_t len = sizeof(h);

	switch (which) {
	case 0: /* random bytes */
		len = 1 + h_rand_below(rng, 512);
		random_bytes(rng, buf, len);
		hsend_raw(fd, buf, len, NULL, 0);
		break;
	case 1: /* a header that lies about the length */
		h.type = (uint16_t)(1 + h_rand_below(rng, COLLC_MSG_TYPE_MAX));
		if (h.type == COLLC_MSG_SET)
			h.type = COLLC_MSG_GET;
		h.length = (uint32_t)h_rand(rng);
		memcpy(buf, &h, sizeof(h));
		len = sizeof(h) + h_rand_below(rng, 200);
		hsend_raw(fd, buf, len, NULL, 0);
		break;
	case 2: /* oversized: truncated on receipt */
		len = COLLC_MSG_MAX + 32;
		memset(buf, 0x41, len);
		h.type = COLLC_MSG_GET;
		h.length = (uint32_t)(len - sizeof(h));
		memcpy(buf, &h, sizeof(h));
		hsend_raw(fd, buf, len, NULL, 0);
		break;
	case 3: { /* more fds than any request takes */
		int fds[5];

		for (int i = 0; i < 5; i++)
			fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
		hsend(fd, (uint16_t)(1 + h_rand_below(rng, COLLC_MSG_TYPE_MAX - 1)), NULL, 0, fds,
		      5, NULL);
		for (int i = 0; i < 5; i++)
			close(fds[i]);
		break;
	}
	case 4: { /* release handles it may or may not own, some in use */
		struct collc_msg_mem_release q = { (uint32_t)h_rand_below(rng, 8), 0 };

		hsend(fd, COLLC_MSG_MEM_RELEASE, &q, sizeof(q), NULL, 0, NULL);
		break;
	}
	case 5: { /* destroy or abort handles it does not hold (its own only at the very end) */
		struct collc_msg_comm_ref q = { (uint32_t)h_rand_below(rng, 6), 0 };

		if (q.comm == H->comm && !H->late)
			q.comm = H->comm + 1;
		hsend(fd, h_rand_below(rng, 2) ? COLLC_MSG_COMM_DESTROY : COLLC_MSG_COMM_ABORT, &q,
		      sizeof(q), NULL, 0, NULL);
		break;
	}
	case 6: { /* timeouts on foreign handles */
		struct collc_msg_comm_timeout q = { (uint32_t)h_rand_below(rng, 6) + 1,
						    (uint32_t)h_rand(rng) };

		if (q.comm == H->comm)
			q.comm = 0;
		hsend(fd, COLLC_MSG_COMM_TIMEOUT, &q, sizeof(q), NULL, 0, NULL);
		break;
	}
	case 7: { /* a second hello on its session (the raw connection stays client-less) */
		struct collc_msg_hello q = { 1, 0, { 0, 0 } };

		hsend(H->fd, COLLC_MSG_HELLO, &q, sizeof(q), NULL, 0, NULL);
		break;
	}
	case 8: { /* joins that never complete, with odd fields */
		struct collc_msg_comm_init q;

		random_bytes(rng, &q, sizeof(q));
		q.uid.magic = h_rand_below(rng, 4) ? COLLC_UID_MAGIC : (uint32_t)h_rand(rng);
		q.nranks = (uint32_t)h_rand_below(rng, 80);
		q.rank = (uint32_t)h_rand_below(rng, 80);
		q.flags = h_rand_below(rng, 2) ? 0 : (uint32_t)h_rand(rng);
		hsend(fd, COLLC_MSG_COMM_INIT, &q, sizeof(q), NULL, 0, NULL);
		break;
	}
	case 9: { /* get with odd keys */
		char key[63];

		random_bytes(rng, key, sizeof(key));
		hsend(fd, COLLC_MSG_GET, key, 1 + (uint32_t)h_rand_below(rng, 63), NULL, 0, NULL);
		break;
	}
	case 10: { /* status, both kinds */
		struct collc_msg_status_req q = { (uint32_t)h_rand(rng), (uint32_t)h_rand(rng) };

		hsend(fd, COLLC_MSG_STATUS, &q, sizeof(q), NULL, 0, NULL);
		break;
	}
	case 11:
		hsend(fd, COLLC_MSG_METRICS, NULL, 0, NULL, 0, NULL);
		break;
	case 12:
		hsend(fd, COLLC_MSG_SET_EVENTFD, NULL, 0, NULL, 0, NULL);
		break;
	default: { /* allocations of odd sizes */
		struct collc_msg_mem q = { h_rand_below(rng, 2) ? 0 : h_rand(rng),
					   -1,
					   (uint32_t)h_rand_below(rng, 2),
					   { 0 } };

		if (h_rand_below(rng, 2))
			q.device = (int32_t)h_rand(rng);
		hsend(fd, COLLC_MSG_MEM_ALLOC, &q, sizeof(q), NULL, 0, NULL);
		break;
	}
	}
	S->ctl_sent++;
	drain(H->fd);
	drain(H->g);
}

/* Registrations that must be refused, then one that is accepted and sealed. */
static int registrations(struct hostile *H)
{
	const uint64_t sz = 1u << 20;
	int failed = 0, fd, r, p[2], two[2];
	uint32_t mr = 0;

#define REFUSED(what, expr)                                                                        \
	do {                                                                                       \
		r = (expr);                                                                        \
		if (r == 0)                                                                        \
			failed |= h_fail("hostile: registration of %s was accepted", what);        \
		else                                                                               \
			S->refused_ok++;                                                           \
	} while (0)

	/* A memfd that cannot be sealed. */
	fd = memfd_create("hostile-nosealing", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)sz) < 0)
		return h_fail("memfd: %s", strerror(errno));
	REFUSED("a memfd without MFD_ALLOW_SEALING", mem_register(H, &fd, 1, sz, NULL));
	close(fd);
	/* A memfd sealed against further seals. */
	fd = memfd_create("hostile-sealseal", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)sz) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL) < 0)
		return h_fail("memfd: %s", strerror(errno));
	REFUSED("a memfd with F_SEAL_SEAL (shrinkable)", mem_register(H, &fd, 1, sz, NULL));
	close(fd);
	/* A plain file. */
	fd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd >= 0) {
		if (ftruncate(fd, (off_t)sz) == 0)
			REFUSED("an O_TMPFILE file", mem_register(H, &fd, 1, sz, NULL));
		close(fd);
	}
	/* A pipe. */
	if (pipe2(p, O_CLOEXEC) == 0) {
		REFUSED("a pipe", mem_register(H, &p[0], 1, 4096, NULL));
		close(p[0]);
		close(p[1]);
	}
	/* Larger than the file. */
	fd = memfd_create("hostile-short", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, 4096) < 0)
		return h_fail("memfd: %s", strerror(errno));
	REFUSED("a size past the end of the memfd", mem_register(H, &fd, 1, sz, NULL));
	REFUSED("size 0", mem_register(H, &fd, 1, 0, NULL));
	close(fd);
	/* Two fds. */
	two[0] = memfd_create("hostile-two-a", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	two[1] = memfd_create("hostile-two-b", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (two[0] >= 0 && two[1] >= 0 && ftruncate(two[0], 4096) == 0 &&
	    ftruncate(two[1], 4096) == 0)
		REFUSED("two fds at once", mem_register(H, two, 2, 4096, NULL));
	close(two[0]);
	close(two[1]);
	/* No fd at all. */
	REFUSED("no fd", mem_register(H, NULL, 0, 4096, NULL));

	/* A good one: then collcd has sealed it against shrinking. */
	fd = memfd_create("hostile-good", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)sz) < 0)
		return h_fail("memfd: %s", strerror(errno));
	r = mem_register(H, &fd, 1, sz, &mr);
	if (r < 0) {
		failed |= h_fail("hostile: a proper memfd registration was refused: %s",
				 strerror(-r));
	} else {
		S->accepted_ok++;
		H->mr[2] = mr;
		H->mr_size[2] = sz;
		if (ftruncate(fd, 4096) == 0)
			failed |= h_fail(
				"hostile: shrinking a registered memfd succeeded: collcd did not seal it against F_SEAL_SHRINK");
		else if (errno != EPERM)
			failed |= h_fail(
				"hostile: shrinking a registered memfd failed with %s, want EPERM",
				strerror(errno));
		/* Growing is harmless; sealing it further is its own business. */
		if (ftruncate(fd, (off_t)(2 * sz)) < 0 && errno != EPERM)
			failed |=
				h_fail("hostile: growing a registered memfd: %s", strerror(errno));
	}
	close(fd);
	return failed;
#undef REFUSED
}

/* A fresh 1-rank communicator of its own: its sequence numbers start at 0 again. */
static int own_comm(struct hostile *H)
{
	struct collc_msg_comm_init ci = { 0 };
	struct collc_msg_comm_reply cr;
	static struct hreply rep;
	int r;

	if (H->comm) {
		struct collc_msg_comm_ref q = { H->comm, 0 };

		hrequest(H->fd, COLLC_MSG_COMM_DESTROY, &q, sizeof(q), NULL, 0, &rep);
	}
	ci.uid.magic = COLLC_UID_MAGIC;
	ci.uid.version = 1;
	random_bytes(&H->rng, ci.uid.nonce, sizeof(ci.uid.nonce));
	ci.nranks = 1;
	ci.device = -1;
	r = hrequest(H->fd, COLLC_MSG_COMM_INIT, &ci, sizeof(ci), NULL, 0, &rep);
	if (r < 0 || rep.status < 0)
		return r < 0 ? r : rep.status;
	memcpy(&cr, rep.body, sizeof(cr));
	H->comm = cr.comm;
	H->seq = 0;
	return 0;
}

/*
 * Valid collectives on its own communicator, over the registered memfd too.
 * Its own chaos (tails moved back, entries overwritten before collcd took
 * them) loses track of the sequence number, so now and then it starts over
 * on a fresh communicator, with the ring drained and the CQ consumed.
 */
static void own_collectives(struct hostile *H, int n)
{
	if (H->own_calls++ % 16 == 0) {
		uint64_t deadline = h_now_ns() + 200000000ull;

		__atomic_store_n(&H->hdr->cq_head,
				 __atomic_load_n(&H->hdr->cq_tail, __ATOMIC_ACQUIRE),
				 __ATOMIC_RELEASE);
		while (__atomic_load_n(&H->hdr->sq_head, __ATOMIC_ACQUIRE) != H->tail &&
		       h_now_ns() < deadline)
			h_sleep_us(100);
		H->tail = __atomic_load_n(&H->hdr->sq_head, __ATOMIC_ACQUIRE);
		if (own_comm(H) == 0)
			S->fresh_comms++;
	}
	for (int i = 0; i < n; i++) {
		struct collc_sqe e = { 0 };
		int k = (int)h_rand_below(&H->rng, 3);

		if (!H->mr[k])
			k = 0;
		e.opcode = COLLC_OP_ALLREDUCE;
		e.dtype = COLLC_FLOAT32;
		e.redop = COLLC_SUM;
		e.comm = H->comm;
		e.seq = H->seq++;
		e.count = 1 + h_rand_below(&H->rng, 65536);
		e.send_mr = e.recv_mr = H->mr[k];
		e.send_off = 0;
		e.recv_off = H->mr_size[k] - e.count * 4;
		e.user_data = h_rand(&H->rng);
		memcpy(&H->sqes[H->tail & (H->sq_entries - 1)], &e, sizeof(e));
		publish(H, H->tail + 1);
	}
	S->sqes_written += (uint64_t)n;
}

static int hostile_main(void *arg)
{
	struct hostile Hs = { 0 }, *H = &Hs;
	struct collc_msg_hello q = { COLLC_API_VERSION, 0, { 0, 0 } };
	struct collc_msg_hello_reply hr;
	static struct hreply rep;
	uint64_t seconds = rel_env_u64("COLLC_HOSTILE_SECONDS", 8), t_end, n = 0;
	void *shm;
	int r;

	(void)arg;
	H->rng = h_seed ^ 0x4057113ull;
	H->fd = raw_connect();
	H->g = raw_connect();
	if (H->fd < 0 || H->g < 0)
		return h_fail("hostile: connect: %s", strerror(errno));
	r = hrequest(H->fd, COLLC_MSG_HELLO, &q, sizeof(q), NULL, 0, &rep);
	if (r < 0 || rep.status < 0 || rep.nfds != 2)
		return h_fail("hostile: hello: %d/%d, %d fds", r, rep.status, rep.nfds);
	memcpy(&hr, rep.body, sizeof(hr));
	shm = mmap(NULL, hr.shm_size, PROT_READ | PROT_WRITE, MAP_SHARED, rep.fds[0], 0);
	H->db = mmap(NULL, sizeof(*H->db), PROT_READ | PROT_WRITE, MAP_SHARED, rep.fds[1], 0);
	if (shm == MAP_FAILED || H->db == MAP_FAILED)
		return h_fail("hostile: mmap: %s", strerror(errno));
	/* The region is sealed: it cannot be shrunk under collcd either. */
	if (ftruncate(rep.fds[0], 4096) == 0)
		return h_fail("hostile: the shared region could be shrunk");
	close_fds(&rep);
	H->hdr = shm;
	H->sqes = (struct collc_sqe *)((char *)shm + hr.sq.entries);
	H->sq_entries = hr.sq.ring_entries;
	H->cq_entries = hr.cq.ring_entries;
	H->tail = H->hdr->sq_tail;

	if ((r = mem_alloc(H, 1u << 20, &H->mr[0])) < 0 ||
	    (r = mem_alloc(H, 1u << 20, &H->mr[1])) < 0)
		return h_fail("hostile: mem_alloc: %s", strerror(-r));
	H->mr_size[0] = H->mr_size[1] = 1u << 20;
	r = own_comm(H);
	if (r < 0)
		return h_fail("hostile: its own 1-rank communicator: %s", strerror(-r));
	if (registrations(H))
		return 1;
	h_store(&S->hostile_ready, 1);

	t_end = h_now_ns() + seconds * 1000000000ull;
	while (h_now_ns() < t_end) {
		uint32_t head = __atomic_load_n(&H->hdr->sq_head, __ATOMIC_ACQUIRE);
		int late = H->late = h_now_ns() > t_end - seconds * 100000000ull;
		uint32_t v;

		switch (h_rand_below(&H->rng, 16)) {
		case 0: /* far ahead */
			publish(H, head + 1025 + (uint32_t)h_rand_below(&H->rng, 1u << 30));
			break;
		case 1: /* behind the head */
			publish(H, head - 1 - (uint32_t)h_rand_below(&H->rng, 2000));
			break;
		case 2: /* wrapping */
			publish(H, head + UINT32_MAX - (uint32_t)h_rand_below(&H->rng, 4));
			break;
		case 3:
		case 4:
			H->tail = head;
			submit_n(H, 1 + (int)h_rand_below(&H->rng, 64), 0);
			break;
		case 5:
		case 6:
		case 7:
			H->tail = head;
			submit_n(H, 1 + (int)h_rand_below(&H->rng, 64), 1);
			break;
		case 8: /* bad cq_head */
			v = (uint32_t)h_rand(&H->rng);
			__atomic_store_n(&H->hdr->cq_head, v, __ATOMIC_RELEASE);
			break;
		case 9: /* its header's collcd-written and read-only fields */
			v = (uint32_t)h_rand(&H->rng);
			switch (h_rand_below(&H->rng, late ? 8 : 7)) {
			case 0:
				H->hdr->sq_head = v;
				break;
			case 1:
				H->hdr->sq_flags = v;
				break;
			case 2:
				H->hdr->sq_dropped = v;
				break;
			case 3:
				H->hdr->sq_entries = v;
				break;
			case 4:
				H->hdr->cq_entries = v;
				break;
			case 5:
				H->hdr->sqes_off = v;
				break;
			case 6:
				H->hdr->cq_flags = v;
				break;
			/*
			 * Late only: with its cq_tail lost the client cannot tell collcd
			 * which completions it consumed, and gets no more service.
			 */
			default:
				H->hdr->cq_tail = v;
				break;
			}
			break;
		case 10: /* the doorbell, in a loop, and its spare words */
			for (int i = 0; i < 1000; i++)
				bump_doorbell(H);
			H->db->reserved[h_rand_below(&H->rng, 1023)] = (uint32_t)h_rand(&H->rng);
			break;
		case 11:
		case 12:
			control_garbage(H);
			break;
		case 13: /* consume the completions properly now and then: keeps collcd taking */
			__atomic_store_n(&H->hdr->cq_head,
					 __atomic_load_n(&H->hdr->cq_tail, __ATOMIC_ACQUIRE),
					 __ATOMIC_RELEASE);
			break;
		default:
			H->tail = head;
			own_collectives(H, 1 + (int)h_rand_below(&H->rng, 8));
			break;
		}
		if (++n % 64 == 0)
			h_sleep_us(200); /* let the honest clients run too */
	}
	h_store(&S->scribbled, 1);

	/* Stay connected until the parent has read status. */
	h_wait_at_least(&S->may_exit, 1, 300000);
	return 0;
}

static int flood(int fd, uint64_t n)
{
	struct collc_msg_status_req q = { COLLC_STATUS_JSON, 0 };
	uint64_t sent = 0;

	for (uint64_t i = 0; i < n; i++) {
		int r = hsend(fd, COLLC_MSG_STATUS, &q, sizeof(q), NULL, 0, NULL);

		if (r == -EAGAIN) {
			struct pollfd p = { .fd = fd, .events = POLLOUT };

			/* collcd stopped reading us: that is a fine answer too. */
			if (poll(&p, 1, 2000) <= 0)
				break;
			i--;
			continue;
		}
		if (r < 0)
			break;
		sent++;
	}
	return (int)(sent > INT32_MAX ? INT32_MAX : sent);
}

static int steady_rank(void *arg)
{
	return rel_steady_rank(&S->steady, (int)(intptr_t)arg);
}

static struct rel_steady *AGAIN;

static int after_rank(void *arg)
{
	return rel_steady_rank(AGAIN, (int)(intptr_t)arg);
}

int main(int argc, char **argv)
{
	uint64_t flood_n = rel_env_u64("COLLC_HOSTILE_FLOOD", 200000);
	pid_t steady[2], hostile;
	int failed = 0;
	struct json *st;
	long rss0, rss1;

	rel_init("rel_hostile", argc, argv, 200);
	h_daemon_start(NULL);
	S = h_shared(sizeof(*S));
	h_unique_ids(&S->steady.uid, 1);
	S->steady.pause_us = 100;
	steady[0] = h_fork(steady_rank, (void *)0);
	steady[1] = h_fork(steady_rank, (void *)1);
	if (h_wait_at_least(&S->steady.joined, 2, 20000) < 0)
		h_die("the honest pair did not form its communicator");
	hostile = h_fork(hostile_main, NULL);
	S->hostile_pid = hostile;
	if (h_wait_at_least(&S->hostile_ready, 1, 20000) < 0) {
		failed |= h_reap_one_ok(hostile, 1000, "hostile client");
		h_die("the hostile client did not get going");
	}
	h_log("hostile client pid %d: %" PRIu64 " refused registrations, %" PRIu64
	      " accepted (and sealed)",
	      (int)hostile, S->refused_ok, S->accepted_ok);
	while (!h_load(&S->scribbled)) {
		if (!h_daemon_alive()) {
			failed = h_fail("collcd died while the hostile client scribbled");
			break;
		}
		h_sleep_us(100000);
	}
	h_log("hostile client wrote %" PRIu64 " SQEs, sent %" PRIu64
	      " control messages, formed %" PRIu64 " communicators of its own",
	      S->sqes_written, S->ctl_sent, S->fresh_comms);

	/* While the hostile client is still connected: its bad entries are counted. */
	st = rel_status();
	if (!st) {
		failed = 1;
	} else {
		const struct json *c = rel_status_client(st, hostile);
		double bad = json_num(json_get(c, "bad_entries"), -1);
		double tot = json_num(json_get(json_get(st, "totals"), "bad_entries"), -1);

		h_log("status: hostile client: submitted %.0f, errors %.0f, sq_depth %.0f, cq_depth %.0f",
		      json_num(json_get(c, "submitted"), -1), json_num(json_get(c, "errors"), -1),
		      json_num(json_get(c, "sq_depth"), -1), json_num(json_get(c, "cq_depth"), -1));

		if (!c)
			failed |= h_fail("status --json lists no client with the hostile pid %d",
					 (int)hostile);
		if (bad <= 0)
			failed |= h_fail(
				"status --json: the hostile client's bad_entries is %.0f, want > 0",
				bad);
		if (tot <= 0)
			failed |=
				h_fail("status --json: totals.bad_entries is %.0f, want > 0", tot);
		h_log("status: hostile client bad_entries %.0f, totals.bad_entries %.0f", bad, tot);
		json_free(st);
	}

	/* A flood of requests whose replies nobody reads. */
	{
		int fd = raw_connect();
		int sent;

		rss0 = rel_daemon_rss_kb();
		sent = fd >= 0 ? flood(fd, flood_n) : -1;
		h_sleep_us(500000);
		rss1 = rel_daemon_rss_kb();
		h_log("reply flood: %d status requests sent, none read: collcd VmRSS %ld -> %ld KiB",
		      sent, rss0, rss1);
		if (rss1 - rss0 > 64 * 1024)
			failed |= h_fail(
				"collcd buffered %ld MiB of unread replies for one client (want a bound)",
				(rss1 - rss0) / 1024);
		if (fd >= 0)
			close(fd);
	}
	h_store(&S->may_exit, 1);
	failed |= h_reap_one_ok(hostile, 30000, "hostile client");

	rel_steady_stop(&S->steady);
	failed |= h_reap_all_ok(steady, 2, 60000, "honest rank");
	h_log("honest pair: %u + %u all-reduces, %.1f MiB, %u errors (want 0)",
	      S->steady.progress[0], S->steady.progress[1],
	      (double)(S->steady.bytes[0] + S->steady.bytes[1]) / 1048576.0,
	      S->steady.errors[0] + S->steady.errors[1]);
	if (S->steady.progress[0] == 0)
		failed |= h_fail("the honest pair made no progress");
	if (!h_daemon_alive())
		failed |= h_fail("collcd died");

	/* collcd still serves: a new communicator, correct results. */
	if (!failed) {
		pid_t p[2];

		AGAIN = h_shared(sizeof(*AGAIN));
		h_unique_ids(&AGAIN->uid, 1);
		AGAIN->stop_at = 50;
		p[0] = h_fork(after_rank, (void *)0);
		p[1] = h_fork(after_rank, (void *)1);
		failed |= h_reap_all_ok(p, 2, 60000, "new communicator rank");
		if (!failed)
			h_log("afterwards: a new communicator ran 50 correct all-reduces");
	}
	return h_finish(failed);
}
