/* SPDX-License-Identifier: MIT */
/* Loading the CUDA runtime and NCCL at run time; see cudart.h. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "bench/cudart.h"
#include "proto/dtype.h"

struct sym {
	const char *name;
	size_t off;
};

static int load_syms(void *lib, void *table, const struct sym *syms, size_t n, const char *libname,
		     char *msg, size_t len)
{
	for (size_t i = 0; i < n; i++) {
		void *f = dlsym(lib, syms[i].name);

		if (!f) {
			snprintf(msg, len, "%s lacks %s", libname, syms[i].name);
			return -1;
		}
		memcpy((char *)table + syms[i].off, &f, sizeof(f));
	}
	return 0;
}

/*
 * Entry points only some versions have: all of them or none (every one stays
 * NULL). Returns the name of the first one missing, or NULL.
 */
static const char *load_optional(void *lib, void *table, const struct sym *syms, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		void *f = dlsym(lib, syms[i].name);

		if (!f) {
			for (size_t k = 0; k < n; k++)
				memset((char *)table + syms[k].off, 0, sizeof(f));
			return syms[i].name;
		}
		memcpy((char *)table + syms[i].off, &f, sizeof(f));
	}
	return NULL;
}

#define RT(f)                                                                                      \
	{                                                                                          \
		"cuda" #f, offsetof(struct cudart, f)                                              \
	}

int cudart_load(struct cudart *rt, char *msg, size_t len)
{
	static const char *const names[] = { "libcudart.so", "libcudart.so.13", "libcudart.so.12",
					     "libcudart.so.11.0" };
	static const struct sym syms[] = {
		RT(GetDeviceCount),
		RT(SetDevice),
		RT(Free),
		RT(Malloc),
		RT(Memcpy),
		RT(Memset),
		RT(DeviceSynchronize),
		RT(StreamCreateWithFlags),
		RT(StreamDestroy),
		RT(StreamSynchronize),
		RT(StreamWaitEvent),
		RT(EventCreate),
		RT(EventDestroy),
		RT(EventRecord),
		RT(EventSynchronize),
		RT(EventElapsedTime),
		RT(GetErrorString),
	};
	/* cudaGraphInstantiateWithFlags: one signature from CUDA 11.4 on (plain Instantiate changed in 12). */
	static const struct sym graph_syms[] = {
		RT(StreamBeginCapture), RT(StreamEndCapture), RT(GraphInstantiateWithFlags),
		RT(GraphLaunch),        RT(GraphExecDestroy), RT(GraphDestroy),
	};
	char first_err[256] = "";

	memset(rt, 0, sizeof(*rt));
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !rt->lib; i++) {
		rt->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		if (rt->lib)
			rt->libname = names[i];
		else if (!first_err[0])
			snprintf(first_err, sizeof(first_err), "%s", dlerror());
	}
	if (!rt->lib) {
		snprintf(
			msg, len,
			"cannot load the CUDA runtime (tried libcudart.so, .so.13, .so.12, .so.11.0): %s",
			first_err);
		return -1;
	}
	if (load_syms(rt->lib, rt, syms, sizeof(syms) / sizeof(syms[0]), rt->libname, msg, len) <
	    0) {
		dlclose(rt->lib);
		rt->lib = NULL;
		return -1;
	}
	rt->graph_missing =
		load_optional(rt->lib, rt, graph_syms, sizeof(graph_syms) / sizeof(graph_syms[0]));
	return 0;
}

const char *cudart_strerror(const struct cudart *rt, cuda_err_t e)
{
	const char *s = rt->GetErrorString ? rt->GetErrorString(e) : NULL;

	return s ? s : "unknown CUDA error";
}

#define NC(f)                                                                                      \
	{                                                                                          \
		"nccl" #f, offsetof(struct nccl, f)                                                \
	}

int nccl_load(struct nccl *nc, char *msg, size_t len)
{
	static const struct sym syms[] = {
		NC(GetVersion), NC(GetUniqueId),    NC(CommInitRank),  NC(CommDestroy),
		NC(AllReduce),  NC(AllGather),      NC(ReduceScatter), NC(Broadcast),
		NC(Reduce),     NC(GetErrorString), NC(Send),          NC(Recv),
		NC(GroupStart), NC(GroupEnd),
	};
	static const struct sym win_syms[] = {
		NC(MemAlloc),
		NC(MemFree),
		NC(CommWindowRegister),
		NC(CommWindowDeregister),
	};

	memset(nc, 0, sizeof(*nc));
	nc->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
	if (!nc->lib)
		nc->lib = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
	if (!nc->lib) {
		snprintf(msg, len, "cannot load NCCL (libnccl.so.2): %s", dlerror());
		return -1;
	}
	if (load_syms(nc->lib, nc, syms, sizeof(syms) / sizeof(syms[0]), "libnccl.so.2", msg, len) <
	    0) {
		dlclose(nc->lib);
		nc->lib = NULL;
		return -1;
	}
	*(void **)&nc->AlltoAll = dlsym(nc->lib, "ncclAlltoAll"); /* NCCL 2.28 on */
	nc->win_missing =
		load_optional(nc->lib, nc, win_syms, sizeof(win_syms) / sizeof(win_syms[0]));
	return 0;
}

/* ncclDataType_t; ncclFloat8e4m3 and ncclFloat8e5m2 came with NCCL 2.24 (sm_90 and later). */
int nccl_dtype(int dt)
{
	static const int map[COLLC_NUM_DTYPES] = {
		[COLLC_INT8] = 0,    [COLLC_UINT8] = 1,        [COLLC_INT32] = 2,
		[COLLC_UINT32] = 3,  [COLLC_INT64] = 4,        [COLLC_UINT64] = 5,
		[COLLC_FLOAT16] = 6, [COLLC_BFLOAT16] = 9,     [COLLC_FLOAT32] = 7,
		[COLLC_FLOAT64] = 8, [COLLC_FLOAT8_E4M3] = 10, [COLLC_FLOAT8_E5M2] = 11,
	};

	return (unsigned)dt < COLLC_NUM_DTYPES ? map[dt] : -1;
}

int cuda_probe(char *msg, size_t len)
{
	struct cudart rt;
	cuda_err_t e;
	int n = 0;

	if (cudart_load(&rt, msg, len) < 0)
		return -1;
	e = rt.GetDeviceCount(&n);
	if (e != 0) {
		snprintf(msg, len, "no usable GPU: cudaGetDeviceCount: %s (%s, CUDA error %d)",
			 cudart_strerror(&rt, e), rt.libname, e);
		return -1;
	}
	if (n == 0) {
		snprintf(msg, len, "no GPU: cudaGetDeviceCount found 0 devices");
		return -1;
	}
	return n;
}
