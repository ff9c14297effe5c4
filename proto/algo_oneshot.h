/* SPDX-License-Identifier: MIT */
/*
 * One-shot, two-shot and one-shot LL, the part every executor shares: which
 * elements a channel takes, which segment each rank reduces in two-shot, and
 * how one-shot LL cuts a share into rounds and lines. The barriers, the peer
 * loads and the flag waits stay with the executors (cpu/peer.c, the grid's
 * device/oneshot.h and device/oneshot_ll.h).
 *
 * Every rank reads the same element range of every peer's input:
 *   all-reduce, reduce (the root only): [lo, hi) of every send buffer,
 *     reduced in rank order 0 .. n-1 into [lo, hi) of dst;
 *   reduce-scatter: [lo, hi) of block `rank` of every send buffer, into
 *     [lo, hi) of dst;
 *   broadcast: [lo, hi) of the root's send buffer, into [lo, hi) of dst;
 *   allgather: [lo, hi) of rank p's send buffer, into [lo, hi) of block p
 *     of dst, for every p;
 *   two-shot all-reduce: phase 1 reduces segment `rank` of [lo, hi) from
 *     every send buffer into our dst; after a barrier, phase 2 copies
 *     segment q from rank q's dst, for every q != rank.
 * Pure arithmetic, no memory access.
 */
#ifndef COLLC_PROTO_ALGO_ONESHOT_H
#define COLLC_PROTO_ALGO_ONESHOT_H

#include <stdint.h>

#include "proto/prims.h"

/*
 * Channel share `share` of nchannels takes elements [lo, hi) of count, in
 * pieces of a multiple of align elements (the grid: whole 16-byte vectors;
 * the CPU: 1).
 */
COLLC_HD void collc_oneshot_share(uint64_t count, uint32_t nchannels, uint32_t share,
				  uint64_t align, uint64_t *ret_lo, uint64_t *ret_hi)
{
	const uint64_t per = collc_round_up(collc_div_up(count, nchannels), align);
	const uint64_t lo = collc_min_u64(count, (uint64_t)share * per);

	*ret_lo = lo;
	*ret_hi = collc_min_u64(count, lo + per);
}

/* Two-shot: the segment [a, e) of the share [lo, hi) that rank q of nranks reduces. */
COLLC_HD void collc_twoshot_seg(uint64_t lo, uint64_t hi, uint32_t nranks, uint32_t q,
				uint64_t align, uint64_t *ret_a, uint64_t *ret_e)
{
	const uint64_t seg = collc_round_up(collc_div_up(hi - lo, nranks), align);
	const uint64_t a = collc_min_u64(hi, lo + (uint64_t)q * seg);

	*ret_a = a;
	*ret_e = collc_min_u64(hi, a + seg);
}

/*
 * One-shot LL (proto/prims.h): a share of `bytes` moves in rounds of at
 * most round_bytes; an empty share still runs one (empty) round (OLL1).
 */
COLLC_HD uint64_t collc_oll_rounds(uint64_t bytes, uint64_t round_bytes)
{
	return bytes ? collc_div_up(bytes, round_bytes) : 1;
}

/* Payload bytes of round k. */
COLLC_HD uint64_t collc_oll_round_len(uint64_t bytes, uint64_t round_bytes, uint64_t k)
{
	return bytes ? collc_min_u64(round_bytes, bytes - k * round_bytes) : 0;
}

/* Payload bytes line i of a round of len bytes carries: 8, fewer at the end, 0 in an empty round. */
COLLC_HD uint32_t collc_oll_line_bytes(uint64_t len, uint64_t i)
{
	const uint64_t off = i * COLLC_LL_LINE_PAYLOAD;

	return (uint32_t)(len > off ? collc_min_u64(COLLC_LL_LINE_PAYLOAD, len - off) : 0);
}

#endif /* COLLC_PROTO_ALGO_ONESHOT_H */
