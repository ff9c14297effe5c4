/* SPDX-License-Identifier: MIT */
/*
 * Collectives, point to point and groups. Every call goes to collc's
 * stream-ordered form on the caller's stream (it returns once enqueued, and
 * records into a graph while the stream is captured). Outside a group a call
 * is issued at once; inside one (ncclGroupStart nests, per thread as in NCCL)
 * calls are checked at once and issued at the outermost ncclGroupEnd in call
 * order, after the communicators that the group initializes have joined.
 *
 * Sends and receives of one group progress together: on one stream they
 * would run one after the other, and a send whose receiver first sends to us
 * would wait forever. So when a group holds more than one of them (or one
 * and a collective) for the same communicator and stream, the stream forks: each runs on a side stream
 * of the communicator that waits for the caller's stream (an event), and the
 * caller's stream waits for all of them. Events fork and join captured
 * streams as well, so a captured group replays the same way.
 *
 * A group's end registers and stages every call before it enqueues any:
 * an enqueued send makes its stream wait for the peer's receive, and one
 * thread may be submitting for every rank (nccl-tests' -g), so nothing may
 * wait on the host for collcd between two ranks' calls.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl/internal.h"

enum op_kind {
	OP_INIT,
	OP_ALLREDUCE,
	OP_ALLGATHER,
	OP_REDUCE_SCATTER,
	OP_BROADCAST,
	OP_REDUCE,
	OP_ALLTOALL,
	OP_SEND,
	OP_RECV,
};

static const char *const op_call[] = {
	[OP_INIT] = "ncclGroupEnd",       [OP_ALLREDUCE] = "ncclAllReduce",
	[OP_ALLGATHER] = "ncclAllGather", [OP_REDUCE_SCATTER] = "ncclReduceScatter",
	[OP_BROADCAST] = "ncclBroadcast", [OP_REDUCE] = "ncclReduce",
	[OP_ALLTOALL] = "ncclAlltoAll",   [OP_SEND] = "ncclSend",
	[OP_RECV] = "ncclRecv",
};

struct op {
	enum op_kind kind;
	struct ncclComm *comm;
	const void *send;
	void *recv;
	size_t count;
	size_t send_bytes, recv_bytes; /* what the call reads and writes (0: not touched) */
	collc_dtype dtype;
	collc_redop redop;
	int root; /* root, or peer of a send or receive */
	cudaStream_t stream;
	int side; /* side stream of comm it runs on, -1: the caller's stream */
	/* Set by prepare(): send or receive side staged, in place, the staging buffer. */
	int ss, rs, in_place;
	char *stage;
	size_t stage_off; /* where the staged output starts in stage */
};

#define GROUP_MAX_DEPTH 1024

/* The calling thread's group (NCCL's groups are per thread). */
static __thread struct {
	int depth;
	ncclResult_t err;   /* the first failed call inside the group */
	char err_text[512]; /* its last error */
	struct op *ops;
	size_t n, cap;
} grp;

int collc__nccl_group_depth(void)
{
	return grp.depth;
}

static ncclResult_t group_push(const struct op *o, const char *call)
{
	if (grp.n == grp.cap) {
		size_t cap = grp.cap ? 2 * grp.cap : 16;
		struct op *n = realloc(grp.ops, cap * sizeof(*n));

		if (!n)
			return collc__nccl_fail(ncclSystemError, call, "out of memory");
		grp.ops = n;
		grp.cap = cap;
	}
	grp.ops[grp.n++] = *o;
	return ncclSuccess;
}

ncclResult_t collc__nccl_group_add_init(struct ncclComm *comm)
{
	struct op o = { .kind = OP_INIT, .comm = comm, .side = -1 };

	return group_push(&o, "ncclCommInitRank");
}

int collc__nccl_group_uses(const struct ncclComm *comm)
{
	for (size_t i = 0; i < grp.n; i++)
		if (grp.ops[i].comm == comm)
			return 1;
	return 0;
}

/* A failed call inside a group fails the whole group at ncclGroupEnd, as in NCCL. */
ncclResult_t collc__nccl_group_fail(ncclResult_t res)
{
	if (res != ncclSuccess && grp.depth > 0 && grp.err == ncclSuccess) {
		grp.err = res;
		snprintf(grp.err_text, sizeof(grp.err_text), "%s", ncclGetLastError(NULL));
	}
	return res;
}

void collc__nccl_side_free(struct ncclComm *comm)
{
	for (size_t i = 0; i < comm->nside; i++) {
		collc__cu_stream_destroy(comm->side[i]);
		collc__cu_event_destroy(comm->side_done[i]);
	}
	collc__cu_event_destroy(comm->fork_ev);
	free(comm->side);
	free(comm->side_done);
	comm->side = comm->side_done = NULL;
	comm->fork_ev = NULL;
	comm->nside = 0;
}

/* At least n side streams (made in the communicator's device's context). */
static int side_reserve(struct ncclComm *comm, size_t n)
{
	void **s, **e;
	int r = 0;

	if (comm->nside >= n)
		return 0;
	s = realloc(comm->side, n * sizeof(*s));
	if (s)
		comm->side = s;
	e = realloc(comm->side_done, n * sizeof(*e));
	if (e)
		comm->side_done = e;
	if (!s || !e)
		return -ENOMEM;
	if (collc__cu_push_device(comm->device) < 0)
		return -ENODEV;
	if (!comm->fork_ev)
		r = collc__cu_event_create(&comm->fork_ev);
	while (r == 0 && comm->nside < n) {
		r = collc__cu_stream_create(&comm->side[comm->nside]);
		if (r < 0)
			break;
		r = collc__cu_event_create(&comm->side_done[comm->nside]);
		if (r < 0) {
			collc__cu_stream_destroy(comm->side[comm->nside]);
			break;
		}
		comm->nside++;
	}
	collc__cu_pop();
	return r;
}

static ncclResult_t no_stream_forms(const char *call)
{
	return collc__nccl_fail(ncclInvalidUsage, call,
				"this libcollc.so.1 has no stream-ordered collectives: install the "
				"libcollc built with libnccl-collc");
}

/* o's stream-ordered form with these buffers on s; -ENOSYS when libcollc lacks it. */
static int stream_form(const struct op *o, const void *send, void *recv, struct CUstream_st *s)
{
	struct collc_comm *cc = o->comm->cc;

	switch (o->kind) {
	case OP_ALLREDUCE:
		if (collc_allreduce_stream)
			return collc_allreduce_stream(cc, send, recv, o->count, o->dtype, o->redop,
						      s);
		break;
	case OP_ALLGATHER:
		if (collc_allgather_stream)
			return collc_allgather_stream(cc, send, recv, o->count, o->dtype, s);
		break;
	case OP_REDUCE_SCATTER:
		if (collc_reduce_scatter_stream)
			return collc_reduce_scatter_stream(cc, send, recv, o->count, o->dtype,
							   o->redop, s);
		break;
	case OP_BROADCAST:
		if (collc_broadcast_stream)
			return collc_broadcast_stream(cc, send, recv, o->count, o->dtype, o->root,
						      s);
		break;
	case OP_REDUCE:
		if (collc_reduce_stream)
			return collc_reduce_stream(cc, send, recv, o->count, o->dtype, o->redop,
						   o->root, s);
		break;
	case OP_ALLTOALL:
		if (collc_alltoall_stream)
			return collc_alltoall_stream(cc, send, recv, o->count, o->dtype, s);
		break;
	case OP_SEND:
		if (collc_send_stream)
			return collc_send_stream(cc, send, o->count, o->dtype, o->root, s);
		break;
	case OP_RECV:
		if (collc_recv_stream)
			return collc_recv_stream(cc, recv, o->count, o->dtype, o->root, s);
		break;
	case OP_INIT:
		return 0;
	}
	return -ENOSYS;
}

#define STAGE_ALIGN 256

/* Does this kind copy between ranks' buffers in collcd (send/recv, all-to-all)? */
static int is_copy(const struct op *o)
{
	return o->kind == OP_ALLTOALL || o->kind == OP_SEND || o->kind == OP_RECV;
}

/*
 * Everything o needs before it can be enqueued, all of which may wait on the
 * host for collcd (registration, a staging buffer, the staging stream): the
 * buffers registered, which of them go through a staging buffer, and that
 * buffer. Nothing is enqueued yet.
 *
 * Every buffer the shim registers is a CUDA IPC import in collcd, which maps
 * it for its own GPU only, and collcd's copy collectives need one side that
 * peers can read (it pulls from a readable input or pushes into a readable
 * output). So a send to another rank and an all-to-all take their input from
 * the staging buffer (collc memory, readable by every GPU): one
 * device-to-device copy of the input; the receiving side writes the user's
 * buffer directly, with no copy out.
 */
static ncclResult_t prepare(struct op *o)
{
	struct ncclComm *comm = o->comm;
	const char *call = op_call[o->kind];
	uintptr_t sp = (uintptr_t)o->send, rp = (uintptr_t)o->recv;
	/* collc has no in-place all-to-all: overlapping input goes through a staging buffer. */
	int overlap = o->kind == OP_ALLTOALL && sp < rp + o->recv_bytes && rp < sp + o->send_bytes;
	size_t lane = (size_t)(o->side + 1), need;
	ncclResult_t res = ncclSuccess;
	int r;

	o->ss = o->rs = 0;
	o->stage = NULL;
	o->stage_off = 0;
	/* In place: the send buffer's registration covers the receive buffer. */
	o->in_place = !overlap && o->recv == o->send && o->recv_bytes <= o->send_bytes;
	if (comm->init_result != ncclSuccess)
		return collc__nccl_fail(ncclInvalidUsage, call, "comm failed to initialize");
	if (o->kind == OP_INIT)
		return ncclSuccess;
	if (o->send_bytes)
		res = collc__nccl_reg(comm, o->send, o->send_bytes, call, &o->ss);
	if (res == ncclSuccess && o->recv_bytes && o->in_place)
		o->rs = o->ss;
	else if (res == ncclSuccess && o->recv_bytes)
		res = collc__nccl_reg(comm, o->recv, o->recv_bytes, call, &o->rs);
	if (res != ncclSuccess)
		return res;
	if (overlap ||
	    (is_copy(o) && o->send_bytes && !(o->kind == OP_SEND && o->root == comm->rank)))
		o->ss = 1;
	if (!o->ss && !o->rs)
		return ncclSuccess;
	if (o->ss)
		o->stage_off = (o->send_bytes + STAGE_ALIGN - 1) / STAGE_ALIGN * STAGE_ALIGN;
	need = o->stage_off + (o->rs && !o->in_place ? o->recv_bytes : 0);
	r = collc__nccl_stage(comm, lane, need, (void **)&o->stage);
	if (r == 0 && lane == 0 && !comm->stage_stream) {
		if (collc__cu_push_device(comm->device) < 0)
			return collc__nccl_errno(-ENODEV, call, "staging a buffer");
		r = collc__cu_stream_create(&comm->stage_stream);
		if (r == 0)
			r = collc__cu_event_create(&comm->stage_fork);
		if (r == 0)
			r = collc__cu_event_create(&comm->stage_done);
		collc__cu_pop();
	}
	if (r < 0)
		return collc__nccl_errno(r, call, "staging a buffer");
	return ncclSuccess;
}

/*
 * o (prepared) with its staged buffers copied through its staging buffer:
 * in, the call, out, all on the lane's stream. Lane 0 (calls on the caller's
 * stream) is the communicator's staging stream, forked from the caller's
 * stream and joined back; a send or receive on side stream j is lane j + 1
 * and stays there. Enqueues only: nothing here waits on the host.
 */
static int enqueue_staged(const struct op *o, struct CUstream_st *s)
{
	struct ncclComm *comm = o->comm;
	struct CUstream_st *ls = s;
	const void *send = o->send;
	void *recv = o->recv;
	int r = 0;

	if (o->side < 0) {
		ls = comm->stage_stream;
		r = collc__cu_event_record(comm->stage_fork, s);
		if (r == 0)
			r = collc__cu_stream_wait_event(ls, comm->stage_fork);
		if (r < 0)
			return r;
	}
	if (o->ss) {
		r = collc__cu_copy_async(o->stage, o->send, o->send_bytes, ls);
		send = o->stage;
	}
	if (o->rs)
		recv = o->in_place ? o->stage : o->stage + o->stage_off;
	if (r == 0)
		r = stream_form(o, send, recv, ls);
	if (r == 0 && o->rs)
		r = collc__cu_copy_async(o->recv, recv, o->recv_bytes, ls);
	/* The caller's stream goes on after the copy out, whatever failed before it. */
	if (o->side < 0 && collc__cu_event_record(comm->stage_done, ls) == 0)
		collc__cu_stream_wait_event(s, comm->stage_done);
	return r;
}

/* Enqueues o (prepared) on stream. */
static ncclResult_t enqueue(const struct op *o, cudaStream_t stream)
{
	const char *call = op_call[o->kind];
	struct CUstream_st *s = (struct CUstream_st *)stream;
	int r;

	if (o->kind == OP_INIT)
		return ncclSuccess;
	if (o->ss || o->rs)
		r = enqueue_staged(o, s);
	else
		r = stream_form(o, o->send, o->recv, s);
	if (r == -ENOSYS)
		return no_stream_forms(call);
	if (r < 0)
		return collc__nccl_errno(r, call,
					 o->ss || o->rs ? "staging a buffer or calling collc"
							: "collc refused the call");
	return ncclSuccess;
}

/* Runs one phase of o (prepare or enqueue) with its communicator's device current. */
static ncclResult_t on_device(struct op *o, int phase_enqueue)
{
	cudaStream_t s = o->side >= 0 ? (cudaStream_t)o->comm->side[o->side] : o->stream;
	int cur = -1, pushed = 0;
	ncclResult_t res;

	if (collc__cu_ctx_device(&cur) < 0 || cur != o->comm->device)
		pushed = collc__cu_push_device(o->comm->device) == 0;
	res = phase_enqueue ? enqueue(o, s) : prepare(o);
	if (pushed)
		collc__cu_pop();
	return res;
}

/* A call outside a group: prepared, then enqueued on its stream. */
static ncclResult_t issue_on_device(struct op *o)
{
	ncclResult_t res = on_device(o, 0);

	return res == ncclSuccess ? on_device(o, 1) : res;
}

struct init_job {
	struct ncclComm *comm;
	pthread_t thread;
	int started;
};

static void *init_thread(void *arg)
{
	struct init_job *j = arg;

	j->comm->init_result = collc__nccl_comm_join(j->comm, "ncclGroupEnd");
	return NULL;
}

/* Joins the group's new communicators, all at once: collc's join waits for every rank. */
static ncclResult_t run_inits(struct op *ops, size_t n)
{
	struct init_job *jobs;
	ncclResult_t res = ncclSuccess;
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += ops[i].kind == OP_INIT;
	if (k == 0)
		return ncclSuccess;
	if (k == 1) {
		for (size_t i = 0; i < n; i++)
			if (ops[i].kind == OP_INIT)
				return ops[i].comm->init_result =
					       collc__nccl_comm_join(ops[i].comm, "ncclGroupEnd");
	}
	jobs = calloc(k, sizeof(*jobs));
	if (!jobs)
		res = collc__nccl_fail(ncclSystemError, "ncclGroupEnd", "out of memory");
	k = 0;
	for (size_t i = 0; i < n; i++) {
		if (ops[i].kind != OP_INIT)
			continue;
		if (!jobs) {
			ops[i].comm->init_result = ncclSystemError;
			continue;
		}
		jobs[k].comm = ops[i].comm;
		jobs[k].started = pthread_create(&jobs[k].thread, NULL, init_thread, &jobs[k]) == 0;
		if (!jobs[k].started)
			ops[i].comm->init_result = collc__nccl_fail(ncclSystemError, "ncclGroupEnd",
								    "cannot start a thread");
		k++;
	}
	for (size_t i = 0; jobs && i < k; i++) {
		if (jobs[i].started)
			pthread_join(jobs[i].thread, NULL);
		if (res == ncclSuccess && jobs[i].comm->init_result != ncclSuccess)
			res = jobs[i].comm->init_result;
	}
	free(jobs);
	return res;
}

static int is_p2p(const struct op *o)
{
	return o->kind == OP_SEND || o->kind == OP_RECV;
}

/*
 * Gives every send and receive that shares its communicator and stream with
 * another one of the group a side stream of its own, forked from that stream.
 */
static int fork_p2p(struct op *ops, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct ncclComm *comm = ops[i].comm;
		size_t k = 0, others = 0, next;
		int r;

		if (!is_p2p(&ops[i]) || ops[i].side >= 0 || comm->init_result != ncclSuccess)
			continue;
		for (size_t j = i; j < n; j++)
			k += is_p2p(&ops[j]) && ops[j].comm == comm &&
			     ops[j].stream == ops[i].stream && ops[j].side < 0;
		/* A collective on the same stream would also run before or after it, not beside. */
		for (size_t j = 0; j < n; j++)
			others += !is_p2p(&ops[j]) && ops[j].kind != OP_INIT &&
				  ops[j].comm == comm && ops[j].stream == ops[i].stream;
		if (k < 2 && others == 0)
			continue;
		/* Side streams already given out in this group come first. */
		next = 0;
		for (size_t j = 0; j < n; j++)
			if (ops[j].comm == comm && ops[j].side >= 0 && (size_t)ops[j].side >= next)
				next = (size_t)ops[j].side + 1;
		r = side_reserve(comm, next + k);
		if (r == 0)
			r = collc__cu_event_record(comm->fork_ev, ops[i].stream);
		for (size_t j = 0; r == 0 && j < k; j++)
			r = collc__cu_stream_wait_event(comm->side[next + j], comm->fork_ev);
		if (r < 0)
			return r;
		for (size_t j = i, s = next; j < n; j++)
			if (is_p2p(&ops[j]) && ops[j].comm == comm &&
			    ops[j].stream == ops[i].stream && ops[j].side < 0)
				ops[j].side = (int)s++;
	}
	return 0;
}

/* The caller's streams wait for the side streams their sends and receives ran on. */
static int join_p2p(struct op *ops, size_t n)
{
	int r = 0;

	for (size_t i = 0; r == 0 && i < n; i++) {
		struct ncclComm *comm = ops[i].comm;

		if (ops[i].side < 0)
			continue;
		r = collc__cu_event_record(comm->side_done[ops[i].side], comm->side[ops[i].side]);
		if (r == 0)
			r = collc__cu_stream_wait_event(ops[i].stream,
							comm->side_done[ops[i].side]);
	}
	return r;
}

static ncclResult_t group_run(struct op *ops, size_t n)
{
	ncclResult_t res = run_inits(ops, n), r1, failed = res;
	char failed_text[512] = "";
	size_t calls = 0;
	int r;

	for (size_t i = 0; i < n; i++)
		calls += ops[i].kind != OP_INIT;
	if (calls == 0)
		return res;
	/* A communicator that failed to join fails the calls on it: its error comes first. */
	if (res != ncclSuccess)
		snprintf(failed_text, sizeof(failed_text), "%s", ncclGetLastError(NULL));
	r = fork_p2p(ops, n);
	if (r < 0)
		return collc__nccl_fail(ncclUnhandledCudaError, "ncclGroupEnd",
					"cannot fork the stream of grouped sends and receives "
					"(side streams and events)");
	/*
	 * Two passes. Everything that may wait on the host (registrations,
	 * staging buffers: round trips to collcd) runs for every call first, and
	 * only then is anything enqueued: once one rank's send is enqueued its
	 * stream waits for the peer's submission, so the host must not wait on
	 * collcd before that peer's calls are in.
	 */
	for (size_t i = 0; i < n; i++) {
		if (ops[i].kind == OP_INIT)
			continue;
		r1 = on_device(&ops[i], 0);
		if (r1 != ncclSuccess && failed == ncclSuccess) {
			failed = r1;
			snprintf(failed_text, sizeof(failed_text), "%s", ncclGetLastError(NULL));
		}
	}
	/*
	 * A call that cannot be prepared (a buffer that is no device memory, no
	 * staging buffer, a communicator that did not join) fails the group as a
	 * failed check does: nothing of it is enqueued, so no rank this thread
	 * drives waits for a partner that will never come.
	 */
	if (failed != ncclSuccess)
		return collc__nccl_fail(failed, "ncclGroupEnd", "nothing of the group ran: %s",
					failed_text);
	/*
	 * Enqueue everything even after one enqueue failed, so peers are not
	 * left waiting; as one libcollc group, so every call's start is on its
	 * stream before any call's wait (collc_group_start(): with several
	 * ranks on one GPU, a wait could otherwise hold the queue a peer's
	 * start needs).
	 */
	if (collc_group_start)
		collc_group_start();
	for (size_t i = 0; i < n; i++) {
		if (ops[i].kind == OP_INIT)
			continue;
		r1 = on_device(&ops[i], 1);
		if (res == ncclSuccess)
			res = r1;
	}
	if (collc_group_end && collc_group_end() < 0 && res == ncclSuccess)
		res = collc__nccl_fail(ncclUnhandledCudaError, "ncclGroupEnd",
				       "cannot enqueue the group's waits on its streams");
	if (join_p2p(ops, n) < 0 && res == ncclSuccess)
		res = collc__nccl_fail(
			ncclUnhandledCudaError, "ncclGroupEnd",
			"cannot join the side streams of grouped sends and receives");
	return res;
}

SHIM_EXPORT ncclResult_t ncclGroupStart(void)
{
	if (grp.depth >= GROUP_MAX_DEPTH)
		return collc__nccl_fail(ncclInvalidUsage, "ncclGroupStart",
					"groups nested deeper than %d", GROUP_MAX_DEPTH);
	if (grp.depth++ == 0)
		grp.err = ncclSuccess;
	return ncclSuccess;
}
SHIM_ALIAS(ncclGroupStart);

SHIM_EXPORT ncclResult_t ncclGroupEnd(void)
{
	ncclResult_t res;

	if (grp.depth == 0)
		return collc__nccl_fail(ncclInvalidUsage, "ncclGroupEnd",
					"not in a group (ncclGroupEnd without ncclGroupStart)");
	if (--grp.depth > 0)
		return ncclSuccess;
	res = grp.err;
	if (res == ncclSuccess) {
		res = group_run(grp.ops, grp.n);
	} else {
		/* Nothing of a failed group runs; its new communicators stay unusable. */
		collc__nccl_fail(res, "ncclGroupEnd", "nothing of the group ran: %s", grp.err_text);
		for (size_t i = 0; i < grp.n; i++)
			if (grp.ops[i].kind == OP_INIT)
				grp.ops[i].comm->init_result = res;
	}
	grp.n = 0;
	grp.err = ncclSuccess;
	return res;
}
SHIM_ALIAS(ncclGroupEnd);

/* A communicator a call may name: live, or being initialized by the caller's open group. */
static ncclResult_t check_comm(const struct ncclComm *comm, const char *call)
{
	if (comm && comm->magic == SHIM_COMM_MAGIC && comm->init_result == ncclInProgress &&
	    grp.depth > 0 && collc__nccl_group_uses(comm))
		return ncclSuccess;
	return collc__nccl_check_comm(comm, call);
}

/* Element count times mult in bytes; 0 on overflow. */
static int bytes_of(size_t count, size_t es, size_t mult, size_t *ret)
{
	size_t b;

	if (__builtin_mul_overflow(count, es, &b) || __builtin_mul_overflow(b, mult, &b))
		return -EOVERFLOW;
	*ret = b;
	return 0;
}

/*
 * Checks what every call has (comm, dtype, op, root or peer), fills o and
 * issues it now, or queues it in the open group.
 */
static ncclResult_t submit(struct op *o, ncclComm_t comm, ncclDataType_t datatype, int redop,
			   int use_redop, int root, int use_root, size_t send_mult,
			   size_t recv_mult)
{
	const char *call = op_call[o->kind];
	ncclResult_t res;
	size_t es;

	if (collc__nccl_dtype(datatype, &o->dtype) < 0)
		return collc__nccl_group_fail(
			collc__nccl_fail(ncclInvalidArgument, call,
					 "datatype %d is not an ncclDataType_t", (int)datatype));
	if (use_redop && (redop < 0 || redop >= ncclNumOps))
		return collc__nccl_group_fail(
			collc__nccl_fail(ncclInvalidArgument, call,
					 "op %d is no built-in reduction (custom operators from "
					 "ncclRedOpCreatePreMulSum are not supported by collc)",
					 redop));
	res = check_comm(comm, call);
	if (res != ncclSuccess)
		return collc__nccl_group_fail(res);
	if (use_root && (root < 0 || root >= comm->nranks))
		return collc__nccl_group_fail(
			collc__nccl_fail(ncclInvalidArgument, call, "%s %d is not in [0, %d)",
					 is_p2p(o) ? "peer" : "root", root, comm->nranks));
	o->comm = comm;
	o->redop = (collc_redop)redop;
	o->root = root;
	o->side = -1;
	es = collc_dtype_size(o->dtype);
	if (bytes_of(o->count, es, send_mult, &o->send_bytes) < 0 ||
	    bytes_of(o->count, es, recv_mult, &o->recv_bytes) < 0)
		return collc__nccl_group_fail(collc__nccl_fail(ncclInvalidArgument, call,
							       "count %zu overflows", o->count));
	if (o->count == 0)
		return ncclSuccess; /* NCCL: nothing to do, on any rank */
	if ((o->send_bytes && !o->send) || (o->recv_bytes && !o->recv))
		return collc__nccl_group_fail(
			collc__nccl_fail(ncclInvalidArgument, call, "%s is NULL",
					 o->send_bytes && !o->send ? "sendbuff" : "recvbuff"));
	if (grp.depth > 0)
		return collc__nccl_group_fail(group_push(o, call));
	return issue_on_device(o);
}

SHIM_EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
				       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
				       cudaStream_t stream)
{
	struct op o = { .kind = OP_ALLREDUCE,
			.send = sendbuff,
			.recv = recvbuff,
			.count = count,
			.stream = stream };

	return submit(&o, comm, datatype, op, 1, 0, 0, 1, 1);
}
SHIM_ALIAS(ncclAllReduce);

SHIM_EXPORT ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
				       ncclDataType_t datatype, ncclComm_t comm,
				       cudaStream_t stream)
{
	struct op o = { .kind = OP_ALLGATHER,
			.send = sendbuff,
			.recv = recvbuff,
			.count = sendcount,
			.stream = stream };

	return submit(&o, comm, datatype, 0, 0, 0, 0, 1, comm ? (size_t)comm->nranks : 1);
}
SHIM_ALIAS(ncclAllGather);

SHIM_EXPORT ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
					   ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
					   cudaStream_t stream)
{
	struct op o = { .kind = OP_REDUCE_SCATTER,
			.send = sendbuff,
			.recv = recvbuff,
			.count = recvcount,
			.stream = stream };

	return submit(&o, comm, datatype, op, 1, 0, 0, comm ? (size_t)comm->nranks : 1, 1);
}
SHIM_ALIAS(ncclReduceScatter);

SHIM_EXPORT ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
				       ncclDataType_t datatype, int root, ncclComm_t comm,
				       cudaStream_t stream)
{
	struct op o = { .kind = OP_BROADCAST,
			.send = sendbuff,
			.recv = recvbuff,
			.count = count,
			.stream = stream };
	/* Only the root's send buffer is read. */
	int at_root = comm && comm->magic == SHIM_COMM_MAGIC && comm->rank == root;

	return submit(&o, comm, datatype, 0, 0, root, 1, at_root, 1);
}
SHIM_ALIAS(ncclBroadcast);

SHIM_EXPORT ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
				   ncclComm_t comm, cudaStream_t stream)
{
	return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}
SHIM_ALIAS(ncclBcast);

SHIM_EXPORT ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
				    ncclDataType_t datatype, ncclRedOp_t op, int root,
				    ncclComm_t comm, cudaStream_t stream)
{
	struct op o = { .kind = OP_REDUCE,
			.send = sendbuff,
			.recv = recvbuff,
			.count = count,
			.stream = stream };
	/* Only the root's receive buffer is written. */
	int at_root = comm && comm->magic == SHIM_COMM_MAGIC && comm->rank == root;

	return submit(&o, comm, datatype, op, 1, root, 1, 1, at_root);
}
SHIM_ALIAS(ncclReduce);

SHIM_EXPORT ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
				      ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
	struct op o = { .kind = OP_ALLTOALL,
			.send = sendbuff,
			.recv = recvbuff,
			.count = count,
			.stream = stream };
	size_t n = comm ? (size_t)comm->nranks : 1;

	return submit(&o, comm, datatype, 0, 0, 0, 0, n, n);
}
SHIM_ALIAS(ncclAlltoAll);

SHIM_EXPORT ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
				  int peer, ncclComm_t comm, cudaStream_t stream)
{
	struct op o = { .kind = OP_SEND, .send = sendbuff, .count = count, .stream = stream };

	return submit(&o, comm, datatype, 0, 0, peer, 1, 1, 0);
}
SHIM_ALIAS(ncclSend);

SHIM_EXPORT ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
				  ncclComm_t comm, cudaStream_t stream)
{
	struct op o = { .kind = OP_RECV, .recv = recvbuff, .count = count, .stream = stream };

	return submit(&o, comm, datatype, 0, 0, peer, 1, 0, 1);
}
SHIM_ALIAS(ncclRecv);

/*
 * Gather and scatter are grouped sends and receives, as NCCL runs them: the
 * root's own block is a send to itself (collc's point to point allows it).
 */
static ncclResult_t gather_scatter(int scatter, const void *sendbuff, void *recvbuff, size_t count,
				   ncclDataType_t datatype, int root, ncclComm_t comm,
				   cudaStream_t stream)
{
	const char *call = scatter ? "ncclScatter" : "ncclGather";
	ncclResult_t res = check_comm(comm, call), r2;
	collc_dtype dt = COLLC_INT8;
	size_t bytes = 0;

	if (res == ncclSuccess && collc__nccl_dtype(datatype, &dt) < 0)
		res = collc__nccl_fail(ncclInvalidArgument, call,
				       "datatype %d is not an ncclDataType_t", (int)datatype);
	if (res == ncclSuccess && (root < 0 || root >= comm->nranks))
		res = collc__nccl_fail(ncclInvalidArgument, call, "root %d is not in [0, %d)", root,
				       comm->nranks);
	if (res == ncclSuccess &&
	    bytes_of(count, collc_dtype_size(dt), (size_t)comm->nranks, &bytes) < 0)
		res = collc__nccl_fail(ncclInvalidArgument, call, "count %zu overflows", count);
	if (res != ncclSuccess)
		return collc__nccl_group_fail(res);
	bytes /= (size_t)comm->nranks;
	res = ncclGroupStart();
	if (res != ncclSuccess)
		return collc__nccl_group_fail(res);
	if (scatter) {
		if (comm->rank == root)
			for (int p = 0; res == ncclSuccess && p < comm->nranks; p++)
				res = ncclSend((const char *)sendbuff + (size_t)p * bytes, count,
					       datatype, p, comm, stream);
		if (res == ncclSuccess)
			res = ncclRecv(recvbuff, count, datatype, root, comm, stream);
	} else {
		res = ncclSend(sendbuff, count, datatype, root, comm, stream);
		if (comm->rank == root)
			for (int p = 0; res == ncclSuccess && p < comm->nranks; p++)
				res = ncclRecv((char *)recvbuff + (size_t)p * bytes, count,
					       datatype, p, comm, stream);
	}
	r2 = ncclGroupEnd();
	return res != ncclSuccess ? res : r2;
}

SHIM_EXPORT ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
				    ncclDataType_t datatype, int root, ncclComm_t comm,
				    cudaStream_t stream)
{
	return gather_scatter(0, sendbuff, recvbuff, count, datatype, root, comm, stream);
}
SHIM_ALIAS(ncclGather);

SHIM_EXPORT ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
				     ncclDataType_t datatype, int root, ncclComm_t comm,
				     cudaStream_t stream)
{
	return gather_scatter(1, sendbuff, recvbuff, count, datatype, root, comm, stream);
}
SHIM_ALIAS(ncclScatter);
