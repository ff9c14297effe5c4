/* SPDX-License-Identifier: MIT */
/*
 * libcollc's connection to collcd: the handshake that maps the rings, the
 * control requests every other file sends, and the error strings. The rest
 * of the library, a file per concern (internal.h names them): comm.c, reg.c,
 * mem_host.c, mem_gpu.c, request.c, submit.c; gpu.c loads CUDA at run time.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client/internal.h"
#include "common/atomics.h"

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
		return "protocol error: collcd, or a peer daemon, sent what was not agreed";
	case -EPERM:
		return "permission denied";
	case -EDQUOT:
		return "per-client quota exceeded (communicators, registrations or bytes)";
	}
	if (err < 0 && strerrordesc_np(-err))
		return strerrordesc_np(-err);
	return "unknown error";
}

/*
 * One request on the control socket. Several threads may wait at once (a
 * collc_comm_init blocks until every rank joined): whichever waiter finds no
 * reader reads the next reply and hands it to the request with that id.
 */
int collc__request(struct collc_ctx *ctx, uint16_t type, const void *payload, size_t len,
		   int send_fd, struct ctl_reply *rep)
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

int collc__request_status(struct collc_ctx *ctx, uint16_t type, const void *payload, size_t len)
{
	struct ctl_reply rep;
	int r = collc__request(ctx, type, payload, len, -1, &rep);

	if (r == 0) {
		r = rep.status;
		ctl_reply_free(&rep);
	}
	return r;
}

/* Copies a struct reply (whose head is a collc_msg_status) out of rep. */
void collc__reply_body(const struct ctl_reply *rep, void *out, size_t size)
{
	size_t st = sizeof(struct collc_msg_status), n = rep->len;

	memset(out, 0, size);
	if (n > size - st)
		n = size - st;
	memcpy((char *)out + st, rep->data, n);
}

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
	r = collc__request(ctx, COLLC_MSG_HELLO, &hello, sizeof(hello), -1, &rep);
	if (r < 0)
		goto err_close;
	r = rep.status;
	if (r == 0 && rep.nfds != 2)
		r = -EPROTO;
	if (r < 0)
		goto err_rep;
	collc__reply_body(&rep, &hr, sizeof(hr));
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
	if ((hr.features & COLLC_FEAT_SQE_ARGS) &&
	    ctx->hdr->args_off + (uint64_t)hr.sq.ring_entries * sizeof(struct collc_sqe_args) <=
		    hr.shm_size &&
	    ctx->hdr->args_off >= COLLC_SHM_HDR_BYTES)
		ctx->sqe_args = (struct collc_sqe_args *)((char *)ctx->shm + ctx->hdr->args_off);
	if ((hr.features & COLLC_FEAT_GATES) && ctx->hdr->gates && ctx->hdr->gates <= COLLC_GATES &&
	    ctx->hdr->gates_off % 4096 == 0 && ctx->hdr->gates_off >= COLLC_SHM_HDR_BYTES &&
	    ctx->hdr->gates_off + (uint64_t)ctx->hdr->gates * sizeof(struct collc_gate) <=
		    hr.shm_size) {
		ctx->gates = (struct collc_gate *)((char *)ctx->shm + ctx->hdr->gates_off);
		ctx->ngates = ctx->hdr->gates;
	}
	if ((hr.features & COLLC_FEAT_DONES) && ctx->hdr->dones == COLLC_DONES &&
	    ctx->hdr->dones_off % 4096 == 0 && ctx->hdr->dones_off >= COLLC_SHM_HDR_BYTES &&
	    ctx->hdr->dones_off + (uint64_t)COLLC_DONES * sizeof(uint32_t) <= hr.shm_size)
		ctx->dones = (const uint32_t *)((char *)ctx->shm + ctx->hdr->dones_off);
	ctx->sq_entries = hr.sq.ring_entries;
	ctx->cq_entries = hr.cq.ring_entries;
	ctx->sq_tail = load_relaxed(&ctx->hdr->sq_tail);
	ctx->cq_head = load_relaxed(&ctx->hdr->cq_head);
	ctx->backend = hr.backend;
	memcpy(ctx->node_id, hr.node_id, sizeof(ctx->node_id));
	ctx->net_family = hr.net_family;
	ctx->net_port = hr.net_port;
	memcpy(ctx->net_addr, hr.net_addr, sizeof(ctx->net_addr));
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
	collc__stream_fini(ctx);
	close(ctx->fd);
	collc__reg_fini(ctx);
	if (ctx->event_fd >= 0)
		close(ctx->event_fd);
	munmap(ctx->doorbell, sizeof(*ctx->doorbell));
	munmap(ctx->shm, ctx->shm_size);
	free(ctx->reqs);
	pthread_mutex_destroy(&ctx->ctl_lock);
	pthread_cond_destroy(&ctx->ctl_cond);
	pthread_mutex_destroy(&ctx->mem_lock);
	collc__backing_fini(ctx);
	pthread_mutex_destroy(&ctx->ring_lock);
	free(ctx);
}
