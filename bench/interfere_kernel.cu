/* SPDX-License-Identifier: MIT */
/* collc-interfere's compute-bound kernel; see interfere_kernel.h. */
#include <cuda_runtime.h>

#include "bench/interfere_kernel.h"

__global__ void __launch_bounds__(IF_THREADS)
	if_fma(float *out, uint32_t *smid, uint32_t iters, uint32_t seed)
{
	uint32_t tid = blockIdx.x * IF_THREADS + threadIdx.x;
	float a[IF_CHAINS], s;

#pragma unroll
	for (uint32_t j = 0; j < IF_CHAINS; j++)
		a[j] = if_start(seed, tid, j);
	for (uint32_t i = 0; i < iters; i++) {
#pragma unroll
		for (uint32_t j = 0; j < IF_CHAINS; j++)
			a[j] = fmaf(a[j], IF_MUL, if_add(j));
	}
	s = a[0];
#pragma unroll
	for (uint32_t j = 1; j < IF_CHAINS; j++)
		s += a[j]; /* left to right, as the host check adds */
	out[tid] = s;
	if (threadIdx.x == 0) {
		uint32_t id;

		asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
		smid[blockIdx.x] = id;
	}
}

extern "C" int if_launch(float *out_d, uint32_t *smid_d, uint32_t blocks, uint32_t iters,
			 uint32_t seed, void *stream)
{
	if_fma<<<blocks, IF_THREADS, 0, (cudaStream_t)stream>>>(out_d, smid_d, iters, seed);
	return (int)cudaGetLastError();
}

extern "C" int if_blocks_per_sm(int *ret_n)
{
	return (int)cudaOccupancyMaxActiveBlocksPerMultiprocessor(ret_n, if_fma, IF_THREADS, 0);
}
