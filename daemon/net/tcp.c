/* SPDX-License-Identifier: MIT */
/*
 * The built-in tcp transport behind the ncclNet_v8 table (net.h).
 *
 * A connection is one control socket and nstreams data sockets, all
 * nonblocking. A message is a 16-byte header (magic, tag, size) on the
 * control socket and its payload split over the data sockets: stream s
 * carries bytes [s * chunk, (s + 1) * chunk) with chunk = max(ceil(size /
 * nstreams), MIN_CHUNK), so both sides compute the split from the size alone.
 * A payload of at most INLINE_MAX bytes follows its header on the control
 * socket instead, sent with it in one call (xfer2(): small messages
 * leave as one segment, and the receiver wakes once).
 * Each socket keeps its own cursor into the comm's queue of posted requests,
 * so a stream may run ahead of the others by whole messages and no socket
 * waits for another.
 *
 * Every socket starts with a hello naming the connection and the listener's
 * random token from the handle (which travels over the authenticated
 * bootstrap); the listener hangs up on sockets without it, so a port scan or
 * a stray client never joins a connection. One connection is assembled per
 * listener at a time, as NCCL pairs one listen with one connect.
 *
 * Requests come from a fixed pool per comm (NCCL_NET_MAX_REQUESTS): no
 * allocation per message. test() moves bytes until every socket would block;
 * under a caller that polls (net_tcp_opts.poll_driven, collcd's node thread)
 * a socket that would block before its next piece began is not tried again
 * before poll() reports it ready (net_tcp_poll_seen()), so idle sockets cost
 * no system calls.
 * Host memory only: CUDA and DMA-BUF registrations are refused with a log
 * line, and iflush has nothing to flush.
 *
 * With net_tcp_opts.helpers, each comm's data sockets move their bytes in a
 * thread of the comm's own (the helper), as NCCL's socket transport moves
 * them in helper threads: the caller's thread keeps socket 0 (headers and
 * inline payloads) and the completions, so one proxy thread serving many
 * comms no longer makes every copy itself. The caller publishes requests
 * (qtail) and arrived headers (nhdr) with release; the helper acquires
 * them; each socket's part of a request ends with an acq_rel decrement of
 * parts_left, and the last one publishes done (P1/P1'). Only parts with
 * bytes count: socket 0 subtracts a message's empty shares once its header
 * moved, so an inline message completes without waiting for the helper,
 * and a request is retired (its slot and pool entry reused) only once done
 * and every data socket's cursor passed it (R1/R1'). A helper with
 * nothing to move sleeps in poll() on its sockets and an eventfd the caller
 * writes when it published work while the helper said it sleeps (H1/H1');
 * the helper writes another eventfd, which net_tcp_pollfds() names, when it
 * passed or completed a request (H2). tests/model/tcp_helper.pml checks
 * H1/H1' and H2 with spin.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "net.h"
#include "common.h"
#include "sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/atomics.h"

#define HANDLE_MAGIC 0x636f6c6c63546370ULL /* "collcTcp" */
#define HELLO_MAGIC  0x434c5448u           /* "CLTH" */
#define MSG_MAGIC    0x434c544du           /* "CLTM" */
#define MR_MAGIC     0x434c5452u
#define MIN_CHUNK    (64u << 10) /* smaller payloads take one stream */
/* Payloads up to this follow their header on socket 0: one segment, one wake-up. */
#define INLINE_MAX   (16u << 10)
#define MAX_RECVS    8
#define MAX_SOCKS    (1 + NET_TCP_MAX_STREAMS)
#define MAX_PENDING  16
#define QMASK        (NCCL_NET_MAX_REQUESTS - 1)
_Static_assert((NCCL_NET_MAX_REQUESTS & QMASK) == 0, "queue size is a power of two");

struct tcp_comm;

/* Lives in the caller's handle buffer; connect() keeps its progress in
 * `stage` because NCCL calls it again with the same handle. */
struct tcp_handle {
	uint64_t magic;
	uint32_t nstreams;
	uint32_t reserved;
	union net_addr addr;
	struct tcp_comm *stage; /* local to the connecting side */
	uint64_t token;         /* random per listen: only holders of the handle connect */
};
_Static_assert(sizeof(struct tcp_handle) <= NCCL_NET_HANDLE_MAXSIZE, "handle fits");

/* First bytes on every socket of a connection. */
struct tcp_hello {
	uint32_t magic;
	uint32_t index; /* 0: control, 1..nstreams: data */
	uint32_t nstreams;
	uint32_t reserved;
	uint64_t conn_id; /* groups the sockets of one connection */
	uint64_t token;   /* the listener's, from the handle */
};
_Static_assert(sizeof(struct tcp_hello) == 32, "hello wire size");

struct tcp_msg_hdr {
	uint32_t magic;
	int32_t tag;
	uint64_t size;
};
_Static_assert(sizeof(struct tcp_msg_hdr) == 16, "header wire size");

struct tcp_mr {
	uint32_t magic;
	int type;
};

struct tcp_sub {
	char *data;
	size_t size; /* bytes of this message */
	size_t max;  /* receive: most it may take */
	int tag;
	int filled; /* receive: its header has arrived */
};

struct tcp_req {
	struct net_req head; /* comm: its struct tcp_comm */
	int n;
	int nhdr;       /* receive: headers parsed so far (released to the helper) */
	int parts_left; /* socket shares with bytes to go (P1); empty ones subtracted */
	uint32_t qidx;  /* its place in the comm's queue */
	int released;   /* test() said done; free once retired */
	int retired;    /* the queue passed it; free once test() said done */
	struct tcp_sub sub[MAX_RECVS];
	uint8_t order[MAX_RECVS]; /* message k of the group -> sub */
};
_Static_assert(offsetof(struct tcp_req, head) == 0, "a request is its head to common.c");

/* Where one socket stands: request q[qi], message k of it, byte off. */
struct tcp_cursor {
	uint32_t qi; /* R1: released by the socket's thread once done with q[qi - 1] */
	int k;
	size_t off;
	struct tcp_msg_hdr hdr;
};

enum { COMM_SEND = 1, COMM_RECV = 2 };
enum { CS_START, CS_CONNECTING, CS_HELLO, CS_DONE };

struct tcp_comm {
	int kind;
	int nstreams;
	int nsocks;
	int fd[MAX_SOCKS];
	ncclResult_t error; /* sticky: the connection is unusable */
	/* connect progress */
	union net_addr peer;
	int cstate[MAX_SOCKS];
	size_t csent[MAX_SOCKS];
	uint64_t conn_id;
	uint64_t token;
	/* Posted requests in order; free-running indices, masked on access. */
	struct tcp_req *q[NCCL_NET_MAX_REQUESTS];
	uint32_t qhead, qtail;
	struct tcp_cursor cur[MAX_SOCKS];
	/* poll_driven: socket i would block before its next piece; poll() has not said otherwise since. */
	uint8_t blocked[MAX_SOCKS];
	/* The helper (net_tcp_opts.helpers): sockets 1..nstreams are its own. */
	int helper_on;
	pthread_t helper;
	int work_fd;            /* eventfd: work published while the helper sleeps (H1) */
	int done_fd;            /* eventfd: the helper completed a request (H2) */
	uint32_t helper_asleep; /* H1': the helper is about to sleep */
	uint32_t helper_stop;
	int helper_err; /* the helper's sticky error, taken over by progress() */
	struct tcp_req reqs[NCCL_NET_MAX_REQUESTS];
};

struct tcp_pending {
	int fd;
	size_t got;
	struct tcp_hello hello;
};

struct tcp_listen {
	int fd;
	int nstreams;
	uint64_t token;
	uint64_t conn_id;     /* 0 until the first valid hello */
	int group[MAX_SOCKS]; /* sockets of that connection by index */
	int ngroup;
	struct tcp_pending pend[MAX_PENDING];
};

static struct {
	int inited;
	ncclDebugLogger_t log;
	char ifname[IF_NAMESIZE];
	union net_addr addr;
	int nstreams;
	char opt_ifname[IF_NAMESIZE];
	int opt_nstreams;
	int poll_driven;
	int helpers;
} g = { .opt_nstreams = NET_TCP_DEFAULT_STREAMS };

#define LOG(lvl, ...)                                                                              \
	do {                                                                                       \
		if (g.log)                                                                         \
			g.log(lvl, NCCL_NET, __FILE__, __LINE__, __VA_ARGS__);                     \
	} while (0)
#define WARN(...) LOG(NCCL_LOG_WARN, __VA_ARGS__)
#define INFO(...) LOG(NCCL_LOG_INFO, __VA_ARGS__)

int net_tcp_configure(const struct net_tcp_opts *opts)
{
	if (opts->nstreams < 1 || opts->nstreams > NET_TCP_MAX_STREAMS || opts->helpers < 0 ||
	    opts->helpers > 1 || collc__net_opt_ifname(g.opt_ifname, opts->ifname) < 0)
		return -EINVAL;
	g.opt_nstreams = opts->nstreams;
	g.poll_driven = opts->poll_driven;
	g.helpers = opts->helpers;
	return 0;
}

static ncclResult_t tcp_init(ncclDebugLogger_t logFunction)
{
	char host[INET6_ADDRSTRLEN] = "?";
	int rc;

	g.log = logFunction;
	rc = collc__net_pick_if(g.opt_ifname, g.ifname, &g.addr);
	if (rc < 0) {
		WARN("tcp: no usable interface %s: %s", g.opt_ifname, strerror(-rc));
		return ncclInvalidArgument;
	}
	g.nstreams = g.opt_nstreams;
	inet_ntop(g.addr.sa.sa_family,
		  g.addr.sa.sa_family == AF_INET6 ? (void *)&g.addr.in6.sin6_addr
						  : (void *)&g.addr.in.sin_addr,
		  host, sizeof(host));
	INFO("tcp: interface %s address %s, %d streams per connection%s", g.ifname, host,
	     g.nstreams, g.helpers ? ", moved by a helper thread per connection" : "");
	g.inited = 1;
	return ncclSuccess;
}

static ncclResult_t tcp_devices(int *ndev)
{
	*ndev = g.inited ? 1 : 0;
	return ncclSuccess;
}

static int link_speed(const char *ifname)
{
	char path[96];
	FILE *f;
	int speed = 0;

	snprintf(path, sizeof(path), "/sys/class/net/%s/speed", ifname);
	f = fopen(path, "r");
	if (f) {
		if (fscanf(f, "%d", &speed) != 1)
			speed = 0;
		fclose(f);
	}
	return speed > 0 ? speed : 10000; /* loopback and virtual links report none */
}

static ncclResult_t tcp_get_properties(int dev, ncclNetProperties_v8_t *props)
{
	if (!g.inited || dev != 0)
		return ncclInvalidArgument;
	collc__net_props_fill(props, g.ifname, 0, link_speed(g.ifname), 0, MAX_RECVS);
	return ncclSuccess;
}

static void set_sockopts(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static ncclResult_t tcp_listen(int dev, void *opaque_handle, void **listenComm)
{
	struct tcp_handle *h = opaque_handle;
	struct tcp_listen *l;
	union net_addr a = g.addr;
	int i;

	if (!g.inited || dev != 0)
		return ncclInvalidArgument;
	l = calloc(1, sizeof(*l));
	if (!l)
		return ncclSystemError;
	l->fd = collc__net_listen(&a, 64, 1);
	if (l->fd < 0) {
		WARN("tcp: listen on %s: %s", g.ifname, strerror(-l->fd));
		goto err_free;
	}
	l->nstreams = g.nstreams;
	if (getrandom(&l->token, sizeof(l->token), 0) != sizeof(l->token))
		goto err_close;
	for (i = 0; i < MAX_PENDING; i++)
		l->pend[i].fd = -1;
	for (i = 0; i < MAX_SOCKS; i++)
		l->group[i] = -1;
	memset(h, 0, NCCL_NET_HANDLE_MAXSIZE);
	h->magic = HANDLE_MAGIC;
	h->nstreams = l->nstreams;
	h->addr = a;
	h->stage = NULL;
	h->token = l->token;
	*listenComm = l;
	return ncclSuccess;

err_close:
	close(l->fd);
err_free:
	free(l);
	return ncclSystemError;
}

static void helper_start(struct tcp_comm *c);

static struct tcp_comm *comm_new(int kind, int nstreams)
{
	struct tcp_comm *c = calloc(1, sizeof(*c));
	int i;

	if (!c)
		return NULL;
	c->kind = kind;
	c->nstreams = nstreams;
	c->nsocks = 1 + nstreams;
	c->work_fd = c->done_fd = -1;
	for (i = 0; i < MAX_SOCKS; i++)
		c->fd[i] = -1;
	for (i = 0; i < NCCL_NET_MAX_REQUESTS; i++)
		c->reqs[i].head.comm = c;
	return c;
}

static void helper_stop(struct tcp_comm *c);

static void comm_free(struct tcp_comm *c)
{
	int i;

	if (!c)
		return;
	helper_stop(c);
	for (i = 0; i < MAX_SOCKS; i++)
		if (c->fd[i] >= 0)
			close(c->fd[i]);
	free(c);
}

/* One nonblocking step of socket i's connection; 1: finished, 0: later. */
static int connect_step(struct tcp_comm *c, int i)
{
	struct tcp_hello hello = {
		.magic = HELLO_MAGIC,
		.index = i,
		.nstreams = c->nstreams,
		.conn_id = c->conn_id,
		.token = c->token,
	};
	int rc;

	switch (c->cstate[i]) {
	case CS_START:
		rc = collc__net_connect_start(&c->peer, 1);
		if (rc < 0)
			return rc;
		c->fd[i] = rc;
		c->cstate[i] = CS_CONNECTING;
		/* fall through */
	case CS_CONNECTING:
		rc = collc__net_connect_done(c->fd[i]);
		if (rc <= 0)
			return rc;
		c->cstate[i] = CS_HELLO;
		/* fall through */
	case CS_HELLO:
		rc = collc__net_xfer(c->fd[i], &hello, sizeof(hello), &c->csent[i], 1);
		if (rc <= 0)
			return rc;
		c->cstate[i] = CS_DONE;
		/* fall through */
	default:
		return 1;
	}
}

static ncclResult_t tcp_connect(int dev, void *opaque_handle, void **sendComm,
				ncclNetDeviceHandle_v8_t **sendDevComm)
{
	struct tcp_handle *h = opaque_handle;
	struct tcp_comm *c = h->stage;
	int i, rc, up = 0;

	*sendComm = NULL;
	if (!g.inited || dev != 0 || h->magic != HANDLE_MAGIC || h->nstreams < 1 ||
	    h->nstreams > NET_TCP_MAX_STREAMS)
		return ncclInvalidArgument;
	if (!c) {
		c = comm_new(COMM_SEND, h->nstreams);
		if (!c)
			return ncclSystemError;
		c->peer = h->addr;
		c->token = h->token;
		do {
			if (getrandom(&c->conn_id, sizeof(c->conn_id), 0) != sizeof(c->conn_id)) {
				comm_free(c);
				return ncclSystemError;
			}
		} while (!c->conn_id);
		h->stage = c;
	}
	for (i = 0; i < c->nsocks; i++) {
		rc = connect_step(c, i);
		if (rc < 0) {
			WARN("tcp: connect: %s", strerror(-rc));
			h->stage = NULL;
			comm_free(c);
			return ncclRemoteError;
		}
		up += rc;
	}
	if (up == c->nsocks) {
		h->stage = NULL;
		helper_start(c);
		*sendComm = c;
	}
	return ncclSuccess;
}

static void pending_drop(struct tcp_pending *p)
{
	if (p->fd >= 0)
		close(p->fd);
	p->fd = -1;
	p->got = 0;
}

/* A socket whose hello is complete: keep it if it belongs to the connection
 * being assembled (the first valid one wins), drop it otherwise. */
static void pending_place(struct tcp_listen *l, struct tcp_pending *p)
{
	const struct tcp_hello *h = &p->hello;

	if (h->magic != HELLO_MAGIC || h->token != l->token ||
	    h->nstreams != (uint32_t)l->nstreams || h->index > (uint32_t)l->nstreams ||
	    !h->conn_id || (l->conn_id && h->conn_id != l->conn_id) || l->group[h->index] >= 0) {
		WARN("tcp: dropped a connection with a bad hello");
		pending_drop(p);
		return;
	}
	l->conn_id = h->conn_id;
	l->group[h->index] = p->fd;
	l->ngroup++;
	p->fd = -1;
	p->got = 0;
}

static ncclResult_t tcp_accept(void *listenComm, void **recvComm,
			       ncclNetDeviceHandle_v8_t **recvDevComm)
{
	struct tcp_listen *l = listenComm;
	struct tcp_comm *c;
	int fd, i;
	ssize_t n;

	*recvComm = NULL;
	for (;;) {
		fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED ||
			    errno == EINTR)
				break;
			WARN("tcp: accept: %s", strerror(errno));
			return ncclSystemError;
		}
		set_sockopts(fd);
		for (i = 0; i < MAX_PENDING && l->pend[i].fd >= 0; i++)
			;
		if (i == MAX_PENDING) {
			close(fd); /* more half-open sockets than a connection needs */
			continue;
		}
		l->pend[i].fd = fd;
		l->pend[i].got = 0;
	}
	for (i = 0; i < MAX_PENDING; i++) {
		struct tcp_pending *p = &l->pend[i];

		if (p->fd < 0)
			continue;
		n = recv(p->fd, (char *)&p->hello + p->got, sizeof(p->hello) - p->got,
			 MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
			pending_drop(p);
			continue;
		}
		if (n > 0)
			p->got += n;
		if (p->got == sizeof(p->hello))
			pending_place(l, p);
	}
	if (l->ngroup < 1 + l->nstreams)
		return ncclSuccess;
	c = comm_new(COMM_RECV, l->nstreams);
	if (!c)
		return ncclSystemError;
	for (i = 0; i < c->nsocks; i++) {
		c->fd[i] = l->group[i];
		l->group[i] = -1;
	}
	c->conn_id = l->conn_id;
	l->conn_id = 0;
	l->ngroup = 0;
	helper_start(c);
	*recvComm = c;
	return ncclSuccess;
}

static ncclResult_t tcp_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle)
{
	struct tcp_mr *mr;

	if (type != NCCL_PTR_HOST) {
		WARN("tcp: only host memory can be registered (type %d refused): CUDA buffers are not supported yet",
		     type);
		return ncclInternalError;
	}
	mr = malloc(sizeof(*mr));
	if (!mr)
		return ncclSystemError;
	mr->magic = MR_MAGIC;
	mr->type = type;
	*mhandle = mr;
	return ncclSuccess;
}

static ncclResult_t tcp_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
				      uint64_t offset, int fd, void **mhandle)
{
	WARN("tcp: DMA-BUF registration is not supported (host memory only)");
	return ncclInternalError;
}

static ncclResult_t tcp_dereg_mr(void *comm, void *mhandle)
{
	struct tcp_mr *mr = mhandle;

	if (mr && mr->magic != MR_MAGIC)
		return ncclInvalidArgument;
	free(mr);
	return ncclSuccess;
}

/* NULL handles are taken as host memory; anything else must be ours. */
static int mr_ok(void *mhandle)
{
	return !mhandle || ((struct tcp_mr *)mhandle)->magic == MR_MAGIC;
}

static ncclResult_t progress(void *comm);

static void helper_kick(struct tcp_comm *c);

/* Has every data socket's cursor passed r (so no thread reads it again)? */
static int req_passed(const struct tcp_comm *c, const struct tcp_req *r)
{
	for (int i = 1; i < c->nsocks; i++)
		/* R1': pairs with R1 in part_done(). */
		if ((int32_t)(load_acquire(&c->cur[i].qi) - r->qidx) <= 0)
			return 0;
	return 1;
}

/*
 * A free request of a healthy comm; *ret_r NULL when none is free now. The
 * queue's head first passes the requests that are done and that every
 * socket passed, in order; it moves only in the caller's thread. A request
 * test() already reported goes back to the pool then; one it has not waits
 * for test().
 */
static ncclResult_t req_get(struct tcp_comm *c, struct tcp_req **ret_r)
{
	*ret_r = NULL;
	if (c->error)
		return c->error;
	while (c->qhead != c->qtail) {
		struct tcp_req *r = c->q[c->qhead & QMASK];

		/* P1' (caller): pairs with P1 in part_done(). */
		if (!load_acquire(&r->head.done) || !req_passed(c, r))
			break;
		c->qhead++;
		if (r->released)
			r->head.used = 0;
		else
			r->retired = 1;
	}
	if (c->qtail - c->qhead < NCCL_NET_MAX_REQUESTS)
		*ret_r = collc__net_req_get(c->reqs, sizeof(c->reqs[0]));
	return ncclSuccess;
}

/* Queues r and starts moving it; an error is reported by test(). */
static void req_post(struct tcp_comm *c, struct tcp_req *r, void **request)
{
	r->parts_left = r->n * c->nsocks;
	r->qidx = c->qtail;
	c->q[c->qtail & QMASK] = r;
	/* Q1: pairs with Q1' in the helper (has_work(), sock_step()): the request is whole. */
	store_release(&c->qtail, c->qtail + 1);
	*request = r;
	helper_kick(c);
	progress(c);
}

static ncclResult_t tcp_isend(void *sendComm, void *data, int size, int tag, void *mhandle,
			      void **request)
{
	struct tcp_comm *c = sendComm;
	struct tcp_req *r;
	ncclResult_t rc;

	*request = NULL;
	if (!c || c->kind != COMM_SEND || size < 0 || (size && !data) || !mr_ok(mhandle))
		return ncclInvalidArgument;
	rc = req_get(c, &r);
	if (!r)
		return rc;
	r->n = 1;
	r->sub[0] = (struct tcp_sub){
		.data = data, .size = size, .max = size, .tag = tag, .filled = 1
	};
	r->order[0] = 0;
	r->nhdr = 1;
	req_post(c, r, request);
	return ncclSuccess;
}

static ncclResult_t tcp_irecv(void *recvComm, int n, void **data, int *sizes, int *tags,
			      void **mhandles, void **request)
{
	struct tcp_comm *c = recvComm;
	struct tcp_req *r;
	ncclResult_t rc;
	int i;

	*request = NULL;
	if (!c || c->kind != COMM_RECV || n < 1 || n > MAX_RECVS)
		return ncclInvalidArgument;
	for (i = 0; i < n; i++)
		if (sizes[i] < 0 || (sizes[i] && !data[i]) || !mr_ok(mhandles ? mhandles[i] : NULL))
			return ncclInvalidArgument;
	rc = req_get(c, &r);
	if (!r)
		return rc;
	r->n = n;
	for (i = 0; i < n; i++)
		r->sub[i] = (struct tcp_sub){ .data = data[i], .max = sizes[i], .tag = tags[i] };
	req_post(c, r, request);
	return ncclSuccess;
}

static void share(size_t size, int nstreams, int s, size_t *b, size_t *e)
{
	size_t chunk = (size + nstreams - 1) / nstreams;

	if (chunk < MIN_CHUNK)
		chunk = MIN_CHUNK;
	*b = (size_t)s * chunk < size ? (size_t)s * chunk : size;
	*e = size - *b < chunk ? size : *b + chunk;
}

/* Data socket i's share [*b, *e) of message s: empty for an inline message (it rides socket 0). */
static void sock_share(const struct tcp_comm *c, const struct tcp_sub *s, int i, size_t *b,
		       size_t *e)
{
	*b = *e = 0;
	if (s->size > INLINE_MAX)
		share(s->size, c->nstreams, i - 1, b, e);
}

/*
 * Socket 0 moved message s's header: its empty shares will never count
 * (the data sockets pass them without a decrement), so take them off now,
 * before socket 0's own part, which keeps parts_left above 0 until then.
 */
static void empty_shares_done(const struct tcp_comm *c, struct tcp_req *r, const struct tcp_sub *s)
{
	int i, n = 0;
	size_t b, e;

	for (i = 1; i < c->nsocks; i++) {
		sock_share(c, s, i, &b, &e);
		n += e == b;
	}
	if (n)
		__atomic_sub_fetch(&r->parts_left, n, __ATOMIC_ACQ_REL);
}

/*
 * Socket i is done with message k of its current request; counted: its
 * share had bytes (empty ones were taken off by empty_shares_done()); the
 * last counted part publishes done. Completion need not be in order (an
 * inline message completes while an older one's data still moves), so a
 * request is reused only once retired (req_get(), R1').
 */
static void part_done(struct tcp_comm *c, int i, int counted)
{
	struct tcp_cursor *cu = &c->cur[i];
	struct tcp_req *r = c->q[cu->qi & QMASK];
	int last = ++cu->k == r->n;

	cu->off = 0;
	/* P1: pairs with P1' in req_get() and tcp_test(): this socket's bytes of r moved first. */
	if (counted && __atomic_sub_fetch(&r->parts_left, 1, __ATOMIC_ACQ_REL) == 0)
		store_release(&r->head.done, 1);
	if (last) {
		cu->k = 0;
		/* R1: pairs with R1' in req_passed(): nothing here reads r after. */
		store_release(&cu->qi, cu->qi + 1);
	}
}

/*
 * Moves bytes of [p, p + len) from *off on; 1: all moved, 0: would block.
 * poll_driven: a socket whose next piece has not begun (an idle link, a
 * posted receive with nothing sent yet) waits for poll(); one in the middle
 * of a piece is tried again at once, as the rest streams in. A send may
 * name a second part [p2, p2 + len2), sent in the same call (*off runs over
 * both): a header and its inline payload leave as one segment and wake the
 * receiver once, where two sends made two segments under TCP_NODELAY.
 */
static int xfer2(struct tcp_comm *c, int i, char *p, size_t len, const char *p2, size_t len2,
		 size_t *off)
{
	int r;

	if (c->blocked[i])
		return 0;
	r = p2 ? collc__net_send2(c->fd[i], p, len, p2, len2, off)
	       : collc__net_xfer(c->fd[i], p, len, off, c->kind == COMM_SEND);
	/* The helper, too, sleeps in poll() on its sockets. */
	if (r == 0 && (g.poll_driven || (i > 0 && c->helper_on)) && *off == 0)
		c->blocked[i] = 1;
	return r;
}

static int xfer(struct tcp_comm *c, int i, char *p, size_t len, size_t *off)
{
	return xfer2(c, i, p, len, NULL, 0, off);
}

/* The header of message k has arrived: match it to a receive of the group. */
static int header_arrived(struct tcp_req *r, const struct tcp_msg_hdr *h)
{
	int j;

	if (h->magic != MSG_MAGIC)
		return -EPROTO;
	for (j = 0; j < r->n; j++)
		if (!r->sub[j].filled && r->sub[j].tag == h->tag)
			break;
	if (j == r->n)
		return -ENOMSG;
	if (h->size > r->sub[j].max)
		return -EMSGSIZE;
	r->sub[j].filled = 1;
	r->sub[j].size = h->size;
	r->order[r->nhdr] = j;
	/* Q2: pairs with Q2' in the helper's sock_step(): the header's size and place first. */
	store_release(&r->nhdr, r->nhdr + 1);
	return 0;
}

/*
 * Progress of socket i as far as it goes; >0: it moved, 0: idle, <0: error.
 * *ret_passed counts the message parts it finished, empty ones included.
 */
static int sock_step(struct tcp_comm *c, int i, int *ret_passed)
{
	struct tcp_cursor *cu = &c->cur[i];
	int moved = 0, rc;

	/* Q1' (helper; the caller's own store otherwise): pairs with Q1 in req_post(). */
	while (cu->qi != load_acquire(&c->qtail)) {
		struct tcp_req *r = c->q[cu->qi & QMASK];
		size_t off0 = cu->off;
		int counted = 1;

		if (i == 0) {
			struct tcp_sub *s;
			size_t po;

			if (cu->off < sizeof(cu->hdr)) {
				if (c->kind == COMM_SEND && cu->off == 0)
					cu->hdr = (struct tcp_msg_hdr){ .magic = MSG_MAGIC,
									.tag = r->sub[0].tag,
									.size = r->sub[0].size };
				if (c->kind == COMM_SEND && r->sub[0].size &&
				    r->sub[0].size <= INLINE_MAX)
					rc = xfer2(c, 0, (char *)&cu->hdr, sizeof(cu->hdr),
						   r->sub[0].data, r->sub[0].size, &cu->off);
				else
					rc = xfer(c, 0, (char *)&cu->hdr, sizeof(cu->hdr),
						  &cu->off);
				if (rc < 0)
					return rc;
				moved |= cu->off != off0;
				/* Not rc: an inline send may block with its header gone. */
				if (cu->off < sizeof(cu->hdr))
					break;
				if (c->kind == COMM_RECV) {
					rc = header_arrived(r, &cu->hdr);
					if (rc < 0)
						return rc;
					helper_kick(c);
				}
				/* Socket 0 parses headers in order: message k's is the last one matched. */
				empty_shares_done(c, r, &r->sub[r->order[cu->k]]);
			}
			s = &r->sub[r->order[cu->k]];
			if (s->size && s->size <= INLINE_MAX) {
				po = cu->off - sizeof(cu->hdr);
				rc = xfer(c, 0, s->data, s->size, &po);
				cu->off = sizeof(cu->hdr) + po;
				if (rc < 0)
					return rc;
				moved |= cu->off != off0;
				if (!rc)
					break;
			}
		} else {
			struct tcp_sub *s;
			size_t b = 0, e = 0;

			/* Q2' (helper): pairs with Q2 in header_arrived(). */
			if (cu->k >= load_acquire(&r->nhdr))
				break; /* its header has not arrived yet */
			s = &r->sub[r->order[cu->k]];
			sock_share(c, s, i, &b, &e);
			counted = e > b;
			rc = counted ? xfer(c, i, s->data + b, e - b, &cu->off) : 1;
			if (rc < 0)
				return rc;
			moved |= cu->off != off0;
			if (!rc)
				break;
		}
		part_done(c, i, counted);
		++*ret_passed;
		moved = 1;
	}
	return moved;
}

/* The comm failed on socket i with rc (< 0): the error to report. */
static ncclResult_t sock_failed(const struct tcp_comm *c, int i, int rc)
{
	WARN("tcp: connection %016llx %s failed on socket %d: %s", (unsigned long long)c->conn_id,
	     c->kind == COMM_SEND ? "send" : "receive", i, strerror(-rc));
	return rc == -ECONNRESET || rc == -EPIPE ? ncclRemoteError : ncclSystemError;
}

/* The caller's sockets: all of them, or socket 0 where the helper has the rest. */
static ncclResult_t progress(void *comm)
{
	struct tcp_comm *c = comm;
	int i, rc, moved, passed = 0;
	const int nsocks = c->helper_on ? 1 : c->nsocks;

	if (c->error)
		return c->error;
	if (c->helper_on && (rc = load_acquire(&c->helper_err)) != 0)
		return c->error = (ncclResult_t)rc;
	do {
		moved = 0;
		for (i = 0; i < nsocks; i++) {
			rc = sock_step(c, i, &passed);
			if (rc < 0)
				return c->error = sock_failed(c, i, rc);
			moved |= rc;
		}
	} while (moved);
	return ncclSuccess;
}

/* Does helper socket i have a piece to move now (its request posted, its header here)? */
static int has_work(struct tcp_comm *c, int i)
{
	const struct tcp_cursor *cu = &c->cur[i];

	/* Q1', Q2' as in sock_step(). */
	if (cu->qi == load_acquire(&c->qtail))
		return 0;
	return cu->k < load_acquire(&c->q[cu->qi & QMASK]->nhdr);
}

/* Caller: work was published (a request, or a header the helper's sockets wait for). */
static void helper_kick(struct tcp_comm *c)
{
	if (!c->helper_on)
		return;
	/* H1: pairs with H1' in helper_main(): either it sees the work, or we see it asleep. */
	fence_seq_cst();
	if (load_relaxed(&c->helper_asleep))
		(void)eventfd_write(c->work_fd, 1);
}

/*
 * One try of every helper socket: 1 when any moved, 0 when none could, -1
 * when one failed (kept in helper_err for the caller's test()). H2: the
 * caller may sleep in poll() on done_fd (net_tcp_pollfds()), so a request
 * completed here, one passed (the caller may wait to retire it), or a
 * failure writes it.
 */
static int helper_pass(struct tcp_comm *c)
{
	int i, rc, moved = 0, passed = 0, failed = 0;

	for (i = 1; i < c->nsocks && !failed; i++) {
		rc = sock_step(c, i, &passed);
		if (rc < 0) {
			store_release(&c->helper_err, (int)sock_failed(c, i, rc));
			failed = 1;
		}
		moved |= rc > 0;
	}
	if (passed || failed)
		(void)eventfd_write(c->done_fd, 1);
	return failed ? -1 : moved;
}

/*
 * The helper: moves sockets 1..nstreams until stopped. A socket error is
 * kept for the caller (helper_err) and the helper stops moving bytes; the
 * caller's next test() reports it.
 */
static void *helper_main(void *arg)
{
	struct tcp_comm *c = arg;
	struct pollfd pf[MAX_SOCKS];
	int idx[MAX_SOCKS];

	while (!load_acquire(&c->helper_stop)) {
		int i, n = 0, r = helper_pass(c);

		if (r < 0)
			break;
		if (r > 0)
			continue;
		/*
		 * H1': pairs with H1 in helper_kick(): say we sleep, then try every
		 * socket once more, since work published before the fence is seen
		 * here and work after it writes work_fd (a share of none, an inline
		 * message's, moves without its socket ever turning ready). What
		 * still has work now would block: poll() says when it can move.
		 */
		store_relaxed(&c->helper_asleep, 1u);
		fence_seq_cst();
		r = helper_pass(c);
		if (r != 0) {
			store_relaxed(&c->helper_asleep, 0u);
			if (r < 0)
				break;
			continue;
		}
		for (i = 1; i < c->nsocks; i++)
			if (has_work(c, i)) {
				idx[n] = i;
				pf[n++] = (struct pollfd){ .fd = c->fd[i],
							   .events = c->kind == COMM_SEND
									     ? POLLOUT
									     : POLLIN };
			}
		pf[n] = (struct pollfd){ .fd = c->work_fd, .events = POLLIN };
		r = poll(pf, (nfds_t)n + 1, -1);
		store_relaxed(&c->helper_asleep, 0u);
		if (r <= 0)
			continue; /* EINTR */
		for (i = 0; i < n; i++)
			if (pf[i].revents)
				c->blocked[idx[i]] = 0;
		if (pf[n].revents)
			(void)eventfd_read(c->work_fd, &(eventfd_t){ 0 });
	}
	/* A failed helper waits to be stopped; the caller's test() reports the error. */
	while (!load_acquire(&c->helper_stop)) {
		struct pollfd w = { .fd = c->work_fd, .events = POLLIN };

		if (poll(&w, 1, -1) > 0)
			(void)eventfd_read(c->work_fd, &(eventfd_t){ 0 });
	}
	return NULL;
}

/* A connected comm: its helper, where configured; without one the caller moves every socket. */
static void helper_start(struct tcp_comm *c)
{
	int r;

	if (!g.helpers || c->nstreams < 1)
		return;
	c->work_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	c->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->work_fd < 0 || c->done_fd < 0) {
		WARN("tcp: no eventfd for a helper thread: %s; the caller moves every socket",
		     strerror(errno));
		goto fail;
	}
	c->helper_on = 1;
	c->helper_stop = 0;
	r = pthread_create(&c->helper, NULL, helper_main, c);
	if (r == 0) {
		/* Named before connect() returns, so a count by name (tests, top -H) finds it. */
		pthread_setname_np(c->helper, "collc-tcp-help");
		return;
	}
	c->helper_on = 0;
	WARN("tcp: no helper thread: %s; the caller moves every socket", strerror(r));
fail:
	if (c->work_fd >= 0)
		close(c->work_fd);
	if (c->done_fd >= 0)
		close(c->done_fd);
	c->work_fd = c->done_fd = -1;
}

static void helper_stop(struct tcp_comm *c)
{
	if (!c->helper_on)
		return;
	store_release(&c->helper_stop, 1u);
	(void)eventfd_write(c->work_fd, 1);
	pthread_join(c->helper, NULL);
	c->helper_on = 0;
	close(c->work_fd);
	close(c->done_fd);
	c->work_fd = c->done_fd = -1;
}

int net_tcp_pollfds(void *comm, struct pollfd *pf, int max)
{
	struct tcp_comm *c = comm;
	int i, n = 0;

	if (!c || c->error || (c->kind != COMM_SEND && c->kind != COMM_RECV))
		return 0;
	/*
	 * The helper's sockets are its own; the caller hears of its completions
	 * (H2). The queue is not retired here: a request the helper completed
	 * or passed after the caller's last test() must still wake it through
	 * done_fd.
	 */
	if (c->helper_on && c->qhead != c->qtail && n < max)
		pf[n++] = (struct pollfd){ .fd = c->done_fd, .events = POLLIN };
	for (i = 0; i < (c->helper_on ? 1 : c->nsocks) && n < max; i++) {
		const struct tcp_cursor *cu = &c->cur[i];

		/* Idle sockets stay out: unread bytes of an unposted message would wake us forever. */
		if (c->fd[i] < 0 || cu->qi == c->qtail)
			continue;
		if (i > 0 && cu->k >= c->q[cu->qi & QMASK]->nhdr)
			continue; /* waits for the header on socket 0 */
		pf[n++] = (struct pollfd){ .fd = c->fd[i],
					   .events = c->kind == COMM_SEND ? POLLOUT : POLLIN };
	}
	return n;
}

void net_tcp_poll_seen(void *comm, const struct pollfd *pf, int n)
{
	struct tcp_comm *c = comm;

	if (!c || (c->kind != COMM_SEND && c->kind != COMM_RECV))
		return;
	for (int k = 0; k < n && c->helper_on; k++)
		if (pf[k].fd == c->done_fd && pf[k].revents)
			(void)eventfd_read(c->done_fd, &(eventfd_t){ 0 });
	for (int i = 0; i < (c->helper_on ? 1 : c->nsocks); i++)
		for (int k = 0; k < n && c->blocked[i]; k++)
			if (pf[k].fd == c->fd[i] && pf[k].revents)
				c->blocked[i] = 0;
}

static ncclResult_t tcp_test(void *request, int *done, int *sizes)
{
	struct tcp_req *r = request;
	ncclResult_t rc;
	int i;

	*done = 0;
	/* A request test() reported done is the caller's no more (released). */
	if (!r || !r->head.used || r->released)
		return ncclInvalidArgument;
	rc = progress(r->head.comm);
	/* P1' (caller): pairs with P1 in part_done(): every socket's bytes of r moved. */
	if (rc != ncclSuccess || !load_acquire(&r->head.done))
		return rc;
	/* One thread per comm calls (net.h): the slot is not reused before the sizes are read. */
	*done = 1;
	if (sizes)
		for (i = 0; i < r->n; i++)
			sizes[i] = (int)r->sub[i].size;
	if (r->retired)
		r->head.used = 0;
	else
		r->released = 1;
	return ncclSuccess;
}

static ncclResult_t tcp_close_comm(void *comm)
{
	comm_free(comm);
	return ncclSuccess;
}

static ncclResult_t tcp_close_listen(void *listenComm)
{
	struct tcp_listen *l = listenComm;
	int i;

	if (!l)
		return ncclSuccess;
	for (i = 0; i < MAX_PENDING; i++)
		pending_drop(&l->pend[i]);
	for (i = 0; i < MAX_SOCKS; i++)
		if (l->group[i] >= 0)
			close(l->group[i]);
	close(l->fd);
	free(l);
	return ncclSuccess;
}

const ncclNet_v8_t net_tcp = {
	.name = "tcp",
	.init = tcp_init,
	.devices = tcp_devices,
	.getProperties = tcp_get_properties,
	.listen = tcp_listen,
	.connect = tcp_connect,
	.accept = tcp_accept,
	.regMr = tcp_reg_mr,
	.regMrDmaBuf = tcp_reg_mr_dmabuf,
	.deregMr = tcp_dereg_mr,
	.isend = tcp_isend,
	.irecv = tcp_irecv,
	.iflush = collc__net_iflush_host, /* host memory: visible once received */
	.test = tcp_test,
	.closeSend = tcp_close_comm,
	.closeRecv = tcp_close_comm,
	.closeListen = tcp_close_listen,
	.getDeviceMr = collc__net_no_device_mr,
	.irecvConsumed = collc__net_irecv_consumed,
};
