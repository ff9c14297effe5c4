/* SPDX-License-Identifier: MIT */
/* Properties, no-op entries and the request pool shared by the built-in
 * transports (common.h). */
#include "common.h"

#include <string.h>

void collc__net_props_fill(ncclNetProperties_v8_t *props, char *name, uint64_t guid, int speed,
			   int port, int max_recvs)
{
	/* Unnamed fields are 0: no pciPath, regMr per comm, latency unknown. */
	*props = (ncclNetProperties_v8_t){
		.name = name,
		.guid = guid,
		.ptrSupport = NCCL_PTR_HOST,
		.speed = speed,
		.port = port,
		.maxComms = 65536,
		.maxRecvs = max_recvs,
		.netDeviceType = NCCL_NET_DEVICE_HOST,
		.netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION,
	};
}

ncclResult_t collc__net_iflush_host(void *recvComm, int n, void **data, int *sizes, void **mhandles,
				    void **request)
{
	*request = NULL;
	return ncclSuccess;
}

ncclResult_t collc__net_no_device_mr(void *comm, void *mhandle, void **dptr_mhandle)
{
	return ncclInternalError; /* no device offload */
}

ncclResult_t collc__net_irecv_consumed(void *recvComm, int n, void *request)
{
	return ncclSuccess;
}

void *collc__net_req_get(void *pool, size_t size)
{
	struct net_req *r;
	void *comm;
	int i;

	for (i = 0; i < NCCL_NET_MAX_REQUESTS; i++) {
		r = (struct net_req *)((char *)pool + i * size);
		if (!r->used) {
			comm = r->comm;
			memset(r, 0, size);
			r->comm = comm;
			r->used = 1;
			return r;
		}
	}
	return NULL;
}

ncclResult_t collc__net_req_test(struct net_req *r, int *done, ncclResult_t (*progress)(void *comm))
{
	ncclResult_t rc;

	*done = 0;
	if (!r || !r->used)
		return ncclInvalidArgument;
	rc = progress(r->comm);
	if (rc != ncclSuccess || !r->done)
		return rc;
	/* One thread per comm (net.h): the slot is not reused before the
	 * caller has read the sizes. */
	*done = 1;
	r->used = 0;
	return ncclSuccess;
}
