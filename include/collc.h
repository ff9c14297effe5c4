/* SPDX-License-Identifier: MIT */
/*
 * collc: node-local collective communication.
 *
 * A process connects to collcd (one daemon per node), joins communicators and
 * submits collectives through a shared-memory ring; completions come back
 * through a completion ring and, optionally, an eventfd.
 *
 * Every function returns 0 (or a count) on success and a negative errno-style
 * code on failure. Output parameters (ret_*) are left untouched on failure.
 * The library never prints, exits or aborts.
 */
#ifndef COLLC_H
#define COLLC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COLLC_API_VERSION 1

#if defined(__GNUC__)
#define COLLC_EXPORT __attribute__((visibility("default")))
#else
#define COLLC_EXPORT
#endif

typedef enum {
	COLLC_INT8,
	COLLC_UINT8,
	COLLC_INT32,
	COLLC_UINT32,
	COLLC_INT64,
	COLLC_UINT64,
	COLLC_FLOAT16,
	COLLC_BFLOAT16,
	COLLC_FLOAT32,
	COLLC_FLOAT64,
	COLLC_FLOAT8_E4M3, /* OCP FP8: 4 exponent bits, 3 mantissa bits, no infinities */
	COLLC_FLOAT8_E5M2, /* OCP FP8: 5 exponent bits, 2 mantissa bits, IEEE-like */
} collc_dtype;
#define COLLC_NUM_DTYPES 12

typedef enum {
	COLLC_SUM,
	COLLC_PROD,
	COLLC_MAX,
	COLLC_MIN,
	COLLC_AVG,
} collc_redop;
#define COLLC_NUM_REDOPS 5

struct collc_ctx;  /* one connection to collcd (opaque) */
struct collc_comm; /* one rank's handle on a communicator (opaque) */

struct collc_unique_id {
	unsigned char bytes[128];
};

typedef uint64_t collc_req;

/* NULL path: $COLLC_SOCKET, else /run/collcd/collcd.sock. */
COLLC_EXPORT int collc_connect(const char *socket_path, struct collc_ctx **ret_ctx);
COLLC_EXPORT void collc_disconnect(struct collc_ctx *ctx);

COLLC_EXPORT int collc_get_unique_id(struct collc_ctx *ctx, struct collc_unique_id *ret_id);

/*
 * Joins rank `rank` of `nranks` to the communicator named by `id` and blocks
 * until every rank has joined. device -1: host memory (CPU executor). Two ranks
 * of one communicator in one process need one ctx each.
 */
COLLC_EXPORT int collc_comm_init(struct collc_ctx *ctx, const struct collc_unique_id *id,
				 int nranks, int rank, int device, struct collc_comm **ret_comm);
COLLC_EXPORT int collc_comm_destroy(struct collc_comm *comm);
/*
 * Revokes the communicator for every rank: pending and later collectives end
 * with -ECANCELED; those already running in collcd's executor are abandoned
 * there (their buffers hold undefined data).
 */
COLLC_EXPORT int collc_comm_abort(struct collc_comm *comm);
/*
 * Ends any collective of this communicator that waits longer than timeout_ms
 * for some rank with -ETIMEDOUT (status names the missing ranks); 0: no limit,
 * -1: follow collcd's op_timeout_ms (the default).
 */
COLLC_EXPORT int collc_comm_set_timeout(struct collc_comm *comm, int timeout_ms);
COLLC_EXPORT int collc_comm_rank(const struct collc_comm *comm);
COLLC_EXPORT int collc_comm_nranks(const struct collc_comm *comm);

/*
 * Buffers. device -1: host memory that collcd maps too (a sealed memfd).
 * collc_mem_register on host memory re-backs the pages holding the range with
 * shared memory in place (same address and contents): the range must lie in
 * private anonymous memory (malloc, mmap) and no other thread may write those
 * pages during the call.
 */
COLLC_EXPORT int collc_mem_alloc(struct collc_ctx *ctx, size_t size, int device, void **ret_ptr);
COLLC_EXPORT int collc_mem_free(struct collc_ctx *ctx, void *ptr);
COLLC_EXPORT int collc_mem_register(struct collc_ctx *ctx, void *ptr, size_t size, int device);
COLLC_EXPORT int collc_mem_deregister(struct collc_ctx *ctx, void *ptr);

COLLC_EXPORT int collc_allreduce(struct collc_comm *comm, const void *sendbuf, void *recvbuf,
				 size_t count, collc_dtype dtype, collc_redop op,
				 collc_req *ret_req);
COLLC_EXPORT int collc_allgather(struct collc_comm *comm, const void *sendbuf, void *recvbuf,
				 size_t sendcount, collc_dtype dtype, collc_req *ret_req);
COLLC_EXPORT int collc_reduce_scatter(struct collc_comm *comm, const void *sendbuf, void *recvbuf,
				      size_t recvcount, collc_dtype dtype, collc_redop op,
				      collc_req *ret_req);
COLLC_EXPORT int collc_broadcast(struct collc_comm *comm, const void *sendbuf, void *recvbuf,
				 size_t count, collc_dtype dtype, int root, collc_req *ret_req);
COLLC_EXPORT int collc_reduce(struct collc_comm *comm, const void *sendbuf, void *recvbuf,
			      size_t count, collc_dtype dtype, collc_redop op, int root,
			      collc_req *ret_req);

/*
 * All-to-all: block p (count elements) of sendbuf goes to rank p, whose block
 * r of recvbuf receives it from rank r. Both buffers hold nranks * count
 * elements and must not overlap (no in-place form).
 */
COLLC_EXPORT int collc_alltoall(struct collc_comm *comm, const void *sendbuf, void *recvbuf,
				size_t count, collc_dtype dtype, collc_req *ret_req);
/*
 * All-to-all with per-rank counts and displacements (elements, nranks of
 * each): sendcounts[p] elements at sendbuf + sdispls[p] go to rank p, and
 * recvcounts[p] elements from rank p land at recvbuf + rdispls[p]. Rank i's
 * sendcounts[j] must equal rank j's recvcounts[i], else every rank's call ends
 * with -EINVAL. The arrays are copied at the call; the buffers must not
 * overlap. Counts may be 0.
 */
COLLC_EXPORT int collc_alltoallv(struct collc_comm *comm, const void *sendbuf,
				 const size_t *sendcounts, const size_t *sdispls, void *recvbuf,
				 const size_t *recvcounts, const size_t *rdispls, collc_dtype dtype,
				 collc_req *ret_req);
/*
 * Point to point: sends and receives between two ranks match in the order
 * each posted them (per sender, receiver and communicator, as in NCCL). A
 * send and its receive with different counts or dtypes end with -EINVAL on
 * both; a peer that never posts is covered by the communicator's timeout;
 * peer may be the caller itself.
 */
COLLC_EXPORT int collc_send(struct collc_comm *comm, const void *buf, size_t count,
			    collc_dtype dtype, int peer, collc_req *ret_req);
COLLC_EXPORT int collc_recv(struct collc_comm *comm, void *buf, size_t count, collc_dtype dtype,
			    int peer, collc_req *ret_req);

/*
 * Stream-ordered forms: the collective starts after the work enqueued on
 * `stream` before the call and the work enqueued after it sees the result;
 * the call returns once enqueued (nothing waits on the host). Same arguments
 * as the host forms, without ret_req, stream last (NULL: the legacy default
 * stream). Buffers are registered device memory of the communicator's device
 * (collc_mem_alloc or collc_mem_register); host communicators (device -1)
 * have no stream forms: -EINVAL.
 *
 * While `stream` is being captured (cudaStreamBeginCapture), the call records
 * into the graph instead: every replay of the graph runs a new collective
 * with the captured arguments, and every rank must replay its graphs in the
 * same order. Captured collectives of one communicator are matched among
 * themselves by replay order, apart from the ones enqueued directly.
 * collc_comm_init() on a GPU prepares what the stream forms need (memory
 * mapped once per ctx and GPU), so none of it happens inside a capture;
 * send and receive cannot be captured (-EOPNOTSUPP).
 *
 * An error (a peer died, a mismatch, a timeout, an abort) never leaves the
 * stream waiting: the stream goes on, the result is undefined, and
 * collc_comm_get_async_error() reports the error. The mechanism is stream
 * memory operations on words collcd watches (no kernel is launched); where
 * the driver has none, a one-thread gate kernel per collective does the same
 * ($COLLC_STREAM_PATH=auto|memops|kernel chooses; collc_comm_get_stream_path()
 * says which).
 */
struct CUstream_st; /* cudaStream_t without CUDA headers */
COLLC_EXPORT int collc_allreduce_stream(struct collc_comm *comm, const void *sendbuf, void *recvbuf,
					size_t count, collc_dtype dtype, collc_redop op,
					struct CUstream_st *stream);
COLLC_EXPORT int collc_allgather_stream(struct collc_comm *comm, const void *sendbuf, void *recvbuf,
					size_t sendcount, collc_dtype dtype,
					struct CUstream_st *stream);
COLLC_EXPORT int collc_reduce_scatter_stream(struct collc_comm *comm, const void *sendbuf,
					     void *recvbuf, size_t recvcount, collc_dtype dtype,
					     collc_redop op, struct CUstream_st *stream);
COLLC_EXPORT int collc_broadcast_stream(struct collc_comm *comm, const void *sendbuf, void *recvbuf,
					size_t count, collc_dtype dtype, int root,
					struct CUstream_st *stream);
COLLC_EXPORT int collc_reduce_stream(struct collc_comm *comm, const void *sendbuf, void *recvbuf,
				     size_t count, collc_dtype dtype, collc_redop op, int root,
				     struct CUstream_st *stream);
COLLC_EXPORT int collc_alltoall_stream(struct collc_comm *comm, const void *sendbuf, void *recvbuf,
				       size_t count, collc_dtype dtype, struct CUstream_st *stream);
COLLC_EXPORT int collc_send_stream(struct collc_comm *comm, const void *buf, size_t count,
				   collc_dtype dtype, int peer, struct CUstream_st *stream);
COLLC_EXPORT int collc_recv_stream(struct collc_comm *comm, void *buf, size_t count,
				   collc_dtype dtype, int peer, struct CUstream_st *stream);
/*
 * Groups of stream-ordered calls from one thread, as ncclGroupStart/End: the
 * calls in between start their collectives on their streams at once, and
 * their streams' waits for the results are enqueued at the outermost
 * collc_group_end(). Needed where one thread drives several ranks whose
 * calls depend on each other (a send and its receive, two ranks of one GPU):
 * a wait enqueued before a peer's start could hold the GPU queue that start
 * needs. Nests; 0, -EINVAL (end without start), or from collc_group_end()
 * the first error enqueuing a wait (the collectives still ran).
 */
COLLC_EXPORT int collc_group_start(void);
COLLC_EXPORT int collc_group_end(void);
/*
 * 0, or the first error of a stream-ordered collective of this communicator
 * (sticky, like ncclCommGetAsyncError); -EINVAL for a NULL comm.
 */
COLLC_EXPORT int collc_comm_get_async_error(struct collc_comm *comm);
/* How the stream forms of a communicator reach its streams. */
#define COLLC_STREAM_PATH_MEMOPS 1 /* stream memory operations: nothing launched */
#define COLLC_STREAM_PATH_KERNEL 2 /* one tiny gate kernel per collective */
/*
 * COLLC_STREAM_PATH_MEMOPS or _KERNEL: the path every stream-ordered
 * collective of comm takes, chosen per GPU from the driver and
 * $COLLC_STREAM_PATH. -EINVAL for a NULL or host communicator, or a
 * $COLLC_STREAM_PATH other than auto, memops or kernel; -EOPNOTSUPP for
 * memops forced where there are none; -ENODEV without a CUDA driver; -ENOEXEC
 * or -ENOMEM when the gate kernel cannot be loaded.
 */
COLLC_EXPORT int collc_comm_get_stream_path(struct collc_comm *comm);

/*
 * Returns the collective's own status: 0, or for example -ETIMEDOUT, -EPIPE
 * (a peer rank died), -ECANCELED (the communicator was aborted). timeout_ms -1
 * waits without limit; a wait that runs out returns -EAGAIN and the request
 * stays pending. A request is forgotten once wait or test reported it done.
 */
COLLC_EXPORT int collc_wait(struct collc_ctx *ctx, collc_req req, int timeout_ms);
COLLC_EXPORT int collc_test(struct collc_ctx *ctx, collc_req req); /* 1 done, 0 pending, <0 error */
COLLC_EXPORT int collc_event_fd(struct collc_ctx *ctx); /* readable when completions wait */

COLLC_EXPORT const char *collc_strerror(int err);
COLLC_EXPORT size_t collc_dtype_size(collc_dtype dtype); /* 0 for an unknown dtype */

#ifdef __cplusplus
}
#endif

#endif /* COLLC_H */
