/* SPDX-License-Identifier: MIT */
/*
 * LL128's payload mover: 8 threads a 128-byte line; the flag lane of each
 * line compares and the warp reloads until no lane misses its flag (R128);
 * a warp's 8 stores of a line leave together (W128, proto/prims.h).
 */
#ifndef COLLCD_CUDA_DEVICE_PRIMS_LL128_H
#define COLLCD_CUDA_DEVICE_PRIMS_LL128_H

#include <stdint.h>

#include "daemon/cuda/device/common.h"
#include "daemon/cuda/device/prims_ll.h"

/* LL128 payload: 8 threads per 128-byte line, 16 bytes each; R128 / W128. */
__device__ __forceinline__ int ll128_payload(struct blk *b, int flags, const char *src, char *dst,
					     uint64_t len)
{
	const uint64_t rflag = collc_ll128_flag(b->recv_step),
		       sflag = collc_ll128_flag(b->send_step);
	char *in = b->my_ll128 + (uint64_t)collc_slot(b->recv_step, COLLC_STEPS) *
					 CUDA_LL128_SLOT_LINES * COLLC_LL128_LINE_BYTES;
	char *out = b->nx_ll128 + (uint64_t)collc_slot(b->send_step, COLLC_STEPS) *
					  CUDA_LL128_SLOT_LINES * COLLC_LL128_LINE_BYTES;
	const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
	const uint32_t j = lane & 7;
	const int flag_thread = j == 7;
	uint64_t nlines = collc_ll128_lines(len);
	__shared__ int l128_abort;

	if (threadIdx.x == 0)
		l128_abort = 0;
	__syncthreads();
	for (uint64_t g = warp; g * 4 < nlines; g += nwarps) {
		uint64_t line = g * 4 + (lane >> 3);
		int valid = line < nlines;
		uint64_t w0 = 0, w1 = 0;

		if (flags & COLLC_P_RECV) {
			for (uint32_t spins = 0;; spins++) {
				int need = 0, ab = 0;

				if (valid) {
					ld_vol2x64(in + line * COLLC_LL128_LINE_BYTES + 16 * j, w0,
						   w1);
					need = flag_thread && w1 != rflag;
				}
				if (!__any_sync(FULL_MASK, need))
					break;
				if (lane == 0)
					ab = check_abort(b, spins) || *(volatile int *)&l128_abort;
				ab = __shfl_sync(FULL_MASK, ab, 0);
				if (ab) {
					if (lane == 0)
						l128_abort = 1;
					break;
				}
			}
			if (*(volatile int *)&l128_abort)
				break;
		}
		if (valid) {
			uint64_t base = line * COLLC_LL128_DATA_WORDS + 2 * j;
			uint64_t off0 = base * 8, off1 = off0 + 8;
			uint64_t x0 = 0, x1 = 0;

			if (off0 < len)
				x0 = word_op(b, flags, w0, src, dst, off0,
					     (uint32_t)collc_min_u64(8, len - off0));
			if (!flag_thread && off1 < len)
				x1 = word_op(b, flags, w1, src, dst, off1,
					     (uint32_t)collc_min_u64(8, len - off1));
			if (flag_thread)
				x1 = sflag;
			w0 = x0;
			w1 = x1;
		}
		/* W128: the warp's 8 stores of a line leave together, never split by divergence. */
		__syncwarp();
		if ((flags & COLLC_P_SEND) && valid)
			st_vol2x64(out + line * COLLC_LL128_LINE_BYTES + 16 * j, w0, w1);
	}
	__syncthreads();
	return l128_abort ? -1 : 0;
}

#endif
