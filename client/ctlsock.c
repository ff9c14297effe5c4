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
#include "common/scm.h"

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
	for (;;) {
		int r = scm_send(fd, buf, len, &send_fd, send_fd >= 0, MSG_NOSIGNAL);

		if (r != -EINTR)
			return r == -EPIPE ? -ECONNRESET : r;
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
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = u.buf,
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
		int wait = timeout_ms < 0 ? -1
					  : (int)(ms_left(&deadline) > 0 ? ms_left(&deadline) : 0);
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

int ctl_send(int fd, uint32_t id, uint16_t type, const void *payload, size_t len, int send_fd)
{
	struct collc_msg_hdr h = {
		.magic = COLLC_WIRE_MAGIC,
		.version = COLLC_WIRE_VERSION,
		.type = type,
		.length = (uint32_t)len,
		.id = id,
	};
	char *buf;
	int r;

	if (len > COLLC_MSG_MAX - sizeof(h))
		return -EMSGSIZE;
	buf = malloc(sizeof(h) + len);
	if (!buf)
		return -ENOMEM;
	memcpy(buf, &h, sizeof(h));
	if (len)
		memcpy(buf + sizeof(h), payload, len);
	r = send_msg(fd, buf, sizeof(h) + len, send_fd);
	free(buf);
	return r;
}

int ctl_recv(int fd, int timeout_ms, struct collc_msg_hdr *ret_hdr, int *ret_more,
	     struct ctl_reply *rep)
{
	struct collc_msg_status st;
	char *buf = malloc(COLLC_MSG_MAX), *d;
	ssize_t n;
	size_t plen;
	int r = 0;

	memset(rep, 0, sizeof(*rep));
	if (!buf)
		return -ENOMEM;
	n = recv_msg(fd, buf, COLLC_MSG_MAX, rep, timeout_ms);
	if (n < 0) {
		r = (int)n;
		goto out;
	}
	if ((size_t)n < sizeof(*ret_hdr) + sizeof(st)) {
		r = -EPROTO;
		goto out;
	}
	memcpy(ret_hdr, buf, sizeof(*ret_hdr));
	memcpy(&st, buf + sizeof(*ret_hdr), sizeof(st));
	if (ret_hdr->magic != COLLC_WIRE_MAGIC || ret_hdr->length != (size_t)n - sizeof(*ret_hdr) ||
	    !(ret_hdr->type & COLLC_MSG_REPLY)) {
		r = -EPROTO;
		goto out;
	}
	plen = (size_t)n - sizeof(*ret_hdr) - sizeof(st);
	d = malloc(plen + 1);
	if (!d) {
		r = -ENOMEM;
		goto out;
	}
	memcpy(d, buf + sizeof(*ret_hdr) + sizeof(st), plen);
	d[plen] = '\0';
	rep->data = d;
	rep->len = plen;
	rep->status = st.status;
	*ret_more = !!(st.flags & COLLC_STATUS_MORE);
out:
	free(buf);
	if (r < 0)
		ctl_reply_free(rep);
	return r;
}

int ctl_request(int fd, uint32_t *next_id, uint16_t type, const void *payload, size_t len,
		int send_fd, int timeout_ms, struct ctl_reply *rep)
{
	uint32_t id = ++*next_id;
	int r = ctl_send(fd, id, type, payload, len, send_fd), more = 1;

	memset(rep, 0, sizeof(*rep));
	while (r == 0 && more) {
		struct collc_msg_hdr h;
		struct ctl_reply part;
		char *d;

		r = ctl_recv(fd, timeout_ms, &h, &more, &part);
		if (r < 0)
			break;
		if (h.id != id || h.type != (type | COLLC_MSG_REPLY)) {
			/* A reply to a request we gave up on. */
			ctl_reply_free(&part);
			more = 1;
			continue;
		}
		d = realloc(rep->data, rep->len + part.len + 1);
		if (!d) {
			ctl_reply_free(&part);
			r = -ENOMEM;
			break;
		}
		rep->data = d;
		memcpy(rep->data + rep->len, part.data, part.len + 1);
		rep->len += part.len;
		rep->status = part.status;
		for (int i = 0; i < part.nfds && rep->nfds < CTL_MAX_FDS; i++)
			rep->fds[rep->nfds++] = part.fds[i];
		part.nfds = 0;
		ctl_reply_free(&part);
	}
	if (r < 0)
		ctl_reply_free(rep);
	return r;
}
