/* SPDX-License-Identifier: MIT */
/*
 * The CPU executor: host threads play the persistent grid. Each virtual
 * device has one work FIFO and one thread per channel; every thread reads
 * every item of its device's FIFO in order, runs its channel's share, and
 * publishes work_consumed. Ranks talk over connections (proto/prims.h):
 * 8-slot rings in the receiver's memory with head/tail credit.
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

#include "common/atomics.h"
#include "common/futex.h"
#include "daemon/exec.h"
#include "daemon/exec_cpu.h"
#include "daemon/log.h"
#include "daemon/reduce.h"
#include "proto/prims.h"
#include "proto/shm.h"
#include "proto/wire.h"

uint32_t exec_spin_us = 50;

struct cpu_chan {
	pthread_t thread;
	struct cpu_dev *dev;
	uint32_t id;
	uint8_t started;
};

struct cpu_dev {
	uint32_t id;
	struct collc_work_fifo *fifo;
	pthread_mutex_t start_lock;
	uint32_t active;
	struct cpu_chan chans[COLLC_MAX_CHANNELS];
};

struct cpu_comm {
	uint32_t nranks;
	struct cpu_conn *conns;  /* nranks x max_channels; conn [r][c] is rank r's receive side */
	struct cpu_rank *ranks;
};

static struct cpu_dev *devs;
static uint32_t ndevs, nchan;
static uint32_t stopping;

/* Waiting */

/*
 * Waits until *word >= target: spins, yields, then sleeps on seqw with
 * *waiting raised. Returns -ECANCELED when the device is aborted.
 */
static int wait_ge(struct cpu_dev *d, const uint64_t *word, uint64_t target, uint32_t *seqw,
		   uint32_t *waiting)
{
	uint64_t spin_ns = (uint64_t)load_relaxed(&exec_spin_us) * 1000, t0 = 0;
	int r = 0;

	for (uint32_t i = 0;; i++) {
		/* P1': pairs with P1 in post(): the payload is visible before the counter. */
		if (load_acquire(word) >= target)
			return 0;
		if ((i & 63) == 63) {
			uint64_t t = now_ns();

			if (!t0)
				t0 = t;
			else if (t - t0 > spin_ns)
				break;
			if (load_relaxed(&d->fifo->ctrl.abort))
				return -ECANCELED;
			sched_yield();
		}
		cpu_relax();
	}
	fetch_add(waiting, 1);
	for (;;) {
		uint32_t s = load_acquire(seqw);

		/* W2: pairs with P2 in post(): either we see the counter or it sees waiting. */
		fence_seq_cst();
		if (load_acquire(word) >= target)
			break;
		if (load_relaxed(&d->fifo->ctrl.abort) || load_relaxed(&stopping)) {
			r = -ECANCELED;
			break;
		}
		futex_wait(seqw, s, 20000000);
	}
	fetch_add(waiting, (uint32_t)-1);
	return r;
}

static void post(uint64_t *word, uint64_t value, uint32_t *seqw, uint32_t *waiting)
{
	/* P1: pairs with P1' in wait_ge(): payload first, then the counter. */
	store_release(word, value);
	/* P2: pairs with W2 in wait_ge(). */
	fence_seq_cst();
	if (load_relaxed(waiting)) {
		fetch_add(seqw, 1);
		futex_wake(seqw, INT_MAX);
	}
}

/* Primitives (Simple protocol) */

enum {
	P_RECV = 1 << 0,   /* consume a slot of the receive connection */
	P_SRC = 1 << 1,    /* read the local source buffer */
	P_REDUCE = 1 << 2, /* combine received data with the source */
	P_DST = 1 << 3,    /* write the result to the destination buffer */
	P_SEND = 1 << 4,   /* write the result to a slot of the send connection */
	P_POSTOP = 1 << 5, /* apply the AVG division to the destination */
};

struct prim_ctx {
	struct cpu_dev *dev;
	struct cpu_conn *send, *recv;
	const struct collc_work_item *it;
	size_t es;
};

/*
 * Moves nelem elements through the connections in steps of at most one slot.
 * An empty call still posts one (empty) step so both sides stay in step.
 */
static int prim(struct prim_ctx *x, int flags, const char *src, char *dst, int64_t nelem)
{
	uint64_t bytes = nelem > 0 ? (uint64_t)nelem * x->es : 0;
	uint64_t nsteps = bytes ? collc_div_up(bytes, CPU_SLOT_BYTES) : 1;
	const struct collc_work_item *it = x->it;
	int r;

	for (uint64_t s = 0; s < nsteps; s++) {
		uint64_t off = s * CPU_SLOT_BYTES;
		uint64_t len = bytes ? collc_min_u64(CPU_SLOT_BYTES, bytes - off) : 0;
		size_t n = len / x->es;
		struct cpu_conn *rc = x->recv, *sc = x->send;
		const char *in = NULL, *res;
		char *out = NULL;

		if (flags & P_RECV) {
			r = wait_ge(x->dev, &rc->tail, rc->recv_step + 1, &rc->tail_seq, &rc->recv_waiting);
			if (r < 0)
				return r;
			in = rc->buf + (size_t)collc_slot(rc->recv_step, COLLC_STEPS) * CPU_SLOT_BYTES;
		}
		if (flags & P_SEND) {
			r = wait_ge(x->dev, &sc->head, sc->send_step + 1 > COLLC_STEPS ?
					    sc->send_step + 1 - COLLC_STEPS : 0,
				    &sc->head_seq, &sc->send_waiting);
			if (r < 0)
				return r;
			out = sc->buf + (size_t)collc_slot(sc->send_step, COLLC_STEPS) * CPU_SLOT_BYTES;
		}
		res = (flags & P_RECV) ? in : src + off;
		if (flags & P_REDUCE) {
			char *target = (flags & P_DST) ? dst + off : out;

			red_reduce(target, in, src + off, n, it->dtype, it->redop);
			res = target;
		}
		if (flags & P_DST) {
			if (res != dst + off)
				memmove(dst + off, res, len);
			if (flags & P_POSTOP)
				red_finish(dst + off, n, it->dtype, it->redop, it->nranks);
			res = dst + off;
		}
		if ((flags & P_SEND) && res != out)
			memcpy(out, res, len);
		if (flags & P_SEND)
			post(&sc->tail, ++sc->send_step, &sc->tail_seq, &sc->recv_waiting);
		if (flags & P_RECV)
			post(&rc->head, ++rc->recv_step, &rc->head_seq, &rc->send_waiting);
	}
	return 0;
}

#define SEND                 (P_SRC | P_SEND)
#define RECV                 (P_RECV | P_DST)
#define COPY_SEND            (P_SRC | P_DST | P_SEND)
#define RECV_REDUCE_SEND     (P_RECV | P_SRC | P_REDUCE | P_SEND)
#define RECV_REDUCE_COPY_SEND (P_RECV | P_SRC | P_REDUCE | P_DST | P_SEND | P_POSTOP)
#define RECV_REDUCE_COPY     (P_RECV | P_SRC | P_REDUCE | P_DST | P_POSTOP)
#define RECV_COPY_SEND       (P_RECV | P_DST | P_SEND)

/* Ring algorithms, one channel's share. */

static int64_t clamp_elems(uint64_t size, uint64_t off, uint64_t chunk)
{
	return off >= size ? 0 : (int64_t)collc_min_u64(chunk, size - off);
}

static uint32_t mod(int64_t x, uint32_t n)
{
	return (uint32_t)(((x % n) + n) % n);
}

static int ring_allreduce(struct prim_ctx *x, uint32_t ch)
{
	const struct collc_work_item *it = x->it;
	const char *src = (const char *)(uintptr_t)it->sendbuf;
	char *dst = (char *)(uintptr_t)it->recvbuf;
	uint32_t n = it->nranks, me = it->rank, nch = it->nchannels;
	uint64_t chunk = CPU_CHUNK_BYTES / x->es, count = it->count;
	uint64_t loop = (uint64_t)nch * n * chunk;
	int r = 0;

	for (uint64_t base = 0; base < count && r == 0; base += loop) {
		uint64_t real = collc_min_u64(chunk, collc_div_up(count - base, (uint64_t)nch * n));
#define OFF(j) (base + ((uint64_t)ch * n + (j)) * real)
#define NEL(j) clamp_elems(count, OFF(j), real)
#define B(j) (OFF(j) * x->es)
		uint32_t j = mod((int64_t)me - 1, n);

		r = prim(x, SEND, src + B(j), NULL, NEL(j));
		for (uint32_t k = 2; k < n && r == 0; k++) {
			j = mod((int64_t)me - k, n);
			r = prim(x, RECV_REDUCE_SEND, src + B(j), NULL, NEL(j));
		}
		j = me;
		if (r == 0)
			r = prim(x, RECV_REDUCE_COPY_SEND, src + B(j), dst + B(j), NEL(j));
		for (uint32_t k = 1; k + 1 < n && r == 0; k++) {
			j = mod((int64_t)me - k, n);
			r = prim(x, RECV_COPY_SEND, NULL, dst + B(j), NEL(j));
		}
		j = mod((int64_t)me + 1, n);
		if (r == 0)
			r = prim(x, RECV, NULL, dst + B(j), NEL(j));
#undef OFF
#undef NEL
#undef B
	}
	return r;
}

/*
 * The collectives that move one per-rank block per step walk it in rounds of
 * nchannels chunks; channel ch takes chunk ch of each round.
 */
struct chunk_iter {
	uint64_t size, chunk, base;
	uint32_t nch, ch;
};

static struct chunk_iter chunks(const struct prim_ctx *x, uint32_t ch, uint64_t size)
{
	return (struct chunk_iter){ .size = size, .chunk = CPU_CHUNK_BYTES / x->es,
				    .nch = x->it->nchannels, .ch = ch };
}

static int next_chunk(struct chunk_iter *ci, uint64_t *off, int64_t *nel)
{
	uint64_t real;

	if (ci->base >= ci->size)
		return 0;
	real = collc_min_u64(ci->chunk, collc_div_up(ci->size - ci->base, ci->nch));
	*off = ci->base + (uint64_t)ci->ch * real;
	*nel = clamp_elems(ci->size, *off, real);
	ci->base += (uint64_t)ci->nch * ci->chunk;
	return 1;
}

static int ring_allgather(struct prim_ctx *x, uint32_t ch)
{
	const struct collc_work_item *it = x->it;
	const char *src = (const char *)(uintptr_t)it->sendbuf;
	char *dst = (char *)(uintptr_t)it->recvbuf;
	uint32_t n = it->nranks, me = it->rank;
	uint64_t size = it->count, bb = it->count * x->es;
	struct chunk_iter ci = chunks(x, ch, size);
	uint64_t off;
	int64_t nel;
	int r = 0;

	while (r == 0 && next_chunk(&ci, &off, &nel)) {
		uint64_t ob = off * x->es;

		r = prim(x, COPY_SEND, src + ob, dst + (uint64_t)me * bb + ob, nel);
		for (uint32_t k = 1; k + 1 < n && r == 0; k++)
			r = prim(x, RECV_COPY_SEND, NULL, dst + (uint64_t)mod((int64_t)me - k, n) * bb + ob, nel);
		if (r == 0)
			r = prim(x, RECV, NULL, dst + (uint64_t)mod((int64_t)me + 1, n) * bb + ob, nel);
	}
	return r;
}

static int ring_reduce_scatter(struct prim_ctx *x, uint32_t ch)
{
	const struct collc_work_item *it = x->it;
	const char *src = (const char *)(uintptr_t)it->sendbuf;
	char *dst = (char *)(uintptr_t)it->recvbuf;
	uint32_t n = it->nranks, me = it->rank;
	uint64_t size = it->count, bb = it->count * x->es;
	struct chunk_iter ci = chunks(x, ch, size);
	uint64_t off;
	int64_t nel;
	int r = 0;

	while (r == 0 && next_chunk(&ci, &off, &nel)) {
		uint64_t ob = off * x->es;

		r = prim(x, SEND, src + (uint64_t)mod((int64_t)me - 1, n) * bb + ob, NULL, nel);
		for (uint32_t k = 2; k < n && r == 0; k++)
			r = prim(x, RECV_REDUCE_SEND, src + (uint64_t)mod((int64_t)me - k, n) * bb + ob,
				 NULL, nel);
		if (r == 0)
			r = prim(x, RECV_REDUCE_COPY, src + (uint64_t)me * bb + ob, dst + ob, nel);
	}
	return r;
}

static int ring_broadcast(struct prim_ctx *x, uint32_t ch)
{
	const struct collc_work_item *it = x->it;
	const char *src = (const char *)(uintptr_t)it->sendbuf;
	char *dst = (char *)(uintptr_t)it->recvbuf;
	uint32_t n = it->nranks, me = it->rank, root = (uint32_t)it->root;
	uint64_t size = it->count;
	struct chunk_iter ci = chunks(x, ch, size);
	uint64_t off;
	int64_t nel;
	int r = 0;

	while (r == 0 && next_chunk(&ci, &off, &nel)) {
		uint64_t ob = off * x->es;

		if (me == root)
			r = prim(x, COPY_SEND, src + ob, dst + ob, nel);
		else if ((me + 1) % n == root)
			r = prim(x, RECV, NULL, dst + ob, nel);
		else
			r = prim(x, RECV_COPY_SEND, NULL, dst + ob, nel);
	}
	return r;
}

static int ring_reduce(struct prim_ctx *x, uint32_t ch)
{
	const struct collc_work_item *it = x->it;
	const char *src = (const char *)(uintptr_t)it->sendbuf;
	char *dst = (char *)(uintptr_t)it->recvbuf;
	uint32_t n = it->nranks, me = it->rank, root = (uint32_t)it->root;
	uint64_t size = it->count;
	struct chunk_iter ci = chunks(x, ch, size);
	uint64_t off;
	int64_t nel;
	int r = 0;

	while (r == 0 && next_chunk(&ci, &off, &nel)) {
		uint64_t ob = off * x->es;

		if (me == root)
			r = prim(x, RECV_REDUCE_COPY, src + ob, dst + ob, nel);
		else if (mod((int64_t)me - 1, n) == root)
			r = prim(x, SEND, src + ob, NULL, nel);
		else
			r = prim(x, RECV_REDUCE_SEND, src + ob, NULL, nel);
	}
	return r;
}

/* One rank alone: its result is its own input. */
static void single_rank(const struct collc_work_item *it, size_t es, uint32_t ch)
{
	const char *src = (const char *)(uintptr_t)it->sendbuf;
	char *dst = (char *)(uintptr_t)it->recvbuf;
	uint64_t per = collc_div_up(it->count, it->nchannels);
	uint64_t off = (uint64_t)ch * per, n;

	if (off >= it->count || !dst)
		return;
	n = collc_min_u64(per, it->count - off);
	if (src != dst)
		memmove(dst + off * es, src + off * es, n * es);
	if (it->coll != COLLC_OP_ALLGATHER && it->coll != COLLC_OP_BROADCAST)
		red_finish(dst + off * es, n, it->dtype, it->redop, 1);
}

static int run_item(struct cpu_dev *d, uint32_t ch, const struct collc_work_item *it)
{
	struct cpu_rank *rk = (struct cpu_rank *)(uintptr_t)it->comm_dev;
	struct prim_ctx x = {
		.dev = d,
		.send = rk->send[ch],
		.recv = rk->recv[ch],
		.it = it,
		.es = red_dtype_size(it->dtype),
	};

	if (it->nranks == 1) {
		single_rank(it, x.es, ch);
		return 0;
	}
	switch (it->coll) {
	case COLLC_OP_ALLREDUCE:
		return ring_allreduce(&x, ch);
	case COLLC_OP_ALLGATHER:
		return ring_allgather(&x, ch);
	case COLLC_OP_REDUCE_SCATTER:
		return ring_reduce_scatter(&x, ch);
	case COLLC_OP_BROADCAST:
		return ring_broadcast(&x, ch);
	case COLLC_OP_REDUCE:
		return ring_reduce(&x, ch);
	}
	return -EINVAL;
}

/* Channel threads */

static int wait_item(struct cpu_dev *d, const struct collc_work_item *slot, uint64_t want)
{
	struct collc_fifo_ctrl *ctl = &d->fifo->ctrl;
	uint64_t spin_ns = (uint64_t)load_relaxed(&exec_spin_us) * 1000, t0 = now_ns();

	for (uint32_t i = 0;; i++) {
		/* R2: pairs with W1 in the scheduler: the item is whole before its seq. */
		if (load_acquire(&slot->seq) == want)
			return 0;
		if (load_relaxed(&stopping))
			return -ECANCELED;
		if ((i & 63) == 63 && now_ns() - t0 > spin_ns)
			break;
		cpu_relax();
	}
	fetch_add(&ctl->exec_sleep, 1);
	for (;;) {
		uint32_t b = load_acquire(&ctl->bell);

		/* K1: pairs with K2 in cpu_kick(): we see the seq or it sees exec_sleep. */
		fence_seq_cst();
		if (load_acquire(&slot->seq) == want || load_relaxed(&stopping))
			break;
		futex_wait(&ctl->bell, b, 200000000);
	}
	fetch_add(&ctl->exec_sleep, (uint32_t)-1);
	return load_acquire(&slot->seq) == want ? 0 : -ECANCELED;
}

static void *chan_main(void *arg)
{
	struct cpu_chan *c = arg;
	struct cpu_dev *d = c->dev;
	char name[16];

	snprintf(name, sizeof(name), "collc-d%u-c%u", d->id, c->id);
	pthread_setname_np(pthread_self(), name);
	for (uint64_t pos = 0;; pos++) {
		const struct collc_work_item *slot = &d->fifo->items[pos & (COLLC_FIFO_DEPTH - 1)];
		struct collc_work_item it;

		if (wait_item(d, slot, pos + 1) < 0)
			break;
		it = *slot;
		if (it.kind == COLLC_WORK_COLL && c->id < it.nchannels &&
		    !load_relaxed(&d->fifo->ctrl.abort))
			run_item(d, c->id, &it);
		/* E1: pairs with F1/F2 in the scheduler: results are written, the slot is free. */
		store_release(&d->fifo->ctrl.work_consumed[c->id].value, pos + 1);
		sched_notify();
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
		d->chans[c].dev = d;
		d->chans[c].id = c;
		r = -pthread_create(&d->chans[c].thread, NULL, chan_main, &d->chans[c]);
		if (r < 0) {
			log_err("device %u: channel thread: %s", d->id, strerror(-r));
			break;
		}
		d->chans[c].started = 1;
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

static void cpu_kick(uint32_t dev)
{
	struct collc_fifo_ctrl *ctl = &devs[dev].fifo->ctrl;

	/* K2: pairs with K1 in wait_item(). */
	fence_seq_cst();
	if (load_relaxed(&ctl->exec_sleep)) {
		fetch_add(&ctl->bell, 1);
		futex_wake(&ctl->bell, INT_MAX);
	}
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

static int cpu_comm_setup(uint32_t nranks, const uint32_t *devids, uint64_t *ret_comm_dev,
			  void **ret_priv)
{
	struct cpu_comm *cc = calloc(1, sizeof(*cc));
	size_t nconn = (size_t)nranks * nchan;
	int r = -ENOMEM;

	if (!cc)
		return -ENOMEM;
	cc->nranks = nranks;
	cc->conns = aligned_alloc(64, nconn * sizeof(*cc->conns));
	cc->ranks = calloc(nranks, sizeof(*cc->ranks));
	if (!cc->conns || !cc->ranks)
		goto err_free;
	memset(cc->conns, 0, nconn * sizeof(*cc->conns));
	for (size_t i = 0; i < nconn; i++) {
		/* Untouched pages cost nothing: small collectives use the first slots only. */
		cc->conns[i].buf = mmap(NULL, CPU_CONN_BYTES, PROT_READ | PROT_WRITE,
					MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (cc->conns[i].buf == MAP_FAILED) {
			cc->conns[i].buf = NULL;
			goto err_free;
		}
	}
	for (uint32_t rk = 0; rk < nranks; rk++)
		for (uint32_t c = 0; c < nchan; c++) {
			cc->ranks[rk].recv[c] = &cc->conns[(size_t)rk * nchan + c];
			cc->ranks[rk].send[c] = &cc->conns[(size_t)((rk + 1) % nranks) * nchan + c];
		}
	for (uint32_t rk = 0; rk < nranks; rk++) {
		r = dev_start(&devs[devids[rk]]);
		if (r < 0)
			goto err_free;
		ret_comm_dev[rk] = (uint64_t)(uintptr_t)&cc->ranks[rk];
	}
	*ret_priv = cc;
	return 0;

err_free:
	if (cc->conns)
		for (size_t i = 0; i < nconn; i++)
			if (cc->conns[i].buf)
				munmap(cc->conns[i].buf, CPU_CONN_BYTES);
	free(cc->conns);
	free(cc->ranks);
	free(cc);
	return r;
}

static void cpu_comm_teardown(void *priv)
{
	struct cpu_comm *cc = priv;

	for (size_t i = 0; i < (size_t)cc->nranks * nchan; i++)
		munmap(cc->conns[i].buf, CPU_CONN_BYTES);
	free(cc->conns);
	free(cc->ranks);
	free(cc);
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
		struct collc_fifo_ctrl *ctl = &devs[d].fifo->ctrl;

		fetch_add(&ctl->bell, 1);
		futex_wake(&ctl->bell, INT_MAX);
		for (uint32_t c = 0; c < nchan; c++)
			if (devs[d].chans[c].started)
				pthread_join(devs[d].chans[c].thread, NULL);
		munmap(devs[d].fifo, sizeof(*devs[d].fifo));
		pthread_mutex_destroy(&devs[d].start_lock);
	}
	free(devs);
	devs = NULL;
}

static struct exec_backend cpu_backend = {
	.name = "cpu",
	.backend = COLLC_BACKEND_CPU,
	.fini = cpu_fini,
	.fifo = cpu_fifo,
	.kick = cpu_kick,
	.place = cpu_place,
	.comm_setup = cpu_comm_setup,
	.comm_teardown = cpu_comm_teardown,
	.device_name = cpu_device_name,
	.device_active = cpu_device_active,
};

int exec_cpu_init(uint32_t ndevices, uint32_t max_channels, const struct exec_backend **ret)
{
	if (ndevices < 1 || ndevices > COLLC_MAX_RANKS || max_channels < 1 ||
	    max_channels > COLLC_MAX_CHANNELS)
		return -EINVAL;
	devs = calloc(ndevices, sizeof(*devs));
	if (!devs)
		return -ENOMEM;
	ndevs = ndevices;
	nchan = max_channels;
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
	*ret = &cpu_backend;
	return 0;
}
