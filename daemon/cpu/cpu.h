/* SPDX-License-Identifier: MIT */
/*
 * The CPU executor's shared state: connections (one ring per protocol) and
 * mailboxes (one per rank and channel), shared with its tests.
 */
#ifndef COLLCD_EXEC_CPU_H
#define COLLCD_EXEC_CPU_H

#include <stdint.h>

#include "proto/prims.h"
#include "proto/work.h"

/*
 * Geometry. Simple: 8 slots of 64 KiB, 4 steps a chunk (256 KiB chunks);
 * on a communicator that spans daemons 8 slots of 1 MiB, since every step
 * that crosses daemons costs the proxy a wake-up and a system call each way
 * (the all-to-all relay steps whole slots), and rings walk chunks of
 * CPU_NET_CHUNK_BYTES there, one step each that fills half a slot:
 * under bbr, steps of 1 MiB (4 MiB chunks before) left the ring at
 * 0.55-0.65x the busbw of 512 KiB ones from 8 MiB, with cubic unchanged
 * (bench/RESULTS.md, "Ring steps of 512 KiB across daemons"). Every rank
 * of such a communicator has these connections, so every daemon walks the
 * ring alike. LL: 8 steps of 512 lines, 4 KiB
 * of payload a step. LL128: 8 steps of 256 lines, 30 KiB of payload a step.
 * LL and LL128 chunks are one step, as in NCCL. The CUDA grid uses NCCL's
 * larger buffers; the arithmetic is the same (proto/prims.h).
 */
#define CPU_SLOT_BYTES               (64u << 10)
#define CPU_NET_SLOT_BYTES           (1024u << 10)
#define CPU_CHUNK_STEPS              4u
#define CPU_NET_CHUNK_BYTES          (512u << 10)
#define CPU_SIMPLE_BUFFER_BYTES      (CPU_SLOT_BYTES * COLLC_STEPS)
#define CPU_NET_SIMPLE_BUFFER_BYTES  (CPU_NET_SLOT_BYTES * COLLC_STEPS)
#define CPU_LL_STEP_LINES            512u
#define CPU_LL_BUFFER_BYTES          (COLLC_STEPS * CPU_LL_STEP_LINES * COLLC_LL_LINE_BYTES)
#define CPU_LL128_STEP_LINES         256u
#define CPU_LL128_BUFFER_BYTES       (COLLC_STEPS * CPU_LL128_STEP_LINES * COLLC_LL128_LINE_BYTES)
/* A connection's buffers: Simple's (simple_bytes) first, then LL's and LL128's. */
#define CPU_CONN_BYTES(simple_bytes) ((simple_bytes) + CPU_LL_BUFFER_BYTES + CPU_LL128_BUFFER_BYTES)
/* The largest LL/LL128 step payload: the size of a channel thread's staging buffers. */
#define CPU_STAGE_BYTES              (CPU_LL128_STEP_LINES * COLLC_LL128_LINE_PAYLOAD)
/* The peer-memory algorithms' round (one-shot and two-shot, daemon/cpu/peer.c). */
#define CPU_ROUND_BYTES              (256u << 10)
/* A channel thread's scratch: a round, or a step of a ring across daemons (the relay). */
#define CPU_SCRATCH_BYTES                                                                          \
	(CPU_ROUND_BYTES > CPU_NET_SLOT_BYTES ? CPU_ROUND_BYTES : CPU_NET_SLOT_BYTES)
/* One-shot LL: lines of one round (2 KiB of payload), one sender's region of an inbox slot. */
#define CPU_OLL_SLOT_LINES 256u

_Static_assert(CPU_LL_STEP_LINES *COLLC_LL_LINE_PAYLOAD <= CPU_STAGE_BYTES, "stage fits LL");
_Static_assert(CPU_OLL_SLOT_LINES *COLLC_LL_LINE_PAYLOAD <= CPU_STAGE_BYTES,
	       "stage fits a one-shot LL round");
_Static_assert(CPU_SIMPLE_BUFFER_BYTES % 4096 == 0 && CPU_NET_SIMPLE_BUFFER_BYTES % 4096 == 0 &&
		       CPU_LL_BUFFER_BYTES % 4096 == 0,
	       "protocol buffers stay page aligned");

/*
 * One protocol's ring of one connection (one direction between two ranks on
 * one channel), in the receiver's memory. Steps are monotonic; the slot of
 * step s is s % COLLC_STEPS. Each protocol keeps its own steps, so a
 * connection may run Simple, LL and LL128 collectives in any order.
 *
 * Simple publishes data with tail (S1/R1); LL and LL128 carry the ready flag
 * in the data and leave tail at 0. All three return credit with head
 * (R2/S2), so a sender never overwrites a slot the receiver has not read.
 */
struct cpu_link {
	char *buf;          /* COLLC_STEPS slots; set before the communicator runs */
	uint64_t buf_bytes; /* of buf (Simple's larger across daemons, CPU_NET_SIMPLE_BUFFER_BYTES) */
	uint32_t proto;
	/* Written by the sender. */
	uint64_t tail __attribute__((aligned(64))); /* Simple: steps published */
	uint32_t tail_seq;     /* futex word, bumped when data lands while the receiver sleeps */
	uint32_t send_waiting; /* the sender sleeps on head_seq */
	uint32_t step_len[COLLC_STEPS]; /* Simple: payload bytes of each slot's step */
	/* Simple, proxied: where each slot's step lies when not in the slot (exec_link.src). */
	const char *step_src[COLLC_STEPS];
	/* Written by the receiver. */
	uint64_t head __attribute__((aligned(64))); /* steps consumed */
	uint32_t head_seq;                          /* futex word for a sleeping sender */
	uint32_t recv_waiting;                      /* the receiver sleeps on tail_seq */
	/*
	 * Simple, proxied and recv_direct: steps whose landing place is named
	 * (exec_link.known), and the place of each: a rank buffer of dst_len
	 * bytes exactly, or NULL for its slot (exec_link.dst).
	 */
	uint64_t dst_pub;
	char *step_dst[COLLC_STEPS];
	uint32_t dst_len[COLLC_STEPS];
	/*
	 * A network proxy plays the far end (exec_link.watch): it arms this
	 * before it sleeps, and whoever posts tail or head next disarms it and
	 * writes proxy_fd, an eventfd set by watch.
	 */
	uint32_t proxy_armed;
	int32_t proxy_fd;
	/*
	 * Set by the proxy before the communicator's first collective (its items
	 * are published after it): the sender may leave a step's payload in its
	 * own buffer (exec_link.direct).
	 */
	uint32_t direct;
	/*
	 * Set by the proxy before the communicator's first collective, like
	 * direct: it receives a step only once the receiver named where the
	 * step lands (dst_pub), possibly in the receiver's own buffer.
	 */
	uint32_t recv_direct;
	/* Private to the sender's thread. */
	uint64_t send_step __attribute__((aligned(64)));
	/* Private to the receiver's thread. */
	uint64_t recv_step __attribute__((aligned(64)));
};

struct cpu_conn {
	struct cpu_link simple, ll, ll128;
};

/*
 * Rank r's mailbox on one channel: what the one-shot and two-shot algorithms
 * (daemon/cpu/peer.c) know of each other. Generations never repeat: gen
 * counts the collectives the owner published here, done the phases it
 * finished; every rank of a communicator runs the same sequence, so the
 * values agree across ranks. my_gen also counts the rounds of one-shot LL,
 * which publishes nothing here: its lines carry their generation, and land
 * in the owner's inbox (oll), whose sleeper the senders wake through seq.
 */
struct cpu_mbox {
	/*
	 * The one-shot LL inbox, set before the communicator runs:
	 * collc_oll_inbox_lines(nranks, CPU_OLL_SLOT_LINES) lines, written by the
	 * peers and read by the owner.
	 */
	union collc_ll_line *oll;
	/* Written by the owner, read by the peers. */
	uint64_t gen __attribute__((aligned(64))); /* src/dst/coll_id below belong to gen */
	uint64_t coll_id;
	uint64_t src; /* executor-space addresses the owner exposes */
	uint64_t dst;
	uint64_t done __attribute__((aligned(64))); /* phases finished: peers' buffers are free */
	uint32_t seq; /* futex word, bumped when gen or done moves, or one-shot LL lines land */
	/* Written by whoever sleeps on seq: peers, or the owner awaiting one-shot LL lines. */
	uint32_t waiting __attribute__((aligned(64))); /* threads asleep on seq */
	/* Private to the owner's thread. */
	uint64_t my_gen __attribute__((aligned(64)));
	uint64_t my_done;
};

/* What a work item's comm_dev points at: one rank's view of its communicator. */
struct cpu_rank {
	struct cpu_conn *send[COLLC_MAX_CHANNELS]; /* to rank + 1 */
	struct cpu_conn *recv[COLLC_MAX_CHANNELS]; /* from rank - 1 */
	/*
	 * The group ring (exec.h EXEC_RING_GROUP), where group is not 0: to
	 * rank + group and from rank - group (mod nranks); ranks meet in the
	 * mailboxes of their own block of group positions.
	 */
	struct cpu_conn *gsend[COLLC_MAX_CHANNELS];
	struct cpu_conn *grecv[COLLC_MAX_CHANNELS];
	uint32_t group;
	struct cpu_mbox *mbox;   /* every rank's: [rank * nchan + channel] */
	const uint32_t *revoked; /* the communicator's abort word */
	uint32_t *broken;     /* a peer daemon's stream broke the relay's agreement (exec_link) */
	const uint8_t *order; /* the rank at each ring position (comm_setup_part); NULL: itself */
	uint32_t nchan;
};

/*
 * The config's exec_spin_us, copied here by cpu_configure() on the scheduler
 * thread whenever a new config is published; the channel threads read it
 * (relaxed: any recent value will do). The channel threads are not RCU
 * readers: under liburcu-qsbr they would have to report quiescent states and
 * go offline around every futex sleep, and a missed report stalls every
 * grace period; one word handed over by a registered reader needs neither.
 */
extern _Atomic uint32_t exec_spin_us;

struct exec_init;
struct exec_backend;
/* Starts the CPU executor (called by the registry, exec.c). */
int exec_cpu_init(const struct exec_init *init, const struct exec_backend **ret);

#endif
