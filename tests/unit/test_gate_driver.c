/* SPDX-License-Identifier: MIT */
/*
 * client/gpu.c's stream gates against a fake CUDA driver (no GPU): which
 * path each driver and $COLLC_STREAM_PATH give, what the memory operations
 * path enqueues, and that the kernel path loads the embedded gate kernel once
 * per context (never inside a capture), launches it with the gate's words
 * and fails cleanly (-ENOEXEC, -ENOMEM, -EIO) with nothing enqueued.
 * The test includes gpu.c with dlopen/dlsym pointed at the fake.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <dlfcn.h>
#define dlopen fake_dlopen
#define dlsym  fake_dlsym
void *fake_dlopen(const char *name, int flags);
void *fake_dlsym(void *h, const char *name);
#include "client/gpu.c"
#undef dlopen
#undef dlsym

#define PRIMARY ((CUcontext)(uintptr_t)0x1000) /* device 0's primary context */
#define OTHER   ((CUcontext)(uintptr_t)0x5000) /* a context made by cuCtxCreate */
#define S_PRIM  ((CUstream)(uintptr_t)0x2000)  /* a stream of PRIMARY */
#define S_OTHER ((CUstream)(uintptr_t)0x3000)  /* a stream of OTHER */
#define MOD     ((CUmodule)(uintptr_t)0x7000)
#define FN      ((CUfunction)(uintptr_t)0x8000)

/* What the fake driver offers, and what it saw. */
static struct {
	int v2, v1, attr_v1, func_load;
	CUresult load_res, launch_res;
	CUcontext current;
	int loads, fn_loads, launches, writes, waits;
	CUcontext load_ctx[8];
	struct {
		CUfunction f;
		unsigned int dims[6], shared;
		CUstream s;
		uint64_t go, done;
		uint32_t go_val, want, mode;
	} launch;
	struct {
		CUstream s;
		uint64_t addr;
		uint32_t val;
		unsigned int flags;
	} op[8];
} drv;

static CUresult f_stub(void)
{
	return CUDA_ERROR_NOT_SUPPORTED; /* entry points this test never reaches */
}

static CUresult f_init(unsigned int flags)
{
	return CUDA_SUCCESS;
}

static CUresult f_device_get(CUdevice *d, int ordinal)
{
	*d = ordinal;
	return ordinal >= 0 && ordinal < 2 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

static CUresult f_ctx_get(CUcontext *c)
{
	*c = drv.current;
	return CUDA_SUCCESS;
}

static CUresult f_ctx_set(CUcontext c)
{
	drv.current = c;
	return CUDA_SUCCESS;
}

static CUresult f_primary_retain(CUcontext *c, CUdevice d)
{
	*c = (CUcontext)(uintptr_t)(0x1000 + 0x100 * d);
	return CUDA_SUCCESS;
}

static CUresult f_stream_ctx(CUstream s, CUcontext *c)
{
	*c = s == S_OTHER ? OTHER : PRIMARY;
	return CUDA_SUCCESS;
}

static CUresult f_attr(int *v, CUdevice_attribute a, CUdevice d)
{
	if (a != CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1 || drv.attr_v1 < 0)
		return CUDA_ERROR_INVALID_VALUE;
	*v = drv.attr_v1;
	return CUDA_SUCCESS;
}

static CUresult f_module_load(CUmodule *m, const void *image)
{
	uint32_t magic;

	memcpy(&magic, image, 4);
	assert_int_equal(magic, 0xba55ed50u); /* the embedded fat binary */
	if (drv.load_res != CUDA_SUCCESS)
		return drv.load_res;
	drv.load_ctx[drv.loads++ % 8] = drv.current;
	*m = MOD;
	return CUDA_SUCCESS;
}

static CUresult f_module_function(CUfunction *f, CUmodule m, const char *name)
{
	assert_ptr_equal(m, MOD);
	if (strcmp(name, "collc_gate_kernel") != 0)
		return CUDA_ERROR_NOT_FOUND;
	*f = FN;
	return CUDA_SUCCESS;
}

static CUresult f_func_load(CUfunction f)
{
	drv.fn_loads++;
	return CUDA_SUCCESS;
}

static CUresult f_launch(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
			 unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
			 CUstream s, void **args, void **extra)
{
	if (drv.launch_res != CUDA_SUCCESS)
		return drv.launch_res;
	drv.launches++;
	drv.launch.f = f;
	drv.launch.dims[0] = gx, drv.launch.dims[1] = gy, drv.launch.dims[2] = gz;
	drv.launch.dims[3] = bx, drv.launch.dims[4] = by, drv.launch.dims[5] = bz;
	drv.launch.shared = shared;
	drv.launch.s = s;
	/* The kernel's parameters: (uint32_t *go, uint32_t go_val, uint32_t *word, want, mode). */
	memcpy(&drv.launch.go, args[0], 8);
	memcpy(&drv.launch.go_val, args[1], 4);
	memcpy(&drv.launch.done, args[2], 8);
	memcpy(&drv.launch.want, args[3], 4);
	memcpy(&drv.launch.mode, args[4], 4);
	assert_null(extra);
	return CUDA_SUCCESS;
}

static void record(CUstream s, CUdeviceptr addr, cuuint32_t val, unsigned int flags)
{
	int i = drv.writes + drv.waits;

	if (i < 8) {
		drv.op[i].s = s;
		drv.op[i].addr = addr;
		drv.op[i].val = val;
		drv.op[i].flags = flags;
	}
}

static CUresult f_write(CUstream s, CUdeviceptr addr, cuuint32_t val, unsigned int flags)
{
	record(s, addr, val, flags);
	drv.writes++;
	return CUDA_SUCCESS;
}

static CUresult f_wait(CUstream s, CUdeviceptr addr, cuuint32_t val, unsigned int flags)
{
	record(s, addr, val, flags | 0x100u); /* 0x100: marks a wait */
	drv.waits++;
	return CUDA_SUCCESS;
}

void *fake_dlopen(const char *name, int flags)
{
	return strcmp(name, "libcuda.so.1") == 0 ? (void *)&drv : NULL;
}

void *fake_dlsym(void *h, const char *name)
{
	static const struct {
		const char *name;
		void *fn;
	} fns[] = {
		{ "cuInit", (void *)f_init },
		{ "cuDeviceGet", (void *)f_device_get },
		{ "cuCtxGetCurrent", (void *)f_ctx_get },
		{ "cuCtxSetCurrent", (void *)f_ctx_set },
		{ "cuDevicePrimaryCtxRetain", (void *)f_primary_retain },
		{ "cuStreamGetCtx", (void *)f_stream_ctx },
		{ "cuDeviceGetAttribute", (void *)f_attr },
		{ "cuModuleLoadData", (void *)f_module_load },
		{ "cuModuleGetFunction", (void *)f_module_function },
		{ "cuLaunchKernel", (void *)f_launch },
	};

	assert_ptr_equal(h, &drv);
	if (strcmp(name, "cuStreamWriteValue32_v2") == 0 ||
	    strcmp(name, "cuStreamWaitValue32_v2") == 0)
		return drv.v2 ? (strstr(name, "Write") ? (void *)f_write : (void *)f_wait) : NULL;
	if (strcmp(name, "cuStreamWriteValue32") == 0 || strcmp(name, "cuStreamWaitValue32") == 0)
		return drv.v1 ? (strstr(name, "Write") ? (void *)f_write : (void *)f_wait) : NULL;
	if (strcmp(name, "cuFuncLoad") == 0)
		return drv.func_load ? (void *)f_func_load : NULL;
	for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++)
		if (strcmp(name, fns[i].name) == 0)
			return fns[i].fn;
	return (void *)f_stub;
}

/* A fresh process's view: the driver not yet loaded, no path chosen, no kernel loaded. */
static void reset(int v2, int v1, int attr_v1, const char *env)
{
	static const pthread_once_t once = PTHREAD_ONCE_INIT;

	memset(&drv, 0, sizeof(drv));
	drv.v2 = v2, drv.v1 = v1, drv.attr_v1 = attr_v1, drv.func_load = 1;
	drv.current = PRIMARY;
	memcpy(&cu_once, &once, sizeof(once));
	cu_state = -ENODEV;
	memset(&cu, 0, sizeof(cu));
	memset(gate.path, 0, sizeof(gate.path));
	memset(gate.primed, 0, sizeof(gate.primed));
	gate.nfn = 0;
	if (env)
		setenv("COLLC_STREAM_PATH", env, 1);
	else
		unsetenv("COLLC_STREAM_PATH");
}

static void test_choice(void **state)
{
	static const struct {
		int v2, v1, attr_v1;
		const char *env;
		int want;
	} cases[] = {
		{ 1, 1, 1, NULL, COLLC_STREAM_PATH_MEMOPS },
		{ 1, 0, -1, "auto", COLLC_STREAM_PATH_MEMOPS },
		{ 0, 1, 1, NULL, COLLC_STREAM_PATH_MEMOPS },
		{ 0, 1, 0, NULL, COLLC_STREAM_PATH_KERNEL },
		{ 0, 1, -1, NULL, COLLC_STREAM_PATH_KERNEL },
		{ 0, 0, 1, NULL, COLLC_STREAM_PATH_KERNEL },
		{ 1, 0, -1, "kernel", COLLC_STREAM_PATH_KERNEL },
		{ 1, 0, -1, "memops", COLLC_STREAM_PATH_MEMOPS },
		{ 0, 0, -1, "memops", -EOPNOTSUPP },
		{ 0, 1, 0, "memops", -EOPNOTSUPP },
		{ 1, 0, -1, "fast", -EINVAL },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int got;

		reset(cases[i].v2, cases[i].v1, cases[i].attr_v1, cases[i].env);
		got = collc__gpu_stream_path(0);
		if (got != cases[i].want)
			fail_msg("case %zu: got %d, want %d", i, got, cases[i].want);
		/* Chosen once: the same answer again, and the gate takes it. */
		assert_int_equal(collc__gpu_stream_path(0), got);
		if (got < 0)
			assert_int_equal(collc__gpu_stream_gate(S_PRIM, 0, 0x10, 1, 0x20, 1, 0),
					 got);
		/* Only the kernel path loads anything, once, into the primary context. */
		assert_int_equal(drv.loads, got == COLLC_STREAM_PATH_KERNEL);
	}
	reset(1, 0, -1, NULL);
	assert_int_equal(collc__gpu_stream_path(-1), -EINVAL);
	assert_int_equal(collc__gpu_stream_path(GATE_DEVICES), -EINVAL);
	assert_int_equal(collc__gpu_stream_path(5), -ENODEV); /* no such device */
	unsetenv("COLLC_STREAM_PATH");
}

static void test_memops(void **state)
{
	(void)state;
	reset(1, 0, -1, NULL);
	assert_int_equal(collc__gpu_stream_ready(S_PRIM, 0, 0), COLLC_STREAM_PATH_MEMOPS);
	/* A stream collective: write go = ticket, wait word >= ticket (cyclic GEQ). */
	assert_int_equal(collc__gpu_stream_gate(S_PRIM, 0, 0x10, 7, 0x20, 7, 0), 0);
	assert_int_equal(drv.writes, 1);
	assert_int_equal(drv.waits, 1);
	assert_int_equal(drv.op[0].addr, 0x10);
	assert_int_equal(drv.op[0].val, 7);
	assert_int_equal(drv.op[0].flags, CU_STREAM_WRITE_VALUE_DEFAULT);
	assert_int_equal(drv.op[1].addr, 0x20);
	assert_int_equal(drv.op[1].val, 7);
	assert_int_equal(drv.op[1].flags, CU_STREAM_WAIT_VALUE_GEQ | 0x100u);
	/* A graph: write go = 1, wait word == 1, clear the word. */
	assert_int_equal(collc__gpu_stream_gate(S_PRIM, 0, 0x10, 1, 0x20, 1, 1), 0);
	assert_int_equal(drv.writes, 3);
	assert_int_equal(drv.op[3].flags, CU_STREAM_WAIT_VALUE_EQ | 0x100u);
	assert_int_equal(drv.op[4].addr, 0x20);
	assert_int_equal(drv.op[4].val, 0);
	assert_int_equal(drv.launches, 0);
	assert_int_equal(drv.loads, 0);
}

/* The halves a group enqueues apart (collc_group_start()): memops only. */
static void test_halves(void **state)
{
	(void)state;
	reset(1, 0, -1, NULL);
	assert_int_equal(collc__gpu_stream_ready(S_PRIM, 0, 0), COLLC_STREAM_PATH_MEMOPS);
	assert_int_equal(collc__gpu_stream_go(S_PRIM, 0, 0x10, 9), 0);
	assert_int_equal(collc__gpu_stream_go(S_OTHER, 0, 0x30, 4), 0);
	assert_int_equal(collc__gpu_stream_wait(S_PRIM, 0, 0x20, 9), 0);
	assert_int_equal(drv.writes, 2);
	assert_int_equal(drv.waits, 1);
	assert_ptr_equal(drv.op[0].s, S_PRIM);
	assert_int_equal(drv.op[0].flags, CU_STREAM_WRITE_VALUE_DEFAULT);
	assert_ptr_equal(drv.op[1].s, S_OTHER);
	assert_int_equal(drv.op[1].addr, 0x30);
	assert_int_equal(drv.op[2].addr, 0x20);
	assert_int_equal(drv.op[2].val, 9);
	assert_int_equal(drv.op[2].flags, CU_STREAM_WAIT_VALUE_GEQ | 0x100u);
	/* The kernel path has no halves: its one launch does both. */
	reset(1, 0, -1, "kernel");
	assert_int_equal(collc__gpu_stream_ready(S_PRIM, 0, 0), COLLC_STREAM_PATH_KERNEL);
	assert_int_equal(collc__gpu_stream_go(S_PRIM, 0, 0x10, 9), -EOPNOTSUPP);
	assert_int_equal(collc__gpu_stream_wait(S_PRIM, 0, 0x20, 9), -EOPNOTSUPP);
	assert_int_equal(drv.writes + drv.waits + drv.launches, 0);
	/* Not readied: no path yet. */
	reset(1, 0, -1, NULL);
	assert_true(collc__gpu_stream_go(S_PRIM, 0, 0x10, 9) < 0);
	assert_true(collc__gpu_stream_go(S_PRIM, -1, 0x10, 9) < 0);
	unsetenv("COLLC_STREAM_PATH");
}

static void test_kernel(void **state)
{
	(void)state;
	reset(0, 0, -1, NULL);
	drv.current = NULL; /* no context yet: libcollc makes the primary one current */
	assert_int_equal(collc__gpu_stream_path(0), COLLC_STREAM_PATH_KERNEL);
	assert_int_equal(drv.loads, 1);
	assert_ptr_equal(drv.load_ctx[0], PRIMARY);
	assert_int_equal(drv.fn_loads, 1); /* loaded now, not at a launch */
	assert_int_equal(collc__gpu_stream_ready(S_PRIM, 0, 1), COLLC_STREAM_PATH_KERNEL);
	assert_int_equal(drv.loads, 1);
	/* A stream collective: one launch, one thread, with the gate's words. */
	assert_int_equal(
		collc__gpu_stream_gate(S_PRIM, 0, 0x1110, 0xfffffffeu, 0x2220, 0xfffffffeu, 0), 0);
	assert_int_equal(drv.launches, 1);
	assert_ptr_equal(drv.launch.f, FN);
	for (int i = 0; i < 6; i++)
		assert_int_equal(drv.launch.dims[i], 1);
	assert_int_equal(drv.launch.shared, 0);
	assert_ptr_equal(drv.launch.s, S_PRIM);
	assert_int_equal(drv.launch.go, 0x1110);
	assert_int_equal(drv.launch.go_val, 0xfffffffeu);
	assert_int_equal(drv.launch.done, 0x2220);
	assert_int_equal(drv.launch.want, 0xfffffffeu);
	assert_int_equal(drv.launch.mode, GATE_WAIT_GEQ);
	/* A graph: the same launch with wait-then-reset. */
	assert_int_equal(collc__gpu_stream_gate(S_PRIM, 0, 0x1110, 1, 0x2220, 1, 1), 0);
	assert_int_equal(drv.launches, 2);
	assert_int_equal(drv.launch.mode, GATE_WAIT_EQ_RESET);
	assert_int_equal(drv.launch.want, 1);
	assert_int_equal(drv.writes + drv.waits, 0);
	/* A failed launch enqueues nothing and says so. */
	drv.launch_res = CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
	assert_int_equal(collc__gpu_stream_gate(S_PRIM, 0, 0x1110, 2, 0x2220, 2, 0), -EIO);
	drv.launch_res = CUDA_ERROR_OUT_OF_MEMORY;
	assert_int_equal(collc__gpu_stream_gate(S_PRIM, 0, 0x1110, 2, 0x2220, 2, 0), -ENOMEM);
	assert_int_equal(drv.launches, 2);
}

static void test_other_context(void **state)
{
	(void)state;
	reset(0, 0, -1, "kernel");
	drv.func_load = 0; /* a driver before cuFuncLoad */
	assert_int_equal(collc__gpu_stream_path(0), COLLC_STREAM_PATH_KERNEL);
	/* Met first inside a capture: nothing loaded, nothing launched. */
	assert_int_equal(collc__gpu_stream_ready(S_OTHER, 0, 1), -EOPNOTSUPP);
	assert_int_equal(collc__gpu_stream_gate(S_OTHER, 0, 0x10, 1, 0x20, 1, 1), -EOPNOTSUPP);
	assert_int_equal(drv.loads, 1);
	assert_int_equal(drv.launches, 0);
	/* Outside a capture: loaded into that context, the current one restored. */
	assert_int_equal(collc__gpu_stream_ready(S_OTHER, 0, 0), COLLC_STREAM_PATH_KERNEL);
	assert_int_equal(drv.loads, 2);
	assert_ptr_equal(drv.load_ctx[1], OTHER);
	assert_ptr_equal(drv.current, PRIMARY);
	assert_int_equal(drv.fn_loads, 0);
	assert_int_equal(collc__gpu_stream_ready(S_OTHER, 0, 1), COLLC_STREAM_PATH_KERNEL);
	assert_int_equal(collc__gpu_stream_gate(S_OTHER, 0, 0x10, 1, 0x20, 1, 1), 0);
	assert_int_equal(drv.launches, 1);
	assert_int_equal(drv.loads, 2);
	unsetenv("COLLC_STREAM_PATH");
}

static void test_load_fails(void **state)
{
	(void)state;
	reset(0, 0, -1, NULL);
	/* No code for this GPU: a clear error, and nothing cached but the choice. */
	drv.load_res = CUDA_ERROR_NO_BINARY_FOR_GPU;
	assert_int_equal(collc__gpu_stream_path(0), -ENOEXEC);
	assert_int_equal(collc__gpu_stream_ready(S_PRIM, 0, 0), -ENOEXEC);
	assert_int_equal(collc__gpu_stream_gate(S_PRIM, 0, 0x10, 1, 0x20, 1, 0), -EOPNOTSUPP);
	drv.load_res = CUDA_ERROR_OUT_OF_MEMORY;
	assert_int_equal(collc__gpu_stream_path(0), -ENOMEM);
	assert_int_equal(drv.launches, 0);
	assert_ptr_equal(drv.current, PRIMARY);
	/* Once the load succeeds, the path works. */
	drv.load_res = CUDA_SUCCESS;
	assert_int_equal(collc__gpu_stream_path(0), COLLC_STREAM_PATH_KERNEL);
	assert_int_equal(collc__gpu_stream_gate(S_PRIM, 0, 0x10, 1, 0x20, 1, 0), 0);
	assert_int_equal(drv.launches, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_choice),     cmocka_unit_test(test_memops),
		cmocka_unit_test(test_halves),
		cmocka_unit_test(test_kernel),     cmocka_unit_test(test_other_context),
		cmocka_unit_test(test_load_fails),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
