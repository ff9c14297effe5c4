/* SPDX-License-Identifier: MIT */
/*
 * A stand-in for the CUDA driver (libcuda.so.1) with the entry points
 * libnccl-collc loads, for test_nccl_mock on machines without a GPU: memory
 * is malloc()ed and tracked by range and buffer id, streams and events are
 * names, and every stream or event operation is appended to a trace the
 * test reads (mock_trace). mock_set_device stands in for cudaSetDevice.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#define EXPORT      __attribute__((visibility("default")))
#define MAX_ALLOCS  64
#define MAX_HANDLES 256
#define STREAM_BASE 0x5000u /* handles made here: a base and MAX_HANDLES after it */
#define EVENT_BASE  0x6000u

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	char *base;
	size_t size;
	unsigned long long id;
} allocs[MAX_ALLOCS];
static unsigned long long next_id = 1;
static int nstreams, nevents;
static char trace[1 << 16];
static size_t trace_len;
static __thread int cur_dev = -1;
static __thread int stack[16], depth;

EXPORT void mock_log(const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&lock);
	va_start(ap, fmt);
	if (trace_len < sizeof(trace) - 1)
		trace_len +=
			(size_t)vsnprintf(trace + trace_len, sizeof(trace) - trace_len, fmt, ap);
	va_end(ap);
	if (trace_len > sizeof(trace) - 1)
		trace_len = sizeof(trace) - 1;
	pthread_mutex_unlock(&lock);
}

/* The trace so far (lines "record E1 on S2", "wait S1 for E1", ...); reset empties it. */
EXPORT const char *mock_trace(int reset)
{
	static char copy[sizeof(trace)];

	pthread_mutex_lock(&lock);
	memcpy(copy, trace, trace_len + 1);
	if (reset) {
		trace_len = 0;
		trace[0] = 0;
	}
	pthread_mutex_unlock(&lock);
	return copy;
}

EXPORT void mock_set_device(int d)
{
	cur_dev = d;
}

EXPORT int mock_current_device(void)
{
	return cur_dev;
}

/* Streams made here are "S<n>", events "E<n>"; any other stream is the user's "u<address>". */
EXPORT const char *mock_name(const void *h, char buf[32])
{
	uintptr_t v = (uintptr_t)h;

	if (v >= STREAM_BASE && v < STREAM_BASE + MAX_HANDLES)
		snprintf(buf, 32, "S%u", (unsigned)(v - STREAM_BASE));
	else if (v >= EVENT_BASE && v < EVENT_BASE + MAX_HANDLES)
		snprintf(buf, 32, "E%u", (unsigned)(v - EVENT_BASE));
	else
		snprintf(buf, 32, "u%lx", (unsigned long)v);
	return buf;
}

EXPORT CUresult cuInit(unsigned int flags)
{
	return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorString(CUresult r, const char **s)
{
	*s = "mock error";
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(CUdevice *d)
{
	if (cur_dev < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	*d = cur_dev;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
	*d = ordinal;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
	*c = (CUcontext)(uintptr_t)(0x1000 + d);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxPushCurrent_v2(CUcontext c)
{
	if (depth == 16)
		return CUDA_ERROR_INVALID_VALUE;
	stack[depth++] = cur_dev;
	cur_dev = (int)((uintptr_t)c - 0x1000);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *c)
{
	if (depth == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	*c = (CUcontext)(uintptr_t)(0x1000 + cur_dev);
	cur_dev = stack[--depth];
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size)
{
	CUresult r = CUDA_ERROR_OUT_OF_MEMORY;

	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_ALLOCS; i++) {
		if (allocs[i].base)
			continue;
		allocs[i].base = calloc(1, size);
		if (!allocs[i].base)
			break;
		allocs[i].size = size;
		allocs[i].id = next_id++;
		*p = (CUdeviceptr)(uintptr_t)allocs[i].base;
		r = CUDA_SUCCESS;
		break;
	}
	pthread_mutex_unlock(&lock);
	return r;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
	CUresult r = CUDA_ERROR_INVALID_VALUE;

	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_ALLOCS; i++) {
		if (allocs[i].base == (char *)(uintptr_t)p) {
			free(allocs[i].base);
			allocs[i].base = NULL;
			r = CUDA_SUCCESS;
		}
	}
	pthread_mutex_unlock(&lock);
	return r;
}

/* A new buffer id for the allocation at p (what a free and a new allocation there would give). */
EXPORT void mock_renew(void *p)
{
	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_ALLOCS; i++)
		if (allocs[i].base == p)
			allocs[i].id = next_id++;
	pthread_mutex_unlock(&lock);
}

static int find(CUdeviceptr p)
{
	char *c = (char *)(uintptr_t)p;

	for (int i = 0; i < MAX_ALLOCS; i++)
		if (allocs[i].base && c >= allocs[i].base && c < allocs[i].base + allocs[i].size)
			return i;
	return -1;
}

EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
	int i;

	pthread_mutex_lock(&lock);
	i = find(p);
	if (i >= 0) {
		*base = (CUdeviceptr)(uintptr_t)allocs[i].base;
		*size = allocs[i].size;
	}
	pthread_mutex_unlock(&lock);
	return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuPointerGetAttribute(void *v, CUpointer_attribute a, CUdeviceptr p)
{
	int i;

	if (a != CU_POINTER_ATTRIBUTE_BUFFER_ID)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	i = find(p);
	if (i >= 0)
		*(unsigned long long *)v = allocs[i].id;
	pthread_mutex_unlock(&lock);
	return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* The next of the MAX_HANDLES handles after base (they wrap), counted in *n. */
static void *new_handle(uintptr_t base, int *n)
{
	uintptr_t h;

	pthread_mutex_lock(&lock);
	h = base + (uintptr_t)((*n)++ % MAX_HANDLES);
	pthread_mutex_unlock(&lock);
	return (void *)h;
}

EXPORT CUresult cuStreamCreate(CUstream *s, unsigned int flags)
{
	*s = new_handle(STREAM_BASE, &nstreams);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamDestroy_v2(CUstream s)
{
	return CUDA_SUCCESS;
}

EXPORT CUresult cuEventCreate(CUevent *e, unsigned int flags)
{
	*e = new_handle(EVENT_BASE, &nevents);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuEventDestroy_v2(CUevent e)
{
	return CUDA_SUCCESS;
}

EXPORT CUresult cuEventRecord(CUevent e, CUstream s)
{
	char a[32], b[32];

	mock_log("record %s on %s\n", mock_name(e, a), mock_name(s, b));
	return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags)
{
	char a[32], b[32];

	mock_log("wait %s for %s\n", mock_name(s, a), mock_name(e, b));
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n)
{
	memcpy((void *)(uintptr_t)d, s, n);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n)
{
	memcpy(d, (const void *)(uintptr_t)s, n);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st)
{
	char a[32];

	memcpy((void *)(uintptr_t)d, (const void *)(uintptr_t)s, n);
	mock_log("copy %p <- %p %zu on %s\n", (void *)(uintptr_t)d, (void *)(uintptr_t)s, n,
		 mock_name(st, a));
	return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamSynchronize(CUstream s)
{
	return CUDA_SUCCESS;
}
