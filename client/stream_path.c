/* SPDX-License-Identifier: MIT */
/* How stream gates reach a stream: the choice alone, apart from the driver (unit tested). */
#include <errno.h>
#include <string.h>

#include "client/gate_kernel.h"
#include "include/collc.h"

int collc__stream_memops_usable(int have_v2, int have_v1, int attr_v1)
{
	/*
	 * The gate needs 32-bit writes and GEQ/EQ waits only: no 64-bit or NOR
	 * operation, so CAN_USE_64_BIT_STREAM_MEM_OPS and _WAIT_VALUE_NOR do
	 * not matter. V1 entry points work only where the driver enabled them.
	 */
	if (have_v2)
		return 1;
	return have_v1 && attr_v1 == 1;
}

int collc__stream_path_pick(const char *env, int have_memops)
{
	if (!env || !*env || strcmp(env, "auto") == 0)
		return have_memops ? COLLC_STREAM_PATH_MEMOPS : COLLC_STREAM_PATH_KERNEL;
	if (strcmp(env, "memops") == 0)
		return have_memops ? COLLC_STREAM_PATH_MEMOPS : -EOPNOTSUPP;
	if (strcmp(env, "kernel") == 0)
		return COLLC_STREAM_PATH_KERNEL;
	return -EINVAL;
}

const char *collc__stream_path_name(int path)
{
	switch (path) {
	case COLLC_STREAM_PATH_MEMOPS:
		return "memops";
	case COLLC_STREAM_PATH_KERNEL:
		return "kernel";
	default:
		return "none";
	}
}
