/* SPDX-License-Identifier: MIT */
/*
 * The CUDA executor's host side: every GPU of the node keeps one persistent
 * grid (persist_kernel.cu) resident; this file finds the GPUs, enables peer
 * access, allocates the work FIFOs (mapped pinned host memory) and the
 * connections (VMM memory in the receiver's GPU), launches and stops the
 * grids, imports client memory, and watches for sticky CUDA errors.
 *
 * A GPU serves `nlanes` FIFOs (executor devices gpu * nlanes + lane), so
 * that ranks of one communicator can share a GPU: the k-th rank on a GPU
 * runs on lane k.
 *
 * Some CUDA calls never return while a grid is resident in the process
 * (DESIGN.md §6: cudaIpcOpenMemHandle, cudaFree, ...). Those run only in a
 * quiesce window (window()): the pollers stop forwarding at a collective
 * boundary that is the same on every GPU, the grids drain and exit, the calls
 * run, the grids are launched again where they stopped. The calls allowed
 * while resident (VMM, cudaHostAlloc, async copies on other streams, stream
 * queries) run at any time.
 *
 * Client memory (mem_add) is allocated or imported on the service thread,
 * which completes the request from there: an import may wait for a quiesce
 * window. The scheduler gets a plain device address and a handle it lets go
 * with mem_release. A CUDA IPC import is mapped for its own GPU only, so it
 * is marked EXEC_MEM_NO_PEER_READ: the planner runs the ring, which never
 * touches a peer's user buffers. An allocation also hands the client one end
 * of a socket pair whose other end this file polls: the memory is released
 * once the client closed every copy and the scheduler let go.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "common/atomics.h"
#include "common/futex.h"
#include "common/scm.h"
#include "daemon/cuda/grid.h"
#include "daemon/exec.h"
#include "daemon/cuda/cuda.h"
#include "daemon/log.h"
#include "proto/shm.h"
#include "proto/wire.h"

#define WINDOW_TIMEOUT_NS (30ull * 1000000000ull)
#define CLOSE_BATCH_NS    (10ull * 1000000ull) /* deferred IPC closes wait for company */

/* Driver entry points, found through the runtime: collcd does not link libcuda. */
static struct {
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
} drv;

struct gpu {
	int ord;
	char name[256];
	uint8_t uuid[16];
	size_t gran;
	cudaStream_t grid_stream, aux_stream;
	struct collc_work_fifo *fifo[CUDA_MAX_LANES]; /* mapped pinned host memory */
	struct cuda_hctrl *hctrl;                     /* mapped pinned host memory */
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
	int sock;              /* an allocation: our end; hang-up: every copy of the other is closed */
	uint8_t sched_gone;
	struct vmm v;          /* collc_mem_alloc memory, or */
	struct ipc_imp *imp;   /* a registration of imported memory */
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
	struct vmm mem[];
};

/*
 * Abort words of the communicators, in mapped host memory: the host sets a
 * communicator's word when it is revoked (cuda_comm_abort), the grid's
 * waiters read it (persist_kernel.cu check_abort). Taken at setup, given
 * back at teardown; never freed while a grid is resident.
 */
#define CUDA_REVOKE_WORDS 16384u

struct lane_track {
	uint64_t tail; /* scheduler thread only (kick) */
};

static struct gpu *gpus;
static uint32_t ngpus, nlanes, nchan;
static uint32_t trace; /* config cuda_trace */
/*
 * Config cuda_idle_sleep_ns: how long an idle channel block sleeps between
 * polls of its lane (after 4096 polls without an item); 0 spins without
 * sleeping, which takes issue slots from client kernels on the same SMs.
 */
static uint32_t idle_sleep_ns = 200;
static int require_mps;
static void (*notify)(void); /* wakes the scheduler (exec_init) */
static struct lane_track *track;
static uint64_t kicked_coll; /* newest collective whose items are all written */

static pthread_t svc_thread;
static int svc_started;
static uint32_t svc_stop;
static int svc_efd = -1;
static uint32_t svc_slow; /* the service thread sleeps in its 2 ms poll */
#define SVC_POLL_US 4     /* the service thread's poll period while collectives complete */
static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct creg *cregs;
static struct ipc_imp *imps;
static struct imp_req *imp_reqs;
static struct mem_req *mem_waiting; /* imports waiting for a window; service thread only */
/* What other threads hand the service thread; never held across a window. */
static pthread_mutex_t req_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mem_req *mem_reqs;    /* mem_add() requests not yet run */
static struct creg *rel_list;       /* mem_release() calls not yet run */
static uint32_t *revoke_words;     /* CUDA_REVOKE_WORDS, mapped host memory */
static uint64_t revoke_words_dev;  /* their device address */
static uint8_t *revoke_used;
static uint32_t revoke_hint;
static pthread_mutex_t revoke_lock = PTHREAD_MUTEX_INITIALIZER;

static uint32_t gpu_of(uint32_t dev)
{
	return dev / nlanes;
}

static uint32_t lane_of(uint32_t dev)
{
	return dev % nlanes;
}

static const char *cu_err(int e)
{
	return cudaGetErrorString((cudaError_t)e);
}

/* A sticky error or a grid gone: collcd cannot serve any more; systemd restarts it. */
static void fatal(const char *what, int err)
{
	log_err("CUDA backend: %s: %s; exiting", what, err ? cu_err(err) : "grid exited");
	_exit(1);
}

static int drv_sym(const char *name, void **fn)
{
	enum cudaDriverEntryPointQueryResult q;
	cudaError_t e = cudaGetDriverEntryPointByVersion(name, fn, 12000, cudaEnableDefault, &q);

	if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !*fn) {
		log_err("CUDA driver entry point %s not found", name);
		return -ENOSYS;
	}
	return 0;
}

static int drv_load(void)
{
	int r = 0;

	r |= drv_sym("cuMemCreate", (void **)&drv.mem_create);
	r |= drv_sym("cuMemRelease", (void **)&drv.mem_release);
	r |= drv_sym("cuMemAddressReserve", (void **)&drv.addr_reserve);
	r |= drv_sym("cuMemAddressFree", (void **)&drv.addr_free);
	r |= drv_sym("cuMemMap", (void **)&drv.mem_map);
	r |= drv_sym("cuMemUnmap", (void **)&drv.mem_unmap);
	r |= drv_sym("cuMemSetAccess", (void **)&drv.set_access);
	r |= drv_sym("cuMemExportToShareableHandle", (void **)&drv.export_fd);
	r |= drv_sym("cuMemGetAllocationGranularity", (void **)&drv.granularity);
	r |= drv_sym("cuMemGetAddressRange", (void **)&drv.addr_range);
	return r ? -ENOSYS : 0;
}

/* VMM memory: allowed while grids are resident. */

static void vmm_free(struct vmm *v)
{
	if (!v->ptr)
		return;
	cudaSetDevice(gpus[v->gpu].ord);
	drv.mem_unmap(v->ptr, v->size);
	drv.addr_free(v->ptr, v->size);
	drv.mem_release(v->h);
	v->ptr = 0;
}

static int vmm_alloc(int g, size_t size, int exportable, struct vmm *v)
{
	CUmemAllocationProp prop = { 0 };
	CUmemAccessDesc acc[COLLC_MAX_RANKS];
	size_t nacc = 0;
	CUresult e;

	memset(v, 0, sizeof(*v));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = gpus[g].ord;
	prop.requestedHandleTypes = exportable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
					       : CU_MEM_HANDLE_TYPE_NONE;
	v->gpu = g;
	v->size = (size + gpus[g].gran - 1) / gpus[g].gran * gpus[g].gran;
	cudaSetDevice(gpus[g].ord);
	e = drv.mem_create(&v->h, v->size, &prop, 0);
	if (e != CUDA_SUCCESS) {
		log_warn("gpu%d: cuMemCreate(%zu): error %d", g, v->size, (int)e);
		return -ENOMEM;
	}
	e = drv.addr_reserve(&v->ptr, v->size, gpus[g].gran, 0, 0);
	if (e != CUDA_SUCCESS)
		goto err_release;
	e = drv.mem_map(v->ptr, v->size, 0, v->h, 0);
	if (e != CUDA_SUCCESS)
		goto err_free;
	/* Every GPU that can reach this one may read and write it (peers run the algorithms). */
	for (uint32_t j = 0; j < ngpus; j++) {
		if ((int)j != g && !gpus[j].peer_ok[g])
			continue;
		acc[nacc].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		acc[nacc].location.id = gpus[j].ord;
		acc[nacc].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
		nacc++;
	}
	e = drv.set_access(v->ptr, v->size, acc, nacc);
	if (e != CUDA_SUCCESS)
		goto err_unmap;
	return 0;

err_unmap:
	drv.mem_unmap(v->ptr, v->size);
err_free:
	drv.addr_free(v->ptr, v->size);
err_release:
	drv.mem_release(v->h);
	log_warn("gpu%d: VMM allocation of %zu bytes failed: error %d", g, v->size, (int)e);
	v->ptr = 0;
	return -ENOMEM;
}

/* Grids */

static int grid_launch(struct gpu *g)
{
	struct cuda_grid_args a = { 0 };
	int e;

	for (uint32_t l = 0; l < nlanes; l++) {
		void *p;

		if (cudaHostGetDevicePointer(&p, g->fifo[l], 0) != cudaSuccess)
			return -EIO;
		a.fifo[l] = p;
		g->hctrl->lane[l].gate = CUDA_GATE_OPEN;
	}
	{
		void *p;

		if (cudaHostGetDevicePointer(&p, g->hctrl, 0) != cudaSuccess)
			return -EIO;
		a.hctrl = p;
	}
	a.ds = g->ds;
	a.nlanes = nlanes;
	a.nchannels = nchan;
	a.trace = trace;
	a.idle_sleep_ns = idle_sleep_ns;
	a.epoch = ++g->epoch;
	fence_seq_cst();
	cudaSetDevice(g->ord);
	e = cuda_grid_launch(&a, g->grid_stream);
	if (e != cudaSuccess) {
		log_err("gpu%d: grid launch: %s", g->ord, cu_err(e));
		return -EIO;
	}
	store_release(&g->running, 1u);
	return 0;
}

/* 1 running, 0 exited; a sticky error ends collcd. */
static int grid_running(struct gpu *g)
{
	cudaError_t e = cudaStreamQuery(g->grid_stream);

	if (e == cudaErrorNotReady)
		return 1;
	if (e != cudaSuccess)
		fatal("sticky error on the grid's stream", e);
	return 0;
}

static int wait_grids_exit(uint64_t timeout_ns)
{
	uint64_t t0 = now_ns();

	for (uint32_t g = 0; g < ngpus; g++) {
		if (!load_acquire(&gpus[g].running))
			continue;
		while (grid_running(&gpus[g])) {
			if (now_ns() - t0 > timeout_ns)
				return -ETIMEDOUT;
			usleep(20);
		}
		store_release(&gpus[g].running, 0u);
	}
	return 0;
}

/*
 * A quiesce window: every grid stops at one collective boundary, calls()
 * runs with no grid resident, the grids start again where they stopped.
 * Service thread only.
 */
static void window(void (*calls)(void))
{
	uint64_t t0 = now_ns(), c = 0;

	/* 1. Hold: the pollers stop forwarding and say where they are. */
	for (uint32_t g = 0; g < ngpus; g++)
		for (uint32_t l = 0; l < nlanes; l++) {
			struct cuda_hlane *h = &gpus[g].hctrl->lane[l];

			store_relaxed(&h->ack_gate, CUDA_ACK_NONE);
			/* Q1: the reset ack before the hold; pairs with the poller's read of gate. */
			store_release(&h->gate, CUDA_GATE_HOLD);
		}
	for (uint32_t g = 0; g < ngpus; g++)
		for (uint32_t l = 0; l < nlanes; l++) {
			struct cuda_hlane *h = &gpus[g].hctrl->lane[l];

			/* Q2: pairs with the poller's fence before ack_gate: ack_pos is valid. */
			while (load_acquire(&h->ack_gate) != CUDA_GATE_HOLD) {
				if (!grid_running(&gpus[g]))
					fatal("grid exited during a quiesce window", 0);
				if (now_ns() - t0 > WINDOW_TIMEOUT_NS)
					fatal("a poller did not answer the hold", 0);
				cpu_relax();
			}
			if (load_relaxed(&h->ack_coll) > c)
				c = load_relaxed(&h->ack_coll);
		}
	/* 2. Every item of collective c and older is in every FIFO once c was kicked. */
	while (load_acquire(&kicked_coll) < c) {
		if (now_ns() - t0 > WINDOW_TIMEOUT_NS)
			fatal("the scheduler did not finish writing a collective", 0);
		usleep(1);
	}
	/* 3. The boundary: on each lane, everything up to collective c. */
	for (uint32_t g = 0; g < ngpus; g++)
		for (uint32_t l = 0; l < nlanes; l++) {
			struct cuda_hlane *h = &gpus[g].hctrl->lane[l];
			struct collc_work_fifo *f = gpus[g].fifo[l];
			uint64_t b = load_relaxed(&h->ack_pos);

			for (;;) {
				struct collc_work_item *it = &f->items[b & (COLLC_FIFO_DEPTH - 1)];

				/* W1 pairs: a whole item once its seq is seen. */
				if (load_acquire(&it->seq) != b + 1 || it->kind != COLLC_WORK_COLL ||
				    it->coll_id > c)
					break;
				b++;
			}
			store_release(&h->gate, b);
		}
	/* 4. The grids finish everything before the boundary and exit. */
	if (wait_grids_exit(WINDOW_TIMEOUT_NS) < 0)
		fatal("grids did not drain for a quiesce window", 0);
	calls();
	for (uint32_t g = 0; g < ngpus; g++)
		if (grid_launch(&gpus[g]) < 0)
			fatal("relaunch after a quiesce window", cudaGetLastError());
	log_info("quiesce window: %.3f ms", (double)(now_ns() - t0) / 1e6);
}

/* Memory releases and imports (service thread) */

static void creg_release(struct creg *cr)
{
	if (cr->sock >= 0)
		close(cr->sock);
	if (cr->imp) {
		if (--cr->imp->refs == 0) {
			cr->imp->closing = 1;
			cr->imp->close_since = now_ns();
		}
	} else {
		vmm_free(&cr->v);
	}
	free(cr);
}

/* Runs inside a window with mem_lock held. */
static void window_calls(void)
{
	/* Closes first: a new allocation may come back with a handle just released. */
	for (struct ipc_imp **pi = &imps; *pi;) {
		struct ipc_imp *imp = *pi;

		if (!imp->closing) {
			pi = &imp->next;
			continue;
		}
		cudaSetDevice(gpus[imp->gpu].ord);
		cudaIpcCloseMemHandle(imp->base);
		*pi = imp->next;
		free(imp);
	}
	for (struct imp_req *q = imp_reqs; q; q = q->next) {
		struct ipc_imp *imp = calloc(1, sizeof(*imp));
		cudaIpcMemHandle_t h;
		CUdeviceptr b = 0;
		size_t sz = 0;
		void *p = NULL;
		cudaError_t e;

		if (!imp) {
			q->err = -ENOMEM;
			q->done = 1;
			continue;
		}
		memcpy(&h, q->handle, sizeof(h));
		cudaSetDevice(gpus[q->gpu].ord);
		e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
		if (e != cudaSuccess || drv.addr_range(&b, &sz, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS) {
			log_warn("CUDA IPC import failed: %s", cu_err(e));
			if (e == cudaSuccess)
				cudaIpcCloseMemHandle(p);
			cudaGetLastError();
			free(imp);
			q->err = -EINVAL;
			q->done = 1;
			continue;
		}
		memcpy(imp->handle, q->handle, sizeof(imp->handle));
		imp->gpu = q->gpu;
		imp->base = p;
		imp->size = sz - ((uintptr_t)p - (uintptr_t)b);
		imp->next = imps;
		imps = imp;
		q->imp = imp;
		q->done = 1;
	}
	imp_reqs = NULL;
}

/*
 * The grids cannot wake the scheduler; this thread does it for them (the CPU
 * executor's threads call notify() themselves): when any channel's
 * work_consumed moved, notify(). Returns 1 when something moved.
 */
static int notify_progress(void)
{
	static uint64_t last;
	uint64_t sum = 0;

	for (uint32_t d = 0; d < ngpus * nlanes; d++) {
		struct collc_work_fifo *f = gpus[d / nlanes].fifo[d % nlanes];

		for (uint32_t c = 0; c < nchan; c++)
			sum += load_relaxed(&f->ctrl.work_consumed[c].value);
	}
	if (sum == last)
		return 0;
	last = sum;
	notify();
	return 1;
}

static void svc_wake(void)
{
	uint64_t one = 1;

	(void)!write(svc_efd, &one, sizeof(one));
}

static int gpu_by_uuid(const uint8_t *uuid, int32_t ordinal)
{
	static const uint8_t zero[16];

	if (memcmp(uuid, zero, 16) == 0)
		return ordinal >= 0 && (uint32_t)ordinal < ngpus ? ordinal : -1;
	for (uint32_t g = 0; g < ngpus; g++)
		if (memcmp(gpus[g].uuid, uuid, 16) == 0)
			return (int)g;
	return -1;
}

static void mem_complete(struct mem_req *rq, int r, struct creg *cr, uint64_t addr, int fd,
			 uint32_t flags)
{
	struct exec_mem m = { .addr = addr, .size = rq->q.mem.size, .fd = fd, .flags = flags, .handle = cr };

	rq->done(rq->arg, r, r == 0 ? &m : NULL);
	free(rq);
}

/* Service thread, mem_lock held: a registration from its import. */
static void mem_register_finish(struct mem_req *rq, struct ipc_imp *imp)
{
	const struct collc_msg_mem_ipc *ip = &rq->q.ipc;
	struct creg *cr;
	uint64_t end;

	if (__builtin_add_overflow(ip->offset, rq->q.mem.size, &end) || imp->gpu != rq->gpu ||
	    end > imp->size) {
		mem_complete(rq, -EINVAL, NULL, 0, -1, 0);
		return;
	}
	cr = calloc(1, sizeof(*cr));
	if (!cr) {
		mem_complete(rq, -ENOMEM, NULL, 0, -1, 0);
		return;
	}
	imp->refs++;
	imp->closing = 0;
	cr->imp = imp;
	cr->sock = -1; /* the scheduler's reference alone keeps it */
	cr->next = cregs;
	cregs = cr;
	/* Mapped for its own GPU only: peers must not read it. */
	mem_complete(rq, 0, cr, (uint64_t)(uintptr_t)imp->base + ip->offset, -1, EXEC_MEM_NO_PEER_READ);
}

/* Service thread, mem_lock held: an allocation, whose memory the client maps through a socket. */
static void mem_alloc_run(struct mem_req *rq)
{
	struct collc_msg_mem_vmm m = { 0 };
	struct creg *cr = calloc(1, sizeof(*cr));
	int sv[2], fd = -1, r;

	if (!cr) {
		mem_complete(rq, -ENOMEM, NULL, 0, -1, 0);
		return;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		r = -errno;
		free(cr);
		mem_complete(rq, r, NULL, 0, -1, 0);
		return;
	}
	r = vmm_alloc(rq->gpu, rq->q.mem.size, 1, &cr->v);
	if (r < 0)
		goto err_close;
	if (drv.export_fd(&fd, cr->v.h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != CUDA_SUCCESS) {
		r = -EIO;
		goto err_vmm;
	}
	m.map_size = cr->v.size;
	r = scm_send(sv[0], &m, sizeof(m), &fd, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
	close(fd);
	if (r < 0)
		goto err_vmm;
	cr->sock = sv[0];
	cr->next = cregs;
	cregs = cr;
	mem_complete(rq, 0, cr, (uint64_t)cr->v.ptr, sv[1], 0);
	return;

err_vmm:
	vmm_free(&cr->v);
err_close:
	close(sv[0]);
	close(sv[1]);
	free(cr);
	mem_complete(rq, r, NULL, 0, -1, 0);
}

/* Service thread, mem_lock held: a registration, at once or after the window that imports it. */
static void mem_register_run(struct mem_req *rq)
{
	struct ipc_imp *imp;

	/* Imported once per allocation; one waiting to close is never reused. */
	for (imp = imps; imp; imp = imp->next)
		if (imp->refs && memcmp(imp->handle, rq->q.ipc.handle, sizeof(rq->q.ipc.handle)) == 0)
			break;
	if (imp) {
		mem_register_finish(rq, imp);
		return;
	}
	memcpy(rq->ir.handle, rq->q.ipc.handle, sizeof(rq->ir.handle));
	rq->ir.gpu = rq->gpu;
	rq->ir.next = imp_reqs;
	imp_reqs = &rq->ir;
	rq->next = mem_waiting;
	mem_waiting = rq;
}

/* Service thread, mem_lock held, after a window: imports are done or failed. */
static void mem_finish_imports(void)
{
	struct mem_req *list = mem_waiting, *next;

	mem_waiting = NULL;
	for (; list; list = next) {
		next = list->next;
		if (!list->ir.done) {
			list->next = mem_waiting;
			mem_waiting = list;
		} else if (list->ir.err) {
			mem_complete(list, list->ir.err, NULL, 0, -1, 0);
		} else {
			mem_register_finish(list, list->ir.imp);
		}
	}
}

/* Service thread, mem_lock held: runs what mem_add() and mem_release() queued. */
static void mem_service(void)
{
	struct mem_req *reqs, *rev = NULL, *next;
	struct creg *rel;

	if (!load_relaxed(&mem_reqs) && !load_relaxed(&rel_list))
		return;
	pthread_mutex_lock(&req_lock);
	reqs = mem_reqs;
	rel = rel_list;
	store_relaxed(&mem_reqs, NULL);
	store_relaxed(&rel_list, NULL);
	pthread_mutex_unlock(&req_lock);
	while (rel) {
		struct creg *cr = rel;

		rel = cr->rel_next;
		cr->sched_gone = 1;
		if (cr->sock >= 0)
			continue; /* the client still maps it: its hang-up releases it */
		for (struct creg **pc = &cregs; *pc; pc = &(*pc)->next)
			if (*pc == cr) {
				*pc = cr->next;
				break;
			}
		creg_release(cr);
	}
	/* Oldest first. */
	for (; reqs; reqs = next) {
		next = reqs->next;
		reqs->next = rev;
		rev = reqs;
	}
	for (; rev; rev = next) {
		next = rev->next;
		if (rev->type == COLLC_MSG_MEM_ALLOC)
			mem_alloc_run(rev);
		else
			mem_register_run(rev);
	}
}

static void *svc_main(void *arg)
{
	struct pollfd *pfd = NULL;
	uint64_t last_progress = 0;
	size_t cap = 0;

	pthread_setname_np(pthread_self(), "collc-cuda");
	/*
	 * The scheduler spins only sched_spin_us after its last event; a longer
	 * collective's completion reaches it through this thread's polls, so
	 * their period is part of the collective's latency. The default timer
	 * slack (50 us) stretched each 20 us poll to about 70 us: a 32 MiB
	 * all-reduce took 240 us end to end against 139 us pipelined.
	 */
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	while (!load_relaxed(&svc_stop)) {
		size_t n = 1;
		int need_window = 0;
		uint64_t now;

		pthread_mutex_lock(&mem_lock);
		for (struct creg *cr = cregs; cr; cr = cr->next)
			n += cr->sock >= 0;
		if (n > cap) {
			struct pollfd *t = realloc(pfd, n * 2 * sizeof(*t));

			if (t) {
				pfd = t;
				cap = n * 2;
			}
		}
		n = 0;
		if (cap) {
			pfd[n++] = (struct pollfd){ .fd = svc_efd, .events = POLLIN };
			for (struct creg *cr = cregs; cr && n < cap; cr = cr->next)
				if (cr->sock >= 0)
					pfd[n++] = (struct pollfd){ .fd = cr->sock, .events = POLLIN };
		}
		pthread_mutex_unlock(&mem_lock);
		/* SVC_POLL_US polls while collectives complete, 2 ms once idle for 10 ms. */
		if (poll(pfd, n, 0) == 0 && now_ns() - last_progress < 10000000ull)
			usleep(SVC_POLL_US);
		else if (store_relaxed(&svc_slow, 1u), fence_seq_cst(), poll(pfd, n, 2) > 0) {
			uint64_t v;

			if (pfd[0].revents & POLLIN)
				(void)!read(svc_efd, &v, sizeof(v));
			pthread_mutex_lock(&mem_lock);
			for (size_t i = 1; i < n; i++) {
				if (!(pfd[i].revents & (POLLHUP | POLLERR | POLLIN)))
					continue;
				for (struct creg **pc = &cregs; *pc; pc = &(*pc)->next)
					if ((*pc)->sock == pfd[i].fd) {
						struct creg *cr = *pc;

						/* The client let go; the scheduler may still hold it. */
						close(cr->sock);
						cr->sock = -1;
						if (cr->sched_gone) {
							*pc = cr->next;
							creg_release(cr);
						}
						break;
					}
			}
			pthread_mutex_unlock(&mem_lock);
		}
		store_relaxed(&svc_slow, 0u);
		if (notify_progress())
			last_progress = now_ns();
		/* A grid that died or exited on its own ends collcd (§7). */
		for (uint32_t g = 0; g < ngpus; g++)
			if (load_acquire(&gpus[g].running) && !grid_running(&gpus[g]))
				fatal("grid exited unexpectedly", cudaGetLastError());
		now = now_ns();
		pthread_mutex_lock(&mem_lock);
		mem_service();
		if (imp_reqs)
			need_window = 1;
		for (struct ipc_imp *imp = imps; imp && !need_window; imp = imp->next)
			if (imp->closing && (imp->refs || now - imp->close_since > CLOSE_BATCH_NS))
				need_window = 1;
		for (struct ipc_imp *imp = imps; imp; imp = imp->next)
			if (imp->refs)
				imp->closing = 0; /* registered again before it closed */
		if (need_window) {
			window(window_calls);
			mem_finish_imports();
		}
		pthread_mutex_unlock(&mem_lock);
	}
	free(pfd);
	return NULL;
}

static int cuda_mem_add(uint16_t type, const void *req, size_t len, exec_mem_done_fn *done,
			void *arg)
{
	const struct collc_msg_mem *q = req;
	struct mem_req *rq;
	int g;

	if (!gpus)
		return -ENODEV;
	if (len < sizeof(*q) || q->flags || q->size == 0 || q->device < 0)
		return -EINVAL;
	if ((type == COLLC_MSG_MEM_ALLOC && len != sizeof(struct collc_msg_mem)) ||
	    (type == COLLC_MSG_MEM_REGISTER && len != sizeof(struct collc_msg_mem_gpu_register)) ||
	    (type != COLLC_MSG_MEM_ALLOC && type != COLLC_MSG_MEM_REGISTER))
		return -EINVAL;
	g = gpu_by_uuid(q->device_uuid, q->device);
	if (g < 0)
		return -ENODEV;
	rq = calloc(1, sizeof(*rq));
	if (!rq)
		return -ENOMEM;
	rq->type = type;
	memcpy(&rq->q, req, len);
	rq->done = done;
	rq->arg = arg;
	rq->gpu = g;
	pthread_mutex_lock(&req_lock);
	rq->next = mem_reqs;
	store_relaxed(&mem_reqs, rq);
	pthread_mutex_unlock(&req_lock);
	svc_wake();
	return 0;
}

static void cuda_mem_release(void *handle)
{
	struct creg *cr = handle;

	pthread_mutex_lock(&req_lock);
	cr->rel_next = rel_list;
	store_relaxed(&rel_list, cr);
	pthread_mutex_unlock(&req_lock);
	svc_wake();
}

/* Is an nvidia-cuda-mps-server process running (it starts for our context)? */
static int mps_server_running(void)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	int found = 0;

	if (!d)
		return 0;
	while (!found && (e = readdir(d))) {
		char path[300], buf[256];
		ssize_t n;
		int fd;

		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n > 0) {
			buf[n] = '\0';
			found = strstr(buf, "nvidia-cuda-mps-server") != NULL;
		}
	}
	closedir(d);
	return found;
}

static int mps_check(void)
{
	const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
	char path[512];
	struct stat st;
	int pipe_ok, server;

	snprintf(path, sizeof(path), "%s/control", dir ? dir : "/tmp/nvidia-mps");
	pipe_ok = stat(path, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode));
	server = mps_server_running();
	if (pipe_ok && server) {
		log_info("MPS: the MPS control daemon serves these GPUs (%s)", path);
		return 0;
	}
	if (require_mps) {
		log_err("MPS: %s (%s); --require-mps: refusing to start",
			pipe_ok ? "an MPS control daemon exists but no MPS server serves collcd"
				: "no MPS control daemon (start nvidia-cuda-mps-control -d)", path);
		return -EPERM;
	}
	log_warn("MPS: %s (%s): client kernels will time-slice with the resident grids (measured "
		 "2.2x slower); start nvidia-cuda-mps-control -d before collcd",
		 pipe_ok ? "an MPS control daemon exists but no MPS server serves collcd"
			 : "no MPS control daemon found", path);
	return 0;
}

/* Backend table */

static struct collc_work_fifo *cuda_fifo(uint32_t dev)
{
	return gpus[gpu_of(dev)].fifo[lane_of(dev)];
}

static void cuda_kick(uint32_t dev)
{
	struct collc_work_fifo *f = cuda_fifo(dev);
	struct lane_track *t = &track[dev];
	uint64_t last = 0;

	/* The scheduler calls us after every item of a collective is written, on its thread. */
	for (;;) {
		struct collc_work_item *it = &f->items[t->tail & (COLLC_FIFO_DEPTH - 1)];

		if (load_acquire(&it->seq) != t->tail + 1)
			break;
		last = it->coll_id;
		t->tail++;
	}
	if (last > load_relaxed(&kicked_coll))
		store_release(&kicked_coll, last);
	/* New work after a quiet spell: the service thread polls fast again (notify_progress). */
	if (load_relaxed(&svc_slow))
		svc_wake();
}

static int cuda_place(uint32_t nranks, const struct collc_msg_comm_init *const *joins,
		      uint32_t *ret_devs)
{
	uint32_t on_gpu[COLLC_MAX_RANKS] = { 0 };

	for (uint32_t r = 0; r < nranks; r++) {
		int g;

		if (joins[r]->device < 0)
			return -ENODEV;
		g = gpu_by_uuid(joins[r]->device_uuid, joins[r]->device);
		if (g < 0)
			return -EINVAL;
		if (on_gpu[g] >= nlanes) {
			log_warn("communicator has more than %u ranks on gpu%d (config cuda_lanes)", nlanes, g);
			return -EINVAL;
		}
		ret_devs[r] = (uint32_t)g * nlanes + on_gpu[g]++;
	}
	for (uint32_t r = 0; r < nranks; r++)
		for (uint32_t s = 0; s < nranks; s++) {
			uint32_t a = gpu_of(ret_devs[r]), b = gpu_of(ret_devs[s]);

			if (a != b && !gpus[a].peer_ok[b])
				return -EINVAL;
		}
	return 0;
}

/*
 * One rank's region: its struct cuda_rank, then per channel its struct
 * cuda_chan, its ring connection buffers and its one-shot LL inbox.
 */
static size_t comm_region_bytes(uint32_t nranks)
{
	return 4096 + (size_t)nchan * (CUDA_CHAN_STRIDE + CUDA_BUFS_STRIDE + CUDA_OLL_STRIDE(nranks));
}

static uint64_t chan_addr(const struct vmm *v, uint32_t c)
{
	return (uint64_t)v->ptr + 4096 + (uint64_t)c * CUDA_CHAN_STRIDE;
}

static uint64_t bufs_addr(const struct vmm *v, uint32_t c)
{
	return (uint64_t)v->ptr + 4096 + (uint64_t)nchan * CUDA_CHAN_STRIDE + (uint64_t)c * CUDA_BUFS_STRIDE;
}

static uint64_t oll_addr(const struct vmm *v, uint32_t c, uint32_t nranks)
{
	return (uint64_t)v->ptr + 4096 + (uint64_t)nchan * (CUDA_CHAN_STRIDE + CUDA_BUFS_STRIDE) +
	       (uint64_t)c * CUDA_OLL_STRIDE(nranks);
}

/* Takes a cleared abort word; its index, or -ENOSPC. */
static int revoke_take(void)
{
	int idx = -ENOSPC;

	pthread_mutex_lock(&revoke_lock);
	for (uint32_t k = 0; k < CUDA_REVOKE_WORDS; k++) {
		uint32_t i = (revoke_hint + k) % CUDA_REVOKE_WORDS;

		if (!revoke_used[i]) {
			revoke_used[i] = 1;
			revoke_hint = i + 1;
			/* Cleared before the communicator's first item is written (W1 orders it). */
			store_relaxed(&revoke_words[i], 0u);
			idx = (int)i;
			break;
		}
	}
	pthread_mutex_unlock(&revoke_lock);
	return idx;
}

static void revoke_give(uint32_t idx)
{
	pthread_mutex_lock(&revoke_lock);
	revoke_used[idx] = 0;
	pthread_mutex_unlock(&revoke_lock);
}

/*
 * Raises the communicator's abort word twice: in mapped host memory, and in
 * every rank's struct cuda_rank (device memory, by an async copy from that
 * host word: cheap for the grid to read at the first miss of every wait).
 */
static void cuda_comm_abort(void *priv)
{
	struct ccomm *cc = priv;

	store_release(&revoke_words[cc->revoke_idx], 1u);
	for (uint32_t r = 0; r < cc->nranks; r++) {
		struct gpu *g = &gpus[cc->mem[r].gpu];
		uint64_t dst = (uint64_t)cc->mem[r].ptr + offsetof(struct cuda_rank, revoked_dev);

		cudaSetDevice(g->ord);
		if (cudaMemcpyAsync((void *)(uintptr_t)dst, &revoke_words[cc->revoke_idx], sizeof(uint32_t),
				    cudaMemcpyHostToDevice, g->aux_stream) != cudaSuccess) {
			/* The grid still sees the host word, later. */
			log_warn("communicator abort: copy to gpu%d: %s", cc->mem[r].gpu,
				 cu_err(cudaGetLastError()));
		}
	}
}

static void cuda_comm_teardown(void *priv)
{
	struct ccomm *cc = priv;

	for (uint32_t r = 0; r < cc->nranks; r++)
		vmm_free(&cc->mem[r]);
	if (cc->revoke_idx != UINT32_MAX)
		revoke_give(cc->revoke_idx);
	free(cc);
}

static int cuda_comm_setup(uint32_t nranks, const uint32_t *devs, uint64_t *ret_comm_dev,
			   void **ret_priv)
{
	struct ccomm *cc = calloc(1, sizeof(*cc) + nranks * sizeof(struct vmm));
	struct cuda_chan *img = calloc(1, sizeof(*img));
	struct cuda_rank rk;
	int r = -ENOMEM;

	if (!cc || !img)
		goto err;
	cc->nranks = nranks;
	cc->revoke_idx = UINT32_MAX;
	r = revoke_take();
	if (r < 0)
		goto err;
	cc->revoke_idx = (uint32_t)r;
	for (uint32_t i = 0; i < nranks; i++) {
		struct gpu *g = &gpus[gpu_of(devs[i])];

		r = vmm_alloc((int)gpu_of(devs[i]), comm_region_bytes(nranks), 0, &cc->mem[i]);
		if (r < 0)
			goto err;
		if (cudaMemsetAsync((void *)(uintptr_t)cc->mem[i].ptr, 0, cc->mem[i].size,
				    g->aux_stream) != cudaSuccess) {
			r = -EIO;
			goto err;
		}
	}
	for (uint32_t i = 0; i < nranks; i++) {
		struct gpu *g = &gpus[gpu_of(devs[i])];
		uint32_t nx = (i + 1) % nranks, pv = (i + nranks - 1) % nranks;

		cudaSetDevice(g->ord);
		memset(&rk, 0, sizeof(rk));
		rk.nranks = nranks;
		rk.rank = i;
		rk.nchannels = nchan;
		rk.revoked = revoke_words_dev + (uint64_t)cc->revoke_idx * sizeof(uint32_t);
		for (uint32_t c = 0; c < nchan; c++) {
			memset(img, 0, sizeof(*img));
			img->buf_simple = bufs_addr(&cc->mem[i], c);
			img->buf_ll = img->buf_simple + CUDA_SIMPLE_BYTES;
			img->buf_ll128 = img->buf_ll + CUDA_LL_BYTES;
			img->next_simple = bufs_addr(&cc->mem[nx], c);
			img->next_ll = img->next_simple + CUDA_SIMPLE_BYTES;
			img->next_ll128 = img->next_ll + CUDA_LL_BYTES;
			img->next_tail = chan_addr(&cc->mem[nx], c) + offsetof(struct cuda_chan, tail);
			img->prev_head = chan_addr(&cc->mem[pv], c) + offsetof(struct cuda_chan, head);
			/* Zeroed above: no LL flag (a generation + 1 >= 2) matches a fresh line. */
			img->oll_inbox = oll_addr(&cc->mem[i], c, nranks);
			for (uint32_t p = 0; p < nranks; p++) {
				img->peers[p] = chan_addr(&cc->mem[p], c);
				img->oll_peer[p] = oll_addr(&cc->mem[p], c, nranks);
			}
			rk.chan[c] = chan_addr(&cc->mem[i], c);
			if (cudaMemcpyAsync((void *)(uintptr_t)chan_addr(&cc->mem[i], c), img, sizeof(*img),
					    cudaMemcpyHostToDevice, g->aux_stream) != cudaSuccess ||
			    cudaStreamSynchronize(g->aux_stream) != cudaSuccess) {
				r = -EIO;
				goto err;
			}
		}
		if (cudaMemcpyAsync((void *)(uintptr_t)cc->mem[i].ptr, &rk, sizeof(rk),
				    cudaMemcpyHostToDevice, g->aux_stream) != cudaSuccess ||
		    cudaStreamSynchronize(g->aux_stream) != cudaSuccess) {
			r = -EIO;
			goto err;
		}
		ret_comm_dev[i] = (uint64_t)cc->mem[i].ptr;
	}
	free(img);
	*ret_priv = cc;
	return 0;

err:
	log_err("communicator setup on the GPUs failed: %s", strerror(-r));
	cudaGetLastError();
	free(img);
	if (cc)
		cuda_comm_teardown(cc);
	return r;
}

static void cuda_device_name(uint32_t dev, char *out, uint32_t outlen)
{
	snprintf(out, outlen, "gpu%u.%u %s", gpu_of(dev), lane_of(dev), gpus[gpu_of(dev)].name);
}

static int cuda_device_active(uint32_t dev)
{
	return 1;
}

/* Writes a quit item at the tail of every lane (the scheduler has stopped). */
static void post_quit(void)
{
	for (uint32_t d = 0; d < ngpus * nlanes; d++) {
		struct collc_work_fifo *f = cuda_fifo(d);
		uint64_t tail = UINT64_MAX, t0 = now_ns();
		struct collc_work_item *it;

		for (uint32_t c = 0; c < nchan; c++)
			if (load_acquire(&f->ctrl.work_consumed[c].value) < tail)
				tail = load_acquire(&f->ctrl.work_consumed[c].value);
		while (load_acquire(&f->items[tail & (COLLC_FIFO_DEPTH - 1)].seq) == tail + 1)
			tail++;
		for (uint32_t c = 0; c < nchan; c++)
			while (tail >= COLLC_FIFO_DEPTH &&
			       load_acquire(&f->ctrl.work_consumed[c].value) < tail - COLLC_FIFO_DEPTH + 1) {
				if (now_ns() - t0 > 2000000000ull)
					return;
				usleep(100);
			}
		it = &f->items[tail & (COLLC_FIFO_DEPTH - 1)];
		memset(it, 0, offsetof(struct collc_work_item, seq));
		it->kind = COLLC_WORK_QUIT;
		store_release(&it->seq, tail + 1);
	}
}

/* Config cuda_trace: the means the channel blocks summed (cuda/grid.h). */
static void log_trace(void)
{
	for (uint32_t d = 0; d < ngpus * nlanes; d++)
		for (uint32_t c = 0; c < nchan; c++) {
			const uint64_t *tr = cuda_fifo(d)->ctrl.work_consumed[c].reserved;
			uint64_t n = load_relaxed(&tr[CUDA_TRACE_ITEMS]);

			if (!n)
				continue;
			log_info("trace gpu%u.%u channel %u: %llu items: poller forward -> block sees it "
				 "%.2f us, block runs it %.2f us, of which state loads %.2f us and "
				 "one-shot LL push -> last line %.2f us (means)", gpu_of(d), lane_of(d), c,
				 (unsigned long long)n, load_relaxed(&tr[CUDA_TRACE_HANDOFF]) / 1e3 / n,
				 load_relaxed(&tr[CUDA_TRACE_RUN]) / 1e3 / n,
				 load_relaxed(&tr[CUDA_TRACE_SETUP]) / 1e3 / n,
				 load_relaxed(&tr[CUDA_TRACE_OLLWAIT]) / 1e3 / n);
		}
}

static void cuda_fini(void)
{
	int exited;

	if (svc_started) {
		store_relaxed(&svc_stop, 1u);
		svc_wake();
		pthread_join(svc_thread, NULL);
	}
	post_quit();
	exited = wait_grids_exit(5000000000ull) == 0;
	if (!exited) {
		log_warn("grids did not quit: aborting them");
		for (uint32_t d = 0; d < ngpus * nlanes; d++)
			store_release(&cuda_fifo(d)->ctrl.abort, 1u);
		exited = wait_grids_exit(2000000000ull) == 0;
	}
	if (!exited) {
		log_err("grids still resident at exit: leaving their memory to the driver");
		return;
	}
	if (trace)
		log_trace();
	/* Requests nobody ran end now; releases nobody ran do not matter: every creg goes. */
	while (mem_reqs) {
		struct mem_req *rq = mem_reqs;

		mem_reqs = rq->next;
		mem_complete(rq, -ECANCELED, NULL, 0, -1, 0);
	}
	while (mem_waiting) {
		struct mem_req *rq = mem_waiting;

		mem_waiting = rq->next;
		mem_complete(rq, -ECANCELED, NULL, 0, -1, 0);
	}
	imp_reqs = NULL;
	rel_list = NULL;
	while (cregs) {
		struct creg *cr = cregs;

		cregs = cr->next;
		creg_release(cr);
	}
	for (struct ipc_imp *imp = imps; imp; imp = imp->next)
		imp->closing = 1;
	window_calls();
	for (uint32_t g = 0; g < ngpus; g++) {
		cudaSetDevice(gpus[g].ord);
		for (uint32_t l = 0; l < nlanes; l++)
			cudaFreeHost(gpus[g].fifo[l]);
		cudaFreeHost(gpus[g].hctrl);
		cudaFree(gpus[g].ds);
		cudaStreamDestroy(gpus[g].grid_stream);
		cudaStreamDestroy(gpus[g].aux_stream);
		free(gpus[g].peer_ok);
	}
	free(gpus);
	gpus = NULL;
	free(track);
	cudaFreeHost(revoke_words);
	free(revoke_used);
	if (svc_efd >= 0)
		close(svc_efd);
}

static struct exec_backend cuda_backend = {
	.name = "cuda",
	.backend = COLLC_BACKEND_CUDA,
	.caps = EXEC_CAP_DEVICE_RANKS,
	/* fini frees device memory with the contexts: sched_release() leaves it. */
	.fini_frees = 1,
	.fini = cuda_fini,
	.fifo = cuda_fifo,
	.kick = cuda_kick,
	.place = cuda_place,
	.comm_setup = cuda_comm_setup,
	.comm_abort = cuda_comm_abort,
	.comm_teardown = cuda_comm_teardown,
	.device_name = cuda_device_name,
	.device_active = cuda_device_active,
	.mem_add = cuda_mem_add,
	.mem_release = cuda_mem_release,
};

/* Kernels load at start, never while a grid is resident: before the first CUDA call. */
static void eager_modules(void)
{
	setenv("CUDA_MODULE_LOADING", "EAGER", 0);
}

int exec_cuda_available(void)
{
	int n = 0;

	eager_modules();
	return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

static int gpu_init(struct gpu *g, int ord)
{
	struct cudaDeviceProp p;
	CUmemAllocationProp prop = { 0 };

	g->ord = ord;
	if (cudaSetDevice(ord) != cudaSuccess || cudaGetDeviceProperties(&p, ord) != cudaSuccess)
		return -EIO;
	snprintf(g->name, sizeof(g->name), "%s", p.name);
	memcpy(g->uuid, p.uuid.bytes, 16);
	if (p.major != 9) {
		log_err("gpu%d (%s): compute capability %d.%d; this build runs on sm_90 only", ord, p.name,
			p.major, p.minor);
		return -ENODEV;
	}
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = ord;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	if (drv.granularity(&g->gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS)
		return -EIO;
	if (cudaStreamCreateWithFlags(&g->grid_stream, cudaStreamNonBlocking) != cudaSuccess ||
	    cudaStreamCreateWithFlags(&g->aux_stream, cudaStreamNonBlocking) != cudaSuccess)
		return -EIO;
	for (uint32_t l = 0; l < nlanes; l++) {
		if (cudaHostAlloc((void **)&g->fifo[l], sizeof(struct collc_work_fifo),
				  cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess)
			return -ENOMEM;
		memset(g->fifo[l], 0, sizeof(struct collc_work_fifo));
	}
	if (cudaHostAlloc((void **)&g->hctrl, sizeof(*g->hctrl),
			  cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess)
		return -ENOMEM;
	memset(g->hctrl, 0, sizeof(*g->hctrl));
	if (cudaMalloc((void **)&g->ds, sizeof(*g->ds)) != cudaSuccess ||
	    cudaMemset(g->ds, 0, sizeof(*g->ds)) != cudaSuccess ||
	    cudaStreamSynchronize(0) != cudaSuccess)
		return -ENOMEM;
	return 0;
}

int exec_cuda_init(const struct exec_init *init, const struct exec_backend **ret)
{
	uint32_t ndevices = init->ndevices;
	uint32_t max_channels = init->max_channels ? init->max_channels : COLLC_MAX_CHANNELS;
	void *dp = NULL;
	int n = 0, r;
	cudaError_t e;

	eager_modules();
	if (max_channels < 1 || max_channels > COLLC_MAX_CHANNELS)
		return -EINVAL;
	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n == 0) {
		log_err("CUDA backend: no GPU is visible to collcd (%s)",
			e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice
				? "no NVIDIA driver or GPU on this machine"
			: e != cudaSuccess ? cu_err(e) : "0 devices");
		return -ENODEV;
	}
	if (ndevices && ndevices < (uint32_t)n)
		n = (int)ndevices;
	/* Config cuda_lanes (1..4, validated by config.c). */
	nlanes = init->cfg->cuda_lanes;
	if (nlanes < 1 || nlanes > CUDA_MAX_LANES)
		return -EINVAL;
	while ((uint32_t)n * nlanes > COLLC_MAX_RANKS)
		n--;
	nchan = max_channels;
	r = drv_load();
	if (r < 0)
		return r;
	notify = init->notify;
	require_mps = init->require_mps;
	trace = init->cfg->cuda_trace;
	idle_sleep_ns = init->cfg->cuda_idle_sleep_ns;
	if (idle_sleep_ns != 200)
		log_info("cuda_idle_sleep_ns: idle channel blocks sleep %u ns between polls", idle_sleep_ns);
	if (trace)
		log_warn("cuda_trace: the grid times its hand-offs (costs PCIe writes per item)");
	gpus = calloc((size_t)n, sizeof(*gpus));
	track = calloc((size_t)n * nlanes, sizeof(*track));
	if (!gpus || !track)
		return -ENOMEM;
	ngpus = (uint32_t)n;
	for (uint32_t g = 0; g < ngpus; g++) {
		gpus[g].peer_ok = calloc(ngpus, 1);
		if (!gpus[g].peer_ok)
			return -ENOMEM;
		r = gpu_init(&gpus[g], (int)g);
		if (r < 0) {
			log_err("gpu%u: initialisation failed: %s", g, cu_err(cudaGetLastError()));
			return r;
		}
	}
	for (uint32_t a = 0; a < ngpus; a++)
		for (uint32_t b = 0; b < ngpus; b++) {
			int ok = 0;

			if (a == b)
				continue;
			if (cudaDeviceCanAccessPeer(&ok, gpus[a].ord, gpus[b].ord) != cudaSuccess || !ok) {
				log_warn("gpu%u cannot access gpu%u: no communicator may span them", a, b);
				continue;
			}
			cudaSetDevice(gpus[a].ord);
			e = cudaDeviceEnablePeerAccess(gpus[b].ord, 0);
			if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
				log_warn("gpu%u -> gpu%u peer access: %s", a, b, cu_err(e));
				continue;
			}
			cudaGetLastError();
			gpus[a].peer_ok[b] = 1;
		}
	r = mps_check();
	if (r < 0)
		return r;
	if (cudaHostAlloc((void **)&revoke_words, CUDA_REVOKE_WORDS * sizeof(uint32_t),
			  cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess ||
	    cudaHostGetDevicePointer(&dp, revoke_words, 0) != cudaSuccess)
		return -ENOMEM;
	revoke_words_dev = (uint64_t)(uintptr_t)dp;
	memset(revoke_words, 0, CUDA_REVOKE_WORDS * sizeof(uint32_t));
	revoke_used = calloc(CUDA_REVOKE_WORDS, 1);
	if (!revoke_used)
		return -ENOMEM;
	e = (cudaError_t)cuda_grid_preload();
	if (e != cudaSuccess) {
		log_err("CUDA backend: kernel module: %s", cu_err(e));
		return -EIO;
	}
	svc_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (svc_efd < 0)
		return -errno;
	for (uint32_t g = 0; g < ngpus; g++) {
		r = grid_launch(&gpus[g]);
		if (r < 0)
			return r;
	}
	r = -pthread_create(&svc_thread, NULL, svc_main, NULL);
	if (r < 0)
		return r;
	svc_started = 1;
	cuda_backend.ndevices = ngpus * nlanes;
	cuda_backend.max_channels = nchan;
	/*
	 * On GPUs every channel is a resident block: large collectives need them
	 * all (measured on 2 x H200, 1 GiB all-reduce: 22 GB/s with 2, 264 with
	 * 32), and mid sizes want many too: one channel per 8 KiB, not 256 KiB,
	 * took the 1 MiB all-reduce from 70.5 to 38.9 us and 64 KiB from 38.1 to
	 * 23.6 us (p50; the same at 8 B and 8 MiB). One-shot LL all-reduces beat
	 * two-shot Simple up to 512 KiB there (p50 128 KiB 19.4 vs 25.9 us, 512
	 * KiB 23.9 vs 26.4; at 1 MiB 37.8 vs 29.3: bench/RESULTS.md); allgather
	 * and reduce-scatter take the same limit (8 B 16.9 and 17.2 us against
	 * 23.0 with one-shot Simple). Beyond that, reading peer buffers
	 * directly beats the ring: one-shot Simple up to 4 MiB (p50 1 MiB
	 * all-reduce 29.4 against 39.7 us two-shot; reduce-scatter 2 MiB 28.7
	 * against 40.2 with ring LL128, allgather 29.2 against 37.6), and
	 * two-shot all-reduces up to 32 MiB (pipelined 4 MiB 29.2 against 42.7
	 * us with ring LL128, 16 MiB 68.8 against 69.0; 64 MiB even). Measured
	 * on 2 GPUs, where one-shot and two-shot all-reduces read the same
	 * bytes; beyond 8 ranks the one-shot limit of all-reduce shrinks
	 * (plan.h). Every channel is a resident block, so small collectives in
	 * a row run side by side: they rotate over the channels.
	 */
	cuda_backend.defaults = (struct cfg_exec_defaults){
		.channels = nchan,
		.rotate_channels = 1,
		.channel_min_bytes = 8 << 10,
		.oneshot_ll_max_bytes = 512 << 10,
		.oneshot_max_bytes = 4 << 20,
		.twoshot_max_bytes = 32 << 20,
	};
	log_info("CUDA backend: %u GPUs x %u lanes, %u channels, grid of %u blocks x %u threads per GPU",
		 ngpus, nlanes, nchan, 1 + nlanes * nchan, CUDA_THREADS);
	*ret = &cuda_backend;
	return 0;
}
