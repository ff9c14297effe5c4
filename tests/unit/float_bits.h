/* SPDX-License-Identifier: MIT */
/* A float's bits and back, for the reduction tests. */
#ifndef COLLC_TESTS_UNIT_FLOAT_BITS_H
#define COLLC_TESTS_UNIT_FLOAT_BITS_H

#include <stdint.h>
#include <string.h>

static inline float bits_to_float(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static inline uint32_t float_to_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

#endif
