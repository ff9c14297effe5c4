/* SPDX-License-Identifier: MIT */
/*
 * libcollc's device memory. An allocation comes back as a socket holding the
 * VMM fd (proto/wire.h struct collc_msg_mem_vmm), which gpu.c maps; a
 * registration sends the CUDA IPC handle of the allocation that holds the
 * range in its payload (struct collc_msg_mem_gpu_register), with no fd.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "client/gpu.h"
#include "client/internal.h"

/* The head of every device memory request; collcd places the device by its UUID. */
static int mem_head(uint64_t size, int device, struct collc_msg_mem *q)
{
	memset(q, 0, sizeof(*q));
	q->size = size;
	q->device = device;
	return collc__gpu_uuid(device, q->device_uuid);
}

static int recv_vmm_fd(int sock, struct collc_msg_mem_vmm *m, int *ret_fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = m, .iov_len = sizeof(*m) };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = u.buf,
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

int collc__gpu_mem_alloc(struct collc_ctx *ctx, size_t size, int device, void **ret_ptr)
{
	struct reg g = { .kind = REG_DEV_ALLOC, .fd = -1 };
	struct collc_msg_mem_reply mr;
	struct collc_msg_mem_vmm m;
	struct collc_msg_mem q;
	int sock, fd, r;
	uintptr_t p;

	if (!(ctx->backend & COLLC_BACKEND_CUDA))
		return -ENODEV;
	r = mem_head(size, device, &q);
	if (r == 0)
		r = collc__mem_request(ctx, COLLC_MSG_MEM_ALLOC, &q, sizeof(q), -1, &mr, &sock);
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
		collc__mem_release(ctx, mr.mr);
		return r;
	}
	g.start = g.map = p;
	g.len = size;
	g.maplen = m.map_size;
	g.mr = mr.mr;
	r = collc__reg_add(ctx, &g);
	if (r < 0) {
		collc__gpu_unmap(p, m.map_size);
		collc__mem_release(ctx, mr.mr);
		return r;
	}
	*ret_ptr = (void *)p;
	return 0;
}

int collc__gpu_mem_register(struct collc_ctx *ctx, void *ptr, size_t size, int device)
{
	struct reg g = { .kind = REG_DEV_REGISTER, .fd = -1 };
	struct collc_msg_mem_gpu_register q = { .ipc = { { 0 } } };
	struct collc_msg_mem_reply mr;
	const struct reg *old;
	struct reg stale;
	uint64_t id = 0;
	int r;

	if (!(ctx->backend & COLLC_BACKEND_CUDA))
		return -ENODEV;
	r = collc__gpu_ipc(device, (uintptr_t)ptr, q.ipc.handle, &q.ipc.offset, &q.ipc.alloc_size);
	if (r == 0)
		r = collc__gpu_buffer_id((uintptr_t)ptr, &id);
	if (r < 0)
		return r;
	pthread_mutex_lock(&ctx->ring_lock);
	old = collc__reg_find(ctx, (uintptr_t)ptr, size);
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
	if (!r && collc__reg_overlaps(ctx, (uintptr_t)ptr, (uintptr_t)ptr + size))
		r = -EEXIST;
	pthread_mutex_unlock(&ctx->ring_lock);
	if (r == 2)
		collc__mem_release(ctx, stale.mr);
	else if (r)
		return r < 0 ? r : 0; /* inside a registration already: nothing to do */
	if (q.ipc.offset + size > q.ipc.alloc_size)
		return -EINVAL;
	r = mem_head(size, device, &q.mem);
	if (r == 0)
		r = collc__mem_request(ctx, COLLC_MSG_MEM_REGISTER, &q, sizeof(q), -1, &mr, NULL);
	if (r < 0)
		return r;
	g.start = g.map = (uintptr_t)ptr;
	g.len = g.maplen = size;
	g.mr = mr.mr;
	g.buf_id = id;
	r = collc__reg_add(ctx, &g);
	if (r < 0)
		collc__mem_release(ctx, mr.mr);
	return r;
}
