/* SPDX-License-Identifier: MIT */
/*
 * The host's size, as collc's defaults read it. A small host has at most
 * four CPUs online: there a thread that spins, or a helper of its own, takes
 * the core that collcd's other threads or the ranks need, so collcd runs one
 * channel and no tcp helpers across daemons, queues the scheduler's calls to
 * the node thread (daemon/config.c, daemon/node.c), the NCCL net plugin
 * starts no helpers (daemon/net/plugin_tcp.c), and collc_wait() sleeps at
 * once instead of spinning (client/request.c).
 */
#ifndef COLLC_COMMON_HOST_H
#define COLLC_COMMON_HOST_H

#include <unistd.h>

#define COLLC_SMALL_HOST_CPUS 4

static inline int collc_small_host(void)
{
	return sysconf(_SC_NPROCESSORS_ONLN) <= COLLC_SMALL_HOST_CPUS;
}

#endif
