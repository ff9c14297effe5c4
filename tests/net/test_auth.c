/* SPDX-License-Identifier: MIT */
/* Daemon-to-daemon authentication: includes auth.c to build odd frames. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "daemon/net/auth.c"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const uint8_t comm_id[16] = { 'c', 'o', 'm', 'm', 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 };
static const uint8_t secret[16] = { 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,
				    0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xf0, 0x01 };

/* The responder knows one communicator. */
static int lookup(void *arg, const uint8_t *id, uint8_t *ret_secret)
{
	if (memcmp(id, comm_id, sizeof(comm_id)))
		return -ENOENT;
	memcpy(ret_secret, arg ? arg : secret, 16);
	return 0;
}

/* A byte stream from memory: reads `in`, then EOF (or -ETIMEDOUT); writes
 * are kept in `out`. */
struct mem {
	const uint8_t *in;
	size_t len, pos;
	int end_timeout;
	uint8_t out[4 * NET_AUTH_FRAME_BYTES];
	size_t outlen;
};

static ssize_t mem_read(void *ctx, void *buf, size_t len, int timeout_ms)
{
	struct mem *m = ctx;
	size_t n = m->len - m->pos < len ? m->len - m->pos : len;

	if (!n)
		return m->end_timeout ? -ETIMEDOUT : 0;
	memcpy(buf, m->in + m->pos, n);
	m->pos += n;
	return n;
}

static ssize_t mem_write(void *ctx, const void *buf, size_t len, int timeout_ms)
{
	struct mem *m = ctx;
	size_t n = sizeof(m->out) - m->outlen < len ? sizeof(m->out) - m->outlen : len;

	if (!n)
		return -ENOSPC;
	memcpy(m->out + m->outlen, buf, n);
	m->outlen += n;
	return n;
}

static int responder_on(const uint8_t *in, size_t len, int end_timeout, struct net_auth *a)
{
	struct mem m = { .in = in, .len = len, .end_timeout = end_timeout };
	struct net_auth_io io = { &m, mem_read, mem_write };
	uint8_t id[16];

	return net_auth_run_responder(a, &io, id);
}

static uint64_t refusals(const struct net_auth *a)
{
	uint64_t n = 0;
	int i;

	for (i = 1; i < NET_AUTH_NREASONS; i++)
		n += a->refused[i];
	return n;
}

/* The four steps in memory, no stream at all. */
static void t_steps(void **state)
{
	struct net_auth ai, ar;
	struct net_auth_session si, sr;
	uint8_t f1[96], f2[96], f3[96], f4[96];
	int send;

	net_auth_init(&ai, NULL, NULL);
	net_auth_init(&ar, lookup, NULL);
	assert_int_equal(net_auth_initiator_hello(&ai, &si, comm_id, secret, f1), NET_AUTH_OK);
	assert_int_equal(net_auth_responder_hello(&ar, &sr, f1, 96, f2), NET_AUTH_OK);
	assert_int_equal(net_auth_initiator_challenge(&ai, &si, f2, 96, f3, &send), NET_AUTH_OK);
	assert_int_equal(send, 1);
	assert_int_equal(net_auth_responder_response(&ar, &sr, f3, 96, f4, &send), NET_AUTH_OK);
	assert_int_equal(send, 1);
	assert_int_equal(net_auth_initiator_result(&ai, &si, f4, 96), NET_AUTH_OK);
	assert_int_equal(ai.accepted, 1);
	assert_int_equal(ar.accepted, 1);
	assert_int_equal(refusals(&ai) + refusals(&ar), 0);
	/* Out of order: a second RESPONSE on a finished session. */
	assert_int_equal(net_auth_responder_response(&ar, &sr, f3, 96, f4, &send),
			 NET_AUTH_ERR_TYPE);
	assert_int_equal(ar.refused[NET_AUTH_ERR_TYPE], 1);
	/* The secret does not outlive the session. */
	uint8_t zero[16] = { 0 };
	assert_memory_equal(si.secret, zero, 16);
	assert_memory_equal(sr.secret, zero, 16);
}

struct side {
	struct net_auth a;
	int fd;
	const uint8_t *secret;
	int result;
	uint8_t id[16];
};

static void *responder_thread(void *arg)
{
	struct side *s = arg;

	s->result = net_auth_socket_responder(&s->a, s->fd, s->id);
	return NULL;
}

static void handshake(const uint8_t *init_secret, const uint8_t *resp_secret, struct side *i,
		      struct side *r)
{
	int sv[2];
	pthread_t th;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	net_auth_init(&i->a, NULL, NULL);
	net_auth_init(&r->a, lookup, (void *)resp_secret);
	i->fd = sv[0];
	r->fd = sv[1];
	assert_int_equal(pthread_create(&th, NULL, responder_thread, r), 0);
	i->result = net_auth_socket_initiator(&i->a, i->fd, comm_id, init_secret);
	/* An initiator that refused hangs up, so the responder's read ends. */
	close(sv[0]);
	assert_int_equal(pthread_join(th, NULL), 0);
	close(sv[1]);
}

static void t_right_secret(void **state)
{
	struct side i, r;

	handshake(secret, secret, &i, &r);
	assert_int_equal(i.result, NET_AUTH_OK);
	assert_int_equal(r.result, NET_AUTH_OK);
	assert_memory_equal(r.id, comm_id, 16);
	assert_int_equal(i.a.accepted, 1);
	assert_int_equal(r.a.accepted, 1);
	assert_int_equal(refusals(&i.a) + refusals(&r.a), 0);
}

/* Each side checks the other's proof: both refuse a wrong secret. */
static void t_wrong_secret(void **state)
{
	uint8_t other[16];
	struct side i, r;

	memcpy(other, secret, 16);
	other[15] ^= 1;
	handshake(other, secret, &i, &r);
	assert_int_equal(i.result, NET_AUTH_ERR_MAC);
	assert_int_equal(r.result, NET_AUTH_ERR_MAC);
	assert_int_equal(i.a.refused[NET_AUTH_ERR_MAC], 1);
	assert_int_equal(r.a.refused[NET_AUTH_ERR_MAC], 1);
	assert_int_equal(i.a.accepted + r.a.accepted, 0);
}

static void t_unknown_comm(void **state)
{
	struct net_auth ai, ar;
	struct net_auth_session si;
	uint8_t hello[96], id[16];

	memcpy(id, comm_id, 16);
	id[0] ^= 0xff;
	net_auth_init(&ai, NULL, NULL);
	net_auth_init(&ar, lookup, NULL);
	assert_int_equal(net_auth_initiator_hello(&ai, &si, id, secret, hello), NET_AUTH_OK);
	assert_int_equal(responder_on(hello, 96, 0, &ar), NET_AUTH_ERR_UNKNOWN_COMM);
	assert_int_equal(ar.refused[NET_AUTH_ERR_UNKNOWN_COMM], 1);
}

/* Truncated, garbage, oversized, wrong version and wrong type frames. */
static void t_bad_frames(void **state)
{
	struct net_auth ai, ar;
	struct net_auth_session si;
	uint8_t hello[96], bad[96], big[1200];
	uint64_t seed = 0x5eed0002;
	size_t i, cut;

	net_auth_init(&ai, NULL, NULL);
	net_auth_init(&ar, lookup, NULL);
	ar.timeout_ms = 200;
	assert_int_equal(net_auth_initiator_hello(&ai, &si, comm_id, secret, hello), NET_AUTH_OK);

	for (cut = 0; cut < 96; cut += 7)
		assert_int_equal(responder_on(hello, cut, 0, &ar), NET_AUTH_ERR_TRUNCATED);
	assert_int_equal(ar.refused[NET_AUTH_ERR_TRUNCATED], 14);

	for (i = 0; i < sizeof(bad); i++) {
		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		bad[i] = seed >> 56;
	}
	assert_int_equal(responder_on(bad, sizeof(bad), 0, &ar), NET_AUTH_ERR_MAGIC);
	assert_int_equal(ar.refused[NET_AUTH_ERR_MAGIC], 1);

	/* A length field past the fixed body: refused after the header. */
	memset(big, 0x41, sizeof(big));
	memcpy(big, hello, 96);
	put_le32(big + 8, sizeof(big) - NET_AUTH_HDR_BYTES);
	assert_int_equal(responder_on(big, sizeof(big), 0, &ar), NET_AUTH_ERR_LENGTH);
	put_le32(big + 8, 0xffffffffu);
	assert_int_equal(responder_on(big, sizeof(big), 0, &ar), NET_AUTH_ERR_LENGTH);
	assert_int_equal(ar.refused[NET_AUTH_ERR_LENGTH], 2);
	/* The step functions refuse oversized and short buffers too. */
	struct net_auth_session sr;
	uint8_t out[96];
	assert_int_equal(net_auth_responder_hello(&ar, &sr, big, 97, out), NET_AUTH_ERR_LENGTH);
	assert_int_equal(net_auth_responder_hello(&ar, &sr, hello, 95, out),
			 NET_AUTH_ERR_TRUNCATED);
	assert_int_equal(net_auth_responder_hello(&ar, &sr, hello, 3, out), NET_AUTH_ERR_TRUNCATED);

	memcpy(bad, hello, 96);
	bad[4] = NET_AUTH_VERSION + 1;
	assert_int_equal(responder_on(bad, 96, 0, &ar), NET_AUTH_ERR_VERSION);
	memcpy(bad, hello, 96);
	bad[6] = NET_AUTH_RESPONSE;
	assert_int_equal(responder_on(bad, 96, 0, &ar), NET_AUTH_ERR_TYPE);

	/* Nothing arrives: the deadline refuses. */
	assert_int_equal(responder_on(hello, 40, 1, &ar), NET_AUTH_ERR_TIMEOUT);
	assert_int_equal(ar.refused[NET_AUTH_ERR_TIMEOUT], 1);
	assert_int_equal(ar.accepted, 0);
	/* Names for the metrics. */
	assert_string_equal(net_auth_reason_name(NET_AUTH_ERR_REPLAY), "replay");
	assert_string_equal(net_auth_reason_name(NET_AUTH_NREASONS), "?");
}

/* A recorded handshake played again is refused; after the cache forgot its
 * nonce, the recorded proof still fails against a fresh challenge. */
static void t_replay(void **state)
{
	struct net_auth ai, ar;
	struct net_auth_session si, sr;
	uint8_t rec[2 * 96], f2[96], f4[96];
	int send, i;

	net_auth_init(&ai, NULL, NULL);
	net_auth_init(&ar, lookup, NULL);
	assert_int_equal(net_auth_initiator_hello(&ai, &si, comm_id, secret, rec), NET_AUTH_OK);
	assert_int_equal(net_auth_responder_hello(&ar, &sr, rec, 96, f2), NET_AUTH_OK);
	assert_int_equal(net_auth_initiator_challenge(&ai, &si, f2, 96, rec + 96, &send),
			 NET_AUTH_OK);
	assert_int_equal(net_auth_responder_response(&ar, &sr, rec + 96, 96, f4, &send),
			 NET_AUTH_OK);
	assert_int_equal(ar.accepted, 1);

	assert_int_equal(responder_on(rec, sizeof(rec), 0, &ar), NET_AUTH_ERR_REPLAY);
	assert_int_equal(ar.refused[NET_AUTH_ERR_REPLAY], 1);

	/* The initiator refuses a challenge it has seen before. */
	struct net_auth_session s2;
	uint8_t h2[96], r2[96];
	assert_int_equal(net_auth_initiator_hello(&ai, &s2, comm_id, secret, h2), NET_AUTH_OK);
	assert_int_equal(net_auth_initiator_challenge(&ai, &s2, f2, 96, r2, &send),
			 NET_AUTH_ERR_REPLAY);
	assert_int_equal(ai.refused[NET_AUTH_ERR_REPLAY], 1);

	/* Push the recorded nonce out of the bounded cache. */
	for (i = 0; i < NET_AUTH_REPLAY_CACHE; i++) {
		struct net_auth_session x, y;
		uint8_t h[96], c[96];

		assert_int_equal(net_auth_initiator_hello(&ai, &x, comm_id, secret, h),
				 NET_AUTH_OK);
		assert_int_equal(net_auth_responder_hello(&ar, &y, h, 96, c), NET_AUTH_OK);
	}
	assert_int_equal(ar.seen_n, NET_AUTH_REPLAY_CACHE);
	assert_int_equal(responder_on(rec, sizeof(rec), 0, &ar), NET_AUTH_ERR_MAC);
	assert_int_equal(ar.refused[NET_AUTH_ERR_MAC], 1);
	assert_int_equal(ar.accepted, 1);
}

/* The responder's "no" reaches an initiator whose own check passed. */
static void t_refused_result(void **state)
{
	struct net_auth ai;
	struct net_auth_session si;
	uint8_t f[96];

	net_auth_init(&ai, NULL, NULL);
	assert_int_equal(net_auth_initiator_hello(&ai, &si, comm_id, secret, f), NET_AUTH_OK);
	si.stage = ST_RESPONSE_SENT;
	frame_header(f, NET_AUTH_RESULT, NET_AUTH_ERR_MAC);
	assert_int_equal(net_auth_initiator_result(&ai, &si, f, 96), NET_AUTH_ERR_REFUSED);
	assert_int_equal(ai.refused[NET_AUTH_ERR_REFUSED], 1);
}

/* A silent peer on a real socket: refused by the deadline, not hung. */
static void t_socket_timeout(void **state)
{
	struct net_auth ar;
	uint8_t id[16];
	int sv[2];
	int64_t t0;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	net_auth_init(&ar, lookup, NULL);
	ar.timeout_ms = 150;
	t0 = now_ms();
	assert_int_equal(net_auth_socket_responder(&ar, sv[1], id), NET_AUTH_ERR_TIMEOUT);
	assert_true(now_ms() - t0 >= 140);
	assert_true(now_ms() - t0 < 5000);
	assert_int_equal(ar.refused[NET_AUTH_ERR_TIMEOUT], 1);
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_steps),          cmocka_unit_test(t_right_secret),
		cmocka_unit_test(t_wrong_secret),   cmocka_unit_test(t_unknown_comm),
		cmocka_unit_test(t_bad_frames),     cmocka_unit_test(t_replay),
		cmocka_unit_test(t_refused_result), cmocka_unit_test(t_socket_timeout),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
