/* SPDX-License-Identifier: MIT */
/*
 * The control thread's own state, shared by control.c (sessions, sockets,
 * dispatch), ctl_mem.c (memory requests) and ctl_admin.c (get, set, reload,
 * status text). Only the control thread touches it.
 */
#ifndef COLLCD_CTL_INT_H
#define COLLCD_CTL_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <uv.h>

#include "daemon/control.h"
#include "daemon/sched.h"
#include "proto/wire.h"

#define MAX_PENDING_CMDS 256 /* commands one session may have in the scheduler */
#define MAX_MEM_BYTES    (1ull << 40)

struct outmsg {
	struct outmsg *next;
	size_t len;
	int fds[2];
	int nfds;
	char data[];
};

struct session {
	struct session *next, **pprev;
	uv_poll_t poll;
	int fd;
	struct ucred cred;
	int admin;
	int closed;
	int handle_closed; /* libuv is done with the poll handle */
	int pidfd;         /* the client process: readable once it exits */
	uv_poll_t pid_poll;
	int pid_poll_closed;
	int pending;       /* commands in the scheduler */
	int hello_pending; /* a hello is with the scheduler: a second one is refused */
	struct sched_client *client;
	struct outmsg *outq, **outq_tail;
};

struct cmd_ctx {
	struct sched_cmd cmd;
	struct session *s;
	uint16_t type;
	uint32_t id;
};

extern struct ctl_params ctl_params;
extern uv_async_t ctl_done_async; /* wakes the loop: scheduler commands or memory completions */

/* control.c: replies and commands */
void ctl_reply_status(struct session *s, uint16_t type, uint32_t id, int status);
void ctl_reply_struct(struct session *s, uint16_t type, uint32_t id, int status, const void *body,
		      size_t len, const int *fds, int nfds);
void ctl_reply_text(struct session *s, uint16_t type, uint32_t id, int status, const char *text,
		    size_t len);
void ctl_session_maybe_free(struct session *s);
struct cmd_ctx *ctl_cmd_new(struct session *s, enum sched_cmd_type type, uint16_t mtype,
			    uint32_t id, void (*done)(struct sched_cmd *));
void ctl_cmd_post(struct cmd_ctx *c);
struct session *ctl_cmd_end(struct sched_cmd *cmd, struct cmd_ctx **ret_ctx);
int ctl_make_memfd(const char *name, uint64_t size, int extra_seals, int *ret_fd, void **ret_addr);

/* ctl_mem.c: memory requests */
void ctl_run_mem_done(void);
void ctl_handle_mem(struct session *s, const struct collc_msg_hdr *h, const void *payload, int *fds,
		    int nfds);
void ctl_mem_fini(void);

/* ctl_admin.c: get, set, status text */
void ctl_done_text(struct sched_cmd *cmd);
void ctl_handle_get(struct session *s, const struct collc_msg_hdr *h, const char *payload);
void ctl_handle_set(struct session *s, const struct collc_msg_hdr *h, const char *payload);

#endif
