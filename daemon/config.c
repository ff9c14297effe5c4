/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/config.h"
#include "proto/work.h"

struct collc_config *cfg_current;
static uint64_t generation;

static const char *const proto_names[COLLC_PROTO_MAX] = { "auto", "simple", "ll", "ll128" };
static const char *const algo_names[COLLC_ALGO_MAX] = { "auto", "ring", "oneshot", "twoshot" };

void cfg_defaults(struct collc_config *cfg, uint32_t max_channels)
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
	/* On host threads the Simple one-shot is faster at every size (bench/RESULTS.md). */
	cfg->oneshot_ll_max_bytes = 0;
	cfg->ll128_max_bytes = 4 << 20;
	cfg->channel_min_bytes = 256 << 10;
	/*
	 * Spinning pays only with cores to spare: on a small host the spinners
	 * take the cores from the threads they wait for (measured on 2 cores:
	 * 8-byte all-reduce p50 590 us spinning, 150 us not).
	 */
	if (sysconf(_SC_NPROCESSORS_ONLN) > 4) {
		cfg->sched_spin_us = 100;
		cfg->exec_spin_us = 50;
	}
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

enum key_kind { K_U32, K_U64, K_PROTO, K_ALGO };

struct key_desc {
	const char *name;
	enum key_kind kind;
	size_t off;
	uint64_t min, max;
};

#define KEY(n, k, f, lo, hi) { n, k, offsetof(struct collc_config, f), lo, hi }
static const struct key_desc keys[] = {
	KEY("channels", K_U32, channels, 1, COLLC_MAX_CHANNELS),
	KEY("proto", K_PROTO, proto, 0, 0),
	KEY("algo", K_ALGO, algo, 0, 0),
	KEY("op_timeout_ms", K_U32, op_timeout_ms, 0, 86400000),
	KEY("oneshot_max_bytes", K_U64, oneshot_max_bytes, 0, 1ull << 40),
	KEY("twoshot_max_bytes", K_U64, twoshot_max_bytes, 0, 1ull << 40),
	KEY("ll_max_bytes", K_U64, ll_max_bytes, 0, 1ull << 40),
	KEY("oneshot_ll_max_bytes", K_U64, oneshot_ll_max_bytes, 0, 1ull << 40),
	KEY("ll128_max_bytes", K_U64, ll128_max_bytes, 0, 1ull << 40),
	KEY("channel_min_bytes", K_U64, channel_min_bytes, 1, 1ull << 40),
	KEY("sched_spin_us", K_U32, sched_spin_us, 0, 1000000),
	KEY("exec_spin_us", K_U32, exec_spin_us, 0, 1000000),
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
	uint64_t v;
	int i;

	if (!eq) {
		snprintf(err, errlen, "expected KEY=VALUE, got '%.64s'", kv);
		return -EINVAL;
	}
	k = find_key(kv, (size_t)(eq - kv));
	if (!k) {
		snprintf(err, errlen, "unknown key '%.*s'", (int)(eq - kv) > 64 ? 64 : (int)(eq - kv), kv);
		return -EINVAL;
	}
	val = eq + 1;
	switch (k->kind) {
	case K_PROTO:
		i = parse_name(val, proto_names, COLLC_PROTO_MAX);
		if (i < 0) {
			snprintf(err, errlen, "proto must be auto, simple, ll or ll128, got '%.32s'", val);
			return -EINVAL;
		}
		next.proto = (uint32_t)i;
		break;
	case K_ALGO:
		i = parse_name(val, algo_names, COLLC_ALGO_MAX);
		if (i < 0) {
			snprintf(err, errlen, "algo must be auto, ring, oneshot or twoshot, got '%.32s'", val);
			return -EINVAL;
		}
		next.algo = (uint32_t)i;
		break;
	case K_U32:
	case K_U64:
		if (parse_u64(val, k->min, k->max, &v) < 0) {
			snprintf(err, errlen, "%s must be an integer in [%" PRIu64 ", %" PRIu64 "], got '%.32s'",
				 k->name, k->min, k->max, val);
			return -EINVAL;
		}
		if (k->kind == K_U32)
			*(uint32_t *)((char *)&next + k->off) = (uint32_t)v;
		else
			*(uint64_t *)((char *)&next + k->off) = v;
		break;
	}
	if (next.channels > next.max_channels) {
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
	switch (k->kind) {
	case K_PROTO:
		snprintf(out, outlen, "%s", proto_names[cfg->proto]);
		break;
	case K_ALGO:
		snprintf(out, outlen, "%s", algo_names[cfg->algo]);
		break;
	case K_U32:
		snprintf(out, outlen, "%u", *(const uint32_t *)((const char *)cfg + k->off));
		break;
	case K_U64:
		snprintf(out, outlen, "%" PRIu64, *(const uint64_t *)((const char *)cfg + k->off));
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
		if (keys[i].kind == K_PROTO || keys[i].kind == K_ALGO)
			n += (size_t)snprintf(out + n, outlen - n, ", \"%s\": \"%s\"", keys[i].name, v);
		else
			n += (size_t)snprintf(out + n, outlen - n, ", \"%s\": %s", keys[i].name, v);
	}
	return n < outlen ? n : outlen - 1;
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
	__atomic_fetch_add(&generation, 1, __ATOMIC_RELAXED);
	/* Freed once every reader went through a quiescent state: none still plans with it. */
	if (old)
		call_rcu(&old->rcu, cfg_free_rcu);
	return 0;
}

uint64_t cfg_generation(void)
{
	return __atomic_load_n(&generation, __ATOMIC_RELAXED);
}
