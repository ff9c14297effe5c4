/* SPDX-License-Identifier: MIT */
/*
 * The built-in ib transport (InfiniBand / RoCE verbs) behind net.h's table.
 *
 * NOT RUN ON HARDWARE: no machine this was developed on has an RDMA device.
 * What runs and is tested here: loading libibverbs with dlopen (collcd starts
 * without rdma-core), enumerating devices and their active ports, reporting
 * "no RDMA device" cleanly so that the loader falls back to tcp, the
 * properties of a found port, and the clear-to-send FIFO arithmetic
 * (ib_fifo.h). The data path (RC queue pairs, RDMA WRITE with immediate
 * driven by the CTS FIFO, ibv_reg_dmabuf_mr for GPU buffers) is not written
 * yet: listen/connect/accept refuse with ncclInternalError and a log line,
 * so a machine that has a device but must move data uses tcp ("--net tcp").
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "net.h"
#include "ib_fifo.h"

#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>

#define IB_MAX_DEVS 16

/* The verbs entry points used, resolved from libibverbs.so.1 at init. */
struct ib_verbs {
	void *dl;
	struct ibv_device **(*get_device_list)(int *num);
	void (*free_device_list)(struct ibv_device **list);
	const char *(*get_device_name)(struct ibv_device *dev);
	struct ibv_context *(*open_device)(struct ibv_device *dev);
	int (*close_device)(struct ibv_context *ctx);
	int (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *attr);
	/* The exported symbol; verbs.h wraps it in an inline that zeroes attr first. */
	int (*query_port)(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
};

struct ib_dev {
	char name[64];
	int port;
	int speed;			/* Mbit/s */
	uint64_t guid;
	int link_layer;
};

static struct {
	ncclDebugLogger_t log;
	struct ib_verbs v;
	struct ib_dev dev[IB_MAX_DEVS];
	int ndev;
	char status[128];
} g;

#define LOG(lvl, ...) do { if (g.log) g.log(lvl, NCCL_NET, __FILE__, __LINE__, __VA_ARGS__); } while (0)

const char *net_ib_status(void)
{
	return g.status[0] ? g.status : "not initialised";
}

/* Loads libibverbs; 0 or -ENOENT when rdma-core is absent, -EPROTO when a
 * symbol is missing. `lib` is the soname, a parameter for the tests. */
static int verbs_load(struct ib_verbs *v, const char *lib)
{
	memset(v, 0, sizeof(*v));
	v->dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!v->dl)
		return -ENOENT;
#define SYM(field, name) do { *(void **)&v->field = dlsym(v->dl, name); if (!v->field) goto err_close; } while (0)
	SYM(get_device_list, "ibv_get_device_list");
	SYM(free_device_list, "ibv_free_device_list");
	SYM(get_device_name, "ibv_get_device_name");
	SYM(open_device, "ibv_open_device");
	SYM(close_device, "ibv_close_device");
	SYM(query_device, "ibv_query_device");
	SYM(query_port, "ibv_query_port");
#undef SYM
	return 0;

err_close:
	dlclose(v->dl);
	memset(v, 0, sizeof(*v));
	return -EPROTO;
}

/* Mbit/s of an active port from its width code and speed code. */
static int port_speed(const struct ibv_port_attr *a)
{
	static const struct { int code, mbps; } speeds[] = {
		{ 1, 2500 }, { 2, 5000 }, { 4, 10000 }, { 8, 10000 }, { 16, 14000 },
		{ 32, 25000 }, { 64, 50000 }, { 128, 100000 }, { 256, 200000 },
	};
	int lanes = a->active_width == 2 ? 4 : a->active_width == 4 ? 8 :
		    a->active_width == 8 ? 12 : a->active_width == 16 ? 2 : 1;
	size_t i;

	for (i = 0; i < sizeof(speeds) / sizeof(speeds[0]); i++)
		if (speeds[i].code == a->active_speed)
			return speeds[i].mbps * lanes;
	return 10000;
}

/* Fills g.dev with every active port of every device. */
static void enumerate(void)
{
	struct ibv_device **list;
	int n = 0, i;

	list = g.v.get_device_list(&n);
	if (!list) {
		snprintf(g.status, sizeof(g.status), "no RDMA device (%s)", strerror(errno));
		return;
	}
	for (i = 0; i < n && g.ndev < IB_MAX_DEVS; i++) {
		struct ibv_context *ctx = g.v.open_device(list[i]);
		struct ibv_device_attr da;
		int p;

		if (!ctx)
			continue;
		if (g.v.query_device(ctx, &da) == 0) {
			for (p = 1; p <= da.phys_port_cnt && g.ndev < IB_MAX_DEVS; p++) {
				struct ibv_port_attr pa;
				struct ib_dev *d = &g.dev[g.ndev];

				memset(&pa, 0, sizeof(pa));
				if (g.v.query_port(ctx, p, &pa) || pa.state != IBV_PORT_ACTIVE)
					continue;
				snprintf(d->name, sizeof(d->name), "%s", g.v.get_device_name(list[i]));
				d->port = p;
				d->speed = port_speed(&pa);
				d->guid = da.node_guid;
				d->link_layer = pa.link_layer;
				g.ndev++;
			}
		}
		g.v.close_device(ctx);
	}
	g.v.free_device_list(list);
	if (!g.ndev)
		snprintf(g.status, sizeof(g.status), "no RDMA device with an active port (%d device(s) found)", n);
	else
		snprintf(g.status, sizeof(g.status), "%d active port(s)", g.ndev);
}

static ncclResult_t ib_init_lib(ncclDebugLogger_t logFunction, const char *lib)
{
	int rc;

	g.log = logFunction;
	g.ndev = 0;
	if (!g.v.dl) {
		rc = verbs_load(&g.v, lib);
		if (rc < 0) {
			snprintf(g.status, sizeof(g.status), "%s", rc == -ENOENT ?
				 "libibverbs not found (rdma-core not installed)" : "libibverbs lacks a verbs symbol");
			LOG(NCCL_LOG_INFO, "ib: %s", g.status);
			return ncclSuccess;	/* zero devices, not a failure */
		}
	}
	enumerate();
	LOG(NCCL_LOG_INFO, "ib: %s", g.status);
	return ncclSuccess;
}

static ncclResult_t ib_init(ncclDebugLogger_t logFunction)
{
	return ib_init_lib(logFunction, "libibverbs.so.1");
}

static ncclResult_t ib_devices(int *ndev)
{
	*ndev = g.ndev;
	return ncclSuccess;
}

static ncclResult_t ib_get_properties(int dev, ncclNetProperties_v8_t *props)
{
	if (dev < 0 || dev >= g.ndev)
		return ncclInvalidArgument;
	memset(props, 0, sizeof(*props));
	props->name = g.dev[dev].name;
	props->pciPath = NULL;
	props->guid = g.dev[dev].guid;
	props->ptrSupport = NCCL_PTR_HOST;
	props->regIsGlobal = 0;
	props->speed = g.dev[dev].speed;
	props->port = g.dev[dev].port;
	props->latency = 0;
	props->maxComms = 65536;
	props->maxRecvs = IB_FIFO_MAX_RECVS;
	props->netDeviceType = NCCL_NET_DEVICE_HOST;
	props->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
	return ncclSuccess;
}

static ncclResult_t no_data_path(const char *what, int dev)
{
	if (dev < 0 || dev >= g.ndev)
		return ncclInvalidArgument;
	LOG(NCCL_LOG_WARN, "ib: %s: the verbs data path is not implemented yet; use the tcp transport", what);
	return ncclInternalError;
}

static ncclResult_t ib_listen(int dev, void *handle, void **listenComm)
{
	*listenComm = NULL;
	return no_data_path("listen", dev);
}

static ncclResult_t ib_connect(int dev, void *handle, void **sendComm,
			       ncclNetDeviceHandle_v8_t **sendDevComm)
{
	*sendComm = NULL;
	return no_data_path("connect", dev);
}

static ncclResult_t ib_accept(void *listenComm, void **recvComm, ncclNetDeviceHandle_v8_t **recvDevComm)
{
	*recvComm = NULL;
	return ncclInvalidArgument;	/* no listen comm can exist */
}

static ncclResult_t ib_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle)
{
	return ncclInvalidArgument;
}

static ncclResult_t ib_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset,
				     int fd, void **mhandle)
{
	return ncclInvalidArgument;
}

static ncclResult_t ib_dereg_mr(void *comm, void *mhandle)
{
	return ncclInvalidArgument;
}

static ncclResult_t ib_isend(void *sendComm, void *data, int size, int tag, void *mhandle, void **request)
{
	*request = NULL;
	return ncclInvalidArgument;
}

static ncclResult_t ib_irecv(void *recvComm, int n, void **data, int *sizes, int *tags, void **mhandles,
			     void **request)
{
	*request = NULL;
	return ncclInvalidArgument;
}

static ncclResult_t ib_iflush(void *recvComm, int n, void **data, int *sizes, void **mhandles, void **request)
{
	*request = NULL;
	return ncclInvalidArgument;
}

static ncclResult_t ib_test(void *request, int *done, int *sizes)
{
	*done = 0;
	return ncclInvalidArgument;
}

static ncclResult_t ib_close(void *comm)
{
	return comm ? ncclInvalidArgument : ncclSuccess;
}

static ncclResult_t ib_get_device_mr(void *comm, void *mhandle, void **dptr_mhandle)
{
	return ncclInternalError;
}

static ncclResult_t ib_irecv_consumed(void *recvComm, int n, void *request)
{
	return ncclSuccess;
}

const ncclNet_v8_t net_ib = {
	.name = "ib",
	.init = ib_init,
	.devices = ib_devices,
	.getProperties = ib_get_properties,
	.listen = ib_listen,
	.connect = ib_connect,
	.accept = ib_accept,
	.regMr = ib_reg_mr,
	.regMrDmaBuf = ib_reg_mr_dmabuf,
	.deregMr = ib_dereg_mr,
	.isend = ib_isend,
	.irecv = ib_irecv,
	.iflush = ib_iflush,
	.test = ib_test,
	.closeSend = ib_close,
	.closeRecv = ib_close,
	.closeListen = ib_close,
	.getDeviceMr = ib_get_device_mr,
	.irecvConsumed = ib_irecv_consumed,
};
