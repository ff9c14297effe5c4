/*
 * The CPU executor's channel bells (daemon/cpu/executor.c cpu_kick(),
 * wait_item(), chan_main(); daemon/scheduler.c sched_notify_skipped()):
 * one scheduler publishing NITEMS items into a FIFO of DEPTH slots, NCH
 * channel threads that consume every item in order, each running the items
 * that name it and skipping the others.
 *
 * Scheduler, for each item: while the FIFO is full, sleep: say so, note that
 * a FIFO is full (room_wanted), fence (S1), look again, and wait for a wake.
 * Publish the item, then kick: wake (if asleep) each channel the item names
 * and each channel more than DEPTH/2 behind.
 * Channel, for each position: if the item is not published yet, say it is
 * asleep, fence (K1), look again, and wait for its bell. Consume it; after
 * an item that names it, wake the scheduler if it sleeps (N1); after a skip,
 * only if it sleeps with a FIFO full (N2).
 *
 * Promela executes one statement at a time in a sequentially consistent
 * memory: this checks the protocol's logic; the fences the code names make
 * a real machine behave like it.
 *
 * Checked: no invalid end state. A channel asleep at the end waiting for an
 * item that never comes is a valid end (collcd idle); a scheduler waiting
 * for room that no one gives it is not (a deadlock), nor is a channel asleep
 * with an item of its own published.
 *
 * Items name channel 0 only, except every FAR-th, which names all: the other
 * channels only skip in between, so only the lag rule and N2 keep the FIFO
 * from filling. -DDEPTH=n -DNCH=n -DNITEMS=n -DFAR=n; -DBROKEN=1: the kick
 * has no lag rule; 2: a skip never wakes the scheduler (no N2); 3: the
 * channel does not look again after saying it is asleep.
 */
#ifndef DEPTH
#define DEPTH 4
#endif
#ifndef NCH
#define NCH 2
#endif
#ifndef NITEMS
#define NITEMS (3 * DEPTH)
#endif
#ifndef FAR
#define FAR (2 * DEPTH + 1)
#endif
#ifndef BROKEN
#define BROKEN 0
#endif

#define NAMES(p, c) ((c) == 0 || (p) % FAR == FAR - 1)

byte published;
byte consumed[NCH];
bit asleep[NCH];
bit bell[NCH];
bit sleeping;     /* the scheduler */
bit room_wanted;
bit sched_bell;

inline fifo_full(r)
{
	r = 0;
	k = 0;
	do
	:: k == NCH -> break
	:: else ->
		if
		:: published - consumed[k] >= DEPTH -> r = 1
		:: else -> skip
		fi;
		k++
	od
}

proctype scheduler()
{
	byte k, n;
	bit isfull;

	do
	:: published == NITEMS -> break
	:: else ->
		fifo_full(isfull);
		if
		:: isfull ->
			sleeping = 1;
			room_wanted = 1;	/* a FIFO is full now */
			fifo_full(isfull);	/* S1: fence, look again */
			if
			:: isfull -> sched_bell == 1
			:: else -> skip
			fi;
			sched_bell = 0;
			sleeping = 0
		:: else ->
			published++;
			/* the kick: K2 */
			k = 0;
			do
			:: k == NCH -> break
			:: else ->
				if
				:: (NAMES(published - 1, k)
#if BROKEN != 1
				    || published - consumed[k] > DEPTH / 2
#endif
				   ) && asleep[k] -> bell[k] = 1
				:: else -> skip
				fi;
				k++
			od
		fi
	od;
	/* Every item that names a channel is run: the last one of each, at least. */
	k = 0;
	do
	:: k == NCH -> break
	:: else ->
		n = NITEMS;
		do
		:: n == 0 -> break
		:: n > 0 && NAMES(n - 1, k) -> break
		:: else -> n--
		od;
		consumed[k] >= n;
		k++
	od
}

proctype channel(byte c)
{
	byte pos = 0;

	do
	:: pos == NITEMS -> break
	:: else ->
		if
		:: pos < published -> skip
		:: else ->
			asleep[c] = 1;
#if BROKEN != 3
			if			/* K1: fence, look again */
			:: pos < published -> skip
			:: else ->
end_idle:			bell[c] == 1;
				bell[c] = 0
			fi;
#else
end_idle3:		bell[c] == 1;
			bell[c] = 0;
#endif
			asleep[c] = 0
		fi;
		if
		:: pos < published ->
			consumed[c]++;
			if
			:: NAMES(pos, c) ->
				if	/* N1 */
				:: sleeping -> sched_bell = 1
				:: else -> skip
				fi
			:: else ->
#if BROKEN != 2
				if	/* N2 */
				:: sleeping && room_wanted -> sched_bell = 1
				:: else -> skip
				fi
#else
				skip
#endif
			fi;
			pos++
		:: else -> skip	/* woken without an item: look again */
		fi
	od
}

init
{
	byte c = 0;

	atomic {
		do
		:: c == NCH -> break
		:: else -> run channel(c); c++
		od;
		run scheduler()
	}
}
