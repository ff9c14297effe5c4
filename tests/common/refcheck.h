/* SPDX-License-Identifier: MIT */
/*
 * Inputs for collectives and a reference check of their results: the one
 * checker of the tests (integration, protocols, operations, reliability, GPU)
 * and of the bench (collc-bench and its MPI peer).
 *
 * Every rank can recompute every other rank's input from (case seed, rank,
 * index), so each rank checks its own result buffer without communication.
 *
 * Two kinds of data:
 *  - random (exact == 0): integers of the full width (small ones for PROD),
 *    floats exact in the storage format with random signs and magnitudes in
 *    [2^-4, 2) ([0.5, 2) for PROD). Integers are checked exactly in two's
 *    complement arithmetic modulo 2^N (SUM and PROD wrap; AVG is the wrapped
 *    sum divided by nranks with C truncation). Floats are compared with the
 *    exact result (long double) within a bound derived from the format, see
 *    refcheck.c.
 *  - exact (exact == nranks): small integers (multiples of nranks for AVG),
 *    so that the result is exact in any reduction order; floats are then
 *    checked bit for bit too (+0 for a zero).
 *
 * Checks report what is wrong (which element, what it is, what it should be,
 * whose input) through the function given to rc_set_report, one line each.
 */
#ifndef COLLC_TEST_REFCHECK_H
#define COLLC_TEST_REFCHECK_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <collc.h>

struct rc_case {
	collc_dtype dtype;
	collc_redop op;
	size_t count; /* elements of one rank's input */
	uint64_t seed;
	int exact; /* 0: random data; else the number of ranks of exact data */
};

/* The collectives, numbered like COLLC_OP_* - 1 (proto/shm.h) and bench_coll. */
enum rc_coll {
	RC_ALLREDUCE,
	RC_ALLGATHER,
	RC_REDUCE_SCATTER,
	RC_BROADCAST,
	RC_REDUCE,
	RC_NUM_COLLS
};

/*
 * The index of s among names[0..n), or -1: the name arguments of the tests
 * and the bench. Inline, so that mpi_peer (mpicc, no refcheck.c) uses it too.
 */
static inline int rc_name_index(const char *const *names, int n, const char *s)
{
	for (int i = 0; i < n; i++)
		if (strcmp(names[i], s) == 0)
			return i;
	return -1;
}

/*
 * Receives every line a check prints: fail is 1 for a mismatch, 0 for a
 * summary. The default writes to stderr; the tests' harness passes them to
 * h_fail and h_log, the bench keeps the first for its table.
 */
typedef void rc_report_fn(int fail, const char *line);
void rc_set_report(rc_report_fn *fn);

const char *rc_dtype_name(collc_dtype dtype);
const char *rc_op_name(collc_redop op);
const char *rc_coll_name(enum rc_coll coll);
size_t rc_size(collc_dtype dtype);
/* splitmix64's finalizer: the inputs are a function of it. */
uint64_t rc_mix(uint64_t x);

/* Raw bits (low rc_size*8 bits) of element i of `rank`'s input. */
uint64_t rc_input_bits(const struct rc_case *c, int rank, size_t i);
/* Elements [0, c->count) of rank's input into buf. */
void rc_fill(const struct rc_case *c, int rank, void *buf);
/*
 * 0 when buf holds rank's input (a send buffer that must not have changed,
 * or a block that received it); else reports the first differing element and
 * returns 1.
 */
int rc_check_input(const struct rc_case *c, int rank, const void *buf, const char *what);
/* The same for n elements of rank's input from element `first` on (a block of all-to-all). */
int rc_check_slice(const struct rc_case *c, int rank, size_t first, size_t n, const void *buf,
		   const char *what);
/*
 * 0 when result (count elements) is the reduction of the inputs of ranks
 * 0..nranks-1; else reports up to 5 mismatches and returns 1. *ret_worst (may
 * be NULL) gets the largest float error as a fraction of its bound.
 */
int rc_check(const struct rc_case *c, int nranks, const void *result, const char *what,
	     double *ret_worst);

/*
 * A whole collective of the case, c->count being the call's count (sendcount
 * of allgather, recvcount of reduce-scatter). rc_fill_coll fills rank's send
 * buffer (nranks * count elements for reduce-scatter); rc_check_coll checks
 * rank's receive buffer: all-reduce and the root of reduce the reduction,
 * allgather block r rank r's input, reduce-scatter block `rank` of the
 * reduction, broadcast the root's input. Other ranks of reduce pass. 0, or 1
 * after reporting.
 */
void rc_fill_coll(const struct rc_case *c, enum rc_coll coll, int nranks, int rank, void *send);
int rc_check_coll(const struct rc_case *c, enum rc_coll coll, int nranks, int rank, int root,
		  const void *recv, const char *what);
/* 0 when send still holds what rc_fill_coll wrote there; else 1 after reporting. */
int rc_check_send(const struct rc_case *c, enum rc_coll coll, int nranks, int rank,
		  const void *send, const char *what);

/* Fills bytes [0, n) of p with a pattern derived from tag (byte i depends on tag and i). */
void rc_canary_fill(void *p, size_t n, uint64_t tag);
/* Checks bytes [from, to) of a region filled by rc_canary_fill(p, ..., tag): -1 intact, else the first changed offset. */
long rc_canary_check(const void *p, size_t from, size_t to, uint64_t tag);

/*
 * Submits case c as collective coll (root for broadcast and reduce) through
 * libcollc. Inline, so the tools that compile refcheck.c without libcollc do
 * not need it.
 */
static inline int rc_submit(struct collc_comm *comm, enum rc_coll coll, const struct rc_case *c,
			    int root, const void *send, void *recv, collc_req *req)
{
	switch (coll) {
	case RC_ALLREDUCE:
		return collc_allreduce(comm, send, recv, c->count, c->dtype, c->op, req);
	case RC_ALLGATHER:
		return collc_allgather(comm, send, recv, c->count, c->dtype, req);
	case RC_REDUCE_SCATTER:
		return collc_reduce_scatter(comm, send, recv, c->count, c->dtype, c->op, req);
	case RC_BROADCAST:
		return collc_broadcast(comm, send, recv, c->count, c->dtype, root, req);
	default:
		return collc_reduce(comm, send, recv, c->count, c->dtype, c->op, root, req);
	}
}

#endif /* COLLC_TEST_REFCHECK_H */
