/* SPDX-License-Identifier: MIT */
/*
 * The built-in ib transport (InfiniBand / RoCE verbs) behind net.h's table.
 *
 * NOT RUN ON HARDWARE: no machine this was developed on has an RDMA device.
 * Run and tested here (tests/net/test_ib.c): loading libibverbs with dlopen
 * (collcd starts without rdma-core), enumerating devices and their active
 * ports, reporting "no RDMA device" cleanly so that the loader falls back to
 * tcp, refusing calls on devices that do not exist, and the clear-to-send
 * FIFO arithmetic (ib_fifo.h). Written and compiled but never executed:
 * everything from ib_dev_open() on, that is the RC queue pair setup over an
 * out-of-band TCP socket (INIT -> RTR -> RTS), memory registration
 * (ibv_reg_mr, ibv_reg_dmabuf_mr), the CTS FIFO writes of irecv, RDMA WRITE
 * with immediate in isend, and completion polling in test. Host memory only
 * is advertised (ptrSupport NCCL_PTR_HOST): GPU buffers need the RDMA READ
 * flush in iflush, which is not written.
 *
 * Connection: the sender (connect) creates its QP and FIFO, sends its QP
 * info and FIFO address/rkey on the socket; the receiver (accept) moves its
 * QP to RTS, answers with its QP info; the sender moves to RTS and sends one
 * "ready" byte, after which the receiver may write into the FIFO.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "net.h"
#include "common.h"
#include "ib_fifo.h"
#include "sock.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

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
	int (*query_gid)(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
	int (*dealloc_pd)(struct ibv_pd *pd);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access);
	/* rdma-core >= 34 only; NULL before. */
	struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t offset, size_t len,
					uint64_t iova, int fd, int access);
	int (*dereg_mr)(struct ibv_mr *mr);
	struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe, void *cq_context,
				    struct ibv_comp_channel *channel, int comp_vector);
	int (*destroy_cq)(struct ibv_cq *cq);
	struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
	int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
	int (*destroy_qp)(struct ibv_qp *qp);
	const char *(*wc_status_str)(enum ibv_wc_status status);
};

struct ib_dev {
	char name[64];
	int port;
	int speed; /* Mbit/s */
	uint64_t guid;
	int link_layer;
	uint16_t lid;
	enum ibv_mtu mtu;
	/* Opened at first use, closed with the last comm (refs). */
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	int refs;
};

static struct {
	ncclDebugLogger_t log;
	struct ib_verbs v;
	struct ib_dev dev[IB_MAX_DEVS];
	int ndev;
	char status[128];
	/* Out-of-band address for the QP exchange, and options. */
	char ifname[IF_NAMESIZE];
	union net_addr oob;
	char opt_ifname[IF_NAMESIZE];
	int opt_gid_index;
} g;

#define LOG(lvl, ...)                                                                              \
	do {                                                                                       \
		if (g.log)                                                                         \
			g.log(lvl, NCCL_NET, __FILE__, __LINE__, __VA_ARGS__);                     \
	} while (0)

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
#define SYM(field, name)                                                                           \
	do {                                                                                       \
		*(void **)&v->field = dlsym(v->dl, name);                                          \
		if (!v->field)                                                                     \
			goto err_close;                                                            \
	} while (0)
	SYM(get_device_list, "ibv_get_device_list");
	SYM(free_device_list, "ibv_free_device_list");
	SYM(get_device_name, "ibv_get_device_name");
	SYM(open_device, "ibv_open_device");
	SYM(close_device, "ibv_close_device");
	SYM(query_device, "ibv_query_device");
	SYM(query_port, "ibv_query_port");
	SYM(query_gid, "ibv_query_gid");
	SYM(alloc_pd, "ibv_alloc_pd");
	SYM(dealloc_pd, "ibv_dealloc_pd");
	SYM(reg_mr, "ibv_reg_mr");
	SYM(dereg_mr, "ibv_dereg_mr");
	SYM(create_cq, "ibv_create_cq");
	SYM(destroy_cq, "ibv_destroy_cq");
	SYM(create_qp, "ibv_create_qp");
	SYM(modify_qp, "ibv_modify_qp");
	SYM(destroy_qp, "ibv_destroy_qp");
	SYM(wc_status_str, "ibv_wc_status_str");
#undef SYM
	*(void **)&v->reg_dmabuf_mr = dlsym(v->dl, "ibv_reg_dmabuf_mr");
	return 0;

err_close:
	dlclose(v->dl);
	memset(v, 0, sizeof(*v));
	return -EPROTO;
}

/* Mbit/s of an active port from its width code and speed code. */
static int port_speed(const struct ibv_port_attr *a)
{
	static const struct {
		int code, mbps;
	} speeds[] = {
		{ 1, 2500 },   { 2, 5000 },   { 4, 10000 },    { 8, 10000 },    { 16, 14000 },
		{ 32, 25000 }, { 64, 50000 }, { 128, 100000 }, { 256, 200000 },
	};
	int lanes = a->active_width == 2    ? 4
		    : a->active_width == 4  ? 8
		    : a->active_width == 8  ? 12
		    : a->active_width == 16 ? 2
					    : 1;
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
				snprintf(d->name, sizeof(d->name), "%s",
					 g.v.get_device_name(list[i]));
				d->port = p;
				d->speed = port_speed(&pa);
				d->guid = da.node_guid;
				d->link_layer = pa.link_layer;
				d->lid = pa.lid;
				d->mtu = pa.active_mtu;
				g.ndev++;
			}
		}
		g.v.close_device(ctx);
	}
	g.v.free_device_list(list);
	if (!g.ndev)
		snprintf(g.status, sizeof(g.status),
			 "no RDMA device with an active port (%d device(s) found)", n);
	else
		snprintf(g.status, sizeof(g.status), "%d active port(s)", g.ndev);
}

static ncclResult_t ib_init_lib(ncclDebugLogger_t logFunction, const char *lib)
{
	int rc;

	g.log = logFunction;
	if (g.v.dl && g.ndev)
		return ncclSuccess; /* a second init keeps the devices (and comms) it has */
	if (!g.v.dl) {
		rc = verbs_load(&g.v, lib);
		if (rc < 0) {
			snprintf(g.status, sizeof(g.status), "%s",
				 rc == -ENOENT ? "libibverbs not found (rdma-core not installed)"
					       : "libibverbs lacks a verbs symbol");
			LOG(NCCL_LOG_INFO, "ib: %s", g.status);
			g.ndev = 0;
			return ncclSuccess; /* zero devices, not a failure */
		}
	}
	g.ndev = 0;
	enumerate();
	LOG(NCCL_LOG_INFO, "ib: %s", g.status);
	if (g.ndev && collc__net_pick_if(g.opt_ifname, g.ifname, &g.oob) < 0) {
		LOG(NCCL_LOG_WARN, "ib: no interface %s for the connection exchange", g.opt_ifname);
		g.ndev = 0;
		snprintf(g.status, sizeof(g.status), "no interface for the connection exchange");
	}
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
	collc__net_props_fill(props, g.dev[dev].name, g.dev[dev].guid, g.dev[dev].speed,
			      g.dev[dev].port, IB_FIFO_MAX_RECVS);
	return ncclSuccess;
}

/* Everything below runs only with an RDMA device: NOT RUN ON HARDWARE. */

#define IB_HANDLE_MAGIC 0x636f6c6c63496221ULL /* "collcIb!" */
#define IB_INFO_MAGIC   0x434c4951u
#define IB_MR_MAGIC     0x434c494du
#define IB_ACCESS       (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define IB_SEND_WR      (4 * NCCL_NET_MAX_REQUESTS)
#define IB_RECV_WR      (NCCL_NET_MAX_REQUESTS * IB_FIFO_MAX_RECVS)
#define IB_CQE          (IB_SEND_WR + IB_RECV_WR)

int net_ib_configure(const struct net_ib_opts *opts)
{
	if (opts->gid_index < 0 || opts->gid_index > 255 ||
	    collc__net_opt_ifname(g.opt_ifname, opts->ifname) < 0)
		return -EINVAL;
	g.opt_gid_index = opts->gid_index;
	return 0;
}

/* What each side tells the other on the out-of-band socket. */
struct ib_qp_info {
	uint32_t magic;
	uint32_t qpn;
	uint32_t psn;
	uint32_t mtu; /* enum ibv_mtu */
	uint16_t lid;
	uint8_t link_layer;
	uint8_t reserved0;
	uint32_t fifo_rkey; /* sender only: its CTS FIFO */
	uint64_t fifo_addr;
	uint8_t gid[16];
};
_Static_assert(sizeof(struct ib_qp_info) == 48, "QP info wire size");

struct ib_comm;

struct ib_handle {
	uint64_t magic;
	union net_addr addr;
	struct ib_comm *stage; /* the connecting side's progress */
};
_Static_assert(sizeof(struct ib_handle) <= NCCL_NET_HANDLE_MAXSIZE, "handle fits");

struct ib_mr {
	uint32_t magic;
	struct ibv_mr *mr;
};

struct ib_req {
	struct net_req head; /* comm: its struct ib_comm */
	int n;
	int left; /* completions to go */
	int sizes[IB_FIFO_MAX_RECVS];
};
_Static_assert(offsetof(struct ib_req, head) == 0, "a request is its head to common.c");

enum { IB_SEND = 1, IB_RECV = 2 };
/* Connection stages, in order, for both sides. */
enum { ST_SOCK_CONNECT, ST_SEND_INFO, ST_RECV_INFO, ST_READY, ST_UP };

struct ib_comm {
	int kind;
	int dev;
	int fd; /* out-of-band socket, closed once up */
	int st;
	size_t off;
	struct ib_qp_info local, remote;
	uint8_t ready;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	ncclResult_t error; /* sticky */
	/* sender: the FIFO the receiver writes, and where it stands */
	struct ib_cts *fifo;
	struct ibv_mr *fifo_mr;
	uint64_t seq;
	uint32_t sent_mask; /* receives of slot seq already written */
	/* receiver: local copies of the CTS elements it writes, its credits */
	struct ib_cts *cts;
	struct ibv_mr *cts_mr;
	uint64_t posted, completed;
	struct ib_req *by_slot[IB_FIFO_SLOTS];
	struct ib_req reqs[NCCL_NET_MAX_REQUESTS];
};

struct ib_listen {
	int fd;
	int dev;
	struct ib_comm *stage; /* an accept in progress */
};

static int ib_dev_open(int dev)
{
	struct ib_dev *d = &g.dev[dev];
	struct ibv_device **list;
	int n = 0, i;

	if (d->refs++)
		return 0;
	list = g.v.get_device_list(&n);
	for (i = 0; list && i < n; i++)
		if (!strcmp(g.v.get_device_name(list[i]), d->name))
			d->ctx = g.v.open_device(list[i]);
	if (list)
		g.v.free_device_list(list);
	if (d->ctx)
		d->pd = g.v.alloc_pd(d->ctx);
	if (!d->pd) {
		LOG(NCCL_LOG_WARN, "ib: cannot open %s", d->name);
		if (d->ctx)
			g.v.close_device(d->ctx);
		d->ctx = NULL;
		d->refs = 0;
		return -ENODEV;
	}
	return 0;
}

static void ib_dev_close(int dev)
{
	struct ib_dev *d = &g.dev[dev];

	if (--d->refs)
		return;
	g.v.dealloc_pd(d->pd);
	g.v.close_device(d->ctx);
	d->pd = NULL;
	d->ctx = NULL;
}

static void comm_free(struct ib_comm *c)
{
	if (!c)
		return;
	if (c->qp)
		g.v.destroy_qp(c->qp);
	if (c->cq)
		g.v.destroy_cq(c->cq);
	if (c->fifo_mr)
		g.v.dereg_mr(c->fifo_mr);
	if (c->cts_mr)
		g.v.dereg_mr(c->cts_mr);
	free(c->fifo);
	free(c->cts);
	if (c->fd >= 0)
		close(c->fd);
	if (c->dev >= 0)
		ib_dev_close(c->dev);
	free(c);
}

/* A comm with its CQ, its QP in INIT and its FIFO or CTS buffer registered. */
static struct ib_comm *comm_new(int kind, int dev)
{
	struct ib_dev *d = &g.dev[dev];
	struct ib_comm *c = calloc(1, sizeof(*c));
	struct ibv_qp_init_attr qpa;
	struct ibv_qp_attr a;
	union ibv_gid gid;
	void **buf;
	int i;

	if (!c)
		return NULL;
	c->kind = kind;
	c->fd = -1;
	c->dev = -1;
	for (i = 0; i < NCCL_NET_MAX_REQUESTS; i++)
		c->reqs[i].head.comm = c;
	if (ib_dev_open(dev) < 0)
		goto err_free;
	c->dev = dev;
	c->cq = g.v.create_cq(d->ctx, IB_CQE, NULL, NULL, 0);
	if (!c->cq)
		goto err_free;
	memset(&qpa, 0, sizeof(qpa));
	qpa.send_cq = c->cq;
	qpa.recv_cq = c->cq;
	qpa.qp_type = IBV_QPT_RC;
	qpa.cap.max_send_wr = IB_SEND_WR;
	qpa.cap.max_recv_wr = IB_RECV_WR;
	qpa.cap.max_send_sge = 1;
	qpa.cap.max_recv_sge = 1;
	qpa.cap.max_inline_data = IB_FIFO_MAX_RECVS * sizeof(struct ib_cts);
	c->qp = g.v.create_qp(d->pd, &qpa);
	if (!c->qp)
		goto err_free;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = d->port;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (g.v.modify_qp(c->qp, &a,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		goto err_free;
	/* Sender: the FIFO; receiver: the elements it copies into the peer's FIFO. */
	buf = kind == IB_SEND ? (void **)&c->fifo : (void **)&c->cts;
	if (posix_memalign(buf, 4096, IB_FIFO_BYTES))
		goto err_free;
	memset(*buf, 0, IB_FIFO_BYTES);
	if (kind == IB_SEND)
		c->fifo_mr = g.v.reg_mr(d->pd, c->fifo, IB_FIFO_BYTES, IB_ACCESS);
	else
		c->cts_mr = g.v.reg_mr(d->pd, c->cts, IB_FIFO_BYTES, IBV_ACCESS_LOCAL_WRITE);
	if (kind == IB_SEND ? !c->fifo_mr : !c->cts_mr)
		goto err_free;
	memset(&gid, 0, sizeof(gid));
	if (d->link_layer == IBV_LINK_LAYER_ETHERNET &&
	    g.v.query_gid(d->ctx, d->port, g.opt_gid_index, &gid))
		goto err_free;
	c->local = (struct ib_qp_info){
		.magic = IB_INFO_MAGIC,
		.qpn = c->qp->qp_num,
		.mtu = d->mtu,
		.lid = d->lid,
		.link_layer = d->link_layer,
	};
	if (getrandom(&c->local.psn, sizeof(c->local.psn), 0) != sizeof(c->local.psn))
		goto err_free;
	c->local.psn &= 0xffffff;
	memcpy(c->local.gid, gid.raw, sizeof(gid.raw));
	if (kind == IB_SEND) {
		c->local.fifo_addr = (uintptr_t)c->fifo;
		c->local.fifo_rkey = c->fifo_mr->rkey;
	}
	return c;

err_free:
	LOG(NCCL_LOG_WARN, "ib: cannot set up a queue pair on %s: %s", d->name, strerror(errno));
	comm_free(c);
	return NULL;
}

/* INIT -> RTR -> RTS against the peer's info. */
static int qp_up(struct ib_comm *c)
{
	struct ib_dev *d = &g.dev[c->dev];
	struct ibv_qp_attr a;

	if (c->remote.magic != IB_INFO_MAGIC)
		return -EPROTO;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = c->remote.mtu < (uint32_t)d->mtu ? (enum ibv_mtu)c->remote.mtu : d->mtu;
	a.dest_qp_num = c->remote.qpn;
	a.rq_psn = c->remote.psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.port_num = d->port;
	if (c->remote.link_layer == IBV_LINK_LAYER_ETHERNET) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, c->remote.gid, 16);
		a.ah_attr.grh.sgid_index = g.opt_gid_index;
		a.ah_attr.grh.hop_limit = 255;
	} else {
		a.ah_attr.dlid = c->remote.lid;
	}
	if (g.v.modify_qp(c->qp, &a,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -errno;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = c->local.psn;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (g.v.modify_qp(c->qp, &a,
			  IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		return -errno;
	return 0;
}

/* Nonblocking exact transfer on the out-of-band socket; 1 done, 0 later. */
static int oob_xfer(struct ib_comm *c, void *buf, size_t len, int out)
{
	int rc = collc__net_xfer(c->fd, buf, len, &c->off, out);

	if (rc > 0)
		c->off = 0; /* the next stage starts its own buffer */
	return rc;
}

/* Both sides' setup, one nonblocking step at a time; 1 when up. */
static int setup_step(struct ib_comm *c)
{
	int rc;

	for (;;) {
		switch (c->st) {
		case ST_SOCK_CONNECT:
			rc = collc__net_connect_done(c->fd);
			if (rc <= 0)
				return rc;
			c->st = ST_SEND_INFO;
			break;
		case ST_SEND_INFO:
			rc = oob_xfer(c, &c->local, sizeof(c->local), 1);
			if (rc <= 0)
				return rc;
			c->st = c->kind == IB_SEND ? ST_RECV_INFO : ST_READY;
			break;
		case ST_RECV_INFO:
			rc = oob_xfer(c, &c->remote, sizeof(c->remote), 0);
			if (rc <= 0)
				return rc;
			/* The receiver answers only once its QP is up. */
			if ((rc = qp_up(c)) < 0)
				return rc;
			c->st = c->kind == IB_SEND ? ST_READY : ST_SEND_INFO;
			break;
		case ST_READY:
			/* The sender says its QP takes the FIFO writes; the receiver waits for it. */
			if (c->kind == IB_SEND)
				c->ready = 1;
			rc = oob_xfer(c, &c->ready, 1, c->kind == IB_SEND);
			if (rc <= 0)
				return rc;
			if (c->ready != 1)
				return -EPROTO;
			close(c->fd);
			c->fd = -1;
			c->st = ST_UP;
			return 1;
		default:
			return 1;
		}
	}
}

static ncclResult_t ib_listen(int dev, void *opaque_handle, void **listenComm)
{
	struct ib_handle *h = opaque_handle;
	struct ib_listen *l;
	union net_addr a = g.oob;

	*listenComm = NULL;
	if (dev < 0 || dev >= g.ndev)
		return ncclInvalidArgument;
	l = calloc(1, sizeof(*l));
	if (!l)
		return ncclSystemError;
	l->dev = dev;
	l->fd = collc__net_listen(&a, 16, 0);
	if (l->fd < 0) {
		free(l);
		return ncclSystemError;
	}
	memset(h, 0, NCCL_NET_HANDLE_MAXSIZE);
	h->magic = IB_HANDLE_MAGIC;
	h->addr = a;
	*listenComm = l;
	return ncclSuccess;
}

/* One setup step of the comm staged in *stage (connect's or accept's); once
 * up it leaves the stage for *ret_comm. A failed comm is freed, and the call
 * returns on_error. Not run on hardware, as all of the setup. */
static ncclResult_t setup_staged(struct ib_comm **stage, void **ret_comm, const char *what,
				 ncclResult_t on_error)
{
	struct ib_comm *c = *stage;
	int rc;

	rc = setup_step(c);
	if (rc < 0) {
		LOG(NCCL_LOG_WARN, "ib: %s: %s", what, strerror(-rc));
		*stage = NULL;
		comm_free(c);
		return on_error;
	}
	if (rc) {
		*stage = NULL;
		*ret_comm = c;
	}
	return ncclSuccess;
}

static ncclResult_t ib_connect(int dev, void *opaque_handle, void **sendComm,
			       ncclNetDeviceHandle_v8_t **sendDevComm)
{
	struct ib_handle *h = opaque_handle;
	struct ib_comm *c = h->stage;

	*sendComm = NULL;
	if (dev < 0 || dev >= g.ndev || h->magic != IB_HANDLE_MAGIC)
		return ncclInvalidArgument;
	if (!c) {
		c = comm_new(IB_SEND, dev);
		if (!c)
			return ncclSystemError;
		c->fd = collc__net_connect_start(&h->addr, 0);
		if (c->fd < 0) {
			comm_free(c);
			return ncclSystemError;
		}
		h->stage = c;
	}
	return setup_staged(&h->stage, sendComm, "connect", ncclRemoteError);
}

static ncclResult_t ib_accept(void *listenComm, void **recvComm,
			      ncclNetDeviceHandle_v8_t **recvDevComm)
{
	struct ib_listen *l = listenComm;
	struct ib_comm *c = l->stage;
	int fd;

	*recvComm = NULL;
	if (!c) {
		fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR
				       ? ncclSuccess
				       : ncclSystemError;
		c = comm_new(IB_RECV, l->dev);
		if (!c) {
			close(fd);
			return ncclSystemError;
		}
		c->fd = fd;
		c->st = ST_RECV_INFO;
		l->stage = c;
	}
	/* A peer that is not a collc sender is dropped; listening goes on. */
	return setup_staged(&l->stage, recvComm, "accept", ncclSuccess);
}

static ncclResult_t reg(struct ib_comm *c, struct ibv_mr *mr, void **mhandle)
{
	struct ib_mr *m;

	if (!mr) {
		LOG(NCCL_LOG_WARN, "ib: memory registration failed: %s", strerror(errno));
		return ncclSystemError;
	}
	m = malloc(sizeof(*m));
	if (!m) {
		g.v.dereg_mr(mr);
		return ncclSystemError;
	}
	m->magic = IB_MR_MAGIC;
	m->mr = mr;
	*mhandle = m;
	return ncclSuccess;
}

/* NCCL_PTR_CUDA goes through ibv_reg_mr, which needs nvidia-peermem. */
static ncclResult_t ib_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle)
{
	struct ib_comm *c = comm;

	if (!c || (type != NCCL_PTR_HOST && type != NCCL_PTR_CUDA))
		return ncclInvalidArgument;
	return reg(c, g.v.reg_mr(g.dev[c->dev].pd, data, size, IB_ACCESS), mhandle);
}

static ncclResult_t ib_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset,
				     int fd, void **mhandle)
{
	struct ib_comm *c = comm;

	if (!c)
		return ncclInvalidArgument;
	if (!g.v.reg_dmabuf_mr) {
		LOG(NCCL_LOG_WARN, "ib: this libibverbs has no ibv_reg_dmabuf_mr");
		return ncclInternalError;
	}
	return reg(c,
		   g.v.reg_dmabuf_mr(g.dev[c->dev].pd, offset, size, (uintptr_t)data, fd,
				     IB_ACCESS),
		   mhandle);
}

static ncclResult_t ib_dereg_mr(void *comm, void *mhandle)
{
	struct ib_mr *m = mhandle;

	if (!m || m->magic != IB_MR_MAGIC)
		return ncclInvalidArgument;
	g.v.dereg_mr(m->mr);
	free(m);
	return ncclSuccess;
}

static struct ib_req *req_get(struct ib_comm *c)
{
	return collc__net_req_get(c->reqs, sizeof(c->reqs[0]));
}

static ncclResult_t ib_isend(void *sendComm, void *data, int size, int tag, void *mhandle,
			     void **request)
{
	struct ib_comm *c = sendComm;
	struct ib_mr *m = mhandle;
	struct ib_cts *slot;
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;
	struct ib_req *r;
	uint32_t j, nreqs;

	*request = NULL;
	if (!c || c->kind != IB_SEND || size < 0 || (size && (!m || m->magic != IB_MR_MAGIC)))
		return ncclInvalidArgument;
	if (c->error)
		return c->error;
	slot = &c->fifo[ib_fifo_slot(c->seq) * IB_FIFO_MAX_RECVS];
	if (!ib_fifo_ready(&slot[0], c->seq))
		return ncclSuccess; /* the matching receive is not posted yet */
	nreqs = slot[0].nreqs;
	if (nreqs < 1 || nreqs > IB_FIFO_MAX_RECVS)
		return ncclRemoteError;
	for (j = 0; j < nreqs; j++)
		if (!(c->sent_mask & 1u << j) && ib_fifo_ready(&slot[j], c->seq) &&
		    slot[j].tag == tag)
			break;
	if (j == nreqs)
		return ncclSuccess;
	if (size > slot[j].size) {
		LOG(NCCL_LOG_WARN, "ib: message of %d bytes for a receive of %d (tag %d)", size,
		    slot[j].size, tag);
		return ncclInvalidUsage;
	}
	r = req_get(c);
	if (!r)
		return ncclSuccess;
	r->n = 1;
	r->left = 1;
	r->sizes[0] = size;
	memset(&wr, 0, sizeof(wr));
	if (size) {
		sge = (struct ibv_sge){ .addr = (uintptr_t)data,
					.length = size,
					.lkey = m->mr->lkey };
		wr.sg_list = &sge;
		wr.num_sge = 1;
	}
	wr.wr_id = (uintptr_t)r;
	wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htonl(ib_imm_encode(c->seq, j));
	wr.wr.rdma.remote_addr = slot[j].addr;
	wr.wr.rdma.rkey = slot[j].rkey;
	if (ibv_post_send(c->qp, &wr, &bad)) {
		r->head.used = 0;
		return ncclSystemError;
	}
	c->sent_mask |= 1u << j;
	if ((uint32_t)__builtin_popcount(c->sent_mask) == nreqs) {
		c->seq++;
		c->sent_mask = 0;
	}
	*request = r;
	return ncclSuccess;
}

static ncclResult_t ib_irecv(void *recvComm, int n, void **data, int *sizes, int *tags,
			     void **mhandles, void **request)
{
	struct ib_comm *c = recvComm;
	struct ibv_recv_wr rwr, *rbad;
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;
	struct ib_cts *e;
	struct ib_req *r;
	uint64_t seq;
	int i;

	*request = NULL;
	if (!c || c->kind != IB_RECV || n < 1 || n > IB_FIFO_MAX_RECVS)
		return ncclInvalidArgument;
	for (i = 0; i < n; i++) {
		struct ib_mr *m = mhandles ? mhandles[i] : NULL;

		if (sizes[i] < 0 || (sizes[i] && (!m || m->magic != IB_MR_MAGIC)))
			return ncclInvalidArgument;
	}
	if (c->error)
		return c->error;
	if (!ib_fifo_can_post(c->posted, c->completed))
		return ncclSuccess;
	r = req_get(c);
	if (!r)
		return ncclSuccess;
	/* One receive WQE per message, to take its immediate. */
	memset(&rwr, 0, sizeof(rwr));
	rwr.wr_id = (uintptr_t)r;
	for (i = 0; i < n; i++)
		if (ibv_post_recv(c->qp, &rwr, &rbad))
			goto err_put;
	seq = c->posted;
	e = &c->cts[ib_fifo_slot(seq) * IB_FIFO_MAX_RECVS];
	for (i = 0; i < n; i++) {
		struct ib_mr *m = mhandles ? mhandles[i] : NULL;

		e[i] = (struct ib_cts){
			.addr = (uintptr_t)data[i],
			.rkey = m ? m->mr->rkey : 0,
			.nreqs = n,
			.size = sizes[i],
			.tag = tags[i],
			.seq1 = seq + 1,
		};
	}
	/* One write with seq1 in every element; the sender checks each. */
	sge = (struct ibv_sge){ .addr = (uintptr_t)e,
				.length = n * sizeof(*e),
				.lkey = c->cts_mr->lkey };
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 0; /* a CTS write: its completion means nothing */
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	wr.wr.rdma.remote_addr = c->remote.fifo_addr + ib_fifo_offset(seq, 0);
	wr.wr.rdma.rkey = c->remote.fifo_rkey;
	if (ibv_post_send(c->qp, &wr, &bad))
		goto err_put;
	r->n = n;
	r->left = n;
	c->by_slot[ib_fifo_slot(seq)] = r;
	c->posted++;
	*request = r;
	return ncclSuccess;

err_put:
	/* Receive WQEs already posted cannot be taken back: the QP is unusable. */
	r->head.used = 0;
	c->error = ncclSystemError;
	return c->error;
}

static ncclResult_t poll_cq(void *comm)
{
	struct ib_comm *c = comm;
	struct ibv_wc wc[16];
	int n, i;

	if (c->error)
		return c->error;
	while ((n = ibv_poll_cq(c->cq, 16, wc)) > 0) {
		for (i = 0; i < n; i++) {
			struct ib_req *r;
			uint64_t seq;
			uint32_t sub;

			if (wc[i].status != IBV_WC_SUCCESS) {
				LOG(NCCL_LOG_WARN, "ib: completion error: %s",
				    g.v.wc_status_str(wc[i].status));
				return c->error = ncclRemoteError;
			}
			if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
				if (ib_imm_decode(ntohl(wc[i].imm_data), c->completed, c->posted,
						  &seq, &sub) < 0 ||
				    !(r = c->by_slot[ib_fifo_slot(seq)]) || (int)sub >= r->n)
					return c->error = ncclRemoteError;
				r->sizes[sub] = wc[i].byte_len;
				if (--r->left == 0)
					r->head.done = 1;
				/* Credits return in order (RC delivers in order). */
				while (c->completed != c->posted &&
				       c->by_slot[ib_fifo_slot(c->completed)]->head.done) {
					c->by_slot[ib_fifo_slot(c->completed)] = NULL;
					c->completed++;
				}
			} else if (wc[i].wr_id) {
				r = (struct ib_req *)(uintptr_t)wc[i].wr_id;
				r->head.done = 1;
			}
		}
	}
	if (n < 0)
		return c->error = ncclSystemError;
	return ncclSuccess;
}

static ncclResult_t ib_test(void *request, int *done, int *sizes)
{
	struct ib_req *r = request;
	ncclResult_t rc = collc__net_req_test(request, done, poll_cq);
	int i;

	if (*done && sizes)
		for (i = 0; i < r->n; i++)
			sizes[i] = r->sizes[i];
	return rc;
}

static ncclResult_t ib_close_comm(void *comm)
{
	comm_free(comm);
	return ncclSuccess;
}

static ncclResult_t ib_close_listen(void *listenComm)
{
	struct ib_listen *l = listenComm;

	if (!l)
		return ncclSuccess;
	comm_free(l->stage);
	close(l->fd);
	free(l);
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
	.iflush = collc__net_iflush_host, /* host memory only (ptrSupport): nothing to flush */
	.test = ib_test,
	.closeSend = ib_close_comm,
	.closeRecv = ib_close_comm,
	.closeListen = ib_close_listen,
	.getDeviceMr = collc__net_no_device_mr,
	.irecvConsumed = collc__net_irecv_consumed,
};
