/* SPDX-License-Identifier: MIT */
/*
 * Unit test of proto/fp8.h against references written another way:
 *   decode: every one of the 256 codes of each format against the value the
 *     OCP specification gives it, computed in double with ldexp;
 *   encode: every code's value round-trips; every midpoint between two
 *     neighbouring codes goes to the one with the even mantissa; random floats
 *     (all exponents, both signs, subnormals) against a brute-force nearest
 *     search over the 256 codes in double; saturation, infinities, NaN, signed
 *     zero.
 * COLLC_TEST_SEED=N reproduces a run; a failure prints the seed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/fp8.h"

static uint64_t seed = 0xf8f8c011cULL;
static uint64_t rng;

static uint64_t next_u64(void)
{
	/* splitmix64 */
	uint64_t z = (rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

struct fmt_case {
	const char *name;
	int ebits, mbits, bias, has_inf;
	double maxnorm;
	float (*decode)(uint8_t);
	uint8_t (*encode)(float);
};

static const struct fmt_case e4m3 = {
	"e4m3", 4, 3, 7, 0, 448.0, collc_e4m3_to_float, collc_float_to_e4m3
};
static const struct fmt_case e5m2 = {
	"e5m2", 5, 2, 15, 1, 57344.0, collc_e5m2_to_float, collc_float_to_e5m2
};

/* The specification's value of a code: NAN for NaN codes, +-INFINITY for infinities. */
static double spec_value(const struct fmt_case *f, unsigned code)
{
	int sign = code >> 7, e = (code >> f->mbits) & ((1 << f->ebits) - 1);
	int m = code & ((1 << f->mbits) - 1), emax = (1 << f->ebits) - 1;
	double v;

	if (e == emax) {
		if (f->has_inf)
			return m == 0 ? (sign ? -INFINITY : INFINITY) : NAN;
		if (m == (1 << f->mbits) - 1)
			return NAN;
	}
	if (e == 0)
		v = ldexp((double)m, 1 - f->bias - f->mbits);
	else
		v = ldexp(1.0 + ldexp((double)m, -f->mbits), e - f->bias);
	return sign ? -v : v;
}

/* Nearest finite code of x's sign, ties to the even mantissa; beyond the largest, the largest. */
static unsigned brute_encode(const struct fmt_case *f, double x)
{
	unsigned sign = signbit(x) ? 0x80u : 0, best = 0;
	double ax = fabs(x), bestd = INFINITY;

	if (isnan(x))
		return COLLC_FP8_NAN;
	for (unsigned c = 0; c < 0x80; c++) {
		double v = spec_value(f, c), d;

		if (isnan(v) || isinf(v))
			continue;
		d = fabs(ax - v);
		if (d < bestd || (d == bestd && (c & 1) == 0)) {
			bestd = d;
			best = c;
		}
	}
	if (ax > f->maxnorm)
		best = spec_value(f, 0x7e) == f->maxnorm ? 0x7e : 0x7b;
	return sign | best;
}

static void check_format(const struct fmt_case *f)
{
	/* decode, all 256 codes */
	for (unsigned c = 0; c < 256; c++) {
		double want = spec_value(f, c);
		float got = f->decode((uint8_t)c);

		if (isnan(want)) {
			if (!isnan(got))
				fail_msg("%s decode 0x%02x: %g, want NaN", f->name, c, (double)got);
			continue;
		}
		if ((double)got != want || !signbit(got) != !signbit(want))
			fail_msg("%s decode 0x%02x: %.9g, want %.9g", f->name, c, (double)got,
				 want);
	}
	/* every finite value round-trips to its own code */
	for (unsigned c = 0; c < 256; c++) {
		double v = spec_value(f, c);
		unsigned got;

		if (isnan(v) || isinf(v))
			continue;
		got = f->encode((float)v);
		if (got != c)
			fail_msg("%s encode(%.9g): 0x%02x, want 0x%02x", f->name, v, got, c);
	}
	/* midpoints between neighbours: ties to even; just off them: to the nearer */
	for (unsigned c = 0; c + 1 < 0x80; c++) {
		double lo = spec_value(f, c), hi = spec_value(f, c + 1), mid;
		unsigned even = (c & 1) == 0 ? c : c + 1;

		if (isnan(hi) || isinf(hi))
			break;
		mid = (lo + hi) / 2;
		for (int s = 0; s < 2; s++) {
			double x = s ? -mid : mid;
			unsigned want = (s ? 0x80u : 0) | even, got = f->encode((float)x);

			if (got != want)
				fail_msg("%s encode(midpoint %.12g): 0x%02x, want 0x%02x", f->name,
					 x, got, want);
			got = f->encode(nextafterf((float)x, 0.0f));
			want = (s ? 0x80u : 0) | c;
			if (got != want)
				fail_msg("%s encode(below midpoint %.12g): 0x%02x, want 0x%02x",
					 f->name, x, got, want);
			got = f->encode(nextafterf((float)x, s ? -INFINITY : INFINITY));
			want = (s ? 0x80u : 0) | (c + 1);
			if (got != want)
				fail_msg("%s encode(above midpoint %.12g): 0x%02x, want 0x%02x",
					 f->name, x, got, want);
		}
	}
	/* saturation, infinities, NaN, signed zero */
	{
		unsigned maxc = brute_encode(f, f->maxnorm);
		const float big[] = { (float)f->maxnorm * 1.5f, 1e30f, INFINITY, 3.4e38f };

		for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++) {
			if (f->encode(big[i]) != maxc || f->encode(-big[i]) != (0x80u | maxc))
				fail_msg("%s saturation of %g: 0x%02x / 0x%02x, want 0x%02x",
					 f->name, (double)big[i], f->encode(big[i]),
					 f->encode(-big[i]), maxc);
		}
		assert_int_equal(f->encode(NAN), COLLC_FP8_NAN);
		assert_int_equal(f->encode(-NAN), COLLC_FP8_NAN);
		assert_int_equal(f->encode(0.0f), 0x00);
		assert_int_equal(f->encode(-0.0f), 0x80);
		assert_int_equal(f->encode(1e-30f), 0x00);
		assert_int_equal(f->encode(-1e-30f), 0x80);
	}
	/* random floats of every exponent against the brute-force search */
	for (int i = 0; i < 200000; i++) {
		uint64_t r = next_u64();
		uint32_t bits = (uint32_t)r;
		float x;
		unsigned want, got;

		/* Half the draws near fp8's range, where the rounding happens. */
		if (r >> 63)
			bits = (bits & 0x807fffffu) | (uint32_t)(127 - 24 + (int)((r >> 40) % 44))
							      << 23;
		memcpy(&x, &bits, sizeof(x));
		if (isnan(x))
			continue;
		want = brute_encode(f, isinf(x) ? (signbit(x) ? -1e300 : 1e300) : (double)x);
		got = f->encode(x);
		if (got != want)
			fail_msg("%s encode(%a = %.9g): 0x%02x, want 0x%02x (seed %llu)", f->name,
				 (double)x, (double)x, got, want, (unsigned long long)seed);
	}
}

static void test_e4m3(void **state)
{
	(void)state;
	check_format(&e4m3);
	assert_int_equal(collc_float_to_e4m3(448.0f), 0x7e);
	assert_int_equal(collc_float_to_e4m3(464.0f),
			 0x7e); /* the midpoint to NaN's code saturates */
	assert_true(isnan(collc_e4m3_to_float(0x7f)) && isnan(collc_e4m3_to_float(0xff)));
	assert_true(collc_e4m3_to_float(0x01) == 0x1p-9f);
}

static void test_e5m2(void **state)
{
	(void)state;
	check_format(&e5m2);
	assert_int_equal(collc_float_to_e5m2(57344.0f), 0x7b);
	assert_true(isinf(collc_e5m2_to_float(0x7c)) && collc_e5m2_to_float(0xfc) < 0);
	assert_true(isnan(collc_e5m2_to_float(0x7d)) && isnan(collc_e5m2_to_float(0xff)));
	assert_true(collc_e5m2_to_float(0x01) == 0x1p-16f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_e4m3),
		cmocka_unit_test(test_e5m2),
	};
	const char *s = getenv("COLLC_TEST_SEED");

	if (s)
		seed = strtoull(s, NULL, 0);
	rng = seed;
	printf("test_fp8: seed %llu\n", (unsigned long long)seed);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
