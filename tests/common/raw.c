/* SPDX-License-Identifier: MIT */
/* A raw client of collcd (raw.h): the wire and shared-memory protocols without libcollc. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "harness.h"
#include "raw.h"

static uint32_t next_id = 1;

int raw_request(int fd, uint16_t type, const void *payload, size_t len, void *body, size_t blen,
		int *fds, int *nfds)
{
	char buf[COLLC_MSG_MAX];
	uint32_t id = next_id++;
	struct collc_msg_status st;
	ssize_t n;

	if (send(fd, buf, h_raw_msg(buf, type, id, payload, len), MSG_NOSIGNAL) < 0)
		return -errno;
	for (;;) {
		struct collc_msg_hdr rh;

		n = h_recv_fds(fd, buf, sizeof(buf), fds, 4, nfds, 10000);
		if (n == -ETIMEDOUT)
			return -ETIMEDOUT;
		if (n <= 0)
			return -ECONNRESET;
		memcpy(&rh, buf, sizeof(rh));
		if (rh.id == id)
			break;
	}
	if ((size_t)n < sizeof(struct collc_msg_hdr) + sizeof(st))
		return -EPROTO;
	memcpy(&st, buf + sizeof(struct collc_msg_hdr), sizeof(st));
	if (body) {
		size_t have = (size_t)n - sizeof(struct collc_msg_hdr);

		memset(body, 0, blen);
		memcpy(body, buf + sizeof(struct collc_msg_hdr), have < blen ? have : blen);
	}
	return st.status;
}

int raw_open(struct raw *c)
{
	struct collc_msg_hello hello = { .api_version = COLLC_API_VERSION };
	struct collc_msg_hello_reply hr;
	int fds[4], nfds = 0, r;

	memset(c, 0, sizeof(*c));
	c->fd = h_raw_connect();
	if (c->fd < 0)
		return h_fail("raw connect: %s", strerror(-c->fd));
	r = raw_request(c->fd, COLLC_MSG_HELLO, &hello, sizeof(hello), &hr, sizeof(hr), fds, &nfds);
	if (r < 0 || nfds != 2)
		return h_fail("raw hello: %d (%s), %d fds", r, collc_strerror(r), nfds);
	c->shm_size = hr.shm_size;
	c->shm = mmap(NULL, hr.shm_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
	c->bell = mmap(NULL, sizeof(*c->bell), PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
	close(fds[0]);
	close(fds[1]);
	if (c->shm == MAP_FAILED || c->bell == MAP_FAILED)
		return h_fail("mmap of the shared region: %s", strerror(errno));
	c->hdr = c->shm;
	c->features = hr.features;
	c->sqes = (struct collc_sqe *)((char *)c->shm + hr.sq.entries);
	c->cqes = (struct collc_cqe *)((char *)c->shm + hr.cq.entries);
	c->args = (struct collc_sqe_args *)((char *)c->shm + c->hdr->args_off);
	if ((hr.features & COLLC_FEAT_GATES) && c->hdr->gates &&
	    (uint64_t)c->hdr->gates_off + (uint64_t)c->hdr->gates * sizeof(struct collc_gate) <=
		    hr.shm_size) {
		c->gates = (struct collc_gate *)((char *)c->shm + c->hdr->gates_off);
		c->ngates = c->hdr->gates;
	}
	if ((hr.features & COLLC_FEAT_DONES) && c->hdr->dones == COLLC_DONES &&
	    (uint64_t)c->hdr->dones_off + COLLC_DONES * sizeof(uint32_t) <= hr.shm_size)
		c->dones = (uint32_t *)((char *)c->shm + c->hdr->dones_off);
	c->sq_entries = hr.sq.ring_entries;
	c->cq_entries = hr.cq.ring_entries;
	c->sq_tail = __atomic_load_n(&c->hdr->sq_tail, __ATOMIC_ACQUIRE);
	c->cq_head = __atomic_load_n(&c->hdr->cq_head, __ATOMIC_ACQUIRE);
	memcpy(c->node_id, hr.node_id, sizeof(c->node_id));
	return 0;
}

void raw_close(struct raw *c)
{
	if (c->shm && c->shm != MAP_FAILED)
		munmap(c->shm, c->shm_size);
	if (c->bell && c->bell != MAP_FAILED)
		munmap(c->bell, sizeof(*c->bell));
	if (c->fd >= 0)
		close(c->fd);
	memset(c, 0, sizeof(*c));
	c->fd = -1;
}

int raw_comm_init(struct raw *c, const struct collc_unique_id *uid, uint32_t nranks, uint32_t rank,
		  uint32_t *ret_comm)
{
	struct collc_msg_comm_init ci = { .nranks = nranks, .rank = rank, .device = -1 };
	struct collc_msg_comm_reply cr;
	int r;

	memcpy(&ci.uid, uid->bytes, sizeof(ci.uid));
	r = raw_request(c->fd, COLLC_MSG_COMM_INIT, &ci, sizeof(ci), &cr, sizeof(cr), NULL, NULL);
	if (r == 0)
		*ret_comm = cr.comm;
	return r;
}

int raw_comm_ref(struct raw *c, uint16_t type, uint32_t comm)
{
	struct collc_msg_comm_ref ref = { .comm = comm };

	return raw_request(c->fd, type, &ref, sizeof(ref), NULL, 0, NULL, NULL);
}

int raw_comm_timeout(struct raw *c, uint32_t comm, uint32_t timeout_ms)
{
	struct collc_msg_comm_timeout t = { .comm = comm, .timeout_ms = timeout_ms };

	return raw_request(c->fd, COLLC_MSG_COMM_TIMEOUT, &t, sizeof(t), NULL, 0, NULL, NULL);
}

int raw_mem_alloc(struct raw *c, size_t size, uint32_t *ret_mr, void **ret_ptr)
{
	struct collc_msg_mem mem = { .size = size, .device = -1 };
	struct collc_msg_mem_reply mr;
	int fds[4], nfds = 0, r;
	void *p;

	r = raw_request(c->fd, COLLC_MSG_MEM_ALLOC, &mem, sizeof(mem), &mr, sizeof(mr), fds, &nfds);
	if (r < 0)
		return r;
	if (nfds != 1)
		return -EPROTO;
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
	close(fds[0]);
	if (p == MAP_FAILED)
		return -errno;
	*ret_mr = mr.mr;
	*ret_ptr = p;
	return 0;
}

void raw_ring(struct raw *c)
{
	__atomic_add_fetch(&c->bell->seq, 1, __ATOMIC_SEQ_CST);
	syscall(SYS_futex, &c->bell->seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void raw_publish(struct raw *c, const struct collc_sqe *e)
{
	memcpy(&c->sqes[c->sq_tail & (c->sq_entries - 1)], e, sizeof(*e));
	/* A1 as libcollc: the entry (and its arguments) before the tail. */
	__atomic_store_n(&c->hdr->sq_tail, ++c->sq_tail, __ATOMIC_RELEASE);
	raw_ring(c);
}

void raw_publish_args(struct raw *c, const struct collc_sqe *e, const struct collc_sqe_args *a)
{
	memcpy(&c->args[c->sq_tail & (c->sq_entries - 1)], a, sizeof(*a));
	raw_publish(c, e);
}

int raw_completions(struct raw *c, const uint64_t *uds, int *res, uint32_t n, int timeout_ms)
{
	uint64_t t0 = h_now_ns();
	uint32_t left = n;

	for (uint32_t i = 0; i < n; i++)
		res[i] = 1;
	for (;;) {
		uint32_t tail = __atomic_load_n(&c->hdr->cq_tail, __ATOMIC_ACQUIRE);

		while (c->cq_head != tail) {
			struct collc_cqe e = c->cqes[c->cq_head & (c->cq_entries - 1)];

			__atomic_store_n(&c->hdr->cq_head, ++c->cq_head, __ATOMIC_RELEASE);
			for (uint32_t i = 0; i < n; i++)
				if (e.user_data == uds[i] && res[i] == 1) {
					res[i] = e.res;
					left--;
					break;
				}
			if (!left)
				return 0;
		}
		if (h_now_ns() - t0 > (uint64_t)timeout_ms * 1000000ull)
			return 1;
		usleep(100);
	}
}

int raw_completion(struct raw *c, uint64_t user_data, int timeout_ms)
{
	int res;

	raw_completions(c, &user_data, &res, 1, timeout_ms);
	return res;
}

uint32_t raw_cq_pending(struct raw *c)
{
	return __atomic_load_n(&c->hdr->cq_tail, __ATOMIC_ACQUIRE) - c->cq_head;
}

void raw_reap_all(struct raw *c)
{
	uint32_t tail = __atomic_load_n(&c->hdr->cq_tail, __ATOMIC_ACQUIRE);

	c->cq_head = tail;
	__atomic_store_n(&c->hdr->cq_head, tail, __ATOMIC_RELEASE);
}

void raw_gate_go(struct raw *c, uint32_t gate, uint32_t value)
{
	/* G1's other side: what the stream did before (the inputs) is visible first. */
	__atomic_store_n(&c->gates[gate].go, value, __ATOMIC_RELEASE);
}

uint32_t raw_gate_done(struct raw *c, uint32_t gate)
{
	/* G2's other side: res and the results are visible once done is. */
	return __atomic_load_n(&c->gates[gate].done, __ATOMIC_ACQUIRE);
}

uint32_t raw_done_word(struct raw *c, uint64_t user_data)
{
	return __atomic_load_n(&c->dones[user_data % COLLC_DONES], __ATOMIC_ACQUIRE);
}

int32_t raw_gate_res(struct raw *c, uint32_t gate)
{
	return __atomic_load_n(&c->gates[gate].res, __ATOMIC_RELAXED);
}

int raw_gate_wait(struct raw *c, uint32_t gate, uint32_t value, int timeout_ms)
{
	uint64_t t0 = h_now_ns();

	while (raw_gate_done(c, gate) != value) {
		if (h_now_ns() - t0 > (uint64_t)timeout_ms * 1000000ull)
			return -ETIMEDOUT;
		usleep(50);
	}
	return 0;
}
