/* SPDX-License-Identifier: MIT */
/* Built when collc is configured without CUDA: the backend is absent. */
#include <errno.h>
#include <stdio.h>

#include "daemon/exec.h"
#include "daemon/cuda/cuda.h"

int exec_cuda_available(void)
{
	return 0;
}

int exec_cuda_init(uint32_t ndevices, uint32_t max_channels, const struct exec_backend **ret)
{
	fprintf(stderr, "collcd: this build has no CUDA backend\n");
	return -ENODEV;
}

int exec_cuda_mem_add(uint16_t type, const struct collc_msg_mem *q, int in_fd, int *ret_fd,
		      uint64_t *ret_addr, uint64_t *ret_size)
{
	return -ENODEV;
}

void exec_cuda_set_require_mps(int on)
{
}
