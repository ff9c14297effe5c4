/* SPDX-License-Identifier: MIT */
/*
 * libnccl-collc through nccl.h alone, on a machine without a GPU: what needs
 * none (versions, error strings, unique ids from a CPU-only collcd, argument
 * and group checks, refused calls, the export list by dlsym) works, and the
 * first call that needs a GPU fails with a clear result and last error.
 *
 *   test_nccl_api LIBNCCL_COLLC_PATH EXPORTS_TXT
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#include "harness.h"

static int failed;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			h_fail("%s:%d: %s", __FILE__, __LINE__, #cond);                            \
			h_log(__VA_ARGS__);                                                        \
			failed = 1;                                                                \
		}                                                                                  \
	} while (0)

/* res is want and the last error names call (and, when not NULL, says what). */
static void expect(ncclResult_t res, ncclResult_t want, const char *call, const char *what,
		   int line)
{
	const char *e = ncclGetLastError(NULL);

	if (res != want || !strstr(e, call) || (what && !strstr(e, what))) {
		h_fail("line %d: %s: result %d (%s), want %d; last error \"%s\" should name \"%s\"%s%s",
		       line, call, res, ncclGetErrorString(res), want, e, call, what ? " and " : "",
		       what ? what : "");
		failed = 1;
	}
}
#define EXPECT(res, want, call, what) expect((res), (want), (call), (what), __LINE__)

static void test_version_and_strings(void)
{
	const char *seen[ncclNumResults];
	int v = 0;

	CHECK(ncclGetVersion(&v) == ncclSuccess && v == NCCL_VERSION_CODE, "version %d", v);
	EXPECT(ncclGetVersion(NULL), ncclInvalidArgument, "ncclGetVersion", NULL);
	for (int r = 0; r < ncclNumResults; r++) {
		seen[r] = ncclGetErrorString((ncclResult_t)r);
		CHECK(seen[r] && seen[r][0], "result %d has no string", r);
		for (int q = 0; seen[r] && q < r; q++)
			CHECK(strcmp(seen[q], seen[r]) != 0, "results %d and %d read the same", q,
			      r);
	}
	CHECK(strstr(ncclGetErrorString((ncclResult_t)99), "unknown") != NULL, "result 99");
}

static void test_groups(void)
{
	EXPECT(ncclGroupEnd(), ncclInvalidUsage, "ncclGroupEnd", "ncclGroupStart");
	CHECK(ncclGroupStart() == ncclSuccess && ncclGroupStart() == ncclSuccess &&
		      ncclGroupEnd() == ncclSuccess && ncclGroupEnd() == ncclSuccess,
	      "nested empty groups");
	EXPECT(ncclGroupEnd(), ncclInvalidUsage, "ncclGroupEnd", NULL);
	/* A failed call inside a group fails the group's end too. */
	CHECK(ncclGroupStart() == ncclSuccess, "group start");
	EXPECT(ncclAllReduce(NULL, NULL, 1, ncclFloat, ncclSum, NULL, NULL), ncclInvalidArgument,
	       "ncclAllReduce", "comm is NULL");
	EXPECT(ncclGroupEnd(), ncclInvalidArgument, "ncclGroupEnd", "ncclAllReduce: comm is NULL");
	CHECK(ncclGroupStart() == ncclSuccess && ncclGroupEnd() == ncclSuccess,
	      "a group after a failed one starts clean");
}

static void test_null_comm(void)
{
	int x = 0;
	ncclResult_t e;
	char fake[256];

	memset(fake, 0x5a, sizeof(fake));
	EXPECT(ncclAllReduce(&x, &x, 1, ncclInt, ncclSum, NULL, NULL), ncclInvalidArgument,
	       "ncclAllReduce", "comm is NULL");
	EXPECT(ncclAllGather(&x, &x, 1, ncclInt, NULL, NULL), ncclInvalidArgument, "ncclAllGather",
	       "comm");
	EXPECT(ncclReduceScatter(&x, &x, 1, ncclInt, ncclSum, NULL, NULL), ncclInvalidArgument,
	       "ncclReduceScatter", "comm");
	EXPECT(ncclBroadcast(&x, &x, 1, ncclInt, 0, NULL, NULL), ncclInvalidArgument,
	       "ncclBroadcast", "comm");
	EXPECT(ncclBcast(&x, 1, ncclInt, 0, NULL, NULL), ncclInvalidArgument, "ncclBroadcast",
	       "comm");
	EXPECT(ncclReduce(&x, &x, 1, ncclInt, ncclSum, 0, NULL, NULL), ncclInvalidArgument,
	       "ncclReduce", "comm");
	EXPECT(ncclAlltoAll(&x, &x, 1, ncclInt, NULL, NULL), ncclInvalidArgument, "ncclAlltoAll",
	       "comm");
	EXPECT(ncclSend(&x, 1, ncclInt, 0, NULL, NULL), ncclInvalidArgument, "ncclSend", "comm");
	EXPECT(ncclRecv(&x, 1, ncclInt, 0, NULL, NULL), ncclInvalidArgument, "ncclRecv", "comm");
	EXPECT(ncclGather(&x, &x, 1, ncclInt, 0, NULL, NULL), ncclInvalidArgument, "ncclGather",
	       "comm");
	EXPECT(ncclScatter(&x, &x, 1, ncclInt, 0, NULL, NULL), ncclInvalidArgument, "ncclScatter",
	       "comm");
	/* A pointer that is no communicator of this library. */
	EXPECT(ncclAllReduce(&x, &x, 1, ncclInt, ncclSum, (ncclComm_t)fake, NULL),
	       ncclInvalidArgument, "ncclAllReduce", "not a live communicator");
	EXPECT(ncclCommCount(NULL, &x), ncclInvalidArgument, "ncclCommCount", "comm");
	EXPECT(ncclCommCuDevice(NULL, &x), ncclInvalidArgument, "ncclCommCuDevice", "comm");
	EXPECT(ncclCommUserRank(NULL, &x), ncclInvalidArgument, "ncclCommUserRank", "comm");
	EXPECT(ncclCommGetAsyncError(NULL, &e), ncclInvalidArgument, "ncclCommGetAsyncError",
	       "comm");
	EXPECT(ncclCommFinalize(NULL), ncclInvalidArgument, "ncclCommFinalize", "comm");
	EXPECT(ncclCommRegister(NULL, &x, 4, (void **)&fake), ncclInvalidArgument,
	       "ncclCommRegister", "comm");
	EXPECT(ncclCommSplit(NULL, 0, 0, (ncclComm_t *)&fake, NULL), ncclInvalidArgument,
	       "ncclCommSplit", "comm is NULL");
	CHECK(ncclCommDestroy(NULL) == ncclSuccess, "destroying NULL is a no-op");
	CHECK(ncclCommAbort(NULL) == ncclSuccess, "aborting NULL is a no-op");
	EXPECT(ncclCommDestroy((ncclComm_t)fake), ncclInvalidArgument, "ncclCommDestroy",
	       "not a live communicator");
}

static void test_refused(void)
{
	ncclComm_t c = (ncclComm_t)0x1;
	ncclRedOp_t op = ncclSum;
	float s = 1;

	EXPECT(ncclCommShrink(NULL, NULL, 0, &c, NULL, 0), ncclInvalidUsage, "ncclCommShrink",
	       "not supported");
	CHECK(c == (ncclComm_t)0x1, "a refused call leaves its output alone");
	EXPECT(ncclCommRevoke(NULL, 0), ncclInvalidUsage, "ncclCommRevoke", NULL);
	EXPECT(ncclRedOpCreatePreMulSum(&op, &s, ncclFloat, ncclScalarHostImmediate, NULL),
	       ncclInvalidUsage, "ncclRedOpCreatePreMulSum", NULL);
	CHECK(op == ncclSum, "a refused call leaves its output alone");
	EXPECT(ncclRedOpDestroy(op, NULL), ncclInvalidUsage, "ncclRedOpDestroy", NULL);
	EXPECT(pncclCommRevoke(NULL, 0), ncclInvalidUsage, "ncclCommRevoke", NULL);
}

/* 1 when a CUDA driver with a device is here: the no-GPU checks do not apply. */
static int have_gpu(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	int (*init)(unsigned int), (*count)(int *);
	int n = 0;

	if (!h)
		return 0;
	init = (int (*)(unsigned int))dlsym(h, "cuInit");
	count = (int (*)(int *))dlsym(h, "cuDeviceGetCount");
	if (!init || !count || init(0) != 0 || count(&n) != 0)
		n = 0;
	dlclose(h);
	return n > 0;
}

static void test_memory(void)
{
	void *p = (void *)0x1;

	EXPECT(ncclMemAlloc(NULL, 8), ncclInvalidArgument, "ncclMemAlloc", NULL);
	EXPECT(ncclMemAlloc(&p, 8), ncclUnhandledCudaError, "ncclMemAlloc", "CUDA driver");
	CHECK(p == (void *)0x1, "a failed ncclMemAlloc leaves ptr alone");
	CHECK(ncclMemFree(NULL) == ncclSuccess, "ncclMemFree(NULL)");
}

static void test_unique_ids(void)
{
	ncclUniqueId a, b;

	memset(&a, 0, sizeof(a));
	setenv("COLLC_SOCKET", "/nonexistent/collcd.sock", 1);
	EXPECT(ncclGetUniqueId(&a), ncclSystemError, "ncclGetUniqueId", "collcd");
	setenv("COLLC_SOCKET", h_sock, 1);
	EXPECT(ncclGetUniqueId(NULL), ncclInvalidArgument, "ncclGetUniqueId", NULL);
	CHECK(ncclGetUniqueId(&a) == ncclSuccess, "ncclGetUniqueId: %s", ncclGetLastError(NULL));
	CHECK(ncclGetUniqueId(&b) == ncclSuccess, "ncclGetUniqueId: %s", ncclGetLastError(NULL));
	CHECK(memcmp(&a, &b, sizeof(a)) != 0, "two unique ids are the same");
}

/* Needs a GPU: fails cleanly here, at once or at the group's end. */
static void test_init_without_gpu(void)
{
	ncclComm_t c = (ncclComm_t)0x1, g = NULL;
	ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
	ncclUniqueId id;
	ncclResult_t e;
	int x = 0;

	CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId: %s", ncclGetLastError(NULL));
	EXPECT(ncclCommInitRank(NULL, 2, id, 0), ncclInvalidArgument, "ncclCommInitRank", NULL);
	EXPECT(ncclCommInitRank(&c, 0, id, 0), ncclInvalidArgument, "ncclCommInitRank", "nranks");
	EXPECT(ncclCommInitRank(&c, 2, id, 2), ncclInvalidArgument, "ncclCommInitRank", "rank");
	EXPECT(ncclCommInitRank(&c, 2, id, -1), ncclInvalidArgument, "ncclCommInitRank", "rank");
	bad.magic = 0;
	EXPECT(ncclCommInitRankConfig(&c, 2, id, 0, &bad), ncclInvalidArgument,
	       "ncclCommInitRankConfig", "NCCL_CONFIG_INITIALIZER");
	EXPECT(ncclCommInitRank(&c, 2, id, 0), ncclUnhandledCudaError, "ncclCommInitRank", "CUDA");
	CHECK(c == (ncclComm_t)0x1, "a failed init leaves *comm alone");
	EXPECT(ncclCommInitAll(&c, 2, NULL), ncclUnhandledCudaError, "ncclCommInitAll", "CUDA");

	/*
	 * In a group the init is deferred: the handle is there at once, calls on it
	 * are checked at once, and ncclGroupEnd reports the first failure.
	 */
	CHECK(ncclGroupStart() == ncclSuccess, "group start");
	CHECK(ncclCommInitRank(&g, 2, id, 0) == ncclSuccess && g, "deferred init: %s",
	      ncclGetLastError(NULL));
	EXPECT(ncclAllReduce(&x, &x, 1, (ncclDataType_t)ncclNumTypes, ncclSum, g, NULL),
	       ncclInvalidArgument, "ncclAllReduce", "datatype");
	EXPECT(ncclAllReduce(&x, &x, 1, ncclInt, (ncclRedOp_t)ncclNumOps, g, NULL),
	       ncclInvalidArgument, "ncclAllReduce", "ncclRedOpCreatePreMulSum");
	EXPECT(ncclAllReduce(&x, &x, SIZE_MAX, ncclInt, ncclSum, g, NULL), ncclInvalidArgument,
	       "ncclAllReduce", "overflows");
	EXPECT(ncclBroadcast(&x, &x, 1, ncclInt, 2, g, NULL), ncclInvalidArgument, "ncclBroadcast",
	       "root 2");
	EXPECT(ncclReduce(&x, &x, 1, ncclInt, ncclSum, -1, g, NULL), ncclInvalidArgument,
	       "ncclReduce", "root -1");
	EXPECT(ncclSend(&x, 1, ncclInt, 5, g, NULL), ncclInvalidArgument, "ncclSend", "peer 5");
	EXPECT(ncclRecv(&x, 1, ncclInt, -3, g, NULL), ncclInvalidArgument, "ncclRecv", "peer -3");
	EXPECT(ncclAllGather(NULL, &x, 1, ncclInt, g, NULL), ncclInvalidArgument, "ncclAllGather",
	       "sendbuff is NULL");
	EXPECT(ncclCommDestroy(g), ncclInvalidUsage, "ncclCommDestroy", "group");
	EXPECT(ncclGroupEnd(), ncclInvalidArgument, "ncclGroupEnd", "ncclAllReduce: datatype");
	CHECK(ncclCommCount(g, &x) == ncclInvalidUsage, "a comm whose group failed is unusable");
	EXPECT(ncclCommSplit(g, 0, 0, &c, NULL), ncclInvalidUsage, "ncclCommSplit",
	       "failed to initialize");
	CHECK(ncclCommGetAsyncError(g, &e) == ncclSuccess && e != ncclSuccess,
	      "its async error is %d", e);
	CHECK(ncclCommDestroy(g) == ncclSuccess, "destroying it: %s", ncclGetLastError(NULL));

	g = NULL;
	CHECK(ncclGroupStart() == ncclSuccess, "group start");
	CHECK(ncclCommInitRank(&g, 1, id, 0) == ncclSuccess && g, "deferred init");
	EXPECT(ncclGroupEnd(), ncclUnhandledCudaError, "ncclGroupEnd", "CUDA");
	CHECK(ncclCommDestroy(g) == ncclSuccess, "destroying it");
}

/* Every exported name of the list resolves, and ncclX and pncclX are one function. */
static void test_dlsym(const char *lib, const char *list)
{
	char name[128];
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	FILE *f = fopen(list, "r");
	int n = 0;

	CHECK(h && f, "dlopen %s: %s, list %s", lib, h ? "ok" : dlerror(), list);
	while (h && f && fscanf(f, "%127s", name) == 1) {
		void *s = dlsym(h, name);

		CHECK(s != NULL, "%s does not resolve", name);
		if (name[0] == 'p') {
			void *t = dlsym(h, name + 1);

			CHECK(s == t, "%s and %s differ", name, name + 1);
		}
		n++;
	}
	CHECK(n >= 84, "%d names in %s", n, list);
	h_log("%d exported names resolve", n);
	if (f)
		fclose(f);
	if (h)
		dlclose(h);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s LIBNCCL_COLLC EXPORTS_TXT\n", argv[0]);
		return 2;
	}
	h_init("nccl_api", 1, argv, 60);
	test_version_and_strings();
	test_groups();
	test_null_comm();
	test_refused();
	if (have_gpu())
		h_log("a GPU is here: the checks of failures without one are left out");
	else
		test_memory();
	h_daemon_start(NULL);
	test_unique_ids();
	if (!have_gpu())
		test_init_without_gpu();
	test_dlsym(argv[1], argv[2]);
	return h_finish(failed);
}
