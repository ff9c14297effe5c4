/* SPDX-License-Identifier: MIT */
/*
 * Sends and receives between daemons, inside the node layer (node.c calls
 * these with its lock held, on its own thread or the scheduler's). One
 * struct np2p per spanning communicator: a data link each way to every
 * other daemon of it (ncclNet_v8 comms), the sends and receives of this
 * daemon's ranks whose peers run elsewhere, and the receivers' clear-to-send
 * messages that came before their send was posted here.
 */
#ifndef COLLCD_NODE_P2P_H
#define COLLCD_NODE_P2P_H

#include <poll.h>
#include <stdint.h>

#include "daemon/net/net.h"
#include "daemon/node.h"

struct np2p;

/* Ends one send or receive of the scheduler's (cookie) with err. */
typedef void np2p_done_fn(void *arg, uint64_t cookie, int err);

struct np2p *np2p_new(const ncclNet_v8_t *net, uint32_t nranks, uint32_t ndaemons, uint32_t me,
		      const uint8_t *owner, np2p_done_fn *done, void *arg);
/* Drops everything without completions (the scheduler ends them). NULL is fine. */
void np2p_free(struct np2p *p);
/* Listens for every other daemon; handles[e] is daemon e's to connect with. */
int np2p_listen(struct np2p *p, uint8_t handles[][NCCL_NET_HANDLE_MAXSIZE]);
/* Daemon e's listen for this daemon. -EPROTO when it came already. */
int np2p_peer_handle(struct np2p *p, uint32_t e, const uint8_t *handle);
/* Connects and accepts; 1 once every link is up. */
int np2p_connect(struct np2p *p);
int np2p_post(struct np2p *p, const struct node_p2p *d);
int np2p_expire(struct np2p *p, uint64_t cookie);
/*
 * Moves what can move: 1 if anything did, 0 if not, -errno when the
 * communicator must fail (a broken link, a peer breaking the protocol).
 * *busy: bytes are in flight; *pending: some send or receive waits here.
 */
int np2p_step(struct np2p *p, int *busy, int *pending);
/* The data sockets worth a poll() (the tcp transport only). */
int np2p_pollfds(struct np2p *p, struct pollfd *pf, int max);
/* What poll() saw on those sockets (net_tcp_poll_seen()). */
void np2p_poll_seen(struct np2p *p, const struct pollfd *pf, int n);
/* Bytes moved to and from daemon e. */
void np2p_bytes(const struct np2p *p, uint32_t e, uint64_t *sent, uint64_t *received);
/* Messages from peers that broke the protocol (before the communicator failed). */
uint64_t np2p_errors(const struct np2p *p);

#endif
