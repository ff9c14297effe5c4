/* SPDX-License-Identifier: MIT */
/*
 * The CUDA executor's driver side: the driver entry points (found through the
 * runtime: collcd does not link libcuda), CUDA error strings and the fatal
 * exit, and VMM memory (the connections, collc_mem_alloc memory).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "daemon/cuda/internal.h"
#include "daemon/log.h"

struct cuda_drv drv;

const char *cuda_err(int e)
{
	return cudaGetErrorString((cudaError_t)e);
}

/* A sticky error or a grid gone: collcd cannot serve any more; systemd restarts it. */
void cuda_fatal(const char *what, int err)
{
	log_err("CUDA backend: %s: %s; exiting", what, err ? cuda_err(err) : "grid exited");
	cuda_crumbs_log();
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

int cuda_drv_load(void)
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

void cuda_vmm_free(struct vmm *v)
{
	if (!v->ptr)
		return;
	cudaSetDevice(gpus[v->gpu].ord);
	drv.mem_unmap(v->ptr, v->size);
	drv.addr_free(v->ptr, v->size);
	drv.mem_release(v->h);
	v->ptr = 0;
}

int cuda_vmm_alloc(int g, size_t size, int exportable, struct vmm *v)
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
