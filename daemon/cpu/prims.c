/* SPDX-License-Identifier: MIT */
/*
 * The CPU executor's waiting and primitives: Simple, LL and LL128 steps over
 * one connection each way (proto/prims.h has the arithmetic and the names of
 * the orderings: S1/R1, R2/S2, W-LL/R-LL, W128/R128).
 *
 * Every wait spins, yields, then sleeps on a futex word; whoever makes the
 * awaited condition true wakes it (P2/W2 below).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "common/atomics.h"
#include "common/futex.h"
#include "daemon/cpu/internal.h"
#include "daemon/cpu/reduce.h"
#include "proto/prims.h"

/* Waiting */

int cpu_cancelled(const struct cpu_run *x)
{
	/* A1': a waiter that woke on cpu_comm_abort()'s bump of its futex word sees revoked (A1). */
	return load_acquire(x->revoked) || load_relaxed(x->abort) || load_relaxed(x->stopping);
}

int cpu_wait(const struct cpu_run *x, cpu_ready_fn ready, void *arg, uint32_t *seqw,
	     uint32_t *waiting)
{
	uint64_t spin_ns = (uint64_t)load_relaxed(&exec_spin_us) * 1000, t0 = 0;
	int r = 0;

	for (uint32_t i = 0;; i++) {
		if (ready(arg))
			return 0;
		if ((i & 63) == 63) {
			uint64_t t = now_ns();

			if (!t0)
				t0 = t;
			else if (t - t0 > spin_ns)
				break;
			if (cpu_cancelled(x))
				return -ECANCELED;
			sched_yield();
		}
		cpu_relax();
	}
	fetch_add(waiting, 1);
	for (;;) {
		uint32_t s = load_acquire(seqw);

		/* W2: pairs with P2 in cpu_wake(): either we see the condition or it sees *waiting. */
		fence_seq_cst();
		if (ready(arg))
			break;
		if (cpu_cancelled(x)) {
			r = -ECANCELED;
			break;
		}
		futex_wait(seqw, s, 20000000);
	}
	fetch_add(waiting, (uint32_t)-1);
	return r;
}

void cpu_wake(uint32_t *seqw, uint32_t *waiting)
{
	/* P2: pairs with W2 in cpu_wait(). */
	fence_seq_cst();
	if (load_relaxed(waiting)) {
		fetch_add(seqw, 1);
		futex_wake(seqw, INT_MAX);
	}
}

void cpu_post(uint64_t *word, uint64_t value, uint32_t *seqw, uint32_t *waiting)
{
	/* P1: pairs with P1' in ge_ready(): what we wrote before is visible with the value. */
	store_release(word, value);
	cpu_wake(seqw, waiting);
}

struct ge_arg {
	const uint64_t *word;
	uint64_t target;
};

static int ge_ready(void *arg)
{
	struct ge_arg *g = arg;

	/* P1': pairs with P1 in cpu_post(). */
	return load_acquire(g->word) >= g->target;
}

int cpu_wait_ge(const struct cpu_run *x, const uint64_t *word, uint64_t target, uint32_t *seqw,
		uint32_t *waiting)
{
	struct ge_arg g = { word, target };

	if (ge_ready(&g))
		return 0;
	return cpu_wait(x, ge_ready, &g, seqw, waiting);
}

/* Credit and Simple data readiness, decided by proto/prims.h */

struct step_arg {
	const uint64_t *word;
	uint64_t step;
};

static int can_send(void *arg)
{
	struct step_arg *a = arg;

	/* S2: pairs with R2 in recv_end(): the receiver read the slot we are about to overwrite. */
	return collc_simple_can_send(load_acquire(a->word), a->step, 1, COLLC_STEPS);
}

static int can_recv(void *arg)
{
	struct step_arg *a = arg;

	/* R1: pairs with S1 in send_end(): the payload is visible before tail. */
	return collc_simple_can_recv(load_acquire(a->word), a->step);
}

static int wait_step(const struct cpu_run *x, cpu_ready_fn ready, const uint64_t *word,
		     uint64_t step, uint32_t *seqw, uint32_t *waiting)
{
	struct step_arg a = { word, step };

	if (ready(&a))
		return 0;
	return cpu_wait(x, ready, &a, seqw, waiting);
}

static char *slot_of(const struct cpu_link *l, uint64_t step)
{
	return l->buf +
	       collc_slot_offset(step, COLLC_STEPS, collc_step_bytes(l->buf_bytes, COLLC_STEPS));
}

/* LL: 16-byte lines, each {data, flag} half one 8-byte atomic access (cpu/internal.h). */

struct ll_arg {
	const union collc_ll_line *line;
	uint32_t flag;
	uint64_t payload;
};

static int ll_ready(void *arg)
{
	struct ll_arg *a = arg;

	return cpu_ll_load(a->line, a->flag, &a->payload);
}

static int ll_recv(const struct cpu_run *x, struct cpu_link *l, uint64_t len)
{
	union collc_ll_line *lines = (void *)slot_of(l, l->recv_step);
	struct ll_arg a = { .flag = collc_ll_flag(l->recv_step) };
	uint64_t nlines = collc_ll_lines(len);
	int r;

	for (uint64_t i = 0; i < nlines; i++) {
		uint64_t off = i * COLLC_LL_LINE_PAYLOAD;

		a.line = &lines[i];
		if (!ll_ready(&a)) {
			r = cpu_wait(x, ll_ready, &a, &l->tail_seq, &l->recv_waiting);
			if (r < 0)
				return r;
		}
		memcpy(x->stage_in + off, &a.payload,
		       collc_min_u64(COLLC_LL_LINE_PAYLOAD, len - off));
	}
	return 0;
}

static void ll_send(struct cpu_link *l, const char *res, uint64_t len)
{
	union collc_ll_line *lines = (void *)slot_of(l, l->send_step);
	uint32_t flag = collc_ll_flag(l->send_step);
	uint64_t nlines = collc_ll_lines(len);

	for (uint64_t i = 0; i < nlines; i++) {
		uint64_t off = i * COLLC_LL_LINE_PAYLOAD, p = 0;

		memcpy(&p, res + off, collc_min_u64(COLLC_LL_LINE_PAYLOAD, len - off));
		cpu_ll_store(&lines[i], p, flag);
	}
	cpu_wake(&l->tail_seq, &l->recv_waiting);
}

/* LL128: 128-byte lines, 15 data words and a flag word. */

struct ll128_arg {
	uint64_t *line;
	uint64_t flag;
	uint64_t copy[COLLC_LL128_LINE_WORDS];
};

static int ll128_ready(void *arg)
{
	struct ll128_arg *a = arg;

	/* R128: pairs with W128 in ll128_send(): the flag word with acquire, the data words after. */
	a->copy[COLLC_LL128_FLAG_WORD] = load_acquire(&a->line[COLLC_LL128_FLAG_WORD]);
	return collc_ll128_ready(a->copy, a->flag);
}

static int ll128_recv(const struct cpu_run *x, struct cpu_link *l, uint64_t len)
{
	char *slot = slot_of(l, l->recv_step);
	struct ll128_arg a = { .flag = collc_ll128_flag(l->recv_step) };
	uint64_t nlines = collc_ll128_lines(len);
	int r;

	for (uint64_t i = 0; i < nlines; i++) {
		uint64_t off = i * COLLC_LL128_LINE_PAYLOAD;

		a.line = (uint64_t *)(slot + i * COLLC_LL128_LINE_BYTES);
		if (!ll128_ready(&a)) {
			r = cpu_wait(x, ll128_ready, &a, &l->tail_seq, &l->recv_waiting);
			if (r < 0)
				return r;
		}
		/* R128 (cont.): only now the data words; see collc_ll128_data_word() for the layout. */
		memcpy(x->stage_in + off, a.line,
		       collc_min_u64(COLLC_LL128_LINE_PAYLOAD, len - off));
	}
	return 0;
}

static void ll128_send(struct cpu_link *l, const char *res, uint64_t len)
{
	char *slot = slot_of(l, l->send_step);
	uint64_t flag = collc_ll128_flag(l->send_step);
	uint64_t nlines = collc_ll128_lines(len);

	for (uint64_t i = 0; i < nlines; i++) {
		uint64_t off = i * COLLC_LL128_LINE_PAYLOAD;
		uint64_t *line = (uint64_t *)(slot + i * COLLC_LL128_LINE_BYTES);

		memcpy(line, res + off, collc_min_u64(COLLC_LL128_LINE_PAYLOAD, len - off));
		/*
		 * W128: pairs with R128 in ll128_ready(): the 15 data words, then the
		 * flag word with release (a release fence and the store in one).
		 */
		store_release(&line[COLLC_LL128_FLAG_WORD], flag);
	}
	cpu_wake(&l->tail_seq, &l->recv_waiting);
}

/* One step of a primitive */

/*
 * After a post of tail or head: a network proxy sleeping on this link
 * (exec_link.watch) wakes through its eventfd. One relaxed load on links
 * without a proxy.
 */
static void proxy_kick(struct cpu_link *l)
{
	uint64_t one = 1;

	/*
	 * K2: pairs with K1 in the proxy (node.c sleep_prepare()): cpu_post()'s
	 * fence orders the post before this load, so either the proxy saw the
	 * post or we see it armed. The exchange makes one poster write.
	 */
	if (!load_relaxed(&l->proxy_armed) ||
	    !__atomic_exchange_n(&l->proxy_armed, 0u, __ATOMIC_ACQUIRE))
		return;
	if (write(load_relaxed(&l->proxy_fd), &one, sizeof(one)) < 0) {
		/* Counter full: the proxy is awake anyway. */
	}
}

/* Steps a call of bytes takes: an empty call still takes one. */
static uint64_t prim_steps(const struct cpu_run *x, uint64_t bytes)
{
	return bytes ? collc_div_up(bytes, x->step_bytes) : 1;
}

/* Payload bytes of step s of a call of bytes (both ends of a link compute it alike). */
static uint64_t prim_step_len(const struct cpu_run *x, uint64_t bytes, uint64_t s)
{
	return bytes ? collc_min_u64(x->step_bytes, bytes - s * x->step_bytes) : 0;
}

void cpu_prims_ahead(struct cpu_run *x,
		     int (*fn)(struct cpu_run *x, int *ret_flags, char **ret_dst,
			       int64_t *ret_nelem),
		     void *arg)
{
	x->ahead = fn;
	x->ahead_arg = arg;
	x->la = (struct cpu_ahead){ .at = x->recv->recv_step };
}

/*
 * Walks the item's calls ahead to its next receive step (link step la.at);
 * where it lands: in dst when the call only lands it there (no reduction on
 * the way), else its slot (NULL). 0 when the item has no more.
 */
static int ahead_next(struct cpu_run *x, char **ret_dst, uint32_t *ret_len)
{
	struct cpu_ahead *a = &x->la;
	uint64_t off, len;

	while (a->j == a->n) {
		int64_t nelem = 0;

		if (a->over || !x->ahead(x, &a->flags, &a->dst, &nelem)) {
			a->over = 1;
			return 0;
		}
		a->bytes = nelem > 0 ? (uint64_t)nelem * x->es : 0;
		a->j = 0;
		a->n = (a->flags & COLLC_P_RECV) ? prim_steps(x, a->bytes) : 0;
	}
	off = a->j * x->step_bytes;
	len = prim_step_len(x, a->bytes, a->j++);
	*ret_len = (uint32_t)len;
	*ret_dst = (a->flags & COLLC_P_DST) && !(a->flags & COLLC_P_REDUCE) && a->dst && len
			   ? a->dst + off
			   : NULL;
	a->at++;
	return 1;
}

/*
 * Names where the link's steps land, up to the receiver's window (the
 * proxy may post up to head + COLLC_STEPS): the item's own, walked ahead
 * (cpu_run.ahead), and none past its end: the next item names its own, so
 * they too may land in its buffers (naming the next item's first steps
 * slots, to be posted while this item ends, measured no faster:
 * bench/RESULTS.md). Without a walk ahead, every step of the window lands
 * in its slot. Returns 1 when it named any.
 */
static int dst_publish(struct cpu_run *x, struct cpu_link *l)
{
	uint64_t k = l->dst_pub, end = l->recv_step + COLLC_STEPS;
	uint64_t first = k;

	if (!load_relaxed(&l->recv_direct))
		return 0;
	/* Steps consumed before the proxy set recv_direct need no name. */
	if (k < l->recv_step)
		k = l->recv_step;
	/* Steps named before this item started (slots, by an item without a walk ahead). */
	while (x->ahead && x->la.at < k) {
		char *d;
		uint32_t len;

		if (!ahead_next(x, &d, &len))
			break;
	}
	for (; k < end; k++) {
		char *d = NULL;
		uint32_t len = 0;

		if (x->ahead && !ahead_next(x, &d, &len))
			break;
		l->step_dst[k % COLLC_STEPS] = d;
		l->dst_len[k % COLLC_STEPS] = len;
	}
	if (k == first)
		return 0;
	/* D1: pairs with D1' in the proxy (exec_link.known): step_dst and dst_len, then dst_pub. */
	store_release(&l->dst_pub, k);
	return 1;
}

/* Where step lands: where dst_publish() named it (the rank's buffer), or its slot. */
static char *landed_at(const struct cpu_link *l, uint64_t step)
{
	char *d = load_relaxed(&l->recv_direct) ? l->step_dst[step % COLLC_STEPS] : NULL;

	return d ? d : slot_of(l, step);
}

/* Waits for step recv_step and returns its payload (in the slot, the rank's buffer, or staged). */
static int recv_begin(struct cpu_run *x, uint64_t len, const char **ret_in)
{
	struct cpu_link *l = x->recv;
	int r;

	switch (l->proto) {
	case COLLC_PROTO_SIMPLE:
		if (dst_publish(x, l)) {
			/* K2 as in cpu_post(): the names are stored before the proxy's arm is read. */
			fence_seq_cst();
			proxy_kick(l);
		}
		r = wait_step(x, can_recv, &l->tail, l->recv_step, &l->tail_seq, &l->recv_waiting);
		*ret_in = landed_at(l, l->recv_step);
		/*
		 * After R1: its sender, or the proxy that received it from another
		 * daemon, stored the step's length before tail (S1). Both ends
		 * compute it from what the daemons agreed; another length means a
		 * broken or hostile peer, and the rest of the slot is stale.
		 */
		if (r == 0 && l->step_len[l->recv_step % COLLC_STEPS] != len)
			return -EPROTO;
		return r;
	case COLLC_PROTO_LL:
		*ret_in = x->stage_in;
		return ll_recv(x, l, len);
	default:
		*ret_in = x->stage_in;
		return ll128_recv(x, l, len);
	}
}

/* R2: pairs with S2 in can_send(): the step was read before its slot is handed back. */
static void recv_end(struct cpu_run *x)
{
	struct cpu_link *l = x->recv;

	l->recv_step++;
	/* The step the proxy may post next is named before the head that lets it (D1). */
	if (l->proto == COLLC_PROTO_SIMPLE)
		dst_publish(x, l);
	cpu_post(&l->head, l->recv_step, &l->head_seq, &l->send_waiting);
	proxy_kick(l);
}

/* Waits for credit for step send_step; returns where the step's payload goes. */
static int send_begin(struct cpu_run *x, char **ret_out)
{
	struct cpu_link *l = x->send;
	int r = wait_step(x, can_send, &l->head, l->send_step, &l->head_seq, &l->send_waiting);

	*ret_out = l->proto == COLLC_PROTO_SIMPLE ? slot_of(l, l->send_step) : x->stage_out;
	return r;
}

/*
 * Publishes the step whose payload is res (len bytes). direct: res lies in
 * the item's own buffers, where a proxy may send it from.
 */
static void send_end(struct cpu_run *x, char *out, const char *res, uint64_t len, int direct)
{
	struct cpu_link *l = x->send;

	switch (l->proto) {
	case COLLC_PROTO_SIMPLE:
		direct = direct && len && res != out && load_relaxed(&l->direct);
		l->step_src[l->send_step % COLLC_STEPS] = direct ? res : NULL;
		x->direct_steps += (uint64_t)direct;
		if (len && res != out && !direct)
			memcpy(out, res, len);
		/* A network proxy sends this many bytes of the slot (published with tail). */
		l->step_len[l->send_step % COLLC_STEPS] = (uint32_t)len;
		/* S1: pairs with R1 in can_recv(): the payload, then tail (release). */
		cpu_post(&l->tail, l->send_step + 1, &l->tail_seq, &l->recv_waiting);
		proxy_kick(l);
		break;
	case COLLC_PROTO_LL:
		ll_send(l, res, len);
		break;
	default:
		ll128_send(l, res, len);
		break;
	}
	l->send_step++;
}

static const char *at_c(const char *p, uint64_t off)
{
	return p ? p + off : NULL;
}

static char *at(char *p, uint64_t off)
{
	return p ? p + off : NULL;
}

int cpu_prim(struct cpu_run *x, int flags, const char *src, char *dst, int64_t nelem)
{
	const struct collc_work_item *it = x->it;
	uint64_t bytes = nelem > 0 ? (uint64_t)nelem * x->es : 0;
	uint64_t sb = x->step_bytes;
	uint64_t nsteps = prim_steps(x, bytes);
	int r;

	for (uint64_t s = 0; s < nsteps; s++) {
		uint64_t off = s * sb;
		uint64_t len = prim_step_len(x, bytes, s);
		size_t n = len / x->es;
		const char *in = NULL, *res;
		char *out = NULL, *d = at(dst, off);

		/* A streaming item may never wait long enough to see an abort: look every 16 steps. */
		if ((++x->nsteps & 15) == 0 && cpu_cancelled(x))
			return -ECANCELED;
		if (flags & COLLC_P_RECV) {
			r = recv_begin(x, len, &in);
			if (r < 0)
				return r;
		}
		if (flags & COLLC_P_SEND) {
			r = send_begin(x, &out);
			if (r < 0)
				return r;
		}
		res = (flags & COLLC_P_RECV) ? in : at_c(src, off);
		if (flags & COLLC_P_REDUCE) {
			char *target = (flags & COLLC_P_DST) ? d : out;

			red_reduce(target, in, at_c(src, off), n, it->dtype, it->redop);
			res = target;
		}
		if (flags & COLLC_P_DST) {
			if (len && res != d)
				memmove(d, res, len);
			if (flags & COLLC_P_POSTOP)
				red_finish(d, n, it->dtype, it->redop, it->nranks);
			res = d;
		}
		/*
		 * Not a received slot (handed back below) nor scratch: the item's own
		 * buffers (in, too, when the step landed straight in dst).
		 */
		if (flags & COLLC_P_SEND)
			send_end(x, out, res, len,
				 x->direct_ok && (res != in || (in && in == d)) && res != out);
		if (flags & COLLC_P_RECV)
			recv_end(x);
	}
	return 0;
}

int cpu_prims_flush(struct cpu_run *x)
{
	struct cpu_link *l = x->send;

	if (!x->direct_steps)
		return 0;
	/* S2: pairs with R2 in the proxy's post of head: it is done with every step. */
	return cpu_wait_ge(x, &l->head, l->send_step, &l->head_seq, &l->send_waiting);
}

int cpu_prims_setup(struct cpu_run *x)
{
	struct cpu_conn *s = x->rk->send[x->ch], *r = x->rk->recv[x->ch];

	switch (x->it->proto) {
	case COLLC_PROTO_SIMPLE:
		x->send = &s->simple;
		x->recv = &r->simple;
		x->step_bytes = collc_simple_slot_bytes(x->send->buf_bytes, COLLC_STEPS);
		return 0;
	case COLLC_PROTO_LL:
		x->send = &s->ll;
		x->recv = &r->ll;
		x->step_bytes = collc_ll_step_bytes(CPU_LL_BUFFER_BYTES, COLLC_STEPS);
		return 0;
	case COLLC_PROTO_LL128:
		x->send = &s->ll128;
		x->recv = &r->ll128;
		x->step_bytes = collc_ll128_step_bytes(CPU_LL128_BUFFER_BYTES, COLLC_STEPS);
		return 0;
	}
	return -EINVAL;
}

uint64_t cpu_chunk_elems(const struct cpu_run *x)
{
	uint64_t b = x->it->chunk_bytes;

	if (!b && x->it->proto != COLLC_PROTO_SIMPLE)
		b = x->step_bytes;
	else if (!b && x->send->buf_bytes == CPU_NET_SIMPLE_BUFFER_BYTES)
		b = CPU_NET_CHUNK_BYTES; /* a communicator that spans daemons (cpu.h) */
	else if (!b)
		b = collc_chunk_bytes(x->send->buf_bytes, COLLC_STEPS, CPU_CHUNK_STEPS);
	return collc_max_u64(1, b / x->es);
}
