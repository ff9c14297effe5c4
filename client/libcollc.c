/* SPDX-License-Identifier: MIT */
/*
 * libcollc: connect to collcd, join communicators, register memory, submit
 * collectives through the shared submission ring and reap the completion ring.
 *
 * Two locks per context: ctl_lock guards the control socket's requests (replies are
 * matched by id, so a blocking comm_init does not hold up other requests);
 * ring_lock guards the SQ producer, the CQ consumer and the request table.
 * Nothing sleeps holding ring_lock.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/ctlsock.h"
#include "client/gpu.h"
#include "common/atomics.h"
#include "common/futex.h"
#include "include/collc.h"
#include "proto/shm.h"
#include "proto/wire.h"
#include "proto/work.h"

#define WAIT_SPIN_NS  30000ull    /* collc_wait spins this long before it sleeps (spare cores) */
#define LIVENESS_NS   20000000ull /* a sleeping waiter checks the socket this often */

enum { REG_ALLOC, REG_REGISTER, REG_DEV_ALLOC, REG_DEV_REGISTER };

struct reg {
	uintptr_t start;   /* the user's view: [start, start + len) */
	size_t len;
	uint32_t mr;
	int kind;
	int fd;            /* REG_REGISTER: the memfd now backing the pages */
	uintptr_t map;     /* page-aligned mapping */
	size_t maplen;
	uint64_t buf_id;   /* REG_DEV_REGISTER: the allocation's driver id (collc__gpu_buffer_id) */
};

/*
 * Pages of private memory re-backed by a memfd at registration, [a, b). They
 * stay so after deregistration; registrations inside them reuse the memfd.
 */
struct backing {
	struct backing *next;
	uintptr_t a, b;
	int fd;
};

struct req_slot {
	uint64_t req;      /* 0: empty, UINT64_MAX: deleted */
	int32_t res;
	uint8_t done;
};

/* A control request waiting for its reply. */
struct pending_req {
	struct pending_req *next;
	uint32_t id;
	uint16_t type;
	int done;
	struct ctl_reply rep;
};

struct collc_ctx {
	int fd;
	pthread_mutex_t ctl_lock;
	pthread_cond_t ctl_cond;  /* a reply was read, or the reader left */
	int reader;               /* some thread is reading the socket */
	struct pending_req *pending;
	pthread_mutex_t ring_lock;
	uint32_t next_id;
	void *shm;
	size_t shm_size;
	struct collc_shm_hdr *hdr;
	struct collc_sqe *sqes;
	struct collc_cqe *cqes;
	uint32_t sq_entries, cq_entries;
	uint32_t sq_tail;   /* private copy; published to hdr->sq_tail */
	uint32_t cq_head;   /* private copy; published to hdr->cq_head */
	struct collc_doorbell *doorbell;
	uint8_t node_id[16];
	uint32_t backend;
	int event_fd;
	uint64_t next_req;
	struct req_slot *reqs;
	size_t req_cap, req_used; /* used counts deleted slots too */
	struct reg *regs;
	size_t nregs;
	pthread_mutex_t mem_lock;   /* serializes host registrations (they remap pages) */
	struct backing *backings;
	uint32_t waiters;   /* threads asleep on cq_tail */
	uint64_t alive_checked_ns; /* last look at the socket from submit */
	int broken;         /* the connection to collcd is gone */
};

struct collc_comm {
	struct collc_ctx *ctx;
	uint32_t handle;
	uint64_t comm_id;
	int nranks, rank, device;
	uint64_t next_seq;
};

/* Errors */

const char *collc_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case -EINVAL:
		return "invalid argument";
	case -EAGAIN:
		return "not complete yet";
	case -EPIPE:
		return "a rank of the communicator left or died";
	case -ECANCELED:
		return "the communicator was aborted";
	case -ETIMEDOUT:
		return "the collective timed out waiting for a rank";
	case -ECONNRESET:
		return "the connection to collcd was lost";
	case -ENOTCONN:
		return "not connected to collcd";
	case -ENOENT:
		return "collcd socket not found";
	case -ECONNREFUSED:
		return "collcd is not running";
	case -ENOSYS:
		return "not implemented";
	case -ENOMEM:
		return "out of memory";
	case -ENODEV:
		return "device not served by this collcd";
	case -EBADF:
		return "the communicator was destroyed";
	case -EEXIST:
		return "memory already registered";
	case -EBUSY:
		return "too many requests in progress";
	case -EOVERFLOW:
		return "size overflows";
	case -EPROTO:
		return "protocol error talking to collcd";
	case -EPERM:
		return "permission denied";
	case -EDQUOT:
		return "per-client quota exceeded (communicators, registrations or bytes)";
	}
	if (err < 0 && strerrordesc_np(-err))
		return strerrordesc_np(-err);
	return "unknown error";
}

size_t collc_dtype_size(collc_dtype dtype)
{
	static const size_t sz[COLLC_NUM_DTYPES] = { 1, 1, 4, 4, 8, 8, 2, 2, 4, 8 };

	return (unsigned)dtype < COLLC_NUM_DTYPES ? sz[dtype] : 0;
}

/* Control requests */

/*
 * One request on the control socket. Several threads may wait at once (a
 * collc_comm_init blocks until every rank joined): whichever waiter finds no
 * reader reads the next reply and hands it to the request with that id.
 */
static int request(struct collc_ctx *ctx, uint16_t type, const void *payload, size_t len, int send_fd,
		   struct ctl_reply *rep)
{
	struct pending_req me = { .done = 0 };
	int r;

	pthread_mutex_lock(&ctx->ctl_lock);
	if (ctx->broken) {
		pthread_mutex_unlock(&ctx->ctl_lock);
		return -ECONNRESET;
	}
	me.id = ++ctx->next_id;
	me.type = type;
	me.next = ctx->pending;
	ctx->pending = &me;
	r = ctl_send(ctx->fd, me.id, type, payload, len, send_fd);
	if (r < 0)
		goto out_broken;
	while (!me.done && !ctx->broken) {
		struct collc_msg_hdr h;
		struct ctl_reply got;
		int more;

		if (ctx->reader) {
			pthread_cond_wait(&ctx->ctl_cond, &ctx->ctl_lock);
			continue;
		}
		ctx->reader = 1;
		pthread_mutex_unlock(&ctx->ctl_lock);
		r = ctl_recv(ctx->fd, -1, &h, &more, &got);
		pthread_mutex_lock(&ctx->ctl_lock);
		ctx->reader = 0;
		pthread_cond_broadcast(&ctx->ctl_cond);
		if (r < 0)
			goto out_broken;
		for (struct pending_req *p = ctx->pending; p; p = p->next)
			if (p->id == h.id && !p->done && h.type == (p->type | COLLC_MSG_REPLY)) {
				p->rep = got;
				p->done = 1;
				got.data = NULL;
				got.nfds = 0;
				break;
			}
		ctl_reply_free(&got);
	}
	r = me.done ? 0 : -ECONNRESET;
	if (me.done)
		*rep = me.rep;
	goto out;

out_broken:
	store_relaxed(&ctx->broken, 1);
	pthread_cond_broadcast(&ctx->ctl_cond);
	r = -ECONNRESET;
out:
	for (struct pending_req **pp = &ctx->pending; *pp; pp = &(*pp)->next)
		if (*pp == &me) {
			*pp = me.next;
			break;
		}
	pthread_mutex_unlock(&ctx->ctl_lock);
	return r;
}

/* Copies a struct reply (whose head is a collc_msg_status) out of rep. */
static void reply_body(const struct ctl_reply *rep, void *out, size_t size)
{
	size_t st = sizeof(struct collc_msg_status), n = rep->len;

	memset(out, 0, size);
	if (n > size - st)
		n = size - st;
	memcpy((char *)out + st, rep->data, n);
}

/* Connection */

int collc_connect(const char *socket_path, struct collc_ctx **ret_ctx)
{
	struct collc_msg_hello hello = { .api_version = COLLC_API_VERSION };
	struct collc_msg_hello_reply hr;
	struct collc_ctx *ctx;
	struct ctl_reply rep;
	int r;

	if (!ret_ctx)
		return -EINVAL;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	ctx->event_fd = -1;
	pthread_mutex_init(&ctx->ctl_lock, NULL);
	pthread_cond_init(&ctx->ctl_cond, NULL);
	pthread_mutex_init(&ctx->mem_lock, NULL);
	pthread_mutex_init(&ctx->ring_lock, NULL);
	r = ctl_connect(ctl_socket_path(socket_path), &ctx->fd);
	if (r < 0)
		goto err_free;
	r = request(ctx, COLLC_MSG_HELLO, &hello, sizeof(hello), -1, &rep);
	if (r < 0)
		goto err_close;
	r = rep.status;
	if (r == 0 && rep.nfds != 2)
		r = -EPROTO;
	if (r < 0)
		goto err_rep;
	reply_body(&rep, &hr, sizeof(hr));
	if (hr.shm_size < COLLC_SHM_HDR_BYTES || hr.sq.ring_entries == 0 ||
	    (hr.sq.ring_entries & (hr.sq.ring_entries - 1)) || hr.cq.ring_entries == 0 ||
	    (hr.cq.ring_entries & (hr.cq.ring_entries - 1)) ||
	    hr.sq.entries + (uint64_t)hr.sq.ring_entries * sizeof(struct collc_sqe) > hr.shm_size ||
	    hr.cq.entries + (uint64_t)hr.cq.ring_entries * sizeof(struct collc_cqe) > hr.shm_size) {
		r = -EPROTO;
		goto err_rep;
	}
	ctx->shm = mmap(NULL, hr.shm_size, PROT_READ | PROT_WRITE, MAP_SHARED, rep.fds[0], 0);
	if (ctx->shm == MAP_FAILED) {
		r = -errno;
		goto err_rep;
	}
	ctx->doorbell = mmap(NULL, sizeof(*ctx->doorbell), PROT_READ | PROT_WRITE, MAP_SHARED,
			     rep.fds[1], 0);
	if (ctx->doorbell == MAP_FAILED) {
		r = -errno;
		goto err_unmap;
	}
	ctx->shm_size = hr.shm_size;
	ctx->hdr = ctx->shm;
	ctx->sqes = (struct collc_sqe *)((char *)ctx->shm + hr.sq.entries);
	ctx->cqes = (struct collc_cqe *)((char *)ctx->shm + hr.cq.entries);
	ctx->sq_entries = hr.sq.ring_entries;
	ctx->cq_entries = hr.cq.ring_entries;
	ctx->sq_tail = load_relaxed(&ctx->hdr->sq_tail);
	ctx->cq_head = load_relaxed(&ctx->hdr->cq_head);
	ctx->backend = hr.backend;
	memcpy(ctx->node_id, hr.node_id, sizeof(ctx->node_id));
	ctl_reply_free(&rep);
	*ret_ctx = ctx;
	return 0;

err_unmap:
	munmap(ctx->shm, hr.shm_size);
err_rep:
	ctl_reply_free(&rep);
err_close:
	close(ctx->fd);
err_free:
	free(ctx);
	return r;
}

void collc_disconnect(struct collc_ctx *ctx)
{
	if (!ctx)
		return;
	close(ctx->fd);
	for (size_t i = 0; i < ctx->nregs; i++) {
		struct reg *g = &ctx->regs[i];

		if (g->kind == REG_ALLOC)
			munmap((void *)g->map, g->maplen);
		else if (g->kind == REG_DEV_ALLOC)
			collc__gpu_unmap(g->map, g->maplen);
		else if (g->fd >= 0)
			close(g->fd); /* the pages stay mapped: they are the user's memory */
	}
	free(ctx->regs);
	if (ctx->event_fd >= 0)
		close(ctx->event_fd);
	munmap(ctx->doorbell, sizeof(*ctx->doorbell));
	munmap(ctx->shm, ctx->shm_size);
	free(ctx->reqs);
	pthread_mutex_destroy(&ctx->ctl_lock);
	pthread_cond_destroy(&ctx->ctl_cond);
	pthread_mutex_destroy(&ctx->mem_lock);
	while (ctx->backings) {
		struct backing *k = ctx->backings;

		ctx->backings = k->next;
		close(k->fd); /* the pages stay mapped: they are the user's memory */
		free(k);
	}
	pthread_mutex_destroy(&ctx->ring_lock);
	free(ctx);
}

int collc_get_unique_id(struct collc_ctx *ctx, struct collc_unique_id *ret_id)
{
	struct collc_uid uid = { .magic = COLLC_UID_MAGIC, .version = 1 };

	if (!ctx || !ret_id)
		return -EINVAL;
	memcpy(uid.node_id, ctx->node_id, sizeof(uid.node_id));
	if (getrandom(uid.nonce, sizeof(uid.nonce), 0) != sizeof(uid.nonce))
		return -errno ? -errno : -EIO;
	memcpy(ret_id->bytes, &uid, sizeof(uid));
	return 0;
}

/* Communicators */

int collc_comm_init(struct collc_ctx *ctx, const struct collc_unique_id *id, int nranks, int rank,
		    int device, struct collc_comm **ret_comm)
{
	struct collc_msg_comm_init q = { 0 };
	struct collc_msg_comm_reply cr;
	struct collc_comm *comm;
	struct ctl_reply rep;
	int r;

	if (!ctx || !id || !ret_comm || nranks < 1 || nranks > (int)COLLC_MAX_RANKS || rank < 0 ||
	    rank >= nranks || device < -1)
		return -EINVAL;
	memcpy(&q.uid, id->bytes, sizeof(q.uid));
	if (q.uid.magic != COLLC_UID_MAGIC)
		return -EINVAL;
	if (device >= 0 && ctx->backend != COLLC_BACKEND_CUDA)
		return -ENODEV;
	q.nranks = (uint32_t)nranks;
	q.rank = (uint32_t)rank;
	q.device = device;
	/* collcd sees other ordinals (CUDA_VISIBLE_DEVICES): it places ranks by UUID. */
	if (device >= 0 && collc__gpu_uuid(device, q.device_uuid) < 0)
		return -ENODEV;
	comm = calloc(1, sizeof(*comm));
	if (!comm)
		return -ENOMEM;
	r = request(ctx, COLLC_MSG_COMM_INIT, &q, sizeof(q), -1, &rep);
	if (r == 0) {
		r = rep.status;
		reply_body(&rep, &cr, sizeof(cr));
		ctl_reply_free(&rep);
	}
	if (r < 0) {
		free(comm);
		return r;
	}
	comm->ctx = ctx;
	comm->handle = cr.comm;
	comm->comm_id = cr.comm_id;
	comm->nranks = nranks;
	comm->rank = rank;
	comm->device = device;
	*ret_comm = comm;
	return 0;
}

static int comm_ref(struct collc_comm *comm, uint16_t type)
{
	struct collc_msg_comm_ref q = { .comm = comm->handle };
	struct ctl_reply rep;
	int r = request(comm->ctx, type, &q, sizeof(q), -1, &rep);

	if (r == 0) {
		r = rep.status;
		ctl_reply_free(&rep);
	}
	return r;
}

int collc_comm_destroy(struct collc_comm *comm)
{
	int r;

	if (!comm)
		return -EINVAL;
	r = comm_ref(comm, COLLC_MSG_COMM_DESTROY);
	/* The handle is gone either way: a lost collcd has dropped it already. */
	free(comm);
	return r == -ECONNRESET ? 0 : r;
}

int collc_comm_abort(struct collc_comm *comm)
{
	if (!comm)
		return -EINVAL;
	return comm_ref(comm, COLLC_MSG_COMM_ABORT);
}

int collc_comm_set_timeout(struct collc_comm *comm, int timeout_ms)
{
	struct collc_msg_comm_timeout q;
	struct ctl_reply rep;
	int r;

	if (!comm || timeout_ms < -1)
		return -EINVAL;
	q.comm = comm->handle;
	q.timeout_ms = timeout_ms < 0 ? UINT32_MAX : (uint32_t)timeout_ms;
	r = request(comm->ctx, COLLC_MSG_COMM_TIMEOUT, &q, sizeof(q), -1, &rep);
	if (r == 0) {
		r = rep.status;
		ctl_reply_free(&rep);
	}
	return r;
}

int collc_comm_rank(const struct collc_comm *comm)
{
	return comm ? comm->rank : -EINVAL;
}

int collc_comm_nranks(const struct collc_comm *comm)
{
	return comm ? comm->nranks : -EINVAL;
}

/* Memory */

static const struct reg *reg_find(const struct collc_ctx *ctx, uintptr_t p, size_t len)
{
	for (size_t i = 0; i < ctx->nregs; i++) {
		const struct reg *g = &ctx->regs[i];

		if (p >= g->start && p - g->start <= g->len && len <= g->len - (p - g->start))
			return g;
	}
	return NULL;
}

static int reg_overlaps(const struct collc_ctx *ctx, uintptr_t a, uintptr_t b)
{
	for (size_t i = 0; i < ctx->nregs; i++) {
		const struct reg *g = &ctx->regs[i];

		if (a < g->map + g->maplen && g->map < b)
			return 1;
	}
	return 0;
}

static int reg_add(struct collc_ctx *ctx, const struct reg *g)
{
	struct reg *t = realloc(ctx->regs, (ctx->nregs + 1) * sizeof(*t));

	if (!t)
		return -ENOMEM;
	ctx->regs = t;
	ctx->regs[ctx->nregs++] = *g;
	return 0;
}

static int mem_request(struct collc_ctx *ctx, uint16_t type, uint64_t size, int fd,
		       struct collc_msg_mem_reply *mr, int *ret_fd)
{
	struct collc_msg_mem q = { .size = size, .device = -1 };
	struct ctl_reply rep;
	int r = request(ctx, type, &q, sizeof(q), fd, &rep);

	if (r < 0)
		return r;
	r = rep.status;
	reply_body(&rep, mr, sizeof(*mr));
	if (r == 0 && ret_fd) {
		if (rep.nfds != 1) {
			r = -EPROTO;
		} else {
			*ret_fd = rep.fds[0];
			rep.nfds = 0;
		}
	}
	ctl_reply_free(&rep);
	return r;
}

static int release_mr(struct collc_ctx *ctx, uint32_t mr)
{
	struct collc_msg_mem_release q = { .mr = mr };
	struct ctl_reply rep;
	int r = request(ctx, COLLC_MSG_MEM_RELEASE, &q, sizeof(q), -1, &rep);

	if (r == 0) {
		r = rep.status;
		ctl_reply_free(&rep);
	}
	return r;
}

/*
 * Device memory. An allocation comes back as a socket holding the VMM fd
 * (proto/wire.h struct collc_msg_mem_vmm); a registration sends the CUDA IPC
 * handle of the allocation in a pipe, since the request itself is 32 bytes.
 */
static int dev_request(struct collc_ctx *ctx, uint16_t type, uint64_t size, int device, int send_fd,
		       struct collc_msg_mem_reply *mr, int *ret_fd)
{
	struct collc_msg_mem q = { .size = size, .device = device };
	struct ctl_reply rep;
	int r = collc__gpu_uuid(device, q.device_uuid);

	if (r < 0)
		return r;
	r = request(ctx, type, &q, sizeof(q), send_fd, &rep);
	if (r < 0)
		return r;
	r = rep.status;
	reply_body(&rep, mr, sizeof(*mr));
	if (r == 0 && ret_fd) {
		if (rep.nfds != 1) {
			r = -EPROTO;
		} else {
			*ret_fd = rep.fds[0];
			rep.nfds = 0;
		}
	}
	ctl_reply_free(&rep);
	return r;
}

static int recv_vmm_fd(int sock, struct collc_msg_mem_vmm *m, int *ret_fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = m, .iov_len = sizeof(*m) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm;

	if (recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) != (ssize_t)sizeof(*m))
		return -EPROTO;
	cm = CMSG_FIRSTHDR(&mh);
	if (!cm || cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
	    cm->cmsg_len != CMSG_LEN(sizeof(int)))
		return -EPROTO;
	memcpy(ret_fd, CMSG_DATA(cm), sizeof(int));
	return 0;
}

static int dev_mem_alloc(struct collc_ctx *ctx, size_t size, int device, void **ret_ptr)
{
	struct reg g = { .kind = REG_DEV_ALLOC, .fd = -1 };
	struct collc_msg_mem_reply mr;
	struct collc_msg_mem_vmm m;
	int sock, fd, r;
	uintptr_t p;

	r = dev_request(ctx, COLLC_MSG_MEM_ALLOC, size, device, -1, &mr, &sock);
	if (r < 0)
		return r;
	r = recv_vmm_fd(sock, &m, &fd);
	close(sock);
	if (r == 0 && m.map_size < size) {
		close(fd);
		r = -EPROTO;
	}
	if (r == 0) {
		r = collc__gpu_map(device, fd, m.map_size, &p);
		close(fd);
	}
	if (r < 0) {
		release_mr(ctx, mr.mr);
		return r;
	}
	g.start = g.map = p;
	g.len = size;
	g.maplen = m.map_size;
	g.mr = mr.mr;
	pthread_mutex_lock(&ctx->ring_lock);
	r = reg_add(ctx, &g);
	pthread_mutex_unlock(&ctx->ring_lock);
	if (r < 0) {
		collc__gpu_unmap(p, m.map_size);
		release_mr(ctx, mr.mr);
		return r;
	}
	*ret_ptr = (void *)p;
	return 0;
}

static int dev_mem_register(struct collc_ctx *ctx, void *ptr, size_t size, int device)
{
	struct reg g = { .kind = REG_DEV_REGISTER, .fd = -1 };
	struct collc_msg_mem_ipc ipc = { { 0 } };
	struct collc_msg_mem_reply mr;
	const struct reg *old;
	struct reg stale;
	uint64_t id = 0;
	int pfd[2], r;

	r = collc__gpu_ipc(device, (uintptr_t)ptr, ipc.handle, &ipc.offset, &ipc.alloc_size);
	if (r == 0)
		r = collc__gpu_buffer_id((uintptr_t)ptr, &id);
	if (r < 0)
		return r;
	pthread_mutex_lock(&ctx->ring_lock);
	old = reg_find(ctx, (uintptr_t)ptr, size);
	r = old ? 1 : 0;
	/*
	 * Registered, then cudaFree()d and cudaMalloc()ed again at the same
	 * address without collc_mem_deregister: collcd's import is of the freed
	 * allocation. Let it go and import the new one.
	 */
	if (old && old->kind == REG_DEV_REGISTER && old->buf_id != id) {
		stale = *old;
		ctx->regs[old - ctx->regs] = ctx->regs[--ctx->nregs];
		r = 2;
	}
	if (!r && reg_overlaps(ctx, (uintptr_t)ptr, (uintptr_t)ptr + size))
		r = -EEXIST;
	pthread_mutex_unlock(&ctx->ring_lock);
	if (r == 2)
		release_mr(ctx, stale.mr);
	else if (r)
		return r < 0 ? r : 0; /* inside a registration already: nothing to do */
	if (ipc.offset + size > ipc.alloc_size)
		return -EINVAL;
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	if (write(pfd[1], &ipc, sizeof(ipc)) != (ssize_t)sizeof(ipc)) {
		r = -EIO;
	} else {
		close(pfd[1]);
		pfd[1] = -1;
		r = dev_request(ctx, COLLC_MSG_MEM_REGISTER, size, device, pfd[0], &mr, NULL);
	}
	if (pfd[1] >= 0)
		close(pfd[1]);
	close(pfd[0]);
	if (r < 0)
		return r;
	g.start = g.map = (uintptr_t)ptr;
	g.len = g.maplen = size;
	g.mr = mr.mr;
	g.buf_id = id;
	pthread_mutex_lock(&ctx->ring_lock);
	r = reg_add(ctx, &g);
	pthread_mutex_unlock(&ctx->ring_lock);
	if (r < 0)
		release_mr(ctx, mr.mr);
	return r;
}

int collc_mem_alloc(struct collc_ctx *ctx, size_t size, int device, void **ret_ptr)
{
	struct collc_msg_mem_reply mr;
	struct reg g = { .kind = REG_ALLOC };
	void *p;
	int fd, r;

	if (!ctx || !ret_ptr || size == 0 || device < -1)
		return -EINVAL;
	if (device >= 0)
		return ctx->backend == COLLC_BACKEND_CUDA ? dev_mem_alloc(ctx, size, device, ret_ptr)
							  : -ENODEV;
	r = mem_request(ctx, COLLC_MSG_MEM_ALLOC, size, -1, &mr, &fd);
	if (r < 0)
		return r;
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		r = -errno;
		release_mr(ctx, mr.mr);
		return r;
	}
	g.start = g.map = (uintptr_t)p;
	g.len = g.maplen = size;
	g.mr = mr.mr;
	g.fd = -1;
	pthread_mutex_lock(&ctx->ring_lock);
	r = reg_add(ctx, &g);
	pthread_mutex_unlock(&ctx->ring_lock);
	if (r < 0) {
		munmap(p, size);
		release_mr(ctx, mr.mr);
		return r;
	}
	*ret_ptr = p;
	return 0;
}

static int reg_take(struct collc_ctx *ctx, void *ptr, int kind, struct reg *out)
{
	int r = -EINVAL;

	pthread_mutex_lock(&ctx->ring_lock);
	for (size_t i = 0; i < ctx->nregs; i++)
		if (ctx->regs[i].start == (uintptr_t)ptr && ctx->regs[i].kind == kind) {
			*out = ctx->regs[i];
			ctx->regs[i] = ctx->regs[--ctx->nregs];
			r = 0;
			break;
		}
	pthread_mutex_unlock(&ctx->ring_lock);
	return r;
}

int collc_mem_free(struct collc_ctx *ctx, void *ptr)
{
	struct reg g;
	int r;

	if (!ctx || !ptr || (reg_take(ctx, ptr, REG_ALLOC, &g) < 0 &&
			     reg_take(ctx, ptr, REG_DEV_ALLOC, &g) < 0))
		return -EINVAL;
	r = release_mr(ctx, g.mr);
	if (g.kind == REG_DEV_ALLOC)
		collc__gpu_unmap(g.map, g.maplen);
	else
		munmap((void *)g.map, g.maplen);
	return r == -ECONNRESET ? 0 : r;
}

/* Is every page of [a, b) private anonymous memory of this process? */
static int range_is_private_anon(uintptr_t a, uintptr_t b)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];
	uintptr_t covered = a;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f) && covered < b) {
		unsigned long lo, hi, off, inode;
		char perms[8], dev[16], path[256] = "";

		if (sscanf(line, "%lx-%lx %7s %lx %15s %lu %255s", &lo, &hi, perms, &off, dev, &inode,
			   path) < 6)
			continue;
		if (hi <= covered || lo > covered)
			continue;
		if (perms[0] != 'r' || perms[1] != 'w' || perms[3] != 'p' || inode != 0 ||
		    (path[0] && strcmp(path, "[heap]") != 0))
			break;
		covered = hi;
	}
	fclose(f);
	return covered >= b;
}

/*
 * Are the pages of k still mapped from its memfd, each at its own offset?
 * free() may have unmapped them and a later mmap put other memory there.
 */
static int backing_intact(const struct backing *k)
{
	FILE *f = fopen("/proc/self/maps", "re");
	struct stat st;
	char line[512];
	uintptr_t covered = k->a;

	if (!f)
		return 0;
	if (fstat(k->fd, &st) < 0) {
		fclose(f);
		return 0;
	}
	while (fgets(line, sizeof(line), f) && covered < k->b) {
		unsigned long lo, hi, off, inode;
		char perms[8], dev[16];

		if (sscanf(line, "%lx-%lx %7s %lx %15s %lu", &lo, &hi, perms, &off, dev, &inode) < 6)
			continue;
		if (hi <= covered || lo > covered)
			continue;
		/* The page at `covered` must be file offset covered - k->a of k's memfd. */
		if (inode != (unsigned long)st.st_ino || perms[3] != 's' ||
		    off + (covered - lo) != covered - k->a)
			break;
		covered = hi;
	}
	fclose(f);
	return covered >= k->b;
}

/* Forgets backings whose pages are no longer theirs. Under mem_lock. */
static void backing_prune(struct collc_ctx *ctx, uintptr_t a, uintptr_t b)
{
	for (struct backing **pk = &ctx->backings; *pk;) {
		struct backing *k = *pk;

		if (k->a < b && a < k->b && !backing_intact(k)) {
			*pk = k->next;
			close(k->fd);
			free(k);
			continue;
		}
		pk = &k->next;
	}
}

/* The backing that holds page address a, if any. Under mem_lock. */
static struct backing *backing_at(struct collc_ctx *ctx, uintptr_t a)
{
	for (struct backing *k = ctx->backings; k; k = k->next)
		if (a >= k->a && a < k->b)
			return k;
	return NULL;
}

/* Does some backing other than skip start inside [a, b)? Under mem_lock. */
static int backing_within(struct collc_ctx *ctx, uintptr_t a, uintptr_t b, const struct backing *skip)
{
	for (struct backing *k = ctx->backings; k; k = k->next)
		if (k != skip && k->a < b && a < k->b)
			return 1;
	return 0;
}

/*
 * Moves the private pages [a, b) into file offset off of fd and maps the file
 * there instead: same address, same contents, now shareable with collcd.
 */
static int reback(int fd, off_t off, uintptr_t a, uintptr_t b)
{
	void *tmp = mmap(NULL, b - a, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off);
	struct iovec to = { .iov_base = tmp, .iov_len = b - a };
	struct iovec from = { .iov_base = (void *)a, .iov_len = b - a };

	if (tmp == MAP_FAILED)
		return -errno;
	/*
	 * Whole pages, so also the bytes around the user's range: the kernel
	 * copies them (a memory checker would flag a memcpy across allocations).
	 */
	if (process_vm_readv(getpid(), &to, 1, &from, 1, 0) != (ssize_t)(b - a))
		memcpy(tmp, (void *)a, b - a);
	munmap(tmp, b - a);
	if (mmap((void *)a, b - a, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, off) == MAP_FAILED)
		return -errno;
	return 0;
}

/*
 * Finds or makes the backing that covers the pages [a, b): a registration
 * inside pages registered before (or since deregistered) reuses their memfd,
 * one that runs past their end grows it. Under mem_lock.
 */
static int backing_cover(struct collc_ctx *ctx, uintptr_t a, uintptr_t b, struct backing **ret)
{
	struct backing *k = backing_at(ctx, a);
	int r;

	if (!k) {
		if (backing_within(ctx, a, b, NULL))
			return -EEXIST; /* it would have to grow a backing downwards */
		if (!range_is_private_anon(a, b))
			return -EINVAL;
		k = calloc(1, sizeof(*k));
		if (!k)
			return -ENOMEM;
		k->fd = memfd_create("collc-reg", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (k->fd < 0) {
			r = -errno;
			free(k);
			return r;
		}
		r = ftruncate(k->fd, (off_t)(b - a)) < 0 ? -errno : reback(k->fd, 0, a, b);
		if (r < 0) {
			close(k->fd);
			free(k);
			return r;
		}
		k->a = a;
		k->b = b;
		k->next = ctx->backings;
		ctx->backings = k;
	} else if (b > k->b) {
		if (backing_within(ctx, k->b, b, k) || !range_is_private_anon(k->b, b))
			return -EEXIST;
		if (ftruncate(k->fd, (off_t)(b - k->a)) < 0)
			return -errno;
		r = reback(k->fd, (off_t)(k->b - k->a), k->b, b);
		if (r < 0)
			return r;
		k->b = b;
	}
	*ret = k;
	return 0;
}

int collc_mem_register(struct collc_ctx *ctx, void *ptr, size_t size, int device)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a, b;
	struct collc_msg_mem_reply mr;
	struct reg g = { .kind = REG_REGISTER, .fd = -1 };
	struct backing *k = NULL;
	int r;

	if (!ctx || !ptr || size == 0 || device < -1 || (uintptr_t)ptr + size < (uintptr_t)ptr)
		return -EINVAL;
	if (device >= 0)
		return ctx->backend == COLLC_BACKEND_CUDA ? dev_mem_register(ctx, ptr, size, device)
							  : -ENODEV;
	a = (uintptr_t)ptr & ~(pg - 1);
	b = ((uintptr_t)ptr + size + pg - 1) & ~(pg - 1);
	pthread_mutex_lock(&ctx->ring_lock);
	for (size_t i = 0; i < ctx->nregs; i++)
		if (ctx->regs[i].kind == REG_ALLOC && reg_find(ctx, (uintptr_t)ptr, size) == &ctx->regs[i]) {
			/* Inside memory from collc_mem_alloc: collcd maps it already. */
			pthread_mutex_unlock(&ctx->ring_lock);
			return 0;
		}
	pthread_mutex_unlock(&ctx->ring_lock);
	pthread_mutex_lock(&ctx->mem_lock);
	backing_prune(ctx, a, b);
	r = backing_cover(ctx, a, b, &k);
	if (r < 0)
		goto out;
	/* collcd maps the backing from its start to the end of this range. */
	r = mem_request(ctx, COLLC_MSG_MEM_REGISTER, b - k->a, k->fd, &mr, NULL);
	if (r < 0)
		goto out; /* the pages stay memfd-backed, with the user's data */
	g.start = (uintptr_t)ptr;
	g.len = size;
	g.map = k->a;
	g.maplen = b - k->a;
	g.mr = mr.mr;
	pthread_mutex_lock(&ctx->ring_lock);
	r = reg_add(ctx, &g);
	pthread_mutex_unlock(&ctx->ring_lock);
	if (r < 0)
		release_mr(ctx, mr.mr);
out:
	pthread_mutex_unlock(&ctx->mem_lock);
	return r;
}

int collc_mem_deregister(struct collc_ctx *ctx, void *ptr)
{
	struct reg g;
	int r;

	if (!ctx || !ptr || (reg_take(ctx, ptr, REG_REGISTER, &g) < 0 &&
			     reg_take(ctx, ptr, REG_DEV_REGISTER, &g) < 0))
		return -EINVAL;
	/* The pages stay memfd-backed: a later registration of them reuses the backing. */
	r = release_mr(ctx, g.mr);
	if (g.fd >= 0)
		close(g.fd);
	return r == -ECONNRESET ? 0 : r;
}

/* Spinning pays only where cores are to spare; on a small host it starves collcd. */
static uint64_t spin_ns(void)
{
	static int64_t cached = -1;
	int64_t v = load_relaxed(&cached);

	if (v < 0) {
		v = sysconf(_SC_NPROCESSORS_ONLN) > 4 ? (int64_t)WAIT_SPIN_NS : 0;
		store_relaxed(&cached, v);
	}
	return (uint64_t)v;
}

/* Request table: open addressing on the request id. */

#define REQ_EMPTY   0ull
#define REQ_DELETED UINT64_MAX

static struct req_slot *req_lookup(struct collc_ctx *ctx, uint64_t req)
{
	if (!ctx->req_cap)
		return NULL;
	for (size_t i = req & (ctx->req_cap - 1);; i = (i + 1) & (ctx->req_cap - 1)) {
		struct req_slot *s = &ctx->reqs[i];

		if (s->req == req)
			return s;
		if (s->req == REQ_EMPTY)
			return NULL;
	}
}

static int req_grow(struct collc_ctx *ctx)
{
	size_t cap = ctx->req_cap ? ctx->req_cap * 2 : 1024, used = 0;
	struct req_slot *t;

	/* Rehash at the same size when deleted slots dominate. */
	for (size_t i = 0; i < ctx->req_cap; i++)
		used += ctx->reqs[i].req != REQ_EMPTY && ctx->reqs[i].req != REQ_DELETED;
	if (ctx->req_cap && used * 4 < ctx->req_cap)
		cap = ctx->req_cap;
	t = calloc(cap, sizeof(*t));
	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i < ctx->req_cap; i++) {
		struct req_slot *s = &ctx->reqs[i];

		if (s->req == REQ_EMPTY || s->req == REQ_DELETED)
			continue;
		for (size_t j = s->req & (cap - 1);; j = (j + 1) & (cap - 1))
			if (t[j].req == REQ_EMPTY) {
				t[j] = *s;
				break;
			}
	}
	free(ctx->reqs);
	ctx->reqs = t;
	ctx->req_cap = cap;
	ctx->req_used = used;
	return 0;
}

static int req_insert(struct collc_ctx *ctx, uint64_t req)
{
	size_t i;

	if ((ctx->req_used + 1) * 2 > ctx->req_cap && req_grow(ctx) < 0)
		return -ENOMEM;
	for (i = req & (ctx->req_cap - 1); ctx->reqs[i].req != REQ_EMPTY &&
	     ctx->reqs[i].req != REQ_DELETED; i = (i + 1) & (ctx->req_cap - 1))
		;
	if (ctx->reqs[i].req == REQ_EMPTY)
		ctx->req_used++;
	ctx->reqs[i] = (struct req_slot){ .req = req };
	return 0;
}

static void ring_doorbell(struct collc_ctx *ctx)
{
	fetch_add(&ctx->doorbell->seq, 1);
	futex_wake(&ctx->doorbell->seq, 1);
}

/* Moves completions from the CQ into the request table. Under ring_lock. */
static void reap_cq(struct collc_ctx *ctx)
{
	/* C1': pairs with C1 in the scheduler: CQEs are visible before the tail. */
	uint32_t tail = load_acquire(&ctx->hdr->cq_tail);

	if (tail - ctx->cq_head > ctx->cq_entries)
		tail = ctx->cq_head + ctx->cq_entries; /* garbage; take what can be real */
	for (; ctx->cq_head != tail; ctx->cq_head++) {
		const struct collc_cqe *e = &ctx->cqes[ctx->cq_head & (ctx->cq_entries - 1)];
		struct req_slot *s = req_lookup(ctx, e->user_data);

		if (s) {
			s->res = e->res;
			s->done = 1;
		}
	}
	/* The entries are copied: collcd may reuse them. */
	store_release(&ctx->hdr->cq_head, ctx->cq_head);
	/*
	 * A3: pairs with S1 in the scheduler. It may have gone to sleep because
	 * our CQ was full with entries still in our SQ: the room we made is work.
	 */
	fence_seq_cst();
	if ((load_relaxed(&ctx->hdr->sq_flags) & COLLC_SQ_NEED_WAKEUP) &&
	    load_relaxed(&ctx->hdr->sq_head) != ctx->sq_tail)
		ring_doorbell(ctx);
}

/* Submission */

struct sub {
	uint8_t opcode;
	const void *sendbuf;
	void *recvbuf;
	uint64_t send_bytes, recv_bytes;
};

static int resolve(struct collc_ctx *ctx, const void *p, uint64_t bytes, uint32_t *mr, uint64_t *off)
{
	const struct reg *g;

	*mr = COLLC_MR_NONE;
	*off = 0;
	if (bytes == 0)
		return 0;
	if (!p)
		return -EINVAL;
	g = reg_find(ctx, (uintptr_t)p, bytes);
	if (!g)
		return -EINVAL;
	*mr = g->mr;
	*off = (uintptr_t)p - g->map;
	return 0;
}

static int daemon_alive(struct collc_ctx *ctx)
{
	struct pollfd p = { .fd = ctx->fd, .events = POLLRDHUP };

	if (load_relaxed(&ctx->broken))
		return 0;
	if (poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR))) {
		store_relaxed(&ctx->broken, 1);
		return 0;
	}
	return 1;
}

static int submit(struct collc_comm *comm, const struct sub *s, size_t count, collc_dtype dtype,
		  collc_redop op, int root, collc_req *ret_req)
{
	struct collc_ctx *ctx;
	struct collc_sqe e = { 0 };
	uint64_t req;
	int r;

	if (!comm || !ret_req || (unsigned)dtype >= COLLC_NUM_DTYPES ||
	    (unsigned)op >= COLLC_NUM_REDOPS)
		return -EINVAL;
	ctx = comm->ctx;
	/* A dead collcd never consumes: notice it (cheaply) before queueing more. */
	if (now_ns() - load_relaxed(&ctx->alive_checked_ns) > 1000000) {
		store_relaxed(&ctx->alive_checked_ns, now_ns());
		if (!daemon_alive(ctx))
			return -ECONNRESET;
	}
	e.opcode = s->opcode;
	e.dtype = (uint8_t)dtype;
	e.redop = (uint8_t)op;
	e.comm = comm->handle;
	e.count = count;
	e.root = root;
	pthread_mutex_lock(&ctx->ring_lock);
	r = resolve(ctx, s->sendbuf, s->send_bytes, &e.send_mr, &e.send_off);
	if (r == 0)
		r = resolve(ctx, s->recvbuf, s->recv_bytes, &e.recv_mr, &e.recv_off);
	while (r == 0) {
		/* A1': pairs with H1 in the scheduler: the slot we reuse was copied out. */
		uint32_t head = load_acquire(&ctx->hdr->sq_head);

		if (load_relaxed(&ctx->broken)) {
			r = -ECONNRESET;
			break;
		}
		if (ctx->sq_tail - head < ctx->sq_entries)
			break;
		/*
		 * The ring is full. collcd stops taking entries while our CQ has no
		 * room, so make room (the completions stay in the request table).
		 */
		reap_cq(ctx);
		pthread_mutex_unlock(&ctx->ring_lock);
		if (!daemon_alive(ctx))
			r = -ECONNRESET;
		else
			sched_yield();
		pthread_mutex_lock(&ctx->ring_lock);
	}
	if (r == 0) {
		req = ++ctx->next_req;
		r = req_insert(ctx, req);
	}
	if (r < 0) {
		pthread_mutex_unlock(&ctx->ring_lock);
		return r;
	}
	e.seq = comm->next_seq++;
	e.user_data = req;
	memcpy(&ctx->sqes[ctx->sq_tail & (ctx->sq_entries - 1)], &e, sizeof(e));
	/* A1: pairs with R1 in the scheduler: the SQE is visible before the tail. */
	store_release(&ctx->hdr->sq_tail, ++ctx->sq_tail);
	/* A2: pairs with S1 in the scheduler: it sets NEED_WAKEUP, fences, re-reads the tail. */
	fence_seq_cst();
	if (load_relaxed(&ctx->hdr->sq_flags) & COLLC_SQ_NEED_WAKEUP)
		ring_doorbell(ctx);
	pthread_mutex_unlock(&ctx->ring_lock);
	*ret_req = req;
	return 0;
}

static int bytes_of(size_t count, collc_dtype dtype, uint64_t mult, uint64_t *ret)
{
	uint64_t es = collc_dtype_size(dtype), b;

	if (!es || __builtin_mul_overflow((uint64_t)count, es, &b) ||
	    __builtin_mul_overflow(b, mult, ret))
		return -EINVAL;
	return 0;
}

int collc_allreduce(struct collc_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
		    collc_dtype dtype, collc_redop op, collc_req *ret_req)
{
	struct sub s = { COLLC_OP_ALLREDUCE, sendbuf, recvbuf, 0, 0 };

	if (bytes_of(count, dtype, 1, &s.send_bytes) < 0)
		return -EINVAL;
	s.recv_bytes = s.send_bytes;
	return submit(comm, &s, count, dtype, op, 0, ret_req);
}

int collc_allgather(struct collc_comm *comm, const void *sendbuf, void *recvbuf, size_t sendcount,
		    collc_dtype dtype, collc_req *ret_req)
{
	struct sub s = { COLLC_OP_ALLGATHER, sendbuf, recvbuf, 0, 0 };

	if (!comm || bytes_of(sendcount, dtype, 1, &s.send_bytes) < 0 ||
	    bytes_of(sendcount, dtype, (uint64_t)comm->nranks, &s.recv_bytes) < 0)
		return -EINVAL;
	return submit(comm, &s, sendcount, dtype, COLLC_SUM, 0, ret_req);
}

int collc_reduce_scatter(struct collc_comm *comm, const void *sendbuf, void *recvbuf,
			 size_t recvcount, collc_dtype dtype, collc_redop op, collc_req *ret_req)
{
	struct sub s = { COLLC_OP_REDUCE_SCATTER, sendbuf, recvbuf, 0, 0 };

	if (!comm || bytes_of(recvcount, dtype, (uint64_t)comm->nranks, &s.send_bytes) < 0 ||
	    bytes_of(recvcount, dtype, 1, &s.recv_bytes) < 0)
		return -EINVAL;
	return submit(comm, &s, recvcount, dtype, op, 0, ret_req);
}

int collc_broadcast(struct collc_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
		    collc_dtype dtype, int root, collc_req *ret_req)
{
	struct sub s = { COLLC_OP_BROADCAST, sendbuf, recvbuf, 0, 0 };

	if (!comm || root < 0 || root >= comm->nranks || bytes_of(count, dtype, 1, &s.recv_bytes) < 0)
		return -EINVAL;
	/* Only the root's send buffer is read. */
	s.send_bytes = root == comm->rank ? s.recv_bytes : 0;
	return submit(comm, &s, count, dtype, COLLC_SUM, root, ret_req);
}

int collc_reduce(struct collc_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
		 collc_dtype dtype, collc_redop op, int root, collc_req *ret_req)
{
	struct sub s = { COLLC_OP_REDUCE, sendbuf, recvbuf, 0, 0 };

	if (!comm || root < 0 || root >= comm->nranks || bytes_of(count, dtype, 1, &s.send_bytes) < 0)
		return -EINVAL;
	/* Only the root's receive buffer is written. */
	s.recv_bytes = root == comm->rank ? s.send_bytes : 0;
	return submit(comm, &s, count, dtype, op, root, ret_req);
}

/* Completion */

/* 1 done (result in *res, request forgotten), 0 pending, -EINVAL unknown. Under ring_lock. */
static int poll_req(struct collc_ctx *ctx, collc_req req, int *res)
{
	struct req_slot *s;

	reap_cq(ctx);
	s = req_lookup(ctx, req);
	if (!s || req == REQ_EMPTY || req == REQ_DELETED)
		return -EINVAL;
	if (!s->done)
		return 0;
	*res = s->res;
	s->req = REQ_DELETED;
	return 1;
}

int collc_test(struct collc_ctx *ctx, collc_req req)
{
	int res = 0, r;

	if (!ctx)
		return -EINVAL;
	pthread_mutex_lock(&ctx->ring_lock);
	r = poll_req(ctx, req, &res);
	pthread_mutex_unlock(&ctx->ring_lock);
	if (r == 0 && !daemon_alive(ctx))
		return -ECONNRESET;
	if (r <= 0)
		return r;
	return res < 0 ? res : 1;
}

int collc_wait(struct collc_ctx *ctx, collc_req req, int timeout_ms)
{
	uint64_t t0 = now_ns(), last_check = t0;
	uint64_t limit = timeout_ms < 0 ? UINT64_MAX : (uint64_t)timeout_ms * 1000000ull;
	int res = 0, r;

	if (!ctx)
		return -EINVAL;
	for (;;) {
		uint64_t now;
		uint32_t seen;

		pthread_mutex_lock(&ctx->ring_lock);
		r = poll_req(ctx, req, &res);
		seen = ctx->cq_head;
		pthread_mutex_unlock(&ctx->ring_lock);
		if (r < 0)
			return r;
		if (r == 1)
			return res;
		now = now_ns();
		if (now - t0 >= limit)
			return -EAGAIN;
		if (now - last_check >= LIVENESS_NS) {
			if (!daemon_alive(ctx))
				return -ECONNRESET;
			last_check = now;
		}
		if (now - t0 < spin_ns()) {
			cpu_relax();
			continue;
		}
		fetch_add(&ctx->waiters, 1);
		__atomic_fetch_or(&ctx->hdr->cq_flags, COLLC_CQ_WAITING, __ATOMIC_SEQ_CST);
		/* W1: pairs with C2 in the scheduler: we see the new tail or it sees WAITING. */
		fence_seq_cst();
		if (load_acquire(&ctx->hdr->cq_tail) == seen) {
			uint64_t left = limit == UINT64_MAX ? LIVENESS_NS : limit - (now - t0);

			futex_wait(&ctx->hdr->cq_tail, seen, (int64_t)(left < LIVENESS_NS ? left : LIVENESS_NS));
		}
		if (fetch_add(&ctx->waiters, (uint32_t)-1) == 1)
			__atomic_fetch_and(&ctx->hdr->cq_flags, ~COLLC_CQ_WAITING, __ATOMIC_SEQ_CST);
	}
}

int collc_event_fd(struct collc_ctx *ctx)
{
	struct ctl_reply rep;
	int r;

	if (!ctx)
		return -EINVAL;
	pthread_mutex_lock(&ctx->ring_lock);
	r = ctx->event_fd;
	pthread_mutex_unlock(&ctx->ring_lock);
	if (r >= 0)
		return r;
	r = request(ctx, COLLC_MSG_SET_EVENTFD, NULL, 0, -1, &rep);
	if (r < 0)
		return r;
	r = rep.status;
	if (r == 0 && rep.nfds != 1)
		r = -EPROTO;
	if (r == 0) {
		pthread_mutex_lock(&ctx->ring_lock);
		if (ctx->event_fd < 0) {
			ctx->event_fd = rep.fds[0];
			rep.nfds = 0;
		}
		r = ctx->event_fd;
		pthread_mutex_unlock(&ctx->ring_lock);
	}
	ctl_reply_free(&rep);
	return r;
}
