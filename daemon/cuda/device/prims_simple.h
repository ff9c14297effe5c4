/* SPDX-License-Identifier: MIT */
/*
 * Simple's payload mover: one slot's worth from the received slot or the
 * source, reduced, to the destination and the next rank's slot, in 16-byte
 * vectors where every pointer allows. No ordering of its own: prim()
 * (prims.h) waits for the slot (R1, S2) before and fences and publishes
 * (S1, R2) after.
 */
#ifndef COLLCD_CUDA_DEVICE_PRIMS_SIMPLE_H
#define COLLCD_CUDA_DEVICE_PRIMS_SIMPLE_H

#include <stdint.h>

#include "daemon/cuda/device/common.h"
#include "daemon/cuda/device/reduce_kernel.h"

/*
 * U vectors of one Simple step starting at vector i, T apart: loads of the
 * received slot (or the source) and of the source first, then the reduction
 * and the stores.
 */
template <int U>
__device__ __forceinline__ void simple_vecs(int flags, int dt, int op, uint32_t nr, int fin,
					    const char *in, const char *src, char *dst, char *out,
					    uint64_t i, uint64_t T)
{
	uint4 x[U], y[U];

	vecs_ld(x, (flags & COLLC_P_RECV) ? in : src, i, T);
	if (flags & COLLC_P_REDUCE) {
		vecs_ld(y, src, i, T);
		vecs_red(x, y, dt, op);
	}
	if (fin)
		vecs_fin(x, dt, nr);
	if (flags & COLLC_P_DST)
		vecs_st(dst, x, i, T);
	if (flags & COLLC_P_SEND)
		vecs_st(out, x, i, T);
}

/* Simple payload: one slot's worth, 16-byte vectors where every pointer allows. */
__device__ __forceinline__ void simple_payload(struct blk *b, int flags, const char *in,
					       const char *src, char *dst, char *out, uint64_t len)
{
	const int dt = b->it->dtype, op = b->it->redop;
	const uint32_t nr = b->it->nranks, es = b->es;
	const int fin = (flags & COLLC_P_POSTOP) && op == COLLC_AVG && nr > 1;
	const uint64_t T = blockDim.x;
	uintptr_t al = 0;
	uint64_t nvec, i = threadIdx.x;

	if (flags & COLLC_P_RECV)
		al |= (uintptr_t)in;
	if (flags & (COLLC_P_SRC | COLLC_P_REDUCE))
		al |= (uintptr_t)src;
	if (flags & COLLC_P_DST)
		al |= (uintptr_t)dst;
	if (flags & COLLC_P_SEND)
		al |= (uintptr_t)out;
	nvec = (al & 15) ? 0 : len / 16;
	for (; i + (COLLC_VEC_UNROLL - 1) * T < nvec; i += COLLC_VEC_UNROLL * T)
		simple_vecs<COLLC_VEC_UNROLL>(flags, dt, op, nr, fin, in, src, dst, out, i, T);
	for (; i < nvec; i += T)
		simple_vecs<1>(flags, dt, op, nr, fin, in, src, dst, out, i, T);
	/* The rest, one element at a time. */
	for (uint64_t o = nvec * 16 + (uint64_t)threadIdx.x * es; o < len; o += T * es) {
		uint64_t x = (flags & COLLC_P_RECV) ? ld_bytes(in + o, es) : ld_bytes(src + o, es);

		if (flags & COLLC_P_REDUCE)
			x = red8(dt, op, x, ld_bytes(src + o, es));
		if (fin)
			x = fin8(dt, nr, x);
		if (flags & COLLC_P_DST)
			st_bytes(dst + o, es, x);
		if (flags & COLLC_P_SEND)
			st_bytes(out + o, es, x);
	}
}

#endif
