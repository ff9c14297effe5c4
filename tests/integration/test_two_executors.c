/* SPDX-License-Identifier: MIT */
/*
 * One collcd, every executor it can start (--backend auto), on a machine
 * that may have no GPU: the CPU path of the two-executor code.
 *
 *  - a host-memory communicator (2 ranks, device -1) runs all-reduces on the
 *    CPU executor and gets the right sums;
 *  - collcctl status --json lists the executors ("executors": name, devices,
 *    channels) and devices of each with its backend name, the config keys
 *    left at auto, and the communicator's backend; the hello reply's backend
 *    is a bitmask with the CPU bit set;
 *  - a communicator whose ranks mix host memory (device -1) and a GPU
 *    (device 0) fails with -EINVAL on every rank, whether or not GPUs exist
 *    (spoken on the wire: the library refuses a GPU device itself when collcd
 *    runs no CUDA executor);
 *  - one whose ranks are all on GPUs fails with -ENODEV when no CUDA
 *    executor runs (skipped where one does).
 *
 * Afterwards collcd still serves a host-memory all-reduce.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "json.h"
#include "proto/wire.h"

#define COUNT 4096

static struct collc_unique_id host_uid;

/* Rank r adds r + 1 in every element; the sum over n ranks is n (n + 1) / 2. */
static int host_rank(int rank, int nranks, void *arg)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	float *send, *recv;
	int r;

	(void)arg;
	r = h_join_alloc(&host_uid, nranks, rank, COUNT * sizeof(float), &ctx, &comm,
			 (void **)&send, (void **)&recv);
	if (r < 0)
		return 1;
	for (int it = 0; it < 8; it++) {
		collc_req req;

		for (int i = 0; i < COUNT; i++)
			send[i] = (float)(rank + 1) * (float)(it + 1);
		r = collc_allreduce(comm, send, recv, COUNT, COLLC_FLOAT32, COLLC_SUM, &req);
		if (r == 0)
			r = collc_wait(ctx, req, 20000);
		if (r < 0)
			return h_fail("rank %d: all-reduce %d: %s", rank, it, collc_strerror(r));
		for (int i = 0; i < COUNT; i++)
			if (recv[i] != (float)(nranks * (nranks + 1) / 2) * (float)(it + 1))
				return h_fail("rank %d: all-reduce %d: element %d is %g", rank, it,
					      i, (double)recv[i]);
	}
	collc_comm_destroy(comm);
	return 0;
}

/* Raw sessions */

static int raw_connect(void)
{
	int fd = h_raw_connect();

	if (fd < 0)
		h_die("raw connect to %s: %s", h_sock, strerror(-fd));
	return fd;
}

static void raw_send(int fd, uint16_t type, uint32_t id, const void *payload, size_t len)
{
	char buf[COLLC_MSG_MAX];
	size_t n = h_raw_msg(buf, type, id, payload, len);

	if (h_send_fds(fd, buf, n, NULL, 0, MSG_NOSIGNAL) < 0)
		h_die("send: %s", strerror(errno));
}

/* Receives one reply (closing the fds it carries) into body; its status, or -ETIMEDOUT. */
static int raw_reply(int fd, void *body, size_t len, int timeout_ms)
{
	char buf[COLLC_MSG_MAX];
	struct collc_msg_status st;
	ssize_t n = h_recv_fds(fd, buf, sizeof(buf), NULL, 0, NULL, timeout_ms);

	if (n == -ETIMEDOUT)
		return -ETIMEDOUT;
	if (n < (ssize_t)(sizeof(struct collc_msg_hdr) + sizeof(st)))
		h_die("short reply (%zd bytes)", n);
	memcpy(&st, buf + sizeof(struct collc_msg_hdr), sizeof(st));
	if (body)
		memcpy(body, buf + sizeof(struct collc_msg_hdr),
		       len < (size_t)n - sizeof(struct collc_msg_hdr)
			       ? len
			       : (size_t)n - sizeof(struct collc_msg_hdr));
	return st.status;
}

/* A raw session that said hello; *ret_backend: the reply's backend bits. */
static int raw_session(uint32_t *ret_backend)
{
	struct collc_msg_hello q = { .api_version = 1 };
	struct collc_msg_hello_reply rep;
	int fd = raw_connect(), r;

	raw_send(fd, COLLC_MSG_HELLO, 1, &q, sizeof(q));
	r = raw_reply(fd, &rep, sizeof(rep), 10000);
	if (r < 0)
		h_die("hello: %s", strerror(-r));
	*ret_backend = rep.backend;
	return fd;
}

/*
 * Every rank of one communicator on its own raw session, rank r on device
 * devs[r]; returns 0 when every rank got want, else 1.
 */
static int comm_init_devices(const int32_t *devs, int nranks, int want, const char *what)
{
	struct collc_unique_id uid;
	int fds[8], failed = 0;
	uint32_t backend;

	h_unique_id(&uid);
	for (int r = 0; r < nranks; r++) {
		struct collc_msg_comm_init q;

		memset(&q, 0, sizeof(q));
		memcpy(&q.uid, uid.bytes, sizeof(q.uid));
		q.nranks = (uint32_t)nranks;
		q.rank = (uint32_t)r;
		q.device = devs[r];
		fds[r] = raw_session(&backend);
		raw_send(fds[r], COLLC_MSG_COMM_INIT, 2, &q, sizeof(q));
	}
	for (int r = 0; r < nranks; r++) {
		int got = raw_reply(fds[r], NULL, 0, 10000);

		if (got != want)
			failed |= h_fail("%s: rank %d (device %d) got %d (%s), want %d (%s)", what,
					 r, devs[r], got, strerror(-got), want, strerror(-want));
		close(fds[r]);
	}
	if (!failed)
		h_log("%s: every rank got %s", what, strerror(-want));
	return failed;
}

static const struct json *need(const struct json *obj, const char *where, const char *key,
			       enum json_type t, int *failed)
{
	const struct json *v = obj ? json_get(obj, key) : NULL;

	if (!v || v->type != t) {
		*failed |= h_fail("status --json: %s.%s is %s, want %s", where, key,
				  v ? json_type_name(v->type) : "missing", json_type_name(t));
		return NULL;
	}
	return v;
}

/* Checks the executors, devices and the communicator's backend; *ret_cuda: a CUDA executor runs. */
static int check_status(int *ret_cuda)
{
	static char out[1 << 20];
	const struct json *execs, *devs, *cfg, *autos;
	struct json *root;
	char cmd[512], err[256];
	int failed = 0, saw_cpu = 0, cpu_devices = 0;

	*ret_cuda = 0;
	snprintf(cmd, sizeof(cmd), "%s --socket %s status --json", h_collcctl(), h_sock);
	if (h_run_capture(cmd, out, sizeof(out)) != 0)
		return h_fail("collcctl status --json failed; output:\n%s", out);
	root = json_parse(out, strlen(out), err, sizeof(err));
	if (!root)
		return h_fail("status --json is not JSON: %s; output:\n%s", err, out);
	cfg = need(root, "status", "config", JSON_OBJECT, &failed);
	need(cfg, "config", "channels", JSON_NUMBER, &failed);
	autos = need(cfg, "config", "auto", JSON_ARRAY, &failed);
	if (autos && autos->n == 0)
		failed |= h_fail("status --json: config.auto is empty, want the keys left at auto");
	execs = need(root, "status", "executors", JSON_ARRAY, &failed);
	for (size_t i = 0; execs && i < execs->n; i++) {
		const struct json *x = &execs->items[i];
		const struct json *name = need(x, "executors[]", "name", JSON_STRING, &failed);

		need(x, "executors[]", "devices", JSON_NUMBER, &failed);
		need(x, "executors[]", "channels", JSON_NUMBER, &failed);
		need(x, "executors[]", "twoshot_max_bytes", JSON_NUMBER, &failed);
		if (name && strcmp(name->string, "cpu") == 0)
			saw_cpu = 1;
		if (name && strcmp(name->string, "cuda") == 0)
			*ret_cuda = 1;
	}
	if (!saw_cpu)
		failed |= h_fail("status --json: no cpu executor under --backend auto");
	devs = need(root, "status", "devices", JSON_ARRAY, &failed);
	for (size_t i = 0; devs && i < devs->n; i++) {
		const struct json *b =
			need(&devs->items[i], "devices[]", "backend", JSON_STRING, &failed);

		need(&devs->items[i], "devices[]", "name", JSON_STRING, &failed);
		cpu_devices += b && strcmp(b->string, "cpu") == 0;
	}
	/* The host communicator's two ranks started two CPU devices. */
	if (cpu_devices < 2)
		failed |= h_fail("status --json: %d cpu devices, want at least 2", cpu_devices);
	if (failed)
		h_log("the output was:\n%s", out);
	else
		h_log("status --json: %zu executors (cpu%s), %d cpu devices", execs->n,
		      *ret_cuda ? ", cuda" : "", cpu_devices);
	json_free(root);
	return failed;
}

int main(int argc, char **argv)
{
	static const char *const args[] = { "--backend", "auto", NULL };
	static const int32_t mixed[] = { -1, 0 }, mixed_rev[] = { 0, -1, -1 }, gpus[] = { 0, 0 };
	uint32_t backend;
	int failed = 0, cuda, fd;

	h_init("two_executors", argc, argv, 60);
	h_daemon_start(args);

	fd = raw_session(&backend);
	close(fd);
	if (!(backend & COLLC_BACKEND_CPU))
		failed |= h_fail("hello: backend bits 0x%x lack COLLC_BACKEND_CPU", backend);

	h_unique_id(&host_uid);
	if (h_run_ranks(2, host_rank, NULL) != 0)
		failed |= h_fail("the host-memory communicator failed");
	else
		h_log("a host-memory communicator ran on the CPU executor");

	failed |= check_status(&cuda);
	failed |= comm_init_devices(mixed, 2, -EINVAL, "ranks on host memory and a GPU");
	failed |= comm_init_devices(mixed_rev, 3, -EINVAL, "ranks on a GPU and host memory");
	if (!cuda)
		failed |= comm_init_devices(gpus, 2, -ENODEV, "GPU ranks without a CUDA executor");
	else
		h_log("a CUDA executor runs: GPU communicators are tests/gpu's");

	/* Still serving. */
	h_unique_id(&host_uid);
	if (h_run_ranks(2, host_rank, NULL) != 0)
		failed |= h_fail("the host-memory communicator failed after the refused ones");
	return h_finish(failed);
}
