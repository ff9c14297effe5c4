/* SPDX-License-Identifier: MIT */
/* The built-in tcp transport over loopback; includes tcp.c for its statics. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "daemon/net/tcp.c"
#include "tcp_cases.h"

static int use_lo(int nstreams)
{
	struct net_tcp_opts o = { .ifname = "lo", .nstreams = nstreams };

	if (net_tcp_configure(&o) < 0 || net_tcp.init(test_logger) != ncclSuccess)
		return -1;
	net = &net_tcp;
	return 0;
}

static int setup(void **state)
{
	return use_lo(NET_TCP_DEFAULT_STREAMS);
}

/* Stream shares tile the message exactly, for any size and stream count. */
static void t_share(void **state)
{
	static const size_t sizes[] = { 0, 1, MIN_CHUNK - 1, MIN_CHUNK, MIN_CHUNK + 1, 1 << 20,
					(1 << 20) + 3, 64 << 20, 0x7fffffff };
	size_t i, b, e, at;
	int n, s;

	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		for (n = 1; n <= NET_TCP_MAX_STREAMS; n++) {
			at = 0;
			for (s = 0; s < n; s++) {
				share(sizes[i], n, s, &b, &e);
				assert_true(b == at || b == sizes[i]);
				assert_true(e >= b && e <= sizes[i]);
				if (e > b)
					assert_int_equal(b, at);
				at = e > at ? e : at;
			}
			assert_int_equal(at, sizes[i]);
		}
	}
	/* Small messages take one stream. */
	share(1000, 4, 0, &b, &e);
	assert_int_equal(e - b, 1000);
	share(1000, 4, 1, &b, &e);
	assert_int_equal(e - b, 0);
}

static void t_options(void **state)
{
	struct net_tcp_opts o = { .ifname = "lo", .nstreams = 0 };

	assert_int_equal(net_tcp_configure(&o), -EINVAL);
	o.nstreams = NET_TCP_MAX_STREAMS + 1;
	assert_int_equal(net_tcp_configure(&o), -EINVAL);
	o.nstreams = 2;
	o.ifname = "an-interface-name-too-long-for-linux";
	assert_int_equal(net_tcp_configure(&o), -EINVAL);
	/* An interface that does not exist fails init, like NCCL_SOCKET_IFNAME. */
	o.ifname = "nosuchif0";
	assert_int_equal(net_tcp_configure(&o), 0);
	assert_int_equal(net_tcp.init(NULL), ncclInvalidArgument);
	/* The default is an up interface with an address; lo only when no other. */
	o.ifname = NULL;
	assert_int_equal(net_tcp_configure(&o), 0);
	assert_int_equal(net_tcp.init(NULL), ncclSuccess);
	assert_true(g.ifname[0] != 0);
	assert_int_equal(use_lo(NET_TCP_DEFAULT_STREAMS), 0);
}

/* 1, 3 and the most streams move the same bytes. */
static void t_streams(void **state)
{
	static const int counts[] = { 1, 3, NET_TCP_MAX_STREAMS };
	size_t i;

	for (i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
		struct pair p;

		assert_int_equal(use_lo(counts[i]), 0);
		pair_open(&p);
		send_one(&p, (4 << 20) + 17, 1);
		send_one(&p, 3, 2);
		pair_close(&p);
	}
	assert_int_equal(use_lo(NET_TCP_DEFAULT_STREAMS), 0);
}

/* A handle that is not a tcp handle is refused by connect. */
static void t_bad_handle(void **state)
{
	char handle[NCCL_NET_HANDLE_MAXSIZE];
	void *scomm = (void *)1;

	memset(handle, 0x5a, sizeof(handle));
	assert_int_equal(net->connect(0, handle, &scomm, NULL), ncclInvalidArgument);
	assert_null(scomm);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_share),
		cmocka_unit_test(t_options),
		cmocka_unit_test(t_streams),
		cmocka_unit_test(t_bad_handle),
		TCP_CASES,
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
