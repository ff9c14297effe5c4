/* SPDX-License-Identifier: MIT */
/*
 * Unit test of daemon/reduce.c: every dtype x op against a reference in
 * uint64 (integers, exact) or double (floats, within a rounding bound), fp8
 * bit for bit against the same hops taken through proto/fp8.h (which
 * tests/unit/test_fp8.c checks by brute force), the aliasing and size edge
 * cases, and the float16/bfloat16 conversions.
 *
 * Inputs come from a seeded generator; COLLC_TEST_SEED=N reproduces a run
 * and every failure prints the seed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/cpu/reduce.h"
#include "proto/dtype.h"
#include "proto/fp8.h"
#include "tests/unit/float_bits.h"

#define GUARD  64 /* canary elements after every output buffer */
#define CANARY 0xa5

static uint64_t seed = 0xc011c5eedULL;
static uint64_t rng;

static const char *const dtype_names[COLLC_NUM_DTYPES] = {
	"int8",    "uint8",    "int32",   "uint32",  "int64",       "uint64",
	"float16", "bfloat16", "float32", "float64", "float8_e4m3", "float8_e5m2",
};
static const char *const op_names[COLLC_NUM_REDOPS] = { "sum", "prod", "max", "min", "avg" };

static void failf(const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fail_msg("%s (seed %" PRIu64 ", rerun with COLLC_TEST_SEED=%" PRIu64 ")", msg, seed, seed);
}

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond))                                                                       \
			failf(__VA_ARGS__);                                                        \
	} while (0)

/* splitmix64; each test restarts it from the seed so tests reproduce alone. */
static uint64_t rnd(void)
{
	uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void rng_reset(uint64_t tag)
{
	rng = seed ^ (tag * 0x9e3779b97f4a7c15ULL);
}

static int is_float(int dtype)
{
	return dtype >= COLLC_FLOAT16;
}

static int is_fp8(int dtype)
{
	return dtype == COLLC_FLOAT8_E4M3 || dtype == COLLC_FLOAT8_E5M2;
}

static int is_signed(int dtype)
{
	return dtype == COLLC_INT8 || dtype == COLLC_INT32 || dtype == COLLC_INT64;
}

/* Machine epsilon of the format: every rounding step errs by at most half. */
static double dtype_eps(int dtype)
{
	switch (dtype) {
	case COLLC_FLOAT16:
		return 0x1p-10;
	case COLLC_BFLOAT16:
		return 0x1p-7;
	case COLLC_FLOAT32:
		return 0x1p-23;
	default:
		return 0x1p-52;
	}
}

/* Decodes binary16 without the module under test. */
static double half_value(uint16_t h)
{
	int e = (h >> 10) & 0x1f, m = h & 0x3ff;
	double v;

	if (e == 0)
		v = ldexp(m, -24);
	else if (e == 31)
		v = m ? NAN : INFINITY;
	else
		v = ldexp(1024 + m, e - 25);
	return (h & 0x8000) ? -v : v;
}

static double bf16_value(uint16_t b)
{
	return bits_to_float((uint32_t)b << 16);
}

static uint64_t get_bits(const void *buf, size_t i, int dtype)
{
	switch (collc_dtype_bytes(dtype)) {
	case 1:
		return ((const uint8_t *)buf)[i];
	case 2:
		return ((const uint16_t *)buf)[i];
	case 4:
		return ((const uint32_t *)buf)[i];
	default:
		return ((const uint64_t *)buf)[i];
	}
}

static void put_bits(void *buf, size_t i, int dtype, uint64_t v)
{
	switch (collc_dtype_bytes(dtype)) {
	case 1:
		((uint8_t *)buf)[i] = (uint8_t)v;
		break;
	case 2:
		((uint16_t *)buf)[i] = (uint16_t)v;
		break;
	case 4:
		((uint32_t *)buf)[i] = (uint32_t)v;
		break;
	default:
		((uint64_t *)buf)[i] = v;
		break;
	}
}

static uint64_t mask_bits(uint64_t v, int dtype)
{
	size_t bits = 8 * collc_dtype_bytes(dtype);

	return bits == 64 ? v : v & ((1ULL << bits) - 1);
}

/* Integer element as uint64: sign-extended for the signed dtypes. */
static uint64_t int_value(uint64_t bits, int dtype)
{
	size_t shift = 64 - 8 * collc_dtype_bytes(dtype);

	if (!is_signed(dtype))
		return bits;
	return (uint64_t)((int64_t)(bits << shift) >> shift);
}

static double float_value(uint64_t bits, int dtype)
{
	double d;

	switch (dtype) {
	case COLLC_FLOAT16:
		return half_value((uint16_t)bits);
	case COLLC_BFLOAT16:
		return bf16_value((uint16_t)bits);
	case COLLC_FLOAT32:
		return bits_to_float((uint32_t)bits);
	case COLLC_FLOAT8_E4M3:
		return collc_e4m3_to_float((uint8_t)bits);
	case COLLC_FLOAT8_E5M2:
		return collc_e5m2_to_float((uint8_t)bits);
	default:
		memcpy(&d, &bits, sizeof(d));
		return d;
	}
}

static uint64_t float_bits(double v, int dtype)
{
	uint64_t u;

	switch (dtype) {
	case COLLC_FLOAT16:
		return red_float_to_half((float)v);
	case COLLC_BFLOAT16:
		return red_float_to_bf16((float)v);
	case COLLC_FLOAT32:
		return float_to_bits((float)v);
	case COLLC_FLOAT8_E4M3:
		return collc_float_to_e4m3((float)v);
	case COLLC_FLOAT8_E5M2:
		return collc_float_to_e5m2((float)v);
	default:
		memcpy(&u, &v, sizeof(u));
		return u;
	}
}

/*
 * A random element for op. Integers use all bits: wrap is checked exactly.
 * Float magnitudes stay in [2^-8, 2^9) for SUM/AVG (no overflow, no
 * subnormals in 16 bits) and in [0.5, 2) for PROD, so that a product of eight
 * fits every format; MAX/MIN spread wider. fp8 rounds these (its subnormals,
 * saturation at 448 for e4m3 included): its check is bit for bit.
 */
static uint64_t gen(int dtype, int op)
{
	uint64_t r = rnd(), bits;
	int e;
	double v;

	if (!is_float(dtype))
		return mask_bits(r, dtype);
	if (op == COLLC_PROD)
		e = (int)(r % 2) - 1;
	else if (op == COLLC_MAX || op == COLLC_MIN)
		e = (int)(r % 25) - 12;
	else
		e = (int)(r % 17) - 8;
	/* sign from the top bit, a random mantissa in [1, 2), exponent e */
	bits = (r & (1ULL << 63)) | (uint64_t)(1023 + e) << 52 | (rnd() >> 12);
	memcpy(&v, &bits, sizeof(v));
	return float_bits(v, dtype);
}

static void *xmalloc(size_t size)
{
	void *p = malloc(size ? size : 1);

	assert_non_null(p);
	return p;
}

/* An output buffer of n elements followed by GUARD canary elements. */
static void *alloc_out(size_t n, int dtype)
{
	size_t sz = collc_dtype_bytes(dtype);
	uint8_t *p = xmalloc((n + GUARD) * sz);

	memset(p + n * sz, CANARY, GUARD * sz);
	return p;
}

static void check_guard(const void *buf, size_t n, int dtype, const char *what)
{
	size_t sz = collc_dtype_bytes(dtype);
	const uint8_t *p = (const uint8_t *)buf + n * sz;

	for (size_t i = 0; i < GUARD * sz; i++)
		CHECK(p[i] == CANARY, "%s %s: byte %zu past n=%zu overwritten", dtype_names[dtype],
		      what, i, n);
}

static uint64_t ref_int(const uint64_t *x, int k, int dtype, int op)
{
	uint64_t acc = x[0];

	for (int r = 1; r < k; r++) {
		switch (op) {
		case COLLC_SUM:
		case COLLC_AVG:
			acc += x[r];
			break;
		case COLLC_PROD:
			acc *= x[r];
			break;
		case COLLC_MAX:
			if (is_signed(dtype) ? (int64_t)x[r] > (int64_t)acc : x[r] > acc)
				acc = x[r];
			break;
		case COLLC_MIN:
			if (is_signed(dtype) ? (int64_t)x[r] < (int64_t)acc : x[r] < acc)
				acc = x[r];
			break;
		}
	}
	/* Wrapping mod 2^64 then truncating is wrapping mod 2^N. */
	acc = int_value(mask_bits(acc, dtype), dtype);
	if (op == COLLC_AVG)
		acc = is_signed(dtype) ? (uint64_t)((int64_t)acc / k) : acc / (uint64_t)k;
	return mask_bits(acc, dtype);
}

/* Reference and allowed error for floats. */
static void ref_float(const double *x, int k, int dtype, int op, double *ret_ref, double *ret_tol)
{
	double acc = x[0], sumabs = fabs(x[0]), eps = dtype_eps(dtype);

	for (int r = 1; r < k; r++) {
		sumabs += fabs(x[r]);
		switch (op) {
		case COLLC_SUM:
		case COLLC_AVG:
			acc += x[r];
			break;
		case COLLC_PROD:
			acc *= x[r];
			break;
		case COLLC_MAX:
			acc = x[r] > acc ? x[r] : acc;
			break;
		case COLLC_MIN:
			acc = x[r] < acc ? x[r] : acc;
			break;
		}
	}
	switch (op) {
	case COLLC_SUM:
		/* Recursive summation: each of k-1 steps errs by eps/2 of a partial sum */
		*ret_tol = (k - 1) * eps * sumabs;
		break;
	case COLLC_AVG:
		acc /= k;
		*ret_tol = (k - 1) * eps * sumabs / k + eps * fabs(acc);
		break;
	case COLLC_PROD:
		*ret_tol = k * eps * fabs(acc);
		break;
	default:
		*ret_tol = 0; /* the result is one of the inputs */
		break;
	}
	*ret_ref = acc;
}

/*
 * fp8: the hops of run_case one element at a time, each decoded to float,
 * combined, and rounded back through proto/fp8.h; AVG divides in float.
 */
static uint64_t ref_fp8(const uint64_t *x, int k, int dtype, int op)
{
	float acc = (float)float_value(x[0], dtype);

	for (int r = 1; r < k; r++) {
		float y = (float)float_value(x[r], dtype);
		/* run_case's hop r passes (acc, in[r]) when r % 3 == 0, else (in[r], acc):
		 * MAX and MIN pick b on a tie (+0 and -0), sum and product commute */
		float p = r % 3 == 0 ? acc : y, q = r % 3 == 0 ? y : acc;

		switch (op) {
		case COLLC_PROD:
			acc = p * q;
			break;
		case COLLC_MAX:
			acc = p > q ? p : q;
			break;
		case COLLC_MIN:
			acc = p < q ? p : q;
			break;
		default:
			acc = p + q;
			break;
		}
		acc = (float)float_value(float_bits(acc, dtype), dtype);
	}
	if (op == COLLC_AVG)
		acc = acc / (float)k;
	return float_bits(acc, dtype);
}

/*
 * Reduces k random arrays of n elements as a ring would, one red_reduce per
 * hop, cycling through the three aliasings, then red_finish; checks every
 * element against the reference and the canaries after the outputs.
 */
static void run_case(int dtype, int op, int k, size_t n)
{
	size_t sz = collc_dtype_bytes(dtype);
	void *in[8], *acc = alloc_out(n, dtype), *tmp = alloc_out(n, dtype);

	assert_true(k >= 2 && k <= 8);
	for (int r = 0; r < k; r++) {
		in[r] = xmalloc(n * sz); /* exact size: ASan sees any overread */
		for (size_t i = 0; i < n; i++)
			put_bits(in[r], i, dtype, gen(dtype, op));
	}

	memcpy(acc, in[0], n * sz);
	for (int r = 1; r < k; r++) {
		void *t;

		switch (r % 3) {
		case 0:
			red_reduce(acc, acc, in[r], n, dtype, op);
			break;
		case 1:
			red_reduce(tmp, in[r], acc, n, dtype, op);
			t = acc;
			acc = tmp;
			tmp = t;
			break;
		default:
			red_reduce(acc, in[r], acc, n, dtype, op);
			break;
		}
	}
	red_finish(acc, n, dtype, op, (uint32_t)k);

	for (size_t i = 0; i < n; i++) {
		uint64_t got = get_bits(acc, i, dtype);

		if (is_fp8(dtype)) {
			uint64_t x[8], want;

			for (int r = 0; r < k; r++)
				x[r] = get_bits(in[r], i, dtype);
			want = ref_fp8(x, k, dtype, op);
			CHECK(got == want,
			      "%s %s k=%d n=%zu [%zu]: got %#" PRIx64 " (%.9g), want %#" PRIx64
			      " (%.9g)",
			      dtype_names[dtype], op_names[op], k, n, i, got,
			      float_value(got, dtype), want, float_value(want, dtype));
		} else if (!is_float(dtype)) {
			uint64_t x[8], want;

			for (int r = 0; r < k; r++)
				x[r] = int_value(get_bits(in[r], i, dtype), dtype);
			want = ref_int(x, k, dtype, op);
			CHECK(got == want,
			      "%s %s k=%d n=%zu [%zu]: got %#" PRIx64 ", want %#" PRIx64,
			      dtype_names[dtype], op_names[op], k, n, i, got, want);
		} else {
			double x[8], want, tol, v = float_value(got, dtype);

			for (int r = 0; r < k; r++)
				x[r] = float_value(get_bits(in[r], i, dtype), dtype);
			ref_float(x, k, dtype, op, &want, &tol);
			CHECK(fabs(v - want) <= tol,
			      "%s %s k=%d n=%zu [%zu]: got %.17g, want %.17g +- %g",
			      dtype_names[dtype], op_names[op], k, n, i, v, want, tol);
		}
	}
	check_guard(acc, n, dtype, op_names[op]);
	check_guard(tmp, n, dtype, op_names[op]);

	for (int r = 0; r < k; r++)
		free(in[r]);
	free(acc);
	free(tmp);
}

static void test_all_dtypes_ops(void **state)
{
	static const size_t sizes[] = { 1, 2, 63, 64, 65, 200, 1000 };

	(void)state;
	rng_reset(1);
	for (int dt = 0; dt < COLLC_NUM_DTYPES; dt++)
		for (int op = 0; op < COLLC_NUM_REDOPS; op++)
			for (int k = 2; k <= 8; k++)
				for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
					run_case(dt, op, k, sizes[s]);
}

static void test_odd_sizes(void **state)
{
	static const size_t sizes[] = { 1, 3, 17, 1000003 };

	(void)state;
	rng_reset(2);
	for (int dt = 0; dt < COLLC_NUM_DTYPES; dt++)
		for (int op = 0; op < COLLC_NUM_REDOPS; op++)
			for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
				run_case(dt, op, 3, sizes[s]);
}

/* dst == a, dst == b and dst == a == b give what a separate dst gives. */
static void test_aliasing(void **state)
{
	const size_t n = 3 * 64 + 5; /* blocked part and tail */

	(void)state;
	rng_reset(3);
	for (int dt = 0; dt < COLLC_NUM_DTYPES; dt++) {
		size_t bytes = n * collc_dtype_bytes(dt);
		uint8_t *a = xmalloc(bytes), *b = xmalloc(bytes), *want = xmalloc(bytes);
		uint8_t *x = xmalloc(bytes);

		for (int op = 0; op < COLLC_NUM_REDOPS; op++) {
			for (size_t i = 0; i < n; i++) {
				put_bits(a, i, dt, gen(dt, op));
				put_bits(b, i, dt, gen(dt, op));
			}

			red_reduce(want, a, b, n, dt, op);
			memcpy(x, a, bytes);
			red_reduce(x, x, b, n, dt, op);
			CHECK(!memcmp(x, want, bytes), "%s %s: dst == a differs", dtype_names[dt],
			      op_names[op]);
			memcpy(x, b, bytes);
			red_reduce(x, a, x, n, dt, op);
			CHECK(!memcmp(x, want, bytes), "%s %s: dst == b differs", dtype_names[dt],
			      op_names[op]);

			red_reduce(want, a, a, n, dt, op);
			memcpy(x, a, bytes);
			red_reduce(x, x, x, n, dt, op);
			CHECK(!memcmp(x, want, bytes), "%s %s: dst == a == b differs",
			      dtype_names[dt], op_names[op]);
		}
		free(a);
		free(b);
		free(want);
		free(x);
	}
}

static void test_zero_length(void **state)
{
	(void)state;
	for (int dt = 0; dt < COLLC_NUM_DTYPES; dt++) {
		for (int op = 0; op < COLLC_NUM_REDOPS; op++) {
			void *buf = alloc_out(0, dt);

			red_reduce(NULL, NULL, NULL, 0, dt, op);
			red_finish(NULL, 0, dt, op, 4);
			red_reduce(buf, buf, buf, 0, dt, op);
			red_finish(buf, 0, dt, op, 4);
			check_guard(buf, 0, dt, "n=0");
			free(buf);
		}
	}
}

static void test_sizes_and_validity(void **state)
{
	static const size_t want[COLLC_NUM_DTYPES] = { 1, 1, 4, 4, 8, 8, 2, 2, 4, 8, 1, 1 };

	(void)state;
	for (int dt = 0; dt < COLLC_NUM_DTYPES; dt++) {
		assert_int_equal(collc_dtype_bytes(dt), want[dt]);
		for (int op = 0; op < COLLC_NUM_REDOPS; op++)
			assert_true(collc_dtype_op_valid(dt, op));
		assert_false(collc_dtype_op_valid(dt, -1));
		assert_false(collc_dtype_op_valid(dt, COLLC_NUM_REDOPS));
	}
	assert_int_equal(collc_dtype_bytes(-1), 0);
	assert_int_equal(collc_dtype_bytes(COLLC_NUM_DTYPES), 0);
	assert_false(collc_dtype_op_valid(-1, COLLC_SUM));
	assert_false(collc_dtype_op_valid(COLLC_NUM_DTYPES, COLLC_SUM));

	/* Unknown combinations leave the buffers alone. */
	uint8_t a[4] = { 1, 2, 3, 4 }, d[4] = { 9, 9, 9, 9 };

	red_reduce(d, a, a, 4, COLLC_NUM_DTYPES, COLLC_SUM);
	red_reduce(d, a, a, 4, COLLC_UINT8, COLLC_NUM_REDOPS);
	red_finish(d, 4, -1, COLLC_AVG, 2);
	for (int i = 0; i < 4; i++)
		assert_int_equal(d[i], 9);
}

/* Integer AVG truncates toward zero like C; the other ops are left alone. */
/*
 * fp8: every pair of codes, every op, bit for bit against proto/fp8.h (decode,
 * combine in float, encode), and AVG's finish of every code.
 */
static void test_fp8_all_pairs(void **state)
{
	uint8_t *a = xmalloc(65536), *b = xmalloc(65536), *d = xmalloc(65536);

	(void)state;
	for (int i = 0; i < 65536; i++) {
		a[i] = (uint8_t)i;
		b[i] = (uint8_t)(i >> 8);
	}
	for (int dt = COLLC_FLOAT8_E4M3; dt <= COLLC_FLOAT8_E5M2; dt++) {
		struct collc_fp8_fmt f = dt == COLLC_FLOAT8_E4M3 ? COLLC_FP8_E4M3_FMT
								 : COLLC_FP8_E5M2_FMT;

		for (int op = 0; op < COLLC_NUM_REDOPS; op++) {
			red_reduce(d, a, b, 65536, dt, op);
			for (int i = 0; i < 65536; i++) {
				float x = collc_fp8_decode(a[i], f), y = collc_fp8_decode(b[i], f),
				      r;

				switch (op) {
				case COLLC_PROD:
					r = x * y;
					break;
				case COLLC_MAX:
					r = x > y ? x : y;
					break;
				case COLLC_MIN:
					r = x < y ? x : y;
					break;
				default:
					r = x + y;
					break;
				}
				CHECK(d[i] == collc_fp8_encode(r, f),
				      "%s %s %#x, %#x: got %#x, want %#x", dtype_names[dt],
				      op_names[op], a[i], b[i], d[i], collc_fp8_encode(r, f));
			}
		}
		memcpy(d, a, 256);
		red_finish(d, 256, dt, COLLC_AVG, 3);
		for (int i = 0; i < 256; i++)
			CHECK(d[i] == collc_fp8_encode(collc_fp8_decode((uint8_t)i, f) / 3.0f, f),
			      "%s avg/3 of %#x: got %#x", dtype_names[dt], i, d[i]);
	}
	free(a);
	free(b);
	free(d);
}

static void test_finish(void **state)
{
	int8_t i8[] = { -7, 7, -128, 127, -1, 1 };
	int32_t i32[] = { INT32_MIN, INT32_MAX, -5, 5 };
	int64_t i64[] = { INT64_MIN, INT64_MAX, -9, 9 };
	uint8_t u8[] = { 255, 7, 1 };
	uint64_t u64[] = { UINT64_MAX, 7 };
	float f32[] = { 1.0f, -1.0f };
	double f64[] = { 1.0, -1.0 };
	uint16_t h[] = { red_float_to_half(1.0f), red_float_to_half(-6.0f) };
	uint16_t bf[] = { red_float_to_bf16(1.0f), red_float_to_bf16(-6.0f) };

	(void)state;
	red_finish(i8, 6, COLLC_INT8, COLLC_AVG, 2);
	assert_int_equal(i8[0], -3);
	assert_int_equal(i8[1], 3);
	assert_int_equal(i8[2], -64);
	assert_int_equal(i8[3], 63);
	assert_int_equal(i8[4], 0);
	assert_int_equal(i8[5], 0);
	red_finish(i8, 6, COLLC_INT8, COLLC_AVG, 300); /* nranks beyond the type */
	assert_int_equal(i8[2], 0);

	red_finish(i32, 4, COLLC_INT32, COLLC_AVG, 3);
	assert_true(i32[0] == INT32_MIN / 3 && i32[1] == INT32_MAX / 3);
	assert_true(i32[2] == -1 && i32[3] == 1);
	red_finish(i64, 4, COLLC_INT64, COLLC_AVG, 4);
	assert_true(i64[0] == INT64_MIN / 4 && i64[1] == INT64_MAX / 4);
	assert_true(i64[2] == -2 && i64[3] == 2);
	red_finish(u8, 3, COLLC_UINT8, COLLC_AVG, 2);
	assert_true(u8[0] == 127 && u8[1] == 3 && u8[2] == 0);
	red_finish(u64, 2, COLLC_UINT64, COLLC_AVG, 0xffffffffu);
	assert_true(u64[0] == UINT64_MAX / 0xffffffffu && u64[1] == 0);

	red_finish(f32, 2, COLLC_FLOAT32, COLLC_AVG, 3);
	assert_true(f32[0] == 1.0f / 3.0f && f32[1] == -1.0f / 3.0f);
	red_finish(f64, 2, COLLC_FLOAT64, COLLC_AVG, 3);
	assert_true(f64[0] == 1.0 / 3.0 && f64[1] == -1.0 / 3.0);
	red_finish(h, 2, COLLC_FLOAT16, COLLC_AVG, 4);
	assert_true(half_value(h[0]) == 0.25 && half_value(h[1]) == -1.5);
	red_finish(bf, 2, COLLC_BFLOAT16, COLLC_AVG, 4);
	assert_true(bf16_value(bf[0]) == 0.25 && bf16_value(bf[1]) == -1.5);

	/* Not AVG, or nranks 0 / 1: untouched. */
	int32_t v[] = { -7, 9 };

	for (int op = 0; op < COLLC_NUM_REDOPS; op++)
		if (op != COLLC_AVG)
			red_finish(v, 2, COLLC_INT32, op, 2);
	red_finish(v, 2, COLLC_INT32, COLLC_AVG, 0);
	red_finish(v, 2, COLLC_INT32, COLLC_AVG, 1);
	assert_true(v[0] == -7 && v[1] == 9);
}

/*
 * MAX/MIN are a > b ? a : b and a < b ? a : b: a NaN in a yields b, a NaN in b
 * yields the NaN. The blocked (vector) part and the tail must agree.
 */
static void test_float_maxmin_nan(void **state)
{
	enum { N = 64 + 3 };
	float a[N], b[N], d[N];

	(void)state;
	for (int i = 0; i < N; i++) {
		a[i] = (i & 1) ? NAN : 1.0f;
		b[i] = (i & 1) ? 2.0f : NAN;
	}
	for (int op = COLLC_MAX; op <= COLLC_MIN; op++) {
		red_reduce(d, a, b, N, COLLC_FLOAT32, op);
		for (int i = 0; i < N; i++)
			CHECK((i & 1) ? d[i] == 2.0f : isnan(d[i]), "%s [%d]: got %g", op_names[op],
			      i, d[i]);
	}
}

/* Every binary16 pattern: exact to float, and back unchanged (NaNs quieted). */
static void test_half_roundtrip(void **state)
{
	(void)state;
	for (uint32_t u = 0; u <= 0xffff; u++) {
		uint16_t h = (uint16_t)u, back;
		float f = red_half_to_float(h);
		double want = half_value(h);

		back = red_float_to_half(f);
		if (isnan(want)) {
			CHECK(isnan(f) && !!signbit(f) == !!(h & 0x8000), "half %#x: got %g", u, f);
			/* Quiet bit set, payload and sign kept */
			CHECK(back == (h | 0x200), "half %#x: NaN back as %#x", u, back);
		} else {
			CHECK(f == want && !!signbit(f) == !!signbit(want),
			      "half %#x: got %.9g, want %.9g", u, f, want);
			CHECK(back == h, "half %#x: back as %#x", u, back);
		}
	}
}

static void test_bf16_roundtrip(void **state)
{
	(void)state;
	for (uint32_t u = 0; u <= 0xffff; u++) {
		uint16_t b = (uint16_t)u, back;
		float f = red_bf16_to_float(b);

		CHECK(float_to_bits(f) == u << 16, "bf16 %#x: got %#x", u, float_to_bits(f));
		back = red_float_to_bf16(f);
		if (isnan(f))
			CHECK(back == (b | 0x40), "bf16 %#x: NaN back as %#x", u, back);
		else
			CHECK(back == b, "bf16 %#x: back as %#x", u, back);
	}
}

/*
 * Magnitude of a 16-bit pattern as a double, where the pattern one past the
 * largest finite value (Inf) counts as the next power of two: rounding to
 * nearest even then needs no special case for overflow.
 */
static double mag16(uint16_t m, int dtype)
{
	if (dtype == COLLC_FLOAT16)
		return m == 0x7c00 ? 65536.0 : half_value(m);
	return m == 0x7f80 ? 0x1p128 : bf16_value(m);
}

/* f converted to h must be the nearest pattern, the even one on a tie. */
static void check_nearest(float f, uint16_t h, int dtype)
{
	uint16_t inf = dtype == COLLC_FLOAT16 ? 0x7c00 : 0x7f80, m = h & 0x7fff;
	double x = fabs((double)f), d = fabs(x - mag16(m, dtype));

	CHECK(!!(h & 0x8000) == !!signbit(f), "%s(%a) = %#x: wrong sign", dtype_names[dtype],
	      (double)f, h);
	CHECK(m <= inf, "%s(%a) = %#x: NaN", dtype_names[dtype], (double)f, h);
	for (int s = -1; s <= 1; s += 2) {
		int nb = m + s;
		double dn;

		if (nb < 0 || nb > inf)
			continue;
		dn = fabs(x - mag16((uint16_t)nb, dtype));
		CHECK(d < dn || (d == dn && !(m & 1)), "%s(%a) = %#x, but %#x is nearer or even",
		      dtype_names[dtype], (double)f, h, nb);
	}
}

/* Every midpoint between neighbours (a tie) and the floats next to it. */
static void test_rounding_ties(void **state)
{
	(void)state;
	for (int dt = COLLC_FLOAT16; dt <= COLLC_BFLOAT16; dt++) {
		uint16_t inf = dt == COLLC_FLOAT16 ? 0x7c00 : 0x7f80;

		for (uint16_t m = 0; m < inf; m++) {
			float mid = (float)((mag16(m, dt) + mag16(m + 1, dt)) / 2);

			for (int sign = 0; sign < 2; sign++) {
				float t = sign ? -mid : mid;
				float fs[3] = { nextafterf(t, 0), t, nextafterf(t, 2 * t) };

				for (int j = 0; j < 3; j++) {
					uint16_t h = dt == COLLC_FLOAT16 ? red_float_to_half(fs[j])
									 : red_float_to_bf16(fs[j]);
					check_nearest(fs[j], h, dt);
				}
			}
		}
	}
}

/* A stride through all 2^32 float patterns, and random ones near the half range. */
static void test_rounding_sweep(void **state)
{
	(void)state;
	rng_reset(4);
	for (uint64_t u = 0; u <= 0xffffffffu; u += 1021) {
		float f = bits_to_float((uint32_t)u);
		uint16_t h = red_float_to_half(f), b = red_float_to_bf16(f);

		if (isnan(f)) {
			CHECK((h & 0x7c00) == 0x7c00 && (h & 0x3ff), "half(%#x) = %#x", (unsigned)u,
			      h);
			CHECK((b & 0x7f80) == 0x7f80 && (b & 0x7f), "bf16(%#x) = %#x", (unsigned)u,
			      b);
			continue;
		}
		if (fabsf(f) < 0x1p17f)
			check_nearest(f, h, COLLC_FLOAT16);
		else
			CHECK((h & 0x7fff) == 0x7c00, "half(%a) = %#x, want Inf", (double)f, h);
		check_nearest(f, b, COLLC_BFLOAT16);
	}
	for (int i = 0; i < 1 << 20; i++) {
		/* exponents 2^-30 .. 2^16: subnormal, normal and overflow */
		uint32_t e = 127 - 30 + (uint32_t)(rnd() % 47);
		uint32_t u = (uint32_t)(rnd() & 0x807fffff) | e << 23;
		float f = bits_to_float(u);

		check_nearest(f, red_float_to_half(f), COLLC_FLOAT16);
	}
}

static void test_rounding_examples(void **state)
{
	static const struct {
		float f;
		uint16_t half;
		uint16_t bf16;
	} cases[] = {
		{ 1.0f, 0x3c00, 0x3f80 },
		{ -2.0f, 0xc000, 0xc000 },
		{ 0.0f, 0x0000, 0x0000 },
		{ -0.0f, 0x8000, 0x8000 },
		{ 1.0f + 0x1p-11f, 0x3c00, 0x3f80 },            /* half tie, to even (down) */
		{ 1.0f + 0x1p-11f + 0x1p-23f, 0x3c01, 0x3f80 }, /* just above the tie */
		{ 1.0f + 3 * 0x1p-11f, 0x3c02, 0x3f80 },        /* half tie, to even (up) */
		{ 1.0f + 0x1p-8f, 0x3c04, 0x3f80 },             /* bf16 tie, to even (down) */
		{ 1.0f + 3 * 0x1p-8f, 0x3c0c, 0x3f82 },         /* bf16 tie, to even (up) */
		{ 65504.0f, 0x7bff, 0x4780 },                   /* largest half */
		{ 65519.0f, 0x7bff, 0x4780 },
		{ 65520.0f, 0x7c00, 0x4780 }, /* tie with 2^16: Inf */
		{ 1e10f, 0x7c00, 0x5015 },
		{ 0x1p-14f, 0x0400, 0x3880 }, /* smallest normal half */
		{ 0x1p-24f, 0x0001, 0x3380 }, /* smallest subnormal half */
		{ 0x1p-25f, 0x0000, 0x3300 }, /* tie with 0: to even */
		{ 0x1p-25f + 0x1p-40f, 0x0001, 0x3300 },
		{ 3 * 0x1p-25f, 0x0002, 0x33c0 },       /* tie 1|2: to even */
		{ 1023.5f * 0x1p-24f, 0x0400, 0x3880 }, /* largest subnormal rounds up to normal */
		{ -1e-10f, 0x8000, 0xaedc },
		{ 0x1.fffffep127f, 0x7c00, 0x7f80 }, /* FLT_MAX: bf16 rounds to Inf */
		{ 0x1.fefffep127f, 0x7c00, 0x7f7f }, /* just under bf16's tie */
		{ 0x1p-149f, 0x0000, 0x0000 },       /* float subnormal */
		{ 0x1p-133f, 0x0000, 0x0001 },       /* smallest bf16 subnormal */
		{ INFINITY, 0x7c00, 0x7f80 },
		{ -INFINITY, 0xfc00, 0xff80 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint16_t h = red_float_to_half(cases[i].f), b = red_float_to_bf16(cases[i].f);

		CHECK(h == cases[i].half, "half(%a) = %#x, want %#x", (double)cases[i].f, h,
		      cases[i].half);
		CHECK(b == cases[i].bf16, "bf16(%a) = %#x, want %#x", (double)cases[i].f, b,
		      cases[i].bf16);
	}

	/* NaNs stay NaNs, even one whose payload lives only in bits a conversion drops */
	float snan = bits_to_float(0x7f800001), nnan = bits_to_float(0xffc00000);

	assert_int_equal(red_float_to_half(snan), 0x7e00);
	assert_int_equal(red_float_to_bf16(snan), 0x7fc0);
	assert_int_equal(red_float_to_half(nnan), 0xfe00);
	assert_int_equal(red_float_to_bf16(nnan), 0xffc0);
	assert_true(red_half_to_float(0x0001) == 0x1p-24f);
	assert_true(red_half_to_float(0x03ff) == 1023 * 0x1p-24f);
	assert_true(red_half_to_float(0xfbff) == -65504.0f);
	assert_true(isinf(red_half_to_float(0x7c00)) && red_half_to_float(0xfc00) < 0);
	assert_true(signbit(red_half_to_float(0x8000)) && red_half_to_float(0x8000) == 0);
	assert_true(red_bf16_to_float(0x3f80) == 1.0f && red_bf16_to_float(0x0001) == 0x1p-133f);
}

int main(void)
{
	const char *env = getenv("COLLC_TEST_SEED");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes_and_validity), cmocka_unit_test(test_all_dtypes_ops),
		cmocka_unit_test(test_odd_sizes),          cmocka_unit_test(test_aliasing),
		cmocka_unit_test(test_zero_length),        cmocka_unit_test(test_finish),
		cmocka_unit_test(test_float_maxmin_nan),   cmocka_unit_test(test_half_roundtrip),
		cmocka_unit_test(test_bf16_roundtrip),     cmocka_unit_test(test_rounding_ties),
		cmocka_unit_test(test_rounding_sweep),     cmocka_unit_test(test_rounding_examples),
		cmocka_unit_test(test_fp8_all_pairs),
	};

	if (env)
		seed = strtoull(env, NULL, 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
