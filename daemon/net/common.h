/* SPDX-License-Identifier: MIT */
/* What the built-in transports (tcp.c, ib.c) share above their sockets: the
 * device properties they report alike and the ncclNet_v8 entries that do
 * nothing in either. */
#ifndef COLLCD_NET_COMMON_H
#define COLLCD_NET_COMMON_H

#include "net.h"

/* Host memory only, no device offload, no global registration. */
void collc__net_props_fill(ncclNetProperties_v8_t *props, char *name, uint64_t guid, int speed,
			   int port, int max_recvs);

/* Host memory only: received data is visible without a flush. */
ncclResult_t collc__net_iflush_host(void *recvComm, int n, void **data, int *sizes,
				    void **mhandles, void **request);
ncclResult_t collc__net_no_device_mr(void *comm, void *mhandle, void **dptr_mhandle);
ncclResult_t collc__net_irecv_consumed(void *recvComm, int n, void *request);

#endif
