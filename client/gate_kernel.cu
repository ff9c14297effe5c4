/* SPDX-License-Identifier: MIT */
/*
 * The gate kernel: what libcollc enqueues on a stream where the driver has no
 * stream memory operations. One thread does what the two (a graph: three)
 * memory operations do, in one launch: store the go word (host memory mapped
 * into the GPU) once the stream's earlier work is done, wait until the
 * device word releases the stream, and in a graph clear the word for the
 * next replay. Built into an image that libcollc embeds (no runtime
 * compiler) and loads with cuModuleLoadData; launched with cuLaunchKernel, so
 * a capture records it as a kernel node.
 */
#include <stdint.h>

#include "client/gate_kernel.h"

__device__ __forceinline__ uint32_t ld_acq_sys32(const uint32_t *p)
{
	uint32_t v;

	asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

__device__ __forceinline__ void st_rel_sys32(uint32_t *p, uint32_t v)
{
	asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

extern "C" __global__ void collc_gate_kernel(uint32_t *go, uint32_t go_val, uint32_t *word,
					     uint32_t want, uint32_t mode)
{
	unsigned int ns = 32;

	/*
	 * K1: pairs with G1, collcd's acquire of go. The stream's earlier kernels
	 * and copies are complete (stream order); the system fence makes their
	 * writes visible to collcd's grid and peers before go, as the memory
	 * operation's default write fences first.
	 */
	__threadfence_system();
	st_rel_sys32(go, go_val);
	/* K2: pairs with E2, the grid's store of the word: the result is visible to what follows. */
	while (!collc__gate_reached(ld_acq_sys32(word), want, mode)) {
		__nanosleep(ns);
		if (ns < 256)
			ns <<= 1;
	}
	/* Wait-then-reset: the next replay's go is stored after this (K1's fence). */
	if (mode == GATE_WAIT_EQ_RESET)
		st_rel_sys32(word, 0u);
}
