/* SPDX-License-Identifier: MIT */
/*
 * Control messages on collcd's SOCK_SEQPACKET Unix socket.
 *
 * Every message is one datagram: a struct collc_msg_hdr followed by `length`
 * payload bytes. A reply carries the request's type with COLLC_MSG_REPLY set,
 * the request's id, and starts with struct collc_msg_status. File descriptors
 * travel as SCM_RIGHTS on the same datagram.
 *
 * Protocol history:
 *   1  first version: hello, memory, communicators, status/get/set/metrics,
 *      per-communicator timeouts.
 *   2  COLLC_MSG_MEM_REGISTER with device >= 0 carries its CUDA IPC handle in
 *      the payload, a variable tail after struct collc_msg_mem (struct
 *      collc_msg_mem_gpu_register), instead of in a pipe passed as its fd.
 *      hello_reply.backend is a bitmask of COLLC_BACKEND_* (one collcd runs
 *      the CPU and the CUDA executor side by side): test the bit.
 *      Later, still 2: hello_reply.net_* (formerly reserved, so zero from an
 *      older collcd) name where collcd listens for other daemons, and unique
 *      ids of version 2 carry it (struct collc_uid).
 */
#ifndef COLLC_PROTO_WIRE_H
#define COLLC_PROTO_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define COLLC_WIRE_MAGIC   0x434f4c43u /* "COLC" */
#define COLLC_WIRE_VERSION 2u
#define COLLC_MSG_MAX      65536u /* largest datagram either side sends */
#define COLLC_MSG_REPLY    0x8000u

enum {
	COLLC_MSG_HELLO = 1,    /* -> hello_reply + fds {shm, doorbell} */
	COLLC_MSG_MEM_ALLOC,    /* -> mem_reply + fd {memfd} */
	COLLC_MSG_MEM_REGISTER, /* fd {memfd} -> mem_reply */
	COLLC_MSG_MEM_RELEASE,  /* mem_release -> status */
	COLLC_MSG_COMM_INIT,    /* comm_init -> comm_reply once every rank joined */
	COLLC_MSG_COMM_DESTROY, /* comm_ref -> status */
	COLLC_MSG_COMM_ABORT,   /* comm_ref -> status */
	COLLC_MSG_SET_EVENTFD,  /* fd {eventfd} -> status */
	COLLC_MSG_STATUS,       /* status_req -> text (JSON or table), chunked */
	COLLC_MSG_GET,          /* text "key" -> text "value" */
	COLLC_MSG_SET,          /* text "k=v k=v" -> text message */
	COLLC_MSG_METRICS,      /* -> Prometheus text, chunked */
	COLLC_MSG_COMM_TIMEOUT, /* comm_timeout -> status */
	COLLC_MSG_TYPE_MAX,
};

struct collc_msg_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t length; /* payload bytes after this header */
	uint32_t id;     /* chosen by the requester, echoed in the reply */
};
_Static_assert(sizeof(struct collc_msg_hdr) == 16, "msg_hdr size");
_Static_assert(offsetof(struct collc_msg_hdr, type) == 6, "msg_hdr.type");
_Static_assert(offsetof(struct collc_msg_hdr, length) == 8, "msg_hdr.length");
_Static_assert(offsetof(struct collc_msg_hdr, id) == 12, "msg_hdr.id");

/* First payload of every reply. */
#define COLLC_STATUS_MORE 0x1u /* another chunk of this reply follows */
struct collc_msg_status {
	int32_t status; /* 0 or -errno */
	uint32_t flags; /* COLLC_STATUS_* */
};
_Static_assert(sizeof(struct collc_msg_status) == 8, "msg_status size");
_Static_assert(offsetof(struct collc_msg_status, flags) == 4, "msg_status.flags");

struct collc_msg_hello {
	uint32_t api_version;
	uint32_t flags; /* none defined: must be 0 */
	uint64_t reserved[2];
};
_Static_assert(sizeof(struct collc_msg_hello) == 24, "hello size");
_Static_assert(offsetof(struct collc_msg_hello, reserved) == 8, "hello.reserved");

/* Offsets of the ring fields inside the shared region (see shm.h). */
struct collc_ring_offsets {
	uint32_t head;
	uint32_t tail;
	uint32_t flags;
	uint32_t entries; /* offset of the entry array */
	uint32_t ring_entries;
	uint32_t reserved[3];
};
_Static_assert(sizeof(struct collc_ring_offsets) == 32, "ring_offsets size");
_Static_assert(offsetof(struct collc_ring_offsets, ring_entries) == 16,
	       "ring_offsets.ring_entries");

#define COLLC_FEAT_DOORBELL 0x1u  /* submissions wake collcd through the doorbell futex */
#define COLLC_FEAT_CQ_FUTEX 0x2u  /* collcd futex-wakes cq tail when COLLC_CQ_WAITING is set */
#define COLLC_FEAT_SQE_ARGS 0x4u  /* the region has the SQE argument area (shm.h args_off) */
#define COLLC_FEAT_GATES    0x8u  /* the region has stream gates (shm.h gates_off) */
#define COLLC_FEAT_DONES    0x10u /* the region has done words (shm.h dones_off) */
#define COLLC_FEATURES                                                                             \
	(COLLC_FEAT_DOORBELL | COLLC_FEAT_CQ_FUTEX | COLLC_FEAT_SQE_ARGS | COLLC_FEAT_GATES |      \
	 COLLC_FEAT_DONES)

struct collc_msg_hello_reply {
	struct collc_msg_status st;
	uint32_t features;
	uint32_t client_id;
	uint64_t shm_size;
	uint64_t doorbell_size;
	struct collc_ring_offsets sq;
	struct collc_ring_offsets cq;
	uint8_t node_id[16]; /* names this collcd; goes into unique ids */
	uint32_t max_ranks;
	uint32_t ndevices; /* devices of every executor together */
	uint32_t backend;  /* bitmask of COLLC_BACKEND_*: every executor that runs (version 2) */
	/* collcd --listen: where other daemons reach it (family 0: not listening) */
	uint16_t net_family; /* AF_INET or AF_INET6 */
	uint16_t net_port;   /* network byte order */
	uint8_t net_addr[16];
	uint32_t reserved[2];
};
_Static_assert(sizeof(struct collc_msg_hello_reply) == 152, "hello_reply size");
_Static_assert(offsetof(struct collc_msg_hello_reply, features) == 8, "hello_reply.features");
_Static_assert(offsetof(struct collc_msg_hello_reply, shm_size) == 16, "hello_reply.shm_size");
_Static_assert(offsetof(struct collc_msg_hello_reply, sq) == 32, "hello_reply.sq");
_Static_assert(offsetof(struct collc_msg_hello_reply, cq) == 64, "hello_reply.cq");
_Static_assert(offsetof(struct collc_msg_hello_reply, node_id) == 96, "hello_reply.node_id");
_Static_assert(offsetof(struct collc_msg_hello_reply, max_ranks) == 112, "hello_reply.max_ranks");
_Static_assert(offsetof(struct collc_msg_hello_reply, net_family) == 124, "hello_reply.net_family");
_Static_assert(offsetof(struct collc_msg_hello_reply, net_addr) == 128, "hello_reply.net_addr");
_Static_assert(offsetof(struct collc_msg_hello_reply, reserved) == 144, "hello_reply.reserved");

/* Bits of hello_reply.backend. */
enum { COLLC_BACKEND_CPU = 1, COLLC_BACKEND_CUDA = 2 };

struct collc_msg_mem {
	uint64_t size;
	int32_t device; /* -1: host memory */
	uint32_t flags; /* none defined: must be 0 */
	uint8_t device_uuid[16];
};
_Static_assert(sizeof(struct collc_msg_mem) == 32, "msg_mem size");
_Static_assert(offsetof(struct collc_msg_mem, device) == 8, "msg_mem.device");
_Static_assert(offsetof(struct collc_msg_mem, device_uuid) == 16, "msg_mem.device_uuid");

/* The CUDA IPC handle of the allocation that holds a registered GPU range. */
struct collc_msg_mem_ipc {
	uint8_t handle[64];  /* cudaIpcMemHandle_t of the allocation's base */
	uint64_t offset;     /* of the registered range from the allocation's base */
	uint64_t alloc_size; /* bytes of the allocation, as the client sees it */
};
_Static_assert(sizeof(struct collc_msg_mem_ipc) == 80, "mem_ipc size");
_Static_assert(offsetof(struct collc_msg_mem_ipc, offset) == 64, "mem_ipc.offset");

/*
 * COLLC_MSG_MEM_REGISTER with device >= 0: the whole payload (112 bytes, no
 * fd). With device -1 the payload is struct collc_msg_mem alone and the fd
 * is the memfd.
 */
struct collc_msg_mem_gpu_register {
	struct collc_msg_mem mem;
	struct collc_msg_mem_ipc ipc;
};
_Static_assert(sizeof(struct collc_msg_mem_gpu_register) == 112, "mem_gpu_register size");
_Static_assert(offsetof(struct collc_msg_mem_gpu_register, ipc) == 32, "mem_gpu_register.ipc");

/*
 * COLLC_MSG_MEM_ALLOC with device >= 0: the reply's fd is a SOCK_SEQPACKET
 * socket holding one message, this struct with the POSIX fd of the VMM
 * allocation (SCM_RIGHTS). The client maps map_size bytes from it.
 */
struct collc_msg_mem_vmm {
	uint64_t map_size;
	uint64_t reserved;
};
_Static_assert(sizeof(struct collc_msg_mem_vmm) == 16, "mem_vmm size");

struct collc_msg_mem_reply {
	struct collc_msg_status st;
	uint32_t mr; /* registration handle, used in SQEs */
	uint32_t reserved;
	uint64_t size; /* bytes the handle covers */
};
_Static_assert(sizeof(struct collc_msg_mem_reply) == 24, "mem_reply size");
_Static_assert(offsetof(struct collc_msg_mem_reply, mr) == 8, "mem_reply.mr");
_Static_assert(offsetof(struct collc_msg_mem_reply, size) == 16, "mem_reply.size");

struct collc_msg_mem_release {
	uint32_t mr;
	uint32_t reserved;
};
_Static_assert(sizeof(struct collc_msg_mem_release) == 8, "mem_release size");

#define COLLC_UID_MAGIC         0x44495543u /* "CUID" */
/*
 * Version 1: node id and nonce, ranks meet on one collcd. Version 2 (from a
 * collcd with --listen) adds where that daemon listens and a random secret:
 * ranks on other daemons pass it to theirs, which join the named one after
 * a mutual HMAC challenge keyed by the secret.
 */
#define COLLC_UID_VERSION_LOCAL 1u
#define COLLC_UID_VERSION_NET   2u
/* The layout of struct collc_unique_id's bytes. */
struct collc_uid {
	uint32_t magic;
	uint32_t version;
	uint8_t node_id[16]; /* collcd that hosts rank 0 */
	uint8_t nonce[32];
	/* Version 2. */
	uint16_t net_family; /* AF_INET or AF_INET6 of the root daemon */
	uint16_t net_port;   /* network byte order */
	uint32_t reserved0;
	uint8_t net_addr[16];
	uint8_t secret[16]; /* only daemons holding it join or exchange data */
	uint8_t reserved[32];
};
_Static_assert(sizeof(struct collc_uid) == 128, "uid size");
_Static_assert(offsetof(struct collc_uid, node_id) == 8, "uid.node_id");
_Static_assert(offsetof(struct collc_uid, nonce) == 24, "uid.nonce");
_Static_assert(offsetof(struct collc_uid, net_family) == 56, "uid.net_family");
_Static_assert(offsetof(struct collc_uid, net_addr) == 64, "uid.net_addr");
_Static_assert(offsetof(struct collc_uid, secret) == 80, "uid.secret");

struct collc_msg_comm_init {
	struct collc_uid uid;
	uint32_t nranks;
	uint32_t rank;
	int32_t device; /* client's ordinal, -1 for host memory; informative only */
	uint32_t flags; /* none defined: must be 0 */
	uint8_t device_uuid[16];
};
_Static_assert(sizeof(struct collc_msg_comm_init) == 160, "comm_init size");
_Static_assert(offsetof(struct collc_msg_comm_init, nranks) == 128, "comm_init.nranks");
_Static_assert(offsetof(struct collc_msg_comm_init, device_uuid) == 144, "comm_init.device_uuid");

struct collc_msg_comm_reply {
	struct collc_msg_status st;
	uint32_t comm; /* handle used in SQEs */
	uint32_t reserved;
	uint64_t comm_id; /* node-wide id, as status shows it */
};
_Static_assert(sizeof(struct collc_msg_comm_reply) == 24, "comm_reply size");
_Static_assert(offsetof(struct collc_msg_comm_reply, comm_id) == 16, "comm_reply.comm_id");

struct collc_msg_comm_ref {
	uint32_t comm;
	uint32_t reserved;
};
_Static_assert(sizeof(struct collc_msg_comm_ref) == 8, "comm_ref size");

struct collc_msg_comm_timeout {
	uint32_t comm;
	uint32_t timeout_ms; /* 0: none; UINT32_MAX: follow op_timeout_ms */
};
_Static_assert(sizeof(struct collc_msg_comm_timeout) == 8, "comm_timeout size");
_Static_assert(offsetof(struct collc_msg_comm_timeout, timeout_ms) == 4, "comm_timeout.timeout_ms");

#define COLLC_STATUS_JSON 0x1u
struct collc_msg_status_req {
	uint32_t flags; /* COLLC_STATUS_JSON */
	uint32_t reserved;
};
_Static_assert(sizeof(struct collc_msg_status_req) == 8, "status_req size");

#endif /* COLLC_PROTO_WIRE_H */
