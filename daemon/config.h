/* SPDX-License-Identifier: MIT */
/*
 * The configuration: one immutable struct published through RCU. Readers take
 * a snapshot with cfg_get() inside a read-side section (the scheduler is a
 * QSBR reader); writers build a new struct and publish it with cfg_publish().
 */
#ifndef COLLCD_CONFIG_H
#define COLLCD_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include <urcu-qsbr.h>

/* Bits of collc_config.auto_mask: the key is "auto", each executor uses its own default. */
#define CFG_AUTO_CHANNELS             (1u << 0)
#define CFG_AUTO_CHANNEL_MIN_BYTES    (1u << 1)
#define CFG_AUTO_ONESHOT_LL_MAX_BYTES (1u << 2)
#define CFG_AUTO_ONESHOT_MAX_BYTES    (1u << 3)
#define CFG_AUTO_TWOSHOT_MAX_BYTES    (1u << 4)
#define CFG_AUTO_ROTATE_CHANNELS      (1u << 5)
#define CFG_AUTO_COPY_PUSH            (1u << 6)

struct collc_config {
	uint32_t channels;             /* most channels one collective uses */
	uint32_t max_channels;         /* fixed at start: the largest executor's channel count */
	uint32_t proto;                /* COLLC_PROTO_* (AUTO: chosen by size) */
	uint32_t algo;                 /* COLLC_ALGO_* (AUTO: chosen by size) */
	uint32_t op_timeout_ms;        /* 0: none */
	uint64_t oneshot_max_bytes;    /* auto algo: one-shot up to here */
	uint64_t twoshot_max_bytes;    /* auto algo: two-shot up to here, then ring */
	uint64_t ll_max_bytes;         /* auto proto: LL up to here (ring) */
	uint64_t oneshot_ll_max_bytes; /* auto: one-shot LL all-reduce, allgather, reduce-scatter
					  up to here (<= 8 ranks); 0: never */
	uint64_t ll128_max_bytes;      /* auto proto: LL128 up to here, then Simple */
	uint64_t channel_min_bytes;    /* auto channels: at least this many bytes per channel */
	uint32_t sched_spin_us;        /* scheduler spins this long idle before it sleeps */
	uint32_t gate_spin_us;         /* ... and this long while stream gates wait, then naps */
	uint32_t exec_spin_us;         /* executor threads spin this long before they sleep */
	uint32_t gated_items; /* 1: stream collectives go to the executors before their streams */
	uint32_t rotate_channels; /* 1: consecutive collectives start on the next channels */
	uint32_t copy_push; /* all-to-all, send/recv: 1: ranks write peers' buffers; 0: read them */
	uint32_t cuda_lanes;         /* fixed at start: FIFOs (ranks) per GPU, 1..4 */
	uint32_t cuda_idle_sleep_ns; /* fixed at start: idle GPU channel blocks sleep between polls */
	uint32_t cuda_trace;         /* fixed at start: 1: the grid times its hand-offs */
	uint32_t cuda_breadcrumbs;   /* fixed at start: 1: channel blocks leave breadcrumbs */
	/* Other daemons (daemon/node.c). */
	char listen[64];     /* fixed at start: ADDR:PORT other collcd daemons reach; "": off */
	char net[64];        /* fixed at start: auto, tcp, ib or plugin:NAME */
	char net_ifname[16]; /* fixed at start: interface for data ("": the first up one) */
	uint32_t net_tcp_streams; /* fixed at start: tcp data sockets per link, 1..8 */
	uint32_t net_tcp_helpers; /* fixed at start: 1: a thread per tcp link moves its data sockets */
	/* fixed at start: TCP congestion control of sockets to other daemons ("": the namespace's) */
	char net_tcp_congestion[16];
	uint32_t net_timeout_ms; /* a peer daemon silent this long fails its communicators */
	uint32_t net_spin_us;    /* the node thread polls this long, yielding, before it sleeps */
	uint64_t net_eager_max_bytes; /* eager collectives across daemons up to this (node.h); 0: none */
	uint64_t net_eager_staged_max_bytes; /* the same where a buffer here is a GPU's; 0: none */
	uint64_t net_hier_min_bytes; /* hierarchical collectives across daemons from this; 0: none */
	uint32_t net_channels;       /* channels a communicator spanning daemons may use (node.h) */
	/*
	 * CFG_AUTO_*: keys left at auto. Their field holds a placeholder (the
	 * generic default) until cfg_resolve() fills in an executor's own value.
	 */
	uint32_t auto_mask;
	struct rcu_head rcu;
};

/* An executor's values for the keys left at auto (exec.h: struct exec_backend). */
struct cfg_exec_defaults {
	uint32_t channels;
	uint32_t rotate_channels;
	uint32_t copy_push;
	uint64_t channel_min_bytes;
	uint64_t oneshot_ll_max_bytes;
	uint64_t oneshot_max_bytes;
	uint64_t twoshot_max_bytes;
};

/*
 * The config one executor runs with: cfg with its auto keys replaced by d,
 * and max_channels (and channels with it) bounded by the executor's own.
 */
void cfg_resolve(const struct collc_config *cfg, const struct cfg_exec_defaults *d,
		 uint32_t max_channels, struct collc_config *out);
/*
 * The first key fixed at start whose value differs between a and b (a
 * reload or set may not change it); NULL when none does.
 */
const char *cfg_fixed_changed(const struct collc_config *a, const struct collc_config *b);
/* 1 when key is left at auto in cfg. */
int cfg_key_is_auto(const struct collc_config *cfg, const char *key);
/* Names of the keys that may be auto, NULL-terminated. */
extern const char *const cfg_auto_keys[];

void cfg_defaults(struct collc_config *cfg, uint32_t max_channels);
/*
 * The defaults where the key net_tcp_congestion is cc ("auto", as
 * cfg_defaults(); "": the network namespace's): bbr gets more data sockets.
 */
void cfg_defaults_cc(struct collc_config *cfg, uint32_t max_channels, const char *cc);
/*
 * The congestion control that net_tcp_congestion "auto" gives collcd's TCP
 * sockets in a namespace whose default is ns: "" (ns's own), except where ns
 * is bbr (any version), whose pacing at its bandwidth estimate holds back
 * the bursts of collectives on links of microseconds (bench/RESULTS.md,
 * "Congestion control auto"): there cubic, else reno, the first that
 * settable() accepts (an unprivileged collcd may set only those in
 * net.ipv4.tcp_allowed_congestion_control, which always has reno).
 */
const char *cfg_cc_auto(const char *ns, int (*settable)(const char *name));
/*
 * The name collcd gives its TCP sockets for key net_tcp_congestion, into
 * out: "auto" resolved (cfg_cc_auto(), found once a process), else the key;
 * "": none, the namespace's.
 */
void cfg_tcp_congestion_pick(const char *key, char *out, size_t len);
/*
 * The TCP congestion control collcd's sockets take, into out: cc (a pick)
 * where set, else the network namespace's now; "?" when it cannot tell.
 */
void cfg_tcp_congestion(const char *cc, char *out, size_t len);
/*
 * Applies one "key=value" to cfg. On error returns -EINVAL and writes a
 * message to err; cfg is then unchanged.
 */
int cfg_apply_kv(struct collc_config *cfg, const char *kv, char *err, size_t errlen);
/* Applies a config file: "key = value" lines, '#' comments. */
int cfg_apply_file(struct collc_config *cfg, const char *path, char *err, size_t errlen);
/* Writes the value of key into out; -ENOENT for an unknown key. */
int cfg_get_key(const struct collc_config *cfg, const char *key, char *out, size_t outlen);
/* Appends "key": value pairs as a JSON object body. Returns bytes written. */
size_t cfg_to_json(const struct collc_config *cfg, char *out, size_t outlen);

extern struct collc_config *cfg_current;

int cfg_init(const struct collc_config *initial);
void cfg_fini(void);
/*
 * ThreadSanitizer does not see liburcu's grace periods. A reader calls this
 * right before it reports a quiescent state (or goes offline): it releases
 * what it read, and the reclaim callback acquires it before freeing.
 */
#if defined(__SANITIZE_THREAD__)
#define COLLC_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define COLLC_TSAN 1
#endif
#endif
#ifdef COLLC_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
extern char cfg_grace_token;
static inline void cfg_reader_quiescent(void)
{
	__tsan_release(&cfg_grace_token);
}
#else
static inline void cfg_reader_quiescent(void)
{
}
#endif

/* Reader side: only inside an RCU read-side section of a registered thread. */
static inline const struct collc_config *cfg_get(void)
{
	struct collc_config *c = rcu_dereference(cfg_current);

#ifdef COLLC_TSAN
	/* Pairs with the release in cfg_publish(): the snapshot was written before. */
	__tsan_acquire(c);
#endif
	return c;
}
/* Writer side (any registered thread): publishes a copy of cfg. */
int cfg_publish(const struct collc_config *cfg);
/* Counts publications since start (acquire: a cfg_get() after it is at least that new). */
uint64_t cfg_generation(void);
const char *cfg_proto_name(uint32_t proto);
const char *cfg_algo_name(uint32_t algo);

#endif
