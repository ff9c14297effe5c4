/* SPDX-License-Identifier: MIT */
/*
 * float16 with F16C (daemon/cpu/reduce.c): the loops convert with the CPU's
 * VCVTPH2PS and VCVTPS2PH instead of h2f() and f2h(), and must give the
 * same bits. Proved here over every input the conversions can see:
 *   - every one of the 2^32 floats: VCVTPS2PH (round to nearest even) gives
 *     red_float_to_half()'s half;
 *   - every one of the 2^16 halves: VCVTPH2PS gives red_half_to_float()'s
 *     float, except for a signaling NaN, which it quiets (bit 22 set, the
 *     rest the same);
 *   - so the loops can differ only where an input is a signaling NaN: each
 *     of the 1022 of them against every half, on either side, for every op,
 *     and the AVG finish over every half, red_reduce() and red_finish() (the
 *     F16C loops on this CPU) against the reference in float.
 * SKIPPED on a CPU without F16C and AVX2, where collcd runs h2f() and f2h().
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cpuid.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/cpu/reduce.h"
#include "include/collc.h"
#include "tests/unit/float_bits.h"

#define NHALF 65536u

/* As reduce.c decides: AVX2, and F16C (CPUID leaf 1, ECX bit 29). */
static int f16c_runs(void)
{
	unsigned int a, b, c, d;

	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}

static int is_snan_half(uint16_t h)
{
	return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) && !(h & 0x200);
}

/* Eight floats to halves, as the loops store them. */
__attribute__((target("arch=x86-64-v3"))) static void cvt_ps_ph(const uint32_t *in, uint16_t *out)
{
	__m256 v = _mm256_loadu_ps((const float *)in);

	_mm_storeu_si128((__m128i *)out, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

/* Eight halves to floats, as the loops load them. */
__attribute__((target("arch=x86-64-v3"))) static void cvt_ph_ps(const uint16_t *in, uint32_t *out)
{
	_mm256_storeu_ps((float *)out, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)in)));
}

#define SKIP_WITHOUT_F16C()                                                                        \
	do {                                                                                       \
		if (!f16c_runs()) {                                                                \
			fprintf(stderr, "SKIPPED: this CPU has no F16C and AVX2\n");               \
			skip();                                                                    \
		}                                                                                  \
	} while (0)

static void test_every_float_to_half(void **state)
{
	uint32_t in[8];
	uint16_t out[8];
	uint64_t u = 0;

	(void)state;
	SKIP_WITHOUT_F16C();
	do {
		for (int k = 0; k < 8; k++)
			in[k] = (uint32_t)(u + (uint64_t)k);
		cvt_ps_ph(in, out);
		for (int k = 0; k < 8; k++)
			if (out[k] != red_float_to_half(bits_to_float(in[k]))) {
				fprintf(stderr, "float %#x: F16C %#x, f2h %#x\n", in[k], out[k],
					red_float_to_half(bits_to_float(in[k])));
				fail();
			}
		u += 8;
	} while (u < (1ull << 32));
}

static void test_every_half_to_float(void **state)
{
	uint16_t in[8];
	uint32_t out[8];
	unsigned snans = 0;

	(void)state;
	SKIP_WITHOUT_F16C();
	for (uint32_t u = 0; u < NHALF; u += 8) {
		for (int k = 0; k < 8; k++)
			in[k] = (uint16_t)(u + (uint32_t)k);
		cvt_ph_ps(in, out);
		for (int k = 0; k < 8; k++) {
			uint32_t want = float_to_bits(red_half_to_float(in[k]));

			if (is_snan_half(in[k])) {
				snans++;
				want |= 0x00400000u; /* quieted */
			}
			if (out[k] != want) {
				fprintf(stderr, "half %#x: F16C %#x, h2f %#x\n", in[k], out[k],
					want);
				fail();
			}
		}
	}
	assert_int_equal(snans, 1022);
}

/* What the loops compute for one element, in float (reduce.c: a's NaN first). */
static uint16_t reference(uint16_t ha, uint16_t hb, int op)
{
	float x = red_half_to_float(ha), y = red_half_to_float(hb), r;

	switch (op) {
	case COLLC_SUM:
	case COLLC_AVG:
		r = x != x ? x + x : x + y;
		break;
	case COLLC_PROD:
		r = x != x ? x * x : x * y;
		break;
	case COLLC_MAX:
		r = x > y ? x : y;
		break;
	default:
		r = x < y ? x : y;
		break;
	}
	return red_float_to_half(r);
}

static void test_snan_against_every_half(void **state)
{
	static uint16_t every[NHALF], snan[NHALF], out[NHALF];
	unsigned checked = 0;

	(void)state;
	SKIP_WITHOUT_F16C();
	for (uint32_t u = 0; u < NHALF; u++)
		every[u] = (uint16_t)u;
	for (uint32_t s = 0; s < NHALF; s++) {
		if (!is_snan_half((uint16_t)s))
			continue;
		for (uint32_t u = 0; u < NHALF; u++)
			snan[u] = (uint16_t)s;
		for (int op = 0; op < COLLC_NUM_REDOPS; op++)
			for (int side = 0; side < 2; side++) {
				const uint16_t *a = side ? every : snan, *b = side ? snan : every;

				red_reduce(out, a, b, NHALF, COLLC_FLOAT16, op);
				for (uint32_t u = 0; u < NHALF; u++)
					if (out[u] != reference(a[u], b[u], op)) {
						fprintf(stderr,
							"op %d: %#x, %#x gave %#x, want %#x\n", op,
							a[u], b[u], out[u],
							reference(a[u], b[u], op));
						fail();
					}
				checked++;
			}
	}
	assert_int_equal(checked, 1022 * COLLC_NUM_REDOPS * 2);
}

static void test_avg_over_every_half(void **state)
{
	static const uint32_t nranks[] = { 2, 3, 7, 255 };
	static uint16_t buf[NHALF];

	(void)state;
	SKIP_WITHOUT_F16C();
	for (size_t k = 0; k < sizeof(nranks) / sizeof(nranks[0]); k++) {
		for (uint32_t u = 0; u < NHALF; u++)
			buf[u] = (uint16_t)u;
		red_finish(buf, NHALF, COLLC_FLOAT16, COLLC_AVG, nranks[k]);
		for (uint32_t u = 0; u < NHALF; u++) {
			uint16_t want = red_float_to_half(red_half_to_float((uint16_t)u) /
							  (float)nranks[k]);

			if (buf[u] != want) {
				fprintf(stderr, "avg of %#x over %u: %#x, want %#x\n", u, nranks[k],
					buf[u], want);
				fail();
			}
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_float_to_half),
		cmocka_unit_test(test_every_half_to_float),
		cmocka_unit_test(test_snan_against_every_half),
		cmocka_unit_test(test_avg_over_every_half),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
