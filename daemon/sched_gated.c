/* SPDX-License-Identifier: MIT */
/*
 * Gated items: a stream collective handed to the executors before its
 * streams reached it (proto/work.h COLLC_ITEM_GATED). Once every rank
 * submitted it, its items go into the FIFOs at once, each marked gated and
 * naming one decision word; the executor of the first local rank (the
 * leader) watches the ranks' go words itself and fires the collective the
 * moment the last stream writes its ticket, with no pass of the scheduler
 * between the stream and the grid (docs/design.md §2b, "Gated items").
 *
 * A gated item holds its FIFO: nothing behind it runs before it is decided.
 * So the scheduler keeps at most one undecided gated item per FIFO and
 * writes nothing behind one. Whatever else needs the FIFO (another
 * communicator's collective, a graph firing, a send, a signal item) asks the
 * leader to skip it (gate_cancel) and waits for the decision: FIRE (the
 * streams were there first: it runs, and completes as any collective), or
 * SKIP (every device consumes the item without running it, and the
 * collective waits for its gates here again, as before it was handed over,
 * never gated again). Only the communicator's own later collectives wait
 * for the decision without asking: they are ordered after it anyway.
 *
 * The leader alone decides, once, in a word every device's executor reads,
 * so the devices of one collective never disagree (tests/model/gated.pml).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>

#include "common/atomics.h"
#include "common/futex.h"
#include "daemon/sched_int.h"
#include "proto/algo_copy.h"

/* The executor of cm, if it takes gated items. */
static const struct exec_backend *gated_exec(const struct comm *cm)
{
	const struct exec_backend *ex = sched.execs[cm->exec_idx].ex;

	return ex->gate_decision && ex->gate_cancel && ex->gate_outcome ? ex : NULL;
}

/*
 * The go word the executor watches for a stream rank: the gate's go in the
 * client's region, mapped for the executor with the done words; 0: none.
 */
static uint64_t watch_addr(const struct comm *cm, const struct slot_rank *sr)
{
	return sched_gate_go_addr(sr->client, cm->exec_idx, sr->sqe.gate);
}

int sched_gated_fill(const struct comm *cm, const struct slot *sl, uint32_t r,
		     struct collc_work_gate *g)
{
	const struct exec_backend *ex = gated_exec(cm);
	uint32_t n = 0;

	memset(g, 0, sizeof(*g));
	g->decision = ex->gate_decision(sl->gate_dev, sl->gate_pos);
	g->tag = sl->gate_pos + 1;
	if (cm->devs[r] != sl->gate_dev)
		return 0;
	for (uint32_t k = 0; k < cm->nranks; k++) {
		const struct slot_rank *sr = &sl->ranks[k];

		if (sr->sqe.flags != COLLC_SQE_STREAM || sr->err)
			continue;
		if (n == COLLC_GATE_WATCH_MAX)
			return -E2BIG;
		g->watch[n].addr = watch_addr(cm, sr);
		g->watch[n].val = (uint32_t)sr->sqe.user_data;
		n++;
	}
	g->nwatch = n;
	return 0;
}

/* Can sl (cm's next, every rank in, some gate closed) go to the executors gated? */
static int gated_ok(const struct comm *cm, const struct slot *sl)
{
	const struct sched_exec *se = &sched.execs[cm->exec_idx];
	uint32_t n = 0;

	/* Not across daemons: every rank runs here, and the first leads. */
	if (!gated_exec(cm) || !se->cfg.gated_items || cm->local || cm->gated || sl->no_gated ||
	    cm->leave_err || cm->revoked || !sl->gated)
		return 0;
	for (uint32_t r = 0; r < cm->nranks; r++) {
		const struct slot_rank *sr = &sl->ranks[r];

		/* Copy lists use the slot's copy list; a failed check ends it at launch. */
		if (sr->err || collc_copy_coll(sr->sqe.opcode) || COLLC_OP_IS_P2P(sr->sqe.opcode))
			return 0;
		if (!sched_fifo_ready(cm->devs[r]))
			return 0;
		if (sr->sqe.flags != COLLC_SQE_STREAM)
			continue;
		if (++n > COLLC_GATE_WATCH_MAX || !watch_addr(cm, sr))
			return 0;
	}
	return 1;
}

int sched_gated_launch(struct comm *cm, struct slot *sl)
{
	if (!gated_ok(cm, sl))
		return 0;
	sl->gate_dev = cm->devs[sched_first_local(cm)];
	sl->gate_pos = sched.fifos[sl->gate_dev].tail;
	sl->gate_state = GATED_UNDECIDED;
	if (!sched_launch(cm, sl, &cm->inflight)) {
		sl->gate_state = GATED_NONE;
		return 0;
	}
	if (sl->state != SLOT_INFLIGHT) {
		/* It failed its checks at launch (sched_slot_finish()): nothing was written. */
		sl->gate_state = GATED_NONE;
		return 1;
	}
	for (uint32_t r = 0; r < cm->nranks; r++) {
		sched.fifos[cm->devs[r]].gated_sl = sl;
		sched.fifos[cm->devs[r]].gated_cm = cm;
	}
	cm->gated = sl;
	sched.gated_items++;
	return 1;
}

/* The decision came (or the collective ended): the FIFOs are free again. */
static void gated_release(struct comm *cm, struct slot *sl)
{
	for (uint32_t r = 0; r < cm->nranks; r++)
		if (sched.fifos[cm->devs[r]].gated_sl == sl) {
			sched.fifos[cm->devs[r]].gated_sl = NULL;
			sched.fifos[cm->devs[r]].gated_cm = NULL;
		}
	if (cm->gated == sl)
		cm->gated = NULL;
}

/*
 * Skipped: every device consumed the items without running them. The
 * collective is cm's next again and waits for its gates here.
 */
static void gated_undo(struct comm *cm, struct slot *sl)
{
	gated_release(cm, sl);
	sl->gate_state = GATED_NONE;
	sl->no_gated = 1;
	sl->state = SLOT_ARRIVING;
	for (uint32_t r = 0; r < cm->nranks; r++)
		sl->ranks[r].sig_in_item = 0;
	cm->inflight--;
	cm->by_algo[sl->algo]--;
	cm->by_proto[sl->proto]--;
	sched.by_algo[sl->algo]--;
	sched.by_proto[sl->proto]--;
	sched.by_op[sl->ranks[sched_first_local(cm)].sqe.opcode]--;
	if (cm->next_launch > sl->seq)
		cm->next_launch = sl->seq; /* nothing of cm went after it: it held cm's devices */
	sched.gated_skipped++;
	/* Revoked meanwhile: the revocation ended what waited, this too. */
	if (cm->revoked) {
		sched_slot_finish(cm, sl, cm->revoked);
		sched_comm_advance_done(cm);
	}
}

/* Has the leader decided sl? Acts on it: 1 if it is decided now. */
static int gated_resolve(struct comm *cm, struct slot *sl)
{
	uint32_t o;

	if (sl->gate_state != GATED_UNDECIDED)
		return 1;
	o = gated_exec(cm)->gate_outcome(sl->gate_dev, sl->gate_pos);
	if (o == COLLC_GATE_FIRE) {
		sl->gate_state = GATED_FIRED;
		gated_release(cm, sl);
		sched.gated_fired++;
	} else if (o == COLLC_GATE_SKIP) {
		gated_undo(cm, sl);
	} else {
		return 0;
	}
	return 1;
}

int sched_gated_clear(uint32_t dev, const struct comm *cm, const struct slot *sl)
{
	struct fifo_host *fh = &sched.fifos[dev];
	struct slot *g = fh->gated_sl;
	struct comm *gc;

	if (!g)
		return 1;
	gc = fh->gated_cm;
	if (gated_resolve(gc, g))
		/* A skip moved gc's window back: gc's own next is that one again. */
		return !(gc == cm && sl && sl->seq > g->seq && g->gate_state == GATED_NONE);
	/*
	 * cm's own later collectives wait (ordered after it on every rank);
	 * anything else asks the leader to skip it.
	 */
	if (gc != cm || !sl || sl->seq <= g->seq)
		gated_exec(gc)->gate_cancel(g->gate_dev, g->gate_pos + 1);
	return 0;
}

void sched_gated_cancel(struct comm *cm)
{
	struct slot *sl = cm->gated;

	if (sl && sl->gate_state == GATED_UNDECIDED)
		gated_exec(cm)->gate_cancel(sl->gate_dev, sl->gate_pos + 1);
}

int sched_gated_poll(void)
{
	uint64_t now = now_ns();
	int progress = 0;

	for (struct comm *cm = sched.comms; cm; cm = cm->next) {
		struct slot *sl = cm->gated;
		uint32_t timeout_ms;

		if (!sl)
			continue;
		if (gated_resolve(cm, sl)) {
			progress = 1;
			continue;
		}
		timeout_ms = sched_comm_timeout_ms(&sched.execs[cm->exec_idx].cfg, cm);
		/*
		 * The timeout runs as for a collective waiting here: from the
		 * first stream seen at its go in host memory. Past it, the leader
		 * skips it and sched_expire() ends it.
		 */
		(void)sched_gates_open(cm, sl);
		if (cm->leave_err || cm->revoked ||
		    (timeout_ms && sl->t_gate_ns &&
		     now - sl->t_gate_ns >= (uint64_t)timeout_ms * 1000000))
			sched_gated_cancel(cm);
	}
	return progress;
}

int sched_gated_pending(void)
{
	for (struct comm *cm = sched.comms; cm; cm = cm->next)
		if (cm->gated)
			return 1;
	return 0;
}
