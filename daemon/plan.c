/* SPDX-License-Identifier: MIT */
#include "daemon/plan.h"
#include "proto/algo_copy.h"
#include "proto/prims.h"
#include "proto/shm.h"
#include "proto/work.h"

int plan_algo_supported(int op, uint32_t algo)
{
	switch (algo) {
	case COLLC_ALGO_RING:
		return op > COLLC_OP_NOP && op < COLLC_OP_MAX && !collc_copy_coll((uint32_t)op);
	case COLLC_ALGO_ONESHOT:
		return op > COLLC_OP_NOP && op < COLLC_OP_MAX;
	case COLLC_ALGO_TWOSHOT:
		return op == COLLC_OP_ALLREDUCE;
	}
	return 0;
}

int plan_proto_supported(int op, uint32_t algo, uint32_t proto)
{
	if (collc_copy_coll((uint32_t)op))
		return algo == COLLC_ALGO_ONESHOT && proto == COLLC_PROTO_SIMPLE;
	if (proto == COLLC_PROTO_SIMPLE)
		return algo == COLLC_ALGO_RING || algo == COLLC_ALGO_ONESHOT ||
		       algo == COLLC_ALGO_TWOSHOT;
	if (proto == COLLC_PROTO_LL)
		return algo == COLLC_ALGO_RING ||
		       (algo == COLLC_ALGO_ONESHOT && collc_oll_coll(op));
	if (proto == COLLC_PROTO_LL128)
		return algo == COLLC_ALGO_RING;
	return 0;
}

static uint64_t oneshot_limit(const struct collc_config *cfg, int op, uint32_t nranks)
{
	/* Reductions to one place read every rank's whole input on one rank. */
	if ((op == COLLC_OP_ALLREDUCE || op == COLLC_OP_REDUCE) && nranks > 8)
		return cfg->oneshot_max_bytes / nranks * 8;
	return cfg->oneshot_max_bytes;
}

/* Does the automatic choice run this collective as a one-shot LL one? */
static int oll_fits(const struct collc_config *cfg, int op, uint64_t bytes, uint32_t nranks)
{
	return collc_oll_coll(op) && nranks <= PLAN_OLL_MAX_RANKS && cfg->oneshot_ll_max_bytes &&
	       bytes <= cfg->oneshot_ll_max_bytes;
}

uint8_t plan_pick_algo(const struct collc_config *cfg, int op, uint64_t bytes, uint32_t nranks)
{
	uint8_t algo = COLLC_ALGO_RING;

	if (nranks <= 1)
		return COLLC_ALGO_RING;
	if (cfg->algo != COLLC_ALGO_AUTO)
		return plan_algo_supported(op, cfg->algo) ? (uint8_t)cfg->algo : COLLC_ALGO_RING;
	if (oll_fits(cfg, op, bytes, nranks) &&
	    (cfg->proto == COLLC_PROTO_AUTO || cfg->proto == COLLC_PROTO_LL))
		return COLLC_ALGO_ONESHOT;
	if (bytes <= oneshot_limit(cfg, op, nranks))
		algo = COLLC_ALGO_ONESHOT;
	else if (op == COLLC_OP_ALLREDUCE && bytes <= cfg->twoshot_max_bytes)
		algo = COLLC_ALGO_TWOSHOT;
	/* A forced protocol that the size's algorithm cannot carry picks ring. */
	if (cfg->proto != COLLC_PROTO_AUTO && !plan_proto_supported(op, algo, cfg->proto))
		return COLLC_ALGO_RING;
	return algo;
}

uint8_t plan_pick_proto(const struct collc_config *cfg, int op, uint32_t algo, uint64_t bytes,
			uint32_t nranks)
{
	/* A forced protocol the algorithm cannot carry leaves Simple, which every one carries. */
	if (cfg->proto != COLLC_PROTO_AUTO)
		return plan_proto_supported(op, algo, cfg->proto) ? (uint8_t)cfg->proto
								  : COLLC_PROTO_SIMPLE;
	if (algo == COLLC_ALGO_ONESHOT && oll_fits(cfg, op, bytes, nranks))
		return COLLC_PROTO_LL;
	if (algo != COLLC_ALGO_RING)
		return COLLC_PROTO_SIMPLE;
	if (bytes <= cfg->ll_max_bytes)
		return COLLC_PROTO_LL;
	if (bytes <= cfg->ll128_max_bytes)
		return COLLC_PROTO_LL128;
	return COLLC_PROTO_SIMPLE;
}

uint8_t plan_pick_channels(const struct collc_config *cfg, uint64_t bytes)
{
	uint64_t cap = cfg->channels, n;

	if (cfg->max_channels && cap > cfg->max_channels)
		cap = cfg->max_channels;
	if (cap > COLLC_MAX_CHANNELS)
		cap = COLLC_MAX_CHANNELS;
	if (cap < 1)
		cap = 1;
	n = bytes / (cfg->channel_min_bytes ? cfg->channel_min_bytes : 1);
	if (n < 1)
		n = 1;
	if (n > cap)
		n = cap;
	return (uint8_t)n;
}

void plan_coll(const struct collc_config *cfg, int op, uint64_t bytes, uint32_t nranks,
	       uint32_t flags, struct plan *out)
{
	if (collc_copy_coll((uint32_t)op)) {
		/* Direct copies whatever algo and proto say; channels and their sizes still apply. */
		out->algo = COLLC_ALGO_ONESHOT;
		out->proto = COLLC_PROTO_SIMPLE;
		out->nchannels = plan_pick_channels(cfg, bytes);
		out->chunk_bytes = 0;
		return;
	}
	out->algo = flags & PLAN_NO_PEER_READ ? COLLC_ALGO_RING
					      : plan_pick_algo(cfg, op, bytes, nranks);
	out->proto = plan_pick_proto(cfg, op, out->algo, bytes, nranks);
	if ((flags & PLAN_INPLACE) && op == COLLC_OP_ALLREDUCE && out->algo == COLLC_ALGO_ONESHOT &&
	    out->proto == COLLC_PROTO_SIMPLE)
		out->algo = COLLC_ALGO_TWOSHOT;
	out->nchannels = plan_pick_channels(cfg, bytes);
	out->chunk_bytes = 0;
}
