/* SPDX-License-Identifier: MIT */
/*
 * collc-bench: latency and bandwidth of collc's collectives, like nccl-tests'
 * *_perf, with NCCL (--vs-nccl) or Open MPI (--vs-mpi) measured the same way
 * in the same run. The parent forks one process per rank (one per GPU on the
 * CUDA backend); ranks leave their numbers in shared memory; the parent
 * turns them into the table, the CSV and the plot. The parent never loads
 * CUDA: only rank processes (and a probe child) do, after the fork.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <collc.h>

#include "bench/bench.h"
#include "bench/cudart.h"
#include "bench/daemon.h"
#include "bench/proc.h"
#include "bench/report.h"
#include "bench/runner.h"
#include "bench/tcp_limit.h"
#include "bench/vs_mpi.h"
#include "proto/shm.h"

#ifndef COLLC_BENCH_COLLCD
#define COLLC_BENCH_COLLCD "collcd"
#endif
#ifndef COLLC_BENCH_MPI_PEER
#define COLLC_BENCH_MPI_PEER NULL
#endif
#ifndef COLLC_BENCH_MPIRUN
#define COLLC_BENCH_MPIRUN "mpirun"
#endif

#define RANK_GRACE_S 10.0 /* after one rank fails, the others get this long to notice */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: collc-bench [--coll allreduce|allgather|reduce_scatter|broadcast|reduce|\n"
		"                   alltoall|sendrecv] --nranks N\n"
		"                   [--min-bytes A] [--max-bytes B] [--dtype float32] [--iters K] [--warmup W]\n"
		"                   [--depth Q] [--gpus LIST] [--root R] [--stream | --graph]\n"
		"                   [--vs-nccl [--nccl-modes LIST] | --vs-mpi]\n"
		"                   [--csv FILE] [--plot FILE.png]\n"
		"                   [--socket PATH[,PATH...] | --spawn-daemon] [--backend cpu|cuda] [--collcd PATH]\n"
		"                   [--daemon-arg ARG]... [--timeout-ms MS] [--tcp-limit-s S]\n"
		"                   [--tcp-row-bytes M] [--mpirun PATH] [--mpi-peer PATH] [--mpi-btl sm|tcp]\n"
		"                   [--mpirun-arg ARG]...\n"
		"       collc-bench --from-csv FILE.csv --plot FILE.png [--title TEXT]\n"
		"\n"
		"Runs one process per rank (one per GPU, rank r on GPU r, with --backend cuda), each\n"
		"connected to collcd, and for every size from A to B, doubling (nccl-tests -f 2):\n"
		"  1. fills the send buffers with rank- and size-dependent random data, runs one\n"
		"     collective and checks it against a long double reference (the tests' checker:\n"
		"     within ((1 + u)^(nranks - 1) - 1) * sum|x| for sums, exact otherwise);\n"
		"  2. W warmup collectives, then K timed ones: end-to-end latency = the call to\n"
		"     collc_<coll>() until collc_wait() returns, per rank; the table shows p50 and\n"
		"     p99 over iterations of the per-iteration MAX OVER RANKS;\n"
		"  3. new data, one untimed window (Q collectives, one into each receive buffer),\n"
		"     then K collectives with Q outstanding (submit Q, then wait for the\n"
		"     oldest and submit the next), each into one of Q receive buffers: pipelined\n"
		"     time = total / K (max over ranks); every buffer is then checked (the last\n"
		"     iteration). algbw = size / pipelined time, busbw = algbw * factor, ops/s =\n"
		"     1 / pipelined time.\n"
		"A wrong result on any rank: the size is reported as WRONG without numbers, and\n"
		"collc-bench exits 1.\n"
		"\n"
		"Size (as nccl-tests): the largest buffer of one rank, in bytes. allreduce, broadcast,\n"
		"reduce: the vector (count = size / dtype size). allgather: the gathered buffer, each\n"
		"rank sends size / nranks. reduce_scatter: the send buffer, each rank receives\n"
		"size / nranks. alltoall: each rank's send (and receive) buffer, size / nranks to and\n"
		"from each rank. sendrecv: every rank sends size to the next rank and receives size\n"
		"from the previous one, at once (two requests an iteration; NCCL: a group of\n"
		"ncclSend/ncclRecv; MPI: MPI_Sendrecv, MPI_Isend/MPI_Irecv pipelined). NCCL's\n"
		"alltoall is ncclAlltoAll where libnccl has it, else grouped ncclSend/ncclRecv.\n"
		"busbw factor: allreduce 2(n-1)/n, allgather, reduce_scatter and alltoall (n-1)/n,\n"
		"broadcast, reduce and sendrecv 1. Sizes are rounded down to whole elements per rank.\n"
		"Sizes accept K, M, G suffixes (powers of 1024).\n"
		"\n"
		"  --coll C          collective (default allreduce); reductions are sums\n"
		"  --nranks N        ranks, one process each (required)\n"
		"  --min-bytes A     first size (default 8)\n"
		"  --max-bytes B     last size (default 64M)\n"
		"  --dtype T         int8 uint8 int32 uint32 int64 uint64 float16 bfloat16 float32 float64\n"
		"                    float8_e4m3 float8_e5m2\n"
		"                    (default float32)\n"
		"  --iters K         timed iterations per phase and size (default 100)\n"
		"  --warmup W        untimed iterations before the latency phase (default 5)\n"
		"  --depth Q         collectives outstanding in the pipelined phase (default 4)\n"
		"  --gpus G0,G1,...  with --backend cuda: the GPU of each rank (default rank r on GPU r);\n"
		"                    ranks may share a GPU (collc only: NCCL needs one GPU per rank)\n"
		"  --root R          root of broadcast and reduce (default 0)\n"
		"  --stream          collc's ranks use the stream-ordered forms (collc_<coll>_stream;\n"
		"                    sendrecv: the receive on the rank's stream, the send on a second\n"
		"                    one forked from it and joined back) on a non-blocking CUDA stream\n"
		"                    each, measured as NCCL is: latency (p50, p99) = enqueue +\n"
		"                    cudaStreamSynchronize; pipelined = K back to back on the stream\n"
		"                    timed with CUDA events (Q only sets the receive slots rotated).\n"
		"                    Needs --backend cuda. With --vs-nccl, --nccl-modes defaults to plain\n"
		"  --graph           collc's stream-ordered calls captured into CUDA graphs once per size\n"
		"                    and replayed: latency = a graph of one collective replayed to\n"
		"                    completion (cudaGraphLaunch + cudaStreamSynchronize); pipelined = a\n"
		"                    graph of Q collectives replayed K / Q times back to back, CUDA\n"
		"                    events. Every captured collective holds one of collc's graph gates\n"
		"                    until the run ends: sizes x (1 + Q) <= %u. Not with --coll sendrecv\n"
		"                    (collc captures no send or receive). Needs --backend cuda. With\n"
		"                    --vs-nccl, --nccl-modes defaults to graph\n"
		"  --vs-nccl         also run NCCL (libnccl.so.2, loaded at run time) on the same GPUs,\n"
		"                    one process per GPU, same sizes, measured the same way: latency to\n"
		"                    cudaStreamSynchronize; pipelined = K back-to-back launches timed with\n"
		"                    CUDA events. Needs --backend cuda. Sets NCCL_NVLS_ENABLE=0 if unset.\n"
		"                    NCCL runs once per mode (--nccl-modes), each checked like collc; the\n"
		"                    NCCL columns take the best mode per size: p50 from the lowest p50,\n"
		"                    pipe from the lowest pipe, and name it\n"
		"  --nccl-modes LIST plain, win, graph, win+graph or all, comma-separated (default\n"
		"                    plain,win,graph). plain: cudaMalloc'd buffers, launches on one stream;\n"
		"                    win: ncclMemAlloc'd buffers registered as symmetric windows\n"
		"                    (ncclCommWindowRegister, NCCL_WIN_COLL_SYMMETRIC; NCCL >= 2.27, else\n"
		"                    skipped); graph: launches captured once into CUDA graphs and replayed\n"
		"                    (latency: a graph of one collective; pipelined: a graph of Q,\n"
		"                    replayed K / Q times); win+graph: both\n"
		"  --vs-mpi          also run Open MPI (mpirun -np N, ob1 over self,vader) on host memory:\n"
		"                    MPI_<Coll> for latency, MPI_I<coll> with Q outstanding for pipelined.\n"
		"                    Needs --backend cpu. --mpi-btl tcp: ob1 over tcp,self instead\n"
		"                    (MPI's TCP between its ranks, in the namespace collc-bench runs in;\n"
		"                    the default with several --socket)\n"
		"                    The peer runs first, before collcd is spawned. Peer columns show its\n"
		"                    numbers and the ratio peer time / collc time: > 1 means collc is faster\n"
		"  --csv FILE        write the table as CSV\n"
		"  --plot FILE.png   latency vs size and busbw vs size, log axes, collc and peer (gnuplot,\n"
		"                    else python3-matplotlib)\n"
		"  --from-csv FILE   only plot FILE (a --csv of an earlier run) into --plot\n"
		"  --socket PATH     an already running collcd (default $COLLC_SOCKET, /run/collcd/collcd.sock)\n"
		"  --socket A,B,...  several collcd (e.g. one per node, joined over the network): rank r\n"
		"                    connects to the (r mod n)-th; the id comes from the first. The raw\n"
		"                    TCP throughput between the first two daemons' network namespaces\n"
		"                    (one stream each way at once, --tcp-limit-s seconds, default 1;\n"
		"                    0: not measured; entering a namespace needs root) is measured in\n"
		"                    the same run, before and after the collc ranks, and the slower\n"
		"                    direction of the faster measurement is printed as the limit,\n"
		"                    with busbw / limit (xTCP); each stream writes and reads one\n"
		"                    1 MiB buffer. Sizes of at least --tcp-row-bytes (default 16M;\n"
		"                    0: none) up to 1G have raw TCP measured again just before and\n"
		"                    after them, while the ranks wait: xTCP from that, and xMem from\n"
		"                    streams that walk buffers of the size, as the ranks walk theirs\n"
		"  --spawn-daemon    start collcd on a temporary socket, stop it at the end\n"
		"  --backend B       cpu: host buffers, collcd --backend cpu; cuda: rank r on GPU r, device\n"
		"                    buffers from collc_mem_alloc (default cpu)\n"
		"  --collcd PATH     collcd to spawn (default %s)\n"
		"  --daemon-arg ARG  one more argument for the spawned collcd (e.g. --daemon-arg=--set=proto=ll)\n"
		"  --timeout-ms MS   a collc collective still pending after MS is an error (default 60000)\n"
		"  --mpirun PATH     (default %s)\n"
		"  --mpi-peer PATH   (default %s)\n"
		"  --mpirun-arg ARG  one more argument for mpirun (e.g. --mpirun-arg=--bind-to=none)\n"
		"\n"
		"Exit status: 0 every number reported; 1 a wrong result, an error or a failed peer; 2 usage.\n",
		COLLC_GATES / 2, COLLC_BENCH_COLLCD, COLLC_BENCH_MPIRUN,
		COLLC_BENCH_MPI_PEER ? COLLC_BENCH_MPI_PEER
				     : "not built: no MPI at configure time");
}

/* Waits for the rank processes; once one fails, the rest get RANK_GRACE_S, then SIGKILL. */
static int wait_ranks(const char *what, pid_t *pids, int n)
{
	double failed_at = 0;
	int left = n, bad = 0;

	while (left) {
		for (int r = 0; r < n; r++) {
			int st;
			pid_t w;

			if (pids[r] <= 0)
				continue;
			w = waitpid(pids[r], &st, WNOHANG);
			if (w != pids[r])
				continue;
			bench_child_del(pids[r]);
			pids[r] = 0;
			left--;
			if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
				continue;
			bad = 1;
			if (WIFSIGNALED(st))
				fprintf(stderr,
					"collc-bench: %s rank %d killed by signal %d (%s)\n", what,
					r, WTERMSIG(st), strsignal(WTERMSIG(st)));
			if (!failed_at)
				failed_at = bench_now();
		}
		if (left && failed_at && bench_now() - failed_at > RANK_GRACE_S) {
			fprintf(stderr, "collc-bench: %s: a rank failed; killing the %d left\n",
				what, left);
			for (int r = 0; r < n; r++)
				if (pids[r] > 0)
					kill(pids[r], SIGKILL);
			failed_at = bench_now() + 1e9; /* once */
		}
		if (left)
			bench_sleep_ms(5);
	}
	return bad ? -1 : 0;
}

/* Turns the ranks' shared results into one row's numbers. */
static void stats_of(const struct bench_cfg *cfg, const struct shared_results *sr, int s,
		     double *scratch, struct size_stats *st)
{
	int n = cfg->nranks, worst = RES_OK;
	double pipe = 0;

	memset(st, 0, sizeof(*st));
	for (int r = 0; r < n; r++) {
		const struct rank_result *res = &sr->res[s * n + r];
		int rank_status = res->status;

		if (bench_status_rank(rank_status) > bench_status_rank(worst)) {
			worst = rank_status;
			snprintf(st->msg, sizeof(st->msg), "%s", res->msg);
		}
		if (res->pipe_s > pipe)
			pipe = res->pipe_s;
	}
	st->status = worst;
	if (worst != RES_OK)
		return;
	for (int i = 0; i < cfg->iters; i++) {
		double m = 0;

		for (int r = 0; r < n; r++) {
			double v = sr->lat[((size_t)s * n + r) * cfg->iters + i];

			if (v > m)
				m = v;
		}
		scratch[i] = m;
	}
	qsort(scratch, (size_t)cfg->iters, sizeof(double), bench_cmp_double);
	st->p50_us = bench_percentile(scratch, cfg->iters, 50) * 1e6;
	st->p99_us = bench_percentile(scratch, cfg->iters, 99) * 1e6;
	st->pipe_us = pipe / cfg->iters * 1e6;
}

/* Errors before the first size (setup) are reported once, here. */
static void print_setup_errors(const char *what, const struct bench_cfg *cfg,
			       const struct shared_results *sr)
{
	for (int r = 0; r < cfg->nranks; r++)
		if (sr->res[r].status == RES_ERROR)
			fprintf(stderr, "collc-bench: %s: %s\n", what, sr->res[r].msg);
}

/*
 * Work the parent does between sizes while every rank waits: around(s, 0)
 * before size s, around(s, 1) after it, for the sizes wanted(s) names (the
 * raw TCP limit around a size, in the same minute as its numbers).
 */
struct size_gate {
	int (*wanted)(void *arg, int s);
	void (*around)(void *arg, int s, int after);
	void *arg;
};

/* Whether a rank's process has ended (not reaped: wait_ranks() does that). */
static int rank_ended(pid_t pid)
{
	siginfo_t si = { 0 };

	return waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid;
}

/*
 * Until every rank finished its first `nsizes` sizes: 0, or -1 once a rank
 * ended short of them (a rank ends after its last size).
 */
static int ranks_done(const struct shared_results *sr, int nsizes, const pid_t *pids, int n)
{
	for (int r = 0; r < n; r++)
		while (__atomic_load_n(&sr->done[r], __ATOMIC_ACQUIRE) < nsizes) {
			if (rank_ended(pids[r]) &&
			    __atomic_load_n(&sr->done[r], __ATOMIC_ACQUIRE) < nsizes)
				return -1;
			bench_sleep_ms(1);
		}
	return 0;
}

/*
 * Opens the sizes to the ranks one at a time (shared_results.gate), with
 * g's work before and after each size it wants while the ranks wait. A rank
 * that ended opens every size at once: the others finish without it.
 */
static void gate_sizes(const struct bench_cfg *cfg, struct shared_results *sr,
		       const struct size_gate *g, const pid_t *pids)
{
	const int n = cfg->nranks;

	for (int s = 0; s < cfg->nsizes; s++) {
		const int w = g->wanted(g->arg, s);

		if (w && ranks_done(sr, s, pids, n) < 0)
			break;
		if (w)
			g->around(g->arg, s, 0);
		__atomic_store_n(&sr->gate, s + 1, __ATOMIC_RELEASE);
		if (w && ranks_done(sr, s + 1, pids, n) < 0)
			break;
		if (w)
			g->around(g->arg, s, 1);
	}
	__atomic_store_n(&sr->gate, BENCH_MAX_SIZES, __ATOMIC_RELEASE);
}

static int run_ranks(const char *what, const struct bench_cfg *cfg, struct shared_results *sr,
		     const struct collc_unique_id *uid, const struct size_gate *g,
		     struct size_stats *out)
{
	pid_t pids[BENCH_MAX_RANKS];
	double *scratch;
	int r;

	if (g)
		sr->gate = 0;
	for (int rank = 0; rank < cfg->nranks; rank++) {
		pids[rank] = bench_fork();
		if (pids[rank] < 0) {
			fprintf(stderr, "collc-bench: fork: %s\n", strerror(errno));
			for (int k = 0; k < rank; k++)
				kill(pids[k], SIGKILL);
			wait_ranks(what, pids, rank);
			return -1;
		}
		if (pids[rank] == 0) {
			int st = uid ? collc_rank_main(cfg, uid, rank, sr)
				     : nccl_rank_main(cfg, rank, sr);

			fflush(NULL);
			_exit(st);
		}
	}
	if (g)
		gate_sizes(cfg, sr, g, pids);
	r = wait_ranks(what, pids, cfg->nranks);
	print_setup_errors(what, cfg, sr);
	scratch = malloc((size_t)cfg->iters * sizeof(double));
	if (!scratch)
		return -1;
	for (int s = 0; s < cfg->nsizes; s++)
		stats_of(cfg, sr, s, scratch, &out[s]);
	free(scratch);
	return r;
}

/* In a child: CUDA must not be initialized in the parent, which forks the GPU ranks. */
/* The highest GPU ordinal --gpus names. */
static int max_gpu(const struct bench_cfg *cfg)
{
	int m = 0;

	for (int r = 0; r < cfg->ngpus; r++)
		m = cfg->gpu[r] > m ? cfg->gpu[r] : m;
	return m;
}

static int probe_gpus(int nranks)
{
	struct {
		int n;
		char msg[256];
	} *pr = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t pid;
	int ok = -1, st;

	if (pr == MAP_FAILED)
		return -1;
	pr->n = -1;
	snprintf(pr->msg, sizeof(pr->msg), "the GPU probe died");
	pid = bench_fork();
	if (pid == 0) {
		pr->n = cuda_probe(pr->msg, sizeof(pr->msg));
		_exit(0);
	}
	if (pid > 0) {
		waitpid(pid, &st, 0);
		bench_child_del(pid);
		if (pr->n < 0)
			fprintf(stderr, "collc-bench: GPU path: %s\n", pr->msg);
		else if (pr->n < nranks)
			fprintf(stderr,
				"collc-bench: --nranks %d needs %d GPUs (one per rank); this "
				"process sees %d\n",
				nranks, nranks, pr->n);
		else
			ok = 0;
	}
	munmap(pr, 4096);
	return ok;
}

static int build_sizes(struct bench_cfg *cfg, uint64_t min, uint64_t max)
{
	cfg->nsizes = 0;
	for (uint64_t b = min; b <= max; b *= 2) {
		struct bench_size sz;

		if (bench_size_of(cfg->coll, cfg->dtype, cfg->nranks, b, &sz) == 0 &&
		    (cfg->nsizes == 0 || sz.bytes != cfg->sizes[cfg->nsizes - 1].bytes)) {
			if (cfg->nsizes == BENCH_MAX_SIZES) {
				fprintf(stderr, "collc-bench: more than %d sizes\n",
					BENCH_MAX_SIZES);
				return -1;
			}
			cfg->sizes[cfg->nsizes++] = sz;
			if (sz.send_elems > cfg->max_send_elems)
				cfg->max_send_elems = sz.send_elems;
			if (sz.recv_elems > cfg->max_recv_elems)
				cfg->max_recv_elems = sz.recv_elems;
		}
		if (b > UINT64_MAX / 2)
			break;
	}
	if (cfg->nsizes == 0) {
		fprintf(stderr, "collc-bench: no size in [%llu, %llu] holds one %s per rank\n",
			(unsigned long long)min, (unsigned long long)max,
			bench_dtype_names[cfg->dtype]);
		return -1;
	}
	return 0;
}

static int parse_int(const char *opt, const char *s, int min, int max, int *ret)
{
	long v;

	if (bench_parse_long("collc-bench", opt, s, min, max, &v) < 0)
		return -1;
	*ret = (int)v;
	return 0;
}

/* One of names[0..n) for opt; -1 after saying that s is none of them. */
static int parse_name(const char *opt, const char *s, const char *const *names, int n, int *ret)
{
	*ret = rc_name_index(names, n, s);
	if (*ret < 0) {
		fprintf(stderr, "collc-bench: unknown %s %s\n", opt, s);
		return -1;
	}
	return 0;
}

/* --nccl-modes: a comma-separated list of nccl_mode_names, or "all". */
static int parse_modes(const char *s, unsigned *ret)
{
	char *save = NULL, *list = strdup(s);
	unsigned mask = 0;
	int m;

	if (!list) {
		fprintf(stderr, "collc-bench: out of memory\n");
		return -1;
	}
	for (char *w = strtok_r(list, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
		if (strcmp(w, "all") == 0) {
			mask |= (1u << NCCL_NUM_MODES) - 1;
			continue;
		}
		if (parse_name("--nccl-modes", w, nccl_mode_names, NCCL_NUM_MODES, &m) < 0) {
			free(list);
			return -1;
		}
		mask |= 1u << m;
	}
	free(list);
	if (!mask) {
		fprintf(stderr, "collc-bench: --nccl-modes names no mode\n");
		return -1;
	}
	*ret = mask;
	return 0;
}

/* Other work on the machine is the first suspect for noisy numbers. */
static void print_load(FILE *f, const char *when)
{
	char buf[128] = "";
	FILE *la = fopen("/proc/loadavg", "re");

	if (la && fgets(buf, sizeof(buf), la)) {
		buf[strcspn(buf, "\n")] = 0;
		fprintf(f, "# load average %s: %s\n", when, buf);
	}
	if (la)
		fclose(la);
}

static void print_machine(FILE *f, int argc, char **argv)
{
	struct utsname u;
	char date[64];
	time_t t = time(NULL);

	uname(&u);
	strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S %Z", localtime(&t));
	fprintf(f, "# %s, %s %s %s, %ld CPUs online, %s\n", u.nodename, u.sysname, u.release,
		u.machine, sysconf(_SC_NPROCESSORS_ONLN), date);
	print_load(f, "at start");
	fprintf(f, "# command:");
	for (int i = 0; i < argc; i++)
		fprintf(f, " %s", argv[i]);
	fprintf(f, "\n");
}

/* Marks every collc row with the error that kept collc from running. */
static void collc_failed(struct report *rp, const char *fmt, const char *a, const char *b)
{
	for (int s = 0; s < rp->cfg->nsizes; s++) {
		rp->rows[s].c.status = RES_ERROR;
		snprintf(rp->rows[s].c.msg, sizeof(rp->rows[s].c.msg), fmt, a, b);
	}
}

/* The raw TCP limit around each size the report wants it for (a size_gate). */
struct tcp_around {
	struct report *rp;
	const char *sock_a, *sock_b;
	double seconds;
};

static int tcp_around_wanted(void *arg, int s)
{
	const struct tcp_around *t = arg;

	return report_row_tcp(t->rp, &t->rp->rows[s]);
}

static void tcp_around_run(void *arg, int s, int after)
{
	struct tcp_around *t = arg;
	struct report_row *row = &t->rp->rows[s];

	fprintf(stderr, "collc-bench: raw TCP %s %llu-byte collectives\n",
		after ? "after the" : "before the", (unsigned long long)row->sz->bytes);
	if (tcp_limit_measure(t->sock_a, t->sock_b, t->seconds, row->sz->bytes, &row->tcp[after]) <
	    0)
		fprintf(stderr, "collc-bench: raw TCP not measured: %s\n", row->tcp[after].err);
}

/* collc's side of the run: spawn collcd if asked, run the ranks, stop collcd. */
static int run_collc(struct bench_cfg *cfg, int spawn, const char *collcd, const char *backend,
		     char *const *extra, int nextra, const struct size_gate *g, struct report *rp)
{
	struct bench_daemon daemon = { 0 };
	struct size_stats st[BENCH_MAX_SIZES];
	struct shared_results *sr;
	struct collc_unique_id uid;
	struct collc_ctx *ctx;
	int r, status = 0;

	if (spawn) {
		if (daemon_spawn(collcd, backend, extra, nextra, &daemon) < 0) {
			collc_failed(rp, "collcd (%s --backend %s) did not start", collcd, backend);
			return -1;
		}
		cfg->socket = daemon.sock;
	}
	r = collc_connect(cfg->socket, &ctx);
	if (r == 0) {
		r = collc_get_unique_id(ctx, &uid);
		collc_disconnect(ctx);
	}
	if (r < 0) {
		fprintf(stderr, "collc-bench: collcd at %s: %s\n",
			cfg->socket ? cfg->socket : "the default socket", collc_strerror(r));
		collc_failed(rp, "collcd at %s: %s",
			     cfg->socket ? cfg->socket : "the default socket", collc_strerror(r));
		daemon_stop(&daemon);
		return -1;
	}
	sr = shared_results_new(cfg);
	if (!sr) {
		collc_failed(rp, "mmap: %s%s", strerror(errno), "");
		daemon_stop(&daemon);
		return -1;
	}
	fprintf(stderr, "collc-bench: collc ranks running (mode %s)\n",
		collc_mode_names[cfg->collc_mode]);
	if (run_ranks("collc", cfg, sr, &uid, g, st) < 0)
		status = -1;
	for (int s = 0; s < cfg->nsizes; s++)
		rp->rows[s].c = st[s];
	shared_results_free(sr);
	if (spawn && daemon_stop(&daemon) < 0)
		status = -1;
	return status;
}

enum {
	OPT_COLL = 256,
	OPT_NRANKS,
	OPT_MIN,
	OPT_MAX,
	OPT_DTYPE,
	OPT_ITERS,
	OPT_WARMUP,
	OPT_DEPTH,
	OPT_ROOT,
	OPT_VS_NCCL,
	OPT_VS_MPI,
	OPT_CSV,
	OPT_PLOT,
	OPT_FROM_CSV,
	OPT_TITLE,
	OPT_SOCKET,
	OPT_SPAWN,
	OPT_BACKEND,
	OPT_COLLCD,
	OPT_DAEMON_ARG,
	OPT_TIMEOUT,
	OPT_MPIRUN,
	OPT_MPI_PEER,
	OPT_MPIRUN_ARG,
	OPT_GPUS,
	OPT_NCCL_MODES,
	OPT_TCP_LIMIT,
	OPT_TCP_ROW,
	OPT_MPI_BTL,
	OPT_STREAM,
	OPT_GRAPH,
	OPT_HELP,
};

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "coll", required_argument, NULL, OPT_COLL },
		{ "nranks", required_argument, NULL, OPT_NRANKS },
		{ "min-bytes", required_argument, NULL, OPT_MIN },
		{ "max-bytes", required_argument, NULL, OPT_MAX },
		{ "dtype", required_argument, NULL, OPT_DTYPE },
		{ "iters", required_argument, NULL, OPT_ITERS },
		{ "warmup", required_argument, NULL, OPT_WARMUP },
		{ "depth", required_argument, NULL, OPT_DEPTH },
		{ "gpus", required_argument, NULL, OPT_GPUS },
		{ "root", required_argument, NULL, OPT_ROOT },
		{ "vs-nccl", no_argument, NULL, OPT_VS_NCCL },
		{ "vs-mpi", no_argument, NULL, OPT_VS_MPI },
		{ "nccl-modes", required_argument, NULL, OPT_NCCL_MODES },
		{ "csv", required_argument, NULL, OPT_CSV },
		{ "plot", required_argument, NULL, OPT_PLOT },
		{ "from-csv", required_argument, NULL, OPT_FROM_CSV },
		{ "title", required_argument, NULL, OPT_TITLE },
		{ "socket", required_argument, NULL, OPT_SOCKET },
		{ "spawn-daemon", no_argument, NULL, OPT_SPAWN },
		{ "backend", required_argument, NULL, OPT_BACKEND },
		{ "collcd", required_argument, NULL, OPT_COLLCD },
		{ "daemon-arg", required_argument, NULL, OPT_DAEMON_ARG },
		{ "timeout-ms", required_argument, NULL, OPT_TIMEOUT },
		{ "mpirun", required_argument, NULL, OPT_MPIRUN },
		{ "mpi-peer", required_argument, NULL, OPT_MPI_PEER },
		{ "mpirun-arg", required_argument, NULL, OPT_MPIRUN_ARG },
		{ "tcp-limit-s", required_argument, NULL, OPT_TCP_LIMIT },
		{ "tcp-row-bytes", required_argument, NULL, OPT_TCP_ROW },
		{ "mpi-btl", required_argument, NULL, OPT_MPI_BTL },
		{ "stream", no_argument, NULL, OPT_STREAM },
		{ "graph", no_argument, NULL, OPT_GRAPH },
		{ "help", no_argument, NULL, OPT_HELP },
		{ 0 },
	};
	static struct bench_cfg cfg = {
		.coll = BENCH_ALLREDUCE,
		.dtype = COLLC_FLOAT32,
		.iters = 100,
		.warmup = 5,
		.depth = 4,
		.timeout_ms = 60000,
		.peer = PEER_NONE,
		.nccl_modes = NCCL_MODES_DEFAULT,
	};
	static struct report rp;
	uint64_t min_bytes = 8, max_bytes = 64ull << 20;
	const char *csv = NULL, *plot = NULL, *from_csv = NULL, *title = NULL;
	const char *collcd = COLLC_BENCH_COLLCD, *backend = "cpu";
	char *daemon_extra[BENCH_MAX_EXTRA], *mpirun_extra[BENCH_MAX_EXTRA];
	int ndaemon_extra = 0, nmpirun_extra = 0, spawn = 0, c, ok, status = 0, nccl_modes_set = 0;
	struct mpi_opts mo = { .mpirun = COLLC_BENCH_MPIRUN, .peer = COLLC_BENCH_MPI_PEER };
	static struct tcp_limit tcp, tcp_after;
	double tcp_s = 1.0;
	uint64_t tcp_row = 16ull << 20; /* sizes with raw TCP measured around them; 0: none */
	struct shared_results *sr;
	char csv_tmp[64] = "", title_buf[256];

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_COLL:
			if (parse_name("--coll", optarg, bench_coll_names, BENCH_NUM_COLLS,
				       &cfg.coll) < 0)
				return 2;
			break;
		case OPT_NRANKS:
			if (parse_int("--nranks", optarg, 1, BENCH_MAX_RANKS, &cfg.nranks) < 0)
				return 2;
			break;
		case OPT_MIN:
		case OPT_MAX: {
			uint64_t v = bench_parse_bytes(optarg, &ok);

			if (!ok || v == 0) {
				fprintf(stderr, "collc-bench: bad size %s\n", optarg);
				return 2;
			}
			*(c == OPT_MIN ? &min_bytes : &max_bytes) = v;
			break;
		}
		case OPT_DTYPE:
			if (parse_name("--dtype", optarg, bench_dtype_names, COLLC_NUM_DTYPES,
				       &cfg.dtype) < 0)
				return 2;
			break;
		case OPT_ITERS:
			if (parse_int("--iters", optarg, 1, 10000000, &cfg.iters) < 0)
				return 2;
			break;
		case OPT_WARMUP:
			if (parse_int("--warmup", optarg, 0, 10000000, &cfg.warmup) < 0)
				return 2;
			break;
		case OPT_DEPTH:
			if (parse_int("--depth", optarg, 1, 1024, &cfg.depth) < 0)
				return 2;
			break;
		case OPT_GPUS: {
			char *save = NULL, *list = strdup(optarg);

			cfg.ngpus = 0;
			for (char *w = strtok_r(list, ",", &save); w;
			     w = strtok_r(NULL, ",", &save)) {
				if (cfg.ngpus == BENCH_MAX_RANKS ||
				    parse_int("--gpus", w, 0, 1023, &cfg.gpu[cfg.ngpus]) < 0) {
					free(list);
					return 2;
				}
				cfg.ngpus++;
			}
			free(list);
			break;
		}
		case OPT_ROOT:
			if (parse_int("--root", optarg, 0, BENCH_MAX_RANKS - 1, &cfg.root) < 0)
				return 2;
			break;
		case OPT_VS_NCCL:
		case OPT_VS_MPI:
			if (cfg.peer != PEER_NONE) {
				fprintf(stderr,
					"collc-bench: one of --vs-nccl and --vs-mpi per run\n");
				return 2;
			}
			cfg.peer = c == OPT_VS_NCCL ? PEER_NCCL : PEER_MPI;
			break;
		case OPT_NCCL_MODES:
			if (parse_modes(optarg, &cfg.nccl_modes) < 0)
				return 2;
			nccl_modes_set = 1;
			break;
		case OPT_CSV:
			csv = optarg;
			break;
		case OPT_PLOT:
			plot = optarg;
			break;
		case OPT_FROM_CSV:
			from_csv = optarg;
			break;
		case OPT_TITLE:
			title = optarg;
			break;
		case OPT_SOCKET: {
			/* A copy: the command line is printed as given. Lives until exit. */
			char *save = NULL, *list = strdup(optarg);

			if (!list) {
				fprintf(stderr, "collc-bench: out of memory\n");
				return 2;
			}
			cfg.nsockets = 0;
			for (char *w = strtok_r(list, ",", &save); w;
			     w = strtok_r(NULL, ",", &save)) {
				if (cfg.nsockets == BENCH_MAX_SOCKETS) {
					fprintf(stderr, "collc-bench: more than %d sockets\n",
						BENCH_MAX_SOCKETS);
					return 2;
				}
				cfg.sockets[cfg.nsockets++] = w;
			}
			if (!cfg.nsockets) {
				fprintf(stderr, "collc-bench: --socket needs a path\n");
				return 2;
			}
			cfg.socket = cfg.sockets[0];
			break;
		}
		case OPT_TCP_LIMIT: {
			char *end;

			tcp_s = strtod(optarg, &end);
			if (end == optarg || *end || !(tcp_s >= 0 && tcp_s <= 60)) {
				fprintf(stderr,
					"collc-bench: --tcp-limit-s takes 0 to 60 seconds\n");
				return 2;
			}
			break;
		}
		case OPT_TCP_ROW: {
			uint64_t v = bench_parse_bytes(optarg, &ok);

			if (!ok || (v && v < (1u << 20))) {
				fprintf(stderr,
					"collc-bench: --tcp-row-bytes takes 0, or 1M and more\n");
				return 2;
			}
			tcp_row = v;
			break;
		}
		case OPT_MPI_BTL:
			if (strcmp(optarg, "sm") && strcmp(optarg, "tcp")) {
				fprintf(stderr, "collc-bench: --mpi-btl must be sm or tcp\n");
				return 2;
			}
			mo.btl = strcmp(optarg, "tcp") == 0 ? "tcp,self" : "self,vader";
			break;
		case OPT_STREAM:
		case OPT_GRAPH:
			if (cfg.collc_mode != CMODE_HOST) {
				fprintf(stderr,
					"collc-bench: one of --stream and --graph per run\n");
				return 2;
			}
			cfg.collc_mode = c == OPT_STREAM ? CMODE_STREAM : CMODE_GRAPH;
			break;
		case OPT_SPAWN:
			spawn = 1;
			break;
		case OPT_BACKEND:
			if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda")) {
				fprintf(stderr, "collc-bench: --backend must be cpu or cuda\n");
				return 2;
			}
			backend = optarg;
			break;
		case OPT_COLLCD:
			collcd = optarg;
			break;
		case OPT_DAEMON_ARG:
		case OPT_MPIRUN_ARG:
			if ((c == OPT_DAEMON_ARG ? ndaemon_extra : nmpirun_extra) ==
			    BENCH_MAX_EXTRA) {
				fprintf(stderr, "collc-bench: too many extra arguments\n");
				return 2;
			}
			if (c == OPT_DAEMON_ARG)
				daemon_extra[ndaemon_extra++] = optarg;
			else
				mpirun_extra[nmpirun_extra++] = optarg;
			break;
		case OPT_TIMEOUT:
			if (parse_int("--timeout-ms", optarg, 1, 86400000, &cfg.timeout_ms) < 0)
				return 2;
			break;
		case OPT_MPIRUN:
			mo.mpirun = optarg;
			break;
		case OPT_MPI_PEER:
			mo.peer = optarg;
			break;
		case 'h':
		case OPT_HELP:
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "collc-bench: unexpected argument %s\n", argv[optind]);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if (from_csv) {
		if (!plot) {
			fprintf(stderr, "collc-bench: --from-csv needs --plot\n");
			return 2;
		}
		return report_plot(from_csv, plot, title ? title : from_csv) < 0;
	}
	if (cfg.nranks < 1) {
		fprintf(stderr, "collc-bench: --nranks is required\n");
		usage(stderr);
		return 2;
	}
	if (min_bytes > max_bytes) {
		fprintf(stderr, "collc-bench: --min-bytes is above --max-bytes\n");
		return 2;
	}
	if (cfg.root >= cfg.nranks) {
		fprintf(stderr, "collc-bench: --root must be below --nranks\n");
		return 2;
	}
	if (spawn && cfg.socket) {
		fprintf(stderr, "collc-bench: --socket and --spawn-daemon exclude each other\n");
		return 2;
	}
	cfg.cuda = strcmp(backend, "cuda") == 0;
	if (cfg.ngpus && (!cfg.cuda || cfg.ngpus != cfg.nranks || cfg.peer == PEER_NCCL)) {
		fprintf(stderr,
			"collc-bench: --gpus needs --backend cuda, one GPU per rank (%d), and no "
			"--vs-nccl\n",
			cfg.nranks);
		return 2;
	}
	if (nccl_modes_set && cfg.peer != PEER_NCCL) {
		fprintf(stderr, "collc-bench: --nccl-modes needs --vs-nccl\n");
		return 2;
	}
	if (cfg.peer == PEER_NCCL && !cfg.cuda) {
		fprintf(stderr, "collc-bench: --vs-nccl compares on GPUs: add --backend cuda\n");
		return 2;
	}
	if (cfg.collc_mode != CMODE_HOST && !cfg.cuda) {
		fprintf(stderr,
			"collc-bench: --%s runs collc's stream-ordered forms, which host "
			"communicators lack: add --backend cuda\n",
			collc_mode_names[cfg.collc_mode]);
		return 2;
	}
	if (cfg.collc_mode == CMODE_GRAPH && cfg.coll == BENCH_SENDRECV) {
		fprintf(stderr, "collc-bench: --graph: collc captures no send or receive; "
				"--coll sendrecv runs with --stream\n");
		return 2;
	}
	/* NCCL in the modes that measure as collc's does, unless told. */
	if (cfg.peer == PEER_NCCL && !nccl_modes_set && cfg.collc_mode != CMODE_HOST)
		cfg.nccl_modes =
			1u << (cfg.collc_mode == CMODE_STREAM ? NCCL_MODE_PLAIN : NCCL_MODE_GRAPH);
	if (cfg.peer == PEER_MPI && cfg.cuda) {
		fprintf(stderr,
			"collc-bench: --vs-mpi compares on host memory: use --backend cpu\n");
		return 2;
	}
	if (cfg.peer == PEER_MPI && (!mo.peer || access(mo.peer, X_OK) < 0)) {
		fprintf(stderr,
			"collc-bench: --vs-mpi needs collc-mpi-peer (%s): build with MPI found by "
			"CMake (Debian: openmpi-bin libopenmpi-dev) or pass --mpi-peer PATH\n",
			mo.peer ? mo.peer : "not built");
		return 2;
	}
	if (build_sizes(&cfg, min_bytes, max_bytes) < 0)
		return 2;
	if (cfg.collc_mode == CMODE_GRAPH) {
		/* Graph gates go back only with the communicator: a size's graphs keep theirs. */
		long depth = cfg.depth < cfg.iters ? cfg.depth : cfg.iters,
		     need = (long)cfg.nsizes * (1 + depth);

		if (need > (long)(COLLC_GATES / 2)) {
			fprintf(stderr,
				"collc-bench: --graph captures 1 + %ld collectives for each of %d "
				"sizes (%ld); collc holds at most %u captured collectives per "
				"connection: fewer sizes or a lower --depth\n",
				depth, cfg.nsizes, need, COLLC_GATES / 2);
			return 2;
		}
	}
	/* Across daemons MPI goes over TCP as well, unless told otherwise. */
	if (!mo.btl)
		mo.btl = cfg.nsockets > 1 ? "tcp,self" : "self,vader";
	mo.extra = mpirun_extra;
	mo.nextra = nmpirun_extra;

	bench_catch_signals();
	if (cfg.peer == PEER_NCCL)
		setenv("NCCL_NVLS_ENABLE", "0", 0);
	print_machine(stdout, argc, argv);
	fflush(stdout);
	if (cfg.cuda && probe_gpus(cfg.ngpus ? max_gpu(&cfg) + 1 : cfg.nranks) < 0)
		return 1;

	rp.cfg = &cfg;
	rp.backend = backend;
	rp.peer_name = cfg.peer == PEER_NCCL ? "NCCL" : cfg.peer == PEER_MPI ? "MPI" : NULL;
	for (int s = 0; s < cfg.nsizes; s++)
		rp.rows[s].sz = &cfg.sizes[s];

	/* The peer first, while no collcd of ours runs on the same CPUs or GPUs. */
	if (cfg.peer == PEER_MPI) {
		struct size_stats st[BENCH_MAX_SIZES] = { 0 };

		if (mpi_peer_run(&cfg, &mo, st) < 0)
			status = 1;
		for (int s = 0; s < cfg.nsizes; s++)
			rp.rows[s].p = st[s];
	} else if (cfg.peer == PEER_NCCL) {
		/* Each mode in ranks of its own: a fresh communicator, nothing left of the last. */
		for (int m = 0; m < NCCL_NUM_MODES; m++) {
			struct size_stats st[BENCH_MAX_SIZES];
			char what[32];

			if (!(cfg.nccl_modes >> m & 1))
				continue;
			cfg.nccl_mode = m;
			sr = shared_results_new(&cfg);
			if (!sr) {
				fprintf(stderr, "collc-bench: mmap: %s\n", strerror(errno));
				return 1;
			}
			snprintf(what, sizeof(what), "NCCL %s", nccl_mode_names[m]);
			fprintf(stderr, "collc-bench: %s ranks running\n", what);
			if (run_ranks(what, &cfg, sr, NULL, NULL, st) < 0)
				status = 1;
			for (int s = 0; s < cfg.nsizes; s++)
				rp.rows[s].pm[m] = st[s];
			shared_results_free(sr);
		}
		rp.modes = cfg.nccl_modes;
	}

	/* The limit of an inter-node run, measured while no collective runs. */
	if (cfg.nsockets > 1 && tcp_s > 0) {
		fprintf(stderr, "collc-bench: raw TCP between %s's and %s's daemons\n",
			cfg.sockets[0], cfg.sockets[1]);
		if (tcp_limit_measure(cfg.sockets[0], cfg.sockets[1], tcp_s, 0, &tcp) < 0)
			fprintf(stderr, "collc-bench: raw TCP not measured: %s\n", tcp.err);
		rp.tcp = &tcp;
		rp.tcp_row_bytes = tcp.ok ? tcp_row : 0;
	}
	{
		/* And around each large size, while the ranks wait: the same minute as its numbers. */
		struct tcp_around ta = { &rp, cfg.sockets[0], cfg.sockets[1], tcp_s };
		const struct size_gate g = { tcp_around_wanted, tcp_around_run, &ta };

		if (run_collc(&cfg, spawn, collcd, backend, daemon_extra, ndaemon_extra,
			      rp.tcp_row_bytes ? &g : NULL, &rp) < 0)
			status = 1;
	}
	/* Again once the collc ranks are gone: the limit is the better of the two. */
	if (rp.tcp && tcp.ok) {
		fprintf(stderr, "collc-bench: raw TCP again, after the collc ranks\n");
		if (tcp_limit_measure(cfg.sockets[0], cfg.sockets[1], tcp_s, 0, &tcp_after) < 0)
			fprintf(stderr, "collc-bench: raw TCP not measured again: %s\n",
				tcp_after.err);
		rp.tcp_after = &tcp_after;
	}

	report_pick_best(&rp);
	if (report_failed(&rp))
		status = 1;
	print_load(stdout, "at the end");
	report_table(stdout, &rp);
	if (plot && !csv) {
		int fd;

		snprintf(csv_tmp, sizeof(csv_tmp), "/tmp/collc-bench-XXXXXX.csv");
		fd = mkstemps(csv_tmp, 4);
		if (fd < 0) {
			fprintf(stderr, "collc-bench: mkstemps: %s\n", strerror(errno));
			return 1;
		}
		close(fd);
		csv = csv_tmp;
	}
	if (csv && report_csv(csv, &rp) < 0)
		status = 1;
	if (plot) {
		if (!title) {
			snprintf(title_buf, sizeof(title_buf),
				 "collc %s, %d ranks, %s, %s backend%s%s%s",
				 bench_coll_names[cfg.coll], cfg.nranks,
				 bench_dtype_names[cfg.dtype], backend,
				 cfg.collc_mode == CMODE_STREAM  ? ", stream-ordered"
				 : cfg.collc_mode == CMODE_GRAPH ? ", CUDA graphs"
								 : "",
				 rp.peer_name ? " vs " : "", rp.peer_name ? rp.peer_name : "");
			title = title_buf;
		}
		/* A missing plotter costs the picture, not the numbers: no change of status. */
		if (report_plot(csv, plot, title) == 0)
			fprintf(stderr, "collc-bench: plot in %s\n", plot);
	}
	if (csv_tmp[0])
		unlink(csv_tmp);
	if (status)
		fprintf(stderr, "collc-bench: FAILED (see the messages above and the table)\n");
	return status;
}
