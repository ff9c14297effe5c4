/* SPDX-License-Identifier: MIT */
/*
 * Copy lists on the grid: all-to-all, all-to-allv and send/recv
 * (proto/algo_copy.h). The block reads its item's list once from the FIFO's
 * host memory into shared memory, then copies its share of the list's bytes
 * through peer memory with one-source reduce_n() (16-byte vectors where every
 * address allows, elements otherwise). No flag, no barrier: the scheduler
 * completes the collective once every rank's item is consumed (E1 covers the
 * stores into peers' buffers).
 */
#ifndef COLLCD_CUDA_DEVICE_COPY_H
#define COLLCD_CUDA_DEVICE_COPY_H

#include <stdint.h>

#include "daemon/cuda/device/common.h"
#include "daemon/cuda/device/oneshot.h"
#include "proto/algo_copy.h"

__shared__ struct collc_work_copy sh_copy[COLLC_MAX_RANKS];

__device__ __noinline__ int copy_run(struct blk *b)
{
	const uint32_t n = collc_copy_count(b->it->coll, b->it->nranks), t = threadIdx.x;
	const int p2p = b->it->coll == COLLC_OP_SEND || b->it->coll == COLLC_OP_RECV;
	const uint64_t *list = (const uint64_t *)b->copies->c;
	uint64_t total = 0, lo, hi, start = 0;

	if (n > COLLC_MAX_RANKS)
		return 0;
	/*
	 * The list was written before the item's seq (W1). The poller took the
	 * item from its LL copy without an acquire (L1'), so each thread that
	 * reads the list first acquires the seq, which can only hold this
	 * item's (the host rewrites the slot once every channel consumed it):
	 * one more PCIe round trip, for copy lists only. A send/recv's one copy
	 * is the item's own buffers: no PCIe round trip.
	 */
	if (p2p && t == 0) {
		sh_copy[0].src = b->it->sendbuf;
		sh_copy[0].dst = b->it->recvbuf;
		sh_copy[0].bytes = b->it->count * b->es;
	} else if (!p2p && t < 3 * n) {
		(void)ld_acq_sys(b->host_seq); /* W1' */
		((uint64_t *)sh_copy)[t] = ld_vol64(list + t);
	}
	__syncthreads();
	for (uint32_t k = 0; k < n; k++)
		total += sh_copy[k].bytes;
	collc_copy_share(total, b->it->nchannels, b->share, 16, &lo, &hi);
	for (uint32_t k = 0; k < n && start < hi; start += sh_copy[k].bytes, k++) {
		uint64_t off, len;

		collc_copy_clip(start, sh_copy[k].bytes, lo, hi, &off, &len);
		if (len)
			reduce_n(b, &sh_copy[k].src, 1, off, (char *)(uintptr_t)sh_copy[k].dst, off,
				 len, 0);
	}
	__syncthreads(); /* sh_copy is read by every thread until here */
	return 0;
}

#endif
