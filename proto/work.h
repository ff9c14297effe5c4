/* SPDX-License-Identifier: MIT */
/*
 * The work FIFO: the scheduler (host) appends work items; the executor of one
 * device (the persistent CUDA grid, or the CPU executor's threads) runs them.
 *
 * One FIFO per device. Every channel of the device reads every item in FIFO
 * order; an item names how many channels it uses (nchannels) from which one
 * (chan_base): channel ch runs share (ch - chan_base) mod C of the item, C
 * being the executor's channel count, when that share is below nchannels,
 * and skips the item otherwise. Rotating chan_base lets consecutive small
 * collectives run on different channels at once. After finishing (or skipping) position p a
 * channel stores work_consumed[channel] = p + 1 with release semantics, so one
 * counter serves flow control and completion:
 *
 *   - the host may overwrite the slot of position p only after every channel's
 *     work_consumed passed p (the host never reads an item back);
 *   - a collective is done on a device when every channel it used passed the
 *     position of its item.
 *
 * Each item carries seq = position + 1 in its last word, written last with a
 * release store, so a reader that sees the expected seq sees a whole item.
 *
 * Work batches: the scheduler publishes the items it wrote in one pass as
 * one batch per FIFO: it writes every item (body, then its seq by W1), then
 * ctrl.published = the position after the batch (B1, release). A reader that
 * acquires published may read every item below it at once: the grid's
 * poller reads a batch in one burst of PCIe reads and forwards it to the
 * channel blocks as one unit (marking its last item), and each block
 * publishes work_consumed once per unit instead of once per item. A reader
 * that takes items one by one (the CPU executor) waits for each item's own
 * seq and needs nothing else.
 */
#ifndef COLLC_PROTO_WORK_H
#define COLLC_PROTO_WORK_H

#include <stddef.h>
#include <stdint.h>

#include "proto/prims.h"

#define COLLC_FIFO_DEPTH   256u /* items per device; a power of two */
#define COLLC_MAX_CHANNELS 32u
#define COLLC_MAX_RANKS    64u
#define COLLC_BATCH_MAX    32u /* items per batch, and per unit the grid forwards */

enum {
	COLLC_WORK_NONE = 0,
	COLLC_WORK_COLL,   /* one rank's share of a collective */
	COLLC_WORK_QUIT,   /* the executor ends after this item */
	COLLC_WORK_SIGNAL, /* only the signal below: a stream collective that never ran */
};

enum {
	COLLC_ALGO_AUTO = 0,
	COLLC_ALGO_RING,
	COLLC_ALGO_ONESHOT,
	COLLC_ALGO_TWOSHOT,
	/*
	 * All-reduce, all-gather and reduce-scatter across daemons
	 * (daemon/cpu/peer.c cpu_hier()): all-reduce reduce-scatters among the
	 * daemon's ranks, all-reduces each segment on its group ring across
	 * daemons, and all-gathers among the daemon's ranks; all-gather
	 * gathers on the group rings, then among the daemon's ranks;
	 * reduce-scatter reduce-scatters on the group rings the daemon's sums
	 * of its place's blocks. Chosen by the scheduler only, never by the
	 * algo key.
	 */
	COLLC_ALGO_HIER,
	COLLC_ALGO_MAX,
};

enum {
	COLLC_PROTO_AUTO = 0,
	COLLC_PROTO_SIMPLE,
	COLLC_PROTO_LL,
	COLLC_PROTO_LL128,
	COLLC_PROTO_MAX,
};

/* One rank's share of one collective on one device, written by the scheduler. */
struct collc_work_item {
	uint8_t kind;      /* COLLC_WORK_* */
	uint8_t coll;      /* COLLC_OP_* (shm.h) */
	uint8_t algo;      /* COLLC_ALGO_*, never AUTO */
	uint8_t proto;     /* COLLC_PROTO_*, never AUTO */
	uint8_t dtype;     /* collc_dtype */
	uint8_t redop;     /* collc_redop */
	uint8_t nchannels; /* channels [chan_base, chan_base + nchannels) mod C take part */
	uint8_t chan_base; /* the channel that runs share 0 */
	uint32_t nranks;
	uint32_t rank;
	int32_t root;
	uint32_t chunk_bytes; /* Simple: bytes per chunk per channel */
	uint64_t count;       /* elements, as the public call names them */
	uint64_t sendbuf;     /* executor-space addresses */
	uint64_t recvbuf;
	uint64_t comm_dev;   /* executor-space address of the rank's connection state */
	uint64_t coll_id;    /* the scheduler's id of the collective, for tracing */
	uint64_t comm_id;    /* the scheduler's id of the communicator: never reused, never 0 */
	uint64_t t_forward;  /* the grid's device copy: when the poller forwarded it (cuda_trace) */
	uint32_t batch_last; /* nonzero on the last item of a work batch (B2; the grid: E1 there) */
	uint32_t signal_val; /* what goes to signal */
	uint64_t reserved[1]; /* the grid's device copy: trace stamps */
	/*
	 * Executor-space address of a stream gate's device word (struct
	 * collc_signal), 0: none. The grid stores signal_val there once every
	 * channel of the item finished (E2), so the client's stream, waiting on
	 * device memory, goes on without the host.
	 */
	uint64_t signal;
	/*
	 * Executor-space address of the rank's done word in its client's region
	 * (proto/shm.h), 0: none (always on items of several channels). Once
	 * the item ended without error, the executor stores done_val there (D1).
	 */
	uint64_t done;
	uint32_t done_val;
	/*
	 * COLLC_ITEM_GATED: a stream collective whose streams may not have
	 * reached it yet. The executor runs it only once its leader decided
	 * (struct collc_work_gate, in the slot's copy list); until then nothing
	 * behind it on this device runs. COLLC_ITEM_LEADER: this device's
	 * executor makes the decision for every device of the collective.
	 */
	uint32_t gate;
	uint64_t seq; /* position + 1; written last */
};
_Static_assert(sizeof(struct collc_work_item) == 128, "work_item size");
_Static_assert(offsetof(struct collc_work_item, nranks) == 8, "work_item.nranks");
_Static_assert(offsetof(struct collc_work_item, root) == 16, "work_item.root");
_Static_assert(offsetof(struct collc_work_item, count) == 24, "work_item.count");
_Static_assert(offsetof(struct collc_work_item, sendbuf) == 32, "work_item.sendbuf");
_Static_assert(offsetof(struct collc_work_item, recvbuf) == 40, "work_item.recvbuf");
_Static_assert(offsetof(struct collc_work_item, comm_dev) == 48, "work_item.comm_dev");
_Static_assert(offsetof(struct collc_work_item, coll_id) == 56, "work_item.coll_id");
_Static_assert(offsetof(struct collc_work_item, comm_id) == 64, "work_item.comm_id");
_Static_assert(offsetof(struct collc_work_item, t_forward) == 72, "work_item.t_forward");
_Static_assert(offsetof(struct collc_work_item, batch_last) == 80, "work_item.batch_last");
_Static_assert(offsetof(struct collc_work_item, signal_val) == 84, "work_item.signal_val");
_Static_assert(offsetof(struct collc_work_item, signal) == 96, "work_item.signal");
_Static_assert(offsetof(struct collc_work_item, done) == 104, "work_item.done");
_Static_assert(offsetof(struct collc_work_item, done_val) == 112, "work_item.done_val");
_Static_assert(offsetof(struct collc_work_item, gate) == 116, "work_item.gate");
_Static_assert(offsetof(struct collc_work_item, seq) == 120, "work_item.seq");

/*
 * Does channel ch of an executor with nch channels take item it as its own:
 * its share of a collective (collc_item_share() below nchannels), or an item
 * of another kind, which every channel takes? The other channels skip it.
 */
COLLC_HD int collc_item_ours(const struct collc_work_item *it, uint32_t ch, uint32_t nch)
{
	return it->kind != COLLC_WORK_COLL ||
	       collc_item_share(it->chan_base, ch, nch) < it->nchannels;
}

#define COLLC_ITEM_GATED  0x1u
#define COLLC_ITEM_LEADER 0x2u

/* A stream gate's word in device memory (proto/shm.h struct collc_gate: sig_mr, sig_off). */
struct collc_signal {
	uint32_t value;    /* the ticket of the last collective finished on this device */
	uint32_t reserved; /* 0 (the grid counts an item's channels in its own memory) */
};
_Static_assert(sizeof(struct collc_signal) == 8, "signal size");

/* One channel's counters on their own cache line, written by that channel of the executor. */
struct collc_consumed {
	uint64_t value;   /* positions finished or skipped */
	uint64_t aborted; /* items of revoked communicators abandoned before their end */
	uint64_t reserved[6];
};
_Static_assert(sizeof(struct collc_consumed) == 64, "consumed size");

/*
 * Per-device FIFO control block (mapped host memory on the CUDA backend).
 * work_consumed is written by the executor and read by the host; abort is
 * written by the host and read by the executor.
 */
struct collc_fifo_ctrl {
	struct collc_consumed work_consumed[COLLC_MAX_CHANNELS];
	uint32_t abort;        /* nonzero: abandon every item and exit */
	uint32_t reserved0[3]; /* 0 (the CPU executor's sleepers keep to its own memory) */
	uint64_t published;    /* written by the host: items [0, published) are whole (B1) */
	uint32_t reserved[10];
};
_Static_assert(sizeof(struct collc_fifo_ctrl) == 64 * COLLC_MAX_CHANNELS + 64, "fifo_ctrl size");
_Static_assert(offsetof(struct collc_fifo_ctrl, abort) == 64 * COLLC_MAX_CHANNELS,
	       "fifo_ctrl.abort");
_Static_assert(offsetof(struct collc_fifo_ctrl, published) == 64 * COLLC_MAX_CHANNELS + 16,
	       "fifo_ctrl.published");

/*
 * One direct copy of a copy-list item (all-to-all, all-to-allv, send/recv),
 * written by the scheduler from checked values only, before the item's seq
 * (W1 covers it). Executor-space addresses; bytes a multiple of the dtype's size.
 */
struct collc_work_copy {
	uint64_t src;
	uint64_t dst;
	uint64_t bytes; /* 0: nothing to copy */
};
_Static_assert(sizeof(struct collc_work_copy) == 24, "work_copy size");

/*
 * The copy list of the item at position p: copies[p & (DEPTH - 1)], its first
 * collc_work_ncopies() entries. It is reused with the item's slot (F1).
 */
struct collc_work_copies {
	struct collc_work_copy c[COLLC_MAX_RANKS];
};

/*
 * A gated item's gate (COLLC_ITEM_GATED), in its slot's copy list
 * (copies[p], never used by a gated item otherwise), written by the
 * scheduler before the item's seq (W1 covers it). Every device's item of the
 * collective names the same decision word; the leader's also the go word of
 * every stream rank (struct collc_gate's go in the rank's client region,
 * which collcd maps for its executors with the done words). The leader
 * stores the decision, once:
 *
 *   COLLC_GATE_FIRE  every go word holds its ticket (equal, as the
 *                    scheduler's own look at go: a word that still holds
 *                    an older ticket is no go): every device runs the item;
 *   COLLC_GATE_SKIP  the host asked (collc_fifo ctrl of the leader's
 *                    executor: cancel) before that: every device consumes
 *                    the item without running it, and the scheduler
 *                    starts the collective again later.
 *
 * The decision word holds tag << 2 | decision; tag (the leader's position + 1)
 * tells a decision of this item from one of the word's earlier items.
 */
#define COLLC_GATE_WATCH_MAX 16u
#define COLLC_GATE_FIRE      1u
#define COLLC_GATE_SKIP      2u

struct collc_gate_watch {
	uint64_t addr; /* executor-space address of a go word (uint32_t) */
	uint32_t val;  /* its ticket */
	uint32_t reserved;
};

struct collc_work_gate {
	uint64_t decision; /* executor-space address of the decision word (uint64_t) */
	uint64_t tag;
	uint32_t nwatch; /* the leader's: watch[0, nwatch) */
	uint32_t reserved[3];
	struct collc_gate_watch watch[COLLC_GATE_WATCH_MAX];
};
_Static_assert(sizeof(struct collc_work_gate) <= sizeof(struct collc_work_copies), "gate fits");
_Static_assert(sizeof(struct collc_work_gate) % 16 == 0, "gate: 16-byte loads");

/* The decision word (and the grid's outcome word) for tag: FIRE or SKIP. */
COLLC_HD uint64_t collc_gate_word(uint64_t tag, uint32_t decision)
{
	return tag << 2 | decision;
}

/* The decision a word holds for tag; 0: none yet (or an earlier item's). */
COLLC_HD uint32_t collc_gate_decided(uint64_t word, uint64_t tag)
{
	return word >> 2 == tag ? (uint32_t)(word & 3) : 0;
}

/*
 * How long a host thread that polls gates (the scheduler for waiting
 * streams and graph firings, a CPU executor's threads for a gated item) naps
 * once it has waited waited_ns: an eighth of that, 2 to 200 us. An opening
 * after a long wait is seen at most about an eighth late, and a stream stuck
 * behind a long kernel costs a few percent of a core instead of all of it.
 */
static inline uint64_t collc_gate_nap_ns(uint64_t waited_ns)
{
	uint64_t nap = waited_ns / 8;

	return nap < 2000 ? 2000 : nap > 200000 ? 200000 : nap;
}

struct collc_work_fifo {
	struct collc_fifo_ctrl ctrl;
	struct collc_work_item items[COLLC_FIFO_DEPTH];
	struct collc_work_copies copies[COLLC_FIFO_DEPTH];
};
_Static_assert(offsetof(struct collc_work_fifo, items) == sizeof(struct collc_fifo_ctrl),
	       "fifo.items");

#endif /* COLLC_PROTO_WORK_H */
