/* SPDX-License-Identifier: MIT */
/*
 * The raw TCP limit of an inter-node run: one TCP stream each way at once
 * between the network namespaces of two collcd daemons (found from their
 * control sockets: SO_PEERCRED's pid, /proc/PID/ns/net), measured by the
 * receivers. Daemons in the same namespace are measured over 127.0.0.1.
 *
 * Two kinds of stream, one after the other: "wire", each end calling
 * write()/read() on one 1 MiB buffer that stays in the caches, and "from
 * memory", each end walking a buffer of mem_bytes 1 MiB a call, as a
 * collective's ranks send from and receive into buffers of their own. Both
 * send bytes that are not zero (a calloc()'d buffer never written reads as
 * the kernel's one zero page).
 */
#ifndef COLLC_BENCH_TCP_LIMIT_H
#define COLLC_BENCH_TCP_LIMIT_H

#include <stdint.h>

struct tcp_limit {
	int ok;             /* 1: both directions of the wire stream measured */
	double gbps[2];     /* wire, GB/s (1e9 bytes/s): [0] a -> b, [1] b -> a */
	uint64_t mem_bytes; /* the from-memory stream's buffers; 0: not measured */
	double mem_gbps[2]; /* from memory, as gbps; 0 where it failed */
	char where[160];    /* which namespaces and address, for the table's header */
	char err[200];      /* why not measured, when ok is 0 */
};

/* The largest mem_bytes: four processes each walk a buffer that large. */
#define TCP_LIMIT_MEM_MAX (1ull << 30)

/*
 * Streams for `seconds` each way between the daemons of sock_a and sock_b,
 * from 1 MiB buffers, then (mem_bytes > 0) as long again from and to buffers
 * of mem_bytes. 0, or -1 with ret->err.
 */
int tcp_limit_measure(const char *sock_a, const char *sock_b, double seconds, uint64_t mem_bytes,
		      struct tcp_limit *ret);

#endif /* COLLC_BENCH_TCP_LIMIT_H */
