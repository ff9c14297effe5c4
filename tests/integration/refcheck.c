/* SPDX-License-Identifier: MIT */
/*
 * Inputs and reference checks for reductions (see refcheck.h).
 *
 * Float bounds. The daemon combines the nranks inputs with nranks - 1 binary
 * operations in some order (a ring visits ranks cyclically from a
 * chunk-dependent start; other algorithms use other orders). float16 and
 * bfloat16 are computed in float32 and rounded back to 16 bits after every
 * step. Let u be the unit roundoff of the storage format (2^-11 float16,
 * 2^-8 bfloat16, 2^-24 float32, 2^-53 float64) and uc that of the compute
 * format when it differs (2^-24 for the 16-bit formats, 0 otherwise). One
 * step then has a relative error of at most d = u + uc + u*uc, plus, in the
 * subnormal range of the storage format, an absolute error of at most half
 * its smallest subnormal (abs). For any order of the n - 1 additions
 * (Higham, Accuracy and Stability, 4.2):
 *
 *   SUM   |got - S| <= ((1 + d)^(n-1) - 1) * sum|x_i| + (n-1) * abs
 *   PROD  |got - P| <= ((1 + d)^(n-1) - 1) * |P|      (inputs in [0.5, 2))
 *   AVG   |got - S/n| <= SUMTOL/n + 2d (|S| + SUMTOL)/n + abs
 *         (one more rounding: a division, or a multiplication by a rounded 1/n)
 *   MAX, MIN exact.
 *
 * The reference S or P is computed in long double; its own rounding error
 * (n-1 roundings of LDBL_EPSILON/2, zero for the sums here on x86, where the
 * inputs' exponent range fits the 64-bit significand) is added to the bound.
 * Inputs are exact values of the storage format with magnitudes in
 * [2^-4, 2) (SUM, AVG, MAX, MIN) or [0.5, 2) (PROD), random signs, so nothing
 * overflows and the bound is neither loose nor accidental.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "refcheck.h"

static const char *const dtype_names[COLLC_NUM_DTYPES] = {
	"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32", "float64",
};
static const char *const op_names[COLLC_NUM_REDOPS] = { "sum", "prod", "max", "min", "avg" };
static const size_t sizes[COLLC_NUM_DTYPES] = { 1, 1, 4, 4, 8, 8, 2, 2, 4, 8 };

const char *rc_dtype_name(collc_dtype dtype)
{
	return (unsigned)dtype < COLLC_NUM_DTYPES ? dtype_names[dtype] : "?";
}

const char *rc_op_name(collc_redop op)
{
	return (unsigned)op < COLLC_NUM_REDOPS ? op_names[op] : "?";
}

size_t rc_size(collc_dtype dtype)
{
	return (unsigned)dtype < COLLC_NUM_DTYPES ? sizes[dtype] : 0;
}

static int is_float(collc_dtype d)
{
	return d >= COLLC_FLOAT16;
}

static int is_signed(collc_dtype d)
{
	return d == COLLC_INT8 || d == COLLC_INT32 || d == COLLC_INT64;
}

static uint64_t width_mask(collc_dtype d)
{
	size_t bits = sizes[d] * 8;

	return bits == 64 ? UINT64_MAX : (1ull << bits) - 1;
}

static int64_t sign_extend(uint64_t v, collc_dtype d)
{
	size_t bits = sizes[d] * 8;

	if (bits == 64)
		return (int64_t)v;
	v &= (1ull << bits) - 1;
	if (v & (1ull << (bits - 1)))
		v |= ~((1ull << bits) - 1);
	return (int64_t)v;
}

uint64_t rc_input_bits(const struct rc_case *c, int rank, size_t i)
{
	uint64_t x = h_mix(h_mix(c->seed ^ ((uint64_t)(unsigned)rank << 56)) ^ (uint64_t)i);
	int prod = c->op == COLLC_PROD;
	uint64_t s = x & 1, e, m;

	switch (c->dtype) {
	case COLLC_INT8:
	case COLLC_INT32:
	case COLLC_INT64:
		if (prod) {
			static const int64_t small[] = { -2, -1, 1, 2, 3 };

			return (uint64_t)small[(x >> 8) % 5] & width_mask(c->dtype);
		}
		return (x >> 3) & width_mask(c->dtype);
	case COLLC_UINT8:
	case COLLC_UINT32:
	case COLLC_UINT64:
		if (prod)
			return 1 + (x >> 8) % 3;
		return (x >> 3) & width_mask(c->dtype);
	case COLLC_FLOAT16:
		e = prod ? 14 + ((x >> 1) & 1) : 11 + ((x >> 1) % 5);
		m = (x >> 8) & 0x3ff;
		return s << 15 | e << 10 | m;
	case COLLC_BFLOAT16:
		e = prod ? 126 + ((x >> 1) & 1) : 123 + ((x >> 1) % 5);
		m = (x >> 8) & 0x7f;
		return s << 15 | e << 7 | m;
	case COLLC_FLOAT32:
		e = prod ? 126 + ((x >> 1) & 1) : 123 + ((x >> 1) % 5);
		m = (x >> 8) & 0x7fffff;
		return s << 31 | e << 23 | m;
	case COLLC_FLOAT64:
		e = prod ? 1022 + ((x >> 1) & 1) : 1019 + ((x >> 1) % 5);
		m = (x >> 11) & 0xfffffffffffffull;
		return s << 63 | e << 52 | m;
	}
	return 0;
}

static uint64_t load_bits(const void *buf, size_t i, size_t es)
{
	const unsigned char *p = (const unsigned char *)buf + i * es;
	uint8_t b1;
	uint16_t b2;
	uint32_t b4;
	uint64_t b8;

	switch (es) {
	case 1:
		memcpy(&b1, p, 1);
		return b1;
	case 2:
		memcpy(&b2, p, 2);
		return b2;
	case 4:
		memcpy(&b4, p, 4);
		return b4;
	default:
		memcpy(&b8, p, 8);
		return b8;
	}
}

static void store_bits(void *buf, size_t i, size_t es, uint64_t v)
{
	unsigned char *p = (unsigned char *)buf + i * es;
	uint8_t b1 = (uint8_t)v;
	uint16_t b2 = (uint16_t)v;
	uint32_t b4 = (uint32_t)v;

	switch (es) {
	case 1:
		memcpy(p, &b1, 1);
		break;
	case 2:
		memcpy(p, &b2, 2);
		break;
	case 4:
		memcpy(p, &b4, 4);
		break;
	default:
		memcpy(p, &v, 8);
		break;
	}
}

void rc_fill(const struct rc_case *c, int rank, void *buf)
{
	size_t es = sizes[c->dtype];

	for (size_t i = 0; i < c->count; i++)
		store_bits(buf, i, es, rc_input_bits(c, rank, i));
}

int rc_check_input(const struct rc_case *c, int rank, const void *buf, const char *what)
{
	size_t es = sizes[c->dtype];

	for (size_t i = 0; i < c->count; i++) {
		uint64_t want = rc_input_bits(c, rank, i), got = load_bits(buf, i, es);

		if (got != want)
			return h_fail("%s: %s %s count %zu: element %zu is %#" PRIx64
				      ", rank %d's input there is %#" PRIx64,
				      what, rc_dtype_name(c->dtype), rc_op_name(c->op), c->count, i, got,
				      rank, want);
	}
	return 0;
}

/* Decodes a stored float of the dtype (independently of collcd's converters). */
static long double decode(uint64_t b, collc_dtype d)
{
	float f;
	double g;
	uint32_t u;

	switch (d) {
	case COLLC_FLOAT16: {
		int s = (int)(b >> 15) & 1, e = (int)(b >> 10) & 0x1f, m = (int)(b & 0x3ff);
		long double v;

		if (e == 0x1f)
			v = m ? NAN : INFINITY;
		else if (e == 0)
			v = ldexpl((long double)m, -24);
		else
			v = ldexpl((long double)(1024 + m), e - 25);
		return s ? -v : v;
	}
	case COLLC_BFLOAT16:
		u = (uint32_t)(b & 0xffff) << 16;
		memcpy(&f, &u, 4);
		return f;
	case COLLC_FLOAT32:
		u = (uint32_t)b;
		memcpy(&f, &u, 4);
		return f;
	default:
		memcpy(&g, &b, 8);
		return g;
	}
}

struct fmt {
	long double u, uc, abs;
};

static struct fmt fmt_of(collc_dtype d)
{
	switch (d) {
	case COLLC_FLOAT16:
		return (struct fmt){ ldexpl(1, -11), ldexpl(1, -24), ldexpl(1, -25) };
	case COLLC_BFLOAT16:
		return (struct fmt){ ldexpl(1, -8), ldexpl(1, -24), ldexpl(1, -134) };
	case COLLC_FLOAT32:
		return (struct fmt){ ldexpl(1, -24), 0, ldexpl(1, -150) };
	default:
		return (struct fmt){ ldexpl(1, -53), 0, ldexpl(1, -1075) };
	}
}

static int check_int(const struct rc_case *c, int nranks, const void *result, const char *what)
{
	size_t es = sizes[c->dtype];
	uint64_t mask = width_mask(c->dtype);
	int bad = 0;

	for (size_t i = 0; i < c->count; i++) {
		uint64_t acc = rc_input_bits(c, 0, i), got = load_bits(result, i, es), want;

		for (int r = 1; r < nranks; r++) {
			uint64_t x = rc_input_bits(c, r, i);

			switch (c->op) {
			case COLLC_SUM:
			case COLLC_AVG:
				acc = (acc + x) & mask;
				break;
			case COLLC_PROD:
				acc = (acc * x) & mask;
				break;
			case COLLC_MAX:
				if (is_signed(c->dtype) ? sign_extend(x, c->dtype) > sign_extend(acc, c->dtype)
							: x > acc)
					acc = x;
				break;
			case COLLC_MIN:
				if (is_signed(c->dtype) ? sign_extend(x, c->dtype) < sign_extend(acc, c->dtype)
							: x < acc)
					acc = x;
				break;
			}
		}
		want = acc;
		if (c->op == COLLC_AVG) {
			/* The wrapped sum, divided by nranks with C truncation. */
			if (is_signed(c->dtype))
				want = (uint64_t)(sign_extend(acc, c->dtype) / (int64_t)nranks) & mask;
			else
				want = acc / (uint64_t)nranks;
		}
		if (got != want) {
			if (bad < 5)
				h_fail("%s: %s %s count %zu nranks %d: element %zu is %#" PRIx64
				       " (%" PRId64 "), want %#" PRIx64 " (%" PRId64 ")", what,
				       rc_dtype_name(c->dtype), rc_op_name(c->op), c->count, nranks, i, got,
				       is_signed(c->dtype) ? sign_extend(got, c->dtype) : (int64_t)got, want,
				       is_signed(c->dtype) ? sign_extend(want, c->dtype) : (int64_t)want);
			bad++;
		}
	}
	if (bad)
		h_log("%s: %d of %zu elements wrong", what, bad, c->count);
	return bad != 0;
}

static int check_float(const struct rc_case *c, int nranks, const void *result, const char *what,
		       double *ret_worst)
{
	size_t es = sizes[c->dtype];
	struct fmt f = fmt_of(c->dtype);
	long double d = f.u + f.uc + f.u * f.uc, steps = nranks - 1;
	long double grow = powl(1 + d, steps) - 1, ref_u = LDBL_EPSILON / 2;
	double worst = 0;
	int bad = 0;

	for (size_t i = 0; i < c->count; i++) {
		long double got = decode(load_bits(result, i, es), c->dtype), ref = 0, mag = 0, tol = 0;
		long double x0 = decode(rc_input_bits(c, 0, i), c->dtype), err;

		switch (c->op) {
		case COLLC_SUM:
		case COLLC_AVG:
			ref = x0;
			mag = fabsl(x0);
			for (int r = 1; r < nranks; r++) {
				long double x = decode(rc_input_bits(c, r, i), c->dtype);

				ref += x;
				mag += fabsl(x);
			}
			tol = grow * mag + steps * f.abs * 1.01L + steps * ref_u * mag;
			if (c->op == COLLC_AVG) {
				tol = tol / nranks + 2 * d * (fabsl(ref) + tol) / nranks + f.abs;
				ref /= nranks;
			}
			break;
		case COLLC_PROD:
			ref = x0;
			for (int r = 1; r < nranks; r++)
				ref *= decode(rc_input_bits(c, r, i), c->dtype);
			tol = grow * fabsl(ref) + 2 * steps * ref_u * fabsl(ref);
			break;
		case COLLC_MAX:
		case COLLC_MIN:
			ref = x0;
			for (int r = 1; r < nranks; r++) {
				long double x = decode(rc_input_bits(c, r, i), c->dtype);

				if (c->op == COLLC_MAX ? x > ref : x < ref)
					ref = x;
			}
			break;
		}
		/* Guards against the rounding of the bound's own arithmetic. */
		tol *= 1 + ldexpl(1, -30);
		err = fabsl(got - ref);
		if (!isnan(got) && err <= tol) {
			if (tol > 0 && (double)(err / tol) > worst)
				worst = (double)(err / tol);
			continue;
		}
		if (bad < 5)
			h_fail("%s: %s %s count %zu nranks %d: element %zu is %.17Lg, want %.17Lg "
			       "(error %.3Lg, bound %.3Lg; rank 0 input %.17Lg)", what,
			       rc_dtype_name(c->dtype), rc_op_name(c->op), c->count, nranks, i, got, ref,
			       err, tol, x0);
		bad++;
	}
	if (bad)
		h_log("%s: %d of %zu elements wrong", what, bad, c->count);
	if (ret_worst)
		*ret_worst = worst;
	return bad != 0;
}

int rc_check(const struct rc_case *c, int nranks, const void *result, const char *what,
	     double *ret_worst)
{
	if (ret_worst)
		*ret_worst = 0;
	if (is_float(c->dtype))
		return check_float(c, nranks, result, what, ret_worst);
	return check_int(c, nranks, result, what);
}

int rc_allreduce(const struct rc_case *c, struct collc_ctx *ctx, struct collc_comm *comm, int rank,
		 int nranks, void *send, void *recv, const char *what)
{
	collc_req req;
	int r;

	rc_fill(c, rank, send);
	r = collc_allreduce(comm, send, recv, c->count, c->dtype, c->op, &req);
	if (r == 0)
		r = collc_wait(ctx, req, 10000);
	if (r < 0)
		return h_fail("rank %d: %s: %s", rank, what, collc_strerror(r));
	return rc_check(c, nranks, recv, what, NULL);
}

int rc_join_allreduce(const struct collc_unique_id *id, const struct rc_case *c, int rank,
		      int nranks, const char *what)
{
	size_t bytes = c->count * rc_size(c->dtype);
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	void *send, *recv;

	if (h_join_alloc(id, nranks, rank, bytes, &ctx, &comm, &send, &recv) < 0)
		return 1;
	if (rc_allreduce(c, ctx, comm, rank, nranks, send, recv, what))
		return 1;
	collc_comm_destroy(comm);
	collc_disconnect(ctx);
	return 0;
}

void rc_canary_fill(void *p, size_t n, uint64_t tag)
{
	unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(h_mix(tag + i / 8) >> (8 * (i % 8)));
}

long rc_canary_check(const void *p, size_t from, size_t to, uint64_t tag)
{
	const unsigned char *b = p;

	for (size_t i = from; i < to; i++)
		if (b[i] != (unsigned char)(h_mix(tag + i / 8) >> (8 * (i % 8))))
			return (long)i;
	return -1;
}
