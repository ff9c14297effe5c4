/* SPDX-License-Identifier: MIT */
/*
 * collcd: options, module init/fini in dependency order, signals on the loop.
 *
 *   config -> executor -> scheduler -> control (sockets) -> READY
 * and the reverse on the way out.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <unistd.h>

#include <urcu-qsbr.h>
#include <uv.h>

#include "daemon/config.h"
#include "daemon/control.h"
#include "daemon/exec.h"
#include "daemon/cpu/cpu.h"
#include "daemon/cuda/cuda.h"
#include "daemon/log.h"
#include "daemon/notify.h"
#include "daemon/sched.h"
#include "proto/work.h"

#define DEFAULT_SOCKET "/run/collcd/collcd.sock"

struct options {
	const char *socket_path;
	const char *admin_socket_path;
	const char *backend;
	const char *config_path;
	uint32_t devices;
	uint32_t max_channels;
	int foreground;
	int require_mps;
	const char *sets[64];
	int nsets;
};

static uv_loop_t loop;
static uv_signal_t sig_int, sig_term, sig_hup, sig_usr2;
static int stalled;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: collcd [--socket PATH] [--admin-socket PATH] [--backend auto|cpu|cuda]\n"
		"              [--devices N] [--max-channels N] [--set KEY=VALUE]...\n"
		"              [--config FILE] [--foreground] [--log-level LEVEL] [--require-mps]\n"
		"\n"
		"Keys: channels, proto (auto|simple|ll|ll128), algo (auto|ring|oneshot|twoshot),\n"
		"      op_timeout_ms, oneshot_max_bytes, twoshot_max_bytes, ll_max_bytes,\n"
		"      oneshot_ll_max_bytes, ll128_max_bytes, channel_min_bytes, sched_spin_us,\n"
		"      exec_spin_us\n");
}

static int parse_uint(const char *s, uint32_t min, uint32_t max, uint32_t *ret)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || end == s || v < min || v > max)
		return -EINVAL;
	*ret = (uint32_t)v;
	return 0;
}

static int parse_options(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "admin-socket", required_argument, NULL, 'A' },
		{ "backend", required_argument, NULL, 'b' },
		{ "devices", required_argument, NULL, 'd' },
		{ "max-channels", required_argument, NULL, 'C' },
		{ "set", required_argument, NULL, 'S' },
		{ "config", required_argument, NULL, 'c' },
		{ "foreground", no_argument, NULL, 'f' },
		{ "log-level", required_argument, NULL, 'l' },
		{ "require-mps", no_argument, NULL, 'M' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int c, lvl;

	while ((c = getopt_long(argc, argv, "s:b:d:S:c:fl:h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			o->socket_path = optarg;
			break;
		case 'A':
			o->admin_socket_path = optarg;
			break;
		case 'b':
			if (strcmp(optarg, "auto") && strcmp(optarg, "cpu") && strcmp(optarg, "cuda")) {
				fprintf(stderr, "collcd: --backend must be auto, cpu or cuda\n");
				return -EINVAL;
			}
			o->backend = optarg;
			break;
		case 'd':
			if (parse_uint(optarg, 1, COLLC_MAX_RANKS, &o->devices) < 0) {
				fprintf(stderr, "collcd: --devices must be 1..%u\n", COLLC_MAX_RANKS);
				return -EINVAL;
			}
			break;
		case 'C':
			if (parse_uint(optarg, 1, COLLC_MAX_CHANNELS, &o->max_channels) < 0) {
				fprintf(stderr, "collcd: --max-channels must be 1..%u\n", COLLC_MAX_CHANNELS);
				return -EINVAL;
			}
			break;
		case 'S':
			if (o->nsets >= (int)(sizeof(o->sets) / sizeof(o->sets[0]))) {
				fprintf(stderr, "collcd: too many --set\n");
				return -EINVAL;
			}
			o->sets[o->nsets++] = optarg;
			break;
		case 'c':
			o->config_path = optarg;
			break;
		case 'f':
			o->foreground = 1;
			break;
		case 'l':
			lvl = log_parse_level(optarg);
			if (lvl < 0) {
				fprintf(stderr, "collcd: --log-level must be err, warning, info or debug\n");
				return -EINVAL;
			}
			log_level = lvl;
			break;
		case 'M':
			o->require_mps = 1;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "collcd: unexpected argument '%s'\n", argv[optind]);
		return -EINVAL;
	}
	return 0;
}

static int build_config(const struct options *o, uint32_t backend, uint32_t max_channels,
			struct collc_config *cfg)
{
	char err[256];

	cfg_defaults(cfg, max_channels);
	/*
	 * On GPUs every channel is a resident block: large collectives need them
	 * all (measured on 2 x H200, 1 GiB all-reduce: 22 GB/s with 2, 264 with
	 * 32), and mid sizes want many too: one channel per 8 KiB, not 256 KiB,
	 * took the 1 MiB all-reduce from 70.5 to 38.9 us and 64 KiB from 38.1 to
	 * 23.6 us (p50; the same at 8 B and 8 MiB). One-shot LL all-reduces beat
	 * two-shot Simple up to 512 KiB there (p50 128 KiB 19.4 vs 25.9 us, 512
	 * KiB 23.9 vs 26.4; at 1 MiB 37.8 vs 29.3: bench/RESULTS.md); allgather
	 * and reduce-scatter take the same limit (8 B 16.9 and 17.2 us against
	 * 23.0 with one-shot Simple). Beyond that, reading peer buffers
	 * directly beats the ring: one-shot Simple up to 4 MiB (p50 1 MiB
	 * all-reduce 29.4 against 39.7 us two-shot; reduce-scatter 2 MiB 28.7
	 * against 40.2 with ring LL128, allgather 29.2 against 37.6), and
	 * two-shot all-reduces up to 32 MiB (pipelined 4 MiB 29.2 against 42.7
	 * us with ring LL128, 16 MiB 68.8 against 69.0; 64 MiB even). Measured
	 * on 2 GPUs, where one-shot and two-shot all-reduces read the same
	 * bytes; beyond 8 ranks the one-shot limit of all-reduce shrinks
	 * (plan.h).
	 */
	if (backend == COLLC_BACKEND_CUDA) {
		cfg->channels = max_channels;
		cfg->channel_min_bytes = 8 << 10;
		cfg->oneshot_ll_max_bytes = 512 << 10;
		cfg->oneshot_max_bytes = 4 << 20;
		cfg->twoshot_max_bytes = 32 << 20;
	} else {
		/*
		 * Host threads: two-shot all-reduces beat the ring from 2 to 8 MiB
		 * and matched it to 64 MiB (2-core VM, 2 ranks, pipelined busbw
		 * 2 MiB 7.3-7.4 against 2.8-2.9 GB/s, 4 MiB 7.5-7.9 against
		 * 2.5-3.4, 16 MiB 6.4-7.1 against 6.7-6.9: bench/RESULTS.md).
		 */
		cfg->twoshot_max_bytes = 16 << 20;
	}
	if (o->config_path && cfg_apply_file(cfg, o->config_path, err, sizeof(err)) < 0) {
		fprintf(stderr, "collcd: %s\n", err);
		return -EINVAL;
	}
	for (int i = 0; i < o->nsets; i++)
		if (cfg_apply_kv(cfg, o->sets[i], err, sizeof(err)) < 0) {
			fprintf(stderr, "collcd: --set %s: %s\n", o->sets[i], err);
			return -EINVAL;
		}
	return 0;
}

static void on_stop_signal(uv_signal_t *h, int signum)
{
	log_info("signal %d: stopping", signum);
	notify_stopping();
	uv_stop(&loop);
}

static void on_hup(uv_signal_t *h, int signum)
{
	notify_reloading();
	ctl_reload();
	notify_ready();
}

/* Fault injection for the watchdog test: SIGUSR2 freezes or thaws the scheduler. */
static void on_usr2(uv_signal_t *h, int signum)
{
	stalled = !stalled;
	log_warn("scheduler %s (SIGUSR2)", stalled ? "stalled" : "resumed");
	sched_debug_stall(stalled);
}

/* Every client holds a few descriptors in collcd: take the hard limit, not 1024. */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static int start_backend(const struct options *o, const struct exec_backend **ret)
{
	const char *b = o->backend ? o->backend : "auto";
	uint32_t maxch = o->max_channels;
	int r;

	exec_cuda_set_require_mps(o->require_mps);
	if (strcmp(b, "cuda") == 0 || (strcmp(b, "auto") == 0 && exec_cuda_available())) {
		r = exec_cuda_init(o->devices, maxch ? maxch : COLLC_MAX_CHANNELS, ret);
		/* -EPERM: --require-mps and no MPS; never fall back to the CPU then. */
		if (r < 0 && (strcmp(b, "cuda") == 0 || r == -EPERM))
			return r;
		if (r == 0)
			return 0;
		log_warn("CUDA backend unavailable (%s): using the CPU executor", strerror(-r));
	}
	return exec_cpu_init(o->devices ? o->devices : COLLC_MAX_RANKS, maxch ? maxch : 4, ret);
}

int main(int argc, char **argv)
{
	struct options o = { 0 };
	const struct exec_backend *exec = NULL;
	struct collc_config cfg;
	struct ctl_params cp = { 0 };
	struct sched_params sp = { 0 };
	const int *lfds = NULL, *ladmin = NULL;
	int nlfds, r, status = 1;

	signal(SIGPIPE, SIG_IGN);
	raise_fd_limit();
	if (parse_options(argc, argv, &o) < 0)
		return 2;
	if (!o.socket_path)
		o.socket_path = getenv("COLLC_SOCKET") ? getenv("COLLC_SOCKET") : DEFAULT_SOCKET;
	if (!o.admin_socket_path) {
		static char admin[256];

		snprintf(admin, sizeof(admin), "%s.admin", o.socket_path);
		o.admin_socket_path = admin;
	}
	/* Kernels load at start, never while a grid is resident. */
	setenv("CUDA_MODULE_LOADING", "EAGER", 0);

	r = start_backend(&o, &exec);
	if (r < 0) {
		log_err("backend %s: %s", o.backend ? o.backend : "auto", strerror(-r));
		return 1;
	}
	if (build_config(&o, exec->backend, exec->max_channels, &cfg) < 0)
		goto out_exec;
	exec_spin_us = cfg.exec_spin_us;
	if (cfg_init(&cfg) < 0)
		goto out_exec;
	if (getrandom(sp.node_id, sizeof(sp.node_id), 0) != sizeof(sp.node_id))
		goto out_cfg;
	uv_loop_init(&loop);
	sp.exec = exec;
	sp.notify_done = ctl_notify_done;
	r = sched_init(&sp);
	if (r < 0) {
		log_err("scheduler: %s", strerror(-r));
		goto out_cfg;
	}
	nlfds = notify_listen_fds(&lfds, &ladmin);
	cp.loop = &loop;
	cp.socket_path = o.socket_path;
	cp.admin_socket_path = o.admin_socket_path;
	cp.listen_fds = lfds;
	cp.listen_admin = ladmin;
	cp.nlisten_fds = nlfds > 0 ? nlfds : 0;
	cp.exec = exec;
	cp.node_id = sp.node_id;
	cp.config_path = o.config_path;
	r = ctl_init(&cp);
	if (r < 0)
		goto out_sched;
	uv_signal_init(&loop, &sig_int);
	uv_signal_init(&loop, &sig_term);
	uv_signal_init(&loop, &sig_hup);
	uv_signal_start(&sig_int, on_stop_signal, SIGINT);
	uv_signal_start(&sig_term, on_stop_signal, SIGTERM);
	uv_signal_start(&sig_hup, on_hup, SIGHUP);
	uv_signal_init(&loop, &sig_usr2);
	uv_signal_start(&sig_usr2, on_usr2, SIGUSR2);
	r = notify_init(&loop);
	if (r < 0)
		goto out_ctl;
	log_info("serving on %s (backend %s, %u devices, %u channels)",
		 nlfds > 0 ? "activated sockets" : o.socket_path, exec->name, exec->ndevices,
		 exec->max_channels);
	notify_ready();
	uv_run(&loop, UV_RUN_DEFAULT);
	status = 0;
	notify_fini();
out_ctl:
	uv_close((uv_handle_t *)&sig_int, NULL);
	uv_close((uv_handle_t *)&sig_term, NULL);
	uv_close((uv_handle_t *)&sig_hup, NULL);
	uv_close((uv_handle_t *)&sig_usr2, NULL);
	ctl_fini();
out_sched:
	sched_fini();
	/* Run the done callbacks of commands the scheduler finished last. */
	sched_run_done();
	uv_run(&loop, UV_RUN_NOWAIT);
	ctl_unregister();
out_cfg:
	cfg_fini();
out_exec:
	exec->fini();
	/* The CUDA backend's fini released device memory with its contexts. */
	sched_release(exec->backend == COLLC_BACKEND_CPU);
	uv_loop_close(&loop);
	return status;
}
