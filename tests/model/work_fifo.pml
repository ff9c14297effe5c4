/*
 * The work FIFO of proto/work.h: one host producer, NCH channel consumers,
 * a ring of DEPTH items, NITEMS items in all.
 *
 * Host, for position p: wait until every channel's work_consumed >= p + 1 -
 * DEPTH (the slot's previous occupant, position p - DEPTH, was passed by
 * all), write the item body, then seq = p + 1 last (release).
 * Channel, for position p: wait until the slot's seq == p + 1 (acquire), read
 * the item; channels at or past the item's nchannels skip it; either way
 * store work_consumed = p + 1 (release) after the reads.
 *
 * Promela executes statements one at a time in a sequentially consistent
 * memory, so this checks the protocol's logic; the release/acquire pairs the
 * code names are what make a real machine behave like this model.
 *
 * Checked: a channel reads only the item it expects, whole (tag and nch words
 * both of position p, never older, never torn); the host never overwrites a
 * slot a channel has not finished reading (a ghost counter, independent of
 * work_consumed); and no invalid end state (every process finishes).
 *
 * -DDEPTH=n -DNCH=n -DNITEMS=n; -DBROKEN=1: the host does not wait for
 * work_consumed; 2: the host writes seq before the body; 3: channels never
 * publish work_consumed (the host must then block: a deadlock).
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
#ifndef BROKEN
#define BROKEN 0
#endif

#define SLOT(p) ((p) % DEPTH)
#define ITEM_NCH(p) ((p) % NCH + 1) /* items use 1..NCH channels in turn */

/* The items: written by the host, read by the channels. */
byte tag[DEPTH];  /* position + 1 */
byte nch[DEPTH];  /* channels [0, nch) run the item */
byte seq[DEPTH];  /* position + 1; written last */

/* Written by channel c, read by the host. */
byte consumed[NCH];

/* Ghost: items channel c has finished reading; not seen by the protocol. */
byte read_done[NCH];

proctype host()
{
	byte p = 0;
	byte c;

	do
	:: p == NITEMS -> break
	:: else ->
#if BROKEN != 1
		c = 0;
		do
		:: c == NCH -> break
		:: else -> consumed[c] + DEPTH >= p + 1; c++
		od;
#endif
		c = 0;
		do
		:: c == NCH -> break
		:: else -> assert(read_done[c] + DEPTH >= p + 1); c++
		od;
#if BROKEN == 2
		seq[SLOT(p)] = p + 1;
#endif
		tag[SLOT(p)] = p + 1;
		nch[SLOT(p)] = ITEM_NCH(p);
#if BROKEN != 2
		seq[SLOT(p)] = p + 1;	/* release: pairs with the channel's seq acquire */
#endif
		p++
	od
}

proctype channel(byte me)
{
	byte p = 0;
	byte t, n;

	do
	:: p == NITEMS -> break
	:: else ->
		seq[SLOT(p)] == p + 1;	/* acquire: pairs with the host's seq release */
		n = nch[SLOT(p)];
		assert(n == ITEM_NCH(p));
		if
		:: me < n ->
			t = tag[SLOT(p)];
			assert(t == p + 1)
		:: else -> skip	/* not ours; still passed */
		fi;
		read_done[me] = p + 1;
#if BROKEN != 3
		consumed[me] = p + 1;	/* release: pairs with the host's wait */
#endif
		p++
	od
}

init
{
	byte c = 0;

	atomic {
		run host();
		do
		:: c == NCH -> break
		:: else -> run channel(c); c++
		od
	}
}
