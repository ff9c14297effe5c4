/* SPDX-License-Identifier: MIT */
/*
 * Inputs and reference checks for collectives (see refcheck.h).
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
 *
 * Exact data (rc_case.exact = n) are small integers for which every partial
 * result of any order is exact: |x| <= 8 (SUM, MAX, MIN), n * [-4, 4] (AVG,
 * so the mean is an integer), {-2, -1, 1, 2} (PROD); integers of the full
 * width otherwise (two's complement wraps exactly). Results must match the
 * encoding of the reference bit for bit.
 *
 * fp8 (E4M3, E5M2) has 4 or 3 significant bits, so the bounds above, built on
 * a relative error per step, would allow anything at 64 ranks. fp8 sums get a
 * bound of their own, in absolute terms (fp8_tol below). Every step adds two
 * values and rounds once to fp8 (the float sum before it adds at most 2^-24
 * relative): a ring rounds on every hop, one-shot and two-shot after every
 * peer. Whatever the order, the operands of a step are a partial sum of the
 * inputs plus the errors of earlier steps, and a partial sum lies between -N
 * and P (the sums of the negative and of the positive inputs). So step k
 * errs by at most h(B + E_{k-1}), B = max(P, N), h(v) half the fp8 spacing at
 * magnitude v (plus 2^-24 v), and E_k = E_{k-1} + h(B + E_{k-1}) bounds the
 * error after k steps; the last step's operand is S plus the error so far.
 * It holds while nothing saturates, that is while B + E stays below the
 * largest finite value, which the inputs guarantee up to 64 ranks: random
 * fp8 data have magnitudes in [2^-6, 2^-2), so B <= 15 and B + E <= 233 < 448
 * in E4M3 (3329 < 57344 in E5M2) even when every input has the same sign
 * ([2^-5, 2^-1) could reach 448). The bound is tight for few ranks (2 ranks:
 * the correctly rounded sum, and reached) and loose for many, as fp8 sums
 * are; the exact data below check many ranks bit for bit. PROD: only ranks
 * 0..3 hold factors in [0.5, 2), the others +-1, so partial products stay in
 * (2^-4, 2^4) and only steps between two such factors round: the bound is
 * ((1 + d)^(m-1) - 1) |P| for m of them, d as above with u = 2^-4 (E4M3) or
 * 2^-3 (E5M2). AVG: the sum's bound / n plus one rounding of the quotient.
 *
 * Exact fp8 data: K = min(n, L) ranks per element (L = 16 for E4M3, 8 for
 * E5M2, the integers they hold exactly) carry integers |x| <= L / K, the
 * others 0, so every partial sum is an integer of at most L; PROD takes +-2
 * on up to 8 ranks and +-1 elsewhere (powers of two up to 256); AVG is S / n
 * rounded once to nearest even (the float quotient the executors round to
 * fp8 is S / n to 24 bits, and a non-terminating S / n with n <= 64 has no
 * run of 18 equal bits that could make that second rounding differ).
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "proto/dtype.h"
#include "refcheck.h"

/* The five classic collectives; all-to-all and send/recv are plain copies, checked bit for bit. */
_Static_assert(RC_ALLREDUCE == COLLC_OP_ALLREDUCE - 1 && RC_REDUCE == COLLC_OP_REDUCE - 1 &&
		       (int)RC_NUM_COLLS == (int)COLLC_OP_REDUCE,
	       "enum rc_coll follows COLLC_OP_*");

static const char *const dtype_names[COLLC_NUM_DTYPES] = COLLC_DTYPE_NAMES;
static const char *const op_names[COLLC_NUM_REDOPS] = COLLC_REDOP_NAMES;
static const char *const coll_names[RC_NUM_COLLS] = {
	"allreduce", "allgather", "reduce_scatter", "broadcast", "reduce",
};

static void report_stderr(int fail, const char *line)
{
	fprintf(stderr, "%s%s\n", fail ? "FAIL: " : "", line);
}

static rc_report_fn *report_fn = report_stderr;

void rc_set_report(rc_report_fn *fn)
{
	report_fn = fn ? fn : report_stderr;
}

static int __attribute__((format(printf, 2, 3))) say(int fail, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	report_fn(fail, line);
	return 1;
}

const char *rc_dtype_name(collc_dtype dtype)
{
	return (unsigned)dtype < COLLC_NUM_DTYPES ? dtype_names[dtype] : "?";
}

const char *rc_op_name(collc_redop op)
{
	return (unsigned)op < COLLC_NUM_REDOPS ? op_names[op] : "?";
}

const char *rc_coll_name(enum rc_coll coll)
{
	return (unsigned)coll < RC_NUM_COLLS ? coll_names[coll] : "?";
}

size_t rc_size(collc_dtype dtype)
{
	return collc_dtype_bytes(dtype);
}

uint64_t rc_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static int is_float(collc_dtype d)
{
	return d >= COLLC_FLOAT16;
}

static int is_fp8(collc_dtype d)
{
	return d == COLLC_FLOAT8_E4M3 || d == COLLC_FLOAT8_E5M2;
}

/* The two fp8 formats, in the numbers the checks need (proto/fp8.h is not used here). */
struct fp8_fmt {
	int mbits, bias, emin; /* emin: exponent of the smallest normal */
	long double max;       /* largest finite */
	int exact_max;         /* integers up to this are exact: 2^(mbits+1) */
};

static struct fp8_fmt fp8_fmt_of(collc_dtype d)
{
	if (d == COLLC_FLOAT8_E4M3)
		return (struct fp8_fmt){ 3, 7, -6, 448.0L, 16 };
	return (struct fp8_fmt){ 2, 15, -14, 57344.0L, 8 };
}

static long double fp8_decode(uint64_t b, collc_dtype d)
{
	struct fp8_fmt f = fp8_fmt_of(d);
	int e = (int)((b & 0x7f) >> f.mbits), m = (int)(b & ((1u << f.mbits) - 1));
	int emax = 0x7f >> f.mbits;
	long double v;

	if (d == COLLC_FLOAT8_E4M3 && (b & 0x7f) == 0x7f)
		return NAN;
	if (d == COLLC_FLOAT8_E5M2 && e == emax)
		v = m ? NAN : INFINITY;
	else if (e == 0)
		v = ldexpl((long double)m, f.emin - f.mbits);
	else
		v = ldexpl((long double)((1 << f.mbits) + m), e - f.bias - f.mbits);
	return (b & 0x80) ? -v : v;
}

/* The exponent of v's binade, no lower than the smallest normal's (v >= 0). */
static int fp8_binade(long double v, const struct fp8_fmt *f)
{
	int e;

	if (v == 0)
		return f->emin;
	frexpl(v, &e);
	return e - 1 < f->emin ? f->emin : e - 1;
}

/* v rounded to nearest even in fp8, saturating; NaN 0x7f. */
static uint64_t fp8_encode(long double v, collc_dtype d)
{
	struct fp8_fmt f = fp8_fmt_of(d);
	uint64_t s = signbit(v) ? 0x80 : 0;
	long double a = fabsl(v), q, r;
	int e;

	if (isnan(v))
		return 0x7f;
	if (a > f.max)
		a = f.max;
	e = fp8_binade(a, &f);
	q = ldexpl(1, e - f.mbits); /* the spacing there */
	r = rintl(a / q) * q;       /* to nearest even in the default rounding mode */
	if (r > f.max)
		r = f.max;
	if (r < ldexpl(1, f.emin))
		return s | (uint64_t)(r / q); /* subnormal or zero: the mantissa alone */
	e = fp8_binade(r, &f);
	return s | (uint64_t)(e + f.bias) << f.mbits |
	       ((uint64_t)(r / ldexpl(1, e - f.mbits)) & ((1u << f.mbits) - 1));
}

/* The largest error of one fp8 step whose exact operand has magnitude at most v. */
static long double fp8_step_err(long double v, const struct fp8_fmt *f)
{
	return ldexpl(1, fp8_binade(v, f) - f->mbits - 1) + ldexpl(v, -24);
}

static int is_signed(collc_dtype d)
{
	return d == COLLC_INT8 || d == COLLC_INT32 || d == COLLC_INT64;
}

static uint64_t width_mask(collc_dtype d)
{
	size_t bits = rc_size(d) * 8;

	return bits == 64 ? UINT64_MAX : (1ull << bits) - 1;
}

static int64_t sign_extend(uint64_t v, collc_dtype d)
{
	size_t bits = rc_size(d) * 8;

	if (bits == 64)
		return (int64_t)v;
	v &= (1ull << bits) - 1;
	if (v & (1ull << (bits - 1)))
		v |= ~((1ull << bits) - 1);
	return (int64_t)v;
}

/* A small integer (|v| <= 2048) in the float dtype's encoding: exact. */
static uint64_t encode_small(collc_dtype d, double v)
{
	float f = (float)v;
	uint32_t fb;
	uint64_t b;

	switch (d) {
	case COLLC_FLOAT64:
		memcpy(&b, &v, 8);
		return b;
	case COLLC_FLOAT32:
		memcpy(&fb, &f, 4);
		return fb;
	case COLLC_BFLOAT16:
		memcpy(&fb, &f, 4);
		return fb >> 16;
	case COLLC_FLOAT8_E4M3:
	case COLLC_FLOAT8_E5M2:
		/* v need not be an integer here: AVG's mean, rounded */
		return fp8_encode(v, d);
	default: { /* float16 */
		uint64_t s = v < 0 ? 0x8000u : 0, m = (uint64_t)(v < 0 ? -v : v);
		int e = 0;

		if (m == 0)
			return s;
		while ((m >> (e + 1)) != 0)
			e++;
		return s | (uint64_t)(e + 15) << 10 | ((m << (10 - e)) & 0x3ffu);
	}
	}
}

/* Exact fp8 data (see the top of the file): which ranks carry what depends on (rank + i) % n. */
static uint64_t exact_fp8_bits(const struct rc_case *c, int rank, size_t i, uint64_t x)
{
	int64_t n = c->exact, lim = fp8_fmt_of(c->dtype).exact_max;
	int64_t k = n < lim ? n : lim,
		slot = (int64_t)(((uint64_t)(unsigned)rank + i) % (uint64_t)n);
	int64_t v;

	if (c->op == COLLC_PROD) {
		v = slot < 8 && (x & 2) ? 2 : 1;
		return encode_small(c->dtype, (double)((x & 1) ? -v : v));
	}
	if (slot >= k)
		return encode_small(c->dtype, 0);
	v = (int64_t)(x % (uint64_t)(2 * (lim / k) + 1)) - lim / k;
	return encode_small(c->dtype, (double)v);
}

/* Exact data: every partial result stays a small integer, in any order. */
static uint64_t exact_bits(const struct rc_case *c, int rank, size_t i, uint64_t x)
{
	int64_t n = c->exact, v;

	if (!is_float(c->dtype)) {
		if (c->op != COLLC_AVG)
			return x & width_mask(c->dtype);
		v = is_signed(c->dtype) ? (int64_t)(x % 9) - 4 : (int64_t)(x % 9);
		return (uint64_t)(v * n) & width_mask(c->dtype);
	}
	if (is_fp8(c->dtype))
		return exact_fp8_bits(c, rank, i, x);
	switch (c->op) {
	case COLLC_PROD: {
		static const int prod_vals[4] = { -2, -1, 1, 2 };

		v = prod_vals[x & 3];
		break;
	}
	case COLLC_AVG:
		v = n * ((int64_t)(x % 9) - 4);
		break;
	default:
		v = (int64_t)(x % 17) - 8;
		break;
	}
	return encode_small(c->dtype, (double)v);
}

/*
 * A random float of `width` bits (exponent bias `bias`, `mbits` of mantissa
 * taken from x at bit mshift), its sign bit 0 of x: magnitudes in [0.5, 2)
 * for a product, else in [2^-4, 2).
 */
static uint64_t float_input_bits(uint64_t x, int prod, unsigned width, uint64_t bias,
				 unsigned mbits, unsigned mshift)
{
	uint64_t e = prod ? bias - 1 + ((x >> 1) & 1) : bias - 4 + ((x >> 1) % 5);
	uint64_t m = (x >> mshift) & ((1ull << mbits) - 1);

	return (x & 1) << (width - 1) | e << mbits | m;
}

uint64_t rc_input_bits(const struct rc_case *c, int rank, size_t i)
{
	uint64_t x = rc_mix(rc_mix(c->seed ^ ((uint64_t)(unsigned)rank << 56)) ^ (uint64_t)i);
	int prod = c->op == COLLC_PROD;

	if (c->exact)
		return exact_bits(c, rank, i, x);

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
		return float_input_bits(x, prod, 16, 15, 10, 8);
	case COLLC_BFLOAT16:
		return float_input_bits(x, prod, 16, 127, 7, 8);
	case COLLC_FLOAT32:
		return float_input_bits(x, prod, 32, 127, 23, 8);
	case COLLC_FLOAT64:
		return float_input_bits(x, prod, 64, 1023, 52, 11);
	case COLLC_FLOAT8_E4M3:
	case COLLC_FLOAT8_E5M2: {
		struct fp8_fmt f = fp8_fmt_of(c->dtype);
		uint64_t m = (x >> 8) & ((1u << f.mbits) - 1);

		/* PROD: factors in [0.5, 2) on ranks 0..3, +-1 elsewhere; else [2^-6, 2^-2). */
		if (prod)
			return rank < 4 ? float_input_bits(x, 1, 8, (uint64_t)f.bias,
							   (unsigned)f.mbits, 8)
					: (x & 1) << 7 | (uint64_t)f.bias << f.mbits;
		return (x & 1) << 7 | (uint64_t)(f.bias - 6 + (int)((x >> 1) % 4)) << f.mbits | m;
	}
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
	size_t es = rc_size(c->dtype);

	for (size_t i = 0; i < c->count; i++)
		store_bits(buf, i, es, rc_input_bits(c, rank, i));
}

int rc_check_input(const struct rc_case *c, int rank, const void *buf, const char *what)
{
	size_t es = rc_size(c->dtype);

	for (size_t i = 0; i < c->count; i++) {
		uint64_t want = rc_input_bits(c, rank, i), got = load_bits(buf, i, es);

		if (got != want)
			return say(1,
				   "%s: %s %s count %zu: element %zu is %#" PRIx64
				   ", rank %d's input there is %#" PRIx64,
				   what, rc_dtype_name(c->dtype), rc_op_name(c->op), c->count, i,
				   got, rank, want);
	}
	return 0;
}

int rc_check_slice(const struct rc_case *c, int rank, size_t first, size_t n, const void *buf,
		   const char *what)
{
	size_t es = rc_size(c->dtype);

	for (size_t i = 0; i < n; i++) {
		uint64_t want = rc_input_bits(c, rank, first + i), got = load_bits(buf, i, es);

		if (got != want)
			return say(1,
				   "%s: %s count %zu: element %zu is %#" PRIx64
				   ", rank %d's input element %zu is %#" PRIx64,
				   what, rc_dtype_name(c->dtype), n, i, got, rank, first + i, want);
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
	case COLLC_FLOAT8_E4M3:
	case COLLC_FLOAT8_E5M2:
		return fp8_decode(b, d);
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

/*
 * Result element k is element first + k of the reduction (a block of a
 * reduce-scatter); n elements.
 */
static int check_int(const struct rc_case *c, int nranks, size_t first, size_t n,
		     const void *result, const char *what)
{
	size_t es = rc_size(c->dtype);
	uint64_t mask = width_mask(c->dtype);
	int bad = 0;

	for (size_t k = 0; k < n; k++) {
		size_t i = first + k;
		uint64_t acc = rc_input_bits(c, 0, i), got = load_bits(result, k, es), want;

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
				if (is_signed(c->dtype)
					    ? sign_extend(x, c->dtype) > sign_extend(acc, c->dtype)
					    : x > acc)
					acc = x;
				break;
			case COLLC_MIN:
				if (is_signed(c->dtype)
					    ? sign_extend(x, c->dtype) < sign_extend(acc, c->dtype)
					    : x < acc)
					acc = x;
				break;
			}
		}
		want = acc;
		if (c->op == COLLC_AVG) {
			/* The wrapped sum, divided by nranks with C truncation. */
			if (is_signed(c->dtype))
				want = (uint64_t)(sign_extend(acc, c->dtype) / (int64_t)nranks) &
				       mask;
			else
				want = acc / (uint64_t)nranks;
		}
		if (got != want) {
			if (bad < 5)
				say(1,
				    "%s: %s %s count %zu nranks %d: element %zu is %#" PRIx64
				    " (%" PRId64 "), want %#" PRIx64 " (%" PRId64 ")",
				    what, rc_dtype_name(c->dtype), rc_op_name(c->op), c->count,
				    nranks, k, got,
				    is_signed(c->dtype) ? sign_extend(got, c->dtype) : (int64_t)got,
				    want,
				    is_signed(c->dtype) ? sign_extend(want, c->dtype)
							: (int64_t)want);
			bad++;
		}
	}
	if (bad)
		say(0, "%s: %d of %zu elements wrong", what, bad, n);
	return bad != 0;
}

/*
 * The fp8 bound of SUM (AVG: avg != 0) and PROD, see the top of the file. pos and neg: the
 * sums of the positive inputs and of the magnitudes of the negative ones; m: the factors
 * other than +-1. -1 when the bound leaves the format's range (inputs not made for it).
 */
static long double fp8_tol(const struct rc_case *c, int nranks, long double ref, long double pos,
			   long double neg, int m)
{
	struct fp8_fmt f = fp8_fmt_of(c->dtype);
	long double b = pos > neg ? pos : neg, e = 0, u = ldexpl(1, -f.mbits - 1);
	long double d = u + ldexpl(1, -24) + ldexpl(u, -24);

	if (c->op == COLLC_PROD)
		return (powl(1 + d, m > 1 ? m - 1 : 0) - 1) * fabsl(ref);
	for (int k = 1; k < nranks; k++) {
		/* the last step's operand is the whole sum plus the error so far */
		long double at =
			(k + 1 == nranks ? fabsl(c->op == COLLC_AVG ? ref * nranks : ref) : b) + e;

		if (b + e >= f.max)
			return -1;
		e += fp8_step_err(at, &f);
	}
	if (c->op == COLLC_AVG)
		e = e / nranks + fp8_step_err((fabsl(ref) * nranks + e) / nranks, &f);
	return e;
}

static int check_float(const struct rc_case *c, int nranks, size_t first, size_t n,
		       const void *result, const char *what, double *ret_worst)
{
	size_t es = rc_size(c->dtype);
	struct fmt f = fmt_of(c->dtype);
	long double d = f.u + f.uc + f.u * f.uc, steps = nranks - 1;
	long double grow = powl(1 + d, steps) - 1, ref_u = LDBL_EPSILON / 2;
	double worst = 0;
	int bad = 0;

	for (size_t k = 0; k < n; k++) {
		size_t i = first + k;
		uint64_t got_bits = load_bits(result, k, es);
		long double got = decode(got_bits, c->dtype), ref = 0, mag = 0, tol = 0;
		long double x0 = decode(rc_input_bits(c, 0, i), c->dtype), err;
		long double pos = x0 > 0 ? x0 : 0, neg = x0 < 0 ? -x0 : 0;
		int m = fabsl(x0) != 1;

		switch (c->op) {
		case COLLC_SUM:
		case COLLC_AVG:
			ref = x0;
			mag = fabsl(x0);
			for (int r = 1; r < nranks; r++) {
				long double x = decode(rc_input_bits(c, r, i), c->dtype);

				ref += x;
				mag += fabsl(x);
				pos += x > 0 ? x : 0;
				neg += x < 0 ? -x : 0;
			}
			tol = grow * mag + steps * f.abs * 1.01L + steps * ref_u * mag;
			if (c->op == COLLC_AVG) {
				tol = tol / nranks + 2 * d * (fabsl(ref) + tol) / nranks + f.abs;
				ref /= nranks;
			}
			break;
		case COLLC_PROD:
			ref = x0;
			for (int r = 1; r < nranks; r++) {
				long double x = decode(rc_input_bits(c, r, i), c->dtype);

				ref *= x;
				m += fabsl(x) != 1;
			}
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
		if (is_fp8(c->dtype) && c->op != COLLC_MAX && c->op != COLLC_MIN && !c->exact) {
			/* the inputs' sums are exact in long double: no reference error */
			tol = fp8_tol(c, nranks, ref, pos, neg, m);
			if (tol < 0) {
				if (bad++ < 5)
					say(1,
					    "%s: %s %s nranks %d: element %zu: inputs too large for "
					    "the fp8 bound (sums %.6Lg and -%.6Lg)",
					    what, rc_dtype_name(c->dtype), rc_op_name(c->op),
					    nranks, k, pos, neg);
				continue;
			}
		}
		/* Guards against the rounding of the bound's own arithmetic. */
		tol *= 1 + ldexpl(1, -30);
		if (c->exact)
			tol = 0; /* small integers: exact in any order, bit for bit (+0 for a zero) */
		err = fabsl(got - ref);
		if (c->exact ? got_bits == encode_small(c->dtype, (double)(ref == 0 ? 0 : ref))
			     : !isnan(got) && err <= tol) {
			if (tol > 0 && (double)(err / tol) > worst)
				worst = (double)(err / tol);
			continue;
		}
		if (bad < 5)
			say(1,
			    "%s: %s %s count %zu nranks %d: element %zu is %.17Lg [%#" PRIx64
			    "], want "
			    "%.17Lg (error %.3Lg, bound %.3Lg; rank 0 input %.17Lg)",
			    what, rc_dtype_name(c->dtype), rc_op_name(c->op), c->count, nranks, k,
			    got, got_bits, ref, err, tol, x0);
		bad++;
	}
	if (bad)
		say(0, "%s: %d of %zu elements wrong", what, bad, n);
	if (ret_worst)
		*ret_worst = worst;
	return bad != 0;
}

static int check_range(const struct rc_case *c, int nranks, size_t first, size_t n,
		       const void *result, const char *what, double *ret_worst)
{
	if (ret_worst)
		*ret_worst = 0;
	if (is_float(c->dtype))
		return check_float(c, nranks, first, n, result, what, ret_worst);
	return check_int(c, nranks, first, n, result, what);
}

int rc_check(const struct rc_case *c, int nranks, const void *result, const char *what,
	     double *ret_worst)
{
	return check_range(c, nranks, 0, c->count, result, what, ret_worst);
}

void rc_fill_coll(const struct rc_case *c, enum rc_coll coll, int nranks, int rank, void *send)
{
	struct rc_case all = *c;

	if (coll == RC_REDUCE_SCATTER)
		all.count = c->count * (size_t)nranks;
	rc_fill(&all, rank, send);
}

int rc_check_send(const struct rc_case *c, enum rc_coll coll, int nranks, int rank,
		  const void *send, const char *what)
{
	struct rc_case all = *c;

	if (coll == RC_REDUCE_SCATTER)
		all.count = c->count * (size_t)nranks;
	return rc_check_input(&all, rank, send, what);
}

int rc_check_coll(const struct rc_case *c, enum rc_coll coll, int nranks, int rank, int root,
		  const void *recv, const char *what)
{
	size_t bb = c->count * rc_size(c->dtype);
	char blk[256];

	switch (coll) {
	case RC_ALLGATHER:
		for (int r = 0; r < nranks; r++) {
			snprintf(blk, sizeof(blk), "%s, block %d", what, r);
			if (rc_check_input(c, r, (const char *)recv + (size_t)r * bb, blk))
				return 1;
		}
		return 0;
	case RC_REDUCE_SCATTER:
		snprintf(blk, sizeof(blk), "%s, rank %d's block", what, rank);
		return check_range(c, nranks, (size_t)rank * c->count, c->count, recv, blk, NULL);
	case RC_BROADCAST:
		return rc_check_input(c, root, recv, what);
	case RC_REDUCE:
		if (rank != root)
			return 0; /* nothing is written there */
				  /* fall through */
	default:
		return rc_check(c, nranks, recv, what, NULL);
	}
}

void rc_canary_fill(void *p, size_t n, uint64_t tag)
{
	unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(rc_mix(tag + i / 8) >> (8 * (i % 8)));
}

long rc_canary_check(const void *p, size_t from, size_t to, uint64_t tag)
{
	const unsigned char *b = p;

	for (size_t i = from; i < to; i++)
		if (b[i] != (unsigned char)(rc_mix(tag + i / 8) >> (8 * (i % 8))))
			return (long)i;
	return -1;
}
