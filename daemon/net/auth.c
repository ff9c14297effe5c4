/* SPDX-License-Identifier: MIT */
/* Daemon-to-daemon challenge-response; the protocol is described in auth.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "auth.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

/* Body layout, offsets from the start of the frame. */
#define OFF_ID       16
#define OFF_NONCE    32
#define OFF_MAC      48
#define OFF_RESERVED 80
_Static_assert(OFF_MAC + NET_AUTH_MAC_BYTES + 16 == NET_AUTH_FRAME_BYTES, "frame layout");

enum { ST_NONE, ST_HELLO_SENT, ST_CHALLENGE_SENT, ST_RESPONSE_SENT, ST_DONE };

static const char *const reason_names[NET_AUTH_NREASONS] = {
	[NET_AUTH_OK] = "ok",
	[NET_AUTH_ERR_TRUNCATED] = "truncated",
	[NET_AUTH_ERR_MAGIC] = "bad_magic",
	[NET_AUTH_ERR_VERSION] = "bad_version",
	[NET_AUTH_ERR_TYPE] = "bad_type",
	[NET_AUTH_ERR_LENGTH] = "bad_length",
	[NET_AUTH_ERR_UNKNOWN_COMM] = "unknown_comm",
	[NET_AUTH_ERR_MAC] = "bad_mac",
	[NET_AUTH_ERR_REPLAY] = "replay",
	[NET_AUTH_ERR_TIMEOUT] = "timeout",
	[NET_AUTH_ERR_IO] = "io",
	[NET_AUTH_ERR_REFUSED] = "refused_by_peer",
	[NET_AUTH_ERR_INTERNAL] = "internal",
};

const char *net_auth_reason_name(enum net_auth_reason r)
{
	return (unsigned)r < NET_AUTH_NREASONS ? reason_names[r] : "?";
}

void net_auth_init(struct net_auth *a, int (*lookup)(void *, const uint8_t *, uint8_t *), void *arg)
{
	memset(a, 0, sizeof(*a));
	a->lookup = lookup;
	a->lookup_arg = arg;
	a->timeout_ms = NET_AUTH_DEFAULT_TIMEOUT_MS;
}

static void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = v;
	p[1] = v >> 8;
	p[2] = v >> 16;
	p[3] = v >> 24;
}

static uint32_t get_le32(const uint8_t *p)
{
	return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24;
}

static void frame_header(uint8_t *f, int type, uint32_t status)
{
	memset(f, 0, NET_AUTH_FRAME_BYTES);
	put_le32(f, NET_AUTH_MAGIC);
	f[4] = NET_AUTH_VERSION;
	f[5] = 0;
	f[6] = type;
	f[7] = 0;
	put_le32(f + 8, NET_AUTH_BODY_BYTES);
	put_le32(f + 12, status);
}

/* Checks the 16-byte header alone, so a reader refuses before the body. */
static int header_check(const uint8_t *f, int type)
{
	if (get_le32(f) != NET_AUTH_MAGIC)
		return NET_AUTH_ERR_MAGIC;
	if ((f[4] | f[5] << 8) != NET_AUTH_VERSION)
		return NET_AUTH_ERR_VERSION;
	if (get_le32(f + 8) != NET_AUTH_BODY_BYTES)
		return NET_AUTH_ERR_LENGTH;
	if ((f[6] | f[7] << 8) != type)
		return NET_AUTH_ERR_TYPE;
	return NET_AUTH_OK;
}

static int frame_check(const uint8_t *f, size_t len, int type)
{
	if (len < NET_AUTH_HDR_BYTES)
		return NET_AUTH_ERR_TRUNCATED;
	int r = header_check(f, type);
	if (r != NET_AUTH_OK)
		return r;
	if (len < NET_AUTH_FRAME_BYTES)
		return NET_AUTH_ERR_TRUNCATED;
	if (len > NET_AUTH_FRAME_BYTES)
		return NET_AUTH_ERR_LENGTH;
	return NET_AUTH_OK;
}

static int refuse(struct net_auth *a, struct net_auth_session *s, int reason)
{
	a->refused[reason]++;
	if (s) {
		OPENSSL_cleanse(s->secret, sizeof(s->secret));
		s->stage = ST_DONE;
	}
	return reason;
}

/* The frame a session at `stage` on the side `initiator` takes next; the
 * session is refused on anything else. */
static int next_frame(struct net_auth *a, struct net_auth_session *s, int stage, int initiator,
		      const uint8_t *in, size_t len, int type)
{
	int r;

	if (s->stage != stage || s->initiator != initiator)
		return refuse(a, s, NET_AUTH_ERR_TYPE);
	r = frame_check(in, len, type);
	return r == NET_AUTH_OK ? NET_AUTH_OK : refuse(a, s, r);
}

/* Both sides end a good handshake alike: the secret goes, the session is done. */
static int accept_session(struct net_auth *a, struct net_auth_session *s)
{
	OPENSSL_cleanse(s->secret, sizeof(s->secret));
	s->stage = ST_DONE;
	a->accepted++;
	return NET_AUTH_OK;
}

static int nonce_seen(const struct net_auth *a, const uint8_t *nonce)
{
	uint32_t i;

	for (i = 0; i < a->seen_n; i++)
		if (!memcmp(a->seen[i], nonce, NET_AUTH_NONCE_BYTES))
			return 1;
	return 0;
}

/* Oldest entries are overwritten: the cache is bounded, and a replay older
 * than NET_AUTH_REPLAY_CACHE handshakes still fails its MAC against the
 * fresh nonce of this side. */
static void nonce_remember(struct net_auth *a, const uint8_t *nonce)
{
	memcpy(a->seen[a->seen_next], nonce, NET_AUTH_NONCE_BYTES);
	a->seen_next = (a->seen_next + 1) % NET_AUTH_REPLAY_CACHE;
	if (a->seen_n < NET_AUTH_REPLAY_CACHE)
		a->seen_n++;
}

/* HMAC-SHA256(secret, role || nonce_i || nonce_r || id). */
static int proof(const struct net_auth_session *s, char role, uint8_t mac[NET_AUTH_MAC_BYTES])
{
	uint8_t msg[1 + 2 * NET_AUTH_NONCE_BYTES + NET_AUTH_ID_BYTES];
	unsigned int mlen = 0;

	msg[0] = (uint8_t)role;
	memcpy(msg + 1, s->nonce_i, NET_AUTH_NONCE_BYTES);
	memcpy(msg + 1 + NET_AUTH_NONCE_BYTES, s->nonce_r, NET_AUTH_NONCE_BYTES);
	memcpy(msg + 1 + 2 * NET_AUTH_NONCE_BYTES, s->id, NET_AUTH_ID_BYTES);
	if (!HMAC(EVP_sha256(), s->secret, NET_AUTH_SECRET_BYTES, msg, sizeof(msg), mac, &mlen) ||
	    mlen != NET_AUTH_MAC_BYTES)
		return -1;
	return 0;
}

int net_auth_initiator_hello(struct net_auth *a, struct net_auth_session *s,
			     const uint8_t id[NET_AUTH_ID_BYTES],
			     const uint8_t secret[NET_AUTH_SECRET_BYTES], uint8_t *out)
{
	memset(s, 0, sizeof(*s));
	s->initiator = 1;
	memcpy(s->id, id, NET_AUTH_ID_BYTES);
	memcpy(s->secret, secret, NET_AUTH_SECRET_BYTES);
	if (RAND_bytes(s->nonce_i, NET_AUTH_NONCE_BYTES) != 1)
		return refuse(a, s, NET_AUTH_ERR_INTERNAL);
	frame_header(out, NET_AUTH_HELLO, 0);
	memcpy(out + OFF_ID, s->id, NET_AUTH_ID_BYTES);
	memcpy(out + OFF_NONCE, s->nonce_i, NET_AUTH_NONCE_BYTES);
	s->stage = ST_HELLO_SENT;
	return NET_AUTH_OK;
}

int net_auth_responder_hello(struct net_auth *a, struct net_auth_session *s, const uint8_t *in,
			     size_t len, uint8_t *out)
{
	uint8_t mac[NET_AUTH_MAC_BYTES];
	int r;

	memset(s, 0, sizeof(*s));
	r = frame_check(in, len, NET_AUTH_HELLO);
	if (r != NET_AUTH_OK)
		return refuse(a, s, r);
	memcpy(s->id, in + OFF_ID, NET_AUTH_ID_BYTES);
	memcpy(s->nonce_i, in + OFF_NONCE, NET_AUTH_NONCE_BYTES);
	if (!a->lookup || a->lookup(a->lookup_arg, s->id, s->secret) < 0)
		return refuse(a, s, NET_AUTH_ERR_UNKNOWN_COMM);
	if (nonce_seen(a, s->nonce_i))
		return refuse(a, s, NET_AUTH_ERR_REPLAY);
	nonce_remember(a, s->nonce_i);
	if (RAND_bytes(s->nonce_r, NET_AUTH_NONCE_BYTES) != 1 || proof(s, 'R', mac) < 0)
		return refuse(a, s, NET_AUTH_ERR_INTERNAL);
	frame_header(out, NET_AUTH_CHALLENGE, 0);
	memcpy(out + OFF_ID, s->id, NET_AUTH_ID_BYTES);
	memcpy(out + OFF_NONCE, s->nonce_r, NET_AUTH_NONCE_BYTES);
	memcpy(out + OFF_MAC, mac, NET_AUTH_MAC_BYTES);
	s->stage = ST_CHALLENGE_SENT;
	return NET_AUTH_OK;
}

int net_auth_initiator_challenge(struct net_auth *a, struct net_auth_session *s, const uint8_t *in,
				 size_t len, uint8_t *out, int *ret_send)
{
	uint8_t mine[NET_AUTH_MAC_BYTES], theirs[NET_AUTH_MAC_BYTES];
	int r;

	*ret_send = 0;
	r = next_frame(a, s, ST_HELLO_SENT, 1, in, len, NET_AUTH_CHALLENGE);
	if (r != NET_AUTH_OK)
		return r;
	if (CRYPTO_memcmp(in + OFF_ID, s->id, NET_AUTH_ID_BYTES))
		return refuse(a, s, NET_AUTH_ERR_UNKNOWN_COMM);
	memcpy(s->nonce_r, in + OFF_NONCE, NET_AUTH_NONCE_BYTES);
	if (nonce_seen(a, s->nonce_r))
		return refuse(a, s, NET_AUTH_ERR_REPLAY);
	nonce_remember(a, s->nonce_r);
	if (proof(s, 'I', mine) < 0 || proof(s, 'R', theirs) < 0)
		return refuse(a, s, NET_AUTH_ERR_INTERNAL);
	frame_header(out, NET_AUTH_RESPONSE, 0);
	memcpy(out + OFF_ID, s->id, NET_AUTH_ID_BYTES);
	memcpy(out + OFF_MAC, mine, NET_AUTH_MAC_BYTES);
	*ret_send = 1;
	if (CRYPTO_memcmp(theirs, in + OFF_MAC, NET_AUTH_MAC_BYTES))
		return refuse(a, s, NET_AUTH_ERR_MAC);
	s->stage = ST_RESPONSE_SENT;
	return NET_AUTH_OK;
}

int net_auth_responder_response(struct net_auth *a, struct net_auth_session *s, const uint8_t *in,
				size_t len, uint8_t *out, int *ret_send)
{
	uint8_t expect[NET_AUTH_MAC_BYTES];
	int r;

	*ret_send = 0;
	r = next_frame(a, s, ST_CHALLENGE_SENT, 0, in, len, NET_AUTH_RESPONSE);
	if (r != NET_AUTH_OK)
		return r;
	if (proof(s, 'I', expect) < 0)
		return refuse(a, s, NET_AUTH_ERR_INTERNAL);
	if (CRYPTO_memcmp(in + OFF_ID, s->id, NET_AUTH_ID_BYTES) ||
	    CRYPTO_memcmp(expect, in + OFF_MAC, NET_AUTH_MAC_BYTES)) {
		frame_header(out, NET_AUTH_RESULT, NET_AUTH_ERR_MAC);
		*ret_send = 1;
		return refuse(a, s, NET_AUTH_ERR_MAC);
	}
	frame_header(out, NET_AUTH_RESULT, NET_AUTH_OK);
	memcpy(out + OFF_ID, s->id, NET_AUTH_ID_BYTES);
	*ret_send = 1;
	return accept_session(a, s);
}

int net_auth_initiator_result(struct net_auth *a, struct net_auth_session *s, const uint8_t *in,
			      size_t len)
{
	int r;

	r = next_frame(a, s, ST_RESPONSE_SENT, 1, in, len, NET_AUTH_RESULT);
	if (r != NET_AUTH_OK)
		return r;
	if (get_le32(in + 12) != NET_AUTH_OK)
		return refuse(a, s, NET_AUTH_ERR_REFUSED);
	return accept_session(a, s);
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int left_ms(int64_t deadline)
{
	int64_t l = deadline - now_ms();

	return l > 0 ? (int)l : 0;
}

static int io_error(ssize_t n)
{
	if (n == -ETIMEDOUT || n == -EAGAIN)
		return NET_AUTH_ERR_TIMEOUT;
	return n == 0 ? NET_AUTH_ERR_TRUNCATED : NET_AUTH_ERR_IO;
}

static int read_exact(const struct net_auth_io *io, uint8_t *buf, size_t len, int64_t deadline)
{
	size_t got = 0;
	ssize_t n;

	while (got < len) {
		n = io->read(io->ctx, buf + got, len - got, left_ms(deadline));
		if (n <= 0)
			return io_error(n);
		got += n;
	}
	return NET_AUTH_OK;
}

/* Header first: a wrong magic, type or length refuses without reading on. */
static int read_frame(const struct net_auth_io *io, uint8_t *f, int type, int64_t deadline)
{
	int r = read_exact(io, f, NET_AUTH_HDR_BYTES, deadline);

	if (r != NET_AUTH_OK)
		return r;
	r = header_check(f, type);
	if (r != NET_AUTH_OK)
		return r;
	return read_exact(io, f + NET_AUTH_HDR_BYTES, NET_AUTH_BODY_BYTES, deadline);
}

static int write_frame(const struct net_auth_io *io, const uint8_t *f, int64_t deadline)
{
	size_t put = 0;
	ssize_t n;

	while (put < NET_AUTH_FRAME_BYTES) {
		n = io->write(io->ctx, f + put, NET_AUTH_FRAME_BYTES - put, left_ms(deadline));
		if (n <= 0)
			return n == 0 ? NET_AUTH_ERR_IO : io_error(n);
		put += n;
	}
	return NET_AUTH_OK;
}

int net_auth_run_initiator(struct net_auth *a, const struct net_auth_io *io,
			   const uint8_t id[NET_AUTH_ID_BYTES],
			   const uint8_t secret[NET_AUTH_SECRET_BYTES])
{
	int64_t deadline = now_ms() + a->timeout_ms;
	struct net_auth_session s;
	uint8_t in[NET_AUTH_FRAME_BYTES], out[NET_AUTH_FRAME_BYTES];
	int r, send, w;

	r = net_auth_initiator_hello(a, &s, id, secret, out);
	if (r != NET_AUTH_OK)
		return r;
	if ((r = write_frame(io, out, deadline)) != NET_AUTH_OK ||
	    (r = read_frame(io, in, NET_AUTH_CHALLENGE, deadline)) != NET_AUTH_OK)
		return refuse(a, &s, r);
	r = net_auth_initiator_challenge(a, &s, in, sizeof(in), out, &send);
	if (send) {
		w = write_frame(io, out, deadline);
		if (r == NET_AUTH_OK && w != NET_AUTH_OK)
			return refuse(a, &s, w);
	}
	if (r != NET_AUTH_OK)
		return r;
	if ((r = read_frame(io, in, NET_AUTH_RESULT, deadline)) != NET_AUTH_OK)
		return refuse(a, &s, r);
	return net_auth_initiator_result(a, &s, in, sizeof(in));
}

int net_auth_run_responder(struct net_auth *a, const struct net_auth_io *io,
			   uint8_t ret_id[NET_AUTH_ID_BYTES])
{
	int64_t deadline = now_ms() + a->timeout_ms;
	struct net_auth_session s;
	uint8_t in[NET_AUTH_FRAME_BYTES], out[NET_AUTH_FRAME_BYTES];
	int r, send;

	memset(&s, 0, sizeof(s));
	if ((r = read_frame(io, in, NET_AUTH_HELLO, deadline)) != NET_AUTH_OK)
		return refuse(a, &s, r);
	r = net_auth_responder_hello(a, &s, in, sizeof(in), out);
	if (r != NET_AUTH_OK)
		return r;
	if ((r = write_frame(io, out, deadline)) != NET_AUTH_OK ||
	    (r = read_frame(io, in, NET_AUTH_RESPONSE, deadline)) != NET_AUTH_OK)
		return refuse(a, &s, r);
	r = net_auth_responder_response(a, &s, in, sizeof(in), out, &send);
	/* The verdict stands whether or not the initiator hears it. */
	if (send)
		write_frame(io, out, deadline);
	if (r == NET_AUTH_OK)
		memcpy(ret_id, s.id, NET_AUTH_ID_BYTES);
	return r;
}

/* Some bytes out of (out) or into fd, waiting at most timeout_ms for the
 * socket to be ready. */
static ssize_t sock_io(int fd, void *buf, size_t len, int timeout_ms, int out)
{
	struct pollfd p = { .fd = fd, .events = out ? POLLOUT : POLLIN };
	ssize_t n;

	for (;;) {
		n = out ? send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL)
			: recv(fd, buf, len, MSG_DONTWAIT);
		if (n >= 0)
			return n;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		n = poll(&p, 1, timeout_ms);
		if (n == 0)
			return -ETIMEDOUT;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

static ssize_t sock_read(void *ctx, void *buf, size_t len, int timeout_ms)
{
	return sock_io(*(int *)ctx, buf, len, timeout_ms, 0);
}

static ssize_t sock_write(void *ctx, const void *buf, size_t len, int timeout_ms)
{
	return sock_io(*(int *)ctx, (void *)buf, len, timeout_ms, 1); /* send() only reads it */
}

int net_auth_socket_initiator(struct net_auth *a, int fd, const uint8_t id[NET_AUTH_ID_BYTES],
			      const uint8_t secret[NET_AUTH_SECRET_BYTES])
{
	struct net_auth_io io = { .ctx = &fd, .read = sock_read, .write = sock_write };

	return net_auth_run_initiator(a, &io, id, secret);
}

int net_auth_socket_responder(struct net_auth *a, int fd, uint8_t ret_id[NET_AUTH_ID_BYTES])
{
	struct net_auth_io io = { .ctx = &fd, .read = sock_read, .write = sock_write };

	return net_auth_run_responder(a, &io, ret_id);
}
