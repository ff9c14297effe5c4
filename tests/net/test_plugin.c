/* SPDX-License-Identifier: MIT */
/*
 * The loader, and the tcp transport's cases again through the plugin path:
 * libnccl-net-collc.so is dlopen'ed and its ncclNetPlugin_v8 table driven,
 * which proves the table's ABI as an NCCL plugin sees it. CMake passes the
 * plugin's path (COLLC_NET_PLUGIN_PATH) and puts its folder on
 * LD_LIBRARY_PATH so that the bare name "collc" resolves too. With
 * --helpers the plugin is configured through COLLC_NET_HELPERS=1 and the
 * same cases run with a helper thread per connection.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <dlfcn.h>

#include "tcp_cases.h"

static struct net_transport loaded;
static const char *helpers = "0";

static int setup(void **state)
{
	setenv("COLLC_NET_IFNAME", "lo", 1);
	setenv("COLLC_NET_STREAMS", "3", 1);
	setenv("COLLC_NET_HELPERS", helpers, 1);
	if (net_load("plugin:" COLLC_NET_PLUGIN_PATH, NULL, test_logger, &loaded) < 0)
		return -1;
	net = loaded.net;
	return 0;
}

static int teardown(void **state)
{
	net_unload(&loaded);
	return 0;
}

static void t_plugin_table(void **state)
{
	assert_non_null(loaded.dl);
	assert_string_equal(net->name, "collc");
	assert_string_equal(loaded.what, "plugin:" COLLC_NET_PLUGIN_PATH);
	assert_int_equal(loaded.ndev, 1);
	/* The table is not the built-in one: the code came through dlopen. */
	assert_ptr_not_equal(net, &net_tcp);
	assert_ptr_equal(net, dlsym(loaded.dl, "ncclNetPlugin_v8"));
	/* Only the plugin symbol is exported. */
	assert_null(dlsym(loaded.dl, "net_tcp"));
	assert_null(dlsym(loaded.dl, "net_tcp_configure"));
}

static void t_by_name(void **state)
{
	struct net_transport t;

	assert_int_equal(net_load("plugin:collc", NULL, NULL, &t), 0);
	assert_non_null(t.dl);
	assert_string_equal(t.net->name, "collc");
	net_unload(&t);
	assert_int_equal(net_load("collc", NULL, NULL, &t), 0);
	assert_string_equal(t.what, "plugin:collc");
	net_unload(&t);
	/* auto takes a named plugin first. */
	assert_int_equal(net_load("auto", "collc", NULL, &t), 0);
	assert_string_equal(t.what, "plugin:collc");
	net_unload(&t);
}

static void t_missing(void **state)
{
	struct net_transport t = { .ndev = 77 };

	assert_int_equal(net_load("plugin:no-such-plugin", NULL, NULL, &t), -ENOENT);
	assert_int_equal(t.ndev, 77); /* untouched on failure */
	/* A library without ncclNetPlugin_v8 is refused. */
	assert_int_equal(net_load("plugin:" COLLC_NET_NOSYM_PATH, NULL, NULL, &t), -EPROTO);
	assert_int_equal(net_load("plugin:", NULL, NULL, &t), -EINVAL);
	assert_int_equal(t.ndev, 77);
}

/* auto: a named plugin, else ib where an active port exists, else tcp; an
 * unusable plugin falls back. Machines without RDMA (CI) take tcp. */
static void t_auto(void **state)
{
	struct net_transport t;
	struct net_tcp_opts o = { .ifname = "lo", .nstreams = 2 };
	int nib = -1;

	assert_int_equal(net_ib.init(NULL), ncclSuccess);
	assert_int_equal(net_ib.devices(&nib), ncclSuccess);
	assert_int_equal(net_tcp_configure(&o), 0);
	assert_int_equal(net_load("auto", NULL, NULL, &t), 0);
	assert_string_equal(t.what, nib > 0 ? "ib" : "tcp");
	assert_null(t.dl);
	net_unload(&t);
	assert_int_equal(net_load(NULL, "no-such-plugin", NULL, &t), 0);
	assert_string_equal(t.what, nib > 0 ? "ib" : "tcp");
	net_unload(&t);
	assert_int_equal(net_load("tcp", NULL, NULL, &t), 0);
	assert_string_equal(t.what, "tcp");
	assert_ptr_equal(t.net, &net_tcp);
	net_unload(&t);
	if (nib == 0)
		assert_int_equal(net_load("ib", NULL, NULL, &t), -ENODEV);
}

/* The tcp transport's helper threads of this process now (by their name). */
static int threads(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d))) {
		char path[300], name[32] = "";
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue; /* the thread ended meanwhile */
		if (fgets(name, sizeof(name), f))
			n += strcmp(name, "collc-tcp-help\n") == 0;
		fclose(f);
	}
	closedir(d);
	return n;
}

/*
 * COLLC_NET_HELPERS: a helper thread per connection (one each for the send
 * and the receive side) or none; anything but 0 or 1 fails the plugin's
 * init, as a bad COLLC_NET_STREAMS does. The group's setting is restored.
 */
static void t_plugin_helpers(void **state)
{
	static const char *const bad[] = { "2", "-1", "yes", "1x", "" };
	struct net_transport t;

	for (int on = 0; on <= 1; on++) {
		struct pair p;
		int before;

		setenv("COLLC_NET_HELPERS", on ? "1" : "0", 1);
		assert_int_equal(net_load("plugin:" COLLC_NET_PLUGIN_PATH, NULL, NULL, &t), 0);
		before = threads();
		pair_open(&p);
		assert_int_equal(threads(), before + 2 * on);
		send_one(&p, (1 << 20) + 5, 1);
		send_one(&p, 7, 2);
		pair_close(&p);
		assert_int_equal(threads(), before);
		net_unload(&t);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		setenv("COLLC_NET_HELPERS", bad[i], 1);
		/* Unset and empty take the default; the others are refused. */
		if (*bad[i])
			assert_int_equal(net_load("plugin:" COLLC_NET_PLUGIN_PATH, NULL, NULL, &t),
					 -EIO);
	}
	setenv("COLLC_NET_STREAMS", "99", 1);
	assert_int_equal(net_load("plugin:" COLLC_NET_PLUGIN_PATH, NULL, NULL, &t), -EIO);
	setenv("COLLC_NET_STREAMS", "3", 1);
	setenv("COLLC_NET_HELPERS", helpers, 1);
	assert_int_equal(net_load("plugin:" COLLC_NET_PLUGIN_PATH, NULL, NULL, &t), 0);
	net_unload(&t);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_plugin_table),   cmocka_unit_test(t_by_name),
		cmocka_unit_test(t_missing),        cmocka_unit_test(t_auto),
		cmocka_unit_test(t_plugin_helpers), TCP_CASES,
	};

	if (argc > 1 && !strcmp(argv[1], "--helpers"))
		helpers = "1";
	return cmocka_run_group_tests(tests, setup, teardown);
}
