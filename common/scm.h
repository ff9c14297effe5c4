/* SPDX-License-Identifier: MIT */
/*
 * One datagram with file descriptors (SCM_RIGHTS) on a Unix socket: what
 * collcd's control plane, its CUDA backend, libcollc and the tests send.
 */
#ifndef COLLC_COMMON_SCM_H
#define COLLC_COMMON_SCM_H

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define SCM_SEND_MAX_FDS 8

/* sendmsg(fd, buf + nfds descriptors, flags) once: 0, or -errno (-EINVAL: too many fds). */
static inline int scm_send(int fd, const void *buf, size_t len, const int *fds, int nfds, int flags)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	union {
		char buf[CMSG_SPACE(sizeof(int) * SCM_SEND_MAX_FDS)];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (nfds < 0 || nfds > SCM_SEND_MAX_FDS)
		return -EINVAL;
	if (nfds) {
		struct cmsghdr *cm;

		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
	}
	return sendmsg(fd, &mh, flags) < 0 ? -errno : 0;
}

#endif
