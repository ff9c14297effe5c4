/* SPDX-License-Identifier: MIT */
/*
 * The CUDA runtime and NCCL, loaded at run time (dlopen) so that collc-bench
 * builds and runs its CPU paths on machines without them. Only the few
 * entry points the bench needs, with their C ABI spelled out here: no CUDA
 * or NCCL header is needed to build. Load them only in rank processes, after
 * fork: a process that initialized CUDA must not fork CUDA users.
 */
#ifndef COLLC_BENCH_CUDART_H
#define COLLC_BENCH_CUDART_H

#include <stddef.h>

typedef int cuda_err_t;              /* cudaError_t; 0 is cudaSuccess */
typedef void *cuda_stream_t;         /* cudaStream_t */
typedef void *cuda_event_t;          /* cudaEvent_t */
typedef void *cuda_graph_t;          /* cudaGraph_t */
typedef void *cuda_graph_exec_t;     /* cudaGraphExec_t */
enum { CUDA_H2D = 1, CUDA_D2H = 2 }; /* cudaMemcpyKind */
#define CUDA_STREAM_NON_BLOCKING 0x01
enum { CUDA_CAPTURE_GLOBAL = 0, CUDA_CAPTURE_THREAD_LOCAL = 1 }; /* cudaStreamCaptureMode */

struct cudart {
	void *lib;
	const char *libname;
	cuda_err_t (*GetDeviceCount)(int *n);
	cuda_err_t (*SetDevice)(int dev);
	cuda_err_t (*Free)(void *p);
	cuda_err_t (*Malloc)(void **p, size_t bytes);
	cuda_err_t (*Memcpy)(void *dst, const void *src, size_t bytes, int kind);
	cuda_err_t (*Memset)(void *p, int v, size_t bytes);
	cuda_err_t (*DeviceSynchronize)(void);
	cuda_err_t (*StreamCreateWithFlags)(cuda_stream_t *s, unsigned flags);
	cuda_err_t (*StreamDestroy)(cuda_stream_t s);
	cuda_err_t (*StreamSynchronize)(cuda_stream_t s);
	cuda_err_t (*StreamWaitEvent)(cuda_stream_t s, cuda_event_t e, unsigned flags);
	cuda_err_t (*EventCreate)(cuda_event_t *e);
	cuda_err_t (*EventDestroy)(cuda_event_t e);
	cuda_err_t (*EventRecord)(cuda_event_t e, cuda_stream_t s);
	cuda_err_t (*EventSynchronize)(cuda_event_t e);
	cuda_err_t (*EventElapsedTime)(float *ms, cuda_event_t a, cuda_event_t b);
	const char *(*GetErrorString)(cuda_err_t e);
	/* CUDA graphs (optional: NULL where the runtime lacks them, see graph_missing). */
	cuda_err_t (*StreamBeginCapture)(cuda_stream_t s, int mode);
	cuda_err_t (*StreamEndCapture)(cuda_stream_t s, cuda_graph_t *g);
	cuda_err_t (*GraphInstantiateWithFlags)(cuda_graph_exec_t *x, cuda_graph_t g,
						unsigned long long flags);
	cuda_err_t (*GraphLaunch)(cuda_graph_exec_t x, cuda_stream_t s);
	cuda_err_t (*GraphExecDestroy)(cuda_graph_exec_t x);
	cuda_err_t (*GraphDestroy)(cuda_graph_t g);
	const char *graph_missing; /* the first graph entry point missing, or NULL */
};

/* Returns 0, or -1 with a message naming what is missing (the graph entry points may be). */
int cudart_load(struct cudart *rt, char *msg, size_t len);
const char *cudart_strerror(const struct cudart *rt, cuda_err_t e);

typedef int nccl_result_t; /* ncclResult_t; 0 is ncclSuccess */
typedef void *nccl_comm_t;
typedef void *nccl_window_t; /* ncclWindow_t (NCCL >= 2.27) */
#define NCCL_WIN_COLL_SYMMETRIC 0x01
struct nccl_unique_id {
	char internal[128];
};
enum { NCCL_SUM = 0 }; /* ncclRedOp_t */

struct nccl {
	void *lib;
	nccl_result_t (*GetVersion)(int *v);
	nccl_result_t (*GetUniqueId)(struct nccl_unique_id *id);
	nccl_result_t (*CommInitRank)(nccl_comm_t *comm, int nranks, struct nccl_unique_id id,
				      int rank);
	nccl_result_t (*CommDestroy)(nccl_comm_t comm);
	nccl_result_t (*AllReduce)(const void *s, void *r, size_t count, int dtype, int op,
				   nccl_comm_t comm, cuda_stream_t st);
	nccl_result_t (*AllGather)(const void *s, void *r, size_t sendcount, int dtype,
				   nccl_comm_t comm, cuda_stream_t st);
	nccl_result_t (*ReduceScatter)(const void *s, void *r, size_t recvcount, int dtype, int op,
				       nccl_comm_t comm, cuda_stream_t st);
	nccl_result_t (*Broadcast)(const void *s, void *r, size_t count, int dtype, int root,
				   nccl_comm_t comm, cuda_stream_t st);
	nccl_result_t (*Reduce)(const void *s, void *r, size_t count, int dtype, int op, int root,
				nccl_comm_t comm, cuda_stream_t st);
	const char *(*GetErrorString)(nccl_result_t r);
	nccl_result_t (*Send)(const void *s, size_t count, int dtype, int peer, nccl_comm_t comm,
			      cuda_stream_t st);
	nccl_result_t (*Recv)(void *r, size_t count, int dtype, int peer, nccl_comm_t comm,
			      cuda_stream_t st);
	nccl_result_t (*GroupStart)(void);
	nccl_result_t (*GroupEnd)(void);
	/* NULL where the library has no all-to-all call: grouped Send/Recv then (nccl-tests' way). */
	nccl_result_t (*AlltoAll)(const void *s, void *r, size_t count, int dtype, nccl_comm_t comm,
				  cuda_stream_t st);
	/* Symmetric windows, NCCL >= 2.27 (optional: NULL when older, see win_missing). */
	nccl_result_t (*MemAlloc)(void **p, size_t bytes);
	nccl_result_t (*MemFree)(void *p);
	nccl_result_t (*CommWindowRegister)(nccl_comm_t comm, void *buf, size_t bytes,
					    nccl_window_t *win, int flags);
	nccl_result_t (*CommWindowDeregister)(nccl_comm_t comm, nccl_window_t win);
	const char *win_missing; /* the first window entry point missing, or NULL */
};

/* Returns 0, or -1 with a message naming what is missing (the window entry points may be). */
int nccl_load(struct nccl *nc, char *msg, size_t len);
/* NCCL's ncclDataType_t for a bench dtype; -1 when NCCL lacks it. */
int nccl_dtype(int bench_dtype);

/* In a child process: how many GPUs this process sees; <0 with a message when none. */
int cuda_probe(char *msg, size_t len);

#endif /* COLLC_BENCH_CUDART_H */
