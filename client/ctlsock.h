/* SPDX-License-Identifier: MIT */
/*
 * Request/reply on collcd's control socket, shared by libcollc and collcctl.
 * Not thread-safe: callers serialize requests on one socket.
 */
#ifndef COLLC_CTLSOCK_H
#define COLLC_CTLSOCK_H

#include <stddef.h>
#include <stdint.h>

#include "proto/wire.h"

#define CTL_MAX_FDS 2

struct ctl_reply {
	int32_t status;
	char *data; /* payload after the status (chunks joined), malloc'ed */
	size_t len;
	int fds[CTL_MAX_FDS];
	int nfds;
};

/* Resolves NULL to $COLLC_SOCKET, then the default path. */
const char *ctl_socket_path(const char *path);
int ctl_connect(const char *path, int *ret_fd);
/*
 * Sends one request (with up to one fd) and waits for its reply, joining
 * chunks. timeout_ms -1: no limit. Returns 0 with *rep filled (rep->status
 * holds collcd's answer) or -errno when the exchange itself failed.
 */
int ctl_request(int fd, uint32_t *next_id, uint16_t type, const void *payload, size_t len,
		int send_fd, int timeout_ms, struct ctl_reply *rep);
void ctl_reply_free(struct ctl_reply *rep);
/* The two halves of ctl_request, for callers that match replies to requests themselves. */
int ctl_send(int fd, uint32_t id, uint16_t type, const void *payload, size_t len, int send_fd);
/*
 * Receives one reply datagram (one chunk): its id, type and status into *ret_hdr
 * and rep. Returns 0 or -errno (-ECONNRESET when collcd closed the socket).
 */
int ctl_recv(int fd, int timeout_ms, struct collc_msg_hdr *ret_hdr, int *ret_more,
	     struct ctl_reply *rep);

#endif
