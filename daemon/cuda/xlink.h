/* SPDX-License-Identifier: MIT */
/* A grid ring across daemons as the proxy sees it (xlink.c); plain C, no CUDA. */
#ifndef COLLCD_CUDA_XLINK_H
#define COLLCD_CUDA_XLINK_H

#include "daemon/cuda/grid.h"
#include "daemon/exec.h"

/* Fills ret with the proxy's view of the ring h (mapped host memory). */
void cuda_xconn_link(struct cuda_xconn *h, struct exec_link *ret);

#endif
