/* SPDX-License-Identifier: MIT */
/*
 * The stream gate's rules, shared by libcollc's host code (C) and the gate
 * kernel (client/gate_kernel.cu, CUDA): when a waiting stream may go on, and
 * how libcollc picks between stream memory operations and the kernel.
 */
#ifndef COLLC_CLIENT_GATE_KERNEL_H
#define COLLC_CLIENT_GATE_KERNEL_H

#include <stdint.h>

#ifdef __CUDACC__
#define GATE_HD __host__ __device__ __forceinline__
#else
#define GATE_HD static inline
#endif

/* What the gate waits for: a ticket (cyclic >=), or a graph's 1 that it then clears. */
enum { GATE_WAIT_GEQ = 0, GATE_WAIT_EQ_RESET = 1 };

/*
 * Whether word lets the stream go on. GEQ is cuStreamWaitValue32's default
 * test, (int32_t)(word - want) >= 0: tickets wrap, and a word moved past want
 * by a later collective still releases it. A graph's word holds only 0 and 1.
 */
GATE_HD int collc__gate_reached(uint32_t word, uint32_t want, uint32_t mode)
{
	if (mode == GATE_WAIT_EQ_RESET)
		return word == want;
	return (int32_t)(word - want) >= 0;
}

/* The gate kernel's entry point in the embedded image (extern "C": no mangling). */
#define COLLC_GATE_KERNEL "collc_gate_kernel"

#ifndef __CUDACC__
/*
 * The path of a device's stream gates (include/collc.h: COLLC_STREAM_PATH_*)
 * from $COLLC_STREAM_PATH (env: NULL, "", "auto", "memops" or "kernel") and
 * whether the device has stream memory operations. -EINVAL for another value,
 * -EOPNOTSUPP for memops where there are none.
 */
int collc__stream_path_pick(const char *env, int have_memops);
/*
 * Whether libcollc may use stream memory operations: the driver has the V2
 * entry points (on by default wherever they exist), or only the V1 ones and
 * the device's CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1 (attr_v1, -1:
 * the query failed) says they are enabled.
 */
int collc__stream_memops_usable(int have_v2, int have_v1, int attr_v1);
/* "memops", "kernel", or "none" for anything else. */
const char *collc__stream_path_name(int path);
#endif

#endif
