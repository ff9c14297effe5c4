/* SPDX-License-Identifier: MIT */
/*
 * The CUDA driver, dlopen()ed on first use: libnccl-collc links no CUDA
 * library, so it loads (and answers the calls that need no GPU) on machines
 * without one.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cuda.h>

#include "common/dlsyms.h"
#include "nccl/internal.h"

static struct {
	CUresult (*init)(unsigned int);
	CUresult (*error_string)(CUresult, const char **);
	CUresult (*ctx_get_device)(CUdevice *);
	CUresult (*range)(CUdeviceptr *, size_t *, CUdeviceptr);
	CUresult (*ptr_attr)(void *, CUpointer_attribute, CUdeviceptr);
	CUresult (*mem_alloc)(CUdeviceptr *, size_t);
	CUresult (*mem_free)(CUdeviceptr);
	CUresult (*stream_create)(CUstream *, unsigned int);
	CUresult (*stream_destroy)(CUstream);
	CUresult (*event_create)(CUevent *, unsigned int);
	CUresult (*event_destroy)(CUevent);
	CUresult (*event_record)(CUevent, CUstream);
	CUresult (*stream_wait_event)(CUstream, CUevent, unsigned int);
	CUresult (*device_get)(CUdevice *, int);
	CUresult (*primary_retain)(CUcontext *, CUdevice);
	CUresult (*ctx_push)(CUcontext);
	CUresult (*ctx_pop)(CUcontext *);
	CUresult (*htod)(CUdeviceptr, const void *, size_t);
	CUresult (*dtoh)(void *, CUdeviceptr, size_t);
	CUresult (*dtod_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
	CUresult (*stream_sync)(CUstream);
} cu;

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static int cu_state = -ENODEV;
static char cu_why[160] = "the CUDA driver was not loaded";

static void cu_load(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	const struct dl_sym syms[] = {
		{ "cuInit", (void **)&cu.init },
		{ "cuGetErrorString", (void **)&cu.error_string },
		{ "cuCtxGetDevice", (void **)&cu.ctx_get_device },
		{ "cuMemGetAddressRange_v2", (void **)&cu.range },
		{ "cuPointerGetAttribute", (void **)&cu.ptr_attr },
		{ "cuMemAlloc_v2", (void **)&cu.mem_alloc },
		{ "cuMemFree_v2", (void **)&cu.mem_free },
		{ "cuStreamCreate", (void **)&cu.stream_create },
		{ "cuStreamDestroy_v2", (void **)&cu.stream_destroy },
		{ "cuEventCreate", (void **)&cu.event_create },
		{ "cuEventDestroy_v2", (void **)&cu.event_destroy },
		{ "cuEventRecord", (void **)&cu.event_record },
		{ "cuStreamWaitEvent", (void **)&cu.stream_wait_event },
		{ "cuDeviceGet", (void **)&cu.device_get },
		{ "cuDevicePrimaryCtxRetain", (void **)&cu.primary_retain },
		{ "cuCtxPushCurrent_v2", (void **)&cu.ctx_push },
		{ "cuCtxPopCurrent_v2", (void **)&cu.ctx_pop },
		{ "cuMemcpyHtoD_v2", (void **)&cu.htod },
		{ "cuMemcpyDtoH_v2", (void **)&cu.dtoh },
		{ "cuMemcpyDtoDAsync_v2", (void **)&cu.dtod_async },
		{ "cuStreamSynchronize", (void **)&cu.stream_sync },
	};
	const char *s = NULL, *missing;
	CUresult r;

	if (!h) {
		snprintf(cu_why, sizeof(cu_why), "no CUDA driver (libcuda.so.1: %s)", dlerror());
		return;
	}
	missing = dl_syms(h, syms, sizeof(syms) / sizeof(syms[0]));
	if (missing) {
		snprintf(cu_why, sizeof(cu_why), "the CUDA driver lacks %s", missing);
		return;
	}
	r = cu.init(0);
	if (r != CUDA_SUCCESS) {
		cu.error_string(r, &s);
		snprintf(cu_why, sizeof(cu_why), "cuInit failed: %s", s ? s : "unknown error");
		return;
	}
	cu_state = 0;
}

int collc__cu_load(void)
{
	pthread_once(&cu_once, cu_load);
	return cu_state;
}

const char *collc__cu_why(void)
{
	return cu_why;
}

int collc__cu_ctx_device(int *ret_device)
{
	CUdevice d;
	int r = collc__cu_load();

	if (r < 0)
		return r;
	if (cu.ctx_get_device(&d) != CUDA_SUCCESS)
		return -ENOENT;
	*ret_device = (int)d;
	return 0;
}

int collc__cu_current_device(int *ret_device)
{
	int r = collc__cu_ctx_device(ret_device);

	/* No current context: the device the runtime would use (cudaSetDevice not called). */
	if (r == -ENOENT) {
		*ret_device = 0;
		r = 0;
	}
	return r;
}

int collc__cu_buffer_id(const void *ptr, uint64_t *ret_id)
{
	unsigned long long id = 0;

	if (cu_state < 0)
		return -ENODEV;
	if (cu.ptr_attr(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)(uintptr_t)ptr) !=
	    CUDA_SUCCESS)
		return -EINVAL;
	*ret_id = id;
	return 0;
}

int collc__cu_range(const void *ptr, uintptr_t *ret_base, size_t *ret_size, uint64_t *ret_id)
{
	CUdeviceptr base = 0;
	size_t size = 0;
	int r = collc__cu_load();

	if (r < 0)
		return r;
	if (cu.range(&base, &size, (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS)
		return -EINVAL;
	r = collc__cu_buffer_id(ptr, ret_id);
	if (r < 0)
		return r;
	*ret_base = (uintptr_t)base;
	*ret_size = size;
	return 0;
}

int collc__cu_mem_alloc(void **ret_ptr, size_t size)
{
	CUdeviceptr p = 0;
	int r = collc__cu_load();

	if (r < 0)
		return r;
	if (cu.mem_alloc(&p, size) != CUDA_SUCCESS)
		return -ENOMEM;
	*ret_ptr = (void *)(uintptr_t)p;
	return 0;
}

int collc__cu_mem_free(void *ptr)
{
	if (cu_state < 0)
		return -ENODEV;
	return cu.mem_free((CUdeviceptr)(uintptr_t)ptr) == CUDA_SUCCESS ? 0 : -EINVAL;
}

int collc__cu_stream_create(void **ret_stream)
{
	CUstream s;

	if (cu_state < 0)
		return -ENODEV;
	/* Non-blocking: the legacy default stream must not serialize the side streams. */
	if (cu.stream_create(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
		return -ENOMEM;
	*ret_stream = s;
	return 0;
}

void collc__cu_stream_destroy(void *stream)
{
	if (cu_state == 0 && stream)
		cu.stream_destroy(stream);
}

int collc__cu_event_create(void **ret_event)
{
	CUevent e;

	if (cu_state < 0)
		return -ENODEV;
	if (cu.event_create(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
		return -ENOMEM;
	*ret_event = e;
	return 0;
}

void collc__cu_event_destroy(void *event)
{
	if (cu_state == 0 && event)
		cu.event_destroy(event);
}

int collc__cu_event_record(void *event, void *stream)
{
	return cu.event_record(event, stream) == CUDA_SUCCESS ? 0 : -EINVAL;
}

int collc__cu_stream_wait_event(void *stream, void *event)
{
	return cu.stream_wait_event(stream, event, 0) == CUDA_SUCCESS ? 0 : -EINVAL;
}

/* Primary contexts retained once per device, for the life of the process (as the runtime does). */
static CUcontext primary[64];
static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;

int collc__cu_push_device(int device)
{
	CUcontext c;
	CUdevice d;
	int r = -ENODEV;

	if (cu_state < 0 || device < 0 || device >= 64)
		return -ENODEV;
	pthread_mutex_lock(&primary_lock);
	c = primary[device];
	if (!c && cu.device_get(&d, device) == CUDA_SUCCESS &&
	    cu.primary_retain(&c, d) == CUDA_SUCCESS)
		primary[device] = c;
	pthread_mutex_unlock(&primary_lock);
	if (c && cu.ctx_push(c) == CUDA_SUCCESS)
		r = 0;
	return r;
}

void collc__cu_pop(void)
{
	CUcontext c;

	cu.ctx_pop(&c);
}

int collc__cu_copy(void *dst, const void *src, size_t bytes, int to_device)
{
	CUresult r;

	if (cu_state < 0)
		return -ENODEV;
	r = to_device ? cu.htod((CUdeviceptr)(uintptr_t)dst, src, bytes)
		      : cu.dtoh(dst, (CUdeviceptr)(uintptr_t)src, bytes);
	return r == CUDA_SUCCESS ? 0 : -EIO;
}

int collc__cu_copy_async(void *dst, const void *src, size_t bytes, void *stream)
{
	if (cu_state < 0)
		return -ENODEV;
	return cu.dtod_async((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, bytes,
			     stream) == CUDA_SUCCESS
		       ? 0
		       : -EIO;
}

void collc__cu_stream_sync(void *stream)
{
	if (cu_state == 0 && stream)
		cu.stream_sync(stream);
}
