/* SPDX-License-Identifier: MIT */
/*
 * An executor runs the work FIFOs of its devices: the CPU executor with host
 * threads (cpu/executor.c), or one persistent grid per GPU (cuda/executor.c). The
 * scheduler talks to either through this table.
 */
#ifndef COLLCD_EXEC_H
#define COLLCD_EXEC_H

#include <stdint.h>

#include "proto/wire.h"
#include "proto/work.h"

struct exec_backend {
	const char *name;
	uint32_t backend;      /* COLLC_BACKEND_* */
	uint32_t ndevices;
	uint32_t max_channels;
	uint32_t rotate_channels; /* the scheduler spreads collectives over channels (chan_base) */
	void (*fini)(void);
	struct collc_work_fifo *(*fifo)(uint32_t dev);
	/* Called after items were appended to dev's FIFO (item seq published). */
	void (*kick)(uint32_t dev);
	/*
	 * Places every rank of a communicator on a device (a FIFO): joins[r] is
	 * rank r's comm_init request (its device ordinal and UUID). Returns
	 * -EINVAL when the ranks cannot be placed (e.g. an unknown GPU).
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
	/* Frees them; no item referring to them is in any FIFO any more. */
	void (*comm_teardown)(void *priv);
	/* Human name of a device for status. */
	void (*device_name)(uint32_t dev, char *out, uint32_t outlen);
	/* Nonzero when the device's executor has started. */
	int (*device_active)(uint32_t dev);
};

/* Wakes the scheduler if it sleeps (executors call it after publishing work_consumed). */
void sched_notify(void);

int exec_cpu_init(uint32_t ndevices, uint32_t max_channels, const struct exec_backend **ret);
int exec_cuda_init(uint32_t ndevices, uint32_t max_channels, const struct exec_backend **ret);
/* 1 when the CUDA backend was built in and a GPU is present. */
int exec_cuda_available(void);

#endif
