/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client/ctlsock.h"

#define DEFAULT_SOCKET "/run/collcd/collcd.sock"

const char *ctl_socket_path(const char *path)
{
	const char *env;

	if (path)
		return path;
	env = getenv("COLLC_SOCKET");
	return env && *env ? env : DEFAULT_SOCKET;
}

int ctl_connect(const char *path, int *ret_fd)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	*ret_fd = fd;
	return 0;
}

static int send_msg(int fd, const void *buf, size_t len, int send_fd)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (send_fd >= 0) {
		struct cmsghdr *cm;

		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = sizeof(u.buf);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &send_fd, sizeof(int));
	}
	for (;;) {
		if (sendmsg(fd, &mh, MSG_NOSIGNAL) >= 0)
			return 0;
		if (errno != EINTR)
			return errno == EPIPE ? -ECONNRESET : -errno;
	}
}

static int64_t ms_left(const struct timespec *deadline)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (deadline->tv_sec - now.tv_sec) * 1000 + (deadline->tv_nsec - now.tv_nsec) / 1000000;
}

/* Receives one datagram; collects its fds into rep. Returns its length. */
static ssize_t recv_msg(int fd, char *buf, size_t cap, struct ctl_reply *rep, int timeout_ms)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * CTL_MAX_FDS)];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = buf, .iov_len = cap };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	struct timespec deadline;
	ssize_t n;

	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += timeout_ms / 1000;
	deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (deadline.tv_nsec >= 1000000000) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000;
	}
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int wait = timeout_ms < 0 ? -1 : (int)(ms_left(&deadline) > 0 ? ms_left(&deadline) : 0);
		int pr = poll(&p, 1, wait);

		if (pr < 0 && errno == EINTR)
			continue;
		if (pr < 0)
			return -errno;
		if (pr == 0)
			return -ETIMEDOUT;
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		break;
	}
	if (n < 0)
		return errno == ECONNRESET ? -ECONNRESET : -errno;
	if (n == 0)
		return -ECONNRESET;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		int k;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		k = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (int i = 0; i < k; i++) {
			int f;

			memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (rep->nfds < CTL_MAX_FDS)
				rep->fds[rep->nfds++] = f;
			else
				close(f);
		}
	}
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
		return -EPROTO;
	return n;
}

void ctl_reply_free(struct ctl_reply *rep)
{
	for (int i = 0; i < rep->nfds; i++)
		close(rep->fds[i]);
	rep->nfds = 0;
	free(rep->data);
	rep->data = NULL;
}

int ctl_request(int fd, uint32_t *next_id, uint16_t type, const void *payload, size_t len,
		int send_fd, int timeout_ms, struct ctl_reply *rep)
{
	struct collc_msg_hdr h = {
		.magic = COLLC_WIRE_MAGIC,
		.version = COLLC_WIRE_VERSION,
		.type = type,
		.length = (uint32_t)len,
		.id = ++*next_id,
	};
	char *buf;
	int r;

	if (len > COLLC_MSG_MAX - sizeof(h))
		return -EMSGSIZE;
	memset(rep, 0, sizeof(*rep));
	buf = malloc(COLLC_MSG_MAX);
	if (!buf)
		return -ENOMEM;
	memcpy(buf, &h, sizeof(h));
	if (len)
		memcpy(buf + sizeof(h), payload, len);
	r = send_msg(fd, buf, sizeof(h) + len, send_fd);
	while (r == 0) {
		struct collc_msg_hdr rh;
		struct collc_msg_status st;
		ssize_t n = recv_msg(fd, buf, COLLC_MSG_MAX, rep, timeout_ms);
		size_t plen;
		char *d;

		if (n < 0) {
			r = (int)n;
			break;
		}
		if ((size_t)n < sizeof(rh) + sizeof(st)) {
			r = -EPROTO;
			break;
		}
		memcpy(&rh, buf, sizeof(rh));
		memcpy(&st, buf + sizeof(rh), sizeof(st));
		if (rh.magic != COLLC_WIRE_MAGIC || rh.length != (size_t)n - sizeof(rh) ||
		    rh.type != (type | COLLC_MSG_REPLY)) {
			r = -EPROTO;
			break;
		}
		if (rh.id != h.id)
			continue; /* a reply to a request we gave up on */
		plen = (size_t)n - sizeof(rh) - sizeof(st);
		d = realloc(rep->data, rep->len + plen + 1);
		if (!d) {
			r = -ENOMEM;
			break;
		}
		rep->data = d;
		memcpy(rep->data + rep->len, buf + sizeof(rh) + sizeof(st), plen);
		rep->len += plen;
		rep->data[rep->len] = '\0';
		rep->status = st.status;
		if (!(st.flags & COLLC_STATUS_MORE))
			break;
	}
	free(buf);
	if (r < 0)
		ctl_reply_free(rep);
	return r;
}
