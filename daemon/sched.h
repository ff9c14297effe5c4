/* SPDX-License-Identifier: MIT */
/*
 * The scheduler thread owns every client, registration and communicator. The
 * control thread asks it for changes with commands: sched_post() queues one and
 * wakes the scheduler; the scheduler runs it between passes and hands it back
 * through the done queue, which wakes the control loop (uv_async).
 */
#ifndef COLLCD_SCHED_H
#define COLLCD_SCHED_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/exec.h"
#include "proto/wire.h"

struct sched_client;

enum sched_cmd_type {
	CMD_CLIENT_ADD,
	CMD_CLIENT_GONE,
	CMD_MR_ADD,
	CMD_MR_RELEASE,
	CMD_COMM_JOIN,
	CMD_COMM_DESTROY,
	CMD_COMM_ABORT,
	CMD_SET_EVENTFD,
	CMD_STATUS,
	CMD_METRICS,
	CMD_COMM_TIMEOUT,
	/* From the node thread (daemon/node.c): a communicator spanning daemons. */
	CMD_NET_READY, /* its links are up: set it up on the executor */
	CMD_NET_FAIL,  /* it failed elsewhere or on the network: u.net.err */
	CMD_NET_GO,    /* every daemon matched collective u.net.seq (err: -EINVAL, they differ) */
	CMD_NET_DONE,  /* every daemon executed collective u.net.seq */
	CMD_NET_P2P,   /* a send or receive across daemons ended: u.net.seq its cookie, err */
	CMD_NET_EAGER, /* collective u.net.seq ran eagerly (node.h): u.net.data, its result */
	/*
	 * Collective u.net.seq runs eagerly here (node.h): u.net.data, the other
	 * daemon's inputs; NULL where they landed in place (node_coll_ready()).
	 */
	CMD_NET_PEER_IN,
};

struct sched_cmd {
	struct sched_cmd *next;
	enum sched_cmd_type type;
	int result;                  /* 0 or -errno, set by the scheduler */
	struct sched_client *client; /* CLIENT_ADD sets it; the others name it */
	union {
		struct {
			int shm_fd;
			void *shm;
			uint64_t shm_size;
			pid_t pid;
			uid_t uid;
			gid_t gid;
			uint32_t client_id; /* out */
		} add;
		struct {
			int reply_fd; /* sent back with the reply (-1: none); control owns it */
			void *addr;   /* collcd's mapping, or the executor-space address */
			uint64_t size;
			/*
			 * NULL: addr is a host mapping the scheduler owns (it unmaps
			 * it, also when the command fails). Else executor memory:
			 * the registration releases exec_mem through it; on failure
			 * the scheduler releases it.
			 */
			const struct exec_backend *exec;
			void *exec_mem;
			uint32_t flags; /* EXEC_MEM_* */
			uint32_t mr;    /* out for MR_ADD, in for MR_RELEASE */
		} mr;
		struct {
			struct collc_msg_comm_init req;
			uint32_t comm;    /* out */
			uint64_t comm_id; /* out */
		} join;
		struct {
			uint32_t comm;
		} comm;
		struct {
			int fd;
		} efd;
		struct {
			uint32_t comm;
			uint32_t ms; /* UINT32_MAX: follow op_timeout_ms */
		} timeout;
		struct {
			uint64_t comm_id;
			uint64_t seq;
			int err;
			uint32_t nchan;
			/* CMD_NET_READY: the group rings' block (0: none), hierarchical from these bytes */
			uint32_t group;
			uint64_t hier_min_bytes;
			uint8_t local[COLLC_MAX_RANKS]; /* ranks this collcd runs */
			uint8_t pair; /* CMD_NET_READY: it spans two daemons exactly */
			/* CMD_NET_READY: the ring's order, where not the ranks' (rank at each position) */
			uint8_t reordered;
			uint8_t ring[COLLC_MAX_RANKS];
			void *data; /* CMD_NET_EAGER, _PEER_IN: malloc'ed, freed with the command */
			uint32_t len;
		} net;
		struct {
			uint32_t flags; /* COLLC_STATUS_JSON */
			char *text;     /* out, malloc'ed: the control thread frees it */
			size_t len;
		} status;
	} u;
	/*
	 * Runs on the control thread, except for the node thread's commands
	 * (CMD_NET_*), whose done only frees them: the scheduler runs it itself
	 * (sched_net_cmd_end()) instead of waking the control loop for each.
	 */
	void (*done)(struct sched_cmd *cmd);
	void *owner; /* the control session */
};

/* The scheduler serves every executor the registry started (exec_count()). */
struct sched_params {
	uint8_t node_id[16];
	void (*notify_done)(void); /* wakes the control loop: done commands wait */
};

/*
 * Wakes the scheduler if it sleeps: the executors' notify callback
 * (exec_init), called after they publish work_consumed. Any thread.
 */
void sched_notify(void);
/*
 * The same for an item an executor's channel consumed without running it:
 * only a collective waiting for FIFO room needs to hear of it, so the
 * scheduler is woken only when it sleeps with one (exec_init.notify_skipped).
 */
void sched_notify_skipped(void);

int sched_init(const struct sched_params *p);
/* Stops the scheduler thread and ends the commands it did not run. */
void sched_fini(void);
/*
 * Frees clients and communicators, once the executors stopped (their threads
 * may wait on connection memory until then). The executor's part of each
 * communicator and registration is left alone where its fini released it
 * (exec_backend.fini_frees).
 */
void sched_release(void);
void sched_post(struct sched_cmd *cmd);
/*
 * sched_post() in two halves: the first queues cmd, the second wakes the
 * scheduler if it sleeps (for every command queued before it). A thread
 * that queues while it holds a lock the scheduler takes (the node thread's
 * node.mu) wakes it only after releasing that lock.
 */
void sched_post_quiet(struct sched_cmd *cmd);
void sched_kick(void);
/* The doorbell memfd every client maps (see proto/shm.h). */
int sched_doorbell_fd(void);
/* Control thread: runs done callbacks of finished commands. */
void sched_run_done(void);
/* Counters for sd_notify STATUS= and the watchdog. */
struct sched_counters {
	uint64_t loops; /* scheduler passes; frozen when it is wedged */
	uint64_t submitted;
	uint64_t completed;
	uint64_t errors;
	uint32_t clients;
	uint32_t comms;
	uint32_t inflight;
};
void sched_counters(struct sched_counters *out);
/* Tests: stop the scheduler loop (it stops making progress) until resumed. */
void sched_debug_stall(int on);

#endif
