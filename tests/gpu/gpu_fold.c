/* SPDX-License-Identifier: MIT */
/*
 * LD_PRELOAD for tests/gpu/nccl-shim.sh on a machine with fewer GPUs than
 * ranks: folds the CUDA runtime's device numbers onto the GPUs there are
 * (device d is d % count), so that nccl-tests, which gives rank i device i,
 * runs two ranks on one GPU; cudaGetDeviceCount reports at least
 * $GPU_FOLD_COUNT (default 2) devices, since nccl-tests checks it. collc
 * serves several ranks on one GPU; the real NCCL does not, so only the collc
 * runs use this.
 *
 *   cc -shared -fPIC -o libgpufold.so tests/gpu/gpu_fold.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>

typedef int (*set_fn)(int);
typedef int (*attr_fn)(int *, int, int);
typedef int (*prop_fn)(void *, int);
typedef int (*count_fn)(int *);

static count_fn real_count;

static int fold(int d)
{
	int n = 0;

	if (!real_count)
		real_count = (count_fn)dlsym(RTLD_NEXT, "cudaGetDeviceCount");
	if (!real_count || real_count(&n) != 0 || n <= 0 || d < 0)
		return d;
	return d % n;
}

__attribute__((visibility("default"))) int cudaGetDeviceCount(int *n)
{
	const char *s = getenv("GPU_FOLD_COUNT");
	int want = s ? atoi(s) : 2, r;

	if (!real_count)
		real_count = (count_fn)dlsym(RTLD_NEXT, "cudaGetDeviceCount");
	if (!real_count)
		return 1; /* cudaErrorInvalidValue */
	r = real_count(n);
	if (r == 0 && *n > 0 && *n < want)
		*n = want;
	return r;
}

__attribute__((visibility("default"))) int cudaSetDevice(int d)
{
	static set_fn next;

	if (!next)
		next = (set_fn)dlsym(RTLD_NEXT, "cudaSetDevice");
	return next(fold(d));
}

__attribute__((visibility("default"))) int cudaDeviceGetAttribute(int *v, int attr, int d)
{
	static attr_fn next;

	if (!next)
		next = (attr_fn)dlsym(RTLD_NEXT, "cudaDeviceGetAttribute");
	return next(v, attr, fold(d));
}

__attribute__((visibility("default"))) int cudaGetDeviceProperties(void *prop, int d)
{
	static prop_fn next;

	if (!next)
		next = (prop_fn)dlsym(RTLD_NEXT, "cudaGetDeviceProperties");
	return next(prop, fold(d));
}
