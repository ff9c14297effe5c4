/*
 * Gated items (daemon/sched_gated.c, proto/work.h COLLC_ITEM_GATED): a
 * stream collective A handed to the executors of its NL devices before its
 * streams reached it. Device 0 leads: it fires A once every rank's go is
 * written, or skips it once the scheduler cancelled it; the others take the
 * leader's decision from one word. Meanwhile the scheduler wants to write
 * another communicator's collective B to the same devices: the rule is to
 * write nothing behind an undecided gated item, so it cancels A and waits
 * for the decision; a skipped A waits for its gos in the scheduler and is
 * written again, as an ordinary item, after B.
 *
 * Collectives run as collectives: a device that runs A (or B) waits inside
 * it until every device got there. With -DDEP=1 the last rank's stream
 * writes A's go only once B completed (its program orders B before A on
 * another stream), the case that deadlocks if B queues behind A.
 *
 * Checked: every device takes the same decision; A fires only with every go
 * written; every device runs A exactly once and B once; no invalid end state
 * (nothing waits forever: every stream, device and the scheduler finish).
 *
 * -DNL=2..3 devices, -DDEP=0|1; -DBROKEN=1: a follower decides on its own
 * rank's go and the cancel word instead of reading the leader's decision;
 * 2: the scheduler writes B behind the undecided A without cancelling it.
 */
#ifndef NL
#define NL 2
#endif
#ifndef DEP
#define DEP 0
#endif
#ifndef BROKEN
#define BROKEN 0
#endif

#define NONE 0
#define FIRE 1
#define SKIP 2

/* FIFO item kinds */
#define A_GATED 1
#define B_ITEM  2
#define A_PLAIN 3

byte fifo[NL * 3]; /* per device, up to three items, written by the scheduler */
byte tail = 0;     /* items written to every device (the scheduler writes all alike) */
bit fin = 0;       /* the scheduler wrote everything it will */

bit go[3];          /* the streams' go words of A (those of devices >= NL stay 1) */
#define ALLGO (go[0] && go[1] && go[2])
bit cancel = 0;     /* the leader's cancel word, written by the scheduler */
byte decision = NONE;
byte outcome[NL];   /* ghost: what each device took */
byte ranA[NL];      /* ghost: times each device ran A */
byte arrA = 0, arrB = 0; /* devices inside A, inside B */
bit doneB = 0;

/* A collective: this device is in; it leaves once every device is. */
inline run_coll(arr)
{
	arr++;
	arr == NL
}

proctype stream(byte r)
{
#if DEP
	if
	:: r == NL - 1 -> doneB == 1
	:: else -> skip
	fi;
#endif
	go[r] = 1
}

proctype device(byte me)
{
	byte pos = 0, kind;

	do
	:: pos == tail && fin -> break
	:: pos < tail ->
		kind = fifo[me * 3 + pos];
		if
		:: kind == A_GATED ->
			if
			:: me == 0 ->
				/* The leader: fire on every go, else skip once cancelled. */
				if
				:: atomic { ALLGO -> decision = FIRE }
				:: atomic { cancel && !ALLGO -> decision = SKIP }
				fi
#if BROKEN == 1
			:: else ->
				do
				:: atomic { go[me] -> outcome[me] = FIRE; break }
				:: atomic { cancel -> outcome[me] = SKIP; break }
				od
#else
			:: else -> decision != NONE
#endif
			fi;
#if BROKEN == 1
			if
			:: me == 0 -> outcome[me] = decision
			:: else -> skip
			fi;
#else
			outcome[me] = decision;
#endif
			if
			:: outcome[me] == FIRE ->
				assert(ALLGO);
				ranA[me]++;
				run_coll(arrA)
			:: else -> skip
			fi
		:: kind == B_ITEM -> run_coll(arrB); doneB = 1
		:: kind == A_PLAIN -> ranA[me]++; run_coll(arrA)
		fi;
		pos++
	od
}

inline write_all(kind)
{
	atomic {
		k = 0;
		do
		:: k < NL -> fifo[k * 3 + tail] = kind; k++
		:: else -> break
		od;
		tail++
	}
}

proctype scheduler()
{
	byte k;

	write_all(A_GATED);
#if BROKEN == 2
	write_all(B_ITEM);
#else
	/* B must go to the same devices: ask the leader to skip A, then wait for its decision. */
	cancel = 1;
	decision != NONE;
	write_all(B_ITEM);
	if
	:: decision == SKIP ->
		/* A waits for its gos here, then goes as an ordinary item. */
		ALLGO;
		write_all(A_PLAIN)
	:: else -> skip
	fi
#endif
	fin = 1
}

init {
	byte i;

	atomic {
		i = NL;
		do
		:: i < 3 -> go[i] = 1; i++
		:: else -> break
		od;
		i = 0;
		do
		:: i < NL -> run stream(i); run device(i); i++
		:: else -> break
		od;
		run scheduler()
	}
	/* Every device ran A once and B once; they agreed on A. */
	(_nr_pr == 1);
	i = 0;
	do
	:: i < NL ->
		assert(ranA[i] == 1);
		assert(outcome[i] == outcome[0]);
		i++
	:: else -> break
	od;
	assert(arrB == NL)
}
