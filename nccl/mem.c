/* SPDX-License-Identifier: MIT */
/*
 * Buffers. collcd reads and writes the user's device memory directly once it
 * is registered (CUDA IPC): on first use the whole allocation behind a
 * pointer is registered with the communicator's connection and cached, so a
 * later call anywhere in that allocation costs one driver query (its buffer
 * id, which tells a new allocation at the same address from the old one).
 * Device memory that collcd cannot import (CUDA IPC exports neither
 * cudaMallocAsync pools nor cuMemCreate/VMM memory) is staged: the call
 * copies it into collc memory of the communicator's connection and back out
 * on the stream (coll.c), which costs a device-to-device copy each way. An
 * import is mapped for collcd's own GPU only, so a send to another rank and
 * an all-to-all stage their input even when it registered (coll.c
 * prepare()): collcd's copies need one side every GPU can read. Host
 * memory fails the call with ncclInvalidArgument and a last error naming it.
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
			if (!g->staged)
				collc_mem_deregister(comm->ctx, (void *)g->base);
			*g = comm->regs[--comm->nregs];
		} else {
			i++;
		}
	}
}

ncclResult_t collc__nccl_reg(struct ncclComm *comm, const void *ptr, size_t bytes, const char *call,
			     int *ret_staged)
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
		*ret_staged = g->staged;
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
	/* -EINVAL: CUDA IPC cannot export the allocation; staged from now on. */
	r = collc_mem_register(comm->ctx, (void *)base, size, comm->device);
	if (r < 0 && r != -EINVAL) {
		pthread_mutex_unlock(&comm->lock);
		return collc__nccl_errno(r, call, "registering a buffer with collcd");
	}
	comm->regs[comm->nregs++] = (struct shim_reg){ base, size, id, r < 0 };
	*ret_staged = r < 0;
	pthread_mutex_unlock(&comm->lock);
	return ncclSuccess;
}

int collc__nccl_stage(struct ncclComm *comm, size_t lane, size_t bytes, void **ret_buf)
{
	struct shim_stage *st;
	void **old, *buf = NULL;
	size_t cap;
	int r;

	if (lane >= comm->nstages) {
		st = realloc(comm->stages, (lane + 1) * sizeof(*st));
		if (!st)
			return -ENOMEM;
		memset(st + comm->nstages, 0, (lane + 1 - comm->nstages) * sizeof(*st));
		comm->stages = st;
		comm->nstages = lane + 1;
	}
	st = &comm->stages[lane];
	if (st->cap >= bytes) {
		*ret_buf = st->buf;
		return 0;
	}
	old = realloc(comm->outgrown, (comm->noutgrown + 1) * sizeof(*old));
	if (!old)
		return -ENOMEM;
	comm->outgrown = old;
	/* Grows by doubling, from 1 MiB, so a sweep of sizes allocates a few times only. */
	for (cap = st->cap ? 2 * st->cap : 1 << 20; cap < bytes; cap *= 2)
		;
	if (collc__cu_push_device(comm->device) < 0)
		return -ENODEV;
	r = collc_mem_alloc(comm->ctx, cap, comm->device, &buf);
	collc__cu_pop();
	if (r < 0)
		return r;
	/* Calls enqueued on the lane may still read the old buffer: it goes with the comm. */
	if (st->buf)
		comm->outgrown[comm->noutgrown++] = st->buf;
	st->buf = buf;
	st->cap = cap;
	*ret_buf = buf;
	return 0;
}

void collc__nccl_stages_free(struct ncclComm *comm)
{
	/* Copies still enqueued read or write these buffers: let the lanes drain first. */
	collc__cu_stream_sync(comm->stage_stream);
	for (size_t i = 0; i < comm->nside && comm->nstages > 1; i++)
		collc__cu_stream_sync(comm->side[i]);
	for (size_t i = 0; i < comm->nstages; i++)
		if (comm->stages[i].buf)
			collc_mem_free(comm->ctx, comm->stages[i].buf);
	for (size_t i = 0; i < comm->noutgrown; i++)
		collc_mem_free(comm->ctx, comm->outgrown[i]);
	free(comm->stages);
	free(comm->outgrown);
	comm->stages = NULL;
	comm->outgrown = NULL;
	comm->nstages = comm->noutgrown = 0;
	collc__cu_stream_destroy(comm->stage_stream);
	collc__cu_event_destroy(comm->stage_fork);
	collc__cu_event_destroy(comm->stage_done);
	comm->stage_stream = comm->stage_fork = comm->stage_done = NULL;
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
	int staged;

	if (res != ncclSuccess)
		return res;
	if (!ret)
		return collc__nccl_fail(ncclInvalidArgument, call, "handle is NULL");
	if (size == 0)
		return collc__nccl_fail(ncclInvalidArgument, call, "size is 0");
	res = collc__nccl_reg(comm, buff, size, call, &staged);
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
