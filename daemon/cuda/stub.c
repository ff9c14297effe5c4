/* SPDX-License-Identifier: MIT */
/* Built when collc is configured without CUDA: the executor is absent. */
#include <errno.h>

#include "daemon/cuda/cuda.h"
#include "daemon/log.h"

int exec_cuda_available(void)
{
	return 0;
}

int exec_cuda_init(const struct exec_init *init, const struct exec_backend **ret)
{
	log_err("this build has no CUDA executor");
	return -ENODEV;
}
