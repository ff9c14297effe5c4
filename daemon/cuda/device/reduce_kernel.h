/* SPDX-License-Identifier: MIT */
/*
 * The grid's arithmetic: red8() and fin8() on 8-byte words of packed
 * elements (float16, bfloat16 and fp8 through float32, as cpu/reduce.c), and
 * their 16-byte vector forms with the vector loads and stores of the copy
 * and reduce loops (COLLC_VEC_UNROLL vectors in flight). No ordering of its
 * own: the payload loads and stores are ld_data / st_data (common.h).
 */
#ifndef COLLCD_CUDA_DEVICE_REDUCE_KERNEL_H
#define COLLCD_CUDA_DEVICE_REDUCE_KERNEL_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "daemon/cuda/device/common.h"

/* Reductions on 8-byte words of packed elements */

template <typename S, typename U>
__device__ __forceinline__ uint64_t red_int(int op, uint64_t a, uint64_t b)
{
	constexpr int N = 8 / sizeof(S);
	union {
		uint64_t u;
		S s[N];
	} x, y;

	x.u = a;
	y.u = b;
#pragma unroll
	for (int i = 0; i < N; i++) {
		S p = x.s[i], q = y.s[i];

		switch (op) {
		case COLLC_PROD:
			x.s[i] = (S)(U)((U)p * (U)q);
			break;
		case COLLC_MAX:
			x.s[i] = p > q ? p : q;
			break;
		case COLLC_MIN:
			x.s[i] = p < q ? p : q;
			break;
		default: /* SUM, AVG */
			x.s[i] = (S)(U)((U)p + (U)q);
			break;
		}
	}
	return x.u;
}

/* op on two floating-point values (float, double); SUM and AVG add. */
template <typename T> __device__ __forceinline__ T fop(int op, T p, T q)
{
	switch (op) {
	case COLLC_PROD:
		return p * q;
	case COLLC_MAX:
		return p > q ? p : q;
	case COLLC_MIN:
		return p < q ? p : q;
	default:
		return p + q;
	}
}

__device__ __forceinline__ float h2f(uint16_t h)
{
	return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ uint16_t f2h(float f)
{
	return __half_as_ushort(__float2half_rn(f));
}

__device__ __forceinline__ float b2f(uint16_t h)
{
	return __bfloat162float(__ushort_as_bfloat16(h));
}

__device__ __forceinline__ uint16_t f2b(float f)
{
	return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

/*
 * fp8: two elements at a time through the hardware conversions (exact to
 * half, then float; back with round to nearest even and saturation). They
 * give proto/fp8.h's bits, which the host uses: the two were compared for
 * every float and every code (tests/unit/test_fp8_nv.cu). Both formats
 * share one inlined copy (the format a runtime argument): nvcc took 65 s of
 * CPU for the grid without fp8, 91 s with one copy, 128 s with one per format.
 */
__device__ __forceinline__ float2 fp8x2_to_float2(uint32_t v, __nv_fp8_interpretation_t k)
{
	__half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)v, k);

	return __half22float2(__half2(h));
}

__device__ __forceinline__ uint64_t red8_fp8(__nv_fp8_interpretation_t k, int op, uint64_t a,
					     uint64_t b)
{
	uint64_t r = 0;

#pragma unroll
	for (int i = 0; i < 4; i++) {
		float2 p = fp8x2_to_float2((uint32_t)(a >> (16 * i)) & 0xffffu, k);
		float2 q = fp8x2_to_float2((uint32_t)(b >> (16 * i)) & 0xffffu, k);
		float2 o = make_float2(fop(op, p.x, q.x), fop(op, p.y, q.y));

		r |= (uint64_t)__nv_cvt_float2_to_fp8x2(o, __NV_SATFINITE, k) << (16 * i);
	}
	return r;
}

__device__ __forceinline__ uint64_t fin8_fp8(__nv_fp8_interpretation_t k, uint32_t n, uint64_t a)
{
	uint64_t r = 0;

#pragma unroll
	for (int i = 0; i < 4; i++) {
		float2 p = fp8x2_to_float2((uint32_t)(a >> (16 * i)) & 0xffffu, k);

		p.x /= (float)n;
		p.y /= (float)n;
		r |= (uint64_t)__nv_cvt_float2_to_fp8x2(p, __NV_SATFINITE, k) << (16 * i);
	}
	return r;
}

/* float16, bfloat16 and fp8 reduce in float32, rounded back after every step (as reduce.c). */
__device__ __forceinline__ uint64_t red8(int dt, int op, uint64_t a, uint64_t b)
{
	union {
		uint64_t u;
		uint16_t h[4];
		uint32_t w[2];
		float f[2];
		double d;
	} x, y;

	x.u = a;
	y.u = b;
	switch (dt) {
	case COLLC_INT8:
		return red_int<int8_t, uint8_t>(op, a, b);
	case COLLC_UINT8:
		return red_int<uint8_t, uint8_t>(op, a, b);
	case COLLC_INT32:
		return red_int<int32_t, uint32_t>(op, a, b);
	case COLLC_UINT32:
		return red_int<uint32_t, uint32_t>(op, a, b);
	case COLLC_INT64:
		return red_int<int64_t, uint64_t>(op, a, b);
	case COLLC_UINT64:
		return red_int<uint64_t, uint64_t>(op, a, b);
	case COLLC_FLOAT16:
#pragma unroll
		for (int i = 0; i < 4; i++)
			x.h[i] = f2h(fop(op, h2f(x.h[i]), h2f(y.h[i])));
		return x.u;
	case COLLC_BFLOAT16:
#pragma unroll
		for (int i = 0; i < 4; i++)
			x.h[i] = f2b(fop(op, b2f(x.h[i]), b2f(y.h[i])));
		return x.u;
	case COLLC_FLOAT32:
		x.f[0] = fop(op, x.f[0], y.f[0]);
		x.f[1] = fop(op, x.f[1], y.f[1]);
		return x.u;
	case COLLC_FLOAT8_E4M3:
	case COLLC_FLOAT8_E5M2:
		return red8_fp8(dt == COLLC_FLOAT8_E4M3 ? __NV_E4M3 : __NV_E5M2, op, a, b);
	default:
		x.d = fop(op, x.d, y.d);
		return x.u;
	}
}

template <typename S, typename D>
__device__ __forceinline__ uint64_t fin_int(uint64_t a, uint32_t n)
{
	constexpr int N = 8 / sizeof(S);
	union {
		uint64_t u;
		S s[N];
	} x;

	x.u = a;
#pragma unroll
	for (int i = 0; i < N; i++)
		x.s[i] = (S)((D)x.s[i] / (D)n);
	return x.u;
}

/* AVG: divide by nranks (reduce.c red_finish). */
__device__ __forceinline__ uint64_t fin8(int dt, uint32_t n, uint64_t a)
{
	union {
		uint64_t u;
		uint16_t h[4];
		float f[2];
		double d;
	} x;

	x.u = a;
	switch (dt) {
	case COLLC_INT8:
		return fin_int<int8_t, int64_t>(a, n);
	case COLLC_UINT8:
		return fin_int<uint8_t, uint64_t>(a, n);
	case COLLC_INT32:
		return fin_int<int32_t, int64_t>(a, n);
	case COLLC_UINT32:
		return fin_int<uint32_t, uint64_t>(a, n);
	case COLLC_INT64:
		return fin_int<int64_t, int64_t>(a, n);
	case COLLC_UINT64:
		return fin_int<uint64_t, uint64_t>(a, n);
	case COLLC_FLOAT16:
#pragma unroll
		for (int i = 0; i < 4; i++)
			x.h[i] = f2h(h2f(x.h[i]) / (float)n);
		return x.u;
	case COLLC_BFLOAT16:
#pragma unroll
		for (int i = 0; i < 4; i++)
			x.h[i] = f2b(b2f(x.h[i]) / (float)n);
		return x.u;
	case COLLC_FLOAT32:
		x.f[0] = x.f[0] / (float)n;
		x.f[1] = x.f[1] / (float)n;
		return x.u;
	case COLLC_FLOAT8_E4M3:
	case COLLC_FLOAT8_E5M2:
		return fin8_fp8(dt == COLLC_FLOAT8_E4M3 ? __NV_E4M3 : __NV_E5M2, n, a);
	default:
		x.d = x.d / (double)n;
		return x.u;
	}
}

/*
 * Vectors in flight per thread in the copy and reduce loops. One 16-byte load
 * at a time leaves a block latency-bound: 512 threads x 16 B per HBM or
 * NVLink round trip, about 8 GB/s a block: 32 channels reached 257 GB/s busbw
 * at 512 MiB, 4 vectors 330-338, 2 vectors 307, 8 (with spills) 284
 * (bench/RESULTS.md). The loops load COLLC_VEC_UNROLL vectors of every source
 * before the first is used. They live in prim<flags>() and reduce_n(), both
 * __noinline__, so the reductions they inline exist once per instance, not
 * once per call site.
 */
#ifndef COLLC_VEC_UNROLL
#define COLLC_VEC_UNROLL 4
#endif

union vec16 {
	uint4 v;
	uint64_t w[2];
};

__device__ __forceinline__ uint4 vec_red(int dt, int op, uint4 a, uint4 b)
{
	union vec16 x, y;

	x.v = a;
	y.v = b;
	x.w[0] = red8(dt, op, x.w[0], y.w[0]);
	x.w[1] = red8(dt, op, x.w[1], y.w[1]);
	return x.v;
}

__device__ __forceinline__ uint4 vec_fin(int dt, uint32_t n, uint4 a)
{
	union vec16 x;

	x.v = a;
	x.w[0] = fin8(dt, n, x.w[0]);
	x.w[1] = fin8(dt, n, x.w[1]);
	return x.v;
}

/* U vectors at p + 16 * (i + u * T), u < U: loads, stores, reduction and finish of each. */
template <int U>
__device__ __forceinline__ void vecs_ld(uint4 (&x)[U], const char *p, uint64_t i, uint64_t T)
{
#pragma unroll
	for (int u = 0; u < U; u++)
		x[u] = ld_data(p + 16 * (i + u * T));
}

template <int U>
__device__ __forceinline__ void vecs_st(char *p, const uint4 (&x)[U], uint64_t i, uint64_t T)
{
#pragma unroll
	for (int u = 0; u < U; u++)
		st_data(p + 16 * (i + u * T), x[u]);
}

template <int U>
__device__ __forceinline__ void vecs_red(uint4 (&x)[U], const uint4 (&y)[U], int dt, int op)
{
#pragma unroll
	for (int u = 0; u < U; u++)
		x[u] = vec_red(dt, op, x[u], y[u]);
}

template <int U> __device__ __forceinline__ void vecs_fin(uint4 (&x)[U], int dt, uint32_t nr)
{
#pragma unroll
	for (int u = 0; u < U; u++)
		x[u] = vec_fin(dt, nr, x[u]);
}

#endif
