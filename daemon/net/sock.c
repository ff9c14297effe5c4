/* SPDX-License-Identifier: MIT */
/* Interface choice shared by the transports (sock.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <stdio.h>
#include <string.h>

int collc__net_pick_if(const char *want, char ret_name[IF_NAMESIZE], union net_addr *ret_addr)
{
	struct ifaddrs *ifs, *i, *best = NULL;

	if (getifaddrs(&ifs) < 0)
		return -errno;
	for (i = ifs; i; i = i->ifa_next) {
		if (!i->ifa_addr || !(i->ifa_flags & IFF_UP))
			continue;
		if (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)
			continue;
		if (want && *want) {
			if (strcmp(i->ifa_name, want))
				continue;
		} else if (i->ifa_flags & IFF_LOOPBACK) {
			continue;
		}
		if (!best || (best->ifa_addr->sa_family == AF_INET6 &&
			      i->ifa_addr->sa_family == AF_INET && !strcmp(best->ifa_name, i->ifa_name)))
			best = i;
	}
	if (best) {
		snprintf(ret_name, IF_NAMESIZE, "%s", best->ifa_name);
		memset(ret_addr, 0, sizeof(*ret_addr));
		memcpy(ret_addr, best->ifa_addr, best->ifa_addr->sa_family == AF_INET6 ?
		       sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
		ret_addr->in.sin_port = 0;
	}
	freeifaddrs(ifs);
	if (best)
		return 0;
	if (want && *want)
		return -ENODEV;
	snprintf(ret_name, IF_NAMESIZE, "lo");
	memset(ret_addr, 0, sizeof(*ret_addr));
	ret_addr->in.sin_family = AF_INET;
	ret_addr->in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return 0;
}
