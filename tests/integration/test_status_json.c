/* SPDX-License-Identifier: MIT */
/*
 * `collcctl status --json` during traffic. Two ranks run all-reduces
 * (pipelined, mixed sizes) on communicator A while, on communicator B,
 * rank 0 has submitted an all-reduce that rank 1 holds back. Meanwhile the
 * test runs collcctl status --json 25 times and checks each output:
 *  - strict JSON (our parser; and Python's json module, when /usr/bin/python3 exists);
 *  - the status contract's keys (collcctl(8)) with the right types: config {channels, proto, algo},
 *    clients[] {pid, sq_depth, cq_depth, inflight}, comms[] {id, nranks,
 *    pending, inflight, completed, lagging_ranks[]}, forming[] {id, nranks,
 *    joined, joined_ranks[], waiting_ms, across_daemons}, devices[] {name, backend,
 *    fifo_depth, channels[] {id, inflight, work_consumed}}, totals
 *    {submitted, completed, errors, batches, batch_items};
 *  - the values: both rank pids among the clients, communicator B pending
 *    with lagging_ranks [1], totals moving forward, completed <= submitted.
 * After the ranks finish, totals.completed equals the completions the ranks
 * saw, totals.errors is 0, and totals.batch_items counts one work item per
 * submission. collcctl status (table) and metrics work too.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "json.h"

#define NRANKS    2
#define DEPTH     16
#define SNAPSHOTS 25

struct shared {
	struct h_barrier bar;
	int ready;        /* ranks that have both communicators and B's first collective out */
	int stop;         /* parent: stop the traffic */
	int release_b;    /* parent: rank 1 may now submit B's all-reduce */
	uint64_t stop_at; /* rank 0: the iteration both ranks stop at */
	uint64_t completed[NRANKS];
	pid_t pid[NRANKS];
};
static struct shared *sh;
static struct collc_unique_id uid_a, uid_b;

static int rank_main(int rank, int nranks, void *arg)
{
	struct collc_ctx *ctx;
	struct collc_comm *a, *b;
	collc_req req[DEPTH], req_b = 0;
	uint64_t n = 0, it = 0;
	float *buf, *bb;
	int r;

	(void)arg;
	sh->pid[rank] = getpid();
	r = collc_connect(h_sock, &ctx);
	if (r == 0)
		r = collc_comm_init(ctx, &uid_a, nranks, rank, -1, &a);
	if (r == 0)
		r = collc_comm_init(ctx, &uid_b, nranks, rank, -1, &b);
	if (r == 0)
		r = collc_mem_alloc(ctx, (size_t)DEPTH * 65536 * 4, -1, (void **)&buf);
	if (r == 0)
		r = collc_mem_alloc(ctx, 4096, -1, (void **)&bb);
	if (r < 0)
		return h_fail("rank %d: setup: %s", rank, collc_strerror(r));
	for (int i = 0; i < 1024; i++)
		bb[i] = 1;
	if (rank == 0) {
		r = collc_allreduce(b, bb, bb, 1024, COLLC_FLOAT32, COLLC_SUM, &req_b);
		if (r < 0)
			return h_fail("rank 0: all-reduce on B: %s", collc_strerror(r));
	}
	__atomic_add_fetch(&sh->ready, 1, __ATOMIC_SEQ_CST);
	for (;;) {
		size_t count = (it % 7 == 0) ? 65536 : 1 + it % 1000;
		int s = (int)(it % DEPTH);
		uint64_t at;

		/*
		 * Both ranks must submit the same number of all-reduces: rank 0
		 * turns the parent's stop into an iteration that rank 1 (at most
		 * DEPTH ahead of it) has not reached yet, and both stop there.
		 */
		if (rank == 0 && __atomic_load_n(&sh->stop, __ATOMIC_SEQ_CST) &&
		    !__atomic_load_n(&sh->stop_at, __ATOMIC_SEQ_CST))
			__atomic_store_n(&sh->stop_at, it + 2 * DEPTH, __ATOMIC_SEQ_CST);
		at = __atomic_load_n(&sh->stop_at, __ATOMIC_SEQ_CST);
		if (at && it >= at)
			break;

		if (it >= DEPTH) {
			r = collc_wait(ctx, req[s], 10000);
			if (r < 0)
				return h_fail("rank %d: all-reduce on A: %s", rank,
					      collc_strerror(r));
			n++;
		}
		for (size_t k = 0; k < count; k++)
			buf[(size_t)s * 65536 + k] = (float)(rank + 1);
		r = collc_allreduce(a, buf + (size_t)s * 65536, buf + (size_t)s * 65536, count,
				    COLLC_FLOAT32, COLLC_SUM, &req[s]);
		if (r < 0)
			return h_fail("rank %d: all-reduce on A: %s", rank, collc_strerror(r));
		it++;
		if (rank == 1 && !req_b && __atomic_load_n(&sh->release_b, __ATOMIC_SEQ_CST)) {
			r = collc_allreduce(b, bb, bb, 1024, COLLC_FLOAT32, COLLC_SUM, &req_b);
			if (r < 0)
				return h_fail("rank 1: all-reduce on B: %s", collc_strerror(r));
		}
	}
	for (uint64_t j = it > DEPTH ? it - DEPTH : 0; j < it; j++) {
		int s = (int)(j % DEPTH);

		r = collc_wait(ctx, req[s], 10000);
		if (r < 0)
			return h_fail("rank %d: all-reduce on A: %s", rank, collc_strerror(r));
		if (buf[(size_t)s * 65536] != 3.0f)
			return h_fail("rank %d: all-reduce on A: %g, want 3", rank,
				      buf[(size_t)s * 65536]);
		n++;
	}
	if (rank == 1 && !req_b) {
		r = collc_allreduce(b, bb, bb, 1024, COLLC_FLOAT32, COLLC_SUM, &req_b);
		if (r < 0)
			return h_fail("rank 1: all-reduce on B: %s", collc_strerror(r));
	}
	r = collc_wait(ctx, req_b, 10000);
	if (r < 0 || bb[0] != 2.0f)
		return h_fail("rank %d: all-reduce on B: %s, %g (want 2)", rank, collc_strerror(r),
			      bb[0]);
	n++;
	sh->completed[rank] = n;
	/* Stay connected until the parent took its last look with both clients present. */
	if (h_barrier_wait(&sh->bar, 20000) < 0)
		return h_fail("barrier timed out");
	if (h_barrier_wait(&sh->bar, 20000) < 0)
		return h_fail("barrier timed out");
	collc_comm_destroy(a);
	collc_comm_destroy(b);
	collc_disconnect(ctx);
	return 0;
}

/* Checks */

static int nerr;

static const struct json *need(const struct json *obj, const char *path, const char *key,
			       enum json_type t)
{
	const struct json *v = json_get(obj, key);

	if (!v) {
		h_fail("status --json: %s has no key \"%s\"", path, key);
		nerr++;
	} else if (v->type != t) {
		h_fail("status --json: %s.%s is a %s, want a %s", path, key,
		       json_type_name(v->type), json_type_name(t));
		nerr++;
		v = NULL;
	}
	return v;
}

static void need_numbers(const struct json *obj, const char *path, const char *const *keys)
{
	for (; *keys; keys++)
		need(obj, path, *keys, JSON_NUMBER);
}

/* arr->items[i] when it is an object; else says so and returns NULL. */
static const struct json *object_item(const struct json *arr, size_t i, const char *path)
{
	const struct json *v = &arr->items[i];

	if (v->type == JSON_OBJECT)
		return v;
	nerr++;
	h_fail("status --json: %s[%zu] is not an object", path, i);
	return NULL;
}

static int python_accepts(const char *text, size_t len)
{
	char path[] = "/tmp/collc-status-XXXXXX", cmd[256], out[4096];
	int fd = mkstemp(path), st;

	if (fd < 0)
		return -1;
	if (write(fd, text, len) != (ssize_t)len) {
		close(fd);
		unlink(path);
		return -1;
	}
	close(fd);
	snprintf(
		cmd, sizeof(cmd),
		"%s -c 'import json,sys; json.load(open(sys.argv[1], encoding=\"utf-8\"))' %s 2>&1",
		PYTHON3_PATH, path);
	st = h_run_capture(cmd, out, sizeof(out));
	unlink(path);
	if (st != 0)
		h_log("python3 rejects the JSON: %s", out);
	return st == 0;
}

struct snapshot {
	double submitted, completed, errors, batches, batch_items;
	int saw_pids, saw_lagging;
};

static int check_status(const char *text, size_t len, struct snapshot *s, int with_python)
{
	static const char *const client_keys[] = { "pid", "sq_depth", "cq_depth", "inflight",
						   NULL };
	static const char *const comm_keys[] = { "id",       "nranks",    "pending",
						 "inflight", "completed", NULL };
	static const char *const chan_keys[] = { "id", "inflight", "work_consumed", NULL };
	static const char *const forming_keys[] = { "id", "nranks", "joined", "waiting_ms", NULL };
	static const char *const total_keys[] = { "submitted", "completed",   "errors",
						  "batches",   "batch_items", NULL };
	const struct json *cfg, *clients, *comms, *forming, *devices, *totals;
	char err[256];
	struct json *root = json_parse(text, len, err, sizeof(err));
	int seen[NRANKS] = { 0 };

	nerr = 0;
	memset(s, 0, sizeof(*s));
	if (!root)
		return h_fail("status --json is not valid JSON: %s; output:\n%.*s", err, (int)len,
			      text);
	if (with_python && python_accepts(text, len) == 0)
		nerr++;
	if (root->type != JSON_OBJECT) {
		json_free(root);
		return h_fail("status --json: the top level is a %s, want an object",
			      json_type_name(root->type));
	}
	cfg = need(root, "status", "config", JSON_OBJECT);
	clients = need(root, "status", "clients", JSON_ARRAY);
	comms = need(root, "status", "comms", JSON_ARRAY);
	forming = need(root, "status", "forming", JSON_ARRAY);
	devices = need(root, "status", "devices", JSON_ARRAY);
	totals = need(root, "status", "totals", JSON_OBJECT);
	if (cfg) {
		need(cfg, "config", "channels", JSON_NUMBER);
		need(cfg, "config", "proto", JSON_STRING);
		need(cfg, "config", "algo", JSON_STRING);
	}
	for (size_t i = 0; clients && i < clients->n; i++) {
		const struct json *c = object_item(clients, i, "clients"), *pid;

		if (!c)
			continue;
		need_numbers(c, "clients[]", client_keys);
		pid = json_get(c, "pid");
		for (int r = 0; pid && pid->type == JSON_NUMBER && r < NRANKS; r++)
			seen[r] |= (pid_t)pid->number == sh->pid[r];
	}
	s->saw_pids = seen[0] && seen[1];
	for (size_t i = 0; comms && i < comms->n; i++) {
		const struct json *c = object_item(comms, i, "comms"), *lag, *pending, *nr;

		if (!c)
			continue;
		need_numbers(c, "comms[]", comm_keys);
		lag = need(c, "comms[]", "lagging_ranks", JSON_ARRAY);
		for (size_t k = 0; lag && k < lag->n; k++)
			if (lag->items[k].type != JSON_NUMBER) {
				nerr++;
				h_fail("status --json: comms[].lagging_ranks holds a %s",
				       json_type_name(lag->items[k].type));
			}
		pending = json_get(c, "pending");
		nr = json_get(c, "nranks");
		if (lag && lag->n == 1 && lag->items[0].type == JSON_NUMBER &&
		    lag->items[0].number == 1 && pending && pending->type == JSON_NUMBER &&
		    pending->number >= 1 && nr && nr->type == JSON_NUMBER && nr->number == 2)
			s->saw_lagging = 1;
	}
	for (size_t i = 0; forming && i < forming->n; i++) {
		const struct json *f = object_item(forming, i, "forming");

		if (!f)
			continue;
		need_numbers(f, "forming[]", forming_keys);
		need(f, "forming[]", "joined_ranks", JSON_ARRAY);
		need(f, "forming[]", "across_daemons", JSON_BOOL);
	}
	for (size_t i = 0; devices && i < devices->n; i++) {
		const struct json *d = object_item(devices, i, "devices"), *ch;

		if (!d)
			continue;
		need(d, "devices[]", "name", JSON_STRING);
		need(d, "devices[]", "backend", JSON_STRING);
		need(d, "devices[]", "fifo_depth", JSON_NUMBER);
		ch = need(d, "devices[]", "channels", JSON_ARRAY);
		for (size_t k = 0; ch && k < ch->n; k++)
			need_numbers(&ch->items[k], "devices[].channels[]", chan_keys);
	}
	if (devices && devices->n == 0) {
		nerr++;
		h_fail("status --json: no devices while collectives run");
	}
	if (totals) {
		const struct json *v;

		need_numbers(totals, "totals", total_keys);
		if ((v = json_get(totals, "submitted")) && v->type == JSON_NUMBER)
			s->submitted = v->number;
		if ((v = json_get(totals, "completed")) && v->type == JSON_NUMBER)
			s->completed = v->number;
		if ((v = json_get(totals, "errors")) && v->type == JSON_NUMBER)
			s->errors = v->number;
		if ((v = json_get(totals, "batches")) && v->type == JSON_NUMBER)
			s->batches = v->number;
		if ((v = json_get(totals, "batch_items")) && v->type == JSON_NUMBER)
			s->batch_items = v->number;
		if (s->completed > s->submitted) {
			nerr++;
			h_fail("status --json: totals.completed %.0f > totals.submitted %.0f",
			       s->completed, s->submitted);
		}
	}
	json_free(root);
	if (nerr)
		h_log("the output was:\n%.*s", (int)len, text);
	return nerr != 0;
}

static int status_json(char *out, size_t outlen, size_t *ret_len)
{
	char cmd[512];
	int st;

	snprintf(cmd, sizeof(cmd), "%s --socket %s status --json", h_collcctl(), h_sock);
	st = h_run_capture(cmd, out, outlen);
	*ret_len = strlen(out);
	if (st != 0)
		return h_fail("collcctl status --json exited with %d; output:\n%s", st, out);
	return 0;
}

/* The checker itself: it must reject what is not JSON and accept what is. */
static int parser_selftest(void)
{
	static const char *const bad[] = {
		"",        "{",           "[1 2]", "{\"a\" 1}", "{\"a\":1,}",   "[1,]", "01",
		"1.",      "-",           ".5",    "1e",        "nan",          "{}x",  "\"\x01\"",
		"\"\\x\"", "\"\\ud800\"", "{a:1}", "'a'",       "[true false]",
	};
	static const char *const good[] = {
		"{}",
		"[]",
		"0",
		"-0.5e-3",
		"\"\"",
		" {\"a\": [1, -2.5E+3, true, false, null, \"\\u00e9\\n\"]} ",
		"{\"a\":{\"b\":{\"c\":[[]]}}}",
	};
	char err[128];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct json *v = json_parse(bad[i], strlen(bad[i]), err, sizeof(err));

		if (v) {
			json_free(v);
			return h_fail("the test's JSON parser accepts invalid text: %s", bad[i]);
		}
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		struct json *v = json_parse(good[i], strlen(good[i]), err, sizeof(err));

		if (!v)
			return h_fail("the test's JSON parser rejects valid text %s: %s", good[i],
				      err);
		json_free(v);
	}
	return 0;
}

int main(int argc, char **argv)
{
	static char out[1 << 20];
	int python = access(PYTHON3_PATH, X_OK) == 0;
	struct snapshot s, prev = { 0 };
	int failed = 0, moving = 0, lagging = 0, pids = 0;
	pid_t pids_r[NRANKS];
	uint64_t t0;
	size_t len;
	char cmd[512];

	h_init("status_json", argc, argv, 90);
	if (parser_selftest())
		return 1;
	sh = h_shared(sizeof(*sh));
	h_barrier_init(&sh->bar, NRANKS + 1);
	h_daemon_start(NULL);
	h_unique_id(&uid_a);
	h_unique_id(&uid_b);
	if (!python)
		h_log("NOTE: %s not found: checking with the C parser only", PYTHON3_PATH);
	for (int r = 0; r < NRANKS; r++)
		pids_r[r] = h_spawn(rank_main, r, NRANKS, NULL);
	t0 = h_now_ns();
	while (__atomic_load_n(&sh->ready, __ATOMIC_SEQ_CST) < NRANKS) {
		if (h_now_ns() - t0 > 10000000000ull) {
			failed = h_fail("the ranks did not start");
			goto out;
		}
		usleep(1000);
	}
	for (int i = 0; i < SNAPSHOTS && !failed; i++) {
		if (status_json(out, sizeof(out), &len) ||
		    check_status(out, len, &s, python && i % 5 == 0)) {
			failed = 1;
			break;
		}
		moving += i > 0 && s.submitted > prev.submitted;
		lagging += s.saw_lagging;
		pids += s.saw_pids;
		prev = s;
		usleep(40000);
	}
	if (!failed && moving == 0)
		failed = h_fail("totals.submitted never moved across %d snapshots during traffic",
				SNAPSHOTS);
	if (!failed && pids == 0)
		failed = h_fail("the ranks' pids (%d, %d) never appeared in clients[].pid",
				(int)sh->pid[0], (int)sh->pid[1]);
	if (!failed && lagging == 0)
		failed = h_fail(
			"communicator B never showed pending >= 1 with lagging_ranks [1] although "
			"rank 1 held its all-reduce back");
	if (!failed)
		h_log("%d snapshots of status --json during traffic: strict JSON%s, every status contract key "
		      "with its type; totals moved in %d; rank pids listed in %d; the held-back "
		      "communicator listed as pending with lagging_ranks [1] in %d",
		      SNAPSHOTS, python ? " (python3 agrees)" : "", moving, pids, lagging);
	__atomic_store_n(&sh->release_b, 1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&sh->stop, 1, __ATOMIC_SEQ_CST);
	if (h_barrier_wait(&sh->bar, 20000) < 0) {
		failed |= h_fail("the ranks did not finish their traffic");
		goto out;
	}
	/* Every collective is done and both clients are still connected. */
	if (!failed && (status_json(out, sizeof(out), &len) || check_status(out, len, &s, python)))
		failed = 1;
	if (!failed) {
		double want = (double)(sh->completed[0] + sh->completed[1]);

		if (s.completed != want || s.errors != 0 || s.submitted != want)
			failed = h_fail(
				"after the traffic: totals submitted %.0f, completed %.0f, errors %.0f; "
				"the ranks completed %.0f (want submitted == completed == %.0f, errors 0)",
				s.submitted, s.completed, s.errors, want, want);
		else
			h_log("after the traffic: totals.submitted == totals.completed == %.0f, the sum of "
			      "what the ranks completed; errors 0",
			      want);
		/* Each rank's submission became one work item, published in some batch. */
		if (s.batch_items != want || s.batches < 1 || s.batches > s.batch_items)
			failed = h_fail("after the traffic: totals batches %.0f, batch_items %.0f "
					"(want batch_items == %.0f, 1 <= batches <= batch_items)",
					s.batches, s.batch_items, want);
		else
			h_log("work batches: %.0f items in %.0f batches (%.2f each)", s.batch_items,
			      s.batches, s.batch_items / s.batches);
	}
	h_barrier_wait(&sh->bar, 20000);
out:
	__atomic_store_n(&sh->stop, 1, __ATOMIC_SEQ_CST);
	failed |= h_reap(pids_r, NRANKS, NULL, 3000);
	snprintf(cmd, sizeof(cmd), "%s --socket %s status", h_collcctl(), h_sock);
	if (h_run_capture(cmd, out, sizeof(out)) != 0 || strlen(out) == 0)
		failed |= h_fail("collcctl status (table) failed; output:\n%s", out);
	snprintf(cmd, sizeof(cmd), "%s --socket %s metrics", h_collcctl(), h_sock);
	if (h_run_capture(cmd, out, sizeof(out)) != 0 || !strstr(out, "collc_"))
		failed |= h_fail("collcctl metrics failed; output:\n%s", out);
	if (!failed)
		h_log("collcctl status (table) and collcctl metrics work");
	return h_finish(failed);
}
