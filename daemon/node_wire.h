/* SPDX-License-Identifier: MIT */
/*
 * The control messages between collcd daemons (daemon/node.c), after the
 * auth handshake: a 16-byte header (magic, type, body length) and a body of
 * at most MSG_MAX bytes. Host byte order: the daemons of one job run on one
 * architecture. node.c treats every field as hostile: a message of another
 * length, type or state than these allow fails the sender's communicator.
 */
#ifndef COLLCD_NODE_WIRE_H
#define COLLCD_NODE_WIRE_H

#include <stdint.h>

#include "daemon/net/net.h"
#include "daemon/node.h"

#define MSG_MAGIC 0x4e4c4c43u              /* "CLLN" */
#define MSG_MAX   (NODE_EAGER_MAX + 1024u) /* largest body: an eager COLL or its answer */

enum {
	M_REG = 1,
	M_TABLE,
	M_PING,
	M_ABORT,
	M_COLL,
	M_GO,
	M_DONE,
	M_ALLDONE,
	M_P2PL,
	M_P2PT,
	M_EAGER,   /* root -> joiners: an eager collective's result in place of its GO (node.h) */
	M_PEER_IN, /* root -> joiner of two daemons: the root's view and inputs (node.h) */
	M_TYPE_MAX
};

struct msg_hdr {
	uint32_t magic;
	uint16_t type;
	uint16_t reserved;
	uint32_t len; /* body bytes */
	uint32_t reserved2;
};
_Static_assert(sizeof(struct msg_hdr) == 16, "msg_hdr wire size");

struct wire_addr {
	uint16_t family;
	uint16_t port; /* network order */
	uint8_t addr[16];
};
_Static_assert(sizeof(struct wire_addr) == 20, "wire_addr size");

struct m_reg {
	uint32_t rank;
	uint32_t nranks;
	uint32_t max_chan;
	uint32_t gpu;          /* the rank uses a GPU (every rank or none, across daemons) */
	struct wire_addr from; /* the joiner's listen address, for status */
	uint8_t pad[4];
	uint8_t handles[NODE_LINK_SLOTS][NCCL_NET_HANDLE_MAXSIZE];
};

struct m_table {
	uint32_t nranks;
	uint32_t nchan;
	uint32_t you; /* the receiver's daemon index */
	uint32_t ndaemons;
	/*
	 * Ranks of every daemon where the group rings run (each daemon holds
	 * as many, at least 2), else 0; hierarchical collectives from
	 * hier_min_bytes a rank (the root's key net_hier_min_bytes).
	 */
	uint32_t group;
	uint32_t reserved;
	uint64_t hier_min_bytes;
	uint8_t owner[COLLC_MAX_RANKS];
	struct wire_addr daemons[COLLC_MAX_RANKS];
	uint8_t handles[COLLC_MAX_RANKS][NODE_LINK_SLOTS][NCCL_NET_HANDLE_MAXSIZE];
};
_Static_assert(sizeof(struct m_table) <= MSG_MAX, "a table fits a message");

struct m_abort {
	int32_t err;
	uint32_t reserved;
};

/*
 * The send/recv links (node_p2p.c), after the table: each daemon listens
 * once for every other one. M_P2PL (joiner -> root): handles[e] is the
 * sender's listen for daemon e. M_P2PT (root -> joiner): handles[d] is
 * daemon d's listen for the receiver.
 */
struct m_p2ph {
	uint32_t from;
	uint32_t ndaemons;
	uint8_t handles[COLLC_MAX_RANKS][NCCL_NET_HANDLE_MAXSIZE];
};
_Static_assert(sizeof(struct m_p2ph) <= MSG_MAX, "p2p handles fit a message");

/* M_GO, M_DONE and M_ALLDONE. */
struct m_seq {
	uint64_t seq;
	int32_t err;
	uint32_t reserved;
};
_Static_assert(sizeof(struct node_coll) == 56, "node_coll wire size");

#endif
