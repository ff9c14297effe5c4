/* SPDX-License-Identifier: MIT */
/*
 * One rank of a multi-node test (tests/multinode/netns.sh starts one per
 * rank, each in its node's network namespace, COLLC_SOCKET naming that
 * node's collcd). The rank with --make-id asks its collcd for the unique id
 * and writes it to --id-file; the others wait for the file and read it.
 *
 *   mn_client --id-file F --rank R --nranks N [--make-id] [--mode M] [options]
 *
 * Modes:
 *   check      every collective x every dtype x every op (reductions) at
 *              random sizes, --rounds times, each result against the
 *              double-precision reference (tests/common/refcheck.h) and each
 *              send buffer checked unchanged, each collective but
 *              reduce-scatter x dtype at 16-64 KiB a rank four times (eager
 *              inputs received in place between two daemons), and an
 *              all-reduce of each dtype in place; then, once, each collective
 *              at about --big-count elements (default 2^20, 0: none); more
 *              rounds until --min-s
 *              seconds passed (for a communicator that must keep running
 *              while another one is hurt);
 *   mismatch   rank --odd disagrees on the count, then on the op: every rank
 *              must get -EINVAL (within --bound-ms), and a matching all-reduce
 *              after each must be right;
 *   loop       all-reduces (checked), two in flight at all times, until one
 *              fails; --ready-file is created after the first success. The
 *              failure must be one of the accepted codes (-EPIPE, -ETIMEDOUT,
 *              plus --also-accept), come at most --bound-ms after the mtime
 *              of --marker (which the test touches just before it injects the
 *              fault; a failure before the marker exists fails); the one
 *              pending behind it must fail the same way (or be right), and a
 *              later one must fail too, as promptly. Gives up (fails) after
 *              --max-s without an error;
 *              --loop-alltoall runs all-to-alls instead (each byte checked);
 *              --loop-allgather all-gathers (checked), whose steps across
 *              daemons land straight in the ranks' buffers;
 *   init-fail  collc_comm_init must fail (an id the daemons must refuse,
 *              e.g. with --flip-byte); success fails the test;
 *   make-id    only writes a fresh id to --id-file (with --make-id implied);
 *   a2a        all-to-all and all-to-allv across the daemons: every dtype
 *              (fp8 too) at counts 0, 1, 7 and random ones, all-to-allv with
 *              random per-pair counts (a quarter 0) at random displacements,
 *              once a large all-to-all; every byte received checked against
 *              its sender's pattern, every byte outside the blocks a canary
 *              that must survive, the send buffer unchanged. Then rank --odd
 *              expects one element more than is sent to it: -EINVAL on every
 *              rank, nothing written, and a good all-to-all after it.
 *   p2p        send/recv across the daemons: every dtype (fp8 too), each
 *              rank sending every rank (itself too) a random count (0, odd,
 *              up to --max-count bytes), all posted at once in a random
 *              order, every byte checked and the canaries around it; a ring
 *              of 16 outstanding sends right and receives left; then rank
 *              --odd sends its right neighbour one element fewer than it
 *              expects: -EINVAL on both, nothing written, every other pair
 *              right, and a good ring after it.
 *              --loop-p2p (loop mode) sends right and receives left instead
 *              of all-reducing.
 * --flip-byte OFF flips every bit of byte OFF of the id after reading it.
 *
 * Exit status: 0 pass, 1 fail, 2 usage. Every line says which rank speaks.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <collc.h>

#include "refcheck.h"

/* A mismatch fails every rank within this long of its own submission. */
#define MISMATCH_MS 5000

enum mode { M_CHECK, M_MISMATCH, M_LOOP, M_INIT_FAIL, M_MAKE_ID, M_A2A, M_P2P };

static struct {
	const char *id_file, *socket, *marker, *ready_file;
	int make_id, rank, nranks, mode, rounds, odd, flip_byte, loop_a2a, loop_p2p, loop_ag;
	int bound_ms, max_s, min_s, id_wait_ms, wait_ms;
	size_t max_count, big_count;
	uint64_t seed;
	int also_accept[8], nalso;
} o = {
	.rank = -1,
	.nranks = -1,
	.mode = M_CHECK,
	.rounds = 1,
	.odd = 1,
	.flip_byte = -1,
	.bound_ms = 2000,
	.max_s = 30,
	.id_wait_ms = 30000,
	.wait_ms = 20000,
	.max_count = 65536,
	.big_count = 1u << 20,
	.seed = 1,
};

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "mn_client rank %d: ", o.rank);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void report(int fail, const char *line)
{
	say("%s%s", fail ? "WRONG: " : "", line);
}

static double now_real(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double now_mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* Written under a temporary name and renamed, so a reader never sees half an id. */
static int write_id(const struct collc_unique_id *id)
{
	char tmp[4096];
	int fd;

	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", o.id_file, (int)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (write(fd, id->bytes, sizeof(id->bytes)) != (ssize_t)sizeof(id->bytes) ||
	    fsync(fd) < 0) {
		close(fd);
		unlink(tmp);
		return -EIO;
	}
	close(fd);
	return rename(tmp, o.id_file) < 0 ? -errno : 0;
}

static int read_id(struct collc_unique_id *id)
{
	double deadline = now_mono() + o.id_wait_ms / 1000.0;

	do {
		int fd = open(o.id_file, O_RDONLY | O_CLOEXEC);

		if (fd >= 0) {
			ssize_t n = read(fd, id->bytes, sizeof(id->bytes));

			close(fd);
			if (n == (ssize_t)sizeof(id->bytes))
				return 0;
		}
		sleep_ms(10);
	} while (now_mono() < deadline);
	return -ETIMEDOUT;
}

static int touch(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);

	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}

/* One collective of a run: every rank draws the same ones from the seed. */
struct op {
	enum rc_coll coll;
	struct rc_case c;
	int root;
	int in_place; /* all-reduce: the result over the input (recv == send) */
};

static uint64_t draw(uint64_t *rs, uint64_t n)
{
	*rs = rc_mix(*rs + 0x9e3779b97f4a7c15ull);
	return n ? *rs % n : 0;
}

/* Mostly small and medium sizes, one in ten up to max_count elements. */
static size_t draw_count(uint64_t *rs, enum rc_coll coll)
{
	uint64_t pick = draw(rs, 100), n;

	if (pick < 45)
		n = 1 + draw(rs, 1024);
	else if (pick < 90)
		n = 1025 + draw(rs, 16384);
	else
		n = 1 + draw(rs, o.max_count);
	if (n > o.max_count)
		n = o.max_count;
	if (coll == RC_ALLGATHER || coll == RC_REDUCE_SCATTER)
		n = n / (uint64_t)o.nranks ? n / (uint64_t)o.nranks : 1;
	return (size_t)n;
}

/* Submit and wait; 0 or the error (-EAGAIN: still pending after wait_ms, see err_str). */
static int run_op(struct collc_ctx *ctx, struct collc_comm *comm, const struct op *op, void *send,
		  void *recv, int wait_ms)
{
	collc_req req;
	int r;

	rc_fill_coll(&op->c, op->coll, o.nranks, o.rank, send);
	r = rc_submit(comm, op->coll, &op->c, op->root, send, recv, &req);
	if (r < 0)
		return r;
	return collc_wait(ctx, req, wait_ms);
}

/* collc_strerror, except that -EAGAIN from collc_wait means our own wait limit passed. */
static const char *err_str(int r)
{
	static char buf[96];

	if (r != -EAGAIN)
		return collc_strerror(r);
	snprintf(buf, sizeof(buf), "still pending after the client's wait limit (%d ms)",
		 o.wait_ms);
	return buf;
}

static int check_op(const struct op *op, const void *send, const void *recv, const char *what)
{
	return rc_check_coll(&op->c, op->coll, o.nranks, o.rank, op->root, recv, what) ||
	       rc_check_send(&op->c, op->coll, o.nranks, o.rank, send, what);
}

/* Runs op and checks it; 0, or 1 after saying what failed. */
static int run_checked(struct collc_ctx *ctx, struct collc_comm *comm, const struct op *op,
		       void *send, void *recv)
{
	int reduces = op->coll != RC_ALLGATHER && op->coll != RC_BROADCAST;
	char what[160];
	int r;

	snprintf(what, sizeof(what), "%s %s %s count %zu root %d", rc_coll_name(op->coll),
		 rc_dtype_name(op->c.dtype), reduces ? rc_op_name(op->c.op) : "-", op->c.count,
		 op->root);
	if (op->in_place) {
		strncat(what, " in place", sizeof(what) - strlen(what) - 1);
		recv = send;
	}
	r = run_op(ctx, comm, op, send, recv, o.wait_ms);
	if (r < 0) {
		say("FAIL: %s: %s", what, err_str(r));
		return 1;
	}
	if (op->in_place ? rc_check_coll(&op->c, op->coll, o.nranks, o.rank, op->root, recv, what)
			 : check_op(op, send, recv, what)) {
		say("FAIL: %s: wrong result", what);
		return 1;
	}
	return 0;
}

/* run_checked() with a fresh seed and a random root; counts it in *ndone. 0, or 1 as it. */
static int run_drawn(struct collc_ctx *ctx, struct collc_comm *comm, struct op *op, void *send,
		     void *recv, uint64_t *rs, uint64_t *ndone)
{
	op->c.seed = rc_mix(*rs ^ *ndone);
	op->root = (int)draw(rs, (uint64_t)o.nranks);
	if (run_checked(ctx, comm, op, send, recv))
		return 1;
	(*ndone)++;
	return 0;
}

static int mode_check(struct collc_ctx *ctx, struct collc_comm *comm, void *send, void *recv)
{
	uint64_t rs = rc_mix(o.seed), ndone = 0;
	double t0 = now_mono();
	int more = 1;

	for (int round = 0; more; round++) {
		for (int k = 0; k < RC_NUM_COLLS; k++) {
			enum rc_coll coll = (enum rc_coll)k;
			int nops = coll == RC_ALLGATHER || coll == RC_BROADCAST ? 1 : 5;

			for (int dt = 0; dt < COLLC_NUM_DTYPES; dt++)
				for (int p = 0; p < nops; p++) {
					struct op op = { .coll = coll };

					op.c.dtype = (collc_dtype)dt;
					op.c.op = (collc_redop)p;
					op.c.count = draw_count(&rs, coll);
					if (run_drawn(ctx, comm, &op, send, recv, &rs, &ndone))
						return 1;
				}
		}
		/*
		 * Eager sizes whose inputs cross into a buffer of their own or, between
		 * two daemons, into the ranks' result buffers (daemon/node.h
		 * node_coll_ready()): each collective but reduce-scatter, each dtype,
		 * 16-64 KiB a rank, four times (each daemon's view comes first in some).
		 */
		for (int k = 0; k < RC_NUM_COLLS * 4; k++) {
			struct op op = { .coll = (enum rc_coll)(k % RC_NUM_COLLS) };
			/* What the buffers hold: max_count elements gathered (draw_count()). */
			size_t cap = op.coll == RC_ALLGATHER ? o.max_count / (size_t)o.nranks
							     : o.max_count;

			if (op.coll == RC_REDUCE_SCATTER)
				continue;
			for (int dt = 0; dt < COLLC_NUM_DTYPES; dt++) {
				op.c.dtype = (collc_dtype)dt;
				op.c.op = (collc_redop)draw(&rs, 5);
				op.c.count =
					((16u << 10) + draw(&rs, 48u << 10)) / collc_dtype_size(dt);
				if (op.c.count > cap)
					op.c.count = cap ? cap : 1;
				if (run_drawn(ctx, comm, &op, send, recv, &rs, &ndone))
					return 1;
			}
		}
		/* In place: an all-reduce of each dtype, a random op, over its input. */
		for (int dt = 0; dt < COLLC_NUM_DTYPES; dt++) {
			struct op op = { .coll = RC_ALLREDUCE, .in_place = 1 };

			op.c.dtype = (collc_dtype)dt;
			op.c.op = (collc_redop)draw(&rs, 5);
			op.c.count = draw_count(&rs, RC_ALLREDUCE);
			op.c.seed = rc_mix(rs ^ ndone);
			if (run_checked(ctx, comm, &op, send, recv))
				return 1;
			ndone++;
		}
		/* Once: each collective at --big-count (many chunks and ring slots), a random dtype and op. */
		for (int k = 0; round == 0 && o.big_count && k < RC_NUM_COLLS; k++) {
			struct op op = { .coll = (enum rc_coll)k };
			size_t n = o.big_count - (size_t)draw(&rs, o.big_count / 8);

			op.c.dtype = (collc_dtype)draw(&rs, COLLC_NUM_DTYPES);
			op.c.op = (collc_redop)draw(&rs, 5);
			if (op.coll == RC_ALLGATHER || op.coll == RC_REDUCE_SCATTER)
				n /= (size_t)o.nranks;
			op.c.count = n ? n : 1;
			if (run_drawn(ctx, comm, &op, send, recv, &rs, &ndone))
				return 1;
		}
		/* And an all-reduce at --big-count in place: steps may land in the buffer it reads. */
		if (round == 0 && o.big_count) {
			struct op op = { .coll = RC_ALLREDUCE, .in_place = 1 };

			op.c.dtype = (collc_dtype)draw(&rs, COLLC_NUM_DTYPES);
			op.c.op = (collc_redop)draw(&rs, 5);
			op.c.count = o.big_count - (size_t)draw(&rs, o.big_count / 8);
			op.c.seed = rc_mix(rs ^ ndone);
			if (run_checked(ctx, comm, &op, send, recv))
				return 1;
			ndone++;
		}
		if (round + 1 < o.rounds)
			continue;
		more = 0;
		/* Every rank must stop after the same round: another round while any wants one. */
		if (o.min_s > 0) {
			int32_t *vote = send, *all = recv;
			collc_req req;
			int r;

			*vote = now_mono() - t0 < o.min_s;
			r = collc_allreduce(comm, vote, all, 1, COLLC_INT32, COLLC_MAX, &req);
			if (r == 0)
				r = collc_wait(ctx, req, o.wait_ms);
			if (r < 0) {
				say("FAIL: the vote for another round: %s", err_str(r));
				return 1;
			}
			/* The max of 0s and 1s, at least this rank's own. */
			if ((*all != 0 && *all != 1) || *all < *vote) {
				say("FAIL: the vote for another round: max %d, this rank's %d",
				    *all, *vote);
				return 1;
			}
			more = *all;
		}
	}
	say("%llu collectives right in %.2f s", (unsigned long long)ndone, now_mono() - t0);
	return 0;
}

static int good_allreduce(struct collc_ctx *ctx, struct collc_comm *comm, void *send, void *recv,
			  uint64_t seed, const char *what)
{
	struct op op = { .coll = RC_ALLREDUCE, .c = { COLLC_FLOAT32, COLLC_SUM, 4096, seed } };
	int r = run_op(ctx, comm, &op, send, recv, o.wait_ms);

	if (r < 0) {
		say("FAIL: %s: %s", what, err_str(r));
		return 1;
	}
	if (check_op(&op, send, recv, what)) {
		say("FAIL: %s: wrong result", what);
		return 1;
	}
	return 0;
}

static int mode_mismatch(struct collc_ctx *ctx, struct collc_comm *comm, void *send, void *recv)
{
	static const char *const kinds[] = { "count (1000 vs 1001)", "op (sum vs max)" };
	int odd = o.rank == o.odd;

	if (good_allreduce(ctx, comm, send, recv, o.seed, "all-reduce before the mismatch"))
		return 1;
	for (int k = 0; k < 2; k++) {
		struct op op = { .coll = RC_ALLREDUCE,
				 .c = { COLLC_FLOAT32, COLLC_SUM, 1000, o.seed + 10 + k } };
		double t0;
		int r;

		if (k == 0 && odd)
			op.c.count = 1001;
		if (k == 1 && odd)
			op.c.op = COLLC_MAX;
		t0 = now_mono();
		r = run_op(ctx, comm, &op, send, recv, o.wait_ms);
		if (r != -EINVAL) {
			say("FAIL: ranks disagree on the %s (rank %d is the odd one): got %d (%s), "
			    "want -EINVAL",
			    kinds[k], o.odd, r, err_str(r));
			return 1;
		}
		/*
		 * From this rank's own submission (the ranks run in step after the
		 * previous all-reduce): prompt, not a hang until some timeout.
		 */
		if ((now_mono() - t0) * 1000 > MISMATCH_MS) {
			say("FAIL: the mismatched %s took %.3f s to fail (bound %d ms)", kinds[k],
			    now_mono() - t0, MISMATCH_MS);
			return 1;
		}
		say("mismatched %s: -EINVAL after %.3f s", kinds[k], now_mono() - t0);
		if (good_allreduce(ctx, comm, send, recv, o.seed + 20 + k,
				   "all-reduce after the mismatch"))
			return 1;
	}
	return 0;
}

#define A2A_MAX_RANKS 16

/* One all-to-all(v), the same on every rank: counts[i][j] elements from i to j. */
struct a2a {
	uint64_t k;
	collc_dtype dt;
	int v;
	size_t count;
	size_t counts[A2A_MAX_RANKS][A2A_MAX_RANKS];
	size_t sdispls[A2A_MAX_RANKS][A2A_MAX_RANKS], rdispls[A2A_MAX_RANKS][A2A_MAX_RANKS];
};

/* Byte b of what rank `from` sends rank `to` in case k. */
static uint8_t a2a_byte(uint64_t k, uint32_t from, uint32_t to, uint64_t b)
{
	uint64_t w = rc_mix(o.seed ^ (k << 40) ^ ((uint64_t)from << 32) ^ ((uint64_t)to << 24) ^
			    (b / 8 * 0x9e3779b97f4a7c15ull));

	return (uint8_t)(w >> (8 * (b % 8)));
}

/* Blocks of sizes sz[] in a random order with random gaps: their displacements. */
static void a2a_place(uint64_t *rs, int n, const size_t *sz, size_t *displs)
{
	int order[A2A_MAX_RANKS];
	size_t at = (size_t)draw(rs, 5);

	for (int p = 0; p < n; p++)
		order[p] = p;
	for (int p = n - 1; p > 0; p--) {
		int q = (int)draw(rs, (uint64_t)p + 1), t = order[p];

		order[p] = order[q];
		order[q] = t;
	}
	for (int i = 0; i < n; i++) {
		displs[order[i]] = at;
		at += sz[order[i]] + (size_t)draw(rs, 3);
	}
}

static void a2a_make(struct a2a *c, uint64_t k, collc_dtype dt, int v, size_t count)
{
	uint64_t rs = rc_mix(o.seed * 31 + k);
	const int n = o.nranks;

	memset(c, 0, sizeof(*c));
	c->k = k;
	c->dt = dt;
	c->v = v;
	c->count = count;
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++)
			c->counts[i][j] = !v ? count : draw(&rs, 4) == 0 ? 0 : 1 + draw(&rs, count);
	for (int i = 0; i < n; i++) {
		size_t ssz[A2A_MAX_RANKS], rsz[A2A_MAX_RANKS];

		for (int j = 0; j < n; j++) {
			ssz[j] = c->counts[i][j];
			rsz[j] = c->counts[j][i];
			c->sdispls[i][j] = c->rdispls[i][j] = (size_t)j * count;
		}
		if (v) {
			a2a_place(&rs, n, ssz, c->sdispls[i]);
			a2a_place(&rs, n, rsz, c->rdispls[i]);
		}
	}
}

/* Bytes from the buffer's start past its furthest block, plus a guard of canaries. */
static size_t a2a_span(const size_t *displs, const size_t *counts, size_t es)
{
	size_t end = 0;

	for (int j = 0; j < o.nranks; j++)
		if ((displs[j] + counts[j]) * es > end)
			end = (displs[j] + counts[j]) * es;
	return end + 256;
}

/*
 * Runs c on this rank (with recvcounts[extra_from] one more when extra_from
 * >= 0); 0, or 1 after saying what is wrong, or, when refused is set, the
 * collective's error (< 0) once nothing was written.
 */
static int a2a_run(struct collc_ctx *ctx, struct collc_comm *comm, const struct a2a *c,
		   uint8_t *send, uint8_t *recv, int extra_from, int refused)
{
	const size_t es = collc_dtype_size(c->dt);
	const int me = o.rank, n = o.nranks;
	size_t sendcounts[A2A_MAX_RANKS], recvcounts[A2A_MAX_RANKS], sspan, rspan;
	char what[160];
	collc_req req;
	long bad;
	int r;

	snprintf(what, sizeof(what), "case %llu %s %s count %zu", (unsigned long long)c->k,
		 c->v ? "alltoallv" : "alltoall", rc_dtype_name(c->dt), c->count);
	for (int j = 0; j < n; j++) {
		sendcounts[j] = c->counts[me][j];
		recvcounts[j] = c->counts[j][me] + (j == extra_from);
	}
	sspan = a2a_span(c->sdispls[me], sendcounts, es);
	rspan = a2a_span(c->rdispls[me], recvcounts, es);
	rc_canary_fill(send, sspan, 1);
	rc_canary_fill(recv, rspan, 3);
	for (int j = 0; j < n; j++)
		for (size_t b = 0; b < sendcounts[j] * es; b++)
			send[c->sdispls[me][j] * es + b] =
				a2a_byte(c->k, (uint32_t)me, (uint32_t)j, b);
	if (c->v)
		r = collc_alltoallv(comm, send, sendcounts, c->sdispls[me], recv, recvcounts,
				    c->rdispls[me], c->dt, &req);
	else
		r = collc_alltoall(comm, send, recv, c->count, c->dt, &req);
	if (r == 0)
		r = collc_wait(ctx, req, o.wait_ms);
	if (r < 0) {
		if (!refused) {
			say("FAIL: %s: %s", what, err_str(r));
			return 1;
		}
		/* Refused: nothing of the receive buffer may have changed. */
		bad = rc_canary_check(recv, 0, rspan, 3);
		if (bad >= 0) {
			say("FAIL: %s: refused with %s but byte %ld was written", what,
			    collc_strerror(r), bad);
			return 1;
		}
		return r;
	}
	for (int j = 0; j < n; j++)
		for (size_t b = 0; b < recvcounts[j] * es; b++) {
			uint8_t want = a2a_byte(c->k, (uint32_t)j, (uint32_t)me, b);
			uint8_t got = recv[c->rdispls[me][j] * es + b];

			if (got != want) {
				say("FAIL: %s: byte %zu from rank %d is %#x, not %#x", what, b, j,
				    got, want);
				return 1;
			}
		}
	/* Outside the blocks: still canary (walk the gaps between sorted block ends). */
	for (size_t at = 0; at < rspan;) {
		size_t next = rspan;
		int inside = 0;

		for (int j = 0; j < n; j++) {
			size_t b0 = c->rdispls[me][j] * es, b1 = b0 + recvcounts[j] * es;

			if (b1 > b0 && at >= b0 && at < b1) {
				at = b1;
				inside = 1;
				break;
			}
			if (b1 > b0 && b0 > at && b0 < next)
				next = b0;
		}
		if (inside)
			continue;
		bad = rc_canary_check(recv, at, next, 3);
		if (bad >= 0) {
			say("FAIL: %s: receive byte %ld outside every block was written", what,
			    bad);
			return 1;
		}
		at = next;
	}
	for (int j = 0; j < n; j++)
		for (size_t b = 0; b < sendcounts[j] * es; b++)
			if (send[c->sdispls[me][j] * es + b] !=
			    a2a_byte(c->k, (uint32_t)me, (uint32_t)j, b)) {
				say("FAIL: %s: the send block for rank %d changed", what, j);
				return 1;
			}
	return 0;
}

static int mode_a2a(struct collc_ctx *ctx, struct collc_comm *comm, void *send, void *recv)
{
	uint64_t rs = rc_mix(o.seed ^ 0xa2a), k = 0;
	double t0 = now_mono();
	struct a2a *c = malloc(sizeof(*c));
	size_t big;
	int r;

	if (!c || o.nranks > A2A_MAX_RANKS) {
		say("FAIL: %s", c ? "too many ranks for the all-to-all cases" : "no memory");
		free(c);
		return 1;
	}
	for (int dt = 0; dt < COLLC_NUM_DTYPES; dt++) {
		static const size_t fixed[] = { 0, 1, 7 };

		for (int i = 0; i < 6; i++) {
			int v = i >= 4;
			size_t count = i < 3 ? fixed[i] : 1 + (size_t)draw(&rs, 2048);

			a2a_make(c, k++, (collc_dtype)dt, v, count);
			if (a2a_run(ctx, comm, c, send, recv, -1, 0)) {
				free(c);
				return 1;
			}
		}
	}
	/* Blocks of many ring steps each. */
	big = (o.big_count * 8 / 4) / (size_t)o.nranks / 8;
	a2a_make(c, k++, COLLC_FLOAT64, 0, big ? big : 1);
	if (a2a_run(ctx, comm, c, send, recv, -1, 0)) {
		free(c);
		return 1;
	}
	/* Counts that disagree across the daemons: every rank refuses it. */
	a2a_make(c, k++, COLLC_INT32, 1, 100);
	r = a2a_run(ctx, comm, c, send, recv, o.rank == o.odd ? (o.rank + 1) % o.nranks : -1, 1);
	if (r != -EINVAL) {
		if (r <= 0)
			say("FAIL: rank %d expects one element more from rank %d: got %s, want "
			    "-EINVAL",
			    o.odd, (o.odd + 1) % o.nranks, r ? err_str(r) : "success");
		free(c);
		return 1;
	}
	a2a_make(c, k++, COLLC_FLOAT8_E4M3, 1, 333);
	r = a2a_run(ctx, comm, c, send, recv, -1, 0);
	free(c);
	if (r)
		return 1;
	say("%llu all-to-alls right, the mismatched one refused, in %.2f s",
	    (unsigned long long)k - 1, now_mono() - t0);
	return 0;
}

/* Bytes rank `from` sends rank `to` in p2p round k: 0, tiny and odd, or up to the block. */
static size_t p2p_count(uint64_t k, int from, int to, size_t block, size_t es)
{
	uint64_t x =
		rc_mix(o.seed ^ (k * 0x100000001b3ull) ^ ((uint64_t)from << 20) ^ (uint64_t)to);

	switch (x % 5) {
	case 0:
		return 0;
	case 1:
		return 1 + (x >> 8) % 7;
	default:
		return 1 + (x >> 8) % (block / es);
	}
}

static int p2p_wait(struct collc_ctx *ctx, const collc_req *reqs, const int *posted, int n,
		    const char *what)
{
	int failed = 0;

	for (int i = 0; i < n; i++) {
		int r = posted[i] < 0 ? posted[i] : collc_wait(ctx, reqs[i], o.wait_ms);

		if (r < 0 && !failed) {
			say("FAIL: %s: request %d: %d (%s)", what, i, r, err_str(r));
			failed = 1;
		}
	}
	return failed;
}

/* Block i of recv (canaries filled over the whole buffer) holds got bytes from rank from. */
static int p2p_check(const uint8_t *recv, size_t i, size_t block, size_t got, uint64_t k, int from,
		     const char *what)
{
	for (size_t b = 0; b < got; b++)
		if (recv[i * block + b] != a2a_byte(k, (uint32_t)from, (uint32_t)o.rank, b)) {
			say("WRONG: %s: byte %zu of %zu from rank %d", what, b, got, from);
			return 1;
		}
	if (rc_canary_check(recv, i * block + got, (i + 1) * block, 3) >= 0) {
		say("WRONG: %s: written past the %zu bytes from rank %d", what, got, from);
		return 1;
	}
	return 0;
}

/* Every rank to every rank (itself too), dtype dt, round k, all posted in a random order. */
static int p2p_all_pairs(struct collc_ctx *ctx, struct collc_comm *comm, uint64_t k, collc_dtype dt,
			 uint8_t *send, uint8_t *recv, size_t block)
{
	const int n = o.nranks;
	size_t es = collc_dtype_size(dt);
	collc_req reqs[2 * A2A_MAX_RANKS];
	int order[2 * A2A_MAX_RANKS], posted[2 * A2A_MAX_RANKS];
	uint64_t rs = rc_mix(o.seed + k * 31 + (uint64_t)o.rank);
	char what[96];

	snprintf(what, sizeof(what), "send/recv round %llu (%s)", (unsigned long long)k,
		 rc_dtype_name(dt));
	rc_canary_fill(recv, block * (size_t)n, 3);
	for (int q = 0; q < n; q++)
		for (size_t b = 0; b < p2p_count(k, o.rank, q, block, es) * es; b++)
			send[(size_t)q * block + b] = a2a_byte(k, (uint32_t)o.rank, (uint32_t)q, b);
	for (int i = 0; i < 2 * n; i++)
		order[i] = i;
	for (int i = 2 * n - 1; i > 0; i--) {
		int j = (int)draw(&rs, (uint64_t)i + 1), t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	for (int i = 0; i < 2 * n; i++) {
		int q = order[i] / 2;

		if (order[i] & 1)
			posted[i] = collc_recv(comm, recv + (size_t)q * block,
					       p2p_count(k, q, o.rank, block, es), dt, q, &reqs[i]);
		else
			posted[i] = collc_send(comm, send + (size_t)q * block,
					       p2p_count(k, o.rank, q, block, es), dt, q, &reqs[i]);
	}
	if (p2p_wait(ctx, reqs, posted, 2 * n, what))
		return 1;
	for (int q = 0; q < n; q++)
		if (p2p_check(recv, (size_t)q, block, p2p_count(k, q, o.rank, block, es) * es, k, q,
			      what))
			return 1;
	return 0;
}

#define P2P_RING 16

/*
 * P2P_RING sends right and receives left outstanding at once, each of its
 * own size; with bad >= 0, rank bad's sends are one element short: its
 * pairs end with -EINVAL on both sides, nothing written.
 */
static int p2p_ring(struct collc_ctx *ctx, struct collc_comm *comm, uint64_t k0, uint8_t *send,
		    uint8_t *recv, size_t block, int bad)
{
	const int n = o.nranks, right = (o.rank + 1) % n, left = (o.rank + n - 1) % n;
	collc_req reqs[2 * P2P_RING];
	int posted[2 * P2P_RING], failed = 0;

	rc_canary_fill(recv, block * P2P_RING, 3);
	for (int i = 0; i < P2P_RING; i++) {
		size_t sn = p2p_count(k0 + (uint64_t)i, o.rank, right, block - 4, 4) + 1;

		for (size_t b = 0; b < sn * 4; b++)
			send[(size_t)i * block + b] =
				a2a_byte(k0 + (uint64_t)i, (uint32_t)o.rank, (uint32_t)right, b);
	}
	for (int i = 0; i < P2P_RING; i++) {
		uint64_t k = k0 + (uint64_t)i;
		size_t sn = p2p_count(k, o.rank, right, block - 4, 4) + 1,
		       rn = p2p_count(k, left, o.rank, block - 4, 4) + 1;

		if (o.rank == bad)
			sn--;
		/* Half the ranks post their sends first, the others their receives. */
		for (int h = 0; h < 2; h++) {
			int j = 2 * i + h;

			if ((h == 0) == (o.rank % 2 == 0))
				posted[j] = collc_send(comm, send + (size_t)i * block, sn,
						       COLLC_FLOAT32, right, &reqs[j]);
			else
				posted[j] = collc_recv(comm, recv + (size_t)i * block, rn,
						       COLLC_FLOAT32, left, &reqs[j]);
		}
	}
	for (int j = 0; j < 2 * P2P_RING; j++) {
		int is_send = (j % 2 == 0) == (o.rank % 2 == 0);
		int want = (is_send && o.rank == bad) || (!is_send && left == bad) ? -EINVAL : 0;
		int r = posted[j] < 0 ? posted[j] : collc_wait(ctx, reqs[j], o.wait_ms);

		if (r != want && !failed) {
			say("FAIL: ring %s %d ended with %d (%s), want %d",
			    is_send ? "send" : "receive", j / 2, r, err_str(r), want);
			failed = 1;
		}
	}
	if (failed)
		return 1;
	for (int i = 0; i < P2P_RING; i++) {
		uint64_t k = k0 + (uint64_t)i;
		if (left == bad) {
			if (rc_canary_check(recv, (size_t)i * block, (size_t)(i + 1) * block, 3) >=
			    0) {
				say("WRONG: ring receive %d of a refused pair wrote its buffer", i);
				return 1;
			}
			continue;
		}
		if (p2p_check(recv, (size_t)i, block,
			      (p2p_count(k, left, o.rank, block - 4, 4) + 1) * 4, k, left,
			      "ring receive"))
			return 1;
	}
	return 0;
}

static int mode_p2p(struct collc_ctx *ctx, struct collc_comm *comm, void *send, void *recv)
{
	const int n = o.nranks;
	size_t block = (o.max_count * 8 / (size_t)(n > P2P_RING ? n : P2P_RING)) & ~(size_t)7;
	double t0 = now_mono();
	uint64_t k = 0;

	for (int round = 0; round < o.rounds; round++)
		for (int dt = 0; dt < COLLC_NUM_DTYPES; dt++)
			if (p2p_all_pairs(ctx, comm, k++, (collc_dtype)dt, send, recv, block))
				return 1;
	say("%llu rounds of every rank to every rank right", (unsigned long long)k);
	if (p2p_ring(ctx, comm, 1000, send, recv, block, -1))
		return 1;
	say("ring of %d outstanding each way right", P2P_RING);
	if (p2p_ring(ctx, comm, 2000, send, recv, block, o.odd % n))
		return 1;
	say("rank %d's short sends refused on both sides, the other pairs right", o.odd % n);
	if (p2p_ring(ctx, comm, 3000, send, recv, block, -1))
		return 1;
	if (o.big_count) {
		/* One large pair each way: several transport messages, every stream. */
		const int right = (o.rank + 1) % n, left = (o.rank + n - 1) % n;
		size_t bytes = o.big_count * 8;
		collc_req reqs[2];
		int posted[2];

		for (size_t b = 0; b < bytes; b++)
			((uint8_t *)send)[b] = a2a_byte(4000, (uint32_t)o.rank, (uint32_t)right, b);
		rc_canary_fill(recv, bytes + 64, 3);
		posted[0] = collc_recv(comm, recv, o.big_count, COLLC_FLOAT64, left, &reqs[0]);
		posted[1] = collc_send(comm, send, o.big_count, COLLC_FLOAT64, right, &reqs[1]);
		if (p2p_wait(ctx, reqs, posted, 2, "large send/recv") ||
		    p2p_check(recv, 0, bytes + 64, bytes, 4000, left, "large send/recv"))
			return 1;
		say("%zu bytes each way right", bytes);
	}
	say("send/recv right after the refusal, in %.2f s", now_mono() - t0);
	/* Every rank's sends and receives ended before anyone leaves (and revokes the rest). */
	return good_allreduce(ctx, comm, send, recv, o.seed + 7, "all-reduce after send/recv");
}

static int accepted(int err)
{
	if (err == -EPIPE || err == -ETIMEDOUT)
		return 1;
	for (int i = 0; i < o.nalso; i++)
		if (err == o.also_accept[i])
			return 1;
	return 0;
}

/* Seconds from the marker's mtime to now; -1 when there is no marker yet. */
static double since_marker(void)
{
	struct stat st;

	if (stat(o.marker, &st) < 0)
		return -1;
	return now_real() - ((double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec / 1e9);
}

/* One of the loop's two collectives in flight. */
struct slot {
	struct op op;
	void *send, *recv;
	collc_req req;
	int submitted; /* 0, or the submission's error (< 0), or 1 */
	uint64_t k;    /* --loop-alltoall: the case (a2a_byte()) and its count a rank */
	size_t count;
	collc_req req2; /* --loop-p2p: the receive (req: the send) */
	int submitted2;
};

/* --loop-p2p: count float32 elements to the right, as many from the left, patterned by k. */
static void slot_submit_p2p(struct collc_comm *comm, struct slot *s, uint64_t *rs)
{
	const int n = o.nranks, right = (o.rank + 1) % n, left = (o.rank + n - 1) % n;
	uint8_t *send = s->send;

	/* Every rank draws alike: the counts of a pair agree. */
	s->k = draw(rs, 1ull << 20);
	s->count = o.max_count / 2 + (size_t)draw(rs, o.max_count / 2);
	for (size_t b = 0; b < s->count * 4; b++)
		send[b] = a2a_byte(s->k, (uint32_t)o.rank, (uint32_t)right, b);
	s->submitted = collc_send(comm, s->send, s->count, COLLC_FLOAT32, right, &s->req);
	if (s->submitted == 0)
		s->submitted = 1;
	s->submitted2 = collc_recv(comm, s->recv, s->count, COLLC_FLOAT32, left, &s->req2);
	if (s->submitted2 == 0)
		s->submitted2 = 1;
}

/* --loop-alltoall: count float32 elements to and from every rank, patterned by case k. */
static void slot_submit_a2a(struct collc_comm *comm, struct slot *s, uint64_t *rs)
{
	uint8_t *send = s->send;

	s->k = draw(rs, 1ull << 20);
	s->count = (o.max_count / 2 + (size_t)draw(rs, o.max_count / 2)) / (size_t)o.nranks;
	if (!s->count)
		s->count = 1;
	for (int j = 0; j < o.nranks; j++)
		for (size_t b = 0; b < s->count * 4; b++)
			send[(size_t)j * s->count * 4 + b] =
				a2a_byte(s->k, (uint32_t)o.rank, (uint32_t)j, b);
	s->submitted = collc_alltoall(comm, s->send, s->recv, s->count, COLLC_FLOAT32, &s->req);
	if (s->submitted == 0)
		s->submitted = 1;
}

/* 0 when the slot's collective delivered the right result, else 1 (said). */
static int slot_check(const struct slot *s, const char *what)
{
	const uint8_t *recv = s->recv;

	if (o.loop_p2p) {
		const int left = (o.rank + o.nranks - 1) % o.nranks;

		for (size_t b = 0; b < s->count * 4; b++)
			if (recv[b] != a2a_byte(s->k, (uint32_t)left, (uint32_t)o.rank, b)) {
				say("WRONG: %s: byte %zu from rank %d", what, b, left);
				return 1;
			}
		return 0;
	}
	if (!o.loop_a2a)
		return check_op(&s->op, s->send, s->recv, what);
	for (int j = 0; j < o.nranks; j++)
		for (size_t b = 0; b < s->count * 4; b++)
			if (recv[(size_t)j * s->count * 4 + b] !=
			    a2a_byte(s->k, (uint32_t)j, (uint32_t)o.rank, b)) {
				say("WRONG: %s: byte %zu from rank %d", what, b, j);
				return 1;
			}
	return 0;
}

static void slot_submit(struct collc_comm *comm, struct slot *s, uint64_t *rs)
{
	if (o.loop_a2a) {
		slot_submit_a2a(comm, s, rs);
		return;
	}
	if (o.loop_p2p) {
		slot_submit_p2p(comm, s, rs);
		return;
	}
	s->op.coll = o.loop_ag ? RC_ALLGATHER : RC_ALLREDUCE;
	s->op.c = (struct rc_case){ COLLC_FLOAT32, COLLC_SUM, 0, 0 };
	s->op.c.count = o.max_count / 2 + (size_t)draw(rs, o.max_count / 2);
	/* --loop-allgather: the gathered buffer holds what one all-reduce would. */
	if (o.loop_ag)
		s->op.c.count = s->op.c.count / (size_t)o.nranks + 1;
	s->op.c.seed = *rs;
	rc_fill_coll(&s->op.c, s->op.coll, o.nranks, o.rank, s->send);
	s->submitted = rc_submit(comm, s->op.coll, &s->op.c, s->op.root, s->send, s->recv, &s->req);
	if (s->submitted == 0)
		s->submitted = 1;
}

static int slot_wait(struct collc_ctx *ctx, struct slot *s)
{
	int r = s->submitted < 0 ? s->submitted : collc_wait(ctx, s->req, o.wait_ms), r2;

	if (!o.loop_p2p)
		return r;
	/* Both end: the receive's error when the send succeeded. */
	r2 = s->submitted2 < 0 ? s->submitted2 : collc_wait(ctx, s->req2, o.wait_ms);
	return r < 0 ? r : r2;
}

/*
 * Two all-reduces in flight at all times (one is checked while the other
 * runs), so the fault always finds a collective in progress, and a second
 * one pending behind it.
 */
static int mode_loop(struct collc_ctx *ctx, struct collc_comm *comm, void *send, void *recv,
		     void *send2, void *recv2)
{
	uint64_t rs = rc_mix(o.seed ^ 0x100), n = 0;
	double t_end = now_mono() + o.max_s, dt;
	struct slot sl[2] = { { .send = send, .recv = recv }, { .send = send2, .recv = recv2 } };
	struct slot *s;
	int r;

	/* Long enough to notice a hang past the bound; short enough to end. */
	o.wait_ms = o.bound_ms * 3 + 5000;
	slot_submit(comm, &sl[0], &rs);
	slot_submit(comm, &sl[1], &rs);
	for (;;) {
		s = &sl[n % 2];
		r = slot_wait(ctx, s);
		if (r < 0)
			break;
		if (slot_check(s, "collective in the loop")) {
			say("FAIL: collective %llu delivered a wrong result",
			    (unsigned long long)n);
			return 1;
		}
		if (n++ == 0 && o.ready_file && touch(o.ready_file) < 0) {
			say("FAIL: cannot create %s: %s", o.ready_file, strerror(errno));
			return 1;
		}
		if (now_mono() > t_end) {
			say("FAIL: %llu collectives, no error within %d s", (unsigned long long)n,
			    o.max_s);
			return 1;
		}
		slot_submit(comm, s, &rs);
	}
	dt = since_marker();
	if (dt < 0) {
		say("FAIL: collective %llu failed with %d (%s) before the fault was injected",
		    (unsigned long long)n, r, err_str(r));
		return 1;
	}
	say("after %llu right collectives: %d (%s) %.0f ms after the fault", (unsigned long long)n,
	    r, err_str(r), dt * 1000);
	if (!accepted(r)) {
		say("FAIL: error %d (%s) is not one the contract names", r, err_str(r));
		return 1;
	}
	if (dt * 1000 > o.bound_ms) {
		say("FAIL: the error came %.0f ms after the fault (bound %d ms)", dt * 1000,
		    o.bound_ms);
		return 1;
	}
	/*
	 * The collective pending behind it ends too: with an error the contract
	 * names, or, where it finished before the fault, with a right result.
	 */
	s = &sl[(n + 1) % 2];
	r = slot_wait(ctx, s);
	if (r == 0 && slot_check(s, "the pending collective")) {
		say("FAIL: the collective pending at the fault delivered a wrong result");
		return 1;
	}
	if (r < 0 && !accepted(r)) {
		say("FAIL: the collective pending at the fault: %d (%s)", r, err_str(r));
		return 1;
	}
	say("the collective pending at the fault: %d (%s)", r, r ? err_str(r) : "right result");
	/* A later collective on the same communicator fails as well, without hanging. */
	slot_submit(comm, s, &rs);
	r = slot_wait(ctx, s);
	dt = since_marker();
	if (r == 0) {
		say("FAIL: a collective submitted after the failure succeeded");
		return 1;
	}
	if (!accepted(r)) {
		say("FAIL: a collective submitted after the failure: %d (%s)", r, err_str(r));
		return 1;
	}
	if (dt * 1000 > o.bound_ms + 1000) {
		say("FAIL: a collective submitted after the failure failed %.0f ms after the fault",
		    dt * 1000);
		return 1;
	}
	say("a collective submitted after the failure: %d (%s)", r, err_str(r));
	return 0;
}

static int errno_of(const char *s)
{
	static const struct {
		const char *name;
		int err;
	} names[] = { { "ECONNRESET", ECONNRESET },
		      { "ENOTCONN", ENOTCONN },
		      { "ECANCELED", ECANCELED },
		      { "ESHUTDOWN", ESHUTDOWN },
		      { "EIO", EIO },
		      { "ECONNREFUSED", ECONNREFUSED },
		      { "EPROTO", EPROTO } };

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(s, names[i].name) == 0)
			return -names[i].err;
	return 0;
}

static int parse_int(const char *s, long min, long max, long *ret)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 0);
	if (errno || end == s || *end || v < min || v > max)
		return -1;
	*ret = v;
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: mn_client --id-file F --rank R --nranks N [--make-id] [--socket S]\n"
		"         [--mode check|mismatch|loop|init-fail|make-id|a2a|p2p] [--seed S] [--rounds K]\n"
		"         [--max-count N] [--big-count N] [--odd R] [--marker F] [--ready-file F] [--bound-ms MS]\n"
		"         [--max-s S] [--min-s S] [--also-accept ECONNRESET|ENOTCONN|EPROTO|...] [--flip-byte OFF]\n"
		"         [--id-wait-ms MS] [--wait-ms MS] [--loop-alltoall] [--loop-p2p]\n"
		"         [--loop-allgather]\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "id-file", required_argument, NULL, 'i' },
		{ "make-id", no_argument, NULL, 'm' },
		{ "rank", required_argument, NULL, 'r' },
		{ "nranks", required_argument, NULL, 'n' },
		{ "socket", required_argument, NULL, 's' },
		{ "mode", required_argument, NULL, 'M' },
		{ "seed", required_argument, NULL, 'S' },
		{ "rounds", required_argument, NULL, 'R' },
		{ "max-count", required_argument, NULL, 'c' },
		{ "big-count", required_argument, NULL, 'B' },
		{ "odd", required_argument, NULL, 'o' },
		{ "marker", required_argument, NULL, 'k' },
		{ "ready-file", required_argument, NULL, 'y' },
		{ "bound-ms", required_argument, NULL, 'b' },
		{ "max-s", required_argument, NULL, 'x' },
		{ "min-s", required_argument, NULL, 'X' },
		{ "also-accept", required_argument, NULL, 'a' },
		{ "flip-byte", required_argument, NULL, 'f' },
		{ "id-wait-ms", required_argument, NULL, 'I' },
		{ "wait-ms", required_argument, NULL, 'w' },
		{ "loop-alltoall", no_argument, NULL, 'L' },
		{ "loop-p2p", no_argument, NULL, 'P' },
		{ "loop-allgather", no_argument, NULL, 'G' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	static const char *const modes[] = { "check",   "mismatch", "loop", "init-fail",
					     "make-id", "a2a",      "p2p" };
	struct collc_unique_id id;
	struct collc_ctx *ctx = NULL;
	struct collc_comm *comm = NULL;
	void *send = NULL, *recv = NULL, *send2 = NULL, *recv2 = NULL;
	size_t bytes;
	long v;
	int c, r, failed = 1;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'i':
			o.id_file = optarg;
			break;
		case 'm':
			o.make_id = 1;
			break;
		case 's':
			o.socket = optarg;
			break;
		case 'k':
			o.marker = optarg;
			break;
		case 'y':
			o.ready_file = optarg;
			break;
		case 'M':
			o.mode = rc_name_index(modes, 7, optarg);
			if (o.mode < 0) {
				usage(stderr);
				return 2;
			}
			break;
		case 'a':
			if (o.nalso == 8 || !(o.also_accept[o.nalso++] = errno_of(optarg))) {
				fprintf(stderr, "mn_client: --also-accept %s: unknown\n", optarg);
				return 2;
			}
			break;
		case 'S':
			o.seed = strtoull(optarg, NULL, 0);
			break;
		case 'L':
			o.loop_a2a = 1;
			break;
		case 'G':
			o.loop_ag = 1;
			break;
		case 'P':
			o.loop_p2p = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'r':
		case 'n':
		case 'R':
		case 'c':
		case 'B':
		case 'o':
		case 'b':
		case 'x':
		case 'X':
		case 'f':
		case 'I':
		case 'w':
			if (parse_int(optarg, 0, c == 'c' || c == 'B' ? (1L << 24) : 1000000, &v) <
			    0) {
				fprintf(stderr, "mn_client: bad value %s\n", optarg);
				return 2;
			}
			*(c == 'r'   ? &o.rank
			  : c == 'n' ? &o.nranks
			  : c == 'R' ? &o.rounds
			  : c == 'o' ? &o.odd
			  : c == 'b' ? &o.bound_ms
			  : c == 'x' ? &o.max_s
			  : c == 'X' ? &o.min_s
			  : c == 'f' ? &o.flip_byte
			  : c == 'I' ? &o.id_wait_ms
			  : c == 'w' ? &o.wait_ms
				     : &(int){ 0 }) = (int)v;
			if (c == 'c')
				o.max_count = (size_t)(v ? v : 1);
			if (c == 'B')
				o.big_count = (size_t)v;
			break;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!o.id_file || o.nranks < 1 || o.rank < 0 || o.rank >= o.nranks ||
	    (o.mode == M_LOOP && !o.marker) || o.flip_byte >= (int)sizeof(id.bytes) ||
	    o.max_count < (size_t)o.nranks || optind < argc) {
		usage(stderr);
		return 2;
	}
	rc_set_report(report);

	r = collc_connect(o.socket, &ctx);
	if (r < 0) {
		say("FAIL: collc_connect(%s): %s", o.socket ? o.socket : "$COLLC_SOCKET",
		    err_str(r));
		return 1;
	}
	if (o.make_id || o.mode == M_MAKE_ID) {
		r = collc_get_unique_id(ctx, &id);
		if (r == 0)
			r = write_id(&id);
		if (r < 0) {
			say("FAIL: making the id in %s: %s", o.id_file, strerror(-r));
			goto out_disconnect;
		}
	} else if (read_id(&id) < 0) {
		say("FAIL: no id in %s within %d ms", o.id_file, o.id_wait_ms);
		goto out_disconnect;
	}
	if (o.mode == M_MAKE_ID) {
		failed = 0;
		goto out_disconnect;
	}
	if (o.flip_byte >= 0)
		id.bytes[o.flip_byte] ^= 0xff;

	r = collc_comm_init(ctx, &id, o.nranks, o.rank, -1, &comm);
	if (o.mode == M_INIT_FAIL) {
		if (r == 0) {
			say("FAIL: collc_comm_init with a refused id succeeded");
			collc_comm_destroy(comm);
		} else {
			say("collc_comm_init refused: %d (%s)", r, collc_strerror(r));
			failed = 0;
		}
		goto out_disconnect;
	}
	if (r < 0) {
		say("FAIL: collc_comm_init(nranks %d): %s", o.nranks, collc_strerror(r));
		goto out_disconnect;
	}
	/* Reduce-scatter sends nranks blocks; allgather receives them. */
	bytes = (o.max_count > o.big_count ? o.max_count : o.big_count) * 8 + 64;
	if (collc_mem_alloc(ctx, bytes, -1, &send) < 0 ||
	    collc_mem_alloc(ctx, bytes, -1, &recv) < 0 ||
	    (o.mode == M_LOOP && (collc_mem_alloc(ctx, bytes, -1, &send2) < 0 ||
				  collc_mem_alloc(ctx, bytes, -1, &recv2) < 0))) {
		say("FAIL: collc_mem_alloc of %zu bytes", bytes);
		goto out_destroy;
	}
	switch (o.mode) {
	case M_CHECK:
		failed = mode_check(ctx, comm, send, recv);
		break;
	case M_MISMATCH:
		failed = mode_mismatch(ctx, comm, send, recv);
		break;
	case M_A2A:
		failed = mode_a2a(ctx, comm, send, recv);
		break;
	case M_P2P:
		failed = mode_p2p(ctx, comm, send, recv);
		break;
	default:
		failed = mode_loop(ctx, comm, send, recv, send2, recv2);
		break;
	}
	collc_mem_free(ctx, send);
	collc_mem_free(ctx, recv);
	if (send2)
		collc_mem_free(ctx, send2);
	if (recv2)
		collc_mem_free(ctx, recv2);
out_destroy:
	collc_comm_destroy(comm);
out_disconnect:
	collc_disconnect(ctx);
	if (!failed)
		say("PASS");
	return failed;
}
