/* SPDX-License-Identifier: MIT */
/*
 * The two 8-bit float formats of the OCP 8-bit Floating Point specification,
 * converted to and from float the same way on the host and in the grid.
 *
 *   E4M3: sign, 4 exponent bits (bias 7), 3 mantissa bits. No infinities;
 *         S.1111.111 (0x7f, 0xff) is NaN, so the largest finite is 448
 *         (S.1111.110). Subnormals down to 2^-9.
 *   E5M2: sign, 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like:
 *         S.11111.00 is infinity, S.11111.{01,10,11} NaN; the largest finite
 *         is 57344. Subnormals down to 2^-16.
 *
 * float -> fp8 rounds to nearest, ties to even, in the specification's
 * saturation mode: a finite value beyond the largest finite, and an infinity,
 * become the largest finite of its sign (the grid's cvt.rn.satfinite does the
 * same). NaN becomes the canonical NaN 0x7f. fp8 -> float is exact.
 *
 * Reductions of fp8 data accumulate in float and round back after every
 * step, as float16 and bfloat16 do.
 */
#ifndef COLLC_PROTO_FP8_H
#define COLLC_PROTO_FP8_H

#include <stdint.h>

#include "proto/prims.h"

#if !defined(__CUDACC__)
#include <math.h>
#endif

#define COLLC_FP8_NAN 0x7fu

/* The two formats differ only in these numbers. */
struct collc_fp8_fmt {
	uint32_t mbits;   /* mantissa bits */
	int32_t bias;     /* exponent bias */
	uint32_t maxnorm; /* bits of the largest finite magnitude */
	uint32_t has_inf; /* exponent all ones with mantissa 0 is infinity */
};

#define COLLC_FP8_E4M3_FMT ((struct collc_fp8_fmt){ 3, 7, 0x7e, 0 })
#define COLLC_FP8_E5M2_FMT ((struct collc_fp8_fmt){ 2, 15, 0x7b, 1 })

COLLC_HD uint32_t collc_f32_bits(float f)
{
	union {
		float f;
		uint32_t u;
	} v;

	v.f = f;
	return v.u;
}

COLLC_HD float collc_bits_f32(uint32_t u)
{
	union {
		float f;
		uint32_t u;
	} v;

	v.u = u;
	return v.f;
}

COLLC_HD float collc_fp8_decode(uint8_t b, struct collc_fp8_fmt fmt)
{
	uint32_t sign = (uint32_t)(b & 0x80u) << 24;
	uint32_t mag = b & 0x7fu;
	uint32_t e = mag >> fmt.mbits, m = mag & ((1u << fmt.mbits) - 1);
	uint32_t emax = 0x7fu >> fmt.mbits; /* all exponent bits set */
	float v;

	if (e == emax && (fmt.has_inf || m == (1u << fmt.mbits) - 1)) {
		if (fmt.has_inf && m == 0)
			return collc_bits_f32(sign | 0x7f800000u);
		return collc_bits_f32(0x7fc00000u);
	}
	if (e == 0) {
		/* m * 2^(1 - bias - mbits): exact in float. */
		v = (float)m *
		    collc_bits_f32((uint32_t)(127 + 1 - fmt.bias - (int32_t)fmt.mbits) << 23);
		return collc_bits_f32(sign | collc_f32_bits(v));
	}
	return collc_bits_f32(sign | (uint32_t)((int32_t)e - fmt.bias + 127) << 23 |
			      m << (23 - fmt.mbits));
}

COLLC_HD uint8_t collc_fp8_encode(float f, struct collc_fp8_fmt fmt)
{
	uint32_t u = collc_f32_bits(f);
	uint32_t sign = (u >> 24) & 0x80u, mag = u & 0x7fffffffu;
	int32_t emin = 1 - fmt.bias; /* exponent of the smallest normal */
	uint32_t r;

	if (mag > 0x7f800000u)
		return COLLC_FP8_NAN;
	if (mag >= (uint32_t)(127 + emin) << 23) {
		/* Normal in fp8: round the float's mantissa to mbits, ties to even; a carry
		 * moves into the exponent, as it should. Infinity saturates below. */
		uint32_t shift = 23 - fmt.mbits;

		r = (mag + ((1u << (shift - 1)) - 1) + ((mag >> shift) & 1)) >> shift;
		r -= (uint32_t)(127 - fmt.bias) << fmt.mbits;
		if (r > fmt.maxnorm)
			r = fmt.maxnorm;
	} else {
		/* Subnormal (or zero) in fp8: an integer count of 2^(emin - mbits), which
		 * rintf rounds to nearest even; 2^mbits lands on the smallest normal. */
		float q = collc_bits_f32(mag) *
			  collc_bits_f32((uint32_t)(127 + (int32_t)fmt.mbits - emin) << 23);

		r = (uint32_t)rintf(q);
	}
	return (uint8_t)(sign | r);
}

COLLC_HD float collc_e4m3_to_float(uint8_t b)
{
	return collc_fp8_decode(b, COLLC_FP8_E4M3_FMT);
}

COLLC_HD uint8_t collc_float_to_e4m3(float f)
{
	return collc_fp8_encode(f, COLLC_FP8_E4M3_FMT);
}

COLLC_HD float collc_e5m2_to_float(uint8_t b)
{
	return collc_fp8_decode(b, COLLC_FP8_E5M2_FMT);
}

COLLC_HD uint8_t collc_float_to_e5m2(float f)
{
	return collc_fp8_encode(f, COLLC_FP8_E5M2_FMT);
}

#endif /* COLLC_PROTO_FP8_H */
