/* SPDX-License-Identifier: MIT */
/*
 * libnccl-net-collc.so: the tcp transport as an NCCL net plugin. NCCL
 * configures plugins through the environment only, so this wrapper reads
 * COLLC_NET_IFNAME (else NCCL_SOCKET_IFNAME, an exact interface name, '='
 * prefix allowed), COLLC_NET_STREAMS (sockets per connection) and
 * COLLC_NET_HELPERS (0 or 1: a helper thread per connection moves its data
 * sockets, as NCCL_SOCKET_NTHREADS does for NCCL's own socket transport)
 * before the transport's own init. A value that does not parse fails init.
 * The version script exports ncclNetPlugin_v8 and nothing else.
 */
#include "net.h"

#include "common/host.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

/* *ret_v from the variable name when set; -EINVAL when it is not a whole number. */
static int env_int(const char *name, int *ret_v)
{
	const char *s = getenv(name);
	char *end;
	long v;

	if (!s || !*s)
		return 0;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < INT_MIN || v > INT_MAX)
		return -EINVAL;
	*ret_v = (int)v;
	return 0;
}

static ncclResult_t plugin_init(ncclDebugLogger_t logFunction)
{
	struct net_tcp_opts o = {
		.ifname = getenv("COLLC_NET_IFNAME"),
		.nstreams = NET_TCP_DEFAULT_STREAMS,
		/* collcd's default (collcd.conf(5)): not on a small host */
		.helpers = !collc_small_host(),
	};

	if (!o.ifname)
		o.ifname = getenv("NCCL_SOCKET_IFNAME");
	if (o.ifname && *o.ifname == '=')
		o.ifname++;
	if (env_int("COLLC_NET_STREAMS", &o.nstreams) < 0 ||
	    env_int("COLLC_NET_HELPERS", &o.helpers) < 0 || net_tcp_configure(&o) < 0) {
		if (logFunction)
			logFunction(
				NCCL_LOG_WARN, 0, __FILE__, __LINE__,
				"collc: COLLC_NET_STREAMS must be 1-%d and COLLC_NET_HELPERS 0 or 1, "
				"and the interface name short enough",
				NET_TCP_MAX_STREAMS);
		return ncclInvalidArgument;
	}
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
