/* SPDX-License-Identifier: MIT */
/* Field checks of a submission entry, before any registration is looked at (pure; fuzzed). */
#ifndef COLLCD_SQE_CHECK_H
#define COLLCD_SQE_CHECK_H

#include <stdint.h>

#include "proto/shm.h"

/*
 * Checks opcode, dtype, op, flags, reserved words and root of an SQE copied
 * out of shared memory, for rank `rank` of an nranks communicator, and gives
 * the bytes its send and receive buffers must hold (0: not used by this rank).
 * Returns 0, -EINVAL or -EOVERFLOW.
 */
int sqe_validate(const struct collc_sqe *e, uint32_t nranks, uint32_t rank, uint64_t *ret_send,
		 uint64_t *ret_recv);

#endif
