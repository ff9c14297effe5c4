/* SPDX-License-Identifier: MIT */
/*
 * The CPU executor: host threads play the persistent grid. Each virtual
 * device has one work FIFO and one thread per channel; every thread reads
 * every item of its device's FIFO in order, runs its channel's share, and
 * publishes work_consumed.
 *
 * Ranks talk over connections (one ring per protocol, cpu/prims.c) for the
 * ring algorithms, and meet in mailboxes to read each other's buffers for
 * one-shot and two-shot (cpu/peer.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "common/atomics.h"
#include "common/futex.h"
#include "daemon/cpu/internal.h"
#include "daemon/exec.h"
#include "daemon/cpu/cpu.h"
#include "daemon/log.h"
#include "daemon/cpu/reduce.h"
#include "proto/algo_copy.h"
#include "proto/dtype.h"
#include "proto/prims.h"
#include "proto/shm.h"
#include "proto/wire.h"

_Atomic uint32_t exec_spin_us = 50; /* cpu.h says who writes it */

struct cpu_chan {
	pthread_t thread;
	struct cpu_dev *dev;
	uint32_t id;
	uint8_t started;
	char *mem; /* scratch and staging, private to the thread */
	/* The thread sleeps on bell (wait_item()); cpu_kick() wakes the channels an item names. */
	uint32_t asleep;
	uint32_t bell;
};

#define CPU_CHAN_MEM_BYTES (CPU_SCRATCH_BYTES + 2 * CPU_STAGE_BYTES)

struct cpu_dev {
	uint32_t id;
	struct collc_work_fifo *fifo;
	pthread_mutex_t start_lock;
	uint32_t active;
	struct cpu_chan chans[COLLC_MAX_CHANNELS];
	uint64_t kicked; /* the scheduler's: items cpu_kick() has woken channels for */
	/* Gated items this device leads (proto/work.h): decision words, and the host's cancel. */
	uint64_t gate_dec[COLLC_FIFO_DEPTH];
	uint64_t gate_cancel;
};

struct cpu_comm {
	uint32_t nranks;
	struct cpu_conn *conns; /* nranks x nchan; conn [r][c] is rank r's receive side */
	char **bufs;            /* the protocol buffers of each connection, CPU_CONN_BYTES() each */
	/* The group rings (comm_setup_part's group), laid out as conns; NULL without. */
	struct cpu_conn *gconns;
	char **gbufs;
	uint64_t simple_bytes; /* each connection's Simple ring (larger across daemons) */
	struct cpu_mbox *mbox; /* nranks x nchan */
	char *oll;             /* the mailboxes' one-shot LL inboxes, oll_bytes() each */
	struct cpu_rank *ranks;
	uint32_t revoked; /* the abort word: set once by cpu_comm_abort() */
	uint32_t broken;  /* set once by a rank that received what no daemon agreed to */
	uint8_t order[COLLC_MAX_RANKS]; /* comm_setup_part's ring order, where it had one */
};

static struct cpu_dev *devs;
static uint32_t ndevs, nchan;
static uint32_t stopping;
static void (*notify)(void);         /* wakes the scheduler (exec_init) */
static void (*notify_skipped)(void); /* ... after an item not ours to run */

/* One rank alone: its result is its own input. */
static void single_rank(const struct collc_work_item *it, size_t es, uint32_t share)
{
	const char *src = (const char *)(uintptr_t)it->sendbuf;
	char *dst = (char *)(uintptr_t)it->recvbuf;
	uint64_t per = collc_div_up(it->count, it->nchannels);
	uint64_t off = (uint64_t)share * per, n;

	if (off >= it->count || !dst)
		return;
	n = collc_min_u64(per, it->count - off);
	if (src != dst)
		memmove(dst + off * es, src + off * es, n * es);
	if (it->coll != COLLC_OP_ALLGATHER && it->coll != COLLC_OP_BROADCAST)
		red_finish(dst + off * es, n, it->dtype, it->redop, 1);
}

/* Runs x's share of its item on this channel; what the algorithm returned. */
static int run_algo(struct cpu_run *x, const struct collc_work_copies *copies)
{
	const struct collc_work_item *it = x->it;

	if (collc_copy_coll(it->coll) && it->algo == COLLC_ALGO_RING && it->nranks > 1)
		return cpu_copy_relay(x, copies);
	if (collc_copy_coll(it->coll))
		return cpu_copy(x, copies);
	if (it->nranks == 1) {
		single_rank(it, x->es, x->share);
		return 0;
	}
	switch (it->algo) {
	case COLLC_ALGO_RING:
		return cpu_ring(x);
	case COLLC_ALGO_ONESHOT:
		return cpu_oneshot(x);
	case COLLC_ALGO_TWOSHOT:
		return cpu_twoshot(x);
	case COLLC_ALGO_HIER:
		return cpu_hier(x);
	}
	return -EINVAL;
}

static int run_item(struct cpu_dev *d, struct cpu_chan *c, const struct collc_work_item *it,
		    uint32_t share, uint64_t pos)
{
	struct cpu_run x = {
		.it = it,
		.abort = &d->fifo->ctrl.abort,
		.stopping = &stopping,
		.rk = (struct cpu_rank *)(uintptr_t)it->comm_dev,
		.revoked = ((struct cpu_rank *)(uintptr_t)it->comm_dev)->revoked,
		.ch = c->id,
		.share = share,
		.es = collc_dtype_bytes(it->dtype),
		.scratch = c->mem,
		.stage_in = c->mem + CPU_SCRATCH_BYTES,
		.stage_out = c->mem + CPU_SCRATCH_BYTES + CPU_STAGE_BYTES,
	};
	int r;

	if (!x.es || it->nranks > COLLC_MAX_RANKS || it->rank >= it->nranks)
		return -EINVAL;
	/* A revoked communicator's items still queued are abandoned without a start. */
	if (load_acquire(x.revoked))
		return -ECANCELED;
	r = run_algo(&x, &d->fifo->copies[pos & (COLLC_FIFO_DEPTH - 1)]);
	/*
	 * A step of another length than both daemons agreed (prims.c
	 * recv_begin()), or a relay block of one: the peer is broken or hostile.
	 * P1: pairs with P1' in node.c (nc_broken()): stored before the item's
	 * work_consumed (F2), so the proxy sees it before this daemon reports
	 * the collective done, and fails it everywhere; and with P1''
	 * (cpu_comm_broken()), so the scheduler does not end it on the ranks
	 * early.
	 */
	if (r == -EPROTO)
		store_release(x.rk->broken, 1u);
	return r;
}

/* Channel threads */

/*
 * Position want - 1 is published (B1') and its item whole (W1'). The CPU
 * executor needs only the item's seq, but waits for published too, as the
 * grid's poller does: an item some scheduler path writes without publishing
 * then hangs the CPU tests instead of only the GPU.
 */
static int item_ready(const struct collc_fifo_ctrl *ctl, const struct collc_work_item *slot,
		      uint64_t want)
{
	return load_acquire(&ctl->published) >= want && load_acquire(&slot->seq) == want;
}

static int wait_item(struct cpu_dev *d, struct cpu_chan *c, const struct collc_work_item *slot,
		     uint64_t want)
{
	struct collc_fifo_ctrl *ctl = &d->fifo->ctrl;
	uint64_t spin_ns = (uint64_t)load_relaxed(&exec_spin_us) * 1000, t0 = now_ns();

	for (uint32_t i = 0;; i++) {
		/* B1', W1': pair with B1, W1 in the scheduler (sched_launch.c). */
		if (item_ready(ctl, slot, want))
			return 0;
		if (load_relaxed(&stopping))
			return -ECANCELED;
		if ((i & 63) == 63 && now_ns() - t0 > spin_ns)
			break;
		cpu_relax();
	}
	store_relaxed(&c->asleep, 1u);
	for (;;) {
		uint32_t b = load_acquire(&c->bell);

		/* K1: pairs with K2 in cpu_kick(): we see the seq or it sees us asleep. */
		fence_seq_cst();
		if (item_ready(ctl, slot, want) || load_relaxed(&stopping))
			break;
		futex_wait(&c->bell, b, 200000000);
	}
	store_relaxed(&c->asleep, 0u);
	return item_ready(ctl, slot, want) ? 0 : -ECANCELED;
}

/*
 * Bumped and woken by the thread that decides a gated item: the executor's
 * other threads waiting for a decision sleep on it (GW).
 */
static uint32_t gate_wakes;

/*
 * A gated item at position pos of d (proto/work.h struct collc_work_gate):
 * waits until its leader decided and returns the decision, or 0 once the
 * executor stops. One thread decides, the leader's thread that runs the
 * item's first share (poller): FIRE once every go word holds its ticket,
 * SKIP once the scheduler cancelled it (gate_cancel) or the FIFO was
 * aborted. It polls (the go words are the clients' stores, nobody wakes us
 * for them), napping as the scheduler's poll of gates does; every other
 * thread sleeps until a decision wakes it.
 */
static uint32_t gate_wait(struct cpu_dev *d, uint64_t pos, const struct collc_work_item *it,
			  int poller)
{
	/* After the item's acquire (W1'): the gate was written before its seq. */
	const struct collc_work_gate *g =
		(const struct collc_work_gate *)&d->fifo->copies[pos & (COLLC_FIFO_DEPTH - 1)];
	uint64_t *dec = (uint64_t *)(uintptr_t)g->decision;
	const uint64_t tag = g->tag;
	const uint32_t n = g->nwatch < COLLC_GATE_WATCH_MAX ? g->nwatch : COLLC_GATE_WATCH_MAX;
	uint64_t t0 = 0;

	for (uint32_t i = 0;; i++) {
		/* GW': read before the decision; pairs with GW (futex_wait checks it again). */
		const uint32_t seen = load_acquire(&gate_wakes);
		/* GD': pairs with GD below (in the thread that decided). */
		uint64_t v = load_acquire(dec);
		uint32_t o = collc_gate_decided(v, tag), open = 1;

		if (o)
			return o;
		if (load_relaxed(&stopping))
			return 0;
		if (poller) {
			/* G1: pairs with the stream's write of go, fenced after its earlier work. */
			for (uint32_t k = 0; k < n; k++)
				open &= load_acquire(
						(const uint32_t *)(uintptr_t)g->watch[k].addr) ==
					g->watch[k].val;
			if (open)
				o = COLLC_GATE_FIRE;
			else if (load_acquire(&d->gate_cancel) > pos ||
				 load_relaxed(&d->fifo->ctrl.abort))
				o = COLLC_GATE_SKIP;
			/* GD: the acquires of go, then the decision (release, in the CAS). */
			if (o && cas_acq_rel(dec, v, collc_gate_word(tag, o))) {
				/* GW: after the decision, the waiters' word changes, then they wake. */
				fetch_add(&gate_wakes, 1);
				futex_wake(&gate_wakes, INT_MAX);
				return o;
			}
			if (o)
				continue;
		}
		if (i < 64) {
			cpu_relax();
			continue;
		}
		if (!poller) {
			/* The stop is seen within 10 ms. */
			futex_wait(&gate_wakes, seen, 10000000);
			continue;
		}
		/* An eighth of the wait so far, as the scheduler naps (proto/work.h). */
		if (!t0)
			t0 = now_ns();
		nanosleep(&(struct timespec){ .tv_nsec = (long)collc_gate_nap_ns(now_ns() - t0) },
			  NULL);
	}
}

static void *chan_main(void *arg)
{
	struct cpu_chan *c = arg;
	struct cpu_dev *d = c->dev;
	char name[16];
	int warned = 0;

	snprintf(name, sizeof(name), "collc-d%u-c%u", d->id, c->id);
	pthread_setname_np(pthread_self(), name);
	for (uint64_t pos = 0;; pos++) {
		const struct collc_work_item *slot = &d->fifo->items[pos & (COLLC_FIFO_DEPTH - 1)];
		struct collc_consumed *wc = &d->fifo->ctrl.work_consumed[c->id];
		struct collc_work_item it;
		uint32_t share;
		int ours;

		if (wait_item(d, c, slot, pos + 1) < 0)
			break;
		it = *slot;
		if (it.gate & COLLC_ITEM_GATED) {
			const int poller = (it.gate & COLLC_ITEM_LEADER) &&
					   collc_item_share(it.chan_base, c->id, nchan) == 0;
			uint32_t o = gate_wait(d, pos, &it, poller);

			if (!o)
				break;
			if (o == COLLC_GATE_SKIP)
				it.kind = COLLC_WORK_NONE; /* consumed, not run */
		}
		share = collc_item_share(it.chan_base, c->id, nchan);
		ours = collc_item_ours(&it, c->id, nchan);
		if (it.kind == COLLC_WORK_COLL && ours && !load_relaxed(&d->fifo->ctrl.abort)) {
			int r = run_item(d, c, &it, share, pos);

			if (r == -ECANCELED && !load_relaxed(&stopping))
				store_relaxed(&wc->aborted,
					      wc->aborted + 1); /* this thread alone writes it */
			else if (r < 0 && r != -ECANCELED && !warned++)
				log_err("device %u channel %u: collective %llu: %s", d->id, c->id,
					(unsigned long long)it.coll_id, strerror(-r));
			/*
			 * D1: the results, then the done word (proto/shm.h);
			 * items that name one have a single channel.
			 */
			if (it.done && r == 0)
				store_release((uint32_t *)(uintptr_t)it.done, it.done_val);
		}
		/* E1: pairs with F1/F2 in the scheduler: results are written, the slot is free. */
		store_release(&wc->value, pos + 1);
		/*
		 * The scheduler waits on the channels an item names; a skip
		 * only frees its FIFO slot: waking it for every one cost two
		 * thread switches an item where channels go unused.
		 */
		if (ours || !notify_skipped)
			notify();
		else
			notify_skipped();
		if (it.kind == COLLC_WORK_QUIT)
			break;
	}
	return NULL;
}

static int dev_start(struct cpu_dev *d)
{
	int r = 0;

	pthread_mutex_lock(&d->start_lock);
	if (d->active)
		goto out;
	for (uint32_t c = 0; c < nchan; c++) {
		struct cpu_chan *ch = &d->chans[c];

		if (ch->started)
			continue;
		ch->dev = d;
		ch->id = c;
		if (!ch->mem)
			ch->mem = aligned_alloc(64, CPU_CHAN_MEM_BYTES);
		if (!ch->mem) {
			r = -ENOMEM;
			log_err("device %u: channel memory: %s", d->id, strerror(-r));
			goto out;
		}
		r = -pthread_create(&ch->thread, NULL, chan_main, ch);
		if (r < 0) {
			log_err("device %u: channel thread: %s", d->id, strerror(-r));
			goto out;
		}
		ch->started = 1;
	}
	store_release(&d->active, 1u);
out:
	pthread_mutex_unlock(&d->start_lock);
	return r;
}

/* Backend table */

static struct collc_work_fifo *cpu_fifo(uint32_t dev)
{
	return devs[dev].fifo;
}

static uint64_t cpu_gate_decision(uint32_t dev, uint64_t pos)
{
	return (uint64_t)(uintptr_t)&devs[dev].gate_dec[pos & (COLLC_FIFO_DEPTH - 1)];
}

static void cpu_gate_cancel(uint32_t dev, uint64_t upto)
{
	if (upto > load_relaxed(&devs[dev].gate_cancel))
		store_release(&devs[dev].gate_cancel, upto);
}

static uint32_t cpu_gate_outcome(uint32_t dev, uint64_t pos)
{
	return collc_gate_decided(load_acquire(&devs[dev].gate_dec[pos & (COLLC_FIFO_DEPTH - 1)]),
				  pos + 1);
}

static void chan_wake(struct cpu_chan *c)
{
	fetch_add(&c->bell, 1);
	futex_wake(&c->bell, 1);
}

/*
 * After the scheduler published items [d->kicked, published): wakes the
 * channels that run one of them. A channel an item does not name consumes
 * it (a skip) when it next wakes: woken for every item, the unused channels
 * cost the core two thread switches each. So that skipped items never fill
 * the FIFO, a channel more than half the FIFO behind is woken too, as are
 * all channels for an item that is not a plain collective (gated, quit,
 * signal). Scheduler thread only.
 */
static void cpu_kick(uint32_t dev)
{
	struct cpu_dev *d = &devs[dev];
	struct collc_fifo_ctrl *ctl = &d->fifo->ctrl;
	const uint64_t pub = load_relaxed(&ctl->published); /* this thread's own store */
	uint64_t mask = 0;

	for (uint64_t p = d->kicked; p < pub; p++) {
		const struct collc_work_item *it = &d->fifo->items[p & (COLLC_FIFO_DEPTH - 1)];

		for (uint32_t c = 0; c < nchan; c++)
			if (it->gate || collc_item_ours(it, c, nchan))
				mask |= 1ull << c;
	}
	d->kicked = pub;
	for (uint32_t c = 0; c < nchan; c++)
		/* F1: as the scheduler's room check reads it. */
		if (pub - load_acquire(&ctl->work_consumed[c].value) > COLLC_FIFO_DEPTH / 2)
			mask |= 1ull << c;
	/* K2: pairs with K1 in wait_item(). */
	fence_seq_cst();
	for (uint32_t c = 0; c < nchan; c++)
		if ((mask >> c & 1) && load_relaxed(&d->chans[c].asleep))
			chan_wake(&d->chans[c]);
}

/* Host-memory ranks take one virtual device each: rank r runs on device r. */
static int cpu_place(uint32_t nranks, const struct collc_msg_comm_init *const *joins,
		     uint32_t *ret_devs)
{
	if (nranks > ndevs)
		return -EINVAL;
	for (uint32_t r = 0; r < nranks; r++) {
		if (joins[r]->device != -1)
			return -ENODEV;
		ret_devs[r] = r;
	}
	return 0;
}

/* Bytes of one mailbox's one-shot LL inbox (whole lines, so every inbox stays aligned). */
static size_t oll_bytes(uint32_t nranks)
{
	return collc_oll_inbox_lines(nranks, CPU_OLL_SLOT_LINES) * COLLC_LL_LINE_BYTES;
}

static void conns_free(const struct cpu_comm *cc, struct cpu_conn *conns, char **bufs)
{
	if (bufs)
		for (size_t i = 0; i < (size_t)cc->nranks * nchan; i++)
			if (bufs[i])
				munmap(bufs[i], CPU_CONN_BYTES(cc->simple_bytes));
	free(bufs);
	free(conns);
}

static void comm_free(struct cpu_comm *cc)
{
	if (cc->oll)
		munmap(cc->oll, (size_t)cc->nranks * nchan * oll_bytes(cc->nranks));
	conns_free(cc, cc->conns, cc->bufs);
	conns_free(cc, cc->gconns, cc->gbufs);
	free(cc->mbox);
	free(cc->ranks);
	free(cc);
}

static void link_init(struct cpu_link *l, uint32_t proto, char *buf, uint64_t buf_bytes)
{
	l->proto = proto;
	l->buf = buf;
	l->buf_bytes = buf_bytes;
}

/* nranks x nchan connections with their protocol buffers; freed by conns_free() (also on error). */
static int conns_make(const struct cpu_comm *cc, struct cpu_conn **ret_conns, char ***ret_bufs)
{
	size_t nconn = (size_t)cc->nranks * nchan;
	struct cpu_conn *conns = aligned_alloc(64, nconn * sizeof(*conns));
	char **bufs = calloc(nconn, sizeof(*bufs));

	*ret_conns = conns;
	*ret_bufs = bufs;
	if (!conns || !bufs)
		return -ENOMEM;
	memset(conns, 0, nconn * sizeof(*conns));
	for (size_t i = 0; i < nconn; i++) {
		char *b;

		/* Untouched pages cost nothing: small collectives use the first slots only. */
		b = mmap(NULL, CPU_CONN_BYTES(cc->simple_bytes), PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (b == MAP_FAILED)
			return -ENOMEM;
		bufs[i] = b;
		/* Fresh pages are zero: no LL or LL128 flag (step + 1 >= 1) matches them. */
		link_init(&conns[i].simple, COLLC_PROTO_SIMPLE, b, cc->simple_bytes);
		link_init(&conns[i].ll, COLLC_PROTO_LL, b + cc->simple_bytes, CPU_LL_BUFFER_BYTES);
		link_init(&conns[i].ll128, COLLC_PROTO_LL128,
			  b + cc->simple_bytes + CPU_LL_BUFFER_BYTES, CPU_LL128_BUFFER_BYTES);
	}
	return 0;
}

/*
 * local NULL: every rank runs here; order NULL: the ring in rank order;
 * group 0: no group rings.
 */
static int comm_setup(uint32_t nranks, const uint32_t *devids, const uint8_t *local,
		      const uint8_t *order, uint32_t group, uint64_t *ret_comm_dev, void **ret_priv)
{
	struct cpu_comm *cc = calloc(1, sizeof(*cc));
	size_t nconn = (size_t)nranks * nchan;
	int r = -ENOMEM;

	if (!cc)
		return -ENOMEM;
	if (nranks > COLLC_MAX_RANKS ||
	    (group && (group < 2 || nranks % group || group == nranks))) {
		free(cc);
		return -EINVAL;
	}
	cc->nranks = nranks;
	if (order)
		memcpy(cc->order, order, nranks);
	cc->simple_bytes = local ? CPU_NET_SIMPLE_BUFFER_BYTES : CPU_SIMPLE_BUFFER_BYTES;
	cc->mbox = aligned_alloc(64, nconn * sizeof(*cc->mbox));
	cc->ranks = calloc(nranks, sizeof(*cc->ranks));
	if (!cc->mbox || !cc->ranks)
		goto err_free;
	if (conns_make(cc, &cc->conns, &cc->bufs) < 0 ||
	    (group && conns_make(cc, &cc->gconns, &cc->gbufs) < 0))
		goto err_free;
	memset(cc->mbox, 0, nconn * sizeof(*cc->mbox));
	/* Lazily touched, like the connections; zero matches no flag (prims.h, LL). */
	cc->oll = mmap(NULL, nconn * oll_bytes(nranks), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (cc->oll == MAP_FAILED) {
		cc->oll = NULL;
		goto err_free;
	}
	for (size_t i = 0; i < nconn; i++)
		cc->mbox[i].oll = (union collc_ll_line *)(cc->oll + i * oll_bytes(nranks));
	for (uint32_t rk = 0; rk < nranks; rk++) {
		cc->ranks[rk].mbox = cc->mbox;
		cc->ranks[rk].revoked = &cc->revoked;
		cc->ranks[rk].broken = &cc->broken;
		cc->ranks[rk].order = order ? cc->order : NULL;
		cc->ranks[rk].nchan = nchan;
		cc->ranks[rk].group = group;
		for (uint32_t c = 0; c < nchan; c++) {
			cc->ranks[rk].recv[c] = &cc->conns[(size_t)rk * nchan + c];
			cc->ranks[rk].send[c] = &cc->conns[(size_t)((rk + 1) % nranks) * nchan + c];
			if (!group)
				continue;
			cc->ranks[rk].grecv[c] = &cc->gconns[(size_t)rk * nchan + c];
			cc->ranks[rk].gsend[c] =
				&cc->gconns[(size_t)((rk + group) % nranks) * nchan + c];
		}
	}
	for (uint32_t rk = 0; rk < nranks; rk++) {
		if (local && !local[rk])
			continue;
		r = dev_start(&devs[devids[rk]]);
		if (r < 0)
			goto err_free;
		ret_comm_dev[rk] = (uint64_t)(uintptr_t)&cc->ranks[rk];
	}
	*ret_priv = cc;
	return 0;

err_free:
	comm_free(cc);
	return r;
}

static int cpu_comm_setup(uint32_t nranks, const uint32_t *devids, uint64_t *ret_comm_dev,
			  void **ret_priv)
{
	return comm_setup(nranks, devids, NULL, NULL, 0, ret_comm_dev, ret_priv);
}

static int cpu_comm_setup_part(uint32_t nranks, const uint32_t *devids, const uint8_t *local,
			       const uint8_t *order, uint32_t group, uint64_t *ret_comm_dev,
			       void **ret_priv)
{
	return comm_setup(nranks, devids, local, order, group, ret_comm_dev, ret_priv);
}

/* The proxy's view of a Simple ring (exec.h: struct exec_link). */
static uint64_t link_tail(void *p)
{
	/* R1 (proxy): pairs with S1 in prims.c send_end(): the payload and step_len first. */
	return load_acquire(&((struct cpu_link *)p)->tail);
}

static uint64_t link_head(void *p)
{
	/* S2 (proxy): pairs with R2 in prims.c recv_end(): the receiver is done with the slot. */
	return load_acquire(&((struct cpu_link *)p)->head);
}

static uint32_t link_len(void *p, uint64_t step)
{
	return ((struct cpu_link *)p)->step_len[step % COLLC_STEPS];
}

static void link_post_tail(void *p, uint64_t v, uint32_t len)
{
	struct cpu_link *l = p;

	l->step_len[(v - 1) % COLLC_STEPS] = len;
	/* S1 (proxy): pairs with R1 in prims.c can_recv(): the landed payload, then tail. */
	cpu_post(&l->tail, v, &l->tail_seq, &l->recv_waiting);
}

static void link_post_head(void *p, uint64_t v)
{
	struct cpu_link *l = p;

	/* R2 (proxy): pairs with S2 in prims.c can_send(): the slot was sent, it is free. */
	cpu_post(&l->head, v, &l->head_seq, &l->send_waiting);
}

static void link_direct(void *p)
{
	/* Before any item of the communicator: the FIFO's publish orders it for the sender. */
	store_relaxed(&((struct cpu_link *)p)->direct, 1u);
}

static const char *link_src(void *p, uint64_t step)
{
	/* Read after tail passed step (R1): send_end() stored it before tail (S1). */
	return ((struct cpu_link *)p)->step_src[step % COLLC_STEPS];
}

static void link_recv_direct(void *p)
{
	/* Before any item of the communicator: the FIFO's publish orders it for the receiver. */
	store_relaxed(&((struct cpu_link *)p)->recv_direct, 1u);
}

static uint64_t link_known(void *p)
{
	/* D1' (proxy): pairs with D1 in prims.c dst_publish(): step_dst and dst_len first. */
	return load_acquire(&((struct cpu_link *)p)->dst_pub);
}

static char *link_dst(void *p, uint64_t step, uint32_t *ret_len)
{
	const struct cpu_link *l = p;

	/* Read after known() passed step (D1'). */
	*ret_len = l->dst_len[step % COLLC_STEPS];
	return l->step_dst[step % COLLC_STEPS];
}

static void link_watch(void *p, int fd)
{
	struct cpu_link *l = p;

	/* Written before the arm; the poster reads it after winning the disarm (K2). */
	store_relaxed(&l->proxy_fd, fd);
	/* K1 (proxy): the caller fences after this and looks at tail and head again. */
	store_relaxed(&l->proxy_armed, 1u);
}

static int cpu_comm_link(void *priv, uint32_t rank, uint32_t chan, uint32_t ring,
			 struct exec_link *ret)
{
	struct cpu_comm *cc = priv;
	struct cpu_conn *conns = ring == EXEC_RING_GROUP ? cc->gconns : cc->conns;
	struct cpu_link *l;

	if (rank >= cc->nranks || chan >= nchan || ring > EXEC_RING_GROUP || !conns)
		return -EINVAL;
	l = &conns[(size_t)rank * nchan + chan].simple;
	*ret = (struct exec_link){
		.l = l,
		.buf = l->buf,
		.slot_bytes = collc_simple_slot_bytes(cc->simple_bytes, COLLC_STEPS),
		.nslots = COLLC_STEPS,
		.tail = link_tail,
		.head = link_head,
		.len = link_len,
		.post_tail = link_post_tail,
		.post_head = link_post_head,
		.watch = link_watch,
		.broken = &cc->broken,
		.direct = link_direct,
		.src = link_src,
		.recv_direct = link_recv_direct,
		.known = link_known,
		.dst = link_dst,
	};
	return 0;
}

/* Bumps a futex word and wakes all its sleepers, whatever they wait for. */
static void wake_all(uint32_t *seqw)
{
	fetch_add(seqw, 1);
	futex_wake(seqw, INT_MAX);
}

static void conn_wake_all(struct cpu_conn *cn)
{
	struct cpu_link *links[3] = { &cn->simple, &cn->ll, &cn->ll128 };

	for (int k = 0; k < 3; k++) {
		wake_all(&links[k]->tail_seq);
		wake_all(&links[k]->head_seq);
	}
}

static void cpu_comm_abort(void *priv)
{
	struct cpu_comm *cc = priv;
	size_t nconn = (size_t)cc->nranks * nchan;

	/*
	 * A1: pairs with A1' in cpu/prims.c cpu_cancelled(): revoked is stored before
	 * the futex words move, so a waiter that loads a bumped word (acquire)
	 * sees it, and one that loaded the old word fails or leaves futex_wait.
	 */
	store_release(&cc->revoked, 1u);
	for (size_t i = 0; i < nconn; i++) {
		conn_wake_all(&cc->conns[i]);
		if (cc->gconns)
			conn_wake_all(&cc->gconns[i]);
		wake_all(&cc->mbox[i].seq);
	}
}

static int cpu_comm_broken(void *priv)
{
	const struct cpu_comm *cc = priv;

	/* P1'': pairs with P1 in run_item(). */
	return load_acquire(&cc->broken) != 0;
}

static void cpu_comm_teardown(void *priv)
{
	comm_free(priv);
}

static void cpu_device_name(uint32_t dev, char *out, uint32_t outlen)
{
	snprintf(out, outlen, "cpu%u", dev);
}

static int cpu_device_active(uint32_t dev)
{
	return (int)load_acquire(&devs[dev].active);
}

static void cpu_fini(void)
{
	store_relaxed(&stopping, 1u);
	for (uint32_t d = 0; d < ndevs; d++) {
		for (uint32_t c = 0; c < nchan; c++)
			chan_wake(&devs[d].chans[c]);
		for (uint32_t c = 0; c < nchan; c++)
			if (devs[d].chans[c].started)
				pthread_join(devs[d].chans[c].thread, NULL);
		for (uint32_t c = 0; c < nchan; c++)
			free(devs[d].chans[c].mem);
		munmap(devs[d].fifo, sizeof(*devs[d].fifo));
		pthread_mutex_destroy(&devs[d].start_lock);
	}
	free(devs);
	devs = NULL;
}

/* A new config was published (scheduler thread): take the one key read here. */
static void cpu_configure(const struct collc_config *cfg)
{
	store_relaxed(&exec_spin_us, cfg->exec_spin_us);
}

static struct exec_backend cpu_backend = {
	.name = "cpu",
	.backend = COLLC_BACKEND_CPU,
	.caps = EXEC_CAP_HOST_RANKS | EXEC_CAP_ONESHOT_INPLACE | EXEC_CAP_NET_RELAY |
		EXEC_CAP_NET_HIER,
	/* Its communicators outlive fini: sched_release() tears them down. */
	.fini_frees = 0,
	.fini = cpu_fini,
	.fifo = cpu_fifo,
	.kick = cpu_kick,
	.gate_decision = cpu_gate_decision,
	.gate_cancel = cpu_gate_cancel,
	.gate_outcome = cpu_gate_outcome,
	.place = cpu_place,
	.comm_setup = cpu_comm_setup,
	.comm_abort = cpu_comm_abort,
	.comm_setup_part = cpu_comm_setup_part,
	.comm_link = cpu_comm_link,
	.comm_broken = cpu_comm_broken,
	.comm_teardown = cpu_comm_teardown,
	.device_name = cpu_device_name,
	.device_active = cpu_device_active,
	.configure = cpu_configure,
};

int exec_cpu_init(const struct exec_init *init, const struct exec_backend **ret)
{
	uint32_t ndevices = init->ndevices ? init->ndevices : COLLC_MAX_RANKS;
	uint32_t max_channels = init->max_channels ? init->max_channels : 4;

	if (ndevices < 1 || ndevices > COLLC_MAX_RANKS || max_channels < 1 ||
	    max_channels > COLLC_MAX_CHANNELS)
		return -EINVAL;
	devs = calloc(ndevices, sizeof(*devs));
	if (!devs)
		return -ENOMEM;
	ndevs = ndevices;
	nchan = max_channels;
	notify = init->notify;
	notify_skipped = init->notify_skipped;
	store_relaxed(&exec_spin_us, init->cfg->exec_spin_us);
	for (uint32_t d = 0; d < ndevices; d++) {
		devs[d].id = d;
		pthread_mutex_init(&devs[d].start_lock, NULL);
		devs[d].fifo = mmap(NULL, sizeof(*devs[d].fifo), PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (devs[d].fifo == MAP_FAILED) {
			for (uint32_t e = 0; e < d; e++)
				munmap(devs[e].fifo, sizeof(*devs[e].fifo));
			free(devs);
			return -ENOMEM;
		}
	}
	cpu_backend.ndevices = ndevices;
	cpu_backend.max_channels = max_channels;
	cpu_backend.defaults = (struct cfg_exec_defaults){
		.channels = max_channels < 2 ? max_channels : 2,
		/*
		 * Channels are host threads here, asleep when idle: collectives
		 * keep to channel 0 and up, where the last one ran (rotate_channels=1
		 * runs the GPUs' rotation on host threads, as the tests do).
		 */
		.rotate_channels = 0,
		/* memcpy between buffers all in collcd: reading or writing peers costs the same. */
		.copy_push = 0,
		.channel_min_bytes = 256 << 10,
		/* On host threads the Simple one-shot is faster at every size (bench/RESULTS.md). */
		.oneshot_ll_max_bytes = 0,
		.oneshot_max_bytes = 64 << 10,
		/*
		 * Host threads: two-shot all-reduces beat the ring from 2 to 8 MiB
		 * and matched it to 64 MiB (2-core VM, 2 ranks, pipelined busbw
		 * 2 MiB 7.3-7.4 against 2.8-2.9 GB/s, 4 MiB 7.5-7.9 against
		 * 2.5-3.4, 16 MiB 6.4-7.1 against 6.7-6.9: bench/RESULTS.md).
		 */
		.twoshot_max_bytes = 16 << 20,
	};
	*ret = &cpu_backend;
	return 0;
}
