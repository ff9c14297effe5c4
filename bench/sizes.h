/* SPDX-License-Identifier: MIT */
/*
 * What collc-bench and its peers (mpi_peer, the NCCL ranks) agree on: the
 * collectives, how a size maps to counts (nccl-tests' definition), the data
 * set of an iteration, percentiles and size arguments. Header-only so that
 * mpi_peer, built with mpicc, shares it verbatim. The dtypes are collc's
 * (proto/dtype.h); the input data and the reference check are the tests'
 * (tests/common/refcheck.h).
 */
#ifndef COLLC_BENCH_SIZES_H
#define COLLC_BENCH_SIZES_H

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/dtype.h"
#include "refcheck.h"

/* refcheck's collectives, under the bench's names. */
enum bench_coll {
	BENCH_ALLREDUCE = RC_ALLREDUCE,
	BENCH_ALLGATHER = RC_ALLGATHER,
	BENCH_REDUCE_SCATTER = RC_REDUCE_SCATTER,
	BENCH_BROADCAST = RC_BROADCAST,
	BENCH_REDUCE = RC_REDUCE,
	BENCH_ALLTOALL = RC_NUM_COLLS, /* pure data movement, checked bit for bit */
	BENCH_SENDRECV,                /* every rank sends right and receives left at once */
	BENCH_NUM_COLLS,
};

static const char *const bench_coll_names[BENCH_NUM_COLLS] = {
	"allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv",
};

static const char *const bench_dtype_names[COLLC_NUM_DTYPES] = COLLC_DTYPE_NAMES;

/* Is the collective a reduction (sum) rather than pure data movement? */
static inline int bench_coll_reduces(int coll)
{
	return coll == BENCH_ALLREDUCE || coll == BENCH_REDUCE_SCATTER || coll == BENCH_REDUCE;
}

/*
 * One message size, as nccl-tests defines it: `bytes` is the largest buffer
 * of a rank, so the whole vector for allreduce, broadcast and reduce, and the
 * total (nranks * per-rank part) for allgather and reduce_scatter. `count`
 * is the argument of the call (sendcount for allgather, recvcount for
 * reduce_scatter); send_elems and recv_elems size each rank's buffers.
 */
struct bench_size {
	uint64_t bytes;
	uint64_t elems; /* bytes / dtype size: the "count" column of nccl-tests */
	uint64_t count;
	uint64_t send_elems;
	uint64_t recv_elems;
};

/* Returns 0, or -1 when `bytes` is too small for one element per rank. */
static inline int bench_size_of(int coll, int dtype, int nranks, uint64_t bytes,
				struct bench_size *ret)
{
	uint64_t es = collc_dtype_bytes(dtype), n = (uint64_t)nranks;
	struct bench_size s = { 0 };

	if (coll == BENCH_ALLTOALL) {
		/* bytes: a rank's whole send (and receive) buffer, count per peer (nccl-tests). */
		s.count = bytes / (es * n);
		s.elems = s.count * n;
		s.send_elems = s.recv_elems = s.elems;
	} else if (coll == BENCH_ALLGATHER || coll == BENCH_REDUCE_SCATTER) {
		s.count = bytes / (es * n);
		s.elems = s.count * n;
		s.send_elems = coll == BENCH_ALLGATHER ? s.count : s.elems;
		s.recv_elems = coll == BENCH_ALLGATHER ? s.elems : s.count;
	} else {
		s.count = s.elems = bytes / es;
		s.send_elems = s.recv_elems = s.count;
	}
	if (s.count == 0)
		return -1;
	s.bytes = s.elems * es;
	*ret = s;
	return 0;
}

/* nccl-tests' bus bandwidth factor. */
static inline double bench_busbw_factor(int coll, int nranks)
{
	double n = nranks;

	switch (coll) {
	case BENCH_ALLREDUCE:
		return 2.0 * (n - 1) / n;
	case BENCH_ALLGATHER:
	case BENCH_REDUCE_SCATTER:
	case BENCH_ALLTOALL:
		return (n - 1) / n;
	default:
		return 1.0;
	}
}

/*
 * A rank's send buffer for collective coll of case c (c->count the call's
 * count): the tests' data sets; all-to-all sends block p = elements
 * [p * count, (p + 1) * count) of the rank's input, send/recv its input.
 */
static inline void bench_fill(const struct rc_case *c, int coll, int nranks, int rank, void *send)
{
	struct rc_case w = *c;

	if (coll < RC_NUM_COLLS) {
		rc_fill_coll(c, (enum rc_coll)coll, nranks, rank, send);
		return;
	}
	if (coll == BENCH_ALLTOALL)
		w.count *= (size_t)nranks;
	rc_fill(&w, rank, send);
}

/* Checks rank's receive buffer: 0, or 1 after reporting (rc_set_report). */
static inline int bench_check(const struct rc_case *c, int coll, int nranks, int rank, int root,
			      const void *recv, const char *what)
{
	size_t es = collc_dtype_bytes(c->dtype);

	if (coll < RC_NUM_COLLS)
		return rc_check_coll(c, (enum rc_coll)coll, nranks, rank, root, recv, what);
	if (coll == BENCH_SENDRECV)
		return rc_check_input(c, (rank + nranks - 1) % nranks, recv, what);
	for (int p = 0; p < nranks; p++)
		if (rc_check_slice(c, p, (size_t)rank * c->count, c->count,
				   (const char *)recv + (size_t)p * c->count * es, what))
			return 1;
	return 0;
}

/* Nearest-rank percentile of n sorted values. */
static inline double bench_percentile(const double *sorted, int n, double pct)
{
	int k = (int)ceil(pct / 100.0 * n) - 1;

	if (n <= 0)
		return NAN;
	return sorted[k < 0 ? 0 : k >= n ? n - 1 : k];
}

static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Data sets: one for the first iteration of a size, one for its last. */
static inline uint64_t bench_seed(int size_index, int last)
{
	return 2 * (uint64_t)size_index + 1 + (uint64_t)last;
}

/* An integer option in [min, max]: 0, or -1 after saying (as prog) what is wrong. */
static inline int bench_parse_long(const char *prog, const char *opt, const char *s, long min,
				   long max, long *ret)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || end == s || v < min || v > max) {
		fprintf(stderr, "%s: %s must be an integer in [%ld, %ld]\n", prog, opt, min, max);
		return -1;
	}
	*ret = v;
	return 0;
}

/* Sizes double from min to max (both in bytes, like nccl-tests -f 2). */
static inline uint64_t bench_parse_bytes(const char *s, int *ok)
{
	char *end;
	unsigned long long v;
	uint64_t mult = 1;

	*ok = 0;
	if (!s || !*s)
		return 0;
	v = strtoull(s, &end, 0);
	if (end == s)
		return 0;
	switch (*end) {
	case 'k':
	case 'K':
		mult = 1ull << 10;
		end++;
		break;
	case 'm':
	case 'M':
		mult = 1ull << 20;
		end++;
		break;
	case 'g':
	case 'G':
		mult = 1ull << 30;
		end++;
		break;
	}
	if (*end == 'i')
		end++;
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end)
		return 0;
	*ok = 1;
	return (uint64_t)v * mult;
}

#endif /* COLLC_BENCH_SIZES_H */
