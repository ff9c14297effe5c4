/* SPDX-License-Identifier: MIT */
/*
 * Status (JSON and a human table) and Prometheus metrics, rendered from the
 * scheduler's snapshot (status.h).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/config.h"
#include "daemon/node.h"
#include "daemon/status.h"

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

/* "cpu", or "cpu+cuda" when several executors run. */
static void print_backends(struct sbuf *b, const struct status_snapshot *s)
{
	for (uint32_t e = 0; e < s->nexecs; e++)
		sb_printf(b, "%s%s", e ? "+" : "", s->execs[e].name);
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

/* status.h NET_PHASE_*, as status and metrics name them. */
static const char *const net_phase_name[NET_PHASES] = { "agree", "to_launch", "run", "alldone" };

/* A comm's or the totals' launch counts, as JSON members. */
static const char *const op_names[COLLC_OP_MAX] = {
	"nop",    "allreduce", "allgather", "reduce_scatter", "broadcast",
	"reduce", "alltoall",  "alltoallv", "send",           "recv",
};
_Static_assert(COLLC_OP_MAX == 10, "op_names follows COLLC_OP_*");

static void print_by_op(struct sbuf *b, const uint64_t *by_op)
{
	sb_printf(b, ", \"by_op\": {");
	for (uint32_t o = 1; o < COLLC_OP_MAX; o++)
		sb_printf(b, "%s\"%s\": %" PRIu64, o > 1 ? ", " : "", op_names[o], by_op[o]);
	sb_printf(b, "}");
}

static void print_by_algo_proto(struct sbuf *b, const uint64_t *by_algo, const uint64_t *by_proto)
{
	sb_printf(b,
		  "\"by_algo\": {\"ring\": %" PRIu64 ", \"oneshot\": %" PRIu64
		  ", \"twoshot\": %" PRIu64 ", \"hier\": %" PRIu64
		  "}, \"by_proto\": {\"simple\": %" PRIu64 ", \"ll\": %" PRIu64
		  ", \"ll128\": %" PRIu64 "}",
		  by_algo[COLLC_ALGO_RING], by_algo[COLLC_ALGO_ONESHOT],
		  by_algo[COLLC_ALGO_TWOSHOT], by_algo[COLLC_ALGO_HIER],
		  by_proto[COLLC_PROTO_SIMPLE], by_proto[COLLC_PROTO_LL],
		  by_proto[COLLC_PROTO_LL128]);
}

/* The node layer's own report (other daemons), rendered under its lock. */
static void print_net(struct sbuf *b, int json)
{
	size_t len = 64 << 10;
	char *t = malloc(len);

	if (!t) {
		sb_printf(b, json ? "{}" : "");
		return;
	}
	node_status(t, len, json);
	sb_printf(b, "%s", t);
	free(t);
}

static void render_json(struct sbuf *b, const struct status_snapshot *s)
{
	/* The config's numbers are the first executor's; "executors" has each one's. */
	const struct collc_config *shown = s->nexecs ? &s->execs[0].cfg : s->cfg;
	char cfgtxt[2048];
	const char *sep = "";

	cfg_to_json(shown, cfgtxt, sizeof(cfgtxt));
	sb_printf(b, "{\"config\": {%s, \"generation\": %" PRIu64 ", \"auto\": [", cfgtxt,
		  s->generation);
	for (const char *const *k = cfg_auto_keys; *k; k++)
		if (cfg_key_is_auto(s->cfg, *k)) {
			sb_printf(b, "%s\"%s\"", sep, *k);
			sep = ", ";
		}
	sb_printf(b, "]},\n \"backend\": \"");
	print_backends(b, s);
	sb_printf(b, "\",\n \"executors\": [");
	for (uint32_t e = 0; e < s->nexecs; e++) {
		const struct status_exec *x = &s->execs[e];

		sb_printf(b,
			  "%s\n  {\"name\": \"%s\", \"devices\": %u, \"max_channels\": %u, "
			  "\"channels\": %u, \"channel_min_bytes\": %" PRIu64
			  ", \"oneshot_ll_max_bytes\": %" PRIu64 ", \"oneshot_max_bytes\": %" PRIu64
			  ", \"twoshot_max_bytes\": %" PRIu64
			  ", \"rotate_channels\": %u, \"copy_push\": %u}",
			  e ? "," : "", x->name, x->ndevices, x->max_channels, x->cfg.channels,
			  x->cfg.channel_min_bytes, x->cfg.oneshot_ll_max_bytes,
			  x->cfg.oneshot_max_bytes, x->cfg.twoshot_max_bytes,
			  x->cfg.rotate_channels, x->cfg.copy_push);
	}
	sb_printf(b, "],\n \"clients\": [");
	for (uint32_t i = 0; i < s->nclients; i++) {
		const struct status_client *c = &s->clients[i];

		sb_printf(b,
			  "%s\n  {\"id\": %u, \"pid\": %d, \"uid\": %u, \"sq_depth\": %u, "
			  "\"cq_depth\": %u, \"inflight\": %u, \"submitted\": %" PRIu64
			  ", \"completed\": %" PRIu64 ", \"errors\": %" PRIu64
			  ", \"bad_entries\": %" PRIu64 "}",
			  i ? "," : "", c->id, (int)c->pid, (unsigned)c->uid, c->sq_depth,
			  c->cq_depth, c->inflight, c->submitted, c->completed, c->errors, c->bad);
	}
	sb_printf(b, "],\n \"comms\": [");
	for (uint32_t i = 0; i < s->ncomms; i++) {
		const struct status_comm *cm = &s->comms[i];

		sb_printf(b,
			  "%s\n  {\"id\": %" PRIu64
			  ", \"backend\": \"%s\", \"nranks\": %u, \"live_ranks\": %u, "
			  "\"pending\": %u, \"inflight\": %" PRIu64 ", \"completed\": %" PRIu64
			  ", \"errors\": %" PRIu64
			  ", \"revoked\": %d, \"revoked_inflight\": %" PRIu64
			  ", \"timeouts\": %" PRIu64 ", \"timeout_ms\": %d, \"timed_out_ranks\": [",
			  i ? "," : "", cm->id, cm->backend, cm->nranks, cm->live, cm->pending,
			  cm->inflight, cm->completed, cm->errors, cm->revoked,
			  cm->revoked_inflight, cm->timeouts, cm->timeout_ms);
		print_ranks(b, cm->timed_out_mask, cm->nranks, "", ", ");
		sb_printf(b, "], \"lagging_ranks\": [");
		print_ranks(b, cm->lagging_mask, cm->nranks, "", ", ");
		sb_printf(b, "], ");
		print_by_algo_proto(b, cm->by_algo, cm->by_proto);
		sb_printf(b, "}");
	}
	sb_printf(b, "],\n \"forming\": [");
	for (uint32_t i = 0; i < s->nforming; i++) {
		const struct status_forming *f = &s->forming[i];

		sb_printf(b,
			  "%s\n  {\"id\": %" PRIu64
			  ", \"nranks\": %u, \"joined\": %u, \"joined_ranks\": [",
			  i ? "," : "", f->id, f->nranks, f->joined);
		print_ranks(b, f->joined_mask, f->nranks, "", ", ");
		sb_printf(b, "], \"waiting_ms\": %" PRIu64 ", \"across_daemons\": %s}",
			  f->waiting_ns / 1000000, f->net ? "true" : "false");
	}
	sb_printf(b, "],\n \"devices\": [");
	for (uint32_t i = 0; i < s->ndevices; i++) {
		const struct status_device *d = &s->devices[i];

		sb_printf(b,
			  "%s\n  {\"id\": %u, \"name\": \"%s\", \"backend\": \"%s\", "
			  "\"fifo_depth\": %" PRIu64 ", \"fifo_tail\": %" PRIu64
			  ", \"channels\": [",
			  i ? "," : "", d->id, d->name, d->backend, d->depth, d->tail);
		for (uint32_t ch = 0; ch < d->nchannels; ch++)
			sb_printf(b,
				  "%s{\"id\": %u, \"inflight\": %" PRIu64
				  ", \"work_consumed\": %" PRIu64 ", \"aborted\": %" PRIu64 "}",
				  ch ? ", " : "", ch, d->inflight[ch], d->consumed[ch],
				  d->aborted[ch]);
		sb_printf(b, "]}");
	}
	sb_printf(b,
		  "],\n \"totals\": {\"submitted\": %" PRIu64 ", \"completed\": %" PRIu64
		  ", \"errors\": %" PRIu64 ", \"bad_entries\": %" PRIu64
		  ", \"aborted_items\": %" PRIu64 ", \"batches\": %" PRIu64
		  ", \"batch_items\": %" PRIu64 ", \"stream_collectives\": %" PRIu64
		  ", \"graph_firings\": %" PRIu64 ", \"stream_gate_open_to_end_ns\": %" PRIu64
		  ", \"gated\": {\"handed\": %" PRIu64 ", \"fired\": %" PRIu64
		  ", \"skipped\": %" PRIu64 "}"
		  ", \"done_word_items\": %" PRIu64 ", \"done_word_map_failures\": %" PRIu64
		  ", \"net_eager_staged\": %" PRIu64
		  ", \"net_phases_ns\": {\"collectives\": %" PRIu64,
		  s->submitted, s->completed, s->errors, s->bad, s->aborted, s->batches,
		  s->batch_items, s->stream_colls, s->graph_fires, s->gate_ns, s->gated_items,
		  s->gated_fired, s->gated_skipped, s->done_items, s->done_map_failures,
		  s->net_eager_staged, s->net_phase_n);
	for (int p = 0; p < NET_PHASES; p++)
		sb_printf(b, ", \"%s\": %" PRIu64, net_phase_name[p], s->net_phase_ns[p]);
	sb_printf(b, "}, ");
	print_by_algo_proto(b, s->by_algo, s->by_proto);
	print_by_op(b, s->by_op);
	sb_printf(b, "},\n \"net\": ");
	print_net(b, 1);
	sb_printf(b, "}\n");
}

static void render_table(struct sbuf *b, const struct status_snapshot *s)
{
	sb_printf(b, "collcd: backend ");
	print_backends(b, s);
	sb_printf(b, ", channels ");
	/* Each executor's own count when several run (auto keys differ between them). */
	for (uint32_t e = 0; e < s->nexecs; e++)
		sb_printf(b, "%s%s%s%u/%u", e ? " " : "", s->nexecs > 1 ? s->execs[e].name : "",
			  s->nexecs > 1 ? " " : "", s->execs[e].cfg.channels,
			  s->execs[e].max_channels);
	sb_printf(b, "%s, proto %s, algo %s\n",
		  cfg_key_is_auto(s->cfg, "channels") ? " (auto)" : "",
		  cfg_proto_name(s->cfg->proto), cfg_algo_name(s->cfg->algo));
	sb_printf(
		b,
		"totals: submitted %" PRIu64 ", completed %" PRIu64 ", errors %" PRIu64
		", bad entries %" PRIu64 ", aborted items %" PRIu64 "\n"
		"work batches: %" PRIu64 ", %.2f items each\n"
		"stream-ordered: %" PRIu64 " collectives (%" PRIu64
		" graph firings), %.2f us from gates open to end; gated in the executors: %" PRIu64
		" (%" PRIu64 " fired there, %" PRIu64 " skipped)\n"
		"done words: %" PRIu64 " items named one, %" PRIu64 " clients unmapped\n",
		s->submitted, s->completed, s->errors, s->bad, s->aborted, s->batches,
		s->batches ? (double)s->batch_items / (double)s->batches : 0.0, s->stream_colls,
		s->graph_fires,
		s->stream_colls ? (double)s->gate_ns / 1000.0 / (double)s->stream_colls : 0.0,
		s->gated_items, s->gated_fired, s->gated_skipped, s->done_items,
		s->done_map_failures);
	if (s->net_eager_staged)
		sb_printf(b, "eager across daemons with GPU buffers staged: %" PRIu64 "\n",
			  s->net_eager_staged);
	if (s->net_phase_n) {
		sb_printf(b, "ring collectives across daemons: %" PRIu64 ", us each (mean):",
			  s->net_phase_n);
		for (int p = 0; p < NET_PHASES; p++)
			sb_printf(b, " %s %.1f", net_phase_name[p],
				  (double)s->net_phase_ns[p] / 1000.0 / (double)s->net_phase_n);
		sb_printf(b, "\n");
	}
	print_net(b, 0);
	sb_printf(b, "\n");
	sb_printf(b, "CLIENT  PID      SQ    CQ    INFLIGHT  COMPLETED   ERRORS\n");
	for (uint32_t i = 0; i < s->nclients; i++) {
		const struct status_client *c = &s->clients[i];

		sb_printf(b, "%-7u %-8d %-5u %-5u %-9u %-11" PRIu64 " %" PRIu64 "\n", c->id,
			  (int)c->pid, c->sq_depth, c->cq_depth, c->inflight, c->completed,
			  c->errors);
	}
	sb_printf(b, "\nCOMM    RANKS  PENDING  INFLIGHT  COMPLETED   ERRORS  LAGGING\n");
	for (uint32_t i = 0; i < s->ncomms; i++) {
		const struct status_comm *cm = &s->comms[i];

		sb_printf(b, "%-7" PRIu64 " %-6u %-8u %-9" PRIu64 " %-11" PRIu64 " %-7" PRIu64 " ",
			  cm->id, cm->nranks, cm->pending, cm->inflight, cm->completed, cm->errors);
		if (cm->lagging_mask)
			print_ranks(b, cm->lagging_mask, cm->nranks, "", ",");
		else if (cm->timed_out_mask)
			print_ranks(b, cm->timed_out_mask, cm->nranks, "timed out: ", ",");
		else
			sb_printf(b, "-");
		sb_printf(b, "%s\n", cm->revoked ? " (revoked)" : "");
	}
	for (uint32_t i = 0; i < s->nforming; i++) {
		const struct status_forming *f = &s->forming[i];

		sb_printf(b, "%-7" PRIu64 " %-6u forming: %u joined here", f->id, f->nranks,
			  f->joined);
		print_ranks(b, f->joined_mask, f->nranks, " (ranks ", ",");
		sb_printf(b, "%s%s, waiting %.1f s\n", f->joined_mask ? ")" : "",
			  f->net ? ", across daemons" : "", (double)f->waiting_ns / 1e9);
	}
	sb_printf(b, "\nDEVICE  FIFO  CHANNEL WORK_CONSUMED (INFLIGHT)\n");
	for (uint32_t i = 0; i < s->ndevices; i++) {
		const struct status_device *d = &s->devices[i];

		sb_printf(b, "%-7s %-5" PRIu64, d->name, d->depth);
		for (uint32_t ch = 0; ch < d->nchannels; ch++)
			sb_printf(b, " %u:%" PRIu64 "(%" PRIu64 ")", ch, d->consumed[ch],
				  d->inflight[ch]);
		sb_printf(b, "\n");
	}
}

char *status_render(const struct status_snapshot *s, uint32_t flags, size_t *ret_len)
{
	struct sbuf b = { 0 };

	if (flags & COLLC_STATUS_JSON)
		render_json(&b, s);
	else
		render_table(&b, s);
	return sb_finish(&b, ret_len);
}

static const char *const size_class[8] = { "1K", "16K", "256K", "4M", "64M", "1G", "16G", "+Inf" };

/* A metric's HELP and TYPE lines (Prometheus text format). */
static void metric_head(struct sbuf *b, const char *name, const char *type, const char *help)
{
	sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A counter with no labels. */
static void metric_total(struct sbuf *b, const char *name, const char *help, uint64_t value)
{
	metric_head(b, name, "counter", help);
	sb_printf(b, "%s %" PRIu64 "\n", name, value);
}

/* The per-client gauges: a uint32_t of struct status_client each. */
struct client_gauge {
	const char *name, *help;
	size_t off;
};

static const struct client_gauge client_gauges[] = {
	{ "collc_client_sq_depth", "Submissions waiting in a client's ring.",
	  offsetof(struct status_client, sq_depth) },
	{ "collc_client_cq_depth", "Completions a client has not reaped.",
	  offsetof(struct status_client, cq_depth) },
	{ "collc_client_inflight", "Collectives a client submitted that have not completed.",
	  offsetof(struct status_client, inflight) },
};

char *metrics_render(const struct status_snapshot *s, size_t *ret_len)
{
	struct sbuf b = { 0 };

	metric_total(&b, "collc_collectives_submitted_total", "Collective submissions taken.",
		     s->submitted);
	metric_total(&b, "collc_collectives_completed_total",
		     "Collective completions posted without error.", s->completed);
	metric_total(&b, "collc_collectives_errors_total",
		     "Collective completions posted with an error.", s->errors);
	metric_total(&b, "collc_bad_entries_total", "Submission entries rejected as invalid.",
		     s->bad);
	metric_total(&b, "collc_work_batches_total",
		     "Work batches published to the executors' FIFOs.", s->batches);
	metric_total(&b, "collc_work_batch_items_total", "Work items those batches held.",
		     s->batch_items);
	metric_total(&b, "collc_stream_collectives_total",
		     "Stream-ordered collectives finished (graph firings included).",
		     s->stream_colls);
	metric_total(&b, "collc_graph_firings_total", "Collectives fired by graph replays.",
		     s->graph_fires);
	metric_total(
		&b, "collc_gated_collectives_total",
		"Stream collectives handed to the executors before their streams reached them.",
		s->gated_items);
	metric_total(&b, "collc_gated_fired_total",
		     "Gated collectives the executors fired on their streams' go.", s->gated_fired);
	metric_total(&b, "collc_gated_skipped_total",
		     "Gated collectives skipped for other work and started by the scheduler.",
		     s->gated_skipped);
	metric_total(&b, "collc_done_word_items_total",
		     "Work items that named their rank's done word (proto/shm.h).", s->done_items);
	metric_total(&b, "collc_done_word_map_failures_total",
		     "Clients whose done words an executor could not map.", s->done_map_failures);
	metric_total(&b, "collc_net_eager_staged_total",
		     "Eager collectives across daemons whose GPU buffers here were staged through "
		     "host memory.",
		     s->net_eager_staged);
	metric_total(&b, "collc_stream_gate_open_to_end_microseconds_total",
		     "Time from every rank's gate open to the end, summed over stream collectives.",
		     s->gate_ns / 1000);
	metric_total(&b, "collc_net_ring_collectives_total",
		     "Ring collectives across daemons that ran to the root's word that every "
		     "daemon ran them (their phases: collc_net_phase_seconds_total).",
		     s->net_phase_n);
	metric_head(&b, "collc_net_phase_seconds_total", "counter",
		    "Time those collectives spent in each phase: agree (asked the root -> GO), "
		    "to_launch (GO -> handed to the executor), run (-> ran here, the ranks end), "
		    "alldone (-> every daemon ran it).");
	for (int p = 0; p < NET_PHASES; p++)
		sb_printf(&b, "collc_net_phase_seconds_total{phase=\"%s\"} %.9f\n",
			  net_phase_name[p], (double)s->net_phase_ns[p] * 1e-9);
	{
		struct node_counters nct;

		node_counters(&nct);
		if (nct.running) {
			metric_total(&b, "collc_net_handshakes_accepted_total",
				     "Daemon handshakes accepted (collcd --listen).", nct.accepted);
			metric_total(&b, "collc_net_handshakes_refused_total",
				     "Daemon connections refused: garbage, wrong secret, replay, "
				     "timeout.",
				     nct.refused);
			metric_total(&b, "collc_net_bytes_sent_total",
				     "Bytes sent to other daemons (control and data).",
				     nct.bytes_sent);
			metric_total(&b, "collc_net_bytes_received_total",
				     "Bytes received from other daemons (control and data).",
				     nct.bytes_received);
			metric_total(&b, "collc_net_eager_total",
				     "Collectives that ran eagerly on this daemon (their inputs "
				     "travelled with the agreement, no ring ran).",
				     nct.eager);
			metric_total(
				&b, "collc_net_eager_landed_total",
				"Eager collectives between two daemons whose other daemon's "
				"inputs were received straight into the ranks' result buffers.",
				nct.eager_landed);
			metric_total(&b, "collc_net_early_ends_total",
				     "Ring collectives across daemons that ended on their ranks "
				     "here as soon as they ran here, before every daemon had.",
				     nct.early_ends);
		}
	}
	metric_total(&b, "collc_items_aborted_total",
		     "Work items of revoked communicators abandoned in an executor.", s->aborted);
	metric_head(&b, "collc_collectives_by_algo_total", "counter",
		    "Collectives launched per algorithm.");
	for (uint32_t a = 1; a < COLLC_ALGO_MAX; a++)
		sb_printf(&b, "collc_collectives_by_algo_total{algo=\"%s\"} %" PRIu64 "\n",
			  cfg_algo_name(a), s->by_algo[a]);
	metric_head(&b, "collc_collectives_by_proto_total", "counter",
		    "Collectives launched per protocol.");
	for (uint32_t p = 1; p < COLLC_PROTO_MAX; p++)
		sb_printf(&b, "collc_collectives_by_proto_total{proto=\"%s\"} %" PRIu64 "\n",
			  cfg_proto_name(p), s->by_proto[p]);
	metric_head(&b, "collc_collectives_by_op_total", "counter",
		    "Collectives launched per operation (a matched send/recv counts in both).");
	for (uint32_t o = 1; o < COLLC_OP_MAX; o++)
		sb_printf(&b, "collc_collectives_by_op_total{op=\"%s\"} %" PRIu64 "\n", op_names[o],
			  s->by_op[o]);
	for (size_t g = 0; g < sizeof(client_gauges) / sizeof(client_gauges[0]); g++) {
		const struct client_gauge *cg = &client_gauges[g];

		metric_head(&b, cg->name, "gauge", cg->help);
		for (uint32_t i = 0; i < s->nclients; i++)
			sb_printf(&b, "%s{client=\"%u\",pid=\"%d\"} %u\n", cg->name,
				  s->clients[i].id, (int)s->clients[i].pid,
				  *(const uint32_t *)((const char *)&s->clients[i] + cg->off));
	}
	metric_head(&b, "collc_comm_pending", "gauge",
		    "Collectives of a communicator waiting for ranks.");
	for (uint32_t i = 0; i < s->ncomms; i++)
		sb_printf(&b, "collc_comm_pending{comm=\"%" PRIu64 "\"} %u\n", s->comms[i].id,
			  s->comms[i].pending);
	metric_head(&b, "collc_comms_forming", "gauge",
		    "Communicators still gathering their ranks (collc_comm_init waits).");
	sb_printf(&b, "collc_comms_forming %u\n", s->nforming);
	metric_head(&b, "collc_comm_inflight", "gauge",
		    "Collectives of a communicator in the executors.");
	for (uint32_t i = 0; i < s->ncomms; i++)
		sb_printf(&b, "collc_comm_inflight{comm=\"%" PRIu64 "\"} %" PRIu64 "\n",
			  s->comms[i].id, s->comms[i].inflight);
	metric_head(&b, "collc_channel_inflight", "gauge",
		    "Work items queued for a device channel.");
	for (uint32_t i = 0; i < s->ndevices; i++) {
		const struct status_device *d = &s->devices[i];

		for (uint32_t ch = 0; ch < d->nchannels; ch++)
			sb_printf(
				&b,
				"collc_channel_inflight{device=\"%s\",backend=\"%s\",channel=\"%u\"} %" PRIu64
				"\n",
				d->name, d->backend, ch, d->inflight[ch]);
	}
	metric_head(&b, "collc_collective_latency_seconds", "histogram",
		    "Time from the last rank's submission to completion.");
	for (int cls = 0; cls < 8; cls++) {
		uint64_t cum = 0;

		if (!s->lat_count[cls])
			continue;
		for (int bk = 0; bk < 16; bk++) {
			cum += s->lat_buckets[cls][bk];
			/* Bucket bk holds latencies below 2^bk microseconds. */
			sb_printf(
				&b,
				"collc_collective_latency_seconds_bucket{size=\"%s\",le=\"%g\"} %" PRIu64
				"\n",
				size_class[cls], (double)(1u << bk) * 1e-6, cum);
		}
		sb_printf(
			&b,
			"collc_collective_latency_seconds_bucket{size=\"%s\",le=\"+Inf\"} %" PRIu64
			"\n",
			size_class[cls], s->lat_count[cls]);
		sb_printf(&b, "collc_collective_latency_seconds_sum{size=\"%s\"} %.9f\n",
			  size_class[cls], (double)s->lat_sum_ns[cls] * 1e-9);
		sb_printf(&b, "collc_collective_latency_seconds_count{size=\"%s\"} %" PRIu64 "\n",
			  size_class[cls], s->lat_count[cls]);
	}
	return sb_finish(&b, ret_len);
}
