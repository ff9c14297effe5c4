/* SPDX-License-Identifier: MIT */
/*
 * The element types of include/collc.h: their sizes and names, written once
 * for the library, collcd, the grid, the tests and the bench. Usable from C
 * and CUDA (COLLC_HD).
 */
#ifndef COLLC_PROTO_DTYPE_H
#define COLLC_PROTO_DTYPE_H

#include <stdint.h>

#include "include/collc.h"
#include "proto/prims.h"

_Static_assert(COLLC_INT8 == 0 && COLLC_UINT8 == 1 && COLLC_INT32 == 2 && COLLC_UINT32 == 3 &&
		       COLLC_INT64 == 4 && COLLC_UINT64 == 5 && COLLC_FLOAT16 == 6 &&
		       COLLC_BFLOAT16 == 7 && COLLC_FLOAT32 == 8 && COLLC_FLOAT64 == 9 &&
		       COLLC_FLOAT8_E4M3 == 10 && COLLC_FLOAT8_E5M2 == 11 && COLLC_NUM_DTYPES == 12,
	       "proto/dtype.h follows collc_dtype: add a new type to both");
_Static_assert(COLLC_SUM == 0 && COLLC_AVG == 4 && COLLC_NUM_REDOPS == 5,
	       "proto/dtype.h follows collc_redop");

/* Bytes of one element of dtype; 0 for a value that is no collc_dtype. */
COLLC_HD uint32_t collc_dtype_bytes(int dtype)
{
	/* 1, 1, 4, 4, 8, 8, 2, 2, 4, 8, 1, 1 packed as 4-bit fields, type 0 lowest. */
	const uint64_t sizes = 0x118422884411ull;

	return (unsigned)dtype < COLLC_NUM_DTYPES ? (uint32_t)(sizes >> (4 * dtype)) & 0xfu : 0;
}

/* 1 when dtype and redop are both known values. */
COLLC_HD int collc_dtype_op_valid(int dtype, int redop)
{
	return (unsigned)dtype < COLLC_NUM_DTYPES && (unsigned)redop < COLLC_NUM_REDOPS;
}

/* Names as the bench, the tests and status print them. */
#define COLLC_DTYPE_NAMES                                                                          \
	{                                                                                          \
		"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16",      \
			"float32", "float64", "float8_e4m3", "float8_e5m2"                         \
	}
#define COLLC_REDOP_NAMES                                                                          \
	{                                                                                          \
		"sum", "prod", "max", "min", "avg"                                                 \
	}

#endif /* COLLC_PROTO_DTYPE_H */
