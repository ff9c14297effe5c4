/* SPDX-License-Identifier: MIT */
/*
 * Communicators across collcd daemons: two or three collcd on loopback (each
 * --listen 127.0.0.1:0, its own socket), ranks placed round-robin on them,
 * host memory, the CPU executor and the tcp transport.
 *
 *   test_daemons coll NDAEMONS NRANKS [block]
 *                                       every collective x dtypes x ops at
 *                                       random sizes against the reference;
 *                                       ranks round-robin, or in blocks
 *   test_daemons plugin                 coll 2 3 over libnccl-net-collc.so
 *                                       (--net plugin:collc)
 *   test_daemons pipeline               16 collectives in flight at once
 *   test_daemons chain                  collectives that read what the one
 *                                       before writes, and write what it reads,
 *                                       submitted before either is waited for
 *                                       (small: each may go eager), exact int32
 *   test_daemons two                    two communicators at once, rooted on
 *                                       different daemons
 *   test_daemons mismatch               daemons disagree: -EINVAL on every rank
 *   test_daemons p2p NDAEMONS NRANKS [block]
 *                                       send/recv across daemons: every rank to
 *                                       every rank, every dtype (fp8 too), random
 *                                       counts (0 too) in a random posting order;
 *                                       a ring of 48 outstanding each way; counts or
 *                                       dtypes that differ: -EINVAL on both, nothing
 *                                       written; a missing sender: -ETIMEDOUT, its
 *                                       late send too; a sender that dies: -EPIPE
 *   test_daemons p2p_refusal            an all-to-all across daemons runs; a send
 *                                       and receive whose counts differ end with
 *                                       -EINVAL on both, nothing written
 *   test_daemons stream [a2a_blocks]    stream-ordered SQEs across daemons, raw
 *                                       clients playing their streams' part (the
 *                                       gates, as libcollc's _stream forms on a GPU):
 *                                       the five collectives and all-to-all in
 *                                       flight on one stream, nothing done while
 *                                       one rank's go is missing, then each right;
 *                                       counts that disagree: -EINVAL on every gate;
 *                                       a ring of stream-ordered sends and receives:
 *                                       nothing moves before the gos, then every
 *                                       byte right; counts that differ: -EINVAL on
 *                                       both gates; a host receive that times out
 *                                       while its stream send waits for its go:
 *                                       -ETIMEDOUT on both; comm_abort with a go missing:
 *                                       the gate is released with -ECANCELED
 *                                       (a2a_blocks: all-to-all as blocks)
 *   test_daemons secret                 a wrong secret is refused and counted,
 *                                       the root daemon keeps serving
 *   test_daemons kill [root]            kill -9 of a daemon (a joining one, or the
 *                                       root) mid-collective: -EPIPE on every
 *                                       surviving rank within 2 s
 *   test_daemons stop                   SIGSTOP of a daemon (silent, sockets open):
 *                                       -ETIMEDOUT within 2 s (net_timeout_ms 2000)
 *   test_daemons garbage                hundreds of connections with garbage,
 *                                       nothing, or a truncated handshake: refused
 *                                       and counted, collectives still run
 *   test_daemons peer                   a peer that holds the secret sends hostile
 *                                       control messages, to the root (14 kinds) and,
 *                                       playing the root, to a joiner (12 kinds): each
 *                                       is counted, fails only its communicator (the
 *                                       rank gets an error within 2 s), collectives
 *                                       still run
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <collc.h>

#include "daemon/net/auth.h"
#include "daemon/node_wire.h"
#include "harness.h"
#include "p2pcheck.h"
#include "raw.h"
#include "refcheck.h"

#define MAX_DAEMONS 3
#define MAX_RANKS   6

static int ndaemons;
static char socks[MAX_DAEMONS][160];
static pid_t dpids[MAX_DAEMONS];
static char logs[MAX_DAEMONS][192];

/*
 * The last two are "--net plugin:collc" in the plugin case, "--set
 * net_tcp_helpers=1" in the helpers cases.
 */
static const char *daemon_args[] = { "--backend",     "cpu", "--listen", "127.0.0.1:0", "--set",
				     "net_ifname=lo", NULL,  NULL,       NULL };
static int plugin_case;

/* Daemon 0 is the harness's; the others are started here on sockets beside it. */
static void start_daemon(int d)
{
	const char *bin = getenv("COLLCD") ? getenv("COLLCD") : COLLCD_PATH;
	uint64_t t0;
	pid_t pid;
	int logfd;

	snprintf(socks[d], sizeof(socks[d]), "%s.%d", h_sock, d);
	snprintf(logs[d], sizeof(logs[d]), "%s.%d.log", h_sock, d);
	logfd = open(logs[d], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (logfd < 0)
		h_die("%s: %s", logs[d], strerror(errno));
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		h_die("fork: %s", strerror(errno));
	if (pid == 0) {
		const char *argv[16] = { bin, "--socket", socks[d], "--foreground" };
		int argc = 4;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (int i = 0; daemon_args[i]; i++)
			argv[argc++] = daemon_args[i];
		argv[argc] = NULL;
		dup2(logfd, STDOUT_FILENO);
		dup2(logfd, STDERR_FILENO);
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	close(logfd);
	dpids[d] = pid;
	t0 = h_now_ns();
	for (;;) {
		struct collc_ctx *ctx;

		if (collc_connect(socks[d], &ctx) == 0) {
			collc_disconnect(ctx);
			return;
		}
		if (waitpid(pid, NULL, WNOHANG) == pid)
			h_die("collcd %d exited before it accepted connections", d);
		if (h_now_ns() - t0 > 10000000000ull)
			h_die("collcd %d did not start", d);
		h_sleep_us(5000);
	}
}

static void start_daemons(int n)
{
	ndaemons = n;
	h_daemon_start(daemon_args);
	snprintf(socks[0], sizeof(socks[0]), "%s", h_sock);
	for (int d = 1; d < n; d++)
		start_daemon(d);
}

static void stop_daemons(void)
{
	for (int d = 1; d < ndaemons; d++) {
		if (dpids[d] <= 0)
			continue;
		kill(dpids[d], SIGTERM);
		waitpid(dpids[d], NULL, 0);
		dpids[d] = 0;
	}
}

static void dump_logs(void)
{
	char cmd[256];

	for (int d = 1; d < ndaemons; d++) {
		h_log("collcd %d log:", d);
		snprintf(cmd, sizeof(cmd), "tail -n 20 %s >&2", logs[d]);
		if (system(cmd) < 0)
			h_log("cannot show %s", logs[d]);
	}
}

/* A sanitizer report in the log of daemon d (ASan, UBSan, LSan at exit). */
static int log_has_report(int d)
{
	char line[512];
	FILE *f = fopen(logs[d], "re");
	int found = 0;

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, "Sanitizer") || strstr(line, "runtime error:");
	fclose(f);
	return found;
}

static int finish(int failed)
{
	stop_daemons();
	for (int d = 1; d < ndaemons; d++)
		if (log_has_report(d))
			failed |= h_fail("collcd %d logged a sanitizer report", d);
	if (failed)
		dump_logs();
	for (int d = 1; d < ndaemons && !failed; d++)
		unlink(logs[d]);
	return h_finish(failed);
}

/* Shared with the ranks (forked after it is filled). */
struct shared {
	struct collc_unique_id id, id2;
	struct h_barrier bar;
	uint32_t errs[MAX_RANKS];
	uint64_t err_ns[MAX_RANKS];
	uint32_t submitted;
};
static struct shared *sh;

static int block; /* ranks in blocks (0 1 | 2 3): ring hops inside a daemon too */

static int daemon_of(int rank, int nranks)
{
	return block ? rank * ndaemons / nranks : rank % ndaemons;
}

static int join(const struct collc_unique_id *id, int rank, int nranks, struct collc_ctx **ctx,
		struct collc_comm **comm)
{
	int d = daemon_of(rank, nranks), r = collc_connect(socks[d], ctx);

	if (r < 0)
		return h_fail("rank %d: connect to daemon %d: %s", rank, d, collc_strerror(r));
	r = collc_comm_init(*ctx, id, nranks, rank, -1, comm);
	if (r < 0) {
		collc_disconnect(*ctx);
		return h_fail("rank %d: comm_init on daemon %d: %s", rank, d, collc_strerror(r));
	}
	return 0;
}

#define MAX_COUNT (300u << 10) /* elements: up to 2.4 MiB of float64 per rank */

static const collc_dtype dtypes[] = { COLLC_FLOAT32, COLLC_INT32, COLLC_FLOAT64, COLLC_BFLOAT16,
				      COLLC_UINT8 };
static const collc_redop ops[] = { COLLC_SUM, COLLC_MAX, COLLC_PROD, COLLC_MIN, COLLC_AVG };

/* collcctl status --json of the daemon at sock into out; 0, or nonzero when it failed. */
static int status_json(const char *sock, char *out, size_t len)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "%s --socket %s status --json", h_collcctl(), sock);
	return h_run_capture(cmd, out, len);
}

/*
 * The ring as daemon 0 reports it (status --json, "ring"): every rank once,
 * each daemon's ranks next to each other in ascending order, so the ring
 * crosses between daemons once per daemon (node.c nc_order_ring()).
 */
static int ring_check; /* test_coll: one communicator, rank 0 on daemon 0 */

static int check_ring(int nranks)
{
	char out[16384], *p;
	int ring[P2P_MAX_RANKS], seen[P2P_MAX_RANKS] = { 0 }, n = 0, cross = 0;

	if (status_json(socks[0], out, sizeof(out)) != 0 || !(p = strstr(out, "\"ring\": [")))
		return h_fail("no ring in daemon 0's status");
	p += strlen("\"ring\": [");
	while (n < nranks && *p != ']') {
		char *end;
		long v = strtol(p, &end, 10);

		if (end == p || v < 0 || v >= nranks || seen[v]++)
			return h_fail("daemon 0 reports a ring that is no order of the ranks: %s",
				      out);
		ring[n++] = (int)v;
		p = end + strspn(end, ", ");
	}
	if (n != nranks)
		return h_fail("daemon 0 reports a ring of %d ranks, not %d", n, nranks);
	for (int i = 0; i < n; i++) {
		int a = ring[i], b = ring[(i + 1) % n];

		if (daemon_of(a, nranks) != daemon_of(b, nranks))
			cross++;
		else if (b < a)
			return h_fail("ring position %d: rank %d after rank %d of the same daemon",
				      i, b, a);
	}
	if (cross != (ndaemons > 1 ? ndaemons : 0))
		return h_fail("the ring crosses between daemons %d times, not %d", cross, ndaemons);
	h_log("ring %s: crosses between daemons %d times", block ? "in rank order" : "by daemon",
	      cross);
	return 0;
}

/* Random collectives on a joined communicator; leaves it. */
static int coll_loop(struct collc_ctx *ctx, struct collc_comm *comm, int rank, int nranks)
{
	size_t cap = (size_t)MAX_COUNT * 8 * nranks;
	void *send, *recv;
	uint64_t rs = h_seed; /* the same sequence on every rank */
	int failed = 0, r, iters = h_sanitized() ? 15 : 40;

	if (collc_mem_alloc(ctx, cap, -1, &send) < 0 || collc_mem_alloc(ctx, cap, -1, &recv) < 0)
		return h_fail("rank %d: mem_alloc", rank);
	for (int i = 0; i < iters && !failed; i++) {
		enum rc_coll coll = (enum rc_coll)(i % RC_NUM_COLLS);
		uint64_t pick = h_rand(&rs);
		struct rc_case c = {
			.dtype = dtypes[pick % 5],
			.op = ops[(pick >> 8) % 5],
			.seed = h_seed + (uint64_t)i,
		};
		int root = (int)((pick >> 16) % (uint64_t)nranks);
		char what[96];
		collc_req req;

		/* Mostly small, sometimes several ring chunks, sometimes empty. */
		switch ((pick >> 24) % 4) {
		case 0:
			c.count = (pick >> 32) % 64;
			break;
		case 1:
			c.count = (pick >> 32) % 4096;
			break;
		default:
			c.count = (pick >> 32) % MAX_COUNT;
			break;
		}
		if (c.op == COLLC_PROD)
			c.exact = 0;
		snprintf(what, sizeof(what), "rank %d/%d %s %s %s count %zu root %d", rank, nranks,
			 rc_coll_name(coll), rc_dtype_name(c.dtype), rc_op_name(c.op), c.count,
			 root);
		memset(recv, 0xee, cap);
		if (coll != RC_BROADCAST || rank == root)
			rc_fill_coll(&c, coll, nranks, rank, send);
		r = rc_submit(comm, coll, &c, root, send, recv, &req);
		if (r == 0)
			r = collc_wait(ctx, req, 30000);
		if (r < 0) {
			failed = h_fail("%s: %s", what, collc_strerror(r));
			break;
		}
		failed |= rc_check_coll(&c, coll, nranks, rank, root, recv, what);
	}
	/* Before rank 0's destroy: daemon 0 (test_coll's rank 0) still knows the communicator. */
	if (!failed && rank == 0 && ring_check)
		failed = check_ring(nranks);
	collc_comm_destroy(comm);
	collc_disconnect(ctx);
	return failed;
}

/* Queues of collectives in flight at once: each its own buffers, checked when all are done. */
#define PIPE_DEPTH 16
#define PIPE_COUNT (40u << 10)

static int pipe_rank(int rank, int nranks, void *arg)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	size_t stride = (size_t)PIPE_COUNT * 8 * nranks;
	char *send, *recv;
	uint64_t rs = h_seed;
	int failed = 0;

	(void)arg;
	if (join(&sh->id, rank, nranks, &ctx, &comm) < 0)
		return 1;
	if (collc_mem_alloc(ctx, stride * PIPE_DEPTH, -1, (void **)&send) < 0 ||
	    collc_mem_alloc(ctx, stride * PIPE_DEPTH, -1, (void **)&recv) < 0)
		return h_fail("rank %d: mem_alloc", rank);
	for (int round = 0; round < 4 && !failed; round++) {
		struct rc_case c[PIPE_DEPTH];
		enum rc_coll coll[PIPE_DEPTH];
		int root[PIPE_DEPTH];
		collc_req req[PIPE_DEPTH];

		for (int q = 0; q < PIPE_DEPTH; q++) {
			uint64_t pick = h_rand(&rs);
			int r;

			coll[q] = (enum rc_coll)(pick % RC_NUM_COLLS);
			c[q] = (struct rc_case){ .dtype = dtypes[(pick >> 8) % 5],
						 .op = ops[(pick >> 16) % 5],
						 .count = (pick >> 32) % PIPE_COUNT,
						 .seed = h_seed +
							 (uint64_t)(round * PIPE_DEPTH + q) };
			root[q] = (int)((pick >> 24) % (uint64_t)nranks);
			if (coll[q] != RC_BROADCAST || rank == root[q])
				rc_fill_coll(&c[q], coll[q], nranks, rank, send + q * stride);
			r = rc_submit(comm, coll[q], &c[q], root[q], send + q * stride,
				      recv + q * stride, &req[q]);
			if (r < 0)
				return h_fail("rank %d: submit: %s", rank, collc_strerror(r));
		}
		for (int q = 0; q < PIPE_DEPTH; q++) {
			char what[96];
			int r = collc_wait(ctx, req[q], 30000);

			snprintf(what, sizeof(what), "rank %d round %d #%d %s %s count %zu", rank,
				 round, q, rc_coll_name(coll[q]), rc_dtype_name(c[q].dtype),
				 c[q].count);
			if (r < 0)
				failed = h_fail("%s: %s", what, collc_strerror(r));
			else
				failed |= rc_check_coll(&c[q], coll[q], nranks, rank, root[q],
							recv + q * stride, what);
		}
	}
	collc_comm_destroy(comm);
	collc_disconnect(ctx);
	return failed;
}

/*
 * Chains submitted at once, waited for at the end (collectives run in
 * submission order, collc(3)): X -> Y, Y -> Z, Z in place (each reads what the
 * one before writes), then X -> Y and W -> X (the second writes what the first
 * reads), in one allocation, on exact int32 sums.
 */
static int chain_rank(int rank, int nranks, void *arg)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	int32_t *buf, *x, *y, *z, *w;
	int failed = 0;

	(void)arg;
	if (join(&sh->id, rank, nranks, &ctx, &comm) < 0)
		return 1;
	if (collc_mem_alloc(ctx, 4 * 4096 * sizeof(int32_t), -1, (void **)&buf) < 0)
		return h_fail("rank %d: mem_alloc", rank);
	x = buf;
	y = buf + 4096;
	z = buf + 2 * 4096;
	w = buf + 3 * 4096;
	for (size_t count = 1; count <= 4096 && !failed; count = count * 3 + 1) {
		int64_t n = nranks, sx, sw;
		collc_req req[5];
		int r = 0;

		for (size_t i = 0; i < count; i++) {
			x[i] = rank * 1000 + (int32_t)i;
			w[i] = rank - 7 * (int32_t)i;
			y[i] = z[i] = -1;
		}
		r |= collc_allreduce(comm, x, y, count, COLLC_INT32, COLLC_SUM, &req[0]);
		r |= collc_allreduce(comm, y, z, count, COLLC_INT32, COLLC_SUM, &req[1]);
		r |= collc_allreduce(comm, z, z, count, COLLC_INT32, COLLC_SUM, &req[2]);
		for (int q = 0; q < 3 && r == 0; q++)
			r = collc_wait(ctx, req[q], 30000);
		if (r < 0)
			return h_fail("rank %d: chain of %zu: %s", rank, count, collc_strerror(r));
		for (size_t i = 0; i < count && !failed; i++) {
			sx = 1000 * n * (n - 1) / 2 + n * (int64_t)i;
			if (y[i] != sx || z[i] != n * n * sx)
				failed = h_fail(
					"rank %d: chain of %zu, element %zu: y %d z %d, want "
					"%lld and %lld",
					rank, count, i, y[i], z[i], (long long)sx,
					(long long)(n * n * sx));
		}
		r |= collc_allreduce(comm, x, y, count, COLLC_INT32, COLLC_SUM, &req[3]);
		r |= collc_allreduce(comm, w, x, count, COLLC_INT32, COLLC_SUM, &req[4]);
		for (int q = 3; q < 5 && r == 0; q++)
			r = collc_wait(ctx, req[q], 30000);
		if (r < 0)
			return h_fail("rank %d: chain of %zu: %s", rank, count, collc_strerror(r));
		for (size_t i = 0; i < count && !failed; i++) {
			sx = 1000 * n * (n - 1) / 2 + n * (int64_t)i;
			sw = n * (n - 1) / 2 - 7 * n * (int64_t)i;
			if (y[i] != sx || x[i] != sw)
				failed = h_fail(
					"rank %d: chain of %zu, element %zu: y %d x %d, want "
					"%lld and %lld",
					rank, count, i, y[i], x[i], (long long)sx, (long long)sw);
		}
	}
	collc_comm_destroy(comm);
	collc_disconnect(ctx);
	return failed;
}

static int coll_rank(int rank, int nranks, void *arg)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;

	(void)arg;
	if (join(&sh->id, rank, nranks, &ctx, &comm) < 0)
		return 1;
	return coll_loop(ctx, comm, rank, nranks);
}

/*
 * Two communicators at once, each spanning both daemons, each rooted on a
 * different one: processes 0, 1 are ranks 0, 1 of the first (daemons 0, 1),
 * processes 2, 3 ranks 0, 1 of the second (daemons 1, 0).
 */
static int two_rank(int proc, int nprocs, void *arg)
{
	int c = proc / 2, rank = proc % 2, r;
	struct collc_ctx *ctx;
	struct collc_comm *comm;

	(void)nprocs;
	(void)arg;
	r = collc_connect(socks[(rank + c) % 2], &ctx);
	if (r < 0)
		return h_fail("process %d: connect: %s", proc, collc_strerror(r));
	r = collc_comm_init(ctx, c ? &sh->id2 : &sh->id, 2, rank, -1, &comm);
	if (r < 0)
		return h_fail("process %d: comm_init: %s", proc, collc_strerror(r));
	return coll_loop(ctx, comm, rank, 2);
}

static int test_two(void)
{
	struct collc_ctx *ctx;

	start_daemons(2);
	h_unique_id(&sh->id);
	/* The second one's id comes from daemon 1: it is that communicator's root. */
	if (collc_connect(socks[1], &ctx) < 0 || collc_get_unique_id(ctx, &sh->id2) < 0)
		return finish(h_fail("an id from daemon 1"));
	collc_disconnect(ctx);
	return finish(h_run_ranks(4, two_rank, NULL));
}

static int test_coll(int nd, int nranks)
{
	int failed;

	start_daemons(nd);
	if (plugin_case) {
		char out[16384];

		if (status_json(h_sock, out, sizeof(out)) != 0 ||
		    !strstr(out, "\"transport\": \"plugin:collc\""))
			return finish(h_fail("collcd does not report the plugin as its transport"));
	}
	h_unique_id(&sh->id);
	ring_check = 1;
	failed = h_run_ranks(nranks, coll_rank, NULL);
	if (!failed)
		h_log("%d ranks on %d daemons (%s): every collective right", nranks, nd,
		      block ? "in blocks" : "round-robin");
	return finish(failed);
}

/* Collectives the daemons refuse on every rank (checked by fn), after which the communicator runs on. */
struct refusal {
	int (*fn)(int rank, int nranks, struct collc_ctx *ctx, struct collc_comm *comm,
		  unsigned char *send, unsigned char *recv);
	const char *after; /* names the checked all-reduce that follows */
};

/* Daemons disagree on the count: every rank gets -EINVAL. */
static int mismatch(int rank, int nranks, struct collc_ctx *ctx, struct collc_comm *comm,
		    unsigned char *send, unsigned char *recv)
{
	collc_req req;
	int r;

	/* The ranks of daemon 1 ask for another count. */
	r = collc_allreduce(comm, send, recv, rank % ndaemons ? 100 : 64, COLLC_FLOAT32, COLLC_SUM,
			    &req);
	if (r == 0)
		r = collc_wait(ctx, req, 10000);
	if (r != -EINVAL)
		return h_fail("rank %d: a mismatched all-reduce returned %s, not -EINVAL", rank,
			      collc_strerror(r));
	(void)nranks;
	return 0;
}

/*
 * All-to-all runs across daemons (a relay on the ring): 64 elements to and
 * from every rank, each one checked. Then each rank sends its right
 * neighbour (on another daemon) 16 elements, which expects 17: -EINVAL on
 * both, nothing written.
 */
static int p2p_refusal(int rank, int nranks, struct collc_ctx *ctx, struct collc_comm *comm,
		       unsigned char *send, unsigned char *recv)
{
	const int peer = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
	uint32_t *s = (uint32_t *)(void *)send, *d = (uint32_t *)(void *)recv;
	collc_req req;
	int r, failed = 0;

	for (int j = 0; j < nranks; j++)
		for (int e = 0; e < 64; e++)
			s[j * 64 + e] = (uint32_t)(rank * 1000000 + j * 1000 + e);
	memset(recv, 0xa5, 1 << 16);
	r = collc_alltoall(comm, send, recv, 64, COLLC_UINT32, &req);
	if (r == 0)
		r = collc_wait(ctx, req, 10000);
	if (r < 0)
		return h_fail("rank %d: an all-to-all across daemons: %s", rank, collc_strerror(r));
	for (int j = 0; j < nranks && !failed; j++)
		for (int e = 0; e < 64; e++)
			if (d[j * 64 + e] != (uint32_t)(j * 1000000 + rank * 1000 + e)) {
				failed = h_fail("rank %d: element %d from rank %d is %u", rank, e,
						j, d[j * 64 + e]);
				break;
			}
	memset(recv, 0xa5, 1 << 16);
	{
		collc_req sreq, rreq;
		int rs, rr;

		rs = collc_send(comm, send, 16, COLLC_FLOAT32, peer, &sreq);
		rr = collc_recv(comm, recv, 17, COLLC_FLOAT32, from, &rreq);
		if (rs == 0)
			rs = collc_wait(ctx, sreq, 10000);
		if (rr == 0)
			rr = collc_wait(ctx, rreq, 10000);
		if (rs != -EINVAL)
			failed = h_fail("rank %d: a send whose receive expects more returned %s, "
					"not -EINVAL",
					rank, collc_strerror(rs));
		if (rr != -EINVAL)
			failed = h_fail("rank %d: a receive expecting more than is sent returned "
					"%s, not -EINVAL",
					rank, collc_strerror(rr));
	}
	for (int i = 0; i < 1 << 16; i++)
		if (recv[i] != 0xa5) {
			failed = h_fail("rank %d: byte %d of the receive buffer changed", rank, i);
			break;
		}
	return failed;
}

#define P2P_BUF ((size_t)P2P_BLOCK * P2P_RING)

static int p2p_rank(int rank, int nranks, void *arg)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	uint8_t *send, *recv;

	(void)arg;
	if (join(&sh->id, rank, nranks, &ctx, &comm) < 0)
		return 1;
	if (collc_mem_alloc(ctx, P2P_BUF, -1, (void **)&send) < 0 ||
	    collc_mem_alloc(ctx, P2P_BUF, -1, (void **)&recv) < 0)
		return h_fail("rank %d: mem_alloc", rank);
	for (int dt = 0; dt < COLLC_NUM_DTYPES; dt++)
		if (p2p_all_pairs(ctx, comm, rank, nranks, (uint64_t)dt, (collc_dtype)dt, send,
				  recv, P2P_BUF))
			return 1;
	if (rank == 0)
		h_log("%d ranks on %d daemons: every rank to every rank, every dtype, random counts, "
		      "random posting order: correct",
		      nranks, ndaemons);
	if (p2p_ring(ctx, comm, rank, nranks, send, recv, P2P_BUF))
		return 1;
	if (rank == 0)
		h_log("ring exchange with %d sends and %d receives outstanding per rank: matched "
		      "in order",
		      P2P_RING, P2P_RING);
	if (daemon_of(0, nranks) != daemon_of(1, nranks)) {
		if (rank < 2 && p2p_refusals(ctx, comm, rank, send, recv, P2P_BUF, &sh->bar))
			return 1;
		if (rank >= 2 &&
		    (h_barrier_wait(&sh->bar, 20000) < 0 || h_barrier_wait(&sh->bar, 20000) < 0))
			return h_fail("rank %d: barrier", rank);
		if (rank == 0)
			h_log("across daemons: mismatched counts and dtypes -EINVAL on both sides, "
			      "nothing written; a missing sender or receiver -ETIMEDOUT, and its "
			      "late partner too");
	}
	/* The last rank (another daemon than rank 0's) dies while rank 0 receives from it. */
	return p2p_dying_peer(ctx, comm, rank, nranks, recv, &sh->bar, "on another daemon");
}

static int test_p2p(int nd, int nranks)
{
	if (nd < 2 || nd > MAX_DAEMONS || nranks < nd || nranks > MAX_RANKS)
		return h_fail("p2p: 2..%d daemons, up to %d ranks", MAX_DAEMONS, MAX_RANKS);
	h_barrier_init(&sh->bar, (uint32_t)nranks);
	start_daemons(nd);
	h_unique_id(&sh->id);
	return finish(h_run_ranks(nranks, p2p_rank, NULL));
}

static int refusal_rank(int rank, int nranks, void *arg)
{
	const struct refusal *rf = arg;
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	struct rc_case c = { .dtype = COLLC_FLOAT32, .op = COLLC_SUM, .seed = h_seed };
	void *send, *recv;
	collc_req req;
	int r, failed;

	if (join(&sh->id, rank, nranks, &ctx, &comm) < 0)
		return 1;
	if (collc_mem_alloc(ctx, 1 << 20, -1, &send) < 0 ||
	    collc_mem_alloc(ctx, 1 << 20, -1, &recv) < 0)
		return h_fail("rank %d: mem_alloc", rank);
	failed = rf->fn(rank, nranks, ctx, comm, send, recv);
	c.count = 1000;
	rc_fill_coll(&c, RC_ALLREDUCE, nranks, rank, send);
	r = collc_allreduce(comm, send, recv, c.count, c.dtype, c.op, &req);
	if (r == 0)
		r = collc_wait(ctx, req, 10000);
	if (r < 0)
		failed = h_fail("rank %d: the all-reduce %s: %s", rank, rf->after,
				collc_strerror(r));
	else
		failed |= rc_check_coll(&c, RC_ALLREDUCE, nranks, rank, 0, recv, rf->after);
	collc_comm_destroy(comm);
	collc_disconnect(ctx);
	return failed;
}

static int test_refusal(const struct refusal *rf)
{
	start_daemons(2);
	h_unique_id(&sh->id);
	return finish(h_run_ranks(4, refusal_rank, (void *)rf));
}

/*
 * All-to-all(v) across daemons as blocks (collcd's COLLCD_NET_A2A=blocks:
 * what the grid runs, here on the CPU executor, host memory unstaged):
 * uint32 elements that name sender, receiver, round and index, every one
 * checked. Rounds of all-to-all (0 to over a P2P_CHUNK a block), rounds of
 * all-to-allv with random counts (a quarter of the blocks empty), and
 * A2A_PIPE of them in flight at once beside a send to the right and a
 * receive from the left (the user's place in each pair) and an all-reduce.
 */
#define A2A_ROUNDS 10
#define A2A_PIPE   4
#define A2A_MAXV   (200u << 10) /* all-to-allv: elements one block may have */

static uint32_t a2a_val(int round, int from, int to, size_t i)
{
	return (uint32_t)rc_mix(h_seed ^ (uint64_t)round << 40 ^ (uint64_t)from << 32 ^
				(uint64_t)to << 24) +
	       (uint32_t)i;
}

/* Elements `from` sends `to` in round `round`: 0 (a quarter), else up to A2A_MAXV. */
static size_t a2a_vcount(int round, int from, int to)
{
	uint64_t x = rc_mix(h_seed ^ 0x76636e74ull ^ (uint64_t)round << 32 ^ (uint64_t)from << 16 ^
			    (uint64_t)to);

	return x % 4 == 0 ? 0 : (size_t)(x >> 8) % (x % 4 == 1 ? 16 : A2A_MAXV);
}

/* One all-to-all (v 0, count a block) or all-to-allv (v 1) in its slice of send and recv. */
static int a2a_submit(struct collc_comm *comm, int round, int v, size_t count, int rank, int nranks,
		      uint32_t *send, uint32_t *recv, collc_req *req)
{
	size_t sc[MAX_RANKS], sd[MAX_RANKS], rcn[MAX_RANKS], rd[MAX_RANKS], st = 0, rt = 0;

	for (int p = 0; p < nranks; p++) {
		sc[p] = v ? a2a_vcount(round, rank, p) : count;
		rcn[p] = v ? a2a_vcount(round, p, rank) : count;
		sd[p] = st;
		rd[p] = rt;
		st += sc[p];
		rt += rcn[p];
	}
	for (int p = 0; p < nranks; p++)
		for (size_t i = 0; i < sc[p]; i++)
			send[sd[p] + i] = a2a_val(round, rank, p, i);
	for (size_t i = 0; i < rt + 16; i++)
		recv[i] = 0xa5a5a5a5u;
	if (v)
		return collc_alltoallv(comm, send, sc, sd, recv, rcn, rd, COLLC_UINT32, req);
	return collc_alltoall(comm, send, recv, count, COLLC_UINT32, req);
}

static int a2a_check(int round, int v, size_t count, int rank, int nranks, const uint32_t *recv)
{
	size_t off = 0;

	for (int p = 0; p < nranks; p++) {
		size_t n = v ? a2a_vcount(round, p, rank) : count;

		for (size_t i = 0; i < n; i++)
			if (recv[off + i] != a2a_val(round, p, rank, i))
				return h_fail(
					"rank %d: %s round %d: element %zu from rank %d is %u, "
					"not %u",
					rank, v ? "all-to-allv" : "all-to-all", round, i, p,
					recv[off + i], a2a_val(round, p, rank, i));
		off += n;
	}
	for (int k = 0; k < 16; k++)
		if (recv[off + (size_t)k] != 0xa5a5a5a5u)
			return h_fail("rank %d: round %d wrote past its blocks", rank, round);
	return 0;
}

static int a2a_rank(int rank, int nranks, void *arg)
{
	/* All-to-all block counts: 0, 1, odd, and over P2P_CHUNK (4 MiB) a block. */
	static const size_t counts[] = { 0, 1, 37, 4099, (1u << 20) + 3 };
	const size_t slot = (size_t)A2A_MAXV * MAX_RANKS + ((1u << 20) + 3) * MAX_RANKS + 64;
	const int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	uint32_t *send, *recv;
	int failed = 0;

	(void)arg;
	if (join(&sh->id, rank, nranks, &ctx, &comm) < 0)
		return 1;
	if (collc_mem_alloc(ctx, (A2A_PIPE + 1) * slot * 4, -1, (void **)&send) < 0 ||
	    collc_mem_alloc(ctx, (A2A_PIPE + 1) * slot * 4, -1, (void **)&recv) < 0)
		return h_fail("rank %d: mem_alloc", rank);
	for (int round = 0; round < A2A_ROUNDS && !failed; round++) {
		int v = round % 2;
		size_t count = counts[(round / 2) % 5];
		collc_req req;
		int r = a2a_submit(comm, round, v, count, rank, nranks, send, recv, &req);

		if (r == 0)
			r = collc_wait(ctx, req, 30000);
		if (r < 0)
			failed = h_fail("rank %d: round %d: %s", rank, round, collc_strerror(r));
		else
			failed = a2a_check(round, v, count, rank, nranks, recv);
	}
	if (!failed) {
		/* In flight at once: A2A_PIPE all-to-all(v)s, a send and a receive, an all-reduce. */
		collc_req req[A2A_PIPE + 3];
		struct rc_case c = {
			.dtype = COLLC_FLOAT32, .op = COLLC_SUM, .seed = h_seed, .count = 4096
		};
		uint32_t *ps = send + A2A_PIPE * slot, *pr = recv + A2A_PIPE * slot;
		int r = 0, nr = 0;

		for (size_t i = 0; i < 1000; i++)
			ps[i] = a2a_val(1000, rank, right, i);
		for (size_t i = 0; i < 1000; i++)
			pr[i] = 0;
		r = collc_send(comm, ps, 1000, COLLC_UINT32, right, &req[nr++]);
		if (r == 0)
			r = collc_recv(comm, pr, 1000, COLLC_UINT32, left, &req[nr++]);
		for (int q = 0; q < A2A_PIPE && r == 0; q++)
			r = a2a_submit(comm, 100 + q, q % 2, 3001, rank, nranks, send + q * slot,
				       recv + q * slot, &req[nr++]);
		if (r == 0) {
			rc_fill_coll(&c, RC_ALLREDUCE, nranks, rank, ps + 2000);
			r = collc_allreduce(comm, ps + 2000, pr + 2000, c.count, c.dtype, c.op,
					    &req[nr++]);
		}
		for (int i = 0; i < nr; i++) {
			int w = collc_wait(ctx, req[i], 30000);

			if (r == 0)
				r = w;
		}
		if (r < 0) {
			failed = h_fail("rank %d: all-to-alls in flight: %s", rank,
					collc_strerror(r));
		} else {
			for (int q = 0; q < A2A_PIPE && !failed; q++)
				failed = a2a_check(100 + q, q % 2, 3001, rank, nranks,
						   recv + q * slot);
			for (size_t i = 0; i < 1000 && !failed; i++)
				if (pr[i] != a2a_val(1000, left, rank, i))
					failed = h_fail(
						"rank %d: the receive beside them: element %zu",
						rank, i);
			if (!failed)
				failed = rc_check_coll(&c, RC_ALLREDUCE, nranks, rank, 0, pr + 2000,
						       "the all-reduce beside them");
		}
	}
	collc_comm_destroy(comm);
	collc_disconnect(ctx);
	return failed;
}

static int test_a2a_blocks(int nd, int nranks)
{
	int failed;

	setenv("COLLCD_NET_A2A", "blocks", 1); /* every collcd started below inherits it */
	start_daemons(nd);
	h_unique_id(&sh->id);
	failed = h_run_ranks(nranks, a2a_rank, NULL);
	if (!failed)
		h_log("%d ranks on %d daemons (%s): every all-to-all(v) block right", nranks, nd,
		      block ? "in blocks" : "round-robin");
	return finish(failed);
}

/*
 * Stream-ordered SQEs across daemons (test_daemons stream): raw clients
 * (tests/common/raw.h) on every daemon write the SQEs with COLLC_SQE_STREAM
 * and play their GPU stream's part (go, then wait for done), as libcollc's
 * _stream forms do on a GPU; collcd's gates do not care which executor runs
 * the collective. Ranks round-robin on 2 daemons: every rank's right and
 * left neighbours run on the other daemon.
 */
#define ST_REGION (512u << 10) /* one collective's send or receive side */
#define ST_NREG   8u
#define ST_MS     (h_sanitized() ? 30000 : 10000)
#define ST_NCOLL  6 /* the five collectives, then all-to-all */
#define ST_RING   3 /* stream-ordered sends (and receives) a rank has in flight */

struct st_rank {
	struct raw c;
	uint32_t comm, mr;
	char *buf;
	uint64_t seq;
	uint32_t ticket;
	int rank, nranks;
};

static char *st_send(struct st_rank *k, uint32_t reg)
{
	return k->buf + (size_t)reg * 2 * ST_REGION;
}

static char *st_recv(struct st_rank *k, uint32_t reg)
{
	return st_send(k, reg) + ST_REGION;
}

static int st_join(struct st_rank *k, int rank, int nranks)
{
	void *p;
	int r;

	memset(k, 0, sizeof(*k));
	k->rank = rank;
	k->nranks = nranks;
	k->ticket = (uint32_t)(h_seed % 1000) + 1;
	/* The raw client connects to h_sock: this rank's daemon's, in this process only. */
	snprintf(h_sock, sizeof(h_sock), "%s", socks[daemon_of(rank, nranks)]);
	if (raw_open(&k->c))
		return 1;
	if (!k->c.gates || k->c.ngates < COLLC_GATES)
		return h_fail("rank %d: collcd offers no stream gates", rank);
	r = raw_comm_init(&k->c, &sh->id, (uint32_t)nranks, (uint32_t)rank, &k->comm);
	if (r < 0)
		return h_fail("rank %d: comm_init: %s", rank, collc_strerror(r));
	r = raw_mem_alloc(&k->c, (size_t)2 * ST_REGION * ST_NREG, &k->mr, &p);
	if (r < 0)
		return h_fail("rank %d: mem_alloc: %s", rank, collc_strerror(r));
	k->buf = p;
	return 0;
}

static int st_barrier(int rank)
{
	if (h_barrier_wait(&sh->bar, 2 * ST_MS) < 0)
		return h_fail("rank %d: the other ranks did not reach the barrier", rank);
	return 0;
}

/* The stream's wait for done == ticket; then res must be want. */
static int st_expect(struct st_rank *k, uint32_t gate, uint32_t ticket, int32_t want,
		     const char *what)
{
	int32_t res;

	if (raw_gate_wait(&k->c, gate, ticket, ST_MS) < 0)
		return h_fail("rank %d, %s: gate %u: done is %u, not %u, after %d ms", k->rank,
			      what, gate, raw_gate_done(&k->c, gate), ticket, ST_MS);
	res = raw_gate_res(&k->c, gate);
	if (res != want)
		return h_fail("rank %d, %s: gate %u: res %d (%s), want %d (%s)", k->rank, what,
			      gate, res, collc_strerror(res), want, collc_strerror(want));
	return 0;
}

/* Nothing ended on gates [g0, g0 + n) (done below their tickets t0...). */
static int st_none_done(struct st_rank *k, uint32_t g0, uint32_t n, uint32_t t0, const char *what)
{
	for (uint32_t i = 0; i < n; i++)
		if (raw_gate_done(&k->c, g0 + i) == t0 + i)
			return h_fail("rank %d, %s: gate %u done (res %d) before every go", k->rank,
				      what, g0 + i, raw_gate_res(&k->c, g0 + i));
	return 0;
}

/* Collective k of round rnd: its case (k < 5: refcheck; 5: all-to-all of uint32). */
static struct rc_case st_case(int rnd, int k, int nranks)
{
	uint64_t x = rc_mix(h_seed ^ 0x7374726dull ^ (uint64_t)rnd << 16 ^ (uint64_t)k);
	/* One rank's part: 1 to a whole region's share, over several ring steps sometimes. */
	size_t max = ST_REGION / 8 / (size_t)nranks;
	struct rc_case c = { .dtype = k == 5 ? COLLC_UINT32 : dtypes[x % 5],
			     .op = k == 1 || k == 3 || k == 5 ? COLLC_SUM : ops[(x >> 8) % 5],
			     .seed = x };

	c.count = rnd == 0 && k == 0 ? 1 : 1 + (size_t)(x >> 16) % max;
	return c;
}

static void st_fill(struct st_rank *k, int rnd, int coll, const struct rc_case *c, uint32_t reg)
{
	if (coll < 5) {
		rc_fill_coll(c, (enum rc_coll)coll, k->nranks, k->rank, st_send(k, reg));
	} else {
		uint32_t *s = (uint32_t *)st_send(k, reg);

		for (int p = 0; p < k->nranks; p++)
			for (size_t i = 0; i < c->count; i++)
				s[(size_t)p * c->count + i] = a2a_val(5000 + rnd, k->rank, p, i);
	}
	rc_canary_fill(st_recv(k, reg), ST_REGION, c->seed);
}

static int st_check(struct st_rank *k, int rnd, int coll, const struct rc_case *c, uint32_t reg,
		    int root)
{
	const uint32_t *r = (const uint32_t *)st_recv(k, reg);

	if (coll < 5) {
		if (coll == RC_REDUCE && k->rank != root)
			return 0;
		return rc_check_coll(c, (enum rc_coll)coll, k->nranks, k->rank, root, r,
				     "stream-ordered across daemons");
	}
	for (int p = 0; p < k->nranks; p++)
		for (size_t i = 0; i < c->count; i++)
			if (r[(size_t)p * c->count + i] != a2a_val(5000 + rnd, p, k->rank, i))
				return h_fail(
					"rank %d: stream all-to-all round %d: element %zu from "
					"rank %d wrong",
					k->rank, rnd, i, p);
	return 0;
}

static void st_publish_coll(struct st_rank *k, int coll, const struct rc_case *c, uint32_t reg,
			    int root, uint32_t gate, uint32_t ticket)
{
	struct collc_sqe e = { 0 };

	e.opcode = coll < 5 ? (uint8_t)(COLLC_OP_ALLREDUCE + coll) : COLLC_OP_ALLTOALL;
	e.dtype = (uint8_t)c->dtype;
	e.redop = (uint8_t)c->op;
	e.root = root;
	e.comm = k->comm;
	e.count = c->count;
	e.send_mr = e.recv_mr = k->mr;
	e.send_off = (uint64_t)reg * 2 * ST_REGION;
	e.recv_off = e.send_off + ST_REGION;
	e.flags = COLLC_SQE_STREAM;
	e.gate = gate;
	e.user_data = ticket;
	e.seq = k->seq++;
	raw_publish(&k->c, &e);
}

/*
 * Round rnd: the six collectives on gates 0..5 of one stream, all submitted
 * at once; every rank but the last writes its gos; nothing may end (and the
 * last rank's receive buffers stay untouched) until it writes its own, one
 * by one; then every gate holds 0 and every result is right.
 */
static int st_colls(struct st_rank *k, int rnd)
{
	const int late = k->nranks - 1;
	struct rc_case c[ST_NCOLL];
	uint32_t t0 = k->ticket;
	int failed = 0;

	for (int coll = 0; coll < ST_NCOLL; coll++) {
		c[coll] = st_case(rnd, coll, k->nranks);
		st_fill(k, rnd, coll, &c[coll], (uint32_t)coll);
		st_publish_coll(k, coll, &c[coll], (uint32_t)coll, (rnd + coll) % k->nranks,
				(uint32_t)coll, t0 + (uint32_t)coll);
	}
	k->ticket += ST_NCOLL;
	if (k->rank != late)
		for (int coll = 0; coll < ST_NCOLL; coll++)
			raw_gate_go(&k->c, (uint32_t)coll, t0 + (uint32_t)coll);
	if (st_barrier(k->rank))
		return 1;
	h_sleep_us(150000);
	failed |= st_none_done(k, 0, ST_NCOLL, t0, "collectives held by the last rank's stream");
	for (int coll = 0; coll < ST_NCOLL && k->rank == late && !failed; coll++)
		if (rc_canary_check(st_recv(k, (uint32_t)coll), 0, ST_REGION, c[coll].seed) >= 0)
			failed = h_fail(
				"rank %d: receive buffer of collective %d written before its go",
				k->rank, coll);
	if (st_barrier(k->rank) || failed)
		return 1;
	for (int coll = 0; coll < ST_NCOLL; coll++) {
		if (k->rank == late)
			raw_gate_go(&k->c, (uint32_t)coll, t0 + (uint32_t)coll);
		failed |= st_expect(k, (uint32_t)coll, t0 + (uint32_t)coll, 0, "stream collective");
		if (!failed)
			failed |= st_check(k, rnd, coll, &c[coll], (uint32_t)coll,
					   (rnd + coll) % k->nranks);
		if (failed)
			return 1;
	}
	return 0;
}

static void st_publish_p2p(struct st_rank *k, int send, int peer, size_t bytes, uint32_t reg,
			   uint32_t gate, uint32_t ticket)
{
	struct collc_sqe e = { 0 };

	e.opcode = send ? COLLC_OP_SEND : COLLC_OP_RECV;
	e.dtype = COLLC_UINT8;
	e.root = peer;
	e.comm = k->comm;
	e.count = bytes;
	e.send_mr = e.recv_mr = k->mr;
	e.send_off = (uint64_t)reg * 2 * ST_REGION;
	e.recv_off = e.send_off + ST_REGION;
	e.flags = COLLC_SQE_STREAM;
	e.gate = gate;
	e.user_data = ticket;
	raw_publish(&k->c, &e);
}

/* Bytes of stream send j of rank `from` in round rnd (0, small, over a ring region's half). */
static size_t st_ring_bytes(int rnd, int from, int j)
{
	uint64_t x = rc_mix(h_seed ^ 0x72696e67ull ^ (uint64_t)rnd << 24 ^ (uint64_t)from << 8 ^
			    (uint64_t)j);

	return j == 0 && rnd == 0 ? 0 : 1 + (size_t)(x >> 8) % (ST_REGION - 64);
}

/*
 * A ring of stream-ordered sends and receives (ST_RING each way, on gates
 * 16.. and 32..): even ranks write their gos, odd ones hold theirs; nothing
 * ends and no receive buffer is written until the odd ranks write theirs;
 * then every gate holds 0 and every byte is right.
 */
static int st_ring(struct st_rank *k, int rnd)
{
	const int n = k->nranks, right = (k->rank + 1) % n, left = (k->rank + n - 1) % n;
	const int hold = k->rank % 2;
	uint32_t t0 = k->ticket;
	int failed = 0;

	for (int j = 0; j < ST_RING; j++) {
		size_t sb = st_ring_bytes(rnd, k->rank, j), rb = st_ring_bytes(rnd, left, j);
		uint8_t *s = (uint8_t *)st_send(k, (uint32_t)j);

		for (size_t b = 0; b < sb; b++)
			s[b] = (uint8_t)rc_mix(h_seed ^ (uint64_t)rnd << 40 ^
					       (uint64_t)k->rank << 32 ^ (uint64_t)j << 28 ^ b);
		rc_canary_fill(st_recv(k, (uint32_t)j), ST_REGION, t0 + (uint32_t)j);
		/* Even ranks send first, odd ones receive first: any order must do. */
		for (int pass = 0; pass < 2; pass++) {
			if ((pass == 0) == (k->rank % 2 == 0))
				st_publish_p2p(k, 1, right, sb, (uint32_t)j, 16u + (uint32_t)j,
					       t0 + (uint32_t)j);
			else
				st_publish_p2p(k, 0, left, rb, (uint32_t)j, 32u + (uint32_t)j,
					       t0 + ST_RING + (uint32_t)j);
		}
	}
	k->ticket += 2 * ST_RING;
	if (!hold)
		for (int j = 0; j < ST_RING; j++) {
			raw_gate_go(&k->c, 16u + (uint32_t)j, t0 + (uint32_t)j);
			raw_gate_go(&k->c, 32u + (uint32_t)j, t0 + ST_RING + (uint32_t)j);
		}
	if (st_barrier(k->rank))
		return 1;
	h_sleep_us(150000);
	failed |= st_none_done(k, 16, ST_RING, t0, "sends held by odd ranks' streams");
	failed |= st_none_done(k, 32, ST_RING, t0 + ST_RING, "receives held by odd ranks' streams");
	for (int j = 0; j < ST_RING && !failed; j++)
		if (rc_canary_check(st_recv(k, (uint32_t)j), 0, ST_REGION, t0 + (uint32_t)j) >= 0)
			failed = h_fail("rank %d: receive %d written before the gos", k->rank, j);
	if (st_barrier(k->rank) || failed)
		return 1;
	if (hold)
		for (int j = 0; j < ST_RING; j++) {
			raw_gate_go(&k->c, 32u + (uint32_t)j, t0 + ST_RING + (uint32_t)j);
			raw_gate_go(&k->c, 16u + (uint32_t)j, t0 + (uint32_t)j);
		}
	for (int j = 0; j < ST_RING && !failed; j++) {
		size_t rb = st_ring_bytes(rnd, left, j);
		const uint8_t *r = (const uint8_t *)st_recv(k, (uint32_t)j);

		failed |= st_expect(k, 16u + (uint32_t)j, t0 + (uint32_t)j, 0, "stream send");
		failed |= st_expect(k, 32u + (uint32_t)j, t0 + ST_RING + (uint32_t)j, 0,
				    "stream receive");
		for (size_t b = 0; b < rb && !failed; b++)
			if (r[b] != (uint8_t)rc_mix(h_seed ^ (uint64_t)rnd << 40 ^
						    (uint64_t)left << 32 ^ (uint64_t)j << 28 ^ b))
				failed = h_fail("rank %d: stream receive %d of %zu bytes from rank "
						"%d: byte %zu wrong",
						k->rank, j, rb, left, b);
		if (!failed &&
		    rc_canary_check(st_recv(k, (uint32_t)j), rb, ST_REGION, t0 + (uint32_t)j) >= 0)
			failed = h_fail("rank %d: stream receive %d wrote past its %zu bytes",
					k->rank, j, rb);
	}
	return failed;
}

/*
 * Errors release the streams: collectives whose counts disagree across
 * daemons end with -EINVAL on every gate; a stream send and its stream
 * receive whose counts differ end with -EINVAL on both, nothing written.
 */
static int st_errors(struct st_rank *k)
{
	const int n = k->nranks, right = (k->rank + 1) % n, left = (k->rank + n - 1) % n;
	struct rc_case c = st_case(99, 0, n);
	uint32_t t0 = k->ticket;
	int failed;

	c.count = 1000 + (k->rank == n - 1); /* the last rank (daemon 1) disagrees */
	st_fill(k, 99, 0, &c, 0);
	st_publish_coll(k, 0, &c, 0, 0, 0, t0);
	raw_gate_go(&k->c, 0, t0);
	failed = st_expect(k, 0, t0, -EINVAL, "collective whose counts disagree across daemons");
	rc_canary_fill(st_recv(k, 1), ST_REGION, t0);
	st_publish_p2p(k, 1, right, 4096 + (size_t)k->rank, 1, 16, t0 + 1);
	st_publish_p2p(k, 0, left, 4096 + (size_t)k->rank, 1, 32, t0 + 2);
	raw_gate_go(&k->c, 16, t0 + 1);
	raw_gate_go(&k->c, 32, t0 + 2);
	failed |= st_expect(k, 16, t0 + 1, -EINVAL, "stream send whose receive's count differs");
	failed |= st_expect(k, 32, t0 + 2, -EINVAL, "stream receive whose send's count differs");
	if (!failed && rc_canary_check(st_recv(k, 1), 0, ST_REGION, t0) >= 0)
		failed = h_fail("rank %d: a mismatched stream receive wrote its buffer", k->rank);
	k->ticket += 3;
	return failed;
}

/*
 * A partner that times out while the stream op waits for its go: rank 1's
 * host-ordered receive from rank 0 (400 ms timeout on its daemon) ends
 * -ETIMEDOUT while rank 0's stream send waits for its go; once rank 0
 * writes go, its send ends -ETIMEDOUT too (the sender's daemon decides
 * both), nothing written.
 */
static int st_timeout(struct st_rank *k)
{
	uint32_t t = k->ticket++;
	int failed = 0, r;

	if (k->rank == 0)
		st_publish_p2p(k, 1, 1, 256, 3, 41, t);
	if (k->rank == 1) {
		struct collc_sqe e = { 0 };

		rc_canary_fill(st_recv(k, 3), ST_REGION, t);
		r = raw_comm_timeout(&k->c, k->comm, 400);
		if (r < 0)
			return h_fail("rank 1: comm timeout: %s", collc_strerror(r));
		e.opcode = COLLC_OP_RECV;
		e.dtype = COLLC_UINT8;
		e.root = 0;
		e.comm = k->comm;
		e.count = 256;
		e.recv_mr = k->mr;
		e.recv_off = 3 * 2 * (uint64_t)ST_REGION + ST_REGION;
		e.user_data = 77;
		raw_publish(&k->c, &e);
		r = raw_completion(&k->c, 77, ST_MS);
		if (r != -ETIMEDOUT)
			failed = h_fail("rank 1: host receive whose stream send waits for its go: "
					"%d (%s), want -ETIMEDOUT",
					r, r == 1 ? "none came" : collc_strerror(r));
		if (rc_canary_check(st_recv(k, 3), 0, ST_REGION, t) >= 0)
			failed = h_fail("rank 1: a timed out receive wrote its buffer");
		r = raw_comm_timeout(&k->c, k->comm, UINT32_MAX);
		if (r < 0)
			failed = h_fail("rank 1: comm timeout back: %s", collc_strerror(r));
	}
	if (st_barrier(k->rank))
		return 1;
	if (k->rank == 0) {
		if (raw_gate_done(&k->c, 41) == t)
			failed = h_fail("rank 0: a stream send ended before its go");
		raw_gate_go(&k->c, 41, t);
		failed |= st_expect(k, 41, t, -ETIMEDOUT, "stream send whose receive timed out");
	}
	return failed;
}

static int stream_rank(int rank, int nranks, void *arg)
{
	struct st_rank k;
	int failed = 0;

	(void)arg;
	if (st_join(&k, rank, nranks))
		return 1;
	for (int rnd = 0; rnd < 3 && !failed; rnd++)
		failed = st_colls(&k, rnd) || st_barrier(rank);
	if (!failed && rank == 0)
		h_log("%d ranks on 2 daemons: the five collectives and all-to-all stream-ordered, "
		      "held by one stream's go, then right",
		      nranks);
	for (int rnd = 0; rnd < 3 && !failed; rnd++)
		failed = st_ring(&k, rnd) || st_barrier(rank);
	if (!failed && rank == 0)
		h_log("stream-ordered send/recv ring across daemons: nothing moved before the gos, "
		      "then every byte right");
	if (!failed)
		failed = st_errors(&k) || st_barrier(rank);
	if (!failed)
		failed = st_timeout(&k) || st_barrier(rank);
	/* A communicator that goes while a stream receive waits for its go releases it. */
	if (!failed && rank == 0) {
		uint32_t t = k.ticket;

		st_publish_p2p(&k, 0, nranks - 1, 64, 2, 40, t);
		h_sleep_us(50000);
		if (raw_gate_done(&k.c, 40) == t)
			failed = h_fail("rank 0: a stream receive ended before its go");
		raw_comm_ref(&k.c, COLLC_MSG_COMM_ABORT, k.comm);
		failed |= st_expect(&k, 40, t, -ECANCELED, "stream receive at comm_abort");
	}
	/* The others keep the communicator until then (a client that goes revokes it). */
	if (st_barrier(rank))
		failed = 1;
	if (!failed && rank == 0)
		h_log("errors release the gates: -EINVAL (mismatch), -ETIMEDOUT (partner timed "
		      "out), -ECANCELED (abort)");
	raw_close(&k.c);
	return failed;
}

static int test_stream(int a2a_blocks)
{
	if (a2a_blocks)
		setenv("COLLCD_NET_A2A", "blocks", 1);
	h_barrier_init(&sh->bar, 4);
	start_daemons(2);
	h_unique_id(&sh->id);
	return finish(h_run_ranks(4, stream_rank, NULL));
}

static const struct refusal refuse_mismatch = { mismatch, "after the mismatch" };
static const struct refusal refuse_p2p = { p2p_refusal, "after the send and receive" };

/* Refusals counted in daemon 0's status. */
/* The number after "key": in the status --json of the daemon at sock; -1 when there is none. */
static long status_count_at(const char *sock, const char *key)
{
	char out[16384], pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	if (status_json(sock, out, sizeof(out)) != 0)
		return -1;
	p = strstr(out, pat);
	return p ? strtol(p + strlen(pat), NULL, 10) : -1;
}

static long status_count(const char *key)
{
	return status_count_at(h_sock, key);
}

static long refused_count(void)
{
	return status_count("refused");
}

/*
 * The root daemon's refusals once they reach want, else what they are after
 * 5 s (-1: no status): a daemon counts a refusal on its node thread, maybe
 * after the peer it refused has given up.
 */
static long refused_wait(long want)
{
	long n = refused_count();

	for (int i = 0; i < 500 && n >= 0 && n < want; i++) {
		h_sleep_us(10000);
		n = refused_count();
	}
	return n;
}

/*
 * The staged eager path of GPU buffers across daemons (inputs copied out
 * into the slot's stage, results computed aside and copied in) without a
 * GPU: collcd's COLLCD_NET_EAGER_STAGE=host stages host buffers the same
 * way, memmove for the executor's copy. Every collective must be right and
 * every daemon must have staged some (a broadcast's other daemon, whose
 * ranks send nothing, too).
 */
static int test_staged(int nd, int nranks)
{
	int failed;

	setenv("COLLCD_NET_EAGER_STAGE", "host", 1); /* every collcd started below inherits it */
	daemon_args[6] = "--set";
	daemon_args[7] = "net_eager_staged_max_bytes=262144";
	start_daemons(nd);
	h_unique_id(&sh->id);
	ring_check = 1;
	failed = h_run_ranks(nranks, coll_rank, NULL);
	for (int d = 0; d < nd && !failed; d++) {
		const long n = status_count_at(socks[d], "net_eager_staged");

		if (n <= 0)
			failed = h_fail(
				"collcd %d staged no eager collective (net_eager_staged %ld)", d,
				n);
	}
	if (!failed)
		h_log("%d ranks on %d daemons, buffers staged: every collective right, every "
		      "daemon staged some",
		      nranks, nd);
	return finish(failed);
}

/* The root daemon's listen port (the net object's: the config says port 0); 0 when unknown. */
static uint16_t root_listen_port(void)
{
	char out[16384];
	const char *p;

	if (status_json(h_sock, out, sizeof(out)) != 0 || !(p = strstr(out, "\"transport\"")) ||
	    !(p = strstr(p, "\"listen\": \"")) || !(p = strchr(p + 11, ':')))
		return 0;
	return (uint16_t)atoi(p + 1);
}

static int secret_rank(int rank, int nranks, void *arg)
{
	struct collc_unique_id bad = sh->id;
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	int r;

	(void)arg;
	if (rank == 0) {
		/* The honest rank: its communicator never completes; it gives up when told. */
		return 0;
	}
	/* Bytes 80..95 are the secret (proto/wire.h struct collc_uid). */
	bad.bytes[80] ^= 0x5a;
	r = collc_connect(socks[1], &ctx);
	if (r < 0)
		return h_fail("connect: %s", collc_strerror(r));
	r = collc_comm_init(ctx, &bad, nranks, rank, -1, &comm);
	collc_disconnect(ctx);
	if (r != -EACCES)
		return h_fail("comm_init with a wrong secret returned %s, not -EACCES",
			      collc_strerror(r));
	return 0;
}

/* A rank on daemon 0 waits in comm_init for a partner that has the wrong secret. */
static int secret_root_rank(void *arg)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;

	(void)arg;
	if (collc_connect(h_sock, &ctx) < 0)
		return 1;
	/* Never completes: the test kills this process once the other rank was refused. */
	collc_comm_init(ctx, &sh->id, 2, 0, -1, &comm);
	return 0;
}

static int test_secret(void)
{
	int failed = 0;
	long before, after;
	pid_t waiter;

	start_daemons(2);
	h_unique_id(&sh->id);
	before = refused_count();
	waiter = h_fork(secret_root_rank, NULL);
	h_sleep_us(200000); /* the root daemon knows the communicator now */
	failed |= h_run_ranks(2, secret_rank, NULL);
	/*
	 * Each daemon checks the other's MAC: the joiner's refusal ends the
	 * rank's comm_init, and the root daemon may count its own later.
	 */
	after = refused_wait(before + 1);
	if (before < 0 || after <= before)
		failed |= h_fail("the root daemon counted no refusal (%ld before, %ld after)",
				 before, after);
	kill(waiter, SIGKILL);
	waitpid(waiter, NULL, 0);
	/* The root daemon still serves: a fresh communicator across both daemons works. */
	h_unique_id(&sh->id);
	if (!failed)
		failed |= h_run_ranks(2, coll_rank, NULL);
	return finish(failed);
}

static int sig;    /* SIGKILL or SIGSTOP */
static int victim; /* the daemon the kill and stop cases take away */

/* kill -9 of a daemon while large all-reduces run: the other daemon's ranks get -EPIPE fast. */
static int kill_a2a; /* all-to-alls as blocks, the victim's ranks in them too */

static int kill_rank(int rank, int nranks, void *arg)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	size_t count = 4u << 20;
	collc_req reqs[64];
	void *send, *recv;
	int n = 0, r = 0;

	(void)arg;
	if (join(&sh->id, rank, nranks, &ctx, &comm) < 0)
		return 1;
	if (collc_mem_alloc(ctx, count * 4, -1, &send) < 0 ||
	    collc_mem_alloc(ctx, count * 4, -1, &recv) < 0)
		return h_fail("rank %d: mem_alloc", rank);
	if (rank % ndaemons == victim && !kill_a2a) {
		/* The ranks of the daemon to be killed just wait for it. */
		h_add(&sh->submitted, 1);
		pause();
		return 0;
	}
	for (; n < 64; n++) {
		if (kill_a2a)
			r = collc_alltoall(comm, send, recv, count / (size_t)nranks, COLLC_FLOAT32,
					   &reqs[n]);
		else
			r = collc_allreduce(comm, send, recv, count, COLLC_FLOAT32, COLLC_SUM,
					    &reqs[n]);
		if (r < 0)
			break;
	}
	if (rank % ndaemons == victim) {
		/* Blocks to and from it move when its daemon dies. */
		h_add(&sh->submitted, 1);
		pause();
		return 0;
	}
	h_add(&sh->submitted, 1);
	for (int i = 0; i < n; i++) {
		r = collc_wait(ctx, reqs[i], 10000);
		if (r < 0)
			break;
	}
	sh->errs[rank] = (uint32_t)-r;
	sh->err_ns[rank] = h_now_ns();
	if (r != (sig == SIGSTOP ? -ETIMEDOUT : -EPIPE))
		return h_fail("rank %d: after the %s: %s", rank, sig == SIGSTOP ? "stop" : "kill",
			      collc_strerror(r));
	return 0;
}

static int test_kill(int sig_, int which)
{
	int nranks = 4, failed = 0, survivor = 1 - which;
	pid_t pids[MAX_RANKS];
	uint64_t t_kill;

	sig = sig_;
	victim = which;
	start_daemons(2);
	h_unique_id(&sh->id);
	for (int r = 0; r < nranks; r++)
		pids[r] = h_spawn(kill_rank, r, nranks, NULL);
	if (h_wait_at_least(&sh->submitted, (uint32_t)nranks, 20000) < 0)
		failed |= h_fail("the ranks did not start");
	h_sleep_us(100000);
	t_kill = h_now_ns();
	if (which == 0) {
		h_daemon_kill(sig);
	} else {
		kill(dpids[which], sig);
		if (sig == SIGKILL) {
			waitpid(dpids[which], NULL, 0);
			dpids[which] = 0;
		}
	}
	failed |= h_reap(pids + survivor, 1, NULL, 5000) |
		  h_reap(pids + survivor + 2, 1, NULL, 5000);
	for (int r = which; r < nranks; r += 2)
		kill(pids[r], SIGKILL);
	h_reap(pids + which, 1, NULL, 1000);
	h_reap(pids + which + 2, 1, NULL, 1000);
	for (int r = survivor; r < nranks; r += 2) {
		double ms = (double)(sh->err_ns[r] - t_kill) / 1e6;

		h_log("rank %d: %s %.1f ms after the %s", r, strerror((int)sh->errs[r]), ms,
		      sig == SIGSTOP ? "stop" : "kill");
		if (!sh->err_ns[r] || ms > 2000)
			failed |= h_fail("rank %d: no error within 2 s", r);
	}
	if (sig == SIGSTOP)
		kill(dpids[which], SIGCONT);
	/* The surviving daemon keeps serving: a communicator of its own runs. */
	if (!failed && which == 1) {
		ndaemons = 1;
		h_unique_id(&sh->id);
		failed |= h_run_ranks(2, coll_rank, NULL);
		ndaemons = 2;
	}
	return finish(failed);
}

/* Connections that are not collcd daemons: nothing may come of them. */
static int test_garbage(void)
{
	long before, after;
	int fds[300], n = 0, failed = 0;
	struct sockaddr_in a = { .sin_family = AF_INET };

	start_daemons(2);
	a.sin_port = htons(root_listen_port());
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	before = refused_count();
	if (!a.sin_port)
		return finish(h_fail("no listen port in the root daemon's status"));
	for (int i = 0; i < 300; i++) {
		uint8_t junk[200];
		uint64_t st = h_seed + (uint64_t)i;
		int fd = socket(AF_INET, SOCK_STREAM, 0);

		if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		for (size_t k = 0; k < sizeof(junk); k++)
			junk[k] = (uint8_t)h_rand(&st);
		if (i % 4 == 1) {
			/* A handshake header that claims a huge body, then nothing. */
			uint32_t hdr[4] = { 0x55414c43u, 1, 0x7fffffffu, 0 };

			memcpy(junk, hdr, sizeof(hdr));
			if (write(fd, junk, 16) < 0)
				h_log("write: %s", strerror(errno));
		} else if (i % 4 == 2) {
			if (write(fd, junk, 1 + i % 150) < 0)
				h_log("write: %s", strerror(errno));
		}
		/* i % 4 == 0: a port scan that sends nothing; 3: connect and close at once. */
		if (i % 4 == 3)
			close(fd);
		else
			fds[n++] = fd;
	}
	/* Meanwhile the daemons serve a communicator spanning both. */
	h_unique_id(&sh->id);
	failed |= h_run_ranks(2, coll_rank, NULL);
	for (int i = 0; i < n; i++)
		close(fds[i]);
	after = refused_wait(before + 100);
	h_log("refused %ld -> %ld", before, after);
	if (after < before + 100)
		failed |= h_fail(
			"the root daemon counted only %ld refusals of %d garbage connections",
			after - before, 300);
	return finish(failed);
}

/*
 * A peer that holds the secret, then breaks the protocol: the test plays a
 * joining daemon of a 3-rank communicator whose rank 0 waits in comm_init
 * on the root daemon (rank 2 never comes). After the handshake it sends,
 * mostly after a valid REG of rank 1, one kind of hostile message; the
 * root daemon must count a protocol error, end rank 0's comm_init with an
 * error within 2 s, and keep serving others.
 */
enum peer_case {
	PC_MAGIC,      /* a header with another magic */
	PC_TYPE,       /* a type that does not exist */
	PC_LONG,       /* a length over MSG_MAX */
	PC_REG_SIZE,   /* REG of another size */
	PC_REG_RANK,   /* REG of a rank past nranks */
	PC_REG_NRANKS, /* REG with another nranks */
	PC_REG_TWICE,  /* the same rank twice */
	PC_COLL,       /* a collective before the table */
	PC_DONE,       /* DONE of a collective never asked for */
	PC_TABLE,      /* a table, sent to the root */
	PC_EAGER,      /* an eager result, sent to the root */
	PC_PEER_IN,    /* the root's inputs, sent to the root */
	PC_P2PL,       /* send/recv handles before the links */
	PC_RANDOM,     /* messages of random type, length and bytes */
	PC_COUNT
};

static const char *const peer_case_names[PC_COUNT] = {
	"bad magic",  "unknown type",      "oversized length",  "REG size",
	"REG rank",   "REG nranks",        "REG twice",         "COLL early",
	"DONE",       "TABLE to the root", "EAGER to the root", "PEER_IN to the root",
	"P2PL early", "random messages",
};

/* A header claiming len bytes of body, and the body (none: body NULL), in one send. */
static void peer_send(int fd, uint32_t magic, uint16_t type, const void *body, uint32_t len)
{
	struct msg_hdr h = { .magic = magic, .type = type, .len = len };
	struct iovec v[2] = { { &h, sizeof(h) }, { (void *)body, body ? len : 0 } };
	struct msghdr m = { .msg_iov = v, .msg_iovlen = 2 };

	/* The daemon may close the connection at any point: a failed write is expected. */
	if (sendmsg(fd, &m, MSG_NOSIGNAL) < 0 && errno != EPIPE && errno != ECONNRESET)
		h_log("peer: send: %s", strerror(errno));
}

/* 64 messages of valid magic, any type (M_PING of no body is the only harmless one) and length. */
static void peer_random(int fd, uint64_t st)
{
	static uint8_t body[4096];

	for (int i = 0; i < 64; i++) {
		uint16_t type = (uint16_t)(h_rand(&st) % (M_TYPE_MAX + 2));
		uint32_t len = (uint32_t)(h_rand(&st) % sizeof(body));

		for (uint32_t b = 0; b < len; b++)
			body[b] = (uint8_t)h_rand(&st);
		peer_send(fd, MSG_MAGIC, type, body, len);
	}
}

static void peer_reg(int fd, uint32_t rank, uint32_t nranks, uint32_t len)
{
	struct m_reg m = { .rank = rank, .nranks = nranks, .max_chan = 1 };

	peer_send(fd, MSG_MAGIC, M_REG, &m, len);
}

static void peer_hostile(int fd, enum peer_case k)
{
	static union {
		struct m_table t;
		struct m_p2ph p;
		uint8_t raw[4096];
	} body;
	struct node_coll d = { .seq = 0,
			       .opcode = COLLC_OP_ALLREDUCE,
			       .dtype = COLLC_FLOAT32,
			       .count = 4,
			       .eager = 1 };
	struct m_seq q = { .seq = 5 };
	uint64_t st = h_seed ^ 0x70656572ull;

	memset(&body, 0, sizeof(body));
	switch (k) {
	case PC_MAGIC:
		peer_send(fd, MSG_MAGIC ^ 1u, M_PING, NULL, 0);
		break;
	case PC_TYPE:
		peer_send(fd, MSG_MAGIC, M_TYPE_MAX + 3, NULL, 0);
		break;
	case PC_LONG:
		peer_send(fd, MSG_MAGIC, M_COLL, NULL, MSG_MAX + 1);
		break;
	case PC_REG_SIZE:
		peer_reg(fd, 1, 3, 8);
		break;
	case PC_REG_RANK:
		peer_reg(fd, 7, 3, sizeof(struct m_reg));
		break;
	case PC_REG_NRANKS:
		peer_reg(fd, 1, 5, sizeof(struct m_reg));
		break;
	case PC_REG_TWICE:
		peer_reg(fd, 1, 3, sizeof(struct m_reg));
		break;
	case PC_COLL:
		memcpy(body.raw, &d, sizeof(d));
		peer_send(fd, MSG_MAGIC, M_COLL, body.raw, sizeof(d) + 64);
		break;
	case PC_DONE:
		peer_send(fd, MSG_MAGIC, M_DONE, &q, sizeof(q));
		break;
	case PC_TABLE:
		body.t.nranks = 3;
		body.t.nchan = 1;
		body.t.you = 1;
		body.t.ndaemons = 2;
		peer_send(fd, MSG_MAGIC, M_TABLE, &body.t, sizeof(body.t));
		break;
	case PC_EAGER:
		peer_send(fd, MSG_MAGIC, M_EAGER, body.raw, sizeof(q) + 16);
		break;
	case PC_PEER_IN:
		memcpy(body.raw, &d, sizeof(d));
		peer_send(fd, MSG_MAGIC, M_PEER_IN, body.raw, sizeof(d) + 16);
		break;
	case PC_P2PL:
		body.p.ndaemons = 2;
		peer_send(fd, MSG_MAGIC, M_P2PL, &body.p, sizeof(body.p));
		break;
	default:
		peer_random(fd, st);
		break;
	}
}

/* A rank that waits in comm_init on daemon sock for a partner that breaks the protocol. */
struct waiter {
	const char *sock;
	const struct collc_unique_id *id;
	int nranks, rank;
};

/* comm_init's result and when it came, in sh->errs and sh->err_ns at the rank. */
static int waiter_rank(void *arg)
{
	const struct waiter *w = arg;
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	int r;

	if (collc_connect(w->sock, &ctx) < 0)
		return 1;
	r = collc_comm_init(ctx, w->id, w->nranks, w->rank, -1, &comm);
	sh->err_ns[w->rank] = h_now_ns();
	sh->errs[w->rank] = (uint32_t)-r;
	collc_disconnect(ctx);
	return 0;
}

/*
 * After the hostile message went out at sent (0: it never did): the waiter
 * must end within 10 s, with an error within 2 s of sent, and the daemon at
 * sock must have counted a protocol error since `before`. 1 when it failed.
 */
static int waiter_end(const char *what, const struct waiter *w, pid_t pid, uint64_t sent,
		      long before)
{
	int failed = 0, st;
	long after;

	for (uint64_t t0 = h_now_ns(); h_now_ns() - t0 < 10000000000ull; h_sleep_us(5000))
		if (waitpid(pid, &st, WNOHANG) == pid)
			break;
	if (!sh->err_ns[w->rank]) {
		failed |= h_fail("%s: rank %d's comm_init did not end", what, w->rank);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	} else if (sent) {
		double ms = (double)(sh->err_ns[w->rank] - sent) / 1e6;

		h_log("%s: comm_init %s after %.1f ms", what, strerror((int)sh->errs[w->rank]), ms);
		if (!sh->errs[w->rank])
			failed |= h_fail("%s: comm_init succeeded", what);
		if (ms > 2000)
			failed |= h_fail("%s: no error within 2 s", what);
	}
	after = status_count_at(w->sock, "protocol_errors");
	if (before < 0 || after <= before)
		failed |= h_fail("%s: no protocol error counted (%ld before, %ld after)", what,
				 before, after);
	return failed;
}

/* A connection to the root daemon that passed the handshake with the id's secret; -1: none. */
static int peer_join(uint16_t port)
{
	const struct collc_uid *u = (const struct collc_uid *)&sh->id;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	uint64_t t0 = h_now_ns();
	struct net_auth auth;

	_Static_assert(sizeof(struct collc_uid) <= sizeof(sh->id), "a unique id holds a uid");
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	net_auth_init(&auth, NULL, NULL);
	/* Until rank 0's comm_init reached its daemon: before, the id is unknown there. */
	while (h_now_ns() - t0 < 10000000000ull) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

		if (fd < 0)
			return -1;
		/* As a daemon's: each message leaves at once (timing the refusal, not Nagle). */
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
		    net_auth_socket_initiator(&auth, fd, u->nonce, u->secret) == NET_AUTH_OK)
			return fd;
		close(fd);
		h_sleep_us(20000);
	}
	return -1;
}

/*
 * The other way: the test plays the root daemon of a 2-rank communicator
 * (an id naming its own listen port), rank 1 joins it through daemon 1,
 * and after the handshake and the joiner's REG the "root" sends one kind
 * of hostile message. Daemon 1 must count a protocol error, end rank 1's
 * comm_init with an error within 2 s, and keep serving others.
 */
enum root_case {
	RC_TABLE_YOU,      /* a table that names the joiner the root */
	RC_TABLE_NCHAN,    /* no channels */
	RC_TABLE_NDAEMONS, /* more daemons than ranks can be */
	RC_TABLE_OWNER,    /* the joiner's rank owned by another daemon */
	RC_TABLE_GROUP,    /* group rings the blocks do not allow */
	RC_TABLE_SIZE,     /* a table of another size */
	RC_GO,             /* GO before the table */
	RC_EAGER,          /* an eager result before the table */
	RC_P2PT,           /* send/recv handles before the links */
	RC_REG,            /* a REG, sent to a joiner */
	RC_COLL,           /* a collective, sent to a joiner */
	RC_RANDOM,         /* messages of random type, length and bytes */
	RC_COUNT
};

static const char *const root_case_names[RC_COUNT] = {
	"TABLE you",   "TABLE nchan",     "TABLE ndaemons",   "TABLE owner",
	"TABLE group", "TABLE size",      "GO early",         "EAGER early",
	"P2PT early",  "REG to a joiner", "COLL to a joiner", "random messages",
};

static void root_hostile(int fd, enum root_case k)
{
	static struct m_table t;
	struct m_seq q = { .seq = 0 };
	struct m_reg m = { .rank = 0, .nranks = 2, .max_chan = 1 };
	struct node_coll d = { .opcode = COLLC_OP_ALLREDUCE, .dtype = COLLC_FLOAT32, .count = 1 };
	static struct m_p2ph p2p;

	/* A table as the root sends it, then one field made wrong. */
	memset(&t, 0, sizeof(t));
	t.nranks = 2;
	t.nchan = 1;
	t.you = 1;
	t.ndaemons = 2;
	t.owner[1] = 1;
	switch (k) {
	case RC_TABLE_YOU:
		t.you = 0;
		break;
	case RC_TABLE_NCHAN:
		t.nchan = 0;
		break;
	case RC_TABLE_NDAEMONS:
		t.ndaemons = COLLC_MAX_RANKS + 1;
		break;
	case RC_TABLE_OWNER:
		t.owner[1] = 0;
		break;
	case RC_TABLE_GROUP:
		t.group = 2;
		t.hier_min_bytes = 1;
		break;
	default:
		break;
	}
	switch (k) {
	case RC_TABLE_SIZE:
		peer_send(fd, MSG_MAGIC, M_TABLE, &t, sizeof(t) - 8);
		break;
	case RC_GO:
		peer_send(fd, MSG_MAGIC, M_GO, &q, sizeof(q));
		break;
	case RC_EAGER:
		peer_send(fd, MSG_MAGIC, M_EAGER, &q, sizeof(q));
		break;
	case RC_P2PT:
		p2p.ndaemons = 2;
		peer_send(fd, MSG_MAGIC, M_P2PT, &p2p, sizeof(p2p));
		break;
	case RC_REG:
		peer_send(fd, MSG_MAGIC, M_REG, &m, sizeof(m));
		break;
	case RC_COLL:
		peer_send(fd, MSG_MAGIC, M_COLL, &d, sizeof(d));
		break;
	case RC_RANDOM:
		peer_random(fd, h_seed ^ 0x726f6f74ull);
		break;
	default:
		peer_send(fd, MSG_MAGIC, M_TABLE, &t, sizeof(t));
		break;
	}
}

static const uint8_t *fake_secret;

static int fake_lookup(void *arg, const uint8_t *id, uint8_t *ret_secret)
{
	const struct collc_uid *u = arg;

	if (memcmp(id, u->nonce, NET_AUTH_ID_BYTES) != 0)
		return -ENOENT;
	memcpy(ret_secret, fake_secret, NET_AUTH_SECRET_BYTES);
	return 0;
}

/* The joiner's first message, a REG of rank 1, within 10 s; 0 when it came. */
static int fake_read_reg(int fd)
{
	struct msg_hdr h;
	struct m_reg m;
	struct timeval tv = { .tv_sec = 10 };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (recv(fd, &h, sizeof(h), MSG_WAITALL) != (ssize_t)sizeof(h) || h.magic != MSG_MAGIC ||
	    h.type != M_REG || h.len != sizeof(m) ||
	    recv(fd, &m, sizeof(m), MSG_WAITALL) != (ssize_t)sizeof(m))
		return -1;
	return m.rank == 1 && m.nranks == 2 ? 0 : -1;
}

static int test_fake_root(void)
{
	struct collc_uid *u = (struct collc_uid *)&sh->id2;
	struct sockaddr_in a = { .sin_family = AF_INET };
	const struct waiter w = { .sock = socks[1], .id = &sh->id2, .nranks = 2, .rank = 1 };
	socklen_t alen = sizeof(a);
	int failed = 0, lfd, one = 1;

	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 4) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&a, &alen) < 0)
		return h_fail("fake root: listen: %s", strerror(errno));
	for (int k = 0; k < RC_COUNT && !failed; k++) {
		long before = status_count_at(w.sock, "protocol_errors");
		struct pollfd pf = { .fd = lfd, .events = POLLIN };
		struct net_auth auth;
		uint8_t id[NET_AUTH_ID_BYTES];
		char what[64];
		uint64_t sent = 0;
		pid_t rank;
		int fd = -1;

		/* An id of daemon 0's (another node to daemon 1) that names our port. */
		h_unique_id(&sh->id2);
		u->net_family = AF_INET;
		u->net_port = a.sin_port;
		memset(u->net_addr, 0, sizeof(u->net_addr));
		memcpy(u->net_addr, &a.sin_addr, 4);
		fake_secret = u->secret;
		net_auth_init(&auth, fake_lookup, u);
		snprintf(what, sizeof(what), "fake root, %s", root_case_names[k]);
		sh->errs[w.rank] = 0;
		sh->err_ns[w.rank] = 0;
		rank = h_fork(waiter_rank, (void *)&w);
		if (poll(&pf, 1, 10000) == 1)
			fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0 || net_auth_socket_responder(&auth, fd, id) != NET_AUTH_OK ||
		    fake_read_reg(fd) < 0) {
			failed |= h_fail("%s: daemon 1 did not join the fake root", what);
		} else {
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			sent = h_now_ns();
			root_hostile(fd, (enum root_case)k);
		}
		failed |= waiter_end(what, &w, rank, sent, before);
		if (fd >= 0)
			close(fd);
	}
	close(lfd);
	return failed;
}

static int test_peer(void)
{
	const struct waiter w = { .sock = h_sock, .id = &sh->id, .nranks = 3, .rank = 0 };
	uint16_t port;
	int failed = 0;

	start_daemons(2);
	port = root_listen_port();
	if (!port)
		return finish(h_fail("no listen port in the root daemon's status"));
	for (int k = 0; k < PC_COUNT && !failed; k++) {
		long before = status_count_at(w.sock, "protocol_errors");
		uint64_t sent = 0;
		pid_t root;
		int fd;

		h_unique_id(&sh->id);
		sh->errs[w.rank] = 0;
		sh->err_ns[w.rank] = 0;
		root = h_fork(waiter_rank, (void *)&w);
		fd = peer_join(port);
		if (fd < 0) {
			failed |= h_fail("%s: the handshake with the right secret failed",
					 peer_case_names[k]);
		} else {
			if (k != PC_REG_SIZE && k != PC_REG_RANK && k != PC_REG_NRANKS)
				peer_reg(fd, 1, 3, sizeof(struct m_reg));
			sent = h_now_ns();
			peer_hostile(fd, (enum peer_case)k);
		}
		failed |= waiter_end(peer_case_names[k], &w, root, sent, before);
		if (fd >= 0)
			close(fd);
	}
	if (!failed)
		failed |= test_fake_root();
	/* Both daemons still serve: a fresh communicator across them works. */
	h_unique_id(&sh->id);
	if (!failed)
		failed |= h_run_ranks(2, coll_rank, NULL);
	return finish(failed);
}

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "coll";

	h_init("net_daemons", argc, argv, 150);
	sh = h_shared(sizeof(*sh));
	if (!strcmp(what, "coll")) {
		block = argc > 4 && !strcmp(argv[4], "block");
		return test_coll(argc > 2 ? atoi(argv[2]) : 2, argc > 3 ? atoi(argv[3]) : 4);
	}
	if (!strcmp(what, "mismatch"))
		return test_refusal(&refuse_mismatch);
	if (!strcmp(what, "p2p_refusal"))
		return test_refusal(&refuse_p2p);
	if (!strcmp(what, "p2p")) {
		block = argc > 4 && !strcmp(argv[4], "block");
		return test_p2p(argc > 2 ? atoi(argv[2]) : 2, argc > 3 ? atoi(argv[3]) : 4);
	}
	if (!strcmp(what, "a2a_blocks")) {
		block = argc > 4 && !strcmp(argv[4], "block");
		return test_a2a_blocks(argc > 2 ? atoi(argv[2]) : 2, argc > 3 ? atoi(argv[3]) : 4);
	}
	if (!strcmp(what, "staged"))
		return test_staged(argc > 2 ? atoi(argv[2]) : 2, argc > 3 ? atoi(argv[3]) : 2);
	if (!strcmp(what, "stream"))
		return test_stream(argc > 2 && !strcmp(argv[2], "a2a_blocks"));
	if (!strcmp(what, "two"))
		return test_two();
	if (!strcmp(what, "chain")) {
		start_daemons(2);
		h_unique_id(&sh->id);
		return finish(h_run_ranks(4, chain_rank, NULL));
	}
	if (!strcmp(what, "pipeline")) {
		start_daemons(2);
		h_unique_id(&sh->id);
		return finish(h_run_ranks(4, pipe_rank, NULL));
	}
	if (!strcmp(what, "plugin")) {
		/* The tcp transport built as an NCCL net plugin, loaded by dlopen. */
		setenv("LD_LIBRARY_PATH", COLLC_NET_PLUGIN_DIR, 1);
		setenv("NCCL_SOCKET_IFNAME", "lo", 1);
		daemon_args[6] = "--net";
		daemon_args[7] = "plugin:collc";
		plugin_case = 1;
		return test_coll(2, 3);
	}
	if (!strcmp(what, "helpers") || !strcmp(what, "kill_helpers")) {
		/* Every tcp link's data sockets moved by a helper thread (tcp.c). */
		daemon_args[6] = "--set";
		daemon_args[7] = "net_tcp_helpers=1";
		return what[0] == 'h' ? test_coll(3, 6) : test_kill(SIGKILL, 1);
	}
	if (!strcmp(what, "secret"))
		return test_secret();
	if (!strcmp(what, "kill"))
		return test_kill(SIGKILL, argc > 2 && !strcmp(argv[2], "root") ? 0 : 1);
	if (!strcmp(what, "kill_a2a_blocks")) {
		/* kill -9 of a daemon while all-to-all blocks (4 MiB each) move: -EPIPE within 2 s. */
		setenv("COLLCD_NET_A2A", "blocks", 1);
		kill_a2a = 1;
		return test_kill(SIGKILL, 1);
	}
	if (!strcmp(what, "stop"))
		return test_kill(SIGSTOP, 1);
	if (!strcmp(what, "garbage"))
		return test_garbage();
	if (!strcmp(what, "peer"))
		return test_peer();
	h_die("unknown case %s", what);
}
