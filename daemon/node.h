/* SPDX-License-Identifier: MIT */
/*
 * The node layer: collcd meeting other collcd daemons (--listen). One thread
 * ("collc-node") owns the listen socket, the authenticated control
 * connections of communicators that span daemons (bootstrap, heartbeats,
 * failure relay), and the proxy that moves the CPU executor's Simple ring
 * steps over the network transport (daemon/net/net.h) between the ranks of
 * neighbouring daemons.
 *
 * A spanning communicator is a star on its root daemon (the one named in the
 * unique id): every other daemon joins it over one control connection
 * authenticated with the id's secret, registers its local ranks with the
 * handles of their incoming data links, and receives the rank table. Data
 * links then join ring neighbours directly, and every two daemons for sends
 * and receives (node_p2p.c). The scheduler names
 * communicators by its own id; it hears back through CMD_NET_READY and
 * CMD_NET_FAIL (sched.h).
 */
#ifndef COLLCD_NODE_H
#define COLLCD_NODE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "daemon/config.h"
#include "daemon/exec.h"
#include "proto/shm.h"
#include "proto/wire.h"

/* Most channels a spanning communicator uses (the daemons agree on the least). */
#define NODE_MAX_CHANNELS  2u
/*
 * Incoming data links a rank listens for: one per channel of the ring, and
 * one per channel of its group ring (hierarchical collectives, exec.h
 * EXEC_RING_GROUP) at NODE_MAX_CHANNELS + channel.
 */
#define NODE_LINK_SLOTS    (2u * NODE_MAX_CHANNELS)
/*
 * The key net_hier_min_bytes' default: all-reduces of at least this many
 * bytes a rank (all-gathers and reduce-scatters: the whole buffer) run
 * hierarchically where the communicator allows
 * (docs/design.md §6b). On two daemons with two ranks each they were at
 * least as fast as the flat ring at every size measured, from 4 KiB (the
 * smallest; below it all-reduces go eager by default) to 64 MiB, and
 * 1.2-1.4x its pipelined busbw from 8 MiB (bench/RESULTS.md "Hierarchical
 * all-reduce across daemons"); all-gathers and reduce-scatters were never
 * slower beyond the spread either.
 */
#define NET_HIER_MIN_BYTES (4ull << 10)
/*
 * The key net_spin_us' default. While collectives across daemons are in
 * flight the node thread keeps looking at its sockets this long after the
 * last message, giving its core to any other thread between looks
 * (sched_yield()), before it sleeps in poll(): a message that finds it
 * awake costs no wake-up of a sleeping thread on another core (measured
 * on the 2-core VM: 34 us each way).
 */
#define NET_SPIN_US        200

/* Starts the node thread when cfg->listen is set; 0 and nothing running otherwise. */
int node_init(const struct collc_config *cfg, const uint8_t node_id[16]);
void node_fini(void);
/* Where collcd listens (family 0: it does not), for the hello reply. Any thread. */
void node_listen_addr(uint16_t *ret_family, uint16_t *ret_port, uint8_t ret_addr[16]);

/* Scheduler thread. */

/* A new config was published: take its hot key (net_timeout_ms). */
void node_configure(const struct collc_config *cfg);

/* Is uid a network id naming another daemon as its root? */
int node_uid_remote(const struct collc_uid *uid);
/*
 * Local rank `rank` of scheduler communicator comm_id joined with a network
 * id. -ENOTSUP when collcd does not listen (the id needs other daemons). A
 * GPU rank (device >= 0) joins too, but a communicator that turns out to
 * span daemons with GPU and host-memory ranks mixed fails everywhere with
 * -ENOTSUP.
 */
int node_join(uint64_t comm_id, const struct collc_uid *uid, uint32_t nranks, uint32_t rank,
	      int32_t device);
/* The executor set the communicator up: the proxy may use its rings now. */
int node_comm_attach(uint64_t comm_id, const struct exec_backend *ex, void *priv);
/* The communicator was revoked here: tell the other daemons (they see -EPIPE). */
void node_comm_revoke(uint64_t comm_id, int err);
/* Forget it: no ring of it is touched after this returns (before comm_teardown). */
void node_comm_release(uint64_t comm_id);
/*
 * What a daemon's ranks submitted as collective seq (the ranks here agree,
 * else bad): the root compares every daemon's and answers CMD_NET_GO.
 */
struct node_coll {
	uint64_t seq;
	uint64_t count;
	uint32_t opcode, dtype, redop, root;
	uint32_t bad;
	uint32_t eager; /* 1: this daemon's ranks' inputs follow (node_eager_sizes()) */
	/* All-to-allv: sums over this daemon's ranks of what they send and expect (sched_launch.c). */
	uint64_t vsend, vrecv;
};
/*
 * Eager collectives: a small collective of host memory rides on the
 * agreement. Each daemon sends its ranks' inputs with its COLL (the ranks
 * that contribute, in rank order, in_bytes each: every rank, or for a
 * broadcast its root alone), the root computes the result once, in rank
 * order, and answers with it instead of a GO (CMD_NET_EAGER: out_bytes, the
 * whole vector of an all-reduce, reduce, broadcast or reduce-scatter, the
 * gathered buffer of an all-gather). No ring runs, no DONE or ALLDONE
 * follows. Where any daemon sent no inputs (its memory is not host memory,
 * or its queue to the root was full) the root answers with a plain GO and
 * the ring runs.
 *
 * Between two daemons, where every rank's input together is at most
 * NODE_PAIR_MAX bytes, the inputs cross once instead of there and back: the
 * root sends its ranks' inputs to the joiner as well (PEER_IN, with its
 * descriptor) as soon as they are ready, and each daemon's scheduler
 * computes the result from its own ranks' buffers and the other daemon's
 * inputs (CMD_NET_PEER_IN), in rank order as the root would, so both hold
 * the same bytes. Both daemons see the same two descriptors and decide
 * alike: eager when both sent inputs and the descriptors match; otherwise
 * the root answers with a GO (an error where they differ) and the ring runs.
 *
 * 1 and the sizes when d may go eager among nranks ranks, the inputs a
 * daemon holds and the result each at most limit bytes (the key
 * net_eager_max_bytes; what arrives is checked against NODE_EAGER_MAX).
 */
#define NODE_EAGER_MAX     (2u << 20)
/*
 * net_eager_max_bytes by default. Where the one other daemon's input lands
 * in place (the scheduler's net_eager_land()), eager took 15-18% less time
 * one at a time than the ring up to 2 MiB held (1 MiB all-reduces, one
 * rank a daemon) and under bbr 512 KiB all-reduces 15-37% less. Where
 * inputs are received aside, node_eager_limit() halves it: with two ranks
 * a daemon, 512 KiB all-reduces (2 MiB held) took 3% more time one at a
 * time and 10-20% more pipelined eager than by the ring (bench/RESULTS.md,
 * "Congestion control auto and the eager limit at 2 MiB").
 */
#define NODE_EAGER_DEFAULT NODE_EAGER_MAX
/*
 * net_eager_max_bytes by default on hosts with cores to spare, whose tcp
 * links move their data sockets in helper threads (net_tcp_helpers): there
 * the ring overtook eager from 512 KiB all-reduces between two daemons (16
 * cores, loopback: 512 KiB 236-255 us one at a time against eager's
 * 262-319, 1 MiB 302-328 against 539-619), while 256 KiB stayed faster
 * eager (120-157 against 181-206; bench/RESULTS.md, "Helper threads for
 * the tcp links").
 */
#define NODE_EAGER_HELPERS (512u << 10)
int node_eager_sizes(const struct node_coll *d, uint32_t nranks, uint64_t limit, uint64_t *ret_in,
		     uint64_t *ret_out);
/*
 * The limit for node_eager_sizes() where the key net_eager_max_bytes is key
 * and nland places here take the other daemon's inputs (node_coll_ready()):
 * the key where its one input lands in place, half of it where inputs are
 * received aside and reduced from there (NODE_EAGER_DEFAULT).
 */
static inline uint64_t node_eager_limit(uint64_t key, uint32_t nland)
{
	return nland == 1 ? key : key / 2;
}
/*
 * Does eager collective d go both ways at once (PEER_IN) among ndaemons
 * daemons? Two, and every rank's input together, which each daemon then
 * holds, at most NODE_PAIR_MAX. Against the round trip through the root,
 * with one rank a daemon: pipelined 20-25% faster at 64 and 128 KiB, and
 * since the node thread polls while collectives cross daemons, one at a
 * time and pipelined about a third faster from 256 KiB to 1 MiB; with two
 * ranks a daemon 15-20% faster pipelined from 128 to 512 KiB
 * (bench/RESULTS.md, "Eager inputs both ways at once" and "Both ways at
 * once up to 2 MiB").
 */
#define NODE_PAIR_MAX NODE_EAGER_MAX
int node_eager_pair(const struct node_coll *d, uint32_t ndaemons, uint32_t nranks);
static inline int node_eager_contributes(const struct node_coll *d, uint32_t rank)
{
	return d->opcode != COLLC_OP_BROADCAST || rank == d->root;
}
/*
 * The result of eager collective d (daemon/node_eager.c): in[r] is rank r's
 * input, in_bytes each (a broadcast reads its root's alone), out takes the
 * result (node_eager_sizes()' out bytes; a reduce-scatter's caller may pass
 * one block of every input and of the result, in_bytes the block's bytes).
 * out may be in[0] or in[1] exactly, else it shares no byte with an input.
 */
void node_eager_compute(const struct node_coll *d, uint32_t nranks, const uint8_t *const *in,
			uint64_t in_bytes, uint8_t *out);
/*
 * parts: (d->eager) the inputs of the ranks here that contribute, one part
 * each in rank order, read before the call returns; none otherwise.
 *
 * land: (d->eager, between two daemons) where the other daemon's inputs
 * may be received straight into this daemon's ranks' buffers, nland (at
 * most NODE_LAND_MAX) places that together take them in order, as they
 * come (the other daemon's contributing ranks' inputs in rank order), read
 * before the call returns. The scheduler names places that no input here
 * overlaps (sched_launch.c net_eager_land()) and keeps them mapped until
 * the collective ends; the node thread writes there only while the other
 * daemon's view, equal to ours, arrives after ours, and never after
 * node_comm_revoke() or node_comm_release() returns. CMD_NET_PEER_IN then
 * carries no data: the inputs are in place. Against a buffer of their own,
 * the result is computed from bytes just received where it goes instead of
 * written over cold memory: 512 KiB all-reduces one at a time 22-26% less
 * time (bench/RESULTS.md, "Eager inputs received in place").
 */
#define NODE_LAND_MAX 4u
void node_coll_ready(uint64_t comm_id, const struct node_coll *d, const struct iovec *parts,
		     uint32_t nparts, const struct iovec *land, uint32_t nland);
/*
 * Collective seq ran here; CMD_NET_DONE follows once it ran on every daemon.
 * ended: the scheduler ended it on its ranks already (counted for status).
 */
void node_coll_done(uint64_t comm_id, uint64_t seq, int ended);
/* Collectives of a spanning communicator in flight: delta +1 at launch, -1 at reap. */
void node_inflight(uint64_t comm_id, int delta);

/*
 * Point to point across daemons (node_p2p.c): a send or a receive of a
 * spanning communicator whose peer rank runs on another daemon. The
 * receiver's daemon tells the sender's that the receive is posted (clear to
 * send, with its count and dtype); the sender's daemon matches it with the
 * sender's send of the same place in the pair's order and either streams
 * the payload straight from the send buffer into the receive buffer or
 * fails both with the error. CMD_NET_P2P {comm_id, seq: the cookie, err}
 * ends each one here; after CMD_NET_FAIL nothing of the communicator's is
 * touched any more.
 */
struct node_p2p {
	uint64_t cookie; /* the scheduler's name for it */
	uint64_t pseq;   /* its place in the (sender, receiver) pair's order */
	uint64_t count;
	uint64_t bytes;
	void *buf; /* mapped in collcd (host memory, or ex's); NULL when bytes is 0 */
	/*
	 * buf is memory of executor ex (a GPU's), not host memory: the payload
	 * goes through host staging with ex->copy(dev, ...). NULL: host memory.
	 */
	const struct exec_backend *ex;
	uint32_t dev;
	uint32_t sender, receiver;
	uint32_t dtype;
	/* Failed here: its partner ends with the same error (-EINVAL, -EOVERFLOW or -EOPNOTSUPP). */
	int32_t err;
	uint32_t send; /* 1: the send (the sender runs here), 0: the receive */
};
/* -errno: the communicator failed (or is not known); nothing will follow. */
int node_p2p_post(uint64_t comm_id, const struct node_p2p *p);
/*
 * It waited past the timeout: 1 when it ended here and now (the scheduler
 * ends it with -ETIMEDOUT); 0 when the peer's daemon must agree first or
 * its data already moves (CMD_NET_P2P follows).
 */
int node_p2p_expire(uint64_t comm_id, uint64_t cookie);

/* Totals for metrics. */
struct node_counters {
	uint64_t accepted, refused;
	uint64_t eager; /* collectives that ran eagerly on this daemon (node.h) */
	/* ... whose other daemon's inputs were received in place (node_coll_ready()) */
	uint64_t eager_landed;
	/* ring collectives ended on the ranks here before every daemon ran them */
	uint64_t early_ends;
	uint64_t bytes_sent, bytes_received;
	uint32_t peers, running;
};
void node_counters(struct node_counters *out);

/* Status: the "net" object (JSON) or a few table lines. Returns bytes written. */
size_t node_status(char *out, size_t len, int json);

#endif
