/*
 * A proxied Simple ring whose receives may land straight in the rank's
 * buffer (exec.h exec_link.known/dst; cpu/prims.c dst_publish(), node.c
 * link_step()): STEPS slots, NSTEPS steps in items of ISTEPS steps.
 *
 * The rank (receiver) names where each step lands before the proxy may post
 * it: step_dst[k % STEPS] (SLOT, or the rank's buffer), then dst_pub = k + 1
 * (D1: release, after the names). It names more before it waits for a step,
 * and after each step it consumed, before head = step + 1 (R2), up to its
 * window recv_step + STEPS. An even item walks its steps ahead: it names its
 * own (some land in its buffer) and none past its end. An odd item is one
 * without a walk ahead (cpu_copy_relay(), the hierarchical reduce-scatter):
 * it names slots for its whole window, into the next item, which then finds
 * its first steps named already.
 *
 * The proxy posts step k once k < head + STEPS (S2) and k < dst_pub (D1':
 * acquire), reading the name then; later (any interleaving) the step's data
 * arrives where it posted it, and tail = k + 1 (S1). The rank reads the step
 * where it named it (R1).
 *
 * Promela is sequentially consistent: this checks the naming and credit
 * logic; the release/acquire pairs are what make real memory behave like it.
 *
 * Checked: the rank reads exactly its step's data, from where it named it;
 * the proxy never lands data in a slot the rank has not finished reading;
 * some steps land in the rank's buffer (not vacuous); no invalid end state.
 *
 * -DSTEPS=n -DNSTEPS=n -DISTEPS=n; -DBROKEN=1: dst_pub stored before the
 * names; 2: the rank names one step past its window (the name of a step not
 * yet consumed is overwritten); 3: the proxy posts by head alone, ignoring
 * dst_pub; 4: the rank names steps only after consuming one, never before it
 * waits (the first step is never named: a deadlock).
 */
#ifndef STEPS
#define STEPS 2
#endif
#ifndef NSTEPS
#define NSTEPS 8
#endif
#ifndef ISTEPS
#define ISTEPS 3
#endif
#ifndef BROKEN
#define BROKEN 0
#endif

#define SLOT(s) ((s) % STEPS)
#define NAME_SLOT 0
#define NAME_BUF 1
/* The first step past the item of step s. */
#define ITEM_END(s) (((s) / ISTEPS + 1) * ISTEPS)
/* The item of step s walks its steps ahead. */
#define WALKS(s) (((s) / ISTEPS) % 2 == 0)

byte slot_data[STEPS];  /* the ring's slots */
byte buf_data[NSTEPS];  /* the rank's buffer, a cell per step */
byte step_dst[STEPS];   /* names, written by the rank */
byte dst_pub;           /* steps named */
byte tail;              /* written by the proxy */
byte head;              /* written by the rank */

/* Ghosts, not seen by the protocol. */
byte read_done;   /* steps the rank finished reading */
byte landed_buf;  /* steps that landed in the rank's buffer */

/*
 * The rank at step rs, in the item of step cur, names steps up to its
 * window. A walking item's odd STEPS-blocks land in its buffer (so a step's
 * name differs from that of the step STEPS before it, whose entry it reuses).
 */
inline publish(rs, cur)
{
	k = dst_pub;
	do
	:: k >= rs + STEPS + (BROKEN == 2) -> break
	:: WALKS(cur) && k >= ITEM_END(cur) -> break
	:: else ->
		if
		:: WALKS(cur) && (k / STEPS) % 2 == 1 -> name = NAME_BUF
		:: else -> name = NAME_SLOT
		fi;
#if BROKEN == 1
		dst_pub = k + 1;
		step_dst[SLOT(k)] = name;
#else
		step_dst[SLOT(k)] = name;
		dst_pub = k + 1;	/* D1: pairs with D1' in the proxy */
#endif
		k++
	od
}

active proctype rank()
{
	byte step = 0;
	byte k, name, v;

	do
	:: step == NSTEPS -> break
	:: else ->
#if BROKEN != 4
		publish(step, step);
#endif
		tail >= step + 1;	/* R1: pairs with S1 */
		if
		:: step_dst[SLOT(step)] == NAME_BUF -> v = buf_data[step]
		:: else -> v = slot_data[SLOT(step)]
		fi;
		assert(v == step + 1);
		read_done = step + 1;
		step++;
		/* Still in the item of the step it consumed: the next item names its own. */
		publish(step, step - 1);
		head = step	/* R2: pairs with S2 */
	od
}

/* D1': pairs with D1 in publish(). */
#if BROKEN == 3
#define NAMED(k) 1
#else
#define NAMED(k) ((k) < dst_pub)
#endif

active proctype proxy()
{
	byte posted = 0, done = 0;
	byte where[STEPS];

	do
	:: done == NSTEPS -> break
	:: posted < NSTEPS && posted < head + STEPS && posted - done < STEPS && NAMED(posted) ->
		where[SLOT(posted)] = step_dst[SLOT(posted)];
		posted++
	:: done < posted ->
		/* The step's data arrives where it was posted. */
		if
		:: where[SLOT(done)] == NAME_BUF ->
			buf_data[done] = done + 1;
			landed_buf++
		:: else ->
			assert(read_done + STEPS > done);
			slot_data[SLOT(done)] = done + 1
		fi;
		tail = done + 1;	/* S1: pairs with R1 */
		done++
	od;
	assert(landed_buf > 0)
}
