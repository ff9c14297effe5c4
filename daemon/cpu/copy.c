/* SPDX-License-Identifier: MIT */
/*
 * Copy lists on the CPU executor: all-to-all, all-to-allv and send/recv
 * (proto/algo_copy.h). The channel copies its share of the list's bytes
 * straight between client buffers, all mapped in collcd; no rank waits for
 * another. Between pieces it looks for a revocation, so a revoked
 * communicator's large copy stops within one piece.
 */
#include <errno.h>
#include <string.h>

#include "daemon/log.h"

#include "daemon/cpu/internal.h"
#include "proto/algo_copy.h"

#define COPY_PIECE (1u << 20) /* bytes between looks for a revocation */

int cpu_copy(struct cpu_run *x, const struct collc_work_copies *list)
{
	const uint32_t n = collc_copy_count(x->it->coll, x->it->nranks);
	struct collc_work_copy c[COLLC_MAX_RANKS];
	uint64_t total = 0, lo, hi, start = 0;

	if (n > COLLC_MAX_RANKS)
		return -EINVAL;
	/* One snapshot: the list is collcd's own, but read it once all the same. */
	memcpy(c, list->c, n * sizeof(c[0]));
	for (uint32_t k = 0; k < n; k++)
		total += c[k].bytes;
	collc_copy_share(total, x->it->nchannels, x->share, 16, &lo, &hi);
	for (uint32_t k = 0; k < n && start < hi; start += c[k].bytes, k++) {
		uint64_t off, len;

		collc_copy_clip(start, c[k].bytes, lo, hi, &off, &len);
		for (uint64_t i = 0; i < len; i += COPY_PIECE) {
			uint64_t m = collc_min_u64(COPY_PIECE, len - i);

			if (cpu_cancelled(x))
				return -ECANCELED;
			memcpy((char *)(uintptr_t)c[k].dst + off + i,
			       (const char *)(uintptr_t)c[k].src + off + i, m);
		}
	}
	return 0;
}

/*
 * All-to-all(v) across daemons: a relay on the ring (proto/algo_copy.h).
 * For each origin o in turn (the same order on every rank), o streams to
 * its successor a header (the bytes of each of its blocks, by ring distance
 * 1..n-1) and then its blocks in ring order; the rank at distance d keeps
 * the first block that reaches it and forwards the header and the rest, so
 * the stream shrinks by one block per hop. Every rank consumes its links
 * in the order they were written, as in a pipelined ring broadcast, so the
 * ring cannot deadlock; every length comes from the header, so both ends
 * of a link run the same steps. Only channel share 0 relays; the others
 * have nothing to do.
 */
#define RELAY_HDR_MAX (COLLC_MAX_RANKS * sizeof(uint64_t))

/* Receives bytes that are not ours (a block that disagrees): through scratch. */
static int relay_discard(struct cpu_run *x, uint64_t bytes)
{
	/* Pieces of whole steps keep both ends' steps aligned. */
	uint64_t piece = CPU_SCRATCH_BYTES / x->step_bytes * x->step_bytes;
	int r = 0;

	if (!bytes)
		return cpu_prim(x, COLLC_PRIM_RECV, NULL, x->scratch, 0);
	for (uint64_t off = 0; off < bytes && r == 0; off += piece)
		r = cpu_prim(x, COLLC_PRIM_RECV, NULL, x->scratch,
			     (int64_t)collc_min_u64(piece, bytes - off));
	return r;
}

int cpu_copy_relay(struct cpu_run *x, const struct collc_work_copies *list)
{
	const struct collc_work_item *it = x->it;
	const uint32_t n = it->nranks, me = it->rank;
	struct collc_work_copy c[COLLC_MAX_RANKS];
	uint64_t *hdr = (uint64_t *)(void *)x->scratch, len[COLLC_MAX_RANKS], own;
	int r, bad = 0;

	if (n < 2 || n > COLLC_MAX_RANKS || x->share != 0)
		return n > COLLC_MAX_RANKS ? -EINVAL : 0;
	if (RELAY_HDR_MAX > CPU_SCRATCH_BYTES)
		return -EINVAL;
	r = cpu_prims_setup(x);
	if (r < 0)
		return r;
	if (it->proto != COLLC_PROTO_SIMPLE)
		return -EINVAL;
	memcpy(c, list->c, n * sizeof(c[0]));
	/* The byte stream: elements of one byte through the primitives. */
	x->es = 1;
	own = collc_min_u64(collc_relay_send_bytes(c[me].bytes), collc_relay_recv_bytes(c[me].bytes));
	if (own) /* an empty block may have no buffer at all */
		memcpy((char *)(uintptr_t)c[me].dst, (const char *)(uintptr_t)c[me].src, own);
	for (uint32_t o = 0; o < n && r == 0; o++) {
		const uint32_t d = (me + n - o) % n;
		const int64_t hbytes = (int64_t)(n * sizeof(uint64_t));

		if (d == 0) {
			hdr[0] = 0;
			for (uint32_t k = 1; k < n; k++)
				hdr[k] = collc_relay_send_bytes(c[(me + k) % n].bytes);
			r = cpu_prim(x, COLLC_PRIM_SEND, (const char *)hdr, NULL, hbytes);
			for (uint32_t k = 1; k < n && r == 0; k++) {
				const struct collc_work_copy *b = &c[(me + k) % n];

				r = cpu_prim(x, COLLC_PRIM_SEND, (const char *)(uintptr_t)b->src,
					     NULL, (int64_t)collc_relay_send_bytes(b->bytes));
			}
			continue;
		}
		/* The last hop keeps its block and forwards nothing. */
		r = cpu_prim(x, d < n - 1 ? COLLC_PRIM_RECV_COPY_SEND : COLLC_PRIM_RECV, NULL,
			     (char *)hdr, hbytes);
		if (r < 0)
			break;
		/* Our own copy: relay_discard() reuses the scratch. */
		memcpy(len, hdr, (size_t)hbytes);
		for (uint32_t k = 1; k < n; k++)
			if (len[k] > COLLC_RELAY_BLOCK_MAX) {
				/* Nothing to stay in step with: the stream itself is broken. */
				log_err("all-to-all relay: rank %u sent a block of %llu bytes", o,
					(unsigned long long)len[k]);
				return -EPROTO;
			}
		if (len[d] == collc_relay_recv_bytes(c[o].bytes)) {
			r = cpu_prim(x, COLLC_PRIM_RECV, NULL, (char *)(uintptr_t)c[o].dst,
				     (int64_t)len[d]);
		} else {
			/* The daemons agreed on the counts (node.c): only a broken peer gets here. */
			bad = 1;
			r = relay_discard(x, len[d]);
		}
		for (uint32_t k = d + 1; k < n && r == 0; k++)
			r = cpu_prim(x, COLLC_P_RECV | COLLC_P_SEND, NULL, NULL, (int64_t)len[k]);
	}
	if (r == 0 && bad) {
		log_err("all-to-all relay: a block's length differs from the one agreed");
		r = -EPROTO;
	}
	return r;
}
