/*
 * The eager stream-gate handshake of proto/shm.h (struct collc_gate,
 * COLLC_SQE_STREAM) as libcollc (client/stream.c, client/gpu.c) and collcd
 * (daemon/sched_gate.c) play it: NR ranks, each a host thread that submits
 * SQEs and a stream that runs the memory operations libcollc enqueued, and
 * collcd. NC stream collectives, in order, round-robin on G gates per rank,
 * so each gate is reused with the next ticket (collective k: gate k % G,
 * ticket k / G + 1).
 *
 * Rank `me`, stream: for each collective k, its earlier work (input[me] =
 * k + 1: the kernels that write the send buffer), then go = ticket (G1: after
 * that work), then the wait on done (standing for whichever word collcd
 * stores the ticket in and the stream waits on). The host thread submits collective k
 * (sub[me] = k + 1) once the gate's last collective is done, after it read
 * that one's res (libcollc's gate_take and fold), possibly far ahead of the
 * stream.
 *
 * collcd: for each k, once every rank submitted it, waits until every rank's
 * go holds the ticket and runs it (writes every rank's receive buffer), or
 * ends it with an error at any time before that (comm_abort, a peer gone, a
 * timeout, a revoked communicator answering at once: nondeterministic); then
 * per rank stores res (k + 1, or ERR + k) and then done = ticket.
 *
 * Checked: a collective never starts before every rank's go holds its ticket
 * (every input of it is written, none of a later one); res read after done
 * is this collective's; a collective that ran left its result in the receive
 * buffer when the stream goes on; no invalid end state (every stream, host
 * thread and collcd finish, errors included: no stream waits forever).
 *
 * The stream's wait: -DWAIT_EQ=0 (default) waits until done >= ticket, as
 * CU_STREAM_WAIT_VALUE_GEQ does (a cyclic comparison: tickets wrap), which is
 * what libcollc's collc__gpu_stream_gate enqueues; -DWAIT_EQ=1 (a broken
 * variant) until done == ticket (CU_STREAM_WAIT_VALUE_EQ). With EQ, a collective that ended
 * with an error before its go releases the gate, the host reuses the gate,
 * collcd ends the next one at once too (done = ticket + 1), and a stream
 * that had not yet reached its wait for ticket waits forever.
 *
 * -DNR=n (1..3) -DNC=n -DG=n; -DBROKEN=1: done stored before res; 2: collcd
 * opens on any nonzero go (not the ticket): a reused gate's old go opens the
 * next; 3: collcd waits for rank 0's go only.
 */
#ifndef NR
#define NR 2
#endif
#ifndef NC
#define NC 4
#endif
#ifndef G
#define G 2
#endif
#ifndef BROKEN
#define BROKEN 0
#endif
#ifndef WAIT_EQ
#define WAIT_EQ 0
#endif

#define ERR    100 /* res of a collective that ended with an error: ERR + k */
#define GI(r, g) ((r) * G + (g))
#define GATE(k)   ((k) % G)
#define TICKET(k) ((k) / G + 1)

/* The gates: go written by the streams, done and res by collcd. */
byte go[NR * G];
byte done[NR * G];
byte res[NR * G];

byte sub[NR];   /* collectives submitted by each rank's host thread */
byte input[NR]; /* ghost: the collective whose input the stream wrote last (k + 1) */
byte recv[NR];  /* the collective that wrote the receive buffer last (k + 1) */
bit ran[NC];    /* ghost: collective k ran (no error) */

#if WAIT_EQ
#define DONE_WAIT(r, g, t) (done[GI(r, g)] == (t))
#else
#define DONE_WAIT(r, g, t) (done[GI(r, g)] >= (t))
#endif

#if BROKEN == 2
#define OPEN(r, k) (go[GI(r, GATE(k))] != 0)
#else
#define OPEN(r, k) (go[GI(r, GATE(k))] == TICKET(k))
#endif

/* libcollc's fold: once done holds the ticket of collective j, its res is j's. */
inline fold(me, j)
{
	done[GI(me, GATE(j))] == TICKET(j);
	v = res[GI(me, GATE(j))];
	assert(v == j + 1 || v == ERR + j)
}

proctype host(byte me)
{
	byte k = 0, v;

	do
	:: k == NC -> break
	:: else ->
		/* A gate is taken again only once its last collective is done. */
		if
		:: k >= G -> fold(me, k - G)
		:: else -> skip
		fi;
		sub[me] = k + 1;
		k++
	od;
	/* collc_comm_get_async_error folds the last ones. */
	k = (NC > G -> NC - G : 0);
	do
	:: k == NC -> break
	:: else -> fold(me, k); k++
	od
}

proctype stream(byte me)
{
	byte k = 0, g, t;

	do
	:: k == NC -> break
	:: else ->
		g = GATE(k);
		t = TICKET(k);
		input[me] = k + 1;          /* the stream's earlier work */
		go[GI(me, g)] = t;          /* G1: after it */
		DONE_WAIT(me, g, t);        /* the stream's wait */
		/* The later work reads the result: there when the collective ran. */
		if
		:: ran[k] -> assert(recv[me] == k + 1)
		:: else -> skip
		fi;
		k++
	od
}

proctype collcd()
{
	byte k = 0, r, g, t, v;

	do
	:: k == NC -> break
	:: else ->
		g = GATE(k);
		t = TICKET(k);
		r = 0;
		do
		:: r == NR -> break
		:: else -> sub[r] > k; r++
		od;
		/* Every go, or an error first (abort, a peer gone, a timeout). */
		if
#if BROKEN == 3
		:: OPEN(0, k) ->
#else
		:: atomic { (OPEN(0, k) && (NR < 2 || OPEN(1, k)) && (NR < 3 || OPEN(2, k))) } ->
#endif
			r = 0;
			do
			:: r == NR -> break
			:: else ->
				/* Started: every stream reached it, none went past. */
				assert(input[r] == k + 1);
				recv[r] = k + 1;
				r++
			od;
			ran[k] = 1;
			v = k + 1
		:: v = ERR + k
		fi;
		r = 0;
		do
		:: r == NR -> break
		:: else ->
#if BROKEN == 1
			done[GI(r, g)] = t;
			res[GI(r, g)] = v;
#else
			res[GI(r, g)] = v;
			done[GI(r, g)] = t; /* G2: after res */
#endif
			r++
		od;
		k++
	od
}

init
{
	byte i = 0;

	atomic {
		do
		:: i == NR -> break
		:: else -> run host(i); run stream(i); i++
		od;
		run collcd()
	}
}
