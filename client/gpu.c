/* SPDX-License-Identifier: MIT */
/*
 * libcollc's GPU side: device UUIDs, mapping collcd's VMM allocations, and
 * CUDA IPC handles for registrations. The driver is dlopen()ed on first use,
 * so libcollc links no CUDA library and works on machines without GPUs.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/gate_kernel.h"
#include "client/gpu.h"
#include "common/dlsyms.h"
#include "include/collc.h"

#ifdef COLLC_HAVE_CUDA
#include <cuda.h>

static struct {
	CUresult (*init)(unsigned int);
	CUresult (*device_get)(CUdevice *, int);
	CUresult (*device_uuid)(CUuuid *, CUdevice);
	CUresult (*ctx_get)(CUcontext *);
	CUresult (*ctx_set)(CUcontext);
	CUresult (*primary_retain)(CUcontext *, CUdevice);
	CUresult (*import)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
	CUresult (*release)(CUmemGenericAllocationHandle);
	CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
	CUresult (*addr_free)(CUdeviceptr, size_t);
	CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
			unsigned long long);
	CUresult (*unmap)(CUdeviceptr, size_t);
	CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*range)(CUdeviceptr *, size_t *, CUdeviceptr);
	CUresult (*ipc_handle)(CUipcMemHandle *, CUdeviceptr);
	CUresult (*ptr_attr)(void *, CUpointer_attribute, CUdeviceptr);
	CUresult (*host_register)(void *, size_t, unsigned int);
	CUresult (*host_unregister)(void *);
	CUresult (*host_dev_ptr)(CUdeviceptr *, void *, unsigned int);
	CUresult (*write_value)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
	CUresult (*wait_value)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
	CUresult (*is_capturing)(CUstream, CUstreamCaptureStatus *);
	CUresult (*stream_ctx)(CUstream, CUcontext *);
	CUresult (*ctx_device)(CUdevice *);
	CUresult (*stream_create)(CUstream *, unsigned int);
	CUresult (*memset32)(CUdeviceptr, unsigned int, size_t, CUstream);
	CUresult (*stream_sync)(CUstream);
	CUresult (*device_attr)(int *, CUdevice_attribute, CUdevice);
	CUresult (*module_load)(CUmodule *, const void *);
	CUresult (*module_function)(CUfunction *, CUmodule, const char *);
	CUresult (*launch)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
			   unsigned int, unsigned int, unsigned int, CUstream, void **, void **);
	CUresult (*func_load)(CUfunction); /* CUDA 12.4 on; NULL before */
	int memops_v2, memops_v1;          /* which stream memory operations write/wait_value are */
} cu;

/* The gate kernel's image (gate_image.c, made from gate_kernel.cu at build time). */
extern const unsigned char collc__gate_image[];

#define GATE_DEVICES  64
#define GATE_CONTEXTS 64

/*
 * The stream gates' path per device (0: not chosen yet), and the gate kernel
 * per context it was loaded into. Loaded once and kept for the process.
 */
static struct {
	pthread_mutex_t lock;
	int path[GATE_DEVICES];
	uint8_t primed[GATE_DEVICES]; /* the kernel is in the device's primary context */
	struct {
		CUcontext ctx;
		CUfunction fn;
	} fn[GATE_CONTEXTS];
	int nfn;
} gate = { .lock = PTHREAD_MUTEX_INITIALIZER };

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static int cu_state = -ENODEV;

static void cu_load(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	const struct dl_sym syms[] = {
		{ "cuInit", (void **)&cu.init },
		{ "cuDeviceGet", (void **)&cu.device_get },
		{ "cuDeviceGetUuid_v2", (void **)&cu.device_uuid },
		{ "cuCtxGetCurrent", (void **)&cu.ctx_get },
		{ "cuCtxSetCurrent", (void **)&cu.ctx_set },
		{ "cuDevicePrimaryCtxRetain", (void **)&cu.primary_retain },
		{ "cuMemImportFromShareableHandle", (void **)&cu.import },
		{ "cuMemRelease", (void **)&cu.release },
		{ "cuMemAddressReserve", (void **)&cu.reserve },
		{ "cuMemAddressFree", (void **)&cu.addr_free },
		{ "cuMemMap", (void **)&cu.map },
		{ "cuMemUnmap", (void **)&cu.unmap },
		{ "cuMemSetAccess", (void **)&cu.set_access },
		{ "cuMemGetAddressRange_v2", (void **)&cu.range },
		{ "cuIpcGetMemHandle", (void **)&cu.ipc_handle },
		{ "cuPointerGetAttribute", (void **)&cu.ptr_attr },
		{ "cuMemHostRegister_v2", (void **)&cu.host_register },
		{ "cuMemHostUnregister", (void **)&cu.host_unregister },
		{ "cuMemHostGetDevicePointer_v2", (void **)&cu.host_dev_ptr },
		{ "cuStreamIsCapturing", (void **)&cu.is_capturing },
		{ "cuStreamGetCtx", (void **)&cu.stream_ctx },
		{ "cuCtxGetDevice", (void **)&cu.ctx_device },
		{ "cuStreamCreate", (void **)&cu.stream_create },
		{ "cuMemsetD32Async", (void **)&cu.memset32 },
		{ "cuStreamSynchronize", (void **)&cu.stream_sync },
		{ "cuDeviceGetAttribute", (void **)&cu.device_attr },
		{ "cuModuleLoadData", (void **)&cu.module_load },
		{ "cuModuleGetFunction", (void **)&cu.module_function },
		{ "cuLaunchKernel", (void **)&cu.launch },
	};
	const struct dl_sym memops_v2[] = {
		{ "cuStreamWriteValue32_v2", (void **)&cu.write_value },
		{ "cuStreamWaitValue32_v2", (void **)&cu.wait_value },
	};
	const struct dl_sym memops_v1[] = {
		{ "cuStreamWriteValue32", (void **)&cu.write_value },
		{ "cuStreamWaitValue32", (void **)&cu.wait_value },
	};

	if (!h || dl_syms(h, syms, sizeof(syms) / sizeof(syms[0])))
		return;
	/* Optional: without stream memory operations the gate kernel stands in. */
	if (!dl_syms(h, memops_v2, 2))
		cu.memops_v2 = 1;
	else if (!dl_syms(h, memops_v1, 2))
		cu.memops_v1 = 1;
	cu.func_load = (CUresult(*)(CUfunction))dlsym(h, "cuFuncLoad");
	if (cu.init(0) != CUDA_SUCCESS)
		return;
	cu_state = 0;
}

/* Loads the driver and makes a context of `device` current if none is. */
static int cu_ready(int device, CUdevice *ret_dev)
{
	CUcontext ctx = NULL;

	pthread_once(&cu_once, cu_load);
	if (cu_state < 0)
		return cu_state;
	if (cu.device_get(ret_dev, device) != CUDA_SUCCESS)
		return -ENODEV;
	if (cu.ctx_get(&ctx) == CUDA_SUCCESS && ctx)
		return 0;
	/* The runtime uses the primary context too: this is the one it would make. */
	if (cu.primary_retain(&ctx, *ret_dev) != CUDA_SUCCESS || cu.ctx_set(ctx) != CUDA_SUCCESS)
		return -ENODEV;
	return 0;
}

int collc__gpu_uuid(int device, uint8_t uuid[16])
{
	CUdevice dev;
	CUuuid u;
	int r = cu_ready(device, &dev);

	if (r < 0)
		return r;
	if (cu.device_uuid(&u, dev) != CUDA_SUCCESS)
		return -ENODEV;
	memcpy(uuid, u.bytes, 16);
	return 0;
}

int collc__gpu_map(int device, int fd, size_t size, uintptr_t *ret_ptr)
{
	CUmemGenericAllocationHandle h;
	CUmemAccessDesc acc = { 0 };
	CUdeviceptr p = 0;
	CUdevice dev;
	int r = cu_ready(device, &dev);

	if (r < 0)
		return r;
	if (cu.import(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) !=
	    CUDA_SUCCESS)
		return -EINVAL;
	r = -ENOMEM;
	if (cu.reserve(&p, size, 0, 0, 0) != CUDA_SUCCESS)
		goto err_release;
	if (cu.map(p, size, 0, h, 0) != CUDA_SUCCESS)
		goto err_free;
	acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	acc.location.id = dev;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	if (cu.set_access(p, size, &acc, 1) != CUDA_SUCCESS)
		goto err_unmap;
	cu.release(h); /* the mapping keeps the memory */
	*ret_ptr = (uintptr_t)p;
	return 0;

err_unmap:
	cu.unmap(p, size);
err_free:
	cu.addr_free(p, size);
err_release:
	cu.release(h);
	return r;
}

void collc__gpu_unmap(uintptr_t ptr, size_t size)
{
	if (cu_state < 0 || !ptr)
		return;
	cu.unmap((CUdeviceptr)ptr, size);
	cu.addr_free((CUdeviceptr)ptr, size);
}

int collc__gpu_ipc(int device, uintptr_t ptr, uint8_t handle[64], uint64_t *ret_offset,
		   uint64_t *ret_alloc_size)
{
	CUdeviceptr base = 0;
	CUipcMemHandle h;
	size_t size = 0;
	CUdevice dev;
	int r = cu_ready(device, &dev);

	if (r < 0)
		return r;
	if (cu.range(&base, &size, (CUdeviceptr)ptr) != CUDA_SUCCESS)
		return -EINVAL; /* not device memory of this process */
	if (cu.ipc_handle(&h, base) != CUDA_SUCCESS)
		return -EINVAL; /* e.g. memory from a pool or from VMM */
	memcpy(handle, h.reserved, 64);
	*ret_offset = (uint64_t)(ptr - (uintptr_t)base);
	*ret_alloc_size = size;
	return 0;
}

int collc__gpu_buffer_id(uintptr_t ptr, uint64_t *ret_id)
{
	unsigned long long id = 0;

	if (cu_state < 0)
		return cu_state;
	if (cu.ptr_attr(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)ptr) != CUDA_SUCCESS)
		return -EINVAL;
	*ret_id = id;
	return 0;
}

int collc__gpu_host_map(int device, void *p, size_t size, uint64_t *ret_dev)
{
	CUdeviceptr d = 0;
	CUdevice dev;
	int r = cu_ready(device, &dev);

	if (r < 0)
		return r;
	if (cu.host_register(p, size, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE) !=
	    CUDA_SUCCESS)
		return -ENOMEM;
	if (cu.host_dev_ptr(&d, p, 0) != CUDA_SUCCESS) {
		cu.host_unregister(p);
		return -ENOMEM;
	}
	*ret_dev = (uint64_t)d;
	return 0;
}

void collc__gpu_host_unmap(void *p)
{
	if (cu_state == 0)
		cu.host_unregister(p);
}

int collc__gpu_stream_device(void *stream, int *ret_device)
{
	CUcontext c = NULL, old = NULL;
	CUdevice dev;
	int r = 0;

	pthread_once(&cu_once, cu_load);
	if (cu_state < 0)
		return cu_state;
	if (!stream)
		/* The legacy default stream belongs to the current context. */
		return cu.ctx_device(&dev) == CUDA_SUCCESS ? (*ret_device = (int)dev, 0) : -EINVAL;
	if (cu.stream_ctx((CUstream)stream, &c) != CUDA_SUCCESS || !c)
		return -EINVAL;
	cu.ctx_get(&old);
	if (c != old && cu.ctx_set(c) != CUDA_SUCCESS)
		return -EINVAL;
	if (cu.ctx_device(&dev) != CUDA_SUCCESS)
		r = -EINVAL;
	if (c != old)
		cu.ctx_set(old);
	if (r == 0)
		*ret_device = (int)dev;
	return r;
}

int collc__gpu_capturing(void *stream)
{
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;

	if (cu_state < 0)
		return cu_state;
	if (cu.is_capturing((CUstream)stream, &st) != CUDA_SUCCESS)
		return -EINVAL;
	if (st == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
		return -EINVAL;
	return st == CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

/* The context a stream belongs to (NULL: the current context's legacy stream). */
static int stream_context(CUstream s, CUcontext *ret_ctx)
{
	CUcontext c = NULL;

	if (s ? cu.stream_ctx(s, &c) != CUDA_SUCCESS : cu.ctx_get(&c) != CUDA_SUCCESS)
		return -EINVAL;
	if (!c)
		return -EINVAL;
	*ret_ctx = c;
	return 0;
}

/*
 * The gate kernel in context c, loaded there first when load is set. Loading
 * happens at comm_init or at an uncaptured call, never inside a capture.
 * Under gate.lock.
 */
static int gate_function(CUcontext c, int load, CUfunction *ret_fn)
{
	CUcontext old = NULL;
	CUmodule m;
	CUfunction f;
	CUresult e;
	int r = 0;

	for (int i = 0; i < gate.nfn; i++)
		if (gate.fn[i].ctx == c) {
			*ret_fn = gate.fn[i].fn;
			return 0;
		}
	if (!load)
		return -EOPNOTSUPP; /* a context first met inside a capture */
	if (gate.nfn == GATE_CONTEXTS)
		return -ENOMEM;
	cu.ctx_get(&old);
	if (c != old && cu.ctx_set(c) != CUDA_SUCCESS)
		return -EINVAL;
	e = cu.module_load(&m, collc__gate_image);
	/* ENOEXEC: e.g. no code for this GPU in the image, or a PTX too new for the driver. */
	if (e != CUDA_SUCCESS)
		r = e == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -ENOEXEC;
	else if (cu.module_function(&f, m, COLLC_GATE_KERNEL) != CUDA_SUCCESS)
		r = -ENOEXEC;
	/* Under lazy module loading: now, not at a launch while a gate kernel spins. */
	else if (cu.func_load && cu.func_load(f) != CUDA_SUCCESS)
		r = -ENOEXEC;
	if (c != old)
		cu.ctx_set(old);
	if (r < 0)
		return r; /* the module stays: unloading it could wait on the GPU */
	gate.fn[gate.nfn].ctx = c;
	gate.fn[gate.nfn].fn = f;
	gate.nfn++;
	*ret_fn = f;
	return 0;
}

/* Chooses device's path once ($COLLC_STREAM_PATH, the driver, the device). Under gate.lock. */
static int gate_path(int device, CUdevice dev)
{
	const char *env, *dbg;
	int attr_v1 = -1, p;

	if (gate.path[device])
		return gate.path[device];
	if (!cu.memops_v2 && cu.memops_v1 &&
	    cu.device_attr(&attr_v1, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, dev) !=
		    CUDA_SUCCESS)
		attr_v1 = -1;
	env = getenv("COLLC_STREAM_PATH");
	p = collc__stream_path_pick(env, collc__stream_memops_usable(cu.memops_v2, cu.memops_v1,
								     attr_v1));
	gate.path[device] = p;
	/* Opt-in diagnostics: libcollc prints nothing otherwise. */
	dbg = getenv("COLLC_DEBUG");
	if (dbg && *dbg && strcmp(dbg, "0") != 0)
		fprintf(stderr,
			"collc: GPU %d: stream-ordered collectives %s %s (COLLC_STREAM_PATH=%s; "
			"driver stream memory operations: %s)%s%s\n",
			device, p < 0 ? "have" : "use",
			p < 0 ? "no path" : collc__stream_path_name(p), env && *env ? env : "auto",
			cu.memops_v2   ? "v2"
			: cu.memops_v1 ? (attr_v1 == 1 ? "v1" : "v1, not enabled")
				       : "none",
			p < 0 ? ": " : "", p < 0 ? strerror(-p) : "");
	return p;
}

int collc__gpu_stream_path(int device)
{
	CUcontext c;
	CUfunction f;
	CUdevice dev;
	int r, p;

	if (device < 0 || device >= GATE_DEVICES)
		return -EINVAL;
	pthread_mutex_lock(&gate.lock);
	p = gate.path[device];
	r = p && (p != COLLC_STREAM_PATH_KERNEL || gate.primed[device]);
	pthread_mutex_unlock(&gate.lock);
	if (r)
		return p; /* every call but the first few */
	r = cu_ready(device, &dev);
	if (r < 0)
		return r;
	pthread_mutex_lock(&gate.lock);
	p = gate_path(device, dev);
	/* The runtime's streams belong to the primary context: load the kernel there now. */
	if (p == COLLC_STREAM_PATH_KERNEL && !gate.primed[device]) {
		if (cu.primary_retain(&c, dev) != CUDA_SUCCESS)
			r = -ENODEV;
		else
			r = gate_function(c, 1, &f);
		gate.primed[device] = r == 0;
	}
	pthread_mutex_unlock(&gate.lock);
	return r < 0 ? r : p;
}

int collc__gpu_stream_ready(void *stream, int device, int capturing)
{
	CUcontext c;
	CUfunction f;
	int r, p = collc__gpu_stream_path(device);

	if (p != COLLC_STREAM_PATH_KERNEL)
		return p;
	r = stream_context((CUstream)stream, &c);
	if (r < 0)
		return r;
	pthread_mutex_lock(&gate.lock);
	r = gate_function(c, !capturing, &f);
	pthread_mutex_unlock(&gate.lock);
	return r < 0 ? r : p;
}

/* The memory operations' gate: nothing launched. */
static int gate_memops(CUstream s, uint64_t go, uint32_t go_val, uint64_t done, uint32_t done_val,
		       int rearm)
{
	/*
	 * The default write fences first: the stream's earlier work is visible
	 * before go. The wait is cyclic (done - done_val >= 0 as int32): a gate
	 * reused after an early error may move past done_val before this stream
	 * gets here. A graph's gate (rearm) holds only 0 and 1: equality.
	 */
	if (cu.write_value(s, (CUdeviceptr)go, go_val, CU_STREAM_WRITE_VALUE_DEFAULT) !=
		    CUDA_SUCCESS ||
	    cu.wait_value(s, (CUdeviceptr)done, done_val,
			  rearm ? CU_STREAM_WAIT_VALUE_EQ : CU_STREAM_WAIT_VALUE_GEQ) !=
		    CUDA_SUCCESS)
		return -EIO;
	/* Graphs wait for done == 1 and clear it for the next replay (wait-then-reset). */
	if (rearm &&
	    cu.write_value(s, (CUdeviceptr)done, 0, CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS)
		return -EIO;
	return 0;
}

/* The kernel's gate: the same three steps in one launch, so a failure enqueues nothing. */
static int gate_kernel(CUstream s, uint64_t go, uint32_t go_val, uint64_t done, uint32_t done_val,
		       int rearm)
{
	uint32_t mode = rearm ? GATE_WAIT_EQ_RESET : GATE_WAIT_GEQ;
	void *args[] = { &go, &go_val, &done, &done_val, &mode };
	CUcontext c;
	CUfunction f;
	CUresult e;
	int r = stream_context(s, &c);

	if (r < 0)
		return r;
	pthread_mutex_lock(&gate.lock);
	r = gate_function(c, 0, &f); /* loaded by collc__gpu_stream_ready() */
	pthread_mutex_unlock(&gate.lock);
	if (r < 0)
		return r;
	e = cu.launch(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL);
	if (e != CUDA_SUCCESS)
		return e == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
	return 0;
}

/* The device's path (COLLC_STREAM_PATH_*), or -errno; 0: not readied by collc__gpu_stream_ready(). */
static int path_of(int device)
{
	int p;

	if (cu_state < 0)
		return cu_state;
	if (device < 0 || device >= GATE_DEVICES)
		return -EINVAL;
	pthread_mutex_lock(&gate.lock);
	p = gate.path[device];
	pthread_mutex_unlock(&gate.lock);
	return p;
}

int collc__gpu_stream_gate(void *stream, int device, uint64_t go, uint32_t go_val, uint64_t done,
			   uint32_t done_val, int rearm)
{
	int p = path_of(device);

	if (p == COLLC_STREAM_PATH_MEMOPS)
		return gate_memops((CUstream)stream, go, go_val, done, done_val, rearm);
	if (p == COLLC_STREAM_PATH_KERNEL)
		return gate_kernel((CUstream)stream, go, go_val, done, done_val, rearm);
	return p < 0 ? p : -EINVAL; /* not readied */
}

/* The device's path, if it is memops: the halves exist only there. */
static int memops_path(int device)
{
	int p = path_of(device);

	if (p == COLLC_STREAM_PATH_MEMOPS)
		return 0;
	return p == COLLC_STREAM_PATH_KERNEL ? -EOPNOTSUPP : p < 0 ? p : -EINVAL;
}

/* One half of a memops gate: the write of go (fenced first, as in gate_memops()) or the wait. */
static int gate_half(void *stream, int device, uint64_t addr, uint32_t val, int wait)
{
	int r = memops_path(device);
	CUresult e;

	if (r < 0)
		return r;
	e = wait ? cu.wait_value((CUstream)stream, (CUdeviceptr)addr, val, CU_STREAM_WAIT_VALUE_GEQ)
		 : cu.write_value((CUstream)stream, (CUdeviceptr)addr, val,
				  CU_STREAM_WRITE_VALUE_DEFAULT);
	return e == CUDA_SUCCESS ? 0 : -EIO;
}

int collc__gpu_stream_go(void *stream, int device, uint64_t go, uint32_t go_val)
{
	return gate_half(stream, device, go, go_val, 0);
}

int collc__gpu_stream_wait(void *stream, int device, uint64_t done, uint32_t done_val)
{
	return gate_half(stream, device, done, done_val, 1);
}

int collc__gpu_poke(int device, uint64_t addr, uint32_t val, size_t n)
{
	static CUstream s; /* private and non-blocking: never behind a user's stream */
	CUdevice dev;
	int r = cu_ready(device, &dev);

	if (r < 0)
		return r;
	if (!s && cu.stream_create(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
		return -EIO;
	if (cu.memset32((CUdeviceptr)addr, val, n, s) != CUDA_SUCCESS ||
	    cu.stream_sync(s) != CUDA_SUCCESS)
		return -EIO;
	return 0;
}

#else /* !COLLC_HAVE_CUDA */

int collc__gpu_poke(int device, uint64_t addr, uint32_t val, size_t n)
{
	return -ENODEV;
}

int collc__gpu_host_map(int device, void *p, size_t size, uint64_t *ret_dev)
{
	return -ENODEV;
}

void collc__gpu_host_unmap(void *p)
{
}

int collc__gpu_stream_device(void *stream, int *ret_device)
{
	return -ENODEV;
}

int collc__gpu_capturing(void *stream)
{
	return -ENODEV;
}

int collc__gpu_stream_path(int device)
{
	return -ENODEV;
}

int collc__gpu_stream_ready(void *stream, int device, int capturing)
{
	return -ENODEV;
}

int collc__gpu_stream_gate(void *stream, int device, uint64_t go, uint32_t go_val, uint64_t done,
			   uint32_t done_val, int rearm)
{
	return -ENODEV;
}

int collc__gpu_stream_go(void *stream, int device, uint64_t go, uint32_t go_val)
{
	return -ENODEV;
}

int collc__gpu_stream_wait(void *stream, int device, uint64_t done, uint32_t done_val)
{
	return -ENODEV;
}

int collc__gpu_uuid(int device, uint8_t uuid[16])
{
	return -ENODEV;
}

int collc__gpu_map(int device, int fd, size_t size, uintptr_t *ret_ptr)
{
	return -ENODEV;
}

void collc__gpu_unmap(uintptr_t ptr, size_t size)
{
}

int collc__gpu_ipc(int device, uintptr_t ptr, uint8_t handle[64], uint64_t *ret_offset,
		   uint64_t *ret_alloc_size)
{
	return -ENODEV;
}

int collc__gpu_buffer_id(uintptr_t ptr, uint64_t *ret_id)
{
	return -ENODEV;
}

#endif
