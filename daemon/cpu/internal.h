/* SPDX-License-Identifier: MIT */
/*
 * Inside the CPU executor: what one channel thread knows while it runs one
 * work item, the waiting helpers, and the algorithm entry points.
 *
 *   executor.c  threads, FIFOs, communicators, the backend table
 *   prims.c     waiting and the Simple / LL / LL128 primitives
 *   ring.c      ring algorithms over the primitives
 *   copy.c      copy lists: all-to-all(v) and send/recv between client buffers
 *   peer.c      one-shot and two-shot algorithms over peer memory, and
 *               one-shot LL all-reduce, allgather and reduce-scatter over
 *               the mailboxes' inboxes
 */
#ifndef COLLCD_CPU_INT_H
#define COLLCD_CPU_INT_H

#include <stddef.h>
#include <stdint.h>

#include "common/atomics.h"
#include "daemon/cpu/cpu.h"
#include "proto/prims.h"
#include "proto/work.h"

/* Where a run ahead of the item's calls stands (prims.c). */
struct cpu_ahead {
	uint64_t at; /* the link step of the next receive step it yields */
	int flags;   /* the call being walked */
	char *dst;
	uint64_t bytes;
	uint64_t j, n; /* its receive steps yielded, and in all */
	int over;      /* the item makes no more calls: at is its end */
};

/* One channel thread running one item. */
struct cpu_run {
	const struct collc_work_item *it;
	const uint32_t *abort;    /* the device's abort word */
	const uint32_t *revoked;  /* the communicator's abort word (cpu_comm_abort()) */
	const uint32_t *stopping; /* the executor is shutting down */
	struct cpu_rank *rk;
	uint32_t ch;                  /* the channel: its connections and mailboxes */
	uint32_t share;               /* the item's share it runs: (ch - chan_base) mod channels */
	size_t es;                    /* element size */
	struct cpu_link *send, *recv; /* the item protocol's links of this channel */
	uint64_t step_bytes;          /* payload bytes of one step of that protocol */
	char *scratch;                /* CPU_SCRATCH_BYTES, private to the thread */
	char *stage_in, *stage_out;   /* CPU_STAGE_BYTES each, private to the thread */
	uint32_t nsteps;              /* steps or rounds taken so far (the periodic abort checks) */
	/*
	 * The algorithm's src and dst stay as they are until the item ends
	 * except where the steps themselves write (the ring's): a proxied send
	 * link may send from them (cpu_link.direct), and cpu_prims_flush() waits
	 * for those steps at the end.
	 */
	int direct_ok;
	uint64_t direct_steps; /* steps published that way by this item */
	/*
	 * The algorithm's next primitive call, run ahead of the item (0 when it
	 * makes no more), so that a proxy receiving straight into the rank's
	 * buffers (cpu_link.recv_direct) knows where each step lands; NULL:
	 * every step lands in its slot (cpu_prims_ahead()).
	 */
	int (*ahead)(struct cpu_run *x, int *ret_flags, char **ret_dst, int64_t *ret_nelem);
	void *ahead_arg;
	struct cpu_ahead la; /* private to prims.c */
};

/* Waiting (cpu/prims.c) */

/* Nonzero once the device aborted, the executor is stopping, or the communicator was revoked. */
int cpu_cancelled(const struct cpu_run *x);

/* Returns nonzero once the awaited condition holds; does its own acquire loads. */
typedef int (*cpu_ready_fn)(void *arg);

/*
 * Waits until ready(arg): spins, yields, then sleeps on seqw with *waiting
 * raised. Whoever makes the condition true must then call cpu_wake() (or
 * cpu_post()) on the same seqw/waiting. Returns -ECANCELED on abort: the
 * device's, the executor's shutdown, or the communicator's revocation.
 */
int cpu_wait(const struct cpu_run *x, cpu_ready_fn ready, void *arg, uint32_t *seqw,
	     uint32_t *waiting);
/* cpu_wait() for *word >= target (acquire). */
int cpu_wait_ge(const struct cpu_run *x, const uint64_t *word, uint64_t target, uint32_t *seqw,
		uint32_t *waiting);
/* Stores value to *word with release, then wakes a sleeper of seqw. */
void cpu_post(uint64_t *word, uint64_t value, uint32_t *seqw, uint32_t *waiting);
/* Wakes a sleeper of seqw after stores that make its condition true. */
void cpu_wake(uint32_t *seqw, uint32_t *waiting);

/* LL lines: each {data, flag} half one 8-byte atomic access */

/* Writes one line of generation flag carrying payload. */
static inline void cpu_ll_store(union collc_ll_line *line, uint64_t payload, uint32_t flag)
{
	union collc_ll_line v = collc_ll_pack(payload, flag);

	/* W-LL: pairs with R-LL in cpu_ll_load(): one 8-byte store per {data, flag} half. */
	store_relaxed(&line->v[0], v.v[0]);
	store_relaxed(&line->v[1], v.v[1]);
}

/* Once line carries generation flag, returns 1 and its payload in *ret_payload; else 0. */
static inline int cpu_ll_load(const union collc_ll_line *line, uint32_t flag, uint64_t *ret_payload)
{
	union collc_ll_line snap;

	/*
	 * R-LL: pairs with W-LL in cpu_ll_store(). Each half is one 8-byte load, so
	 * a half is never torn; both flags are checked on this one snapshot and the
	 * payload is taken from it. Relaxed suffices: the flag travels in the same
	 * atomic word as the data it guards.
	 */
	snap.v[0] = load_relaxed(&line->v[0]);
	snap.v[1] = load_relaxed(&line->v[1]);
	if (!collc_ll_ready(snap, flag))
		return 0;
	*ret_payload = collc_ll_payload(snap);
	return 1;
}

/* Primitives (cpu/prims.c) */

/* Selects the item's protocol links and step size; 0, or -EINVAL for an unknown protocol. */
int cpu_prims_setup(struct cpu_run *x);
/*
 * Moves nelem elements through the connections in steps of x->step_bytes;
 * flags: one of proto/prims.h COLLC_PRIM_*.
 * Sender and receiver derive the steps from the same nelem; an empty call
 * still runs one (empty) step so both sides stay in step.
 */
int cpu_prim(struct cpu_run *x, int flags, const char *src, char *dst, int64_t nelem);
/*
 * The end of an item that published steps from its own buffers: waits until
 * the proxy has sent them all (the client may reuse the buffers next).
 */
int cpu_prims_flush(struct cpu_run *x);
/*
 * From now on the item's later receives are named ahead (cpu_run.ahead):
 * fn yields the algorithm's calls in the order the item makes them, from
 * the next one. After cpu_prims_setup(), before the item's first call.
 */
void cpu_prims_ahead(struct cpu_run *x,
		     int (*fn)(struct cpu_run *x, int *ret_flags, char **ret_dst,
			       int64_t *ret_nelem),
		     void *arg);
/* Elements per ring chunk: the item's chunk_bytes, else one chunk of the protocol. */
uint64_t cpu_chunk_elems(const struct cpu_run *x);

/* Algorithms: one channel's share of one rank's item (nranks >= 2). */
int cpu_ring(struct cpu_run *x);
int cpu_oneshot(struct cpu_run *x);
int cpu_twoshot(struct cpu_run *x);
/* Hierarchical all-reduce, all-gather, reduce-scatter across daemons (cpu_rank.group rings). */
int cpu_hier(struct cpu_run *x);
/* A copy-list item's share (any rank count, proto/algo_copy.h). */
int cpu_copy(struct cpu_run *x, const struct collc_work_copies *list);
/* All-to-all(v) of a communicator spanning daemons: a relay on the ring (algo ring). */
int cpu_copy_relay(struct cpu_run *x, const struct collc_work_copies *list);

#endif
