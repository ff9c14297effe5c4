/* SPDX-License-Identifier: MIT */
/*
 * The scheduler's own state. Only the scheduler thread touches it (status.c
 * renders a snapshot of it: daemon/status.h).
 */
#ifndef COLLCD_SCHED_INT_H
#define COLLCD_SCHED_INT_H

#include <stdint.h>
#include <sys/types.h>

#include "daemon/config.h"
#include "daemon/sched.h"
#include "daemon/status.h"
#include "proto/shm.h"
#include "proto/work.h"

/*
 * A registration: either a host mapping the scheduler made and unmaps
 * (exec NULL), or executor memory it lets go through exec->mem_release().
 */
struct mr {
	uint32_t id;
	void *addr;
	uint64_t size;
	const struct exec_backend *exec; /* NULL: a host mapping */
	void *exec_mem;                  /* the executor's handle */
	uint32_t flags;                  /* EXEC_MEM_* */
	uint32_t refs;                   /* submissions that name it and are not finished */
	uint8_t released;                /* the client let it go: unmap once refs drop to 0 */
};

struct comm;

/* One client's rank in one communicator. */
struct member {
	struct comm *comm;
	struct sched_client *client;
	uint32_t rank;
	uint32_t handle;   /* index + 1 in the client's member table */
	uint64_t next_seq; /* sequence number the next SQE must carry */
	uint64_t fired;    /* graph firings taken from this rank (sched_gate.c) */
	uint8_t left;      /* comm_destroy was called */
};

/* A graph gate armed with its template collective (COLLC_SQE_GRAPH). */
struct graph_arm {
	struct member *mb; /* NULL: not armed */
	struct collc_sqe sqe;
	uint32_t sig_mr; /* the gate's device word at arming (struct collc_gate) */
	uint64_t sig_off;
	uint8_t firing; /* its last firing has not ended: a new go waits (bounds the firings) */
};

enum { STALL_NONE, STALL_CQ_FULL, STALL_WINDOW };

struct sched_client {
	struct sched_client *next;
	uint32_t id;
	pid_t pid;
	uid_t uid;
	gid_t gid;
	int shm_fd;
	void *shm;
	uint64_t shm_size;
	struct collc_shm_hdr *hdr;
	struct collc_sqe *sqes;
	struct collc_cqe *cqes;
	struct collc_sqe_args *args; /* per SQ slot, COLLC_SHM_ARGS_OFF */
	struct collc_gate *gates;    /* COLLC_GATES, COLLC_SHM_GATES_OFF */
	struct dones *dones;         /* its done words as each executor stores them; NULL: none */
	struct graph_arm *arms;      /* COLLC_GATES once the first graph gate is armed */
	uint16_t *armed;             /* the armed gates' indexes: the poll visits only these */
	uint32_t narmed;
	uint32_t sq_entries;
	uint32_t cq_entries;
	uint32_t sq_head;     /* private; published to hdr->sq_head */
	uint64_t bad_tail;    /* the last garbage sq_tail counted in bad; UINT64_MAX: none */
	uint32_t cq_tail;     /* private; published to hdr->cq_tail */
	uint32_t outstanding; /* SQEs taken whose CQE is not yet posted */
	uint8_t cq_dirty;
	uint8_t gone;
	uint8_t stall; /* why drain_sq() last left entries in the ring: STALL_* */
	int event_fd;
	struct mr **mrs;
	uint32_t nmrs;
	struct member **members;
	uint32_t nmembers;
	uint32_t nmembers_live;
	uint32_t nmrs_live;
	uint64_t mr_bytes;
	uint64_t submitted, completed, errors, bad;
	uint64_t batches, batch_items; /* work batches published, and the items they held */
};

enum slot_state { SLOT_EMPTY, SLOT_ARRIVING, SLOT_INFLIGHT, SLOT_DONE };

struct slot_rank {
	struct sched_client *client; /* NULL until the rank submitted */
	uint64_t user_data;
	int err; /* the SQE failed validation */
	struct collc_sqe sqe;
	struct mr *send_mr, *recv_mr;
	uint64_t fifo_pos;
	uint64_t *v;       /* alltoallv: sendcounts, sdispls, recvcounts, rdispls (nranks each) */
	struct mr *sig_mr; /* stream collectives: the gate's device word (sched_gate.c) */
	uint64_t sig_off;
	uint8_t sig_in_item; /* launched: its item stores the word (else a signal item at the end) */
};

struct slot {
	uint8_t state;
	uint64_t t_first_ns; /* first rank's arrival: the timeout runs from here */
	uint64_t t_gate_ns;  /* stream collectives: the first gate seen open (0: none yet) */
	uint8_t gated;       /* some rank submitted it stream-ordered */
	uint8_t gate_state;  /* GATED_*: handed to the executors before its gates opened */
	uint8_t no_gated;    /* skipped once: it waits for its gates here (sched_gated.c) */
	uint32_t gate_dev;   /* gated: the leader's device and its item's position */
	uint64_t gate_pos;
	uint8_t net; /* spanning daemons: NET_* below */
	/*
	 * Spanning daemons: its ranks here have their result (it ran here), and
	 * it holds its slot until it ran on every daemon (NET_DONE).
	 */
	uint8_t ended_early;
	uint8_t nchannels;
	uint8_t chan_base;
	uint8_t algo, proto;
	uint32_t arrived;
	uint64_t seq;
	uint64_t coll_id;
	uint64_t t_start_ns;
	uint64_t t_ask_ns, t_go_ns, t_ran_ns; /* spanning daemons: net_ask(), its GO, ran here */
	uint64_t bytes;
	/*
	 * All-to-all(v) across daemons as blocks (sched_launch.c a2a_blocks()):
	 * the blocks to and from other daemons' ranks not yet ended (CMD_NET_P2P).
	 */
	uint32_t net_blocks;
	/*
	 * An eager collective across daemons whose inputs here are executor
	 * memory: their host copies, one per contributing rank here in rank
	 * order (sched_launch.c net_eager_inputs()); freed when the slot empties.
	 */
	uint8_t *stage;
	struct slot_rank *ranks; /* nranks entries */
};

enum { GATED_NONE, GATED_UNDECIDED, GATED_FIRED };

/* A collective fired by graph replays: the n-th firing of every rank (sched_gate.c). */
struct fire {
	struct fire *next;
	uint64_t n;
	struct slot sl;
};

/* Where a collective of a communicator spanning daemons stands with the others. */
enum { NET_NONE, NET_ASKED, NET_GO, NET_EXECUTED, NET_DONE };

/*
 * The node layer's pair place (pseq) and cookie of an all-to-all block
 * across daemons: the collective's seq with this bit, a sequence space of
 * its own beside the user's sends and receives (which count from 0).
 */
#define NET_A2A_TAG (1ull << 63)

#define COMM_WINDOW 1024u /* collectives one communicator may have open */

/*
 * One send or receive, waiting for its partner. The k-th send from rank s to
 * rank r meets the k-th receive at r from s (pseq k of the pair).
 */
struct p2p_op {
	struct p2p_op *next;
	struct sched_client *client;
	uint64_t user_data;
	uint64_t t_ns; /* arrival: the timeout runs from here */
	uint64_t pseq;
	struct collc_sqe sqe;
	struct mr *mr;     /* the buffer; NULL for count 0 */
	struct mr *sig_mr; /* stream-ordered: the gate's device word (sched_gate.c) */
	uint64_t sig_off;
	uint32_t rank; /* who posted it */
	int err;       /* failed validation: it and its partner end with it */
	/* Its peer runs on another daemon: the node layer moves it (node_p2p_post). */
	uint8_t net;
	uint8_t expiring; /* timed out; the node layer ends it (node_p2p_expire) */
	uint64_t cookie;
};

/* A send and its receive, matched: one copy on one of the two ranks' devices. */
struct p2p_xfer {
	struct p2p_xfer *next;
	struct p2p_op *send, *recv;
	uint32_t dev; /* global device index that runs the copy */
	uint8_t nchannels, chan_base;
	uint64_t fifo_pos;
	uint64_t coll_id;
	uint64_t t_start_ns, bytes;
};

/* Per (sender, receiver) pair: posts so far, and how many of the other side timed out. */
struct p2p_pair {
	uint64_t sends, recvs;
	uint64_t sends_expired; /* sends of pseq below this timed out: their receives fail */
	uint64_t recvs_expired;
};

/* Per-client quotas: past them requests fail with -EDQUOT. */
#define QUOTA_COMMS 256u
#define QUOTA_MRS   4096u
#define QUOTA_BYTES (1ull << 40)

/* Send/recv ops in order of arrival, with their count (sched_p2p.c). */
struct p2p_oplist {
	struct p2p_op *head;
	struct p2p_op **tail;
	uint32_t n;
};

struct comm {
	struct comm *next;
	uint64_t id;
	uint8_t nonce[32];
	uint32_t nranks;
	uint32_t joined;
	uint64_t t_first_join;    /* now_ns() of its first rank's comm_init */
	uint8_t ready;            /* every rank joined */
	uint8_t failed;           /* setup failed or a rank left before all joined */
	struct sched_cmd **joins; /* pending comm_init of each rank */
	struct member **members;  /* by rank; NULL once the client went */
	uint32_t live;            /* members neither gone nor left */
	uint32_t *devs;           /* global device indexes (sched.fifos) */
	uint64_t *comm_dev;
	uint32_t exec_idx; /* its executor: sched.execs[exec_idx] */
	void *exec_priv;
	int revoked;   /* 0, or the error every later collective gets */
	int leave_err; /* a rank left after its part of everything in flight: revoke once drained */
	uint32_t timeout_ms;     /* UINT32_MAX: follow op_timeout_ms */
	uint64_t timeouts;       /* collectives ended by the timeout */
	uint64_t timed_out_mask; /* ranks missing from the last one that timed out */
	uint64_t next_launch;    /* oldest collective not yet planned */
	uint64_t next_done;      /* oldest collective not yet finished */
	struct slot *slots;      /* COMM_WINDOW, indexed by seq % COMM_WINDOW */
	uint64_t completed, errors, inflight;
	uint64_t revoked_inflight; /* collectives in the executors when it was revoked */
	uint64_t by_algo[COLLC_ALGO_MAX];
	uint64_t by_proto[COLLC_PROTO_MAX];
	/*
	 * Joined with a network id (daemon/node.c). Until every rank is known it
	 * may still turn out local (every rank joined here); once it spans
	 * daemons, local says which ranks run here (NULL: all of them).
	 */
	uint8_t net;
	uint8_t net_nchan; /* channels every daemon runs it on */
	/* Its group rings' block (node.c, the table): ranks of each daemon; 0: none. */
	uint8_t net_group;
	uint8_t net_pair; /* spans two daemons exactly: eager inputs may land in place */
	uint64_t net_hier_min_bytes; /* all-reduces of this many bytes a rank or more (AG, RS: the whole buffer): COLLC_ALGO_HIER */
	uint8_t warned_relay; /* said once that its executor runs no all-to-all across daemons */
	uint8_t *local;
	/*
	 * Where the ring across daemons runs in another order than the ranks'
	 * (node.c nc_order_ring()): ring[p] the rank at position p, ring_pos[r]
	 * rank r's position; the executor knows ranks by position (exec.h
	 * comm_setup_part). NULL: rank order.
	 */
	uint8_t *ring, *ring_pos;
	uint32_t nlocal; /* ranks that submit here */
	/* Its collective handed to the executors gated, undecided (sched_gated.c). */
	struct slot *gated;
	/* Point to point (sched_p2p.c); pairs allocated at the first send or receive. */
	struct p2p_pair *pairs;     /* nranks x nranks, [sender * nranks + receiver] */
	struct p2p_oplist p2p_wait; /* unmatched, oldest first */
	/* Stream-ordered, peer on another daemon: waiting for their gates (sched_p2p_net_gates). */
	struct p2p_oplist p2p_gated;
	struct p2p_xfer *p2p_ready; /* matched, not launched, oldest first */
	struct p2p_xfer **p2p_ready_tail;
	struct p2p_xfer *p2p_run; /* launched */
	uint32_t p2p_queued;      /* xfers on p2p_ready */
	uint64_t p2p_inflight;    /* xfers on p2p_run */
	uint64_t p2p_cookie;      /* names the last op handed to the node layer */
	/* Graph firings (sched_gate.c), matched by firing order apart from the window. */
	struct fire *fires; /* oldest first */
	uint64_t fires_inflight;
};

static inline int comm_rank_local(const struct comm *cm, uint32_t r)
{
	return !cm->local || cm->local[r];
}

/* Rank r as its executor knows it: its position on the ring. */
static inline uint32_t comm_ring_pos(const struct comm *cm, uint32_t r)
{
	return cm->ring_pos && r < cm->nranks ? cm->ring_pos[r] : r;
}

/* The rank at position p of the ring. */
static inline uint32_t comm_ring_rank(const struct comm *cm, uint32_t p)
{
	return cm->ring ? cm->ring[p] : p;
}

/* One device of one executor; the scheduler numbers them globally. */
struct fifo_host {
	struct collc_work_fifo *f;
	uint64_t tail;        /* next position to write */
	uint64_t batch_first; /* the open batch: written, not yet published (proto/work.h) */
	uint32_t batch_n;
	uint32_t exec_idx;
	uint32_t dev; /* the executor's own device number */
	uint8_t used;
	/* The undecided gated item at the FIFO's tail, and its communicator (sched_gated.c). */
	struct slot *gated_sl;
	struct comm *gated_cm;
};

#define SCHED_MAX_DEVICES (EXEC_MAX * COLLC_MAX_RANKS)

/* One executor as the scheduler sees it. */
struct sched_exec {
	const struct exec_backend *ex;
	uint32_t base;           /* its devices are sched.fifos[base, base + ndevices) */
	uint32_t next_chan_base; /* rotates when its config asks for it */
	struct collc_config cfg; /* this pass's config, resolved for it (cfg_resolve) */
};

struct sched_state {
	struct sched_exec execs[EXEC_MAX];
	uint32_t nexecs;
	uint32_t ndevs;
	int execs_stopped; /* sched_release(): the executors' fini ran */
	struct sched_client *clients;
	struct comm *comms;
	struct fifo_host fifos[SCHED_MAX_DEVICES];
	uint32_t next_client_id;
	uint64_t next_comm_id;
	uint64_t next_coll_id;
	uint64_t submitted, completed, errors, bad;
	uint64_t batches, batch_items; /* work batches published, and the items they held */
	/* Stream-ordered collectives finished, graph firings taken, ns from gates open to end. */
	uint64_t stream_colls, graph_fires, gate_ns;
	uint64_t gated_items, gated_fired, gated_skipped; /* sched_gated.c */
	/* Items that named a done word; clients whose words an executor could not map. */
	uint64_t done_items, done_map_failures;
	/* Eager collectives across daemons whose buffers here were staged (sched_launch.c). */
	uint64_t net_eager_staged;
	/* Ring collectives across daemons that ran to ALLDONE, and their phases (status.h). */
	uint64_t net_phase_n, net_phase_ns[NET_PHASES];
	uint64_t by_algo[COLLC_ALGO_MAX];
	uint64_t by_proto[COLLC_PROTO_MAX];
	uint64_t by_op[COLLC_OP_MAX];
	uint64_t lat_buckets[8][17]; /* size class x log2(us) bucket; 16: beyond */
	uint64_t lat_count[8];
	uint64_t lat_sum_ns[8];
};

extern struct sched_state sched;

/* sched_gate.c: stream gates and graph firings */

/* Ends one rank's part of a collective: a CQE, or for a stream collective its gate. */
void sched_complete(struct sched_client *c, const struct collc_sqe *e, int res);
/* Are the gates of every stream-ordered rank of sl open? Notes when the first opened. */
int sched_gates_open(const struct comm *cm, struct slot *sl);
/* Arms a graph gate with the template e (COLLC_SQE_GRAPH); answers with a CQE. */
void sched_graph_arm(struct sched_client *c, struct member *mb, const struct collc_sqe *e,
		     uint32_t idx);
/* Takes the graph replays that fired since the last pass. */
int sched_graph_poll(void);
int sched_fires_launch(struct comm *cm);
int sched_fires_reap(struct comm *cm);
int sched_fires_done_visible(const struct comm *cm);
int sched_fires_expire(struct comm *cm, uint32_t ms, uint64_t now);
void sched_fires_revoke(struct comm *cm, int err);
void sched_fires_free(struct comm *cm);
/*
 * The gate's device word of a stream collective's rank (struct collc_gate
 * sig_mr, sig_off, as the client left them): a reference on collc_mem_alloc
 * memory in sr, or none (the stream then waits on the host word).
 */
void sched_sig_take(struct sched_client *c, uint32_t id, uint64_t off, struct mr **ret_mr,
		    uint64_t *ret_off);
/* sched_sig_take() of a stream SQE's gate; nothing for others. */
void sched_sqe_sig_take(struct sched_client *c, const struct collc_sqe *e, struct mr **ret_mr,
			uint64_t *ret_off);
/* Is e's gate open (go holds its ticket)? Always, for an SQE without COLLC_SQE_STREAM. */
int sched_gate_open(const struct sched_client *c, const struct collc_sqe *e);
/* What a stream collective's signal word receives: its ticket, or 1 for a graph firing. */
uint32_t sched_signal_value(const struct collc_sqe *e);
/*
 * A rank of a stream collective that ends without its item having run: the
 * grid of device dev still stores its signal word (a COLLC_WORK_SIGNAL item),
 * so the stream goes on. Takes over the reference *sig_mr (NULL: nothing to do).
 */
void sched_signal_unrun(uint32_t dev, struct mr **sig_mr, uint64_t sig_off,
			const struct collc_sqe *e);
/* sched_complete(), and for a stream collective the signal of its device word too. */
void sched_gate_fail(struct sched_client *c, struct member *mb, const struct collc_sqe *e,
		     uint32_t sig_id, uint64_t sig_off, int res);
/* An SQE that ends at once: sched_gate_fail() with its gate's device word. */
void sched_sqe_fail(struct sched_client *c, struct member *mb, const struct collc_sqe *e, int res);
/* Writes the signal items that wait for FIFO room; lets go of consumed ones. */
int sched_signals_flush(void);

/* sched_done.c: done words (proto/shm.h). Maps a new client's for every executor. */
void sched_dones_open(struct sched_client *c);
/* The client is freed: its words stay mapped until the FIFOs pass what was written. */
void sched_dones_retire(struct sched_client *c);
/* Frees retired words no item can name any more (all: every one, at release). */
void sched_dones_reap(int all);
/* Nonzero when the client's done word holds this SQE's ticket (it may have seen its end). */
int sched_done_seen(const struct sched_client *c, const struct collc_sqe *e);
/* Names rank sr's done word in its item where the rank's end completes it. */
void sched_done_fill(const struct comm *cm, const struct slot_rank *sr, struct collc_work_item *it);
/* Executor-space address of the go word of c's gate for executor exec_idx; 0: not mapped. */
uint64_t sched_gate_go_addr(const struct sched_client *c, uint32_t exec_idx, uint32_t gate);
/* Does some stream collective, or a graph gate that fired lately, want us polling? */
int sched_gates_waiting(void);
/* Is some graph gate armed? Then sleep briefly: a replay says nothing to us. */
int sched_graphs_armed(void);

/* scheduler.c: commands */
void sched_cmd_finish(struct sched_cmd *cmd, int result);
/* A node thread's command (CMD_NET_*) is through: freed here, on the scheduler's thread. */
void sched_net_cmd_end(struct sched_cmd *cmd);

/* sched_ring.c: submission and completion rings */
/* The checks of an SQE against the client's registrations; fills sr's buffers. */
int sched_sqe_check(struct sched_client *c, const struct collc_sqe *e, const struct member *mb,
		    uint32_t idx, struct slot_rank *sr);
void sched_post_cqe(struct sched_client *c, uint64_t user_data, int res);
void sched_flush_cqs(void);
int sched_cq_room(const struct sched_client *c);
int sched_drain_sq(struct sched_client *c);
/* A reference on the registration holding [off, off + len) of handle id (none for 0 bytes). */
int sched_resolve_buf(struct sched_client *c, uint32_t id, uint64_t off, uint64_t len,
		      struct mr **ret);

/* sched_mr.c: registrations */
void sched_mr_free_mem(const struct exec_backend *ex, void *exec_mem, void *addr, uint64_t size);
void sched_mr_put(struct mr *m);
struct mr *sched_mr_lookup(struct sched_client *c, uint32_t id);
void sched_mr_release(struct sched_client *c, uint32_t id);

/* sched_comm.c: communicators */
struct slot *sched_slot_of(struct comm *cm, uint64_t seq);
uint32_t sched_slot_pending_count(const struct comm *cm);
void sched_slot_finish(struct comm *cm, struct slot *sl, int res);
/* Frees sl's staged eager inputs (slot.stage), if any. */
void sched_slot_unstage(struct slot *sl);
/*
 * Across daemons: sl ran here, so every local rank's buffers hold its result
 * and nothing touches them any more: its ranks end now, with success; the
 * slot stays in flight until every daemon ran it (sched_slot_finish()).
 */
void sched_slot_end_early(struct comm *cm, struct slot *sl);
void sched_comm_advance_done(struct comm *cm);
/*
 * Eager collective sl (node.h) ended with result res (len bytes): into the
 * receive buffers of the ranks here. -EPROTO when len is not its result's.
 */
int sched_net_eager_done(struct comm *cm, struct slot *sl, const uint8_t *res, uint32_t len);
/*
 * Eager collective sl between two daemons: its result from the inputs of
 * the ranks here and the other daemon's (peer, len bytes, its contributing
 * ranks' in rank order; peer NULL: they are where net_ask() let them land),
 * into the receive buffers of the ranks here. -EPROTO when len is not what
 * the other daemon's ranks owe; -ENOMEM.
 */
int sched_net_eager_peer(struct comm *cm, struct slot *sl, const uint8_t *peer, uint32_t len);
void sched_comm_revoke(struct comm *cm, int err);
void sched_client_free(struct sched_client *c);
void sched_comm_free(struct comm *cm);
void sched_collect(void);
void sched_member_leave(struct member *mb, int err);
void sched_comm_fail_init(struct comm *cm, int err);
void sched_cmd_join(struct sched_cmd *cmd);
void sched_client_gone(struct sched_client *c);
void sched_net_cmd(struct sched_cmd *cmd);
struct member *sched_member_of(struct sched_client *c, uint32_t handle);

/* sched_p2p.c: sends and receives */
void sched_p2p_take(struct sched_client *c, struct member *mb, const struct collc_sqe *e);
int sched_p2p_launch(struct comm *cm, const struct collc_config *cfg);
int sched_p2p_launch_unblocked(const struct comm *cm);
/* Does a matched send/recv, or one across daemons, wait for a stream's gate? */
int sched_p2p_gated(const struct comm *cm);
/* Hands the node layer the stream-ordered ones across daemons whose gates opened. */
int sched_p2p_net_gates(struct comm *cm);
int sched_p2p_reap(struct comm *cm);
int sched_p2p_done_visible(const struct comm *cm);
int sched_p2p_expire(struct comm *cm, uint32_t ms, uint64_t now);
void sched_p2p_revoke(struct comm *cm, int err);
void sched_p2p_free(struct comm *cm);
struct node_p2p;
void sched_p2p_net_cmd(struct sched_cmd *cmd);
/* Fills d->ex and d->dev for a buffer of executor memory of local rank `rank` (sched_p2p.c). */
void sched_net_stage(const struct comm *cm, uint32_t rank, const struct mr *mr, struct node_p2p *d);
/* An all-to-all block across daemons of collective seq ended with err (sched_launch.c). */
void sched_a2a_block_done(struct comm *cm, uint64_t seq, int err);
uint64_t sched_p2p_lagging(const struct comm *cm);

/* sched_launch.c: launch, reap, timeouts */
int sched_coll_done_on(uint32_t dev, uint64_t pos, uint32_t base, uint32_t nchannels);
/*
 * Direction of a copy list (proto/algo_copy.h): 1 push (ranks write their
 * peers' receive buffers), 0 pull (they read their peers' send buffers): the
 * config's preference unless memory peers cannot reach (EXEC_MEM_NO_PEER_READ)
 * decides; -EOPNOTSUPP when such memory is on both sides.
 */
int sched_copy_push(int prefer_push, int closed_send, int closed_recv);
void sched_record_latency(uint64_t t_start_ns, uint64_t bytes);
int sched_fifo_has_room(uint32_t dev);
/* Room, and no undecided gated item in the way: a look only (sched_gated_clear() acts). */
int sched_fifo_ready(uint32_t dev);
/* The first rank of cm that runs here. */
uint32_t sched_first_local(const struct comm *cm);
/* cm's collective timeout under cfg (0: none). */
uint32_t sched_comm_timeout_ms(const struct collc_config *cfg, const struct comm *cm);

/* Gated items (sched_gated.c). */
/* cm's next collective sl, every rank in, some gate closed: to the executors gated. 1: launched. */
int sched_gated_launch(struct comm *cm, struct slot *sl);
/* The gate of rank r's item of sl (proto/work.h), from sched_launch(); 0 or -E2BIG. */
int sched_gated_fill(const struct comm *cm, const struct slot *sl, uint32_t r,
		     struct collc_work_gate *g);
/*
 * May cm's sl (NULL: anything but cm's window) be written to dev's FIFO as
 * far as gated items go? 0: not now; the leader of the one in the way was
 * asked to skip it, unless it is an earlier collective of cm's window.
 */
int sched_gated_clear(uint32_t dev, const struct comm *cm, const struct slot *sl);
/* Asks the leader of cm's undecided gated collective to skip it. */
void sched_gated_cancel(struct comm *cm);
/* Acts on the decisions that came, asks to skip those past their timeout; progress. */
int sched_gated_poll(void);
/* Is some gated collective undecided? Then the scheduler keeps polling. */
int sched_gated_pending(void);
/*
 * Takes the item just written at fh->tail into fh's open work batch; the
 * batch is published (every seq, then published: W1, B1) at the end of the
 * scheduler's launches, or once full. Every item the scheduler writes goes
 * through here.
 */
void sched_fifo_append(struct fifo_host *fh);
int sched_slot_executed(const struct comm *cm, const struct slot *sl);
/*
 * Plans sl and writes its items; counts it in *inflight. Returns 0 when a
 * FIFO has no room (try again later), 1 when launched or finished (an error).
 */
int sched_launch(struct comm *cm, struct slot *sl, uint64_t *inflight);
int sched_launch_ready(void);
int sched_expire(const struct collc_config *cfg, uint64_t now);
int sched_timers_armed(const struct collc_config *cfg);
int sched_reap(void);

#endif
