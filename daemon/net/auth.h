/* SPDX-License-Identifier: MIT */
/*
 * Mutual challenge-response between collcd daemons that share a
 * communicator's 128-bit secret (carried in its unique id).
 *
 *   initiator -> responder  HELLO     comm id, nonce_i
 *   responder -> initiator  CHALLENGE nonce_r, mac_r = HMAC(secret, "R" nonce_i nonce_r id)
 *   initiator -> responder  RESPONSE  mac_i = HMAC(secret, "I" nonce_i nonce_r id)
 *   responder -> initiator  RESULT    status
 *
 * HMAC-SHA256 from OpenSSL's libcrypto, compared with CRYPTO_memcmp. Every
 * frame is NET_AUTH_FRAME_BYTES long: a 16-byte header (magic, version, type,
 * body length, status) checked before the body is read, so garbage and
 * oversized lengths are refused after 16 bytes. Each side checks the other's
 * MAC, so a wrong secret is refused on both sides. A nonce seen before (a
 * bounded cache of recent ones) refuses the handshake as a replay. Wire
 * integers are little-endian.
 *
 * The step functions are pure over frames; net_auth_run_* drive them over a
 * byte stream with one deadline for the whole handshake. A struct net_auth
 * is used by one thread at a time.
 */
#ifndef COLLCD_NET_AUTH_H
#define COLLCD_NET_AUTH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define NET_AUTH_SECRET_BYTES       16
#define NET_AUTH_ID_BYTES           16
#define NET_AUTH_NONCE_BYTES        16
#define NET_AUTH_MAC_BYTES          32
#define NET_AUTH_MAGIC              0x55414c43u /* "CLAU" in little-endian bytes */
#define NET_AUTH_VERSION            1
#define NET_AUTH_HDR_BYTES          16
#define NET_AUTH_BODY_BYTES         80
#define NET_AUTH_FRAME_BYTES        (NET_AUTH_HDR_BYTES + NET_AUTH_BODY_BYTES)
#define NET_AUTH_REPLAY_CACHE       1024
#define NET_AUTH_DEFAULT_TIMEOUT_MS 2000

enum net_auth_type {
	NET_AUTH_HELLO = 1,
	NET_AUTH_CHALLENGE = 2,
	NET_AUTH_RESPONSE = 3,
	NET_AUTH_RESULT = 4,
};

/* Why a handshake was refused; index of net_auth.refused[]. */
enum net_auth_reason {
	NET_AUTH_OK = 0,
	NET_AUTH_ERR_TRUNCATED, /* the stream ended inside a frame */
	NET_AUTH_ERR_MAGIC,     /* not a collc auth frame (garbage, port scan) */
	NET_AUTH_ERR_VERSION,
	NET_AUTH_ERR_TYPE,   /* a frame out of order */
	NET_AUTH_ERR_LENGTH, /* body length other than NET_AUTH_BODY_BYTES */
	NET_AUTH_ERR_UNKNOWN_COMM,
	NET_AUTH_ERR_MAC, /* the peer does not hold the secret */
	NET_AUTH_ERR_REPLAY,
	NET_AUTH_ERR_TIMEOUT,
	NET_AUTH_ERR_IO,
	NET_AUTH_ERR_REFUSED,  /* the responder said no */
	NET_AUTH_ERR_INTERNAL, /* no randomness, HMAC failed */
	NET_AUTH_NREASONS
};

/* A daemon's authenticator: secrets by communicator, replay cache, counters. */
struct net_auth {
	/* Responder: the secret of communicator `id`; 0, or -ENOENT if unknown. */
	int (*lookup)(void *arg, const uint8_t id[NET_AUTH_ID_BYTES],
		      uint8_t ret_secret[NET_AUTH_SECRET_BYTES]);
	void *lookup_arg;
	int timeout_ms;
	uint64_t accepted;
	uint64_t refused[NET_AUTH_NREASONS];
	/* Ring of recently seen peer nonces; seen_n counts the valid entries. */
	uint8_t seen[NET_AUTH_REPLAY_CACHE][NET_AUTH_NONCE_BYTES];
	uint32_t seen_next, seen_n;
};

/* One handshake in progress. */
struct net_auth_session {
	int initiator;
	int stage;
	uint8_t id[NET_AUTH_ID_BYTES];
	uint8_t secret[NET_AUTH_SECRET_BYTES];
	uint8_t nonce_i[NET_AUTH_NONCE_BYTES];
	uint8_t nonce_r[NET_AUTH_NONCE_BYTES];
};

/* A byte stream: read returns > 0 bytes, 0 at end of stream, or -errno
 * (-ETIMEDOUT when nothing came within timeout_ms); write returns > 0 or -errno. */
struct net_auth_io {
	void *ctx;
	ssize_t (*read)(void *ctx, void *buf, size_t len, int timeout_ms);
	ssize_t (*write)(void *ctx, const void *buf, size_t len, int timeout_ms);
};

void net_auth_init(struct net_auth *a, int (*lookup)(void *, const uint8_t *, uint8_t *),
		   void *arg);
const char *net_auth_reason_name(enum net_auth_reason r);

/* Steps. Each returns NET_AUTH_OK or a reason (> 0) and counts refusals;
 * out is NET_AUTH_FRAME_BYTES. */
int net_auth_initiator_hello(struct net_auth *a, struct net_auth_session *s,
			     const uint8_t id[NET_AUTH_ID_BYTES],
			     const uint8_t secret[NET_AUTH_SECRET_BYTES], uint8_t *out);
int net_auth_responder_hello(struct net_auth *a, struct net_auth_session *s, const uint8_t *in,
			     size_t len, uint8_t *out);
/* Fills `out` (its own proof) whenever the frame parsed, even when the
 * responder's MAC is wrong, so that the responder also learns of the wrong
 * secret; the return value is the verdict on the responder. */
int net_auth_initiator_challenge(struct net_auth *a, struct net_auth_session *s, const uint8_t *in,
				 size_t len, uint8_t *out, int *ret_send);
/* Fills a RESULT frame for the initiator in every case where the frame parsed. */
int net_auth_responder_response(struct net_auth *a, struct net_auth_session *s, const uint8_t *in,
				size_t len, uint8_t *out, int *ret_send);
int net_auth_initiator_result(struct net_auth *a, struct net_auth_session *s, const uint8_t *in,
			      size_t len);

/* Whole handshakes over a stream. The responder's ret_id gets the
 * communicator's id on success. */
int net_auth_run_initiator(struct net_auth *a, const struct net_auth_io *io,
			   const uint8_t id[NET_AUTH_ID_BYTES],
			   const uint8_t secret[NET_AUTH_SECRET_BYTES]);
int net_auth_run_responder(struct net_auth *a, const struct net_auth_io *io,
			   uint8_t ret_id[NET_AUTH_ID_BYTES]);

/* The same over a connected socket (blocking or not). */
int net_auth_socket_initiator(struct net_auth *a, int fd, const uint8_t id[NET_AUTH_ID_BYTES],
			      const uint8_t secret[NET_AUTH_SECRET_BYTES]);
int net_auth_socket_responder(struct net_auth *a, int fd, uint8_t ret_id[NET_AUTH_ID_BYTES]);

#endif
