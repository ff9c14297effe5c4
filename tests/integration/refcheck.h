/* SPDX-License-Identifier: MIT */
/*
 * Deterministic inputs for a reduction and a reference check of its result.
 *
 * Every rank can recompute every other rank's input from (case seed, rank,
 * index), so each rank checks its own result buffer without communication.
 *
 * Integers are checked exactly in two's complement arithmetic modulo 2^N
 * (SUM and PROD wrap; AVG is the wrapped sum divided by nranks with C
 * truncation). Floats are compared with the exact result (long double) within
 * a bound derived from the format, see rc_check in refcheck.c.
 */
#ifndef COLLC_TEST_REFCHECK_H
#define COLLC_TEST_REFCHECK_H

#include <stddef.h>
#include <stdint.h>

#include <collc.h>

struct rc_case {
	collc_dtype dtype;
	collc_redop op;
	size_t count;
	uint64_t seed;
};

const char *rc_dtype_name(collc_dtype dtype);
const char *rc_op_name(collc_redop op);
size_t rc_size(collc_dtype dtype);

/* Raw bits (low rc_size*8 bits) of element i of `rank`'s input. */
uint64_t rc_input_bits(const struct rc_case *c, int rank, size_t i);
void rc_fill(const struct rc_case *c, int rank, void *buf);
/*
 * 0 when buf holds rank's input (a send buffer that must not have changed,
 * or a block that received it); else prints the first differing element and
 * returns 1.
 */
int rc_check_input(const struct rc_case *c, int rank, const void *buf, const char *what);
/*
 * 0 when result (count elements) is the reduction of the inputs of ranks
 * 0..nranks-1; else prints up to 5 mismatches and returns 1. *ret_worst (may
 * be NULL) gets the largest float error as a fraction of its bound.
 */
int rc_check(const struct rc_case *c, int nranks, const void *result, const char *what,
	     double *ret_worst);

/*
 * rc_fill of rank's input into send, an all-reduce of it into recv waited for
 * up to 10 s, rc_check of the result: 0, or prints (naming `what`) and returns 1.
 */
int rc_allreduce(const struct rc_case *c, struct collc_ctx *ctx, struct collc_comm *comm, int rank,
		 int nranks, void *send, void *recv, const char *what);
/*
 * A rank of communicator id: joins, runs rc_allreduce of c once and leaves.
 * 0 when the result was right, else 1 (after saying why).
 */
int rc_join_allreduce(const struct collc_unique_id *id, const struct rc_case *c, int rank,
		      int nranks, const char *what);

/* Fills bytes [0, n) of p with a pattern derived from tag (byte i depends on tag and i). */
void rc_canary_fill(void *p, size_t n, uint64_t tag);
/* Checks bytes [from, to) of a region filled by rc_canary_fill(p, ..., tag): -1 intact, else the first changed offset. */
long rc_canary_check(const void *p, size_t from, size_t to, uint64_t tag);

#endif /* COLLC_TEST_REFCHECK_H */
