/* SPDX-License-Identifier: MIT */
/*
 * proto/fp8.h against NVIDIA's own fp8 conversions (cuda_fp8.h, run here on
 * the host; on the GPU they are single instructions): every one of the 2^32
 * float bit patterns to E4M3 and E5M2 with saturation, every code back to
 * float, and the two-element forms (which byte is which element). Equal bits
 * mean host code using proto/fp8.h and device code using cuda_fp8.h round
 * fp8 the same way.
 * Built where the CUDA toolkit is; needs no GPU.
 */
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#define _Static_assert static_assert
#include "proto/fp8.h"

static unsigned long long failures;

static void fail(const char *what, unsigned fmt, uint32_t in, unsigned got, unsigned want)
{
	if (failures++ < 10)
		printf("FAIL %s (%s): input 0x%08x: proto/fp8.h 0x%02x, cuda_fp8.h 0x%02x\n", what,
		       fmt ? "e5m2" : "e4m3", in, got, want);
}

int main()
{
	for (unsigned k = 0; k < 2; k++) {
		const __nv_fp8_interpretation_t nv = k ? __NV_E5M2 : __NV_E4M3;
		const struct collc_fp8_fmt fmt = k ? COLLC_FP8_E5M2_FMT : COLLC_FP8_E4M3_FMT;

		for (unsigned c = 0; c < 256; c++) {
			__half h = __half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)c, nv));
			float want = __half2float(h), got = collc_fp8_decode((uint8_t)c, fmt);
			uint32_t wb, gb;

			memcpy(&wb, &want, 4);
			memcpy(&gb, &got, 4);
			if (std::isnan(want) ? !std::isnan(got) : wb != gb)
				fail("decode", k, c, gb, wb);
		}
		for (uint64_t u = 0; u < (1ull << 32); u++) {
			uint32_t bits = (uint32_t)u;
			float f;

			memcpy(&f, &bits, sizeof(f));
			unsigned want = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, nv);
			unsigned got = collc_fp8_encode(f, fmt);

			if (got != want)
				fail("encode", k, bits, got, want);
		}
		/* The grid's pairs: the low byte is element 0 both ways. */
		for (uint32_t v = 0; v < 65536; v++) {
			__half2 h2 =
				__half2(__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)v, nv));
			float2 f2 = __half22float2(h2);
			unsigned want = collc_fp8_encode(collc_fp8_decode((uint8_t)v, fmt), fmt) |
					(unsigned)collc_fp8_encode(
						collc_fp8_decode((uint8_t)(v >> 8), fmt), fmt)
						<< 8;
			unsigned got = __nv_cvt_float2_to_fp8x2(f2, __NV_SATFINITE, nv);

			if (got != want)
				fail("pair", k, v, got, want);
		}
	}
	printf("test_fp8_nv: %llu mismatches over 2 x (2^32 floats, 256 codes, 65536 pairs)\n",
	       failures);
	printf("%d passed, %d failed\n", failures ? 0 : 1, failures ? 1 : 0);
	return failures ? 1 : 0;
}
