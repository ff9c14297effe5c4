/* SPDX-License-Identifier: MIT */
/* Field checks of a submission entry, before any registration is looked at (pure; fuzzed). */
#ifndef COLLCD_SQE_CHECK_H
#define COLLCD_SQE_CHECK_H

#include <stdint.h>

#include "proto/shm.h"

/*
 * flags and gate: none and gate 0, or COLLC_SQE_STREAM (a ticket in the low
 * 32 bits of user_data, nonzero, the high ones 0; the five collectives,
 * all-to-all, send, receive) or COLLC_SQE_GRAPH (seq 0; the five and
 * all-to-all), with a gate below COLLC_GATES.
 */
int sqe_flags_valid(const struct collc_sqe *e);
/*
 * Checks opcode, dtype, op, flags, gate and root of an SQE copied
 * out of shared memory, for rank `rank` of an nranks communicator, and gives
 * the bytes its send and receive buffers must hold (0: not used by this rank).
 * Returns 0, -EINVAL or -EOVERFLOW.
 */
int sqe_validate(const struct collc_sqe *e, uint32_t nranks, uint32_t rank, uint64_t *ret_send,
		 uint64_t *ret_recv);
/*
 * All-to-allv's counts and displacements (elements, the first nranks of each
 * array, already copied out of shared memory; es the element size): the bytes
 * its send and receive buffers must hold, from the buffer's start to the end
 * of the furthest block of nonzero count. Returns 0 or -EINVAL (nranks out of
 * range, or a block's end overflows).
 */
int sqe_validate_args(const struct collc_sqe_args *a, uint32_t nranks, uint32_t es,
		      uint64_t *ret_send, uint64_t *ret_recv);

#endif
