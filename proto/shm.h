/* SPDX-License-Identifier: MIT */
/*
 * The per-client shared region: one sealed memfd that collcd creates, sizes
 * and maps, and hands to the client at hello.
 *
 *   [0, 4096)        struct collc_shm_hdr (ring indices on separate lines)
 *   [sqes, +64*SQ)   submission entries, written by the client
 *   [cqes, +16*CQ)   completion entries, written by collcd
 *   [args, +2K*SQ)   per-SQE arguments too large for an SQE (struct
 *                    collc_sqe_args), written by the client with its SQE
 *   [gates, +64*G)   stream gates (struct collc_gate), page aligned so that
 *                    the client can map them into its GPU context
 *   [dones, +4*D)    done words (below), page aligned so that collcd can
 *                    map them into its GPUs
 *
 * Indexes are free running 32-bit counters; only (index & (entries - 1))
 * indexes an array. collcd trusts none of it: it reads the SQ tail once per
 * pass, clamps it to at most `entries` ahead of its private head, and copies
 * each SQE before it looks at a field.
 *
 * A second, read-mostly region, the doorbell (struct collc_doorbell), is
 * shared by every client: a client bumps its futex word to wake the
 * scheduler. A client that scribbles it can only cause spurious wake-ups.
 */
#ifndef COLLC_PROTO_SHM_H
#define COLLC_PROTO_SHM_H

#include <stddef.h>
#include <stdint.h>

#define COLLC_SHM_MAGIC   0x434f4c53u /* "COLS" */
/*
 * Version history:
 *   1  header, SQ, CQ
 *   2  the SQE argument area (args_off): alltoallv's counts and displacements
 *   3  stream gates (gates_off): stream-ordered and graph-captured collectives
 *   4  done words (dones_off): a rank's collective completes where it waits
 */
#define COLLC_SHM_VERSION 4u
#define COLLC_SQ_ENTRIES  1024u
#define COLLC_CQ_ENTRIES  4096u /* >= SQ entries: collcd keeps inflight <= CQ entries */
#define COLLC_CACHELINE   64

/* sq_flags, written by collcd */
#define COLLC_SQ_NEED_WAKEUP 0x1u /* the scheduler sleeps: bump the doorbell after the tail */
/* cq_flags, written by the client */
#define COLLC_CQ_WAITING     0x1u /* the client sleeps on cq_tail: futex-wake it */

struct collc_shm_hdr {
	/* Written by collcd before the region is sent; read-only afterwards. */
	uint32_t magic;
	uint32_t version;
	uint32_t sq_entries;
	uint32_t cq_entries;
	uint32_t sqes_off;
	uint32_t cqes_off;
	uint64_t size;
	uint32_t args_off;  /* struct collc_sqe_args of SQ slot i at args_off + i * sizeof */
	uint32_t gates_off; /* struct collc_gate i at gates_off + i * sizeof (version 3) */
	uint32_t gates;     /* how many */
	uint32_t dones_off; /* done word i at dones_off + i * 4 (version 4) */
	uint32_t dones;     /* how many */
	uint32_t reserved0[3];

	/* Written by collcd, read by the client. */
	uint32_t sq_head __attribute__((aligned(COLLC_CACHELINE)));
	uint32_t sq_flags;
	uint32_t sq_dropped; /* entries rejected as invalid */
	uint32_t reserved1[13];

	/* Written by the client, read by collcd. */
	uint32_t sq_tail __attribute__((aligned(COLLC_CACHELINE)));
	uint32_t reserved2[15];

	/* Written by the client, read by collcd. */
	uint32_t cq_head __attribute__((aligned(COLLC_CACHELINE)));
	uint32_t cq_flags;
	uint32_t reserved3[14];

	/* Written by collcd, read by the client (also its futex word). */
	uint32_t cq_tail __attribute__((aligned(COLLC_CACHELINE)));
	uint32_t reserved4[15];
};
_Static_assert(sizeof(struct collc_shm_hdr) == 320, "shm_hdr size");
_Static_assert(offsetof(struct collc_shm_hdr, size) == 24, "shm_hdr.size");
_Static_assert(offsetof(struct collc_shm_hdr, args_off) == 32, "shm_hdr.args_off");
_Static_assert(offsetof(struct collc_shm_hdr, gates_off) == 36, "shm_hdr.gates_off");
_Static_assert(offsetof(struct collc_shm_hdr, dones_off) == 44, "shm_hdr.dones_off");
_Static_assert(offsetof(struct collc_shm_hdr, sq_head) == 64, "shm_hdr.sq_head");
_Static_assert(offsetof(struct collc_shm_hdr, sq_flags) == 68, "shm_hdr.sq_flags");
_Static_assert(offsetof(struct collc_shm_hdr, sq_dropped) == 72, "shm_hdr.sq_dropped");
_Static_assert(offsetof(struct collc_shm_hdr, sq_tail) == 128, "shm_hdr.sq_tail");
_Static_assert(offsetof(struct collc_shm_hdr, cq_head) == 192, "shm_hdr.cq_head");
_Static_assert(offsetof(struct collc_shm_hdr, cq_flags) == 196, "shm_hdr.cq_flags");
_Static_assert(offsetof(struct collc_shm_hdr, cq_tail) == 256, "shm_hdr.cq_tail");

enum {
	COLLC_OP_NOP = 0,
	COLLC_OP_ALLREDUCE,
	COLLC_OP_ALLGATHER,
	COLLC_OP_REDUCE_SCATTER,
	COLLC_OP_BROADCAST,
	COLLC_OP_REDUCE,
	COLLC_OP_ALLTOALL,  /* count elements to and from each rank */
	COLLC_OP_ALLTOALLV, /* counts and displacements in the SQE's collc_sqe_args */
	COLLC_OP_SEND,      /* root: the receiving rank; seq 0 (pairs match in order) */
	COLLC_OP_RECV,      /* root: the sending rank; seq 0 */
	COLLC_OP_MAX,
};

/* Point-to-point operations, matched per (sender, receiver) pair, not by sequence number. */
#define COLLC_OP_IS_P2P(op) ((op) == COLLC_OP_SEND || (op) == COLLC_OP_RECV)

#define COLLC_MR_NONE 0u /* no buffer (count 0, or a non-root's unused side) */

/* One submission, written by the client. */
struct collc_sqe {
	uint8_t opcode;   /* COLLC_OP_* */
	uint8_t dtype;    /* collc_dtype */
	uint8_t redop;    /* collc_redop */
	uint8_t flags;    /* COLLC_SQE_* */
	uint32_t comm;    /* handle from the comm_init reply */
	uint64_t seq;     /* per-communicator sequence number, from 0 */
	uint64_t count;   /* elements, as the public call names them */
	uint32_t send_mr; /* registration handles */
	uint32_t recv_mr;
	uint64_t send_off; /* byte offsets into the registrations */
	uint64_t recv_off;
	uint64_t user_data; /* echoed in the CQE */
	int32_t root;
	uint32_t gate; /* COLLC_SQE_STREAM, COLLC_SQE_GRAPH: the gate's index; else 0 */
};
_Static_assert(sizeof(struct collc_sqe) == 64, "sqe size");
_Static_assert(offsetof(struct collc_sqe, comm) == 4, "sqe.comm");
_Static_assert(offsetof(struct collc_sqe, seq) == 8, "sqe.seq");
_Static_assert(offsetof(struct collc_sqe, count) == 16, "sqe.count");
_Static_assert(offsetof(struct collc_sqe, send_mr) == 24, "sqe.send_mr");
_Static_assert(offsetof(struct collc_sqe, recv_mr) == 28, "sqe.recv_mr");
_Static_assert(offsetof(struct collc_sqe, send_off) == 32, "sqe.send_off");
_Static_assert(offsetof(struct collc_sqe, recv_off) == 40, "sqe.recv_off");
_Static_assert(offsetof(struct collc_sqe, user_data) == 48, "sqe.user_data");
_Static_assert(offsetof(struct collc_sqe, root) == 56, "sqe.root");

/*
 * SQE flags. A stream-ordered collective names a gate (struct collc_gate) and
 * posts no CQE: its result goes to the gate. STREAM applies to the five
 * collectives, all-to-all, send and receive; GRAPH to the first six.
 *
 * COLLC_SQE_STREAM  user_data is the gate's ticket (nonzero): collcd starts
 *                   the collective once gate.go == ticket, and at its end
 *                   stores gate.res, then gate.done = ticket (G2).
 * COLLC_SQE_GRAPH   the SQE is a template, armed on the gate (seq is 0): each
 *                   time gate.go turns 1 (a graph replay), collcd clears go
 *                   and runs one collective with the template's arguments;
 *                   at its end it stores gate.res, then gate.done = 1, and
 *                   the replay clears done. Collectives fired so are matched
 *                   across ranks by the order of their firings, apart from
 *                   the sequence numbers of the others. The arming is
 *                   answered by a CQE (user_data: the request); a
 *                   communicator's graph gates are disarmed when it is
 *                   destroyed.
 */
#define COLLC_SQE_STREAM 0x1u
#define COLLC_SQE_GRAPH  0x2u

/*
 * One stream gate on its own cache line. go is written by the client's GPU
 * stream (a stream memory operation), done and res by collcd. collcd trusts
 * no value in it: a wrong go starts only that client's own collective early
 * or never (the op timeout covers it), and done and res are collcd's.
 */
struct collc_gate {
	uint32_t go;    /* written by the client (its stream) */
	uint32_t done;  /* written by collcd: the ticket of the last finished collective */
	int32_t res;    /* written by collcd before done: 0 or -errno */
	uint32_t fired; /* written by collcd: graph firings taken */
	/*
	 * Written by the client before the SQE (A1 covers them): the gate's word
	 * in device memory (struct collc_signal, proto/work.h), a registration
	 * of collc_mem_alloc memory and an offset; sig_mr 0: none. The grid
	 * stores the ticket there too, and the stream waits on that word: a
	 * stream polling device memory instead of host memory does not slow the
	 * grid's own reads of host memory.
	 */
	uint32_t sig_mr;
	uint32_t reserved0;
	uint64_t sig_off;
	uint32_t reserved[8];
};
_Static_assert(sizeof(struct collc_gate) == 64, "gate size");
_Static_assert(offsetof(struct collc_gate, done) == 4, "gate.done");
_Static_assert(offsetof(struct collc_gate, res) == 8, "gate.res");
_Static_assert(offsetof(struct collc_gate, sig_mr) == 16, "gate.sig_mr");
_Static_assert(offsetof(struct collc_gate, sig_off) == 24, "gate.sig_off");

/*
 * Done words: a second, faster way for a host-form collective (no
 * COLLC_SQE_* flag) to complete. Once the rank's share of the collective
 * ended without error on its executor, the executor itself (the grid, or a
 * CPU executor thread) may store the ticket (uint32_t)user_data into done
 * word user_data % COLLC_DONES, after the results (D1: a system fence on the
 * grid, a release store on the CPU). A client that acquires its ticket there
 * (D1') may treat the request as completed with result 0; the CQE follows
 * anyway, and is the only way errors arrive. collcd sets no done word for a
 * ticket of 0, and only where the rank's end means its buffers are free
 * (not for all-to-all, send/recv or communicators spanning daemons). Two
 * requests 4096 apart share a word: a client checks for its own ticket,
 * and one overwritten by a later request completes through its CQE.
 */
#define COLLC_DONES 4096u

/* One completion, written by collcd. */
struct collc_cqe {
	uint64_t user_data;
	int32_t res;    /* 0 or -errno */
	uint32_t flags; /* none defined */
};
_Static_assert(sizeof(struct collc_cqe) == 16, "cqe size");
_Static_assert(offsetof(struct collc_cqe, res) == 8, "cqe.res");

/*
 * Arguments of one SQE that do not fit in it, at the same index as its SQ
 * slot, written by the client before it publishes the SQ tail (A1 covers
 * them) and copied out by collcd with the SQE. Only alltoallv has any:
 * element counts and displacements per rank (the first nranks of each).
 */
#define COLLC_SQE_ARGS_RANKS 64u /* COLLC_MAX_RANKS (proto/work.h) */
struct collc_sqe_args {
	uint64_t sendcounts[COLLC_SQE_ARGS_RANKS];
	uint64_t sdispls[COLLC_SQE_ARGS_RANKS];
	uint64_t recvcounts[COLLC_SQE_ARGS_RANKS];
	uint64_t rdispls[COLLC_SQE_ARGS_RANKS];
};
_Static_assert(sizeof(struct collc_sqe_args) == 2048, "sqe_args size");

#define COLLC_SHM_HDR_BYTES 4096u
#define COLLC_SHM_ARGS_OFF                                                                         \
	(COLLC_SHM_HDR_BYTES + COLLC_SQ_ENTRIES * sizeof(struct collc_sqe) +                       \
	 COLLC_CQ_ENTRIES * sizeof(struct collc_cqe))
#define COLLC_GATES         1024u
#define COLLC_SHM_GATES_OFF (COLLC_SHM_ARGS_OFF + COLLC_SQ_ENTRIES * sizeof(struct collc_sqe_args))
#define COLLC_SHM_DONES_OFF (COLLC_SHM_GATES_OFF + COLLC_GATES * sizeof(struct collc_gate))
#define COLLC_SHM_SIZE      (COLLC_SHM_DONES_OFF + COLLC_DONES * sizeof(uint32_t))
_Static_assert(COLLC_SHM_GATES_OFF % 4096 == 0, "gates page aligned");
_Static_assert(COLLC_SHM_DONES_OFF % 4096 == 0, "done words page aligned");

/* Shared by every client; written by clients and collcd alike. */
struct collc_doorbell {
	uint32_t seq; /* futex word: bumped after a submission when NEED_WAKEUP was seen */
	uint32_t reserved[1023];
};
_Static_assert(sizeof(struct collc_doorbell) == 4096, "doorbell size");

#endif /* COLLC_PROTO_SHM_H */
