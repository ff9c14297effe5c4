/* SPDX-License-Identifier: MIT */
#include "daemon/plan.h"
#include "proto/shm.h"
#include "proto/work.h"

static uint8_t pick_channels(const struct collc_config *cfg, uint64_t bytes)
{
	uint64_t n = bytes / cfg->channel_min_bytes;

	if (n < 1)
		n = 1;
	if (n > cfg->channels)
		n = cfg->channels;
	return (uint8_t)n;
}

void plan_coll(const struct collc_config *cfg, int op, uint64_t bytes, uint32_t nranks,
	       struct plan *out)
{
	out->algo = COLLC_ALGO_RING;
	out->proto = COLLC_PROTO_SIMPLE;
	out->nchannels = pick_channels(cfg, bytes);
	out->chunk_bytes = 0;
}
