/* SPDX-License-Identifier: MIT */
/*
 * Admin verbs: get and set of config keys (RCU: a new snapshot is published,
 * never changed in place), reload of the config file, and the status and
 * metrics texts the scheduler rendered.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <urcu-qsbr.h>

#include "common/atomics.h"
#include "daemon/config.h"
#include "daemon/ctl_int.h"
#include "daemon/exec.h"
#include "daemon/log.h"

void ctl_done_text(struct sched_cmd *cmd)
{
	struct cmd_ctx *c;
	struct session *s = ctl_cmd_end(cmd, &c);

	if (s) {
		if (cmd->result < 0)
			ctl_reply_status(s, c->type, c->id, cmd->result);
		else
			ctl_reply_text(s, c->type, c->id, 0, cmd->u.status.text, cmd->u.status.len);
	}
	free(cmd->u.status.text);
	free(c);
}

/*
 * The control thread is an RCU reader only around these: it goes online, takes
 * a copy of (or publishes) the config, reports its quiescent state, and goes
 * offline again, so the libuv loop never holds up a grace period.
 */
static struct collc_config config_now(void)
{
	struct collc_config c;

	rcu_thread_online();
	c = *cfg_get();
	cfg_reader_quiescent();
	rcu_thread_offline();
	return c;
}

static int config_publish(const struct collc_config *next)
{
	int r;

	rcu_thread_online();
	r = cfg_publish(next);
	cfg_reader_quiescent();
	rcu_thread_offline();
	return r;
}

void ctl_handle_get(struct session *s, const struct collc_msg_hdr *h, const char *payload)
{
	const struct collc_config now = config_now(), *cfg = &now;
	char key[64], val[128];
	int r;

	memcpy(key, payload, h->length);
	key[h->length] = '\0';
	r = cfg_get_key(cfg, key, val, sizeof(val));
	/* auto: say what each executor makes of it ("auto (cpu 2, cuda 32)"). */
	if (r == 0 && cfg_key_is_auto(cfg, key)) {
		size_t n = strlen(val);
		char one[64];

		for (uint32_t e = 0; e < exec_count(); e++) {
			const struct exec_backend *ex = exec_get(e);
			struct collc_config eff;

			cfg_resolve(cfg, &ex->defaults, ex->max_channels, &eff);
			cfg_get_key(&eff, key, one, sizeof(one));
			n += (size_t)snprintf(val + n, sizeof(val) - n, "%s%s %s", e ? ", " : " (",
					      ex->name, one);
			if (n >= sizeof(val))
				break;
		}
		if (n < sizeof(val) && exec_count())
			snprintf(val + n, sizeof(val) - n, ")");
	}
	if (r < 0) {
		snprintf(val, sizeof(val), "unknown key '%s'", key);
		ctl_reply_text(s, h->type, h->id, r, val, strlen(val));
		return;
	}
	ctl_reply_text(s, h->type, h->id, 0, val, strlen(val));
}

int ctl_set(const char *words, char *err, size_t errlen)
{
	struct collc_config next, cur;
	const char *fixed;
	char buf[1024], *save = NULL, *w;
	int r = 0;

	if (strlen(words) >= sizeof(buf)) {
		snprintf(err, errlen, "request too long");
		return -EINVAL;
	}
	snprintf(buf, sizeof(buf), "%s", words);
	next = config_now();
	cur = next;
	/* All words apply, or none: the old config stays on any error. */
	for (w = strtok_r(buf, " \t\n", &save); w && r == 0; w = strtok_r(NULL, " \t\n", &save))
		r = cfg_apply_kv(&next, w, err, errlen);
	if (r < 0)
		return r;
	if ((fixed = cfg_fixed_changed(&cur, &next))) {
		snprintf(
			err, errlen,
			"%s is fixed at start: set it in the config file or with --set and restart collcd",
			fixed);
		return -EINVAL;
	}
	r = config_publish(&next);
	if (r == 0)
		snprintf(err, errlen, "ok");
	return r;
}

int ctl_reload(void)
{
	struct collc_config next, cur;
	const char *fixed;
	char err[256];
	int r;

	if (!ctl_params.config_path)
		return 0;
	next = config_now();
	cur = next;
	r = cfg_apply_file(&next, ctl_params.config_path, err, sizeof(err));
	if (r < 0) {
		log_err("reload: %s", err);
		return r;
	}
	if ((fixed = cfg_fixed_changed(&cur, &next))) {
		log_err("reload: %s is fixed at start: restart collcd to change it; config unchanged",
			fixed);
		return -EINVAL;
	}
	r = config_publish(&next);
	log_info("reloaded %s", ctl_params.config_path);
	return r;
}

void ctl_handle_set(struct session *s, const struct collc_msg_hdr *h, const char *payload)
{
	char words[1024], msg[256];
	int r;

	if (!s->admin) {
		snprintf(msg, sizeof(msg), "permission denied: set needs root or the admin socket");
		ctl_reply_text(s, h->type, h->id, -EPERM, msg, strlen(msg));
		return;
	}
	memcpy(words, payload, h->length);
	words[h->length] = '\0';
	r = ctl_set(words, msg, sizeof(msg));
	if (r == 0)
		log_info("set %s", words);
	ctl_reply_text(s, h->type, h->id, r, msg, strlen(msg));
}
