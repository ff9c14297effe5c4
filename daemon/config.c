/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/host.h"
#include "daemon/config.h"
#include "daemon/net/net.h"
#include "daemon/net/sock.h"
#include "daemon/node.h"
#include "proto/work.h"

struct collc_config *cfg_current;
static uint64_t generation;

static const char *const proto_names[COLLC_PROTO_MAX] = { "auto", "simple", "ll", "ll128" };
static const char *const algo_names[COLLC_ALGO_MAX] = { "auto", "ring", "oneshot", "twoshot",
							"hier" };

/* The network namespace's default congestion control into out; "?" when it cannot tell. */
static void cc_namespace(char *out, size_t len)
{
	FILE *f;

	snprintf(out, len, "?");
	f = fopen("/proc/sys/net/ipv4/tcp_congestion_control", "r");
	if (!f)
		return;
	if (fgets(out, (int)len, f))
		out[strcspn(out, "\n")] = '\0';
	fclose(f);
}

static int cc_settable(const char *name)
{
	return collc__net_congestion_settable(name) == 0;
}

const char *cfg_cc_auto(const char *ns, int (*settable)(const char *name))
{
	if (strncmp(ns, "bbr", 3))
		return "";
	if (settable("cubic"))
		return "cubic";
	if (settable("reno"))
		return "reno";
	return "";
}

/* "auto" for this process, found once: the namespace and the permissions do not change. */
static char auto_cc[16];
static pthread_once_t auto_once = PTHREAD_ONCE_INIT;

static void auto_find(void)
{
	char ns[32];

	cc_namespace(ns, sizeof(ns));
	snprintf(auto_cc, sizeof(auto_cc), "%s", cfg_cc_auto(ns, cc_settable));
}

void cfg_tcp_congestion_pick(const char *key, char *out, size_t len)
{
	if (key && !strcmp(key, "auto")) {
		pthread_once(&auto_once, auto_find);
		key = auto_cc;
	}
	snprintf(out, len, "%s", key ? key : "");
}

void cfg_tcp_congestion(const char *cc, char *out, size_t len)
{
	if (cc && cc[0])
		snprintf(out, len, "%s", cc);
	else
		cc_namespace(out, len);
}

/*
 * 1 when collcd's new TCP connections take a congestion control (the key's
 * pick, else the namespace's) whose window follows its own estimate of the
 * bandwidth-delay product (bbr), 0 otherwise or when it cannot tell.
 */
static int tcp_windowed_cc(const char *key)
{
	char pick[16], name[32];

	cfg_tcp_congestion_pick(key, pick, sizeof(pick));
	cfg_tcp_congestion(pick, name, sizeof(name));
	return strncmp(name, "bbr", 3) == 0;
}

/*
 * The generic defaults. Keys marked auto here take each executor's own value
 * (struct cfg_exec_defaults in its table, with the measurements behind it);
 * the field keeps a placeholder so that "auto" reads back unchanged.
 */
void cfg_defaults(struct collc_config *cfg, uint32_t max_channels)
{
	cfg_defaults_cc(cfg, max_channels, "auto");
}

void cfg_defaults_cc(struct collc_config *cfg, uint32_t max_channels, const char *cc)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->max_channels = max_channels;
	cfg->channels = max_channels < 2 ? max_channels : 2;
	cfg->proto = COLLC_PROTO_AUTO;
	cfg->algo = COLLC_ALGO_AUTO;
	cfg->op_timeout_ms = 0;
	cfg->oneshot_max_bytes = 64 << 10;
	cfg->twoshot_max_bytes = 1 << 20;
	cfg->ll_max_bytes = 64 << 10;
	cfg->oneshot_ll_max_bytes = 0;
	cfg->ll128_max_bytes = 4 << 20;
	cfg->channel_min_bytes = 256 << 10;
	cfg->rotate_channels = 0;
	cfg->copy_push = 0;
	/*
	 * Off: on one H200 the grid saw a stream's go later than the
	 * scheduler does, and gated stream all-reduces were slower (8 bytes,
	 * one rank: p50 28.7-30.2 us against 20.8-21.7; two ranks on the GPU,
	 * back to back 23.1-24.6 against 21.4-21.6 us; bench/RESULTS.md,
	 * "Gated items").
	 */
	cfg->gated_items = 0;
	cfg->cuda_lanes = 2;
	cfg->cuda_idle_sleep_ns = 200;
	cfg->cuda_trace = 0;
	cfg->cuda_breadcrumbs = 1;
	snprintf(cfg->net, sizeof(cfg->net), "auto");
	snprintf(cfg->net_tcp_congestion, sizeof(cfg->net_tcp_congestion), "auto");
	cfg->net_timeout_ms = 2000;
	cfg->net_spin_us = NET_SPIN_US;
	cfg->net_eager_max_bytes = NODE_EAGER_DEFAULT;
	/*
	 * Eager through host memory for GPU buffers (sched_launch.c
	 * eager_staged()) up to 64 KiB: on one H100, two collcd on loopback,
	 * 8 B to 1 KiB all-reduces took 2-4x less time than the ring, 64 KiB
	 * as long one at a time and 0.64x pipelined; 256 KiB was within the
	 * machine's spread (bench/RESULTS.md, "Staged eager collectives of GPU
	 * ranks across daemons").
	 */
	cfg->net_eager_staged_max_bytes = 65536;
	cfg->net_hier_min_bytes = NET_HIER_MIN_BYTES;
	cfg->auto_mask = CFG_AUTO_CHANNELS | CFG_AUTO_CHANNEL_MIN_BYTES |
			 CFG_AUTO_ONESHOT_LL_MAX_BYTES | CFG_AUTO_ONESHOT_MAX_BYTES |
			 CFG_AUTO_TWOSHOT_MAX_BYTES | CFG_AUTO_ROTATE_CHANNELS | CFG_AUTO_COPY_PUSH;
	/*
	 * Spinning pays only with cores to spare: on a small host the spinners
	 * take the cores from the threads they wait for (measured on 2 cores:
	 * 8-byte all-reduce p50 590 us spinning, 150 us not).
	 */
	cfg->net_tcp_streams = 1;
	cfg->net_tcp_helpers = 0;
	/*
	 * One channel across daemons on a small host: every step of each
	 * channel passes through the same node thread and the same core, and a
	 * second channel only added hand-offs (2 cores, one rank a daemon: 1 MiB
	 * all-reduces 8-16% less time with one, under bbr 4-16 MiB 10-22% less;
	 * two ranks a daemon 3-23% less up to 8 MiB; bench/RESULTS.md, "One
	 * channel across daemons on a small host").
	 */
	cfg->net_channels = 1;
	if (!collc_small_host()) {
		cfg->net_channels = NODE_MAX_CHANNELS;
		cfg->sched_spin_us = 100;
		cfg->gate_spin_us = 100000;
		cfg->exec_spin_us = 50;
		/* On 2 cores one stream took 10% less CPU for the same bytes (bench/RESULTS.md). */
		cfg->net_tcp_streams = NET_TCP_DEFAULT_STREAMS;
		/*
		 * With cores to spare the node thread's socket copies were the
		 * ceiling (16 cores: busbw half of one TCP stream, the thread at a
		 * full core); a helper per link moves its data sockets' bytes, and
		 * the ring it speeds up overtakes eager from 512 KiB all-reduces.
		 */
		cfg->net_tcp_helpers = 1;
		cfg->net_eager_max_bytes = NODE_EAGER_HELPERS;
	}
	/*
	 * bbr keeps about twice its estimate of the bandwidth-delay product in
	 * flight on a connection; where the idle round trip is microseconds
	 * that window stays below a ring's steps in flight, and a connection
	 * waits for acknowledgements a loaded peer sends late. More connections
	 * carry more: on 2 cores, 1-8 MiB all-reduces between two daemons took
	 * 15-40% less time with 4 streams than with 1 under bbr, while under
	 * cubic 4 cost 13% at 1 MiB (bench/RESULTS.md). "auto" does not take
	 * bbr (cfg_cc_auto()); an explicit bbr, or a namespace's where the key
	 * is empty, does.
	 */
	if (tcp_windowed_cc(cc))
		cfg->net_tcp_streams = NET_TCP_BBR_STREAMS;
}

void cfg_resolve(const struct collc_config *cfg, const struct cfg_exec_defaults *d,
		 uint32_t max_channels, struct collc_config *out)
{
	*out = *cfg;
	if (cfg->auto_mask & CFG_AUTO_CHANNELS)
		out->channels = d->channels;
	if (cfg->auto_mask & CFG_AUTO_CHANNEL_MIN_BYTES)
		out->channel_min_bytes = d->channel_min_bytes;
	if (cfg->auto_mask & CFG_AUTO_ONESHOT_LL_MAX_BYTES)
		out->oneshot_ll_max_bytes = d->oneshot_ll_max_bytes;
	if (cfg->auto_mask & CFG_AUTO_ONESHOT_MAX_BYTES)
		out->oneshot_max_bytes = d->oneshot_max_bytes;
	if (cfg->auto_mask & CFG_AUTO_TWOSHOT_MAX_BYTES)
		out->twoshot_max_bytes = d->twoshot_max_bytes;
	if (cfg->auto_mask & CFG_AUTO_ROTATE_CHANNELS)
		out->rotate_channels = d->rotate_channels;
	if (cfg->auto_mask & CFG_AUTO_COPY_PUSH)
		out->copy_push = d->copy_push;
	out->max_channels = max_channels;
	if (out->channels > max_channels)
		out->channels = max_channels;
	if (out->channels < 1)
		out->channels = 1;
	out->auto_mask = 0;
}

static int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *ret)
{
	char *end;
	unsigned long long v;
	uint64_t mult = 1;

	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	if (*end == 'K' || *end == 'k')
		mult = 1ull << 10, end++;
	else if (*end == 'M' || *end == 'm')
		mult = 1ull << 20, end++;
	else if (*end == 'G' || *end == 'g')
		mult = 1ull << 30, end++;
	if (*end != '\0' || v > max / mult || v * mult < min)
		return -EINVAL;
	*ret = v * mult;
	return 0;
}

static int parse_name(const char *s, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	return -1;
}

/* K_NAME: a uint32_t index into names (max of them), set and shown by name. */
/* K_STR: a char array of max bytes (the value up to max - 1 characters). */
enum key_kind { K_U32, K_U64, K_NAME, K_STR };

struct key_desc {
	const char *name;
	enum key_kind kind;
	size_t off;
	uint64_t min, max;
	uint32_t auto_bit; /* CFG_AUTO_*: "auto" is a value; 0: it is not */
	uint8_t fixed;     /* read at start only: set and reload may not change it */
	const char *const *names;
};

/* A K_NAME key's values for an error: "a, b, c or d". */
static void name_list(const struct key_desc *k, char *out, size_t len)
{
	size_t n = 0;

	out[0] = '\0';
	for (uint64_t i = 0; i < k->max && n < len; i++) {
		const char *sep = i == 0 ? "" : ", ";

		if (i > 0 && i + 1 == k->max)
			sep = " or ";
		n += (size_t)snprintf(out + n, len - n, "%s%s", sep, k->names[i]);
	}
}

#define KEY(n, k, f, lo, hi)                                                                       \
	{                                                                                          \
		n, k, offsetof(struct collc_config, f), lo, hi, 0, 0, NULL                         \
	}
#define KEY_AUTO(n, k, f, lo, hi, bit)                                                             \
	{                                                                                          \
		n, k, offsetof(struct collc_config, f), lo, hi, bit, 0, NULL                       \
	}
#define KEY_FIXED(n, k, f, lo, hi)                                                                 \
	{                                                                                          \
		n, k, offsetof(struct collc_config, f), lo, hi, 0, 1, NULL                         \
	}
#define KEY_STR_FIXED(n, f)                                                                        \
	{                                                                                          \
		n, K_STR, offsetof(struct collc_config, f), 0,                                     \
			sizeof(((struct collc_config *)0)->f), 0, 1, NULL                          \
	}
#define KEY_NAME(n, f, table, count)                                                               \
	{                                                                                          \
		n, K_NAME, offsetof(struct collc_config, f), 0, count, 0, 0, table                 \
	}
/*
 * Every key, its range and what it means (collcd.conf(5) is written from
 * these comments). "auto" keys take each executor's own value (cfg_resolve);
 * a number applies to every executor.
 */
static const struct key_desc keys[] = {
	/* Most channels one collective uses; auto: all of a GPU's, 2 on host threads. */
	KEY_AUTO("channels", K_U32, channels, 1, COLLC_MAX_CHANNELS, CFG_AUTO_CHANNELS),
	/* Protocol: auto (by size), or simple, ll, ll128 forced where the algorithm carries it. */
	KEY_NAME("proto", proto, proto_names, COLLC_PROTO_MAX),
	/* Algorithm: auto (by size), or ring, oneshot, twoshot forced where the collective has it. */
	KEY_NAME("algo", algo, algo_names, COLLC_ALGO_HIER),
	/* A collective waiting this long for its last rank fails with -ETIMEDOUT; 0: never. */
	KEY("op_timeout_ms", K_U32, op_timeout_ms, 0, 86400000),
	/* Automatic choice: one-shot up to this many bytes per rank; auto: per executor. */
	KEY_AUTO("oneshot_max_bytes", K_U64, oneshot_max_bytes, 0, 1ull << 40,
		 CFG_AUTO_ONESHOT_MAX_BYTES),
	/* Automatic choice: two-shot all-reduce up to here, then the ring; auto: per executor. */
	KEY_AUTO("twoshot_max_bytes", K_U64, twoshot_max_bytes, 0, 1ull << 40,
		 CFG_AUTO_TWOSHOT_MAX_BYTES),
	/* Ring, automatic protocol: LL up to here. */
	KEY("ll_max_bytes", K_U64, ll_max_bytes, 0, 1ull << 40),
	/* One-shot LL (all-reduce, allgather, reduce-scatter, <= 8 ranks) up to here; 0: never. */
	KEY_AUTO("oneshot_ll_max_bytes", K_U64, oneshot_ll_max_bytes, 0, 1ull << 40,
		 CFG_AUTO_ONESHOT_LL_MAX_BYTES),
	/* Ring, automatic protocol: LL128 up to here, then Simple. */
	KEY("ll128_max_bytes", K_U64, ll128_max_bytes, 0, 1ull << 40),
	/* Automatic channel count: at least this many bytes per channel; auto: per executor. */
	KEY_AUTO("channel_min_bytes", K_U64, channel_min_bytes, 1, 1ull << 40,
		 CFG_AUTO_CHANNEL_MIN_BYTES),
	/* The scheduler spins this long after its last event before it sleeps. */
	KEY("sched_spin_us", K_U32, sched_spin_us, 0, 1000000),
	KEY("gate_spin_us", K_U32, gate_spin_us, 0, 10000000),
	/* Host-thread channels spin this long for the next item before they sleep. */
	KEY("exec_spin_us", K_U32, exec_spin_us, 0, 1000000),
	/*
	 * 1: a stream collective every rank submitted goes to the executors at
	 * once, which start it when its streams get there (sched_gated.c); 0:
	 * the scheduler starts it once it sees every stream there.
	 */
	KEY("gated_items", K_U32, gated_items, 0, 1),
	/*
	 * 1: consecutive collectives start on the channels after the last one's
	 * (side by side on GPUs); 0: every one starts at channel 0; auto: GPUs
	 * rotate, host threads do not.
	 */
	KEY_AUTO("rotate_channels", K_U32, rotate_channels, 0, 1, CFG_AUTO_ROTATE_CHANNELS),
	/*
	 * All-to-all(v) and send/recv: 1: each rank's device writes into its
	 * peers' receive buffers; 0: reads its peers' send buffers; auto: GPUs
	 * write, host threads read. Memory peers cannot reach turns it.
	 */
	KEY_AUTO("copy_push", K_U32, copy_push, 0, 1, CFG_AUTO_COPY_PUSH),
	/* Fixed at start. FIFOs per GPU: how many ranks of one communicator may share a GPU. */
	KEY_FIXED("cuda_lanes", K_U32, cuda_lanes, 1, 4),
	/* Fixed at start. An idle GPU channel block sleeps this long between polls; 0: spins. */
	KEY_FIXED("cuda_idle_sleep_ns", K_U32, cuda_idle_sleep_ns, 0, 1000000),
	/* Fixed at start. 1: the grid times its hand-offs, logged at exit (costs PCIe writes). */
	KEY_FIXED("cuda_trace", K_U32, cuda_trace, 0, 1),
	/* Fixed at start. 1: each item's first channel block leaves a breadcrumb for a fault's log. */
	KEY_FIXED("cuda_breadcrumbs", K_U32, cuda_breadcrumbs, 0, 1),
	/* Fixed at start. ADDR:PORT on which collcd meets other collcd daemons; empty: off. */
	KEY_STR_FIXED("listen", listen),
	/* Fixed at start. Transport to other daemons: auto, tcp, ib or plugin:NAME. */
	KEY_STR_FIXED("net", net),
	/* Fixed at start. Interface for data to other daemons; empty: the first one up. */
	KEY_STR_FIXED("net_ifname", net_ifname),
	/* Fixed at start. Data sockets per tcp link (a step is split over them). */
	KEY_FIXED("net_tcp_streams", K_U32, net_tcp_streams, 1, NET_TCP_MAX_STREAMS),
	/*
	 * Fixed at start. 1: each tcp link's data sockets move their bytes in a
	 * thread of the link's own, the node thread keeping headers and
	 * completions; 0: the node thread moves every byte.
	 */
	KEY_FIXED("net_tcp_helpers", K_U32, net_tcp_helpers, 0, 1),
	/*
	 * Fixed at start. TCP congestion control of collcd's sockets to other
	 * daemons (control and data); auto: the network namespace's, except
	 * bbr's (cfg_cc_auto()); empty: the namespace's. The defaults that
	 * depend on it (net_tcp_streams) follow it (cfg_defaults_cc()).
	 */
	KEY_STR_FIXED("net_tcp_congestion", net_tcp_congestion),
	/* A peer daemon silent this long fails the communicators it spans (-ETIMEDOUT). */
	KEY("net_timeout_ms", K_U32, net_timeout_ms, 100, 600000),
	/* The node thread polls the network this long, yielding, while collectives cross daemons. */
	KEY("net_spin_us", K_U32, net_spin_us, 0, 1000000),
	/*
	 * Small collectives of host memory across daemons ride on the agreement,
	 * computed once by the root (daemon/node.h), while what the root holds and
	 * the result fit this; 0: the ring always.
	 */
	KEY("net_eager_max_bytes", K_U64, net_eager_max_bytes, 0, NODE_EAGER_MAX),
	/*
	 * The same for collectives where a buffer here is executor memory (a
	 * GPU's): staged through host memory by the executor's copies, up to
	 * the smaller of this and net_eager_max_bytes; 0: such ranks ring.
	 */
	KEY("net_eager_staged_max_bytes", K_U64, net_eager_staged_max_bytes, 0, NODE_EAGER_MAX),
	/*
	 * On a communicator spanning daemons with the same number (2 or more) of
	 * ranks on each, all-reduces of at least this many bytes a rank, and
	 * all-gathers and reduce-scatters whose whole buffer is that large, run
	 * hierarchically (docs/design.md §6b); 0: the flat
	 * ring always.
	 * The root's value when a communicator forms holds on all its daemons.
	 */
	KEY("net_hier_min_bytes", K_U64, net_hier_min_bytes, 0, 1ull << 40),
	/*
	 * Most channels a communicator spanning daemons uses: each of its
	 * daemons offers its own value when the communicator forms and the least
	 * holds; 1 on hosts of 4 cores or fewer, else 2.
	 */
	KEY("net_channels", K_U32, net_channels, 1, NODE_MAX_CHANNELS),
};

const char *const cfg_auto_keys[] = {
	"channels",
	"channel_min_bytes",
	"oneshot_ll_max_bytes",
	"oneshot_max_bytes",
	"twoshot_max_bytes",
	"rotate_channels",
	"copy_push",
	NULL,
};

static const struct key_desc *find_key(const char *name, size_t len)
{
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (strlen(keys[i].name) == len && strncmp(keys[i].name, name, len) == 0)
			return &keys[i];
	return NULL;
}

int cfg_apply_kv(struct collc_config *cfg, const char *kv, char *err, size_t errlen)
{
	const char *eq = strchr(kv, '=');
	const struct key_desc *k;
	struct collc_config next = *cfg;
	const char *val;
	char list[64];
	uint64_t v;
	int i;

	if (!eq) {
		snprintf(err, errlen, "expected KEY=VALUE, got '%.64s'", kv);
		return -EINVAL;
	}
	k = find_key(kv, (size_t)(eq - kv));
	if (!k) {
		snprintf(err, errlen, "unknown key '%.*s'",
			 (int)(eq - kv) > 64 ? 64 : (int)(eq - kv), kv);
		return -EINVAL;
	}
	val = eq + 1;
	if (k->auto_bit && strcmp(val, "auto") == 0) {
		struct collc_config d;

		/* The placeholder cfg_defaults() keeps: "auto" reads back to the same config. */
		cfg_defaults(&d, next.max_channels);
		memcpy((char *)&next + k->off, (const char *)&d + k->off,
		       k->kind == K_U64 ? sizeof(uint64_t) : sizeof(uint32_t));
		next.auto_mask |= k->auto_bit;
		*cfg = next;
		return 0;
	}
	switch (k->kind) {
	case K_NAME:
		i = parse_name(val, k->names, (int)k->max);
		if (i < 0) {
			name_list(k, list, sizeof(list));
			snprintf(err, errlen, "%s must be %s, got '%.32s'", k->name, list, val);
			return -EINVAL;
		}
		*(uint32_t *)((char *)&next + k->off) = (uint32_t)i;
		break;
	case K_STR:
		if (strlen(val) >= k->max) {
			snprintf(err, errlen, "%s must be at most %u characters", k->name,
				 (unsigned)k->max - 1);
			return -EINVAL;
		}
		for (const char *p = val; *p; p++)
			if (!isgraph((unsigned char)*p) || *p == '"' || *p == '\\') {
				snprintf(err, errlen,
					 "%s may not contain blanks, quotes or backslashes",
					 k->name);
				return -EINVAL;
			}
		memset((char *)&next + k->off, 0, k->max);
		memcpy((char *)&next + k->off, val, strlen(val));
		break;
	case K_U32:
	case K_U64:
		if (parse_u64(val, k->min, k->max, &v) < 0) {
			snprintf(err, errlen,
				 "%s must be %san integer in [%" PRIu64 ", %" PRIu64
				 "], got '%.32s'",
				 k->name, k->auto_bit ? "auto or " : "", k->min, k->max, val);
			return -EINVAL;
		}
		next.auto_mask &= ~k->auto_bit;
		if (k->kind == K_U32)
			*(uint32_t *)((char *)&next + k->off) = (uint32_t)v;
		else
			*(uint64_t *)((char *)&next + k->off) = v;
		break;
	}
	if (!(next.auto_mask & CFG_AUTO_CHANNELS) && next.channels > next.max_channels) {
		snprintf(err, errlen, "channels must be at most %u (the executor's channel count)",
			 next.max_channels);
		return -EINVAL;
	}
	*cfg = next;
	return 0;
}

int cfg_apply_file(struct collc_config *cfg, const char *path, char *err, size_t errlen)
{
	struct collc_config next = *cfg;
	char *line = NULL, *kv = NULL;
	size_t cap = 0;
	unsigned lineno = 0;
	FILE *f = fopen(path, "re");
	int r = 0;

	if (!f) {
		r = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return r;
	}
	while (getline(&line, &cap, f) >= 0) {
		char *p = line, *q;

		lineno++;
		q = kv = realloc(kv, cap);
		if (!kv) {
			r = -ENOMEM;
			snprintf(err, errlen, "%s: out of memory", path);
			break;
		}
		/* Strip comments and every blank: "key = value" becomes "key=value". */
		for (; *p && *p != '#' && *p != '\n'; p++)
			if (!isspace((unsigned char)*p))
				*q++ = *p;
		*q = '\0';
		if (kv[0] == '\0')
			continue;
		r = cfg_apply_kv(&next, kv, err, errlen);
		if (r < 0) {
			char msg[256];

			snprintf(msg, sizeof(msg), "%s:%u: %s", path, lineno, err);
			snprintf(err, errlen, "%s", msg);
			break;
		}
	}
	free(line);
	free(kv);
	fclose(f);
	if (r == 0)
		*cfg = next;
	return r;
}

int cfg_get_key(const struct collc_config *cfg, const char *key, char *out, size_t outlen)
{
	const struct key_desc *k = find_key(key, strlen(key));

	if (!k)
		return -ENOENT;
	if (cfg->auto_mask & k->auto_bit) {
		snprintf(out, outlen, "auto");
		return 0;
	}
	switch (k->kind) {
	case K_NAME:
		snprintf(out, outlen, "%s",
			 k->names[*(const uint32_t *)((const char *)cfg + k->off)]);
		break;
	case K_U32:
		snprintf(out, outlen, "%u", *(const uint32_t *)((const char *)cfg + k->off));
		break;
	case K_U64:
		snprintf(out, outlen, "%" PRIu64, *(const uint64_t *)((const char *)cfg + k->off));
		break;
	case K_STR:
		snprintf(out, outlen, "%.*s", (int)k->max, (const char *)cfg + k->off);
		break;
	}
	return 0;
}

size_t cfg_to_json(const struct collc_config *cfg, char *out, size_t outlen)
{
	size_t n = 0;
	char v[64];

	n += (size_t)snprintf(out + n, outlen - n, "\"max_channels\": %u", cfg->max_channels);
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]) && n < outlen; i++) {
		cfg_get_key(cfg, keys[i].name, v, sizeof(v));
		if (keys[i].kind == K_NAME || keys[i].kind == K_STR ||
		    (cfg->auto_mask & keys[i].auto_bit))
			n += (size_t)snprintf(out + n, outlen - n, ", \"%s\": \"%s\"", keys[i].name,
					      v);
		else
			n += (size_t)snprintf(out + n, outlen - n, ", \"%s\": %s", keys[i].name, v);
	}
	return n < outlen ? n : outlen - 1;
}

int cfg_key_is_auto(const struct collc_config *cfg, const char *key)
{
	const struct key_desc *k = find_key(key, strlen(key));

	return k && (cfg->auto_mask & k->auto_bit);
}

const char *cfg_fixed_changed(const struct collc_config *a, const struct collc_config *b)
{
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (keys[i].fixed &&
		    memcmp((const char *)a + keys[i].off, (const char *)b + keys[i].off,
			   keys[i].kind == K_STR   ? keys[i].max
			   : keys[i].kind == K_U64 ? sizeof(uint64_t)
						   : sizeof(uint32_t)))
			return keys[i].name;
	return NULL;
}

const char *cfg_proto_name(uint32_t proto)
{
	return proto < COLLC_PROTO_MAX ? proto_names[proto] : "?";
}

const char *cfg_algo_name(uint32_t algo)
{
	return algo < COLLC_ALGO_MAX ? algo_names[algo] : "?";
}

int cfg_init(const struct collc_config *initial)
{
	struct collc_config *c = malloc(sizeof(*c));

	if (!c)
		return -ENOMEM;
	*c = *initial;
	rcu_assign_pointer(cfg_current, c);
	return 0;
}

void cfg_fini(void)
{
	/* Every reader has stopped: the last snapshot can go at once. */
	free(cfg_current);
	cfg_current = NULL;
}

#ifdef COLLC_TSAN
char cfg_grace_token;
#endif

static void cfg_free_rcu(struct rcu_head *head)
{
#ifdef COLLC_TSAN
	/* Pairs with cfg_reader_quiescent(): every reader is done with the old snapshot. */
	__tsan_acquire(&cfg_grace_token);
#endif
	free(caa_container_of(head, struct collc_config, rcu));
}

int cfg_publish(const struct collc_config *cfg)
{
	struct collc_config *c = malloc(sizeof(*c)), *old;

	if (!c)
		return -ENOMEM;
	*c = *cfg;
#ifdef COLLC_TSAN
	__tsan_release(c);
#endif
	old = rcu_xchg_pointer(&cfg_current, c);
	/* G1: pairs with G2 in cfg_generation(): a reader that sees the count sees c. */
	__atomic_fetch_add(&generation, 1, __ATOMIC_RELEASE);
	/* Freed once every reader went through a quiescent state: none still plans with it. */
	if (old)
		call_rcu(&old->rcu, cfg_free_rcu);
	return 0;
}

uint64_t cfg_generation(void)
{
	/* G2: pairs with G1: cfg_get() after this returns that snapshot or a newer one. */
	return __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
}
