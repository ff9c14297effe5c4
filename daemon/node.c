/* SPDX-License-Identifier: MIT */
/*
 * The node layer (node.h): collcd meeting other collcd daemons.
 *
 * One thread runs everything here under one lock (mu), which it drops only
 * to sleep; the scheduler's calls take it briefly. Nothing blocks on a peer:
 * every socket is nonblocking, buffers are bounded, a handshake has a
 * deadline, and a peer that breaks the protocol loses its connection and,
 * once authenticated, fails only the communicator it belongs to.
 *
 * Control connections carry framed messages (node_wire.h) after the auth
 * handshake (daemon/net/auth.c): REG (joiner -> root: a local rank, its daemon's
 * channel count and the handles of its incoming data links), TABLE (root ->
 * joiners: who owns each rank, the agreed channel count, every rank's
 * handles), P2PL and P2PT (the send/recv links' handles, gathered and
 * handed out by the root), COLL, GO, DONE and ALLDONE (the agreement on each
 * collective), PING (heartbeat, every net_timeout_ms / 4) and ABORT (the
 * communicator failed: every daemon ends it). Host byte order: the daemons
 * of one job run on one architecture.
 *
 * Data links are ncclNet_v8 send/recv comms, one per (ring hop between two
 * daemons, channel). The proxy plays the far end of the CPU executor's
 * Simple ring (exec.h: struct exec_link): it sends every step the local
 * sender publishes and returns the slot once the transport took it, and
 * receives steps into the local receiver's slots as credit allows,
 * publishing tail. TCP's own flow control carries the credit between them.
 * Sends and receives whose ranks run on two daemons take their own links
 * (node_p2p.c) and never touch the executor.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/atomics.h"
#include "common/host.h"
#include "daemon/config.h"
#include "daemon/log.h"
#include "daemon/net/auth.h"
#include "daemon/net/net.h"
#include "daemon/net/sock.h"
#include "daemon/node.h"
#include "daemon/node_p2p.h"
#include "daemon/node_wire.h"
#include "daemon/sched.h"
#include "proto/shm.h"
#include "proto/work.h"

/* Eager payloads from this size are received into a buffer of their own (rx_prefix()). */
#define RX_OWN_MIN      (16u << 10)
/*
 * An authenticated connection's reads of less than this go through a buffer
 * of this size (collc__net_ra_recv()): a small message's header and body,
 * and what follows it, come in one call.
 */
#define RA_BYTES        4096u
/*
 * Queued output of one connection: the agreement's small messages of a whole
 * window (OUT_RESERVE, never taken by eager payloads, conn_room()) and two
 * eager messages.
 */
#define OUT_RESERVE     (AGREE_WINDOW * 128u)
#define OUT_MAX         (OUT_RESERVE + 2u * (MSG_MAX + 16u))
#define MAX_CONNS       512u /* connections at once; more are refused */
#define RETRY_NS        (100ull * 1000000)
#define LINK_SLOTS_MAX  16u
/* Naps between polls of links that cannot wake the thread (ib, plugins, the grid's rings). */
#define NAP_NS          20000
/* A joiner that cannot reach its root, or links that do not come up, fail the join. */
#define JOIN_TIMEOUT_NS (60ull * 1000000000)
#define LINK_TIMEOUT_NS (30ull * 1000000000)
/*
 * A data link that its peer closed fails the communicator only this long
 * after, unless the control connection ends first (comms_step()).
 */
#define LINK_GRACE_NS   (200ull * 1000000)

#define AGREE_WINDOW 1024u /* the scheduler's COMM_WINDOW: collectives open at once */

/*
 * Where collective seq stands across the daemons: on the root, every
 * daemon's view; on the joiner of two daemons, its own and the root's
 * (PEER_IN, node.h).
 */
struct agree {
	uint64_t seq;
	struct node_coll d;
	uint32_t ndesc, ndone;
	uint8_t bad, used;     /* bad: 0, or the positive errno every rank gets */
	uint8_t sent_in;       /* two daemons: this daemon sent the other its ranks' inputs */
	uint64_t vsend, vrecv; /* all-to-allv: the daemons' digests added up */
	uint32_t neager;       /* daemons whose inputs are in `in` */
	uint32_t peer_len;
	uint8_t *in;      /* eager: nranks x in_bytes, by rank (node.h) */
	uint8_t *peer_in; /* two daemons: the other daemon's inputs, peer_len bytes */
	/* Two daemons: where the other daemon's inputs may land (node_coll_ready()), nland places. */
	struct iovec land[NODE_LAND_MAX];
	uint32_t nland;
	uint8_t peer_landed; /* ... and they did: peer_len bytes, no peer_in */
};

enum { C_CONNECTING, C_AUTH, C_UP, C_CLOSED };
/* Auth steps: what the next 96-byte frame is. */
enum { A_R_HELLO, A_R_RESPONSE, A_I_CHALLENGE, A_I_RESULT };

struct ncomm;

struct conn {
	struct conn *next;
	int fd;
	int state;
	int initiator;
	int astep;
	struct net_auth_session as;
	uint64_t deadline_ns; /* the handshake ends by then */
	uint64_t last_rx_ns, last_tx_ns;
	struct ncomm *nc;
	uint32_t didx; /* root side: the peer's daemon index */
	char addr[64];
	uint8_t *in; /* a frame before the handshake, a message after */
	size_t in_len;
	/*
	 * The message's payload past its first rx_pre bytes, when it goes
	 * elsewhere than c->in (rx_prefix()): into a buffer of its own
	 * (rx_data), or straight into ranks' buffers (rx_land, an agreement's
	 * places, rx_dest()); rx_ready once one of them is chosen.
	 */
	uint32_t rx_pre;
	int rx_ready;
	uint8_t *rx_data;
	const struct iovec *rx_land;
	uint32_t rx_nland;
	size_t rx_len, rx_got;
	uint8_t *out;
	size_t out_len, out_off, out_cap;
	uint64_t bytes_sent, bytes_recv;
	int rx_blocked; /* the last recv, between messages, would block; poll() has not said otherwise since */
	struct net_ra ra; /* once up, RA_BYTES */
	uint32_t pfi;     /* its entry in the last poll set (sleep_poll()) */
};

enum { L_SEND, L_RECV };

struct link {
	int dir;
	/* Ring positions (nc_order_ring()): L_SEND the remote receiver's (its staging ring here), L_RECV ours. */
	uint32_t rank;
	uint32_t chan;
	uint32_t ring; /* EXEC_RING_FLAT or EXEC_RING_GROUP */
	uint32_t slot; /* the receiver's listen and handle: chan, or NODE_MAX_CHANNELS + chan (group) */
	uint32_t peer;                           /* daemon index of the other end */
	uint8_t handle[NCCL_NET_HANDLE_MAXSIZE]; /* L_SEND: kept across connect() calls */
	void *comm;
	void *mh;
	struct exec_link el;
	int attached;
	uint32_t pf_at, pf_n;  /* its sockets' entries in the last poll set */
	uint64_t done, posted; /* steps */
	void *req[LINK_SLOTS_MAX];
	/* L_RECV straight into the rank's buffers (exec_link.recv_direct): each step's exact length, 0: its slot. */
	int recv_direct;
	uint32_t want[LINK_SLOTS_MAX];
	uint64_t bytes;
};

enum { NC_JOINING, NC_LINKING, NC_READY, NC_ATTACHED, NC_DEAD };

struct ncomm {
	struct ncomm *next;
	uint64_t id; /* the scheduler's */
	uint8_t nonce[32];
	uint8_t secret[NET_AUTH_SECRET_BYTES];
	int root;
	union net_addr root_addr;
	uint32_t nranks, nchan, me, ndaemons;
	uint32_t group;          /* the table's: ranks a daemon where group rings run, else 0 */
	uint64_t hier_min_bytes; /* the table's: hierarchical collectives from this many bytes */
	int stage;
	int err;
	int told;                      /* the scheduler heard of the failure (or caused it) */
	uint8_t have[COLLC_MAX_RANKS]; /* root: registered; joiner: joined here */
	uint8_t sent[COLLC_MAX_RANKS]; /* joiner: REG sent */
	uint8_t owner[COLLC_MAX_RANKS];
	uint8_t gpu[COLLC_MAX_RANKS];  /* joined here with a GPU */
	uint8_t ring[COLLC_MAX_RANKS]; /* the rank at each position of the ring (nc_order_ring()) */
	uint32_t nreg;
	uint32_t ngpu; /* root: ranks registered with a GPU */
	uint32_t min_chan;
	struct wire_addr daemons[COLLC_MAX_RANKS];
	uint8_t (*handles)[NODE_LINK_SLOTS][NCCL_NET_HANDLE_MAXSIZE]; /* COLLC_MAX_RANKS */
	void *listen[COLLC_MAX_RANKS][NODE_LINK_SLOTS];
	struct conn *ctl;                    /* joiner: to the root */
	struct conn *peers[COLLC_MAX_RANKS]; /* root: by daemon index */
	struct link *links;
	uint32_t nlinks;
	uint64_t retry_ns;
	uint64_t deadline_ns; /* JOINING (joiner) and LINKING end by then */
	uint64_t inflight;
	uint64_t asked; /* collectives our scheduler asked about (node_coll_ready()), not yet answered */
	uint64_t errors;
	uint64_t link_lost_ns;        /* when a data link ended at its peer (0: none) */
	struct agree *agree;          /* root, joiner of two daemons: AGREE_WINDOW, by seq */
	struct np2p *p2p;             /* sends and receives between daemons; NULL once failed */
	uint32_t p2p_pf_at, p2p_pf_n; /* its sockets' entries in the last poll set */
	/* Root: every daemon's send/recv listens, [d][e]: d's for e (M_P2PL). */
	uint8_t (*p2ph)[COLLC_MAX_RANKS][NCCL_NET_HANDLE_MAXSIZE];
	uint8_t p2pl_have[COLLC_MAX_RANKS];
	uint32_t np2pl;
	uint32_t p2p_ready; /* every daemon's handles are known here */
	uint64_t p2p_gone_sent, p2p_gone_recv, p2p_errors; /* of p2p, once freed */
};

static struct {
	pthread_mutex_t mu;
	pthread_t thread;
	int running;
	int stopping;
	int lfd;
	int lfd_blocked; /* accept would block; poll() has not said otherwise since */
	int efd;         /* wakes the thread */
	union net_addr laddr;
	char listen_str[80];
	struct net_transport t;
	struct net_auth auth;
	uint8_t node_id[16];
	uint32_t timeout_ms;
	uint64_t hier_min_bytes; /* net_hier_min_bytes, read when this daemon roots a communicator */
	uint32_t max_chan;       /* net_channels: what this daemon offers a forming communicator */
	uint64_t spin_ns;        /* net_spin_us */
	int kick; /* a command was queued for the scheduler: node_unlock() wakes it */
	struct conn *conns;
	uint32_t nconns;
	struct ncomm *comms;
	uint64_t refused_full;
	uint64_t gone_sent, gone_recv; /* bytes of connections and links already freed */
	uint32_t inflight;             /* collectives in flight on spanning communicators */
	/* Communicators failed here with -EPROTO: a peer's data broke what was agreed. */
	uint64_t proto_errors;
	uint64_t rx_msgs; /* control messages taken in: the node thread's spin goes on */
	uint64_t eager;   /* collectives that ran eagerly here (node.h) */
	uint64_t landed;  /* ... whose other daemon's inputs were received in place (rx_dest()) */
	uint64_t early_ends;  /* node_coll_done()'s ended */
	uint64_t recv_direct; /* bytes received straight into ranks' buffers (exec_link.dst) */
} node = { .mu = PTHREAD_MUTEX_INITIALIZER, .lfd = -1, .efd = -1 };

/*
 * On a small host the scheduler's calls that need no answer
 * (node_coll_ready() without inputs, node_coll_done(), node_inflight()) do
 * not wait for node.mu while the node thread holds it: they queue here and
 * the node thread takes them in at the top of its next pass. There the
 * scheduler and the node thread share a core, and each call that waited for
 * the lock cost two thread switches (bench/RESULTS.md, "Thread switches
 * across daemons"). With cores to spare (collc_small_host() false) the
 * scheduler waits for the lock on a core of its own and runs the call
 * itself, as it always did: there is no switch to save, and
 * GPU ranks across daemons on 16 cores measured no gain from the queue.
 * One producer, the scheduler thread; consumers hold node.mu (the node
 * thread, or the scheduler once it has the lock: reqs_run()), so they keep
 * the calls' order.
 */
#define NODE_REQS 256u
enum { REQ_READY, REQ_DONE, REQ_INFLIGHT };
struct node_req {
	uint32_t type;
	int32_t delta; /* REQ_INFLIGHT */
	uint64_t comm_id;
	uint64_t seq;       /* REQ_DONE */
	uint8_t ended;      /* REQ_DONE: node_coll_done()'s */
	struct node_coll d; /* REQ_READY */
};
static struct {
	struct node_req q[NODE_REQS];
	uint64_t head;   /* the scheduler's: requests queued */
	uint64_t tail;   /* under node.mu: requests taken in */
	uint32_t asleep; /* the node thread sleeps in poll(): a push writes the eventfd */
	int on;          /* a small host: calls queue (set at node_init()) */
} reqs;
static int reqs_run(void);

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* With mu held (node_fini closes efd under it). */
static void wake(void)
{
	/* A full counter fails the write; the thread wakes anyway. */
	if (node.efd >= 0)
		(void)eventfd_write(node.efd, 1);
}

/*
 * With mu held: queues cmd for the scheduler, which node_unlock() wakes once
 * mu is free. Woken at once, a scheduler on the same core would preempt the
 * thread that holds mu and then wait for it in its next call here (the
 * eager all-reduce on the 2-core VM: about 5 us of each 8-byte one,
 * bench/RESULTS.md "Commands to the scheduler leave with node.mu").
 */
static void node_post(struct sched_cmd *cmd)
{
	sched_post_quiet(cmd);
	node.kick = 1;
}

/* Releases mu, then wakes the scheduler for what was queued under it (node_post()). */
static void node_unlock(void)
{
	const int kick = node.kick;

	node.kick = 0;
	pthread_mutex_unlock(&node.mu);
	if (kick)
		sched_kick();
}

static void addr_str(const union net_addr *a, char *out, size_t len)
{
	char host[INET6_ADDRSTRLEN] = "?";

	if (a->sa.sa_family == AF_INET6) {
		inet_ntop(AF_INET6, &a->in6.sin6_addr, host, sizeof(host));
		snprintf(out, len, "[%s]:%u", host, ntohs(a->in6.sin6_port));
	} else {
		inet_ntop(AF_INET, &a->in.sin_addr, host, sizeof(host));
		snprintf(out, len, "%s:%u", host, ntohs(a->in.sin_port));
	}
}

static void wire_to_addr(const struct wire_addr *w, union net_addr *a)
{
	memset(a, 0, sizeof(*a));
	if (w->family == AF_INET6) {
		a->in6.sin6_family = AF_INET6;
		a->in6.sin6_port = w->port;
		memcpy(&a->in6.sin6_addr, w->addr, 16);
	} else {
		a->in.sin_family = AF_INET;
		a->in.sin_port = w->port;
		memcpy(&a->in.sin_addr, w->addr, 4);
	}
}

static void addr_to_wire(const union net_addr *a, struct wire_addr *w)
{
	memset(w, 0, sizeof(*w));
	w->family = a->sa.sa_family;
	if (a->sa.sa_family == AF_INET6) {
		w->port = a->in6.sin6_port;
		memcpy(w->addr, &a->in6.sin6_addr, 16);
	} else if (a->sa.sa_family == AF_INET) {
		w->port = a->in.sin_port;
		memcpy(w->addr, &a->in.sin_addr, 4);
	}
}

/* "ADDR:PORT" or "[ADDR6]:PORT". */
static int parse_listen(const char *s, union net_addr *a)
{
	char host[64];
	const char *colon;
	char *end;
	unsigned long port;
	size_t hl;

	memset(a, 0, sizeof(*a));
	if (s[0] == '[') {
		const char *rb = strchr(s, ']');

		if (!rb || rb[1] != ':')
			return -EINVAL;
		hl = (size_t)(rb - s - 1);
		colon = rb + 1;
		if (hl >= sizeof(host))
			return -EINVAL;
		memcpy(host, s + 1, hl);
	} else {
		colon = strrchr(s, ':');
		if (!colon)
			return -EINVAL;
		hl = (size_t)(colon - s);
		if (hl >= sizeof(host))
			return -EINVAL;
		memcpy(host, s, hl);
	}
	host[hl] = '\0';
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (errno || *end || end == colon + 1 || port > 65535)
		return -EINVAL;
	if (inet_pton(AF_INET, host, &a->in.sin_addr) == 1) {
		a->in.sin_family = AF_INET;
		a->in.sin_port = htons((uint16_t)port);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &a->in6.sin6_addr) == 1) {
		a->in6.sin6_family = AF_INET6;
		a->in6.sin6_port = htons((uint16_t)port);
		return 0;
	}
	return -EINVAL;
}

/* Connections */

/* The memory of a connection out of the list (its socket closed, or never kept). */
static void conn_free(struct conn *c)
{
	free(c->in);
	free(c->rx_data);
	free(c->out);
	free(c->ra.buf);
	free(c);
}

static struct conn *conn_new(int fd, int initiator)
{
	struct conn *c;

	if (node.nconns >= MAX_CONNS)
		return NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	/* Small until the peer proved itself: a port scan costs a few hundred bytes. */
	c->in = malloc(NET_AUTH_FRAME_BYTES);
	c->out = malloc(2 * NET_AUTH_FRAME_BYTES);
	c->out_cap = 2 * NET_AUTH_FRAME_BYTES;
	if (!c->in || !c->out) {
		conn_free(c);
		return NULL;
	}
	c->fd = fd;
	c->initiator = initiator;
	c->state = initiator ? C_CONNECTING : C_AUTH;
	c->astep = initiator ? A_I_CHALLENGE : A_R_HELLO;
	c->deadline_ns = mono_ns() + (uint64_t)node.timeout_ms * 1000000;
	c->last_rx_ns = c->last_tx_ns = mono_ns();
	c->next = node.conns;
	node.conns = c;
	node.nconns++;
	return c;
}

static void conn_close(struct conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->state = C_CLOSED;
	/* Nothing more lands in ranks' buffers (node_comm_revoke(), node_comm_release()). */
	if (c->rx_land) {
		c->rx_land = NULL;
		c->rx_nland = 0;
		c->rx_ready = 0;
	}
}

/* Queues bytes; -ENOBUFS when the peer does not read (the connection then fails). */
static int conn_queue(struct conn *c, const void *p, size_t len)
{
	if (c->out_off == c->out_len)
		c->out_off = c->out_len = 0;
	if (c->out_len + len > c->out_cap) {
		if (c->out_off) {
			memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
			c->out_len -= c->out_off;
			c->out_off = 0;
		}
		if (c->out_len + len > c->out_cap)
			return -ENOBUFS;
	}
	memcpy(c->out + c->out_len, p, len);
	c->out_len += len;
	return 0;
}

static int conn_flush(struct conn *c);

/*
 * A message whose body is a header of its own and then nmore parts (an eager
 * collective's inputs straight from the ranks' buffers, or its result). With
 * nothing queued before it, it goes out with one sendmsg() from where the
 * parts lie; only what the socket did not take is copied into the queue.
 */
static int conn_sendv(struct conn *c, uint16_t type, const void *body, uint32_t len,
		      const struct iovec *more, uint32_t nmore)
{
	struct msg_hdr h = { .magic = MSG_MAGIC, .type = type, .len = len };
	struct iovec v[2 + COLLC_MAX_RANKS];
	uint32_t nv = 0;
	size_t skip = 0;
	int r = 0;

	if (c->state != C_UP)
		return -ENOTCONN;
	if (nmore > COLLC_MAX_RANKS)
		return -EINVAL;
	v[nv++] = (struct iovec){ .iov_base = &h, .iov_len = sizeof(h) };
	if (len)
		v[nv++] = (struct iovec){ .iov_base = (void *)body, .iov_len = len };
	for (uint32_t i = 0; i < nmore; i++) {
		h.len += (uint32_t)more[i].iov_len;
		v[nv++] = more[i];
	}
	if (c->out_off == c->out_len) {
		struct msghdr mh = { .msg_iov = v, .msg_iovlen = nv };
		ssize_t n = sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);

		/* A broken socket is found again by conns_step(). */
		if (n > 0) {
			skip = (size_t)n;
			c->bytes_sent += (uint64_t)n;
		}
	}
	for (uint32_t i = 0; i < nv && r == 0; i++) {
		if (skip >= v[i].iov_len) {
			skip -= v[i].iov_len;
			continue;
		}
		r = conn_queue(c, (const uint8_t *)v[i].iov_base + skip, v[i].iov_len - skip);
		skip = 0;
	}
	c->last_tx_ns = mono_ns();
	/*
	 * Out at once, from whichever thread holds mu: a GO or DONE waiting for
	 * the node thread's next pass costs a wake-up on the critical path.
	 */
	if (r == 0)
		conn_flush(c);
	return r;
}

static int conn_send(struct conn *c, uint16_t type, const void *body, uint32_t len)
{
	return conn_sendv(c, type, body, len, NULL, 0);
}

/* Writes what is queued; 0, or -errno when the connection broke. */
static int conn_flush(struct conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
				 MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
		c->out_off += (size_t)n;
		c->bytes_sent += (uint64_t)n;
	}
	return 0;
}

/*
 * Where a message's payload starts: past an eager collective's descriptor
 * (COLL, PEER_IN) or its answer's seq (EAGER). From RX_OWN_MIN bytes the
 * payload is received into a buffer of its own, which the handler keeps
 * (conn_take()) instead of copying it out of c->in, or, once the
 * descriptor is in, where the agreement lets it land (rx_dest()).
 * UINT32_MAX: the whole body goes to c->in.
 */
static uint32_t rx_prefix(const struct msg_hdr *h)
{
	uint32_t pre;

	switch (h->type) {
	case M_COLL:
	case M_PEER_IN:
		pre = sizeof(struct node_coll);
		break;
	case M_EAGER:
		pre = sizeof(struct m_seq);
		break;
	default:
		return UINT32_MAX;
	}
	return h->len >= pre + RX_OWN_MIN ? pre : UINT32_MAX;
}

/* The payload into a buffer of its own, or (none free) into c->in as any other body. */
static void rx_own(struct conn *c)
{
	c->rx_data = malloc(c->rx_len);
	if (c->rx_data)
		c->rx_ready = 1;
	else
		c->rx_pre = UINT32_MAX;
}

/* A header came in: is it one, and where does its body go? */
static int rx_start(struct conn *c, const struct msg_hdr *h)
{
	if (h->magic != MSG_MAGIC || h->type < M_REG || h->type >= M_TYPE_MAX || h->len > MSG_MAX)
		return -EPROTO;
	c->rx_pre = rx_prefix(h);
	if (c->rx_pre != UINT32_MAX) {
		c->rx_len = h->len - c->rx_pre;
		c->rx_got = 0;
		/* A view's inputs wait for its descriptor: they may land in place (rx_dest()). */
		if (h->type == M_EAGER)
			rx_own(c);
	}
	return 0;
}

static int same_coll(const struct node_coll *a, const struct node_coll *b);
static uint64_t eager_owed(const struct ncomm *nc, const struct node_coll *d, uint32_t from);

/*
 * The agreement whose places view d's inputs, coming on c, land in: two
 * daemons, our own view of the collective here alone, with inputs we sent,
 * places our scheduler named (node_coll_ready()) and d the same collective,
 * its inputs exactly what the places take. NULL: into a buffer of their own.
 */
static struct agree *rx_land_at(const struct conn *c, const struct msg_hdr *h,
				const struct node_coll *d)
{
	struct ncomm *nc = c->nc;
	const int to_joiner = h->type == M_PEER_IN;
	struct agree *a;
	uint64_t want = 0;

	if (!nc || nc->stage != NC_ATTACHED || !nc->agree || d->eager != 1 || d->bad ||
	    !node_eager_pair(d, nc->ndaemons, nc->nranks) ||
	    c != (to_joiner ? nc->ctl : nc->peers[1]) || (nc->root == to_joiner))
		return NULL;
	a = &nc->agree[d->seq % AGREE_WINDOW];
	if (!a->used || a->seq != d->seq || !a->nland || a->ndesc != 1 || !a->sent_in ||
	    a->peer_in || a->peer_landed || a->bad || !same_coll(&a->d, d))
		return NULL;
	/* The other daemon (the root's index 0, its joiner's 1) owes what the places take. */
	if (eager_owed(nc, d, to_joiner ? 0 : 1) != c->rx_len)
		return NULL;
	for (uint32_t k = 0; k < a->nland; k++)
		want += a->land[k].iov_len;
	return want == c->rx_len ? a : NULL;
}

/* The view's descriptor is in (c->in): where its inputs go. */
static void rx_dest(struct conn *c, const struct msg_hdr *h)
{
	const struct node_coll *d = (const struct node_coll *)(c->in + sizeof(*h));
	const struct agree *a = rx_land_at(c, h, d);

	if (!a) {
		rx_own(c);
		return;
	}
	c->rx_land = a->land;
	c->rx_nland = a->nland;
	c->rx_ready = 1;
}

/* The places the rest of the payload goes, from rx_got on, into v (room for n). */
static uint32_t rx_payload_iov(const struct conn *c, struct iovec *v, uint32_t n)
{
	size_t skip = c->rx_got;
	uint32_t k = 0;

	if (!c->rx_ready || c->rx_got == c->rx_len)
		return 0;
	if (!c->rx_land) {
		v[0] = (struct iovec){ .iov_base = c->rx_data + skip, .iov_len = c->rx_len - skip };
		return 1;
	}
	for (uint32_t i = 0; i < c->rx_nland && k < n; i++) {
		const struct iovec *p = &c->rx_land[i];

		if (skip >= p->iov_len) {
			skip -= p->iov_len;
			continue;
		}
		v[k++] = (struct iovec){ .iov_base = (uint8_t *)p->iov_base + skip,
					 .iov_len = p->iov_len - skip };
		skip = 0;
	}
	return k;
}

/* The message is handled: its payload's places are forgotten. */
static void rx_end(struct conn *c)
{
	free(c->rx_data);
	c->rx_data = NULL;
	c->rx_land = NULL;
	c->rx_nland = 0;
	c->rx_ready = 0;
}

/* How much of message h (its header checked) c->in takes: all of it, or up to its payload. */
static size_t rx_in_bytes(const struct conn *c, const struct msg_hdr *h)
{
	return sizeof(*h) + (c->rx_pre == UINT32_MAX ? h->len : c->rx_pre);
}

/* Bytes of the message's payload still to come into its places (rx_data or rx_land). */
static size_t rx_data_left(const struct conn *c)
{
	return c->rx_ready ? c->rx_len - c->rx_got : 0;
}

/* The payload of the message being handled, past its first pre bytes of body. */
static const uint8_t *rx_payload(const struct conn *c, const uint8_t *body, uint32_t pre)
{
	return c->rx_data ? c->rx_data : body + pre;
}

/*
 * Len bytes at p, of the message being handled on c, in a buffer the caller
 * frees: the connection's own when p is the payload conn_read() received
 * into one, else a copy. NULL: no memory.
 */
static uint8_t *conn_take(struct conn *c, const void *p, size_t len)
{
	uint8_t *q;

	if (c->rx_data && c->rx_data == p && c->rx_len == len) {
		q = c->rx_data;
		c->rx_data = NULL;
		return q;
	}
	q = malloc(len ? len : 1);
	if (q)
		memcpy(q, p, len);
	return q;
}

/* Communicators */

static struct ncomm *nc_by_id(uint64_t id)
{
	for (struct ncomm *nc = node.comms; nc; nc = nc->next)
		if (nc->id == id)
			return nc;
	return NULL;
}

static void post_cmd(enum sched_cmd_type type, const struct ncomm *nc, int err);

static void links_close(struct ncomm *nc)
{
	const ncclNet_v8_t *net = node.t.net;

	for (uint32_t i = 0; i < nc->nlinks; i++) {
		struct link *l = &nc->links[i];

		if (l->mh && l->comm)
			net->deregMr(l->comm, l->mh);
		l->mh = NULL;
		if (l->comm)
			l->dir == L_SEND ? net->closeSend(l->comm) : net->closeRecv(l->comm);
		l->comm = NULL;
		l->attached = 0;
	}
	for (uint32_t r = 0; r < COLLC_MAX_RANKS; r++)
		for (uint32_t c = 0; c < NODE_LINK_SLOTS; c++)
			if (nc->listen[r][c]) {
				net->closeListen(nc->listen[r][c]);
				nc->listen[r][c] = NULL;
			}
	/* Its sends and receives end through the scheduler's revocation: no completions. */
	if (nc->p2p) {
		for (uint32_t d = 0; d < nc->ndaemons; d++) {
			uint64_t sent, recvd;

			np2p_bytes(nc->p2p, d, &sent, &recvd);
			nc->p2p_gone_sent += sent;
			nc->p2p_gone_recv += recvd;
		}
		nc->p2p_errors += np2p_errors(nc->p2p);
		np2p_free(nc->p2p);
		nc->p2p = NULL;
	}
}

/*
 * The communicator failed: every daemon it spans ends it. The root tells
 * the joiners (ABORT), a joiner hangs up on the root, which relays.
 */
static void nc_fail(struct ncomm *nc, int err, int tell_sched)
{
	struct m_abort a = { .err = err };

	if (nc->stage == NC_DEAD)
		return;
	log_warn("communicator %llu (spanning daemons): %s", (unsigned long long)nc->id,
		 strerror(-err));
	nc->stage = NC_DEAD;
	nc->err = err;
	nc->errors++;
	if (nc->root) {
		for (uint32_t d = 1; d < COLLC_MAX_RANKS; d++) {
			struct conn *c = nc->peers[d];

			if (!c)
				continue;
			if (c->state == C_UP && conn_send(c, M_ABORT, &a, sizeof(a)) == 0)
				conn_flush(c);
			conn_close(c);
		}
	} else if (nc->ctl) {
		if (nc->ctl->state == C_UP && conn_send(nc->ctl, M_ABORT, &a, sizeof(a)) == 0)
			conn_flush(nc->ctl);
		conn_close(nc->ctl);
	}
	links_close(nc);
	if (tell_sched && !nc->told) {
		nc->told = 1;
		post_cmd(CMD_NET_FAIL, nc, err);
	}
}

static void nc_free(struct ncomm *nc)
{
	struct ncomm **p;

	for (p = &node.comms; *p && *p != nc; p = &(*p)->next)
		;
	if (*p)
		*p = nc->next;
	links_close(nc);
	for (uint32_t i = 0; i < nc->nlinks; i++) {
		if (nc->links[i].dir == L_SEND)
			node.gone_sent += nc->links[i].bytes;
		else
			node.gone_recv += nc->links[i].bytes;
	}
	for (struct conn *c = node.conns; c; c = c->next)
		if (c->nc == nc) {
			conn_close(c);
			c->nc = NULL;
		}
	node.gone_sent += nc->p2p_gone_sent;
	node.gone_recv += nc->p2p_gone_recv;
	free(nc->links);
	free(nc->handles);
	for (uint32_t i = 0; nc->agree && i < AGREE_WINDOW; i++) {
		free(nc->agree[i].in);
		free(nc->agree[i].peer_in);
	}
	free(nc->agree);
	free(nc->p2ph);
	free(nc);
}

static void cmd_free(struct sched_cmd *cmd)
{
	if (cmd->type == CMD_NET_EAGER || cmd->type == CMD_NET_PEER_IN)
		free(cmd->u.net.data);
	free(cmd);
}

/* A command for the scheduler about communicator nc; NULL (said in the log) without memory. */
static struct sched_cmd *net_cmd(enum sched_cmd_type type, const struct ncomm *nc, int err)
{
	struct sched_cmd *cmd = calloc(1, sizeof(*cmd));

	if (!cmd) {
		log_err("communicator %llu: no memory to tell the scheduler",
			(unsigned long long)nc->id);
		return NULL;
	}
	cmd->type = type;
	cmd->done = cmd_free;
	cmd->u.net.comm_id = nc->id;
	cmd->u.net.err = err;
	return cmd;
}

/* Whether the ring runs in another order than the ranks' (the scheduler hears of it at READY). */
static int nc_ring_reordered(const struct ncomm *nc)
{
	for (uint32_t p = 0; p < nc->nranks; p++)
		if (nc->ring[p] != p)
			return 1;
	return 0;
}

static void post_cmd(enum sched_cmd_type type, const struct ncomm *nc, int err)
{
	struct sched_cmd *cmd = net_cmd(type, nc, err);

	if (!cmd)
		return;
	cmd->u.net.nchan = nc->nchan;
	cmd->u.net.group = nc->group;
	cmd->u.net.pair = nc->ndaemons == 2;
	cmd->u.net.hier_min_bytes = nc->hier_min_bytes;
	for (uint32_t r = 0; r < nc->nranks; r++)
		cmd->u.net.local[r] = nc->owner[r] == nc->me;
	cmd->u.net.reordered = type == CMD_NET_READY && nc_ring_reordered(nc);
	if (cmd->u.net.reordered)
		memcpy(cmd->u.net.ring, nc->ring, nc->nranks);
	node_post(cmd);
}

static void post_seq(enum sched_cmd_type type, const struct ncomm *nc, uint64_t seq, int err)
{
	struct sched_cmd *cmd = net_cmd(type, nc, err);

	if (!cmd)
		return;
	cmd->u.net.seq = seq;
	node_post(cmd);
}

/* Our scheduler has its answer to one collective it asked about (node_coll_ready()). */
static void nc_answered(struct ncomm *nc)
{
	if (nc->asked)
		nc->asked--;
}

/* Sends to every joiner; -EPIPE when one cannot take it. */
static int root_broadcast(struct ncomm *nc, uint16_t type, const void *body, uint32_t len)
{
	for (uint32_t d = 1; d < nc->ndaemons; d++)
		if (!nc->peers[d] || conn_send(nc->peers[d], type, body, len) < 0)
			return -EPIPE;
	return 0;
}

/* Room for len more bytes of output, the reserve for the agreement's messages kept. */
static int conn_room(const struct conn *c, size_t len)
{
	return c && c->state == C_UP &&
	       c->out_len - c->out_off + sizeof(struct msg_hdr) + len + OUT_RESERVE <= c->out_cap;
}

/* The bytes of n parts together. */
static uint64_t iov_bytes(const struct iovec *v, uint32_t n)
{
	uint64_t len = 0;

	for (uint32_t i = 0; i < n; i++)
		len += v[i].iov_len;
	return len;
}

/*
 * The bytes of eager inputs daemon `from` owes for d (node.h): none where
 * it holds no rank that contributes; UINT64_MAX when d cannot go eager.
 */
static uint64_t eager_owed(const struct ncomm *nc, const struct node_coll *d, uint32_t from)
{
	uint64_t in, out, want = 0;

	if (!node_eager_sizes(d, nc->nranks, NODE_EAGER_MAX, &in, &out))
		return UINT64_MAX;
	for (uint32_t r = 0; r < nc->nranks; r++)
		want += nc->owner[r] == from && node_eager_contributes(d, r) ? in : 0;
	return want;
}

/*
 * Root: daemon `from`'s inputs of eager collective a (the parts of `in`, in
 * order), into a->in by rank. -EPROTO when they are not what its ranks owe.
 */
static int root_eager_in(struct ncomm *nc, struct agree *a, uint32_t from,
			 const struct iovec *parts, uint32_t nparts)
{
	uint64_t in, out, off = 0;
	uint32_t p = 0;

	if (!node_eager_sizes(&a->d, nc->nranks, NODE_EAGER_MAX, &in, &out))
		return -EPROTO;
	if (iov_bytes(parts, nparts) != eager_owed(nc, &a->d, from))
		return -EPROTO;
	if (!a->in) {
		a->in = malloc((size_t)nc->nranks * in);
		if (!a->in)
			return 0; /* not eager: the ring runs */
	}
	for (uint32_t r = 0; r < nc->nranks; r++) {
		uint8_t *dst = a->in + (uint64_t)r * in;
		uint64_t left = in;

		if (nc->owner[r] != from || !node_eager_contributes(&a->d, r))
			continue;
		/* Rank r's bytes: the next `in` of the parts, across their bounds. */
		while (left) {
			uint64_t n = parts[p].iov_len - off;

			if (n > left)
				n = left;
			memcpy(dst, (const uint8_t *)parts[p].iov_base + off, n);
			dst += n;
			left -= n;
			off += n;
			if (off == parts[p].iov_len) {
				p++;
				off = 0;
			}
		}
	}
	a->neager++;
	return 0;
}

/*
 * Root: answers eager collective a with its result, to every daemon and to
 * our own scheduler. 0 when it did; 1 when it cannot (no memory, or a queue
 * without room): the caller answers with a plain GO.
 */
static int root_eager(struct ncomm *nc, struct agree *a)
{
	struct m_seq m = { .seq = a->seq };
	const uint8_t *by_rank[COLLC_MAX_RANKS];
	struct sched_cmd *cmd;
	uint64_t in, out;
	uint8_t *res;

	if (!node_eager_sizes(&a->d, nc->nranks, NODE_EAGER_MAX, &in, &out))
		return 1;
	for (uint32_t d = 1; d < nc->ndaemons; d++)
		if (!conn_room(nc->peers[d], sizeof(m) + out))
			return 1;
	cmd = net_cmd(CMD_NET_EAGER, nc, 0);
	res = malloc(out);
	if (!cmd || !res) {
		free(cmd);
		free(res);
		return 1;
	}
	for (uint32_t r = 0; r < nc->nranks; r++)
		by_rank[r] = a->in + (uint64_t)r * in;
	node_eager_compute(&a->d, nc->nranks, by_rank, in, res);
	for (uint32_t d = 1; d < nc->ndaemons; d++)
		if (conn_sendv(nc->peers[d], M_EAGER, &m, sizeof(m),
			       &(struct iovec){ .iov_base = res, .iov_len = out }, 1) < 0) {
			free(cmd);
			free(res);
			return -EPIPE;
		}
	cmd->u.net.seq = a->seq;
	cmd->u.net.data = res;
	cmd->u.net.len = (uint32_t)out;
	node_post(cmd);
	nc_answered(nc);
	node.eager++;
	return 0;
}

/* Do two daemons' views describe the same collective? */
static int same_coll(const struct node_coll *a, const struct node_coll *b)
{
	return a->opcode == b->opcode && a->dtype == b->dtype && a->count == b->count &&
	       a->redop == b->redop && a->root == b->root;
}

/* Collective seq's place in the window, taken afresh where it held another. */
static struct agree *agree_of(struct ncomm *nc, const struct node_coll *d)
{
	struct agree *a = &nc->agree[d->seq % AGREE_WINDOW];

	if (!a->used || a->seq != d->seq) {
		free(a->in);
		free(a->peer_in);
		memset(a, 0, sizeof(*a));
		a->used = 1;
		a->seq = d->seq;
		a->d = *d;
	} else if (!same_coll(&a->d, d)) {
		a->bad = EINVAL;
	}
	return a;
}

/*
 * Two daemons (node.h): the other daemon's inputs of collective a, as they
 * came in its message on c, kept for our scheduler, or already where
 * they landed (rx_dest()). -EPROTO when they are not what its ranks owe by
 * its own descriptor d.
 */
static int pair_keep(struct ncomm *nc, struct agree *a, const struct node_coll *d, uint32_t from,
		     struct conn *c, const struct iovec *in)
{
	if (in->iov_len != eager_owed(nc, d, from) || a->peer_in || a->peer_landed)
		return -EPROTO;
	a->nland = 0; /* nothing more lands for it */
	if (c->rx_land) {
		if (c->rx_land != a->land)
			return -EPROTO;
		a->peer_landed = 1;
		a->peer_len = (uint32_t)in->iov_len;
		node.landed++;
		return 0;
	}
	/* None owed (a broadcast's other daemon) still counts as sent. */
	a->peer_in = conn_take(c, in->iov_base, in->iov_len);
	if (!a->peer_in)
		return -ENOMEM;
	a->peer_len = (uint32_t)in->iov_len;
	return 0;
}

/*
 * Two daemons, both views of collective a here: eager when both sent their
 * inputs and the views match (both daemons see the same two and decide
 * alike). 1: our scheduler computes the result from the other daemon's
 * inputs (CMD_NET_PEER_IN; no data where they landed in place); 0: the
 * root's GO decides; -ENOMEM fails the communicator, since the other
 * daemon may have gone eager.
 */
static int pair_decide(struct ncomm *nc, struct agree *a)
{
	struct sched_cmd *cmd;

	if (a->bad || !a->sent_in || (!a->peer_in && !a->peer_landed))
		return 0;
	cmd = net_cmd(CMD_NET_PEER_IN, nc, 0);
	if (!cmd)
		return -ENOMEM;
	cmd->u.net.seq = a->seq;
	cmd->u.net.data = a->peer_in;
	cmd->u.net.len = a->peer_len;
	a->peer_in = NULL;
	node_post(cmd);
	nc_answered(nc);
	node.eager++;
	return 1;
}

/*
 * Root of two daemons: our own ranks' inputs go to the joiner at once
 * (PEER_IN), where its queue has room.
 */
static int root_send_pair_in(struct ncomm *nc, struct agree *a, const struct node_coll *d,
			     const struct iovec *parts, uint32_t nparts)
{
	if (!conn_room(nc->peers[1], sizeof(*d) + iov_bytes(parts, nparts)))
		return 0;
	if (conn_sendv(nc->peers[1], M_PEER_IN, d, sizeof(*d), parts, nparts) < 0)
		return -EPIPE;
	a->sent_in = 1;
	return 0;
}

/*
 * Root: daemon from's view of collective d->seq, with its ranks' inputs when
 * d->eager: in our own ranks' buffers (c NULL), or in one part as they came
 * on connection c.
 */
static int root_coll(struct ncomm *nc, const struct node_coll *d, uint32_t from, struct conn *c,
		     const struct iovec *parts, uint32_t nparts)
{
	struct agree *a = agree_of(nc, d);
	struct m_seq go = { .seq = d->seq };
	int r = 0;

	/* A daemon's own verdict (sched_launch.c net_verdict()); anything else is EINVAL. */
	if (d->bad && !a->bad)
		a->bad = d->bad == EOPNOTSUPP ? EOPNOTSUPP : EINVAL;
	a->vsend += d->vsend;
	a->vrecv += d->vrecv;
	if (d->eager && node_eager_pair(d, nc->ndaemons, nc->nranks))
		r = from == nc->me ? root_send_pair_in(nc, a, d, parts, nparts)
				   : pair_keep(nc, a, d, from, c, parts);
	else if (d->eager && !a->bad)
		r = root_eager_in(nc, a, from, parts, nparts);
	if (r < 0)
		return r;
	if (++a->ndesc < nc->ndaemons)
		return 0;
	/* Every count of an all-to-allv agrees when what is sent adds up to what is expected. */
	if (!a->bad && a->d.opcode == COLLC_OP_ALLTOALLV && a->vsend != a->vrecv)
		a->bad = EINVAL;
	go.err = a->bad ? -(int)a->bad : 0;
	if (a->bad)
		log_warn("communicator %llu: collective %llu %s", (unsigned long long)nc->id,
			 (unsigned long long)d->seq,
			 a->bad == EOPNOTSUPP ? "is not supported across daemons"
					      : "differs between daemons");
	/* r: 0 when answered eagerly, 1 to answer with GO. */
	if (node_eager_pair(&a->d, nc->ndaemons, nc->nranks)) {
		r = pair_decide(nc, a);
		if (r >= 0)
			r = !r;
	} else {
		r = !a->bad && a->neager == nc->ndaemons ? root_eager(nc, a) : 1;
	}
	free(a->in);
	free(a->peer_in);
	a->in = a->peer_in = NULL;
	if (r < 0)
		return r;
	if (r == 0) {
		a->used = 0; /* no DONE follows */
		return 0;
	}
	if (root_broadcast(nc, M_GO, &go, sizeof(go)) < 0)
		return -EPIPE;
	post_seq(CMD_NET_GO, nc, d->seq, go.err);
	nc_answered(nc);
	return 0;
}

/*
 * Joiner of two daemons: its own view of collective d->seq as it sent it
 * (c NULL), or the root's with the root's inputs, in as they came on c
 * (PEER_IN). Once both are here, eager or the root's GO (pair_decide()).
 */
static int joiner_pair(struct ncomm *nc, const struct node_coll *d, struct conn *c,
		       const struct iovec *in)
{
	int own = c == NULL;
	struct agree *a = agree_of(nc, d);
	int r;

	if (own) {
		a->sent_in = d->eager != 0;
	} else {
		r = pair_keep(nc, a, d, 0, c, in);
		if (r < 0)
			return r;
	}
	if (++a->ndesc < 2)
		return 0;
	r = pair_decide(nc, a);
	free(a->peer_in);
	a->peer_in = NULL;
	a->used = 0;
	return r < 0 ? r : 0;
}

/* Root: a daemon ran collective seq. */
static int root_done(struct ncomm *nc, uint64_t seq)
{
	struct agree *a = &nc->agree[seq % AGREE_WINDOW];
	struct m_seq m = { .seq = seq };

	if (!a->used || a->seq != seq || a->ndesc < nc->ndaemons || a->ndone >= nc->ndaemons)
		return -EPROTO;
	if (++a->ndone < nc->ndaemons)
		return 0;
	if (root_broadcast(nc, M_ALLDONE, &m, sizeof(m)) < 0)
		return -EPIPE;
	post_seq(CMD_NET_DONE, nc, seq, 0);
	return 0;
}

/* Listens for a local rank's incoming links (one per channel of each ring, NODE_LINK_SLOTS). */
static int nc_listen_rank(struct ncomm *nc, uint32_t rank)
{
	for (uint32_t c = 0; c < NODE_LINK_SLOTS; c++) {
		if (nc->listen[rank][c])
			continue;
		if (node.t.net->listen(0, nc->handles[rank][c], &nc->listen[rank][c]) !=
		    ncclSuccess) {
			nc->listen[rank][c] = NULL;
			return -EIO;
		}
	}
	return 0;
}

/*
 * The ring's order, from the table alone, so every daemon derives the same:
 * each daemon's ranks next to each other (ascending), the daemons in the
 * order of their lowest ranks. The ring then crosses between daemons once
 * per daemon, where rank order would cross at every step of ranks placed
 * round-robin (and ranks placed in blocks, as launchers place them, keep
 * rank order).
 */
static void nc_order_ring(struct ncomm *nc)
{
	uint8_t seen[COLLC_MAX_RANKS] = { 0 };
	uint32_t n = nc->nranks, k = 0;

	for (uint32_t r = 0; r < n; r++) {
		uint32_t d = nc->owner[r];

		if (seen[d])
			continue;
		seen[d] = 1;
		for (uint32_t q = r; q < n; q++)
			if (nc->owner[q] == d)
				nc->ring[k++] = (uint8_t)q;
	}
}

/* The next link of nc->links; handle: the receiver's (L_SEND), or NULL. */
static void nc_add_link(struct ncomm *nc, int dir, uint32_t pos, uint32_t chan, uint32_t ring,
			uint32_t peer, const uint8_t *handle)
{
	struct link *l = &nc->links[nc->nlinks++];

	l->dir = dir;
	l->rank = pos;
	l->chan = chan;
	l->ring = ring;
	l->slot = ring == EXEC_RING_GROUP ? NODE_MAX_CHANNELS + chan : chan;
	l->peer = peer;
	if (handle)
		memcpy(l->handle, handle, sizeof(l->handle));
}

/* Is listen slot s of the rank at position p used (its predecessor on that ring elsewhere)? */
static int nc_slot_used(const struct ncomm *nc, uint32_t p, uint32_t s)
{
	uint32_t n = nc->nranks, g = nc->group;

	if (s < NODE_MAX_CHANNELS)
		return s < nc->nchan && nc->owner[nc->ring[(p + n - 1) % n]] != nc->me;
	/* The group ring's predecessor is in another daemon's block, always. */
	return g && s - NODE_MAX_CHANNELS < nc->nchan;
}

/*
 * The rank table is known: order the ring and make the links that cross
 * daemons, on the ring and, where the table says so, on the group rings
 * (position p to p + group: every such link crosses daemons).
 */
static int nc_plan_links(struct ncomm *nc)
{
	uint32_t n = nc->nranks, g = nc->group;

	nc->links = calloc((size_t)4 * n * nc->nchan, sizeof(*nc->links));
	if (!nc->links)
		return -ENOMEM;
	nc->nlinks = 0;
	nc_order_ring(nc);
	/* p: ring positions; the ranks there own the listens and handles. */
	for (uint32_t p = 0; p < n; p++) {
		uint32_t r = nc->ring[p], next = nc->ring[(p + 1) % n],
			 prev = nc->ring[(p + n - 1) % n];

		if (nc->owner[r] != nc->me)
			continue;
		for (uint32_t c = 0; c < nc->nchan; c++) {
			if (nc->owner[next] != nc->me)
				nc_add_link(nc, L_SEND, (p + 1) % n, c, EXEC_RING_FLAT,
					    nc->owner[next], nc->handles[next][c]);
			if (nc->owner[prev] != nc->me)
				nc_add_link(nc, L_RECV, p, c, EXEC_RING_FLAT, nc->owner[prev],
					    NULL);
			if (g) {
				uint32_t gnext = nc->ring[(p + g) % n],
					 gprev = nc->ring[(p + n - g) % n];

				nc_add_link(nc, L_SEND, (p + g) % n, c, EXEC_RING_GROUP,
					    nc->owner[gnext],
					    nc->handles[gnext][NODE_MAX_CHANNELS + c]);
				nc_add_link(nc, L_RECV, p, c, EXEC_RING_GROUP, nc->owner[gprev],
					    NULL);
			}
		}
	}
	/* Listens nobody will connect to. */
	for (uint32_t p = 0; p < n; p++)
		for (uint32_t s = 0; s < NODE_LINK_SLOTS; s++) {
			uint32_t r = nc->ring[p];

			if (nc->listen[r][s] && !nc_slot_used(nc, p, s)) {
				node.t.net->closeListen(nc->listen[r][s]);
				nc->listen[r][s] = NULL;
			}
		}
	nc->stage = NC_LINKING;
	return 0;
}

static void p2p_done(void *arg, uint64_t cookie, int err)
{
	post_seq(CMD_NET_P2P, arg, cookie, err);
}

/* Root: every daemon's send/recv listens are known: tell each whom to connect to. */
static int root_p2p_table(struct ncomm *nc)
{
	struct m_p2ph *m = calloc(1, sizeof(*m));
	int r = 0;

	if (!m)
		return -ENOMEM;
	m->ndaemons = nc->ndaemons;
	for (uint32_t e = 1; e < nc->ndaemons && r == 0; e++) {
		for (uint32_t d = 0; d < nc->ndaemons; d++)
			memcpy(m->handles[d], nc->p2ph[d][e], NCCL_NET_HANDLE_MAXSIZE);
		if (!nc->peers[e] || conn_send(nc->peers[e], M_P2PT, m, sizeof(*m)) < 0)
			r = -EPIPE;
	}
	for (uint32_t d = 1; d < nc->ndaemons && r == 0; d++)
		r = np2p_peer_handle(nc->p2p, d, nc->p2ph[d][0]);
	free(m);
	free(nc->p2ph);
	nc->p2ph = NULL;
	return r;
}

/* The table is known: listen for every other daemon's send/recv link, and tell the root. */
static int nc_p2p_start(struct ncomm *nc)
{
	struct m_p2ph *m;
	int r;

	nc->p2p = np2p_new(node.t.net, nc->nranks, nc->ndaemons, nc->me, nc->owner, p2p_done, nc);
	if (!nc->p2p)
		return -ENOMEM;
	if (nc->root) {
		nc->p2ph = calloc(nc->ndaemons, sizeof(*nc->p2ph));
		if (!nc->p2ph)
			return -ENOMEM;
		r = np2p_listen(nc->p2p, nc->p2ph[0]);
		if (r < 0)
			return r;
		nc->p2pl_have[0] = 1;
		return ++nc->np2pl == nc->ndaemons ? root_p2p_table(nc) : 0;
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->from = nc->me;
	m->ndaemons = nc->ndaemons;
	r = np2p_listen(nc->p2p, m->handles);
	if (r == 0 && (!nc->ctl || conn_send(nc->ctl, M_P2PL, m, sizeof(*m)) < 0))
		r = -EPIPE;
	free(m);
	return r;
}

/* Root: daemon c->didx's send/recv listens. */
static int root_p2pl(struct ncomm *nc, const struct conn *c, const struct m_p2ph *m)
{
	uint32_t d = c->didx;

	if (!nc->p2ph || d == 0 || d >= nc->ndaemons || nc->p2pl_have[d] || m->from != d ||
	    m->ndaemons != nc->ndaemons)
		return -EPROTO;
	memcpy(nc->p2ph[d], m->handles, (size_t)nc->ndaemons * NCCL_NET_HANDLE_MAXSIZE);
	nc->p2pl_have[d] = 1;
	return ++nc->np2pl == nc->ndaemons ? root_p2p_table(nc) : 0;
}

/* Joiner: every daemon's listen for this one. */
static int on_p2pt(struct ncomm *nc, const struct m_p2ph *m)
{
	int r = 0;

	if (m->ndaemons != nc->ndaemons || nc->p2p_ready)
		return -EPROTO;
	for (uint32_t d = 0; d < nc->ndaemons && r == 0; d++)
		if (d != nc->me)
			r = np2p_peer_handle(nc->p2p, d, m->handles[d]);
	nc->p2p_ready = 1;
	return r;
}

/* Root: every rank registered. */
/* Ranks each daemon holds, where all hold as many (at least 2); else 0. */
static uint32_t nc_block(const struct ncomm *nc)
{
	uint32_t count[COLLC_MAX_RANKS] = { 0 };

	for (uint32_t r = 0; r < nc->nranks; r++)
		count[nc->owner[r]]++;
	for (uint32_t d = 1; d < nc->ndaemons; d++)
		if (count[d] != count[0])
			return 0;
	return nc->ndaemons >= 2 && count[0] >= 2 ? count[0] : 0;
}

/*
 * The root: whether the communicator gets group rings for hierarchical
 * collectives (both executors run them; every rank uses a GPU or none
 * does); the key at 0 turns them off, and so saves each rank its second
 * set of links.
 */
static uint32_t nc_group_of(const struct ncomm *nc)
{
	if (!node.hier_min_bytes)
		return 0;
	return nc_block(nc);
}

static void root_complete(struct ncomm *nc)
{
	struct m_table *t;
	int r;

	if (nc->ndaemons == 1)
		return; /* every rank is here: the scheduler runs it as a local communicator */
	/*
	 * The grid's ring across daemons and the CPU executor's have different
	 * slot sizes (512 KiB and 1 MiB steps): a ring cannot mix them.
	 */
	if (nc->ngpu && nc->ngpu != nc->nranks) {
		log_warn("communicator %llu spans daemons with %u GPU ranks and %u host-memory "
			 "ranks: across daemons every rank uses a GPU or none does",
			 (unsigned long long)nc->id, nc->ngpu, nc->nranks - nc->ngpu);
		nc_fail(nc, -ENOTSUP, 1);
		return;
	}
	nc->nchan = nc->min_chan;
	if (nc->nchan > NODE_MAX_CHANNELS)
		nc->nchan = NODE_MAX_CHANNELS;
	if (nc->nchan < 1)
		nc->nchan = 1;
	nc->group = nc_group_of(nc);
	nc->hier_min_bytes = nc->group ? node.hier_min_bytes : 0;
	nc->agree = calloc(AGREE_WINDOW, sizeof(*nc->agree));
	t = calloc(1, sizeof(*t));
	if (!t || !nc->agree) {
		free(t);
		nc_fail(nc, -ENOMEM, 1);
		return;
	}
	t->nranks = nc->nranks;
	t->nchan = nc->nchan;
	t->ndaemons = nc->ndaemons;
	t->group = nc->group;
	t->hier_min_bytes = nc->hier_min_bytes;
	memcpy(t->owner, nc->owner, sizeof(t->owner));
	memcpy(t->daemons, nc->daemons, sizeof(t->daemons));
	memcpy(t->handles, nc->handles, sizeof(t->handles));
	for (uint32_t d = 1; d < nc->ndaemons; d++) {
		t->you = d;
		if (!nc->peers[d] || conn_send(nc->peers[d], M_TABLE, t, sizeof(*t)) < 0) {
			free(t);
			nc_fail(nc, -EPIPE, 1);
			return;
		}
	}
	free(t);
	r = nc_plan_links(nc);
	if (r == 0)
		r = nc_p2p_start(nc);
	if (r < 0)
		nc_fail(nc, r, 1);
}

static int on_reg(struct conn *c, struct ncomm *nc, const struct m_reg *m)
{
	uint32_t d;

	if (!nc->root || nc->stage != NC_JOINING || m->nranks != nc->nranks ||
	    m->rank >= nc->nranks || nc->have[m->rank] || m->max_chan < 1)
		return -EINVAL;
	if (!c->didx) {
		if (nc->ndaemons >= COLLC_MAX_RANKS)
			return -EINVAL;
		c->didx = nc->ndaemons++;
		nc->peers[c->didx] = c;
		nc->daemons[c->didx] = m->from;
	}
	d = c->didx;
	nc->have[m->rank] = 1;
	nc->owner[m->rank] = (uint8_t)d;
	memcpy(nc->handles[m->rank], m->handles, sizeof(m->handles));
	nc->ngpu += m->gpu != 0;
	if (m->max_chan < nc->min_chan)
		nc->min_chan = m->max_chan;
	if (++nc->nreg == nc->nranks)
		root_complete(nc);
	return 0;
}

static int on_table(struct ncomm *nc, const struct m_table *t)
{
	int err;

	if (nc->root || nc->stage != NC_JOINING || t->nranks != nc->nranks || t->nchan < 1 ||
	    t->nchan > NODE_MAX_CHANNELS || t->you == 0 || t->you >= t->ndaemons ||
	    t->ndaemons > COLLC_MAX_RANKS)
		return -EPROTO;
	for (uint32_t r = 0; r < nc->nranks; r++)
		if ((t->owner[r] == t->you) != (nc->have[r] != 0) || t->owner[r] >= t->ndaemons)
			return -EPROTO;
	nc->me = t->you;
	nc->nchan = t->nchan;
	nc->ndaemons = t->ndaemons;
	memcpy(nc->owner, t->owner, sizeof(nc->owner));
	/* Group rings only where every daemon holds the same block of ranks. */
	if (t->group && (t->group != nc_block(nc) || !t->hier_min_bytes))
		return -EPROTO;
	nc->group = t->group;
	nc->hier_min_bytes = t->group ? t->hier_min_bytes : 0;
	memcpy(nc->daemons, t->daemons, sizeof(nc->daemons));
	/* Our own listens' handles stay ours (the connecting side's stage lives in them). */
	for (uint32_t r = 0; r < nc->nranks; r++)
		if (t->owner[r] != nc->me)
			memcpy(nc->handles[r], t->handles[r], sizeof(nc->handles[r]));
	/* Between two daemons the joiner keeps the root's eager inputs too (node.h). */
	if (nc->ndaemons == 2) {
		nc->agree = calloc(AGREE_WINDOW, sizeof(*nc->agree));
		if (!nc->agree)
			return -ENOMEM;
	}
	err = nc_plan_links(nc);
	return err < 0 ? err : nc_p2p_start(nc);
}

/* One whole message from an authenticated peer; -errno fails its communicator. */
static int on_msg(struct conn *c, const struct msg_hdr *h, const uint8_t *body)
{
	struct ncomm *nc = c->nc;
	const struct m_abort *a;
	const struct m_seq *q = (const struct m_seq *)body;

	node.rx_msgs++;
	if (!nc)
		return -EPIPE;
	switch (h->type) {
	case M_COLL: {
		const struct node_coll *d = (const struct node_coll *)body;
		uint32_t from = 1;

		/* A joiner may be set up before the root is: its view waits in agree. */
		if (h->len < sizeof(*d) || !nc->root || nc->stage == NC_JOINING ||
		    (!d->eager && h->len != sizeof(*d)) || d->eager > 1)
			return -EPROTO;
		while (from < nc->ndaemons && nc->peers[from] != c)
			from++;
		if (from == nc->ndaemons)
			return -EPROTO;
		return root_coll(nc, d, from, c,
				 &(struct iovec){ .iov_base =
							  (void *)rx_payload(c, body, sizeof(*d)),
						  .iov_len = h->len - sizeof(*d) },
				 1);
	}
	case M_EAGER: {
		struct sched_cmd *cmd;

		if (h->len < sizeof(*q) || nc->root || c != nc->ctl || nc->stage != NC_ATTACHED ||
		    q->err)
			return -EPROTO;
		/* The scheduler checks the length against the collective it asked about. */
		cmd = net_cmd(CMD_NET_EAGER, nc, 0);
		if (!cmd)
			return -ENOMEM;
		cmd->u.net.seq = q->seq;
		cmd->u.net.len = h->len - (uint32_t)sizeof(*q);
		cmd->u.net.data = conn_take(c, rx_payload(c, body, sizeof(*q)), cmd->u.net.len);
		if (!cmd->u.net.data) {
			free(cmd);
			return -ENOMEM;
		}
		node_post(cmd);
		nc_answered(nc);
		node.eager++;
		return 0;
	}
	case M_PEER_IN: {
		const struct node_coll *d = (const struct node_coll *)body;

		/* It may come before our links are up: it waits in agree for our own view. */
		if (h->len < sizeof(*d) || nc->root || c != nc->ctl || !nc->agree ||
		    !node_eager_pair(d, nc->ndaemons, nc->nranks) || d->eager != 1 || d->bad)
			return -EPROTO;
		return joiner_pair(nc, d, c,
				   &(struct iovec){ .iov_base =
							    (void *)rx_payload(c, body, sizeof(*d)),
						    .iov_len = h->len - sizeof(*d) });
	}
	case M_DONE:
		if (h->len != sizeof(*q) || !nc->root || nc->stage != NC_ATTACHED)
			return -EPROTO;
		return root_done(nc, q->seq);
	case M_GO:
	case M_ALLDONE:
		if (h->len != sizeof(*q) || nc->root || c != nc->ctl || nc->stage != NC_ATTACHED)
			return -EPROTO;
		if (q->err != 0 && q->err != -EINVAL && q->err != -EOPNOTSUPP)
			return -EPROTO;
		post_seq(h->type == M_GO ? CMD_NET_GO : CMD_NET_DONE, nc, q->seq, q->err);
		if (h->type == M_GO)
			nc_answered(nc);
		return 0;
	case M_PING:
		return h->len == 0 ? 0 : -EPROTO;
	case M_P2PL:
		if (h->len != sizeof(struct m_p2ph) || !nc->root || nc->stage != NC_LINKING)
			return -EPROTO;
		return root_p2pl(nc, c, (const struct m_p2ph *)body);
	case M_P2PT:
		if (h->len != sizeof(struct m_p2ph) || nc->root || c != nc->ctl ||
		    nc->stage != NC_LINKING || !nc->p2p)
			return -EPROTO;
		return on_p2pt(nc, (const struct m_p2ph *)body);
	case M_REG:
		if (h->len != sizeof(struct m_reg))
			return -EPROTO;
		return on_reg(c, nc, (const struct m_reg *)body);
	case M_TABLE:
		if (h->len != sizeof(struct m_table) || c != nc->ctl)
			return -EPROTO;
		return on_table(nc, (const struct m_table *)body);
	case M_ABORT:
		if (h->len != sizeof(struct m_abort))
			return -EPROTO;
		a = (const struct m_abort *)body;
		/* Only the errors a daemon reports for its communicator pass on. */
		return a->err == -ETIMEDOUT || a->err == -EINVAL || a->err == -ECANCELED ||
				       a->err == -ENOTSUP || a->err == -EPROTO
			       ? a->err
			       : -EPIPE;
	}
	return -EPROTO;
}

/* Authenticated: room for whole messages and a backlog of output. */
static int conn_grow(struct conn *c)
{
	uint8_t *in = realloc(c->in, sizeof(struct msg_hdr) + MSG_MAX), *out;

	if (!in)
		return -ENOMEM;
	c->in = in;
	out = realloc(c->out, OUT_MAX);
	if (!out)
		return -ENOMEM;
	c->out = out;
	c->out_cap = OUT_MAX;
	/* Without it every read goes to the socket. */
	c->ra.buf = malloc(RA_BYTES);
	c->ra.cap = c->ra.buf ? RA_BYTES : 0;
	return 0;
}

/* The auth handshake, one 96-byte frame at a time. */
static int auth_lookup(void *arg, const uint8_t *id, uint8_t *ret_secret)
{
	(void)arg;
	for (struct ncomm *nc = node.comms; nc; nc = nc->next)
		if (nc->root && nc->stage == NC_JOINING &&
		    memcmp(nc->nonce, id, NET_AUTH_ID_BYTES) == 0) {
			memcpy(ret_secret, nc->secret, NET_AUTH_SECRET_BYTES);
			return 0;
		}
	return -ENOENT;
}

static struct ncomm *nc_by_auth_id(const uint8_t *id)
{
	for (struct ncomm *nc = node.comms; nc; nc = nc->next)
		if (nc->root && memcmp(nc->nonce, id, NET_AUTH_ID_BYTES) == 0)
			return nc;
	return NULL;
}

static void joiner_send_regs(struct ncomm *nc);

/* 1: the connection may go on; 0: it ended (closed). */
static int auth_step(struct conn *c)
{
	uint8_t out[NET_AUTH_FRAME_BYTES];
	int send_it = 0, r;

	if (c->in_len >= NET_AUTH_HDR_BYTES && c->in_len < NET_AUTH_FRAME_BYTES) {
		uint32_t magic;

		/* Garbage and port scans are refused after 16 bytes. */
		memcpy(&magic, c->in, 4);
		if (magic != NET_AUTH_MAGIC) {
			node.auth.refused[NET_AUTH_ERR_MAGIC]++;
			conn_close(c);
			return 0;
		}
	}
	if (c->in_len < NET_AUTH_FRAME_BYTES)
		return 1;
	switch (c->astep) {
	case A_R_HELLO:
		r = net_auth_responder_hello(&node.auth, &c->as, c->in, NET_AUTH_FRAME_BYTES, out);
		if (r != NET_AUTH_OK)
			break;
		conn_queue(c, out, sizeof(out));
		c->astep = A_R_RESPONSE;
		break;
	case A_R_RESPONSE:
		r = net_auth_responder_response(&node.auth, &c->as, c->in, NET_AUTH_FRAME_BYTES,
						out, &send_it);
		if (send_it)
			conn_queue(c, out, sizeof(out));
		if (r == NET_AUTH_OK) {
			c->nc = nc_by_auth_id(c->as.id);
			if (!c->nc || c->nc->stage != NC_JOINING)
				r = NET_AUTH_ERR_UNKNOWN_COMM;
		}
		if (r == NET_AUTH_OK && conn_grow(c) < 0)
			r = NET_AUTH_ERR_INTERNAL;
		if (r == NET_AUTH_OK) {
			c->state = C_UP;
			log_info("daemon %s joined communicator %llu", c->addr,
				 (unsigned long long)c->nc->id);
		}
		break;
	case A_I_CHALLENGE:
		r = net_auth_initiator_challenge(&node.auth, &c->as, c->in, NET_AUTH_FRAME_BYTES,
						 out, &send_it);
		if (send_it)
			conn_queue(c, out, sizeof(out));
		if (r == NET_AUTH_OK)
			c->astep = A_I_RESULT;
		break;
	default:
		r = net_auth_initiator_result(&node.auth, &c->as, c->in, NET_AUTH_FRAME_BYTES);
		if (r == NET_AUTH_OK && conn_grow(c) < 0)
			r = NET_AUTH_ERR_INTERNAL;
		if (r == NET_AUTH_OK) {
			c->state = C_UP;
			joiner_send_regs(c->nc);
		}
		break;
	}
	memmove(c->in, c->in + NET_AUTH_FRAME_BYTES, c->in_len - NET_AUTH_FRAME_BYTES);
	c->in_len -= NET_AUTH_FRAME_BYTES;
	if (r != NET_AUTH_OK) {
		conn_flush(c);
		/* A joiner early for its root retries: not worth a warning each time. */
		if (r == NET_AUTH_ERR_UNKNOWN_COMM)
			log_debug("daemon %s: handshake refused: %s", c->addr,
				  net_auth_reason_name(r));
		else
			log_warn("daemon %s: handshake refused: %s", c->addr,
				 net_auth_reason_name(r));
		if (c->initiator && c->nc && c->nc->ctl == c &&
		    (r == NET_AUTH_ERR_MAC || r == NET_AUTH_ERR_REFUSED)) {
			/* The root holds another secret: this id is not ours to join. */
			nc_fail(c->nc, -EACCES, 1);
		}
		conn_close(c);
		return 0;
	}
	return 1;
}

/*
 * An authenticated peer sent message h that breaks the protocol (-EPROTO,
 * or a REG the root refuses, -EINVAL): counted and named; err ends the
 * connection and fails its communicator. Other errors (no memory, a broken
 * socket) pass as they are.
 */
static int conn_refused(const struct conn *c, const struct msg_hdr *h, int err)
{
	if (err != -EPROTO && err != -EINVAL)
		return err;
	node.proto_errors++;
	log_warn("daemon %s: communicator %llu: message type %u of %u bytes refused: %s", c->addr,
		 c->nc ? (unsigned long long)c->nc->id : 0ull, (unsigned)h->type, (unsigned)h->len,
		 strerror(-err));
	return err;
}

/* Reads and handles what arrived; 0 when the connection ended. */
static int conn_read(struct conn *c, uint64_t now)
{
	if (c->rx_blocked)
		return 1;
	for (;;) {
		const struct msg_hdr *h = (const struct msg_hdr *)c->in;
		struct iovec v[1 + NODE_LAND_MAX];
		struct msghdr mh = { .msg_iov = v };
		size_t want = 0, to_in, had = c->in_len;
		ssize_t n;
		int r;

		/* What c->in still lacks (the frame, the header, the body or its prefix), then the payload. */
		if (c->state == C_AUTH)
			to_in = NET_AUTH_FRAME_BYTES - c->in_len;
		else if (c->in_len < sizeof(*h))
			to_in = sizeof(*h) - c->in_len;
		else
			to_in = rx_in_bytes(c, h) - c->in_len;
		if (to_in)
			v[mh.msg_iovlen++] =
				(struct iovec){ .iov_base = c->in + c->in_len, .iov_len = to_in };
		mh.msg_iovlen += rx_payload_iov(c, v + mh.msg_iovlen, NODE_LAND_MAX);
		for (size_t i = 0; i < mh.msg_iovlen; i++)
			want += v[i].iov_len;
		n = want ? collc__net_ra_recv(c->fd, &c->ra, &mh, want, c->in_len == 0) : 0;
		if (want && n == 0)
			return -EPIPE;
		if (want && n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			/* Between messages: not tried again until sleep_poll() sees it readable. */
			c->rx_blocked = c->in_len == 0;
			return 1;
		}
		if (want && n < 0)
			return -EPIPE;
		c->in_len += (size_t)n < to_in ? (size_t)n : to_in;
		c->rx_got += (size_t)n > to_in ? (size_t)n - to_in : 0;
		c->bytes_recv += (uint64_t)n;
		c->last_rx_ns = now;
		if (c->state == C_AUTH) {
			if (!auth_step(c))
				return 0;
			continue;
		}
		if (c->in_len < sizeof(*h))
			continue;
		if (had < sizeof(*h)) {
			/* This read completed the header. */
			r = rx_start(c, h);
			if (r < 0)
				return conn_refused(c, h, r);
		}
		if (c->in_len < rx_in_bytes(c, h))
			continue;
		if (c->rx_pre != UINT32_MAX && !c->rx_ready)
			rx_dest(c, h);
		if (rx_data_left(c) || c->in_len < rx_in_bytes(c, h))
			continue;
		r = on_msg(c, h, c->in + sizeof(*h));
		rx_end(c);
		c->in_len = 0;
		if (r < 0)
			return h->type == M_ABORT ? r : conn_refused(c, h, r);
		if (c->state != C_UP)
			return 0;
	}
}

static void accept_conns(void)
{
	int one = 1;

	while (!node.lfd_blocked) {
		union net_addr a;
		socklen_t alen = sizeof(a);
		int fd = accept4(node.lfd, &a.sa, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct conn *c;

		if (fd < 0) {
			/* Nothing to accept (or a failed one): wait for poll() to say more came. */
			node.lfd_blocked = 1;
			return;
		}
		c = conn_new(fd, 0);
		if (!c) {
			node.refused_full++;
			close(fd);
			continue;
		}
		/* Small messages (GO, DONE) go at once: no Nagle wait for an ACK. */
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		addr_str(&a, c->addr, sizeof(c->addr));
	}
}

/* A connection ended: its communicator fails where it needed it. */
static void conn_ended(struct conn *c, int err)
{
	struct ncomm *nc = c->nc;

	if (c->state == C_UP && nc && nc->stage != NC_DEAD) {
		nc_fail(nc, err, 1);
	} else if (c->initiator && nc && nc->ctl == c && nc->stage == NC_JOINING) {
		/* Not up yet (refused, or the root has no rank of it yet): try again soon. */
		nc->retry_ns = mono_ns() + RETRY_NS;
	}
	conn_close(c);
}

static void joiner_connect(struct ncomm *nc, uint64_t now)
{
	uint8_t out[NET_AUTH_FRAME_BYTES];
	struct conn *c;
	int fd;

	if (nc->ctl && nc->ctl->state != C_CLOSED)
		return;
	if (nc->ctl) {
		nc->ctl->nc = NULL;
		nc->ctl = NULL;
	}
	if (now < nc->retry_ns)
		return;
	memset(nc->sent, 0, sizeof(nc->sent));
	fd = collc__net_connect_start(&nc->root_addr, 1);
	if (fd < 0) {
		nc->retry_ns = now + RETRY_NS;
		return;
	}
	c = conn_new(fd, 1);
	if (!c) {
		close(fd);
		nc->retry_ns = now + RETRY_NS;
		return;
	}
	addr_str(&nc->root_addr, c->addr, sizeof(c->addr));
	c->nc = nc;
	nc->ctl = c;
	if (net_auth_initiator_hello(&node.auth, &c->as, nc->nonce, nc->secret, out) !=
	    NET_AUTH_OK) {
		conn_close(c);
		return;
	}
	conn_queue(c, out, sizeof(out));
}

static void joiner_send_regs(struct ncomm *nc)
{
	struct m_reg m;

	if (!nc || nc->root || !nc->ctl || nc->ctl->state != C_UP)
		return;
	for (uint32_t r = 0; r < nc->nranks; r++) {
		if (!nc->have[r] || nc->sent[r])
			continue;
		memset(&m, 0, sizeof(m));
		m.rank = r;
		m.nranks = nc->nranks;
		m.max_chan = node.max_chan;
		m.gpu = nc->gpu[r];
		addr_to_wire(&node.laddr, &m.from);
		memcpy(m.handles, nc->handles[r], sizeof(m.handles));
		if (conn_send(nc->ctl, M_REG, &m, sizeof(m)) < 0) {
			nc_fail(nc, -EPIPE, 1);
			return;
		}
		nc->sent[r] = 1;
	}
}

static void conns_step(uint64_t now)
{
	struct conn **pc = &node.conns;

	while (*pc) {
		struct conn *c = *pc;
		int r;

		if (c->state == C_CLOSED) {
			if (c->nc && c->nc->ctl == c)
				c->nc->ctl = NULL;
			if (c->nc)
				for (uint32_t d = 0; d < COLLC_MAX_RANKS; d++)
					if (c->nc->peers[d] == c)
						c->nc->peers[d] = NULL;
			*pc = c->next;
			node.nconns--;
			node.gone_sent += c->bytes_sent;
			node.gone_recv += c->bytes_recv;
			conn_free(c);
			continue;
		}
		pc = &c->next;
		if (c->state == C_CONNECTING) {
			r = collc__net_connect_done(c->fd);
			if (r < 0) {
				conn_ended(c, -EPIPE);
				continue;
			}
			if (r == 0) {
				if (now > c->deadline_ns)
					conn_ended(c, -ETIMEDOUT);
				continue;
			}
			c->state = C_AUTH;
		}
		if (c->state == C_AUTH && now > c->deadline_ns) {
			node.auth.refused[NET_AUTH_ERR_TIMEOUT]++;
			conn_ended(c, -ETIMEDOUT);
			continue;
		}
		r = conn_flush(c);
		if (r == 0)
			r = conn_read(c, now);
		if (r == 0 && c->state == C_CLOSED)
			continue;
		if (r < 0) {
			if (c->state == C_AUTH)
				node.auth.refused[NET_AUTH_ERR_TRUNCATED]++;
			conn_ended(c, r);
			continue;
		}
		if (c->state != C_UP)
			continue;
		/*
		 * Heartbeats every quarter of the timeout; three missed in a row
		 * fail the peer, so a silent partition ends within net_timeout_ms.
		 */
		if (now - c->last_rx_ns > (uint64_t)node.timeout_ms * 750000) {
			conn_ended(c, -ETIMEDOUT);
			continue;
		}
		if (now - c->last_tx_ns > (uint64_t)node.timeout_ms * 250000 &&
		    conn_send(c, M_PING, NULL, 0) < 0) {
			conn_ended(c, -EPIPE);
			continue;
		}
		if (conn_flush(c) < 0)
			conn_ended(c, -EPIPE);
	}
}

/* Links */

/* Connects and accepts; 1 once every link is up. */
static int links_connect(struct ncomm *nc)
{
	const ncclNet_v8_t *net = node.t.net;
	int up = 1;

	for (uint32_t i = 0; i < nc->nlinks; i++) {
		struct link *l = &nc->links[i];
		ncclNetDeviceHandle_v8_t *dh = NULL;
		ncclResult_t rc;

		if (l->comm)
			continue;
		if (l->dir == L_SEND)
			rc = net->connect(0, l->handle, &l->comm, &dh);
		else
			rc = net->accept(nc->listen[nc->ring[l->rank]][l->slot], &l->comm, &dh);
		if (rc != ncclSuccess) {
			l->comm = NULL;
			return -EPIPE;
		}
		if (!l->comm)
			up = 0;
	}
	return up;
}

static int links_pollable(void);

static int link_attach(struct ncomm *nc, struct link *l, const struct exec_backend *ex, void *priv)
{
	int r = ex->comm_link(priv, l->rank, l->chan, l->ring, &l->el);

	if (r < 0)
		return r;
	if (l->el.nslots > LINK_SLOTS_MAX)
		return -EINVAL;
	if (node.t.net->regMr(l->comm, l->el.buf, (size_t)l->el.nslots * l->el.slot_bytes,
			      NCCL_PTR_HOST, &l->mh) != ncclSuccess)
		return -EIO;
	/*
	 * tcp sends from any host memory: the local sender may leave its steps
	 * in its own buffers (one copy less a byte). Other transports send from
	 * the registered slots only.
	 */
	if (l->dir == L_SEND && l->el.direct && l->el.src && links_pollable())
		l->el.direct(l->el.l);
	/* ... and receives into any: the rank's steps may land in its own buffers. */
	l->recv_direct = l->dir == L_RECV && l->el.recv_direct && l->el.known && l->el.dst &&
			 links_pollable();
	if (l->recv_direct)
		l->el.recv_direct(l->el.l);
	/* Steps continue from where the ring stands (a fresh ring: 0). */
	l->done = l->posted = l->dir == L_SEND ? l->el.head(l->el.l) : l->el.tail(l->el.l);
	l->attached = 1;
	(void)nc;
	return 0;
}

/* Moves what can move; 1 if anything did, -errno when the link broke. */
static int link_step(struct link *l)
{
	const ncclNet_v8_t *net = node.t.net;
	struct exec_link *e = &l->el;
	int moved = 0;

	if (l->dir == L_SEND) {
		uint64_t tail = e->tail(e->l);

		while (l->posted < tail && l->posted - l->done < e->nslots) {
			uint32_t s = (uint32_t)(l->posted % e->nslots);
			uint32_t len = e->len(e->l, l->posted);
			const char *src = e->src ? e->src(e->l, l->posted) : NULL;
			void *req = NULL;

			if (len > e->slot_bytes)
				return -EINVAL;
			if (!src)
				src = e->buf + (size_t)s * e->slot_bytes;
			if (net->isend(l->comm, (void *)src, (int)len, 0, l->mh, &req) !=
			    ncclSuccess)
				return -EPIPE;
			if (!req)
				break;
			l->req[s] = req;
			l->posted++;
			l->bytes += len;
			moved = 1;
		}
	} else {
		uint64_t head = e->head(e->l);
		uint64_t known = l->recv_direct ? e->known(e->l) : UINT64_MAX;

		while (l->posted < head + e->nslots && l->posted < known &&
		       l->posted - l->done < e->nslots) {
			uint32_t s = (uint32_t)(l->posted % e->nslots), want = 0;
			void *data = l->recv_direct ? e->dst(e->l, l->posted, &want) : NULL,
			     *req = NULL;
			int size, tag = 0;

			if (!data) {
				data = e->buf + (size_t)s * e->slot_bytes;
				want = 0;
			} else if (want == 0 || want > e->slot_bytes) {
				return -EINVAL;
			}
			size = want ? (int)want : (int)e->slot_bytes;
			if (net->irecv(l->comm, 1, &data, &size, &tag, &l->mh, &req) != ncclSuccess)
				return -EPIPE;
			if (!req)
				break;
			l->want[s] = want;
			l->req[s] = req;
			l->posted++;
			moved = 1;
		}
	}
	while (l->done < l->posted) {
		uint32_t s = (uint32_t)(l->done % e->nslots);
		int done = 0, size = 0;

		if (net->test(l->req[s], &done, &size) != ncclSuccess)
			return -EPIPE;
		if (!done)
			break;
		l->req[s] = NULL;
		l->done++;
		moved = 1;
		if (l->dir == L_SEND) {
			e->post_head(e->l, l->done);
		} else {
			/* A step landing in the rank's buffer fills it exactly: the daemons agreed on it. */
			if (size < 0 || (uint32_t)size > e->slot_bytes ||
			    (l->want[s] && (uint32_t)size != l->want[s]))
				return -EPROTO;
			l->bytes += (uint64_t)size;
			if (l->want[s])
				node.recv_direct += (uint64_t)size;
			e->post_tail(e->l, l->done, (uint32_t)size);
		}
	}
	return moved;
}

/*
 * Can the thread sleep in poll() on the data links' sockets? Only the
 * built-in tcp transport names them (net_tcp_pollfds()); other transports
 * are polled on a short timer while steps are in flight.
 */
static int links_pollable(void)
{
	return node.t.net == &net_tcp;
}

/*
 * Links whose ring cannot wake the proxy (exec_link.watch NULL: the grid's
 * rings in mapped host memory) are polled while a collective of their
 * communicator is in flight here: nothing else posts on them.
 */
static int nc_unwatched(const struct ncomm *nc)
{
	for (uint32_t i = 0; i < nc->nlinks; i++)
		if (nc->links[i].attached && !nc->links[i].el.watch)
			return 1;
	return 0;
}

/*
 * 1 when something moved; *busy when a link has steps in flight (worth a
 * spin), *nap when progress needs polling on a timer (links coming up, or
 * steps in flight on a transport without pollable sockets), *fast when it
 * needs polling every NAP_NS (rings that cannot be watched, in use).
 */
static int comms_step(uint64_t now, int *busy, int *nap, int *fast)
{
	int moved = 0;

	for (struct ncomm *nc = node.comms; nc; nc = nc->next) {
		int r;

		switch (nc->stage) {
		case NC_JOINING:
			if (nc->root)
				break;
			if (now > nc->deadline_ns && (!nc->ctl || nc->ctl->state != C_UP)) {
				log_warn("communicator %llu: no answer from its root daemon",
					 (unsigned long long)nc->id);
				nc_fail(nc, -ETIMEDOUT, 1);
				break;
			}
			joiner_connect(nc, now);
			break;
		case NC_LINKING:
			*busy = 1;
			*nap = 1;
			if (now > nc->deadline_ns) {
				log_warn(
					"communicator %llu: links to the other daemons did not come up",
					(unsigned long long)nc->id);
				nc_fail(nc, -ETIMEDOUT, 1);
				break;
			}
			r = links_connect(nc);
			if (r == 1)
				r = nc->p2p ? np2p_connect(nc->p2p) : -EPIPE;
			if (r < 0) {
				nc_fail(nc, r, 1);
			} else if (r == 1) {
				nc->stage = NC_READY;
				post_cmd(CMD_NET_READY, nc, 0);
				moved = 1;
			}
			break;
		case NC_ATTACHED:
			/*
			 * A peer that leaves (its ranks destroyed the communicator after
			 * their last collective) closes its data links right after its
			 * control connection carried that collective's ALLDONE or eager
			 * result, which may still wait in our queue: a link that ends
			 * so fails the communicator only once the control connection
			 * ends too (its messages read first, in order) or after
			 * LINK_GRACE_NS. A killed peer's connections all end at once.
			 */
			if (nc->link_lost_ns) {
				if (now - nc->link_lost_ns > LINK_GRACE_NS)
					nc_fail(nc, -EPIPE, 1);
				*busy = *nap = 1;
				break;
			}
			for (uint32_t i = 0; i < nc->nlinks && nc->stage == NC_ATTACHED; i++) {
				struct link *l = &nc->links[i];

				r = link_step(l);
				if (r == -EPIPE) {
					nc->link_lost_ns = now;
					*busy = *nap = 1;
					break;
				}
				if (r == -EPROTO) {
					log_err("communicator %llu: a step from daemon %u landed with "
						"another length than agreed: failing it everywhere",
						(unsigned long long)nc->id, l->peer);
					node.proto_errors++;
				}
				if (r < 0) {
					nc_fail(nc, r == -EPROTO || r == -EINVAL ? r : -EPIPE, 1);
					break;
				}
				moved |= r;
				if (l->posted != l->done && l->dir == L_SEND)
					*busy = 1;
			}
			if (nc->stage == NC_ATTACHED && nc->p2p) {
				int pending = 0;

				r = np2p_step(nc->p2p, busy, &pending);
				node.proto_errors += r == -EPROTO;
				if (r < 0 && r != -EPROTO) {
					/* A send/recv link ended: the same grace as the ring's. */
					nc->link_lost_ns = nc->link_lost_ns ? nc->link_lost_ns
									    : now;
					*busy = *nap = 1;
				} else if (r < 0) {
					nc_fail(nc, r, 1);
				} else {
					moved |= r;
				}
				/* Without pollable sockets, a waiting send or receive polls on the timer. */
				if (pending && !links_pollable())
					*nap = 1;
			}
			if (nc->inflight || nc->asked)
				*busy = 1;
			if (*busy && !links_pollable())
				*nap = 1;
			if (nc->stage == NC_ATTACHED && nc->inflight && nc_unwatched(nc))
				*busy = *nap = *fast = 1;
			break;
		}
	}
	return moved;
}

/* The thread */

/*
 * Before sleeping: every attached link's rank will write the eventfd at its
 * next post of tail or head (exec_link.watch). Returns 1 when a link can
 * move already (then the thread does not sleep).
 */
static int sleep_prepare(void)
{
	int ready = 0;

	for (struct ncomm *nc = node.comms; nc; nc = nc->next) {
		if (nc->stage != NC_ATTACHED)
			continue;
		for (uint32_t i = 0; i < nc->nlinks; i++)
			if (nc->links[i].attached && nc->links[i].el.watch)
				nc->links[i].el.watch(nc->links[i].el.l, node.efd);
	}
	/* K1: pairs with K2 in the executor (cpu/prims.c proxy_kick()): armed, then look again. */
	fence_seq_cst();
	for (struct ncomm *nc = node.comms; nc && !ready; nc = nc->next) {
		if (nc->stage != NC_ATTACHED)
			continue;
		for (uint32_t i = 0; i < nc->nlinks && !ready; i++) {
			const struct link *l = &nc->links[i];
			const struct exec_link *e = &l->el;

			if (!l->attached || l->posted - l->done >= e->nslots)
				continue;
			if (l->dir == L_SEND)
				ready = e->tail(e->l) > l->posted;
			else
				ready = l->posted < e->head(e->l) + e->nslots &&
					(!l->recv_direct || l->posted < e->known(e->l));
		}
	}
	return ready;
}

/* Room for the poll set: the eventfd, the listen socket, connections, data sockets. */
static struct pollfd *pollset(size_t want)
{
	static struct pollfd *pf;
	static size_t cap;

	if (want > cap) {
		struct pollfd *p = realloc(pf, want * sizeof(*pf));

		if (!p)
			return NULL;
		pf = p;
		cap = want;
	}
	return pf;
}

/*
 * What poll() saw: a connection, the listener or a data socket that became
 * ready may be tried again (their reads and the tcp transport's transfers
 * are not retried while they would block). Each finds its entries where
 * sleep_poll() put them; what came or went while the lock was dropped finds
 * another descriptor there and is left as it is (a new one starts unblocked).
 */
static void poll_seen(const struct pollfd *pf, size_t n)
{
	if (node.lfd >= 0 && n > 1 && pf[1].fd == node.lfd && pf[1].revents)
		node.lfd_blocked = 0;
	for (struct conn *c = node.conns; c; c = c->next)
		if (c->pfi < n && pf[c->pfi].fd == c->fd && pf[c->pfi].revents)
			c->rx_blocked = 0;
	if (!links_pollable())
		return;
	for (struct ncomm *nc = node.comms; nc; nc = nc->next) {
		if (nc->stage != NC_ATTACHED)
			continue;
		for (uint32_t i = 0; i < nc->nlinks; i++) {
			const struct link *l = &nc->links[i];

			if (l->comm && l->pf_n && l->pf_at + l->pf_n <= n)
				net_tcp_poll_seen(l->comm, pf + l->pf_at, (int)l->pf_n);
		}
		if (nc->p2p && nc->p2p_pf_n && nc->p2p_pf_at + nc->p2p_pf_n <= n)
			np2p_poll_seen(nc->p2p, pf + nc->p2p_pf_at, (int)nc->p2p_pf_n);
	}
}

enum poll_mode {
	POLL_SLEEP, /* until something can move */
	POLL_PEEK,  /* no sleep, only a look at what became ready */
	POLL_YIELD, /* the same look, after giving the core to whoever waits for it */
};

/*
 * Sleeps until something can move: the eventfd (the scheduler called in,
 * or a rank posted on a watched link), a connection, or a data socket that
 * became readable or writable. The timeout only paces heartbeats and
 * retries; nap: links come up, or a transport without pollable sockets has
 * steps in flight (the connections polled for NAP_NS); fast: rings that
 * cannot be watched are in use, so the sockets are polled with a timeout of
 * NAP_NS. Other modes than POLL_SLEEP do not sleep.
 */
static void sleep_poll(int nap, int fast, enum poll_mode mode)
{
	int peek = mode != POLL_SLEEP;
	size_t want = 2 + node.nconns, n = 0;
	int timeout = (int)(node.timeout_ms / 8 > 50 ? 50 : node.timeout_ms / 8);
	int data = links_pollable(); /* the links' and pair places' sockets too */
	struct timespec nap_ts = { 0, NAP_NS };
	struct pollfd *pf;
	int r;

	if (nap && !data)
		fast = 1; /* the transport's steps are polled on this timer */
	else if (nap)
		timeout = 1; /* links coming up: connect and accept have no sockets to show */
	if (peek) {
		timeout = 0;
		fast = 0;
	}
	for (struct ncomm *nc = node.comms; nc && data; nc = nc->next)
		if (nc->stage == NC_ATTACHED)
			want += (size_t)(nc->nlinks + 2 * nc->ndaemons) * (1 + NET_TCP_MAX_STREAMS);
	pf = pollset(want);
	if (!pf) {
		static struct pollfd two[2];

		/* No memory for the whole set: the eventfd and the listener, polled often. */
		timeout = 1;
		pf = two;
		want = 2;
	}
	pf[n++] = (struct pollfd){ .fd = node.efd, .events = POLLIN };
	if (node.lfd >= 0)
		pf[n++] = (struct pollfd){ .fd = node.lfd, .events = POLLIN };
	for (struct conn *c = node.conns; c && n < want; c = c->next)
		if (c->fd >= 0)
			pf[c->pfi = (uint32_t)n++] = (struct pollfd){
				.fd = c->fd,
				.events = (short)(POLLIN | (c->state == C_CONNECTING ||
									    c->out_off < c->out_len
								    ? POLLOUT
								    : 0))
			};
	for (struct ncomm *nc = node.comms; nc && n < want && data; nc = nc->next) {
		if (nc->stage != NC_ATTACHED)
			continue;
		for (uint32_t i = 0; i < nc->nlinks && n < want; i++) {
			struct link *l = &nc->links[i];

			l->pf_at = (uint32_t)n;
			l->pf_n = l->comm ? (uint32_t)net_tcp_pollfds(l->comm, pf + n,
								      (int)(want - n))
					  : 0;
			n += l->pf_n;
		}
		if (nc->p2p && n < want) {
			nc->p2p_pf_at = (uint32_t)n;
			nc->p2p_pf_n = (uint32_t)np2p_pollfds(nc->p2p, pf + n, (int)(want - n));
			n += nc->p2p_pf_n;
		}
	}
	node_unlock();
	if (mode == POLL_YIELD)
		sched_yield();
	r = fast ? ppoll(pf, n, &nap_ts, NULL) : poll(pf, n, timeout);
	if (r > 0 && (pf[0].revents & POLLIN))
		(void)eventfd_read(node.efd, &(eventfd_t){ 0 });
	pthread_mutex_lock(&node.mu);
	if (r > 0)
		poll_seen(pf, n);
}

static void *node_main(void *arg)
{
	uint64_t idle_since = 0;

	(void)arg;
	pthread_setname_np(pthread_self(), "collc-node");
	pthread_mutex_lock(&node.mu);
	while (!node.stopping) {
		uint64_t now = mono_ns(), rx = node.rx_msgs;
		int moved = reqs_run(), nap = 0, fast = 0;
		int busy = load_relaxed(&node.inflight) != 0;

		accept_conns();
		conns_step(now);
		moved |= comms_step(now, &busy, &nap, &fast) | (node.rx_msgs != rx);
		if (moved) {
			idle_since = 0;
			/* What this pass told the scheduler leaves now, not at the next sleep. */
			if (node.kick) {
				node_unlock();
				pthread_mutex_lock(&node.mu);
			}
			continue;
		}
		/*
		 * While collectives across daemons are in flight or asked about,
		 * keep looking for net_spin_us after the last thing that moved (a
		 * link's step or a control message), yielding the core between
		 * looks so that a thread woken on it (the scheduler, a rank) runs
		 * at once (NET_SPIN_US says why), then sleep until an event: the
		 * ranks' posts (exec_link.watch), the sockets, or the scheduler's
		 * calls; rings without a watch (the grid's) are polled every
		 * NAP_NS while their communicator has a collective in flight.
		 */
		if (!idle_since)
			idle_since = now;
		if (busy && now - idle_since < node.spin_ns) {
			sleep_poll(0, 0, POLL_YIELD);
			continue;
		}
		/* A rank posted meanwhile: go on, but take in what the sockets have first. */
		if (!nap && sleep_prepare()) {
			sleep_poll(0, 0, POLL_PEEK);
			continue;
		}
		store_relaxed(&reqs.asleep, 1u);
		/* Q3': pairs with Q3 in req_push(). */
		fence_seq_cst();
		if (load_relaxed(&reqs.head) == reqs.tail)
			sleep_poll(nap, fast, POLL_SLEEP);
		store_relaxed(&reqs.asleep, 0u);
	}
	node_unlock();
	return NULL;
}

static void net_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
		       const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	(void)flags;
	(void)file;
	(void)line;
	if (level != NCCL_LOG_WARN && level != NCCL_LOG_INFO)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (level == NCCL_LOG_WARN)
		log_warn("%s", msg);
	else
		log_debug("%s", msg);
}

/* The keys that may change while collcd runs (node_configure()), as start-up takes them too. */
static void take_keys(const struct collc_config *cfg)
{
	node.timeout_ms = cfg->net_timeout_ms;
	node.hier_min_bytes = cfg->net_hier_min_bytes;
	node.max_chan = cfg->net_channels;
	node.spin_ns = (uint64_t)cfg->net_spin_us * 1000;
}

static int init_locked(const struct collc_config *cfg, const uint8_t node_id[16])
{
	struct net_tcp_opts to = { .ifname = cfg->net_ifname[0] ? cfg->net_ifname : NULL,
				   .nstreams = (int)cfg->net_tcp_streams,
				   .poll_driven = 1,
				   .helpers = (int)cfg->net_tcp_helpers };
	struct net_ib_opts io = { .ifname = to.ifname };
	char cc[sizeof(cfg->net_tcp_congestion)];
	int r;

	memcpy(node.node_id, node_id, sizeof(node.node_id));
	reqs.on = collc_small_host();
	take_keys(cfg);
	if (!cfg->listen[0])
		return 0;
	r = parse_listen(cfg->listen, &node.laddr);
	if (r < 0) {
		log_err("listen must be ADDR:PORT or [ADDR6]:PORT, got '%s'", cfg->listen);
		return r;
	}
	if (strcmp(cfg->net, "auto") && strcmp(cfg->net, "tcp") && strcmp(cfg->net, "ib") &&
	    strncmp(cfg->net, "plugin:", 7)) {
		log_err("net must be auto, tcp, ib or plugin:NAME, got '%s'", cfg->net);
		return -EINVAL;
	}
	cfg_tcp_congestion_pick(cfg->net_tcp_congestion, cc, sizeof(cc));
	r = collc__net_set_congestion(cc);
	if (r < 0) {
		log_err("net_tcp_congestion '%s': %s (see /proc/sys/net/ipv4/"
			"tcp_available_congestion_control)",
			cfg->net_tcp_congestion,
			r == -ENOENT ? "not available here" : strerror(-r));
		return r;
	}
	if (!strcmp(cfg->net_tcp_congestion, "auto") && cc[0]) {
		char ns[32];

		cfg_tcp_congestion("", ns, sizeof(ns));
		log_info("net_tcp_congestion auto: sockets to other daemons take %s, not the "
			 "namespace's %s",
			 cc, ns);
	}
	net_tcp_configure(&to);
	net_ib_configure(&io);
	/* auto: a plugin named the way NCCL takes one, else ib where it runs, else tcp. */
	r = net_load(cfg->net, getenv("NCCL_NET_PLUGIN"), net_logger, &node.t);
	if (r < 0) {
		log_err("net %s: %s", cfg->net, strerror(-r));
		return r;
	}
	net_auth_init(&node.auth, auth_lookup, NULL);
	node.auth.timeout_ms = (int)node.timeout_ms;
	node.lfd = collc__net_listen(&node.laddr, 128, 1);
	if (node.lfd < 0) {
		r = node.lfd;
		log_err("listen %s: %s", cfg->listen, strerror(-r));
		goto err_unload;
	}
	/* Port 0 asked for any: name the port we got. */
	addr_str(&node.laddr, node.listen_str, sizeof(node.listen_str));
	if ((node.laddr.sa.sa_family == AF_INET && node.laddr.in.sin_addr.s_addr == INADDR_ANY) ||
	    (node.laddr.sa.sa_family == AF_INET6 &&
	     IN6_IS_ADDR_UNSPECIFIED(&node.laddr.in6.sin6_addr))) {
		/* Ids must name an address others reach: the data interface's. */
		union net_addr ifa;
		char ifn[IF_NAMESIZE];
		uint16_t port = node.laddr.in.sin_port;

		if (collc__net_pick_if(to.ifname, ifn, &ifa) == 0 &&
		    ifa.sa.sa_family == node.laddr.sa.sa_family) {
			if (ifa.sa.sa_family == AF_INET) {
				node.laddr.in.sin_addr = ifa.in.sin_addr;
			} else {
				port = node.laddr.in6.sin6_port;
				node.laddr.in6.sin6_addr = ifa.in6.sin6_addr;
				node.laddr.in6.sin6_port = port;
			}
		}
	}
	node.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (node.efd < 0) {
		r = -errno;
		goto err_close;
	}
	node.stopping = 0;
	r = -pthread_create(&node.thread, NULL, node_main, NULL);
	if (r < 0)
		goto err_efd;
	node.running = 1;
	log_info("listening for collcd daemons on %s (net %s)", node.listen_str, node.t.what);
	return 0;

err_efd:
	close(node.efd);
	node.efd = -1;
err_close:
	close(node.lfd);
	node.lfd = -1;
err_unload:
	net_unload(&node.t);
	return r;
}

int node_init(const struct collc_config *cfg, const uint8_t node_id[16])
{
	int r;

	/* The scheduler runs already (node_configure): start under the lock. */
	pthread_mutex_lock(&node.mu);
	r = init_locked(cfg, node_id);
	node_unlock();
	return r;
}

void node_fini(void)
{
	if (!node.running)
		return;
	pthread_mutex_lock(&node.mu);
	node.stopping = 1;
	wake();
	node_unlock();
	pthread_join(node.thread, NULL);
	pthread_mutex_lock(&node.mu);
	while (node.comms)
		nc_free(node.comms);
	for (struct conn *c = node.conns, *next; c; c = next) {
		next = c->next;
		conn_close(c);
		conn_free(c);
	}
	node.conns = NULL;
	node.nconns = 0;
	node.running = 0;
	close(node.lfd);
	node.lfd = -1;
	/*
	 * The eventfd stays open: a rank of a communicator the executor has not
	 * torn down yet may still write it (exec_link.watch); collcd exits next.
	 */
	node_unlock();
	/* A plugin's code may still be named by freed comms' logs: unload last. */
	net_unload(&node.t);
}

void node_listen_addr(uint16_t *ret_family, uint16_t *ret_port, uint8_t ret_addr[16])
{
	struct wire_addr w;

	/* Fixed once node_init() returned, before the control socket opens. */
	if (!node.running) {
		*ret_family = 0;
		return;
	}
	addr_to_wire(&node.laddr, &w);
	*ret_family = w.family;
	*ret_port = w.port;
	memcpy(ret_addr, w.addr, 16);
}

/* What a request reads of its caller's memory: it runs before the call returns, never queued. */
struct req_mem {
	const struct iovec *parts, *land; /* REQ_READY (node_coll_ready()) */
	uint32_t nparts, nland;
};
static const struct req_mem req_none;
static void req_run(const struct node_req *q, const struct req_mem *m);

/* With node.mu held: runs what the scheduler queued, in its order. Returns 1 if any. */
static int reqs_run(void)
{
	/* Q1': pairs with Q1 in req_push(): the request is whole. */
	const uint64_t t0 = reqs.tail, h = load_acquire(&reqs.head);

	for (uint64_t t = t0; t != h; t++) {
		struct node_req q = reqs.q[t % NODE_REQS];

		/* Q2: pairs with Q2' in req_push(): the slot was read, it may be written again. */
		store_release(&reqs.tail, t + 1);
		req_run(&q, &req_none);
	}
	return h != t0;
}

/* Scheduler thread: node.mu, with what it queued before run first. */
static void lock_sched(void)
{
	pthread_mutex_lock(&node.mu);
	reqs_run();
}

/* Scheduler thread: 0 when the ring is full. */
static int req_push(const struct node_req *q)
{
	uint64_t h = reqs.head;

	/* Q2': pairs with Q2 in reqs_run(). */
	if (h - load_acquire(&reqs.tail) >= NODE_REQS)
		return 0;
	reqs.q[h % NODE_REQS] = *q;
	/* Q1: pairs with Q1' in reqs_run(). */
	store_release(&reqs.head, h + 1);
	/*
	 * Q3: pairs with Q3' in node_main(): either the thread sees the
	 * request before it sleeps, or we see it asleep and wake it. The
	 * eventfd outlives node_fini() (it stays open), so no lock is needed.
	 */
	fence_seq_cst();
	if (load_relaxed(&reqs.asleep))
		(void)eventfd_write(node.efd, 1);
	return 1;
}

/*
 * Scheduler thread: runs q at once if node.mu is free; if the node thread
 * holds it, queues q on a small host (reqs.on), and waits for the lock
 * otherwise, where q reads the caller's memory (m) or the queue is full.
 */
static void req_call(const struct node_req *q, const struct req_mem *m)
{
	if (pthread_mutex_trylock(&node.mu) != 0) {
		if (reqs.on && m == &req_none && req_push(q))
			return;
		pthread_mutex_lock(&node.mu);
	}
	reqs_run();
	req_run(q, m);
	if (q->type != REQ_INFLIGHT || q->delta > 0)
		wake();
	node_unlock();
}

void node_configure(const struct collc_config *cfg)
{
	lock_sched();
	take_keys(cfg);
	node.auth.timeout_ms = (int)cfg->net_timeout_ms;
	wake();
	node_unlock();
}

int node_uid_remote(const struct collc_uid *uid)
{
	return uid->version == COLLC_UID_VERSION_NET && uid->net_family &&
	       memcmp(uid->node_id, node.node_id, sizeof(uid->node_id)) != 0;
}

int node_join(uint64_t comm_id, const struct collc_uid *uid, uint32_t nranks, uint32_t rank,
	      int32_t device)
{
	struct ncomm *nc;
	int r = 0;

	if (uid->net_family != AF_INET && uid->net_family != AF_INET6)
		return -EINVAL;
	lock_sched();
	if (!node.running) {
		r = -ENOTSUP;
		goto out;
	}
	nc = nc_by_id(comm_id);
	if (!nc) {
		nc = calloc(1, sizeof(*nc));
		if (nc)
			nc->handles = calloc(COLLC_MAX_RANKS, sizeof(*nc->handles));
		if (!nc || !nc->handles) {
			free(nc);
			r = -ENOMEM;
			goto out;
		}
		nc->id = comm_id;
		memcpy(nc->nonce, uid->nonce, sizeof(nc->nonce));
		memcpy(nc->secret, uid->secret, sizeof(nc->secret));
		nc->nranks = nranks;
		nc->root = memcmp(uid->node_id, node.node_id, sizeof(uid->node_id)) == 0;
		nc->min_chan = node.max_chan; /* the root's own offer */
		nc->deadline_ns = mono_ns() + JOIN_TIMEOUT_NS;
		if (nc->root) {
			nc->ndaemons = 1;
			addr_to_wire(&node.laddr, &nc->daemons[0]);
		} else {
			struct wire_addr w = { .family = uid->net_family, .port = uid->net_port };

			memcpy(w.addr, uid->net_addr, 16);
			wire_to_addr(&w, &nc->root_addr);
			nc->daemons[0] = w;
		}
		nc->next = node.comms;
		node.comms = nc;
	}
	if (nc->stage != NC_JOINING || rank >= nc->nranks || nc->have[rank]) {
		r = -EINVAL;
		goto out;
	}
	r = nc_listen_rank(nc, rank);
	if (r < 0)
		goto out;
	nc->have[rank] = 1;
	nc->gpu[rank] = device >= 0;
	if (nc->root) {
		nc->ngpu += device >= 0;
		nc->owner[rank] = 0;
		if (++nc->nreg == nc->nranks)
			root_complete(nc);
	} else {
		joiner_send_regs(nc);
	}
out:
	wake();
	node_unlock();
	return r;
}

int node_comm_attach(uint64_t comm_id, const struct exec_backend *ex, void *priv)
{
	struct ncomm *nc;
	int r = 0;

	if (!ex->comm_link)
		return -ENOTSUP;
	lock_sched();
	nc = nc_by_id(comm_id);
	if (!nc || nc->stage != NC_READY) {
		r = nc && nc->stage == NC_DEAD ? nc->err : -EPIPE;
		goto out;
	}
	for (uint32_t i = 0; i < nc->nlinks && r == 0; i++)
		r = link_attach(nc, &nc->links[i], ex, priv);
	if (r < 0) {
		nc->told = 1;
		nc_fail(nc, r, 0);
		goto out;
	}
	nc->stage = NC_ATTACHED;
out:
	wake();
	node_unlock();
	return r;
}

void node_comm_revoke(uint64_t comm_id, int err)
{
	struct ncomm *nc;

	lock_sched();
	nc = nc_by_id(comm_id);
	if (nc) {
		nc->told = 1;
		nc_fail(nc, err, 0);
	}
	wake();
	node_unlock();
}

void node_comm_release(uint64_t comm_id)
{
	struct ncomm *nc;

	lock_sched();
	nc = nc_by_id(comm_id);
	if (nc) {
		if (nc->stage != NC_DEAD) {
			/* Destroyed by its ranks: the other daemons see the hang-up. */
			nc->told = 1;
			nc_fail(nc, -EPIPE, 0);
		}
		nc_free(nc);
	}
	wake();
	node_unlock();
}

/*
 * Two daemons: where the other daemon's inputs of d may land (node.h), kept
 * while our own view, with the inputs we sent, is all that is here.
 */
static void land_keep(struct ncomm *nc, const struct node_coll *d, const struct iovec *land,
		      uint32_t nland)
{
	struct agree *a = &nc->agree[d->seq % AGREE_WINDOW];

	if (!nland || nland > NODE_LAND_MAX || !node_eager_pair(d, nc->ndaemons, nc->nranks) ||
	    !a->used || a->seq != d->seq || a->ndesc != 1 || !a->sent_in || a->peer_in ||
	    a->peer_landed || a->bad)
		return;
	memcpy(a->land, land, nland * sizeof(*land));
	a->nland = nland;
}

static void coll_ready(uint64_t comm_id, const struct node_coll *d, const struct iovec *parts,
		       uint32_t nparts, const struct iovec *land, uint32_t nland)
{
	struct node_coll sent = *d;
	struct ncomm *nc;
	int r = 0;

	nc = nc_by_id(comm_id);
	if (nc && nc->stage == NC_ATTACHED) {
		nc->asked++;
		if (nc->root) {
			r = root_coll(nc, d, nc->me, NULL, parts, nparts);
		} else {
			/* No room for the inputs: ask plainly (the ring runs). */
			if (!conn_room(nc->ctl, sizeof(sent) + iov_bytes(parts, nparts)))
				sent.eager = 0;
			if (conn_sendv(nc->ctl, M_COLL, &sent, sizeof(sent), parts,
				       sent.eager ? nparts : 0) < 0)
				r = -EPIPE;
			else if (node_eager_pair(&sent, nc->ndaemons, nc->nranks))
				r = joiner_pair(nc, &sent, NULL, NULL);
		}
		if (r < 0)
			nc_fail(nc, r, 1);
		else
			land_keep(nc, d, land, nland);
	}
}

void node_coll_ready(uint64_t comm_id, const struct node_coll *d, const struct iovec *parts,
		     uint32_t nparts, const struct iovec *land, uint32_t nland)
{
	struct node_req q = { .type = REQ_READY, .comm_id = comm_id, .d = *d };
	const struct req_mem m = { .parts = parts, .nparts = nparts, .land = land, .nland = nland };

	req_call(&q, nparts || nland ? &m : &req_none);
}

/*
 * Did a rank here receive what the daemons did not agree to (a hostile or
 * broken peer)? P1': pairs with P1 in the CPU executor (run_item()) and in
 * the grid (cuda/device/prims.h): the scheduler acquired the item's
 * work_consumed before it asks.
 */
static int nc_broken(const struct ncomm *nc)
{
	for (uint32_t i = 0; i < nc->nlinks; i++)
		if (nc->links[i].attached && nc->links[i].el.broken &&
		    load_acquire(nc->links[i].el.broken))
			return 1;
	return 0;
}

static void coll_done(uint64_t comm_id, uint64_t seq)
{
	struct m_seq m = { .seq = seq };
	struct ncomm *nc;
	int r = 0;

	nc = nc_by_id(comm_id);
	if (nc && nc->stage == NC_ATTACHED && nc_broken(nc)) {
		log_err("communicator %llu: collective %llu received data the daemons did not agree "
			"to: failing it everywhere",
			(unsigned long long)nc->id, (unsigned long long)seq);
		node.proto_errors++;
		nc_fail(nc, -EPROTO, 1);
	} else if (nc && nc->stage == NC_ATTACHED) {
		if (nc->root)
			r = root_done(nc, seq);
		else
			r = conn_send(nc->ctl, M_DONE, &m, sizeof(m)) < 0 ? -EPIPE : 0;
		if (r < 0)
			nc_fail(nc, r, 1);
	}
}

void node_coll_done(uint64_t comm_id, uint64_t seq, int ended)
{
	struct node_req q = { .type = REQ_DONE, .comm_id = comm_id, .seq = seq, .ended = !!ended };

	req_call(&q, &req_none);
}

void node_inflight(uint64_t comm_id, int delta)
{
	struct node_req q = { .type = REQ_INFLIGHT, .comm_id = comm_id, .delta = delta };

	req_call(&q, &req_none);
}

static void req_run(const struct node_req *q, const struct req_mem *m)
{
	struct ncomm *nc;

	switch (q->type) {
	case REQ_READY:
		coll_ready(q->comm_id, &q->d, m->parts, m->nparts, m->land, m->nland);
		break;
	case REQ_DONE:
		coll_done(q->comm_id, q->seq);
		node.early_ends += q->ended;
		break;
	case REQ_INFLIGHT:
		nc = nc_by_id(q->comm_id);
		if (nc)
			nc->inflight += (uint64_t)(int64_t)q->delta;
		fetch_add(&node.inflight, (uint32_t)q->delta);
		break;
	}
}

int node_p2p_post(uint64_t comm_id, const struct node_p2p *p)
{
	struct ncomm *nc;
	int r;

	lock_sched();
	nc = nc_by_id(comm_id);
	if (!nc || !nc->p2p || (nc->stage != NC_READY && nc->stage != NC_ATTACHED)) {
		r = nc && nc->stage == NC_DEAD ? nc->err : -EPIPE;
	} else {
		r = np2p_post(nc->p2p, p);
		/* Past its start: the send or receive is the communicator's now. */
		if (r < 0 && r != -EINVAL && r != -ENOMEM)
			nc_fail(nc, r, 1);
	}
	wake();
	node_unlock();
	return r;
}

int node_p2p_expire(uint64_t comm_id, uint64_t cookie)
{
	struct ncomm *nc;
	int r = 0;

	lock_sched();
	nc = nc_by_id(comm_id);
	/* Failed: the scheduler's revocation ends it. */
	if (nc && nc->p2p)
		r = np2p_expire(nc->p2p, cookie);
	wake();
	node_unlock();
	return r;
}

void node_counters(struct node_counters *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&node.mu);
	out->running = (uint32_t)node.running;
	out->accepted = node.auth.accepted;
	out->eager = node.eager;
	out->eager_landed = node.landed;
	out->early_ends = node.early_ends;
	out->refused = node.refused_full;
	for (int i = 1; i < NET_AUTH_NREASONS; i++)
		out->refused += node.auth.refused[i];
	out->bytes_sent = node.gone_sent;
	out->bytes_received = node.gone_recv;
	for (struct conn *c = node.conns; c; c = c->next) {
		out->bytes_sent += c->bytes_sent;
		out->bytes_received += c->bytes_recv;
		out->peers += c->state == C_UP;
	}
	for (struct ncomm *nc = node.comms; nc; nc = nc->next) {
		for (uint32_t i = 0; i < nc->nlinks; i++) {
			if (nc->links[i].dir == L_SEND)
				out->bytes_sent += nc->links[i].bytes;
			else
				out->bytes_received += nc->links[i].bytes;
		}
		out->bytes_sent += nc->p2p_gone_sent;
		out->bytes_received += nc->p2p_gone_recv;
		for (uint32_t d = 0; nc->p2p && d < nc->ndaemons; d++) {
			uint64_t sent, recvd;

			np2p_bytes(nc->p2p, d, &sent, &recvd);
			out->bytes_sent += sent;
			out->bytes_received += recvd;
		}
	}
	node_unlock();
}

static const char *stage_name(int s)
{
	static const char *const names[] = { "joining", "linking", "ready", "up", "failed" };

	return s >= 0 && s <= NC_DEAD ? names[s] : "?";
}

size_t node_status(char *out, size_t len, int json)
{
	size_t n = 0;
	uint64_t refused = 0;
	int first = 1;
	char cc[32];

#define PUT(...)                                                                                   \
	do {                                                                                       \
		if (n < len)                                                                       \
			n += (size_t)snprintf(out + n, len - n, __VA_ARGS__);                      \
	} while (0)
	if (!len)
		return 0;
	out[0] = '\0';
	pthread_mutex_lock(&node.mu);
	if (!node.running) {
		node_unlock();
		if (json)
			PUT("{\"transport\": \"off\", \"listen\": \"\", \"peers\": []}");
		else
			PUT("net: off\n");
		return n < len ? n : len - 1;
	}
	for (int i = 1; i < NET_AUTH_NREASONS; i++)
		refused += node.auth.refused[i];
	refused += node.refused_full;
	cfg_tcp_congestion(collc__net_congestion(), cc, sizeof(cc));
	if (json)
		PUT("{\"transport\": \"%s\", \"listen\": \"%s\", \"tcp_congestion\": \"%s\", "
		    "\"accepted\": %llu, \"refused\": %llu, \"refused_by_reason\": {",
		    node.t.what, node.listen_str, cc, (unsigned long long)node.auth.accepted,
		    (unsigned long long)refused);
	else
		PUT("net: %s, listening on %s, TCP congestion control %s, %llu handshakes accepted, "
		    "%llu refused, %llu eager (%llu received in place), %llu ended before every "
		    "daemon ran them, %llu B received straight into rank buffers\n",
		    node.t.what, node.listen_str, cc, (unsigned long long)node.auth.accepted,
		    (unsigned long long)refused, (unsigned long long)node.eager,
		    (unsigned long long)node.landed, (unsigned long long)node.early_ends,
		    (unsigned long long)node.recv_direct);
	for (int i = 1; json && i < NET_AUTH_NREASONS; i++)
		PUT("%s\"%s\": %llu", i > 1 ? ", " : "", net_auth_reason_name(i),
		    (unsigned long long)node.auth.refused[i]);
	if (json)
		PUT("}, \"protocol_errors\": %llu, \"eager\": %llu, \"eager_landed\": %llu, "
		    "\"early_ends\": %llu, \"received_direct\": %llu, \"peers\": [",
		    (unsigned long long)node.proto_errors, (unsigned long long)node.eager,
		    (unsigned long long)node.landed, (unsigned long long)node.early_ends,
		    (unsigned long long)node.recv_direct);
	/* One entry per (communicator, other daemon). */
	for (struct ncomm *nc = node.comms; nc; nc = nc->next) {
		for (uint32_t d = 0; d < (nc->ndaemons ? nc->ndaemons : 1); d++) {
			uint64_t sent = 0, recvd = 0;
			union net_addr a;
			char as[80];

			if (d == nc->me && nc->ndaemons)
				continue;
			if (nc->root && !nc->peers[d] && nc->stage == NC_JOINING)
				continue;
			for (uint32_t i = 0; i < nc->nlinks; i++) {
				if (nc->links[i].peer != d)
					continue;
				if (nc->links[i].dir == L_SEND)
					sent += nc->links[i].bytes;
				else
					recvd += nc->links[i].bytes;
			}
			if (nc->p2p) {
				uint64_t ps, pr;

				np2p_bytes(nc->p2p, d, &ps, &pr);
				sent += ps;
				recvd += pr;
			}
			if (nc->root && nc->peers[d]) {
				sent += nc->peers[d]->bytes_sent;
				recvd += nc->peers[d]->bytes_recv;
			} else if (!nc->root && d == 0 && nc->ctl) {
				sent += nc->ctl->bytes_sent;
				recvd += nc->ctl->bytes_recv;
			}
			wire_to_addr(&nc->daemons[d], &a);
			addr_str(&a, as, sizeof(as));
			if (json) {
				PUT("%s{\"addr\": \"%s\", \"comm\": %llu, \"role\": \"%s\", "
				    "\"state\": \"%s\", \"bytes_sent\": %llu, "
				    "\"bytes_received\": %llu, \"inflight\": %llu, \"errors\": %llu, "
				    "\"ring\": [",
				    first ? "" : ", ", as, (unsigned long long)nc->id,
				    d == 0 ? "root" : "member", stage_name(nc->stage),
				    (unsigned long long)sent, (unsigned long long)recvd,
				    (unsigned long long)nc->inflight,
				    (unsigned long long)(nc->errors + nc->p2p_errors +
							 np2p_errors(nc->p2p)));
			} else {
				PUT("  peer %s (%s) comm %llu: %s, sent %llu B, received %llu B, "
				    "%llu in flight, %llu errors%s",
				    as, d == 0 ? "root" : "member", (unsigned long long)nc->id,
				    stage_name(nc->stage), (unsigned long long)sent,
				    (unsigned long long)recvd, (unsigned long long)nc->inflight,
				    (unsigned long long)(nc->errors + nc->p2p_errors +
							 np2p_errors(nc->p2p)),
				    nc->links ? ", ring" : "");
			}
			/* The communicator's ring, once the table ordered it. */
			for (uint32_t p = 0; nc->links && p < nc->nranks; p++) {
				if (json)
					PUT("%s%u", p ? ", " : "", nc->ring[p]);
				else
					PUT(" %u", nc->ring[p]);
			}
			/* Its agreed channels; group rings: each daemon's block (hierarchical). */
			if (json) {
				PUT("], \"channels\": %u, \"group\": %u, \"hier_min_bytes\": %llu}",
				    nc->links ? nc->nchan : 0, nc->group,
				    (unsigned long long)nc->hier_min_bytes);
			} else {
				if (nc->links)
					PUT(", %u channel%s", nc->nchan, nc->nchan == 1 ? "" : "s");
				if (nc->group)
					PUT(", groups of %u (hierarchical from %llu B)", nc->group,
					    (unsigned long long)nc->hier_min_bytes);
				PUT("\n");
			}
			first = 0;
		}
	}
	if (json)
		PUT("]}");
	node_unlock();
#undef PUT
	return n < len ? n : len - 1;
}
