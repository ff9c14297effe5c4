/* SPDX-License-Identifier: MIT */
/*
 * What the files of the CUDA executor's host side share (executor.c says
 * which file holds what): the driver entry points, the GPUs, client memory
 * and the service thread's state. Not seen outside daemon/cuda/.
 */
#ifndef COLLCD_CUDA_INTERNAL_H
#define COLLCD_CUDA_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "daemon/cuda/grid.h"
#include "daemon/exec.h"
#include "proto/shm.h"
#include "proto/wire.h"

/* Driver entry points, found through the runtime: collcd does not link libcuda. */
struct cuda_drv {
	CUresult (*mem_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
			       unsigned long long);
	CUresult (*mem_release)(CUmemGenericAllocationHandle);
	CUresult (*addr_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
	CUresult (*addr_free)(CUdeviceptr, size_t);
	CUresult (*mem_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
			    unsigned long long);
	CUresult (*mem_unmap)(CUdeviceptr, size_t);
	CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*export_fd)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
			      unsigned long long);
	CUresult (*granularity)(size_t *, const CUmemAllocationProp *,
				CUmemAllocationGranularity_flags);
	CUresult (*addr_range)(CUdeviceptr *, size_t *, CUdeviceptr);
};
extern struct cuda_drv drv;

struct gpu {
	int ord;
	char name[256];
	uint8_t uuid[16];
	size_t gran;
	cudaStream_t grid_stream, aux_stream;
	/* The node layer's staging copies (cuda_copy()), under copy_lock. */
	cudaStream_t copy_stream;
	pthread_mutex_t copy_lock;
	struct collc_work_fifo *fifo[CUDA_MAX_LANES]; /* mapped pinned host memory */
	struct cuda_ll_fifo *ll[CUDA_MAX_LANES]; /* mapped pinned host memory: the poller's copy */
	struct cuda_hctrl *hctrl;                /* mapped pinned host memory */
	struct cuda_crumbs *crumbs;              /* mapped pinned host memory: breadcrumbs */
	struct cuda_dstate *ds;
	uint64_t epoch;
	uint32_t running;
	uint8_t *peer_ok; /* [ngpus]: this GPU can access that one */
};

struct vmm {
	CUmemGenericAllocationHandle h;
	CUdeviceptr ptr;
	size_t size;
	int gpu;
};

/* One CUDA IPC import, shared by every registration of that allocation. */
struct ipc_imp {
	struct ipc_imp *next;
	uint8_t handle[64];
	int gpu;
	void *base;
	size_t size;
	uint32_t refs;
	uint8_t closing; /* refs dropped to 0: close in the next window */
	uint64_t close_since;
};

/* Released once the scheduler let go (sched_gone) and no client socket is open (sock -1). */
struct creg {
	struct creg *next;
	struct creg *rel_next; /* on rel_list after mem_release() */
	int sock; /* an allocation: our end; hang-up: every copy of the other is closed */
	uint8_t sched_gone;
	struct vmm v;        /* collc_mem_alloc memory, or */
	struct ipc_imp *imp; /* a registration of imported memory */
};

/* Host memory of collcd the grids store into (a client's done words), after host_map. */
struct hreg {
	struct hreg *next;
	void *p;
	size_t len;
	uint64_t since; /* host_unmap()'s time: unregistered in a window (cudaHostUnregister) */
};

struct imp_req {
	struct imp_req *next;
	uint8_t handle[64];
	int gpu;
	int done, err;
	struct ipc_imp *imp;
};

/* A mem_add() request, run and completed on the service thread. */
struct mem_req {
	struct mem_req *next;
	uint16_t type;
	struct collc_msg_mem_gpu_register q; /* MEM_ALLOC: q.mem only */
	exec_mem_done_fn *done;
	void *arg;
	int gpu;
	struct imp_req ir; /* an import waiting for a window */
};

struct ccomm {
	uint32_t nranks;
	uint32_t revoke_idx; /* its abort word in revoke_words */
	/*
	 * Spanning daemons (comm_setup_part): local[r] for the ranks that run
	 * here (the others have no mem), and per (ring, rank, channel) the ring
	 * rank receives on where it crosses to another daemon, taken by
	 * comm_link: the flat ring's, then, where group is not 0, the group
	 * ring's. NULL both for a communicator of this daemon alone.
	 */
	uint8_t *local;
	uint32_t group;        /* ranks a daemon where group rings run (hier.h), else 0 */
	struct cuda_xconn **x; /* (group ? 2 : 1) x nranks x nchan */
	struct vmm mem[];
};

struct lane_track {
	uint64_t tail; /* scheduler thread only (kick) */
};

/* executor.c: the GPUs and the configuration, set by exec_cuda_init(). */
extern struct gpu *gpus;
extern uint32_t ngpus, nlanes, nchan;
extern uint32_t trace;       /* config cuda_trace */
extern uint32_t breadcrumbs; /* config cuda_breadcrumbs; 0: gpus[].crumbs stays NULL */
/*
 * Config cuda_idle_sleep_ns: how long an idle channel block sleeps between
 * polls of its lane (after 4096 polls without an item); 0 spins without
 * sleeping, which takes issue slots from client kernels on the same SMs.
 */
extern uint32_t idle_sleep_ns;
extern int require_mps;
extern void (*notify)(void); /* wakes the scheduler (exec_init) */
extern uint64_t kicked_coll; /* newest collective whose items are all written */
extern uint64_t
	kicked_items; /* items written to every lane's FIFO, summed; the scheduler's thread writes it */

/* window.c: the service thread. */
extern uint32_t svc_stop;
extern int svc_efd;
extern uint32_t svc_slow; /* the service thread sleeps in a slow poll (2 ms, or long once idle) */

/* memory.c: client memory; the service thread's, under its mem_lock (window.c). */
extern struct creg *cregs;
extern struct ipc_imp *imps;
extern struct imp_req *imp_reqs;
extern struct mem_req *mem_waiting; /* imports waiting for a window; service thread only */
/* Handed to the service thread under memory.c's req_lock. */
extern struct mem_req *mem_reqs; /* mem_add() requests not yet run */
extern struct creg *rel_list;    /* mem_release() calls not yet run */
extern struct hreg *hreg_rel;    /* host_unmap() calls: unregistered in the next window */

/* driver.c */
const char *cuda_err(int e);
void cuda_fatal(const char *what, int err);
/* Logs every channel block's breadcrumb and its lane's progress (after a fault). */
void cuda_crumbs_log(void);
int cuda_drv_load(void);
void cuda_vmm_free(struct vmm *v);
int cuda_vmm_alloc(int g, size_t size, int exportable, struct vmm *v);

/* window.c */
int cuda_gpu_launch(struct gpu *g);
int cuda_wait_grids_exit(uint64_t timeout_ns);
void cuda_svc_wake(void);
void *cuda_svc_main(void *arg);

/* memory.c */
void cuda_creg_release(struct creg *cr);
void cuda_window_calls(void);
void cuda_mem_complete(struct mem_req *rq, int r, struct creg *cr, uint64_t addr, int fd,
		       uint32_t flags);
void cuda_mem_finish_imports(void);
void cuda_mem_service(void);
int cuda_mem_add(uint16_t type, const void *req, size_t len, exec_mem_done_fn *done, void *arg);
void cuda_mem_release(void *handle);
int cuda_host_map(void *p, size_t len, uint64_t *ret_addr, void **ret_handle);
void cuda_host_unmap(void *handle);
/* The oldest time a host_unmap() waits for a window since; 0: none waits. */
uint64_t cuda_hreg_due(void);

/* xconn.c: rings that cross to another daemon, in mapped host memory (never freed before fini). */
int cuda_xconn_take(struct cuda_xconn **ret_h, uint64_t *ret_d);
void cuda_xconn_give(struct cuda_xconn *h);
void cuda_xconn_fini(void);

/* mps.c */
int cuda_mps_check(void);

/* executor.c */
int cuda_gpu_by_uuid(const uint8_t *uuid, int32_t ordinal);

#endif
