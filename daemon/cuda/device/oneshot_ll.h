/* SPDX-License-Identifier: MIT */
/*
 * One-shot LL all-reduce, allgather and reduce-scatter: lines pushed
 * straight into every peer's inbox (W-LL), our own inbox polled (R-LL), an
 * inbox slot reused by OLL1 (proto/prims.h); no fence, no barrier. The
 * share, its rounds and which block goes where are proto/algo_oneshot.h's;
 * the loops are the grid's own (proto/algo_oneshot.h says why).
 */
#ifndef COLLCD_CUDA_DEVICE_ONESHOT_LL_H
#define COLLCD_CUDA_DEVICE_ONESHOT_LL_H

#include <stdint.h>

#include "daemon/cuda/device/common.h"
#include "daemon/cuda/device/oneshot.h"
#include "daemon/cuda/device/prims_ll.h"
#include "proto/algo_oneshot.h"

/*
 * One-shot LL (proto/prims.h): all-reduce, allgather and reduce-scatter.
 * This channel's share of the one-shot split of count elements (a rank's
 * block: allgather's send count, reduce-scatter's receive count), in rounds
 * of at most CUDA_OLL_SLOT_LINES lines. A thread pushes its lines into every
 * peer's inbox (W-LL: data and flags in one 16-byte store, no fence): our
 * input (all-reduce, allgather) or the peer's block of it (reduce-scatter).
 * Then it takes the same lines of every rank in rank order, polling our own
 * inbox (R-LL), and reduces them into the result (all-reduce,
 * reduce-scatter) or stores each into its rank's block (allgather). Every
 * line a thread pushes, and its own contribution, is read before it stores
 * the result, so in-place buffers are safe. The __syncthreads() that ends
 * a round orders every thread's reads of the round before any thread's
 * pushes of the next (OLL1).
 */
__device__ int oll_run(struct blk *b, const char *src, char *dst)
{
	const uint32_t n = b->it->nranks, me = b->it->rank, coll = b->it->coll;
	const int dt = b->it->dtype, op = b->it->redop;
	const int fin = op == COLLC_AVG && coll != COLLC_OP_ALLGATHER;
	const uint64_t es = b->es, blk = b->it->count * es;
	uint64_t lo, hi;
	const uint64_t round = (uint64_t)CUDA_OLL_SLOT_LINES * COLLC_LL_LINE_PAYLOAD;
	uint64_t bytes, nrounds;
	const union collc_ll_line *inbox = (const union collc_ll_line *)(uintptr_t)b->ch->oll_inbox;
	/* Where rank p's lines come from in our input: reduce-scatter sends block p. */
	const uint64_t pstride = collc_oll_in_stride(coll, blk);
	__shared__ int oll_abort;

	oneshot_share(b, &lo, &hi);
	bytes = (hi - lo) * es;
	nrounds = collc_oll_rounds(bytes, round);
	if (threadIdx.x == 0)
		oll_abort = 0;
	__syncthreads();
	for (uint64_t k = 0; k < nrounds; k++) {
		const uint64_t gen = ++b->os_gen; /* every thread keeps the same count */
		const uint32_t flag = collc_ll_flag(gen);
		const uint64_t off = lo * es + k * round;
		const uint64_t len = collc_oll_round_len(bytes, round, k);
		const uint64_t nlines = collc_oll_lines(len);

		/* W-LL: pairs with R-LL in peer p's ll_recv_line(). */
		for (uint64_t i = threadIdx.x; i < nlines; i += blockDim.x) {
			const uint32_t w = collc_oll_line_bytes(len, i);
			const uint64_t o = off + 8 * i;
			const uint64_t mine = w ? ld_bytes(src + me * pstride + o, w) : 0;

			for (uint32_t p = 0; p < n; p++)
				if (p != me)
					ll_send_line((union collc_ll_line *)(uintptr_t)
								     b->ch->oll_peer[p] +
							     collc_oll_line(gen, n, me, i,
									    CUDA_OLL_SLOT_LINES),
						     pstride && w
							     ? ld_bytes(src + p * pstride + o, w)
							     : mine,
						     flag);
		}
		if (b->trace && threadIdx.x == 0 && k == 0)
			b->t_ollwait = globaltimer();
		/*
		 * A thread takes its lines only after pushing all of them, so its
		 * lines' round trips overlap rather than follow each other (512 KiB
		 * all-reduce p50 24.7 -> 23.3 us, pipelined 14.6 -> 13.5 us; 2 x
		 * H200). It reads and writes only its own lines' bytes, so in-place
		 * buffers stay safe.
		 */
		for (uint64_t i = threadIdx.x; i < nlines; i += blockDim.x) {
			const uint32_t w = collc_oll_line_bytes(len, i);
			const uint64_t o = off + 8 * i;
			const uint64_t mine = w ? ld_bytes(src + me * pstride + o, w) : 0;
			uint64_t acc = 0, x;

			for (uint32_t p = 0; p < n; p++) {
				x = mine;
				/* R-LL: pairs with W-LL in rank p. */
				if (p != me &&
				    ll_recv_line(b,
						 inbox + collc_oll_line(gen, n, p, i,
									CUDA_OLL_SLOT_LINES),
						 flag, &x, &oll_abort) < 0)
					break;
				if (coll == COLLC_OP_ALLGATHER) {
					if (w)
						st_bytes(dst + p * blk + o, w, x);
				} else {
					acc = p == 0 ? x : red8(dt, op, acc, x);
				}
			}
			if (*(volatile int *)&oll_abort)
				break;
			if (b->trace && i == 0 && k == 0)
				b->t_ollwait = globaltimer() - b->t_ollwait;
			if (w && coll != COLLC_OP_ALLGATHER)
				st_bytes(dst + o, w, fin ? fin8(dt, n, acc) : acc);
		}
		__syncthreads();
		if (oll_abort)
			return -1;
	}
	return 0;
}

#endif
