/* SPDX-License-Identifier: MIT */
/*
 * The CUDA backend's entry points beyond struct exec_backend: device memory
 * for clients (control.c) and the MPS policy (main.c). Without CUDA,
 * cuda/stub.c answers -ENODEV.
 */
#ifndef COLLCD_EXEC_CUDA_H
#define COLLCD_EXEC_CUDA_H

#include <stdint.h>

#include "proto/wire.h"

/*
 * A device-memory request (COLLC_MSG_MEM_ALLOC or COLLC_MSG_MEM_REGISTER with
 * device >= 0). A registration's in_fd is a pipe holding its struct
 * collc_msg_mem_ipc (the request's payload is fixed at 32 bytes). On
 * success *ret_fd is the fd the registration owns (closing it, and every copy
 * of it, releases the memory), *ret_addr its executor-space address and
 * *ret_size its size. May block the caller for a quiesce window (a CUDA IPC
 * import): about a millisecond plus the collectives in flight.
 */
int exec_cuda_mem_add(uint16_t type, const struct collc_msg_mem *q, int in_fd, int *ret_fd,
		      uint64_t *ret_addr, uint64_t *ret_size);

/* Call before exec_cuda_init(): a GPU not served by MPS fails the init with -EPERM. */
void exec_cuda_set_require_mps(int on);

#endif
