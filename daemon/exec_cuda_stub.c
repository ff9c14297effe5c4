/* SPDX-License-Identifier: MIT */
/* Built when collc is configured without CUDA: the backend is absent. */
#include <errno.h>
#include <stdio.h>

#include "daemon/exec.h"

int exec_cuda_available(void)
{
	return 0;
}

int exec_cuda_init(uint32_t ndevices, uint32_t max_channels, const struct exec_backend **ret)
{
	fprintf(stderr, "collcd: this build has no CUDA backend\n");
	return -ENODEV;
}
