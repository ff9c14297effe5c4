/* SPDX-License-Identifier: MIT */
/*
 * collcd: options, module init/fini in dependency order, signals on the loop.
 *
 *   config -> executors -> scheduler -> control (sockets) -> READY
 * and the reverse on the way out.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
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
#include "daemon/log.h"
#include "daemon/node.h"
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
	char listen_kv[80]; /* --listen and --net become these --set words */
	char net_kv[80];
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
		"              [--listen ADDR:PORT] [--net auto|tcp|ib|plugin:NAME]\n"
		"\n"
		"--backend auto (default) runs the CPU executor and, where GPUs exist, the CUDA one.\n"
		"\n"
		"Keys: channels, proto (auto|simple|ll|ll128), algo (auto|ring|oneshot|twoshot),\n"
		"      op_timeout_ms, oneshot_max_bytes, twoshot_max_bytes, ll_max_bytes,\n"
		"      oneshot_ll_max_bytes, ll128_max_bytes, channel_min_bytes, sched_spin_us,\n"
		"      gate_spin_us, exec_spin_us, rotate_channels, copy_push, cuda_lanes,\n"
		"      cuda_idle_sleep_ns, cuda_trace, cuda_breadcrumbs, listen, net, net_ifname,\n"
		"      net_timeout_ms\n"
		"      (channels, channel_min_bytes, oneshot_ll_max_bytes, oneshot_max_bytes,\n"
		"      twoshot_max_bytes, rotate_channels and copy_push take auto: each\n"
		"      executor's default)\n");
}

/* Option opt's value s, in [min, max]; says so on stderr when it is not. */
static int parse_uint(const char *opt, const char *s, uint32_t min, uint32_t max, uint32_t *ret)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || end == s || v < min || v > max) {
		fprintf(stderr, "collcd: %s must be %u..%u\n", opt, min, max);
		return -EINVAL;
	}
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
		{ "listen", required_argument, NULL, 'L' },
		{ "net", required_argument, NULL, 'N' },
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
			if (strcmp(optarg, "auto") && strcmp(optarg, "cpu") &&
			    strcmp(optarg, "cuda")) {
				fprintf(stderr, "collcd: --backend must be auto, cpu or cuda\n");
				return -EINVAL;
			}
			o->backend = optarg;
			break;
		case 'd':
			if (parse_uint("--devices", optarg, 1, COLLC_MAX_RANKS, &o->devices) < 0)
				return -EINVAL;
			break;
		case 'C':
			if (parse_uint("--max-channels", optarg, 1, COLLC_MAX_CHANNELS,
				       &o->max_channels) < 0)
				return -EINVAL;
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
				fprintf(stderr,
					"collcd: --log-level must be err, warning, info or debug\n");
				return -EINVAL;
			}
			log_level = lvl;
			break;
		case 'M':
			o->require_mps = 1;
			break;
		case 'L':
		case 'N':
			if (o->nsets >= (int)(sizeof(o->sets) / sizeof(o->sets[0]))) {
				fprintf(stderr, "collcd: too many --set\n");
				return -EINVAL;
			}
			if (c == 'L') {
				snprintf(o->listen_kv, sizeof(o->listen_kv), "listen=%s", optarg);
				o->sets[o->nsets++] = o->listen_kv;
			} else {
				snprintf(o->net_kv, sizeof(o->net_kv), "net=%s", optarg);
				o->sets[o->nsets++] = o->net_kv;
			}
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

/*
 * The config before the executors start: max_channels bounds channels for
 * now; once they run it becomes the largest executor's channel count.
 * Per-executor defaults live in the executors' tables (keys left at auto).
 */
static int build_config(const struct options *o, struct collc_config *cfg)
{
	char err[256], cc[sizeof(cfg->net_tcp_congestion)] = "auto";

	/*
	 * Twice where net_tcp_congestion is set to other than auto: the second
	 * time on the defaults for that congestion control, so that only what
	 * the file and --set name themselves overrides them.
	 */
	for (int pass = 0; pass < 2; pass++) {
		cfg_defaults_cc(cfg, o->max_channels ? o->max_channels : COLLC_MAX_CHANNELS, cc);
		if (o->config_path && cfg_apply_file(cfg, o->config_path, err, sizeof(err)) < 0) {
			fprintf(stderr, "collcd: %s\n", err);
			return -EINVAL;
		}
		for (int i = 0; i < o->nsets; i++)
			if (cfg_apply_kv(cfg, o->sets[i], err, sizeof(err)) < 0) {
				fprintf(stderr, "collcd: --set %s: %s\n", o->sets[i], err);
				return -EINVAL;
			}
		if (!strcmp(cfg->net_tcp_congestion, cc) || pass)
			break;
		memcpy(cc, cfg->net_tcp_congestion, sizeof(cc));
	}
	return 0;
}

/* channels set to a number must fit the largest executor. */
static int fit_config(struct collc_config *cfg)
{
	uint32_t maxch = 1;

	for (uint32_t e = 0; e < exec_count(); e++)
		if (exec_get(e)->max_channels > maxch)
			maxch = exec_get(e)->max_channels;
	cfg->max_channels = maxch;
	if (!(cfg->auto_mask & CFG_AUTO_CHANNELS) && cfg->channels > maxch) {
		log_err("channels must be at most %u (the executors' channel count)", maxch);
		return -EINVAL;
	}
	if (cfg->auto_mask & CFG_AUTO_CHANNELS && cfg->channels > maxch)
		cfg->channels = maxch; /* the placeholder; never used as such */
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

int main(int argc, char **argv)
{
	struct options o = { 0 };
	struct exec_init ei = { 0 };
	struct collc_config cfg;
	struct ctl_params cp = { 0 };
	struct sched_params sp = { 0 };
	const int *lfds = NULL, *ladmin = NULL;
	int nlfds, r, status = 1;

	signal(SIGPIPE, SIG_IGN);
	/*
	 * Buffers of up to a few MiB come and go per collective across daemons
	 * (eager inputs and results, node messages handed to the scheduler). With
	 * glibc's defaults each came from a fresh mmap or a trimmed heap, and
	 * every page of it faulted again on first touch: on a paravirtualised
	 * host that cost more than the copies (bench/RESULTS.md). Freed memory
	 * stays in the arenas instead (up to 64 MiB at the top of one; blocks
	 * of up to 32 MiB, glibc's largest threshold, come from them).
	 */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 64 << 20);
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

	if (build_config(&o, &cfg) < 0)
		return 1;
	ei.ndevices = o.devices;
	ei.max_channels = o.max_channels;
	ei.require_mps = o.require_mps;
	ei.cfg = &cfg;
	ei.notify = sched_notify;
	ei.notify_skipped = sched_notify_skipped;
	r = exec_start(o.backend ? o.backend : "auto", &ei);
	if (r < 0) {
		log_err("backend %s: %s", o.backend ? o.backend : "auto", strerror(-r));
		return 1;
	}
	if (fit_config(&cfg) < 0 || cfg_init(&cfg) < 0)
		goto out_exec;
	if (getrandom(sp.node_id, sizeof(sp.node_id), 0) != sizeof(sp.node_id))
		goto out_cfg;
	uv_loop_init(&loop);
	sp.notify_done = ctl_notify_done;
	r = sched_init(&sp);
	if (r < 0) {
		log_err("scheduler: %s", strerror(-r));
		goto out_cfg;
	}
	r = node_init(&cfg, sp.node_id);
	if (r < 0) {
		log_err("net: %s", strerror(-r));
		goto out_sched;
	}
	nlfds = notify_listen_fds(&lfds, &ladmin);
	cp.loop = &loop;
	cp.socket_path = o.socket_path;
	cp.admin_socket_path = o.admin_socket_path;
	cp.listen_fds = lfds;
	cp.listen_admin = ladmin;
	cp.nlisten_fds = nlfds > 0 ? nlfds : 0;
	cp.node_id = sp.node_id;
	cp.config_path = o.config_path;
	r = ctl_init(&cp);
	if (r < 0)
		goto out_node;
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
	for (uint32_t e = 0; e < exec_count(); e++)
		log_info("serving on %s (backend %s, %u devices, %u channels)",
			 nlfds > 0 ? "activated sockets" : o.socket_path, exec_get(e)->name,
			 exec_get(e)->ndevices, exec_get(e)->max_channels);
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
out_node:
	node_fini();
out_sched:
	sched_fini();
	/* Run the done callbacks of commands the scheduler finished last. */
	sched_run_done();
	uv_run(&loop, UV_RUN_NOWAIT);
	ctl_unregister();
out_cfg:
	cfg_fini();
out_exec:
	exec_stop();
	/* Where an executor's fini released its memory with its contexts, this leaves it. */
	sched_release();
	uv_loop_close(&loop);
	return status;
}
