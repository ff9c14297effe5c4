/* SPDX-License-Identifier: MIT */
/* Socket helpers shared by the transports (sock.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

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
		if (!best ||
		    (best->ifa_addr->sa_family == AF_INET6 && i->ifa_addr->sa_family == AF_INET &&
		     !strcmp(best->ifa_name, i->ifa_name)))
			best = i;
	}
	if (best) {
		snprintf(ret_name, IF_NAMESIZE, "%s", best->ifa_name);
		memset(ret_addr, 0, sizeof(*ret_addr));
		memcpy(ret_addr, best->ifa_addr,
		       best->ifa_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
							     : sizeof(struct sockaddr_in));
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

int collc__net_opt_ifname(char opt[IF_NAMESIZE], const char *ifname)
{
	if (ifname && strlen(ifname) >= IF_NAMESIZE)
		return -EINVAL;
	snprintf(opt, IF_NAMESIZE, "%s", ifname ? ifname : "");
	return 0;
}

/* collc__net_set_congestion(): "" for the namespace's (names are under 16 bytes, TCP_CA_NAME_MAX). */
static char congestion[16];

/* Closes fd after a failed call, keeping that call's errno. */
static int close_failed(int fd)
{
	int err = errno;

	close(fd);
	return -err;
}

/* A nonblocking stream socket with option opt of level set to 1 (opt < 0:
 * none) and the congestion control chosen. fd or -errno. */
static int stream_socket(int family, int level, int opt)
{
	int fd, one = 1;

	fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (opt >= 0)
		setsockopt(fd, level, opt, &one, sizeof(one));
	if (congestion[0] &&
	    setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, congestion, strlen(congestion)) < 0)
		return close_failed(fd);
	return fd;
}

int collc__net_congestion_settable(const char *name)
{
	int fd, r = 0;

	/* A host may have IPv4 or IPv6 alone. */
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 && errno == EAFNOSUPPORT)
		fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, strlen(name)) < 0)
		r = -errno;
	close(fd);
	return r;
}

int collc__net_set_congestion(const char *name)
{
	int r;

	if (!name || !name[0]) {
		congestion[0] = '\0';
		return 0;
	}
	if (strlen(name) >= sizeof(congestion))
		return -EINVAL;
	r = collc__net_congestion_settable(name);
	if (r < 0)
		return r;
	snprintf(congestion, sizeof(congestion), "%s", name);
	return 0;
}

const char *collc__net_congestion(void)
{
	return congestion;
}

int collc__net_listen(union net_addr *a, int backlog, int reuseaddr)
{
	socklen_t len = net_addr_len(a);
	int fd = stream_socket(a->sa.sa_family, SOL_SOCKET, reuseaddr ? SO_REUSEADDR : -1);

	if (fd < 0)
		return fd;
	if (bind(fd, &a->sa, len) < 0 || listen(fd, backlog) < 0 ||
	    getsockname(fd, &a->sa, &len) < 0)
		return close_failed(fd);
	return fd;
}

int collc__net_connect_start(const union net_addr *peer, int nodelay)
{
	int fd = stream_socket(peer->sa.sa_family, IPPROTO_TCP, nodelay ? TCP_NODELAY : -1);

	if (fd < 0)
		return fd;
	if (connect(fd, &peer->sa, net_addr_len(peer)) < 0 && errno != EINPROGRESS)
		return close_failed(fd);
	return fd;
}

int collc__net_connect_done(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	int err = 0;
	socklen_t elen = sizeof(err);

	if (poll(&p, 1, 0) <= 0)
		return 0;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
		return -errno;
	return err ? -err : 1;
}

/* What one nonblocking call's n means: 1 go on (*off moved), 0 would block, -errno. */
static int io_step(ssize_t n, size_t *off)
{
	if (n > 0) {
		*off += (size_t)n;
		return 1;
	}
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	if (n < 0 && errno == EINTR)
		return 1;
	return n == 0 ? -ECONNRESET : -errno;
}

int collc__net_xfer(int fd, void *buf, size_t len, size_t *off, int out)
{
	char *p = buf;

	while (*off < len) {
		int r = io_step(out ? send(fd, p + *off, len - *off, MSG_NOSIGNAL | MSG_DONTWAIT)
				    : recv(fd, p + *off, len - *off, MSG_DONTWAIT),
				off);

		if (r <= 0)
			return r;
	}
	return 1;
}

int collc__net_send2(int fd, const void *a, size_t a_len, const void *b, size_t b_len, size_t *off)
{
	while (*off < a_len + b_len) {
		struct iovec v[2];
		struct msghdr m = { .msg_iov = v };
		int r;

		if (*off < a_len) {
			v[0] = (struct iovec){ (char *)a + *off, a_len - *off };
			v[1] = (struct iovec){ (void *)b, b_len };
			m.msg_iovlen = b_len ? 2 : 1;
		} else {
			v[0] = (struct iovec){ (char *)b + (*off - a_len), a_len + b_len - *off };
			m.msg_iovlen = 1;
		}
		r = io_step(sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT), off);
		if (r <= 0)
			return r;
	}
	return 1;
}

ssize_t collc__net_ra_recv(int fd, struct net_ra *ra, struct msghdr *mh, size_t want, int between)
{
	size_t n = 0;

	if (ra->off == ra->len) {
		ssize_t got;

		if (!ra->buf || want >= ra->cap) {
			ra->drained = 0;
			return recvmsg(fd, mh, MSG_DONTWAIT);
		}
		if (ra->drained && between) {
			ra->drained = 0;
			errno = EAGAIN;
			return -1;
		}
		got = recv(fd, ra->buf, ra->cap, MSG_DONTWAIT);
		if (got <= 0)
			return got;
		ra->off = 0;
		ra->len = (uint32_t)got;
		ra->drained = (size_t)got < ra->cap;
	}
	for (size_t i = 0; i < mh->msg_iovlen && ra->off < ra->len; i++) {
		size_t k = mh->msg_iov[i].iov_len;

		if (k > ra->len - ra->off)
			k = ra->len - ra->off;
		memcpy(mh->msg_iov[i].iov_base, ra->buf + ra->off, k);
		ra->off += (uint32_t)k;
		n += k;
	}
	return (ssize_t)n;
}
