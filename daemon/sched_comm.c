/* SPDX-License-Identifier: MIT */
/*
 * Communicators: ranks join (comm_init), the communicator is placed on one
 * executor and set up there, collectives finish or are revoked, and
 * communicators and clients nobody uses are freed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/atomics.h"
#include "common/futex.h"
#include "daemon/log.h"
#include "daemon/node.h"
#include "daemon/sched_int.h"

struct slot *sched_slot_of(struct comm *cm, uint64_t seq)
{
	return &cm->slots[seq % COMM_WINDOW];
}

uint32_t sched_slot_pending_count(const struct comm *cm)
{
	uint32_t n = 0;

	for (uint64_t s = cm->next_launch; s < cm->next_done + COMM_WINDOW; s++) {
		const struct slot *sl = &cm->slots[s % COMM_WINDOW];

		if (sl->state == SLOT_ARRIVING && sl->seq == s)
			n++;
	}
	return n;
}

/* Ends it for every rank that submitted it and still waits; frees their references. */
static void slot_end_ranks(struct comm *cm, struct slot *sl, int res)
{
	for (uint32_t r = 0; r < cm->nranks; r++) {
		struct slot_rank *sr = &sl->ranks[r];

		if (!sr->client)
			continue;
		sched_complete(sr->client, &sr->sqe, res);
		/* A stream whose item did not store its device word still needs it. */
		if (sl->state != SLOT_INFLIGHT || !sr->sig_in_item)
			sched_signal_unrun(cm->devs[r], &sr->sig_mr, sr->sig_off, &sr->sqe);
		sched_mr_put(sr->sig_mr);
		sr->sig_mr = NULL;
		if (res == 0)
			sched.completed++;
		else
			sched.errors++;
		sched_mr_put(sr->send_mr);
		sched_mr_put(sr->recv_mr);
		free(sr->v);
		sr->client = NULL;
		sr->send_mr = sr->recv_mr = NULL;
		sr->v = NULL;
	}
	if (res == 0)
		cm->completed++;
	else
		cm->errors++;
	if (sl->gated) {
		sched.stream_colls++;
		if (sl->t_gate_ns)
			sched.gate_ns += now_ns() - sl->t_gate_ns;
	}
}

/* Ends collective seq for every rank that submitted it; frees its references. */
void sched_slot_finish(struct comm *cm, struct slot *sl, int res)
{
	/* Ended on the ranks when it ran here (sched_slot_end_early()): nothing is owed. */
	if (!sl->ended_early)
		slot_end_ranks(cm, sl, res);
	sl->ended_early = 0;
	sl->state = SLOT_DONE;
}

void sched_slot_unstage(struct slot *sl)
{
	free(sl->stage);
	sl->stage = NULL;
}

void sched_slot_end_early(struct comm *cm, struct slot *sl)
{
	sched_record_latency(sl->t_start_ns, sl->bytes);
	slot_end_ranks(cm, sl, 0);
	sl->ended_early = 1;
}

void sched_comm_advance_done(struct comm *cm)
{
	if (cm->leave_err && !cm->inflight && !cm->revoked)
		sched_comm_revoke(cm, cm->leave_err);
	while (cm->slots) {
		struct slot *sl = sched_slot_of(cm, cm->next_done);

		if (sl->state != SLOT_DONE || sl->seq != cm->next_done)
			break;
		sl->state = SLOT_EMPTY;
		sl->arrived = 0;
		sched_slot_unstage(sl);
		cm->next_done++;
		if (cm->next_launch < cm->next_done)
			cm->next_launch = cm->next_done;
	}
}

/*
 * Every collective that can no longer complete ends with err; so do later
 * ones. Those already in the executors are abandoned there (comm_abort) and
 * end with err when their items are consumed (reap).
 */
void sched_comm_revoke(struct comm *cm, int err)
{
	if (cm->revoked || !cm->slots)
		return;
	cm->revoked = err;
	if (cm->local)
		node_comm_revoke(cm->id, err); /* the other daemons end it too */
	if (cm->live)
		log_info("communicator %llu revoked: %s", (unsigned long long)cm->id,
			 strerror(-err));
	if ((cm->inflight || cm->p2p_inflight || cm->fires_inflight) && cm->exec_priv) {
		cm->revoked_inflight = cm->inflight + cm->p2p_inflight + cm->fires_inflight;
		sched.execs[cm->exec_idx].ex->comm_abort(cm->exec_priv);
	}
	sched_gated_cancel(cm); /* skipped, then ended below it as it waits (sched_gated.c) */
	sched_p2p_revoke(cm, err);
	sched_fires_revoke(cm, err);
	for (uint64_t s = cm->next_launch; s < cm->next_done + COMM_WINDOW; s++) {
		struct slot *sl = sched_slot_of(cm, s);

		if (sl->seq == s && sl->state == SLOT_ARRIVING)
			sched_slot_finish(cm, sl, err);
	}
	sched_comm_advance_done(cm);
}

void sched_client_free(struct sched_client *c)
{
	for (uint32_t i = 0; i < c->nmembers; i++) {
		struct member *mb = c->members[i];

		if (mb && mb->comm)
			mb->comm->members[mb->rank] = NULL;
	}
	for (uint32_t i = 0; i < c->nmrs; i++)
		if (c->mrs[i])
			sched_mr_release(c, i + 1);
	free(c->mrs);
	free(c->arms);
	free(c->armed);
	for (uint32_t i = 0; i < c->nmembers; i++)
		free(c->members[i]);
	free(c->members);
	sched_dones_retire(c);
	munmap(c->shm, c->shm_size);
	close(c->shm_fd);
	if (c->event_fd >= 0)
		close(c->event_fd);
	free(c);
}

void sched_comm_free(struct comm *cm)
{
	/* The proxy lets go of its rings before the executor frees them. */
	if (cm->net)
		node_comm_release(cm->id);
	if (cm->exec_priv)
		sched.execs[cm->exec_idx].ex->comm_teardown(cm->exec_priv);
	/*
	 * At shutdown collectives may still be waiting or in flight (the
	 * executors have stopped): drop the registrations they hold.
	 */
	for (uint32_t i = 0; cm->slots && i < COMM_WINDOW; i++) {
		struct slot *sl = &cm->slots[i];

		sched_slot_unstage(sl);
		if (sl->state != SLOT_ARRIVING && sl->state != SLOT_INFLIGHT)
			continue;
		for (uint32_t r = 0; r < cm->nranks; r++) {
			sched_mr_put(sl->ranks[r].send_mr);
			sched_mr_put(sl->ranks[r].recv_mr);
			sched_mr_put(sl->ranks[r].sig_mr);
			free(sl->ranks[r].v);
			sl->ranks[r].send_mr = sl->ranks[r].recv_mr = sl->ranks[r].sig_mr = NULL;
			sl->ranks[r].v = NULL;
		}
	}
	sched_p2p_free(cm);
	sched_fires_free(cm);
	if (cm->slots) {
		free(cm->slots[0].ranks);
		free(cm->slots);
	}
	free(cm->joins);
	free(cm->members);
	free(cm->devs);
	free(cm->comm_dev);
	free(cm->local);
	free(cm->ring);
	free(cm);
}

/* Frees communicators nobody uses and clients that are gone and idle. */
void sched_collect(void)
{
	struct comm **pc = &sched.comms;
	struct sched_client **pcl = &sched.clients;

	while (*pc) {
		struct comm *cm = *pc;

		if ((cm->ready || cm->failed) && cm->live == 0 && cm->inflight == 0 &&
		    cm->p2p_inflight == 0 && cm->fires_inflight == 0) {
			for (uint32_t r = 0; r < cm->nranks; r++)
				if (cm->members[r])
					cm->members[r]->comm = NULL;
			*pc = cm->next;
			sched_comm_free(cm);
			continue;
		}
		pc = &cm->next;
	}
	while (*pcl) {
		struct sched_client *c = *pcl;

		if (c->gone && c->outstanding == 0) {
			*pcl = c->next;
			sched_client_free(c);
			continue;
		}
		pcl = &c->next;
	}
}

/*
 * Has rank r's part of every collective in flight ended? Its item consumed
 * by its executor, or (the moment between) its done word stored: its client
 * may have seen the end and left, while the other ranks' items still run.
 * Across daemons, only collectives that ended here early count: the client
 * saw their end, and they wait only for the other daemons' word.
 */
static int rank_through(const struct comm *cm, uint32_t r)
{
	if (cm->p2p_inflight || cm->fires_inflight)
		return 0;
	for (uint64_t s = cm->next_done; s < cm->next_launch; s++) {
		const struct slot *sl = &cm->slots[s % COMM_WINDOW];
		const struct slot_rank *sr = &sl->ranks[r];

		if (sl->seq != s || sl->state != SLOT_INFLIGHT || sl->ended_early)
			continue;
		if (cm->local)
			return 0;
		if (!sched_coll_done_on(cm->devs[r], sr->fifo_pos, sl->chan_base, sl->nchannels) &&
		    !(sr->client && sched_done_seen(sr->client, &sr->sqe)))
			return 0;
	}
	return 1;
}

void sched_member_leave(struct member *mb, int err)
{
	struct comm *cm = mb->comm;

	if (!cm || mb->left)
		return;
	mb->left = 1;
	mb->client->nmembers_live--;
	cm->live--;
	/*
	 * A rank that leaves once its part of everything in flight has ended
	 * holds none of it up: those collectives finish (nothing new starts),
	 * and the communicator is revoked once they have
	 * (sched_comm_advance_done()). Across daemons that is once every
	 * daemon ran them: revoking before would end them on a daemon still
	 * receiving their last steps. Otherwise the others can no longer
	 * complete anything that needs this rank.
	 */
	if (!cm->revoked && cm->inflight && rank_through(cm, mb->rank)) {
		if (!cm->leave_err)
			cm->leave_err = err;
		return;
	}
	sched_comm_revoke(cm, err);
}

static struct comm *comm_find_init(const uint8_t *nonce)
{
	for (struct comm *cm = sched.comms; cm; cm = cm->next)
		if (!cm->ready && !cm->failed && memcmp(cm->nonce, nonce, sizeof(cm->nonce)) == 0)
			return cm;
	return NULL;
}

void sched_comm_fail_init(struct comm *cm, int err)
{
	for (uint32_t r = 0; r < cm->nranks; r++)
		if (cm->joins[r]) {
			sched_cmd_finish(cm->joins[r], err);
			cm->joins[r] = NULL;
		}
}

static int member_add(struct sched_client *c, struct comm *cm, uint32_t rank, uint32_t *handle)
{
	struct member *mb = calloc(1, sizeof(*mb));
	struct member **t = realloc(c->members, (c->nmembers + 1) * sizeof(*t));

	if (!mb || !t) {
		free(mb);
		if (t)
			c->members = t;
		return -ENOMEM;
	}
	c->members = t;
	mb->comm = cm;
	mb->client = c;
	mb->rank = rank;
	mb->handle = ++c->nmembers;
	c->members[mb->handle - 1] = mb;
	c->nmembers_live++;
	cm->members[rank] = mb;
	cm->live++;
	*handle = mb->handle;
	return 0;
}

/* The executor of a communicator's ranks: host memory ranks, or GPU ones. */
static int comm_pick_exec(const struct comm *cm, uint32_t *ret_idx)
{
	uint32_t first = 0;
	int32_t dev0;
	uint32_t cap;

	while (!comm_rank_local(cm, first))
		first++;
	dev0 = cm->joins[first]->u.join.req.device;
	cap = dev0 == -1 ? EXEC_CAP_HOST_RANKS : EXEC_CAP_DEVICE_RANKS;
	for (uint32_t i = first + 1; i < cm->nranks; i++)
		if (comm_rank_local(cm, i) &&
		    (cm->joins[i]->u.join.req.device == -1) != (dev0 == -1)) {
			log_warn(
				"communicator %llu: rank 0 uses %s but rank %u %s: one communicator "
				"runs on host threads or on GPUs, not both",
				(unsigned long long)cm->id,
				dev0 == -1 ? "host memory (device -1)" : "a GPU", i,
				dev0 == -1 ? "a GPU" : "host memory (device -1)");
			return -EINVAL;
		}
	for (uint32_t e = 0; e < sched.nexecs; e++)
		if (sched.execs[e].ex->caps & cap) {
			*ret_idx = e;
			return 0;
		}
	log_warn("communicator %llu: no executor runs %s ranks", (unsigned long long)cm->id,
		 dev0 == -1 ? "host-memory" : "GPU");
	return -ENODEV;
}

static const struct collc_msg_comm_init remote_rank = { .device = -1 };

/*
 * A communicator spanning daemons takes a block of devices no other such
 * communicator here uses. Two of them sharing a device's FIFO could be
 * launched in opposite orders on two daemons, each daemon's item then waiting
 * for data the other daemon's blocked item would send (the multinode test
 * two_comms_late). Items of communicators of this daemon alone always finish,
 * so those may share. -EBUSY when no block is free.
 */
/* used[d]: device d of cm's executor serves another communicator spanning daemons. */
static void span_used(const struct comm *cm, uint8_t used[SCHED_MAX_DEVICES])
{
	const struct sched_exec *se = &sched.execs[cm->exec_idx];

	memset(used, 0, SCHED_MAX_DEVICES);
	for (const struct comm *o = sched.comms; o; o = o->next)
		if (o != cm && o->local && o->exec_priv && o->exec_idx == cm->exec_idx)
			for (uint32_t r = 0; r < o->nranks; r++)
				used[o->devs[r] - se->base] = 1;
}

static int span_devices(const struct comm *cm, uint32_t *local)
{
	const struct sched_exec *se = &sched.execs[cm->exec_idx];
	uint8_t used[SCHED_MAX_DEVICES];
	uint32_t n = cm->nranks, nd = se->ex->ndevices;

	span_used(cm, used);
	for (uint32_t b = nd >= n ? nd - n + 1 : 0; b-- > 0;) {
		uint32_t i = 0;

		while (i < n && !used[b + i])
			i++;
		if (i < n)
			continue;
		for (i = 0; i < n; i++)
			local[i] = b + i;
		return 0;
	}
	log_warn("communicator %llu: no %u devices of %s free of other communicators spanning "
		 "daemons",
		 (unsigned long long)cm->id, n, se->ex->name);
	return -EBUSY;
}

/*
 * span_devices() for an executor of GPU ranks: the joins name the GPUs, so
 * only the local ranks are placed (the others run elsewhere and get the
 * first local rank's device, which no item of theirs ever uses), and a
 * device (a GPU lane) already serving another communicator spanning
 * daemons is refused with -EBUSY, for the same reason as there.
 */
static int span_gpu_devices(const struct comm *cm, const struct collc_msg_comm_init **reqs,
			    uint32_t *local)
{
	const struct sched_exec *se = &sched.execs[cm->exec_idx];
	const struct collc_msg_comm_init *mine[COLLC_MAX_RANKS] = { NULL };
	uint8_t used[SCHED_MAX_DEVICES];
	uint32_t got[COLLC_MAX_RANKS], n = 0, k = 0;
	int r;

	for (uint32_t i = 0; i < cm->nranks; i++)
		if (comm_rank_local(cm, i))
			mine[n++] = reqs[i];
	r = se->ex->place(n, mine, got);
	if (r < 0)
		return r;
	span_used(cm, used);
	for (uint32_t i = 0; i < n; i++)
		if (used[got[i]]) {
			log_warn("communicator %llu: its rank's device %u already serves another "
				 "communicator spanning daemons (one per GPU lane: config "
				 "cuda_lanes)",
				 (unsigned long long)cm->id, got[i]);
			return -EBUSY;
		}
	for (uint32_t i = 0; i < cm->nranks; i++)
		local[i] = comm_rank_local(cm, i) ? got[k++] : got[0];
	return 0;
}

/* Places the ranks on its executor's devices and sets up its connections there. */
static int comm_place(struct comm *cm)
{
	const struct collc_msg_comm_init *reqs[COLLC_MAX_RANKS];
	const struct exec_backend *ex;
	uint32_t local[COLLC_MAX_RANKS], pdev[COLLC_MAX_RANKS];
	uint8_t plocal[COLLC_MAX_RANKS];
	uint64_t pcomm[COLLC_MAX_RANKS] = { 0 }; /* only local ranks get one */
	int r = comm_pick_exec(cm, &cm->exec_idx);

	if (r < 0)
		return r;
	ex = sched.execs[cm->exec_idx].ex;
	if (cm->local && (!ex->comm_setup_part || !ex->comm_link)) {
		log_warn("communicator %llu: executor %s cannot run ranks spanning daemons",
			 (unsigned long long)cm->id, ex->name);
		return -ENOTSUP;
	}
	for (uint32_t i = 0; i < cm->nranks; i++)
		/* Ranks of other daemons run elsewhere: host memory stands in for them. */
		reqs[i] = comm_rank_local(cm, i) ? &cm->joins[i]->u.join.req : &remote_rank;
	if (cm->local && !(ex->caps & EXEC_CAP_HOST_RANKS)) {
		r = span_gpu_devices(cm, reqs, local);
	} else {
		r = ex->place(cm->nranks, reqs, local);
		if (r == 0 && cm->local)
			r = span_devices(cm, local);
	}
	if (r < 0)
		return r;
	for (uint32_t i = 0; i < cm->nranks; i++)
		cm->devs[i] = sched.execs[cm->exec_idx].base + local[i];
	if (!cm->local)
		return ex->comm_setup(cm->nranks, local, cm->comm_dev, &cm->exec_priv);
	/* The executor's ranks are ring positions; comm_dev stays by rank. */
	for (uint32_t p = 0; p < cm->nranks; p++) {
		pdev[p] = local[comm_ring_rank(cm, p)];
		plocal[p] = cm->local[comm_ring_rank(cm, p)];
	}
	if (cm->net_group && !(ex->caps & EXEC_CAP_NET_HIER)) {
		log_warn("communicator %llu: executor %s runs no hierarchical collective",
			 (unsigned long long)cm->id, ex->name);
		return -ENOTSUP;
	}
	r = ex->comm_setup_part(cm->nranks, pdev, plocal, cm->ring, cm->net_group, pcomm,
				&cm->exec_priv);
	for (uint32_t p = 0; p < cm->nranks && r == 0; p++)
		cm->comm_dev[comm_ring_rank(cm, p)] = pcomm[p];
	if (r < 0)
		return r;
	return node_comm_attach(cm->id, ex, cm->exec_priv);
}

static int comm_complete_init(struct comm *cm)
{
	struct slot_rank *ranks;
	int r;

	cm->slots = calloc(COMM_WINDOW, sizeof(*cm->slots));
	ranks = calloc((size_t)COMM_WINDOW * cm->nranks, sizeof(*ranks));
	if (!cm->slots || !ranks) {
		free(ranks);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < COMM_WINDOW; i++) {
		cm->slots[i].ranks = ranks + (size_t)i * cm->nranks;
		cm->slots[i].seq = UINT64_MAX;
	}
	r = comm_place(cm);
	if (r < 0)
		return r;
	for (uint32_t i = 0; i < cm->nranks; i++) {
		struct sched_cmd *j = cm->joins[i];

		if (!j)
			continue; /* another daemon's rank */
		r = member_add(j->client, cm, i, &j->u.join.comm);
		if (r < 0)
			return r;
		j->u.join.comm_id = cm->id;
	}
	cm->ready = 1;
	log_info("communicator %llu: %u ranks (%u here)", (unsigned long long)cm->id, cm->nranks,
		 cm->nlocal);
	for (uint32_t i = 0; i < cm->nranks; i++) {
		if (!cm->joins[i])
			continue;
		sched_cmd_finish(cm->joins[i], 0);
		cm->joins[i] = NULL;
	}
	return 0;
}

static void comm_init_done(struct comm *cm);

void sched_cmd_join(struct sched_cmd *cmd)
{
	const struct collc_msg_comm_init *q = &cmd->u.join.req;
	struct comm *cm;
	int r;

	if (q->nranks < 1 || q->nranks > COLLC_MAX_RANKS || q->rank >= q->nranks || q->flags ||
	    q->uid.magic != COLLC_UID_MAGIC) {
		sched_cmd_finish(cmd, -EINVAL);
		return;
	}
	cm = comm_find_init(q->uid.nonce);
	if (!cm) {
		cm = calloc(1, sizeof(*cm));
		if (cm) {
			cm->joins = calloc(q->nranks, sizeof(*cm->joins));
			cm->members = calloc(q->nranks, sizeof(*cm->members));
			cm->devs = calloc(q->nranks, sizeof(*cm->devs));
			cm->comm_dev = calloc(q->nranks, sizeof(*cm->comm_dev));
		}
		if (!cm || !cm->joins || !cm->members || !cm->devs || !cm->comm_dev) {
			if (cm)
				sched_comm_free(cm);
			sched_cmd_finish(cmd, -ENOMEM);
			return;
		}
		cm->id = ++sched.next_comm_id;
		cm->nranks = q->nranks;
		cm->nlocal = q->nranks;
		cm->timeout_ms = UINT32_MAX;
		cm->t_first_join = now_ns();
		memcpy(cm->nonce, q->uid.nonce, sizeof(cm->nonce));
		cm->next = sched.comms;
		sched.comms = cm;
	}
	if (cm->nranks != q->nranks || cm->joins[q->rank]) {
		/* Ranks that disagree on the size, or a rank taken twice: nobody proceeds. */
		sched_cmd_finish(cmd, -EINVAL);
		return;
	}
	if (q->uid.version == COLLC_UID_VERSION_NET && q->uid.net_family) {
		r = node_join(cm->id, &q->uid, q->nranks, q->rank, q->device);
		if (r < 0) {
			if (r == -ENOTSUP)
				log_warn(
					"a network unique id needs collcd --listen on every daemon");
			sched_cmd_finish(cmd, r);
			if (!cm->joined)
				cm->failed = 1; /* nobody joined: sched_collect() frees it */
			return;
		}
		cm->net = 1;
	}
	cm->joins[q->rank] = cmd;
	if (++cm->joined < cm->nranks)
		return;
	if (cm->net) {
		/* Every rank joined here: a local communicator after all. */
		node_comm_release(cm->id);
		cm->net = 0;
	}
	comm_init_done(cm);
}

/* Every rank is known: set it up, or fail every rank's join. */
static void comm_init_done(struct comm *cm)
{
	int r = comm_complete_init(cm);

	if (r < 0) {
		log_err("communicator setup failed: %s", strerror(-r));
		sched_comm_fail_init(cm, r);
		for (uint32_t i = 0; i < cm->nranks; i++)
			if (cm->members[i])
				sched_member_leave(cm->members[i], -EPIPE);
		cm->ready = 0;
		cm->failed = 1; /* sched_collect() frees it */
	}
}

void sched_client_gone(struct sched_client *c)
{
	c->gone = 1;
	for (uint32_t i = 0; i < c->nmembers; i++)
		if (c->members[i])
			sched_member_leave(c->members[i], -EPIPE);
	/* Communicators still gathering ranks lose this client's join. */
	for (struct comm *cm = sched.comms; cm; cm = cm->next) {
		if (cm->ready || cm->failed)
			continue;
		for (uint32_t r = 0; r < cm->nranks; r++)
			if (cm->joins[r] && cm->joins[r]->client == c) {
				sched_comm_fail_init(cm, -EPIPE);
				cm->failed =
					1; /* nobody joined for good: sched_collect() frees it */
				break;
			}
	}
}

struct member *sched_member_of(struct sched_client *c, uint32_t handle)
{
	if (handle < 1 || handle > c->nmembers)
		return NULL;
	return c->members[handle - 1];
}

static struct comm *comm_by_id(uint64_t id)
{
	for (struct comm *cm = sched.comms; cm; cm = cm->next)
		if (cm->id == id)
			return cm;
	return NULL;
}

/* Its links are up: the ranks here run it with the ranks of the other daemons. */
static void net_ready(struct comm *cm, const struct sched_cmd *cmd)
{
	uint32_t n = 0;

	cm->local = calloc(cm->nranks, 1);
	if (!cm->local) {
		sched_comm_fail_init(cm, -ENOMEM);
		cm->failed = 1;
		return;
	}
	for (uint32_t r = 0; r < cm->nranks; r++) {
		cm->local[r] = cmd->u.net.local[r] ? 1 : 0;
		n += cm->local[r];
		/* The table must name exactly the ranks that joined here. */
		if (cm->local[r] != (cm->joins[r] != NULL)) {
			log_err("communicator %llu: the rank table disagrees with the ranks here",
				(unsigned long long)cm->id);
			node_comm_revoke(cm->id, -EPROTO);
			sched_comm_fail_init(cm, -EPROTO);
			cm->failed = 1;
			return;
		}
	}
	cm->nlocal = n;
	cm->net_nchan = (uint8_t)cmd->u.net.nchan;
	cm->net_group = (uint8_t)cmd->u.net.group;
	cm->net_pair = cmd->u.net.pair ? 1 : 0;
	cm->net_hier_min_bytes = cmd->u.net.hier_min_bytes;
	if (cmd->u.net.reordered) {
		cm->ring = malloc(2 * (size_t)cm->nranks);
		if (!cm->ring) {
			node_comm_revoke(cm->id, -ENOMEM);
			sched_comm_fail_init(cm, -ENOMEM);
			cm->failed = 1;
			return;
		}
		cm->ring_pos = cm->ring + cm->nranks;
		memcpy(cm->ring, cmd->u.net.ring, cm->nranks);
		for (uint32_t p = 0; p < cm->nranks; p++)
			cm->ring_pos[cm->ring[p]] = (uint8_t)p;
	}
	comm_init_done(cm);
	if (cm->failed)
		node_comm_revoke(cm->id, -EPIPE);
}

/* A command from the node thread about a communicator spanning daemons. */
void sched_net_cmd(struct sched_cmd *cmd)
{
	struct comm *cm = comm_by_id(cmd->u.net.comm_id);
	struct slot *sl;
	int r;

	if (!cm || !cm->net) {
		sched_net_cmd_end(cmd);
		return;
	}
	switch (cmd->type) {
	case CMD_NET_READY:
		if (!cm->ready && !cm->failed)
			net_ready(cm, cmd);
		break;
	case CMD_NET_FAIL:
		if (cm->ready) {
			sched_comm_revoke(cm, cmd->u.net.err);
		} else if (!cm->failed) {
			sched_comm_fail_init(cm, cmd->u.net.err);
			cm->failed = 1;
		}
		break;
	case CMD_NET_GO:
	case CMD_NET_DONE:
		if (!cm->ready || !cm->slots)
			break;
		sl = sched_slot_of(cm, cmd->u.net.seq);
		if (sl->seq != cmd->u.net.seq)
			break;
		if (cmd->type == CMD_NET_GO && sl->net == NET_ASKED && sl->state == SLOT_ARRIVING) {
			if (cmd->u.net.err) {
				/* The daemons disagree: every rank fails, as on one node. */
				sl->net = NET_NONE;
				sched_slot_finish(cm, sl, cmd->u.net.err);
				sched_comm_advance_done(cm);
			} else {
				sl->net = NET_GO;
				sl->t_go_ns = now_ns();
				/* The ring runs: inputs staged for eager are not needed. */
				sched_slot_unstage(sl);
			}
		} else if (cmd->type == CMD_NET_DONE && sl->net == NET_EXECUTED) {
			sl->net = NET_DONE;
		}
		break;
	case CMD_NET_EAGER:
	case CMD_NET_PEER_IN:
		if (!cm->ready || !cm->slots)
			break;
		sl = sched_slot_of(cm, cmd->u.net.seq);
		if (sl->seq != cmd->u.net.seq || sl->net != NET_ASKED || sl->state != SLOT_ARRIVING)
			break;
		r = cmd->type == CMD_NET_EAGER
			    ? sched_net_eager_done(cm, sl, cmd->u.net.data, cmd->u.net.len)
			    : sched_net_eager_peer(cm, sl, cmd->u.net.data, cmd->u.net.len);
		if (r < 0) {
			/* Not what was asked (only a broken or hostile peer sends it), or no memory. */
			sched_comm_revoke(cm, r);
			break;
		}
		sl->net = NET_NONE;
		sched_slot_finish(cm, sl, 0);
		sched_comm_advance_done(cm);
		break;
	default:
		break;
	}
	sched_net_cmd_end(cmd);
}
