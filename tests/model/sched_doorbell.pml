/*
 * The scheduler's doorbell and commands (daemon/scheduler.c sched_post(),
 * sleep_until_work()): NP threads (the node thread, the control thread)
 * each post NC commands; one of them may be the scheduler's own thread
 * (-DSELF=1: while it runs the first command the scheduler posts one more
 * to itself, as the node layer's code does when the scheduler calls into
 * it).
 *
 * Poster: append the command under the lock, bump the doorbell's seq, fence
 * (N3), and call futex_wake only if the scheduler says it sleeps.
 * Scheduler: take every command there is; with none, read seq, say it
 * sleeps, fence (S1), look again, and futex_wait(seq, the value read): it
 * blocks only while seq still holds that value, until a futex_wake.
 *
 * Promela executes one statement at a time in a sequentially consistent
 * memory: this checks the protocol's logic; the fences the code names make
 * a real machine behave like it.
 *
 * -DBATCH=1: the posters queue all their commands first and then look once
 * (sched_post_quiet() for each, one sched_kick(): the node thread queues
 * under node.mu and wakes the scheduler after releasing it, node_unlock()).
 *
 * Checked: no invalid end state (the scheduler blocked in futex_wait with a
 * command posted is one), and every command taken. -DBROKEN=1: the poster
 * looks at sleeping before it appends (no N3 order); 2: the scheduler does
 * not look again after saying it sleeps (no S1 look); 3: the poster does
 * not bump seq (the futex_wait then blocks on a value no one changed); 4
 * (with BATCH): the posters queue quietly and never look (a node_post()
 * that no node_unlock() follows).
 */
#ifndef NP
#define NP 2
#endif
#ifndef NC
#define NC 2
#endif
#ifndef SELF
#define SELF 0
#endif
#ifndef BROKEN
#define BROKEN 0
#endif
#ifndef BATCH
#define BATCH 0
#endif

byte posted;   /* commands on the list (cmd_head) */
byte taken;    /* commands the scheduler took */
byte seq;      /* doorbell->seq */
bit sleeping;  /* the scheduler says it sleeps */
bit blocked;   /* the scheduler is inside futex_wait */
byte done_posters;

inline wake_if_sleeping()
{
	if
	:: sleeping ->
		/* futex_wake: a thread blocked on the word returns. */
		atomic { if :: blocked -> blocked = 0 :: else -> skip fi }
	:: else -> skip
	fi
}

inline post()
{
#if BROKEN == 1
	/* Looks first: a scheduler that says it sleeps only after this look is never woken. */
	if
	:: sleeping ->
		posted++;
		seq++;
		atomic { if :: blocked -> blocked = 0 :: else -> skip fi }
	:: else ->
		posted++;
		seq++
	fi
#elif BROKEN == 3
	posted++;
	wake_if_sleeping()
#else
	posted++;	/* under cmd_lock */
	seq++;		/* fetch_add */
	/* N3: fence, then look */
	wake_if_sleeping()
#endif
}

proctype poster()
{
	byte n = 0;

	do
	:: n == NC -> break
#if BATCH
	:: else ->
		/* sched_post_quiet(): queued, seq bumped, no look yet */
		posted++;
		seq++;
		n++
#else
	:: else -> post(); n++
#endif
	od;
#if BATCH && BROKEN != 4
	/* sched_kick(): N3, fence, then look, once for all of them */
	wake_if_sleeping();
#endif
	done_posters++
}

proctype scheduler()
{
	byte old;
#if SELF
	bit self_posted = 0;
#endif

	do
	:: taken == NP * NC + SELF -> break
	:: taken < posted ->
		taken++;
#if SELF
		/* Running the first command posts one more, from this thread. */
		if
		:: !self_posted -> self_posted = 1; post()
		:: else -> skip
		fi
#endif
	:: taken == posted && taken < NP * NC + SELF ->
		old = seq;
		sleeping = 1;
#if BROKEN != 2
		/* S1: fence, look again */
		if
		:: taken < posted -> skip
		:: else ->
#else
		if
		:: true ->
#endif
			/* futex_wait(&seq, old): blocks only while seq == old */
			atomic {
				if
				:: seq == old -> blocked = 1
				:: else -> skip
				fi
			};
			blocked == 0
		fi;
		sleeping = 0
	od;
	assert(taken == NP * NC + SELF)
}

init
{
	byte i = 0;

	atomic {
		run scheduler();
		do
		:: i == NP -> break
		:: else -> run poster(); i++
		od
	}
}
