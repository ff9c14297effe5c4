/* SPDX-License-Identifier: MIT */
/*
 * An executor runs the work FIFOs of its devices: the CPU executor with host
 * threads (cpu/executor.c), or one persistent grid per GPU (cuda/executor.c).
 * Generic code reaches either only through this table; the registry
 * (exec.c) starts them and is, with the executors, the only file that knows
 * them by name.
 */
#ifndef COLLCD_EXEC_H
#define COLLCD_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/config.h"
#include "proto/wire.h"
#include "proto/work.h"

/* At most this many executors run in one collcd (CPU and CUDA). */
#define EXEC_MAX 2u

/* Capability bits of an executor. */
#define EXEC_CAP_HOST_RANKS      1u /* runs ranks of device -1 (host memory) */
#define EXEC_CAP_DEVICE_RANKS    2u /* runs ranks of device >= 0, and serves their memory (mem_add) */
/*
 * Its one-shot (Simple) all-reduce may run in place: a rank's result does not
 * overwrite its input before every peer has read it (the CPU executor stages
 * such a result in scratch until the phase ends). Without it, the planner
 * turns an in-place one-shot all-reduce into two-shot (PLAN_INPLACE).
 */
#define EXEC_CAP_ONESHOT_INPLACE 4u
/*
 * Runs all-to-all(v) across daemons as the relay on the ring (cpu/copy.c).
 * Without it, an executor with copy() runs them as blocks (sched_launch.c
 * a2a_blocks()); one with neither ends them with -EOPNOTSUPP everywhere.
 */
#define EXEC_CAP_NET_RELAY       8u
/*
 * Runs hierarchical all-reduces, all-gathers and reduce-scatters across
 * daemons (COLLC_ALGO_HIER): its comm_setup_part takes a group size and
 * comm_link serves EXEC_RING_GROUP.
 */
#define EXEC_CAP_NET_HIER        16u

/* Which ring of a communicator spanning daemons comm_link names. */
enum {
	EXEC_RING_FLAT = 0, /* the ring over every rank (ring positions) */
	/*
	 * With a group size g (comm_setup_part): the ring of the ranks at the
	 * same place in their daemon's block of g positions, position p sending
	 * to (p + g) mod nranks.
	 */
	EXEC_RING_GROUP = 1,
};

/* A registration the executor made (mem_add). */
struct exec_mem {
	uint64_t addr; /* executor-space address work items carry (a plain pointer) */
	uint64_t size;
	int fd;         /* for the client with the reply (a GPU allocation's socket); -1: none */
	uint32_t flags; /* EXEC_MEM_* */
	void *handle;   /* for mem_release */
};

/* Peers cannot read it directly (one-shot/two-shot): the planner picks the ring. */
#define EXEC_MEM_NO_PEER_READ 1u

/*
 * Completion of mem_add, called once from the executor's own thread (never
 * from inside mem_add): result 0 with m filled, or -errno. On success the
 * callee owns m->fd and must release m->handle once.
 */
typedef void exec_mem_done_fn(void *arg, int result, const struct exec_mem *m);

/*
 * One Simple ring of a connection, for the network proxy (daemon/node.c)
 * that plays its far end: on the daemon of the sending rank the proxy is
 * the ring's receiver (it reads published steps and hands back credit), on
 * the daemon of the receiving rank its sender (it lands steps from the
 * network and publishes them). Steps are monotonic; step s lives in slot
 * s % nslots.
 */
struct exec_link {
	void *l;
	char *buf; /* nslots slots of slot_bytes */
	uint32_t slot_bytes;
	uint32_t nslots;
	/* Acquire loads: steps published (tail), steps consumed (head). */
	uint64_t (*tail)(void *l);
	uint64_t (*head)(void *l);
	/* Payload bytes of published step s (read after tail passed s). */
	uint32_t (*len)(void *l, uint64_t step);
	/* Release stores that wake the rank sleeping on them. */
	void (*post_tail)(void *l, uint64_t v, uint32_t len_of_last);
	void (*post_head)(void *l, uint64_t v);
	/*
	 * The proxy goes to sleep: the rank's next post of tail or head on this
	 * ring writes 8 bytes to the eventfd fd (once; watch again to rearm).
	 * K1: the proxy fences (seq_cst) after watching and then looks at tail
	 * and head again; pairs with K2 in the executor's post.
	 * NULL: the rank cannot wake anyone (a GPU grid); the proxy polls the
	 * ring while its communicator has a collective in flight.
	 */
	void (*watch)(void *l, int fd);
	/*
	 * Nonzero once a rank of the communicator received a stream that breaks
	 * what the daemons agreed (a relay block of another length): the proxy
	 * fails the communicator instead of reporting the collective done.
	 * NULL: the executor never says so.
	 */
	const uint32_t *broken;
	/*
	 * Sending straight from the rank's buffers (NULL: the executor always
	 * stages steps in the slots). The proxy calls direct() at attach, before
	 * the communicator's first collective, when its transport sends from any
	 * host memory; from then on the rank may publish a step whose payload
	 * stays in its own buffer, one copy less a byte: src() names where step
	 * s lies (NULL: its slot), read after tail passed s, and the rank's
	 * collective ends only once the proxy has handed back (head) every step
	 * it published so.
	 */
	void (*direct)(void *l);
	const char *(*src)(void *l, uint64_t step);
	/*
	 * Receiving straight into the rank's buffers (NULL: every step lands in
	 * its slot). The proxy calls recv_direct() at attach, before the
	 * communicator's first collective, when its transport receives into any
	 * host memory; from then on it posts the receive of step s only once
	 * s < known() (acquire: D1' pairs with D1 in the executor) as well as
	 * s < head + nslots, and lands it where dst() names: len bytes exactly
	 * at a place in the rank's buffers, or the slot (NULL, up to slot_bytes).
	 * The rank names step s before it posts the head that lets the proxy
	 * post s, or, past its head, with a wake-up like a post's. Its
	 * collective ends only once every step it named so has landed; a
	 * revoked communicator's links are closed before its items are
	 * abandoned (node_comm_revoke()), so the proxy never writes a buffer
	 * whose collective ended.
	 */
	void (*recv_direct)(void *l);
	uint64_t (*known)(void *l);
	char *(*dst)(void *l, uint64_t step, uint32_t *ret_len);
};

/* What every executor is handed at start. */
struct exec_init {
	uint32_t ndevices;     /* 0: the executor's own default */
	uint32_t max_channels; /* 0: the executor's own default */
	int require_mps;       /* CUDA: a GPU not served by MPS fails the start with -EPERM */
	const struct collc_config *cfg; /* the start config: keys fixed at start (cuda_lanes, ...) */
	/* Wakes the scheduler; executors call it after publishing work_consumed. */
	void (*notify)(void);
	/*
	 * The same after an item a channel consumed without running it (not
	 * its share): wakes the scheduler only where it sleeps waiting for
	 * FIFO room, the one thing such an item can give it.
	 */
	void (*notify_skipped)(void);
};

struct exec_backend {
	const char *name;
	uint32_t backend; /* COLLC_BACKEND_* (one bit) */
	uint32_t ndevices;
	uint32_t max_channels;
	uint32_t caps; /* EXEC_CAP_* */
	/*
	 * 1: fini released the executor's communicators and memory with its
	 * contexts; sched_release() must leave them alone. 0: they outlive
	 * fini and sched_release() tears them down.
	 */
	uint32_t fini_frees;
	/* Values of the config keys left at auto, for this executor (cfg_resolve). */
	struct cfg_exec_defaults defaults;
	void (*fini)(void);
	struct collc_work_fifo *(*fifo)(uint32_t dev);
	/* Called after items were appended to dev's FIFO (item seq published). */
	void (*kick)(uint32_t dev);
	/*
	 * Gated items (proto/work.h COLLC_ITEM_GATED): the executor holds a
	 * stream collective until the go words its leader watches reached their
	 * tickets (the gates' go words, mapped with the done words: host_map).
	 * NULL where the executor cannot. Scheduler thread.
	 *   gate_decision: the executor-space address of the decision word of
	 *                  the gated item that dev leads at position pos;
	 *   gate_cancel:   dev skips the gated items it leads before position
	 *                  upto that it has not fired;
	 *   gate_outcome:  COLLC_GATE_FIRE or COLLC_GATE_SKIP once dev decided
	 *                  the gated item it leads at pos, else 0 (acquire: a
	 *                  skip's consumption, a fire's run, come after).
	 */
	uint64_t (*gate_decision)(uint32_t dev, uint64_t pos);
	void (*gate_cancel)(uint32_t dev, uint64_t upto);
	uint32_t (*gate_outcome)(uint32_t dev, uint64_t pos);
	/*
	 * Places every rank of a communicator on a device (a FIFO): joins[r] is
	 * rank r's comm_init request (its device ordinal and UUID). Returns
	 * -EINVAL or -ENODEV when the ranks cannot be placed (e.g. an unknown GPU).
	 */
	int (*place)(uint32_t nranks, const struct collc_msg_comm_init *const *joins,
		     uint32_t *ret_devs);
	/*
	 * Allocates the connections of a communicator whose rank r runs on
	 * devs[r]; ret_comm_dev[r] receives the executor-space address that
	 * work items of rank r carry.
	 */
	int (*comm_setup)(uint32_t nranks, const uint32_t *devs, uint64_t *ret_comm_dev,
			  void **ret_priv);
	/*
	 * The communicator was revoked: its items still in the executor end at
	 * their next wait without finishing (they still publish work_consumed,
	 * and count in collc_consumed.aborted). Called from the scheduler
	 * thread, at most once per communicator; its connections are never used
	 * again (teardown follows once every item is consumed, and a new
	 * communicator gets fresh, zeroed ones).
	 */
	void (*comm_abort)(void *priv);
	/*
	 * comm_setup for a communicator spanning daemons (NULL: the executor
	 * runs none): local[r] is nonzero for the ranks this collcd runs, and
	 * only those get devices and comm_dev; the other ranks' receive rings
	 * exist here too, as the proxy's staging (comm_link). order, where not
	 * NULL, runs the ring in another order than the ranks': every rank
	 * index here, in comm_link and in items (rank, root, the relay's copy
	 * lists) is then a ring position, and order[p] the communicator rank at
	 * position p, whose block all-gather and reduce-scatter buffers hold
	 * there (proto/algo_ring.h collc_ring_order()). An executor that cannot
	 * returns -ENOTSUP. group, where not 0 (EXEC_CAP_NET_HIER only): every
	 * daemon holds group consecutive positions (nranks a multiple of it),
	 * and the executor also makes the group rings (EXEC_RING_GROUP) that
	 * hierarchical collectives run on.
	 */
	int (*comm_setup_part)(uint32_t nranks, const uint32_t *devs, const uint8_t *local,
			       const uint8_t *order, uint32_t group, uint64_t *ret_comm_dev,
			       void **ret_priv);
	/*
	 * The Simple ring rank (a position, with an order) receives on, on
	 * channel chan, of ring EXEC_RING_FLAT or EXEC_RING_GROUP.
	 */
	int (*comm_link)(void *priv, uint32_t rank, uint32_t chan, uint32_t ring,
			 struct exec_link *ret);
	/*
	 * Nonzero once a rank of the communicator received a step or relay
	 * block of another length than the daemons agreed: the word(s) that
	 * exec_link.broken shows the proxy. Read by the scheduler after it
	 * acquired the items' work_consumed (P1'' pairs with P1, stored before
	 * it), to end a collective that ran here on its ranks before every
	 * daemon ran it only where nothing broke. NULL: never nonzero.
	 */
	int (*comm_broken)(void *priv);
	/* Frees them; no item referring to them is in any FIFO any more. */
	void (*comm_teardown)(void *priv);
	/* Human name of a device for status. */
	void (*device_name)(uint32_t dev, char *out, uint32_t outlen);
	/* Nonzero when the device's executor has started. */
	int (*device_active)(uint32_t dev);
	/*
	 * Executor memory for a client (COLLC_MSG_MEM_ALLOC or MEM_REGISTER with
	 * device >= 0; req is the request's whole payload, len its length).
	 * NULL: the executor serves host memory only. Returns 0 when queued (done
	 * follows from the executor's thread) or -errno (done is never called).
	 * Never blocks: the work, which may wait for a quiesce window, runs on
	 * the executor's own thread.
	 */
	int (*mem_add)(uint16_t type, const void *req, size_t len, exec_mem_done_fn *done,
		       void *arg);
	/* Lets go of a registration mem_add made. Never blocks; any thread. */
	void (*mem_release)(void *handle);
	/*
	 * Makes len bytes of collcd's memory at p (page aligned; a client's done
	 * words, proto/shm.h) a place the executor's items may store to: 0 with
	 * *ret_addr the executor-space address and *ret_handle for host_unmap,
	 * or -errno. On success the executor owns the mapping at p and unmaps
	 * it in host_unmap. NULL: items store through plain pointers. Scheduler
	 * thread (or the node thread, for copy()'s staging); never waits for a
	 * resident grid.
	 */
	int (*host_map)(void *p, size_t len, uint64_t *ret_addr, void **ret_handle);
	/* Lets go of it; no item in any FIFO names it any more. Never blocks. */
	void (*host_unmap)(void *handle);
	/*
	 * Copies bytes between memory this executor serves (a registration of
	 * mem_add, at its executor-space address) and host memory, or within its
	 * memory, and returns once they landed: 0 or -errno. dev is the device
	 * (as in fifo()) of the rank the copy is for; the copy may read or write
	 * any memory the executor serves. For the node layer's host staging of
	 * sends and receives across daemons (node_p2p.c): it runs on the node
	 * thread, beside the resident grid, on a stream of the executor's own.
	 * host_map() may also be called there, for the staging buffers. NULL:
	 * the executor's memory does not cross daemons.
	 */
	int (*copy)(uint32_t dev, void *dst, const void *src, size_t bytes);
	/*
	 * Hands the executor a newly published config (scheduler thread, which
	 * holds it as an RCU reader for the call); NULL: nothing to take.
	 */
	void (*configure)(const struct collc_config *cfg);
};

/*
 * Starts the executors: mode "auto" the CPU one always and the CUDA one where
 * GPUs exist, "cpu" only the CPU one, "cuda" only CUDA (failing if it cannot
 * start). -EPERM (require_mps without MPS) fails whatever the mode.
 */
int exec_start(const char *mode, const struct exec_init *init);
/* Stops every executor, in reverse order. */
void exec_stop(void);
uint32_t exec_count(void);
const struct exec_backend *exec_get(uint32_t i);
/* COLLC_BACKEND_* bits of the executors that run. */
uint32_t exec_backend_mask(void);
/*
 * The executor that serves memory or ranks of a device (-1: host memory);
 * NULL when none runs for it.
 */
const struct exec_backend *exec_for_device(int32_t device);

#endif
