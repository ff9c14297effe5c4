/* SPDX-License-Identifier: MIT */
/*
 * Host-side reductions for the CPU executor.
 *
 * Buffers hold n elements of one collc_dtype. float16, bfloat16 and the two
 * fp8 types are reduced in float32 and rounded back (to nearest even; fp8
 * with saturation, proto/fp8.h) after every step.
 * Integer SUM and PROD wrap modulo 2^N; MAX and MIN on floats are the plain
 * comparison (a > b ? a : b), so a NaN in a does not propagate.
 *
 * Callers validate (dtype, redop) with collc_dtype_op_valid() (proto/dtype.h)
 * first: these functions do nothing for an unknown combination.
 */
#ifndef COLLC_DAEMON_REDUCE_H
#define COLLC_DAEMON_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "include/collc.h"

/*
 * dst[i] = a[i] op b[i] for n elements. dst may be a or b (or both), but
 * must not partly overlap either. AVG reduces as SUM here.
 */
void red_reduce(void *dst, const void *a, const void *b, size_t n, int dtype, int redop);

/*
 * AVG finish: buf[i] /= nranks, truncating toward zero for integers (after
 * the wrapped SUM), dividing in float (fp8, float16, bfloat16, float32) or double
 * for floats. A no-op for the other ops and for nranks 0 or 1.
 */
void red_finish(void *buf, size_t n, int dtype, int redop, uint32_t nranks);

/*
 * IEEE binary16 and bfloat16 conversions: round to nearest even, NaNs stay
 * NaN (quieted, payload kept where it fits), overflow gives Inf.
 */
float red_half_to_float(uint16_t h);
uint16_t red_float_to_half(float f);
float red_bf16_to_float(uint16_t b);
uint16_t red_float_to_bf16(float f);

#endif /* COLLC_DAEMON_REDUCE_H */
