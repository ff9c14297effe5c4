/* SPDX-License-Identifier: MIT */
/*
 * Shared by the libFuzzer targets: a failed property prints what broke and
 * aborts (libFuzzer then saves the input as a crash artifact), and the
 * documented ranges of every configuration field.
 */
#ifndef COLLC_FUZZ_UTIL_H
#define COLLC_FUZZ_UTIL_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/config.h"
#include "proto/work.h"

#define FUZZ_ASSERT(cond, ...)                                                                     \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "FUZZ PROPERTY FAILED at %s:%d: %s\n  ", __FILE__,         \
				__LINE__, #cond);                                                  \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, "\n");                                                     \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

/* Field by field: struct copies need not carry padding, so memcmp would lie. */
static inline int fuzz_cfg_equal(const struct collc_config *a, const struct collc_config *b)
{
	return a->channels == b->channels && a->max_channels == b->max_channels &&
	       a->proto == b->proto && a->algo == b->algo && a->op_timeout_ms == b->op_timeout_ms &&
	       a->oneshot_max_bytes == b->oneshot_max_bytes &&
	       a->twoshot_max_bytes == b->twoshot_max_bytes && a->ll_max_bytes == b->ll_max_bytes &&
	       a->oneshot_ll_max_bytes == b->oneshot_ll_max_bytes &&
	       a->ll128_max_bytes == b->ll128_max_bytes &&
	       a->channel_min_bytes == b->channel_min_bytes &&
	       a->sched_spin_us == b->sched_spin_us && a->gate_spin_us == b->gate_spin_us &&
	       a->exec_spin_us == b->exec_spin_us && a->gated_items == b->gated_items &&
	       a->net_timeout_ms == b->net_timeout_ms &&
	       a->net_eager_max_bytes == b->net_eager_max_bytes &&
	       a->net_eager_staged_max_bytes == b->net_eager_staged_max_bytes &&
	       a->net_hier_min_bytes == b->net_hier_min_bytes &&
	       a->net_tcp_streams == b->net_tcp_streams && !strcmp(a->listen, b->listen) &&
	       !strcmp(a->net, b->net) && !strcmp(a->net_ifname, b->net_ifname) &&
	       !strcmp(a->net_tcp_congestion, b->net_tcp_congestion);
}

/* A string key: terminated inside its field, no blanks, quotes or backslashes. */
static inline int fuzz_cfg_str_ok(const char *s, size_t cap)
{
	const char *end = memchr(s, '\0', cap);

	if (!end)
		return 0;
	for (; s < end; s++)
		if (*s <= ' ' || *s >= 0x7f || *s == '"' || *s == '\\')
			return 0;
	return 1;
}

static inline void fuzz_cfg_print(const char *tag, const struct collc_config *c)
{
	fprintf(stderr,
		"%s: channels %u/%u proto %u algo %u op_timeout_ms %u oneshot %" PRIu64
		" twoshot %" PRIu64 " ll %" PRIu64 " oneshot_ll %" PRIu64 " ll128 %" PRIu64
		" channel_min %" PRIu64 " sched_spin %u exec_spin %u\n",
		tag, c->channels, c->max_channels, c->proto, c->algo, c->op_timeout_ms,
		c->oneshot_max_bytes, c->twoshot_max_bytes, c->ll_max_bytes,
		c->oneshot_ll_max_bytes, c->ll128_max_bytes, c->channel_min_bytes, c->sched_spin_us,
		c->exec_spin_us);
}

/* The ranges config.c documents in its key table (and collcd(8) names the keys). */
static inline const char *fuzz_cfg_out_of_range(const struct collc_config *c, uint32_t max_channels)
{
	if (c->max_channels != max_channels)
		return "max_channels changed";
	if (c->channels < 1 || c->channels > c->max_channels || c->channels > COLLC_MAX_CHANNELS)
		return "channels";
	if (c->proto >= COLLC_PROTO_MAX)
		return "proto";
	if (c->algo >= COLLC_ALGO_HIER) /* the algo key's values */
		return "algo";
	if (c->op_timeout_ms > 86400000u)
		return "op_timeout_ms";
	if (c->oneshot_max_bytes > (1ull << 40))
		return "oneshot_max_bytes";
	if (c->twoshot_max_bytes > (1ull << 40))
		return "twoshot_max_bytes";
	if (c->ll_max_bytes > (1ull << 40))
		return "ll_max_bytes";
	if (c->oneshot_ll_max_bytes > (1ull << 40))
		return "oneshot_ll_max_bytes";
	if (c->ll128_max_bytes > (1ull << 40))
		return "ll128_max_bytes";
	if (c->channel_min_bytes < 1 || c->channel_min_bytes > (1ull << 40))
		return "channel_min_bytes";
	if (c->sched_spin_us > 1000000u)
		return "sched_spin_us";
	if (c->gate_spin_us > 10000000u)
		return "gate_spin_us";
	if (c->exec_spin_us > 1000000u)
		return "exec_spin_us";
	if (c->gated_items > 1)
		return "gated_items";
	if (c->net_timeout_ms < 100 || c->net_timeout_ms > 600000u)
		return "net_timeout_ms";
	if (c->net_eager_max_bytes > (2u << 20))
		return "net_eager_max_bytes";
	if (c->net_eager_staged_max_bytes > (2u << 20))
		return "net_eager_staged_max_bytes";
	if (c->net_hier_min_bytes > (1ull << 40))
		return "net_hier_min_bytes";
	if (c->net_tcp_streams < 1 || c->net_tcp_streams > 8)
		return "net_tcp_streams";
	if (!fuzz_cfg_str_ok(c->listen, sizeof(c->listen)))
		return "listen";
	if (!fuzz_cfg_str_ok(c->net, sizeof(c->net)))
		return "net";
	if (!fuzz_cfg_str_ok(c->net_ifname, sizeof(c->net_ifname)))
		return "net_ifname";
	if (!fuzz_cfg_str_ok(c->net_tcp_congestion, sizeof(c->net_tcp_congestion)))
		return "net_tcp_congestion";
	return NULL;
}

#endif
