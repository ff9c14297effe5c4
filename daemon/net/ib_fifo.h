/* SPDX-License-Identifier: MIT */
/*
 * The ib transport's clear-to-send FIFO, device-independent so that it is
 * unit-tested without RDMA hardware.
 *
 * The receiver of a connection posts a receive by RDMA-writing one element
 * per grouped receive into the sender's FIFO (registered memory on the
 * sending side): slot = seq & IB_FIFO_MASK, element [slot][sub]. The sender
 * learns the slot is valid when its `seq1` equals seq + 1 (0 means never
 * written, so a zeroed FIFO is empty), then RDMA-writes the payload to `addr`
 * with immediate data naming (seq, sub); the receiver's completion carries
 * the byte count and that immediate. The receiver may have at most
 * IB_FIFO_SLOTS receives posted and not completed (its credits).
 *
 * Indices are free-running 64-bit; the immediate carries the low 24 bits of
 * seq and 3 bits of sub, widened again against the oldest outstanding seq.
 */
#ifndef COLLCD_NET_IB_FIFO_H
#define COLLCD_NET_IB_FIFO_H

#include <stddef.h>
#include <stdint.h>

#define IB_FIFO_SLOTS     32 /* = NCCL_NET_MAX_REQUESTS */
#define IB_FIFO_MASK      (IB_FIFO_SLOTS - 1)
#define IB_FIFO_MAX_RECVS 8
#define IB_IMM_SUB_BITS   3
#define IB_IMM_SEQ_BITS   24
#define IB_IMM_SEQ_MASK   ((1u << IB_IMM_SEQ_BITS) - 1)

_Static_assert((IB_FIFO_SLOTS & IB_FIFO_MASK) == 0, "power of two");
_Static_assert(IB_FIFO_MAX_RECVS == 1 << IB_IMM_SUB_BITS, "sub fits the immediate");
_Static_assert(IB_FIFO_SLOTS < (1u << IB_IMM_SEQ_BITS), "window fits the immediate");

/* One posted receive as the sender sees it; written by the receiver's NIC. */
struct ib_cts {
	uint64_t addr;
	uint32_t rkey;
	uint32_t nreqs; /* receives grouped in this slot */
	int32_t size;   /* most bytes this receive takes */
	int32_t tag;
	uint64_t seq1; /* seq + 1, written last: validates the element */
};
_Static_assert(sizeof(struct ib_cts) == 32, "FIFO element wire size");
_Static_assert(offsetof(struct ib_cts, seq1) == 24, "seq1 last");

static inline uint32_t ib_fifo_slot(uint64_t seq)
{
	return (uint32_t)(seq & IB_FIFO_MASK);
}

/* Byte offset of element (seq, sub) in the sender's FIFO region. */
static inline uint64_t ib_fifo_offset(uint64_t seq, uint32_t sub)
{
	return ((uint64_t)ib_fifo_slot(seq) * IB_FIFO_MAX_RECVS + sub) * sizeof(struct ib_cts);
}

#define IB_FIFO_BYTES ((size_t)IB_FIFO_SLOTS * IB_FIFO_MAX_RECVS * sizeof(struct ib_cts))

/* Receiver: may it post receive `posted` while `completed` have completed? */
static inline int ib_fifo_can_post(uint64_t posted, uint64_t completed)
{
	return posted - completed < IB_FIFO_SLOTS;
}

/* Sender: is element (seq, sub) the one posted for seq? Acquire: the
 * element's other fields are read after seq1 (pairs with the NIC's in-order
 * placement of the receiver's single RDMA write that ends with seq1). */
static inline int ib_fifo_ready(const struct ib_cts *e, uint64_t seq)
{
	return __atomic_load_n(&e->seq1, __ATOMIC_ACQUIRE) == seq + 1;
}

static inline uint32_t ib_imm_encode(uint64_t seq, uint32_t sub)
{
	return (uint32_t)((seq & IB_IMM_SEQ_MASK) << IB_IMM_SUB_BITS) |
	       (sub & (IB_FIFO_MAX_RECVS - 1));
}

/* Widens an immediate against `base`, the oldest receive not yet completed;
 * valid because at most IB_FIFO_SLOTS receives are outstanding. Returns -1
 * when the immediate names no outstanding receive. */
static inline int ib_imm_decode(uint32_t imm, uint64_t base, uint64_t posted, uint64_t *ret_seq,
				uint32_t *ret_sub)
{
	uint32_t low = imm >> IB_IMM_SUB_BITS;
	uint64_t seq = base + ((low - (uint32_t)base) & IB_IMM_SEQ_MASK);

	if (seq - base >= posted - base || seq - base >= IB_FIFO_SLOTS)
		return -1;
	*ret_seq = seq;
	*ret_sub = imm & (IB_FIFO_MAX_RECVS - 1);
	return 0;
}

#endif
