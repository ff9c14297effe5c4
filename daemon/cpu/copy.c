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
