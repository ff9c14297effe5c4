/* SPDX-License-Identifier: MIT */
/*
 * The network transport door: one function table shaped exactly like NCCL's
 * net plugin API version 8 (ncclNet_v8_t), so that an existing NCCL net plugin
 * (libnccl-net-NAME.so exporting ncclNetPlugin_v8) loads unchanged, and the
 * built-in transports (tcp.c, ib.c) are reached through the same table.
 *
 * The NCCL names below are ABI, not house style: the plugin's symbol, struct
 * layouts and result codes must match what those plugins were compiled
 * against. The layout facts come from NCCL's public plugin headers; the
 * static asserts at the bottom pin them for LP64 (x86_64, aarch64).
 *
 * Threading (the NCCL contract): a comm and its requests are used by one
 * thread at a time (collcd's proxy thread); connect/accept never block and
 * are called again until they return a comm; isend/irecv may return a NULL
 * request when no slot is free, and the caller retries.
 */
#ifndef COLLCD_NET_NET_H
#define COLLCD_NET_NET_H

#include <stddef.h>
#include <stdint.h>

#define NCCL_NET_HANDLE_MAXSIZE 128
/* NCCL posts at most this many requests per comm at once. */
#define NCCL_NET_MAX_REQUESTS   32

#define NCCL_PTR_HOST   0x1
#define NCCL_PTR_CUDA   0x2
#define NCCL_PTR_DMABUF 0x4

/* Values fixed by nccl.h; plugins return them. */
typedef enum {
	ncclSuccess = 0,
	ncclUnhandledCudaError = 1,
	ncclSystemError = 2,
	ncclInternalError = 3,
	ncclInvalidArgument = 4,
	ncclInvalidUsage = 5,
	ncclRemoteError = 6,
	ncclInProgress = 7,
	ncclNumResults = 8
} ncclResult_t;

typedef enum {
	NCCL_LOG_NONE = 0,
	NCCL_LOG_VERSION = 1,
	NCCL_LOG_WARN = 2,
	NCCL_LOG_INFO = 3,
	NCCL_LOG_ABORT = 4,
	NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

/* Subsystem flags passed as the logger's second argument. */
#define NCCL_INIT 1UL
#define NCCL_NET  16UL

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char *file,
				  int line, const char *fmt, ...);

typedef enum { NCCL_NET_DEVICE_HOST = 0, NCCL_NET_DEVICE_UNPACK = 1 } ncclNetDeviceType;
#define NCCL_NET_DEVICE_INVALID_VERSION 0x0

/* Device offload handle (v7 layout, reused by v8). collc offloads nothing:
 * connect/accept leave *devComm untouched. */
typedef struct {
	ncclNetDeviceType netDeviceType;
	int netDeviceVersion;
	void *handle;
	size_t size;
	int needsProxyProgress;
} ncclNetDeviceHandle_v8_t;

typedef struct {
	char *name;      /* for logs */
	char *pciPath;   /* sysfs path of the PCI device, or NULL */
	uint64_t guid;   /* tells PCI functions of one NIC apart */
	int ptrSupport;  /* NCCL_PTR_* bits */
	int regIsGlobal; /* regMr not tied to one comm */
	int speed;       /* Mbit/s */
	int port;
	float latency; /* microseconds */
	int maxComms;
	int maxRecvs; /* most receives one irecv may group */
	ncclNetDeviceType netDeviceType;
	int netDeviceVersion;
} ncclNetProperties_v8_t;

typedef struct {
	const char *name;
	ncclResult_t (*init)(ncclDebugLogger_t logFunction);
	ncclResult_t (*devices)(int *ndev);
	ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t *props);
	/* handle: NCCL_NET_HANDLE_MAXSIZE bytes, carried to the peer by bootstrap */
	ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
	/* Never blocks: *sendComm stays NULL until the connection is up. */
	ncclResult_t (*connect)(int dev, void *handle, void **sendComm,
				ncclNetDeviceHandle_v8_t **sendDevComm);
	ncclResult_t (*accept)(void *listenComm, void **recvComm,
			       ncclNetDeviceHandle_v8_t **recvDevComm);
	ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
	ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
				    int fd, void **mhandle);
	ncclResult_t (*deregMr)(void *comm, void *mhandle);
	/* *request == NULL: no slot now, call again. */
	ncclResult_t (*isend)(void *sendComm, void *data, int size, int tag, void *mhandle,
			      void **request);
	/* n grouped receives; sizes[] are the most each may take. */
	ncclResult_t (*irecv)(void *recvComm, int n, void **data, int *sizes, int *tags,
			      void **mhandles, void **request);
	/* Makes received NCCL_PTR_CUDA data visible to the GPU. */
	ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
			       void **request);
	/* *done = 1 frees the request; sizes[] get the bytes moved per receive. */
	ncclResult_t (*test)(void *request, int *done, int *sizes);
	ncclResult_t (*closeSend)(void *sendComm);
	ncclResult_t (*closeRecv)(void *recvComm);
	ncclResult_t (*closeListen)(void *listenComm);
	ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
	ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
} ncclNet_v8_t;

/* The symbol a plugin exports. */
#define NET_PLUGIN_SYMBOL "ncclNetPlugin_v8"

#if defined(__LP64__)
_Static_assert(sizeof(ncclNetDeviceHandle_v8_t) == 32, "ncclNetDeviceHandle_v8_t ABI");
_Static_assert(offsetof(ncclNetDeviceHandle_v8_t, handle) == 8, "ABI");
_Static_assert(offsetof(ncclNetDeviceHandle_v8_t, size) == 16, "ABI");
_Static_assert(offsetof(ncclNetDeviceHandle_v8_t, needsProxyProgress) == 24, "ABI");

_Static_assert(sizeof(ncclNetProperties_v8_t) == 64, "ncclNetProperties_v8_t ABI");
_Static_assert(offsetof(ncclNetProperties_v8_t, name) == 0, "ABI");
_Static_assert(offsetof(ncclNetProperties_v8_t, pciPath) == 8, "ABI");
_Static_assert(offsetof(ncclNetProperties_v8_t, guid) == 16, "ABI");
_Static_assert(offsetof(ncclNetProperties_v8_t, ptrSupport) == 24, "ABI");
_Static_assert(offsetof(ncclNetProperties_v8_t, regIsGlobal) == 28, "ABI");
_Static_assert(offsetof(ncclNetProperties_v8_t, speed) == 32, "ABI");
_Static_assert(offsetof(ncclNetProperties_v8_t, port) == 36, "ABI");
_Static_assert(offsetof(ncclNetProperties_v8_t, latency) == 40, "ABI");
_Static_assert(offsetof(ncclNetProperties_v8_t, maxComms) == 44, "ABI");
_Static_assert(offsetof(ncclNetProperties_v8_t, maxRecvs) == 48, "ABI");
_Static_assert(offsetof(ncclNetProperties_v8_t, netDeviceType) == 52, "ABI");
_Static_assert(offsetof(ncclNetProperties_v8_t, netDeviceVersion) == 56, "ABI");

_Static_assert(sizeof(ncclNet_v8_t) == 19 * sizeof(void *), "ncclNet_v8_t ABI");
_Static_assert(offsetof(ncclNet_v8_t, init) == 8, "ABI");
_Static_assert(offsetof(ncclNet_v8_t, listen) == 32, "ABI");
_Static_assert(offsetof(ncclNet_v8_t, regMr) == 56, "ABI");
_Static_assert(offsetof(ncclNet_v8_t, isend) == 80, "ABI");
_Static_assert(offsetof(ncclNet_v8_t, irecv) == 88, "ABI");
_Static_assert(offsetof(ncclNet_v8_t, test) == 104, "ABI");
_Static_assert(offsetof(ncclNet_v8_t, closeListen) == 128, "ABI");
_Static_assert(offsetof(ncclNet_v8_t, irecvConsumed) == 144, "ABI");
#endif
_Static_assert(sizeof(ncclResult_t) == sizeof(int), "ncclResult_t is an int on the wire of calls");

/* Built-in transports. */
extern const ncclNet_v8_t net_tcp;
extern const ncclNet_v8_t net_ib;

/* Options of the tcp transport; set before init (init reads them once).
 * ifname NULL or "": the first non-loopback interface that is up, else lo. */
struct net_tcp_opts {
	const char *ifname;
	int nstreams; /* data sockets per connection, 1..NET_TCP_MAX_STREAMS */
	/*
	 * 1: the caller sleeps in poll() on net_tcp_pollfds() and reports what
	 * it saw with net_tcp_poll_seen(); a socket that would block before its
	 * next piece began is then left alone until poll says it is ready,
	 * instead of a system call that fails with EAGAIN at every test() (one
	 * in the middle of a piece is tried again at once). 0 (NCCL's way, the
	 * plugin): test() tries every socket with work each time.
	 */
	int poll_driven;
	/*
	 * 1: each connected comm's data sockets move their bytes in a helper
	 * thread of the comm's own, the caller's thread keeping socket 0 and
	 * the completions (tcp.c); with poll_driven the caller then hears of
	 * the helper's completions on an eventfd net_tcp_pollfds() names. 0
	 * (the plugin's default): the caller's thread moves every socket.
	 */
	int helpers;
};
#define NET_TCP_MAX_STREAMS     8
#define NET_TCP_DEFAULT_STREAMS 2
/* Data sockets a link where new connections default to bbr (config.c). */
#define NET_TCP_BBR_STREAMS     4
int net_tcp_configure(const struct net_tcp_opts *opts);
/*
 * collc's own extension of the built-in tcp transport (not in the table):
 * the sockets of a send or receive comm that have bytes to move, with the
 * event that lets them (POLLOUT to send, POLLIN to receive), so that a
 * proxy can sleep in poll() instead of calling test() on a timer. Returns
 * how many of pf's max entries it filled (0: nothing to wait for).
 */
struct pollfd;
int net_tcp_pollfds(void *comm, struct pollfd *pf, int max);
/*
 * With poll_driven: the sockets of comm that appear in pf[0..n) with events
 * in revents may move again (readable, writable, hung up or failed).
 */
void net_tcp_poll_seen(void *comm, const struct pollfd *pf, int n);

/* Options of the ib transport; set before init. ifname: the interface of the
 * out-of-band socket that exchanges queue pair numbers (as for tcp);
 * gid_index: the GID table entry used on RoCE ports. */
struct net_ib_opts {
	const char *ifname;
	int gid_index;
};
int net_ib_configure(const struct net_ib_opts *opts);

/* Reason the ib transport found no device, for the loader's log. */
const char *net_ib_status(void);

/* The loader (plugin.c). name: "tcp", "ib", "auto", "plugin:NAME" or a bare
 * NAME of a plugin (libnccl-net-NAME.so, or a path containing '/').
 * "auto" takes the plugin named by `plugin` (may be NULL), else ib when an
 * active RDMA port exists, else tcp. The chosen table has been init'ed with
 * `logger` (NULL: silent) and reports >= 1 device. */
struct net_transport {
	const ncclNet_v8_t *net;
	void *dl; /* dlopen handle of a plugin, NULL for built-ins */
	int ndev;
	char what[256]; /* "tcp", "ib", or "plugin:NAME" (truncated) */
};
int net_load(const char *name, const char *plugin, ncclDebugLogger_t logger,
	     struct net_transport *ret_t);
void net_unload(struct net_transport *t);

#endif
