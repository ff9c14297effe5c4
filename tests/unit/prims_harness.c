/* SPDX-License-Identifier: MIT */
#include "prims_harness.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "proto/prims.h"

/* Producer operations within one step; a step is a list of them. */
enum {
	OP_PAYLOAD,  /* Simple: the whole slot */
	OP_TAIL,     /* Simple: tail = step + 1 */
	OP_LL_LINE,  /* LL: one line, one 16-byte store */
	OP_LL128_D0, /* LL128: data words 0..7 of a line */
	OP_LL128_D1, /* LL128: data words 8..14 of a line */
	OP_LL128_FLAG,
};

struct conn {
	enum ph_proto proto;
	uint32_t steps;
	uint32_t faults;
	uint64_t first;
	uint64_t nsteps;
	uint32_t words;    /* payload words (8 bytes) per step */
	uint64_t lines;    /* LL / LL128 lines per step */
	uint32_t p_ops[3]; /* LL128: operations per line, in store order */
	uint32_t p_nops;

	/* The receiver's memory: written by the producer, read by the consumer. */
	uint64_t *simple;        /* steps x words */
	union collc_ll_line *ll; /* steps x lines */
	uint64_t *ll128;         /* steps x lines x 16 */
	uint64_t tail;           /* Simple; written by the producer */
	uint64_t head;           /* written by the consumer */

	uint64_t p_step;  /* the step the producer is on */
	uint32_t p_phase; /* operations of p_step done */
	uint64_t c_step;  /* the step the consumer is on */
	uint32_t c_phase; /* accesses of c_step done */

	uint64_t rng;
	int corrupt;
	struct ph_result res;
};

static uint64_t value(uint64_t step, uint32_t word)
{
	/* Never 0 (fresh memory), unique per (step, word). */
	return ((step + 1) << 16) | (word & 0xffffu);
}

static int64_t value_step(const struct conn *c, uint64_t v)
{
	if (v == 0)
		return PH_SEEN_FRESH;
	return (int64_t)((v >> 16) - 1 - c->first);
}

static uint32_t ll_flag(const struct conn *c, uint64_t step)
{
	return c->faults & PH_F_LL_CONST_FLAG ? 1u : collc_ll_flag(step);
}

/*
 * Has the producer made any store for step to the unit the consumer reads
 * (Simple: the slot or tail; LL, LL128: line `line`)?
 */
static int touched(const struct conn *c, uint64_t step, uint32_t line)
{
	uint32_t ops_before = 0;

	if (c->proto == PH_LL)
		ops_before = line;
	else if (c->proto == PH_LL128)
		ops_before = line * c->p_nops;
	return c->p_step > step || (c->p_step == step && c->p_phase > ops_before);
}

/* Producer operations of one step, in store order. */
static uint32_t p_nops(const struct conn *c)
{
	switch (c->proto) {
	case PH_SIMPLE:
		return 2;
	case PH_LL:
		return (uint32_t)c->lines;
	case PH_LL128:
		return (uint32_t)c->lines * c->p_nops;
	}
	return 0;
}

static void p_store(struct conn *c, uint64_t step, uint32_t phase)
{
	uint32_t slot = collc_slot(step, c->steps);
	uint32_t op, i, lo, hi;
	uint64_t line;

	switch (c->proto) {
	case PH_SIMPLE:
		op = phase == 0 ? OP_PAYLOAD : OP_TAIL;
		if (c->faults & PH_F_TAIL_FIRST)
			op = phase == 0 ? OP_TAIL : OP_PAYLOAD;
		if (op == OP_TAIL) {
			c->tail = step + 1;
			return;
		}
		for (i = 0; i < c->words; i++)
			c->simple[(uint64_t)slot * c->words + i] = value(step, i);
		return;
	case PH_LL: {
		union collc_ll_line *dst = &c->ll[slot * c->lines + phase];
		union collc_ll_line l = collc_ll_pack(value(step, phase), ll_flag(c, step));

		if (c->faults & PH_F_LL_NO_FLAG2)
			l.w.flag2 = dst->w.flag2;
		*dst = l;
		return;
	}
	case PH_LL128:
		line = phase / c->p_nops;
		op = c->p_ops[phase % c->p_nops];
		if (op == OP_LL128_FLAG) {
			c->ll128[(slot * c->lines + line) * COLLC_LL128_LINE_WORDS +
				 COLLC_LL128_FLAG_WORD] = collc_ll128_flag(step);
			return;
		}
		lo = op == OP_LL128_D0 ? 0 : 8;
		hi = op == OP_LL128_D0 ? 8 : COLLC_LL128_DATA_WORDS;
		for (i = lo; i < hi; i++) {
			uint64_t w = line * COLLC_LL128_DATA_WORDS + i;

			if (w >= c->words)
				break;
			c->ll128[slot * c->lines * COLLC_LL128_LINE_WORDS +
				 collc_ll128_data_word(w)] = value(step, (uint32_t)w);
		}
		return;
	}
}

static int p_act(struct conn *c)
{
	if (c->p_step == c->first + c->nsteps)
		return 0;
	/* The credit check opens a step: no slot store before it passes. */
	if (c->p_phase == 0 && !collc_simple_can_send(c->head, c->p_step, 1, c->steps))
		return 0;
	p_store(c, c->p_step, c->p_phase);
	if (++c->p_phase == p_nops(c)) {
		c->p_phase = 0;
		c->p_step++;
		c->res.produced++;
	}
	return 1;
}

/* Checks payload words [base, base + n) the consumer took; 0 if all are its step's. */
static int check(struct conn *c, const uint64_t *seen, uint32_t base, uint32_t n)
{
	int64_t first_bad = 0;
	uint32_t i, good = 0;

	for (i = n; i-- > 0;) {
		if (seen[i] == value(c->c_step, base + i))
			good++;
		else
			first_bad = value_step(c, seen[i]);
	}
	if (good == n)
		return 0;
	c->corrupt = 1;
	c->res.bad_step = c->c_step - c->first;
	c->res.seen_step = first_bad;
	c->res.bad_words = n;
	c->res.bad_current = good;
	if (!touched(c, c->c_step, c->c_phase))
		c->res.outcome = PH_STALE_WRAP;
	else if (c->proto == PH_SIMPLE)
		c->res.outcome = PH_STALE; /* published out of band, ahead of the data */
	else
		c->res.outcome = PH_PARTIAL; /* the flag inside the line was current */
	return -1;
}

static uint32_t c_nreads(const struct conn *c)
{
	return c->proto == PH_SIMPLE ? 1 : (uint32_t)c->lines;
}

static int c_act(struct conn *c)
{
	uint32_t slot = collc_slot(c->c_step, c->steps);
	uint32_t n;

	if (c->c_step == c->first + c->nsteps || c->corrupt)
		return 0;
	if (c->c_phase == c_nreads(c)) {
		/* R2: the reads of the step are done before head moves. */
		c->head = c->c_step + 1;
		goto step_done;
	}

	switch (c->proto) {
	case PH_SIMPLE:
		/* R1: tail first, then the slot. */
		if (!collc_simple_can_recv(c->tail, c->c_step))
			return 0;
		if (check(c, &c->simple[(uint64_t)slot * c->words], 0, c->words))
			return 1;
		break;
	case PH_LL: {
		/* R-LL: one snapshot, flags and payload from the same load. */
		union collc_ll_line snap = c->ll[slot * c->lines + c->c_phase];
		uint64_t payload;

		if (!collc_ll_ready(snap, ll_flag(c, c->c_step)))
			return 0;
		payload = collc_ll_payload(snap);
		if (check(c, &payload, c->c_phase, 1))
			return 1;
		break;
	}
	case PH_LL128: {
		const uint64_t *src =
			&c->ll128[(slot * c->lines + c->c_phase) * COLLC_LL128_LINE_WORDS];
		uint32_t base = c->c_phase * COLLC_LL128_DATA_WORDS;
		uint64_t copy[COLLC_LL128_LINE_WORDS];

		/* R128: the flag word first, then the data words. */
		copy[COLLC_LL128_FLAG_WORD] = src[COLLC_LL128_FLAG_WORD];
		if (!collc_ll128_ready(copy, collc_ll128_flag(c->c_step)))
			return 0;
		for (n = 0; n < COLLC_LL128_DATA_WORDS && base + n < c->words; n++)
			copy[n] = src[n];
		if (check(c, copy, base, n))
			return 1;
		break;
	}
	}

	if (++c->c_phase < c_nreads(c) || !(c->faults & PH_F_NO_HEAD))
		return 1;
step_done:
	c->c_phase = 0;
	c->c_step++;
	c->res.delivered++;
	return 1;
}

static int act(struct conn *c, char who)
{
	int progressed = who == 'p' ? p_act(c) : c_act(c);

	c->res.actions += (uint64_t)progressed;
	return progressed;
}

static char pick(struct conn *c)
{
	/* xorshift64: the same seed, the same schedule */
	c->rng ^= c->rng << 13;
	c->rng ^= c->rng >> 7;
	c->rng ^= c->rng << 17;
	return c->rng >> 63 ? 'p' : 'c';
}

static int valid(const struct ph_config *cfg)
{
	uint32_t own = PH_F_NO_HEAD;
	uint32_t step_bytes = cfg->step_bytes ? cfg->step_bytes : 240;
	const char *s;

	switch (cfg->proto) {
	case PH_SIMPLE:
		own |= PH_F_TAIL_FIRST;
		break;
	case PH_LL:
		own |= PH_F_LL_NO_FLAG2 | PH_F_LL_CONST_FLAG;
		break;
	case PH_LL128:
		own |= PH_F_LL128_NO_FLAG | PH_F_LL128_FLAG_FIRST;
		break;
	default:
		return 0;
	}
	if (cfg->faults & ~own)
		return 0;
	if (cfg->steps == 0 || cfg->steps > 64)
		return 0;
	if (step_bytes % 8 || step_bytes / 8 > 0xffffu)
		return 0;
	if (cfg->first_step && (cfg->first_step < cfg->steps || cfg->first_step >> 46))
		return 0;
	for (s = cfg->sched ? cfg->sched : "pC"; *s; s++)
		if (!strchr("pcPCr", *s))
			return 0;
	return !cfg->sched || cfg->sched[0];
}

static int conn_init(struct conn *c, const struct ph_config *cfg)
{
	uint32_t step_bytes = cfg->step_bytes ? cfg->step_bytes : 240;
	uint64_t g;
	uint32_t ph;

	memset(c, 0, sizeof(*c));
	c->proto = cfg->proto;
	c->steps = cfg->steps;
	c->faults = cfg->faults;
	c->first = cfg->first_step;
	c->nsteps = cfg->nsteps ? cfg->nsteps : 64;
	c->rng = cfg->seed ? cfg->seed : 0x9e3779b97f4a7c15ull;

	/* Size a buffer of `steps` slots from the step's payload, as plan.c would. */
	switch (c->proto) {
	case PH_SIMPLE:
		c->words = (uint32_t)(collc_simple_slot_bytes((uint64_t)step_bytes * c->steps,
							      c->steps) /
				      8);
		c->simple = calloc((size_t)c->steps * c->words, sizeof(*c->simple));
		if (!c->simple)
			return -ENOMEM;
		break;
	case PH_LL:
		c->lines = collc_ll_lines(step_bytes);
		c->words = (uint32_t)(collc_ll_step_bytes(c->lines * COLLC_LL_LINE_BYTES * c->steps,
							  c->steps) /
				      8);
		c->ll = calloc((size_t)(c->steps * c->lines), sizeof(*c->ll));
		if (!c->ll)
			return -ENOMEM;
		break;
	case PH_LL128:
		c->lines = collc_ll128_lines(step_bytes);
		c->words = step_bytes / 8;
		c->ll128 = calloc((size_t)(c->steps * c->lines), COLLC_LL128_LINE_BYTES);
		if (!c->ll128)
			return -ENOMEM;
		if (c->faults & PH_F_LL128_FLAG_FIRST) {
			c->p_ops[c->p_nops++] = OP_LL128_FLAG;
			c->p_ops[c->p_nops++] = OP_LL128_D0;
			c->p_ops[c->p_nops++] = OP_LL128_D1;
		} else {
			/* W128: data, then the flag. */
			c->p_ops[c->p_nops++] = OP_LL128_D0;
			c->p_ops[c->p_nops++] = OP_LL128_D1;
			if (!(c->faults & PH_F_LL128_NO_FLAG))
				c->p_ops[c->p_nops++] = OP_LL128_FLAG;
		}
		break;
	}

	/* Mid-life: the previous generation sits in every slot, all consumed. */
	if (c->first) {
		for (g = c->first - c->steps; g < c->first; g++)
			for (ph = 0; ph < p_nops(c); ph++)
				p_store(c, g, ph);
		c->head = c->tail = c->first;
	}
	c->p_step = c->c_step = c->first;
	return 0;
}

int ph_run(const struct ph_config *cfg, struct ph_result *ret_result)
{
	const char *sched;
	struct conn c;
	uint64_t budget;
	size_t len, pos = 0, idle = 0;
	int r;

	if (!cfg || !ret_result || !valid(cfg))
		return -EINVAL;
	r = conn_init(&c, cfg);
	if (r)
		goto out;

	sched = cfg->sched ? cfg->sched : "pC";
	len = strlen(sched);
	budget = 16 * c.nsteps * (p_nops(&c) + c_nreads(&c) + 2) + 1000;
	c.res.outcome = PH_LIMIT;

	while (!c.corrupt && c.c_step < c.first + c.nsteps) {
		char ch = sched[pos];
		int progressed = 0;

		if (c.res.actions >= budget)
			break;
		pos = (pos + 1) % len;
		switch (ch) {
		case 'p':
		case 'c':
			progressed = act(&c, ch);
			break;
		case 'P':
		case 'C':
			while (!c.corrupt && c.res.actions < budget && act(&c, (char)(ch | 0x20)))
				progressed = 1;
			break;
		case 'r':
			progressed = act(&c, pick(&c));
			break;
		}
		if (progressed) {
			idle = 0;
			continue;
		}
		/* A script may starve a side; only both sides stuck is a deadlock. */
		if (++idle < len + 8)
			continue;
		idle = 0;
		if (act(&c, 'p') || act(&c, 'c'))
			continue;
		c.res.outcome = c.p_step > c.c_step ? PH_BLOCKED : PH_STALL;
		break;
	}
	if (!c.corrupt && c.c_step == c.first + c.nsteps)
		c.res.outcome = PH_COMPLETE;
	*ret_result = c.res;
out:
	free(c.simple);
	free(c.ll);
	free(c.ll128);
	return r;
}

const char *ph_outcome_name(enum ph_outcome outcome)
{
	static const char *const names[PH_OUTCOME_MAX] = {
		[PH_COMPLETE] = "complete",
		[PH_STALL] = "stall",
		[PH_BLOCKED] = "blocked",
		[PH_STALE] = "stale",
		[PH_STALE_WRAP] = "stale-at-wrap",
		[PH_PARTIAL] = "partial-line",
		[PH_LIMIT] = "limit",
	};

	return (unsigned)outcome < PH_OUTCOME_MAX ? names[outcome] : "?";
}

const char *ph_proto_name(enum ph_proto proto)
{
	switch (proto) {
	case PH_SIMPLE:
		return "Simple";
	case PH_LL:
		return "LL";
	case PH_LL128:
		return "LL128";
	}
	return "?";
}

const char *ph_fault_name(uint32_t faults)
{
	switch (faults) {
	case 0:
		return "none";
	case PH_F_NO_HEAD:
		return "no-head";
	case PH_F_TAIL_FIRST:
		return "tail-first";
	case PH_F_LL_NO_FLAG2:
		return "no-flag2";
	case PH_F_LL_CONST_FLAG:
		return "const-flag";
	case PH_F_LL128_NO_FLAG:
		return "no-flag";
	case PH_F_LL128_FLAG_FIRST:
		return "flag-first";
	}
	return "multiple";
}
