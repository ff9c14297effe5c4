/* SPDX-License-Identifier: MIT */
/*
 * GPU scenarios for tests/gpu/run.sh (device machine only). The parent makes
 * the unique ids and forks one client process per rank; it never touches
 * CUDA itself. Every rank fills its buffers with random data, runs the
 * collective through collcd and checks the result against a reference that
 * it computes on the host in long double precision from every rank's input
 * (each rank regenerates the others' inputs from the shared seed): the tests'
 * reference checker, tests/common/refcheck.h.
 *
 *   collc-gpu-test SCENARIO --socket PATH --gpus 0,1[,..] [--seed N] [--big]
 *                  [--iters N] [--label TEXT] [--socket2 PATH] [--kill-pid PID]
 *                  [--arm-file F] [--round-robin]
 *   SCENARIO: sweep | copies | latency | stream | interleave | regtraffic | kill |
 *             net | netkill | nethostile
 *   (net, netkill: a communicator across two collcd, --socket (the root, with
 *   --listen) and --socket2; the first half of the ranks on the first, the
 *   rest on the second; net with --round-robin: even ranks on the first, odd
 *   ones on the second. net: every collective at random sizes from 8 B to
 *   16 MiB over several dtypes and ops; all-to-all and all-to-allv (random
 *   counts, zeros among them) and a ring of send/recv (every rank sends to
 *   its right and receives from its left at once, 8 B to 16 MiB) on GPU
 *   buffers, checked byte for byte; then the stream-ordered forms: the five
 *   collectives and all-to-all, 1 to 4 enqueued on one stream at a time,
 *   8 B to 16 MiB, checked after a stream sync, and the send/recv ring
 *   inside collc_group_start/end, on one stream and on side streams forked
 *   by events as libnccl-collc's ncclGroupEnd does; async error 0. netkill: the parent kills --kill-pid (the
 *   second collcd) with SIGKILL during 64 MiB all-reduces; the first
 *   daemon's ranks must end them with -EPIPE within 2 s, then run a new
 *   communicator of their own. $COLLC_NETKILL_BEFORE, if set, is a shell
 *   command run just before the SIGKILL, inside the 2 s: net-daemons.sh ends
 *   the second collcd's MPS client with it when both share a GPU. nethostile:
 *   the second collcd runs the hostile test plugin; the parent creates
 *   --arm-file during checked 4 MiB all-reduces, one step goes out 8 bytes
 *   short, and every rank must end with -EPROTO within 2 s, no result wrong,
 *   then run a new communicator over both collcd.)
 *   (stream: stream-ordered and graph-captured all-reduces, and their latency,
 *   through the path libcollc chose: $COLLC_STREAM_PATH=kernel forces the gate kernel)
 *   (copies: all-to-all, all-to-allv and send/recv, checked byte for byte)
 *
 * Prints "RESULT <label> PASS|FAIL <detail>" lines; exit status 0 when all pass.
 * Every failed check also prints one "FAILED CHECK <label>: ..." line to
 * stderr (the first 10 of a run, over all ranks): which check, round, rank,
 * collective, dtype, op, count, the kinds of buffers, and the first wrong
 * element with what it got and wanted, or the error. run.sh shows them under
 * its table.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <collc.h>

#include "proto/dtype.h"
#include "refcheck.h"

#define MAXR  8
#define NCOLL 5

/* The five collectives, then the copies (scenario copies: COPY_ALLTOALL + 0..2). */
#define COPY_ALLTOALL 5
/*
 * net: the stream-ordered forms' counters after those: the five collectives
 * and all-to-all at STREAM_BASE + 0..5, then the send/recv rings on one
 * stream (+6) and on side streams forked as libnccl-collc's groups do (+7).
 */
#define STREAM_BASE   (NCOLL + 3)
#define NSTREAM       8
static const char *coll_names[NCOLL + 3] = { "allreduce", "allgather", "reduce_scatter",
					     "broadcast", "reduce",    "alltoall",
					     "alltoallv", "sendrecv" };
static const char *stream_names[NSTREAM] = { "stream-allreduce",      "stream-allgather",
					     "stream-reduce_scatter", "stream-broadcast",
					     "stream-reduce",         "stream-alltoall",
					     "stream-sendrecv-group", "stream-sendrecv-ncclgroup" };
static const char *dt_names[COLLC_NUM_DTYPES] = COLLC_DTYPE_NAMES;
static const char *op_names[COLLC_NUM_REDOPS] = COLLC_REDOP_NAMES;

struct shared {
	/* The five collectives, then (net) the copies and the stream forms (STREAM_BASE). */
	uint64_t cases[MAXR][STREAM_BASE + NSTREAM];
	uint64_t fails[MAXR][STREAM_BASE + NSTREAM];
	double lat_us[MAXR]; /* latency: median client call -> completion */
	double lat_p99_us[MAXR];
	double value[MAXR][5]; /* scenario specific numbers */
	int ready[MAXR];
	volatile int phase; /* kill scenario: parent <-> children */
	uint64_t go[2];     /* per communicator: the last round its rank 0 started */
	uint32_t stop[2];   /* per communicator: its rank 0 starts no more rounds */
	uint32_t reports;   /* failed checks printed so far, all processes */
};

static const char *sock_path;
static const char *sock2_path; /* net, netkill: the second collcd */
static pid_t kill_pid;         /* netkill: the second collcd's pid */
static const char *arm_file;   /* nethostile: created to arm the second collcd's plugin */
static int gpus[MAXR], ngpus;
static uint64_t seed = 1;
static int big, iters = 10000;
static const char *label = "";
static struct shared *sh;

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

#define CK(x)                                                                                      \
	do {                                                                                       \
		cudaError_t e_ = (x);                                                              \
		if (e_ != cudaSuccess) {                                                           \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,                 \
				cudaGetErrorString(e_));                                           \
			exit(3);                                                                   \
		}                                                                                  \
	} while (0)

/*
 * Random data: tests/common/refcheck.h, one case per (seed, case id). fp8 cases of odd
 * case ids take refcheck's exact data instead, checked bit for bit, as the CPU sweeps do.
 */

static struct rc_case gpu_case(int dt, int op, size_t count, uint64_t cid, int n)
{
	int fp8 = dt == COLLC_FLOAT8_E4M3 || dt == COLLC_FLOAT8_E5M2;

	return (struct rc_case){ (collc_dtype)dt, (collc_redop)op, count,
				 rc_mix(seed ^ rc_mix(cid * 0x9e3779b97f4a7c15ull)),
				 fp8 && (cid & 1) ? n : 0 };
}

/* The first mismatch the reference check reports, and its count of wrong elements. */
static char first_wrong[320], wrong_count[96];

static void keep_first_wrong(int fail, const char *line)
{
	if (fail && !first_wrong[0])
		snprintf(first_wrong, sizeof(first_wrong), "%s", line);
	else if (!fail)
		snprintf(wrong_count, sizeof(wrong_count), "%s", line);
}

/* Failure reports */

#define MAX_REPORTS 10

static const char BUF_ALLOC[] = "daemon-allocated (collc_mem_alloc)";
static const char BUF_IPC[] = "IPC-registered (cudaMalloc + collc_mem_register)";

/* Where a check ran: which one, which round, which kinds of buffers. */
struct check {
	const char *what; /* "sweep", "traffic", "registered", ... */
	long round;       /* -1: the scenario has no rounds */
	const char *send; /* BUF_ALLOC or BUF_IPC */
	const char *recv;
};

/*
 * One failed check, on one stderr line that names it (run.sh shows these
 * lines under its table); the first MAX_REPORTS of the whole run, over all
 * rank processes.
 */
__attribute__((format(printf, 8, 9))) static void report(const struct check *ck, int rank, int coll,
							 int dt, int op, size_t count, int nranks,
							 const char *fmt, ...)
{
	uint32_t k = __atomic_fetch_add(&sh->reports, 1, __ATOMIC_RELAXED);
	char detail[512], round[32] = "-";
	va_list ap;

	if (k >= MAX_REPORTS) {
		if (k == MAX_REPORTS)
			fprintf(stderr,
				"FAILED CHECK %s: more failed checks, not printed (first %d above)\n",
				label, MAX_REPORTS);
		return;
	}
	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	if (ck->round >= 0)
		snprintf(round, sizeof(round), "%ld", ck->round);
	fprintf(stderr,
		"FAILED CHECK %s: check %s, round %s, rank %d of %d, %s %s op %s count %zu, send %s, "
		"recv %s: %s\n",
		label, ck->what, round, rank, nranks, coll_names[coll], dt_names[dt],
		coll == 1 || coll == 3 || coll >= NCOLL ? "-" : op_names[op], count, ck->send,
		ck->recv, detail);
}

/* One rank's world */

struct rank_ctx {
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	int n, me, gpu;
	char *dsend, *drecv; /* device buffers (collc_mem_alloc or registered cudaMalloc) */
	size_t cap;          /* bytes of each */
	unsigned char *hsend, *hrecv;
};

/*
 * Which collcd rank me of n talks to: the first half the first, the rest
 * --socket2; with --round-robin (net only), even ranks the first, odd ones
 * --socket2, so the ring across daemons runs in another order than the ranks'.
 */
static int net_mode, round_robin;

static const char *rank_sock(int n, int me)
{
	if (net_mode && sock2_path && round_robin)
		return me % 2 ? sock2_path : sock_path;
	return net_mode && sock2_path && me >= (n + 1) / 2 ? sock2_path : sock_path;
}

static int rank_open(struct rank_ctx *rc, const struct collc_unique_id *id, int n, int me, int gpu,
		     size_t cap)
{
	int r;

	memset(rc, 0, sizeof(*rc));
	rc->n = n;
	rc->me = me;
	rc->gpu = gpu;
	rc->cap = cap;
	CK(cudaSetDevice(gpu));
	r = collc_connect(rank_sock(n, me), &rc->ctx);
	if (r == 0)
		r = collc_comm_init(rc->ctx, id, n, me, gpu, &rc->comm);
	if (r == 0 && cap)
		r = collc_mem_alloc(rc->ctx, cap, gpu, (void **)&rc->dsend);
	if (r == 0 && cap)
		r = collc_mem_alloc(rc->ctx, cap, gpu, (void **)&rc->drecv);
	if (r < 0) {
		fprintf(stderr, "rank %d (gpu %d): setup: %s\n", me, gpu, collc_strerror(r));
		return r;
	}
	if (cap) {
		rc->hsend = malloc(cap);
		rc->hrecv = malloc(cap);
		if (!rc->hsend || !rc->hrecv)
			return -ENOMEM;
	}
	return 0;
}

static int submit(struct rank_ctx *rc, int coll, const void *s, void *d, size_t count, int dt,
		  int op, int root, collc_req *req)
{
	switch (coll) {
	case 0:
		return collc_allreduce(rc->comm, s, d, count, dt, op, req);
	case 1:
		return collc_allgather(rc->comm, s, d, count, dt, req);
	case 2:
		return collc_reduce_scatter(rc->comm, s, d, count, dt, op, req);
	case 3:
		return collc_broadcast(rc->comm, s, d, count, dt, root, req);
	default:
		return collc_reduce(rc->comm, s, d, count, dt, op, root, req);
	}
}

/*
 * Runs one collective on rc's daemon-allocated buffers and checks every
 * element of the result and the poison after it; returns 1 on pass. A
 * failure is reported (report()) with the first wrong element and how many
 * are wrong.
 */
static int run_case_in(struct rank_ctx *rc, const struct check *ck, uint64_t cid, int coll, int dt,
		       int op, size_t count, int inplace);

static int run_case(struct rank_ctx *rc, const struct check *ck, uint64_t cid, int coll, int dt,
		    int op, size_t count)
{
	return run_case_in(rc, ck, cid, coll, dt, op, count, 0);
}

/* inplace (all-reduce only): the result overwrites the input, recvbuf == sendbuf. */
static int run_case_in(struct rank_ctx *rc, const struct check *ck, uint64_t cid, int coll, int dt,
		       int op, size_t count, int inplace)
{
	const int n = rc->n, me = rc->me, root = (int)(cid % (uint64_t)n);
	const size_t es = collc_dtype_bytes(dt);
	const struct rc_case c =
		gpu_case(dt, coll == 1 || coll == 3 ? COLLC_SUM : op, count, cid, n);
	size_t sn = count, rn = count; /* elements */
	collc_req req;
	int r, bad, poison = -1;

	if (coll == 1)
		rn = count * n;
	if (coll == 2)
		sn = count * n;
	if (sn * es > rc->cap || rn * es > rc->cap)
		return 1;
	rc_fill_coll(&c, (enum rc_coll)coll, n, me, rc->hsend);
	CK(cudaMemcpy(rc->dsend, rc->hsend, sn * es, cudaMemcpyHostToDevice));
	CK(cudaMemset(rc->drecv, 0xa5, rn * es + 16 < rc->cap ? rn * es + 16 : rc->cap));
	/* A pageable copy may return before its DMA lands; collcd's grid reads dsend next. */
	CK(cudaDeviceSynchronize());
	r = submit(rc, coll, rc->dsend, inplace ? rc->dsend : rc->drecv, count, dt, op, root, &req);
	if (r == 0)
		r = collc_wait(rc->ctx, req, 15000);
	if (r < 0) {
		report(ck, me, coll, dt, op, count, n, "collective failed: %s (%d)",
		       collc_strerror(r), r);
		return 0;
	}
	if (inplace)
		CK(cudaMemcpy(rc->hrecv, rc->dsend, rn * es, cudaMemcpyDeviceToHost));
	else
		CK(cudaMemcpy(rc->hrecv, rc->drecv, rn * es + (rn * es + 16 <= rc->cap ? 16 : 0),
			      cudaMemcpyDeviceToHost));
	if (coll == 4 && me != root)
		return 1; /* nothing is written on other ranks */
	/* allgather and broadcast bit exact, reductions against the long double reference */
	first_wrong[0] = wrong_count[0] = '\0';
	bad = rc_check_coll(&c, (enum rc_coll)coll, n, me, root, rc->hrecv, "result");
	/* The bytes past the result must be untouched (poison; in place has none). */
	if (!inplace && rn * es + 16 <= rc->cap)
		for (int k = 0; k < 16 && poison < 0; k++)
			if (rc->hrecv[rn * es + k] != 0xa5)
				poison = k;
	if (bad)
		report(ck, me, coll, dt, op, count, n, "%s%s%s%s", first_wrong,
		       wrong_count[0] ? "; " : "", wrong_count,
		       poison >= 0 ? "; also wrote past the result" : "");
	else if (poison >= 0)
		report(ck, me, coll, dt, op, count, n,
		       "result right, but byte %d past it is 0x%02x (poison 0xa5): wrote past its result",
		       poison, rc->hrecv[rn * es + poison]);
	return !bad && poison < 0;
}

static int child_sweep(const struct collc_unique_id *id, int n, int me)
{
	static const size_t counts[] = { 0, 1, 5, 37, 1027, 65537 };
	size_t cap = big ? (size_t)256 << 20 : (size_t)32 << 20;
	const struct check ck = { "sweep", -1, BUF_ALLOC, BUF_ALLOC };
	struct rank_ctx rc;
	uint64_t cid = 0;
	int fails = 0;

	if (rank_open(&rc, id, n, me, gpus[me], cap) < 0)
		return 1;
	for (int coll = 0; coll < NCOLL; coll++)
		for (int dt = 0; dt < COLLC_NUM_DTYPES; dt++)
			for (int op = 0; op < 5; op++) {
				if ((coll == 1 || coll == 3) && op > 0)
					continue;
				for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
					int ok = run_case(&rc, &ck, ++cid, coll, dt, op, counts[k]);

					sh->cases[me][coll]++;
					sh->fails[me][coll] += !ok;
					fails += !ok;
					if (fails > 20)
						return 1;
				}
			}
	/*
	 * Larger counts: every collective in float32 sum and bfloat16 avg, up to 256 MiB;
	 * fp8 (one byte: the vector loops' 16 elements a vector) sum and avg at the first.
	 */
	{
		size_t bigc[] = { 1 << 20, (size_t)3 << 20, (size_t)64 << 20 };
		int nb = big ? 3 : 1;

		for (int coll = 0; coll < NCOLL; coll++)
			for (int b = 0; b < nb; b++) {
				size_t c = bigc[b];

				if (coll == 1 || coll == 2)
					c /= n; /* the larger buffer holds n blocks */
				int ok = run_case(&rc, &ck, ++cid, coll, COLLC_FLOAT32, COLLC_SUM,
						  c);

				ok &= run_case(&rc, &ck, ++cid, coll, COLLC_BFLOAT16, COLLC_AVG, c);
				sh->cases[me][coll] += 2;
				if (b == 0) {
					ok &= run_case(&rc, &ck, ++cid, coll, COLLC_FLOAT8_E4M3,
						       COLLC_SUM, c);
					ok &= run_case(&rc, &ck, ++cid, coll, COLLC_FLOAT8_E5M2,
						       COLLC_AVG, c);
					sh->cases[me][coll] += 2;
				}
				sh->fails[me][coll] += !ok;
				fails += !ok;
			}
	}
	/*
	 * All-reduce in place (recvbuf == sendbuf) at sizes every algorithm takes
	 * (one-shot LL, one-shot, two-shot, ring by size): a rank's result must
	 * not reach a peer that still reads its input.
	 */
	{
		static const size_t inc[] = { 1027, 65537, (size_t)1 << 18, (size_t)1 << 20,
					      (size_t)3 << 20 };

		for (size_t k = 0; k < sizeof(inc) / sizeof(inc[0]); k++) {
			int ok = run_case_in(&rc, &ck, ++cid, 0, COLLC_FLOAT32, COLLC_SUM, inc[k],
					     1);

			ok &= run_case_in(&rc, &ck, ++cid, 0, COLLC_BFLOAT16, COLLC_AVG, inc[k], 1);
			sh->cases[me][0] += 2;
			sh->fails[me][0] += !ok;
			fails += !ok;
		}
	}
	return fails ? 1 : 0;
}

/*
 * Copies: all-to-all, all-to-allv and send/recv. Data are a hash of (seed,
 * case, sender, receiver, byte), so every byte that arrives is checked
 * exactly, and 16 poison bytes after the receive area must survive.
 * copies_cases counts[0] alltoall, [1] alltoallv, [2] sendrecv.
 */
static uint8_t cpat(uint64_t cid, int from, int to, size_t b)
{
	uint64_t x = (seed * 0x9e3779b97f4a7c15ull) ^ (cid << 40) ^ ((uint64_t)from << 32) ^
		     ((uint64_t)to << 24) ^ (b / 8);

	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return (uint8_t)(x >> (8 * (b % 8)));
}

/* Elements rank `from` sends rank `to` in all-to-allv case cid (up to max). */
static size_t vcount(uint64_t cid, int from, int to, size_t max)
{
	uint64_t x = cpat(cid, from, to, 0) | (uint64_t)cpat(cid, from, to, 1) << 8 |
		     (uint64_t)cpat(cid, from, to, 2) << 16;

	return x % 4 == 0 ? 0 : x % (max + 1);
}

/*
 * One all-to-all (v 0) or all-to-allv (v 1) with count elements per block
 * (v: at most count), blocks packed in rank order, from dsend into drecv of
 * the kinds named: a BUF_IPC buffer is cudaMalloc memory registered through
 * CUDA IPC, which peers cannot reach, so collcd pushes into peers' receive
 * buffers (IPC send) or pulls from peers' send buffers (IPC receive) whatever
 * copy_push says. Returns 1 on pass.
 */
static int copy_case(struct rank_ctx *rc, char *dsend, const char *send_kind, char *drecv,
		     const char *recv_kind, uint64_t cid, int v, int dt, size_t count)
{
	const int n = rc->n, me = rc->me;
	const size_t es = collc_dtype_bytes(dt);
	const struct check ck = { v ? "alltoallv" : "alltoall", -1, send_kind, recv_kind };
	size_t sc[MAXR], rcn[MAXR], sd[MAXR], rd[MAXR], st = 0, rt = 0;
	collc_req req;
	int r;

	for (int p = 0; p < n; p++) {
		sc[p] = v ? vcount(cid, me, p, count) : count;
		rcn[p] = v ? vcount(cid, p, me, count) : count;
		sd[p] = st;
		rd[p] = rt;
		st += sc[p];
		rt += rcn[p];
	}
	if ((st + 1) * es > rc->cap || rt * es + 16 > rc->cap)
		return 1;
	for (int p = 0; p < n; p++)
		for (size_t b = 0; b < sc[p] * es; b++)
			rc->hsend[sd[p] * es + b] = cpat(cid, me, p, b);
	CK(cudaMemcpy(dsend, rc->hsend, st * es, cudaMemcpyHostToDevice));
	CK(cudaMemset(drecv, 0xa5, rt * es + 16));
	CK(cudaDeviceSynchronize());
	if (v)
		r = collc_alltoallv(rc->comm, dsend, sc, sd, drecv, rcn, rd, dt, &req);
	else
		r = collc_alltoall(rc->comm, dsend, drecv, count, dt, &req);
	if (r == 0)
		r = collc_wait(rc->ctx, req, 15000);
	if (r < 0) {
		report(&ck, me, COPY_ALLTOALL + v, dt, 0, count, n, "%s failed: %s (%d)", ck.what,
		       collc_strerror(r), r);
		return 0;
	}
	CK(cudaMemcpy(rc->hrecv, drecv, rt * es + 16, cudaMemcpyDeviceToHost));
	for (int p = 0; p < n; p++)
		for (size_t b = 0; b < rcn[p] * es; b++)
			if (rc->hrecv[rd[p] * es + b] != cpat(cid, p, me, b)) {
				report(&ck, me, COPY_ALLTOALL + v, dt, 0, count, n,
				       "%s: byte %zu from rank %d is 0x%02x, not 0x%02x", ck.what,
				       b, p, rc->hrecv[rd[p] * es + b], cpat(cid, p, me, b));
				return 0;
			}
	for (int k = 0; k < 16; k++)
		if (rc->hrecv[rt * es + k] != 0xa5) {
			report(&ck, me, COPY_ALLTOALL + v, dt, 0, count, n,
			       "%s: wrote past its blocks", ck.what);
			return 0;
		}
	return 1;
}

/*
 * A ring of send/recv, `outstanding` each way at once, count elements each
 * (the k-th of another size, so the order of matching shows).
 */
static int ring_case(struct rank_ctx *rc, uint64_t cid, int dt, size_t count, int outstanding)
{
	const int n = rc->n, me = rc->me, right = (me + 1) % n, left = (me + n - 1) % n;
	const size_t es = collc_dtype_bytes(dt), slot = (count + outstanding) * es;
	const struct check ck = { "sendrecv", -1, BUF_ALLOC, BUF_ALLOC };
	collc_req reqs[64];
	int nr = 0, r = 0;

	if ((size_t)outstanding * slot + 16 > rc->cap || outstanding > 32)
		return 1;
	for (int k = 0; k < outstanding; k++)
		for (size_t b = 0; b < (count + k) * es; b++)
			rc->hsend[k * slot + b] = cpat(cid + k, me, right, b);
	CK(cudaMemcpy(rc->dsend, rc->hsend, outstanding * slot, cudaMemcpyHostToDevice));
	CK(cudaMemset(rc->drecv, 0xa5, outstanding * slot + 16));
	CK(cudaDeviceSynchronize());
	for (int k = 0; k < outstanding && r == 0; k++) {
		if (me % 2 == 0) {
			r = collc_send(rc->comm, rc->dsend + k * slot, count + k, dt, right,
				       &reqs[nr++]);
			if (r == 0)
				r = collc_recv(rc->comm, rc->drecv + k * slot, count + k, dt, left,
					       &reqs[nr++]);
		} else {
			r = collc_recv(rc->comm, rc->drecv + k * slot, count + k, dt, left,
				       &reqs[nr++]);
			if (r == 0)
				r = collc_send(rc->comm, rc->dsend + k * slot, count + k, dt, right,
					       &reqs[nr++]);
		}
	}
	for (int i = 0; i < nr; i++) {
		int w = collc_wait(rc->ctx, reqs[i], 15000);

		if (r == 0)
			r = w;
	}
	if (r < 0) {
		report(&ck, me, COPY_ALLTOALL + 2, dt, 0, count, n, "send/recv failed: %s (%d)",
		       collc_strerror(r), r);
		return 0;
	}
	CK(cudaMemcpy(rc->hrecv, rc->drecv, outstanding * slot + 16, cudaMemcpyDeviceToHost));
	for (int k = 0; k < outstanding; k++)
		for (size_t b = 0; b < (count + k) * es; b++)
			if (rc->hrecv[k * slot + b] != cpat(cid + k, left, me, b)) {
				report(&ck, me, COPY_ALLTOALL + 2, dt, 0, count, n,
				       "receive %d: byte %zu is 0x%02x, not 0x%02x", k, b,
				       rc->hrecv[k * slot + b], cpat(cid + k, left, me, b));
				return 0;
			}
	return 1;
}

static int child_copies(const struct collc_unique_id *id, int n, int me)
{
	static const size_t counts[] = { 0, 1, 5, 37, 1027, 65537 };
	size_t cap = big ? (size_t)256 << 20 : (size_t)32 << 20;
	struct rank_ctx rc;
	uint64_t cid = 0;
	char *ipc = NULL;
	int fails = 0, r;

	if (rank_open(&rc, id, n, me, gpus[me], cap) < 0)
		return 1;
	for (int dt = 0; dt < COLLC_NUM_DTYPES; dt++)
		for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
			for (int v = 0; v < 2; v++) {
				int ok = copy_case(&rc, rc.dsend, BUF_ALLOC, rc.drecv, BUF_ALLOC,
						   cid += 1, v, dt, counts[k]);

				sh->cases[me][v]++;
				sh->fails[me][v] += !ok;
				fails += !ok;
			}
			{
				int ok = ring_case(&rc, cid += 64, dt, counts[k], 8);

				sh->cases[me][2]++;
				sh->fails[me][2] += !ok;
				fails += !ok;
			}
			if (fails > 20)
				return 1;
		}
	/* Large: every rank's blocks together about cap / 2, float32. */
	for (int v = 0; v < 2; v++) {
		int ok = copy_case(&rc, rc.dsend, BUF_ALLOC, rc.drecv, BUF_ALLOC, cid += 1, v,
				   COLLC_FLOAT32, cap / 2 / 4 / (size_t)n);

		sh->cases[me][v]++;
		sh->fails[me][v] += !ok;
		fails += !ok;
	}
	{
		int ok = ring_case(&rc, cid += 64, COLLC_FLOAT32, cap / 4 / 4 / 4, 3);

		sh->cases[me][2]++;
		sh->fails[me][2] += !ok;
		fails += !ok;
	}
	/*
	 * Buffers peers cannot reach (CUDA IPC imports): an IPC send buffer makes
	 * collcd push, an IPC receive buffer makes it pull.
	 */
	CK(cudaMalloc((void **)&ipc, (size_t)4 << 20));
	r = collc_mem_register(rc.ctx, ipc, (size_t)4 << 20, rc.gpu);
	if (r < 0) {
		fprintf(stderr, "rank %d: collc_mem_register: %s\n", me, collc_strerror(r));
		return 1;
	}
	for (int side = 0; side < 2; side++)
		for (int v = 0; v < 2; v++)
			for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
				int ok = copy_case(&rc, side ? rc.dsend : ipc,
						   side ? BUF_ALLOC : BUF_IPC,
						   side ? ipc : rc.drecv,
						   side ? BUF_IPC : BUF_ALLOC, cid += 1, v,
						   COLLC_BFLOAT16, counts[k]);

				sh->cases[me][v]++;
				sh->fails[me][v] += !ok;
				fails += !ok;
			}
	collc_mem_deregister(rc.ctx, ipc);
	return fails ? 1 : 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* 10,000 sequential 8-byte all-reduces (median latency), then 10,000 pipelined. */
static int child_latency(const struct collc_unique_id *id, int n, int me)
{
	struct rank_ctx rc;
	double *lat = malloc(sizeof(double) * (size_t)iters);
	size_t nb = (size_t)iters * 8;
	collc_req *reqs = malloc(sizeof(*reqs) * (size_t)iters);
	float *h;
	int fails = 0;

	if (!lat || !reqs || rank_open(&rc, id, n, me, gpus[me], nb) < 0)
		return 1;
	h = (float *)rc.hsend;
	for (int i = 0; i < 200; i++) { /* warm-up */
		collc_req rq;

		if (collc_allreduce(rc.comm, rc.dsend, rc.drecv, 2, COLLC_FLOAT32, COLLC_SUM, &rq) <
			    0 ||
		    collc_wait(rc.ctx, rq, 10000) < 0)
			return 1;
	}
	for (int i = 0; i < iters; i++) {
		collc_req rq;
		double t0 = now_us();
		int r = collc_allreduce(rc.comm, rc.dsend, rc.drecv, 2, COLLC_FLOAT32, COLLC_SUM,
					&rq);

		if (r == 0)
			r = collc_wait(rc.ctx, rq, 10000);
		lat[i] = now_us() - t0;
		if (r < 0) {
			fprintf(stderr, "latency rank %d: %s\n", me, collc_strerror(r));
			return 1;
		}
	}
	qsort(lat, (size_t)iters, sizeof(double), cmp_double);
	sh->lat_us[me] = lat[iters / 2];
	sh->lat_p99_us[me] = lat[iters * 99 / 100];
	/* Pipelined: every all-reduce has its own 8 bytes; all in flight together. */
	for (int i = 0; i < iters; i++) {
		h[2 * i] = (float)(i % 1000) + (float)me;
		h[2 * i + 1] = (float)me * 0.5f;
	}
	CK(cudaMemcpy(rc.dsend, h, nb, cudaMemcpyHostToDevice));
	CK(cudaMemset(rc.drecv, 0, nb));
	CK(cudaDeviceSynchronize());
	{
		double t0 = now_us();

		/* At most 512 in flight: completions must be reaped to keep the CQ open. */
		for (int i = 0; i < iters + 512; i++) {
			if (i < iters &&
			    collc_allreduce(rc.comm, rc.dsend + 8 * i, rc.drecv + 8 * i, 2,
					    COLLC_FLOAT32, COLLC_SUM, &reqs[i]) < 0)
				return 1;
			if (i >= 512 && collc_wait(rc.ctx, reqs[i - 512], 30000) != 0) {
				fprintf(stderr, "pipelined rank %d: request %d failed\n", me,
					i - 512);
				return 1;
			}
		}
		sh->value[me][0] = (now_us() - t0) / iters;
	}
	CK(cudaMemcpy(rc.hrecv, rc.drecv, nb, cudaMemcpyDeviceToHost));
	for (int i = 0; i < iters; i++) {
		const struct check ck = { "pipelined (all-reduce i of the batch)", i, BUF_ALLOC,
					  BUF_ALLOC };
		float *g = (float *)rc.hrecv + 2 * i;
		float w0 = 0, w1 = 0;

		for (int p = 0; p < n; p++) {
			w0 += (float)(i % 1000) + (float)p;
			w1 += (float)p * 0.5f;
		}
		if (g[0] != w0 || g[1] != w1) {
			fails++;
			report(&ck, me, 0, COLLC_FLOAT32, COLLC_SUM, 2, n,
			       "%d of 2 elements wrong, first at index %d: got %.9g, want %.9g",
			       (g[0] != w0) + (g[1] != w1), g[0] != w0 ? 0 : 1,
			       g[0] != w0 ? g[0] : g[1], g[0] != w0 ? w0 : w1);
		}
	}
	sh->cases[me][0] += (uint64_t)iters * 2;
	sh->fails[me][0] += (uint64_t)fails;
	return fails ? 1 : 0;
}

/* The value rank p contributes at element i of round rnd: small integers, exact in float. */
static float stream_val(int rnd, int p, size_t i)
{
	return (float)((rnd * 7 + p * 13 + (int)(i % 251)) % 97);
}

/*
 * Checks hout against the sum over ranks of stream_val(rnd, ...); counts the
 * case under collective 0 (stream-ordered) or 1 (graph replays).
 */
static int stream_check(const char *what, int k, int rnd, const float *hout, size_t count, int n,
			int me)
{
	const struct check ck = { what, rnd, BUF_ALLOC, BUF_ALLOC };

	for (size_t i = 0; i < count; i++) {
		float w = 0;

		for (int p = 0; p < n; p++)
			w += stream_val(rnd, p, i);
		if (hout[i] != w) {
			report(&ck, me, 0, COLLC_FLOAT32, COLLC_SUM, count, n,
			       "element %zu: got %.9g, want %.9g", i, hout[i], w);
			sh->fails[me][k]++;
			sh->cases[me][k]++;
			return 1;
		}
	}
	sh->cases[me][k]++;
	return 0;
}

/* The kernel nodes of a graph (the gate kernel's, where that is the path); -1: not known. */
static int kernel_nodes(cudaGraph_t graph)
{
	cudaGraphNode_t nodes[16];
	size_t n = 16;
	int k = 0;

	if (cudaGraphGetNodes(graph, nodes, &n) != cudaSuccess)
		return -1;
	for (size_t i = 0; i < n && i < 16; i++) {
		enum cudaGraphNodeType t;

		/* A runtime may not name every node type (memory operations): then nothing is known. */
		if (cudaGraphNodeGetType(nodes[i], &t) != cudaSuccess)
			return -1;
		k += t == cudaGraphNodeTypeKernel;
	}
	return k;
}

/*
 * Stream-ordered all-reduces: a slow memset and the input's copy before it on
 * the stream, the output's copy after it, then the same captured in a CUDA
 * graph and replayed with new inputs; then the latencies (value[me][0..2]).
 */
static int child_stream(const struct collc_unique_id *id, int n, int me)
{
	const size_t maxc = 1 << 16, scratch_bytes = 256u << 20;
	struct rank_ctx rc;
	cudaStream_t s;
	cudaGraph_t graph;
	cudaGraphExec_t exec;
	cudaEvent_t e0, e1;
	float *hin, *hout, ms = 0;
	void *scratch;
	double *lat;
	int fails = 0, r, rounds = iters < 20 ? 20 : iters / 50;
	size_t count = 0;

	if (rank_open(&rc, id, n, me, gpus[me], maxc * 4) < 0)
		return 1;
	/* Which way the gates reach the stream (the parent checks it against $COLLC_STREAM_PATH). */
	r = collc_comm_get_stream_path(rc.comm);
	if (r < 0) {
		fprintf(stderr, "stream rank %d: stream path: %s\n", me, collc_strerror(r));
		return 1;
	}
	sh->value[me][3] = r;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CK(cudaMallocHost((void **)&hin, maxc * 4));
	CK(cudaMallocHost((void **)&hout, maxc * 4));
	CK(cudaMalloc(&scratch, scratch_bytes));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	lat = malloc(sizeof(double) * 1000);
	if (!lat)
		return 1;
	/* 1. Enqueued directly: each round's input lands after a slow memset. */
	for (int rnd = 0; rnd < rounds; rnd++) {
		count = 1 + (size_t)((rnd * 7919u + 13u) % maxc);
		for (size_t i = 0; i < count; i++)
			hin[i] = stream_val(rnd, me, i);
		memset(hout, 0xff, count * 4);
		CK(cudaMemsetAsync(scratch, rnd & 0xff, scratch_bytes, s));
		CK(cudaMemcpyAsync(rc.dsend, hin, count * 4, cudaMemcpyHostToDevice, s));
		r = collc_allreduce_stream(rc.comm, rc.dsend, rc.drecv, count, COLLC_FLOAT32,
					   COLLC_SUM, (struct CUstream_st *)s);
		if (r < 0) {
			fprintf(stderr, "stream rank %d: %s\n", me, collc_strerror(r));
			return 1;
		}
		CK(cudaMemcpyAsync(hout, rc.drecv, count * 4, cudaMemcpyDeviceToHost, s));
		CK(cudaStreamSynchronize(s));
		fails += stream_check("stream-ordered", 0, rnd, hout, count, n, me);
	}
	/* 2. Captured: one graph, replayed with a new input each time. */
	count = 4099;
	CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
	CK(cudaMemcpyAsync(rc.dsend, hin, count * 4, cudaMemcpyHostToDevice, s));
	r = collc_allreduce_stream(rc.comm, rc.dsend, rc.drecv, count, COLLC_FLOAT32, COLLC_SUM,
				   (struct CUstream_st *)s);
	CK(cudaMemcpyAsync(hout, rc.drecv, count * 4, cudaMemcpyDeviceToHost, s));
	CK(cudaStreamEndCapture(s, &graph));
	if (r < 0) {
		fprintf(stderr, "capture rank %d: %s\n", me, collc_strerror(r));
		return 1;
	}
	/* The path shows in the graph: one gate kernel node, or none (memory operations). */
	r = kernel_nodes(graph);
	if (r >= 0 && r != (sh->value[me][3] == COLLC_STREAM_PATH_KERNEL)) {
		fprintf(stderr, "capture rank %d: %d kernel nodes on the %s path\n", me, r,
			sh->value[me][3] == COLLC_STREAM_PATH_KERNEL ? "kernel" : "memops");
		fails++;
	}
	CK(cudaGraphInstantiate(&exec, graph, 0));
	for (int rep = 0; rep < rounds; rep++) {
		for (size_t i = 0; i < count; i++)
			hin[i] = stream_val(1000 + rep, me, i);
		memset(hout, 0xff, count * 4);
		CK(cudaGraphLaunch(exec, s));
		CK(cudaStreamSynchronize(s));
		fails += stream_check("graph replay", 1, 1000 + rep, hout, count, n, me);
	}
	r = collc_comm_get_async_error(rc.comm);
	if (r != 0) {
		fprintf(stderr, "stream rank %d: async error %s\n", me, collc_strerror(r));
		fails++;
	}
	/* 3. Latency: 8-byte all-reduces back to back on the stream, timed by events. */
	for (int i = 0; i < 1000 + 100; i++) {
		if (i == 100)
			CK(cudaEventRecord(e0, s));
		if (collc_allreduce_stream(rc.comm, rc.dsend, rc.drecv, 2, COLLC_FLOAT32, COLLC_SUM,
					   (struct CUstream_st *)s) < 0)
			return 1;
	}
	CK(cudaEventRecord(e1, s));
	CK(cudaEventSynchronize(e1));
	CK(cudaEventElapsedTime(&ms, e0, e1));
	sh->value[me][0] = ms * 1000.0 / 1000;
	/* One 8-byte all-reduce in a graph: replay to completion, median of 1000. */
	CK(cudaGraphExecDestroy(exec));
	CK(cudaGraphDestroy(graph));
	CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
	r = collc_allreduce_stream(rc.comm, rc.dsend, rc.drecv, 2, COLLC_FLOAT32, COLLC_SUM,
				   (struct CUstream_st *)s);
	CK(cudaStreamEndCapture(s, &graph));
	if (r < 0)
		return 1;
	CK(cudaGraphInstantiate(&exec, graph, 0));
	for (int i = 0; i < 1100; i++) {
		double t0 = now_us();

		CK(cudaGraphLaunch(exec, s));
		CK(cudaStreamSynchronize(s));
		if (i >= 100)
			lat[i - 100] = now_us() - t0;
	}
	qsort(lat, 1000, sizeof(double), cmp_double);
	sh->value[me][1] = lat[500];
	/* Back to back replays, one sync at the end. */
	CK(cudaEventRecord(e0, s));
	for (int i = 0; i < 1000; i++)
		CK(cudaGraphLaunch(exec, s));
	CK(cudaEventRecord(e1, s));
	CK(cudaEventSynchronize(e1));
	CK(cudaEventElapsedTime(&ms, e0, e1));
	sh->value[me][2] = ms * 1000.0 / 1000;
	r = collc_comm_get_async_error(rc.comm);
	if (r != 0) {
		fprintf(stderr, "stream rank %d: async error after latency %s\n", me,
			collc_strerror(r));
		fails++;
	}
	return fails ? 1 : 0;
}

/* Two communicators over the same GPUs, submitted in opposite orders by the two sides. */
static int child_interleave(const struct collc_unique_id *ids, int n, int me)
{
	struct rank_ctx a, b;
	int fails = 0;
	float *h;

	if (rank_open(&a, &ids[0], n, me, gpus[me], 4096) < 0)
		return 1;
	/* The second communicator shares the connection: one ctx, two comms. */
	b = a;
	if (collc_comm_init(a.ctx, &ids[1], n, me, gpus[me], &b.comm) < 0)
		return 1;
	h = (float *)a.hsend;
	for (int i = 0; i < 256; i++)
		h[i] = (float)me + 1;
	CK(cudaMemcpy(a.dsend, h, 1024, cudaMemcpyHostToDevice));
	/* A pageable copy may return before its DMA lands; collcd's grid reads dsend next. */
	CK(cudaDeviceSynchronize());
	for (int it = 0; it < iters; it++) {
		collc_req r1, r2;
		int e1, e2;
		size_t c1 = 1 + (size_t)(it % 64), c2 = 1 + (size_t)((it * 7) % 64);

		if (me % 2 == 0) {
			e1 = collc_allreduce(a.comm, a.dsend, a.drecv, c1, COLLC_FLOAT32, COLLC_SUM,
					     &r1);
			e2 = collc_allreduce(b.comm, a.dsend, a.drecv + 1024, c2, COLLC_FLOAT32,
					     COLLC_SUM, &r2);
		} else {
			e2 = collc_allreduce(b.comm, a.dsend, a.drecv + 1024, c2, COLLC_FLOAT32,
					     COLLC_SUM, &r2);
			e1 = collc_allreduce(a.comm, a.dsend, a.drecv, c1, COLLC_FLOAT32, COLLC_SUM,
					     &r1);
		}
		if (e1 == 0)
			e1 = collc_wait(a.ctx, r1, 10000);
		if (e2 == 0)
			e2 = collc_wait(a.ctx, r2, 10000);
		if (e1 || e2) {
			fprintf(stderr, "interleave rank %d iteration %d: %s / %s\n", me, it,
				collc_strerror(e1), collc_strerror(e2));
			return 1;
		}
		if (it % 97 == 0 || it == iters - 1) {
			float want = 0;

			for (int p = 0; p < n; p++)
				want += (float)p + 1;
			CK(cudaMemcpy(a.hrecv, a.drecv, 2048, cudaMemcpyDeviceToHost));
			for (int c = 0; c < 2; c++) {
				const struct check ck = { c ? "interleaved, second communicator"
							    : "interleaved, first communicator",
							  it, BUF_ALLOC, BUF_ALLOC };
				const float *g = (const float *)a.hrecv + 256 * c;
				size_t cnt = c ? c2 : c1, nbad = 0, first = 0;

				for (size_t i = 0; i < cnt; i++)
					if (g[i] != want && nbad++ == 0)
						first = i;
				fails += (int)nbad;
				if (nbad)
					report(&ck, me, 0, COLLC_FLOAT32, COLLC_SUM, cnt, n,
					       "%zu of %zu elements wrong, first at index %zu: got %.9g, want %.9g",
					       nbad, cnt, first, g[first], want);
			}
		}
	}
	sh->cases[me][0] += (uint64_t)iters * 2;
	sh->fails[me][0] += (uint64_t)fails;
	return fails ? 1 : 0;
}

/*
 * Whether the ranks of communicator `comm` run round `round` (1, 2, ...):
 * rank 0 decides (`more`, which only rank 0's value counts), the others
 * follow it through shared memory. Deciding on each rank's own clock let one
 * rank start a round after its peer had stopped; the peer's exit then
 * revoked the communicator and the round failed with -EPIPE (the 1-GPU run
 * of 2026-11-30 07:54: its 2 "failed" checks were both that).
 */
static int agree_round(int comm, int me, uint64_t round, int more)
{
	double t0;

	if (me == 0) {
		if (more)
			__atomic_store_n(&sh->go[comm], round, __ATOMIC_RELEASE);
		else /* Release: whoever sees stop sees every go stored before it. */
			__atomic_store_n(&sh->stop[comm], 1u, __ATOMIC_RELEASE);
		return more;
	}
	t0 = now_us();
	for (uint32_t spins = 0;; spins++) {
		if (__atomic_load_n(&sh->go[comm], __ATOMIC_ACQUIRE) >= round)
			return 1;
		if (__atomic_load_n(&sh->stop[comm], __ATOMIC_ACQUIRE))
			return __atomic_load_n(&sh->go[comm], __ATOMIC_ACQUIRE) >= round;
		if ((spins & 1023) == 1023) {
			if (now_us() - t0 > 60e6) {
				fprintf(stderr,
					"%s: rank %d: rank 0 of communicator %d never decided round %llu\n",
					label, me, comm, (unsigned long long)round);
				return 0;
			}
			sched_yield();
		}
	}
}

/*
 * Registers, uses and releases cudaMalloc and collc_mem_alloc memory while
 * traffic runs. traffic 0: the registering communicator (ids[0]); every round
 * cudaMalloc + collc_mem_register (a CUDA IPC import in a quiesce window) +
 * collc_mem_alloc, an all-reduce from the registered buffer into the
 * allocated one, deregister + free + cudaFree. traffic 1: the other
 * communicator (ids[1]), checked all-reduces on daemon-allocated buffers back
 * to back. Every round is checked and counted once.
 */
static int child_regtraffic(const struct collc_unique_id *ids, int n, int me, int traffic)
{
	struct rank_ctx rc;
	double t_end, worst = 0;
	int fails = 0;
	uint64_t round;

	if (rank_open(&rc, &ids[traffic], n, me, gpus[me], (size_t)4 << 20) < 0)
		return 1;
	t_end = now_us() +
		(double)iters * 1000.0; /* iters: milliseconds here; rank 0's clock rules */
	for (round = 1; agree_round(traffic, me, round, now_us() < t_end); round++) {
		double t0 = now_us();
		int ok;

		if (traffic) {
			const struct check ck = { "traffic", (long)round, BUF_ALLOC, BUF_ALLOC };

			ok = run_case(&rc, &ck, round * 7919, 0, COLLC_FLOAT32, COLLC_SUM,
				      1 + (size_t)(round % 5000) * 13);
			sh->cases[me + MAXR / 2][0]++;
			sh->fails[me + MAXR / 2][0] += !ok;
		} else {
			const struct check ck = { "registered", (long)round, BUF_IPC, BUF_ALLOC };
			const size_t cnt = 1024, nb = cnt * 4;
			size_t sz = ((size_t)1 + (size_t)(round % 7)) << 20, nbad = 0, first = 0;
			char *m = NULL, *a = NULL;
			float *h = (float *)rc.hsend, *g = (float *)rc.hrecv, wfirst = 0;
			collc_req rq;
			int r, poison = -1;

			CK(cudaMalloc((void **)&m, sz));
			r = collc_mem_register(rc.ctx, m, sz, rc.gpu);
			if (r < 0) {
				report(&ck, me, 0, COLLC_FLOAT32, COLLC_SUM, cnt, n,
				       "collc_mem_register of %zu bytes at %p: %s (%d)", sz,
				       (void *)m, collc_strerror(r), r);
				return 1;
			}
			r = collc_mem_alloc(rc.ctx, sz, rc.gpu, (void **)&a);
			if (r < 0) {
				report(&ck, me, 0, COLLC_FLOAT32, COLLC_SUM, cnt, n,
				       "collc_mem_alloc of %zu bytes: %s (%d)", sz,
				       collc_strerror(r), r);
				return 1;
			}
			/* Data change every round: a stale import of an earlier buffer shows. */
			for (size_t i = 0; i < cnt; i++)
				h[i] = (float)(me + 1) * (float)((i + round) % 17);
			CK(cudaMemcpy(m + 4096, h, nb, cudaMemcpyHostToDevice));
			/* Poisoned: a result that is never written shows, even where the last round's was. */
			CK(cudaMemset(a + 8192, 0xa5, nb + 16));
			/* A pageable copy may return before its DMA lands; collcd's grid reads m next. */
			CK(cudaDeviceSynchronize());
			r = collc_allreduce(rc.comm, m + 4096, a + 8192, cnt, COLLC_FLOAT32,
					    COLLC_SUM, &rq);
			if (r == 0)
				r = collc_wait(rc.ctx, rq, 10000);
			if (r < 0) {
				report(&ck, me, 0, COLLC_FLOAT32, COLLC_SUM, cnt, n,
				       "collective failed: %s (%d)", collc_strerror(r), r);
				sh->cases[me][0]++;
				sh->fails[me][0]++;
				return 1;
			}
			CK(cudaMemcpy(g, a + 8192, nb + 16, cudaMemcpyDeviceToHost));
			for (size_t i = 0; i < cnt; i++) {
				float w = 0;

				for (int p = 0; p < n; p++)
					w += (float)(p + 1) * (float)((i + round) % 17);
				if (g[i] != w && nbad++ == 0) {
					first = i;
					wfirst = w;
				}
			}
			for (int k = 0; k < 16 && poison < 0; k++)
				if (rc.hrecv[nb + k] != 0xa5)
					poison = k;
			ok = nbad == 0 && poison < 0;
			if (nbad) {
				uint32_t gb, wb;

				memcpy(&gb, &g[first], 4);
				memcpy(&wb, &wfirst, 4);
				report(&ck, me, 0, COLLC_FLOAT32, COLLC_SUM, cnt, n,
				       "%zu of %zu elements wrong, first at index %zu: got %.9g [0x%08x], "
				       "want %.9g [0x%08x] "
				       "(send %p+4096 of a %zu-byte cudaMalloc, recv %p+8192)%s",
				       nbad, cnt, first, g[first], gb, wfirst, wb, (void *)m, sz,
				       (void *)a,
				       poison >= 0 ? "; also wrote past the result" : "");
			} else if (poison >= 0) {
				report(&ck, me, 0, COLLC_FLOAT32, COLLC_SUM, cnt, n,
				       "result right, but byte %d past it is 0x%02x (poison 0xa5)",
				       poison, rc.hrecv[nb + poison]);
			}
			r = collc_mem_deregister(rc.ctx, m);
			if (r < 0) {
				report(&ck, me, 0, COLLC_FLOAT32, COLLC_SUM, cnt, n,
				       "collc_mem_deregister: %s (%d)", collc_strerror(r), r);
				ok = 0;
			}
			r = collc_mem_free(rc.ctx, a);
			if (r < 0) {
				report(&ck, me, 0, COLLC_FLOAT32, COLLC_SUM, cnt, n,
				       "collc_mem_free: %s (%d)", collc_strerror(r), r);
				ok = 0;
			}
			CK(cudaFree(m));
			sh->cases[me][0]++;
			sh->fails[me][0] += !ok;
		}
		fails += !ok;
		if (now_us() - t0 > worst)
			worst = now_us() - t0;
	}
	sh->value[me][traffic] = worst;
	sh->value[me][2 + traffic] = (double)(round - 1);
	return fails ? 1 : 0;
}

/*
 * Waits for a queue of collectives that a revocation cuts: those finished
 * before it end with 0, in order (*done), the rest with -EPIPE (*lost, the
 * last at *t_last). 1 when every one ended so, 0 when any ended otherwise
 * or a 0 came after a -EPIPE.
 */
static int wait_queue(struct collc_ctx *ctx, const collc_req *rq, int n, int *done, int *lost,
		      double *t_last)
{
	int order_ok = 1;

	for (int i = 0; i < n; i++) {
		int b = collc_wait(ctx, rq[i], 10000);

		if (b == 0 && !*lost)
			(*done)++;
		else if (b == -EPIPE)
			(*lost)++, *t_last = now_us();
		else
			order_ok = 0;
	}
	return order_ok;
}

/*
 * The kill scenario: on comm 0, both ranks put a 64 MiB all-reduce in flight,
 * then rank 0 waits in a collective rank 1 never submits, and the parent kills
 * rank 1. Comm 1 (other processes, same GPUs) keeps running throughout.
 */
#define KILL_QUEUE 200                /* 256 MiB all-reduces queued when the rank dies */
#define KILL_COUNT ((size_t)64 << 20) /* float32 elements of each */

static int child_kill(const struct collc_unique_id *ids, int n, int me, int which)
{
	static collc_req big_rq[KILL_QUEUE];
	struct rank_ctx rc;
	collc_req rq;
	int r, done = 0, lost = 0, order_ok = 1;
	double t_last = 0;

	if (rank_open(&rc, &ids[which], n, me, gpus[me],
		      which == 0 ? KILL_COUNT * 4 : (size_t)64 << 20) < 0)
		return 1;
	if (which == 1) {
		struct check ck = { "bystander", 0, BUF_ALLOC, BUF_ALLOC };
		int fails = 0;
		uint64_t k = 0;

		/* Both ranks leave this loop after the same round (agree_round). */
		while (agree_round(1, me, k + 1, sh->phase < 3)) {
			ck.round = (long)++k;
			fails += !run_case(&rc, &ck, k, 0, COLLC_FLOAT32, COLLC_SUM, 4099);
			sh->cases[me + 2][0]++;
		}
		for (int i = 0; i < 100; i++) {
			ck.round = (long)++k;
			fails += !run_case(&rc, &ck, k, 0, COLLC_FLOAT32, COLLC_SUM, 1 << 20);
			sh->cases[me + 2][0]++;
		}
		sh->fails[me + 2][0] = (uint64_t)fails;
		return fails ? 1 : 0;
	}
	{
		const struct check ck = { "before the kill", -1, BUF_ALLOC, BUF_ALLOC };

		if (!run_case(&rc, &ck, 1, 0, COLLC_FLOAT32, COLLC_SUM, 1000))
			return 1;
	}
	for (int i = 0; i < KILL_QUEUE; i++) {
		r = collc_allreduce(rc.comm, rc.dsend, rc.drecv, KILL_COUNT, COLLC_FLOAT32,
				    COLLC_SUM, &big_rq[i]);
		if (r < 0)
			return 1;
	}
	if (me == 1) {
		sh->ready[1] = 1;
		for (;;)
			pause(); /* the parent kills us */
	}
	r = collc_allreduce(rc.comm, rc.dsend, rc.drecv + 4096, 1024, COLLC_FLOAT32, COLLC_SUM,
			    &rq);
	sh->ready[0] = 1;
	/*
	 * The queue went to the GPUs (both ranks submitted it): those finished
	 * before the revocation end with 0, in order; the rest were abandoned in
	 * the grid (or never started) and end with -EPIPE.
	 */
	order_ok = wait_queue(rc.ctx, big_rq, KILL_QUEUE, &done, &lost, &t_last);
	if (r == 0)
		r = collc_wait(rc.ctx, rq, 5000);
	if (t_last < now_us())
		t_last = now_us();
	sh->value[0][0] = done;
	sh->value[0][3] = order_ok ? lost : -1;
	sh->value[0][2] = t_last;
	sh->value[0][1] = r;
	return r == -EPIPE && order_ok ? 0 : 1;
}

/*
 * net: one communicator across two collcd (rank_sock()). Every collective
 * at NET_CASES sizes each, log-uniform from 8 B to 16 MiB a rank (8 B and
 * 16 MiB always), over dtypes and ops drawn from the seed (the same on
 * every rank); NET_PIPE collectives in flight at once; then all-to-all and
 * all-to-allv (blocks within a daemon on the grid, across daemons staged
 * through host memory) and the send/recv ring (net_ring()), each
 * NET_COPY_CASES times, and an all-reduce after them; then the median times (us) of 16 MiB
 * all-reduces (value[me][1]), all-to-alls (value[me][0]) and send/recv rings (value[me][3]).
 */
#define NET_CASES      24
#define NET_MAX_BYTES  ((size_t)16 << 20)
#define NET_PIPE       16                /* collectives in flight at once */
#define NET_PIPE_SLOT  ((size_t)2 << 20) /* bytes of each one's buffers */
#define NET_COPY_CASES 12
#define NET_RING_OUT   2 /* sends (and receives) of a rank in flight at once */

/* Log-uniform from 8 B to max bytes, from x; case 0 is 8 B and case 1 max. */
static size_t net_bytes(uint64_t x, int k, size_t max)
{
	double l2 = 3 + (double)((x >> 16) % 10000) / 10000.0 * (log2((double)max) - 3);

	return k == 0 ? 8 : k == 1 ? max : (size_t)exp2(l2);
}

/* Bytes of send j of rank `from` in ring case cid (its receiver computes the same). */
static size_t net_ring_bytes(uint64_t cid, int from, int j, int k)
{
	return net_bytes(rc_mix(seed ^ rc_mix(0x72696e67ull + cid * 64 + (uint64_t)from * 8 + j)),
			 k, NET_MAX_BYTES);
}

/* Where a rank's ring sends and receives lie in its buffers (16 poison bytes after each receive). */
struct net_ring_plan {
	size_t sb[NET_RING_OUT], rb[NET_RING_OUT], so[NET_RING_OUT], ro[NET_RING_OUT];
	size_t st, rt; /* bytes of the send and of the receive buffer in use */
};

/* Lays the ring of collective cid out and fills the host send buffer: 0 when it does not fit. */
static int net_ring_plan(struct rank_ctx *rc, uint64_t cid, int k, struct net_ring_plan *pl)
{
	const int n = rc->n, me = rc->me, right = (me + 1) % n, left = (me + n - 1) % n;

	pl->st = pl->rt = 0;
	for (int j = 0; j < NET_RING_OUT; j++) {
		pl->sb[j] = net_ring_bytes(cid, me, j, j == 0 ? k : 2);
		pl->rb[j] = net_ring_bytes(cid, left, j, j == 0 ? k : 2);
		pl->so[j] = pl->st;
		pl->ro[j] = pl->rt;
		pl->st += pl->sb[j];
		pl->rt += pl->rb[j] + 16;
	}
	if (pl->st > rc->cap || pl->rt > rc->cap)
		return 0;
	for (int j = 0; j < NET_RING_OUT; j++)
		for (size_t b = 0; b < pl->sb[j]; b++)
			rc->hsend[pl->so[j] + b] = cpat(cid + (uint64_t)j, me, right, b);
	return 1;
}

/* Every received byte of the ring (in rc->hrecv) and the poison after each receive. */
static int net_ring_check(struct rank_ctx *rc, const struct check *ck, uint64_t cid,
			  const struct net_ring_plan *pl, const char *what)
{
	const int n = rc->n, me = rc->me, left = (me + n - 1) % n;

	for (int j = 0; j < NET_RING_OUT; j++) {
		const size_t o = pl->ro[j], len = pl->rb[j];

		for (size_t b = 0; b < len; b++)
			if (rc->hrecv[o + b] != cpat(cid + (uint64_t)j, left, me, b)) {
				report(ck, me, COPY_ALLTOALL + 2, COLLC_UINT8, 0, len, n,
				       "%s %d of %zu bytes from rank %d: byte %zu is 0x%02x, "
				       "not 0x%02x",
				       what, j, len, left, b, rc->hrecv[o + b],
				       cpat(cid + (uint64_t)j, left, me, b));
				return 0;
			}
		for (int z = 0; z < 16; z++)
			if (rc->hrecv[o + len + (size_t)z] != 0xa5) {
				report(ck, me, COPY_ALLTOALL + 2, COLLC_UINT8, 0, len, n,
				       "%s %d wrote past its %zu bytes", what, j, len);
				return 0;
			}
	}
	return 1;
}

/*
 * The ring of issue 18 across daemons: every rank posts NET_RING_OUT sends
 * to its right and as many receives from its left at once (even ranks send
 * first, odd ones receive first), of random sizes; every byte checked, and
 * 16 poison bytes after each receive. Returns 1 on pass.
 */
static int net_ring(struct rank_ctx *rc, uint64_t cid, int k)
{
	const int n = rc->n, me = rc->me, right = (me + 1) % n, left = (me + n - 1) % n;
	const struct check ck = { "net sendrecv", -1, BUF_ALLOC, BUF_ALLOC };
	struct net_ring_plan pl;
	const size_t *sb = pl.sb, *rb = pl.rb, *so = pl.so, *ro = pl.ro;
	collc_req reqs[2 * NET_RING_OUT];
	int nr = 0, r = 0;

	if (!net_ring_plan(rc, cid, k, &pl))
		return 1;
	CK(cudaMemcpy(rc->dsend, rc->hsend, pl.st, cudaMemcpyHostToDevice));
	CK(cudaMemset(rc->drecv, 0xa5, pl.rt));
	CK(cudaDeviceSynchronize());
	for (int j = 0; j < NET_RING_OUT && r == 0; j++)
		for (int pass = 0; pass < 2 && r == 0; pass++) {
			if ((pass == 0) == (me % 2 == 0))
				r = collc_send(rc->comm, rc->dsend + so[j], sb[j], COLLC_UINT8,
					       right, &reqs[nr++]);
			else
				r = collc_recv(rc->comm, rc->drecv + ro[j], rb[j], COLLC_UINT8,
					       left, &reqs[nr++]);
		}
	for (int i = 0; i < nr; i++) {
		int w = collc_wait(rc->ctx, reqs[i], 15000);

		if (r == 0)
			r = w;
	}
	if (r < 0) {
		report(&ck, me, COPY_ALLTOALL + 2, COLLC_UINT8, 0, sb[0], n,
		       "send/recv across daemons failed: %s (%d)", collc_strerror(r), r);
		return 0;
	}
	CK(cudaMemcpy(rc->hrecv, rc->drecv, pl.rt, cudaMemcpyDeviceToHost));
	return net_ring_check(rc, &ck, cid, &pl, "receive");
}

/* Copies across daemons: all-to-all, all-to-allv, the send/recv ring. Returns the failed ones. */
static int net_copies(struct rank_ctx *rc, uint64_t *cid)
{
	static const int dts[] = { COLLC_FLOAT32, COLLC_BFLOAT16, COLLC_UINT8, COLLC_FLOAT64,
				   COLLC_FLOAT8_E4M3 };
	const int me = rc->me, n = rc->n;
	int fails = 0;

	for (int k = 0; k < NET_COPY_CASES; k++)
		for (int v = 0; v < 3; v++) {
			uint64_t x = rc_mix(seed ^ rc_mix(0x6e657463ull + (uint64_t)k * 4 + v));
			int dt = dts[x % 5], ok;
			size_t es = collc_dtype_bytes(dt);
			/* A block at most 16 MiB, and every rank's blocks fit the buffers. */
			size_t max = (rc->cap - 4096) / (size_t)n;
			size_t count =
				net_bytes(x, k, max < NET_MAX_BYTES ? max : NET_MAX_BYTES) / es;

			if (k == 2)
				count = 0; /* every block empty */
			if (v < 2)
				ok = copy_case(rc, rc->dsend, BUF_ALLOC, rc->drecv, BUF_ALLOC,
					       *cid += 1, v, dt, count);
			else
				ok = net_ring(rc, *cid += 64, k);
			sh->cases[me][COPY_ALLTOALL + v]++;
			sh->fails[me][COPY_ALLTOALL + v] += !ok;
			fails += !ok;
		}
	return fails;
}

/*
 * NET_PIPE collectives of every kind in flight at once (steps of one after
 * another's on the same rings), each in its own part of the buffers; every
 * result checked once all completed. Returns the failed ones.
 */
static int net_pipeline(struct rank_ctx *rc, uint64_t *cid)
{
	const int n = rc->n, me = rc->me;
	const struct check ck = { "net pipeline", -1, BUF_ALLOC, BUF_ALLOC };
	struct rc_case c[NET_PIPE];
	collc_req req[NET_PIPE];
	int err[NET_PIPE], fails = 0;

	if ((size_t)NET_PIPE * NET_PIPE_SLOT > rc->cap)
		return 0;
	for (int i = 0; i < NET_PIPE; i++) {
		uint64_t x = rc_mix(seed ^ rc_mix(0x70697065ull + (uint64_t)i));
		int dt = i & 1 ? COLLC_BFLOAT16 : COLLC_FLOAT32, coll = i % NCOLL;
		size_t es = collc_dtype_bytes(dt), max = NET_PIPE_SLOT / (es * (size_t)n);

		c[i] = gpu_case(dt, coll == 1 || coll == 3 ? COLLC_SUM : (int)(x % 5),
				1 + (size_t)((x >> 8) % max), ++*cid, n);
		rc_fill_coll(&c[i], (enum rc_coll)coll, n, me,
			     rc->hsend + (size_t)i * NET_PIPE_SLOT);
	}
	CK(cudaMemcpy(rc->dsend, rc->hsend, NET_PIPE * NET_PIPE_SLOT, cudaMemcpyHostToDevice));
	CK(cudaMemset(rc->drecv, 0xa5, NET_PIPE * NET_PIPE_SLOT));
	CK(cudaDeviceSynchronize());
	for (int i = 0; i < NET_PIPE; i++)
		err[i] = rc_submit(rc->comm, (enum rc_coll)(i % NCOLL), &c[i], i % n,
				   rc->dsend + (size_t)i * NET_PIPE_SLOT,
				   rc->drecv + (size_t)i * NET_PIPE_SLOT, &req[i]);
	for (int i = 0; i < NET_PIPE; i++)
		if (!err[i])
			err[i] = collc_wait(rc->ctx, req[i], 15000);
	CK(cudaMemcpy(rc->hrecv, rc->drecv, NET_PIPE * NET_PIPE_SLOT, cudaMemcpyDeviceToHost));
	for (int i = 0; i < NET_PIPE; i++) {
		int coll = i % NCOLL, bad;

		sh->cases[me][coll]++;
		if (err[i]) {
			report(&ck, me, coll, c[i].dtype, c[i].op, c[i].count, n,
			       "collective %d of %d in flight failed: %s (%d)", i, NET_PIPE,
			       collc_strerror(err[i]), err[i]);
			sh->fails[me][coll]++;
			fails++;
			continue;
		}
		if (coll == 4 && me != i % n)
			continue; /* reduce writes the root alone */
		first_wrong[0] = wrong_count[0] = '\0';
		bad = rc_check_coll(&c[i], (enum rc_coll)coll, n, me, i % n,
				    rc->hrecv + (size_t)i * NET_PIPE_SLOT, "result");
		if (bad) {
			report(&ck, me, coll, c[i].dtype, c[i].op, c[i].count, n,
			       "collective %d of %d in flight: %s%s%s", i, NET_PIPE, first_wrong,
			       wrong_count[0] ? "; " : "", wrong_count);
			sh->fails[me][coll]++;
			fails++;
		}
	}
	return fails;
}

/*
 * The stream-ordered forms across daemons (issue 17 on a communicator
 * spanning collcd). Collectives: for each of the five and all-to-all,
 * NET_STREAM_ROUNDS rounds of 1 to 4 collectives enqueued on one stream,
 * each after its input's copy and its output's poisoning on that stream,
 * random sizes log-uniform from 8 B to 16 MiB a rank (8 B and 16 MiB
 * always); the outputs copied back on the stream and checked after one
 * stream sync. Returns the failed ones.
 */
#define NET_STREAM_ROUNDS 6

/* One stream collective (coll < NCOLL; NCOLL: all-to-all) of case c. */
static int stream_submit(struct rank_ctx *rc, int coll, const struct rc_case *c, int root,
			 const void *s, void *d, cudaStream_t st)
{
	struct CUstream_st *cs = (struct CUstream_st *)st;

	switch (coll) {
	case 0:
		return collc_allreduce_stream(rc->comm, s, d, c->count, c->dtype, c->op, cs);
	case 1:
		return collc_allgather_stream(rc->comm, s, d, c->count, c->dtype, cs);
	case 2:
		return collc_reduce_scatter_stream(rc->comm, s, d, c->count, c->dtype, c->op, cs);
	case 3:
		return collc_broadcast_stream(rc->comm, s, d, c->count, c->dtype, root, cs);
	case 4:
		return collc_reduce_stream(rc->comm, s, d, c->count, c->dtype, c->op, root, cs);
	default:
		return collc_alltoall_stream(rc->comm, s, d, c->count, c->dtype, cs);
	}
}

static int net_stream_colls(struct rank_ctx *rc, cudaStream_t st, uint64_t *cid)
{
	static const int dts[] = { COLLC_FLOAT32, COLLC_BFLOAT16, COLLC_FLOAT16, COLLC_FLOAT64,
				   COLLC_INT32,   COLLC_UINT8,    COLLC_INT64,   COLLC_FLOAT8_E4M3 };
	const int n = rc->n, me = rc->me;
	const struct check ck = { "net stream", -1, BUF_ALLOC, BUF_ALLOC };
	int fails = 0;

	for (int coll = 0; coll <= NCOLL; coll++)
		for (int rnd = 0; rnd < NET_STREAM_ROUNDS; rnd++) {
			uint64_t x = rc_mix(seed ^ rc_mix(0x7374726dull + (uint64_t)coll * 100 +
							  (uint64_t)rnd));
			const int m = rnd == 1 ? 1 : 2 + (int)(x % 3);
			const size_t slot = (rc->cap / (size_t)m) & ~(size_t)4095;
			size_t maxb = (slot - 64) / (size_t)n, sb[4], rb[4];
			struct rc_case c[4];
			int root[4], err[4];
			uint64_t ids[4];

			if (maxb > NET_MAX_BYTES)
				maxb = NET_MAX_BYTES;
			for (int i = 0; i < m; i++) {
				uint64_t y = rc_mix(x + (uint64_t)i);
				int dt = dts[y % 8], op = (int)((y >> 8) % 5);
				size_t es, bytes;

				if (coll == 1 || coll == 3 || coll == NCOLL)
					op = COLLC_SUM;
				es = collc_dtype_bytes(dt);
				/* 8 B first, 16 MiB alone in round 1, log-uniform otherwise. */
				bytes = net_bytes(y,
						  rnd == 0 && i == 0 ? 0
						  : rnd == 1         ? 1
								     : 2,
						  maxb);
				ids[i] = ++*cid;
				c[i] = gpu_case(dt, op, bytes / es ? bytes / es : 1, ids[i], n);
				root[i] = (int)((y >> 16) % (uint64_t)n);
				sb[i] = rb[i] = c[i].count * es;
				if (coll == 1)
					rb[i] *= (size_t)n;
				if (coll == 2 || coll == NCOLL)
					sb[i] *= (size_t)n;
				if (coll == NCOLL)
					rb[i] *= (size_t)n;
			}
			for (int i = 0; i < m; i++) {
				unsigned char *h = rc->hsend + (size_t)i * slot;

				if (coll < NCOLL)
					rc_fill_coll(&c[i], (enum rc_coll)coll, n, me, h);
				else
					for (int p = 0; p < n; p++)
						for (size_t b = 0; b < sb[i] / (size_t)n; b++)
							h[(size_t)p * (sb[i] / (size_t)n) + b] =
								cpat(ids[i], me, p, b);
				CK(cudaMemcpyAsync(rc->dsend + (size_t)i * slot, h, sb[i],
						   cudaMemcpyHostToDevice, st));
				CK(cudaMemsetAsync(rc->drecv + (size_t)i * slot, 0xa5, rb[i] + 16,
						   st));
				err[i] = stream_submit(rc, coll, &c[i], root[i],
						       rc->dsend + (size_t)i * slot,
						       rc->drecv + (size_t)i * slot, st);
			}
			for (int i = 0; i < m; i++)
				CK(cudaMemcpyAsync(rc->hrecv + (size_t)i * slot,
						   rc->drecv + (size_t)i * slot, rb[i] + 16,
						   cudaMemcpyDeviceToHost, st));
			CK(cudaStreamSynchronize(st));
			for (int i = 0; i < m; i++) {
				const unsigned char *h = rc->hrecv + (size_t)i * slot;
				int bad = 0, poison = -1;

				sh->cases[me][STREAM_BASE + coll]++;
				if (err[i]) {
					report(&ck, me, coll, c[i].dtype, c[i].op, c[i].count, n,
					       "stream collective %d of %d on the stream: %s (%d)",
					       i, m, collc_strerror(err[i]), err[i]);
					bad = 1;
				} else if (coll == NCOLL) {
					size_t blk = rb[i] / (size_t)n;

					for (int p = 0; p < n && !bad; p++)
						for (size_t b = 0; b < blk && !bad; b++)
							if (h[(size_t)p * blk + b] !=
							    cpat(ids[i], p, me, b)) {
								/* A failed communicator ends it unrun: the async error tells. */
								int ae = collc_comm_get_async_error(
									rc->comm);

								report(&ck, me, COPY_ALLTOALL,
								       c[i].dtype, 0, c[i].count, n,
								       "stream all-to-all %d of %d: byte "
								       "%zu from rank %d wrong (0x%02x, "
								       "not 0x%02x; the poison is "
								       "0xa5), %zu B a block; async "
								       "error now %s (%d)",
								       i, m, b, p,
								       h[(size_t)p * blk + b],
								       cpat(ids[i], p, me, b), blk,
								       collc_strerror(ae), ae);
								bad = 1;
							}
				} else if (coll != 4 || me == root[i]) {
					first_wrong[0] = wrong_count[0] = '\0';
					bad = rc_check_coll(&c[i], (enum rc_coll)coll, n, me,
							    root[i], h, "result");
					if (bad)
						report(&ck, me, coll, c[i].dtype, c[i].op,
						       c[i].count, n,
						       "stream collective %d of %d: %s%s%s", i, m,
						       first_wrong, wrong_count[0] ? "; " : "",
						       wrong_count);
				}
				if (!bad && !err[i] && (coll != 4 || me == root[i]))
					for (int k = 0; k < 16 && poison < 0; k++)
						if (h[rb[i] + (size_t)k] != 0xa5)
							poison = k;
				if (poison >= 0) {
					report(&ck, me, coll < NCOLL ? coll : COPY_ALLTOALL,
					       c[i].dtype, c[i].op, c[i].count, n,
					       "stream collective %d of %d wrote past its result",
					       i, m);
					bad = 1;
				}
				sh->fails[me][STREAM_BASE + coll] += bad;
				fails += bad;
			}
		}
	return fails;
}

/*
 * Stream-ordered sends and receives across daemons: the ring of net_ring()
 * (NET_RING_OUT each way, random sizes 8 B to 16 MiB, even ranks send
 * first) inside collc_group_start/end, fork 0 on the stream itself, fork 1
 * as libnccl-collc's ncclGroupEnd runs grouped sends and receives: each
 * call on a side stream of its own, forked from the stream by an event and
 * joined back by one. The receive buffers are poisoned and read back on
 * the stream; every byte checked after one sync. Returns 1 on pass.
 */
static int net_stream_ring(struct rank_ctx *rc, cudaStream_t st, cudaStream_t *side,
			   cudaEvent_t *ev, uint64_t cid, int k, int fork)
{
	const int n = rc->n, me = rc->me, right = (me + 1) % n, left = (me + n - 1) % n;
	const struct check ck = { fork ? "net stream sendrecv (ncclGroup pattern)"
				       : "net stream sendrecv (group)",
				  -1, BUF_ALLOC, BUF_ALLOC };
	struct net_ring_plan pl;
	const size_t *sb = pl.sb, *rb = pl.rb, *so = pl.so, *ro = pl.ro;
	int r = 0, nc = 0, g;

	if (!net_ring_plan(rc, cid, k, &pl))
		return 1;
	CK(cudaMemcpyAsync(rc->dsend, rc->hsend, pl.st, cudaMemcpyHostToDevice, st));
	CK(cudaMemsetAsync(rc->drecv, 0xa5, pl.rt, st));
	if (fork)
		CK(cudaEventRecord(ev[2 * NET_RING_OUT], st));
	g = collc_group_start();
	for (int j = 0; j < NET_RING_OUT && r == 0 && g == 0; j++)
		for (int pass = 0; pass < 2 && r == 0; pass++) {
			cudaStream_t on = st;

			if (fork) {
				on = side[nc];
				CK(cudaStreamWaitEvent(on, ev[2 * NET_RING_OUT], 0));
			}
			if ((pass == 0) == (me % 2 == 0))
				r = collc_send_stream(rc->comm, rc->dsend + so[j], sb[j],
						      COLLC_UINT8, right, (struct CUstream_st *)on);
			else
				r = collc_recv_stream(rc->comm, rc->drecv + ro[j], rb[j],
						      COLLC_UINT8, left, (struct CUstream_st *)on);
			nc++;
		}
	if (g == 0) {
		int e = collc_group_end();

		if (r == 0)
			r = e;
	} else {
		r = g;
	}
	/* Joined after the group's end, which enqueued each side stream's wait. */
	for (int i = 0; i < nc && fork; i++) {
		CK(cudaEventRecord(ev[i], side[i]));
		CK(cudaStreamWaitEvent(st, ev[i], 0));
	}
	CK(cudaMemcpyAsync(rc->hrecv, rc->drecv, pl.rt, cudaMemcpyDeviceToHost, st));
	CK(cudaStreamSynchronize(st));
	if (r < 0) {
		report(&ck, me, COPY_ALLTOALL + 2, COLLC_UINT8, 0, sb[0], n,
		       "stream send/recv across daemons: %s (%d)", collc_strerror(r), r);
		return 0;
	}
	return net_ring_check(rc, &ck, cid, &pl, "stream receive");
}

/* The stream-ordered part of net: collectives, then both rings; async error 0 after. */
static int net_stream(struct rank_ctx *rc, uint64_t *cid)
{
	cudaStream_t st, side[2 * NET_RING_OUT];
	cudaEvent_t ev[2 * NET_RING_OUT + 1];
	unsigned char *hsend = rc->hsend, *hrecv = rc->hrecv;
	int fails, r;

	/*
	 * Pinned host buffers for the stream's copies: a copy from or to
	 * pageable memory may wait on the host for the stream's earlier work,
	 * which would leave one collective on the stream at a time.
	 */
	CK(cudaMallocHost((void **)&rc->hsend, rc->cap));
	CK(cudaMallocHost((void **)&rc->hrecv, rc->cap));
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	for (int i = 0; i < 2 * NET_RING_OUT; i++)
		CK(cudaStreamCreateWithFlags(&side[i], cudaStreamNonBlocking));
	for (int i = 0; i < 2 * NET_RING_OUT + 1; i++)
		CK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
	fails = net_stream_colls(rc, st, cid);
	for (int k = 0; k < NET_COPY_CASES; k++)
		for (int fork = 0; fork < 2; fork++) {
			int ok = net_stream_ring(rc, st, side, ev, *cid += 64, k, fork);

			sh->cases[rc->me][STREAM_BASE + NCOLL + 1 + fork]++;
			sh->fails[rc->me][STREAM_BASE + NCOLL + 1 + fork] += !ok;
			fails += !ok;
		}
	r = collc_comm_get_async_error(rc->comm);
	if (r != 0) {
		const struct check ck = { "net stream async error", -1, BUF_ALLOC, BUF_ALLOC };

		report(&ck, rc->me, 0, COLLC_FLOAT32, COLLC_SUM, 0, rc->n,
		       "collc_comm_get_async_error: %s (%d), want 0", collc_strerror(r), r);
		sh->value[rc->me][2] = r;
		fails++;
	}
	for (int i = 0; i < 2 * NET_RING_OUT + 1; i++)
		CK(cudaEventDestroy(ev[i]));
	for (int i = 0; i < 2 * NET_RING_OUT; i++)
		CK(cudaStreamDestroy(side[i]));
	CK(cudaStreamDestroy(st));
	CK(cudaFreeHost(rc->hsend));
	CK(cudaFreeHost(rc->hrecv));
	rc->hsend = hsend;
	rc->hrecv = hrecv;
	return fails;
}

static int child_net(const struct collc_unique_id *id, int n, int me)
{
	static const int dts[] = { COLLC_FLOAT32, COLLC_BFLOAT16, COLLC_FLOAT16, COLLC_FLOAT64,
				   COLLC_INT32,   COLLC_UINT8,    COLLC_INT64,   COLLC_FLOAT8_E4M3 };
	const int ndts = (int)(sizeof(dts) / sizeof(dts[0]));
	const struct check ck = { "net", -1, BUF_ALLOC, BUF_ALLOC };
	struct rank_ctx rc;
	uint64_t cid = 0;
	double t[5];
	int fails = 0, r;

	if (rank_open(&rc, id, n, me, gpus[me], NET_MAX_BYTES * n + 4096) < 0)
		return 1;
	for (int coll = 0; coll < NCOLL; coll++)
		for (int k = 0; k < NET_CASES; k++) {
			uint64_t x = rc_mix(seed ^ rc_mix(0x6e6574ull + (uint64_t)coll * 1000 + k));
			int dt = dts[x % ndts], op = (int)((x >> 8) % 5), ok;
			double l2 = 3 + (double)((x >> 16) % 10000) / 10000.0 * 21;
			size_t bytes = k == 0 ? 8 : k == 1 ? NET_MAX_BYTES : (size_t)exp2(l2);
			size_t count = bytes / collc_dtype_bytes(dt);

			if (coll == 1 || coll == 3)
				op = COLLC_SUM;
			ok = run_case(&rc, &ck, ++cid, coll, dt, op, count ? count : 1);
			sh->cases[me][coll]++;
			sh->fails[me][coll] += !ok;
			fails += !ok;
			if (fails > 20)
				return 1;
		}
	fails += net_pipeline(&rc, &cid);
	fails += net_copies(&rc, &cid);
	if (fails > 20)
		return 1;
	fails += net_stream(&rc, &cid);
	if (fails > 20)
		return 1;
	{
		int ok = run_case(&rc, &ck, ++cid, 0, COLLC_FLOAT32, COLLC_SUM, 65537);

		sh->cases[me][0]++;
		sh->fails[me][0] += !ok;
		fails += !ok;
	}
	/*
	 * The medians of 5: a send/recv ring, an all-to-all and an all-reduce of
	 * 16 MiB a rank, the all-reduce last: a rank that leaves revokes the
	 * communicator, and a ring's send may still be moving when its sender's
	 * receive has ended.
	 */
	for (int what = 2; what >= 0; what--) {
		const int right = (me + 1) % n, left = (me + n - 1) % n;

		for (int i = 0; i < 5; i++) {
			double t0 = now_us();
			collc_req rq[2];
			int nr = 1;

			if (what == 0) {
				r = collc_allreduce(rc.comm, rc.dsend, rc.drecv, NET_MAX_BYTES / 4,
						    COLLC_FLOAT32, COLLC_SUM, &rq[0]);
			} else if (what == 1) {
				r = collc_alltoall(rc.comm, rc.dsend, rc.drecv,
						   NET_MAX_BYTES / (size_t)n, COLLC_UINT8, &rq[0]);
			} else {
				r = collc_send(rc.comm, rc.dsend, NET_MAX_BYTES, COLLC_UINT8, right,
					       &rq[0]);
				if (r == 0)
					r = collc_recv(rc.comm, rc.drecv, NET_MAX_BYTES,
						       COLLC_UINT8, left, &rq[nr++]);
			}
			for (int j = 0; j < nr && r == 0; j++)
				r = collc_wait(rc.ctx, rq[j], 15000);
			t[i] = now_us() - t0;
			if (r < 0)
				fails++;
		}
		for (int i = 0; i < 5; i++)
			for (int j = i + 1; j < 5; j++)
				if (t[j] < t[i]) {
					double z = t[i];

					t[i] = t[j];
					t[j] = z;
				}
		sh->value[me][what == 0 ? 1 : what == 1 ? 0 : 3] = t[2];
	}
	return fails ? 1 : 0;
}

/*
 * netkill: every rank queues NETKILL_QUEUE all-reduces of 64 MiB on the
 * communicator across the two collcd; the parent kills the second collcd
 * (SIGKILL). The first collcd's ranks must see their queue end as
 * completed-then-EPIPE (value: [0] completed, [1] -EPIPE or -1 when out of
 * order, [2] the time of the last error), then join a new communicator of
 * their own on the first collcd and run a checked all-reduce ([3]: 1 when
 * it passed).
 */
#define NETKILL_QUEUE 64
#define NETKILL_COUNT ((size_t)16 << 20) /* float32 elements: 64 MiB */

static int child_netkill(const struct collc_unique_id *ids, int n, int me)
{
	static collc_req rq[NETKILL_QUEUE];
	const int na = (n + 1) / 2;
	struct rank_ctx rc, rc2;
	int done = 0, lost = 0, order_ok = 1, r;
	double t_last = 0;

	if (rank_open(&rc, &ids[0], n, me, gpus[me], NETKILL_COUNT * 4) < 0)
		return 1;
	{
		const struct check ck = { "before the kill", -1, BUF_ALLOC, BUF_ALLOC };

		if (!run_case(&rc, &ck, 1, 0, COLLC_FLOAT32, COLLC_SUM, 100000))
			return 1;
	}
	for (int i = 0; i < NETKILL_QUEUE; i++)
		if (collc_allreduce(rc.comm, rc.dsend, rc.drecv, NETKILL_COUNT, COLLC_FLOAT32,
				    COLLC_SUM, &rq[i]) < 0)
			return 1;
	sh->ready[me] = 1;
	order_ok = wait_queue(rc.ctx, rq, NETKILL_QUEUE, &done, &lost, &t_last);
	if (me >= na)
		return 0; /* its collcd is gone: nothing to check here */
	sh->value[me][0] = done;
	sh->value[me][1] = order_ok ? lost : -1;
	sh->value[me][2] = t_last;
	/* The surviving collcd keeps serving: a new communicator of its ranks alone. */
	net_mode = 0;
	if (rank_open(&rc2, &ids[1], na, me, gpus[me], (size_t)8 << 20) < 0)
		return 1;
	{
		const struct check ck = { "after the kill", -1, BUF_ALLOC, BUF_ALLOC };

		r = run_case(&rc2, &ck, 2, 0, COLLC_FLOAT32, COLLC_SUM, 1 << 20);
	}
	sh->value[me][3] = r;
	return r && order_ok && lost > 0 ? 0 : 1;
}

/*
 * nethostile: the second collcd loads the test plugin that plays a hostile
 * peer (tests/multinode/hostile_plugin.c), armed by the file --arm-file
 * names. Every rank runs all-reduces of NETHOSTILE_COUNT float32 across the
 * two collcd, one at a time, each result checked exactly (integers, a new
 * pattern every round, so a stale slot cannot pass), until one fails; the
 * parent creates the arm file, and the second collcd's next step goes out
 * 8 bytes short. value: [0] right results, [1] the error, [2] its time,
 * [3] wrong results; then a new communicator over both collcd ([4]: 1 when
 * its checked all-reduce passed).
 */
#define NETHOSTILE_COUNT ((size_t)1 << 20) /* float32 elements: 4 MiB */

static float hostile_value(size_t i, int rank, uint64_t round)
{
	return (float)((i * 7 + (size_t)rank * 13 + round) % 1024);
}

static int child_nethostile(const struct collc_unique_id *ids, int n, int me)
{
	const double t_end = now_us() + 40e6;
	float *h;
	struct rank_ctx rc, rc2;
	uint64_t round, right = 0, wrong = 0;
	int r = 0;

	if (rank_open(&rc, &ids[0], n, me, gpus[me], NETHOSTILE_COUNT * 4) < 0)
		return 1;
	h = (float *)rc.hsend;
	for (round = 0; now_us() < t_end; round++) {
		collc_req req;

		for (size_t i = 0; i < NETHOSTILE_COUNT; i++)
			h[i] = hostile_value(i, me, round);
		CK(cudaMemcpy(rc.dsend, h, NETHOSTILE_COUNT * 4, cudaMemcpyHostToDevice));
		CK(cudaMemset(rc.drecv, 0xa5, NETHOSTILE_COUNT * 4));
		CK(cudaDeviceSynchronize());
		r = collc_allreduce(rc.comm, rc.dsend, rc.drecv, NETHOSTILE_COUNT, COLLC_FLOAT32,
				    COLLC_SUM, &req);
		if (r == 0)
			r = collc_wait(rc.ctx, req, 15000);
		if (r < 0)
			break;
		CK(cudaMemcpy(rc.hrecv, rc.drecv, NETHOSTILE_COUNT * 4, cudaMemcpyDeviceToHost));
		for (size_t i = 0; i < NETHOSTILE_COUNT; i++) {
			float want = 0, got = ((const float *)rc.hrecv)[i];

			for (int k = 0; k < n; k++)
				want += hostile_value(i, k, round);
			if (got != want) {
				fprintf(stderr,
					"FAILED CHECK %s: rank %d round %llu element %zu: %g, want %g\n",
					label, me, (unsigned long long)round, i, got, want);
				wrong++;
				break;
			}
		}
		if (wrong)
			break;
		right++;
		sh->ready[me] = 1;
	}
	sh->value[me][0] = (double)right;
	sh->value[me][1] = r;
	sh->value[me][2] = now_us();
	sh->value[me][3] = (double)wrong;
	if (r == 0)
		return 1; /* no error within 40 s, or a wrong result */
	/*
	 * Both collcd keep serving: a new communicator over them, once the
	 * failed one's teardown ended (a GPU lane serves one communicator
	 * across daemons at a time: net-daemons.sh waits 2 s between scenarios).
	 */
	collc_comm_destroy(rc.comm);
	sleep(2);
	if (rank_open(&rc2, &ids[1], n, me, gpus[me], (size_t)8 << 20) < 0)
		return 1;
	{
		const struct check ck = { "after the hostile step", -1, BUF_ALLOC, BUF_ALLOC };

		sh->value[me][4] = run_case(&rc2, &ck, 2, 0, COLLC_FLOAT32, COLLC_SUM, 1 << 20);
	}
	return sh->value[me][4] == 1 ? 0 : 1;
}

/* Parent */

/* totals.aborted_items of `collcctl status --json` ($COLLCCTL, --socket); -1 when unknown. */
static double aborted_items(void)
{
	const char *ctl = getenv("COLLCCTL");
	char cmd[1024], buf[1 << 16];
	size_t n = 0, k;
	const char *p;
	FILE *f;

	if (!ctl)
		return -1;
	snprintf(cmd, sizeof(cmd), "%s --socket %s status --json", ctl, sock_path);
	f = popen(cmd, "r");
	if (!f)
		return -1;
	while (n + 1 < sizeof(buf) && (k = fread(buf + n, 1, sizeof(buf) - 1 - n, f)) > 0)
		n += k;
	buf[n] = '\0';
	pclose(f);
	p = strstr(buf, "\"aborted_items\": ");
	return p ? strtod(p + strlen("\"aborted_items\": "), NULL) : -1;
}

static void parse_gpus(const char *s)
{
	char *e;

	ngpus = 0;
	while (*s && ngpus < MAXR) {
		gpus[ngpus++] = (int)strtol(s, &e, 10);
		s = *e ? e + 1 : e;
	}
}

static pid_t spawn(int (*fn)(const struct collc_unique_id *, int, int),
		   const struct collc_unique_id *id, int n, int me)
{
	pid_t p = fork();

	if (p == 0)
		_exit(fn(id, n, me));
	return p;
}

/* Spawns a rank of fn per GPU; 1 once every one said ready (sh->ready) within 30 s, else 0. */
static int spawn_ready(int (*fn)(const struct collc_unique_id *, int, int),
		       const struct collc_unique_id *ids, pid_t *pids)
{
	int all = 0;

	for (int i = 0; i < ngpus; i++)
		pids[i] = spawn(fn, ids, ngpus, i);
	for (int t = 0; t < 30000 && !all; t++) {
		all = 1;
		for (int i = 0; i < ngpus; i++)
			all &= sh->ready[i];
		if (!all)
			usleep(1000);
	}
	return all;
}

static int wait_all(pid_t *pids, int n, int timeout_s)
{
	int bad = 0;
	double t0 = now_us();

	for (int i = 0; i < n; i++) {
		int st;

		for (;;) {
			pid_t w = waitpid(pids[i], &st, WNOHANG);

			if (w == pids[i])
				break;
			if (now_us() - t0 > timeout_s * 1e6) {
				fprintf(stderr, "%s: timeout: killing ranks (hang)\n", label);
				for (int k = 0; k < n; k++)
					kill(pids[k], SIGKILL);
				waitpid(pids[i], &st, 0);
				bad = 1;
				break;
			}
			usleep(2000);
		}
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			bad = 1;
	}
	return bad;
}

static uint64_t sum_cases(int coll, uint64_t *fails)
{
	uint64_t c = 0, f = 0;

	for (int r = 0; r < MAXR; r++) {
		c += sh->cases[r][coll];
		f += sh->fails[r][coll];
	}
	*fails = f;
	return c;
}

static int make_ids(struct collc_unique_id *ids, int nids)
{
	struct collc_ctx *ctx;
	int r = collc_connect(sock_path, &ctx);

	for (int i = 0; r == 0 && i < nids; i++)
		r = collc_get_unique_id(ctx, &ids[i]);
	if (r < 0) {
		fprintf(stderr, "unique id: %s\n", collc_strerror(r));
		return r;
	}
	collc_disconnect(ctx);
	return 0;
}

static int child_interleave_w(const struct collc_unique_id *ids, int n, int me)
{
	return child_interleave(ids, n, me);
}

static const struct collc_unique_id *g_ids;
static int child_reg0(const struct collc_unique_id *ids, int n, int me)
{
	return child_regtraffic(g_ids, n, me, 0);
}
static int child_reg1(const struct collc_unique_id *ids, int n, int me)
{
	return child_regtraffic(g_ids, n, me, 1);
}
static int child_kill0(const struct collc_unique_id *ids, int n, int me)
{
	return child_kill(g_ids, n, me, 0);
}
static int child_kill1(const struct collc_unique_id *ids, int n, int me)
{
	return child_kill(g_ids, n, me, 1);
}
static int child_netkill0(const struct collc_unique_id *ids, int n, int me)
{
	return child_netkill(g_ids, n, me);
}

static int child_nethostile0(const struct collc_unique_id *ids, int n, int me)
{
	return child_nethostile(g_ids, n, me);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "gpus", required_argument, NULL, 'g' },
		{ "seed", required_argument, NULL, 'S' },
		{ "big", no_argument, NULL, 'b' },
		{ "iters", required_argument, NULL, 'i' },
		{ "label", required_argument, NULL, 'l' },
		{ "socket2", required_argument, NULL, 'T' },
		{ "kill-pid", required_argument, NULL, 'K' },
		{ "arm-file", required_argument, NULL, 'A' },
		{ "round-robin", no_argument, NULL, 'R' },
		{ 0 },
	};
	struct collc_unique_id ids[2];
	const char *scen;
	pid_t pids[2 * MAXR];
	int c, bad = 0;

	rc_set_report(keep_first_wrong);
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 's':
			sock_path = optarg;
			break;
		case 'g':
			parse_gpus(optarg);
			break;
		case 'S':
			seed = strtoull(optarg, NULL, 0);
			break;
		case 'b':
			big = 1;
			break;
		case 'i':
			iters = atoi(optarg);
			break;
		case 'l':
			label = optarg;
			break;
		case 'T':
			sock2_path = optarg;
			break;
		case 'K':
			kill_pid = (pid_t)atoi(optarg);
			break;
		case 'A':
			arm_file = optarg;
			break;
		case 'R':
			round_robin = 1;
			break;
		default:
			return 2;
		}
	}
	if (optind >= argc || ngpus < 1) {
		fprintf(stderr,
			"usage: collc-gpu-test sweep|copies|latency|stream|interleave|regtraffic|kill --socket P --gpus 0,1\n"
			"       collc-gpu-test net|netkill|nethostile --socket P --socket2 Q --gpus 0,0[,0,0]\n"
			"                      [--kill-pid PID] [--arm-file F]\n");
		return 2;
	}
	scen = argv[optind];
	net_mode = strcmp(scen, "net") == 0 || strcmp(scen, "netkill") == 0 ||
		   strcmp(scen, "nethostile") == 0;
	if (net_mode &&
	    (!sock2_path || ngpus < 2 || (strcmp(scen, "netkill") == 0 && kill_pid <= 0) ||
	     (strcmp(scen, "nethostile") == 0 && !arm_file))) {
		fprintf(stderr,
			"%s needs --socket2, two ranks or more (--gpus) and, for netkill, "
			"--kill-pid, for nethostile, --arm-file\n",
			scen);
		return 2;
	}
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED || make_ids(ids, 2) < 0)
		return 2;
	g_ids = ids;
	fprintf(stderr, "%s: seed %llu\n", label, (unsigned long long)seed);
	if (strcmp(scen, "sweep") == 0) {
		for (int i = 0; i < ngpus; i++)
			pids[i] = spawn(child_sweep, &ids[0], ngpus, i);
		bad = wait_all(pids, ngpus, big ? 400 : 150);
		for (int k = 0; k < NCOLL; k++) {
			uint64_t f, cs = sum_cases(k, &f);

			printf("RESULT %s/%s %s %llu checks, %llu failed\n", label, coll_names[k],
			       f || bad ? "FAIL" : "PASS", (unsigned long long)cs,
			       (unsigned long long)f);
		}
	} else if (strcmp(scen, "copies") == 0) {
		static const char *const names[3] = { "alltoall", "alltoallv", "sendrecv" };

		for (int i = 0; i < ngpus; i++)
			pids[i] = spawn(child_copies, &ids[0], ngpus, i);
		bad = wait_all(pids, ngpus, big ? 400 : 150);
		for (int k = 0; k < 3; k++) {
			uint64_t f, cs = sum_cases(k, &f);

			printf("RESULT %s/%s %s %llu checks, %llu failed\n", label, names[k],
			       f || bad ? "FAIL" : "PASS", (unsigned long long)cs,
			       (unsigned long long)f);
		}
	} else if (strcmp(scen, "latency") == 0) {
		for (int i = 0; i < ngpus; i++)
			pids[i] = spawn(child_latency, &ids[0], ngpus, i);
		bad = wait_all(pids, ngpus, 120);
		{
			uint64_t f, cs = sum_cases(0, &f);

			printf("RESULT %s/8B-allreduce-latency %s median %.2f us p99 %.2f us (rank 0, %d calls)\n",
			       label, bad ? "FAIL" : "PASS", sh->lat_us[0], sh->lat_p99_us[0],
			       iters);
			printf("RESULT %s/pipelined-%d %s %.2f us per all-reduce, %llu checks, %llu failed\n",
			       label, iters, f || bad ? "FAIL" : "PASS", sh->value[0][0],
			       (unsigned long long)cs, (unsigned long long)f);
		}
	} else if (strcmp(scen, "stream") == 0) {
		for (int i = 0; i < ngpus; i++)
			pids[i] = spawn(child_stream, &ids[0], ngpus, i);
		bad = wait_all(pids, ngpus, 120);
		{
			uint64_t f0, c0 = sum_cases(0, &f0), f1, c1 = sum_cases(1, &f1);
			const char *force = getenv("COLLC_STREAM_PATH");
			int path = (int)sh->value[0][3], path_ok = path > 0;

			/* Every rank took one path, the forced one if any. */
			for (int i = 1; i < ngpus; i++)
				path_ok &= (int)sh->value[i][3] == path;
			if (force && strcmp(force, "kernel") == 0)
				path_ok &= path == COLLC_STREAM_PATH_KERNEL;
			else if (force && strcmp(force, "memops") == 0)
				path_ok &= path == COLLC_STREAM_PATH_MEMOPS;
			printf("RESULT %s/stream-path %s %s on every rank (COLLC_STREAM_PATH=%s)\n",
			       label, path_ok && !bad ? "PASS" : "FAIL",
			       path == COLLC_STREAM_PATH_KERNEL   ? "gate kernel"
			       : path == COLLC_STREAM_PATH_MEMOPS ? "stream memory operations"
								  : "no path",
			       force ? force : "auto");

			printf("RESULT %s/stream-ordered %s %llu all-reduces after a slow memset, %llu failed\n",
			       label, f0 || bad ? "FAIL" : "PASS", (unsigned long long)c0,
			       (unsigned long long)f0);
			printf("RESULT %s/graph-replay %s %llu replays with new inputs, %llu failed\n",
			       label, f1 || bad ? "FAIL" : "PASS", (unsigned long long)c1,
			       (unsigned long long)f1);
			printf("RESULT %s/stream-8B-latency %s back to back %.2f us each; graph replay to "
			       "completion median %.2f us; replays back to back %.2f us each (rank 0, "
			       "path %s)\n",
			       label, bad ? "FAIL" : "PASS", sh->value[0][0], sh->value[0][1],
			       sh->value[0][2],
			       path == COLLC_STREAM_PATH_KERNEL ? "kernel" : "memops");
		}
	} else if (strcmp(scen, "interleave") == 0) {
		for (int i = 0; i < ngpus; i++)
			pids[i] = spawn(child_interleave_w, ids, ngpus, i);
		bad = wait_all(pids, ngpus, 120);
		{
			uint64_t f, cs = sum_cases(0, &f);

			printf("RESULT %s/two-comms-interleaved %s %d iterations, %llu collectives, %llu bad\n",
			       label, f || bad ? "FAIL" : "PASS", iters, (unsigned long long)cs,
			       (unsigned long long)f);
		}
	} else if (strcmp(scen, "regtraffic") == 0) {
		for (int i = 0; i < ngpus; i++) {
			pids[i] = spawn(child_reg0, ids, ngpus, i);
			pids[ngpus + i] = spawn(child_reg1, ids, ngpus, i);
		}
		bad = wait_all(pids, 2 * ngpus, 120);
		{
			uint64_t f, cs = sum_cases(0, &f);

			printf("RESULT %s/register-under-traffic %s %.0f register+alloc rounds, %llu checks, "
			       "%llu failed, slowest traffic op %.1f ms, slowest round %.1f ms\n",
			       label, f || bad ? "FAIL" : "PASS", sh->value[0][2],
			       (unsigned long long)cs, (unsigned long long)f,
			       sh->value[0][1] / 1000, sh->value[0][0] / 1000);
		}
	} else if (strcmp(scen, "kill") == 0) {
		double t_kill, a0, a1;

		pids[0] = spawn(child_kill0, ids, 2, 0);
		pids[1] = spawn(child_kill0, ids, 2, 1);
		pids[2] = spawn(child_kill1, ids, 2, 0);
		pids[3] = spawn(child_kill1, ids, 2, 1);
		for (int t = 0; t < 60000 && !(sh->ready[0] && sh->ready[1]); t++)
			usleep(1000);
		a0 = aborted_items();
		usleep(10000); /* rank 0 now waits for a collective rank 1 never submits */
		t_kill = now_us();
		kill(pids[1], SIGKILL);
		waitpid(pids[1], NULL, 0);
		bad = wait_all(&pids[0], 1, 30);
		sh->phase = 3;
		bad |= wait_all(&pids[2], 2, 120);
		a1 = aborted_items();
		{
			uint64_t f = sh->fails[2][0] + sh->fails[3][0],
				 cs = sh->cases[2][0] + sh->cases[3][0];
			double ms = (sh->value[0][2] - t_kill) / 1000.0;
			int lost = (int)sh->value[0][3];

			/*
			 * Pass: the waiting peer got -EPIPE within 1 s, the queue ended as
			 * completed-then-EPIPE with some abandoned, collcd counted work
			 * items abandoned in the grid, the bystander saw no error.
			 */
			printf("RESULT %s/client-killed %s queue of %d x 256 MiB: %d completed, %d -EPIPE "
			       "(grid items abandoned: %.0f), waiting peer got %d, last error %.1f ms after the "
			       "kill (limit 1000), bystander comm %llu checks %llu failed\n",
			       label,
			       bad || f || sh->value[0][1] != -EPIPE || ms > 1000 || lost <= 0 ||
					       !(a1 > a0)
				       ? "FAIL"
				       : "PASS",
			       KILL_QUEUE, (int)sh->value[0][0], lost, a1 - a0,
			       (int)sh->value[0][1], ms, (unsigned long long)cs,
			       (unsigned long long)f);
		}
	} else if (strcmp(scen, "net") == 0) {
		for (int i = 0; i < ngpus; i++)
			pids[i] = spawn(child_net, &ids[0], ngpus, i);
		bad = wait_all(pids, ngpus, 170); /* net-daemons.sh gives it 180 s */
		for (int k = 0; k < NCOLL; k++) {
			uint64_t f, cs = sum_cases(k, &f);

			printf("RESULT %s/%s %s %llu checks, %llu failed (%d ranks on 2 collcd, 8 B to 16 MiB)\n",
			       label, coll_names[k], f || bad ? "FAIL" : "PASS",
			       (unsigned long long)cs, (unsigned long long)f, ngpus);
		}
		/* Each line also fails when its scenario ran none (a child died before them). */
		for (int k = COPY_ALLTOALL; k < COPY_ALLTOALL + 3; k++) {
			uint64_t f, cs = sum_cases(k, &f);

			printf("RESULT %s/%s %s %llu checks, %llu failed (%d ranks on 2 collcd, GPU "
			       "buffers staged across daemons, %s)\n",
			       label, coll_names[k], f || bad || !cs ? "FAIL" : "PASS",
			       (unsigned long long)cs, (unsigned long long)f, ngpus,
			       k == COPY_ALLTOALL + 2 ? "a ring, 8 B to 16 MiB"
						      : "random counts, zeros included");
		}
		for (int k = 0; k < NSTREAM; k++) {
			uint64_t f, cs = sum_cases(STREAM_BASE + k, &f);
			int aerr = 0;

			for (int i = 0; i < ngpus; i++)
				if (sh->value[i][2] != 0)
					aerr = (int)sh->value[i][2];
			printf("RESULT %s/%s %s %llu checks, %llu failed, async error %d (%d ranks on "
			       "2 collcd, stream-ordered on GPU buffers, %s)\n",
			       label, stream_names[k], f || bad || !cs || aerr ? "FAIL" : "PASS",
			       (unsigned long long)cs, (unsigned long long)f, aerr, ngpus,
			       k < NCOLL + 1 ? "1-4 in flight on one stream, 8 B to 16 MiB"
			       : k == NCOLL + 1
				       ? "a ring in collc_group_start/end on one stream, 8 B to 16 MiB"
				       : "a ring in a group, a side stream per call forked by events "
					 "as ncclGroupEnd does, 8 B to 16 MiB");
		}
		/* busbw as nccl-tests counts it: 2(n-1)/n, (n-1)/n and 1 times algbw. */
		for (int what = 0; what < 3; what++) {
			static const char *const names[] = { "allreduce", "alltoall", "sendrecv" };
			const double us = sh->value[0][what == 0   ? 1
						       : what == 1 ? 0
								   : 3],
				     alg = (double)NET_MAX_BYTES / (us * 1e3),
				     f = what == 0   ? 2.0 * (ngpus - 1) / ngpus
					 : what == 1 ? (double)(ngpus - 1) / ngpus
						     : 1.0;

			printf("RESULT %s/%s-16MiB %s median %.0f us, algbw %.2f GB/s, busbw %.2f "
			       "GB/s (rank 0, 5 runs)\n",
			       label, names[what], bad || us <= 0 ? "FAIL" : "PASS", us, alg,
			       alg * f);
		}
	} else if (strcmp(scen, "netkill") == 0) {
		const int na = (ngpus + 1) / 2;
		double t_kill, worst = 0;
		int all, ok = 1;

		all = spawn_ready(child_netkill0, ids, pids);
		usleep(200000); /* 64 MiB all-reduces in flight across the daemons */
		t_kill = now_us();
		if (getenv("COLLC_NETKILL_BEFORE") && *getenv("COLLC_NETKILL_BEFORE")) {
			int rc = system(getenv("COLLC_NETKILL_BEFORE"));

			fprintf(stderr, "%s: $COLLC_NETKILL_BEFORE exited with %d, %.1f ms\n",
				label, rc, (now_us() - t_kill) / 1000.0);
		}
		kill(kill_pid, SIGKILL);
		{
			/* Unix time, to set against collcd's breadcrumbs and the MPS server's log. */
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			fprintf(stderr, "%s: SIGKILL of pid %d at %lld.%06ld (unix time)\n", label,
				(int)kill_pid, (long long)ts.tv_sec, ts.tv_nsec / 1000);
		}
		bad = wait_all(pids, na, 40);
		wait_all(&pids[na], ngpus - na, 20); /* their collcd is gone: reaped, not judged */
		for (int i = 0; i < na; i++) {
			double ms = (sh->value[i][2] - t_kill) / 1000.0;

			if (ms > worst)
				worst = ms;
			ok &= (int)sh->value[i][1] > 0 && (int)sh->value[i][3] == 1;
		}
		printf("RESULT %s/daemon-killed %s %d ranks on the surviving collcd: %d completed, %d "
		       "-EPIPE (rank 0; queue of %d x 64 MiB), last error %.1f ms after kill -9 "
		       "(limit 2000), new communicator after it %s\n",
		       label, bad || !all || !ok || worst > 2000 ? "FAIL" : "PASS", na,
		       (int)sh->value[0][0], (int)sh->value[0][1], NETKILL_QUEUE, worst,
		       (int)sh->value[0][3] == 1 ? "correct" : "FAILED");
	} else if (strcmp(scen, "nethostile") == 0) {
		double t_arm, worst = 0;
		int all, ok = 1, fd;

		unlink(arm_file);
		all = spawn_ready(child_nethostile0, ids, pids);
		usleep(200000);
		t_arm = now_us();
		fd = open(arm_file, O_CREAT | O_WRONLY, 0644);
		if (fd >= 0)
			close(fd);
		bad = wait_all(pids, ngpus, 90);
		for (int i = 0; i < ngpus; i++) {
			double ms = (sh->value[i][2] - t_arm) / 1000.0;

			if (ms > worst)
				worst = ms;
			ok &= sh->value[i][0] > 0 && (int)sh->value[i][1] == -EPROTO &&
			      sh->value[i][3] == 0 && sh->value[i][4] == 1;
		}
		printf("RESULT %s/hostile-step %s %d ranks: %.0f right all-reduces (rank 0), then %d "
		       "(%s), last %.1f ms after the arm (limit 2000), %.0f wrong results, a new "
		       "communicator over both collcd after it %s\n",
		       label, bad || !all || fd < 0 || !ok || worst > 2000 ? "FAIL" : "PASS", ngpus,
		       sh->value[0][0], (int)sh->value[0][1], collc_strerror((int)sh->value[0][1]),
		       worst, sh->value[0][3], sh->value[0][4] == 1 ? "correct" : "FAILED");
	} else {
		fprintf(stderr, "unknown scenario %s\n", scen);
		return 2;
	}
	return bad;
}
