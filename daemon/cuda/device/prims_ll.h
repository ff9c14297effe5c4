/* SPDX-License-Identifier: MIT */
/*
 * LL's payload mover and its line primitives: ll_recv_line() polls a line
 * until both its flags match (R-LL), ll_send_line() writes payload and flags
 * in one 16-byte store (W-LL), no fence (proto/prims.h). word_op() computes
 * one 8-byte payload word for LL and LL128. One-shot LL (oneshot_ll.h) uses
 * the line primitives too.
 */
#ifndef COLLCD_CUDA_DEVICE_PRIMS_LL_H
#define COLLCD_CUDA_DEVICE_PRIMS_LL_H

#include <stdint.h>

#include "daemon/cuda/device/common.h"
#include "daemon/cuda/device/reduce_kernel.h"

/* Computes one 8-byte payload word of LL/LL128 from what was received and the source. */
__device__ __forceinline__ uint64_t word_op(struct blk *b, int flags, uint64_t rcv, const char *src,
					    char *dst, uint64_t off, uint32_t n)
{
	uint64_t x = (flags & COLLC_P_RECV) ? rcv : ld_bytes(src + off, n);

	if (flags & COLLC_P_REDUCE)
		x = red8(b->it->dtype, b->it->redop, x, ld_bytes(src + off, n));
	if ((flags & COLLC_P_POSTOP) && b->it->redop == COLLC_AVG && b->it->nranks > 1)
		x = fin8(b->it->dtype, b->it->nranks, x);
	if (flags & COLLC_P_DST)
		st_bytes(dst + off, n, x);
	return x;
}

/*
 * R-LL: polls one line until it carries flag, then takes its payload from
 * that snapshot. -1 once the grid or the communicator aborted, or another
 * thread of the block did (*abort_all, which it then sets).
 */
__device__ int ll_recv_line(struct blk *b, const union collc_ll_line *line, uint32_t flag,
			    uint64_t *out, volatile int *abort_all)
{
	for (uint32_t spins = 0;; spins++) {
		uint4 v = ld_vol128(line);
		union collc_ll_line l;

		l.w.data1 = v.x;
		l.w.flag1 = v.y;
		l.w.data2 = v.z;
		l.w.flag2 = v.w;
		if (collc_ll_ready(l, flag)) {
			*out = collc_ll_payload(l);
			return 0;
		}
		if (check_abort(b, spins) || *abort_all) {
			*abort_all = 1;
			return -1;
		}
	}
}

/* W-LL: the payload and both flags in one 16-byte store, no fence. */
__device__ __forceinline__ void ll_send_line(union collc_ll_line *line, uint64_t payload,
					     uint32_t flag)
{
	union collc_ll_line l = collc_ll_pack(payload, flag);

	st_vol128(line, make_uint4(l.w.data1, l.w.flag1, l.w.data2, l.w.flag2));
}

/* LL payload: each thread takes whole 16-byte lines; R-LL / W-LL. */
__device__ __forceinline__ int ll_payload(struct blk *b, int flags, const char *src, char *dst,
					  uint64_t len)
{
	const uint32_t rflag = collc_ll_flag(b->recv_step), sflag = collc_ll_flag(b->send_step);
	union collc_ll_line *in =
		(union collc_ll_line *)(b->my_ll) +
		(uint64_t)collc_slot(b->recv_step, COLLC_STEPS) * CUDA_LL_SLOT_LINES;
	union collc_ll_line *out =
		(union collc_ll_line *)(b->nx_ll) +
		(uint64_t)collc_slot(b->send_step, COLLC_STEPS) * CUDA_LL_SLOT_LINES;
	uint64_t nlines = collc_ll_lines(len);
	__shared__ int ll_abort;

	if (threadIdx.x == 0)
		ll_abort = 0;
	__syncthreads();
	for (uint64_t i = threadIdx.x; i < nlines; i += blockDim.x) {
		uint64_t off = i * 8, rcv = 0;
		uint32_t n = (uint32_t)collc_min_u64(8, len - off);

		if ((flags & COLLC_P_RECV) && ll_recv_line(b, &in[i], rflag, &rcv, &ll_abort) < 0)
			break;
		uint64_t x = word_op(b, flags, rcv, src, dst, off, n);

		if (flags & COLLC_P_SEND)
			ll_send_line(&out[i], x, sflag);
	}
	__syncthreads();
	return ll_abort ? -1 : 0;
}

#endif
