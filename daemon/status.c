/* SPDX-License-Identifier: MIT */
/*
 * Status (JSON and a human table) and Prometheus metrics, rendered on the
 * scheduler thread from its own state.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/atomics.h"
#include "daemon/config.h"
#include "daemon/sched_int.h"

struct sbuf {
	char *p;
	size_t len, cap;
	int oom;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->oom)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = 1;
			return;
		}
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = (b->cap + (size_t)n + 1) * 2;
		char *q = realloc(b->p, cap);

		if (!q) {
			b->oom = 1;
			return;
		}
		b->p = q;
		b->cap = cap;
	}
}

static char *sb_finish(struct sbuf *b, size_t *ret_len)
{
	if (b->oom) {
		free(b->p);
		return NULL;
	}
	*ret_len = b->len;
	return b->p;
}

static uint32_t clamp_depth(uint32_t tail, uint32_t head, uint32_t entries)
{
	uint32_t d = tail - head;

	return d > entries ? entries : d;
}

struct client_view {
	uint32_t sq_depth, cq_depth;
};

static struct client_view client_view(const struct sched_client *c)
{
	struct client_view v = { 0, 0 };

	if (c->gone)
		return v;
	v.sq_depth = clamp_depth(load_relaxed(&c->hdr->sq_tail), c->sq_head, c->sq_entries);
	v.cq_depth = clamp_depth(c->cq_tail, load_relaxed(&c->hdr->cq_head), c->cq_entries);
	return v;
}

/* Ranks that have not yet submitted the oldest collective some rank is waiting in. */
static uint64_t lagging_mask(const struct comm *cm)
{
	const struct slot *sl;
	uint64_t mask = 0;

	if (!cm->ready || !cm->slots)
		return 0;
	sl = &cm->slots[cm->next_launch % COMM_WINDOW];
	if (sl->seq != cm->next_launch || sl->state != SLOT_ARRIVING)
		return 0;
	for (uint32_t r = 0; r < cm->nranks; r++)
		if (!sl->ranks[r].client)
			mask |= 1ull << r;
	return mask;
}

static uint64_t consumed(const struct fifo_host *fh, uint32_t ch)
{
	return load_acquire(&fh->f->ctrl.work_consumed[ch].value);
}

static uint64_t aborted(const struct fifo_host *fh, uint32_t ch)
{
	return load_relaxed(&fh->f->ctrl.work_consumed[ch].aborted);
}

/* Items abandoned for revoked communicators, over every active device and channel. */
static uint64_t aborted_total(void)
{
	const struct exec_backend *ex = sched.exec;
	uint64_t n = 0;

	for (uint32_t d = 0; d < ex->ndevices && d < COLLC_MAX_RANKS; d++)
		if (ex->device_active(d))
			for (uint32_t ch = 0; ch < ex->max_channels; ch++)
				n += aborted(&sched.fifos[d], ch);
	return n;
}

/* The ranks of a mask, as "0<sep>3<sep>5" after prefix; nothing for an empty mask. */
static void print_ranks(struct sbuf *b, uint64_t mask, uint32_t nranks, const char *prefix,
			const char *sep)
{
	const char *s = prefix;

	for (uint32_t r = 0; r < nranks; r++)
		if (mask & (1ull << r)) {
			sb_printf(b, "%s%u", s, r);
			s = sep;
		}
}

static void render_json(struct sbuf *b, const struct collc_config *cfg)
{
	const struct exec_backend *ex = sched.exec;
	char cfgtxt[1024];
	const char *sep = "";

	cfg_to_json(cfg, cfgtxt, sizeof(cfgtxt));
	sb_printf(b, "{\"config\": {%s, \"generation\": %" PRIu64 "},\n", cfgtxt, cfg_generation());
	sb_printf(b, " \"backend\": \"%s\",\n \"clients\": [", ex->name);
	for (const struct sched_client *c = sched.clients; c; c = c->next) {
		struct client_view v = client_view(c);

		if (c->gone)
			continue;
		sb_printf(b, "%s\n  {\"id\": %u, \"pid\": %d, \"uid\": %u, \"sq_depth\": %u, "
			  "\"cq_depth\": %u, \"inflight\": %u, \"submitted\": %" PRIu64
			  ", \"completed\": %" PRIu64 ", \"errors\": %" PRIu64 ", \"bad_entries\": %" PRIu64 "}",
			  sep, c->id, (int)c->pid, (unsigned)c->uid, v.sq_depth, v.cq_depth,
			  c->outstanding, c->submitted, c->completed, c->errors, c->bad);
		sep = ",";
	}
	sb_printf(b, "],\n \"comms\": [");
	sep = "";
	for (const struct comm *cm = sched.comms; cm; cm = cm->next) {
		if (!cm->ready)
			continue;
		sb_printf(b, "%s\n  {\"id\": %" PRIu64 ", \"nranks\": %u, \"live_ranks\": %u, "
			  "\"pending\": %u, \"inflight\": %" PRIu64 ", \"completed\": %" PRIu64
			  ", \"errors\": %" PRIu64 ", \"revoked\": %d, \"revoked_inflight\": %" PRIu64
			  ", \"timeouts\": %" PRIu64 ", \"timeout_ms\": %d, \"timed_out_ranks\": [",
			  sep, cm->id, cm->nranks, cm->live, slot_pending_count(cm), cm->inflight,
			  cm->completed, cm->errors, cm->revoked, cm->revoked_inflight, cm->timeouts,
			  cm->timeout_ms == UINT32_MAX ? -1 : (int)cm->timeout_ms);
		print_ranks(b, cm->timed_out_mask, cm->nranks, "", ", ");
		sb_printf(b, "], \"lagging_ranks\": [");
		print_ranks(b, lagging_mask(cm), cm->nranks, "", ", ");
		sb_printf(b, "], \"by_algo\": {\"ring\": %" PRIu64 ", \"oneshot\": %" PRIu64
			  ", \"twoshot\": %" PRIu64 "}, \"by_proto\": {\"simple\": %" PRIu64
			  ", \"ll\": %" PRIu64 ", \"ll128\": %" PRIu64 "}}",
			  cm->by_algo[COLLC_ALGO_RING], cm->by_algo[COLLC_ALGO_ONESHOT],
			  cm->by_algo[COLLC_ALGO_TWOSHOT], cm->by_proto[COLLC_PROTO_SIMPLE],
			  cm->by_proto[COLLC_PROTO_LL], cm->by_proto[COLLC_PROTO_LL128]);
		sep = ",";
	}
	sb_printf(b, "],\n \"devices\": [");
	sep = "";
	for (uint32_t d = 0; d < ex->ndevices && d < COLLC_MAX_RANKS; d++) {
		const struct fifo_host *fh = &sched.fifos[d];
		char name[64];
		uint64_t low = fh->tail;

		if (!ex->device_active(d))
			continue;
		for (uint32_t ch = 0; ch < ex->max_channels; ch++)
			if (consumed(fh, ch) < low)
				low = consumed(fh, ch);
		ex->device_name(d, name, sizeof(name));
		sb_printf(b, "%s\n  {\"id\": %u, \"name\": \"%s\", \"backend\": \"%s\", "
			  "\"fifo_depth\": %" PRIu64 ", \"fifo_tail\": %" PRIu64 ", \"channels\": [",
			  sep, d, name, ex->name, fh->tail - low, fh->tail);
		for (uint32_t ch = 0; ch < ex->max_channels; ch++)
			sb_printf(b, "%s{\"id\": %u, \"inflight\": %" PRIu64 ", \"work_consumed\": %" PRIu64
				  ", \"aborted\": %" PRIu64 "}",
				  ch ? ", " : "", ch, fh->tail - consumed(fh, ch), consumed(fh, ch), aborted(fh, ch));
		sb_printf(b, "]}");
		sep = ",";
	}
	sb_printf(b, "],\n \"totals\": {\"submitted\": %" PRIu64 ", \"completed\": %" PRIu64
		  ", \"errors\": %" PRIu64 ", \"bad_entries\": %" PRIu64 ", \"aborted_items\": %" PRIu64
		  ", \"by_algo\": {\"ring\": %" PRIu64
		  ", \"oneshot\": %" PRIu64 ", \"twoshot\": %" PRIu64 "}, \"by_proto\": {\"simple\": %" PRIu64
		  ", \"ll\": %" PRIu64 ", \"ll128\": %" PRIu64 "}}}\n",
		  sched.submitted, sched.completed, sched.errors, sched.bad, aborted_total(),
		  sched.by_algo[COLLC_ALGO_RING], sched.by_algo[COLLC_ALGO_ONESHOT],
		  sched.by_algo[COLLC_ALGO_TWOSHOT], sched.by_proto[COLLC_PROTO_SIMPLE],
		  sched.by_proto[COLLC_PROTO_LL], sched.by_proto[COLLC_PROTO_LL128]);
}

static void render_table(struct sbuf *b, const struct collc_config *cfg)
{
	const struct exec_backend *ex = sched.exec;

	sb_printf(b, "collcd: backend %s, channels %u/%u, proto %s, algo %s\n", ex->name,
		  cfg->channels, cfg->max_channels, cfg_proto_name(cfg->proto), cfg_algo_name(cfg->algo));
	sb_printf(b, "totals: submitted %" PRIu64 ", completed %" PRIu64 ", errors %" PRIu64
		  ", bad entries %" PRIu64 ", aborted items %" PRIu64 "\n\n", sched.submitted,
		  sched.completed, sched.errors, sched.bad, aborted_total());
	sb_printf(b, "CLIENT  PID      SQ    CQ    INFLIGHT  COMPLETED   ERRORS\n");
	for (const struct sched_client *c = sched.clients; c; c = c->next) {
		struct client_view v = client_view(c);

		if (c->gone)
			continue;
		sb_printf(b, "%-7u %-8d %-5u %-5u %-9u %-11" PRIu64 " %" PRIu64 "\n", c->id,
			  (int)c->pid, v.sq_depth, v.cq_depth, c->outstanding, c->completed, c->errors);
	}
	sb_printf(b, "\nCOMM    RANKS  PENDING  INFLIGHT  COMPLETED   ERRORS  LAGGING\n");
	for (const struct comm *cm = sched.comms; cm; cm = cm->next) {
		uint64_t lag = lagging_mask(cm);

		if (!cm->ready)
			continue;
		sb_printf(b, "%-7" PRIu64 " %-6u %-8u %-9" PRIu64 " %-11" PRIu64 " %-7" PRIu64 " ",
			  cm->id, cm->nranks, slot_pending_count(cm), cm->inflight, cm->completed,
			  cm->errors);
		if (lag)
			print_ranks(b, lag, cm->nranks, "", ",");
		else if (cm->timed_out_mask)
			print_ranks(b, cm->timed_out_mask, cm->nranks, "timed out: ", ",");
		else
			sb_printf(b, "-");
		sb_printf(b, "%s\n", cm->revoked ? " (revoked)" : "");
	}
	sb_printf(b, "\nDEVICE  FIFO  CHANNEL WORK_CONSUMED (INFLIGHT)\n");
	for (uint32_t d = 0; d < ex->ndevices && d < COLLC_MAX_RANKS; d++) {
		const struct fifo_host *fh = &sched.fifos[d];
		char name[64];
		uint64_t low = fh->tail;

		if (!ex->device_active(d))
			continue;
		for (uint32_t ch = 0; ch < ex->max_channels; ch++)
			if (consumed(fh, ch) < low)
				low = consumed(fh, ch);
		ex->device_name(d, name, sizeof(name));
		sb_printf(b, "%-7s %-5" PRIu64, name, fh->tail - low);
		for (uint32_t ch = 0; ch < ex->max_channels; ch++)
			sb_printf(b, " %u:%" PRIu64 "(%" PRIu64 ")", ch, consumed(fh, ch),
				  fh->tail - consumed(fh, ch));
		sb_printf(b, "\n");
	}
}

char *status_render(const struct collc_config *cfg, uint32_t flags, size_t *ret_len)
{
	struct sbuf b = { 0 };

	if (flags & COLLC_STATUS_JSON)
		render_json(&b, cfg);
	else
		render_table(&b, cfg);
	return sb_finish(&b, ret_len);
}

static const char *const size_class[8] = { "1K", "16K", "256K", "4M", "64M", "1G", "16G", "+Inf" };

char *metrics_render(const struct collc_config *cfg, size_t *ret_len)
{
	const struct exec_backend *ex = sched.exec;
	struct sbuf b = { 0 };
	static const char *const algos[] = { "auto", "ring", "oneshot", "twoshot" };
	static const char *const protos[] = { "auto", "simple", "ll", "ll128" };

	sb_printf(&b, "# HELP collc_collectives_submitted_total Collective submissions taken.\n"
		      "# TYPE collc_collectives_submitted_total counter\n"
		      "collc_collectives_submitted_total %" PRIu64 "\n", sched.submitted);
	sb_printf(&b, "# HELP collc_collectives_completed_total Collective completions posted without error.\n"
		      "# TYPE collc_collectives_completed_total counter\n"
		      "collc_collectives_completed_total %" PRIu64 "\n", sched.completed);
	sb_printf(&b, "# HELP collc_collectives_errors_total Collective completions posted with an error.\n"
		      "# TYPE collc_collectives_errors_total counter\n"
		      "collc_collectives_errors_total %" PRIu64 "\n", sched.errors);
	sb_printf(&b, "# HELP collc_bad_entries_total Submission entries rejected as invalid.\n"
		      "# TYPE collc_bad_entries_total counter\n"
		      "collc_bad_entries_total %" PRIu64 "\n", sched.bad);
	sb_printf(&b, "# HELP collc_items_aborted_total Work items of revoked communicators abandoned in an executor.\n"
		      "# TYPE collc_items_aborted_total counter\n"
		      "collc_items_aborted_total %" PRIu64 "\n", aborted_total());
	sb_printf(&b, "# HELP collc_collectives_by_algo_total Collectives launched per algorithm.\n"
		      "# TYPE collc_collectives_by_algo_total counter\n");
	for (int a = 1; a < COLLC_ALGO_MAX; a++)
		sb_printf(&b, "collc_collectives_by_algo_total{algo=\"%s\"} %" PRIu64 "\n", algos[a],
			  sched.by_algo[a]);
	sb_printf(&b, "# HELP collc_collectives_by_proto_total Collectives launched per protocol.\n"
		      "# TYPE collc_collectives_by_proto_total counter\n");
	for (int p = 1; p < COLLC_PROTO_MAX; p++)
		sb_printf(&b, "collc_collectives_by_proto_total{proto=\"%s\"} %" PRIu64 "\n", protos[p],
			  sched.by_proto[p]);
	sb_printf(&b, "# HELP collc_client_sq_depth Submissions waiting in a client's ring.\n"
		      "# TYPE collc_client_sq_depth gauge\n");
	for (const struct sched_client *c = sched.clients; c; c = c->next)
		if (!c->gone)
			sb_printf(&b, "collc_client_sq_depth{client=\"%u\",pid=\"%d\"} %u\n", c->id,
				  (int)c->pid, client_view(c).sq_depth);
	sb_printf(&b, "# HELP collc_client_cq_depth Completions a client has not reaped.\n"
		      "# TYPE collc_client_cq_depth gauge\n");
	for (const struct sched_client *c = sched.clients; c; c = c->next)
		if (!c->gone)
			sb_printf(&b, "collc_client_cq_depth{client=\"%u\",pid=\"%d\"} %u\n", c->id,
				  (int)c->pid, client_view(c).cq_depth);
	sb_printf(&b, "# HELP collc_client_inflight Collectives a client submitted that have not completed.\n"
		      "# TYPE collc_client_inflight gauge\n");
	for (const struct sched_client *c = sched.clients; c; c = c->next)
		if (!c->gone)
			sb_printf(&b, "collc_client_inflight{client=\"%u\",pid=\"%d\"} %u\n", c->id,
				  (int)c->pid, c->outstanding);
	sb_printf(&b, "# HELP collc_comm_pending Collectives of a communicator waiting for ranks.\n"
		      "# TYPE collc_comm_pending gauge\n");
	for (const struct comm *cm = sched.comms; cm; cm = cm->next)
		if (cm->ready)
			sb_printf(&b, "collc_comm_pending{comm=\"%" PRIu64 "\"} %u\n", cm->id,
				  slot_pending_count(cm));
	sb_printf(&b, "# HELP collc_comm_inflight Collectives of a communicator in the executors.\n"
		      "# TYPE collc_comm_inflight gauge\n");
	for (const struct comm *cm = sched.comms; cm; cm = cm->next)
		if (cm->ready)
			sb_printf(&b, "collc_comm_inflight{comm=\"%" PRIu64 "\"} %" PRIu64 "\n", cm->id,
				  cm->inflight);
	sb_printf(&b, "# HELP collc_channel_inflight Work items queued for a device channel.\n"
		      "# TYPE collc_channel_inflight gauge\n");
	for (uint32_t d = 0; d < ex->ndevices && d < COLLC_MAX_RANKS; d++) {
		char name[64];

		if (!ex->device_active(d))
			continue;
		ex->device_name(d, name, sizeof(name));
		for (uint32_t ch = 0; ch < ex->max_channels; ch++)
			sb_printf(&b, "collc_channel_inflight{device=\"%s\",channel=\"%u\"} %" PRIu64 "\n",
				  name, ch, sched.fifos[d].tail - consumed(&sched.fifos[d], ch));
	}
	sb_printf(&b, "# HELP collc_collective_latency_seconds Time from the last rank's submission to completion.\n"
		      "# TYPE collc_collective_latency_seconds histogram\n");
	for (int cls = 0; cls < 8; cls++) {
		uint64_t cum = 0;

		if (!sched.lat_count[cls])
			continue;
		for (int bk = 0; bk < 16; bk++) {
			cum += sched.lat_buckets[cls][bk];
			/* Bucket bk holds latencies below 2^bk microseconds. */
			sb_printf(&b, "collc_collective_latency_seconds_bucket{size=\"%s\",le=\"%g\"} %" PRIu64 "\n",
				  size_class[cls], (double)(1u << bk) * 1e-6, cum);
		}
		sb_printf(&b, "collc_collective_latency_seconds_bucket{size=\"%s\",le=\"+Inf\"} %" PRIu64 "\n",
			  size_class[cls], sched.lat_count[cls]);
		sb_printf(&b, "collc_collective_latency_seconds_sum{size=\"%s\"} %.9f\n", size_class[cls],
			  (double)sched.lat_sum_ns[cls] * 1e-9);
		sb_printf(&b, "collc_collective_latency_seconds_count{size=\"%s\"} %" PRIu64 "\n",
			  size_class[cls], sched.lat_count[cls]);
	}
	(void)cfg;
	return sb_finish(&b, ret_len);
}
