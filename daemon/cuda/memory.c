/* SPDX-License-Identifier: MIT */
/*
 * Client memory (mem_add) is allocated or imported on the service thread,
 * which completes the request from there: an import may wait for a quiesce
 * window. The scheduler gets a plain device address and a handle it lets go
 * with mem_release. A CUDA IPC import is mapped for its own GPU only, so it
 * is marked EXEC_MEM_NO_PEER_READ: the planner runs the ring, which never
 * touches a peer's user buffers. An allocation also hands the client one end
 * of a socket pair whose other end the service thread polls: the memory is released
 * once the client closed every copy and the scheduler let go.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "common/atomics.h"
#include "common/futex.h"
#include "common/scm.h"
#include "daemon/cuda/internal.h"
#include "daemon/log.h"

struct creg *cregs;
struct ipc_imp *imps;
struct imp_req *imp_reqs;
struct mem_req *mem_waiting; /* imports waiting for a window; service thread only */
/* What other threads hand the service thread; never held across a window. */
static pthread_mutex_t req_lock = PTHREAD_MUTEX_INITIALIZER;
struct mem_req *mem_reqs; /* mem_add() requests not yet run */
struct creg *rel_list;    /* mem_release() calls not yet run */
struct hreg *hreg_rel;

/* Memory releases and imports (service thread) */

void cuda_creg_release(struct creg *cr)
{
	if (cr->sock >= 0)
		close(cr->sock);
	if (cr->imp) {
		if (--cr->imp->refs == 0) {
			cr->imp->closing = 1;
			cr->imp->close_since = now_ns();
		}
	} else {
		cuda_vmm_free(&cr->v);
	}
	free(cr);
}

/* Inside a window (or at fini, once the grids are gone): every host_unmap() so far. */
static void hreg_unregister_all(void)
{
	struct hreg *h;

	pthread_mutex_lock(&req_lock);
	h = hreg_rel;
	store_relaxed(&hreg_rel, NULL);
	pthread_mutex_unlock(&req_lock);
	while (h) {
		struct hreg *next = h->next;

		cudaHostUnregister(h->p);
		cudaGetLastError();
		if (h->len)
			munmap(h->p, h->len);
		free(h);
		h = next;
	}
}

/* Runs inside a window with mem_lock held. */
void cuda_window_calls(void)
{
	hreg_unregister_all();
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
		if (e != cudaSuccess ||
		    drv.addr_range(&b, &sz, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS) {
			log_warn("CUDA IPC import failed: %s", cuda_err(e));
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

void cuda_mem_complete(struct mem_req *rq, int r, struct creg *cr, uint64_t addr, int fd,
		       uint32_t flags)
{
	struct exec_mem m = {
		.addr = addr, .size = rq->q.mem.size, .fd = fd, .flags = flags, .handle = cr
	};

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
		cuda_mem_complete(rq, -EINVAL, NULL, 0, -1, 0);
		return;
	}
	cr = calloc(1, sizeof(*cr));
	if (!cr) {
		cuda_mem_complete(rq, -ENOMEM, NULL, 0, -1, 0);
		return;
	}
	imp->refs++;
	imp->closing = 0;
	cr->imp = imp;
	cr->sock = -1; /* the scheduler's reference alone keeps it */
	cr->next = cregs;
	cregs = cr;
	/* Mapped for its own GPU only: peers must not read it. */
	cuda_mem_complete(rq, 0, cr, (uint64_t)(uintptr_t)imp->base + ip->offset, -1,
			  EXEC_MEM_NO_PEER_READ);
}

/* Service thread, mem_lock held: an allocation, whose memory the client maps through a socket. */
static void mem_alloc_run(struct mem_req *rq)
{
	struct collc_msg_mem_vmm m = { 0 };
	struct creg *cr = calloc(1, sizeof(*cr));
	int sv[2], fd = -1, r;

	if (!cr) {
		cuda_mem_complete(rq, -ENOMEM, NULL, 0, -1, 0);
		return;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		r = -errno;
		free(cr);
		cuda_mem_complete(rq, r, NULL, 0, -1, 0);
		return;
	}
	r = cuda_vmm_alloc(rq->gpu, rq->q.mem.size, 1, &cr->v);
	if (r < 0)
		goto err_close;
	if (drv.export_fd(&fd, cr->v.h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) !=
	    CUDA_SUCCESS) {
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
	cuda_mem_complete(rq, 0, cr, (uint64_t)cr->v.ptr, sv[1], 0);
	return;

err_vmm:
	cuda_vmm_free(&cr->v);
err_close:
	close(sv[0]);
	close(sv[1]);
	free(cr);
	cuda_mem_complete(rq, r, NULL, 0, -1, 0);
}

/* Service thread, mem_lock held: a registration, at once or after the window that imports it. */
static void mem_register_run(struct mem_req *rq)
{
	struct ipc_imp *imp;

	/* Imported once per allocation; one waiting to close is never reused. */
	for (imp = imps; imp; imp = imp->next)
		if (imp->refs &&
		    memcmp(imp->handle, rq->q.ipc.handle, sizeof(rq->q.ipc.handle)) == 0)
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
void cuda_mem_finish_imports(void)
{
	struct mem_req *list = mem_waiting, *next;

	mem_waiting = NULL;
	for (; list; list = next) {
		next = list->next;
		if (!list->ir.done) {
			list->next = mem_waiting;
			mem_waiting = list;
		} else if (list->ir.err) {
			cuda_mem_complete(list, list->ir.err, NULL, 0, -1, 0);
		} else {
			mem_register_finish(list, list->ir.imp);
		}
	}
}

/* Service thread, mem_lock held: runs what mem_add() and mem_release() queued. */
void cuda_mem_service(void)
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
		cuda_creg_release(cr);
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

int cuda_mem_add(uint16_t type, const void *req, size_t len, exec_mem_done_fn *done, void *arg)
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
	g = cuda_gpu_by_uuid(q->device_uuid, q->device);
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
	cuda_svc_wake();
	return 0;
}

/*
 * host_map: registered at once (cudaHostRegister returns while a grid is
 * resident); the end of the registration waits for a quiesce window.
 */
int cuda_host_map(void *p, size_t len, uint64_t *ret_addr, void **ret_handle)
{
	struct hreg *h = calloc(1, sizeof(*h));
	void *dp = NULL;
	cudaError_t e;

	if (!h)
		return -ENOMEM;
	h->p = p;
	h->len = len;
	cudaSetDevice(gpus[0].ord);
	e = cudaHostRegister(p, len, cudaHostRegisterMapped | cudaHostRegisterPortable);
	if (e != cudaSuccess) {
		log_warn("cudaHostRegister of %zu bytes: %s", len, cuda_err(e));
		cudaGetLastError();
		free(h);
		return -EIO;
	}
	e = cudaHostGetDevicePointer(&dp, p, 0);
	if (e != cudaSuccess) {
		log_warn("cudaHostGetDevicePointer: %s", cuda_err(e));
		cudaGetLastError();
		h->len = 0; /* p stays the caller's: only the registration ends in a window */
		cuda_host_unmap(h);
		return -EIO;
	}
	*ret_addr = (uint64_t)(uintptr_t)dp;
	*ret_handle = h;
	return 0;
}

void cuda_host_unmap(void *handle)
{
	struct hreg *h = handle;

	h->since = now_ns();
	pthread_mutex_lock(&req_lock);
	h->next = hreg_rel;
	store_relaxed(&hreg_rel, h);
	pthread_mutex_unlock(&req_lock);
	cuda_svc_wake();
}

uint64_t cuda_hreg_due(void)
{
	uint64_t t = 0;

	pthread_mutex_lock(&req_lock);
	for (struct hreg *h = hreg_rel; h; h = h->next)
		if (!t || h->since < t)
			t = h->since;
	pthread_mutex_unlock(&req_lock);
	return t;
}

void cuda_mem_release(void *handle)
{
	struct creg *cr = handle;

	pthread_mutex_lock(&req_lock);
	cr->rel_next = rel_list;
	store_relaxed(&rel_list, cr);
	pthread_mutex_unlock(&req_lock);
	cuda_svc_wake();
}
