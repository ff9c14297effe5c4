/* SPDX-License-Identifier: MIT */
/*
 * What collc-bench and its peers (mpi_peer, the NCCL ranks) agree on: the
 * collectives, the dtypes, how a size maps to counts (nccl-tests'
 * definition), the input data every rank can recompute, and the reference
 * check. Header-only so that mpi_peer, built with mpicc, shares it verbatim.
 */
#ifndef COLLC_BENCH_CHECK_H
#define COLLC_BENCH_CHECK_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum bench_coll {
	BENCH_ALLREDUCE,
	BENCH_ALLGATHER,
	BENCH_REDUCE_SCATTER,
	BENCH_BROADCAST,
	BENCH_REDUCE,
	BENCH_NUM_COLLS,
};

/* Same numbering as collc_dtype and, for the types it has, close to NCCL's. */
enum bench_dtype {
	BENCH_INT8,
	BENCH_UINT8,
	BENCH_INT32,
	BENCH_UINT32,
	BENCH_INT64,
	BENCH_UINT64,
	BENCH_FLOAT16,
	BENCH_BFLOAT16,
	BENCH_FLOAT32,
	BENCH_FLOAT64,
	BENCH_NUM_DTYPES,
};

static const char *const bench_coll_names[BENCH_NUM_COLLS] = {
	"allreduce", "allgather", "reduce_scatter", "broadcast", "reduce",
};

static const char *const bench_dtype_names[BENCH_NUM_DTYPES] = {
	"int8", "uint8", "int32", "uint32", "int64", "uint64",
	"float16", "bfloat16", "float32", "float64",
};

static inline size_t bench_dtype_size(int dt)
{
	static const size_t sz[BENCH_NUM_DTYPES] = { 1, 1, 4, 4, 8, 8, 2, 2, 4, 8 };

	return (unsigned)dt < BENCH_NUM_DTYPES ? sz[dt] : 0;
}

static inline int bench_parse_name(const char *const *names, int n, const char *s)
{
	for (int i = 0; i < n; i++)
		if (strcmp(names[i], s) == 0)
			return i;
	return -1;
}

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
	uint64_t elems;      /* bytes / dtype size: the "count" column of nccl-tests */
	uint64_t count;
	uint64_t send_elems;
	uint64_t recv_elems;
};

/* Returns 0, or -1 when `bytes` is too small for one element per rank. */
static inline int bench_size_of(int coll, int dtype, int nranks, uint64_t bytes,
				struct bench_size *ret)
{
	uint64_t es = bench_dtype_size(dtype), n = (uint64_t)nranks;
	struct bench_size s = { 0 };

	if (coll == BENCH_ALLGATHER || coll == BENCH_REDUCE_SCATTER) {
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
		return (n - 1) / n;
	default:
		return 1.0;
	}
}

/* Input data */

static inline uint64_t bench_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static inline uint16_t bench_f32_to_f16(float f)
{
	uint32_t x, sign, mant;
	int32_t exp;

	memcpy(&x, &f, 4);
	sign = (x >> 16) & 0x8000u;
	exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
	mant = x & 0x7fffffu;
	if (((x >> 23) & 0xff) == 0xff)
		return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
	if (exp >= 31)
		return (uint16_t)(sign | 0x7c00u);
	if (exp <= 0) {
		uint32_t m, shift, r;

		if (exp < -10)
			return (uint16_t)sign;
		m = mant | 0x800000u;
		shift = (uint32_t)(14 - exp);
		r = m >> shift;
		/* Round to nearest even on the dropped bits. */
		if ((m & ((1u << shift) - 1)) > (1u << (shift - 1)) ||
		    ((m & ((1u << shift) - 1)) == (1u << (shift - 1)) && (r & 1)))
			r++;
		return (uint16_t)(sign | r);
	}
	{
		uint32_t h = sign | ((uint32_t)exp << 10) | (mant >> 13);
		uint32_t rest = mant & 0x1fffu;

		if (rest > 0x1000u || (rest == 0x1000u && (h & 1)))
			h++; /* may carry into the exponent, which is right */
		return (uint16_t)h;
	}
}

static inline float bench_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, x;
	float f;

	if (exp == 0) {
		f = ldexpf((float)mant, -24);
		return sign ? -f : f;
	}
	if (exp == 31)
		x = sign | 0x7f800000u | (mant << 13);
	else
		x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
	memcpy(&f, &x, 4);
	return f;
}

static inline uint16_t bench_f32_to_bf16(float f)
{
	uint32_t x;

	memcpy(&x, &f, 4);
	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40);
	x += 0x7fffu + ((x >> 16) & 1);
	return (uint16_t)(x >> 16);
}

static inline float bench_bf16_to_f32(uint16_t b)
{
	uint32_t x = (uint32_t)b << 16;
	float f;

	memcpy(&f, &x, 4);
	return f;
}

/*
 * Element i of rank `rank`'s send buffer for data set `seed`, as the dtype
 * holds it (converted back to double). Floats are uniform in [-1, 1);
 * integers are small so that sums over 64 ranks cannot overflow.
 */
static inline double bench_value(int dtype, int rank, uint64_t seed, uint64_t i)
{
	uint64_t x = bench_mix(bench_mix(seed * 0x100000001b3ull + (uint64_t)rank) ^ i);
	double u = (double)(x >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0;

	switch (dtype) {
	case BENCH_INT8:
		return (double)(int)(x % 3) - 1;
	case BENCH_UINT8:
		return (double)(x % 2);
	case BENCH_INT32:
	case BENCH_INT64:
		return (double)(int)(x % 7) - 3;
	case BENCH_UINT32:
	case BENCH_UINT64:
		return (double)(x % 4);
	case BENCH_FLOAT16:
		return bench_f16_to_f32(bench_f32_to_f16((float)u));
	case BENCH_BFLOAT16:
		return bench_bf16_to_f32(bench_f32_to_bf16((float)u));
	case BENCH_FLOAT32:
		return (float)u;
	default:
		return u;
	}
}

static inline void bench_store(int dtype, void *buf, uint64_t i, double v)
{
	switch (dtype) {
	case BENCH_INT8:
		((int8_t *)buf)[i] = (int8_t)v;
		break;
	case BENCH_UINT8:
		((uint8_t *)buf)[i] = (uint8_t)v;
		break;
	case BENCH_INT32:
		((int32_t *)buf)[i] = (int32_t)v;
		break;
	case BENCH_UINT32:
		((uint32_t *)buf)[i] = (uint32_t)v;
		break;
	case BENCH_INT64:
		((int64_t *)buf)[i] = (int64_t)v;
		break;
	case BENCH_UINT64:
		((uint64_t *)buf)[i] = (uint64_t)v;
		break;
	case BENCH_FLOAT16:
		((uint16_t *)buf)[i] = bench_f32_to_f16((float)v);
		break;
	case BENCH_BFLOAT16:
		((uint16_t *)buf)[i] = bench_f32_to_bf16((float)v);
		break;
	case BENCH_FLOAT32:
		((float *)buf)[i] = (float)v;
		break;
	default:
		((double *)buf)[i] = v;
		break;
	}
}

static inline double bench_load(int dtype, const void *buf, uint64_t i)
{
	switch (dtype) {
	case BENCH_INT8:
		return ((const int8_t *)buf)[i];
	case BENCH_UINT8:
		return ((const uint8_t *)buf)[i];
	case BENCH_INT32:
		return ((const int32_t *)buf)[i];
	case BENCH_UINT32:
		return ((const uint32_t *)buf)[i];
	case BENCH_INT64:
		return (double)((const int64_t *)buf)[i];
	case BENCH_UINT64:
		return (double)((const uint64_t *)buf)[i];
	case BENCH_FLOAT16:
		return bench_f16_to_f32(((const uint16_t *)buf)[i]);
	case BENCH_BFLOAT16:
		return bench_bf16_to_f32(((const uint16_t *)buf)[i]);
	case BENCH_FLOAT32:
		return ((const float *)buf)[i];
	default:
		return ((const double *)buf)[i];
	}
}

/* Fills rank `rank`'s send buffer (n elements) with data set `seed`. */
static inline void bench_fill(int dtype, void *buf, uint64_t n, int rank, uint64_t seed)
{
	for (uint64_t i = 0; i < n; i++)
		bench_store(dtype, buf, i, bench_value(dtype, rank, seed, i));
}

/* Unit roundoff of the dtype; 0 for integers (exact). */
static inline double bench_dtype_eps(int dtype)
{
	switch (dtype) {
	case BENCH_FLOAT16:
		return ldexp(1.0, -11);
	case BENCH_BFLOAT16:
		return ldexp(1.0, -8);
	case BENCH_FLOAT32:
		return ldexp(1.0, -24);
	case BENCH_FLOAT64:
		return ldexp(1.0, -53);
	default:
		return 0;
	}
}

struct bench_mismatch {
	uint64_t index;
	double got, want, tol;
};

/*
 * Checks rank `rank`'s receive buffer `out` after collective `coll` (sum)
 * of data set `seed`. A sum of n terms in any order, rounded to the dtype at
 * each step, is within (n + 1) * eps * sum|x| of the exact sum (one more for
 * the final rounding); integers and pure data movement must match exactly.
 * Returns 0, or -1 with the first mismatch in *ret.
 */
static inline int bench_check(int coll, int dtype, int nranks, int rank, int root,
			      const struct bench_size *sz, uint64_t seed, const void *out,
			      struct bench_mismatch *ret)
{
	double eps = bench_dtype_eps(dtype);
	uint64_t n;

	if (coll == BENCH_REDUCE && rank != root)
		return 0; /* nothing is written there */
	n = sz->recv_elems;
	for (uint64_t i = 0; i < n; i++) {
		double want, tol = 0, got = bench_load(dtype, out, i);

		switch (coll) {
		case BENCH_ALLGATHER:
			want = bench_value(dtype, (int)(i / sz->count), seed, i % sz->count);
			break;
		case BENCH_BROADCAST:
			want = bench_value(dtype, root, seed, i);
			break;
		default: {
			uint64_t j = coll == BENCH_REDUCE_SCATTER ? (uint64_t)rank * sz->count + i : i;
			double abs = 0;

			want = 0;
			for (int r = 0; r < nranks; r++) {
				double v = bench_value(dtype, r, seed, j);

				want += v;
				abs += fabs(v);
			}
			tol = (nranks + 1) * eps * abs;
			break;
		}
		}
		/* Written so that a NaN fails. */
		if (!(fabs(got - want) <= tol)) {
			ret->index = i;
			ret->got = got;
			ret->want = want;
			ret->tol = tol;
			return -1;
		}
	}
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

#endif /* COLLC_BENCH_CHECK_H */
