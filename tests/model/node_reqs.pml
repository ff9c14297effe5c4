/*
 * The scheduler's calls into the node thread (daemon/node.c req_call()):
 * one producer (the scheduler thread), one node thread, the lock node.mu,
 * a ring of DEPTH queued requests and NREQ requests in all.
 *
 * Scheduler, for each request: trylock node.mu; with it, run what is
 * queued (reqs_run()), then its own request, then unlock. Without it, push
 * the request if the ring has room (the body, then head: Q1), fence, and
 * write the eventfd if the node thread said it sleeps (Q3); with the ring
 * full, wait for the lock and do as above.
 * Node thread, each pass: with the lock, run what is queued; now and then
 * let the lock go (its poll between passes); to sleep, say so (asleep),
 * fence, and sleep in poll() only if nothing is queued (Q3'); an eventfd
 * write ends the sleep.
 *
 * Promela executes one statement at a time in a sequentially consistent
 * memory: this checks the protocol's logic; the release/acquire pairs and
 * fences the code names make a real machine behave like it.
 *
 * Checked: requests run in the order the scheduler made them, each once
 * (an assertion on a ghost counter), a slot is never written while its
 * request waits (an assertion), and no invalid end state: a node thread
 * asleep with a request queued and no one to wake it is a deadlock.
 *
 * -DDEPTH=n -DNREQ=n; -DBROKEN=1: the scheduler never writes the eventfd;
 * 2: the node thread does not look at the ring after saying it sleeps;
 * 3: the scheduler runs its own request with the lock before what it
 * queued earlier (order).
 */
#ifndef DEPTH
#define DEPTH 2
#endif
#ifndef NREQ
#define NREQ 5
#endif
#ifndef BROKEN
#define BROKEN 0
#endif

byte lock;          /* node.mu: 0 free, 1 held */
byte slot[DEPTH];   /* the requests' numbers, 1.. */
byte head;          /* the scheduler's */
byte tail;          /* under the lock */
bit asleep;         /* the node thread sleeps in poll() */
bit efd;            /* the eventfd is readable */
byte ran;           /* ghost: requests run so far, in order */
bit pending[DEPTH]; /* ghost: the slot holds a request not yet taken */

inline run_one(k)
{
	assert(k == ran + 1);
	ran++
}

/* With the lock: what is queued, in order. */
inline reqs_run()
{
	do
	:: tail == head -> break
	:: else ->
		k = slot[tail % DEPTH];
		pending[tail % DEPTH] = 0;
		tail++;
		run_one(k)
	od
}

proctype scheduler()
{
	byte n = 1;
	byte k;

	do
	:: n > NREQ -> break
	:: else ->
		if
		:: atomic { lock == 0 -> lock = 1 } ->
			/* the trylock took it */
#if BROKEN == 3
			run_one(n);
			reqs_run();
#else
			reqs_run();
			run_one(n);
#endif
			lock = 0
		:: lock == 1 ->
			/* the trylock failed */
			if
			:: head - tail < DEPTH ->
				assert(!pending[head % DEPTH]);
				slot[head % DEPTH] = n;
				pending[head % DEPTH] = 1;
				head++;			/* Q1: the body, then head */
#if BROKEN != 1
				if			/* Q3: fence, then asleep */
				:: asleep -> efd = 1
				:: else -> skip
				fi
#endif
			:: else ->
				atomic { lock == 0 -> lock = 1 };
				reqs_run();
				run_one(n);
				lock = 0
			fi
		fi;
		n++
	od
}

proctype node()
{
	byte k;

	atomic { lock == 0 -> lock = 1 };
	do
	:: ran == NREQ -> break
	:: else ->
		reqs_run();
		if
		:: lock = 0;			/* a pass's poll, then the lock again */
			atomic { lock == 0 -> lock = 1 }
		:: asleep = 1;			/* Q3': asleep, fence, look */
			if
#if BROKEN != 2
			:: head == tail ->
#else
			:: true ->
#endif
				lock = 0;
				/* poll() until the eventfd, or nothing is left to do */
				(efd == 1 || ran == NREQ);
				efd = 0;
				atomic { lock == 0 -> lock = 1 }
			:: else -> skip
			fi;
			asleep = 0
		fi
	od;
	lock = 0
}

init
{
	atomic {
		run scheduler();
		run node()
	}
}
