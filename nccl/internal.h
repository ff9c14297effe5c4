/* SPDX-License-Identifier: MIT */
/*
 * libnccl-collc: NCCL's C API (nccl.h of NCCL 2.28) on collc. Each ncclComm
 * is one collc communicator on a collcd connection of its own; collectives
 * go to collc's stream-ordered forms; buffers are registered with collcd on
 * first use. The CUDA driver is dlopen()ed (cu.c): no CUDA library is linked.
 */
#ifndef COLLC_NCCL_INTERNAL_H
#define COLLC_NCCL_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <collc.h>
#include <nccl.h>

/*
 * The stream-ordered forms are referenced weakly: with a libcollc.so.1 older
 * than them, the calls that need them fail with ncclInvalidUsage (saying so)
 * instead of the library failing to load.
 */
#pragma weak collc_allreduce_stream
#pragma weak collc_allgather_stream
#pragma weak collc_reduce_scatter_stream
#pragma weak collc_broadcast_stream
#pragma weak collc_reduce_stream
#pragma weak collc_alltoall_stream
#pragma weak collc_send_stream
#pragma weak collc_recv_stream
#pragma weak collc_comm_get_async_error
#pragma weak collc_group_start
#pragma weak collc_group_end

#define SHIM_EXPORT __attribute__((visibility("default")))
/* The pncclX profiling name of every ncclX, as NCCL exports both. */
#define SHIM_ALIAS(name)                                                                           \
	extern __typeof__(name) p##name __attribute__((alias(#name), visibility("default")))

#define SHIM_COMM_MAGIC 0x636f6c6c6e63636cULL /* "collnccl" */

/* A registered allocation (the whole range behind a user pointer). */
struct shim_reg {
	uintptr_t base;
	size_t size;
	uint64_t buf_id; /* CU_POINTER_ATTRIBUTE_BUFFER_ID: a new allocation at the same address differs */
	int staged; /* collcd cannot import it: calls copy through a staging buffer */
};

/* A staging buffer (collc memory of the comm's connection) and the ones it outgrew. */
struct shim_stage {
	void *buf;
	size_t cap;
};

struct ncclComm {
	uint64_t magic; /* SHIM_COMM_MAGIC while the handle is live */
	struct collc_ctx *ctx;
	struct collc_comm *cc; /* NULL until init ran (deferred to ncclGroupEnd in a group) */
	int nranks, rank, device;
	ncclUniqueId id;
	int init_result;      /* ncclResult_t of a deferred init; ncclInProgress while pending */
	pthread_mutex_t lock; /* regs and side streams */
	struct shim_reg *regs;
	size_t nregs, cap_regs;
	/* Side streams of grouped point-to-point calls, and the events that fork and join them. */
	void **side;      /* CUstream */
	void **side_done; /* CUevent, one per side stream */
	void *fork_ev;    /* CUevent */
	size_t nside;
	/*
	 * Staging lanes: lane 0 runs on stage_stream (forked from the caller's
	 * stream), lane j + 1 on side stream j. A lane's buffer is reused only by
	 * its own stream, in order.
	 */
	struct shim_stage *stages;
	size_t nstages;
	void **outgrown; /* buffers replaced while calls may still use them: freed with comm */
	size_t noutgrown;
	void *stage_stream, *stage_fork, *stage_done;
};

/* result.c */
/* Sets the calling thread's last error ("<call>: <text>") and returns res. */
ncclResult_t collc__nccl_fail(ncclResult_t res, const char *call, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* collc's -errno as an ncclResult_t, with the last error naming call, what and collc's text. */
ncclResult_t collc__nccl_errno(int err, const char *call, const char *what);
ncclResult_t collc__nccl_result_of(int err);
/* Validates a handle: ncclInvalidArgument (last error set) for NULL or a stale handle. */
ncclResult_t collc__nccl_check_comm(const struct ncclComm *comm, const char *call);
int collc__nccl_dtype(ncclDataType_t t, collc_dtype *ret);

/* cu.c: the driver, loaded on first use. */
int collc__cu_load(void); /* 0, or -ENODEV with collc__cu_why() saying why */
const char *collc__cu_why(void);
int collc__cu_current_device(int *ret_device); /* device 0 when no context is current */
int collc__cu_ctx_device(int *ret_device);     /* -ENOENT when no context is current */
/* The allocation holding ptr: base, size and buffer id; -EINVAL when ptr is no device memory. */
int collc__cu_range(const void *ptr, uintptr_t *ret_base, size_t *ret_size, uint64_t *ret_id);
int collc__cu_buffer_id(const void *ptr, uint64_t *ret_id);
int collc__cu_mem_alloc(void **ret_ptr, size_t size);
int collc__cu_mem_free(void *ptr);
int collc__cu_stream_create(void **ret_stream);
void collc__cu_stream_destroy(void *stream);
void collc__cu_stream_sync(void *stream); /* best effort (a captured stream cannot) */
int collc__cu_event_create(void **ret_event);
void collc__cu_event_destroy(void *event);
int collc__cu_event_record(void *event, void *stream);
int collc__cu_stream_wait_event(void *stream, void *event);
/* Makes device's primary context current (pushed) for what follows; collc__cu_pop undoes it. */
int collc__cu_push_device(int device);
void collc__cu_pop(void);
/* A synchronous copy between host and device memory (to_device: host to device). */
int collc__cu_copy(void *dst, const void *src, size_t bytes, int to_device);
/* A device to device copy enqueued on stream. */
int collc__cu_copy_async(void *dst, const void *src, size_t bytes, void *stream);

/* mem.c */
/*
 * Registers the allocation holding [ptr, ptr + bytes) with comm's connection
 * (cached); *ret_staged is 1 when collcd cannot import it (a pool, VMM) and
 * the call must copy through a staging buffer.
 */
ncclResult_t collc__nccl_reg(struct ncclComm *comm, const void *ptr, size_t bytes, const char *call,
			     int *ret_staged);
/* Lane's staging buffer of at least bytes (grown in comm's device's context). */
int collc__nccl_stage(struct ncclComm *comm, size_t lane, size_t bytes, void **ret_buf);
void collc__nccl_stages_free(struct ncclComm *comm);
void collc__nccl_regs_free(struct ncclComm *comm);

/* coll.c */
int collc__nccl_group_depth(void);
/* Queues a deferred comm init of the calling thread's group. */
ncclResult_t collc__nccl_group_add_init(struct ncclComm *comm);
/* Fails the calling thread's open group with res (its ncclGroupEnd then runs nothing). */
ncclResult_t collc__nccl_group_fail(ncclResult_t res);
/* 1 when the calling thread's open group has calls on comm queued. */
int collc__nccl_group_uses(const struct ncclComm *comm);
void collc__nccl_side_free(struct ncclComm *comm);

/* comm.c */
/* Joins comm (its fields set); ncclResult_t, last error set on failure. */
ncclResult_t collc__nccl_comm_join(struct ncclComm *comm, const char *call);

#endif /* COLLC_NCCL_INTERNAL_H */
