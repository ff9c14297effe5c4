/* SPDX-License-Identifier: MIT */
/* Socket helpers shared by the transports: the interface choice (like
 * NCCL_SOCKET_IFNAME), address lengths, and the nonblocking listen, connect
 * and exact-transfer steps that tcp's sockets and ib's out-of-band socket
 * both take. */
#ifndef COLLCD_NET_SOCK_H
#define COLLCD_NET_SOCK_H

#include <net/if.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

union net_addr {
	struct sockaddr sa;
	struct sockaddr_in in;
	struct sockaddr_in6 in6;
};

/* The interface named, else the first up non-loopback one with an address,
 * else loopback; IPv4 preferred on an interface that has both. The port of
 * ret_addr is 0. -ENODEV when the named one has no address. */
int collc__net_pick_if(const char *want, char ret_name[IF_NAMESIZE], union net_addr *ret_addr);

static inline socklen_t net_addr_len(const union net_addr *a)
{
	return a->sa.sa_family == AF_INET6 ? sizeof(a->in6) : sizeof(a->in);
}

/* Copies an ifname option (NULL: none) into opt; -EINVAL, leaving opt as it
 * was, when it does not fit. */
int collc__net_opt_ifname(char opt[IF_NAMESIZE], const char *ifname);

/* The TCP congestion control the sockets below take (TCP_CONGESTION; the
 * key net_tcp_congestion), "" or NULL: the network namespace's. Set once,
 * before any socket is made. -EINVAL for a name too long, else what the
 * kernel says of it on a socket of its own (-ENOENT: not available here). */
int collc__net_set_congestion(const char *name);
/* Whether this process may give a TCP socket congestion control name: 0, or
 * what the kernel says on a socket of its own (-ENOENT: not available here,
 * -EPERM: not in net.ipv4.tcp_allowed_congestion_control for it). */
int collc__net_congestion_settable(const char *name);
/* The name set there ("": none, the namespace's). */
const char *collc__net_congestion(void);

/* A nonblocking socket listening on *a (port 0: any), with the bound address
 * written back to *a; SO_REUSEADDR when reuseaddr. The sockets it accepts
 * keep its congestion control. fd or -errno. */
int collc__net_listen(union net_addr *a, int backlog, int reuseaddr);

/* A nonblocking socket whose connect to *peer has started; TCP_NODELAY first
 * when nodelay. fd or -errno. */
int collc__net_connect_start(const union net_addr *peer, int nodelay);

/* Whether fd's connect has finished: 1 up, 0 not yet, -errno failed. */
int collc__net_connect_done(int fd);

/* Moves bytes [*off, len) of buf out of (out) or into fd without blocking;
 * 1: all moved, 0: would block, -errno (-ECONNRESET on EOF). */
int collc__net_xfer(int fd, void *buf, size_t len, size_t *off, int out);

/* Sends bytes [*off, a_len + b_len) of a followed by b in one call where
 * the socket takes them (one segment for a small message); as
 * collc__net_xfer() otherwise. */
int collc__net_send2(int fd, const void *a, size_t a_len, const void *b, size_t b_len, size_t *off);

/*
 * A read-ahead buffer for a nonblocking stream socket carrying small framed
 * messages (collc__net_ra_recv()). Zeroed, or without buf, it reads nothing
 * ahead.
 */
struct net_ra {
	uint8_t *buf;
	uint32_t cap;      /* buf's size */
	uint32_t off, len; /* buf[off, len): read from the socket, not yet taken */
	int drained;       /* the last fill came short: the socket was empty then */
};

/*
 * recvmsg() of want bytes into mh's vectors, through ra: first what was read
 * ahead; a read of less than ra->cap with nothing read ahead fills the buffer
 * (one call takes a small message and whatever follows it); larger ones go
 * straight to the vectors. When the last fill came short the socket was
 * empty, so with between set (the caller is between messages) the next read
 * is answered "would block" (-1, EAGAIN) without a call: poll(), level
 * triggered, tells when more came, as after a real EAGAIN. Returns what
 * recvmsg() would.
 */
ssize_t collc__net_ra_recv(int fd, struct net_ra *ra, struct msghdr *mh, size_t want, int between);

#endif
