/* SPDX-License-Identifier: MIT */
/*
 * Host-side reductions: one tight loop per (dtype, op), picked once per call.
 *
 * gcc -O2 vectorizes with -fvect-cost-model=very-cheap, which refuses loops
 * that need a scalar epilogue or a runtime alias check. So each loop runs its
 * vector part over a multiple of BLOCK elements and finishes with a scalar
 * tail, and IVDEP tells the compiler that dst, a and b are either the same
 * array or disjoint, which holds by contract (see reduce.h).
 */
#include <math.h>
#include <string.h>

#include "daemon/cpu/reduce.h"
#include "proto/dtype.h"
#include "proto/fp8.h"

#define BLOCK 64 /* elements; a multiple of any vector length in elements */

#if defined(__clang__)
#define IVDEP _Pragma("clang loop vectorize(assume_safety)")
/* Sanitizer builds do not vectorize; that is no reason to warn. */
#pragma clang diagnostic ignored "-Wpass-failed"
#elif defined(__GNUC__)
#define IVDEP _Pragma("GCC ivdep")
#else
#define IVDEP
#endif

/*
 * The loops are also built for newer x86-64 levels, and the loader picks
 * the one the CPU runs (an ifunc): the loops of the native types
 * (integers, float32, float64) for x86-64-v3 (AVX2), those that convert
 * float16 and bfloat16 also for x86-64-v4 (AVX-512), where they convert in
 * vector registers. fp8 looks its codes up in a table and keeps one build.
 * It is the same C, so the same IEEE operations element by element, and no
 * variant fuses a multiply and an add (-ffp-contract=off, CMakeLists.txt):
 * every variant gives the same bits, and so does every daemon of a
 * communicator (tests/unit/test_reduce_variants.c builds each alone and
 * compares). On one core (bench/RESULTS.md, "Reductions built for AVX2 and
 * AVX-512"): bfloat16 and float16 3x faster on -v4, int32 10% on -v3, and
 * the native types 10-15% slower on -v4 than on -v3 while in L2, hence
 * their shorter list. float16 goes further where the CPU has F16C (below):
 * 9x the -v4 loop (bench/RESULTS.md, "float16 with F16C").
 */
/* ThreadSanitizer's hooks crash in an ifunc resolver: one variant there. */
#if defined(__SANITIZE_THREAD__)
#define REDUCE_TSAN
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define REDUCE_TSAN
#endif
#endif
#if defined(__x86_64__) && defined(__has_attribute) && !defined(COLLC_REDUCE_ONE_VARIANT) &&       \
	!defined(REDUCE_TSAN)
#if __has_attribute(target_clones)
#define VARIANTS_NATIVE __attribute__((target_clones("arch=x86-64-v3", "default")))
#define VARIANTS_CONVERT                                                                           \
	__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif
#ifndef VARIANTS_NATIVE
#define VARIANTS_NATIVE
#define VARIANTS_CONVERT
#endif
#define VARIANTS_NONE

typedef void (*reduce_fn)(void *dst, const void *a, const void *b, size_t n);
typedef void (*finish_fn)(void *buf, size_t n, uint32_t nranks);

static inline uint32_t f2u(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float u2f(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/*
 * c ? x : y without a branch. The float16 conversions compute every case and
 * pick one with this: written as ?:, gcc sinks their float ops into branches,
 * cannot if-convert those (the ops may trap) and leaves the loops scalar.
 */
static inline uint32_t pick(int c, uint32_t x, uint32_t y)
{
	uint32_t m = -(uint32_t)(c != 0);

	return (x & m) | (y & ~m);
}

static inline float h2f(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t em = (uint32_t)(h & 0x7fff) << 13; /* exponent and mantissa, float-aligned */
	uint32_t exp = em & 0x0f800000;
	uint32_t norm = em + ((127u - 15) << 23);
	uint32_t inf_nan = em | 0x7f800000;
	/* Subnormal m: 2^-14 * (1 + m/2^10) - 2^-14 = m * 2^-24, exact and normalized */
	uint32_t sub = f2u(u2f(em + ((127u - 14) << 23)) - u2f((127u - 14) << 23));
	uint32_t r = pick(exp == 0x0f800000, inf_nan, pick(exp == 0, sub, norm));

	return u2f(r | sign);
}

static inline uint16_t f2h(float f)
{
	uint32_t u = f2u(f);
	uint32_t sign = (u >> 16) & 0x8000;
	uint32_t a = u & 0x7fffffff;
	uint32_t nan = 0x7e00 | ((a >> 13) & 0x3ff);
	/*
	 * Below 2^-14: adding 0.5 leaves the half subnormal's mantissa in the low
	 * bits, rounded to nearest even by the FPU (the default rounding mode).
	 */
	uint32_t sub = f2u(u2f(a) + 0.5f) - f2u(0.5f);
	/* Rebias, then round to nearest even: add 0xfff, plus 1 if the kept lsb is odd */
	uint32_t norm = (a - ((127u - 15) << 23) + 0xfff + ((a >> 13) & 1)) >> 13;
	/* a >= 65536 is Inf; [65520, 65536) reaches Inf by rounding in norm */
	uint32_t r = pick(a > 0x7f800000, nan,
			  pick(a >= 0x47800000, 0x7c00, pick(a < 0x38800000, sub, norm)));

	return (uint16_t)(r | sign);
}

static inline float bf2f(uint16_t b)
{
	return u2f((uint32_t)b << 16);
}

static inline uint16_t f2bf(float f)
{
	uint32_t u = f2u(f);
	uint32_t nan = (u >> 16) | 0x40;
	uint32_t r = (u + 0x7fff + ((u >> 16) & 1)) >> 16;

	return (uint16_t)((u & 0x7fffffff) > 0x7f800000 ? nan : r);
}

/*
 * fp8 -> float through a table of the 256 codes, built by the compiler:
 * several times faster than decoding the fields (proto/fp8.h) per element.
 * test_reduce checks every pair of codes against proto/fp8.h. NaN codes
 * decode to a NaN of either sign; it becomes 0x7f again either way.
 */
#define P2(k)                                                                                      \
	((k) >= 0 ? (float)(1u << ((k) >= 0 ? (k) : 0))                                            \
		  : 1.0f / (float)(1u << ((k) < 0 ? -(k) : 0)))
#define E4M3_MAG(c)                                                                                \
	(((c) >> 3) == 0      ? (float)((c)&7) * P2(-9)                                            \
	 : ((c)&0x7f) == 0x7f ? NAN                                                                \
			      : (float)(8 + ((c)&7)) * P2(((c) >> 3) - 10))
#define E5M2_MAG(c)                                                                                \
	(((c) >> 2) == 0    ? (float)((c)&3) * P2(-16)                                             \
	 : ((c) >> 2) == 31 ? (((c)&3) ? NAN : INFINITY)                                           \
			    : (float)(4 + ((c)&3)) * P2(((c) >> 2) - 17))
#define E4M3(c)   (((c)&0x80) ? -1.0f : 1.0f) * E4M3_MAG((c)&0x7f)
#define E5M2(c)   (((c)&0x80) ? -1.0f : 1.0f) * E5M2_MAG((c)&0x7f)
#define T4(F, b)  F(b), F((b) + 1), F((b) + 2), F((b) + 3)
#define T16(F, b) T4(F, b), T4(F, (b) + 4), T4(F, (b) + 8), T4(F, (b) + 12)
#define T64(F, b) T16(F, b), T16(F, (b) + 16), T16(F, (b) + 32), T16(F, (b) + 48)

static const float e4m3_tab[256] = { T64(E4M3, 0), T64(E4M3, 64), T64(E4M3, 128), T64(E4M3, 192) };
static const float e5m2_tab[256] = { T64(E5M2, 0), T64(E5M2, 64), T64(E5M2, 128), T64(E5M2, 192) };

static inline float e4m3_to_f(uint8_t b)
{
	return e4m3_tab[b];
}

static inline float e5m2_to_f(uint8_t b)
{
	return e5m2_tab[b];
}

float red_half_to_float(uint16_t h)
{
	return h2f(h);
}

uint16_t red_float_to_half(float f)
{
	return f2h(f);
}

float red_bf16_to_float(uint16_t b)
{
	return bf2f(b);
}

uint16_t red_float_to_bf16(float f)
{
	return f2bf(f);
}

#define OP_SUM(x, y)  ((x) + (y))
#define OP_PROD(x, y) ((x) * (y))
#define OP_MAX(x, y)  ((x) > (y) ? (x) : (y))
#define OP_MIN(x, y)  ((x) < (y) ? (x) : (y))

#define AS_IS(x) (x)

/*
 * float16's sum and product: where both are NaNs, a's, quieted, as x86's
 * vector add and multiply give it with a first (the F16C loops below).
 * With plain + and * the compiler picks the order, and gcc picked one in
 * the vector part of a loop and the other in its tail. Both computed, one
 * picked on the bits (pick()), so that the loops stay vector.
 */
static inline float sum_a(float x, float y)
{
	return u2f(pick(x != x, f2u(x + x), f2u(x + y)));
}

static inline float prod_a(float x, float y)
{
	return u2f(pick(x != x, f2u(x * x), f2u(x * y)));
}

#define OP_SUM_A(x, y)  sum_a(x, y)
#define OP_PROD_A(x, y) prod_a(x, y)

/* dst = a op b on elements of type T, computed in type F. */
#define DEFINE_REDUCE_IN(name, T, F, TOF, FROMF, OP, VARIANTS)                                     \
	VARIANTS static void name(void *dst_, const void *a_, const void *b_, size_t n)            \
	{                                                                                          \
		T *dst = dst_;                                                                     \
		const T *a = a_, *b = b_;                                                          \
		size_t i = 0;                                                                      \
                                                                                                   \
		for (; n - i >= BLOCK; i += BLOCK) {                                               \
			IVDEP                                                                      \
			for (size_t j = 0; j < BLOCK; j++) {                                       \
				F x = TOF(a[i + j]), y = TOF(b[i + j]);                            \
				dst[i + j] = FROMF(OP(x, y));                                      \
			}                                                                          \
		}                                                                                  \
		for (; i < n; i++) {                                                               \
			F x = TOF(a[i]), y = TOF(b[i]);                                            \
			dst[i] = FROMF(OP(x, y));                                                  \
		}                                                                                  \
	}

#define DEFINE_REDUCE(name, T, OP) DEFINE_REDUCE_IN(name, T, T, AS_IS, AS_IS, OP, VARIANTS_NATIVE)
#define DEFINE_REDUCE16(name, TOF, FROMF, OP)                                                      \
	DEFINE_REDUCE_IN(name, uint16_t, float, TOF, FROMF, OP, VARIANTS_CONVERT)
/* fp8 reduces in float and rounds back (nearest even, saturating) after every step: proto/fp8.h. */
#define DEFINE_REDUCE8(name, TOF, FROMF, OP)                                                       \
	DEFINE_REDUCE_IN(name, uint8_t, float, TOF, FROMF, OP, VARIANTS_NONE)

/*
 * Two's complement SUM and PROD are the same bits for signed and unsigned:
 * the signed dtypes use the unsigned loops and never overflow a signed type.
 */
DEFINE_REDUCE(sum_u8, uint8_t, OP_SUM)
DEFINE_REDUCE(prod_u8, uint8_t, OP_PROD)
DEFINE_REDUCE(max_u8, uint8_t, OP_MAX)
DEFINE_REDUCE(min_u8, uint8_t, OP_MIN)
DEFINE_REDUCE(max_i8, int8_t, OP_MAX)
DEFINE_REDUCE(min_i8, int8_t, OP_MIN)
DEFINE_REDUCE(sum_u32, uint32_t, OP_SUM)
DEFINE_REDUCE(prod_u32, uint32_t, OP_PROD)
DEFINE_REDUCE(max_u32, uint32_t, OP_MAX)
DEFINE_REDUCE(min_u32, uint32_t, OP_MIN)
DEFINE_REDUCE(max_i32, int32_t, OP_MAX)
DEFINE_REDUCE(min_i32, int32_t, OP_MIN)
DEFINE_REDUCE(sum_u64, uint64_t, OP_SUM)
DEFINE_REDUCE(prod_u64, uint64_t, OP_PROD)
DEFINE_REDUCE(max_u64, uint64_t, OP_MAX)
DEFINE_REDUCE(min_u64, uint64_t, OP_MIN)
DEFINE_REDUCE(max_i64, int64_t, OP_MAX)
DEFINE_REDUCE(min_i64, int64_t, OP_MIN)
DEFINE_REDUCE16(sum_f16, h2f, f2h, OP_SUM_A)
DEFINE_REDUCE16(prod_f16, h2f, f2h, OP_PROD_A)
DEFINE_REDUCE16(max_f16, h2f, f2h, OP_MAX)
DEFINE_REDUCE16(min_f16, h2f, f2h, OP_MIN)
DEFINE_REDUCE16(sum_bf16, bf2f, f2bf, OP_SUM)
DEFINE_REDUCE16(prod_bf16, bf2f, f2bf, OP_PROD)
DEFINE_REDUCE16(max_bf16, bf2f, f2bf, OP_MAX)
DEFINE_REDUCE16(min_bf16, bf2f, f2bf, OP_MIN)
DEFINE_REDUCE8(sum_e4m3, e4m3_to_f, collc_float_to_e4m3, OP_SUM)
DEFINE_REDUCE8(prod_e4m3, e4m3_to_f, collc_float_to_e4m3, OP_PROD)
DEFINE_REDUCE8(max_e4m3, e4m3_to_f, collc_float_to_e4m3, OP_MAX)
DEFINE_REDUCE8(min_e4m3, e4m3_to_f, collc_float_to_e4m3, OP_MIN)
DEFINE_REDUCE8(sum_e5m2, e5m2_to_f, collc_float_to_e5m2, OP_SUM)
DEFINE_REDUCE8(prod_e5m2, e5m2_to_f, collc_float_to_e5m2, OP_PROD)
DEFINE_REDUCE8(max_e5m2, e5m2_to_f, collc_float_to_e5m2, OP_MAX)
DEFINE_REDUCE8(min_e5m2, e5m2_to_f, collc_float_to_e5m2, OP_MIN)
DEFINE_REDUCE(sum_f32, float, OP_SUM)
DEFINE_REDUCE(prod_f32, float, OP_PROD)
DEFINE_REDUCE(max_f32, float, OP_MAX)
DEFINE_REDUCE(min_f32, float, OP_MIN)
DEFINE_REDUCE(sum_f64, double, OP_SUM)
DEFINE_REDUCE(prod_f64, double, OP_PROD)
DEFINE_REDUCE(max_f64, double, OP_MAX)
DEFINE_REDUCE(min_f64, double, OP_MIN)

#define REDUCERS(sum, prod, max, min)                                                              \
	{                                                                                          \
		[COLLC_SUM] = sum, [COLLC_PROD] = prod, [COLLC_MAX] = max, [COLLC_MIN] = min,      \
		[COLLC_AVG] = sum                                                                  \
	}

static const reduce_fn reducers[COLLC_NUM_DTYPES][COLLC_NUM_REDOPS] = {
	[COLLC_INT8] = REDUCERS(sum_u8, prod_u8, max_i8, min_i8),
	[COLLC_UINT8] = REDUCERS(sum_u8, prod_u8, max_u8, min_u8),
	[COLLC_INT32] = REDUCERS(sum_u32, prod_u32, max_i32, min_i32),
	[COLLC_UINT32] = REDUCERS(sum_u32, prod_u32, max_u32, min_u32),
	[COLLC_INT64] = REDUCERS(sum_u64, prod_u64, max_i64, min_i64),
	[COLLC_UINT64] = REDUCERS(sum_u64, prod_u64, max_u64, min_u64),
	[COLLC_FLOAT16] = REDUCERS(sum_f16, prod_f16, max_f16, min_f16),
	[COLLC_BFLOAT16] = REDUCERS(sum_bf16, prod_bf16, max_bf16, min_bf16),
	[COLLC_FLOAT32] = REDUCERS(sum_f32, prod_f32, max_f32, min_f32),
	[COLLC_FLOAT64] = REDUCERS(sum_f64, prod_f64, max_f64, min_f64),
	[COLLC_FLOAT8_E4M3] = REDUCERS(sum_e4m3, prod_e4m3, max_e4m3, min_e4m3),
	[COLLC_FLOAT8_E5M2] = REDUCERS(sum_e5m2, prod_e5m2, max_e5m2, min_e5m2),
};

/*
 * Integer division has no vector instruction on x86, so these loops stay
 * scalar; they run once per collective. Signed types divide in int64_t since
 * nranks may not fit their own type.
 */
#define DEFINE_FINISH_INT(name, T, D)                                                              \
	static void name(void *buf_, size_t n, uint32_t nranks)                                    \
	{                                                                                          \
		T *buf = buf_;                                                                     \
		D d = (D)nranks;                                                                   \
                                                                                                   \
		for (size_t i = 0; i < n; i++)                                                     \
			buf[i] = (T)((D)buf[i] / d);                                               \
	}

/* Floats divide in F, blocked like the reductions so that gcc vectorizes. */
#define DEFINE_FINISH_FP(name, T, F, TOF, FROMF, VARIANTS)                                         \
	VARIANTS static void name(void *buf_, size_t n, uint32_t nranks)                           \
	{                                                                                          \
		T *buf = buf_;                                                                     \
		F d = (F)nranks;                                                                   \
		size_t i = 0;                                                                      \
                                                                                                   \
		for (; n - i >= BLOCK; i += BLOCK) {                                               \
			for (size_t j = 0; j < BLOCK; j++)                                         \
				buf[i + j] = FROMF(TOF(buf[i + j]) / d);                           \
		}                                                                                  \
		for (; i < n; i++)                                                                 \
			buf[i] = FROMF(TOF(buf[i]) / d);                                           \
	}

DEFINE_FINISH_INT(avg_i8, int8_t, int64_t)
DEFINE_FINISH_INT(avg_u8, uint8_t, uint32_t)
DEFINE_FINISH_INT(avg_i32, int32_t, int64_t)
DEFINE_FINISH_INT(avg_u32, uint32_t, uint32_t)
DEFINE_FINISH_INT(avg_i64, int64_t, int64_t)
DEFINE_FINISH_INT(avg_u64, uint64_t, uint64_t)
DEFINE_FINISH_FP(avg_f16, uint16_t, float, h2f, f2h, VARIANTS_CONVERT)
DEFINE_FINISH_FP(avg_bf16, uint16_t, float, bf2f, f2bf, VARIANTS_CONVERT)
DEFINE_FINISH_FP(avg_f32, float, float, AS_IS, AS_IS, VARIANTS_NATIVE)
DEFINE_FINISH_FP(avg_f64, double, double, AS_IS, AS_IS, VARIANTS_NATIVE)
DEFINE_FINISH_FP(avg_e4m3, uint8_t, float, e4m3_to_f, collc_float_to_e4m3, VARIANTS_NONE)
DEFINE_FINISH_FP(avg_e5m2, uint8_t, float, e5m2_to_f, collc_float_to_e5m2, VARIANTS_NONE)

static const finish_fn finishers[COLLC_NUM_DTYPES] = {
	[COLLC_INT8] = avg_i8,     [COLLC_UINT8] = avg_u8,         [COLLC_INT32] = avg_i32,
	[COLLC_UINT32] = avg_u32,  [COLLC_INT64] = avg_i64,        [COLLC_UINT64] = avg_u64,
	[COLLC_FLOAT16] = avg_f16, [COLLC_BFLOAT16] = avg_bf16,    [COLLC_FLOAT32] = avg_f32,
	[COLLC_FLOAT64] = avg_f64, [COLLC_FLOAT8_E4M3] = avg_e4m3, [COLLC_FLOAT8_E5M2] = avg_e5m2,
};

/*
 * float16 with F16C (x86-64-v3 and later): the conversions are one
 * instruction for 8 elements each way (VCVTPH2PS, VCVTPS2PH rounding to
 * nearest even) instead of h2f() and f2h() in integer arithmetic, and
 * MAXPS and MINPS are OP_MAX and OP_MIN exactly ((x > y) ? x : y and
 * (x < y) ? x : y, the second operand where either is a NaN). The same bits
 * as the loops above: VCVTPS2PH gives f2h()'s half for every float, and
 * VCVTPH2PS h2f()'s float for every half but a signaling NaN, which it
 * quiets (bit 22), a bit that f2h() sets on every NaN anyway and that every
 * op keeps or sets (tests/unit/test_reduce_f16c.c proves all three over every
 * float, every half, and every signaling NaN against every half and op).
 * Picked at load where the CPU has F16C and AVX2; a build for such a CPU
 * alone (-march=x86-64-v3 or later) always takes them. 512 KiB of float16
 * summed on one core: 19 us, against 175 with the -v4 loop above.
 */
#if defined(__x86_64__) && defined(__GNUC__) &&                                                    \
	(defined(__F16C__) || (!defined(COLLC_REDUCE_ONE_VARIANT) && __has_attribute(target)))
#include <cpuid.h>
#include <immintrin.h>
#define F16C_LOOPS
#ifdef __F16C__
#define F16C_TARGET
#else
#define F16C_TARGET __attribute__((target("arch=x86-64-v3")))
#endif
/*
 * Where both operands are NaNs, x86 returns the first source's, quieted:
 * the loops above return a's, so a goes first here too. The compiler may
 * swap the operands of an intrinsic it knows to commute (and gcc did), so
 * the add and multiply are written out.
 */
F16C_TARGET static inline __m256 v_sum(__m256 x, __m256 y)
{
	__m256 r;

	__asm__("vaddps %2, %1, %0" : "=x"(r) : "x"(x), "x"(y));
	return r;
}

F16C_TARGET static inline __m256 v_prod(__m256 x, __m256 y)
{
	__m256 r;

	__asm__("vmulps %2, %1, %0" : "=x"(r) : "x"(x), "x"(y));
	return r;
}

#define V_SUM(x, y)  v_sum(x, y)
#define V_PROD(x, y) v_prod(x, y)
#define V_MAX(x, y)  _mm256_max_ps(x, y)
#define V_MIN(x, y)  _mm256_min_ps(x, y)
#define V_LOAD(p)    _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define V_STORE(p, v)                                                                              \
	_mm_storeu_si128((__m128i *)(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT))

/*
 * Whole BLOCKs here, the tail (under BLOCK elements) in the loop above,
 * which gives the same bits.
 */
#define DEFINE_REDUCE_F16C(name, VOP, generic)                                                     \
	F16C_TARGET static void name(void *dst_, const void *a_, const void *b_, size_t n)         \
	{                                                                                          \
		uint16_t *dst = dst_;                                                              \
		const uint16_t *a = a_, *b = b_;                                                   \
		size_t i = 0;                                                                      \
                                                                                                   \
		for (; n - i >= BLOCK; i += BLOCK)                                                 \
			for (size_t j = i; j < i + BLOCK; j += 8)                                  \
				V_STORE(dst + j, VOP(V_LOAD(a + j), V_LOAD(b + j)));               \
		if (i < n)                                                                         \
			generic(dst + i, a + i, b + i, n - i);                                     \
	}

DEFINE_REDUCE_F16C(sum_f16c, V_SUM, sum_f16)
DEFINE_REDUCE_F16C(prod_f16c, V_PROD, prod_f16)
DEFINE_REDUCE_F16C(max_f16c, V_MAX, max_f16)
DEFINE_REDUCE_F16C(min_f16c, V_MIN, min_f16)

F16C_TARGET static void avg_f16c(void *buf_, size_t n, uint32_t nranks)
{
	uint16_t *buf = buf_;
	const __m256 d = _mm256_set1_ps((float)nranks);
	size_t i = 0;

	for (; n - i >= BLOCK; i += BLOCK)
		for (size_t j = i; j < i + BLOCK; j += 8)
			V_STORE(buf + j, _mm256_div_ps(V_LOAD(buf + j), d));
	if (i < n)
		avg_f16(buf + i, n - i, nranks);
}

static const reduce_fn f16c_reducers[COLLC_NUM_REDOPS] =
	REDUCERS(sum_f16c, prod_f16c, max_f16c, min_f16c);

#ifdef __F16C__
#define f16c_runs() 1
#else
static int f16c_cpu; /* set once at load, read-only after */

/* F16C is CPUID leaf 1's ECX bit 29 (not every compiler's __builtin_cpu_supports() names it). */
__attribute__((constructor)) static void f16c_probe(void)
{
	unsigned int a, b, c, d;

	__builtin_cpu_init();
	f16c_cpu = __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) &&
		   (c & (1u << 29));
}
#define f16c_runs() f16c_cpu
#endif
#endif

void red_reduce(void *dst, const void *a, const void *b, size_t n, int dtype, int redop)
{
	if (!collc_dtype_op_valid(dtype, redop))
		return;
#ifdef F16C_LOOPS
	if (dtype == COLLC_FLOAT16 && f16c_runs()) {
		f16c_reducers[redop](dst, a, b, n);
		return;
	}
#endif
	reducers[dtype][redop](dst, a, b, n);
}

void red_finish(void *buf, size_t n, int dtype, int redop, uint32_t nranks)
{
	/* nranks 0 would divide by zero; 1 divides by one */
	if (!collc_dtype_op_valid(dtype, redop) || redop != COLLC_AVG || nranks <= 1)
		return;
#ifdef F16C_LOOPS
	if (dtype == COLLC_FLOAT16 && f16c_runs()) {
		avg_f16c(buf, n, nranks);
		return;
	}
#endif
	finishers[dtype](buf, n, nranks);
}
