/*
 * One-shot LL all-reduce of proto/prims.h: NR ranks, each with an inbox of
 * SLOTS slots holding one region of MAXL lines per sender, NROUNDS rounds.
 *
 * Round r has generation g = r + 1 and uses slot g % SLOTS. Its payload
 * lines (0, 1 or 2, chosen nondeterministically, the same on every rank: the
 * ranks run the same items) give the lines it sends, never fewer than one:
 * an empty round still sends line 0 (collc_oll_lines()). Each rank writes its
 * lines of round r (value g, W-LL) into every peer's inbox, then, peer by
 * peer in rank order, waits for each of the peer's lines to hold g (R-LL) and
 * reads it. There is no other signal and no barrier.
 *
 * A line is one variable: each {data, flag} half of a real line carries its
 * own flag, so a line is taken only once it is whole (prims.h, LL). Promela
 * is sequentially consistent: this checks the slot-reuse logic (OLL1); the
 * OLL1 fence in daemon/cpu/peer.c is what makes real memory behave like it.
 *
 * Checked: a line read after its wait holds exactly g (no later generation
 * overwrote it); a rank never writes round g into a peer's slot before the
 * peer finished the round that last used it, g - SLOTS (a ghost counter,
 * independent of the protocol); and no invalid end state (every rank
 * finishes).
 *
 * -DNR=n -DNROUNDS=n -DSLOTS=n; -DBROKEN=1: an empty round sends nothing;
 * 2: one slot instead of two. -DGHOST=0 drops the ghost check, so a broken
 * variant fails by what the ranks themselves see: a line overwritten by a
 * later generation before its reader took it, which then waits forever.
 */
#ifndef NR
#define NR 2
#endif
#ifndef NROUNDS
#define NROUNDS 4
#endif
#ifndef BROKEN
#define BROKEN 0
#endif
#ifndef GHOST
#define GHOST 1
#endif
#ifndef SLOTS
#if BROKEN == 2
#define SLOTS 1
#else
#define SLOTS 2
#endif
#endif

#define MAXL 2 /* payload lines of a round: 0 ..= MAXL */

/* Line l of sender `from` in slot s of rank `to`'s inbox. */
#define LINE(to, s, from, l) ((((to) * SLOTS + (s)) * NR + (from)) * MAXL + (l))

/* Written by the senders, read by the owner; 0 is fresh memory (no generation). */
byte inbox[NR * SLOTS * NR * MAXL];

/* Payload lines of each round, chosen once by init. */
byte payload[NROUNDS];

/* Ghost: rounds each rank has finished (read all its peers' lines of); not seen by the protocol. */
byte finished[NR];

#if BROKEN == 1
#define SENT(n) (n)
#else
#define SENT(n) ((n) > 0 -> (n) : 1)
#endif

proctype rank(byte me)
{
	byte r = 0;
	byte g, n, p, l, v;

	do
	:: r == NROUNDS -> break
	:: else ->
		g = r + 1;
		n = SENT(payload[r]);
		/* Push: our lines of round g into every peer's inbox. */
		p = 0;
		do
		:: p == NR -> break
		:: p == me -> p++
		:: p != me && p < NR ->
#if GHOST
			assert(finished[p] + SLOTS >= g);
#endif
			l = 0;
			do
			:: l == n -> break
			:: else -> inbox[LINE(p, g % SLOTS, me, l)] = g; l++	/* W-LL */
			od;
			p++
		od;
		/* Pull: every peer's lines of round g from our inbox, in rank order. */
		p = 0;
		do
		:: p == NR -> break
		:: p == me -> p++
		:: p != me && p < NR ->
			l = 0;
			do
			:: l == n -> break
			:: else ->
				inbox[LINE(me, g % SLOTS, p, l)] == g;	/* R-LL */
				v = inbox[LINE(me, g % SLOTS, p, l)];
				assert(v == g);
				v = 0;
				l++
			od;
			p++
		od;
		finished[me] = g;
		r++
	od
}

init
{
	byte i = 0;

	atomic {
		do
		:: i == NROUNDS -> break
		:: else ->
			if
			:: payload[i] = 0
			:: payload[i] = 1
			:: payload[i] = 2
			fi;
			i++
		od;
		i = 0;
		do
		:: i == NR -> break
		:: else -> run rank(i); i++
		od
	}
}
