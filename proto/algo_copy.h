/* SPDX-License-Identifier: MIT */
/*
 * Copy lists, written once for every executor: all-to-all, all-to-allv and
 * send/recv run as direct copies through peer memory. The scheduler writes
 * each rank's copies (proto/work.h struct collc_work_copies: source and
 * destination in executor space, bytes) next to the item; an executor's
 * channel takes its share of the list's concatenated bytes and copies it.
 *
 * No rank waits for another: every source was complete when its rank
 * submitted (the scheduler launches only once every rank has), nothing reads
 * a destination while the item runs, and a rank's buffers may be reused only
 * once the scheduler saw every rank's item consumed. So no barrier, no flag,
 * no connection: an all-to-all item costs its copies alone.
 *
 * All-to-all(v) pulls (rank r's copy p reads rank p's send buffer at its
 * block for r and writes r's receive buffer at its block for p) or pushes
 * (copy p reads r's own send buffer and writes rank p's receive buffer), as
 * the scheduler decides (config copy_push, unless memory peers cannot reach
 * decides). A send/recv pair is one copy on the sender's device (push) or the
 * receiver's (pull); its item's sendbuf, recvbuf and count say the same as
 * its list (the grid reads those and skips the list).
 *
 * Pure arithmetic, no memory access.
 */
#ifndef COLLC_PROTO_ALGO_COPY_H
#define COLLC_PROTO_ALGO_COPY_H

#include <stdint.h>

#include "proto/prims.h"
#include "proto/shm.h"
#include "proto/work.h"

/* Does collective coll (COLLC_OP_*) run as a copy list? */
COLLC_HD int collc_copy_coll(uint32_t coll)
{
	return coll == COLLC_OP_ALLTOALL || coll == COLLC_OP_ALLTOALLV || coll == COLLC_OP_SEND ||
	       coll == COLLC_OP_RECV;
}

/* Entries of an item's copy list: one per rank for all-to-all(v), one for send/recv. */
COLLC_HD uint32_t collc_copy_count(uint32_t coll, uint32_t nranks)
{
	return coll == COLLC_OP_SEND || coll == COLLC_OP_RECV ? 1u : nranks;
}

/*
 * Channel share `share` of nchannels takes bytes [lo, hi) of total, the
 * list's bytes end to end, cut at multiples of align bytes (16: whole vectors
 * on the grid and whole elements of every dtype, as every copy's length is a
 * multiple of its element size).
 */
COLLC_HD void collc_copy_share(uint64_t total, uint32_t nchannels, uint32_t share, uint64_t align,
			       uint64_t *ret_lo, uint64_t *ret_hi)
{
	const uint64_t per = collc_round_up(collc_div_up(total, nchannels), align);
	const uint64_t lo = collc_min_u64(total, (uint64_t)share * per);

	*ret_lo = lo;
	*ret_hi = collc_min_u64(total, lo + per);
}

/*
 * The part of copy k (bytes long, starting at byte `start` of the list) that
 * falls in [lo, hi): *ret_off bytes into the copy, *ret_len bytes (0: none).
 */
COLLC_HD void collc_copy_clip(uint64_t start, uint64_t bytes, uint64_t lo, uint64_t hi,
			      uint64_t *ret_off, uint64_t *ret_len)
{
	const uint64_t a = start > lo ? start : lo;
	const uint64_t e = collc_min_u64(start + bytes, hi);

	*ret_off = a - start;
	*ret_len = e > a ? e - a : 0;
	if (e <= a)
		*ret_off = 0;
}

/*
 * Across daemons there is no peer memory: all-to-all(v) of a communicator
 * that spans collcd daemons runs as a relay on its ring (algo ring, the
 * daemons' Simple links; cpu/copy.c cpu_copy_relay()). Rank r's entry p then
 * names r's own blocks: src its block for rank p, dst its block from rank p,
 * and bytes packs both lengths (each below 4 GiB).
 */
#define COLLC_RELAY_BLOCK_MAX 0xffffffffull

COLLC_HD uint64_t collc_relay_pack(uint64_t send_bytes, uint64_t recv_bytes)
{
	return send_bytes | recv_bytes << 32;
}

COLLC_HD uint64_t collc_relay_send_bytes(uint64_t packed)
{
	return packed & COLLC_RELAY_BLOCK_MAX;
}

COLLC_HD uint64_t collc_relay_recv_bytes(uint64_t packed)
{
	return packed >> 32;
}

#endif
