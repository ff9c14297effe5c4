/* SPDX-License-Identifier: MIT */
/*
 * What the host side of the CUDA backend (cuda/executor.c) and the persistent
 * grid (persist_kernel.cu) share: the per-GPU control blocks, the device
 * state that survives a relaunch, the connection state of one rank on one
 * channel, and the launch entry point. Plain C, no CUDA types.
 *
 * One grid per GPU: block 0 is the poller (its warp l alone polls work FIFO
 * l in mapped host memory; the other warps idle), blocks
 * 1 + lane * nchannels + ch run channel ch of lane `lane`. A GPU serves
 * `nlanes` FIFOs so that several ranks of one communicator can share it.
 */
#ifndef COLLCD_CUDA_GRID_H
#define COLLCD_CUDA_GRID_H

#include <stddef.h>
#include <stdint.h>

#include "proto/prims.h"
#include "proto/work.h"

#define CUDA_MAX_LANES 4u
#define CUDA_THREADS   512u
#define CUDA_GATE_OPEN UINT64_MAX       /* forward everything */
#define CUDA_GATE_HOLD (UINT64_MAX - 1) /* forward nothing more; say where you are */
#define CUDA_ACK_NONE  (UINT64_MAX - 2)

/* Connection geometry. */
#define CUDA_SIMPLE_BYTES     COLLC_SIMPLE_BUFFER_BYTES
#define CUDA_SIMPLE_SLOT      (CUDA_SIMPLE_BYTES / COLLC_STEPS)
#define CUDA_SIMPLE_CHUNK     (CUDA_SIMPLE_SLOT * COLLC_CHUNK_STEPS)
#define CUDA_LL_BYTES         COLLC_LL_BUFFER_BYTES
#define CUDA_LL_SLOT_LINES    (CUDA_LL_BYTES / COLLC_STEPS / COLLC_LL_LINE_BYTES)
#define CUDA_LL_STEP          (CUDA_LL_SLOT_LINES * COLLC_LL_LINE_PAYLOAD)
#define CUDA_LL128_BYTES      COLLC_LL128_BUFFER_BYTES
#define CUDA_LL128_SLOT_LINES (CUDA_LL128_BYTES / COLLC_STEPS / COLLC_LL128_LINE_BYTES)
#define CUDA_LL128_STEP       (CUDA_LL128_SLOT_LINES * COLLC_LL128_LINE_PAYLOAD)
/* One-shot LL: lines a round of one sender lands in one inbox slot (16 KiB of payload). */
#define CUDA_OLL_SLOT_LINES   2048u

/*
 * The poller's copy of a lane's FIFO, in mapped host memory, written by the
 * host once an item's seq is published (cuda_kick()): item pos as 32 words
 * of 8 bytes, word j holding 4-byte word j of the item below the flag
 * (uint32_t)(pos + 1). An aligned 8-byte store on the host and an 8-byte
 * load on the GPU are single-copy atomic (NCCL's LL protocol relies on the
 * same over PCIe), so a word whose flag matches is whole, whatever the order
 * in which the words were stored or are loaded: the poller reads items ahead
 * of its position in one round of loads, with no acquire between them, and
 * takes those whose words all match (L1: pairs with L1' in the poller).
 */
#define CUDA_LL_WORDS 32u

struct cuda_ll_item {
	uint64_t w[CUDA_LL_WORDS];
};

struct cuda_ll_fifo {
	struct cuda_ll_item items[COLLC_FIFO_DEPTH];
};
_Static_assert(sizeof(struct collc_work_item) == CUDA_LL_WORDS * sizeof(uint32_t), "ll item");

/* Per lane, in mapped host memory: the quiesce handshake (cuda/window.c window()). */
struct cuda_hlane {
	uint64_t gate;     /* written by the host: OPEN, HOLD, or forward positions < gate */
	uint64_t ack_gate; /* written by the poller: HOLD once it holds */
	uint64_t ack_pos;  /* written by the poller: its position when it stopped */
	uint64_t ack_coll; /* written by the poller: coll_id of the last item it forwarded */
	/*
	 * Written by the scheduler (cuda_gate_cancel()): a gated item this lane
	 * leads at a position below cancel, not yet fired, is skipped.
	 */
	uint64_t cancel;
	uint64_t reserved[3];
};

struct cuda_hctrl {
	struct cuda_hlane lane[CUDA_MAX_LANES];
	/*
	 * Written by a leading poller when it decides a gated item at position
	 * p: outcome[lane][p % depth] = (p + 1) << 2 | COLLC_GATE_FIRE or SKIP,
	 * then a system fence before anything that lets the item run or be
	 * consumed (so a host that sees work_consumed past p sees the outcome).
	 */
	uint64_t outcome[CUDA_MAX_LANES][COLLC_FIFO_DEPTH];
};

/* Per lane, in device memory; survives a relaunch. */
struct cuda_dlane {
	uint64_t dseq;       /* written by the poller: items [0, dseq) are in items[] */
	uint64_t stop_epoch; /* written by the poller: it stopped at dseq in this epoch */
	uint64_t poll_pos;   /* the poller's position, saved at exit */
	uint64_t last_coll;  /* coll_id of the last item forwarded, saved at exit */
	uint64_t reserved[4];
};

/*
 * Config cuda_trace=1: the grid times each hop of every item it runs, with
 * %globaltimer on thread 0 of the block (the poller stamps the device
 * copy's t_forward before its PCIe reads and reserved[0] when they are back).
 * Each channel block sums, per item it runs:
 *   COPY    poller: the unit's PCIe reads issued -> back, copy issued
 *   SEEN    copy -> the block's acquire of dseq sees it (G1 -> G1')
 *   ITEM    the block loads the item from device memory
 *   STATE   the communicator's state, until the algorithm starts
 *   ALG     the algorithm (for one-shot LL, OLLWAIT of it: first line
 *           pushed -> last peer line received, thread 0)
 *   END     the block's barrier, the step store-back, the system fence and
 *           the work_consumed store (E1)
 * in device memory (cuda_dstate.chan_trace); collcd copies the sums out
 * after the grids quit and logs the means.
 */
#define CUDA_TRACE_COPY    0
#define CUDA_TRACE_SEEN    1
#define CUDA_TRACE_ITEMS   2
#define CUDA_TRACE_ITEM    3
#define CUDA_TRACE_STATE   4
#define CUDA_TRACE_ALG     5
#define CUDA_TRACE_OLLWAIT 6
#define CUDA_TRACE_END     7
#define CUDA_TRACE_N       8

struct cuda_dstate {
	struct cuda_dlane lane[CUDA_MAX_LANES];
	uint64_t chan_pos[CUDA_MAX_LANES][COLLC_MAX_CHANNELS];     /* each block's position */
	uint64_t chan_aborted[CUDA_MAX_LANES][COLLC_MAX_CHANNELS]; /* items each block abandoned */
	uint64_t chan_trace[CUDA_MAX_LANES][COLLC_MAX_CHANNELS][CUDA_TRACE_N]; /* CUDA_TRACE_* sums */
	uint32_t abort; /* written by the poller when a host abort word is set */
	uint32_t reserved[15];
	/* Per FIFO slot: channel blocks that ended its item (item_end() in persist_kernel.cu). */
	uint32_t fin[CUDA_MAX_LANES][COLLC_FIFO_DEPTH];
	/* Per FIFO slot: the decision word of the gated item a lane leads there (proto/work.h). */
	uint64_t gate_dec[CUDA_MAX_LANES][COLLC_FIFO_DEPTH];
	struct collc_work_item items[CUDA_MAX_LANES][COLLC_FIFO_DEPTH];
};

/*
 * Breadcrumbs, one per channel block, in mapped host memory: thread 0 stores
 * the item it starts before it runs it and how it left it after its end (the
 * items it leads, share 0 of the item's channels; work_consumed tells how far
 * the block went past them), so that after a sticky error, when no CUDA call
 * answers any more, collcd can still log what every block was doing
 * (cuda_crumbs_log()). Plain posted stores, no ordering: a diagnostic only,
 * read after the grid faulted. Config cuda_breadcrumbs 0: the grid's
 * pointer is NULL and the blocks leave none.
 */
#define CUDA_CRUMB_RUN       1u /* started, not ended */
#define CUDA_CRUMB_ENDED     2u
#define CUDA_CRUMB_ABANDONED 3u /* its communicator was revoked during it */

struct cuda_crumb {
	uint64_t pos;     /* the item's FIFO position + 1; 0: no item yet */
	uint64_t comm_id; /* the item's communicator (the scheduler's id) */
	uint64_t coll_id;
	uint32_t what;  /* kind | algo << 8 | proto << 16 | nchannels << 24 */
	uint32_t state; /* CUDA_CRUMB_* */
};

_Static_assert(sizeof(struct cuda_crumb) == 32 && offsetof(struct cuda_crumb, coll_id) == 16,
	       "crumb: two 16-byte stores");

struct cuda_crumbs {
	struct cuda_crumb blk[CUDA_MAX_LANES][COLLC_MAX_CHANNELS];
};

struct cuda_grid_args {
	struct collc_work_fifo *fifo[CUDA_MAX_LANES];  /* device view of mapped host memory */
	const struct cuda_ll_fifo *ll[CUDA_MAX_LANES]; /* device view of mapped host memory */
	struct cuda_hctrl *hctrl;                      /* device view of mapped host memory */
	struct cuda_crumbs *crumbs;                    /* device view of mapped host memory */
	struct cuda_dstate *ds;
	uint32_t nlanes;
	uint32_t nchannels;
	uint32_t trace; /* COLLC_CUDA_TRACE: time the hand-offs (above) */
	uint32_t idle_sleep_ns; /* a channel block idle for 4096 polls sleeps this long between polls; 0: never */
	uint64_t epoch; /* bumped at every launch */
};

/* One-shot/two-shot slot that rank p writes into every rank's channel state. */
struct cuda_os_slot {
	uint64_t arrive;
	uint64_t mid;
	uint64_t done;
	uint64_t send; /* device pointers of rank p's buffers for the current op */
	uint64_t recv;
	uint64_t reserved[3];
};

/*
 * One rank on one channel, in that rank's GPU memory. Rank r sends to
 * r + 1 and receives from r - 1; connection buffers live in the receiver.
 */
struct cuda_chan {
	uint64_t tail; /* written by rank - 1: steps it published into our buffers */
	uint64_t reserved0[15];
	uint64_t head; /* written by rank + 1: steps of ours it consumed */
	uint64_t reserved1[15];
	/* Private to the block that runs this rank's channel. */
	uint64_t send_step;
	uint64_t recv_step;
	uint64_t os_gen;
	uint64_t reserved2[5];
	/* Written once by the host. */
	uint64_t buf_simple; /* our receive buffers */
	uint64_t buf_ll;
	uint64_t buf_ll128;
	uint64_t next_simple; /* rank + 1's receive buffers */
	uint64_t next_ll;
	uint64_t next_ll128;
	uint64_t next_tail; /* &next->tail */
	uint64_t prev_head; /* &prev->head */
	/*
	 * Where this rank's own head and tail words live: 0 for the fields
	 * above (a connection inside this collcd), or a struct cuda_xconn's in
	 * mapped host memory where the connection crosses to another daemon.
	 */
	uint64_t head_at;
	uint64_t tail_at;
	uint64_t next_len; /* a cuda_xconn's len[] when rank + 1 is remote; 0: none */
	uint64_t prev_x;   /* our receive cuda_xconn when rank - 1 is remote; 0: none */
	uint64_t peers[COLLC_MAX_RANKS];    /* every rank's struct cuda_chan for this channel */
	uint64_t oll_inbox;                 /* our one-shot LL inbox (union collc_ll_line *) */
	uint64_t oll_peer[COLLC_MAX_RANKS]; /* every rank's one-shot LL inbox on this channel */
	struct cuda_os_slot os[COLLC_MAX_RANKS];
	/*
	 * Across daemons, a ring in another order than the ranks' (exec.h
	 * comm_setup_part): the rank at each position, whose block all-gather
	 * and reduce-scatter buffers hold there. ordered 0: rank order.
	 */
	uint32_t ordered;
	uint8_t order[COLLC_MAX_RANKS];
	/*
	 * The group ring (hierarchical all-reduces across daemons, exec.h
	 * EXEC_RING_GROUP): every daemon holds `group` consecutive positions,
	 * and position p sends to p + group and receives from p - group, both
	 * on other daemons, so both rings live in mapped host memory (struct
	 * cuda_xconn), set by comm_link: the receive ring's buffer, tail (the
	 * proxy's) and head (ours), the send ring's buffer, tail (ours), head
	 * (the proxy's) and step lengths. group 0: no group ring.
	 */
	uint32_t group;
	uint32_t reserved3;
	uint64_t g_send_step, g_recv_step; /* private to the block, as send_step and recv_step */
	uint64_t g_buf, g_tail, g_head;
	uint64_t g_next_buf, g_next_tail, g_next_head, g_next_len;
	uint64_t g_scratch; /* one Simple slot: a reduce-scatter step's partial sums (hier.h) */
	uint64_t g_prev_x;  /* the group ring's receive struct cuda_xconn */
};

/*
 * One Simple ring that crosses to another daemon (communicators spanning
 * daemons, cuda/xconn.c), in mapped pinned host memory: the receive ring
 * of a local rank whose previous rank runs elsewhere (the proxy lands steps
 * and publishes tail; the grid consumes and publishes head), or the staging
 * ring of a remote rank whose previous rank runs here (the grid writes steps
 * and publishes tail; the proxy sends them and returns head). Every word the
 * two sides share crosses PCIe: the grid fences at system scope before its
 * tail or head stores and polls with system-scope acquire loads; the proxy
 * uses release stores and acquire loads (X1-X4 in xconn.c).
 */
struct cuda_xconn {
	uint64_t tail; /* steps published into buf */
	uint64_t reserved0[15];
	uint64_t head; /* steps consumed from buf */
	uint64_t reserved1[15];
	uint32_t len[COLLC_STEPS]; /* payload bytes of the step in each slot, before tail */
	/*
	 * A receive ring's: set by the grid when a step landed with another
	 * length than it computed (a broken or hostile peer daemon); the proxy
	 * then fails the communicator with EPROTO (P1 in prims.h, P1' in node.c).
	 */
	uint32_t broken;
	uint32_t reserved2[1024 - 64 - COLLC_STEPS - 1];
	uint8_t buf[CUDA_SIMPLE_BYTES]; /* COLLC_STEPS slots of CUDA_SIMPLE_SLOT */
};
_Static_assert(offsetof(struct cuda_xconn, buf) == 4096, "xconn payload page aligned");

/* What a work item's comm_dev points at (in the rank's GPU memory). */
struct cuda_rank {
	uint32_t nranks;
	uint32_t rank;
	uint32_t nchannels;
	uint32_t revoked_dev; /* set by the host (an async copy) when it is revoked */
	uint64_t revoked;     /* const uint32_t *: the same word in mapped host memory */
	uint64_t chan[COLLC_MAX_CHANNELS]; /* struct cuda_chan * */
};

/* Bytes of one rank's connection region for nch channels; buffers 4 KiB aligned. */
#define CUDA_CHAN_STRIDE ((sizeof(struct cuda_chan) + 4095) & ~(size_t)4095)
#define CUDA_BUFS_STRIDE ((size_t)CUDA_SIMPLE_BYTES + CUDA_LL_BYTES + CUDA_LL128_BYTES)
/* Bytes of one channel's one-shot LL inbox for nranks senders. */
#define CUDA_OLL_STRIDE(nranks)                                                                    \
	((size_t)collc_oll_inbox_lines((nranks), CUDA_OLL_SLOT_LINES) * COLLC_LL_LINE_BYTES)

#ifdef __cplusplus
extern "C" {
#endif
/* Launches the grid on stream (a cudaStream_t); returns a cudaError_t. */
int cuda_grid_launch(const struct cuda_grid_args *args, void *stream);
/* Loads the kernel's module now (never while a grid is resident). */
int cuda_grid_preload(void);
#ifdef __cplusplus
}
#endif

#endif
