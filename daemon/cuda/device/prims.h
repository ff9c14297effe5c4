/* SPDX-License-Identifier: MIT */
/*
 * The primitive every ring algorithm calls: prim<flags>() (flags: one of
 * proto/prims.h COLLC_PRIM_*) moves nelem elements through the ring
 * connections in protocol steps over the payload movers of
 * prims_simple.h, prims_ll.h and prims_ll128.h. Per step, thread 0 waits
 * for the slot: S2 (head with acquire before the slot is overwritten) and
 * R1 (Simple: tail with acquire before the payload); after the payload, S1
 * (payload, system fence, tail) and R2 (payload consumed, then head).
 */
#ifndef COLLCD_CUDA_DEVICE_PRIMS_H
#define COLLCD_CUDA_DEVICE_PRIMS_H

#include <stdint.h>

#include "daemon/cuda/device/common.h"
#include "daemon/cuda/device/prims_ll.h"
#include "daemon/cuda/device/prims_ll128.h"
#include "daemon/cuda/device/prims_simple.h"

__device__ uint64_t step_bytes(uint32_t proto)
{
	if (proto == COLLC_PROTO_LL)
		return CUDA_LL_STEP;
	if (proto == COLLC_PROTO_LL128)
		return CUDA_LL128_STEP;
	return CUDA_SIMPLE_SLOT;
}

__device__ uint64_t chunk_bytes(uint32_t proto)
{
	if (proto == COLLC_PROTO_LL)
		return CUDA_LL_STEP;
	if (proto == COLLC_PROTO_LL128)
		return CUDA_LL128_STEP;
	return CUDA_SIMPLE_CHUNK;
}

/*
 * Moves nelem elements through the connections in steps of at most one slot,
 * as cpu/prims.c cpu_prim(): an empty call still posts one step. One instance per
 * combination of flags (the algorithms use seven): the payload loops inline
 * with their flags known. An instance for every call site cost minutes of
 * nvcc; one instance with the flags read at run time made ring LL128 of
 * 1-4 MiB 8-18 us slower (bench/RESULTS.md).
 */
template <int flags>
__device__ __noinline__ int prim(struct blk *b, const char *src, char *dst, int64_t nelem)
{
	const uint64_t bytes = nelem > 0 ? (uint64_t)nelem * b->es : 0;
	const uint64_t sb = step_bytes(b->proto);
	const uint64_t nsteps = bytes ? collc_div_up(bytes, sb) : 1;
	__shared__ int p_abort;

	for (uint64_t s = 0; s < nsteps; s++) {
		uint64_t off = s * sb;
		uint64_t len = bytes ? collc_min_u64(sb, bytes - off) : 0;
		const char *so = src ? src + off : NULL;
		char *d = dst ? dst + off : NULL;
		int r = 0;

		if (threadIdx.x == 0) {
			p_abort = 0;
			/*
			 * A streaming item may never miss in a wait: every 16th step
			 * looks at the communicator's device word.
			 */
			if ((++b->nsteps & 15) == 0 && b->revoked_dev && ld_vol32(b->revoked_dev))
				p_abort = 1;
			/* S2: head with acquire before the slot is overwritten; pairs with R2. */
			if (!p_abort && (flags & COLLC_P_SEND) &&
			    wait_ge(b, b->my_head,
				    b->send_step + 1 > COLLC_STEPS ? b->send_step + 1 - COLLC_STEPS
								   : 0) < 0)
				p_abort = 1;
			/* R1: tail with acquire before the payload; pairs with S1. */
			if (!p_abort && (flags & COLLC_P_RECV) && b->proto == COLLC_PROTO_SIMPLE &&
			    wait_ge(b, b->my_tail, b->recv_step + 1) < 0)
				p_abort = 1;
			/*
			 * A ring that crosses from another daemon: the proxy stored the
			 * step's bytes before its tail (X3, acquired by R1). Both ends
			 * compute them from what the daemons agreed: another length is a
			 * broken or hostile peer, and the rest of the slot is stale.
			 * P1: the mark, then the item's work_consumed behind the system
			 * fence (E1); pairs with P1' in node.c nc_broken(), which fails
			 * the communicator with EPROTO everywhere, and with P1'' in the
			 * scheduler (exec.h comm_broken), which then does not end the
			 * collective on the ranks early.
			 */
			if (!p_abort && (flags & COLLC_P_RECV) && b->prev_x &&
			    b->proto == COLLC_PROTO_SIMPLE &&
			    ld_vol32(&b->prev_x->len[collc_slot(b->recv_step, COLLC_STEPS)]) !=
				    (uint32_t)len) {
				st_vol32(&b->prev_x->broken, 1u);
				p_abort = 1;
			}
		}
		__syncthreads();
		if (p_abort)
			return -1;
		if (b->proto == COLLC_PROTO_LL) {
			r = ll_payload(b, flags, so, d, len);
		} else if (b->proto == COLLC_PROTO_LL128) {
			r = ll128_payload(b, flags, so, d, len);
		} else {
			const char *in =
				b->my_simple +
				(uint64_t)collc_slot(b->recv_step, COLLC_STEPS) * CUDA_SIMPLE_SLOT;
			char *out = b->nx_simple + (uint64_t)collc_slot(b->send_step, COLLC_STEPS) *
							   CUDA_SIMPLE_SLOT;

			simple_payload(b, flags, in, so, d, out, len);
			__syncthreads();
		}
		if (r < 0)
			return -1;
		if (threadIdx.x == 0) {
			/*
			 * A ring that crosses to another daemon: the proxy sends the
			 * step's bytes, stored before S1's fence and tail
			 * (X1: pairs with X1' in cuda/xconn.c xl_len()).
			 */
			if ((flags & COLLC_P_SEND) && b->next_len && b->proto == COLLC_PROTO_SIMPLE)
				st_vol32(b->next_len + collc_slot(b->send_step, COLLC_STEPS),
					 (uint32_t)len);
			/*
			 * S1: payload, system fence, tail; R2: payload consumed, then
			 * head. The fence is system scope, so it also orders both for
			 * the proxy when the ring lives in mapped host memory (X1, X2).
			 */
			if (b->proto == COLLC_PROTO_SIMPLE || (flags & COLLC_P_RECV))
				__threadfence_system();
			if (flags & COLLC_P_SEND)
				st_vol64(b->next_tail, b->send_step + 1);
			if (flags & COLLC_P_RECV)
				st_vol64(b->prev_head, b->recv_step + 1);
		}
		if (flags & COLLC_P_SEND)
			b->send_step++;
		if (flags & COLLC_P_RECV)
			b->recv_step++;
	}
	return 0;
}

#endif
