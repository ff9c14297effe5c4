/* SPDX-License-Identifier: MIT */
/*
 * Step, slot, slice and flag arithmetic of the Simple, LL and LL128 protocols,
 * shared by the CPU executor and the persistent CUDA grid.
 *
 * A connection is a ring of COLLC_STEPS slots in the receiver's memory. Steps
 * are monotonic 64-bit counters; the slot index (step % STEPS) never decides
 * anything on its own.
 *
 * Simple: the sender may fill steps [step, step + stepsPerSlice) once
 *   head + STEPS >= step + stepsPerSlice, writes the slots, fences, then
 *   publishes tail = step + stepsPerSlice. The receiver may read step once
 *   tail > step (tail >= step + 1), consumes it, then publishes head.
 *   Orderings, by name:
 *     S1 (sender): payload stores, then tail with release (system scope
 *        fence on the GPU); pairs with R1.
 *     R1 (receiver): tail with acquire, then payload loads; pairs with S1.
 *     R2 (receiver): payload loads, then head with release; pairs with S2.
 *     S2 (sender): head with acquire before the slot is overwritten; pairs
 *        with R2.
 *
 * LL and LL128 carry the ready signal inside the data (a flag per 8-byte
 * half, or per 128-byte line); the receiver polls the data itself and posts
 * head as in Simple (R2/S2), so the sender still never runs more than STEPS
 * steps ahead. Flags are generations (step + 1), never checksums: a slot
 * reused after a wrap still holds the previous generation, which mismatches.
 *
 * Everything here is pure arithmetic on values the caller loaded; the loads
 * and stores themselves (and their ordering) belong to the executors.
 */
#ifndef COLLC_PROTO_PRIMS_H
#define COLLC_PROTO_PRIMS_H

#include <stdint.h>

#include "proto/shm.h"

#if defined(__cplusplus)
#define COLLC_PRIMS_ASSERT(c, m) static_assert(c, m)
#else
#define COLLC_PRIMS_ASSERT(c, m) _Static_assert(c, m)
#endif

#if defined(__CUDACC__)
#define COLLC_HD __host__ __device__ __forceinline__
#else
#define COLLC_HD static inline
#endif

#define COLLC_STEPS 8u

COLLC_HD uint64_t collc_div_up(uint64_t x, uint64_t y)
{
	return (x + y - 1) / y;
}

COLLC_HD uint64_t collc_round_up(uint64_t x, uint64_t y)
{
	return collc_div_up(x, y) * y;
}

COLLC_HD uint64_t collc_min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

COLLC_HD uint64_t collc_max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/*
 * The share of a work item that channel ch of an executor with nch channels
 * runs (proto/work.h): (ch - chan_base) mod nch; it takes part when the share
 * is below the item's nchannels.
 */
COLLC_HD uint32_t collc_item_share(uint32_t chan_base, uint32_t ch, uint32_t nch)
{
	return (ch + nch - chan_base % nch) % nch;
}

/*
 * What one primitive call does with one step's payload; the algorithms
 * (proto/algo_ring.h) name one of the seven combinations below, each
 * executor implements them (cpu/prims.c cpu_prim(), the grid's prim<flags>).
 */
#define COLLC_P_RECV   (1 << 0) /* consume a step of the receive connection */
#define COLLC_P_SRC    (1 << 1) /* read the local source buffer */
#define COLLC_P_REDUCE (1 << 2) /* combine received data with the source */
#define COLLC_P_DST    (1 << 3) /* write the result to the destination buffer */
#define COLLC_P_SEND   (1 << 4) /* write the result to a step of the send connection */
#define COLLC_P_POSTOP (1 << 5) /* apply the AVG division to the destination */

#define COLLC_PRIM_SEND             (COLLC_P_SRC | COLLC_P_SEND)
#define COLLC_PRIM_RECV             (COLLC_P_RECV | COLLC_P_DST)
#define COLLC_PRIM_COPY_SEND        (COLLC_P_SRC | COLLC_P_DST | COLLC_P_SEND)
#define COLLC_PRIM_RECV_REDUCE_SEND (COLLC_P_RECV | COLLC_P_SRC | COLLC_P_REDUCE | COLLC_P_SEND)
#define COLLC_PRIM_RECV_REDUCE_COPY_SEND                                                           \
	(COLLC_P_RECV | COLLC_P_SRC | COLLC_P_REDUCE | COLLC_P_DST | COLLC_P_SEND | COLLC_P_POSTOP)
#define COLLC_PRIM_RECV_REDUCE_COPY                                                                \
	(COLLC_P_RECV | COLLC_P_SRC | COLLC_P_REDUCE | COLLC_P_DST | COLLC_P_POSTOP)
#define COLLC_PRIM_RECV_COPY_SEND (COLLC_P_RECV | COLLC_P_DST | COLLC_P_SEND)

/* The slot a step lands in, for a ring of `steps` slots. */
COLLC_HD uint32_t collc_slot(uint64_t step, uint32_t steps)
{
	return (uint32_t)(step % steps);
}

/* Simple, sender side: may steps [step, step + n) be written? */
COLLC_HD int collc_simple_can_send(uint64_t head, uint64_t step, uint32_t n, uint32_t steps)
{
	return head + steps >= step + n;
}

/* Simple, receiver side: has step been published? */
COLLC_HD int collc_simple_can_recv(uint64_t tail, uint64_t step)
{
	return tail >= step + 1;
}

/* Bytes of one step (one slot) of a connection buffer. */
COLLC_HD uint64_t collc_step_bytes(uint64_t buffer_bytes, uint32_t steps)
{
	return buffer_bytes / steps;
}

/* Bytes of one chunk: stepBytes * chunkSteps. */
COLLC_HD uint64_t collc_chunk_bytes(uint64_t buffer_bytes, uint32_t steps, uint32_t chunk_steps)
{
	return collc_step_bytes(buffer_bytes, steps) * chunk_steps;
}

/*
 * Elements per slice: max(divUp(nelem, 16 * slicesPerChunk) * 16,
 * stepSize * stepsPerSlice / 32), with stepSize in elements.
 */
COLLC_HD uint64_t collc_slice_elems(uint64_t nelem, uint32_t slices_per_chunk, uint64_t step_elems,
				    uint32_t steps_per_slice)
{
	uint64_t a = collc_div_up(nelem, 16ull * slices_per_chunk) * 16;
	uint64_t b = step_elems * steps_per_slice / 32;

	return collc_max_u64(a, b);
}

/* The offset of a step's slot in a ring of `steps` slots of slot_bytes each. */
COLLC_HD uint64_t collc_slot_offset(uint64_t step, uint32_t steps, uint64_t slot_bytes)
{
	return (uint64_t)collc_slot(step, steps) * slot_bytes;
}

/*
 * Geometry defaults, as NCCL ships them: a 4 MiB Simple buffer per
 * connection, ALLREDUCE_CHUNKSTEPS = STEPS / 2 and ALLREDUCE_SLICESTEPS =
 * STEPS / 4, so a chunk is half the buffer (64 KiB / 1 MiB / 4 MiB buffers
 * give 32 KiB / 512 KiB / 2 MiB chunks) and a chunk is two slices.
 */
#define COLLC_SIMPLE_BUFFER_BYTES (4u << 20)
#define COLLC_CHUNK_STEPS         (COLLC_STEPS / 2)
#define COLLC_SLICE_STEPS         (COLLC_STEPS / 4)
#define COLLC_SLICES_PER_CHUNK    (COLLC_CHUNK_STEPS / COLLC_SLICE_STEPS)

/* Simple: bytes of one slot; the sender's payload for one step fits in it. */
COLLC_HD uint64_t collc_simple_slot_bytes(uint64_t buffer_bytes, uint32_t steps)
{
	return collc_step_bytes(buffer_bytes, steps);
}

/*
 * LL: 16-byte lines {data1, flag1, data2, flag2}, 8 payload bytes each.
 *
 * W-LL (sender): each {data, flag} half is one 8-byte store (v[0], v[1]), or
 *   the whole line one 16-byte store; no fence, the flag travels in the same
 *   store as the data it guards. Pairs with R-LL.
 * R-LL (receiver): one 16-byte load (or two 8-byte loads) of the line, then
 *   collc_ll_ready() on that snapshot; the payload comes from the same
 *   snapshot, never from a second load. Pairs with W-LL.
 * A torn line (one half new, one half old) fails the check because each half
 * carries its own flag. Lines need no ordering among themselves: every line
 * validates itself, so the receiver may poll them in any order.
 *
 * The flag is the low 32 bits of step + 1, so it repeats every 2^32 steps
 * (and is 0, the value of fresh memory, at step 2^32 - 1): a line can be
 * mistaken only if nothing wrote it for exactly a multiple of 2^32 steps,
 * which the receiver never waits on because the sender writes every line it
 * reads. NCCL's flag-wrap cleanup exists for narrower test flags only.
 */
#define COLLC_LL_LINE_BYTES   16u
#define COLLC_LL_LINE_PAYLOAD 8u
#define COLLC_LL_STEP_LINES   4096u /* NCCL: 8 lines per thread, 512 threads */
#define COLLC_LL_BUFFER_BYTES (COLLC_STEPS * COLLC_LL_STEP_LINES * COLLC_LL_LINE_BYTES)

/* Lines live in 16-byte aligned buffers, so one line is one 16-byte access. */
union collc_ll_line {
	struct {
		uint32_t data1; /* payload bits 0..31 */
		uint32_t flag1;
		uint32_t data2; /* payload bits 32..63 */
		uint32_t flag2;
	} w;
	uint64_t v[2]; /* the two {data, flag} halves, little endian */
};
COLLC_PRIMS_ASSERT(sizeof(union collc_ll_line) == COLLC_LL_LINE_BYTES, "ll_line size");

/* The generation the sender writes into, and the receiver expects of, step. */
COLLC_HD uint32_t collc_ll_flag(uint64_t step)
{
	return (uint32_t)(step + 1);
}

/* A line carrying 8 payload bytes with both flags set to flag. */
COLLC_HD union collc_ll_line collc_ll_pack(uint64_t payload, uint32_t flag)
{
	union collc_ll_line line;

	line.w.data1 = (uint32_t)payload;
	line.w.flag1 = flag;
	line.w.data2 = (uint32_t)(payload >> 32);
	line.w.flag2 = flag;
	return line;
}

/* Is this snapshot of a line (see R-LL) complete for generation flag? */
COLLC_HD int collc_ll_ready(union collc_ll_line line, uint32_t flag)
{
	return line.w.flag1 == flag && line.w.flag2 == flag;
}

/* The 8 payload bytes of a line that passed collc_ll_ready(). */
COLLC_HD uint64_t collc_ll_payload(union collc_ll_line line)
{
	return (uint64_t)line.w.data1 | ((uint64_t)line.w.data2 << 32);
}

/* Lines that carry nbytes of payload. */
COLLC_HD uint64_t collc_ll_lines(uint64_t nbytes)
{
	return collc_div_up(nbytes, COLLC_LL_LINE_PAYLOAD);
}

/* Lines in one slot of an LL buffer of buffer_bytes split into steps slots. */
COLLC_HD uint64_t collc_ll_slot_lines(uint64_t buffer_bytes, uint32_t steps)
{
	return buffer_bytes / steps / COLLC_LL_LINE_BYTES;
}

/* Payload bytes of one LL step: half the slot (32 KiB by default). */
COLLC_HD uint64_t collc_ll_step_bytes(uint64_t buffer_bytes, uint32_t steps)
{
	return collc_ll_slot_lines(buffer_bytes, steps) * COLLC_LL_LINE_PAYLOAD;
}

/*
 * One-shot LL (all-reduce): every rank pushes its share as LL lines straight
 * into every peer's inbox and reduces what the peers pushed into its own; no
 * rank ever reads another's buffers, and there is no barrier before or after.
 *
 * A rank's inbox on a channel holds COLLC_OLL_SLOTS slots; slot s holds one
 * region of slot_lines lines per sending rank. A share moves in rounds of at
 * most slot_lines lines; each round takes a fresh generation g (the
 * channel's one-shot generation, shared with the Simple one-shot, and equal
 * on every rank because every rank runs the same items), lands in slot
 * g % COLLC_OLL_SLOTS, and carries flag collc_ll_flag(g) (W-LL / R-LL).
 *
 * Reuse (OLL1): a rank writes round g into a peer's slot only after it
 * finished generation g - 1, for which it received a line of that peer's
 * round g - 1 (or, if g - 1 was a Simple one-shot item, passed its closing
 * barrier); the peer sent that line only after it finished round g - 2, the
 * round that last used the slot. Two slots suffice, provided every round
 * carries at least one line: an empty round (an empty share) still sends
 * line 0, or a rank could run ahead of a peer by a round that proves
 * nothing (tests/model/oneshot_ll.pml checks both).
 *
 * OLL1 also needs a round's reads of the inbox done before the next round's
 * first push leaves: the CPU executor puts an acquire-release fence between
 * them; on the GPU every value a thread reads is used (stored to the
 * destination) before the block's barrier that ends the round, so the loads
 * have returned before any thread pushes again.
 */
#define COLLC_OLL_SLOTS 2u

/* The collectives one-shot LL runs: every rank sends to every other (COLLC_OP_*). */
COLLC_HD int collc_oll_coll(int coll)
{
	return coll == COLLC_OP_ALLREDUCE || coll == COLLC_OP_ALLGATHER ||
	       coll == COLLC_OP_REDUCE_SCATTER;
}

/* Lines of a round that carries nbytes of payload: never fewer than one (OLL1). */
COLLC_HD uint64_t collc_oll_lines(uint64_t nbytes)
{
	return nbytes ? collc_ll_lines(nbytes) : 1;
}

/* Line index, in an inbox, of line `line` that rank `from` sends in generation gen. */
COLLC_HD uint64_t collc_oll_line(uint64_t gen, uint32_t nranks, uint32_t from, uint64_t line,
				 uint64_t slot_lines)
{
	return ((gen % COLLC_OLL_SLOTS) * nranks + from) * slot_lines + line;
}

/* Lines of one rank's inbox on one channel. */
COLLC_HD uint64_t collc_oll_inbox_lines(uint32_t nranks, uint64_t slot_lines)
{
	return (uint64_t)COLLC_OLL_SLOTS * nranks * slot_lines;
}

/*
 * LL128: 128-byte lines of sixteen 8-byte words; words 0..14 carry payload,
 * word 15 the flag (step + 1, all 64 bits, so it never repeats).
 *
 * W128 (sender): the 15 data words, then the flag word with release (CPU:
 *   store-release; GPU: NCCL relies on a warp's stores of one line reaching
 *   the peer as a unit, and enables LL128 only where they do). Pairs with
 *   R128.
 * R128 (receiver): the flag word with acquire, then the data words (CPU);
 *   on the GPU the flag lane of each line compares and the warp reloads
 *   until __any_sync() says no lane is missing its flag, keeping the data of
 *   the load round that matched. Pairs with W128.
 * Unlike LL one flag guards 120 bytes, so the data must be visible before
 * the flag: a flag that overtakes its data lets a partial line through.
 */
#define COLLC_LL128_LINE_WORDS   16u
#define COLLC_LL128_LINE_BYTES   128u
#define COLLC_LL128_DATA_WORDS   15u
#define COLLC_LL128_FLAG_WORD    15u
#define COLLC_LL128_LINE_PAYLOAD 120u
#define COLLC_LL128_STEP_LINES   4800u /* NCCL: 120 words per thread, 640 threads */
#define COLLC_LL128_BUFFER_BYTES (COLLC_STEPS * COLLC_LL128_STEP_LINES * COLLC_LL128_LINE_BYTES)

COLLC_PRIMS_ASSERT(COLLC_LL128_DATA_WORDS * 8 == COLLC_LL128_LINE_PAYLOAD, "ll128 payload");
COLLC_PRIMS_ASSERT(COLLC_LL128_LINE_WORDS * 8 == COLLC_LL128_LINE_BYTES, "ll128 line");

COLLC_HD uint64_t collc_ll128_flag(uint64_t step)
{
	return step + 1;
}

/*
 * Is the line complete for generation flag? line is the receiver's copy
 * (see R128: its flag word was loaded before its data words).
 */
COLLC_HD int collc_ll128_ready(const uint64_t *line, uint64_t flag)
{
	return line[COLLC_LL128_FLAG_WORD] == flag;
}

/* Lines that carry nbytes of payload. */
COLLC_HD uint64_t collc_ll128_lines(uint64_t nbytes)
{
	return collc_div_up(nbytes, COLLC_LL128_LINE_PAYLOAD);
}

/* The word offset, from the first line, of payload word i (8 bytes each). */
COLLC_HD uint64_t collc_ll128_data_word(uint64_t i)
{
	return i / COLLC_LL128_DATA_WORDS * COLLC_LL128_LINE_WORDS + i % COLLC_LL128_DATA_WORDS;
}

/* Lines in one slot of an LL128 buffer of buffer_bytes split into steps slots. */
COLLC_HD uint64_t collc_ll128_slot_lines(uint64_t buffer_bytes, uint32_t steps)
{
	return buffer_bytes / steps / COLLC_LL128_LINE_BYTES;
}

/* Payload bytes of one LL128 step: 15/16 of the slot (576000 by default). */
COLLC_HD uint64_t collc_ll128_step_bytes(uint64_t buffer_bytes, uint32_t steps)
{
	return collc_ll128_slot_lines(buffer_bytes, steps) * COLLC_LL128_LINE_PAYLOAD;
}

#endif /* COLLC_PROTO_PRIMS_H */
