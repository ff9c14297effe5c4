/*
 * The Simple credit ring of proto/prims.h: one connection of STEPS slots,
 * a sender and a receiver, NSTEPS steps in all, SLICE steps per slice.
 *
 * Sender, for steps [step, step + SLICE): wait head + STEPS >= step + SLICE
 * (S2: acquire head), write the slots, then tail = step + SLICE (S1: release,
 * after the payload). Receiver, for step: wait tail >= step + 1 (R1: acquire
 * tail), read the slot, then head = step + 1 (R2: release, after the reads).
 *
 * Promela is sequentially consistent: this checks the credit logic; S1/R1 and
 * R2/S2 are what make real memory behave like it.
 *
 * A slot is two words, written and read one at a time, each tagged step + 1
 * (0 is fresh memory). Checked: the receiver reads exactly its step's data,
 * never older and never torn; the sender never overwrites a slot the receiver
 * has not finished reading (a ghost counter, independent of head); and no
 * invalid end state (both sides finish).
 *
 * -DSTEPS=n -DSLICE=n -DNSTEPS=n (a multiple of SLICE); -DBROKEN=1: tail
 * published before the payload; 2: the sender ignores head; 3: the receiver
 * posts head before reading; 4: the receiver never posts head (the sender
 * must then stall after STEPS slots: a deadlock).
 */
#ifndef STEPS
#define STEPS 2
#endif
#ifndef SLICE
#define SLICE 1
#endif
#ifndef NSTEPS
#define NSTEPS (2 * STEPS + 2 * SLICE)
#endif
#ifndef BROKEN
#define BROKEN 0
#endif

#define SLOT(s) ((s) % STEPS)

/* The receiver's buffer: written by the sender, read by the receiver. */
byte word_a[STEPS];
byte word_b[STEPS];
byte tail; /* written by the sender */
byte head; /* written by the receiver */

/* Ghost: steps the receiver has finished reading; not seen by the protocol. */
byte read_done;

active proctype sender()
{
	byte step = 0;
	byte i;

	do
	:: step >= NSTEPS -> break
	:: else ->
#if BROKEN != 2
		head + STEPS >= step + SLICE;	/* S2: pairs with R2 */
#endif
		assert(read_done + STEPS >= step + SLICE);
#if BROKEN == 1
		tail = step + SLICE;
#endif
		i = 0;
		do
		:: i == SLICE -> break
		:: else ->
			word_a[SLOT(step + i)] = step + i + 1;
			word_b[SLOT(step + i)] = step + i + 1;
			i++
		od;
#if BROKEN != 1
		tail = step + SLICE;	/* S1: pairs with R1 */
#endif
		step = step + SLICE
	od
}

active proctype receiver()
{
	byte step = 0;
	byte a, b;

	do
	:: step == NSTEPS -> break
	:: else ->
		tail >= step + 1;	/* R1: pairs with S1 */
#if BROKEN == 3
		head = step + 1;
#endif
		a = word_a[SLOT(step)];
		b = word_b[SLOT(step)];
		assert(a == step + 1 && b == step + 1);
		read_done = step + 1;
#if BROKEN != 3 && BROKEN != 4
		head = step + 1;	/* R2: pairs with S2 */
#endif
		step++
	od
}
