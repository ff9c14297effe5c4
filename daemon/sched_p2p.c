/* SPDX-License-Identifier: MIT */
/*
 * Sends and receives. They stay outside the communicator's window of
 * collectives: the k-th send from rank s to rank r meets the k-th receive
 * at r from s, whatever else either rank posted in between, as in NCCL.
 * Unmatched ones wait on the communicator's list (oldest first) under its
 * timeout; a matched pair is one copy (proto/algo_copy.h) that one of the two
 * ranks' devices runs: the receiver's, which reads the sender's buffer, or
 * the sender's when the send buffer cannot be read by peers. Neither rank
 * waits for the other in the executor, so any number of pairs in any
 * direction progress independently; both ranks complete once the copy's item
 * is consumed.
 *
 * Across daemons (a spanning communicator, the peer rank on another daemon)
 * the node layer moves the pair (node_p2p.c): each side's op waits on the
 * list like an unmatched one until CMD_NET_P2P ends it; the sender's daemon
 * matches the pair, so both sides end alike. A stream-ordered one first
 * waits on the gated list until its stream wrote go (G1), and only then goes
 * to the node layer: its buffer is read or written only after the stream's
 * earlier work, and its end (op_finish()) releases the stream.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/atomics.h"
#include "common/futex.h"
#include "daemon/log.h"
#include "daemon/node.h"
#include "daemon/plan.h"
#include "daemon/sched_int.h"
#include "daemon/sqe_check.h"
#include "proto/algo_copy.h"
#include "proto/dtype.h"

/*
 * Ends one send or receive with res and lets go of what it holds. A
 * stream-ordered one gets its device word through a signal item on its own
 * device: the copy ran on one of the two.
 */
static void op_finish(struct comm *cm, struct p2p_op *op, int res)
{
	sched_complete(op->client, &op->sqe, res);
	sched_signal_unrun(cm->devs[op->rank], &op->sig_mr, op->sig_off, &op->sqe);
	if (res == 0) {
		sched.completed++;
		cm->completed++;
	} else {
		sched.errors++;
		cm->errors++;
	}
	sched_mr_put(op->mr);
	free(op);
}

static void xfer_finish(struct comm *cm, struct p2p_xfer *x, int res)
{
	op_finish(cm, x->send, res);
	op_finish(cm, x->recv, res);
	free(x);
}

/* The sender and receiver of an op: who posted it and the peer it names. */
static uint32_t op_sender(const struct p2p_op *op)
{
	return op->sqe.opcode == COLLC_OP_SEND ? op->rank : (uint32_t)op->sqe.root;
}

static uint32_t op_receiver(const struct p2p_op *op)
{
	return op->sqe.opcode == COLLC_OP_RECV ? op->rank : (uint32_t)op->sqe.root;
}

static void ready_append(struct comm *cm, struct p2p_xfer *x)
{
	if (!cm->p2p_ready)
		cm->p2p_ready_tail = &cm->p2p_ready;
	*cm->p2p_ready_tail = x;
	cm->p2p_ready_tail = &x->next;
	cm->p2p_queued++;
}

static void oplist_append(struct p2p_oplist *l, struct p2p_op *op)
{
	if (!l->head)
		l->tail = &l->head;
	*l->tail = op;
	l->tail = &op->next;
	l->n++;
}

/* Unlinks *pp (a link of list l) from l. */
static struct p2p_op *oplist_unlink(struct p2p_oplist *l, struct p2p_op **pp)
{
	struct p2p_op *op = *pp;

	*pp = op->next;
	if (l->tail == &op->next)
		l->tail = pp;
	op->next = NULL;
	l->n--;
	return op;
}

/* Where the op the node layer knows as cookie sits on the wait list (NULL: gone). */
static struct p2p_op **wait_find(struct comm *cm, uint64_t cookie)
{
	struct p2p_op **pp;

	for (pp = &cm->p2p_wait.head; *pp; pp = &(*pp)->next)
		if ((*pp)->net && (*pp)->cookie == cookie)
			return pp;
	return NULL;
}

static uint64_t op_addr(const struct p2p_op *op);

/* Validates the op against the client's registrations: its error, or 0. */
static int op_check(struct sched_client *c, const struct comm *cm, struct p2p_op *op)
{
	uint64_t send = 0, recv = 0;
	int r = sqe_validate(&op->sqe, cm->nranks, op->rank, &send, &recv);

	if (r < 0)
		return r;
	if (op->sqe.opcode == COLLC_OP_SEND)
		return sched_resolve_buf(c, op->sqe.send_mr, op->sqe.send_off, send, &op->mr);
	return sched_resolve_buf(c, op->sqe.recv_mr, op->sqe.recv_off, recv, &op->mr);
}

/*
 * Where the node layer stages an op's buffer of executor memory (a GPU's):
 * the executor's copy door and the device of the rank (or the executor's
 * first, for a device registration on a rank of another executor).
 */
void sched_net_stage(const struct comm *cm, uint32_t rank, const struct mr *mr, struct node_p2p *d)
{
	const struct fifo_host *fh = &sched.fifos[cm->devs[rank]];

	d->ex = mr->exec;
	d->dev = sched.execs[fh->exec_idx].ex == d->ex ? fh->dev : 0;
}

/* Hands op to the node layer; it waits on the list until CMD_NET_P2P ends it. */
static void net_post(struct comm *cm, struct p2p_op *op)
{
	const int send = op->sqe.opcode == COLLC_OP_SEND;
	struct node_p2p d = { 0 };
	int r;

	op->net = 1;
	op->cookie = ++cm->p2p_cookie;
	d.cookie = op->cookie;
	d.pseq = op->pseq;
	d.sender = op_sender(op);
	d.receiver = op_receiver(op);
	d.send = (uint32_t)send;
	d.err = op->err;
	d.count = op->sqe.count;
	d.dtype = op->sqe.dtype;
	if (!op->err) {
		d.bytes = op->sqe.count * collc_dtype_bytes(op->sqe.dtype);
		d.buf = d.bytes ? (void *)(uintptr_t)op_addr(op) : NULL;
		if (d.bytes && op->mr->exec)
			sched_net_stage(cm, op->rank, op->mr, &d);
	}
	oplist_append(&cm->p2p_wait, op);
	r = node_p2p_post(cm->id, &d);
	if (r < 0)
		op_finish(cm, oplist_unlink(&cm->p2p_wait, wait_find(cm, op->cookie)), r);
}

/*
 * The peer runs on another daemon: the node layer matches and moves it:
 * host memory straight, executor memory (a GPU's) through host staging
 * (node_p2p.c). A stream-ordered one waits for its gate first
 * (sched_p2p_net_gates()); one that failed validation goes at once, so
 * that its partner ends with its error.
 */
static void net_take(struct comm *cm, struct p2p_op *op)
{
	const int send = op->sqe.opcode == COLLC_OP_SEND;

	if (!op->err && op->mr && op->mr->exec && !op->mr->exec->copy) {
		log_info("communicator %llu: a %s across daemons from %s memory: that executor "
			 "cannot stage it",
			 (unsigned long long)cm->id, send ? "send" : "receive", op->mr->exec->name);
		op->err = -EOPNOTSUPP;
	}
	/* The errors the other daemon accepts for a pair (node_p2p.c err_ok()). */
	if (op->err && op->err != -EINVAL && op->err != -EOVERFLOW && op->err != -EOPNOTSUPP)
		op->err = -EINVAL;
	if (!op->err && op->sqe.flags == COLLC_SQE_STREAM) {
		oplist_append(&cm->p2p_gated, op);
		return;
	}
	net_post(cm, op);
}

/*
 * G1 (sched_gate_open()) for every stream-ordered op across daemons: one
 * whose stream wrote go goes to the node layer, its timeout running from
 * now (the wait list stays in timeout order). Each op on its own: the node
 * layer matches by the pair's place, not by posting order. Returns whether
 * any went.
 */
int sched_p2p_net_gates(struct comm *cm)
{
	struct p2p_op **pp = &cm->p2p_gated.head;
	int progress = 0;

	while (*pp) {
		struct p2p_op *op = *pp;

		if (!sched_gate_open(op->client, &op->sqe)) {
			pp = &op->next;
			continue;
		}
		oplist_unlink(&cm->p2p_gated, pp);
		op->t_ns = now_ns();
		net_post(cm, op);
		progress = 1;
	}
	return progress;
}

void sched_p2p_take(struct sched_client *c, struct member *mb, const struct collc_sqe *e)
{
	struct comm *cm = mb->comm;
	uint32_t n = cm->nranks;
	struct p2p_pair *pair;
	struct p2p_op *op, **pp;
	int send = e->opcode == COLLC_OP_SEND;

	c->outstanding++;
	c->submitted++;
	sched.submitted++;
	if (cm->revoked) {
		sched.errors++;
		cm->errors++;
		sched_sqe_fail(c, mb, e, cm->revoked);
		return;
	}
	if (e->root < 0 || (uint32_t)e->root >= n) {
		/* No pair to take a place in: only this rank hears of it. */
		c->bad++;
		sched.bad++;
		sched.errors++;
		cm->errors++;
		sched_sqe_fail(c, mb, e, -EINVAL);
		return;
	}
	if (!cm->pairs)
		cm->pairs = calloc((size_t)n * n, sizeof(*cm->pairs));
	op = calloc(1, sizeof(*op));
	if (!op || !cm->pairs) {
		free(op);
		sched.errors++;
		cm->errors++;
		sched_sqe_fail(c, mb, e, -ENOMEM);
		return;
	}
	op->client = c;
	op->user_data = e->user_data;
	op->t_ns = now_ns();
	op->sqe = *e;
	op->rank = mb->rank;
	/* An invalid one still takes its place in the pair's order: its partner fails with it. */
	op->err = op_check(c, cm, op);
	sched_sqe_sig_take(c, e, &op->sig_mr, &op->sig_off);
	if (op->err) {
		c->bad++;
		sched.bad++;
	}
	pair = &cm->pairs[(size_t)op_sender(op) * n + op_receiver(op)];
	op->pseq = send ? pair->sends++ : pair->recvs++;
	if (!comm_rank_local(cm, (uint32_t)e->root)) {
		net_take(cm, op);
		return;
	}
	/* Its partner already timed out waiting for it: so does it. */
	if (op->pseq < (send ? pair->recvs_expired : pair->sends_expired)) {
		op_finish(cm, op, -ETIMEDOUT);
		return;
	}
	for (pp = &cm->p2p_wait.head; *pp; pp = &(*pp)->next) {
		const struct p2p_op *q = *pp;

		if (q->sqe.opcode != op->sqe.opcode && q->pseq == op->pseq &&
		    op_sender(q) == op_sender(op) && op_receiver(q) == op_receiver(op))
			break;
	}
	if (*pp) {
		struct p2p_xfer *x = calloc(1, sizeof(*x));
		struct p2p_op *q;

		if (!x) {
			op_finish(cm, op, -ENOMEM);
			return;
		}
		q = oplist_unlink(&cm->p2p_wait, pp);
		x->send = send ? op : q;
		x->recv = send ? q : op;
		ready_append(cm, x);
		return;
	}
	oplist_append(&cm->p2p_wait, op);
}

static uint64_t op_addr(const struct p2p_op *op)
{
	uint64_t off = op->sqe.opcode == COLLC_OP_SEND ? op->sqe.send_off : op->sqe.recv_off;

	return op->mr ? (uint64_t)(uintptr_t)op->mr->addr + off : 0;
}

static int no_peer(const struct p2p_op *op)
{
	return op->mr && (op->mr->flags & EXEC_MEM_NO_PEER_READ);
}

/*
 * Which rank runs the copy: the sender, writing the receiver's buffer (push),
 * or the receiver, reading the sender's (pull): sched_copy_push().
 */
static int xfer_runner(const struct p2p_xfer *x, int prefer_push, uint32_t *ret_rank)
{
	uint32_t s = x->send->rank, r = x->recv->rank;
	int push = s == r ? 0 : sched_copy_push(prefer_push, no_peer(x->send), no_peer(x->recv));

	if (push < 0)
		return push;
	*ret_rank = push ? s : r;
	return 0;
}

/* A matched pair's own error: either op's, or the two disagree. */
static int xfer_error(const struct p2p_xfer *x)
{
	const struct collc_sqe *s = &x->send->sqe, *r = &x->recv->sqe;

	if (x->send->err)
		return x->send->err;
	if (x->recv->err)
		return x->recv->err;
	if (s->count != r->count || s->dtype != r->dtype)
		return -EINVAL;
	return 0;
}

/* Returns 1 when launched or failed, 0 when the device's FIFO has no room yet. */
static int xfer_launch(struct comm *cm, struct p2p_xfer *x, const struct collc_config *cfg)
{
	struct sched_exec *se = &sched.execs[cm->exec_idx];
	uint32_t maxch = se->ex->max_channels, runner = 0;
	const struct collc_sqe *s = &x->send->sqe;
	struct fifo_host *fh;
	struct collc_work_item *it;
	struct collc_work_copy *cp;
	struct plan p;
	int err = xfer_error(x);

	if (!err)
		err = xfer_runner(x, (int)cfg->copy_push, &runner);
	if (err) {
		xfer_finish(cm, x, err);
		return 1;
	}
	x->dev = cm->devs[runner];
	if (!sched_fifo_has_room(x->dev) || !sched_gated_clear(x->dev, cm, NULL))
		return 0;
	fh = &sched.fifos[x->dev];
	x->bytes = s->count * collc_dtype_bytes(s->dtype);
	plan_coll(cfg, COLLC_OP_SEND, x->bytes, 2, 0, &p);
	x->coll_id = ++sched.next_coll_id;
	x->nchannels = p.nchannels;
	x->chan_base = 0;
	if (cfg->rotate_channels) {
		x->chan_base = (uint8_t)(se->next_chan_base % maxch);
		se->next_chan_base = (se->next_chan_base + p.nchannels) % maxch;
	}
	x->t_start_ns = now_ns();
	cp = &fh->f->copies[fh->tail & (COLLC_FIFO_DEPTH - 1)].c[0];
	cp->src = x->bytes ? op_addr(x->send) : 0;
	cp->dst = x->bytes ? op_addr(x->recv) : 0;
	cp->bytes = x->bytes;
	it = &fh->f->items[fh->tail & (COLLC_FIFO_DEPTH - 1)];
	it->kind = COLLC_WORK_COLL;
	it->coll = runner == x->recv->rank ? COLLC_OP_RECV : COLLC_OP_SEND;
	it->algo = p.algo;
	it->proto = p.proto;
	it->dtype = s->dtype;
	it->redop = COLLC_SUM;
	it->nchannels = p.nchannels;
	it->chan_base = x->chan_base;
	it->nranks = cm->nranks;
	it->rank = comm_ring_pos(cm, runner);
	it->root =
		(int32_t)comm_ring_pos(cm, runner == x->recv->rank ? x->send->rank : x->recv->rank);
	it->chunk_bytes = p.chunk_bytes;
	it->count = s->count; /* the grid takes the copy from these three (cuda/device/copy.h) */
	it->sendbuf = cp->src;
	it->recvbuf = cp->dst;
	it->comm_dev = cm->comm_dev[runner];
	it->comm_id = cm->id;
	it->coll_id = x->coll_id;
	it->t_forward = 0;
	it->batch_last = 0;
	it->signal = 0;
	it->signal_val = 0;
	it->done = 0; /* the receiver's end says nothing of the sender's buffer */
	it->done_val = 0;
	it->gate = 0;
	x->fifo_pos = fh->tail;
	/* Published with the pass's batch (B1), which covers the copy too. */
	sched_fifo_append(fh);
	x->next = cm->p2p_run;
	cm->p2p_run = x;
	cm->p2p_inflight++;
	cm->by_algo[p.algo]++;
	cm->by_proto[p.proto]++;
	sched.by_algo[p.algo]++;
	sched.by_proto[p.proto]++;
	sched.by_op[COLLC_OP_SEND]++;
	sched.by_op[COLLC_OP_RECV]++;
	return 1;
}

static int xfer_gates_open(const struct p2p_xfer *x)
{
	return sched_gate_open(x->send->client, &x->send->sqe) &&
	       sched_gate_open(x->recv->client, &x->recv->sqe);
}

int sched_p2p_gated(const struct comm *cm)
{
	if (cm->p2p_gated.head)
		return 1;
	for (const struct p2p_xfer *x = cm->p2p_ready; x; x = x->next)
		if (!xfer_gates_open(x))
			return 1;
	return 0;
}

int sched_p2p_launch(struct comm *cm, const struct collc_config *cfg)
{
	struct p2p_xfer **px = &cm->p2p_ready;
	int progress = 0;

	while (*px) {
		struct p2p_xfer *x = *px;
		struct p2p_xfer *next = x->next;

		/* A pair whose streams have not reached it lets the others go by. */
		if (!xfer_error(x) && !xfer_gates_open(x)) {
			px = &x->next;
			continue;
		}
		x->next = NULL;
		if (!xfer_launch(cm, x, cfg)) {
			x->next = next;
			break;
		}
		*px = next;
		if (cm->p2p_ready_tail == &x->next)
			cm->p2p_ready_tail = px;
		cm->p2p_queued--;
		progress = 1;
	}
	return progress;
}

/* Can the oldest matched pair go now (or fail at once)? */
int sched_p2p_launch_unblocked(const struct comm *cm)
{
	for (const struct p2p_xfer *x = cm->p2p_ready; x; x = x->next) {
		uint32_t runner;

		/* Pairs whose streams have not reached them wait for the gate poll. */
		if (!xfer_error(x) && !xfer_gates_open(x))
			continue;
		if (xfer_error(x) ||
		    xfer_runner(x, (int)sched.execs[cm->exec_idx].cfg.copy_push, &runner) < 0)
			return 1;
		return sched_fifo_ready(cm->devs[runner]);
	}
	return 0;
}

static int xfer_executed(const struct p2p_xfer *x)
{
	return sched_coll_done_on(x->dev, x->fifo_pos, x->chan_base, x->nchannels);
}

int sched_p2p_done_visible(const struct comm *cm)
{
	for (const struct p2p_xfer *x = cm->p2p_run; x; x = x->next)
		if (xfer_executed(x))
			return 1;
	return 0;
}

int sched_p2p_reap(struct comm *cm)
{
	struct p2p_xfer **pp = &cm->p2p_run;
	int progress = 0;

	while (*pp) {
		struct p2p_xfer *x = *pp;

		if (!xfer_executed(x)) {
			pp = &x->next;
			continue;
		}
		*pp = x->next;
		cm->p2p_inflight--;
		/* Revoked: abandoned in the executor (or finished just before): not a result. */
		if (!cm->revoked)
			sched_record_latency(x->t_start_ns, x->bytes);
		xfer_finish(cm, x, cm->revoked);
		progress = 1;
	}
	return progress;
}

static void expired(struct comm *cm, const struct p2p_op *op, uint32_t ms)
{
	uint32_t peer = (uint32_t)op->sqe.root;

	cm->timeouts++;
	cm->timed_out_mask = 1ull << peer;
	log_info("communicator %llu: %s of rank %u %s rank %u timed out after %u ms",
		 (unsigned long long)cm->id, op->sqe.opcode == COLLC_OP_SEND ? "send" : "receive",
		 op->rank, op->sqe.opcode == COLLC_OP_SEND ? "to" : "from", peer, ms);
}

int sched_p2p_expire(struct comm *cm, uint32_t ms, uint64_t now)
{
	struct p2p_op **pp = &cm->p2p_wait.head;
	int progress = 0;

	/* Oldest first: arrival order is timeout order. */
	while (*pp && now > (*pp)->t_ns && now - (*pp)->t_ns >= (uint64_t)ms * 1000000) {
		struct p2p_op *op = *pp;
		struct p2p_pair *pair =
			&cm->pairs[(size_t)op_sender(op) * cm->nranks + op_receiver(op)];

		if (op->net) {
			/* Across daemons the sender's daemon decides; asked once. */
			if (!op->expiring && node_p2p_expire(cm->id, op->cookie) == 1) {
				expired(cm, op, ms);
				op_finish(cm, oplist_unlink(&cm->p2p_wait, pp), -ETIMEDOUT);
				progress = 1;
				continue;
			}
			op->expiring = 1;
			pp = &op->next;
			continue;
		}
		oplist_unlink(&cm->p2p_wait, pp);
		if (op->sqe.opcode == COLLC_OP_SEND)
			pair->sends_expired = op->pseq + 1;
		else
			pair->recvs_expired = op->pseq + 1;
		expired(cm, op, ms);
		op_finish(cm, op, -ETIMEDOUT);
		progress = 1;
	}
	return progress;
}

/* The node layer ended a send or receive across daemons. */
void sched_p2p_net_cmd(struct sched_cmd *cmd)
{
	struct comm *cm;
	struct p2p_op **pp = NULL;

	for (cm = sched.comms; cm && cm->id != cmd->u.net.comm_id; cm = cm->next)
		;
	if (cm && cm->net && (cmd->u.net.seq & NET_A2A_TAG)) {
		sched_a2a_block_done(cm, cmd->u.net.seq & ~NET_A2A_TAG, cmd->u.net.err);
		sched_net_cmd_end(cmd);
		return;
	}
	/* Gone, or ended already (revoked, failed at posting): nothing to do. */
	if (cm && cm->net)
		pp = wait_find(cm, cmd->u.net.seq);
	if (pp) {
		struct p2p_op *op = oplist_unlink(&cm->p2p_wait, pp);
		int err = cmd->u.net.err;

		if (err == -ETIMEDOUT)
			expired(cm, op,
				cm->timeout_ms == UINT32_MAX
					? sched.execs[cm->exec_idx].cfg.op_timeout_ms
					: cm->timeout_ms);
		sched.by_op[op->sqe.opcode]++;
		op_finish(cm, op, err);
	}
	sched_net_cmd_end(cmd);
}

/* Ranks that some unmatched send or receive waits for. */
uint64_t sched_p2p_lagging(const struct comm *cm)
{
	uint64_t mask = 0;

	for (const struct p2p_op *op = cm->p2p_wait.head; op; op = op->next)
		mask |= 1ull << (uint32_t)op->sqe.root;
	return mask;
}

/* Everything not yet in an executor ends with err; reap ends the rest. */
void sched_p2p_revoke(struct comm *cm, int err)
{
	while (cm->p2p_gated.head)
		op_finish(cm, oplist_unlink(&cm->p2p_gated, &cm->p2p_gated.head), err);
	while (cm->p2p_wait.head)
		op_finish(cm, oplist_unlink(&cm->p2p_wait, &cm->p2p_wait.head), err);
	while (cm->p2p_ready) {
		struct p2p_xfer *x = cm->p2p_ready;

		cm->p2p_ready = x->next;
		cm->p2p_queued--;
		xfer_finish(cm, x, err);
	}
}

/* At shutdown or when the communicator goes: drop what is left without completions. */
void sched_p2p_free(struct comm *cm)
{
	struct p2p_xfer *lists[2] = { cm->p2p_ready, cm->p2p_run };

	while (cm->p2p_wait.head || cm->p2p_gated.head) {
		struct p2p_op *op = cm->p2p_wait.head
					    ? oplist_unlink(&cm->p2p_wait, &cm->p2p_wait.head)
					    : oplist_unlink(&cm->p2p_gated, &cm->p2p_gated.head);

		sched_mr_put(op->mr);
		sched_mr_put(op->sig_mr);
		free(op);
	}
	for (int i = 0; i < 2; i++)
		while (lists[i]) {
			struct p2p_xfer *x = lists[i];

			lists[i] = x->next;
			sched_mr_put(x->send->mr);
			sched_mr_put(x->recv->mr);
			sched_mr_put(x->send->sig_mr);
			sched_mr_put(x->recv->sig_mr);
			free(x->send);
			free(x->recv);
			free(x);
		}
	cm->p2p_ready = cm->p2p_run = NULL;
	cm->p2p_queued = 0;
	cm->p2p_inflight = 0;
	free(cm->pairs);
	cm->pairs = NULL;
}
