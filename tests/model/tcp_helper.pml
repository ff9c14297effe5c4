/*
 * The tcp transport's helper thread (daemon/net/tcp.c, net_tcp_helpers) on
 * a receive comm with one data socket: the caller's thread parses each
 * message's header on socket 0 and publishes it (nhdr, Q2); the helper
 * moves the message's share on the data socket once it sees the header.
 * An inline message's share is empty: it moves without the socket ever
 * turning readable. A message of the data socket's is readable once its
 * bytes arrived (the network, at any time after the header). NMSG messages,
 * each inline or not as the search chooses.
 *
 * Caller, per message: publish the header, fence, and write work_fd if the
 * helper said it sleeps (H1). An inline message completes on socket 0
 * alone (its empty shares do not count), but its request is reused only
 * once the helper passed it (R1/R1'): so the caller, whose pool this model
 * lets run dry after the last message, waits for every share to be passed,
 * sleeping in poll() on done_fd and draining it before it looks again.
 * Helper (helper_main()): a pass over its socket; if nothing moved, say it
 * sleeps (asleep), fence, and pass once more (H1'); if still nothing moved,
 * poll() on the data socket where it has work and on work_fd, then say it
 * is awake and drain work_fd. A pass that passed any share writes done_fd
 * (H2).
 *
 * Promela executes one statement at a time in a sequentially consistent
 * memory: this checks the protocol's logic; the fences the code names make
 * a real machine behave like it.
 *
 * Checked: no invalid end state (a helper asleep in poll() with a share it
 * could move and no one to wake it is a deadlock: the caller waits forever),
 * and shares move in order, each once (an assertion).
 *
 * -DNMSG=n; -DBROKEN=1: the helper's look after saying it sleeps is the
 * poll set alone, not a pass (an empty share that came between its pass and
 * that look is polled on its socket, which never turns readable); 2: the
 * caller never writes work_fd; 3: the helper writes done_fd only for shares
 * with bytes, as when it wrote it only for completions it made (the caller
 * waiting to reuse an inline message's request sleeps on).
 */
#ifndef NMSG
#define NMSG 3
#endif
#ifndef BROKEN
#define BROKEN 0
#endif

byte nhdr;          /* headers published (Q2) */
bit inl[NMSG];    /* message k is inline: its share is empty */
bit arrived[NMSG];  /* message k's bytes are on the data socket */
byte cur;           /* the helper's cursor: the message its socket moves next */
bit asleep;         /* H1' */
bit work_fd;        /* the eventfd is readable */
byte done;          /* shares moved, in order */
bit done_fd;        /* H2: the caller's eventfd is readable */

/*
 * One try of the data socket: moves every share it can; moved: any did.
 * Then H2: done_fd when it passed any (BROKEN 3: any with bytes).
 */
inline pass(moved)
{
	moved = 0;
	wrote = 0;
	do
	:: cur < nhdr && (inl[cur] || arrived[cur]) ->
		assert(cur == done);
#if BROKEN == 3
		wrote = wrote || !inl[cur];
#else
		wrote = 1;
#endif
		done++;
		cur++;
		moved = 1
	:: else -> break
	od;
	if
	:: wrote -> done_fd = 1
	:: else -> skip
	fi
}

proctype caller()
{
	byte k = 0;

	do
	:: k == NMSG -> break
	:: else ->
		if
		:: inl[k] = 1
		:: inl[k] = 0
		fi;
		nhdr++;			/* Q2: the header's size and place, then nhdr */
#if BROKEN != 2
		if			/* H1: fence, then asleep */
		:: asleep -> work_fd = 1
		:: else -> skip
		fi;
#endif
		k++
	od;
	/* req_get() until every request is retired: poll() on done_fd, drain, look again */
	do
	:: done == NMSG -> break
	:: else -> (done_fd == 1); done_fd = 0
	od
}

proctype network()
{
	byte k = 0;

	do
	:: k == NMSG -> break
	:: k < nhdr -> arrived[k] = 1; k++
	od
}

proctype helper()
{
	bit moved, wrote;

	do
	:: done == NMSG -> break
	:: else ->
		pass(moved);
		if
		:: moved -> skip
		:: else ->
			asleep = 1;		/* H1': asleep, fence, look once more */
#if BROKEN != 1
			pass(moved);
#else
			moved = 0;
#endif
			if
			:: moved -> skip
			:: else ->
				/*
				 * poll(): the data socket where its share has work
				 * and bytes, or work_fd. An empty share never makes
				 * the socket readable.
				 */
				(work_fd == 1 ||
				 (cur < nhdr && !inl[cur] && arrived[cur]) ||
				 done == NMSG);
				work_fd = 0
			fi;
			asleep = 0
		fi
	od
}

init
{
	atomic {
		run caller();
		run network();
		run helper()
	}
}
