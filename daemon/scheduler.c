/* SPDX-License-Identifier: MIT */
/*
 * The scheduler: one thread that drains every client's submission ring,
 * matches the ranks of each collective by per-communicator sequence number,
 * plans it against one config snapshot, appends its work items to the device
 * FIFOs in one global order, and turns work_consumed into completions.
 *
 * It is a QSBR RCU reader: a quiescent state per pass, offline while asleep.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <urcu-qsbr.h>

#include "common/atomics.h"
#include "common/futex.h"
#include "daemon/config.h"
#include "daemon/log.h"
#include "daemon/node.h"
#include "daemon/sched.h"
#include "daemon/sched_int.h"
#include "daemon/status.h"

struct sched_state sched;

static pthread_t thread;
static struct sched_params params;
static struct collc_doorbell *doorbell;
static int doorbell_fd = -1;
static uint32_t stop_requested;
static uint32_t sleeping;    /* the scheduler sleeps on the doorbell */
static uint32_t room_wanted; /* ... with a FIFO full (sched_notify_skipped()) */
static uint32_t stall;       /* tests: freeze the loop */
static uint64_t loops;

static pthread_mutex_t cmd_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sched_cmd *cmd_head, **cmd_tail = &cmd_head;
static struct sched_cmd *done_head, **done_tail = &done_head;

/* Counters other threads read (sd_notify, watchdog). */
static struct sched_counters shared_counters;

static void wake_scheduler(void)
{
	fetch_add(&doorbell->seq, 1);
	futex_wake(&doorbell->seq, 1);
}

void sched_notify(void)
{
	/* N1: pairs with S1 below: work_consumed is stored before sleeping is loaded. */
	fence_seq_cst();
	if (load_relaxed(&sleeping))
		wake_scheduler();
}

void sched_notify_skipped(void)
{
	/*
	 * N2: pairs with S1 like N1: either the scheduler's look before it
	 * sleeps sees the item consumed, or this sees it asleep with a FIFO full.
	 */
	fence_seq_cst();
	if (load_relaxed(&sleeping) && load_relaxed(&room_wanted))
		wake_scheduler();
}

/* Is some FIFO full, so that a channel consuming an item it skips gives room? */
static uint32_t fifo_full(void)
{
	for (uint32_t d = 0; d < sched.ndevs; d++)
		if (!sched_fifo_has_room(d))
			return 1;
	return 0;
}

void sched_post_quiet(struct sched_cmd *cmd)
{
	cmd->next = NULL;
	pthread_mutex_lock(&cmd_lock);
	/* Relaxed atomics: the scheduler peeks at cmd_head without the lock. */
	store_relaxed(cmd_tail, cmd);
	cmd_tail = &cmd->next;
	pthread_mutex_unlock(&cmd_lock);
	fetch_add(&doorbell->seq, 1);
}

void sched_kick(void)
{
	/*
	 * N3: pairs with S1 like N1: either the scheduler's look before it
	 * sleeps sees the commands queued before this (sched_post_quiet()), or
	 * this sees it asleep. Awake (a command posted from its own thread, or
	 * while it runs) it needs no futex call.
	 */
	fence_seq_cst();
	if (load_relaxed(&sleeping))
		futex_wake(&doorbell->seq, 1);
}

void sched_post(struct sched_cmd *cmd)
{
	sched_post_quiet(cmd);
	sched_kick();
}

void sched_cmd_finish(struct sched_cmd *cmd, int result)
{
	cmd->result = result;
	cmd->next = NULL;
	pthread_mutex_lock(&cmd_lock);
	*done_tail = cmd;
	done_tail = &cmd->next;
	pthread_mutex_unlock(&cmd_lock);
	params.notify_done();
}

void sched_net_cmd_end(struct sched_cmd *cmd)
{
	/*
	 * The node thread's done only frees the command (node.c cmd_free()):
	 * waking the control loop for it cost a thread switch a collective.
	 */
	cmd->result = 0;
	cmd->done(cmd);
}

void sched_run_done(void)
{
	struct sched_cmd *list, *next;

	pthread_mutex_lock(&cmd_lock);
	list = done_head;
	done_head = NULL;
	done_tail = &done_head;
	pthread_mutex_unlock(&cmd_lock);
	for (; list; list = next) {
		next = list->next;
		list->done(list);
	}
}

int sched_doorbell_fd(void)
{
	return doorbell_fd;
}

void sched_counters(struct sched_counters *out)
{
	out->loops = load_relaxed(&loops);
	out->submitted = load_relaxed(&shared_counters.submitted);
	out->completed = load_relaxed(&shared_counters.completed);
	out->errors = load_relaxed(&shared_counters.errors);
	out->clients = load_relaxed(&shared_counters.clients);
	out->comms = load_relaxed(&shared_counters.comms);
	out->inflight = load_relaxed(&shared_counters.inflight);
}

void sched_debug_stall(int on)
{
	store_relaxed(&stall, on ? 1u : 0u);
	wake_scheduler();
}

static void publish_counters(void)
{
	uint32_t nclients = 0, ncomms = 0, inflight = 0;

	for (struct sched_client *c = sched.clients; c; c = c->next)
		nclients += !c->gone;
	for (struct comm *c = sched.comms; c; c = c->next) {
		ncomms++;
		inflight += (uint32_t)(c->inflight + c->p2p_inflight);
	}
	store_relaxed(&shared_counters.submitted, sched.submitted);
	store_relaxed(&shared_counters.completed, sched.completed);
	store_relaxed(&shared_counters.errors, sched.errors);
	store_relaxed(&shared_counters.clients, nclients);
	store_relaxed(&shared_counters.comms, ncomms);
	store_relaxed(&shared_counters.inflight, inflight);
}

static uint32_t clamp_depth(uint32_t tail, uint32_t head, uint32_t entries)
{
	uint32_t d = tail - head;

	return d > entries ? entries : d;
}

/* Ranks that have not yet submitted the oldest collective some rank is waiting in. */
static uint64_t lagging_mask(const struct comm *cm)
{
	const struct slot *sl;
	uint64_t mask = 0;

	if (!cm->ready || !cm->slots)
		return 0;
	mask = sched_p2p_lagging(cm);
	sl = &cm->slots[cm->next_launch % COMM_WINDOW];
	if (sl->seq != cm->next_launch || sl->state != SLOT_ARRIVING)
		return mask;
	/* Across daemons only this collcd's ranks are seen here. */
	for (uint32_t r = 0; r < cm->nranks; r++)
		if (comm_rank_local(cm, r) && !sl->ranks[r].client)
			mask |= 1ull << r;
	return mask;
}

static void snapshot_device(uint32_t g, struct status_device *d)
{
	const struct fifo_host *fh = &sched.fifos[g];
	const struct exec_backend *ex = sched.execs[fh->exec_idx].ex;
	uint64_t low;

	d->id = g;
	d->backend = ex->name;
	ex->device_name(fh->dev, d->name, sizeof(d->name));
	d->nchannels = ex->max_channels;
	d->tail = fh->tail;
	low = d->tail;
	for (uint32_t ch = 0; ch < d->nchannels; ch++) {
		d->consumed[ch] = load_acquire(&fh->f->ctrl.work_consumed[ch].value);
		d->aborted[ch] = load_relaxed(&fh->f->ctrl.work_consumed[ch].aborted);
		if (d->consumed[ch] < low)
			low = d->consumed[ch];
	}
	/* The items from low on are ours and not overwritten: no channel passed them all. */
	for (uint64_t p = low; p < d->tail; p++) {
		const struct collc_work_item *it = &fh->f->items[p & (COLLC_FIFO_DEPTH - 1)];
		int left = 0;

		for (uint32_t ch = 0; ch < d->nchannels; ch++)
			if (d->consumed[ch] <= p && collc_item_ours(it, ch, d->nchannels)) {
				d->inflight[ch]++;
				left = 1;
			}
		d->depth += (uint64_t)left;
	}
}

/* Fills s from the scheduler's state; the arrays are malloc'ed (snapshot_free). */
static int snapshot_take(const struct collc_config *cfg, struct status_snapshot *s)
{
	uint32_t n = 0;

	memset(s, 0, sizeof(*s));
	s->cfg = cfg;
	s->generation = cfg_generation();
	for (uint32_t e = 0; e < sched.nexecs; e++) {
		s->execs[e].name = sched.execs[e].ex->name;
		s->execs[e].ndevices = sched.execs[e].ex->ndevices;
		s->execs[e].max_channels = sched.execs[e].ex->max_channels;
		s->execs[e].cfg = sched.execs[e].cfg;
	}
	s->nexecs = sched.nexecs;
	for (struct sched_client *c = sched.clients; c; c = c->next)
		n++;
	s->clients = calloc(n ? n : 1, sizeof(*s->clients));
	n = 0;
	for (struct comm *cm = sched.comms; cm; cm = cm->next)
		n++;
	s->comms = calloc(n ? n : 1, sizeof(*s->comms));
	s->forming = calloc(n ? n : 1, sizeof(*s->forming));
	s->devices = calloc(sched.ndevs ? sched.ndevs : 1, sizeof(*s->devices));
	if (!s->clients || !s->comms || !s->forming || !s->devices)
		return -ENOMEM;
	for (const struct sched_client *c = sched.clients; c; c = c->next) {
		struct status_client *v = &s->clients[s->nclients];

		if (c->gone)
			continue;
		v->id = c->id;
		v->pid = (int32_t)c->pid;
		v->uid = (uint32_t)c->uid;
		v->sq_depth =
			clamp_depth(load_relaxed(&c->hdr->sq_tail), c->sq_head, c->sq_entries);
		v->cq_depth =
			clamp_depth(c->cq_tail, load_relaxed(&c->hdr->cq_head), c->cq_entries);
		v->inflight = c->outstanding;
		v->submitted = c->submitted;
		v->completed = c->completed;
		v->errors = c->errors;
		v->bad = c->bad;
		s->nclients++;
	}
	for (const struct comm *cm = sched.comms; cm; cm = cm->next) {
		struct status_comm *v = &s->comms[s->ncomms];
		struct status_forming *f = &s->forming[s->nforming];

		if (!cm->ready && !cm->failed) {
			f->id = cm->id;
			f->nranks = cm->nranks;
			f->joined = cm->joined;
			for (uint32_t r = 0; r < cm->nranks; r++)
				if (cm->joins[r])
					f->joined_mask |= 1ull << r;
			f->waiting_ns = now_ns() - cm->t_first_join;
			f->net = cm->net;
			s->nforming++;
		}
		if (!cm->ready)
			continue;
		v->id = cm->id;
		v->backend = sched.execs[cm->exec_idx].ex->name;
		v->nranks = cm->nranks;
		v->live = cm->live;
		v->pending = sched_slot_pending_count(cm) + cm->p2p_wait.n + cm->p2p_gated.n +
			     cm->p2p_queued;
		v->revoked = cm->revoked;
		v->timeout_ms = cm->timeout_ms == UINT32_MAX ? -1 : (int32_t)cm->timeout_ms;
		v->inflight = cm->inflight + cm->p2p_inflight;
		v->completed = cm->completed;
		v->errors = cm->errors;
		v->revoked_inflight = cm->revoked_inflight;
		v->timeouts = cm->timeouts;
		v->timed_out_mask = cm->timed_out_mask;
		v->lagging_mask = lagging_mask(cm);
		memcpy(v->by_algo, cm->by_algo, sizeof(v->by_algo));
		memcpy(v->by_proto, cm->by_proto, sizeof(v->by_proto));
		s->ncomms++;
	}
	for (uint32_t g = 0; g < sched.ndevs; g++) {
		struct status_device *d = &s->devices[s->ndevices];

		if (!sched.execs[sched.fifos[g].exec_idx].ex->device_active(sched.fifos[g].dev))
			continue;
		snapshot_device(g, d);
		for (uint32_t ch = 0; ch < d->nchannels; ch++)
			s->aborted += d->aborted[ch];
		s->ndevices++;
	}
	s->submitted = sched.submitted;
	s->completed = sched.completed;
	s->errors = sched.errors;
	s->bad = sched.bad;
	s->batches = sched.batches;
	s->batch_items = sched.batch_items;
	s->stream_colls = sched.stream_colls;
	s->graph_fires = sched.graph_fires;
	s->done_items = sched.done_items;
	s->done_map_failures = sched.done_map_failures;
	s->net_eager_staged = sched.net_eager_staged;
	s->net_phase_n = sched.net_phase_n;
	memcpy(s->net_phase_ns, sched.net_phase_ns, sizeof(s->net_phase_ns));
	s->gate_ns = sched.gate_ns;
	s->gated_items = sched.gated_items;
	s->gated_fired = sched.gated_fired;
	s->gated_skipped = sched.gated_skipped;
	memcpy(s->by_algo, sched.by_algo, sizeof(s->by_algo));
	memcpy(s->by_proto, sched.by_proto, sizeof(s->by_proto));
	memcpy(s->by_op, sched.by_op, sizeof(s->by_op));
	memcpy(s->lat_buckets, sched.lat_buckets, sizeof(s->lat_buckets));
	memcpy(s->lat_count, sched.lat_count, sizeof(s->lat_count));
	memcpy(s->lat_sum_ns, sched.lat_sum_ns, sizeof(s->lat_sum_ns));
	return 0;
}

static void snapshot_free(struct status_snapshot *s)
{
	free(s->clients);
	free(s->comms);
	free(s->forming);
	free(s->devices);
}

/* CMD_STATUS and CMD_METRICS: the text, or NULL when out of memory. */
static char *render_status(const struct collc_config *cfg, struct sched_cmd *cmd)
{
	struct status_snapshot *s = malloc(sizeof(*s));
	char *text = NULL;

	if (s && snapshot_take(cfg, s) == 0)
		text = cmd->type == CMD_STATUS
			       ? status_render(s, cmd->u.status.flags, &cmd->u.status.len)
			       : metrics_render(s, &cmd->u.status.len);
	if (s)
		snapshot_free(s);
	free(s);
	return text;
}

static void run_cmd(const struct collc_config *cfg, struct sched_cmd *cmd)
{
	struct sched_client *c = cmd->client;
	struct member *mb;
	struct mr *m;
	struct mr **t;

	switch (cmd->type) {
	case CMD_NET_READY:
	case CMD_NET_FAIL:
	case CMD_NET_GO:
	case CMD_NET_DONE:
	case CMD_NET_EAGER:
	case CMD_NET_PEER_IN:
		sched_net_cmd(cmd);
		return;
	case CMD_NET_P2P:
		sched_p2p_net_cmd(cmd);
		return;
	case CMD_CLIENT_ADD:
		c = calloc(1, sizeof(*c));
		if (!c) {
			sched_cmd_finish(cmd, -ENOMEM);
			return;
		}
		c->id = ++sched.next_client_id;
		c->pid = cmd->u.add.pid;
		c->uid = cmd->u.add.uid;
		c->gid = cmd->u.add.gid;
		c->shm_fd = cmd->u.add.shm_fd;
		c->shm = cmd->u.add.shm;
		c->shm_size = cmd->u.add.shm_size;
		c->hdr = c->shm;
		c->sq_entries = c->hdr->sq_entries;
		c->cq_entries = c->hdr->cq_entries;
		c->bad_tail = UINT64_MAX;
		c->sqes = (struct collc_sqe *)((char *)c->shm + c->hdr->sqes_off);
		c->cqes = (struct collc_cqe *)((char *)c->shm + c->hdr->cqes_off);
		/* Our own constant, not the header's copy: the client can scribble that. */
		c->args = (struct collc_sqe_args *)((char *)c->shm + COLLC_SHM_ARGS_OFF);
		c->gates = (struct collc_gate *)((char *)c->shm + COLLC_SHM_GATES_OFF);
		c->event_fd = -1;
		sched_dones_open(c);
		c->next = sched.clients;
		sched.clients = c;
		cmd->client = c;
		cmd->u.add.client_id = c->id;
		sched_cmd_finish(cmd, 0);
		return;
	case CMD_CLIENT_GONE:
		sched_client_gone(c);
		sched_cmd_finish(cmd, 0);
		return;
	case CMD_MR_ADD:
		if (c->nmrs_live >= QUOTA_MRS || c->mr_bytes + cmd->u.mr.size > QUOTA_BYTES) {
			sched_mr_free_mem(cmd->u.mr.exec, cmd->u.mr.exec_mem, cmd->u.mr.addr,
					  cmd->u.mr.size);
			/* The reply fd goes back to the control thread, which closes it. */
			sched_cmd_finish(cmd, -EDQUOT);
			return;
		}
		m = calloc(1, sizeof(*m));
		t = realloc(c->mrs, (c->nmrs + 1) * sizeof(*t));
		if (t)
			c->mrs = t;
		if (!m || !t) {
			free(m);
			sched_mr_free_mem(cmd->u.mr.exec, cmd->u.mr.exec_mem, cmd->u.mr.addr,
					  cmd->u.mr.size);
			/* The reply fd goes back to the control thread, which closes it. */
			sched_cmd_finish(cmd, -ENOMEM);
			return;
		}
		m->exec = cmd->u.mr.exec;
		m->exec_mem = cmd->u.mr.exec_mem;
		m->flags = cmd->u.mr.flags;
		m->addr = cmd->u.mr.addr;
		m->size = cmd->u.mr.size;
		m->id = ++c->nmrs;
		c->mrs[m->id - 1] = m;
		c->nmrs_live++;
		c->mr_bytes += m->size;
		cmd->u.mr.mr = m->id;
		sched_cmd_finish(cmd, 0);
		return;
	case CMD_MR_RELEASE:
		if (!sched_mr_lookup(c, cmd->u.mr.mr)) {
			sched_cmd_finish(cmd, -EINVAL);
			return;
		}
		sched_mr_release(c, cmd->u.mr.mr);
		sched_cmd_finish(cmd, 0);
		return;
	case CMD_COMM_JOIN:
		if (c->gone) {
			sched_cmd_finish(cmd, -EPIPE);
			return;
		}
		if (c->nmembers_live >= QUOTA_COMMS) {
			sched_cmd_finish(cmd, -EDQUOT);
			return;
		}
		sched_cmd_join(cmd);
		return;
	case CMD_COMM_DESTROY:
	case CMD_COMM_ABORT:
		mb = sched_member_of(c, cmd->u.comm.comm);
		if (!mb || mb->left || !mb->comm) {
			sched_cmd_finish(cmd, -EINVAL);
			return;
		}
		if (cmd->type == CMD_COMM_ABORT)
			sched_comm_revoke(mb->comm, -ECANCELED);
		else
			sched_member_leave(mb, -EPIPE);
		sched_cmd_finish(cmd, 0);
		return;
	case CMD_COMM_TIMEOUT:
		mb = sched_member_of(c, cmd->u.timeout.comm);
		if (!mb || mb->left || !mb->comm) {
			sched_cmd_finish(cmd, -EINVAL);
			return;
		}
		mb->comm->timeout_ms = cmd->u.timeout.ms;
		sched_cmd_finish(cmd, 0);
		return;
	case CMD_SET_EVENTFD:
		if (c->event_fd >= 0)
			close(c->event_fd);
		c->event_fd = cmd->u.efd.fd;
		sched_cmd_finish(cmd, 0);
		return;
	case CMD_STATUS:
	case CMD_METRICS:
		cmd->u.status.text = render_status(cfg, cmd);
		sched_cmd_finish(cmd, cmd->u.status.text ? 0 : -ENOMEM);
		return;
	}
	sched_cmd_finish(cmd, -EINVAL);
}

/* Takes every posted command, oldest first. */
static struct sched_cmd *cmd_take_all(void)
{
	struct sched_cmd *list;

	pthread_mutex_lock(&cmd_lock);
	list = cmd_head;
	store_relaxed(&cmd_head, NULL);
	cmd_tail = &cmd_head;
	pthread_mutex_unlock(&cmd_lock);
	return list;
}

static int run_cmds(const struct collc_config *cfg)
{
	struct sched_cmd *list, *next;

	if (!load_relaxed(&cmd_head))
		return 0;
	list = cmd_take_all();
	for (; list; list = next) {
		next = list->next;
		run_cmd(cfg, list);
	}
	return 1;
}

static int work_visible(void)
{
	if (load_relaxed(&cmd_head))
		return 1;
	for (struct sched_client *c = sched.clients; c; c = c->next) {
		if (c->gone || load_acquire(&c->hdr->sq_tail) == c->sq_head)
			continue;
		/*
		 * Entries we cannot take yet are not work: a completion (which
		 * rings us) frees the window, the client's reaping (which rings the
		 * doorbell) frees its CQ.
		 */
		if (c->stall == STALL_WINDOW || (c->stall == STALL_CQ_FULL && !sched_cq_room(c)))
			continue;
		return 1;
	}
	return 0;
}

/* Is the oldest collective of some communicator finished on every device? */
static int completion_visible(int *ret_inflight)
{
	*ret_inflight = 0;
	for (struct comm *cm = sched.comms; cm; cm = cm->next) {
		const struct slot *sl;

		if (cm->p2p_inflight) {
			*ret_inflight = 1;
			if (sched_p2p_done_visible(cm))
				return 1;
		}
		if (cm->fires_inflight) {
			*ret_inflight = 1;
			if (sched_fires_done_visible(cm))
				return 1;
		}
		if (!cm->inflight)
			continue;
		*ret_inflight = 1;
		sl = sched_slot_of(cm, cm->next_done);
		/*
		 * Across daemons, one that ran here and was reported waits for the
		 * root's DONE, which comes as a command and rings us: not ours to poll.
		 */
		if (cm->local && !cm->revoked && sl->net == NET_EXECUTED)
			continue;
		if (sl->state != SLOT_INFLIGHT || sched_slot_executed(cm, sl))
			return 1;
	}
	return 0;
}

/*
 * Is some collective, held back because a device FIFO was full, now free to
 * go? Executors ring us after they consume (N1), so checking after S1 closes
 * the race with a consumer that finished just before we went to sleep.
 */
static int launch_unblocked(void)
{
	for (struct comm *cm = sched.comms; cm; cm = cm->next) {
		struct slot *sl;
		int room = 1;

		if (!cm->ready || !cm->slots)
			continue;
		if (sched_p2p_launch_unblocked(cm))
			return 1;
		sl = sched_slot_of(cm, cm->next_launch);
		/* A collective whose streams have not reached it waits for the gate poll. */
		if (sl->seq != cm->next_launch || sl->state != SLOT_ARRIVING ||
		    sl->arrived < cm->nlocal || (cm->local && sl->net != NET_GO) ||
		    !sched_gates_open(cm, sl))
			continue;
		for (uint32_t r = 0; r < cm->nranks && room; r++)
			room = !comm_rank_local(cm, r) || sched_fifo_ready(cm->devs[r]);
		if (room)
			return 1;
	}
	return 0;
}

static void set_need_wakeup(uint32_t on)
{
	for (struct sched_client *c = sched.clients; c; c = c->next)
		if (!c->gone)
			store_relaxed(&c->hdr->sq_flags, on ? COLLC_SQ_NEED_WAKEUP : 0u);
}

/*
 * Sleeps on the doorbell until a client, an executor or a command wakes us,
 * or at most nap_ns when nonzero (waiting gates: sched_main()).
 */
static void sleep_until_work(int timers, uint64_t nap_ns)
{
	uint64_t limit_ns;
	uint32_t seq = load_acquire(&doorbell->seq);
	int inflight;

	set_need_wakeup(1);
	store_relaxed(&sleeping, 1u);
	/*
	 * Room only shrinks when this thread appends: a FIFO with room now has
	 * it until we wake, and one full now is what N2 looks for.
	 */
	store_relaxed(&room_wanted, fifo_full());
	/*
	 * S1: pairs with A2 in the client (tail store, fence, flags load), N1
	 * and N2 in executors, N3 in sched_post().
	 */
	fence_seq_cst();
	if (!work_visible() && !completion_visible(&inflight) && !launch_unblocked() &&
	    !load_relaxed(&stop_requested)) {
		cfg_reader_quiescent();
		rcu_thread_offline();
		/* Executors ring us when they finish; the timeout only bounds timers and graphs. */
		limit_ns = 500000000;
		if (inflight || timers)
			limit_ns = 10000000;
		if (sched_graphs_armed())
			limit_ns = 200000;
		if (nap_ns && nap_ns < limit_ns)
			limit_ns = nap_ns;
		futex_wait(&doorbell->seq, seq, (int64_t)limit_ns);
		rcu_thread_online();
	}
	store_relaxed(&sleeping, 0u);
	set_need_wakeup(0);
}

/*
 * After a publication: resolves the config for every executor (its auto
 * keys) and hands it to the executors that take it (configure). The
 * generation is read first (G2 in config.c): cfg is at least that new, so
 * no publication goes unseen, and a pass with the same generation keeps the
 * resolved copies.
 */
static void exec_configs(const struct collc_config *cfg, uint64_t gen)
{
	static uint64_t configured = UINT64_MAX;

	if (gen == configured)
		return;
	for (uint32_t e = 0; e < sched.nexecs; e++) {
		struct sched_exec *se = &sched.execs[e];

		cfg_resolve(cfg, &se->ex->defaults, se->ex->max_channels, &se->cfg);
		if (se->ex->configure)
			se->ex->configure(&se->cfg);
	}
	node_configure(cfg);
	configured = gen;
}

/*
 * Streams and graph replays open gates without a word to us, so while some
 * wait the scheduler polls them: it spins for gate_spin_us after its last
 * progress, then naps on the doorbell (a submission still wakes it at once)
 * for collc_gate_nap_ns() of the time it has waited (proto/work.h).
 */
static void *sched_main(void *arg)
{
	uint64_t idle_since = now_ns();

	pthread_setname_np(pthread_self(), "collc-sched");
	/* The naps above are microseconds: the default 50 us of slack would swamp them. */
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	rcu_register_thread();
	while (!load_relaxed(&stop_requested)) {
		const struct collc_config *cfg;
		uint64_t gen;
		int progress;

		cfg_reader_quiescent();
		rcu_quiescent_state();
		if (load_relaxed(&stall)) {
			cfg_reader_quiescent();
			rcu_thread_offline();
			usleep(1000);
			rcu_thread_online();
			continue;
		}
		fetch_add_relaxed(&loops, 1);
		gen = cfg_generation();
		cfg = cfg_get(); /* one snapshot plans every collective of this pass */
		exec_configs(cfg, gen);
		progress = run_cmds(cfg);
		progress |= sched_graph_poll();
		for (struct sched_client *c = sched.clients; c; c = c->next)
			if (!c->gone)
				progress |= sched_drain_sq(c);
		progress |= sched_launch_ready();
		progress |= sched_reap();
		progress |= sched_expire(cfg, now_ns());
		sched_flush_cqs();
		sched_collect();
		publish_counters();
		if (progress) {
			idle_since = now_ns();
			continue;
		}
		{
			const uint64_t idle = now_ns() - idle_since;
			const int gates = sched_gates_waiting();

			if (idle < (uint64_t)cfg->sched_spin_us * 1000 ||
			    (gates && idle < (uint64_t)cfg->gate_spin_us * 1000)) {
				cpu_relax();
				continue;
			}
			sleep_until_work(sched_timers_armed(cfg),
					 gates ? collc_gate_nap_ns(idle) : 0);
		}
	}
	rcu_unregister_thread();
	return NULL;
}

int sched_init(const struct sched_params *p)
{
	int r;

	params = *p;
	/* One global device space: executor e's devices follow those of e - 1. */
	for (uint32_t e = 0; e < exec_count() && e < EXEC_MAX; e++) {
		const struct exec_backend *ex = exec_get(e);
		struct sched_exec *se = &sched.execs[sched.nexecs++];

		se->ex = ex;
		se->base = sched.ndevs;
		for (uint32_t d = 0; d < ex->ndevices && sched.ndevs < SCHED_MAX_DEVICES; d++) {
			struct fifo_host *fh = &sched.fifos[sched.ndevs++];

			fh->f = ex->fifo(d);
			fh->exec_idx = e;
			fh->dev = d;
		}
	}
	doorbell_fd = memfd_create("collc-doorbell", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (doorbell_fd < 0)
		return -errno;
	if (ftruncate(doorbell_fd, sizeof(*doorbell)) < 0 ||
	    fcntl(doorbell_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		r = -errno;
		goto err_close;
	}
	doorbell =
		mmap(NULL, sizeof(*doorbell), PROT_READ | PROT_WRITE, MAP_SHARED, doorbell_fd, 0);
	if (doorbell == MAP_FAILED) {
		r = -errno;
		goto err_close;
	}
	r = -pthread_create(&thread, NULL, sched_main, NULL);
	if (r < 0)
		goto err_unmap;
	return 0;

err_unmap:
	munmap(doorbell, sizeof(*doorbell));
err_close:
	close(doorbell_fd);
	doorbell_fd = -1;
	return r;
}

void sched_fini(void)
{
	struct sched_cmd *list, *next;

	if (doorbell_fd < 0)
		return;
	store_relaxed(&stop_requested, 1u);
	wake_scheduler();
	pthread_join(thread, NULL);
	/* Commands nobody will run end now; the control thread runs their callbacks. */
	for (struct comm *cm = sched.comms; cm; cm = cm->next)
		if (!cm->ready && !cm->failed)
			sched_comm_fail_init(cm, -ECANCELED);
	list = cmd_take_all();
	for (; list; list = next) {
		next = list->next;
		if (list->type == CMD_MR_ADD)
			/* The executors still run: their memory goes back to them now. */
			sched_mr_free_mem(list->u.mr.exec, list->u.mr.exec_mem, list->u.mr.addr,
					  list->u.mr.size);
		sched_cmd_finish(list, -ECANCELED);
	}
}

void sched_release(void)
{
	if (doorbell_fd < 0)
		return;
	/*
	 * The executors have stopped: where a fini released its memory and
	 * connections, the registrations and communicators naming them must not.
	 */
	sched.execs_stopped = 1;
	/* Clients first: sched_client_free() unlinks their members from the communicators. */
	while (sched.clients) {
		struct sched_client *c = sched.clients;

		sched.clients = c->next;
		sched_client_free(c);
	}
	sched_dones_reap(1);
	while (sched.comms) {
		struct comm *cm = sched.comms;

		sched.comms = cm->next;
		if (sched.execs[cm->exec_idx].ex->fini_frees)
			cm->exec_priv = NULL; /* sched.execs_stopped */
		sched_comm_free(cm);
	}
	munmap(doorbell, sizeof(*doorbell));
	close(doorbell_fd);
	doorbell_fd = -1;
}
