/* SPDX-License-Identifier: MIT */
/*
 * What every part of the persistent grid uses: the loads and stores with
 * their memory orderings (ld_acq_sys / ld_acq_gpu acquire, st_rel_gpu /
 * st_rel_sys release, ld_vol* / st_vol* volatile: ordered only by the
 * fences their callers place; ld_data / st_data payload, L1 bypassed), the
 * per-block state (struct blk), the abort checks and wait_ge(), the
 * acquire poll every wait on a peer's counter goes through. The orderings
 * are named where they are used (persist_kernel.cu's list, proto/prims.h).
 */
#ifndef COLLCD_CUDA_DEVICE_COMMON_H
#define COLLCD_CUDA_DEVICE_COMMON_H

#include <cuda_runtime.h>
#include <stdint.h>

/* The proto/ headers are C11; in C++ their asserts are static_assert. */
#ifndef _Static_assert
#define _Static_assert static_assert
#endif
#include "daemon/cuda/grid.h"
#include "include/collc.h"
#include "proto/shm.h"

#define FULL_MASK 0xffffffffu

__device__ __forceinline__ uint64_t ld_acq_sys(const uint64_t *p)
{
	uint64_t v;

	asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

/*
 * A load that discards a copy of the line the L2 may hold: the GPU caches
 * lines of system memory there, and a word that something other than this
 * GPU's SMs writes (the host, a stream's memory operation) can otherwise
 * read stale from it (PTX ld.cv).
 */
__device__ __forceinline__ uint32_t ld_cv32(const uint32_t *p)
{
	uint32_t v;

	asm volatile("ld.global.cv.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
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

__device__ __forceinline__ void st_vol32(uint32_t *p, uint32_t v)
{
	asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
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
	asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];"
		     : "=l"(a), "=l"(b)
		     : "l"(p)
		     : "memory");
}

__device__ __forceinline__ void st_vol2x64(void *p, uint64_t a, uint64_t b)
{
	asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" ::"l"(p), "l"(a), "l"(b)
		     : "memory");
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

/* One channel block's state; every thread keeps the same copy. */
struct blk {
	const struct collc_work_item *it;       /* the running item, in shared memory */
	const struct collc_work_copies *copies; /* the item's copy list (host memory) */
	const uint64_t *host_seq;               /* the item's seq in the FIFO (host memory) */
	struct cuda_chan *ch;
	struct collc_fifo_ctrl *hctl; /* this lane's FIFO control (host memory) */
	struct cuda_dstate *ds;
	const uint32_t *
		revoked; /* the running item's communicator abort word (host); NULL between items */
	const uint32_t
		*revoked_dev; /* the same in its struct cuda_rank (device); NULL between items */
	uint32_t nsteps;      /* thread 0: steps of the running item, for the revoked check */
	uint64_t send_step, recv_step, os_gen;
	char *my_simple, *my_ll, *my_ll128, *nx_simple, *nx_ll, *nx_ll128;
	uint64_t *next_tail, *prev_head, *my_head, *my_tail;
	uint32_t *next_len; /* Simple across daemons: the step's bytes for the proxy; NULL: none */
	struct cuda_xconn *prev_x; /* Simple across daemons: our receive ring; NULL: none */
	uint32_t es, proto, algo, chan; /* chan: the block's channel (its connections) */
	uint32_t peer_base; /* one-shot's rank t is ch->peers[peer_base + t] (hier.h: the block's first) */
	const uint8_t *order; /* hier.h: the group ring's order (ring_order()); NULL: the channel's */
	uint32_t share;       /* the item's share it runs: (chan - chan_base) mod channels */
	const uint32_t *revoked_of; /* the host abort word of state_of */
	uint64_t state_of;          /* comm_id whose channel state the fields above hold; 0: none */
	uint32_t trace;             /* COLLC_CUDA_TRACE: thread 0 fills the stamps below */
	uint64_t t_alg, t_done;     /* the algorithm's start and end (thread 0) */
	uint64_t t_ollwait;         /* one-shot LL: first line pushed -> last line received */
};

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

#endif
