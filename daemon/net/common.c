/* SPDX-License-Identifier: MIT */
/* Properties and no-op entries shared by the built-in transports (common.h). */
#include "common.h"

#include <string.h>

void collc__net_props_fill(ncclNetProperties_v8_t *props, char *name, uint64_t guid, int speed,
			   int port, int max_recvs)
{
	memset(props, 0, sizeof(*props));
	props->name = name;
	props->pciPath = NULL;
	props->guid = guid;
	props->ptrSupport = NCCL_PTR_HOST;
	props->regIsGlobal = 0;
	props->speed = speed;
	props->port = port;
	props->latency = 0;
	props->maxComms = 65536;
	props->maxRecvs = max_recvs;
	props->netDeviceType = NCCL_NET_DEVICE_HOST;
	props->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
}

ncclResult_t collc__net_iflush_host(void *recvComm, int n, void **data, int *sizes,
				    void **mhandles, void **request)
{
	*request = NULL;
	return ncclSuccess;
}

ncclResult_t collc__net_no_device_mr(void *comm, void *mhandle, void **dptr_mhandle)
{
	return ncclInternalError;	/* no device offload */
}

ncclResult_t collc__net_irecv_consumed(void *recvComm, int n, void *request)
{
	return ncclSuccess;
}
