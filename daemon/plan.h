/* SPDX-License-Identifier: MIT */
/*
 * Algorithm, protocol and channel choice: pure functions of the collective,
 * its size, the rank count and one config snapshot.
 *
 * Which algorithm runs which collective and protocol:
 *
 *   ring     every collective, every protocol (Simple, LL, LL128)
 *   oneshot  every collective with Simple (peer loads behind flag barriers);
 *            all-reduce, allgather and reduce-scatter also with LL (every
 *            rank pushes lines to every other, no barrier: prims.h)
 *   twoshot  all-reduce only; Simple only
 *
 * Forced values (config algo/proto other than auto) are honoured whenever the
 * collective supports them: a forced twoshot for anything but an all-reduce
 * runs ring; a forced oneshot/twoshot wins over a forced protocol it cannot
 * carry (the plan then says Simple, which is what runs). With algo auto, a
 * forced protocol that the size's algorithm cannot carry selects ring, which
 * runs them all. A communicator of one rank copies its input whatever the
 * plan says.
 *
 * All-to-all, all-to-allv, send and receive run as direct copies through peer
 * memory (proto/algo_copy.h), reported as one-shot Simple whatever algo and
 * proto force; channels, channel_min_bytes and rotate_channels apply.
 */
#ifndef COLLCD_PLAN_H
#define COLLCD_PLAN_H

#include <stdint.h>

#include "daemon/config.h"

struct plan {
	uint8_t algo;         /* COLLC_ALGO_*, never AUTO */
	uint8_t proto;        /* COLLC_PROTO_*, never AUTO */
	uint8_t nchannels;    /* 1 ..= the config's channels */
	uint32_t chunk_bytes; /* 0: the executor's default for the protocol */
};

/* 1 when collective op (COLLC_OP_*) can run algorithm algo. */
int plan_algo_supported(int op, uint32_t algo);
/* 1 when algorithm algo can carry protocol proto for collective op. */
int plan_proto_supported(int op, uint32_t algo, uint32_t proto);

/*
 * Automatic choice (config algo auto): an all-reduce, allgather or
 * reduce-scatter on up to PLAN_OLL_MAX_RANKS ranks runs one-shot LL up to
 * oneshot_ll_max_bytes (0: never);
 * otherwise one-shot up to the one-shot limit, then (all-reduce only)
 * two-shot up to twoshot_max_bytes, then ring. For all-reduce and reduce one
 * rank reads nranks inputs, so their one-shot limit shrinks beyond 8 ranks:
 * oneshot_max_bytes * 8 / nranks.
 */
uint8_t plan_pick_algo(const struct collc_config *cfg, int op, uint64_t bytes, uint32_t nranks);
/*
 * Automatic choice (config proto auto). Ring: LL up to ll_max_bytes, then
 * LL128, then Simple. One-shot all-reduce, allgather and reduce-scatter: LL
 * up to oneshot_ll_max_bytes on up to PLAN_OLL_MAX_RANKS ranks (each rank
 * writes to every peer, so the traffic grows with the square of the ranks),
 * else Simple. Two-shot, broadcast and reduce: Simple.
 */
#define PLAN_OLL_MAX_RANKS 8u
uint8_t plan_pick_proto(const struct collc_config *cfg, int op, uint32_t algo, uint64_t bytes,
			uint32_t nranks);
/* bytes / channel_min_bytes, at least 1, at most the config's channels. */
uint8_t plan_pick_channels(const struct collc_config *cfg, uint64_t bytes);

/*
 * Some rank's buffer is memory its peers cannot read directly (an executor
 * said so: EXEC_MEM_NO_PEER_READ, e.g. a CUDA IPC import mapped for its own
 * GPU only): one-shot and two-shot are out, whatever the config forces; the
 * ring, which only ever touches its own rank's buffers, runs it.
 */
#define PLAN_NO_PEER_READ 1u
/*
 * An all-reduce in place (some rank's recvbuf is its sendbuf) on an executor
 * without EXEC_CAP_ONESHOT_INPLACE: there one-shot Simple writes each rank's
 * result straight over its input while its peers may still be reading it, so
 * it runs two-shot instead (phase 1 writes only the rank's own segment, which
 * no peer reads then; phase 2 reads peers' results after a barrier), also
 * when the config forces one-shot. One-shot LL reads only its own input, so
 * it stays.
 */
#define PLAN_INPLACE      2u

/*
 * bytes: the per-rank payload the collective moves (the larger buffer);
 * flags: PLAN_*. cfg is one executor's (cfg_resolve: no auto keys left).
 */
void plan_coll(const struct collc_config *cfg, int op, uint64_t bytes, uint32_t nranks,
	       uint32_t flags, struct plan *out);

#endif
