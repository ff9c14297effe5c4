/* SPDX-License-Identifier: MIT */
/*
 * The control plane: a libuv loop on collcd's SOCK_SEQPACKET Unix sockets.
 * One datagram is one request; every reply names the request's id. Clients
 * are identified by SO_PEERCRED. Changes to clients, memory and communicators
 * go to the scheduler as commands; this thread never blocks on them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <urcu-qsbr.h>

#include "common/atomics.h"
#include "common/scm.h"
#include "daemon/config.h"
#include "daemon/control.h"
#include "daemon/ctl_int.h"
#include "daemon/exec.h"
#include "daemon/log.h"
#include "daemon/node.h"
#include "daemon/sched.h"
#include "daemon/wire_check.h"
#include "proto/shm.h"
#include "proto/wire.h"

#define MAX_FDS_IN 2

struct listener {
	uv_poll_t poll;
	int fd;
	int admin; /* every peer of this socket may run admin verbs */
	int owned; /* bound by collcd: unlink at exit */
	char path[108];
};

struct ctl_params ctl_params;
uv_async_t ctl_done_async;
static struct listener listeners[8];
static int nlisteners;
static struct session *sessions;
static char *rxbuf;
static int rcu_registered;
static int async_closed;

static void session_close(struct session *s);

static int send_now(struct session *s, const void *buf, size_t len, const int *fds, int nfds)
{
	return scm_send(s->fd, buf, len, fds, nfds, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static void on_session_io(uv_poll_t *h, int status, int events);

static void flush_outq(struct session *s)
{
	while (s->outq) {
		struct outmsg *m = s->outq;
		int r = send_now(s, m->data, m->len, m->fds, m->nfds);

		if (r == -EAGAIN)
			return;
		s->outq = m->next;
		if (!s->outq)
			s->outq_tail = &s->outq;
		for (int i = 0; i < m->nfds; i++)
			close(m->fds[i]);
		free(m);
		if (r < 0) {
			session_close(s);
			return;
		}
	}
	uv_poll_start(&s->poll, UV_READABLE | UV_DISCONNECT, on_session_io);
}

/* Sends one reply; fds are duplicated by the kernel, the caller keeps its own. */
static void reply_raw(struct session *s, uint16_t type, uint32_t id, uint32_t flags, int status,
		      const void *payload, size_t plen, const int *fds, int nfds)
{
	size_t len = sizeof(struct collc_msg_hdr) + sizeof(struct collc_msg_status) + plen;
	struct outmsg *m;
	struct collc_msg_hdr *h;
	struct collc_msg_status *st;
	int r;

	if (s->closed)
		return;
	m = malloc(sizeof(*m) + len);
	if (!m) {
		session_close(s);
		return;
	}
	h = (struct collc_msg_hdr *)m->data;
	h->magic = COLLC_WIRE_MAGIC;
	h->version = COLLC_WIRE_VERSION;
	h->type = (uint16_t)(type | COLLC_MSG_REPLY);
	h->length = (uint32_t)(len - sizeof(*h));
	h->id = id;
	st = (struct collc_msg_status *)(h + 1);
	st->status = status;
	st->flags = flags;
	if (plen)
		memcpy(st + 1, payload, plen);
	m->len = len;
	m->nfds = 0;
	m->next = NULL;
	if (!s->outq) {
		r = send_now(s, m->data, len, fds, nfds);
		if (r != -EAGAIN) {
			free(m);
			if (r < 0)
				session_close(s);
			return;
		}
	}
	for (int i = 0; i < nfds; i++) {
		m->fds[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
		if (m->fds[i] >= 0)
			m->nfds++;
	}
	*s->outq_tail = m;
	s->outq_tail = &m->next;
	/* Back-pressure: a client that does not read its replies gets no more requests read. */
	uv_poll_start(&s->poll, UV_WRITABLE | UV_DISCONNECT, on_session_io);
}

void ctl_reply_status(struct session *s, uint16_t type, uint32_t id, int status)
{
	reply_raw(s, type, id, 0, status, NULL, 0, NULL, 0);
}

/* A struct reply whose first member is a collc_msg_status. */
void ctl_reply_struct(struct session *s, uint16_t type, uint32_t id, int status, const void *body,
		      size_t len, const int *fds, int nfds)
{
	size_t st = sizeof(struct collc_msg_status);

	reply_raw(s, type, id, 0, status, (const char *)body + st, len - st, fds, nfds);
}

/* Long text goes out in chunks; all but the last carry COLLC_STATUS_MORE. */
void ctl_reply_text(struct session *s, uint16_t type, uint32_t id, int status, const char *text,
		    size_t len)
{
	size_t max = COLLC_MSG_MAX - sizeof(struct collc_msg_hdr) - sizeof(struct collc_msg_status);

	do {
		size_t n = len < max ? len : max;

		reply_raw(s, type, id, len > n ? COLLC_STATUS_MORE : 0, status, text, n, NULL, 0);
		text += n;
		len -= n;
	} while (len > 0);
}

void ctl_session_maybe_free(struct session *s)
{
	if (!s->closed || s->pending || !s->handle_closed || !s->pid_poll_closed)
		return;
	free(s);
}

struct cmd_ctx *ctl_cmd_new(struct session *s, enum sched_cmd_type type, uint16_t mtype,
			    uint32_t id, void (*done)(struct sched_cmd *))
{
	struct cmd_ctx *c;

	if (s->pending >= MAX_PENDING_CMDS)
		return NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->cmd.type = type;
	c->cmd.client = s->client;
	c->cmd.done = done;
	c->cmd.owner = c;
	c->s = s;
	c->type = mtype;
	c->id = id;
	return c;
}

void ctl_cmd_post(struct cmd_ctx *c)
{
	c->s->pending++;
	sched_post(&c->cmd);
}

/* Ends a command: the session may have closed meanwhile. */
struct session *ctl_cmd_end(struct sched_cmd *cmd, struct cmd_ctx **ret_ctx)
{
	struct cmd_ctx *c = cmd->owner;
	struct session *s = c->s;

	s->pending--;
	*ret_ctx = c;
	if (s->closed) {
		ctl_session_maybe_free(s);
		return NULL;
	}
	return s;
}

/* Tells the scheduler a client's session ended; the command frees itself. */
static int post_client_gone(struct sched_client *client)
{
	struct cmd_ctx *g = calloc(1, sizeof(*g));

	if (!g)
		return -ENOMEM;
	g->cmd.type = CMD_CLIENT_GONE;
	g->cmd.client = client;
	g->cmd.done = (void (*)(struct sched_cmd *))free;
	g->cmd.owner = g;
	sched_post(&g->cmd);
	return 0;
}

static void done_hello(struct sched_cmd *cmd)
{
	struct cmd_ctx *c;
	struct session *s = ctl_cmd_end(cmd, &c);
	struct collc_msg_hello_reply rep;
	int fds[2];

	/*
	 * The session's one hello (handle_hello refuses others meanwhile: two
	 * in flight made two scheduler clients, and the first one's shared
	 * memory leaked when the second took its place).
	 */
	if (s)
		s->hello_pending = 0;
	if (cmd->result < 0) {
		munmap(cmd->u.add.shm, cmd->u.add.shm_size);
		close(cmd->u.add.shm_fd);
		if (s)
			ctl_reply_status(s, c->type, c->id, cmd->result);
		free(c);
		return;
	}
	if (!s) {
		/* The scheduler owns the client now: tell it the session went away. */
		post_client_gone(cmd->client);
		free(c);
		return;
	}
	s->client = cmd->client;
	memset(&rep, 0, sizeof(rep));
	rep.features = COLLC_FEATURES;
	rep.client_id = cmd->u.add.client_id;
	rep.shm_size = cmd->u.add.shm_size;
	rep.doorbell_size = sizeof(struct collc_doorbell);
	rep.sq.head = offsetof(struct collc_shm_hdr, sq_head);
	rep.sq.tail = offsetof(struct collc_shm_hdr, sq_tail);
	rep.sq.flags = offsetof(struct collc_shm_hdr, sq_flags);
	rep.sq.entries = COLLC_SHM_HDR_BYTES;
	rep.sq.ring_entries = COLLC_SQ_ENTRIES;
	rep.cq.head = offsetof(struct collc_shm_hdr, cq_head);
	rep.cq.tail = offsetof(struct collc_shm_hdr, cq_tail);
	rep.cq.flags = offsetof(struct collc_shm_hdr, cq_flags);
	rep.cq.entries = COLLC_SHM_HDR_BYTES + COLLC_SQ_ENTRIES * sizeof(struct collc_sqe);
	rep.cq.ring_entries = COLLC_CQ_ENTRIES;
	memcpy(rep.node_id, ctl_params.node_id, sizeof(rep.node_id));
	rep.max_ranks = COLLC_MAX_RANKS;
	rep.ndevices = 0;
	for (uint32_t e = 0; e < exec_count(); e++)
		rep.ndevices += exec_get(e)->ndevices;
	/* A bitmask since wire version 2: every executor that runs. */
	rep.backend = exec_backend_mask();
	node_listen_addr(&rep.net_family, &rep.net_port, rep.net_addr);
	fds[0] = cmd->u.add.shm_fd;
	fds[1] = sched_doorbell_fd();
	ctl_reply_struct(s, c->type, c->id, 0, &rep, sizeof(rep), fds, 2);
	free(c);
}

int ctl_make_memfd(const char *name, uint64_t size, int extra_seals, int *ret_fd, void **ret_addr)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	void *p;
	int r;

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | extra_seals) < 0) {
		r = -errno;
		goto err_close;
	}
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		r = -errno;
		goto err_close;
	}
	*ret_fd = fd;
	*ret_addr = p;
	return 0;

err_close:
	close(fd);
	return r;
}

static void handle_hello(struct session *s, const struct collc_msg_hdr *h, const void *payload)
{
	const struct collc_msg_hello *q = payload;
	struct collc_shm_hdr *sh;
	struct cmd_ctx *c;
	void *shm;
	int fd, r;

	if (s->client || s->hello_pending || q->api_version != 1 || q->flags) {
		ctl_reply_status(s, h->type, h->id,
				 s->client || s->hello_pending ? -EALREADY : -EPROTO);
		return;
	}
	r = ctl_make_memfd("collc-client", COLLC_SHM_SIZE, F_SEAL_SEAL, &fd, &shm);
	if (r < 0) {
		log_err("client region: %s", strerror(-r));
		ctl_reply_status(s, h->type, h->id, r);
		return;
	}
	sh = shm;
	sh->magic = COLLC_SHM_MAGIC;
	sh->version = COLLC_SHM_VERSION;
	sh->sq_entries = COLLC_SQ_ENTRIES;
	sh->cq_entries = COLLC_CQ_ENTRIES;
	sh->sqes_off = COLLC_SHM_HDR_BYTES;
	sh->cqes_off = COLLC_SHM_HDR_BYTES + COLLC_SQ_ENTRIES * sizeof(struct collc_sqe);
	sh->args_off = COLLC_SHM_ARGS_OFF;
	sh->gates_off = COLLC_SHM_GATES_OFF;
	sh->gates = COLLC_GATES;
	sh->dones_off = COLLC_SHM_DONES_OFF;
	sh->dones = COLLC_DONES;
	sh->size = COLLC_SHM_SIZE;
	c = ctl_cmd_new(s, CMD_CLIENT_ADD, h->type, h->id, done_hello);
	if (!c) {
		munmap(shm, COLLC_SHM_SIZE);
		close(fd);
		ctl_reply_status(s, h->type, h->id, -ENOMEM);
		return;
	}
	c->cmd.u.add.shm_fd = fd;
	c->cmd.u.add.shm = shm;
	c->cmd.u.add.shm_size = COLLC_SHM_SIZE;
	c->cmd.u.add.pid = s->cred.pid;
	c->cmd.u.add.uid = s->cred.uid;
	c->cmd.u.add.gid = s->cred.gid;
	s->hello_pending = 1;
	ctl_cmd_post(c);
}

static void done_status_only(struct sched_cmd *cmd)
{
	struct cmd_ctx *c;
	struct session *s = ctl_cmd_end(cmd, &c);

	if (s)
		ctl_reply_status(s, c->type, c->id, cmd->result);
	free(c);
}

static void done_comm(struct sched_cmd *cmd)
{
	struct cmd_ctx *c;
	struct session *s = ctl_cmd_end(cmd, &c);
	struct collc_msg_comm_reply rep = { .st.status = cmd->result };

	if (s) {
		rep.comm = cmd->u.join.comm;
		rep.comm_id = cmd->u.join.comm_id;
		ctl_reply_struct(s, c->type, c->id, cmd->result, &rep, sizeof(rep), NULL, 0);
	}
	free(c);
}

static void dispatch(struct session *s, const struct collc_msg_hdr *h, const char *payload,
		     int *fds, int nfds)
{
	struct cmd_ctx *c = NULL;
	int efd;

	if (!s->client && h->type != COLLC_MSG_HELLO && h->type != COLLC_MSG_STATUS &&
	    h->type != COLLC_MSG_GET && h->type != COLLC_MSG_SET && h->type != COLLC_MSG_METRICS) {
		ctl_reply_status(s, h->type, h->id, -ENOTCONN);
		return;
	}
	switch (h->type) {
	case COLLC_MSG_HELLO:
		handle_hello(s, h, payload);
		return;
	case COLLC_MSG_MEM_ALLOC:
	case COLLC_MSG_MEM_REGISTER:
		ctl_handle_mem(s, h, payload, fds, nfds);
		return;
	case COLLC_MSG_MEM_RELEASE:
		c = ctl_cmd_new(s, CMD_MR_RELEASE, h->type, h->id, done_status_only);
		if (c)
			c->cmd.u.mr.mr = ((const struct collc_msg_mem_release *)payload)->mr;
		break;
	case COLLC_MSG_COMM_INIT:
		c = ctl_cmd_new(s, CMD_COMM_JOIN, h->type, h->id, done_comm);
		if (c)
			memcpy(&c->cmd.u.join.req, payload, sizeof(c->cmd.u.join.req));
		break;
	case COLLC_MSG_COMM_DESTROY:
	case COLLC_MSG_COMM_ABORT:
		c = ctl_cmd_new(s,
				h->type == COLLC_MSG_COMM_ABORT ? CMD_COMM_ABORT : CMD_COMM_DESTROY,
				h->type, h->id, done_status_only);
		if (c)
			c->cmd.u.comm.comm = ((const struct collc_msg_comm_ref *)payload)->comm;
		break;
	case COLLC_MSG_SET_EVENTFD:
		/* collcd makes it non-blocking: a client cannot make the scheduler's write block. */
		efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (efd < 0) {
			ctl_reply_status(s, h->type, h->id, -errno);
			return;
		}
		c = ctl_cmd_new(s, CMD_SET_EVENTFD, h->type, h->id, NULL);
		if (!c) {
			close(efd);
			ctl_reply_status(s, h->type, h->id, -EBUSY);
			return;
		}
		/* Reply now with the fd; the scheduler takes its copy. */
		reply_raw(s, h->type, h->id, 0, 0, NULL, 0, &efd, 1);
		c->cmd.u.efd.fd = efd;
		c->cmd.done = (void (*)(struct sched_cmd *))free;
		sched_post(&c->cmd);
		return;
	case COLLC_MSG_STATUS:
		c = ctl_cmd_new(s, CMD_STATUS, h->type, h->id, ctl_done_text);
		if (c)
			c->cmd.u.status.flags =
				((const struct collc_msg_status_req *)payload)->flags;
		break;
	case COLLC_MSG_METRICS:
		c = ctl_cmd_new(s, CMD_METRICS, h->type, h->id, ctl_done_text);
		break;
	case COLLC_MSG_COMM_TIMEOUT:
		c = ctl_cmd_new(s, CMD_COMM_TIMEOUT, h->type, h->id, done_status_only);
		if (c) {
			const struct collc_msg_comm_timeout *q = (const void *)payload;

			c->cmd.u.timeout.comm = q->comm;
			c->cmd.u.timeout.ms = q->timeout_ms;
		}
		break;
	case COLLC_MSG_GET:
		ctl_handle_get(s, h, payload);
		return;
	case COLLC_MSG_SET:
		ctl_handle_set(s, h, payload);
		return;
	default:
		ctl_reply_status(s, h->type, h->id, -EOPNOTSUPP);
		return;
	}
	if (!c) {
		ctl_reply_status(s, h->type, h->id, -EINVAL);
		return;
	}
	ctl_cmd_post(c);
}

static void on_session_closed(uv_handle_t *h)
{
	struct session *s = h->data;

	if (h == (uv_handle_t *)&s->poll)
		s->handle_closed = 1;
	else
		s->pid_poll_closed = 1;
	ctl_session_maybe_free(s);
}

static void session_close(struct session *s)
{
	if (s->closed)
		return;
	s->closed = 1;
	*s->pprev = s->next;
	if (s->next)
		s->next->pprev = s->pprev;
	uv_poll_stop(&s->poll);
	while (s->outq) {
		struct outmsg *m = s->outq;

		s->outq = m->next;
		for (int i = 0; i < m->nfds; i++)
			close(m->fds[i]);
		free(m);
	}
	if (s->client) {
		/* The scheduler fails this client's peers and frees its resources. */
		if (post_client_gone(s->client) < 0)
			log_err("out of memory: client %d leaks", (int)s->cred.pid);
		s->client = NULL;
	}
	uv_close((uv_handle_t *)&s->poll, on_session_closed);
	close(s->fd);
	if (s->pidfd >= 0) {
		uv_poll_stop(&s->pid_poll);
		uv_close((uv_handle_t *)&s->pid_poll, on_session_closed);
		close(s->pidfd);
	}
}

static void read_one(struct session *s)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * MAX_FDS_IN)];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = rxbuf, .iov_len = COLLC_MSG_MAX };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	int fds[MAX_FDS_IN], nfds = 0;
	struct collc_msg_hdr h;
	ssize_t n;
	int r;

	n = recvmsg(s->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		session_close(s);
		return;
	}
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));

		for (int i = 0; i < k; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (nfds < MAX_FDS_IN)
				fds[nfds++] = fd;
			else
				close(fd);
		}
	}
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		log_debug("client %d: malformed datagram", (int)s->cred.pid);
		goto out_close_fds;
	}
	r = wire_check(rxbuf, (size_t)n, &h);
	if (r < 0) {
		/* Garbage: answer if the header is readable, then carry on serving. */
		if (r != -EPROTO || (size_t)n >= sizeof(h))
			ctl_reply_status(s, h.type & ~COLLC_MSG_REPLY, h.id, r);
		goto out_close_fds;
	}
	dispatch(s, &h, rxbuf + sizeof(h), fds, nfds);
out_close_fds:
	for (int i = 0; i < nfds; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

static void on_session_io(uv_poll_t *h, int status, int events)
{
	struct session *s = h->data;

	if (status < 0 || (events & UV_DISCONNECT)) {
		/* Drain what the peer sent before it hung up (e.g. a comm_destroy). */
		if (status >= 0)
			for (int i = 0; i < 64 && !s->closed; i++)
				read_one(s);
		session_close(s);
		return;
	}
	if (events & UV_WRITABLE)
		flush_outq(s);
	for (int i = 0; i < 16 && !s->closed && !s->outq && (events & UV_READABLE); i++) {
		int avail;

		read_one(s);
		if (s->closed || recv(s->fd, &avail, sizeof(avail), MSG_PEEK | MSG_DONTWAIT) < 0)
			break;
	}
}

/* The client process exited: its socket may outlive it (a forked child holds it). */
static void on_pid_exit(uv_poll_t *h, int status, int events)
{
	struct session *s = h->data;

	log_debug("client %d exited", (int)s->cred.pid);
	session_close(s);
}

static void watch_pid(struct session *s)
{
	s->pidfd = (int)syscall(SYS_pidfd_open, s->cred.pid, 0);
	if (s->pidfd < 0 || uv_poll_init(ctl_params.loop, &s->pid_poll, s->pidfd) < 0) {
		if (s->pidfd >= 0)
			close(s->pidfd);
		s->pidfd = -1;
		s->pid_poll_closed = 1;
		return;
	}
	s->pid_poll.data = s;
	uv_poll_start(&s->pid_poll, UV_READABLE, on_pid_exit);
}

static void on_accept(uv_poll_t *h, int status, int events)
{
	struct listener *l = h->data;
	socklen_t len;
	struct session *s;
	int fd;

	if (status < 0)
		return;
	fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (fd < 0)
		return;
	s = calloc(1, sizeof(*s));
	if (!s) {
		close(fd);
		return;
	}
	s->fd = fd;
	s->outq_tail = &s->outq;
	len = sizeof(s->cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &s->cred, &len) < 0) {
		free(s);
		close(fd);
		return;
	}
	s->admin = l->admin || s->cred.uid == 0 || s->cred.uid == geteuid();
	if (uv_poll_init(ctl_params.loop, &s->poll, fd) < 0) {
		free(s);
		close(fd);
		return;
	}
	s->poll.data = s;
	watch_pid(s);
	s->next = sessions;
	s->pprev = &sessions;
	if (sessions)
		sessions->pprev = &s->next;
	sessions = s;
	uv_poll_start(&s->poll, UV_READABLE | UV_DISCONNECT, on_session_io);
}

static int listen_path(const char *path, int mode, int admin)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct listener *l;
	int fd, r;

	if (nlisteners >= (int)(sizeof(listeners) / sizeof(listeners[0])))
		return -ENOSPC;
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int probe;

		if (errno != EADDRINUSE) {
			r = -errno;
			goto err_close;
		}
		/* A socket nobody listens on is left over from a crash: take it over. */
		probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) < 0 &&
		    errno == ECONNREFUSED)
			unlink(path);
		if (probe >= 0)
			close(probe);
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			r = -errno;
			goto err_close;
		}
	}
	if (chmod(path, (mode_t)mode) < 0 || listen(fd, 128) < 0) {
		r = -errno;
		goto err_close;
	}
	l = &listeners[nlisteners++];
	l->fd = fd;
	l->admin = admin;
	l->owned = 1;
	snprintf(l->path, sizeof(l->path), "%s", path);
	return 0;

err_close:
	close(fd);
	return r;
}

static int listen_fd(int fd, int admin)
{
	struct listener *l;

	if (nlisteners >= (int)(sizeof(listeners) / sizeof(listeners[0])))
		return -ENOSPC;
	l = &listeners[nlisteners++];
	l->fd = fd;
	l->admin = admin;
	l->owned = 0;
	return 0;
}

static void on_done_async(uv_async_t *h)
{
	ctl_run_mem_done();
	sched_run_done();
}

void ctl_notify_done(void)
{
	/* After ctl_fini() the caller runs sched_run_done() itself. */
	if (!load_relaxed(&async_closed))
		uv_async_send(&ctl_done_async);
}

int ctl_init(const struct ctl_params *p)
{
	int r;

	ctl_params = *p;
	rxbuf = malloc(COLLC_MSG_MAX);
	if (!rxbuf)
		return -ENOMEM;
	r = uv_async_init(p->loop, &ctl_done_async, on_done_async);
	if (r < 0)
		return r;
	for (int i = 0; i < p->nlisten_fds; i++) {
		r = listen_fd(p->listen_fds[i], p->listen_admin[i]);
		if (r < 0)
			return r;
	}
	if (p->socket_path && p->nlisten_fds == 0) {
		r = listen_path(p->socket_path, 0666, 0);
		if (r < 0) {
			log_err("%s: %s", p->socket_path, strerror(-r));
			return r;
		}
	}
	if (p->admin_socket_path && p->nlisten_fds == 0) {
		r = listen_path(p->admin_socket_path, 0600, 1);
		if (r < 0) {
			log_err("%s: %s", p->admin_socket_path, strerror(-r));
			return r;
		}
	}
	for (int i = 0; i < nlisteners; i++) {
		struct listener *l = &listeners[i];

		r = uv_poll_init(p->loop, &l->poll, l->fd);
		if (r < 0)
			return r;
		l->poll.data = l;
		uv_poll_start(&l->poll, UV_READABLE, on_accept);
	}
	rcu_register_thread();
	cfg_reader_quiescent();
	rcu_thread_offline();
	rcu_registered = 1;
	return 0;
}

void ctl_fini(void)
{
	while (sessions)
		session_close(sessions);
	for (int i = 0; i < nlisteners; i++) {
		uv_poll_stop(&listeners[i].poll);
		uv_close((uv_handle_t *)&listeners[i].poll, NULL);
		close(listeners[i].fd);
		if (listeners[i].owned)
			unlink(listeners[i].path);
	}
	nlisteners = 0;
	ctl_mem_fini();
	store_relaxed(&async_closed, 1);
	uv_close((uv_handle_t *)&ctl_done_async, NULL);
	free(rxbuf);
	rxbuf = NULL;
}

/* Called once the scheduler has stopped: runs commands it finished last. */
void ctl_unregister(void)
{
	if (!rcu_registered)
		return;
	rcu_registered = 0;
	rcu_thread_online();
	rcu_unregister_thread();
}
