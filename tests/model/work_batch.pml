/*
 * Work batches on the grid (proto/work.h, sched_launch.c, persist_kernel.cu):
 * one host producer, the poller, NCH channel blocks; a host FIFO and the
 * device copy, both rings of DEPTH slots; NITEMS items in all.
 *
 * Host, per item p: wait until every channel's work_consumed >= p + 1 -
 * DEPTH, write the body, then its seq (W1). At the end of a pass (here: any
 * time, or when BMAX items are open) it publishes the open batch:
 * published = the position after it (B1, release).
 * Poller: wait until published > pos (B1', acquire); take n = min(published
 * - pos, BMAX) items; copy each into the device slot, the last one marked
 * `last`; then dseq = pos + n (G1, release).
 * Channel, per position p: wait until dseq > p (G1', acquire), read the
 * device copy (channels at or past its nch skip it); at an item marked last,
 * store work_consumed = p + 1 (E1, release).
 *
 * Promela executes statements one at a time in a sequentially consistent
 * memory, so this checks the protocol's logic; the release/acquire pairs the
 * code names are what make a real machine behave like this model.
 *
 * Checked: the poller reads only whole, current host items (tag and nch of
 * position p, never older, never torn); a channel reads only whole, current
 * device copies; the host never overwrites a host slot the poller has not
 * read, and the poller never overwrites a device slot some channel has not
 * finished reading (ghost counters, independent of the protocol's words);
 * and no invalid end state (every process finishes: the last item of every
 * forwarded unit is marked, so work_consumed keeps up).
 *
 * -DDEPTH=n -DNCH=n -DNITEMS=n -DBMAX=n; -DBROKEN=1: the poller takes BMAX
 * items whatever published says (reads items not yet published); 2: the host
 * publishes before writing the batch's bodies; 3: the poller marks no item
 * last (no channel publishes: the host must block, a deadlock).
 */
#ifndef DEPTH
#define DEPTH 2
#endif
#ifndef NCH
#define NCH 2
#endif
#ifndef NITEMS
#define NITEMS (2 * DEPTH + 1)
#endif
#ifndef BMAX
#define BMAX 2
#endif
#ifndef BROKEN
#define BROKEN 0
#endif

#define SLOT(p) ((p) % DEPTH)
#define ITEM_NCH(p) ((p) % NCH + 1) /* items use 1..NCH channels in turn */

/* The host FIFO: written by the host, read by the poller. */
byte tag[DEPTH]; /* position + 1 */
byte nch[DEPTH];
byte published;

/* The device copy: written by the poller, read by the channels. */
byte dtag[DEPTH];
byte dnch[DEPTH];
bool dlast[DEPTH];
byte dseq;

/* Written by channel c, read by the host. */
byte consumed[NCH];

/* Ghosts: positions the poller has read, and each channel has finished reading. */
byte poller_read;
byte read_done[NCH];

proctype host()
{
	byte p = 0, first = 0;
	byte c;

	do
	:: p == NITEMS && first == p -> break
	:: first < p -> /* end of a pass: publish the open batch */
#if BROKEN != 2
		published = p	/* B1: release */
#else
		skip
#endif
		; first = p
	:: p < NITEMS && p - first < BMAX ->
		c = 0;
		do
		:: c == NCH -> break
		:: else -> consumed[c] + DEPTH >= p + 1; c++
		od;
		assert(poller_read + DEPTH >= p + 1);
#if BROKEN == 2
		published = p + 1;
#endif
		tag[SLOT(p)] = p + 1;
		nch[SLOT(p)] = ITEM_NCH(p);
		p++
	od
}

proctype poller()
{
	byte pos = 0, n, i, c, end;

	do
	:: pos == NITEMS -> break
	:: else ->
#if BROKEN == 1
		n = (NITEMS - pos < BMAX -> NITEMS - pos : BMAX);
#else
		published > pos;	/* B1': acquire */
		n = (published - pos < BMAX -> published - pos : BMAX);
#endif
		end = pos + n;
		i = pos;
		do
		:: i == end -> break
		:: else ->
			assert(tag[SLOT(i)] == i + 1);
			assert(nch[SLOT(i)] == ITEM_NCH(i));
			c = 0;
			do
			:: c == NCH -> break
			:: else -> assert(read_done[c] + DEPTH >= i + 1); c++
			od;
			dtag[SLOT(i)] = tag[SLOT(i)];
			dnch[SLOT(i)] = nch[SLOT(i)];
#if BROKEN == 3
			dlast[SLOT(i)] = false;
#else
			dlast[SLOT(i)] = (i + 1 == end);
#endif
			poller_read = i + 1;
			i++
		od;
		dseq = end;	/* G1: release */
		pos = end
	od
}

proctype channel(byte me)
{
	byte p = 0;
	byte n;
	bool last;

	do
	:: p == NITEMS -> break
	:: else ->
		dseq > p;	/* G1': acquire */
		n = dnch[SLOT(p)];
		assert(n == ITEM_NCH(p));
		if
		:: me < n -> assert(dtag[SLOT(p)] == p + 1)
		:: else -> skip	/* not ours; still passed */
		fi;
		last = dlast[SLOT(p)];
		read_done[me] = p + 1;
		if
		:: last -> consumed[me] = p + 1	/* E1: release */
		:: else -> skip
		fi;
		p++
	od
}

init
{
	byte c = 0;

	atomic {
		run host();
		run poller();
		do
		:: c == NCH -> break
		:: else -> run channel(c); c++
		od
	}
}
