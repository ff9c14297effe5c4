/* SPDX-License-Identifier: MIT */
/*
 * A raw client of collcd for the tests that bypass libcollc: it speaks the
 * wire protocol (proto/wire.h) over its own socket, maps the shared region
 * (proto/shm.h) and writes SQEs, argument slots and gate words itself, so a
 * test can write what libcollc never would (garbage, or a GPU stream's part
 * of the gate protocol). Part of the integration harness (collc_itest).
 *
 *   struct raw c;
 *   raw_open(&c);                              hello, rings, gates mapped
 *   raw_comm_init(&c, &uid, n, rank, &comm);   join (device -1)
 *   raw_mem_alloc(&c, bytes, &mr, &ptr);       host memory collcd maps too
 *   raw_publish(&c, &sqe);                     one SQE, doorbell rung
 *   raw_completion(&c, user_data, ms);         its CQE's res (1: none came)
 *
 * Nothing here trusts collcd's header after hello: offsets come from the
 * hello reply, so a test may scribble the header.
 */
#ifndef COLLC_TEST_RAW_H
#define COLLC_TEST_RAW_H

#include <stddef.h>
#include <stdint.h>

#include <collc.h>

#include "proto/shm.h"
#include "proto/wire.h"

struct raw {
	int fd;
	void *shm;
	size_t shm_size;
	struct collc_shm_hdr *hdr;
	struct collc_sqe *sqes;
	struct collc_cqe *cqes;
	struct collc_sqe_args *args;
	struct collc_gate *gates; /* NULL from a collcd without COLLC_FEAT_GATES */
	uint32_t ngates;
	uint32_t *dones; /* COLLC_DONES done words; NULL from a collcd without COLLC_FEAT_DONES */
	uint32_t sq_entries, cq_entries;
	struct collc_doorbell *bell;
	uint8_t node_id[16];
	uint32_t features;
	uint32_t sq_tail, cq_head;
};

/*
 * One request on fd, one reply: the reply's body (status first) into body
 * (blen bytes, zero-filled past what came), up to 4 of its fds into fds
 * (NULL: closed) with their number in *nfds. Replies to other requests are
 * skipped. Returns the reply's status, or -errno (-ETIMEDOUT after 10 s,
 * -ECONNRESET when collcd hung up).
 */
int raw_request(int fd, uint16_t type, const void *payload, size_t len, void *body, size_t blen,
		int *fds, int *nfds);
/* Connects, says hello and maps the region and the doorbell. 0, or 1 after h_fail. */
int raw_open(struct raw *c);
/* Unmaps and closes (collcd sees the client go). */
void raw_close(struct raw *c);

/* Joins communicator uid as rank of nranks with host memory: its handle into *ret_comm. */
int raw_comm_init(struct raw *c, const struct collc_unique_id *uid, uint32_t nranks, uint32_t rank,
		  uint32_t *ret_comm);
/* COLLC_MSG_COMM_DESTROY or COLLC_MSG_COMM_ABORT of handle comm: the status. */
int raw_comm_ref(struct raw *c, uint16_t type, uint32_t comm);
/* COLLC_MSG_COMM_TIMEOUT (0: none, UINT32_MAX: op_timeout_ms): the status. */
int raw_comm_timeout(struct raw *c, uint32_t comm, uint32_t timeout_ms);
/* COLLC_MSG_MEM_ALLOC of size host bytes, mapped: handle and address. 0 or -errno. */
int raw_mem_alloc(struct raw *c, size_t size, uint32_t *ret_mr, void **ret_ptr);

/* Bumps the doorbell and wakes collcd. */
void raw_ring(struct raw *c);
/* Writes e into the next SQ slot, publishes the tail (release) and rings. */
void raw_publish(struct raw *c, const struct collc_sqe *e);
/* raw_publish() with the SQE's arguments (all-to-allv) in its slot of the argument area. */
void raw_publish_args(struct raw *c, const struct collc_sqe *e, const struct collc_sqe_args *a);
/*
 * Waits up to timeout_ms for the CQE carrying user_data, reaping those
 * before it. Returns its res, or 1 when none came.
 */
int raw_completion(struct raw *c, uint64_t user_data, int timeout_ms);
/*
 * The same for n CQEs in any order: res[i] gets uds[i]'s res (1: none
 * came). Returns 0 when all came, 1 otherwise.
 */
int raw_completions(struct raw *c, const uint64_t *uds, int *res, uint32_t n, int timeout_ms);
/* CQEs posted and not reaped yet. */
uint32_t raw_cq_pending(struct raw *c);
/* Reaps every CQE that waits. */
void raw_reap_all(struct raw *c);

/*
 * The stream's part of a gate: raw_gate_go stores go (release: the
 * collective's inputs, written before, are visible to collcd); raw_gate_wait
 * waits up to timeout_ms until done == value (acquire: res and the
 * collective's results are visible). 0, or -ETIMEDOUT.
 */
void raw_gate_go(struct raw *c, uint32_t gate, uint32_t value);
int raw_gate_wait(struct raw *c, uint32_t gate, uint32_t value, int timeout_ms);
uint32_t raw_gate_done(struct raw *c, uint32_t gate);
/* Acquire load of the done word of user_data (proto/shm.h). */
uint32_t raw_done_word(struct raw *c, uint64_t user_data);
int32_t raw_gate_res(struct raw *c, uint32_t gate);

#endif /* COLLC_TEST_RAW_H */
