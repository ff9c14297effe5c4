/* SPDX-License-Identifier: MIT */
/* The first look at a datagram from the control socket (pure; fuzzed). */
#ifndef COLLCD_WIRE_CHECK_H
#define COLLCD_WIRE_CHECK_H

#include <stddef.h>

#include "proto/wire.h"

/*
 * Checks one received datagram of n bytes: magic, version, that `length`
 * matches n, that it is a request, and the payload length its type requires.
 * Returns 0 with *h filled; -EPROTO when not even the header is sound (*h is
 * filled when n covers a header, so the id can be echoed), -EBADMSG for a
 * payload of the wrong size, -EOPNOTSUPP for an unknown type.
 */
int wire_check(const void *buf, size_t n, struct collc_msg_hdr *h);

#endif
