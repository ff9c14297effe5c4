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
ncclResult_t collc__net_iflush_host(void *recvComm, int n, void **data, int *sizes, void **mhandles,
				    void **request);
ncclResult_t collc__net_no_device_mr(void *comm, void *mhandle, void **dptr_mhandle);
ncclResult_t collc__net_irecv_consumed(void *recvComm, int n, void *request);

/* The head of a built-in transport's request. A comm's requests are a fixed
 * pool of NCCL_NET_MAX_REQUESTS (no allocation per message), each starting
 * with this head. */
struct net_req {
	void *comm; /* set once, when the comm is made */
	int used;
	int done;
};

/* The first free request of pool (NCCL_NET_MAX_REQUESTS elements of size
 * bytes): zeroed but for its comm, marked used. NULL when all are used. */
void *collc__net_req_get(void *pool, size_t size);

/* test() of the ncclNet_v8 table: checks r, runs progress on its comm, and
 * frees a request found done (*done = 1); the caller then reads its sizes. */
ncclResult_t collc__net_req_test(struct net_req *r, int *done,
				 ncclResult_t (*progress)(void *comm));

#endif
