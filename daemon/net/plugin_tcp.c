/* SPDX-License-Identifier: MIT */
/*
 * libnccl-net-collc.so: the tcp transport as an NCCL net plugin. NCCL
 * configures plugins through the environment only, so this wrapper reads
 * COLLC_NET_IFNAME (else NCCL_SOCKET_IFNAME, an exact interface name, '='
 * prefix allowed) and COLLC_NET_STREAMS before the transport's own init.
 * The version script exports ncclNetPlugin_v8 and nothing else.
 */
#include "net.h"

#include <stdlib.h>

static ncclResult_t plugin_init(ncclDebugLogger_t logFunction)
{
	struct net_tcp_opts o = { .ifname = getenv("COLLC_NET_IFNAME"),
				  .nstreams = NET_TCP_DEFAULT_STREAMS };
	const char *s = getenv("COLLC_NET_STREAMS");

	if (!o.ifname)
		o.ifname = getenv("NCCL_SOCKET_IFNAME");
	if (o.ifname && *o.ifname == '=')
		o.ifname++;
	if (s && *s)
		o.nstreams = atoi(s);
	if (net_tcp_configure(&o) < 0)
		return ncclInvalidArgument;
	return net_tcp.init(logFunction);
}

__attribute__((visibility("default"))) ncclNet_v8_t ncclNetPlugin_v8;

/* NCCL looks the symbol up after dlopen, when this has run. */
__attribute__((constructor)) static void plugin_fill(void)
{
	ncclNetPlugin_v8 = net_tcp;
	ncclNetPlugin_v8.name = "collc";
	ncclNetPlugin_v8.init = plugin_init;
}
