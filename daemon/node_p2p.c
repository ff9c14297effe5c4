/* SPDX-License-Identifier: MIT */
/*
 * Sends and receives between daemons (node_p2p.h).
 *
 * Per pair of daemons of a communicator, a data link each way. On it go
 * 48-byte messages (struct p_msg), each a transport message of its own:
 *   CTS    receiver's daemon -> sender's: receive pseq of (s, r) is posted,
 *          with its count, dtype and error (clear to send);
 *   DATA   sender's -> receiver's: the payload of (s, r, pseq) follows, in
 *          transport messages of at most P2P_CHUNK bytes, straight from the
 *          send buffer into the receive buffer where they are host memory
 *          mapped in collcd, else through host staging (below);
 *   NACK   sender's -> receiver's: the pair ends with err (counts or dtypes
 *          differ, either side failed validation, or it timed out);
 *   CANCEL receiver's -> sender's: the receive timed out; the sender's
 *          daemon answers NACK(-ETIMEDOUT) unless the data already left;
 *   ACK    receiver's -> sender's: the payload landed; only then does the
 *          send end, so a rank that returns from its send and destroys the
 *          communicator never cuts off the receiver.
 * The sender's daemon alone matches a send with its receive, so a pair
 * ends alike on both sides. A receive's buffer stays posted until DATA or
 * NACK comes, so nothing ever waits for a buffer: each link carries its
 * messages in order, and no pair waits for another.
 *
 * A peer breaking this protocol (an unknown pair, a wrong length, a
 * duplicate) fails the communicator with -EPROTO and is counted.
 *
 * Host staging, as NCCL's net transport does without GPUDirect: a buffer
 * of an executor's memory (a GPU's, node_p2p.ex) is never handed to the
 * transport. Each link has P2P_STAGE slots of P2P_CHUNK bytes each way,
 * allocated at its first such payload and reused (pinned with the
 * executor's host_map where it has one). A send's chunk is copied into the
 * next free send slot (ex->copy, device to host) and isent from there; the
 * slot is free again once the transport says that isend is done. A
 * receive's chunk is irecvd into the next free receive slot and copied out
 * (host to device) when it landed, before the next chunk may use that slot
 * and before the ACK. Slots are taken and freed in the order of the link's
 * requests (s_head, r_head), so each way is a ring. Only this file's
 * caller touches them, under node.c's lock: the copies run there, on the
 * node thread (np2p_step), and the transport's own threads read or write a
 * slot only between its isend/irecv and the test() that reports it done.
 * The wire is the same either way, so either side may be staged or not.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "daemon/log.h"
#include "daemon/node_p2p.h"
#include "proto/dtype.h"

#define P_MAGIC     0x50324e43u /* "CN2P" */
#define P2P_CHUNK   (4u << 20)
#define P2P_REQS    16u        /* transport requests one link keeps in flight */
#define P2P_CTS_MAX (1u << 16) /* clear-to-sends waiting for their send, per communicator */
#define P2P_STAGE   4u         /* staging slots of P2P_CHUNK, per link and way */

enum { P_CTS = 1, P_DATA, P_NACK, P_CANCEL, P_ACK, P_TYPE_MAX };

struct p_msg {
	uint32_t magic;
	uint16_t type;
	uint16_t reserved;
	uint32_t sender, receiver;
	uint32_t dtype;
	int32_t err;
	uint64_t pseq;
	uint64_t count;
	uint64_t bytes;
};
_Static_assert(sizeof(struct p_msg) == 48, "p_msg wire size");

/* Where one send or receive of a rank here stands. */
enum { O_WAIT, O_MOVING, O_DONE };

struct pop {
	struct pop *next;
	struct node_p2p d;
	uint32_t peer; /* the other rank's daemon */
	int state;
	int sent, acked; /* send: the transport took every byte; the receiver said so */
	int cancelled;   /* receive: CANCEL went out */
	void *mh;        /* buf's registration with the link moving it */
	void *mh_comm;
};

/* A receive's clear-to-send that came before its send was posted here. */
struct pcts {
	struct pcts *next;
	struct p_msg m;
	uint32_t peer;
	int cancelled; /* the receive timed out: its send ends with -ETIMEDOUT */
};

/* A message waiting for the send link: a header, then DATA's payload. */
struct omsg {
	struct omsg *next;
	struct p_msg m;
	struct pop *op; /* DATA */
	int hdr_posted;
	int staged;   /* the next chunk (at off) is in the next send slot already */
	uint64_t off; /* payload bytes posted */
};

struct sreq {
	void *req;
	struct pop *op; /* the last piece of op's payload (or its empty DATA) */
	uint64_t bytes;
	int staged; /* it holds a send slot */
};

struct rreq {
	void *req;
	struct pop *op; /* payload piece; NULL: the header */
	uint64_t bytes;
	int last;
	char *stage; /* the receive slot it lands in; NULL: straight into dst */
	char *dst;   /* staged: where the chunk goes (op's buffer) */
};

/* P2P_STAGE slots of P2P_CHUNK bytes, one way of a link (the ring above). */
struct stage {
	char *buf; /* NULL until the link's first staged payload that way */
	void *mh;  /* its registration with the link's comm */
	void *map; /* ex->host_map's handle (the executor unmaps it); NULL: ours to munmap */
	const struct exec_backend *ex;
	uint32_t next, used; /* slot next % P2P_STAGE is the next taken; used are taken */
};

struct peer {
	void *listen;
	uint8_t handle[NCCL_NET_HANDLE_MAXSIZE]; /* its listen for us; kept across connect() */
	int have_handle;
	void *scomm, *rcomm;
	struct p_msg *shdr; /* P2P_REQS header slots, slot i for request i */
	struct p_msg *rhdr; /* the one header being received */
	void *shdr_mh, *rhdr_mh;
	struct omsg *oq, **oq_tail;
	struct sreq sr[P2P_REQS];
	uint32_t s_head, s_tail;
	struct rreq rr[P2P_REQS];
	uint32_t r_head, r_tail;
	int hdr_posted;
	struct pop *r_cur; /* payload still to post */
	uint64_t r_off;
	struct stage s_st, r_st;
	uint64_t sent, received;
};

struct np2p {
	const ncclNet_v8_t *net;
	uint32_t nranks, nd, me;
	uint8_t owner[COLLC_MAX_RANKS];
	struct peer *peers; /* nd, by daemon index */
	struct pop *ops;
	struct pcts *cts;
	uint32_t ncts;
	uint64_t *sends_expired; /* nranks x nranks: sends of pseq below timed out here */
	uint64_t errors;
	np2p_done_fn *done;
	void *arg;
};

struct np2p *np2p_new(const ncclNet_v8_t *net, uint32_t nranks, uint32_t ndaemons, uint32_t me,
		      const uint8_t *owner, np2p_done_fn *done, void *arg)
{
	struct np2p *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->net = net;
	p->nranks = nranks;
	p->nd = ndaemons;
	p->me = me;
	memcpy(p->owner, owner, nranks);
	p->done = done;
	p->arg = arg;
	p->peers = calloc(ndaemons, sizeof(*p->peers));
	p->sends_expired = calloc((size_t)nranks * nranks, sizeof(*p->sends_expired));
	if (!p->peers || !p->sends_expired) {
		np2p_free(p);
		return NULL;
	}
	for (uint32_t e = 0; e < ndaemons; e++)
		p->peers[e].oq_tail = &p->peers[e].oq;
	return p;
}

static void stage_free(struct stage *st)
{
	if (!st->buf)
		return;
	if (st->map)
		st->ex->host_unmap(st->map);
	else
		munmap(st->buf, (size_t)P2P_STAGE * P2P_CHUNK);
	st->buf = NULL;
}

/* One way's slots of a link, made at its first staged payload (ex: the executor it is for). */
static int stage_get(struct np2p *p, struct stage *st, void *comm, const struct exec_backend *ex)
{
	const size_t len = (size_t)P2P_STAGE * P2P_CHUNK;
	uint64_t addr;

	if (st->buf)
		return 0;
	st->buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (st->buf == MAP_FAILED) {
		st->buf = NULL;
		return -ENOMEM;
	}
	st->ex = ex;
	st->map = NULL;
	/* Pinned, the copies run at PCIe speed; unpinned they still run. */
	if (ex->host_map && ex->host_map(st->buf, len, &addr, &st->map) < 0) {
		log_warn("send/recv across daemons: staging not pinned (%s copies run slower)",
			 ex->name);
		st->map = NULL;
	}
	if (p->net->regMr(comm, st->buf, len, NCCL_PTR_HOST, &st->mh) != ncclSuccess) {
		st->mh = NULL;
		stage_free(st);
		return -EIO;
	}
	return 0;
}

static void op_unreg(struct np2p *p, struct pop *op)
{
	if (op->mh)
		p->net->deregMr(op->mh_comm, op->mh);
	op->mh = NULL;
}

void np2p_free(struct np2p *p)
{
	if (!p)
		return;
	/* Registrations first: they belong to the comms closed below. */
	for (struct pop *op = p->ops, *next; op; op = next) {
		next = op->next;
		op_unreg(p, op);
		free(op);
	}
	while (p->cts) {
		struct pcts *c = p->cts;

		p->cts = c->next;
		free(c);
	}
	for (uint32_t e = 0; p->peers && e < p->nd; e++) {
		struct peer *pe = &p->peers[e];

		while (pe->oq) {
			struct omsg *m = pe->oq;

			pe->oq = m->next;
			free(m);
		}
		if (pe->s_st.mh)
			p->net->deregMr(pe->scomm, pe->s_st.mh);
		if (pe->r_st.mh)
			p->net->deregMr(pe->rcomm, pe->r_st.mh);
		if (pe->shdr_mh)
			p->net->deregMr(pe->scomm, pe->shdr_mh);
		if (pe->rhdr_mh)
			p->net->deregMr(pe->rcomm, pe->rhdr_mh);
		if (pe->scomm)
			p->net->closeSend(pe->scomm);
		if (pe->rcomm)
			p->net->closeRecv(pe->rcomm);
		if (pe->listen)
			p->net->closeListen(pe->listen);
		/* After the comms: their threads no longer touch the slots. */
		stage_free(&pe->s_st);
		stage_free(&pe->r_st);
		free(pe->shdr);
		free(pe->rhdr);
	}
	free(p->peers);
	free(p->sends_expired);
	free(p);
}

int np2p_listen(struct np2p *p, uint8_t handles[][NCCL_NET_HANDLE_MAXSIZE])
{
	for (uint32_t e = 0; e < p->nd; e++) {
		if (e == p->me || p->peers[e].listen)
			continue;
		if (p->net->listen(0, handles[e], &p->peers[e].listen) != ncclSuccess) {
			p->peers[e].listen = NULL;
			return -EIO;
		}
	}
	return 0;
}

int np2p_peer_handle(struct np2p *p, uint32_t e, const uint8_t *handle)
{
	if (e >= p->nd || e == p->me || p->peers[e].have_handle)
		return -EPROTO;
	memcpy(p->peers[e].handle, handle, NCCL_NET_HANDLE_MAXSIZE);
	p->peers[e].have_handle = 1;
	return 0;
}

/* A link came up: its header slots, registered once. */
static int peer_setup(struct np2p *p, struct peer *pe)
{
	pe->shdr = calloc(P2P_REQS, sizeof(*pe->shdr));
	pe->rhdr = calloc(1, sizeof(*pe->rhdr));
	if (!pe->shdr || !pe->rhdr)
		return -ENOMEM;
	if (p->net->regMr(pe->scomm, pe->shdr, P2P_REQS * sizeof(*pe->shdr), NCCL_PTR_HOST,
			  &pe->shdr_mh) != ncclSuccess ||
	    p->net->regMr(pe->rcomm, pe->rhdr, sizeof(*pe->rhdr), NCCL_PTR_HOST, &pe->rhdr_mh) !=
		    ncclSuccess)
		return -EIO;
	return 0;
}

int np2p_connect(struct np2p *p)
{
	int up = 1;

	for (uint32_t e = 0; e < p->nd; e++) {
		struct peer *pe = &p->peers[e];
		ncclNetDeviceHandle_v8_t *dh = NULL;
		int was_up = pe->scomm && pe->rcomm;

		if (e == p->me || was_up)
			continue;
		if (!pe->have_handle) {
			up = 0;
			continue;
		}
		if (!pe->scomm && p->net->connect(0, pe->handle, &pe->scomm, &dh) != ncclSuccess) {
			pe->scomm = NULL;
			return -EPIPE;
		}
		if (!pe->rcomm && p->net->accept(pe->listen, &pe->rcomm, &dh) != ncclSuccess) {
			pe->rcomm = NULL;
			return -EPIPE;
		}
		if (!pe->scomm || !pe->rcomm) {
			up = 0;
			continue;
		}
		p->net->closeListen(pe->listen);
		pe->listen = NULL;
		if (peer_setup(p, pe) < 0)
			return -ENOMEM;
	}
	return up;
}

/* Ops and messages */

static void queue(struct peer *pe, struct omsg *m)
{
	m->next = NULL;
	*pe->oq_tail = m;
	pe->oq_tail = &m->next;
}

static int send_msg(struct np2p *p, uint32_t e, uint16_t type, const struct node_p2p *d, int err,
		    struct pop *op)
{
	struct omsg *m = calloc(1, sizeof(*m));

	if (!m)
		return -ENOMEM;
	m->m = (struct p_msg){ .magic = P_MAGIC,
			       .type = type,
			       .sender = d->sender,
			       .receiver = d->receiver,
			       .dtype = d->dtype,
			       .err = err,
			       .pseq = d->pseq,
			       .count = d->count,
			       .bytes = type == P_DATA ? d->bytes : 0 };
	m->op = op;
	queue(&p->peers[e], m);
	return 0;
}

static void op_unlink(struct np2p *p, struct pop *op)
{
	struct pop **pp;

	for (pp = &p->ops; *pp && *pp != op; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = op->next;
}

static void op_end(struct np2p *p, struct pop *op, int err)
{
	op_unlink(p, op);
	op_unreg(p, op);
	p->done(p->arg, op->d.cookie, err);
	free(op);
}

static struct pop *op_find(struct np2p *p, int send, uint32_t s, uint32_t r, uint64_t pseq)
{
	for (struct pop *op = p->ops; op; op = op->next)
		if ((int)op->d.send == send && op->d.sender == s && op->d.receiver == r &&
		    op->d.pseq == pseq)
			return op;
	return NULL;
}

/* Only errors a daemon reports for a pair reach the ranks; anything else is the peer's fault. */
static int err_ok(int32_t err)
{
	return err == -EINVAL || err == -ETIMEDOUT || err == -EOPNOTSUPP || err == -EOVERFLOW;
}

/* The sender's daemon: send op meets its receive's clear-to-send. */
static int match(struct np2p *p, struct pop *op, const struct p_msg *cts)
{
	int err = op->d.err ? op->d.err : cts->err;
	int r;

	if (!err && (op->d.count != cts->count || op->d.dtype != cts->dtype))
		err = -EINVAL;
	if (err) {
		r = send_msg(p, op->peer, P_NACK, &op->d, err, NULL);
		op_end(p, op, err);
		return r;
	}
	if (op->d.bytes && op->d.ex) {
		struct peer *pe = &p->peers[op->peer];

		r = stage_get(p, &pe->s_st, pe->scomm, op->d.ex);
		if (r < 0)
			return r;
	} else if (op->d.bytes) {
		struct peer *pe = &p->peers[op->peer];

		if (p->net->regMr(pe->scomm, op->d.buf, op->d.bytes, NCCL_PTR_HOST, &op->mh) !=
		    ncclSuccess) {
			op->mh = NULL;
			return -EIO;
		}
		op->mh_comm = pe->scomm;
	}
	op->state = O_MOVING;
	return send_msg(p, op->peer, P_DATA, &op->d, 0, op);
}

int np2p_post(struct np2p *p, const struct node_p2p *d)
{
	uint32_t other = d->send ? d->receiver : d->sender;
	struct pop *op;

	if (d->sender >= p->nranks || d->receiver >= p->nranks ||
	    p->owner[d->send ? d->sender : d->receiver] != p->me || p->owner[other] == p->me ||
	    (d->bytes && !d->buf) || d->bytes > (uint64_t)INT64_MAX ||
	    (d->ex && (!d->ex->copy || (d->ex->host_map && !d->ex->host_unmap))))
		return -EINVAL;
	op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	op->d = *d;
	op->peer = p->owner[other];
	op->next = p->ops;
	p->ops = op;
	if (!d->send) {
		if (send_msg(p, op->peer, P_CTS, d, d->err, NULL) < 0) {
			op_unlink(p, op);
			free(op);
			return -ENOMEM;
		}
		return 0;
	}
	/* Its receive may have said so already. */
	for (struct pcts **pc = &p->cts; *pc; pc = &(*pc)->next) {
		struct pcts *c = *pc;
		int r = 0;

		if (c->m.sender != d->sender || c->m.receiver != d->receiver ||
		    c->m.pseq != d->pseq)
			continue;
		*pc = c->next;
		p->ncts--;
		if (c->cancelled)
			op_end(p, op, -ETIMEDOUT);
		else
			r = match(p, op, &c->m);
		free(c);
		/* The op is taken: a failure now is the communicator's (node.c fails it). */
		return r < 0 ? -EPIPE : 0;
	}
	return 0;
}

int np2p_expire(struct np2p *p, uint64_t cookie)
{
	struct pop *op;

	for (op = p->ops; op && op->d.cookie != cookie; op = op->next)
		;
	if (!op || op->state != O_WAIT)
		return 0;
	if (op->d.send) {
		/* No clear-to-send yet: when it comes, the receive ends like this send. */
		uint64_t *mark =
			&p->sends_expired[(size_t)op->d.sender * p->nranks + op->d.receiver];

		if (*mark < op->d.pseq + 1)
			*mark = op->d.pseq + 1;
		op_unlink(p, op);
		op_unreg(p, op);
		free(op);
		return 1;
	}
	if (!op->cancelled && send_msg(p, op->peer, P_CANCEL, &op->d, 0, NULL) == 0)
		op->cancelled = 1;
	return 0;
}

/* Receiving */

/* A message from daemon e; -errno fails the communicator. */
static int on_msg(struct np2p *p, uint32_t e, const struct p_msg *m)
{
	const int to_sender = m->type == P_CTS || m->type == P_CANCEL || m->type == P_ACK;
	struct peer *pe = &p->peers[e];
	struct node_p2p d;
	struct pop *op;

	if (m->magic != P_MAGIC || m->type < P_CTS || m->type >= P_TYPE_MAX ||
	    m->sender >= p->nranks || m->receiver >= p->nranks)
		return -EPROTO;
	/* Messages about a sender here come from its receiver's daemon, and so on. */
	if (p->owner[to_sender ? m->sender : m->receiver] != p->me ||
	    p->owner[to_sender ? m->receiver : m->sender] != e)
		return -EPROTO;
	op = op_find(p, to_sender, m->sender, m->receiver, m->pseq);
	switch (m->type) {
	case P_CTS:
		if (m->err && !err_ok(m->err))
			return -EPROTO;
		if (op && op->state == O_WAIT)
			return match(p, op, m);
		if (op)
			return -EPROTO; /* a second clear-to-send for one pair's place */
		if (m->pseq < p->sends_expired[(size_t)m->sender * p->nranks + m->receiver]) {
			memset(&d, 0, sizeof(d));
			d.sender = m->sender;
			d.receiver = m->receiver;
			d.pseq = m->pseq;
			return send_msg(p, e, P_NACK, &d, -ETIMEDOUT, NULL);
		}
		for (struct pcts *c = p->cts; c; c = c->next)
			if (c->m.sender == m->sender && c->m.receiver == m->receiver &&
			    c->m.pseq == m->pseq)
				return -EPROTO;
		if (p->ncts >= P2P_CTS_MAX)
			return -EPROTO;
		{
			struct pcts *c = calloc(1, sizeof(*c));

			if (!c)
				return -ENOMEM;
			c->m = *m;
			c->peer = e;
			c->next = p->cts;
			p->cts = c;
			p->ncts++;
		}
		return 0;
	case P_CANCEL:
		/* Its send already moves (or ended): the data wins the race. */
		for (struct pcts *c = p->cts; c; c = c->next)
			if (c->m.sender == m->sender && c->m.receiver == m->receiver &&
			    c->m.pseq == m->pseq && !c->cancelled) {
				c->cancelled = 1;
				memset(&d, 0, sizeof(d));
				d.sender = m->sender;
				d.receiver = m->receiver;
				d.pseq = m->pseq;
				return send_msg(p, e, P_NACK, &d, -ETIMEDOUT, NULL);
			}
		return 0;
	case P_ACK:
		if (!op || op->state != O_MOVING || op->acked)
			return -EPROTO;
		op->acked = 1;
		if (op->sent)
			op_end(p, op, 0);
		return 0;
	case P_NACK:
		if (!op || op->state != O_WAIT || !err_ok(m->err))
			return -EPROTO;
		op_end(p, op, m->err);
		return 0;
	case P_DATA:
		if (!op || op->state != O_WAIT || m->bytes != op->d.bytes)
			return -EPROTO;
		op->state = O_MOVING;
		if (!op->d.bytes) {
			int r = send_msg(p, e, P_ACK, &op->d, 0, NULL);

			op_end(p, op, 0);
			return r;
		}
		if (op->d.ex) {
			int r = stage_get(p, &pe->r_st, pe->rcomm, op->d.ex);

			if (r < 0)
				return r;
		} else {
			if (p->net->regMr(pe->rcomm, op->d.buf, op->d.bytes, NCCL_PTR_HOST,
					  &op->mh) != ncclSuccess) {
				op->mh = NULL;
				return -EIO;
			}
			op->mh_comm = pe->rcomm;
		}
		pe->r_cur = op;
		pe->r_off = 0;
		return 0;
	}
	return -EPROTO;
}

/* Posts receives: the payload announced, else the next header. */
static int recv_post(struct np2p *p, struct peer *pe, int *moved)
{
	while (pe->r_tail - pe->r_head < P2P_REQS) {
		struct rreq *q = &pe->rr[pe->r_tail % P2P_REQS];
		void *data, *req = NULL, *mh;
		int size, tag = 0;

		if (pe->r_cur) {
			struct pop *op = pe->r_cur;
			struct stage *st = &pe->r_st;
			uint64_t n = op->d.bytes - pe->r_off;
			char *slot = NULL;

			if (n > P2P_CHUNK)
				n = P2P_CHUNK;
			data = (char *)op->d.buf + pe->r_off;
			mh = op->mh;
			if (op->d.ex) {
				/* Every slot holds a chunk not yet copied out: wait for one. */
				if (st->used == P2P_STAGE)
					return 0;
				slot = st->buf + (size_t)(st->next % P2P_STAGE) * P2P_CHUNK;
				data = slot;
				mh = st->mh;
			}
			size = (int)n;
			if (p->net->irecv(pe->rcomm, 1, &data, &size, &tag, &mh, &req) !=
			    ncclSuccess)
				return -EPIPE;
			if (!req)
				return 0;
			*q = (struct rreq){ .req = req,
					    .op = op,
					    .bytes = n,
					    .stage = slot,
					    .dst = (char *)op->d.buf + pe->r_off };
			if (slot) {
				st->next++;
				st->used++;
			}
			pe->r_off += n;
			if (pe->r_off == op->d.bytes) {
				q->last = 1;
				pe->r_cur = NULL;
			}
		} else if (!pe->hdr_posted) {
			data = pe->rhdr;
			size = (int)sizeof(*pe->rhdr);
			mh = pe->rhdr_mh;
			if (p->net->irecv(pe->rcomm, 1, &data, &size, &tag, &mh, &req) !=
			    ncclSuccess)
				return -EPIPE;
			if (!req)
				return 0;
			*q = (struct rreq){ .req = req, .bytes = sizeof(*pe->rhdr) };
			pe->hdr_posted = 1;
		} else {
			return 0;
		}
		pe->r_tail++;
		*moved = 1;
	}
	return 0;
}

static int recv_step(struct np2p *p, uint32_t e, int *moved)
{
	struct peer *pe = &p->peers[e];
	int r = recv_post(p, pe, moved);

	while (r == 0 && pe->r_head != pe->r_tail) {
		struct rreq *q = &pe->rr[pe->r_head % P2P_REQS];
		int done = 0, size = 0;

		if (p->net->test(q->req, &done, &size) != ncclSuccess)
			return -EPIPE;
		if (!done)
			break;
		pe->r_head++;
		*moved = 1;
		if (size < 0 || (uint64_t)size != q->bytes)
			return -EPROTO;
		pe->received += (uint64_t)size;
		if (q->stage) {
			/* Out of the slot before the slot is reused and before the ACK. */
			r = q->op->d.ex->copy(q->op->d.dev, q->dst, q->stage, q->bytes);
			pe->r_st.used--;
			if (r < 0)
				break;
		}
		if (!q->op) {
			struct p_msg m = *pe->rhdr;

			pe->hdr_posted = 0;
			r = on_msg(p, e, &m);
		} else if (q->last) {
			struct pop *op = q->op;

			r = send_msg(p, e, P_ACK, &op->d, 0, NULL);
			op_end(p, op, 0);
		}
		if (r == 0)
			r = recv_post(p, pe, moved);
	}
	if (r < 0)
		p->errors += r == -EPROTO;
	return r;
}

/* Sending */

static int send_step(struct np2p *p, struct peer *pe, int *moved)
{
	while (pe->oq && pe->s_tail - pe->s_head < P2P_REQS) {
		struct omsg *m = pe->oq;
		uint32_t slot = pe->s_tail % P2P_REQS;
		struct sreq *q = &pe->sr[slot];
		void *req = NULL;

		if (!m->hdr_posted) {
			pe->shdr[slot] = m->m;
			if (p->net->isend(pe->scomm, &pe->shdr[slot], (int)sizeof(m->m), 0,
					  pe->shdr_mh, &req) != ncclSuccess)
				return -EPIPE;
			if (!req)
				break;
			*q = (struct sreq){ .req = req, .bytes = sizeof(m->m) };
			m->hdr_posted = 1;
			if (m->m.type == P_DATA && !m->m.bytes)
				q->op = m->op;
		} else {
			struct pop *op = m->op;
			struct stage *st = &pe->s_st;
			uint64_t n = op->d.bytes - m->off;
			char *src = (char *)op->d.buf + m->off;
			void *mh = op->mh;

			if (n > P2P_CHUNK)
				n = P2P_CHUNK;
			if (op->d.ex) {
				char *slot = st->buf + (size_t)(st->next % P2P_STAGE) * P2P_CHUNK;

				/* Every slot is still being sent: wait for an isend to end. */
				if (st->used == P2P_STAGE)
					break;
				if (!m->staged) {
					int r = op->d.ex->copy(op->d.dev, slot, src, n);

					if (r < 0)
						return r;
					m->staged = 1;
				}
				src = slot;
				mh = st->mh;
			}
			if (p->net->isend(pe->scomm, src, (int)n, 0, mh, &req) != ncclSuccess)
				return -EPIPE;
			if (!req)
				break; /* a staged chunk stays in its slot for the next try */
			*q = (struct sreq){ .req = req, .bytes = n, .staged = m->staged };
			if (m->staged) {
				st->next++;
				st->used++;
				m->staged = 0;
			}
			m->off += n;
			if (m->off == op->d.bytes)
				q->op = op;
		}
		pe->s_tail++;
		*moved = 1;
		if (m->m.type != P_DATA || m->off == m->m.bytes) {
			pe->oq = m->next;
			if (!pe->oq)
				pe->oq_tail = &pe->oq;
			free(m);
		}
	}
	while (pe->s_head != pe->s_tail) {
		struct sreq *q = &pe->sr[pe->s_head % P2P_REQS];
		int done = 0, size = 0;

		if (p->net->test(q->req, &done, &size) != ncclSuccess)
			return -EPIPE;
		if (!done)
			break;
		pe->s_head++;
		pe->sent += q->bytes;
		*moved = 1;
		if (q->staged)
			pe->s_st.used--;
		if (q->op) {
			q->op->sent = 1;
			if (q->op->acked)
				op_end(p, q->op, 0);
		}
	}
	return 0;
}

int np2p_step(struct np2p *p, int *busy, int *pending)
{
	int moved = 0, r = 0;

	for (uint32_t e = 0; e < p->nd && r == 0; e++) {
		struct peer *pe = &p->peers[e];

		if (e == p->me || !pe->scomm || !pe->rcomm)
			continue;
		r = recv_step(p, e, &moved);
		if (r == 0)
			r = send_step(p, pe, &moved);
		if (pe->s_head != pe->s_tail || pe->oq || pe->r_cur ||
		    pe->r_tail - pe->r_head > (uint32_t)pe->hdr_posted)
			*busy = 1;
	}
	if (p->ops)
		*pending = 1;
	return r < 0 ? r : moved;
}

int np2p_pollfds(struct np2p *p, struct pollfd *pf, int max)
{
	int n = 0;

	for (uint32_t e = 0; e < p->nd && n < max; e++) {
		struct peer *pe = &p->peers[e];

		if (pe->rcomm)
			n += net_tcp_pollfds(pe->rcomm, pf + n, max - n);
		if (pe->scomm && n < max)
			n += net_tcp_pollfds(pe->scomm, pf + n, max - n);
	}
	return n;
}

void np2p_poll_seen(struct np2p *p, const struct pollfd *pf, int n)
{
	for (uint32_t e = 0; e < p->nd; e++) {
		if (p->peers[e].rcomm)
			net_tcp_poll_seen(p->peers[e].rcomm, pf, n);
		if (p->peers[e].scomm)
			net_tcp_poll_seen(p->peers[e].scomm, pf, n);
	}
}

void np2p_bytes(const struct np2p *p, uint32_t e, uint64_t *sent, uint64_t *received)
{
	*sent = *received = 0;
	if (p && e < p->nd) {
		*sent = p->peers[e].sent;
		*received = p->peers[e].received;
	}
}

uint64_t np2p_errors(const struct np2p *p)
{
	return p ? p->errors : 0;
}
