/* SPDX-License-Identifier: MIT */
/*
 * Send and receive checked the same way on one node and across daemons:
 * every rank to every rank in a random posting order, a ring with many
 * outstanding, and the refusals (mismatched counts and dtypes, timeouts).
 * Buffers are P2P_BLOCK bytes per peer (or per ring operation); buf_bytes
 * is the whole receive buffer, canary-filled before each phase.
 */
#ifndef COLLC_TEST_P2PCHECK_H
#define COLLC_TEST_P2PCHECK_H

#include <stddef.h>
#include <stdint.h>

#include <collc.h>

#include "harness.h"

#define P2P_BLOCK     (64u << 10) /* bytes per peer block */
#define P2P_RING      48          /* sends and receives outstanding per rank in the ring */
#define P2P_MAX_RANKS 64

/* n bytes of the pattern rank `from` sends rank `to` in round k. */
void p2p_fill(uint8_t *p, size_t n, uint64_t k, uint32_t from, uint32_t to);
/* 0 when p holds it; else 1 after reporting the first wrong byte. */
int p2p_check(const uint8_t *p, size_t n, uint64_t k, uint32_t from, uint32_t to, const char *what);
/* Elements rank `from` sends rank `to` in round k (every rank computes the same). */
size_t p2p_count(uint64_t k, int from, int to, size_t es);
/* Waits for every request; 1 after reporting the first that failed. */
int p2p_wait_all(struct collc_ctx *ctx, const collc_req *reqs, int n, const char *what);
/* Every rank to every rank (itself too), dtype dt, all posted in a random order. */
int p2p_all_pairs(struct collc_ctx *ctx, struct collc_comm *comm, int rank, int nranks, uint64_t k,
		  collc_dtype dt, uint8_t *send, uint8_t *recv, size_t buf_bytes);
/* P2P_RING sends right and receives left, all outstanding at once, each of its own size. */
int p2p_ring(struct collc_ctx *ctx, struct collc_comm *comm, int rank, int nranks, uint8_t *send,
	     uint8_t *recv, size_t buf_bytes);
/*
 * Ranks 0 and 1 (the others only pass bar twice): counts, then dtypes that
 * differ end -EINVAL on both, nothing written; a receive without a sender
 * and a send without a receiver end -ETIMEDOUT under a 300 ms timeout, and
 * so does each one's late partner; the pair then works again.
 */
int p2p_refusals(struct collc_ctx *ctx, struct collc_comm *comm, int rank, uint8_t *send,
		 uint8_t *recv, size_t buf_bytes, struct h_barrier *bar);

/*
 * The last rank exits (no goodbye) while rank 0 waits to receive from it:
 * rank 0's receive ends with -EPIPE; the others pass bar once. Then every
 * surviving rank destroys comm and disconnects. Returns 0 or 1 (the last
 * rank never returns).
 */
int p2p_dying_peer(struct collc_ctx *ctx, struct collc_comm *comm, int rank, int nranks,
		   uint8_t *recv, struct h_barrier *bar, const char *where);

#endif
