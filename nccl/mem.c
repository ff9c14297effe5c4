/* SPDX-License-Identifier: MIT */
/*
 * Buffers. collcd reads and writes the user's device memory directly once it
 * is registered (CUDA IPC): on first use the whole allocation behind a
 * pointer is registered with the communicator's connection and cached, so a
 * later call anywhere in that allocation costs one driver query (its buffer
 * id, which tells a new allocation at the same address from the old one).
 * There is no staging copy: memory that cannot be registered (cudaMallocAsync
 * pools, cuMemCreate/VMM memory, host memory) fails the call with
 * ncclInvalidArgument and a last error that names the buffer.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "nccl/internal.h"

/* A registration handle (ncclCommRegister, ncclCommWindowRegister). */
struct shim_handle {
	struct ncclComm *comm;
	uintptr_t base;
};

static struct shim_reg *reg_find(struct ncclComm *comm, uintptr_t p, size_t bytes)
{
	for (size_t i = 0; i < comm->nregs; i++) {
		struct shim_reg *g = &comm->regs[i];

		if (p >= g->base && p - g->base < g->size && bytes <= g->size - (p - g->base))
			return g;
	}
	return NULL;
}

/*
 * Forgets (and deregisters) the cached allocations that meet [base, base +
 * size): freed ones, since live CUDA allocations never overlap.
 */
static void regs_drop_stale(struct ncclComm *comm, uintptr_t base, size_t size)
{
	for (size_t i = 0; i < comm->nregs;) {
		struct shim_reg *g = &comm->regs[i];

		if (g->base < base + size && base < g->base + g->size) {
			collc_mem_deregister(comm->ctx, (void *)g->base);
			*g = comm->regs[--comm->nregs];
		} else {
			i++;
		}
	}
}

ncclResult_t collc__nccl_reg(struct ncclComm *comm, const void *ptr, size_t bytes, const char *call)
{
	uintptr_t p = (uintptr_t)ptr, base;
	struct shim_reg *g;
	uint64_t id;
	size_t size;
	int r;

	if (!ptr)
		return collc__nccl_fail(ncclInvalidArgument, call, "buffer is NULL");
	pthread_mutex_lock(&comm->lock);
	g = reg_find(comm, p, bytes);
	if (g && collc__cu_buffer_id(ptr, &id) == 0 && id == g->buf_id) {
		pthread_mutex_unlock(&comm->lock);
		return ncclSuccess;
	}
	r = collc__cu_range(ptr, &base, &size, &id);
	if (r < 0) {
		pthread_mutex_unlock(&comm->lock);
		return collc__nccl_fail(ncclInvalidArgument, call,
					"buffer %p is not CUDA device memory of this process", ptr);
	}
	if (p - base > size || bytes > size - (p - base)) {
		pthread_mutex_unlock(&comm->lock);
		return collc__nccl_fail(
			ncclInvalidArgument, call,
			"buffer %p + %zu bytes runs past its allocation (%zu bytes)", ptr, bytes,
			size);
	}
	regs_drop_stale(comm, base, size);
	if (comm->nregs == comm->cap_regs) {
		size_t cap = comm->cap_regs ? 2 * comm->cap_regs : 8;
		struct shim_reg *n = realloc(comm->regs, cap * sizeof(*n));

		if (!n) {
			pthread_mutex_unlock(&comm->lock);
			return collc__nccl_fail(ncclSystemError, call, "out of memory");
		}
		comm->regs = n;
		comm->cap_regs = cap;
	}
	r = collc_mem_register(comm->ctx, (void *)base, size, comm->device);
	if (r < 0) {
		pthread_mutex_unlock(&comm->lock);
		if (r == -EINVAL)
			return collc__nccl_fail(
				ncclInvalidArgument, call,
				"buffer %p cannot be registered with collcd: it must "
				"be cudaMalloc or ncclMemAlloc memory of device %d "
				"(not a cudaMallocAsync pool or VMM memory)",
				ptr, comm->device);
		return collc__nccl_errno(r, call, "registering a buffer with collcd");
	}
	comm->regs[comm->nregs++] = (struct shim_reg){ base, size, id };
	pthread_mutex_unlock(&comm->lock);
	return ncclSuccess;
}

void collc__nccl_regs_free(struct ncclComm *comm)
{
	/* collcd drops the connection's registrations when it closes. */
	free(comm->regs);
	comm->regs = NULL;
	comm->nregs = comm->cap_regs = 0;
}

/*
 * cuMemAlloc memory rather than collc_mem_alloc: collc's memory belongs to one
 * collcd connection, and ncclMemAlloc names no communicator, while every
 * communicator (one connection each) can register this.
 */
SHIM_EXPORT ncclResult_t ncclMemAlloc(void **ptr, size_t size)
{
	int r;

	if (!ptr)
		return collc__nccl_fail(ncclInvalidArgument, "ncclMemAlloc", "ptr is NULL");
	if (size == 0) {
		*ptr = NULL;
		return ncclSuccess;
	}
	r = collc__cu_mem_alloc(ptr, size);
	if (r == -ENODEV)
		return collc__nccl_fail(ncclUnhandledCudaError, "ncclMemAlloc", "%s",
					collc__cu_why());
	if (r < 0)
		return collc__nccl_fail(ncclUnhandledCudaError, "ncclMemAlloc",
					"cuMemAlloc of %zu bytes failed", size);
	return ncclSuccess;
}
SHIM_ALIAS(ncclMemAlloc);

SHIM_EXPORT ncclResult_t ncclMemFree(void *ptr)
{
	if (!ptr)
		return ncclSuccess;
	if (collc__cu_mem_free(ptr) < 0)
		return collc__nccl_fail(ncclInvalidArgument, "ncclMemFree",
					"%p is not from ncclMemAlloc", ptr);
	return ncclSuccess;
}
SHIM_ALIAS(ncclMemFree);

static ncclResult_t handle_new(struct ncclComm *comm, void *buff, size_t size, void **ret,
			       const char *call)
{
	struct shim_handle *h;
	ncclResult_t res = collc__nccl_check_comm(comm, call);

	if (res != ncclSuccess)
		return res;
	if (!ret)
		return collc__nccl_fail(ncclInvalidArgument, call, "handle is NULL");
	if (size == 0)
		return collc__nccl_fail(ncclInvalidArgument, call, "size is 0");
	res = collc__nccl_reg(comm, buff, size, call);
	if (res != ncclSuccess)
		return res;
	h = malloc(sizeof(*h));
	if (!h)
		return collc__nccl_fail(ncclSystemError, call, "out of memory");
	h->comm = comm;
	h->base = (uintptr_t)buff;
	*ret = h;
	return ncclSuccess;
}

/*
 * The registration stays cached until the communicator is destroyed: a
 * deregistered buffer used again costs nothing, and a freed one is noticed
 * by its buffer id.
 */
static ncclResult_t handle_free(struct ncclComm *comm, void *handle, const char *call)
{
	struct shim_handle *h = handle;
	ncclResult_t res = collc__nccl_check_comm(comm, call);

	if (res != ncclSuccess)
		return res;
	if (!h || h->comm != comm)
		return collc__nccl_fail(ncclInvalidArgument, call,
					"handle is not a registration of this comm");
	h->comm = NULL;
	free(h);
	return ncclSuccess;
}

SHIM_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size,
					  void **handle)
{
	return handle_new(comm, buff, size, handle, "ncclCommRegister");
}
SHIM_ALIAS(ncclCommRegister);

SHIM_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle)
{
	return handle_free(comm, handle, "ncclCommDeregister");
}
SHIM_ALIAS(ncclCommDeregister);

/* A window is a registration: collcd reads every rank's buffers wherever they are. */
SHIM_EXPORT ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size,
						ncclWindow_t *win, int winFlags)
{
	if (winFlags & ~NCCL_WIN_COLL_SYMMETRIC)
		return collc__nccl_fail(ncclInvalidArgument, "ncclCommWindowRegister",
					"unknown winFlags 0x%x", winFlags);
	return handle_new(comm, buff, size, (void **)win, "ncclCommWindowRegister");
}
SHIM_ALIAS(ncclCommWindowRegister);

SHIM_EXPORT ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win)
{
	return handle_free(comm, win, "ncclCommWindowDeregister");
}
SHIM_ALIAS(ncclCommWindowDeregister);
