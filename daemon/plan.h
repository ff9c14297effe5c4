/* SPDX-License-Identifier: MIT */
/* Algorithm, protocol and channel choice: pure functions of size, ranks and config. */
#ifndef COLLCD_PLAN_H
#define COLLCD_PLAN_H

#include <stdint.h>

#include "daemon/config.h"

struct plan {
	uint8_t algo;
	uint8_t proto;
	uint8_t nchannels;
	uint32_t chunk_bytes; /* 0: the executor's default */
};

/* bytes: the per-rank payload the collective moves (the larger buffer). */
void plan_coll(const struct collc_config *cfg, int op, uint64_t bytes, uint32_t nranks,
	       struct plan *out);

#endif
