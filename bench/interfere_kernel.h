/* SPDX-License-Identifier: MIT */
/*
 * collc-interfere's compute-bound kernel (interfere_kernel.cu) behind a plain
 * C header. Every thread runs IF_CHAINS independent FMA chains
 * a = fma(a, IF_MUL, c_j) for `iters` steps and writes the sum of the chains;
 * the start values and the per-chain constants are the functions below, so
 * the host can recompute any output element bit for bit (fmaf and float
 * additions in the same order are correctly rounded on both sides).
 */
#ifndef COLLC_BENCH_INTERFERE_KERNEL_H
#define COLLC_BENCH_INTERFERE_KERNEL_H

#include <stdint.h>

#ifdef __CUDACC__
#define IF_HD __host__ __device__
#else
#define IF_HD
#endif

#define IF_THREADS 256u
#define IF_CHAINS  8u                /* independent chains: ILP enough to keep the FMA units full */
#define IF_MUL     (1.0f - 0x1p-20f) /* < 1: chains stay bounded; near 1: start values still matter */

static inline IF_HD float if_start(uint32_t seed, uint32_t tid, uint32_t j)
{
	uint32_t x = seed * 0x9e3779b9u ^ tid * 0x85ebca6bu ^ (j + 1) * 0xc2b2ae35u;

	x ^= x >> 16;
	x *= 0x7feb352du;
	x ^= x >> 15;
	x *= 0x846ca68bu;
	x ^= x >> 16;
	return (float)(x >> 8) * 0x1p-24f; /* [0, 1), exact */
}

static inline IF_HD float if_add(uint32_t j)
{
	return (float)(j + 1) * 0x1p-20f; /* fixed point of chain j: j + 1 */
}

#ifdef __cplusplus
extern "C" {
#endif
/*
 * Launches `blocks` blocks of IF_THREADS threads on stream (a cudaStream_t):
 * out[blockIdx * IF_THREADS + thread] gets the thread's sum, smid[blockIdx]
 * the SM the block ran on. Returns a cudaError_t.
 */
int if_launch(float *out_d, uint32_t *smid_d, uint32_t blocks, uint32_t iters, uint32_t seed,
	      void *stream);
/* Resident blocks of the kernel per SM (cudaOccupancyMaxActiveBlocksPerMultiprocessor). */
int if_blocks_per_sm(int *ret_n);
#ifdef __cplusplus
}
#endif

#endif /* COLLC_BENCH_INTERFERE_KERNEL_H */
