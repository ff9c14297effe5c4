/* SPDX-License-Identifier: MIT */
/*
 * collc-interfere: what a resident collcd grid costs a client's compute
 * kernels (issue 5: at most 5% under MPS). As a client process on one GPU it
 * times a compute-bound kernel (interfere_kernel.cu: FMA chains, every SM
 * filled `waves` times over) with CUDA events, one launch at a time, and
 * reports the median and the minimum over K launches, and how many SMs the
 * kernel's blocks actually ran on. One condition per run; the driver
 * (bench/run-interfere.sh) runs them in turn: no collcd (baseline), collcd
 * idle, collcd busy. For "busy" this program forks a pair of client
 * processes (--busy-bytes) that run all-reduces back to back through collcd
 * for the whole measurement, and reports their rate during it.
 *
 * The kernel's output is checked: sample elements of the first and the last
 * timed launch against the host's own computation (bit for bit), and every
 * element for range, so no compiler can drop the work. The parent touches
 * CUDA only after the load processes are forked.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <collc.h>

#include "bench/sizes.h"
#include "bench/interfere_kernel.h"
#include "common/atomics.h"

#define MAX_LOAD_RANKS 8
#define LOAD_ROUND_OPS 32 /* ranks agree to stop only between rounds */
#define LOAD_READY_S   120.0
#define LOAD_STOP_S    60.0
#define NSAMPLES       8
#define EXIT_SKIP      77

struct opts {
	int device;
	int launches;
	int warmup;
	int waves;
	uint32_t fma_iters;
	double calibrate_ms;
	const char *label;
	const char *csv;
	int grid_blocks;     /* the resident grid's blocks, from collcd's log; -1 unknown */
	uint64_t busy_bytes; /* 0: no load */
	int busy_gpus[MAX_LOAD_RANKS];
	int nbusy;
	int busy_depth;
	const char *socket;
	int timeout_ms;
};

/*
 * Shared between the parent and the load ranks (MAP_SHARED, made before the
 * fork). The ranks of an all-reduce are never more than one round apart, so
 * a stop proposed at round boundary k for boundary k + 1 is seen by every
 * rank before it passes k + 1.
 */
struct load_shared {
	uint32_t stop;                  /* written by the parent: stop soon */
	uint32_t stop_round;            /* CAS by the first rank that sees stop; UINT32_MAX: none */
	uint32_t ready[MAX_LOAD_RANKS]; /* written by rank r after its first round */
	uint64_t done[MAX_LOAD_RANKS];  /* written by rank r: all-reduces completed */
	int32_t failed[MAX_LOAD_RANKS]; /* written by rank r, msg[r] first */
	char msg[MAX_LOAD_RANKS][200];
};

static pid_t load_pids[MAX_LOAD_RANKS];
static int nload_pids;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static void on_signal(int sig)
{
	for (int i = 0; i < nload_pids; i++)
		if (load_pids[i] > 0)
			kill(load_pids[i], SIGTERM);
	signal(sig, SIG_DFL);
	raise(sig);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: collc-interfere [--device D] [--launches K] [--warmup W] [--waves N]\n"
		"                       [--fma-iters N | --calibrate MS] [--label TEXT] [--csv FILE]\n"
		"                       [--grid-blocks N] [--busy-bytes B [--busy-gpus G,G] [--busy-depth Q]\n"
		"                        [--socket PATH] [--timeout-ms MS]]\n"
		"\n"
		"Times a compute-bound kernel (%u FMA chains per thread, %u threads per block, every SM\n"
		"filled N times over) on GPU D as a client process: W untimed launches, then K launches\n"
		"timed one by one with CUDA events; prints the median and the minimum, and the SMs the\n"
		"kernel's blocks ran on (fewer than the GPU has: something else holds the rest).\n"
		"The output of the first and last timed launch is checked against the host.\n"
		"\n"
		"  --device D       the GPU (default 0)\n"
		"  --launches K     timed launches (default 50)\n"
		"  --warmup W       untimed launches first (default 5)\n"
		"  --waves N        blocks = SMs x resident blocks per SM x N (default 32: fine enough\n"
		"                   that whole waves move a loss by at most 3%%)\n"
		"  --fma-iters N    steps of each chain (default 65536); give every condition the same N\n"
		"  --calibrate MS   only print \"fma_iters N\": the N for one launch of about MS here, now\n"
		"  --label TEXT     the condition, for the output and the CSV (default run)\n"
		"  --csv FILE       append one row (header first when FILE is new)\n"
		"  --grid-blocks N  blocks of collcd's resident grid on D (its log says): adds the loss\n"
		"                   predicted if each of them holds one SM alone\n"
		"  --busy-bytes B   fork one client per --busy-gpus entry that run float32 sum all-reduces\n"
		"                   of B bytes back to back through collcd (K/M/G suffixes) for the whole\n"
		"                   measurement; their rate during it is reported\n"
		"  --busy-gpus LIST GPUs of the load ranks (default 0,1; 0,0 on a single GPU)\n"
		"  --busy-depth Q   all-reduces each load rank keeps outstanding (default 2)\n"
		"  --socket PATH    collcd's socket (default $COLLC_SOCKET, /run/collcd/collcd.sock)\n"
		"  --timeout-ms MS  a load all-reduce pending for MS is an error (default 30000)\n"
		"\n"
		"Exit status: 0 measured and checked; 1 an error or a wrong result; 2 usage; 77 no GPU.\n",
		IF_CHAINS, IF_THREADS);
}

/* The load */

static void __attribute__((format(printf, 3, 4)))
load_fail(struct load_shared *ls, int rank, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(ls->msg[rank], sizeof(ls->msg[rank]), fmt, ap);
	va_end(ap);
	store_release(&ls->failed[rank], 1);
}

static int load_wait(const struct opts *o, struct collc_ctx *ctx, collc_req req,
		     struct load_shared *ls, int rank, uint64_t *done)
{
	int r = collc_wait(ctx, req, o->timeout_ms);

	if (r < 0) {
		load_fail(ls, rank, "load rank %d: all-reduce %llu: %s", rank,
			  (unsigned long long)*done,
			  r == -EAGAIN ? "timed out" : collc_strerror(r));
		return r;
	}
	/* R1: pairs with the parent's acquire loads of done[] */
	store_release(&ls->done[rank], ++*done);
	return 0;
}

/* One load rank (a child): rounds of LOAD_ROUND_OPS all-reduces until a boundary says stop. */
static int load_rank(const struct opts *o, const struct collc_unique_id *uid, int rank,
		     struct load_shared *ls)
{
	int gpu = o->busy_gpus[rank], depth = o->busy_depth, r, status = 1;
	size_t count = o->busy_bytes / sizeof(float);
	struct collc_ctx *ctx = NULL;
	struct collc_comm *comm = NULL;
	void *send = NULL, *recv[LOAD_ROUND_OPS] = { 0 };
	collc_req reqs[LOAD_ROUND_OPS];
	uint64_t done = 0;
	cudaError_t e;

	/* The client's CUDA context on its GPU, before collc maps device memory into it. */
	e = cudaSetDevice(gpu);
	if (e == cudaSuccess)
		e = cudaFree(NULL);
	if (e != cudaSuccess) {
		load_fail(ls, rank, "load rank %d: cudaSetDevice(%d): %s", rank, gpu,
			  cudaGetErrorString(e));
		return 1;
	}
	r = collc_connect(o->socket, &ctx);
	if (r < 0) {
		load_fail(ls, rank, "load rank %d: collc_connect: %s", rank, collc_strerror(r));
		return 1;
	}
	r = collc_comm_init(ctx, uid, o->nbusy, rank, gpu, &comm);
	if (r < 0) {
		load_fail(ls, rank, "load rank %d: collc_comm_init(gpu %d): %s", rank, gpu,
			  collc_strerror(r));
		goto out_disconnect;
	}
	r = collc_mem_alloc(ctx, count * sizeof(float), gpu, &send);
	for (int q = 0; r == 0 && q < depth; q++)
		r = collc_mem_alloc(ctx, count * sizeof(float), gpu, &recv[q]);
	if (r < 0) {
		load_fail(ls, rank, "load rank %d: collc_mem_alloc(%zu bytes, gpu %d): %s", rank,
			  count * sizeof(float), gpu, collc_strerror(r));
		goto out_free;
	}
	e = cudaMemset(send, 0, count * sizeof(float));
	if (e == cudaSuccess)
		e = cudaDeviceSynchronize();
	if (e != cudaSuccess) {
		load_fail(ls, rank, "load rank %d: cudaMemset: %s", rank, cudaGetErrorString(e));
		goto out_free;
	}
	for (uint32_t k = 0;; k++) {
		uint32_t none = UINT32_MAX;

		/* A1: pairs with the CAS below in whichever rank proposes */
		if (k >= load_acquire(&ls->stop_round))
			break;
		if (load_acquire(&ls->stop)) {
			__atomic_compare_exchange_n(&ls->stop_round, &none, k + 1, 0,
						    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
			if (k >= load_acquire(&ls->stop_round))
				break;
		}
		/* A window of `depth`; drained at the end of the round. */
		for (int j = 0; j < LOAD_ROUND_OPS + depth; j++) {
			int q = j % depth;

			if (j >= depth && load_wait(o, ctx, reqs[q], ls, rank, &done) < 0)
				goto out_free;
			if (j < LOAD_ROUND_OPS) {
				r = collc_allreduce(comm, send, recv[q], count, COLLC_FLOAT32,
						    COLLC_SUM, &reqs[q]);
				if (r < 0) {
					load_fail(ls, rank, "load rank %d: collc_allreduce: %s",
						  rank, collc_strerror(r));
					goto out_free;
				}
			}
		}
		if (k == 0)
			store_release(&ls->ready[rank], 1u);
	}
	status = 0;
out_free:
	for (int q = 0; q < depth; q++)
		if (recv[q])
			collc_mem_free(ctx, recv[q]);
	if (send)
		collc_mem_free(ctx, send);
	if (comm)
		collc_comm_destroy(comm);
out_disconnect:
	collc_disconnect(ctx);
	return status;
}

static int load_reap(struct load_shared *ls, double timeout_s)
{
	double t0 = now_s();
	int left = 0, bad = 0;

	for (int i = 0; i < nload_pids; i++)
		left += load_pids[i] > 0;

	while (left) {
		for (int i = 0; i < nload_pids; i++) {
			int st;

			if (load_pids[i] <= 0 ||
			    waitpid(load_pids[i], &st, WNOHANG) != load_pids[i])
				continue;
			load_pids[i] = 0;
			left--;
			if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
				bad = 1;
				if (WIFSIGNALED(st))
					fprintf(stderr,
						"collc-interfere: load rank %d killed by signal %d\n",
						i, WTERMSIG(st));
			}
		}
		if (left && now_s() - t0 > timeout_s) {
			fprintf(stderr,
				"collc-interfere: load ranks did not stop within %.0f s: killing them\n",
				timeout_s);
			for (int i = 0; i < nload_pids; i++)
				if (load_pids[i] > 0)
					kill(load_pids[i], SIGKILL);
			timeout_s = 1e9;
			bad = 1;
		}
		if (left)
			sleep_ms(5);
	}
	for (int i = 0; i < nload_pids; i++)
		if (ls->failed[i]) {
			fprintf(stderr, "collc-interfere: %s\n", ls->msg[i]);
			ls->failed[i] = 0; /* said once */
			bad = 1;
		}
	nload_pids = 0;
	return bad ? -1 : 0;
}

/* Forks the load ranks and waits until each finished its first round. */
static int load_start(const struct opts *o, struct load_shared *ls)
{
	struct collc_unique_id uid;
	struct collc_ctx *ctx;
	double t0;
	int r;

	r = collc_connect(o->socket, &ctx);
	if (r == 0) {
		r = collc_get_unique_id(ctx, &uid);
		collc_disconnect(ctx);
	}
	if (r < 0) {
		fprintf(stderr, "collc-interfere: collcd at %s: %s\n",
			o->socket ? o->socket : "the default socket", collc_strerror(r));
		return -1;
	}
	ls->stop_round = UINT32_MAX;
	fflush(NULL);
	for (int i = 0; i < o->nbusy; i++) {
		pid_t pid = fork();

		if (pid < 0) {
			fprintf(stderr, "collc-interfere: fork: %s\n", strerror(errno));
			return -1;
		}
		if (pid == 0) {
			signal(SIGINT, SIG_DFL);
			signal(SIGTERM, SIG_DFL);
			_exit(load_rank(o, &uid, i, ls));
		}
		load_pids[nload_pids++] = pid;
	}
	t0 = now_s();
	for (;;) {
		int ready = 0;

		for (int i = 0; i < o->nbusy; i++) {
			if (load_acquire(&ls->failed[i]))
				return -1;
			ready += (int)load_acquire(&ls->ready[i]);
		}
		if (ready == o->nbusy)
			return 0;
		if (now_s() - t0 > LOAD_READY_S) {
			fprintf(stderr,
				"collc-interfere: the load ranks did not finish a round in %.0f s\n",
				LOAD_READY_S);
			return -1;
		}
		sleep_ms(2);
	}
}

/* The kernel */

/* The process ends after any CUDA error: what was set up goes with it. */
static int ck(int e, const char *what)
{
	if (e == cudaSuccess)
		return 0;
	fprintf(stderr, "collc-interfere: %s: %s\n", what, cudaGetErrorString((cudaError_t)e));
	return -1;
}

struct kernel {
	int sms, bps;
	uint32_t blocks;
	size_t nthreads;
	float *out_d;
	uint32_t *smid_d;
	float *out_h;
	uint32_t *smid_h;
	cudaStream_t stream;
	cudaEvent_t ev0, ev1;
	char name[256];
};

static int kernel_setup(const struct opts *o, struct kernel *k)
{
	struct cudaDeviceProp prop;

	if (ck(cudaSetDevice(o->device), "cudaSetDevice") < 0)
		return -1;
	if (ck(cudaGetDeviceProperties(&prop, o->device), "cudaGetDeviceProperties") < 0)
		return -1;
	snprintf(k->name, sizeof(k->name), "%s", prop.name);
	k->sms = prop.multiProcessorCount;
	if (ck(if_blocks_per_sm(&k->bps), "cudaOccupancyMaxActiveBlocksPerMultiprocessor") < 0)
		return -1;
	if (k->bps < 1)
		k->bps = 1;
	k->blocks = (uint32_t)k->sms * (uint32_t)k->bps * (uint32_t)o->waves;
	k->nthreads = (size_t)k->blocks * IF_THREADS;
	if (ck(cudaMalloc((void **)&k->out_d, k->nthreads * sizeof(float)), "cudaMalloc") < 0)
		return -1;
	if (ck(cudaMalloc((void **)&k->smid_d, k->blocks * sizeof(uint32_t)), "cudaMalloc") < 0)
		return -1;
	if (ck(cudaMallocHost((void **)&k->out_h, k->nthreads * sizeof(float)), "cudaMallocHost") <
	    0)
		return -1;
	if (ck(cudaMallocHost((void **)&k->smid_h, k->blocks * sizeof(uint32_t)),
	       "cudaMallocHost") < 0)
		return -1;
	if (ck(cudaStreamCreateWithFlags(&k->stream, cudaStreamNonBlocking), "cudaStreamCreate") <
	    0)
		return -1;
	if (ck(cudaEventCreate(&k->ev0), "cudaEventCreate") < 0)
		return -1;
	if (ck(cudaEventCreate(&k->ev1), "cudaEventCreate") < 0)
		return -1;
	return 0;
}

/* One launch, timed with events; ret_sms: the distinct SMs its blocks ran on. */
static int kernel_run(struct kernel *k, uint32_t iters, uint32_t seed, double *ret_ms, int *ret_sms)
{
	static unsigned char seen[4096];
	float ms;
	int n = 0;

	if (ck(cudaEventRecord(k->ev0, k->stream), "cudaEventRecord") < 0)
		return -1;
	if (ck(if_launch(k->out_d, k->smid_d, k->blocks, iters, seed, k->stream), "kernel launch") <
	    0)
		return -1;
	if (ck(cudaEventRecord(k->ev1, k->stream), "cudaEventRecord") < 0)
		return -1;
	if (ck(cudaEventSynchronize(k->ev1), "cudaEventSynchronize") < 0)
		return -1;
	if (ck(cudaEventElapsedTime(&ms, k->ev0, k->ev1), "cudaEventElapsedTime") < 0)
		return -1;
	if (ck(cudaMemcpyAsync(k->smid_h, k->smid_d, k->blocks * sizeof(uint32_t),
			       cudaMemcpyDeviceToHost, k->stream),
	       "cudaMemcpyAsync") < 0)
		return -1;
	if (ck(cudaStreamSynchronize(k->stream), "cudaStreamSynchronize") < 0)
		return -1;
	memset(seen, 0, sizeof(seen));
	for (uint32_t b = 0; b < k->blocks; b++) {
		uint32_t id = k->smid_h[b] % sizeof(seen);

		n += !seen[id];
		seen[id] = 1;
	}
	*ret_ms = ms;
	if (ret_sms)
		*ret_sms = n;
	return 0;
}

static float host_ref(uint32_t seed, uint32_t tid, uint32_t iters)
{
	float a[IF_CHAINS], s;

	for (uint32_t j = 0; j < IF_CHAINS; j++)
		a[j] = if_start(seed, tid, j);
	for (uint32_t i = 0; i < iters; i++)
		for (uint32_t j = 0; j < IF_CHAINS; j++)
			a[j] = fmaf(a[j], IF_MUL, if_add(j));
	s = a[0];
	for (uint32_t j = 1; j < IF_CHAINS; j++)
		s += a[j];
	return s;
}

static uint32_t sample_tid(const struct kernel *k, int i)
{
	if (i == 0)
		return 0;
	if (i == NSAMPLES - 1)
		return (uint32_t)(k->nthreads - 1);
	return (uint32_t)(rc_mix(0x51ed27u + (uint64_t)i) % k->nthreads);
}

struct sample {
	uint32_t seed, tid;
	float got;
};

/* Copies the last launch's output, checks every element's range, keeps the samples. */
static int kernel_grab(struct kernel *k, uint32_t seed, struct sample *s)
{
	const float hi =
		(float)(IF_CHAINS * (IF_CHAINS + 1) / 2); /* every chain stays in [0, j + 1] */

	if (ck(cudaMemcpy(k->out_h, k->out_d, k->nthreads * sizeof(float), cudaMemcpyDeviceToHost),
	       "cudaMemcpy") < 0)
		return -1;
	for (size_t i = 0; i < k->nthreads; i++)
		if (!(k->out_h[i] > 0.0f && k->out_h[i] <= hi)) {
			fprintf(stderr,
				"collc-interfere: WRONG: element %zu is %.9g, outside (0, %g]\n", i,
				(double)k->out_h[i], (double)hi);
			return -1;
		}
	for (int i = 0; i < NSAMPLES; i++) {
		s[i].seed = seed;
		s[i].tid = sample_tid(k, i);
		s[i].got = k->out_h[s[i].tid];
	}
	return 0;
}

static int check_samples(const struct sample *s, int n, uint32_t iters)
{
	for (int i = 0; i < n; i++) {
		float want = host_ref(s[i].seed, s[i].tid, iters);

		if (memcmp(&want, &s[i].got, sizeof(float)) != 0) {
			fprintf(stderr,
				"collc-interfere: WRONG: launch seed %u, thread %u: %.9g, host says %.9g\n",
				s[i].seed, s[i].tid, (double)s[i].got, (double)want);
			return -1;
		}
	}
	return 0;
}

/* fma_iters for one launch of about ms, measured now on this GPU. */
static int calibrate(struct kernel *k, double target_ms, uint32_t *ret_iters)
{
	uint32_t iters = 4096;
	double ms = 0;

	for (int round = 0; round < 3; round++) {
		double best = 1e30;

		for (int i = 0; i < 3; i++) {
			if (kernel_run(k, iters, 1000u + (uint32_t)i, &ms, NULL) < 0)
				return -1;
			if (ms < best)
				best = ms;
		}
		double want = (double)iters * target_ms / (best > 1e-3 ? best : 1e-3);

		want = want < 64 ? 64 : want > (double)(1u << 26) ? (double)(1u << 26) : want;
		iters = ((uint32_t)want + 3u) & ~3u;
	}
	*ret_iters = iters;
	return 0;
}

/* Output */

static int cmp_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

struct result {
	double median, min, mean, max;
	int sms_median, sms_min;
	double gflops, pred_pct;
	double load_ops_s, load_busbw;
	uint64_t load_ops;
};

static void write_csv(const struct opts *o, const struct kernel *k, const struct result *r)
{
	struct stat stb;
	int fresh = stat(o->csv, &stb) < 0 || stb.st_size == 0;
	FILE *f = fopen(o->csv, "ae");
	char grid[16] = "", pred[32] = ""; /* empty: no grid given */

	if (!f) {
		fprintf(stderr, "collc-interfere: %s: %s\n", o->csv, strerror(errno));
		return;
	}
	if (fresh)
		fprintf(f,
			"label,device,sms,kernel_blocks,threads_per_block,blocks_per_sm,fma_iters,"
			"launches,median_ms,min_ms,mean_ms,max_ms,sms_used_median,sms_used_min,gflops,"
			"grid_blocks,pred_loss_pct,busy_bytes,busy_ranks,busy_ops,busy_ops_per_s,"
			"busy_busbw_gbs\n");
	if (o->grid_blocks >= 0) {
		snprintf(grid, sizeof(grid), "%d", o->grid_blocks);
		snprintf(pred, sizeof(pred), "%.2f", r->pred_pct);
	}
	fprintf(f,
		"%s,\"%s\",%d,%u,%u,%d,%u,%d,%.4f,%.4f,%.4f,%.4f,%d,%d,%.1f,%s,%s,%llu,%d,%llu,"
		"%.1f,%.2f\n",
		o->label, k->name, k->sms, k->blocks, IF_THREADS, k->bps, o->fma_iters, o->launches,
		r->median, r->min, r->mean, r->max, r->sms_median, r->sms_min, r->gflops, grid,
		pred, (unsigned long long)o->busy_bytes, o->busy_bytes ? o->nbusy : 0,
		(unsigned long long)r->load_ops, r->load_ops_s, r->load_busbw);
	fclose(f);
}

/* If each resident block holds an SM alone, the kernel's blocks run in more waves on the rest. */
static double predicted_loss(const struct kernel *k, int grid_blocks)
{
	uint64_t per_wave = (uint64_t)k->sms * (uint64_t)k->bps, free_slots;

	if (grid_blocks < 0)
		return NAN;
	if (grid_blocks >= k->sms)
		return INFINITY;
	free_slots = (uint64_t)(k->sms - grid_blocks) * (uint64_t)k->bps;
	return (double)((k->blocks + free_slots - 1) / free_slots) /
		       (double)((k->blocks + per_wave - 1) / per_wave) * 100.0 -
	       100.0;
}

/* Options */

static int parse_int(const char *opt, const char *s, long min, long max, long *ret)
{
	return bench_parse_long("collc-interfere", opt, s, min, max, ret);
}

static int parse_gpus(const char *s, struct opts *o)
{
	o->nbusy = 0;
	while (*s) {
		char *end;
		long g = strtol(s, &end, 10);

		if (end == s || g < 0 || g > 1023 || o->nbusy == MAX_LOAD_RANKS ||
		    (*end && *end != ','))
			return -1;
		o->busy_gpus[o->nbusy++] = (int)g;
		s = *end ? end + 1 : end;
	}
	return o->nbusy >= 2 ? 0 : -1;
}

enum {
	OPT_DEVICE = 256,
	OPT_LAUNCHES,
	OPT_WARMUP,
	OPT_WAVES,
	OPT_ITERS,
	OPT_CALIBRATE,
	OPT_LABEL,
	OPT_CSV,
	OPT_GRID,
	OPT_BUSY_BYTES,
	OPT_BUSY_GPUS,
	OPT_BUSY_DEPTH,
	OPT_SOCKET,
	OPT_TIMEOUT,
	OPT_HELP,
};

static int parse_options(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{ "device", required_argument, NULL, OPT_DEVICE },
		{ "launches", required_argument, NULL, OPT_LAUNCHES },
		{ "warmup", required_argument, NULL, OPT_WARMUP },
		{ "waves", required_argument, NULL, OPT_WAVES },
		{ "fma-iters", required_argument, NULL, OPT_ITERS },
		{ "calibrate", required_argument, NULL, OPT_CALIBRATE },
		{ "label", required_argument, NULL, OPT_LABEL },
		{ "csv", required_argument, NULL, OPT_CSV },
		{ "grid-blocks", required_argument, NULL, OPT_GRID },
		{ "busy-bytes", required_argument, NULL, OPT_BUSY_BYTES },
		{ "busy-gpus", required_argument, NULL, OPT_BUSY_GPUS },
		{ "busy-depth", required_argument, NULL, OPT_BUSY_DEPTH },
		{ "socket", required_argument, NULL, OPT_SOCKET },
		{ "timeout-ms", required_argument, NULL, OPT_TIMEOUT },
		{ "help", no_argument, NULL, OPT_HELP },
		{ 0 },
	};
	long v;
	int c, ok;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_DEVICE:
			if (parse_int("--device", optarg, 0, 1023, &v) < 0)
				return -1;
			o->device = (int)v;
			break;
		case OPT_LAUNCHES:
			if (parse_int("--launches", optarg, 1, 100000, &v) < 0)
				return -1;
			o->launches = (int)v;
			break;
		case OPT_WARMUP:
			if (parse_int("--warmup", optarg, 0, 100000, &v) < 0)
				return -1;
			o->warmup = (int)v;
			break;
		case OPT_WAVES:
			if (parse_int("--waves", optarg, 1, 1024, &v) < 0)
				return -1;
			o->waves = (int)v;
			break;
		case OPT_ITERS:
			if (parse_int("--fma-iters", optarg, 4, 1L << 30, &v) < 0)
				return -1;
			o->fma_iters = (uint32_t)v;
			break;
		case OPT_CALIBRATE:
			if (parse_int("--calibrate", optarg, 1, 10000, &v) < 0)
				return -1;
			o->calibrate_ms = (double)v;
			break;
		case OPT_LABEL:
			if (strpbrk(optarg, ",\"\n")) {
				fprintf(stderr,
					"collc-interfere: --label may not hold a comma, quote or newline\n");
				return -1;
			}
			o->label = optarg;
			break;
		case OPT_CSV:
			o->csv = optarg;
			break;
		case OPT_GRID:
			if (parse_int("--grid-blocks", optarg, 0, 1 << 20, &v) < 0)
				return -1;
			o->grid_blocks = (int)v;
			break;
		case OPT_BUSY_BYTES:
			o->busy_bytes = bench_parse_bytes(optarg, &ok);
			if (!ok || o->busy_bytes < sizeof(float) || o->busy_bytes % sizeof(float)) {
				fprintf(stderr,
					"collc-interfere: --busy-bytes must be a multiple of 4\n");
				return -1;
			}
			break;
		case OPT_BUSY_GPUS:
			if (parse_gpus(optarg, o) < 0) {
				fprintf(stderr,
					"collc-interfere: --busy-gpus takes 2..%d GPU ordinals, "
					"comma separated\n",
					MAX_LOAD_RANKS);
				return -1;
			}
			break;
		case OPT_BUSY_DEPTH:
			if (parse_int("--busy-depth", optarg, 1, LOAD_ROUND_OPS, &v) < 0)
				return -1;
			o->busy_depth = (int)v;
			break;
		case OPT_SOCKET:
			o->socket = optarg;
			break;
		case OPT_TIMEOUT:
			if (parse_int("--timeout-ms", optarg, 1, 86400000, &v) < 0)
				return -1;
			o->timeout_ms = (int)v;
			break;
		case 'h':
		case OPT_HELP:
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "collc-interfere: unexpected argument %s\n", argv[optind]);
		return -1;
	}
	return 0;
}

/* In a child: the parent must not hold a CUDA context when it forks the load ranks. */
static int probe_gpus(char *msg, size_t len)
{
	struct {
		int n;
		char msg[200];
	} *pr = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t pid;
	int n = -1, st;

	if (pr == MAP_FAILED) {
		snprintf(msg, len, "mmap: %s", strerror(errno));
		return -1;
	}
	pr->n = -1;
	snprintf(pr->msg, sizeof(pr->msg), "the GPU probe died");
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		cudaError_t e = cudaGetDeviceCount(&pr->n);

		if (e != cudaSuccess) {
			snprintf(pr->msg, sizeof(pr->msg), "cudaGetDeviceCount: %s",
				 cudaGetErrorString(e));
			pr->n = -1;
		} else if (pr->n == 0) {
			snprintf(pr->msg, sizeof(pr->msg), "cudaGetDeviceCount found 0 devices");
		}
		_exit(0);
	}
	if (pid > 0 && waitpid(pid, &st, 0) == pid)
		n = pr->n;
	snprintf(msg, len, "%s", pid < 0 ? strerror(errno) : pr->msg);
	munmap(pr, 4096);
	return n;
}

int main(int argc, char **argv)
{
	struct opts o = {
		.launches = 50,
		.warmup = 5,
		.waves = 32,
		.fma_iters = 65536,
		.label = "run",
		.grid_blocks = -1,
		.busy_depth = 2,
		.timeout_ms = 30000,
	};
	struct load_shared *ls = NULL;
	struct sample samples[2 * NSAMPLES];
	struct kernel k = { 0 };
	struct result res = { .pred_pct = NAN };
	double *ms = NULL, sum = 0, t_start = 0, t_end = 0;
	uint64_t ops_start = 0, ops_end = 0;
	int *sms = NULL, status = 1, ngpu;
	char msg[256];

	if (parse_options(argc, argv, &o) < 0)
		return 2;
	signal(SIGPIPE, SIG_IGN);
	ngpu = probe_gpus(msg, sizeof(msg));
	if (ngpu <= 0) {
		printf("collc-interfere: SKIP: no usable GPU (%s)\n", msg);
		return EXIT_SKIP;
	}
	if (o.device >= ngpu) {
		fprintf(stderr, "collc-interfere: --device %d: this process sees %d GPUs\n",
			o.device, ngpu);
		return 2;
	}
	if (o.busy_bytes && o.calibrate_ms > 0) {
		fprintf(stderr,
			"collc-interfere: --calibrate runs alone: no --busy-bytes with it\n");
		return 2;
	}
	if (o.busy_bytes && o.nbusy == 0) {
		o.busy_gpus[0] = 0;
		o.busy_gpus[1] = ngpu >= 2 ? 1 : 0;
		o.nbusy = 2;
	}
	for (int i = 0; i < o.nbusy; i++)
		if (o.busy_gpus[i] >= ngpu) {
			fprintf(stderr,
				"collc-interfere: --busy-gpus names GPU %d; this process sees %d\n",
				o.busy_gpus[i], ngpu);
			return 2;
		}

	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	if (o.busy_bytes) {
		ls = mmap(NULL, sizeof(*ls), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
			  0);
		if (ls == MAP_FAILED) {
			fprintf(stderr, "collc-interfere: mmap: %s\n", strerror(errno));
			return 1;
		}
		memset(ls, 0, sizeof(*ls));
		if (load_start(&o, ls) < 0)
			goto out_load;
	}

	if (kernel_setup(&o, &k) < 0)
		goto out_load;
	if (o.calibrate_ms > 0) {
		uint32_t iters;
		double t;

		if (kernel_run(&k, 64, 1, &t, NULL) < 0 ||
		    calibrate(&k, o.calibrate_ms, &iters) < 0)
			goto out_load;
		printf("fma_iters %u\n", iters);
		status = 0;
		goto out_load;
	}
	ms = calloc((size_t)o.launches, sizeof(*ms));
	sms = calloc((size_t)o.launches, sizeof(*sms));
	if (!ms || !sms) {
		fprintf(stderr, "collc-interfere: out of memory\n");
		goto out_load;
	}
	for (int i = 0; i < o.warmup; i++) {
		double t;

		if (kernel_run(&k, o.fma_iters, 0x10000u + (uint32_t)i, &t, NULL) < 0)
			goto out_load;
	}
	if (ls) {
		/* A2: pairs with R1 in the load ranks */
		ops_start = load_acquire(&ls->done[0]);
		for (int i = 0; i < o.nbusy; i++)
			if (load_acquire(&ls->failed[i])) {
				fprintf(stderr,
					"collc-interfere: the load failed before the measurement\n");
				goto out_load;
			}
	}
	t_start = now_s();
	for (int i = 0; i < o.launches; i++) {
		uint32_t seed = 0x20000u + (uint32_t)i; /* a new input every launch */

		if (kernel_run(&k, o.fma_iters, seed, &ms[i], &sms[i]) < 0)
			goto out_load;
		if ((i == 0 || i == o.launches - 1) &&
		    kernel_grab(&k, seed, &samples[i == 0 ? 0 : NSAMPLES]) < 0)
			goto out_load;
	}
	t_end = now_s();
	if (ls)
		ops_end = load_acquire(&ls->done[0]);

	for (int i = 0; i < o.launches; i++)
		sum += ms[i];
	res.mean = sum / o.launches;
	qsort(ms, (size_t)o.launches, sizeof(*ms), bench_cmp_double);
	qsort(sms, (size_t)o.launches, sizeof(*sms), cmp_int);
	res.median = bench_percentile(ms, o.launches, 50);
	res.min = ms[0];
	res.max = ms[o.launches - 1];
	res.sms_median = sms[(o.launches - 1) / 2];
	res.sms_min = sms[0];
	res.gflops = 2.0 * IF_CHAINS * (double)o.fma_iters * (double)k.nthreads / res.median / 1e6;
	res.pred_pct = predicted_loss(&k, o.grid_blocks);
	if (ls) {
		/* Stopped before the check so that a slow host check does not stretch the window. */
		res.load_ops = ops_end - ops_start;
		res.load_ops_s = (double)res.load_ops / (t_end - t_start);
		res.load_busbw =
			res.load_ops_s * (double)o.busy_bytes * 2.0 * (o.nbusy - 1) / o.nbusy / 1e9;
		store_release(&ls->stop, 1u);
		if (load_reap(ls, LOAD_STOP_S) < 0) {
			fprintf(stderr,
				"collc-interfere: the load failed: the numbers are not reported\n");
			goto out_load;
		}
	}
	if (check_samples(samples, o.launches > 1 ? 2 * NSAMPLES : NSAMPLES, o.fma_iters) < 0)
		goto out_load;

	printf("collc-interfere: %s: %s, %d SMs; kernel %u blocks x %u threads (%d per SM, %d waves), "
	       "%u FMA steps x %u chains\n",
	       o.label, k.name, k.sms, k.blocks, IF_THREADS, k.bps, o.waves, o.fma_iters,
	       IF_CHAINS);
	printf("  %d launches: median %.3f ms, min %.3f ms, mean %.3f ms, max %.3f ms, %.0f GFLOP/s; "
	       "ran on %d SMs (min %d); output checked\n",
	       o.launches, res.median, res.min, res.mean, res.max, res.gflops, res.sms_median,
	       res.sms_min);
	if (o.grid_blocks >= 0 && o.grid_blocks < k.sms)
		printf("  resident grid: %d blocks; loss if each holds an SM alone: %+.1f%% in whole waves "
		       "of this kernel, %+.1f%% by SM count\n",
		       o.grid_blocks, res.pred_pct,
		       ((double)k.sms / (k.sms - o.grid_blocks) - 1) * 100);
	if (ls)
		printf("  load: %d ranks on GPUs", o.nbusy);
	for (int i = 0; ls && i < o.nbusy; i++)
		printf("%s%d", i ? "," : " ", o.busy_gpus[i]);
	if (ls)
		printf(", %llu-byte all-reduces: %llu during the measurement, %.0f/s, busbw %.2f GB/s\n",
		       (unsigned long long)o.busy_bytes, (unsigned long long)res.load_ops,
		       res.load_ops_s, res.load_busbw);
	if (ls && res.load_ops == 0) {
		fprintf(stderr,
			"collc-interfere: no all-reduce completed during the measurement\n");
		goto out_load;
	}
	if (o.csv)
		write_csv(&o, &k, &res);
	status = 0;
out_load:
	if (ls && nload_pids) {
		store_release(&ls->stop, 1u);
		if (load_reap(ls, LOAD_STOP_S) < 0)
			status = 1;
	}
	free(ms);
	free(sms);
	return status;
}
