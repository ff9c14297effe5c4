/* SPDX-License-Identifier: MIT */
/*
 * libnccl-net-collchostile.so: an NCCL net plugin that plays a peer daemon
 * whose data links break the agreement once they are up (mn_test.sh
 * hostile). It loads the tcp transport's plugin (libnccl-net-collc.so, from
 * the library path) and passes every call through, except one send: once
 * the file COLLC_HOSTILE_ARM names exists, the next isend of at least
 * HOSTILE_MIN bytes goes out
 *   short  HOSTILE_DELTA bytes shorter than the step,
 *   long   HOSTILE_DELTA bytes longer (the step, then bytes of the plugin's own),
 * as COLLC_HOSTILE_MODE says; the sends after it pass through again. The
 * daemon that loads it without COLLC_HOSTILE_MODE behaves. Tests only: not
 * installed.
 */
#include "daemon/net/net.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HOSTILE_MIN   64
#define HOSTILE_DELTA 8

enum hostile_mode { H_OFF, H_SHORT, H_LONG };

static ncclNet_v8_t inner;
static enum hostile_mode mode;
static const char *arm;
static int fired;   /* the node thread alone sends */
static char *extra; /* the long send's buffer: lives until the process ends */
static size_t extra_cap;

__attribute__((visibility("default"))) ncclNet_v8_t ncclNetPlugin_v8;

static ncclResult_t hostile_init(ncclDebugLogger_t logFunction)
{
	const char *m = getenv("COLLC_HOSTILE_MODE");

	if (!inner.init) {
		fprintf(stderr, "collchostile: libnccl-net-collc.so: %s\n", dlerror());
		return ncclSystemError;
	}
	if (!m || !*m) {
		mode = H_OFF;
	} else if (strcmp(m, "short") == 0) {
		mode = H_SHORT;
	} else if (strcmp(m, "long") == 0) {
		mode = H_LONG;
	} else {
		fprintf(stderr, "collchostile: COLLC_HOSTILE_MODE=%s: short or long\n", m);
		return ncclInvalidArgument;
	}
	arm = getenv("COLLC_HOSTILE_ARM");
	if (mode != H_OFF && (!arm || !*arm)) {
		fprintf(stderr, "collchostile: COLLC_HOSTILE_MODE without COLLC_HOSTILE_ARM\n");
		return ncclInvalidArgument;
	}
	return inner.init(logFunction);
}

static ncclResult_t hostile_isend(void *sendComm, void *data, int size, int tag, void *mhandle,
				  void **request)
{
	ncclResult_t rc;
	void *from = data;
	int len = size;

	if (mode == H_OFF || fired || size < HOSTILE_MIN || access(arm, F_OK) != 0)
		return inner.isend(sendComm, data, size, tag, mhandle, request);
	if (mode == H_SHORT) {
		len = size - HOSTILE_DELTA;
	} else {
		if (extra_cap < (size_t)size + HOSTILE_DELTA) {
			char *p = realloc(extra, (size_t)size + HOSTILE_DELTA);

			if (!p)
				return ncclSystemError;
			extra = p;
			extra_cap = (size_t)size + HOSTILE_DELTA;
		}
		memcpy(extra, data, (size_t)size);
		memset(extra + size, 0x5a, HOSTILE_DELTA);
		from = extra;
		len = size + HOSTILE_DELTA;
	}
	rc = inner.isend(sendComm, from, len, tag, mhandle, request);
	if (rc == ncclSuccess && *request) {
		fired = 1;
		fprintf(stderr, "collchostile: sent %d bytes for a step of %d\n", len, size);
	}
	return rc;
}

/* Fills the table when collcd loads the plugin, before it looks the symbol up. */
__attribute__((constructor)) static void hostile_fill(void)
{
	void *so = dlopen("libnccl-net-collc.so", RTLD_NOW | RTLD_LOCAL);
	const ncclNet_v8_t *t = so ? dlsym(so, "ncclNetPlugin_v8") : NULL;

	if (t)
		inner = *t;
	ncclNetPlugin_v8 = inner;
	ncclNetPlugin_v8.name = "collchostile";
	ncclNetPlugin_v8.init = hostile_init;
	ncclNetPlugin_v8.isend = hostile_isend;
}
