/* SPDX-License-Identifier: MIT */
/*
 * Memory-ordering helpers shared by collcd and libcollc. Every use names its
 * partner in a comment (A1 pairs with R1, ...).
 */
#ifndef COLLC_COMMON_ATOMICS_H
#define COLLC_COMMON_ATOMICS_H

#include <stdint.h>

#define load_relaxed(p)         __atomic_load_n((p), __ATOMIC_RELAXED)
#define load_acquire(p)         __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define store_relaxed(p, v)     __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define store_release(p, v)     __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define fetch_add(p, v)         __atomic_fetch_add((p), (v), __ATOMIC_SEQ_CST)
#define fetch_add_relaxed(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
/* Stores desired where *p holds expected; nonzero when it did (acq_rel on success). */
#define cas_acq_rel(p, expected, desired)                                                        \
	({                                                                                         \
		__typeof__(*(p)) e_ = (expected);                                                  \
		__atomic_compare_exchange_n((p), &e_, (desired), 0, __ATOMIC_ACQ_REL,              \
					    __ATOMIC_ACQUIRE);                                     \
	})
#define fence_acq_rel()         __atomic_thread_fence(__ATOMIC_ACQ_REL)
#define fence_seq_cst()         __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define compiler_barrier()      __asm__ __volatile__("" ::: "memory")

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	compiler_barrier();
#endif
}

#endif /* COLLC_COMMON_ATOMICS_H */
