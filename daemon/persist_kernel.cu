/* SPDX-License-Identifier: MIT */
/*
 * The persistent grid: one per GPU, resident for collcd's life (between
 * quiesce windows). Block 0's warp 0 is the only reader of host memory: lane
 * l of that warp polls work FIFO l and copies each new item into device
 * memory; the channel blocks wait on device memory only (and read their host
 * abort word every 2^16 spins). Each channel block runs every item of its
 * lane in FIFO order, mirroring cpu/executor.c: ring algorithms over Simple, LL
 * or LL128 connections in the receiver's memory, or one-shot / two-shot over
 * peer buffers, then publishes work_consumed for its channel.
 *
 * Orderings, by name (see proto/prims.h for S1/R1/S2/R2, W-LL/R-LL, W128/R128):
 *   G1 (poller): item copied into device memory, then dseq with release
 *      (gpu scope); pairs with G1' in a channel block's acquire of dseq.
 *   G2 (poller): dseq, then stop_epoch with release; pairs with G2' (a block
 *      that sees stop re-reads dseq before it exits).
 *   E1 (block): results stored, system fence, then work_consumed; pairs with
 *      F1/F2 in the scheduler.
 *   O1 (one-shot): buffers / pointers, system fence, then the slot flag;
 *      pairs with O1' (acquire of the flag before peer data is read).
 *   One-shot LL pushes W-LL lines into peers' inboxes and reuses an inbox
 *   slot by OLL1 (proto/prims.h); no fence, no barrier.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* The proto/ headers are C11; in C++ their asserts are static_assert. */
#define _Static_assert static_assert
#include "daemon/cuda/grid.h"
#include "include/collc.h"
#include "proto/shm.h"

#define FULL_MASK 0xffffffffu

/* Memory access helpers */

__device__ __forceinline__ uint64_t ld_acq_sys(const uint64_t *p)
{
	uint64_t v;

	asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

__device__ __forceinline__ uint64_t ld_acq_gpu(const uint64_t *p)
{
	uint64_t v;

	asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

__device__ __forceinline__ uint64_t ld_vol64(const uint64_t *p)
{
	uint64_t v;

	asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

__device__ __forceinline__ uint32_t ld_vol32(const uint32_t *p)
{
	uint32_t v;

	asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

__device__ __forceinline__ void st_vol64(uint64_t *p, uint64_t v)
{
	asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void st_rel_gpu(uint64_t *p, uint64_t v)
{
	asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void st_rel_sys(uint64_t *p, uint64_t v)
{
	asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ uint4 ld_vol128(const void *p)
{
	uint4 v;

	asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
		     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
		     : "l"(p)
		     : "memory");
	return v;
}

__device__ __forceinline__ void st_vol128(void *p, uint4 v)
{
	asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y),
		     "r"(v.z), "r"(v.w)
		     : "memory");
}

__device__ __forceinline__ void ld_vol2x64(const void *p, uint64_t &a, uint64_t &b)
{
	asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}

__device__ __forceinline__ void st_vol2x64(void *p, uint64_t a, uint64_t b)
{
	asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}

/* Payload loads bypass L1: other SMs, GPUs and processes write these buffers. */
__device__ __forceinline__ uint4 ld_data(const void *p)
{
	return __ldcg((const uint4 *)p);
}

__device__ __forceinline__ void st_data(void *p, uint4 v)
{
	__stcg((uint4 *)p, v);
}

/* Reductions on 8-byte words of packed elements */

template <typename S, typename U>
__device__ __forceinline__ uint64_t red_int(int op, uint64_t a, uint64_t b)
{
	constexpr int N = 8 / sizeof(S);
	union {
		uint64_t u;
		S s[N];
	} x, y;

	x.u = a;
	y.u = b;
#pragma unroll
	for (int i = 0; i < N; i++) {
		S p = x.s[i], q = y.s[i];

		switch (op) {
		case COLLC_PROD:
			x.s[i] = (S)(U)((U)p * (U)q);
			break;
		case COLLC_MAX:
			x.s[i] = p > q ? p : q;
			break;
		case COLLC_MIN:
			x.s[i] = p < q ? p : q;
			break;
		default: /* SUM, AVG */
			x.s[i] = (S)(U)((U)p + (U)q);
			break;
		}
	}
	return x.u;
}

__device__ __forceinline__ float fop(int op, float p, float q)
{
	switch (op) {
	case COLLC_PROD:
		return p * q;
	case COLLC_MAX:
		return p > q ? p : q;
	case COLLC_MIN:
		return p < q ? p : q;
	default:
		return p + q;
	}
}

__device__ __forceinline__ double dop(int op, double p, double q)
{
	switch (op) {
	case COLLC_PROD:
		return p * q;
	case COLLC_MAX:
		return p > q ? p : q;
	case COLLC_MIN:
		return p < q ? p : q;
	default:
		return p + q;
	}
}

__device__ __forceinline__ float h2f(uint16_t h)
{
	return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ uint16_t f2h(float f)
{
	return __half_as_ushort(__float2half_rn(f));
}

__device__ __forceinline__ float b2f(uint16_t h)
{
	return __bfloat162float(__ushort_as_bfloat16(h));
}

__device__ __forceinline__ uint16_t f2b(float f)
{
	return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

/* float16 and bfloat16 reduce in float32, rounded back after every step (as reduce.c). */
__device__ __forceinline__ uint64_t red8(int dt, int op, uint64_t a, uint64_t b)
{
	union {
		uint64_t u;
		uint16_t h[4];
		uint32_t w[2];
		float f[2];
		double d;
	} x, y;

	x.u = a;
	y.u = b;
	switch (dt) {
	case COLLC_INT8:
		return red_int<int8_t, uint8_t>(op, a, b);
	case COLLC_UINT8:
		return red_int<uint8_t, uint8_t>(op, a, b);
	case COLLC_INT32:
		return red_int<int32_t, uint32_t>(op, a, b);
	case COLLC_UINT32:
		return red_int<uint32_t, uint32_t>(op, a, b);
	case COLLC_INT64:
		return red_int<int64_t, uint64_t>(op, a, b);
	case COLLC_UINT64:
		return red_int<uint64_t, uint64_t>(op, a, b);
	case COLLC_FLOAT16:
#pragma unroll
		for (int i = 0; i < 4; i++)
			x.h[i] = f2h(fop(op, h2f(x.h[i]), h2f(y.h[i])));
		return x.u;
	case COLLC_BFLOAT16:
#pragma unroll
		for (int i = 0; i < 4; i++)
			x.h[i] = f2b(fop(op, b2f(x.h[i]), b2f(y.h[i])));
		return x.u;
	case COLLC_FLOAT32:
		x.f[0] = fop(op, x.f[0], y.f[0]);
		x.f[1] = fop(op, x.f[1], y.f[1]);
		return x.u;
	default:
		x.d = dop(op, x.d, y.d);
		return x.u;
	}
}

template <typename S, typename D>
__device__ __forceinline__ uint64_t fin_int(uint64_t a, uint32_t n)
{
	constexpr int N = 8 / sizeof(S);
	union {
		uint64_t u;
		S s[N];
	} x;

	x.u = a;
#pragma unroll
	for (int i = 0; i < N; i++)
		x.s[i] = (S)((D)x.s[i] / (D)n);
	return x.u;
}

/* AVG: divide by nranks (reduce.c red_finish). */
__device__ __forceinline__ uint64_t fin8(int dt, uint32_t n, uint64_t a)
{
	union {
		uint64_t u;
		uint16_t h[4];
		float f[2];
		double d;
	} x;

	x.u = a;
	switch (dt) {
	case COLLC_INT8:
		return fin_int<int8_t, int64_t>(a, n);
	case COLLC_UINT8:
		return fin_int<uint8_t, uint64_t>(a, n);
	case COLLC_INT32:
		return fin_int<int32_t, int64_t>(a, n);
	case COLLC_UINT32:
		return fin_int<uint32_t, uint64_t>(a, n);
	case COLLC_INT64:
		return fin_int<int64_t, int64_t>(a, n);
	case COLLC_UINT64:
		return fin_int<uint64_t, uint64_t>(a, n);
	case COLLC_FLOAT16:
#pragma unroll
		for (int i = 0; i < 4; i++)
			x.h[i] = f2h(h2f(x.h[i]) / (float)n);
		return x.u;
	case COLLC_BFLOAT16:
#pragma unroll
		for (int i = 0; i < 4; i++)
			x.h[i] = f2b(b2f(x.h[i]) / (float)n);
		return x.u;
	case COLLC_FLOAT32:
		x.f[0] = x.f[0] / (float)n;
		x.f[1] = x.f[1] / (float)n;
		return x.u;
	default:
		x.d = x.d / (double)n;
		return x.u;
	}
}

/* Loads and stores of up to 8 bytes at any alignment (client offsets are untrusted). */
__device__ __forceinline__ uint64_t ld_bytes(const char *p, uint32_t n)
{
	uint64_t v = 0;

	if (n == 8 && !((uintptr_t)p & 7))
		return __ldcg((const unsigned long long *)p);
	for (uint32_t i = 0; i < n; i++)
		v |= (uint64_t)(uint8_t)__ldcg((const char *)p + i) << (8 * i);
	return v;
}

__device__ __forceinline__ void st_bytes(char *p, uint32_t n, uint64_t v)
{
	if (n == 8 && !((uintptr_t)p & 7)) {
		__stcg((unsigned long long *)p, v);
		return;
	}
	for (uint32_t i = 0; i < n; i++)
		p[i] = (char)(v >> (8 * i));
}

__device__ __forceinline__ uint64_t globaltimer(void)
{
	uint64_t t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* Block context */

enum {
	P_RECV = 1 << 0,
	P_SRC = 1 << 1,
	P_REDUCE = 1 << 2,
	P_DST = 1 << 3,
	P_SEND = 1 << 4,
	P_POSTOP = 1 << 5,
};

#define SEND                  (P_SRC | P_SEND)
#define RECV                  (P_RECV | P_DST)
#define COPY_SEND             (P_SRC | P_DST | P_SEND)
#define RECV_REDUCE_SEND      (P_RECV | P_SRC | P_REDUCE | P_SEND)
#define RECV_REDUCE_COPY_SEND (P_RECV | P_SRC | P_REDUCE | P_DST | P_SEND | P_POSTOP)
#define RECV_REDUCE_COPY      (P_RECV | P_SRC | P_REDUCE | P_DST | P_POSTOP)
#define RECV_COPY_SEND        (P_RECV | P_DST | P_SEND)

struct blk {
	struct collc_work_item it;
	struct cuda_chan *ch;
	struct collc_fifo_ctrl *hctl; /* this lane's FIFO control (host memory) */
	struct cuda_dstate *ds;
	const uint32_t *revoked;      /* the running item's communicator abort word (host); NULL between items */
	const uint32_t *revoked_dev;  /* the same in its struct cuda_rank (device); NULL between items */
	uint32_t nsteps;              /* thread 0: steps of the running item, for the revoked check */
	uint64_t send_step, recv_step, os_gen;
	char *my_simple, *my_ll, *my_ll128, *nx_simple, *nx_ll, *nx_ll128;
	uint64_t *next_tail, *prev_head, *my_head, *my_tail;
	uint32_t es, proto, algo, chan; /* chan: the block's channel (its connections) */
	uint32_t share;                 /* the item's share it runs: (chan - chan_base) mod channels */
	const uint32_t *revoked_of;     /* the host abort word of state_of */
	uint64_t state_of;              /* comm_id whose channel state the fields above hold; 0: none */
	uint32_t trace;                 /* COLLC_CUDA_TRACE: thread 0 fills the stamps below */
	uint64_t t_alg, t_ollwait;      /* the algorithm's start; one-shot LL: push to last line */
};

/* Peer buffer pointers of the current one-shot op, filled by os_barrier(). */
__shared__ uint64_t sh_send[COLLC_MAX_RANKS], sh_recv[COLLC_MAX_RANKS];

/*
 * After 64 spins of a wait, and every 2^10 spins after that, a waiter looks
 * at the device abort flag and its communicator's device abort word
 * (cuda/executor.c cuda_comm_abort); every 2^12 spins at the communicator's host
 * word, every 2^16 at the host abort word: those cost a PCIe round trip each.
 * A short wait costs nothing.
 */
__device__ __noinline__ int check_abort(struct blk *b, uint32_t spins)
{
	if (spins != 63 && (spins & 1023) != 1023)
		return 0;
	if (ld_vol32(&b->ds->abort))
		return 1;
	if (b->revoked_dev && ld_vol32(b->revoked_dev))
		return 1;
	if ((spins & 4095) == 4095 && b->revoked && ld_vol32(b->revoked))
		return 1;
	if ((spins & 65535) == 65535 && ld_vol32(&b->hctl->abort))
		return 1;
	return 0;
}

/* The whole grid is told to stop (not just one communicator). */
__device__ int grid_aborted(const struct blk *b)
{
	return ld_vol32(&b->ds->abort) || ld_vol32(&b->hctl->abort);
}

/*
 * Polls with acquire loads. Measured on 2 H200: relaxed polls plus one system
 * fence on success made the 8-byte all-reduce 3.6 us slower (median).
 */
__device__ __forceinline__ int wait_ge(struct blk *b, const uint64_t *word, uint64_t target)
{
	for (uint32_t spins = 0;; spins++) {
		if (ld_acq_sys(word) >= target)
			return 0;
		if (check_abort(b, spins))
			return -1;
	}
}

/*
 * Vectors in flight per thread in the copy and reduce loops. One 16-byte load
 * at a time leaves a block latency-bound: 512 threads x 16 B per HBM or
 * NVLink round trip, about 8 GB/s a block: 32 channels reached 257 GB/s busbw
 * at 512 MiB, 4 vectors 330-338, 2 vectors 307, 8 (with spills) 284
 * (bench/RESULTS.md). The loops load COLLC_VEC_UNROLL vectors of every source
 * before the first is used. They live in prim<flags>() and reduce_n(), both
 * __noinline__, so the reductions they inline exist once per instance, not
 * once per call site.
 */
#ifndef COLLC_VEC_UNROLL
#define COLLC_VEC_UNROLL 4
#endif

union vec16 {
	uint4 v;
	uint64_t w[2];
};

__device__ __forceinline__ uint4 vec_red(int dt, int op, uint4 a, uint4 b)
{
	union vec16 x, y;

	x.v = a;
	y.v = b;
	x.w[0] = red8(dt, op, x.w[0], y.w[0]);
	x.w[1] = red8(dt, op, x.w[1], y.w[1]);
	return x.v;
}

__device__ __forceinline__ uint4 vec_fin(int dt, uint32_t n, uint4 a)
{
	union vec16 x;

	x.v = a;
	x.w[0] = fin8(dt, n, x.w[0]);
	x.w[1] = fin8(dt, n, x.w[1]);
	return x.v;
}

/* U vectors at p + 16 * (i + u * T), u < U: loads, stores, reduction and finish of each. */
template <int U>
__device__ __forceinline__ void vecs_ld(uint4 (&x)[U], const char *p, uint64_t i, uint64_t T)
{
#pragma unroll
	for (int u = 0; u < U; u++)
		x[u] = ld_data(p + 16 * (i + u * T));
}

template <int U>
__device__ __forceinline__ void vecs_st(char *p, const uint4 (&x)[U], uint64_t i, uint64_t T)
{
#pragma unroll
	for (int u = 0; u < U; u++)
		st_data(p + 16 * (i + u * T), x[u]);
}

template <int U>
__device__ __forceinline__ void vecs_red(uint4 (&x)[U], const uint4 (&y)[U], int dt, int op)
{
#pragma unroll
	for (int u = 0; u < U; u++)
		x[u] = vec_red(dt, op, x[u], y[u]);
}

template <int U>
__device__ __forceinline__ void vecs_fin(uint4 (&x)[U], int dt, uint32_t nr)
{
#pragma unroll
	for (int u = 0; u < U; u++)
		x[u] = vec_fin(dt, nr, x[u]);
}

/*
 * U vectors of one Simple step starting at vector i, T apart: loads of the
 * received slot (or the source) and of the source first, then the reduction
 * and the stores.
 */
template <int U>
__device__ __forceinline__ void simple_vecs(int flags, int dt, int op, uint32_t nr, int fin, const char *in,
					    const char *src, char *dst, char *out, uint64_t i, uint64_t T)
{
	uint4 x[U], y[U];

	vecs_ld(x, (flags & P_RECV) ? in : src, i, T);
	if (flags & P_REDUCE) {
		vecs_ld(y, src, i, T);
		vecs_red(x, y, dt, op);
	}
	if (fin)
		vecs_fin(x, dt, nr);
	if (flags & P_DST)
		vecs_st(dst, x, i, T);
	if (flags & P_SEND)
		vecs_st(out, x, i, T);
}

/* Simple payload: one slot's worth, 16-byte vectors where every pointer allows. */
__device__ __forceinline__ void simple_payload(struct blk *b, int flags, const char *in, const char *src,
					       char *dst, char *out, uint64_t len)
{
	const int dt = b->it.dtype, op = b->it.redop;
	const uint32_t nr = b->it.nranks, es = b->es;
	const int fin = (flags & P_POSTOP) && op == COLLC_AVG && nr > 1;
	const uint64_t T = blockDim.x;
	uintptr_t al = 0;
	uint64_t nvec, i = threadIdx.x;

	if (flags & P_RECV)
		al |= (uintptr_t)in;
	if (flags & (P_SRC | P_REDUCE))
		al |= (uintptr_t)src;
	if (flags & P_DST)
		al |= (uintptr_t)dst;
	if (flags & P_SEND)
		al |= (uintptr_t)out;
	nvec = (al & 15) ? 0 : len / 16;
	for (; i + (COLLC_VEC_UNROLL - 1) * T < nvec; i += COLLC_VEC_UNROLL * T)
		simple_vecs<COLLC_VEC_UNROLL>(flags, dt, op, nr, fin, in, src, dst, out, i, T);
	for (; i < nvec; i += T)
		simple_vecs<1>(flags, dt, op, nr, fin, in, src, dst, out, i, T);
	/* The rest, one element at a time. */
	for (uint64_t o = nvec * 16 + (uint64_t)threadIdx.x * es; o < len; o += T * es) {
		uint64_t x = (flags & P_RECV) ? ld_bytes(in + o, es) : ld_bytes(src + o, es);

		if (flags & P_REDUCE)
			x = red8(dt, op, x, ld_bytes(src + o, es));
		if (fin)
			x = fin8(dt, nr, x);
		if (flags & P_DST)
			st_bytes(dst + o, es, x);
		if (flags & P_SEND)
			st_bytes(out + o, es, x);
	}
}

/* Computes one 8-byte payload word of LL/LL128 from what was received and the source. */
__device__ __forceinline__ uint64_t word_op(struct blk *b, int flags, uint64_t rcv, const char *src,
					    char *dst, uint64_t off, uint32_t n)
{
	uint64_t x = (flags & P_RECV) ? rcv : ld_bytes(src + off, n);

	if (flags & P_REDUCE)
		x = red8(b->it.dtype, b->it.redop, x, ld_bytes(src + off, n));
	if ((flags & P_POSTOP) && b->it.redop == COLLC_AVG && b->it.nranks > 1)
		x = fin8(b->it.dtype, b->it.nranks, x);
	if (flags & P_DST)
		st_bytes(dst + off, n, x);
	return x;
}

/*
 * R-LL: polls one line until it carries flag, then takes its payload from
 * that snapshot. -1 once the grid or the communicator aborted, or another
 * thread of the block did (*abort_all, which it then sets).
 */
__device__ int ll_recv_line(struct blk *b, const union collc_ll_line *line, uint32_t flag,
			    uint64_t *out, volatile int *abort_all)
{
	for (uint32_t spins = 0;; spins++) {
		uint4 v = ld_vol128(line);
		union collc_ll_line l;

		l.w.data1 = v.x;
		l.w.flag1 = v.y;
		l.w.data2 = v.z;
		l.w.flag2 = v.w;
		if (collc_ll_ready(l, flag)) {
			*out = collc_ll_payload(l);
			return 0;
		}
		if (check_abort(b, spins) || *abort_all) {
			*abort_all = 1;
			return -1;
		}
	}
}

/* W-LL: the payload and both flags in one 16-byte store, no fence. */
__device__ __forceinline__ void ll_send_line(union collc_ll_line *line, uint64_t payload, uint32_t flag)
{
	union collc_ll_line l = collc_ll_pack(payload, flag);

	st_vol128(line, make_uint4(l.w.data1, l.w.flag1, l.w.data2, l.w.flag2));
}

/* LL payload: each thread takes whole 16-byte lines; R-LL / W-LL. */
__device__ __forceinline__ int ll_payload(struct blk *b, int flags, const char *src, char *dst,
					  uint64_t len)
{
	const uint32_t rflag = collc_ll_flag(b->recv_step), sflag = collc_ll_flag(b->send_step);
	union collc_ll_line *in = (union collc_ll_line *)(b->my_ll) +
				  (uint64_t)collc_slot(b->recv_step, COLLC_STEPS) * CUDA_LL_SLOT_LINES;
	union collc_ll_line *out = (union collc_ll_line *)(b->nx_ll) +
				   (uint64_t)collc_slot(b->send_step, COLLC_STEPS) * CUDA_LL_SLOT_LINES;
	uint64_t nlines = collc_ll_lines(len);
	__shared__ int ll_abort;

	if (threadIdx.x == 0)
		ll_abort = 0;
	__syncthreads();
	for (uint64_t i = threadIdx.x; i < nlines; i += blockDim.x) {
		uint64_t off = i * 8, rcv = 0;
		uint32_t n = (uint32_t)collc_min_u64(8, len - off);

		if ((flags & P_RECV) && ll_recv_line(b, &in[i], rflag, &rcv, &ll_abort) < 0)
			break;
		uint64_t x = word_op(b, flags, rcv, src, dst, off, n);

		if (flags & P_SEND)
			ll_send_line(&out[i], x, sflag);
	}
	__syncthreads();
	return ll_abort ? -1 : 0;
}

/* LL128 payload: 8 threads per 128-byte line, 16 bytes each; R128 / W128. */
__device__ __forceinline__ int ll128_payload(struct blk *b, int flags, const char *src, char *dst,
					     uint64_t len)
{
	const uint64_t rflag = collc_ll128_flag(b->recv_step), sflag = collc_ll128_flag(b->send_step);
	char *in = b->my_ll128 + (uint64_t)collc_slot(b->recv_step, COLLC_STEPS) * CUDA_LL128_SLOT_LINES *
					 COLLC_LL128_LINE_BYTES;
	char *out = b->nx_ll128 + (uint64_t)collc_slot(b->send_step, COLLC_STEPS) *
					  CUDA_LL128_SLOT_LINES * COLLC_LL128_LINE_BYTES;
	const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
	const uint32_t j = lane & 7;
	const int flag_thread = j == 7;
	uint64_t nlines = collc_ll128_lines(len);
	__shared__ int l128_abort;

	if (threadIdx.x == 0)
		l128_abort = 0;
	__syncthreads();
	for (uint64_t g = warp; g * 4 < nlines; g += nwarps) {
		uint64_t line = g * 4 + (lane >> 3);
		int valid = line < nlines;
		uint64_t w0 = 0, w1 = 0;

		if (flags & P_RECV) {
			for (uint32_t spins = 0;; spins++) {
				int need = 0, ab = 0;

				if (valid) {
					ld_vol2x64(in + line * COLLC_LL128_LINE_BYTES + 16 * j, w0, w1);
					need = flag_thread && w1 != rflag;
				}
				if (!__any_sync(FULL_MASK, need))
					break;
				if (lane == 0)
					ab = check_abort(b, spins) || *(volatile int *)&l128_abort;
				ab = __shfl_sync(FULL_MASK, ab, 0);
				if (ab) {
					if (lane == 0)
						l128_abort = 1;
					break;
				}
			}
			if (*(volatile int *)&l128_abort)
				break;
		}
		if (valid) {
			uint64_t base = line * COLLC_LL128_DATA_WORDS + 2 * j;
			uint64_t off0 = base * 8, off1 = off0 + 8;
			uint64_t x0 = 0, x1 = 0;

			if (off0 < len)
				x0 = word_op(b, flags, w0, src, dst, off0,
					     (uint32_t)collc_min_u64(8, len - off0));
			if (!flag_thread && off1 < len)
				x1 = word_op(b, flags, w1, src, dst, off1,
					     (uint32_t)collc_min_u64(8, len - off1));
			if (flag_thread)
				x1 = sflag;
			w0 = x0;
			w1 = x1;
		}
		/* W128: the warp's 8 stores of a line leave together, never split by divergence. */
		__syncwarp();
		if ((flags & P_SEND) && valid)
			st_vol2x64(out + line * COLLC_LL128_LINE_BYTES + 16 * j, w0, w1);
	}
	__syncthreads();
	return l128_abort ? -1 : 0;
}

__device__ uint64_t step_bytes(uint32_t proto)
{
	if (proto == COLLC_PROTO_LL)
		return CUDA_LL_STEP;
	if (proto == COLLC_PROTO_LL128)
		return CUDA_LL128_STEP;
	return CUDA_SIMPLE_SLOT;
}

__device__ uint64_t chunk_bytes(uint32_t proto)
{
	if (proto == COLLC_PROTO_LL)
		return CUDA_LL_STEP;
	if (proto == COLLC_PROTO_LL128)
		return CUDA_LL128_STEP;
	return CUDA_SIMPLE_CHUNK;
}

/*
 * Moves nelem elements through the connections in steps of at most one slot,
 * as cpu/executor.c prim(): an empty call still posts one step. One instance per
 * combination of flags (the algorithms use seven): the payload loops inline
 * with their flags known. An instance for every call site cost minutes of
 * nvcc; one instance with the flags read at run time made ring LL128 of
 * 1-4 MiB 8-18 us slower (bench/RESULTS.md).
 */
template <int flags>
__device__ __noinline__ int prim(struct blk *b, const char *src, char *dst, int64_t nelem)
{
	const uint64_t bytes = nelem > 0 ? (uint64_t)nelem * b->es : 0;
	const uint64_t sb = step_bytes(b->proto);
	const uint64_t nsteps = bytes ? collc_div_up(bytes, sb) : 1;
	__shared__ int p_abort;

	for (uint64_t s = 0; s < nsteps; s++) {
		uint64_t off = s * sb;
		uint64_t len = bytes ? collc_min_u64(sb, bytes - off) : 0;
		const char *so = src ? src + off : NULL;
		char *d = dst ? dst + off : NULL;
		int r = 0;

		if (threadIdx.x == 0) {
			p_abort = 0;
			/*
			 * A streaming item may never miss in a wait: every 16th step
			 * looks at the communicator's device word.
			 */
			if ((++b->nsteps & 15) == 0 && b->revoked_dev && ld_vol32(b->revoked_dev))
				p_abort = 1;
			/* S2: head with acquire before the slot is overwritten; pairs with R2. */
			if (!p_abort && (flags & P_SEND) &&
			    wait_ge(b, b->my_head, b->send_step + 1 > COLLC_STEPS ?
						      b->send_step + 1 - COLLC_STEPS : 0) < 0)
				p_abort = 1;
			/* R1: tail with acquire before the payload; pairs with S1. */
			if (!p_abort && (flags & P_RECV) && b->proto == COLLC_PROTO_SIMPLE &&
			    wait_ge(b, b->my_tail, b->recv_step + 1) < 0)
				p_abort = 1;
		}
		__syncthreads();
		if (p_abort)
			return -1;
		if (b->proto == COLLC_PROTO_LL) {
			r = ll_payload(b, flags, so, d, len);
		} else if (b->proto == COLLC_PROTO_LL128) {
			r = ll128_payload(b, flags, so, d, len);
		} else {
			const char *in = b->my_simple +
					 (uint64_t)collc_slot(b->recv_step, COLLC_STEPS) * CUDA_SIMPLE_SLOT;
			char *out = b->nx_simple +
				    (uint64_t)collc_slot(b->send_step, COLLC_STEPS) * CUDA_SIMPLE_SLOT;

			simple_payload(b, flags, in, so, d, out, len);
			__syncthreads();
		}
		if (r < 0)
			return -1;
		if (threadIdx.x == 0) {
			/* S1: payload, system fence, tail; R2: payload consumed, then head. */
			if (b->proto == COLLC_PROTO_SIMPLE || (flags & P_RECV))
				__threadfence_system();
			if (flags & P_SEND)
				st_vol64(b->next_tail, b->send_step + 1);
			if (flags & P_RECV)
				st_vol64(b->prev_head, b->recv_step + 1);
		}
		if (flags & P_SEND)
			b->send_step++;
		if (flags & P_RECV)
			b->recv_step++;
	}
	return 0;
}

/* Ring algorithms: cpu/executor.c, one channel's share, with this protocol's chunk. */

__device__ __forceinline__ int64_t clamp_elems(uint64_t size, uint64_t off, uint64_t chunk)
{
	return off >= size ? 0 : (int64_t)collc_min_u64(chunk, size - off);
}

__device__ __forceinline__ uint32_t rmod(int64_t x, uint32_t n)
{
	return (uint32_t)(((x % (int64_t)n) + n) % n);
}

__device__ int ring_allreduce(struct blk *b, const char *src, char *dst)
{
	const uint32_t n = b->it.nranks, me = b->it.rank, nch = b->it.nchannels, ch = b->share;
	const uint64_t chunk = chunk_bytes(b->proto) / b->es, count = b->it.count, es = b->es;
	const uint64_t loop = (uint64_t)nch * n * chunk;
	int r = 0;

	for (uint64_t base = 0; base < count && r == 0; base += loop) {
		uint64_t real = collc_min_u64(chunk, collc_div_up(count - base, (uint64_t)nch * n));
#define OFF(j) (base + ((uint64_t)ch * n + (j)) * real)
#define NEL(j) clamp_elems(count, OFF(j), real)
#define BY(j)  (OFF(j) * es)
		uint32_t j = rmod((int64_t)me - 1, n);

		r = prim<SEND>(b, src + BY(j), NULL, NEL(j));
		for (uint32_t k = 2; k < n && r == 0; k++) {
			j = rmod((int64_t)me - k, n);
			r = prim<RECV_REDUCE_SEND>(b, src + BY(j), NULL, NEL(j));
		}
		j = me;
		if (r == 0)
			r = prim<RECV_REDUCE_COPY_SEND>(b, src + BY(j), dst + BY(j), NEL(j));
		for (uint32_t k = 1; k + 1 < n && r == 0; k++) {
			j = rmod((int64_t)me - k, n);
			r = prim<RECV_COPY_SEND>(b, NULL, dst + BY(j), NEL(j));
		}
		j = rmod((int64_t)me + 1, n);
		if (r == 0)
			r = prim<RECV>(b, NULL, dst + BY(j), NEL(j));
#undef OFF
#undef NEL
#undef BY
	}
	return r;
}

struct chunk_iter {
	uint64_t size, chunk, base;
	uint32_t nch, ch;
};

__device__ __forceinline__ int next_chunk(struct chunk_iter *ci, uint64_t *off, int64_t *nel)
{
	uint64_t real;

	if (ci->base >= ci->size)
		return 0;
	real = collc_min_u64(ci->chunk, collc_div_up(ci->size - ci->base, ci->nch));
	*off = ci->base + (uint64_t)ci->ch * real;
	*nel = clamp_elems(ci->size, *off, real);
	ci->base += (uint64_t)ci->nch * ci->chunk;
	return 1;
}

__device__ int ring_other(struct blk *b, const char *src, char *dst)
{
	const uint32_t n = b->it.nranks, me = b->it.rank, root = (uint32_t)b->it.root;
	const uint64_t es = b->es, bb = b->it.count * es;
	struct chunk_iter ci = { b->it.count, chunk_bytes(b->proto) / es, 0, b->it.nchannels, b->share };
	uint64_t off;
	int64_t nel;
	int r = 0;

	while (r == 0 && next_chunk(&ci, &off, &nel)) {
		uint64_t ob = off * es;

		switch (b->it.coll) {
		case COLLC_OP_ALLGATHER:
			r = prim<COPY_SEND>(b, src + ob, dst + (uint64_t)me * bb + ob, nel);
			for (uint32_t k = 1; k + 1 < n && r == 0; k++)
				r = prim<RECV_COPY_SEND>(b, NULL,
					 dst + (uint64_t)rmod((int64_t)me - k, n) * bb + ob, nel);
			if (r == 0)
				r = prim<RECV>(b, NULL, dst + (uint64_t)rmod((int64_t)me + 1, n) * bb + ob, nel);
			break;
		case COLLC_OP_REDUCE_SCATTER:
			r = prim<SEND>(b, src + (uint64_t)rmod((int64_t)me - 1, n) * bb + ob, NULL, nel);
			for (uint32_t k = 2; k < n && r == 0; k++)
				r = prim<RECV_REDUCE_SEND>(b, src + (uint64_t)rmod((int64_t)me - k, n) * bb + ob,
							   NULL, nel);
			if (r == 0)
				r = prim<RECV_REDUCE_COPY>(b, src + (uint64_t)me * bb + ob, dst + ob, nel);
			break;
		case COLLC_OP_BROADCAST:
			if (me == root)
				r = prim<COPY_SEND>(b, src + ob, dst + ob, nel);
			else if ((me + 1) % n == root)
				r = prim<RECV>(b, NULL, dst + ob, nel);
			else
				r = prim<RECV_COPY_SEND>(b, NULL, dst + ob, nel);
			break;
		case COLLC_OP_REDUCE:
			if (me == root)
				r = prim<RECV_REDUCE_COPY>(b, src + ob, dst + ob, nel);
			else if (rmod((int64_t)me - 1, n) == root)
				r = prim<SEND>(b, src + ob, NULL, nel);
			else
				r = prim<RECV_REDUCE_SEND>(b, src + ob, NULL, nel);
			break;
		default:
			return -1;
		}
	}
	return r;
}

/* One-shot and two-shot: direct reads of peer buffers between flag barriers. */

/* U vectors of reduce_n() starting at vector i, T apart: every source's loads before their use. */
template <int U>
__device__ __forceinline__ void reduce_vecs(int dt, int op, uint32_t nr, int fin, const uint64_t *srcs,
					    uint32_t nsrc, uint64_t soff, char *d, uint64_t i, uint64_t T)
{
	uint4 x[U], y[U];

	vecs_ld(x, (const char *)srcs[0] + soff, i, T);
	for (uint32_t p = 1; p < nsrc; p++) {
		vecs_ld(y, (const char *)srcs[p] + soff, i, T);
		vecs_red(x, y, dt, op);
	}
	if (fin)
		vecs_fin(x, dt, nr);
	vecs_st(d, x, i, T);
}

/* Multi-source reduce (or copy, npeers 1) of [lo, hi) bytes: dst = op over srcs, then finish. */
__device__ __noinline__ void reduce_n(struct blk *b, const uint64_t *srcs, uint32_t nsrc, uint64_t soff,
				      char *dst, uint64_t doff, uint64_t len, int finish)
{
	const int dt = b->it.dtype, op = b->it.redop;
	const uint32_t nr = b->it.nranks, es = b->es;
	const int fin = finish && op == COLLC_AVG && nr > 1;
	const uint64_t T = blockDim.x;
	uintptr_t al = (uintptr_t)(dst + doff);
	uint64_t nvec, i = threadIdx.x;

	for (uint32_t p = 0; p < nsrc; p++)
		al |= (uintptr_t)(srcs[p] + soff);
	nvec = (al & 15) ? 0 : len / 16;
	for (; i + (COLLC_VEC_UNROLL - 1) * T < nvec; i += COLLC_VEC_UNROLL * T)
		reduce_vecs<COLLC_VEC_UNROLL>(dt, op, nr, fin, srcs, nsrc, soff, dst + doff, i, T);
	for (; i < nvec; i += T)
		reduce_vecs<1>(dt, op, nr, fin, srcs, nsrc, soff, dst + doff, i, T);
	for (uint64_t o = nvec * 16 + (uint64_t)threadIdx.x * es; o < len; o += T * es) {
		uint64_t x = ld_bytes((const char *)srcs[0] + soff + o, es);

		for (uint32_t p = 1; p < nsrc; p++)
			x = red8(dt, op, x, ld_bytes((const char *)srcs[p] + soff + o, es));
		if (fin)
			x = fin8(dt, nr, x);
		st_bytes(dst + doff + o, es, x);
	}
}

enum { OS_ARRIVE = 0, OS_MID = 1, OS_DONE = 2 };

/* Publishes flag `which` = gen into every rank's slot for us, then waits for every rank's. */
__shared__ int sh_local; /* some rank's buffers are CUDA_ADDR_LOCAL */

__device__ int os_barrier(struct blk *b, int which, const char *src, char *dst, uint64_t local)
{
	const uint32_t n = b->it.nranks, me = b->it.rank, t = threadIdx.x;
	__shared__ int os_abort;

	if (t == 0) {
		os_abort = 0;
		sh_local = 0;
	}
	__syncthreads(); /* every thread's stores to our buffers come first */
	if (t < n) {
		struct cuda_chan *peer = (struct cuda_chan *)b->ch->peers[t];
		struct cuda_os_slot *s = &peer->os[me];
		uint64_t *flag = which == OS_ARRIVE ? &s->arrive : which == OS_MID ? &s->mid : &s->done;

		if (which == OS_ARRIVE) {
			st_vol64(&s->send, (uint64_t)(uintptr_t)src);
			st_vol64(&s->recv, (uint64_t)(uintptr_t)dst);
			st_vol64(&s->local, local);
		}
		/* O1: buffers and pointers, system fence, then the flag. */
		__threadfence_system();
		st_vol64(flag, b->os_gen);
	}
	if (t < n) {
		struct cuda_os_slot *s = &b->ch->os[t];
		const uint64_t *flag = which == OS_ARRIVE ? &s->arrive : which == OS_MID ? &s->mid : &s->done;

		/* O1': pairs with O1. */
		if (wait_ge(b, flag, b->os_gen) < 0)
			os_abort = 1;
		else if (which == OS_ARRIVE) {
			sh_send[t] = ld_vol64(&s->send);
			sh_recv[t] = ld_vol64(&s->recv);
			if (ld_vol64(&s->local))
				sh_local = 1;
		}
	}
	__syncthreads();
	return os_abort ? -1 : 0;
}

__device__ int ring_allreduce(struct blk *b, const char *src, char *dst);
__device__ int ring_other(struct blk *b, const char *src, char *dst);

/* The block's share [lo, hi) of the item's count elements, in pieces of whole 16-byte vectors. */
__device__ __forceinline__ void oneshot_share(const struct blk *b, uint64_t *lo, uint64_t *hi)
{
	const uint64_t count = b->it.count;
	const uint64_t per = collc_round_up(collc_div_up(count, b->it.nchannels), 16 / b->es);

	*lo = collc_min_u64(count, (uint64_t)b->share * per);
	*hi = collc_min_u64(count, *lo + per);
}

__device__ __noinline__ int oneshot(struct blk *b, const char *src, char *dst, int twoshot, uint64_t local)
{
	const uint32_t n = b->it.nranks, me = b->it.rank;
	const uint64_t es = b->es, count = b->it.count;
	const uint64_t align = 16 / es;
	uint64_t lo, hi;
	__shared__ uint64_t srcs[COLLC_MAX_RANKS];
	int r;

	oneshot_share(b, &lo, &hi);
	b->os_gen++;
	r = os_barrier(b, OS_ARRIVE, src, dst, local);
	if (r < 0)
		return r;
	if (sh_local) {
		/*
		 * A buffer only its own GPU maps (CUDA IPC): every rank saw the same
		 * flags, so every rank runs the ring instead, which reads and writes
		 * only its own buffers.
		 */
		b->proto = COLLC_PROTO_SIMPLE;
		return b->it.coll == COLLC_OP_ALLREDUCE ? ring_allreduce(b, src, dst) : ring_other(b, src, dst);
	}
	switch (b->it.coll) {
	case COLLC_OP_ALLREDUCE:
		if (!twoshot) {
			reduce_n(b, sh_send, n, lo * es, dst, lo * es, (hi - lo) * es, 1);
			break;
		} else {
			uint64_t seg = collc_round_up(collc_div_up(hi - lo, n), align);
			uint64_t a = collc_min_u64(hi, lo + me * seg), e = collc_min_u64(hi, a + seg);

			reduce_n(b, sh_send, n, a * es, dst, a * es, (e - a) * es, 1);
			r = os_barrier(b, OS_MID, src, dst, 0);
			if (r < 0)
				return r;
			for (uint32_t p = 0; p < n; p++) {
				if (p == me)
					continue;
				a = collc_min_u64(hi, lo + p * seg);
				e = collc_min_u64(hi, a + seg);
				if (threadIdx.x == 0)
					srcs[0] = sh_recv[p];
				__syncthreads();
				reduce_n(b, srcs, 1, a * es, dst, a * es, (e - a) * es, 0);
				__syncthreads();
			}
		}
		break;
	case COLLC_OP_REDUCE_SCATTER:
		reduce_n(b, sh_send, n, (me * count + lo) * es, dst, lo * es, (hi - lo) * es, 1);
		break;
	case COLLC_OP_REDUCE:
		if (me == (uint32_t)b->it.root)
			reduce_n(b, sh_send, n, lo * es, dst, lo * es, (hi - lo) * es, 1);
		break;
	case COLLC_OP_BROADCAST:
		if (threadIdx.x == 0)
			srcs[0] = sh_send[b->it.root];
		__syncthreads();
		reduce_n(b, srcs, 1, lo * es, dst, lo * es, (hi - lo) * es, 0);
		break;
	case COLLC_OP_ALLGATHER:
		for (uint32_t p = 0; p < n; p++) {
			if (threadIdx.x == 0)
				srcs[0] = sh_send[p];
			__syncthreads();
			reduce_n(b, srcs, 1, lo * es, dst, (p * count + lo) * es, (hi - lo) * es, 0);
			__syncthreads();
		}
		break;
	default:
		return -1;
	}
	return os_barrier(b, OS_DONE, src, dst, 0);
}

/*
 * One-shot LL (proto/prims.h): all-reduce, allgather and reduce-scatter.
 * This channel's share of the one-shot split of count elements (a rank's
 * block: allgather's send count, reduce-scatter's receive count), in rounds
 * of at most CUDA_OLL_SLOT_LINES lines. A thread pushes its lines into every
 * peer's inbox (W-LL: data and flags in one 16-byte store, no fence): our
 * input (all-reduce, allgather) or the peer's block of it (reduce-scatter).
 * Then it takes the same lines of every rank in rank order, polling our own
 * inbox (R-LL), and reduces them into the result (all-reduce,
 * reduce-scatter) or stores each into its rank's block (allgather). Every
 * line a thread pushes, and its own contribution, is read before it stores
 * the result, so in-place buffers are safe. The __syncthreads() that ends
 * a round orders every thread's reads of the round before any thread's
 * pushes of the next (OLL1).
 */
__device__ int oll_run(struct blk *b, const char *src, char *dst)
{
	const uint32_t n = b->it.nranks, me = b->it.rank, coll = b->it.coll;
	const int dt = b->it.dtype, op = b->it.redop;
	const int fin = op == COLLC_AVG && coll != COLLC_OP_ALLGATHER;
	const uint64_t es = b->es, blk = b->it.count * es;
	uint64_t lo, hi;
	const uint64_t round = (uint64_t)CUDA_OLL_SLOT_LINES * COLLC_LL_LINE_PAYLOAD;
	uint64_t bytes, nrounds;
	const union collc_ll_line *inbox = (const union collc_ll_line *)(uintptr_t)b->ch->oll_inbox;
	/* Where rank p's lines come from in our input: reduce-scatter sends block p. */
	const uint64_t pstride = coll == COLLC_OP_REDUCE_SCATTER ? blk : 0;
	__shared__ int oll_abort;

	oneshot_share(b, &lo, &hi);
	bytes = (hi - lo) * es;
	nrounds = bytes ? collc_div_up(bytes, round) : 1;
	if (threadIdx.x == 0)
		oll_abort = 0;
	__syncthreads();
	for (uint64_t k = 0; k < nrounds; k++) {
		const uint64_t gen = ++b->os_gen; /* every thread keeps the same count */
		const uint32_t flag = collc_ll_flag(gen);
		const uint64_t off = lo * es + k * round;
		const uint64_t len = bytes ? collc_min_u64(round, bytes - k * round) : 0;
		const uint64_t nlines = collc_oll_lines(len);

		/* W-LL: pairs with R-LL in peer p's ll_recv_line(). */
		for (uint64_t i = threadIdx.x; i < nlines; i += blockDim.x) {
			const uint32_t w = (uint32_t)(len > 8 * i ? collc_min_u64(8, len - 8 * i) : 0);
			const uint64_t o = off + 8 * i;
			const uint64_t mine = w ? ld_bytes(src + me * pstride + o, w) : 0;

			for (uint32_t p = 0; p < n; p++)
				if (p != me)
					ll_send_line((union collc_ll_line *)(uintptr_t)b->ch->oll_peer[p] +
							     collc_oll_line(gen, n, me, i, CUDA_OLL_SLOT_LINES),
						     pstride && w ? ld_bytes(src + p * pstride + o, w) : mine, flag);
		}
		if (b->trace && threadIdx.x == 0 && k == 0)
			b->t_ollwait = globaltimer();
		/*
		 * A thread takes its lines only after pushing all of them, so its
		 * lines' round trips overlap rather than follow each other (512 KiB
		 * all-reduce p50 24.7 -> 23.3 us, pipelined 14.6 -> 13.5 us; 2 x
		 * H200). It reads and writes only its own lines' bytes, so in-place
		 * buffers stay safe.
		 */
		for (uint64_t i = threadIdx.x; i < nlines; i += blockDim.x) {
			const uint32_t w = (uint32_t)(len > 8 * i ? collc_min_u64(8, len - 8 * i) : 0);
			const uint64_t o = off + 8 * i;
			const uint64_t mine = w ? ld_bytes(src + me * pstride + o, w) : 0;
			uint64_t acc = 0, x;

			for (uint32_t p = 0; p < n; p++) {
				x = mine;
				/* R-LL: pairs with W-LL in rank p. */
				if (p != me &&
				    ll_recv_line(b, inbox + collc_oll_line(gen, n, p, i, CUDA_OLL_SLOT_LINES), flag,
						 &x, &oll_abort) < 0)
					break;
				if (coll == COLLC_OP_ALLGATHER) {
					if (w)
						st_bytes(dst + p * blk + o, w, x);
				} else {
					acc = p == 0 ? x : red8(dt, op, acc, x);
				}
			}
			if (*(volatile int *)&oll_abort)
				break;
			if (b->trace && i == 0 && k == 0)
				b->t_ollwait = globaltimer() - b->t_ollwait;
			if (w && coll != COLLC_OP_ALLGATHER)
				st_bytes(dst + o, w, fin ? fin8(dt, n, acc) : acc);
		}
		__syncthreads();
		if (oll_abort)
			return -1;
	}
	return 0;
}

/* One rank alone (cpu/executor.c single_rank). */
__device__ void single_rank(struct blk *b, const char *src, char *dst)
{
	const uint64_t es = b->es, count = b->it.count;
	uint64_t per = collc_div_up(count, b->it.nchannels), off = (uint64_t)b->share * per, n;
	__shared__ uint64_t s1[1];
	int fin = b->it.coll != COLLC_OP_ALLGATHER && b->it.coll != COLLC_OP_BROADCAST;

	if (off >= count || !dst)
		return;
	n = collc_min_u64(per, count - off);
	if (threadIdx.x == 0)
		s1[0] = (uint64_t)(uintptr_t)src;
	__syncthreads();
	reduce_n(b, s1, 1, off * es, dst, off * es, n * es, fin);
}

__device__ __forceinline__ size_t dtype_size(int dt)
{
	switch (dt) {
	case COLLC_INT8:
	case COLLC_UINT8:
		return 1;
	case COLLC_FLOAT16:
	case COLLC_BFLOAT16:
		return 2;
	case COLLC_INT32:
	case COLLC_UINT32:
	case COLLC_FLOAT32:
		return 4;
	default:
		return 8;
	}
}

__device__ __forceinline__ char *untag(uint64_t a)
{
	return a ? (char *)(uintptr_t)((a & ~CUDA_ADDR_LOCAL) - CUDA_ADDR_TAG) : NULL;
}

/* Runs this channel's share of an item; -1 when aborted. */
__device__ int run_item(struct blk *b, const struct cuda_grid_args &a)
{
	const struct cuda_rank *rk = (const struct cuda_rank *)(uintptr_t)b->it.comm_dev;
	const char *src = untag(b->it.sendbuf);
	char *dst = untag(b->it.recvbuf);
	int r;

	b->revoked_dev = &rk->revoked_dev;
	b->nsteps = 0;
	b->es = (uint32_t)dtype_size(b->it.dtype);
	b->algo = a.force_algo ? a.force_algo : b->it.algo;
	b->proto = a.force_proto ? a.force_proto : b->it.proto;
	/*
	 * The communicator's state, loaded unless the block ran this
	 * communicator's last item: then every thread's copy is current (the
	 * block alone advances the steps, and stores them back after each item),
	 * and a chain of three dependent loads (item, struct cuda_rank, struct
	 * cuda_chan) shrinks to one. comm_id is never reused, so a communicator
	 * set up again at the same address never matches.
	 */
	if (b->state_of != b->it.comm_id || !b->it.comm_id) {
		b->revoked_of = (const uint32_t *)(uintptr_t)rk->revoked;
		b->ch = (struct cuda_chan *)(uintptr_t)rk->chan[b->chan];
		b->send_step = b->ch->send_step;
		b->recv_step = b->ch->recv_step;
		b->os_gen = b->ch->os_gen;
		b->my_simple = (char *)(uintptr_t)b->ch->buf_simple;
		b->my_ll = (char *)(uintptr_t)b->ch->buf_ll;
		b->my_ll128 = (char *)(uintptr_t)b->ch->buf_ll128;
		b->nx_simple = (char *)(uintptr_t)b->ch->next_simple;
		b->nx_ll = (char *)(uintptr_t)b->ch->next_ll;
		b->nx_ll128 = (char *)(uintptr_t)b->ch->next_ll128;
		b->next_tail = (uint64_t *)(uintptr_t)b->ch->next_tail;
		b->prev_head = (uint64_t *)(uintptr_t)b->ch->prev_head;
		b->my_head = &b->ch->head;
		b->my_tail = &b->ch->tail;
		b->state_of = b->it.comm_id;
	}
	b->revoked = b->revoked_of;
	if (b->it.nranks == 1) {
		single_rank(b, src, dst);
		return 0;
	}
	if (b->trace)
		b->t_alg = globaltimer();
	if (b->algo == COLLC_ALGO_ONESHOT && b->proto == COLLC_PROTO_LL && collc_oll_coll(b->it.coll))
		r = oll_run(b, src, dst);
	else if (b->algo == COLLC_ALGO_ONESHOT || b->algo == COLLC_ALGO_TWOSHOT)
		r = oneshot(b, src, dst, b->algo == COLLC_ALGO_TWOSHOT && b->it.coll == COLLC_OP_ALLREDUCE,
			    (b->it.sendbuf | b->it.recvbuf) & CUDA_ADDR_LOCAL);
	else if (b->it.coll == COLLC_OP_ALLREDUCE)
		r = ring_allreduce(b, src, dst);
	else
		r = ring_other(b, src, dst);
	__syncthreads();
	if (threadIdx.x == 0) {
		b->ch->send_step = b->send_step;
		b->ch->recv_step = b->recv_step;
		b->ch->os_gen = b->os_gen;
	}
	return r;
}

/* The poller: warp 0 of block 0, lane l of the warp serves FIFO l. */
__device__ void poller(const struct cuda_grid_args &a)
{
	const uint32_t l = threadIdx.x;
	struct cuda_dstate *ds = a.ds;
	int done = l >= a.nlanes;
	uint64_t pos = 0, gate = CUDA_GATE_OPEN, last_coll = 0;
	int acked = 0;
	struct collc_work_fifo *f = done ? NULL : a.fifo[l];
	struct cuda_hlane *hl = done ? NULL : &a.hctrl->lane[l];

	if (!done) {
		pos = ds->lane[l].poll_pos;
		last_coll = ds->lane[l].last_coll;
	}
	for (uint32_t it = 0;; it++) {
		if (__all_sync(FULL_MASK, done))
			break;
		if (done)
			continue;
		if ((it & 63) == 0 && ld_vol32(&f->ctrl.abort)) {
			ds->abort = 1;
			__threadfence();
			done = 1;
			continue;
		}
		/* The gate and the item's seq are read together: one round trip per poll. */
		gate = ld_vol64(&hl->gate);
		/* W1': pairs with W1 in the scheduler: seq with acquire, then the body's loads. */
		uint64_t seq = ld_acq_sys(&f->items[pos & (COLLC_FIFO_DEPTH - 1)].seq);

		if (gate == CUDA_GATE_HOLD) {
			if (!acked) {
				/* Hold: tell the host where we stopped (cuda/executor.c window()). */
				st_vol64(&hl->ack_pos, pos);
				st_vol64(&hl->ack_coll, last_coll);
				__threadfence_system();
				st_vol64(&hl->ack_gate, CUDA_GATE_HOLD);
				acked = 1;
			}
			continue;
		}
		if (pos >= gate) {
			/* G2: stop at the boundary the host chose. */
			st_rel_gpu(&ds->lane[l].stop_epoch, a.epoch);
			done = 1;
			continue;
		}
		if (seq != pos + 1)
			continue;
		/*
		 * The body: a second read after the acquire of seq, never a torn
		 * one. (A system fence here instead of the acquire cost a fence per
		 * item; reading the whole slot every poll, each word carrying seq,
		 * was 3 us slower end to end: bench/RESULTS.md.)
		 */
		{
			const uint4 *src = (const uint4 *)&f->items[pos & (COLLC_FIFO_DEPTH - 1)];
			uint4 *dst = (uint4 *)&ds->items[l][pos & (COLLC_FIFO_DEPTH - 1)];
			uint4 v[8];

#pragma unroll
			for (int k = 0; k < 8; k++)
				v[k] = ld_vol128(src + k);
			if (a.trace) {
				/*
				 * reserved[0] of the device copy: the loads of the body are
				 * issued, not yet back; the hand-off the blocks time starts
				 * here and includes that PCIe read.
				 */
				uint64_t t = globaltimer();

				v[4].z = (uint32_t)t;
				v[4].w = (uint32_t)(t >> 32);
			}
#pragma unroll
			for (int k = 0; k < 8; k++)
				dst[k] = v[k];
			const struct collc_work_item *it2 = (const struct collc_work_item *)v;

			if (it2->kind == COLLC_WORK_COLL)
				last_coll = it2->coll_id;
			if (it2->kind == COLLC_WORK_QUIT)
				done = 1;
		}
		/* G1: the copy, then dseq. */
		st_rel_gpu(&ds->lane[l].dseq, pos + 1);
		pos++;
	}
	if (l < a.nlanes) {
		ds->lane[l].poll_pos = pos;
		ds->lane[l].last_coll = last_coll;
	}
}

/*
 * Grid blocks per SM the registers must allow. 1 lets the compiler take 128
 * registers a thread, the whole register file of an SM for a 512-thread
 * block: no client block can then share an SM with a grid block, and under
 * MPS a client kernel that fills the GPU ran 94% slower next to the default
 * 65-block grid (bench/run-interfere.sh, 2 x H200). 2 caps it at 64 (with
 * some spills): client blocks fill the rest of a grid block's SM, the loss
 * was 1.7% idle and 2.5% with 256 MiB all-reduces running, for 2.4% less
 * all-reduce busbw at 512 MiB and 0.9 us more at 8 bytes (bench/RESULTS.md).
 */
#ifndef COLLC_GRID_BLOCKS_PER_SM
#define COLLC_GRID_BLOCKS_PER_SM 2
#endif

__global__ void __launch_bounds__(CUDA_THREADS, COLLC_GRID_BLOCKS_PER_SM)
collc_persist(const struct cuda_grid_args a)
{
	struct blk b; /* per thread: every thread keeps the same copy */
	__shared__ int state; /* 0 item ready, 1 stop, 2 abort, 3 item abandoned */
	uint32_t lane, chan;
	uint64_t pos, t_seen = 0;

	if (blockIdx.x == 0) {
		if (threadIdx.x < 32)
			poller(a);
		return;
	}
	lane = (blockIdx.x - 1) / a.nchannels;
	chan = (blockIdx.x - 1) % a.nchannels;
	b.ds = a.ds;
	b.hctl = &a.fifo[lane]->ctrl;
	b.revoked = NULL;
	b.revoked_dev = NULL;
	b.chan = chan;
	b.trace = a.trace;
	b.state_of = 0;
	b.t_alg = b.t_ollwait = 0;
	pos = a.ds->chan_pos[lane][chan];
	for (;;) {
		if (threadIdx.x == 0) {
			struct cuda_dlane *dl = &a.ds->lane[lane];

			state = 0;
			for (uint32_t spins = 0;; spins++) {
				/* G1': pairs with G1 in the poller. */
				if (ld_acq_gpu(&dl->dseq) > pos) {
					if (a.trace)
						t_seen = globaltimer();
					break;
				}
				/*
				 * G2': a stop is final only if dseq did not move before it.
				 * Looked at every 16th spin: each acquire load waits for the
				 * one before it, so the dseq poll runs at twice the rate.
				 */
				if ((spins & 15) == 15 && ld_acq_gpu(&dl->stop_epoch) == a.epoch &&
				    ld_acq_gpu(&dl->dseq) <= pos) {
					state = 1;
					break;
				}
				if (check_abort(&b, spins)) {
					state = 2;
					break;
				}
				if (spins > 4096 && a.idle_sleep_ns)
					__nanosleep(a.idle_sleep_ns);
			}
		}
		__syncthreads();
		if (state)
			break;
#pragma unroll
		for (int k = 0; k < 8; k++)
			((uint4 *)&b.it)[k] =
				ld_data((const uint4 *)&a.ds->items[lane][pos & (COLLC_FIFO_DEPTH - 1)] + k);
		b.share = collc_item_share(b.it.chan_base, chan, a.nchannels);
		b.t_alg = t_seen;
		b.t_ollwait = 0;
		if (b.it.kind == COLLC_WORK_COLL && b.share < b.it.nchannels && run_item(&b, a) < 0) {
			/*
			 * Every thread saw the same -1 (the primitives agree through
			 * shared memory); thread 0 alone decides between the grid's
			 * abort and the communicator's, so the block stays together.
			 */
			if (threadIdx.x == 0)
				state = grid_aborted(&b) ? 2 : 3;
			__syncthreads();
			if (state == 2)
				break;
		}
		b.revoked = NULL;
		b.revoked_dev = NULL;
		__syncthreads();
		if (threadIdx.x == 0) {
			struct collc_consumed *wc = &a.fifo[lane]->ctrl.work_consumed[chan];

			if (state == 3)
				st_vol64(&wc->aborted, ++a.ds->chan_aborted[lane][chan]);
			if (a.trace && b.it.kind == COLLC_WORK_COLL && b.share < b.it.nchannels) {
				uint64_t *tr = a.ds->chan_trace[lane][chan];

				tr[CUDA_TRACE_HANDOFF] += t_seen - b.it.reserved[0];
				tr[CUDA_TRACE_RUN] += globaltimer() - t_seen;
				tr[CUDA_TRACE_ITEMS]++;
				tr[CUDA_TRACE_SETUP] += b.t_alg - t_seen;
				tr[CUDA_TRACE_OLLWAIT] += b.t_ollwait;
				for (int k = 0; k < CUDA_TRACE_N; k++)
					st_vol64(&wc->reserved[k], tr[k]);
			}
			/* E1: results, system fence, then work_consumed (mapped host memory). */
			__threadfence_system();
			st_vol64(&wc->value, pos + 1);
			a.ds->chan_pos[lane][chan] = pos + 1;
		}
		pos++;
		if (b.it.kind == COLLC_WORK_QUIT)
			break;
	}
}

extern "C" int cuda_grid_launch(const struct cuda_grid_args *args, void *stream)
{
	unsigned nblocks = 1 + args->nlanes * args->nchannels;

	collc_persist<<<nblocks, CUDA_THREADS, 0, (cudaStream_t)stream>>>(*args);
	return (int)cudaGetLastError();
}

extern "C" int cuda_grid_preload(void)
{
	struct cudaFuncAttributes attr;

	return (int)cudaFuncGetAttributes(&attr, collc_persist);
}
