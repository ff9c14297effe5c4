/* SPDX-License-Identifier: MIT */
/*
 * The transport loader: a built-in table (tcp, ib) or an NCCL net plugin
 * (libnccl-net-NAME.so exporting ncclNetPlugin_v8), chosen by name, init'ed,
 * and checked to have a device.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "net.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#define LOG(lvl, ...)                                                                              \
	do {                                                                                       \
		if (logger)                                                                        \
			logger(lvl, NCCL_NET, __FILE__, __LINE__, __VA_ARGS__);                    \
	} while (0)

static int open_table(const ncclNet_v8_t *net, void *dl, const char *what, ncclDebugLogger_t logger,
		      struct net_transport *ret_t)
{
	int ndev = 0;

	if (!net->init || !net->devices || !net->getProperties || !net->listen || !net->connect ||
	    !net->accept || !net->regMr || !net->deregMr || !net->isend || !net->irecv ||
	    !net->test || !net->closeSend || !net->closeRecv || !net->closeListen) {
		LOG(NCCL_LOG_WARN, "net: %s: the table lacks a required function", what);
		return -EPROTO;
	}
	if (net->init(logger) != ncclSuccess) {
		LOG(NCCL_LOG_WARN, "net: %s: init failed", what);
		return -EIO;
	}
	if (net->devices(&ndev) != ncclSuccess || ndev < 1) {
		LOG(NCCL_LOG_INFO, "net: %s: no device", what);
		return -ENODEV;
	}
	ret_t->net = net;
	ret_t->dl = dl;
	ret_t->ndev = ndev;
	snprintf(ret_t->what, sizeof(ret_t->what), "%s", what);
	LOG(NCCL_LOG_INFO, "net: using %s (%s), %d device(s)", what, net->name ? net->name : "?",
	    ndev);
	return 0;
}

/* NAME: libnccl-net-NAME.so through the dynamic linker's search, or a path
 * when it holds a '/'. */
static int load_plugin(const char *name, ncclDebugLogger_t logger, struct net_transport *ret_t)
{
	char lib[256], what[256];
	const ncclNet_v8_t *net;
	void *dl;
	int rc;

	if (!*name)
		return -EINVAL;
	if (strchr(name, '/'))
		snprintf(lib, sizeof(lib), "%s", name);
	else if (snprintf(lib, sizeof(lib), "libnccl-net-%s.so", name) >= (int)sizeof(lib))
		return -ENAMETOOLONG;
	dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		LOG(NCCL_LOG_WARN, "net: cannot load plugin %s: %s", lib, dlerror());
		return -ENOENT;
	}
	net = dlsym(dl, NET_PLUGIN_SYMBOL);
	if (!net) {
		LOG(NCCL_LOG_WARN, "net: %s does not export %s", lib, NET_PLUGIN_SYMBOL);
		dlclose(dl);
		return -EPROTO;
	}
	snprintf(what, sizeof(what), "plugin:%s", name);
	rc = open_table(net, dl, what, logger, ret_t);
	if (rc < 0)
		dlclose(dl);
	return rc;
}

int net_load(const char *name, const char *plugin, ncclDebugLogger_t logger,
	     struct net_transport *ret_t)
{
	struct net_transport t = { 0 };
	int rc;

	if (!name || !strcmp(name, "auto")) {
		if (plugin && *plugin) {
			rc = load_plugin(plugin, logger, &t);
			if (rc == 0)
				goto out;
			LOG(NCCL_LOG_WARN,
			    "net: plugin %s unusable, falling back to the built-in transports",
			    plugin);
		}
		rc = open_table(&net_ib, NULL, "ib", logger, &t);
		if (rc == 0)
			goto out;
		LOG(NCCL_LOG_INFO, "net: ib: %s; using tcp", net_ib_status());
		rc = open_table(&net_tcp, NULL, "tcp", logger, &t);
	} else if (!strcmp(name, "tcp")) {
		rc = open_table(&net_tcp, NULL, "tcp", logger, &t);
	} else if (!strcmp(name, "ib")) {
		rc = open_table(&net_ib, NULL, "ib", logger, &t);
	} else if (!strncmp(name, "plugin:", 7)) {
		rc = load_plugin(name + 7, logger, &t);
	} else {
		rc = load_plugin(name, logger, &t);
	}
	if (rc < 0)
		return rc;
out:
	*ret_t = t;
	return 0;
}

void net_unload(struct net_transport *t)
{
	if (!t)
		return;
	if (t->dl)
		dlclose(t->dl);
	memset(t, 0, sizeof(*t));
}
