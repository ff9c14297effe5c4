/* SPDX-License-Identifier: MIT */
/*
 * Status (JSON and a human table) and Prometheus metrics, rendered from a
 * snapshot the scheduler fills on its own thread (sched_status_snapshot in
 * scheduler.c): status.c never sees the scheduler's state.
 */
#ifndef COLLCD_STATUS_H
#define COLLCD_STATUS_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/config.h"
#include "daemon/exec.h"
#include "proto/shm.h"
#include "proto/work.h"

struct status_client {
	uint32_t id;
	int32_t pid;
	uint32_t uid;
	uint32_t sq_depth, cq_depth;
	uint32_t inflight;
	uint64_t submitted, completed, errors, bad;
};

struct status_comm {
	uint64_t id;
	const char *backend; /* its executor's name */
	uint32_t nranks, live, pending;
	int32_t revoked;
	int32_t timeout_ms; /* -1: follows op_timeout_ms */
	uint64_t inflight, completed, errors, revoked_inflight, timeouts;
	uint64_t timed_out_mask, lagging_mask;
	uint64_t by_algo[COLLC_ALGO_MAX];
	uint64_t by_proto[COLLC_PROTO_MAX];
};

/* A communicator still gathering its ranks: every collc_comm_init of it waits. */
struct status_forming {
	uint64_t id;
	uint32_t nranks;
	uint32_t joined;      /* ranks whose comm_init reached this daemon */
	uint64_t joined_mask; /* which (nranks <= COLLC_MAX_RANKS, 64) */
	uint64_t waiting_ns;  /* since the first of them */
	int32_t net;          /* its id names a daemon: ranks may join on other daemons */
};

struct status_device {
	uint32_t id; /* the scheduler's global device index */
	char name[64];
	const char *backend; /* its executor's name */
	uint32_t nchannels;
	uint64_t tail;
	uint64_t consumed[COLLC_MAX_CHANNELS];
	uint64_t aborted[COLLC_MAX_CHANNELS];
	/*
	 * Items each channel has yet to run, and items some channel has yet to
	 * run: items a channel only skips are not its work, though it may pass
	 * them late (the CPU executor's channels skip when they next wake).
	 */
	uint64_t inflight[COLLC_MAX_CHANNELS];
	uint64_t depth;
};

struct status_exec {
	const char *name;
	uint32_t ndevices;
	uint32_t max_channels;
	struct collc_config cfg; /* the config resolved for it: what it runs with */
};

/*
 * A ring collective across daemons phase by phase, as its scheduler saw it
 * (sched_launch.c net_phases_add()): asked the root -> its GO, GO -> handed
 * to the executor, handed -> ran here (its ranks end), ran here -> the
 * root's word that every daemon ran it (its slot frees).
 */
enum { NET_PHASE_AGREE, NET_PHASE_TO_LAUNCH, NET_PHASE_RUN, NET_PHASE_ALLDONE, NET_PHASES };

struct status_snapshot {
	const struct collc_config *cfg; /* as set: keys may be auto */
	uint64_t generation;
	struct status_exec execs[EXEC_MAX];
	uint32_t nexecs;
	struct status_client *clients;
	uint32_t nclients;
	struct status_comm *comms;
	uint32_t ncomms;
	struct status_forming *forming;
	uint32_t nforming;
	struct status_device *devices;
	uint32_t ndevices;
	uint64_t submitted, completed, errors, bad, aborted;
	uint64_t batches, batch_items; /* work batches published, and the items they held */
	uint64_t stream_colls, graph_fires, gate_ns; /* sched_int.h */
	uint64_t gated_items, gated_fired, gated_skipped;
	uint64_t done_items, done_map_failures;         /* sched_int.h */
	uint64_t net_eager_staged;                      /* sched_int.h */
	uint64_t net_phase_n, net_phase_ns[NET_PHASES]; /* collectives, ns in each phase */
	uint64_t by_algo[COLLC_ALGO_MAX];
	uint64_t by_proto[COLLC_PROTO_MAX];
	uint64_t by_op[COLLC_OP_MAX]; /* launched, per COLLC_OP_* (a send/recv pair counts in both) */
	uint64_t lat_buckets[8][17]; /* size class x log2(us) bucket; 16: beyond */
	uint64_t lat_count[8];
	uint64_t lat_sum_ns[8];
};

/* malloc'ed text (the caller frees it), or NULL when out of memory. */
char *status_render(const struct status_snapshot *s, uint32_t flags, size_t *ret_len);
char *metrics_render(const struct status_snapshot *s, size_t *ret_len);

#endif
