/* SPDX-License-Identifier: MIT */
/* The CPU executor's connections, shared with its tests. */
#ifndef COLLCD_EXEC_CPU_H
#define COLLCD_EXEC_CPU_H

#include <stdint.h>

#include "proto/prims.h"
#include "proto/work.h"

#define CPU_SLOT_BYTES  (64u << 10)
#define CPU_CHUNK_STEPS 4u
#define CPU_CHUNK_BYTES (CPU_SLOT_BYTES * CPU_CHUNK_STEPS)
#define CPU_CONN_BYTES  (CPU_SLOT_BYTES * COLLC_STEPS)

/*
 * One direction between two ranks on one channel, in the receiver's memory.
 * Steps are monotonic; the slot of step s is s % COLLC_STEPS.
 */
struct cpu_conn {
	/* Written by the sender. */
	uint64_t tail __attribute__((aligned(64))); /* steps published */
	uint32_t tail_seq;                          /* futex word for a sleeping receiver */
	uint32_t send_waiting;                      /* the sender sleeps on head_seq */
	/* Written by the receiver. */
	uint64_t head __attribute__((aligned(64))); /* steps consumed */
	uint32_t head_seq;                          /* futex word for a sleeping sender */
	uint32_t recv_waiting;                      /* the receiver sleeps on tail_seq */
	/* Private to the sender's thread. */
	uint64_t send_step __attribute__((aligned(64)));
	/* Private to the receiver's thread. */
	uint64_t recv_step __attribute__((aligned(64)));
	char *buf; /* COLLC_STEPS slots of CPU_SLOT_BYTES */
};

/* What a work item's comm_dev points at: one rank's connections. */
struct cpu_rank {
	struct cpu_conn *send[COLLC_MAX_CHANNELS]; /* to rank + 1 */
	struct cpu_conn *recv[COLLC_MAX_CHANNELS]; /* from rank - 1 */
};

extern uint32_t exec_spin_us;

#endif
