/* SPDX-License-Identifier: MIT */
/* Socket helpers shared by the transports: the interface choice (like
 * NCCL_SOCKET_IFNAME) and address lengths. */
#ifndef COLLCD_NET_SOCK_H
#define COLLCD_NET_SOCK_H

#include <net/if.h>
#include <netinet/in.h>
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

#endif
