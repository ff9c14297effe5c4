/* SPDX-License-Identifier: MIT */
/*
 * A deterministic, single-threaded model of one connection of the Simple, LL
 * or LL128 protocol: a producer and a consumer, each a small state machine
 * that a scripted scheduler advances one action at a time. Every decision
 * (credit, readiness, flags, slots, geometry) goes through proto/prims.h, so
 * the model tests the arithmetic the executors run.
 *
 * One action is one access the real code makes as a unit: a credit check plus
 * the first store of a step, a slot's payload, a tail or head store, one LL
 * line (one 16-byte store or load), one half of an LL128 line's data, one
 * LL128 flag word. A blocked action changes nothing, so "neither side can act"
 * is a deadlock.
 *
 * Faults (PH_F_*) break one rule each; the payload of every step is unique
 * per (step, word) and never zero, so the consumer can name the step whose
 * data it actually saw.
 */
#ifndef COLLC_TESTS_PRIMS_HARNESS_H
#define COLLC_TESTS_PRIMS_HARNESS_H

#include <stdint.h>

enum ph_proto {
	PH_SIMPLE,
	PH_LL,
	PH_LL128,
};

#define PH_F_NO_HEAD          (1u << 0) /* the consumer never posts head */
#define PH_F_TAIL_FIRST       (1u << 1) /* Simple: tail stored before the payload */
#define PH_F_LL_NO_FLAG2      (1u << 2) /* LL: the second flag of a line never written */
#define PH_F_LL_CONST_FLAG    (1u << 3) /* LL: flag 1 for every step, not step + 1 */
#define PH_F_LL128_NO_FLAG    (1u << 4) /* LL128: the flag word never written */
#define PH_F_LL128_FLAG_FIRST (1u << 5) /* LL128: flag word stored before the data */
#define PH_F_ALL              0x3fu

enum ph_outcome {
	PH_COMPLETE,   /* every step delivered with its own data */
	PH_STALL,      /* deadlock: the producer waits for credit, the consumer for
			  a step the producer has not published */
	PH_BLOCKED,    /* deadlock: the consumer waits on a step the producer wrote */
	PH_STALE,      /* the consumer took a published slot still holding old data */
	PH_STALE_WRAP, /* the consumer took an older generation of a reused slot,
			  before the producer wrote any of it for the step */
	PH_PARTIAL,    /* the consumer took a line whose in-line flag was current
			  but whose data was not (all) written */
	PH_LIMIT,      /* the action budget ran out (a harness bug) */
	PH_OUTCOME_MAX,
};

struct ph_config {
	enum ph_proto proto;
	uint32_t steps;      /* slots in the ring: 2, 4 or 8 */
	uint32_t faults;     /* PH_F_* */
	uint32_t nsteps;     /* steps to transfer; 0: 64 */
	uint32_t step_bytes; /* payload per step, a multiple of 8; 0: 240 */
	uint64_t first_step; /* >0: start mid-life, with the ring holding the
				 previous generation and head = tail = first_step */
	const char *sched;   /* the script, repeated: 'p'/'c' one producer or
				 consumer action, 'P'/'C' run that side until it
				 blocks, 'r' one action of a side drawn from seed;
				 NULL: "pC" */
	uint64_t seed;       /* for 'r' */
};

#define PH_SEEN_FRESH INT64_MIN

struct ph_result {
	enum ph_outcome outcome;
	uint64_t delivered;   /* steps the consumer took with correct data */
	uint64_t produced;    /* steps the producer finished writing */
	uint64_t bad_step;    /* PH_STALE*, PH_PARTIAL: the step taken with bad data */
	int64_t seen_step;    /* the step whose data the first wrong word held,
				 relative to first_step; PH_SEEN_FRESH: memory
				 never written */
	uint32_t bad_words;   /* payload words of the unit taken */
	uint32_t bad_current; /* of those, how many held the right value */
	uint64_t actions;     /* actions that made progress */
};

/* Runs one connection to its end; 0, or -EINVAL / -ENOMEM. */
int ph_run(const struct ph_config *cfg, struct ph_result *ret_result);

const char *ph_outcome_name(enum ph_outcome outcome);
const char *ph_proto_name(enum ph_proto proto);
const char *ph_fault_name(uint32_t faults);

#endif /* COLLC_TESTS_PRIMS_HARNESS_H */
