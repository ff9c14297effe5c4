/* SPDX-License-Identifier: MIT */
/*
 * The persistent grid: one per GPU, resident for collcd's life (between
 * quiesce windows). Block 0's warp 0 is the only reader of host memory: each
 * pass it loads the items ahead of every lane's position from the lanes' LL
 * copies of their work FIFOs (cuda/grid.h) in one round of reads and copies
 * the whole ones into device memory; the channel blocks wait on device
 * memory only (and read their host abort word every 2^16 spins, and an
 * all-to-all's copy list). Each channel block runs every item of its lane in FIFO
 * order, mirroring cpu/executor.c: ring algorithms over Simple, LL or LL128
 * connections in the receiver's memory, or one-shot / two-shot over peer
 * buffers, and publishes work_consumed for its channel once per forwarded
 * unit.
 *
 * Orderings, by name (see proto/prims.h for S1/R1/S2/R2, W-LL/R-LL, W128/R128):
 *   L1' (poller): an item is taken once each of its 8-byte words in the
 *      lane's LL copy carries the item's flag; pairs with L1 in cuda_kick()
 *      (cuda/executor.c). No acquire: each word is whole or absent.
 *   G1 (poller): a unit copied into device memory, then dseq with release
 *      (gpu scope); pairs with G1' in a channel block's acquire of dseq.
 *   G2 (poller): dseq, then stop_epoch with release; pairs with G2' (a block
 *      that sees stop re-reads dseq before it exits).
 *   E1 (block): results stored, system fence, then work_consumed (at a
 *      work batch's last item, B2, or a unit's that ends at the gate);
 *      pairs with F1/F2 in the scheduler.
 *   E2 (block): results stored, system fence, then the item's signal word
 *      (a stream gate's, in device memory); with several channels each
 *      fences before it counts itself finished, and the last fences again
 *      before the store. Pairs with the client stream's wait on the word.
 *   D1 (block): as E2, for the done word of a host-form collective in its
 *      client's region (mapped host memory), on a batch's last item; stored
 *      only if no channel block abandoned the item. Pairs with D1' in
 *      libcollc (client/request.c).
 *   GD (leader poller): every go word of a gated item acquired (the
 *      client's stream fenced its earlier work before go), the outcome into
 *      mapped host memory, a system fence, then the decision word with
 *      release; pairs with GD' (a follower's acquire of the decision word)
 *      and, through G1 and E1, with the scheduler's read of the outcome.
 *   O1 (one-shot): buffers / pointers, system fence, then the slot flag;
 *      pairs with O1' (acquire of the flag before peer data is read).
 *   One-shot LL pushes W-LL lines into peers' inboxes and reuses an inbox
 *   slot by OLL1 (proto/prims.h); no fence, no barrier.
 *
 * This file holds the kernel entry, the FIFO poller and the dispatch of an
 * item (run_item()); the rest lives in cuda/device/, laid out as NCCL's
 * src/device/: common.h (loads and stores, struct blk, waits),
 * reduce_kernel.h (the arithmetic), prims_simple.h / prims_ll.h /
 * prims_ll128.h (the payload movers) under prims.h (prim<flags>), ring.h,
 * oneshot.h (one-shot, two-shot), oneshot_ll.h, copy.h (all-to-all(v) and
 * send/recv as copy lists). The algorithms' step
 * sequences and share arithmetic are proto/algo_ring.h and
 * proto/algo_oneshot.h, shared with the CPU executor.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "daemon/cuda/device/common.h"
#include "daemon/cuda/device/copy.h"
#include "daemon/cuda/device/hier.h"
#include "daemon/cuda/device/oneshot.h"
#include "daemon/cuda/device/oneshot_ll.h"
#include "daemon/cuda/device/ring.h"
#include "daemon/cuda/grid.h"
#include "include/collc.h"
#include "proto/dtype.h"
#include "proto/shm.h"

/* Runs this channel's share of an item; -1 when aborted. */
__device__ int run_item(struct blk *b, const struct cuda_grid_args &a)
{
	const struct cuda_rank *rk = (const struct cuda_rank *)(uintptr_t)b->it->comm_dev;
	const char *src = (const char *)(uintptr_t)b->it->sendbuf;
	char *dst = (char *)(uintptr_t)b->it->recvbuf;
	int r;

	b->revoked_dev = &rk->revoked_dev;
	b->nsteps = 0;
	b->es = collc_dtype_bytes(b->it->dtype);
	b->algo = b->it->algo;
	b->proto = b->it->proto;
	/*
	 * The communicator's state, loaded unless the block ran this
	 * communicator's last item: then every thread's copy is current (the
	 * block alone advances the steps, and stores them back after each item),
	 * and a chain of three dependent loads (item, struct cuda_rank, struct
	 * cuda_chan) shrinks to one. comm_id is never reused, so a communicator
	 * set up again at the same address never matches.
	 */
	if (b->state_of != b->it->comm_id || !b->it->comm_id) {
		b->revoked_of = (const uint32_t *)(uintptr_t)rk->revoked;
		b->ch = (struct cuda_chan *)(uintptr_t)rk->chan[b->chan];
		b->send_step = b->ch->send_step;
		b->recv_step = b->ch->recv_step;
		b->os_gen = b->ch->os_gen;
		b->my_simple = (char *)(uintptr_t)b->ch->buf_simple;
		b->my_ll = (char *)(uintptr_t)b->ch->buf_ll;
		b->my_ll128 = (char *)(uintptr_t)b->ch->buf_ll128;
		b->nx_simple = (char *)(uintptr_t)b->ch->next_simple;
		b->nx_ll = (char *)(uintptr_t)b->ch->next_ll;
		b->nx_ll128 = (char *)(uintptr_t)b->ch->next_ll128;
		b->next_tail = (uint64_t *)(uintptr_t)b->ch->next_tail;
		b->prev_head = (uint64_t *)(uintptr_t)b->ch->prev_head;
		/* Across daemons these live in mapped host memory (grid.h struct cuda_xconn). */
		b->my_head = b->ch->head_at ? (uint64_t *)(uintptr_t)b->ch->head_at : &b->ch->head;
		b->my_tail = b->ch->tail_at ? (uint64_t *)(uintptr_t)b->ch->tail_at : &b->ch->tail;
		b->next_len = (uint32_t *)(uintptr_t)b->ch->next_len;
		b->prev_x = (struct cuda_xconn *)(uintptr_t)b->ch->prev_x;
		b->state_of = b->it->comm_id;
	}
	b->revoked = b->revoked_of;
	if (collc_copy_coll(b->it->coll))
		return copy_run(b);
	if (b->it->nranks == 1) {
		single_rank(b, src, dst);
		return 0;
	}
	if (b->trace)
		b->t_alg = globaltimer();
	if (b->algo == COLLC_ALGO_ONESHOT && b->proto == COLLC_PROTO_LL &&
	    collc_oll_coll(b->it->coll))
		r = oll_run(b, src, dst);
	else if (b->algo == COLLC_ALGO_ONESHOT || b->algo == COLLC_ALGO_TWOSHOT)
		r = oneshot(b, src, dst,
			    b->algo == COLLC_ALGO_TWOSHOT && b->it->coll == COLLC_OP_ALLREDUCE,
			    NULL);
	else if (b->algo == COLLC_ALGO_HIER)
		r = hier_run(b, src, dst);
	else
		r = ring_run(b, src, dst);
	if (b->trace)
		b->t_done = globaltimer();
	__syncthreads();
	if (threadIdx.x == 0) {
		b->ch->send_step = b->send_step;
		b->ch->recv_step = b->recv_step;
		b->ch->os_gen = b->os_gen;
	}
	return r;
}

/*
 * Items a pass of a lane's poller reads ahead of the lane's position after a
 * pass that found some; an idle lane reads one. Each is a 256-byte load of
 * the whole warp, its words in registers until the pass has looked at them.
 * The window bounds the pipelined rate (a pass, 1.8 us, per window); its
 * registers bound the window: one warp reading 8 items for two lanes spilled
 * 80 bytes (ptxas), and a spilled word waits for its PCIe read before the
 * next load can take its register (every window above 4 then cost a lone
 * 16-256 KiB collective 1-1.5 us: bench/RESULTS.md, "the poller's read-ahead
 * window"). So each lane has a warp of its own.
 */
#define POLL_ITEMS 4u

/*
 * One lane's poller state, in shared memory: thread 0 of the lane's warp
 * loads and stores it, and the warp acts on thread 0's values (shuffles), so
 * that no thread can act on a value another has not seen yet.
 */
struct poll_lane {
	uint64_t pos;       /* the next position to forward */
	uint64_t last_coll; /* the newest collective forwarded */
	uint32_t want;      /* items the next pass reads */
	int acked, open, done;
};

static __shared__ struct poll_lane poll_sh[CUDA_MAX_LANES]; /* block 0's */

/* Block 0, thread l < nlanes, before the block's barrier and the pollers. */
static __device__ void poll_init(const struct cuda_grid_args &a, uint32_t lane)
{
	volatile struct poll_lane *sh = &poll_sh[lane];

	sh->pos = a.ds->lane[lane].poll_pos;
	sh->last_coll = a.ds->lane[lane].last_coll;
	sh->want = 1;
	sh->acked = sh->open = sh->done = 0;
}

/*
 * A gated item's gate as the lane's warp holds it while the item waits at
 * the lane's position (proto/work.h struct collc_work_gate): the decision
 * word and tag in every thread, thread t's go word and ticket (t < n).
 */
struct gate_state {
	uint64_t pos; /* the position whose gate this is; UINT64_MAX: none */
	uint64_t t_head; /* cuda_trace: when the item first stood at the lane's position */
	uint64_t dec, tag, addr;
	uint32_t n, val;
};

/*
 * Polls in one call of gate_decide(): the leader's each load the go words
 * (clients' regions, mapped host memory) with the lane's hold and cancel
 * words, one PCIe round trip for all; a follower's poll the decision word
 * in device memory. The pass around it reads the FIFO again (abort, the
 * quiesce boundary) between calls.
 */
#define GATE_POLLS 32

/*
 * The decision of the gated item at position p, 0 while there is none
 * (the whole warp). The leader decides: FIRE once every go word holds its
 * ticket (equal), else SKIP when the host asked: the scheduler's cancel
 * word, or a quiesce window's hold. A follower takes the leader's decision.
 */
static __device__ uint32_t gate_decide(const struct cuda_grid_args &a, uint32_t lane, uint64_t p,
				       uint32_t flags, struct gate_state &g)
{
	const uint32_t t = threadIdx.x & 31;
	struct collc_work_fifo *f = a.fifo[lane];
	struct cuda_hlane *hl = &a.hctrl->lane[lane];
	const uint32_t slot = (uint32_t)(p & (COLLC_FIFO_DEPTH - 1));
	uint32_t o = 0;

	if (g.pos != p) {
		/*
		 * The gate, once per gated item: W1 wrote it before the item's
		 * seq and the LL copy this pass saw whole (L1'); the fence makes
		 * that observation an acquire without another round trip.
		 */
		const struct collc_work_gate *gd = (const struct collc_work_gate *)&f->copies[slot];

		g.t_head = a.trace ? globaltimer() : 0;
		__threadfence_system();
		g.dec = ld_vol64(&gd->decision);
		g.tag = ld_vol64(&gd->tag);
		g.n = min(ld_vol32(&gd->nwatch), COLLC_GATE_WATCH_MAX);
		if (t < COLLC_GATE_WATCH_MAX) {
			g.addr = ld_vol64(&gd->watch[t].addr);
			g.val = ld_vol32(&gd->watch[t].val);
		}
		g.pos = p;
	}
	for (int k = 0; k < GATE_POLLS && !o; k++) {
		if (flags & COLLC_ITEM_LEADER) {
			/* Relaxed loads, issued together; the fence below makes them an acquire. */
			uint64_t gate = t == 0 ? ld_vol64(&hl->gate) : 0;
			uint64_t cancel = t == 0 ? ld_vol64(&hl->cancel) : 0;
			const int went = t >= g.n || ld_cv32((const uint32_t *)g.addr) == g.val;

			/* Thread 0's values for the whole warp: it acts as one. */
			gate = __shfl_sync(FULL_MASK, gate, 0);
			cancel = __shfl_sync(FULL_MASK, cancel, 0);

			if (__all_sync(FULL_MASK, went))
				o = COLLC_GATE_FIRE;
			else if (gate == CUDA_GATE_HOLD || cancel > p)
				o = COLLC_GATE_SKIP;
			else if (gate != CUDA_GATE_OPEN && p >= gate)
				break; /* past a quiesce boundary: the pass stops there */
			if (!o)
				continue;
			/* GD: each thread's go, then the outcome, then the decision. */
			__threadfence_system();
			__syncwarp();
			if (t == 0) {
				st_vol64(&a.hctrl->outcome[lane][slot], collc_gate_word(p + 1, o));
				__threadfence_system();
				st_rel_sys((uint64_t *)g.dec, collc_gate_word(g.tag, o));
			}
		} else {
			/* GD': pairs with GD in the leader (a relaxed poll, then the fence). */
			const uint64_t d = __shfl_sync(
				FULL_MASK, t == 0 ? ld_vol64((const uint64_t *)g.dec) : 0ull, 0);

			o = collc_gate_decided(d, g.tag);
			if (o)
				__threadfence_system();
		}
	}
	__syncwarp();
	return o;
}

/*
 * A poller: warp `lane` of block 0, the lane's alone. Each pass
 * loads, in one round of PCIe reads, the lane's gate and the items ahead of
 * its position from its LL copy (grid.h): thread t loads word t of each
 * item. The lane's run of whole items from its position, within its gate, is
 * its unit: the warp copies it into device memory (with trace, stamping
 * t_forward) and publishes it with one store of dseq (G1). Units and work
 * batches differ: a unit starts as soon as its items are seen, while the
 * blocks publish work_consumed at the end of the host's batch (B2,
 * batch_last), so a batch cut into several units still costs one system
 * fence per block; only a unit that ends at the gate (a quiesce window) ends
 * its batch early. For the same reason the poller holds (the window's
 * handshake) only at the end of a batch: a unit that stopped inside one, the
 * rest of its items not yet seen, would leave work_consumed short of the
 * position it reports, and the window would wait for it forever.
 *
 * A warp per lane: the read-ahead words of one lane fill the registers a
 * warp has (POLL_ITEMS). Two warps a lane, each issuing its reads half a
 * pass after the other, were measured too: a lone 8-byte all-reduce took
 * 0.7-1 us longer than with one (bench/RESULTS.md, "A poller warp per lane").
 */
__device__ __noinline__ void poller(const struct cuda_grid_args &a, uint32_t lane)
{
	volatile struct poll_lane *sh = &poll_sh[lane];
	const uint32_t t = threadIdx.x & 31;
	struct cuda_dstate *ds = a.ds;
	struct collc_work_fifo *f = a.fifo[lane];
	struct cuda_hlane *hl = &a.hctrl->lane[lane];
	const struct cuda_ll_fifo *ll = a.ll[lane];
	struct gate_state gs;

	gs.pos = UINT64_MAX;
	gs.dec = gs.tag = gs.addr = 0;
	gs.n = gs.val = 0;
	for (uint32_t it = 0;; it++) {
		uint64_t v[POLL_ITEMS];

		if (__shfl_sync(FULL_MASK, t == 0 ? sh->done : 0, 0))
			break;
		const uint64_t p = __shfl_sync(FULL_MASK, t == 0 ? (uint64_t)sh->pos : 0ull, 0);
		const uint32_t want = __shfl_sync(FULL_MASK, t == 0 ? sh->want : 0u, 0);
		const uint64_t t_issue = a.trace ? globaltimer() : 0;

		/* The gate and the items are loaded together: one round trip per pass. */
		uint64_t gate = ld_vol64(&hl->gate);
#pragma unroll
		for (uint32_t i = 0; i < POLL_ITEMS; i++)
			if (i < want)
				v[i] = ld_vol64(&ll->items[(p + i) & (COLLC_FIFO_DEPTH - 1)].w[t]);
		uint64_t pos = p; /* advanced by the unit forwarded */
		uint64_t last_coll = __shfl_sync(FULL_MASK, t == 0 ? (uint64_t)sh->last_coll : 0ull, 0);
		const int acked = __shfl_sync(FULL_MASK, t == 0 ? sh->acked : 0, 0);
		int open = __shfl_sync(FULL_MASK, t == 0 ? sh->open : 0, 0), done = 0, ack = 0;
		uint32_t run = 0, endk = UINT32_MAX, n = 0;
		int cut = 0;

		uint32_t gi = UINT32_MAX, gflags = 0, gout = 0;

		gate = __shfl_sync(FULL_MASK, gate, 0);
		/* L1': a word whose flag is the item's position + 1 is whole (grid.h). */
#pragma unroll
		for (uint32_t i = 0; i < POLL_ITEMS; i++) {
			if (i < want &&
			    __all_sync(FULL_MASK, (uint32_t)(v[i] >> 32) == (uint32_t)(p + i) + 1) &&
			    i == run)
				run++;
			/* The first gated item of the run (word 29, gate). */
			if (i < run && gi == UINT32_MAX) {
				const uint32_t gw = __shfl_sync(FULL_MASK, (uint32_t)v[i], 29);

				if (gw & COLLC_ITEM_GATED) {
					gi = i;
					gflags = gw;
				}
			}
		}
		/*
		 * A gated item goes alone and only once decided; the items before
		 * it go first. Not past a quiesce boundary (gate) either.
		 */
		if (gi == 0 && (gate == CUDA_GATE_OPEN || gate == CUDA_GATE_HOLD || p < gate)) {
			gout = gate_decide(a, lane, p, gflags, gs);
			run = gout ? 1 : 0;
		} else if (gi != UINT32_MAX) {
			run = gi;
		}
#pragma unroll
		for (uint32_t i = 0; i < POLL_ITEMS; i++)
			/* Where the run first ends a batch (word 20, batch_last: B2). */
			if (i < run && endk == UINT32_MAX && __shfl_sync(FULL_MASK, (uint32_t)v[i], 20))
				endk = i;
		if (!(it & 63) && __shfl_sync(FULL_MASK, t == 0 ? ld_vol32(&f->ctrl.abort) : 0u, 0)) {
			if (t == 0) {
				ds->abort = 1;
				__threadfence();
			}
			done = 1;
		} else if (gout) {
			/*
			 * A decided gated item (the last of its batch) goes even
			 * under a hold: its other devices may already run it.
			 */
			n = 1;
		} else if (gate == CUDA_GATE_HOLD && open) {
			/* Hold only at a batch's end: forward up to it first. */
			n = endk != UINT32_MAX ? endk + 1 : run;
		} else if (gate == CUDA_GATE_HOLD) {
			if (!acked && t == 0) {
				/* Hold: tell the host where we stopped (cuda/window.c window()). */
				st_vol64(&hl->ack_pos, pos);
				st_vol64(&hl->ack_coll, last_coll);
				__threadfence_system();
				st_vol64(&hl->ack_gate, CUDA_GATE_HOLD);
			}
			ack = 1;
		} else if (pos >= gate) {
			/* G2: stop at the boundary the host chose. */
			if (t == 0)
				st_rel_gpu(&ds->lane[lane].stop_epoch, a.epoch);
			done = 1;
		} else {
			n = (uint32_t)min((uint64_t)run, gate - pos);
			/* A unit that ends at the gate ends its batch there too (E1 before a window). */
			cut = n && pos + n == gate;
		}
		if (n > 0) {
			uint32_t kind = 0;

#pragma unroll
			for (uint32_t i = 0; i < POLL_ITEMS; i++) {
				uint32_t wd;

				if (i >= n)
					continue;
				wd = (uint32_t)v[i];
				/* Skipped: consumed as an item of no kind (no signal, no done word). */
				if (t == 0 && i == 0 && gout == COLLC_GATE_SKIP)
					wd = (wd & ~0xffu) | COLLC_WORK_NONE;
				/* Words 18-19 hold t_forward, word 20 batch_last: proto/work.h. */
				/* A gated item's COPY also counts its wait for the streams. */
				const uint64_t t_from = i == 0 && gout ? gs.t_head : t_issue;

				if (t == 18 && a.trace)
					wd = (uint32_t)t_from;
				if (t == 19 && a.trace)
					wd = (uint32_t)(t_from >> 32);
				if (t == 20 && i + 1 == n && cut)
					wd = 1;
				((uint32_t *)&ds->items[lane][(p + i) & (COLLC_FIFO_DEPTH - 1)])[t] = wd;
				if (i + 1 == n) {
					/* Kind (word 0), coll_id (words 14-15), batch_last (word 20). */
					kind = __shfl_sync(FULL_MASK, wd, 0) & 0xff;
					const uint64_t coll = (uint64_t)__shfl_sync(FULL_MASK, wd, 14) |
							      (uint64_t)__shfl_sync(FULL_MASK, wd, 15) << 32;
					open = !__shfl_sync(FULL_MASK, wd, 20);
					if (kind == COLLC_WORK_COLL)
						last_coll = coll;
				}
			}
			/* The warp's device stores before the release (G1). */
			__syncwarp();
			if (t == 0) {
				if (a.trace) {
					/* reserved[0] of the device copies: the reads are back (grid.h). */
					const uint64_t tb = globaltimer();

					for (uint32_t i = 0; i < n; i++)
						ds->items[lane][(pos + i) & (COLLC_FIFO_DEPTH - 1)]
							.reserved[0] = tb;
				}
				/* G1: the unit's copy, then dseq. */
				st_rel_gpu(&ds->lane[lane].dseq, pos + n);
			}
			if (kind == COLLC_WORK_QUIT)
				done = 1;
			pos += n;
		}
		if (t == 0) {
			sh->pos = pos;
			sh->last_coll = last_coll;
			sh->open = open;
			sh->acked = acked || ack;
			sh->want = n ? POLL_ITEMS : 1;
			if (done) {
				ds->lane[lane].poll_pos = pos;
				ds->lane[lane].last_coll = last_coll;
				sh->done = 1;
			}
		}
		__syncwarp();
	}
}

/*
 * Grid blocks per SM the registers must allow. 1 lets the compiler take 128
 * registers a thread, the whole register file of an SM for a 512-thread
 * block: no client block can then share an SM with a grid block, and under
 * MPS a client kernel that fills the GPU ran 94% slower next to the default
 * 65-block grid (bench/run-interfere.sh, 2 x H200). 2 caps it at 64 (with
 * some spills): client blocks fill the rest of a grid block's SM, the loss
 * was 1.7% idle and 2.5% with 256 MiB all-reduces running, for 2.4% less
 * all-reduce busbw at 512 MiB and 0.9 us more at 8 bytes (bench/RESULTS.md).
 */
/*
 * E2, D1: the item's results, then its signal word and its done word
 * (proto/work.h). Thread 0 of a channel block, after the block's system
 * fence. The last channel block of the item to get here stores them; the
 * done word (an item of one channel) only where the block did not abandon
 * the item. fin is the item's FIFO slot's count, back at 0 before the last
 * block's work_consumed lets the host reuse the slot.
 */
static __device__ void item_end(const struct collc_work_item *it, uint32_t *fin, int signal,
				int done, int abandoned)
{
	/* Done words name items of one channel only (sched_done_fill()): no count for them. */
	if (it->nchannels > 1) {
		if (atomicAdd(fin, 1u) != it->nchannels - 1u)
			return;
		atomicExch(fin, 0u);
		__threadfence_system();
	}
	if (signal)
		atomicExch(&((struct collc_signal *)it->signal)->value, it->signal_val);
	if (done && !abandoned)
		*(volatile uint32_t *)it->done = it->done_val;
}

/*
 * The block's breadcrumb (grid.h struct cuda_crumb, mapped host memory):
 * posted stores of thread 0 before the item runs; the fence at the end of
 * the item (or of its batch) finds them long gone.
 */
static __device__ __forceinline__ void crumb_start(struct cuda_crumb *c,
						   const struct collc_work_item *it, uint64_t pos)
{
	const uint32_t what = (uint32_t)it->kind | (uint32_t)it->algo << 8 |
			      (uint32_t)it->proto << 16 | (uint32_t)it->nchannels << 24;

	st_vol2x64(&c->pos, pos + 1, it->comm_id);
	st_vol2x64(&c->coll_id, it->coll_id, (uint64_t)what | (uint64_t)CUDA_CRUMB_RUN << 32);
}

#ifndef COLLC_GRID_BLOCKS_PER_SM
#define COLLC_GRID_BLOCKS_PER_SM 2
#endif

__global__ void __launch_bounds__(CUDA_THREADS, COLLC_GRID_BLOCKS_PER_SM)
	collc_persist(const struct cuda_grid_args a)
{
	struct blk b;               /* per thread: every thread keeps the same copy */
	__shared__ int state;       /* 0 item ready, 1 stop, 2 abort, 3 item abandoned */
	__shared__ uint4 s_item[8]; /* the running item, one copy per block (b.it) */
	uint32_t lane, chan;
	uint64_t pos, t_seen = 0, t_item = 0, seen = 0; /* seen: thread 0's last dseq */

	if (blockIdx.x == 0) {
		/* A warp per lane (poller()). */
		if (threadIdx.x < a.nlanes)
			poll_init(a, threadIdx.x);
		__syncthreads();
		if (threadIdx.x < 32 * a.nlanes)
			poller(a, threadIdx.x / 32);
		return;
	}
	lane = (blockIdx.x - 1) / a.nchannels;
	chan = (blockIdx.x - 1) % a.nchannels;
	b.ds = a.ds;
	b.it = (const struct collc_work_item *)s_item;
	b.hctl = &a.fifo[lane]->ctrl;
	b.revoked = NULL;
	b.revoked_dev = NULL;
	b.chan = chan;
	b.peer_base = 0;
	b.order = NULL;
	b.trace = a.trace;
	b.state_of = 0;
	b.t_alg = b.t_done = b.t_ollwait = 0;
	pos = a.ds->chan_pos[lane][chan];
	for (;;) {
		if (threadIdx.x == 0) {
			struct cuda_dlane *dl = &a.ds->lane[lane];

			state = 0;
			for (uint32_t spins = 0;; spins++) {
				/*
				 * G1': pairs with G1 in the poller. The rest of a unit
				 * already seen needs no new acquire: the one that saw
				 * the unit ordered all of it.
				 */
				if (seen > pos || (seen = ld_acq_gpu(&dl->dseq)) > pos) {
					if (a.trace)
						t_seen = globaltimer();
					break;
				}
				/*
				 * G2': a stop is final only if dseq did not move before it.
				 * Looked at every 16th spin: each acquire load waits for the
				 * one before it, so the dseq poll runs at twice the rate.
				 */
				if ((spins & 15) == 15 && ld_acq_gpu(&dl->stop_epoch) == a.epoch &&
				    ld_acq_gpu(&dl->dseq) <= pos) {
					state = 1;
					break;
				}
				if (check_abort(&b, spins)) {
					state = 2;
					break;
				}
				if (spins > 4096 && a.idle_sleep_ns)
					__nanosleep(a.idle_sleep_ns);
			}
		}
		__syncthreads();
		if (state)
			break;
		/*
		 * The item, one 16-byte word per thread of the first eight, into
		 * shared memory; b.it points there. A copy in every thread's
		 * struct blk cost 1.3-1.5 us per item (512 threads' local-memory
		 * stores; cuda_trace). Ordered after thread 0's G1' by the barrier.
		 */
		if (threadIdx.x < 8)
			s_item[threadIdx.x] = ld_data(
				(const uint4 *)&a.ds->items[lane][pos & (COLLC_FIFO_DEPTH - 1)] +
				threadIdx.x);
		__syncthreads();
		b.share = collc_item_share(b.it->chan_base, chan, a.nchannels);
		if (a.trace)
			t_item = globaltimer(); /* after the item's loads: share needs them */
		b.copies = &a.fifo[lane]->copies[pos & (COLLC_FIFO_DEPTH - 1)];
		b.host_seq = &a.fifo[lane]->items[pos & (COLLC_FIFO_DEPTH - 1)].seq;
		b.t_alg = b.t_done = t_item;
		b.t_ollwait = 0;
		/*
		 * Only the item's first channel block (share 0): a crumb from every
		 * block of a 1 MiB item cost 5% of pipelined all-reduces
		 * (bench/RESULTS.md); the others keep their last crumb.
		 */
		if (threadIdx.x == 0 && b.share == 0 && a.crumbs)
			crumb_start(&a.crumbs->blk[lane][chan], b.it, pos);
		if (b.it->kind == COLLC_WORK_COLL && b.share < b.it->nchannels &&
		    run_item(&b, a) < 0) {
			/*
			 * Every thread saw the same -1 (the primitives agree through
			 * shared memory); thread 0 alone decides between the grid's
			 * abort and the communicator's, so the block stays together.
			 */
			if (threadIdx.x == 0)
				state = grid_aborted(&b) ? 2 : 3;
			__syncthreads();
			if (state == 2)
				break;
		}
		b.revoked = NULL;
		b.revoked_dev = NULL;
		__syncthreads();
		if (threadIdx.x == 0) {
			struct collc_consumed *wc = &a.fifo[lane]->ctrl.work_consumed[chan];

			/* Abandoned ones too: the stream goes on, collcd reports the error. */
			int signal =
				b.it->signal && b.share < b.it->nchannels &&
				(b.it->kind == COLLC_WORK_COLL || b.it->kind == COLLC_WORK_SIGNAL);
			/*
			 * The done word on a batch's last item only: where a batch
			 * runs back to back, a system fence per item would cost
			 * more than the CQE its client then waits for.
			 */
			int done = b.it->done && b.it->batch_last && b.share < b.it->nchannels &&
				   b.it->kind == COLLC_WORK_COLL;

			/* One system fence serves E1, E2 and D1. */
			if (b.it->batch_last || signal)
				__threadfence_system();
			if (signal || done)
				item_end(b.it, &a.ds->fin[lane][pos & (COLLC_FIFO_DEPTH - 1)],
					 signal, done, state == 3);

			if (state == 3)
				st_vol64(&wc->aborted, ++a.ds->chan_aborted[lane][chan]);
			/*
			 * E1: results, system fence, then work_consumed (mapped
			 * host memory); once per work batch, at its last item.
			 */
			if (b.it->batch_last)
				st_vol64(&wc->value, pos + 1);
			/* After E1's fence: the next fence is an item or more away. */
			if (b.share == 0 && a.crumbs)
				st_vol32(&a.crumbs->blk[lane][chan].state,
					 state == 3 ? CUDA_CRUMB_ABANDONED : CUDA_CRUMB_ENDED);
			a.ds->chan_pos[lane][chan] = pos + 1;
			if (a.trace && b.it->kind == COLLC_WORK_COLL && b.share < b.it->nchannels) {
				uint64_t *tr = a.ds->chan_trace[lane][chan];

				tr[CUDA_TRACE_COPY] += b.it->reserved[0] - b.it->t_forward;
				tr[CUDA_TRACE_SEEN] += t_seen - b.it->reserved[0];
				tr[CUDA_TRACE_ITEMS]++;
				tr[CUDA_TRACE_ITEM] += t_item - t_seen;
				tr[CUDA_TRACE_STATE] += b.t_alg - t_item;
				tr[CUDA_TRACE_ALG] += b.t_done - b.t_alg;
				tr[CUDA_TRACE_OLLWAIT] += b.t_ollwait;
				tr[CUDA_TRACE_END] += globaltimer() - b.t_done;
			}
		}
		pos++;
		if (b.it->kind == COLLC_WORK_QUIT)
			break;
	}
}

extern "C" int cuda_grid_launch(const struct cuda_grid_args *args, void *stream)
{
	unsigned nblocks = 1 + args->nlanes * args->nchannels;

	collc_persist<<<nblocks, CUDA_THREADS, 0, (cudaStream_t)stream>>>(*args);
	return (int)cudaGetLastError();
}

extern "C" int cuda_grid_preload(void)
{
	struct cudaFuncAttributes attr;

	return (int)cudaFuncGetAttributes(&attr, collc_persist);
}
