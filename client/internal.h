/* SPDX-License-Identifier: MIT */
/*
 * libcollc's private state, shared by its files: the context and communicator
 * behind the public handles, the registration table and the request table.
 *
 * Two locks per context: ctl_lock guards the control socket's requests (replies are
 * matched by id, so a blocking comm_init does not hold up other requests);
 * ring_lock guards the SQ producer, the CQ consumer, the request table and the
 * registration table. mem_lock serializes host registrations (they remap pages)
 * and guards the backings. Nothing sleeps holding ring_lock.
 */
#ifndef COLLC_CLIENT_INTERNAL_H
#define COLLC_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "client/ctlsock.h"
#include "include/collc.h"
#include "proto/shm.h"
#include "proto/wire.h"

enum { REG_ALLOC, REG_REGISTER, REG_DEV_ALLOC, REG_DEV_REGISTER };

struct reg {
	uintptr_t start; /* the user's view: [start, start + len) */
	size_t len;
	uint32_t mr;
	int kind;
	int fd;        /* REG_REGISTER: the memfd now backing the pages */
	uintptr_t map; /* page-aligned mapping */
	size_t maplen;
	uint64_t buf_id; /* REG_DEV_REGISTER: the allocation's driver id (collc__gpu_buffer_id) */
};

/*
 * Pages of private memory re-backed by a memfd at registration, [a, b). They
 * stay so after deregistration; registrations inside them reuse the memfd.
 */
struct backing {
	struct backing *next;
	uintptr_t a, b;
	int fd;
};

struct req_slot {
	uint64_t req; /* 0: empty, UINT64_MAX: deleted */
	int32_t res;
	uint8_t done;
};

/* A control request waiting for its reply. */
struct pending_req {
	struct pending_req *next;
	uint32_t id;
	uint16_t type;
	int done;
	struct ctl_reply rep;
};

struct collc_ctx {
	int fd;
	pthread_mutex_t ctl_lock;
	pthread_cond_t ctl_cond; /* a reply was read, or the reader left */
	int reader;              /* some thread is reading the socket */
	struct pending_req *pending;
	pthread_mutex_t ring_lock;
	uint32_t next_id;
	void *shm;
	size_t shm_size;
	struct collc_shm_hdr *hdr;
	struct collc_sqe *sqes;
	struct collc_cqe *cqes;
	struct collc_sqe_args *sqe_args; /* per SQ slot; NULL: collcd has none (no alltoallv) */
	const uint32_t *dones;           /* done words (proto/shm.h); NULL: collcd has none */
	struct collc_gate *gates;        /* NULL: collcd has none (no stream forms) */
	uint32_t ngates;
	struct stream_state *stream; /* stream.c: the gates' GPU mapping and allocator */
	uint32_t sq_entries, cq_entries;
	uint32_t sq_tail; /* private copy; published to hdr->sq_tail */
	uint32_t cq_head; /* private copy; published to hdr->cq_head */
	struct collc_doorbell *doorbell;
	uint8_t node_id[16];
	/* Where collcd listens for other daemons (family 0: it does not). */
	uint16_t net_family, net_port;
	uint8_t net_addr[16];
	uint32_t backend; /* COLLC_BACKEND_* bits: what collcd serves */
	int event_fd;
	uint64_t next_req;
	struct req_slot *reqs;
	size_t req_cap, req_used; /* used counts deleted slots too */
	struct reg *regs;
	size_t nregs;
	pthread_mutex_t mem_lock; /* serializes host registrations (they remap pages) */
	struct backing *backings;
	uint32_t waiters;          /* threads asleep on cq_tail */
	uint64_t alive_checked_ns; /* last look at the socket from submit */
	int broken;                /* the connection to collcd is gone */
};

struct collc_comm {
	struct collc_ctx *ctx;
	uint32_t handle;
	uint64_t comm_id;
	int nranks, rank, device;
	uint64_t next_seq;
	int async_err; /* the first error of a stream-ordered collective (stream.c) */
};

/* What a collective reads and writes: the buffers resolve to registered regions. */
struct sub {
	uint8_t opcode;
	const void *sendbuf;
	void *recvbuf;
	uint64_t send_bytes, recv_bytes;
	const struct collc_sqe_args *args; /* alltoallv: counts and displacements */
	uint32_t nargs;                    /* entries of each of args' arrays */
	/* Stream forms (stream.c): COLLC_SQE_STREAM (a ticket, no request) or _GRAPH; else 0. */
	uint8_t flags;
	uint32_t gate, ticket;
};

/* submit.c */

/*
 * Resolves s's buffers and posts its SQE. ret_req gets the request; a
 * COLLC_SQE_STREAM submission has none (ret_req may be NULL).
 */
int collc__submit(struct collc_comm *comm, const struct sub *s, size_t count, collc_dtype dtype,
		  collc_redop op, int root, collc_req *ret_req);
/* The byte counts of each collective's buffers, as its host form checks them. */
int collc__coll_sub(struct collc_comm *comm, uint8_t opcode, const void *sendbuf, void *recvbuf,
		    size_t count, collc_dtype dtype, int root, struct sub *s);

/* stream.c */

/* Maps the gates and makes device's words, once per ctx and GPU; 0 or -errno. */
int collc__stream_prepare(struct collc_ctx *ctx, int device);
/* Stops the gate watcher and unmaps the gates, at disconnect. */
void collc__stream_fini(struct collc_ctx *ctx);
/* Forgets comm's gates (their results are folded into nothing), at comm_destroy. */
void collc__stream_comm_gone(struct collc_comm *comm);

/* libcollc.c: control requests */

/*
 * Sends one control request (with up to one fd) and waits for its reply.
 * Returns 0 with *rep filled (rep->status holds collcd's answer) or -errno.
 */
int collc__request(struct collc_ctx *ctx, uint16_t type, const void *payload, size_t len,
		   int send_fd, struct ctl_reply *rep);
/* collc__request for a reply that is a status alone: returns the status or -errno. */
int collc__request_status(struct collc_ctx *ctx, uint16_t type, const void *payload, size_t len);
/* Copies a struct reply (whose head is a collc_msg_status) out of rep. */
void collc__reply_body(const struct ctl_reply *rep, void *out, size_t size);

/* reg.c: the registration table; callers hold ring_lock unless said otherwise */

const struct reg *collc__reg_find(const struct collc_ctx *ctx, uintptr_t p, size_t len);
/* Does a registration's mapping meet [a, b)? */
int collc__reg_overlaps(const struct collc_ctx *ctx, uintptr_t a, uintptr_t b);
/* Adds g to the table; takes ring_lock. */
int collc__reg_add(struct collc_ctx *ctx, const struct reg *g);
/*
 * A memory request (payload, up to one fd) answered by a mem_reply, with one fd
 * when ret_fd is not NULL. Returns collcd's status or -errno.
 */
int collc__mem_request(struct collc_ctx *ctx, uint16_t type, const void *payload, size_t len,
		       int send_fd, struct collc_msg_mem_reply *mr, int *ret_fd);
int collc__mem_release(struct collc_ctx *ctx, uint32_t mr);
/* Unmaps and closes what the table holds, at disconnect. */
void collc__reg_fini(struct collc_ctx *ctx);

/* mem_host.c */

/* Closes the memfds of the backings, at disconnect; the pages stay mapped. */
void collc__backing_fini(struct collc_ctx *ctx);

/* mem_gpu.c: device memory through collcd; -ENODEV where collcd serves no GPU */

int collc__gpu_mem_alloc(struct collc_ctx *ctx, size_t size, int device, void **ret_ptr);
int collc__gpu_mem_register(struct collc_ctx *ctx, void *ptr, size_t size, int device);

/* request.c: the request table and the completion ring */

/* Remembers req as in flight. Under ring_lock. */
int collc__req_insert(struct collc_ctx *ctx, uint64_t req);
/* Moves completions from the CQ into the request table. Under ring_lock. */
void collc__reap_cq(struct collc_ctx *ctx);
void collc__ring_doorbell(struct collc_ctx *ctx);
/* 0 once the control socket says collcd is gone (the context is then broken). */
int collc__daemon_alive(struct collc_ctx *ctx);

#endif /* COLLC_CLIENT_INTERNAL_H */
