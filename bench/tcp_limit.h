/* SPDX-License-Identifier: MIT */
/*
 * The raw TCP limit of an inter-node run: one TCP stream each way at once
 * between the network namespaces of two collcd daemons (found from their
 * control sockets: SO_PEERCRED's pid, /proc/PID/ns/net), measured by the
 * receivers. Daemons in the same namespace are measured over 127.0.0.1.
 */
#ifndef COLLC_BENCH_TCP_LIMIT_H
#define COLLC_BENCH_TCP_LIMIT_H

struct tcp_limit {
	int ok;          /* 1: both directions measured */
	double gbps[2];  /* GB/s (1e9 bytes/s): [0] a -> b, [1] b -> a */
	char where[160]; /* which namespaces and address, for the table's header */
	char err[200];   /* why not measured, when ok is 0 */
};

/* Streams for `seconds` each way between the daemons of sock_a and sock_b. 0, or -1 with ret->err. */
int tcp_limit_measure(const char *sock_a, const char *sock_b, double seconds,
		      struct tcp_limit *ret);

#endif /* COLLC_BENCH_TCP_LIMIT_H */
