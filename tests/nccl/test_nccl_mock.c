/* SPDX-License-Identifier: MIT */
/*
 * libnccl-collc's own logic without a GPU or collcd: the CUDA driver is
 * tests/nccl/mock_cuda.c (found as libcuda.so.1 through LD_LIBRARY_PATH) and
 * the libcollc calls the shim makes are defined here, so they interpose on
 * libcollc's and log what the shim asked for. Checked: communicators of one
 * group joined at once (collc's join waits for every rank), registration of
 * whole allocations once, stale ones dropped, calls of a group issued at its
 * end in call order with the communicator's device current, grouped sends
 * and receives forked onto side streams and joined back, gather as grouped
 * point to point, ncclCommSplit's ranks, async errors, refused buffers,
 * nccl-tests' one-thread send/recv of two ranks (no host wait between the
 * ranks' calls) and the staged input of sends and all-to-all.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <collc.h>
#include <nccl.h>

static int failed;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "FAILED CHECK %s:%d: %s: ", __FILE__, __LINE__, #cond);    \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, "\n");                                                     \
			failed = 1;                                                                \
		}                                                                                  \
	} while (0)

/* The mock driver's controls. */
static void (*mock_log)(const char *fmt, ...);
static const char *(*mock_trace)(int reset);
static void (*mock_set_device)(int d);
static int (*mock_current_device)(void);
static const char *(*mock_name)(const void *h, char buf[32]);
static void (*mock_renew)(void *p);

/* libcollc, as the shim sees it. */
struct mock_group {
	struct collc_unique_id id;
	int nranks, joined;
	unsigned gen, arrived;
	char *slots;
	struct mock_group *next;
};

struct collc_ctx {
	int unused;
};

struct collc_comm {
	struct mock_group *g;
	int rank, device;
};

static pthread_mutex_t mlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t mcond = PTHREAD_COND_INITIALIZER;
static struct mock_group *groups;
static unsigned id_counter;
static void *refused_base; /* collc_mem_register fails with -EINVAL for this allocation */
static int async_err;

/*
 * collcd's pairing of stream-ordered sends and receives: once one is
 * enqueued its stream waits until the peer's partner is submitted. A host
 * round trip to collcd meanwhile (a registration, an allocation, a join)
 * is what hangs a one-thread program on a GPU: the round trip can wait for
 * the GPU, whose streams wait for the partner this thread has not
 * submitted yet. Counted in host_waits while p2p_watch is set.
 */
#define P2P_RANKS 4
static int p2p_sends[P2P_RANKS][P2P_RANKS]; /* [from][to]: sends waiting for their receive */
static int p2p_recvs[P2P_RANKS][P2P_RANKS]; /* [at][from]: receives waiting for their send */
static int p2p_watch, host_waits;

static int p2p_pending(void)
{
	int n = 0;

	for (int i = 0; i < P2P_RANKS; i++)
		for (int j = 0; j < P2P_RANKS; j++)
			n += p2p_sends[i][j] + p2p_recvs[i][j];
	return n;
}

static void p2p_reset(void)
{
	memset(p2p_sends, 0, sizeof(p2p_sends));
	memset(p2p_recvs, 0, sizeof(p2p_recvs));
	host_waits = 0;
}

/* A send from -> to (send) or a receive at `to` from `from`, paired with its partner if waiting. */
static void p2p_post(int send, int from, int to)
{
	if (from < 0 || to < 0 || from >= P2P_RANKS || to >= P2P_RANKS)
		return;
	pthread_mutex_lock(&mlock);
	if (send && p2p_recvs[to][from] > 0)
		p2p_recvs[to][from]--;
	else if (send)
		p2p_sends[from][to]++;
	else if (p2p_sends[from][to] > 0)
		p2p_sends[from][to]--;
	else
		p2p_recvs[to][from]++;
	pthread_mutex_unlock(&mlock);
}

static void host_wait(const char *what)
{
	pthread_mutex_lock(&mlock);
	if (p2p_watch && p2p_pending() > 0) {
		host_waits++;
		pthread_mutex_unlock(&mlock);
		mock_log("BLOCKED: %s while a send or receive waits for its peer\n", what);
		return;
	}
	pthread_mutex_unlock(&mlock);
}

static int wait_until(int (*pred)(void *), void *arg)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	t.tv_sec += 5;
	while (!pred(arg))
		if (pthread_cond_timedwait(&mcond, &mlock, &t) == ETIMEDOUT)
			return -ETIMEDOUT;
	return 0;
}

int collc_connect(const char *path, struct collc_ctx **ret)
{
	*ret = calloc(1, sizeof(**ret));
	return *ret ? 0 : -ENOMEM;
}

void collc_disconnect(struct collc_ctx *ctx)
{
	free(ctx);
}

int collc_get_unique_id(struct collc_ctx *ctx, struct collc_unique_id *id)
{
	memset(id, 0, sizeof(*id));
	pthread_mutex_lock(&mlock);
	snprintf((char *)id->bytes, sizeof(id->bytes), "mock-id-%u", ++id_counter);
	pthread_mutex_unlock(&mlock);
	return 0;
}

static int all_joined(void *g)
{
	return ((struct mock_group *)g)->joined >= ((struct mock_group *)g)->nranks;
}

/* Blocks until every rank joined, as collcd's join does. */
int collc_comm_init(struct collc_ctx *ctx, const struct collc_unique_id *id, int nranks, int rank,
		    int device, struct collc_comm **ret)
{
	struct mock_group *g;
	struct collc_comm *c;
	int r;

	host_wait("a join");
	pthread_mutex_lock(&mlock);
	for (g = groups; g && memcmp(&g->id, id, sizeof(*id)); g = g->next)
		;
	if (!g) {
		g = calloc(1, sizeof(*g));
		g->id = *id;
		g->nranks = nranks;
		g->next = groups;
		groups = g;
	}
	g->joined++;
	pthread_cond_broadcast(&mcond);
	r = wait_until(all_joined, g);
	pthread_mutex_unlock(&mlock);
	if (r < 0)
		return r;
	c = calloc(1, sizeof(*c));
	c->g = g;
	c->rank = rank;
	c->device = device;
	mock_log("join rank %d of %d on device %d\n", rank, nranks, device);
	*ret = c;
	return 0;
}

int collc_comm_destroy(struct collc_comm *c)
{
	free(c);
	return 0;
}

int collc_comm_abort(struct collc_comm *c)
{
	mock_log("abort rank %d\n", c->rank);
	return 0;
}

int collc_mem_register(struct collc_ctx *ctx, void *p, size_t size, int device)
{
	host_wait("a registration");
	mock_log("register %p %zu on device %d\n", p, size, device);
	return p == refused_base ? -EINVAL : 0;
}

int collc_mem_deregister(struct collc_ctx *ctx, void *p)
{
	host_wait("a deregistration");
	mock_log("deregister %p\n", p);
	return 0;
}

int collc_mem_alloc(struct collc_ctx *ctx, size_t size, int device, void **ret)
{
	host_wait("an allocation");
	mock_log("memalloc %zu on device %d\n", size, device);
	*ret = malloc(size);
	return *ret ? 0 : -ENOMEM;
}

int collc_mem_free(struct collc_ctx *ctx, void *p)
{
	free(p);
	return 0;
}

struct gen_arg {
	struct mock_group *g;
	unsigned gen;
};

static int gen_passed(void *a)
{
	return ((struct gen_arg *)a)->g->gen != ((struct gen_arg *)a)->gen;
}

/* A barrier of the group's ranks (threads of this process). */
static int barrier(struct mock_group *g)
{
	struct gen_arg a = { g, g->gen };

	if (++g->arrived == (unsigned)g->nranks) {
		g->arrived = 0;
		g->gen++;
		pthread_cond_broadcast(&mcond);
		return 0;
	}
	return wait_until(gen_passed, &a);
}

int collc_allgather(struct collc_comm *c, const void *send, void *recv, size_t count,
		    collc_dtype dtype, collc_req *req)
{
	struct mock_group *g = c->g;
	size_t b = count * collc_dtype_size(dtype);
	int r;

	pthread_mutex_lock(&mlock);
	if (!g->slots)
		g->slots = calloc((size_t)g->nranks, b);
	memcpy(g->slots + (size_t)c->rank * b, send, b);
	r = barrier(g);
	if (r == 0)
		memcpy(recv, g->slots, b * (size_t)g->nranks);
	if (r == 0)
		r = barrier(g);
	if (r == 0 && c->rank == 0) {
		free(g->slots);
		g->slots = NULL;
	}
	pthread_mutex_unlock(&mlock);
	*req = 1;
	return r;
}

int collc_wait(struct collc_ctx *ctx, collc_req req, int timeout_ms)
{
	return 0;
}

int collc_comm_get_async_error(struct collc_comm *c)
{
	return async_err;
}

static void log_call(const char *what, struct collc_comm *c, const void *send, const void *recv,
		     size_t count, collc_dtype dt, int op, int root, struct CUstream_st *s)
{
	char n[32];

	mock_log("%s rank %d dev %d on %s send %p recv %p count %zu dtype %d op %d root %d\n", what,
		 c->rank, mock_current_device(), mock_name(s, n), send, recv, count, (int)dt, op,
		 root);
}

int collc_allreduce_stream(struct collc_comm *c, const void *s, void *r, size_t n, collc_dtype d,
			   collc_redop op, struct CUstream_st *st)
{
	log_call("allreduce", c, s, r, n, d, op, -1, st);
	return 0;
}

int collc_allgather_stream(struct collc_comm *c, const void *s, void *r, size_t n, collc_dtype d,
			   struct CUstream_st *st)
{
	log_call("allgather", c, s, r, n, d, -1, -1, st);
	return 0;
}

int collc_reduce_scatter_stream(struct collc_comm *c, const void *s, void *r, size_t n,
				collc_dtype d, collc_redop op, struct CUstream_st *st)
{
	log_call("reduce_scatter", c, s, r, n, d, op, -1, st);
	return 0;
}

int collc_broadcast_stream(struct collc_comm *c, const void *s, void *r, size_t n, collc_dtype d,
			   int root, struct CUstream_st *st)
{
	log_call("broadcast", c, s, r, n, d, -1, root, st);
	return 0;
}

int collc_reduce_stream(struct collc_comm *c, const void *s, void *r, size_t n, collc_dtype d,
			collc_redop op, int root, struct CUstream_st *st)
{
	log_call("reduce", c, s, r, n, d, op, root, st);
	return 0;
}

int collc_alltoall_stream(struct collc_comm *c, const void *s, void *r, size_t n, collc_dtype d,
			  struct CUstream_st *st)
{
	log_call("alltoall", c, s, r, n, d, -1, -1, st);
	return 0;
}

int collc_send_stream(struct collc_comm *c, const void *b, size_t n, collc_dtype d, int peer,
		      struct CUstream_st *st)
{
	log_call("send", c, b, NULL, n, d, -1, peer, st);
	p2p_post(1, c->rank, peer);
	return 0;
}

int collc_recv_stream(struct collc_comm *c, void *b, size_t n, collc_dtype d, int peer,
		      struct CUstream_st *st)
{
	log_call("recv", c, NULL, b, n, d, -1, peer, st);
	p2p_post(0, peer, c->rank);
	return 0;
}

int collc_group_start(void)
{
	mock_log("group start\n");
	return 0;
}

int collc_group_end(void)
{
	mock_log("group end\n");
	return 0;
}

/* The last place `what` occurs in trace, or NULL. */
static const char *last_of(const char *trace, const char *what)
{
	const char *p = NULL;

	for (const char *q = strstr(trace, what); q; q = strstr(q + 1, what))
		p = q;
	return p;
}

/* Lines of the trace that contain `what` (all of them, not overlapping). */
static int count_of(const char *trace, const char *what)
{
	int n = 0;

	for (const char *p = trace; (p = strstr(p, what)); p += strlen(what))
		n++;
	return n;
}

/* The line of the trace holding `what` (copied into line); NULL when none. */
static const char *line_of(const char *trace, const char *what, char *line, size_t len)
{
	const char *p = strstr(trace, what), *b, *e;

	if (!p)
		return NULL;
	for (b = p; b > trace && b[-1] != '\n'; b--)
		;
	e = strchr(p, '\n');
	snprintf(line, len, "%.*s", (int)(e ? e - b : (long)strlen(b)), b);
	return line;
}

#define U0 ((cudaStream_t)0x7000)
#define U1 ((cudaStream_t)0x7100)

static ncclComm_t comms[2];

static void test_init_group(void)
{
	ncclUniqueId id;
	const char *t;
	int n = 0, d = -1, r = -1;

	CHECK(ncclGetUniqueId(&id) == ncclSuccess, "%s", ncclGetLastError(NULL));
	/* nccl-tests' -g 2: both ranks from one thread, inside a group. */
	CHECK(ncclGroupStart() == ncclSuccess, "start");
	for (int i = 0; i < 2; i++) {
		mock_set_device(i);
		CHECK(ncclCommInitRank(&comms[i], 2, id, i) == ncclSuccess, "%s",
		      ncclGetLastError(NULL));
	}
	t = mock_trace(0);
	CHECK(count_of(t, "join") == 0, "joined before ncclGroupEnd: %s", t);
	CHECK(ncclGroupEnd() == ncclSuccess, "joins at the group's end: %s",
	      ncclGetLastError(NULL));
	t = mock_trace(1);
	CHECK(strstr(t, "join rank 0 of 2 on device 0") &&
		      strstr(t, "join rank 1 of 2 on device 1"),
	      "%s", t);
	CHECK(ncclCommCount(comms[1], &n) == ncclSuccess && n == 2, "count %d", n);
	CHECK(ncclCommCuDevice(comms[1], &d) == ncclSuccess && d == 1, "device %d", d);
	CHECK(ncclCommUserRank(comms[1], &r) == ncclSuccess && r == 1, "rank %d", r);
	/* A live communicator, no place for the answer. */
	CHECK(ncclCommCount(comms[1], NULL) == ncclInvalidArgument &&
		      strstr(ncclGetLastError(NULL), "count is NULL"),
	      "%s", ncclGetLastError(NULL));
	CHECK(ncclCommCuDevice(comms[1], NULL) == ncclInvalidArgument &&
		      strstr(ncclGetLastError(NULL), "device is NULL"),
	      "%s", ncclGetLastError(NULL));
	CHECK(ncclCommUserRank(comms[1], NULL) == ncclInvalidArgument &&
		      strstr(ncclGetLastError(NULL), "rank is NULL"),
	      "%s", ncclGetLastError(NULL));
}

static void test_buffers(void)
{
	char want[160], line[256];
	ncclResult_t e = ncclSuccess;
	const char *t;
	char *a = NULL, stack_buf[64];

	mock_set_device(0);
	CHECK(ncclMemAlloc((void **)&a, 4096) == ncclSuccess && a, "%s", ncclGetLastError(NULL));
	mock_trace(1);
	CHECK(ncclAllReduce(a, a + 2048, 512, ncclBfloat16, ncclMax, comms[0], U0) == ncclSuccess,
	      "%s", ncclGetLastError(NULL));
	CHECK(ncclAllReduce(a + 64, a + 64, 16, ncclFloat, ncclSum, comms[0], U0) == ncclSuccess,
	      "%s", ncclGetLastError(NULL));
	t = mock_trace(1);
	snprintf(want, sizeof(want), "register %p 4096 on device 0", (void *)a);
	CHECK(count_of(t, "register") == 1 && strstr(t, want),
	      "one registration of the whole "
	      "allocation: %s",
	      t);
	snprintf(want, sizeof(want),
		 "allreduce rank 0 dev 0 on u7000 send %p recv %p count 512 "
		 "dtype %d op %d",
		 (void *)a, (void *)(a + 2048), COLLC_BFLOAT16, COLLC_MAX);
	CHECK(strstr(t, want), "want \"%s\" in %s", want, t);
	/* Freed and allocated again at the same address: the stale registration goes. */
	mock_renew(a);
	CHECK(ncclAllGather(a, a + 1024, 256, ncclInt32, comms[0], U0) == ncclSuccess, "%s",
	      ncclGetLastError(NULL));
	t = mock_trace(1);
	snprintf(want, sizeof(want), "deregister %p", (void *)a);
	CHECK(strstr(t, want) && count_of(t, "register ") == 2, "re-registered: %s", t);
	CHECK(line_of(t, "allgather", line, sizeof(line)) && strstr(line, "count 256"), "%s", t);
	/* In-place all-to-all (NCCL has it, collc does not): the input is staged. */
	CHECK(ncclAlltoAll(a, a, 64, ncclFloat, comms[0], U0) == ncclSuccess, "%s",
	      ncclGetLastError(NULL));
	t = mock_trace(1);
	snprintf(want, sizeof(want), "<- %p 512 on S", (void *)a);
	CHECK(strstr(t, want) && strstr(t, "alltoall rank 0 dev 0 on S") &&
		      count_of(t, "copy ") == 1,
	      "one copy in, no copy out: %s", t);
	if (line_of(t, "alltoall", line, sizeof(line))) {
		snprintf(want, sizeof(want), "recv %p count 64", (void *)a);
		CHECK(strstr(line, want) && !strstr(line, "send (nil)"), "%s", line);
	}
	/* Count 0: nothing to do. */
	CHECK(ncclAllReduce(a, a, 0, ncclFloat, ncclSum, comms[0], U0) == ncclSuccess, "count 0");
	CHECK(count_of(mock_trace(1), "allreduce") == 0, "count 0 reached collc");
	/* Not device memory, past the allocation, or memory collcd refuses. */
	CHECK(ncclAllReduce(stack_buf, stack_buf, 4, ncclFloat, ncclSum, comms[0], U0) ==
			      ncclInvalidArgument &&
		      strstr(ncclGetLastError(NULL), "not CUDA device memory"),
	      "%s", ncclGetLastError(NULL));
	CHECK(ncclAllReduce(a, a + 4000, 100, ncclFloat, ncclSum, comms[0], U0) ==
			      ncclInvalidArgument &&
		      strstr(ncclGetLastError(NULL), "past its allocation"),
	      "%s", ncclGetLastError(NULL));
	/* Memory collcd cannot import (a pool): staged on the comm's staging stream. */
	refused_base = a;
	mock_renew(a);
	mock_trace(1);
	CHECK(ncclBroadcast(a, a + 1024, 4, ncclFloat, 0, comms[0], U0) == ncclSuccess,
	      "staged: %s", ncclGetLastError(NULL));
	t = mock_trace(1);
	{
		char stage[32] = "", copy_in[96], copy_out[96];
		const char *b = strstr(t, "broadcast rank 0 dev 0 on S");
		void *sb = NULL, *rb = NULL;

		if (b) {
			sscanf(b, "broadcast rank 0 dev 0 on %31s send %p recv %p", stage, &sb,
			       &rb);
			snprintf(copy_in, sizeof(copy_in), "copy %p <- %p 16 on %s", sb, (void *)a,
				 stage);
			snprintf(copy_out, sizeof(copy_out), "copy %p <- %p 16 on %s",
				 (void *)(a + 1024), rb, stage);
		}
		CHECK(b && sb && rb && sb != (void *)a && strstr(t, copy_in) &&
			      strstr(t, copy_out) && strstr(t, copy_in) < b &&
			      b < strstr(t, copy_out),
		      "copy in, broadcast, copy out on the staging stream: %s", t);
		CHECK(strstr(t, "on u7000\n") && strstr(t, "wait u7000 for") &&
			      count_of(t, "wait u7000 for") == 1,
		      "forked from and joined to u7000: %s", t);
	}
	/* Cached: no second registration attempt, staged again. */
	CHECK(ncclAllReduce(a, a, 8, ncclFloat, ncclSum, comms[0], U0) == ncclSuccess, "%s",
	      ncclGetLastError(NULL));
	t = mock_trace(1);
	CHECK(count_of(t, "register") == 0 && count_of(t, "copy ") == 2, "in place, staged: %s", t);
	refused_base = NULL;
	/* Non-root broadcast reads no send buffer: a NULL one is fine. */
	CHECK(ncclBroadcast(NULL, a, 4, ncclFloat, 0, comms[1], U1) == ncclSuccess, "%s",
	      ncclGetLastError(NULL));
	async_err = -EPIPE;
	CHECK(ncclCommGetAsyncError(comms[0], &e) == ncclSuccess && e == ncclRemoteError,
	      "async %d", e);
	async_err = 0;
	CHECK(ncclCommGetAsyncError(comms[0], &e) == ncclSuccess && e == ncclSuccess, "async %d",
	      e);
	mock_trace(1);
	CHECK(ncclMemFree(a) == ncclSuccess, "free");
}

static void test_group_order(void)
{
	char *a = NULL, *b = NULL;
	const char *t, *p0, *p1;

	mock_set_device(0);
	ncclMemAlloc((void **)&a, 1024);
	mock_set_device(1);
	ncclMemAlloc((void **)&b, 1024);
	mock_trace(1);
	/* The caller's device is 0 at the group's end; comm 1's call runs with device 1 current. */
	CHECK(ncclGroupStart() == ncclSuccess, "start");
	mock_set_device(1);
	CHECK(ncclReduceScatter(b, b + 512, 4, ncclFloat, ncclSum, comms[1], U1) == ncclSuccess,
	      "%s", ncclGetLastError(NULL));
	mock_set_device(0);
	CHECK(ncclReduce(a, a + 512, 4, ncclFloat, ncclProd, 1, comms[0], U0) == ncclSuccess, "%s",
	      ncclGetLastError(NULL));
	CHECK(count_of(mock_trace(0), "rank") == 0, "issued inside the group");
	CHECK(ncclGroupEnd() == ncclSuccess, "%s", ncclGetLastError(NULL));
	t = mock_trace(1);
	p0 = strstr(t, "reduce_scatter rank 1 dev 1 on u7100");
	p1 = strstr(t, "reduce rank 0 dev 0 on u7000");
	CHECK(p0 && p1 && p0 < p1, "call order and devices: %s", t);
	CHECK(mock_current_device() == 0, "the caller's device is back: %d", mock_current_device());
	ncclMemFree(a);
	ncclMemFree(b);
}

/* The stream of the trace line holding `what` into s (16 bytes); "" when none. */
static void stream_of(const char *trace, const char *what, char *s)
{
	char line[256];

	s[0] = 0;
	if (line_of(trace, what, line, sizeof(line)))
		sscanf(strstr(line, " on ") + 4, "%15s", s);
}

/* sendrecv_perf with -g 2: each rank sends 16 floats to the other and receives 16 on its stream. */
static ncclResult_t exchange(char *a, char *b)
{
	ncclGroupStart();
	mock_set_device(0);
	ncclSend(a, 16, ncclFloat, 1, comms[0], U0);
	ncclRecv(a + 512, 16, ncclFloat, 1, comms[0], U0);
	mock_set_device(1);
	ncclSend(b, 16, ncclFloat, 0, comms[1], U1);
	ncclRecv(b + 512, 16, ncclFloat, 0, comms[1], U1);
	return ncclGroupEnd();
}

static void test_p2p_fork(void)
{
	char *a = NULL, *b = NULL, line[256];
	const char *t;
	char s0[16] = "", s1[16] = "";

	mock_set_device(0);
	ncclMemAlloc((void **)&a, 1024);
	mock_set_device(1);
	ncclMemAlloc((void **)&b, 1024);
	mock_trace(1);
	CHECK(exchange(a, b) == ncclSuccess, "%s", ncclGetLastError(NULL));
	t = mock_trace(1);
	/* Each on a side stream forked from the caller's, none on the caller's stream itself. */
	CHECK(!strstr(t, "send rank 0 dev 0 on u7000") && !strstr(t, "recv rank 0 dev 0 on u7000"),
	      "a send or receive on the caller's stream: %s", t);
	stream_of(t, "send rank 0", s0);
	stream_of(t, "recv rank 0", s1);
	CHECK(s0[0] == 'S' && s1[0] == 'S' && strcmp(s0, s1) != 0, "side streams %s %s: %s", s0, s1,
	      t);
	CHECK(count_of(t, "on u7000\n") == 1 && count_of(t, "wait u7000 for") == 2,
	      "fork (1 record) and join (2 waits) on u7000: %s", t);
	snprintf(line, sizeof(line), "wait %s for", s0);
	CHECK(strstr(t, line) && strstr(t, "record") < strstr(t, line), "%s forked: %s", s0, t);
	CHECK(count_of(t, "wait u7100 for") == 2, "comm 1 joined on u7100: %s", t);
	/* Gather at root 0: a send to itself and a receive from each rank, each its own side stream. */
	mock_set_device(0);
	CHECK(ncclGather(a, a + 256, 8, ncclFloat, 0, comms[0], U0) == ncclSuccess, "%s",
	      ncclGetLastError(NULL));
	t = mock_trace(1);
	snprintf(line, sizeof(line), "recv %p count 8", (void *)(a + 256 + 32));
	CHECK(count_of(t, "send rank 0") == 1 && count_of(t, "recv rank 0") == 2 &&
		      strstr(t, line) && count_of(t, "wait u7000 for") == 3,
	      "gather: %s", t);
	/* One send beside a collective on the same stream: the send forks off too. */
	mock_set_device(0);
	ncclGroupStart();
	ncclSend(a, 16, ncclFloat, 1, comms[0], U0);
	ncclAllReduce(a + 256, a + 256, 16, ncclFloat, ncclSum, comms[0], U0);
	CHECK(ncclGroupEnd() == ncclSuccess, "%s", ncclGetLastError(NULL));
	t = mock_trace(1);
	CHECK(strstr(t, "send rank 0 dev 0 on S") && strstr(t, "allreduce rank 0 dev 0 on u7000") &&
		      count_of(t, "wait u7000 for") == 1,
	      "send beside the all-reduce: %s", t);
	/* Staged sends and receives stay on their side streams (lane j + 1). */
	refused_base = a;
	mock_renew(a);
	CHECK(exchange(a, b) == ncclSuccess, "%s", ncclGetLastError(NULL));
	refused_base = NULL;
	t = mock_trace(1);
	stream_of(t, "send rank 0", s0);
	stream_of(t, "recv rank 0", s1);
	{
		char in[64], out[64];

		snprintf(in, sizeof(in), "<- %p 64 on %s\n", (void *)a, s0);
		snprintf(out, sizeof(out), "copy %p <- ", (void *)(a + 512));
		CHECK(s0[0] == 'S' && s1[0] == 'S' && strcmp(s0, s1) && strstr(t, in) &&
			      line_of(t, out, line, sizeof(line)) && strstr(line, s1),
		      "staged send on %s, receive on %s: %s", s0, s1, t);
	}
	ncclMemFree(a);
	ncclMemFree(b);
}

/*
 * nccl-tests' sendrecv_perf -g 2: one thread drives both ranks, each rank's
 * send and receive in a group of its own inside one outer group, on buffers
 * the group registers. Everything that waits on the host must come before
 * the first send or receive is enqueued (host_waits), every send must find
 * its receive, and a send goes out of a staging buffer (collcd can read a
 * registered cudaMalloc buffer from its own GPU only) while the receive
 * writes the user's buffer. Then all-to-all, staged the same way.
 */
static void test_sendrecv_one_thread(void)
{
	ncclComm_t c[2] = { NULL, NULL };
	char *sb[2] = { NULL, NULL }, *rb[2] = { NULL, NULL };
	cudaStream_t us[2] = { U0, U1 };
	char want[160], line[256];
	const char *t;

	mock_set_device(0);
	CHECK(ncclCommInitAll(c, 2, NULL) == ncclSuccess, "%s", ncclGetLastError(NULL));
	if (!c[0] || !c[1])
		return;
	for (int i = 0; i < 2; i++) {
		mock_set_device(i);
		CHECK(ncclMemAlloc((void **)&sb[i], 4096) == ncclSuccess &&
			      ncclMemAlloc((void **)&rb[i], 4096) == ncclSuccess,
		      "%s", ncclGetLastError(NULL));
	}
	/* Twice: the second time everything is cached (nothing to wait for at all). */
	for (int iter = 0; iter < 2 && sb[1] && rb[1]; iter++) {
		mock_trace(1);
		p2p_reset();
		p2p_watch = 1;
		CHECK(ncclGroupStart() == ncclSuccess, "start");
		for (int i = 0; i < 2; i++) {
			int peer = (i + 1) % 2;

			mock_set_device(i);
			CHECK(ncclGroupStart() == ncclSuccess, "inner start");
			CHECK(ncclSend(sb[i], 2, ncclFloat, peer, c[i], us[i]) == ncclSuccess, "%s",
			      ncclGetLastError(NULL));
			CHECK(ncclRecv(rb[i], 2, ncclFloat, peer, c[i], us[i]) == ncclSuccess, "%s",
			      ncclGetLastError(NULL));
			CHECK(ncclGroupEnd() == ncclSuccess, "inner end");
		}
		CHECK(ncclGroupEnd() == ncclSuccess, "%s", ncclGetLastError(NULL));
		p2p_watch = 0;
		t = mock_trace(1);
		CHECK(host_waits == 0,
		      "iteration %d: the host waited on collcd while a rank's send or receive "
		      "waited for the other's: %s",
		      iter, t);
		CHECK(p2p_pending() == 0 && count_of(t, "send rank") == 2 &&
			      count_of(t, "recv rank") == 2,
		      "iteration %d: %d sends or receives unpaired: %s", iter, p2p_pending(), t);
		CHECK(count_of(t, "copy ") == 2, "iteration %d: a copy in per send, none out: %s",
		      iter, t);
		/*
		 * Every send and receive inside one libcollc group, whose end (the
		 * streams' waits) comes before the user streams join the side
		 * streams: a rank's wait must never be ahead of the peer's start.
		 */
		{
			const char *gs = strstr(t, "group start"), *ge = strstr(t, "group end");
			const char *first = strstr(t, "send rank"), *r0 = strstr(t, "recv rank");
			const char *ls = last_of(t, "send rank"), *lr = last_of(t, "recv rank");
			/* The join: the user streams (u...) wait for the side streams. */
			const char *j = gs ? strstr(gs, "wait u") : NULL;

			if (r0 && (!first || r0 < first))
				first = r0;
			CHECK(count_of(t, "group start") == 1 && count_of(t, "group end") == 1 && gs &&
				      ge && first && gs < first && ls && lr && ge > ls && ge > lr &&
				      j && j > ge,
			      "iteration %d: the sends and receives are not one group ended before "
			      "the streams join: %s",
			      iter, t);
		}
		if (iter == 1)
			CHECK(count_of(t, "register") == 0 && count_of(t, "memalloc") == 0,
			      "cached: %s", t);
		for (int i = 0; i < 2; i++) {
			char st[16] = "";
			void *sp = NULL;
			const char *cp;

			snprintf(want, sizeof(want), "send rank %d dev %d on ", i, i);
			if (!line_of(t, want, line, sizeof(line))) {
				CHECK(0, "no send of rank %d on its device: %s", i, t);
				continue;
			}
			sscanf(strstr(line, " on ") + 4, "%15s send %p", st, &sp);
			snprintf(want, sizeof(want), "copy %p <- %p 8 on %s\n", sp, (void *)sb[i],
				 st);
			cp = strstr(t, want);
			CHECK(st[0] == 'S' && sp && sp != sb[i] && cp && cp < strstr(t, line),
			      "rank %d sends from a staging buffer copied on its side stream %s: %s",
			      i, st, t);
			snprintf(want, sizeof(want), "recv rank %d dev %d on S", i, i);
			CHECK(line_of(t, want, line, sizeof(line)), "rank %d's receive: %s", i, t);
			snprintf(want, sizeof(want), "recv %p count 2", (void *)rb[i]);
			CHECK(strstr(line, want), "rank %d receives into its buffer: %s", i, line);
		}
	}
	/*
	 * Rank 1 sends from host memory: found only when the group ends, and
	 * then nothing of the group runs (rank 0's calls would wait for ever).
	 */
	{
		char host_buf[64];
		ncclResult_t res;

		mock_trace(1);
		p2p_reset();
		ncclGroupStart();
		for (int i = 0; i < 2; i++) {
			mock_set_device(i);
			ncclSend(i ? host_buf : sb[i], 2, ncclFloat, (i + 1) % 2, c[i], us[i]);
			ncclRecv(rb[i], 2, ncclFloat, (i + 1) % 2, c[i], us[i]);
		}
		res = ncclGroupEnd();
		t = mock_trace(1);
		CHECK(res == ncclInvalidArgument &&
			      strstr(ncclGetLastError(NULL), "nothing of the group ran") &&
			      strstr(ncclGetLastError(NULL), "not CUDA device memory"),
		      "%d: %s", res, ncclGetLastError(NULL));
		CHECK(count_of(t, "send rank") == 0 && count_of(t, "recv rank") == 0 &&
			      count_of(t, "copy ") == 0,
		      "nothing enqueued: %s", t);
	}
	/* All-to-all of both ranks in one group: the input staged, the output written directly. */
	mock_trace(1);
	p2p_watch = 1;
	ncclGroupStart();
	for (int i = 0; i < 2; i++) {
		mock_set_device(i);
		CHECK(ncclAlltoAll(sb[i], rb[i], 4, ncclFloat, c[i], us[i]) == ncclSuccess, "%s",
		      ncclGetLastError(NULL));
	}
	CHECK(ncclGroupEnd() == ncclSuccess, "%s", ncclGetLastError(NULL));
	p2p_watch = 0;
	t = mock_trace(1);
	CHECK(count_of(t, "copy ") == 2 && count_of(t, "wait u7000 for") == 1 &&
		      count_of(t, "wait u7100 for") == 1,
	      "a copy in per rank, on a staging stream joined back: %s", t);
	for (int i = 0; i < 2; i++) {
		char st[16] = "";
		void *sp = NULL, *rp = NULL;
		const char *cp;

		snprintf(want, sizeof(want), "alltoall rank %d dev %d on ", i, i);
		if (!line_of(t, want, line, sizeof(line))) {
			CHECK(0, "no all-to-all of rank %d: %s", i, t);
			continue;
		}
		sscanf(strstr(line, " on ") + 4, "%15s send %p recv %p", st, &sp, &rp);
		snprintf(want, sizeof(want), "copy %p <- %p 32 on %s\n", sp, (void *)sb[i], st);
		cp = strstr(t, want);
		CHECK(st[0] == 'S' && sp != sb[i] && rp == rb[i] && cp && cp < strstr(t, line),
		      "rank %d: staged input, direct output: %s", i, t);
	}
	for (int i = 0; i < 2; i++) {
		ncclCommDestroy(c[i]);
		ncclMemFree(sb[i]);
		ncclMemFree(rb[i]);
	}
	mock_trace(1);
}

struct split_arg {
	int rank, color, key;
	ncclComm_t out;
	ncclResult_t res;
};

static void *split_thread(void *p)
{
	struct split_arg *a = p;

	mock_set_device(a->rank);
	a->res = ncclCommSplit(comms[a->rank], a->color, a->key, &a->out, NULL);
	return NULL;
}

static void test_split(void)
{
	struct split_arg args[2] = { { 0, 3, 10, NULL, 0 }, { 1, 3, 5, NULL, 0 } };
	pthread_t th[2];
	int r0 = -1, r1 = -1, n = 0;

	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, split_thread, &args[i]);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	CHECK(args[0].res == ncclSuccess && args[1].res == ncclSuccess, "split: %d %d", args[0].res,
	      args[1].res);
	/* Ordered by key: parent rank 1 (key 5) is rank 0 of the new communicator. */
	if (args[0].out && args[1].out) {
		ncclCommUserRank(args[0].out, &r0);
		ncclCommUserRank(args[1].out, &r1);
		ncclCommCount(args[0].out, &n);
	}
	CHECK(r0 == 1 && r1 == 0 && n == 2, "ranks %d %d of %d", r0, r1, n);
	for (int i = 0; i < 2; i++)
		ncclCommDestroy(args[i].out);
	/* Rank 1 opts out. */
	args[1].color = NCCL_SPLIT_NOCOLOR;
	args[1].out = (ncclComm_t)0x1;
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, split_thread, &args[i]);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	CHECK(args[0].res == ncclSuccess && args[1].res == ncclSuccess && args[1].out == NULL,
	      "no color: %d %d %p", args[0].res, args[1].res, (void *)args[1].out);
	if (args[0].out) {
		ncclCommCount(args[0].out, &n);
		CHECK(n == 1, "alone: %d", n);
		ncclCommDestroy(args[0].out);
	}
	mock_trace(1);
}

int main(void)
{
	void *h;

	alarm(60);
	h = dlopen("libcuda.so.1", RTLD_NOW);
	if (!h) {
		printf("SKIP: no mock libcuda.so.1 on LD_LIBRARY_PATH (%s)\n", dlerror());
		return 77;
	}
	mock_log = (void (*)(const char *, ...))dlsym(h, "mock_log");
	mock_trace = (const char *(*)(int))dlsym(h, "mock_trace");
	mock_set_device = (void (*)(int))dlsym(h, "mock_set_device");
	mock_current_device = (int (*)(void))dlsym(h, "mock_current_device");
	mock_name = (const char *(*)(const void *, char *))dlsym(h, "mock_name");
	mock_renew = (void (*)(void *))dlsym(h, "mock_renew");
	if (!mock_log || !mock_trace || !mock_set_device || !mock_current_device || !mock_name ||
	    !mock_renew) {
		printf("SKIP: libcuda.so.1 on LD_LIBRARY_PATH is not the mock\n");
		return 77;
	}
	test_init_group();
	if (comms[0] && comms[1]) {
		test_buffers();
		test_group_order();
		test_p2p_fork();
		test_sendrecv_one_thread();
		test_split();
	}
	for (int i = 0; i < 2; i++)
		ncclCommDestroy(comms[i]);
	printf("%s\n", failed ? "FAIL" : "PASS");
	return failed;
}
