/*
 * The grid's LL copy of a work FIFO (daemon/cuda/grid.h struct cuda_ll_fifo,
 * cuda_kick() in cuda/executor.c, the poller in persist_kernel.cu): one host
 * writer, the poller, NCH channel blocks; a host ring of DEPTH slots of W
 * words each, the device copy of DEPTH slots; NITEMS items in all.
 *
 * Host, per item p: wait until every channel's work_consumed >= p + 1 -
 * DEPTH, then store the item's W words in any order, each word its data
 * with the flag p + 1 in one atomic store (L1). Items go in work batches of
 * 1 to BMAX: the last of each is marked `last` in its word 0 (B2).
 * Poller, each pass: load the words of the K slots ahead of its position, in
 * any order and interleaved with the host's stores, each load atomic; take
 * the leading run of items whose words all carry their position's flag
 * (L1'); copy each, with its mark, into the device slot; then dseq = pos +
 * run (G1). A run may end inside a batch.
 * Channel, per position p: wait until dseq > p (G1'), read the device copy,
 * and at an item marked last store work_consumed = p + 1 (E1).
 *
 * Promela runs one statement at a time in sequentially consistent memory:
 * this checks the protocol's logic; the atomicity of one word (an 8-byte
 * store and load) and the release/acquire pairs the code names are what
 * make a real machine behave like it.
 *
 * Checked: every word of an item the poller takes holds that item's data
 * (never a word of the slot's previous lap, never one not yet stored); a
 * channel reads only whole, current device copies; the poller never
 * overwrites a device slot some channel has not finished; no invalid end
 * state.
 *
 * -DDEPTH=n -DNCH=n -DNITEMS=n -DW=n -DK=n -DBMAX=n; -DBROKEN=1: the
 * poller checks only word 0's flag; 2: a word's flag and data are two
 * stores (flag first); 3: the flag is a constant "valid" mark instead of
 * the position; 4: the host marks no batch's end (no channel publishes:
 * the host must block, a deadlock).
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
#ifndef W
#define W 2
#endif
#ifndef K
#define K 2
#endif
#ifndef BMAX
#define BMAX 2
#endif
#ifndef BROKEN
#define BROKEN 0
#endif

#define SLOT(p) ((p) % DEPTH)
#define WORD(p, j) (SLOT(p) * W + (j))
#if BROKEN == 3
#define FLAG(p) 1
#else
#define FLAG(p) ((p) + 1)
#endif

/* The host's LL copy: written by the host, read by the poller. */
byte data[DEPTH * W];
byte flag[DEPTH * W];
bool hlast[DEPTH]; /* part of word 0's data */

/* The device copy: written by the poller, read by the channels. */
byte dtag[DEPTH];
bool dlast[DEPTH];
byte dseq;

/* Written by channel c, read by the host. */
byte consumed[NCH];

/* Ghost: positions each channel has finished reading. */
byte read_done[NCH];

proctype host()
{
	byte p = 0, c, j, open = 0;
	bool stored[W], last;

	do
	:: p == NITEMS -> break
	:: else ->
		c = 0;
		do
		:: c == NCH -> break
		:: else -> consumed[c] + DEPTH >= p + 1; c++
		od;
		j = 0;
		do
		:: j == W -> break
		:: else -> stored[j] = false; j++
		od;
		/* B2: the batch ends here, by choice or because it is full. */
		open++;
		if
		:: open == BMAX || p + 1 == NITEMS -> last = true
		:: else -> if :: last = true :: last = false fi
		fi;
#if BROKEN == 4
		last = false;
#endif
		if
		:: last -> open = 0
		:: else -> skip
		fi;
		/* The words in any order: each is one store of its data and flag. */
		j = 0;
		do
		:: j == W -> break
		:: else ->
			if
			:: c = 0
			:: c = W - 1
			fi;
			do
			:: stored[c] -> c = (c + 1) % W
			:: else -> break
			od;
#if BROKEN == 2
			flag[WORD(p, c)] = FLAG(p);
			data[WORD(p, c)] = p + 1;
			if :: c == 0 -> hlast[SLOT(p)] = last :: else -> skip fi;
#else
			atomic { data[WORD(p, c)] = p + 1; flag[WORD(p, c)] = FLAG(p);
				 if :: c == 0 -> hlast[SLOT(p)] = last :: else -> skip fi }
#endif
			stored[c] = true;
			j++
		od;
		p++
	od
}

proctype poller()
{
	byte pos = 0, i, j, c, taken, end;
	byte ld[K * W], lf[K * W];
	bool ll[K], whole;

	do
	:: pos == NITEMS -> break
	:: else ->
		/* One pass: every word of the K slots ahead, each load atomic. */
		i = 0;
		do
		:: i == K * W -> break
		:: else ->
			atomic { ld[i] = data[WORD(pos + i / W, i % W)];
				 lf[i] = flag[WORD(pos + i / W, i % W)];
				 if :: i % W == 0 -> ll[i / W] = hlast[SLOT(pos + i / W)] :: else -> skip fi }
			i++
		od;
		/* L1': the leading run of items whose words all carry their flag. */
		taken = 0;
		do
		:: taken == K || pos + taken == NITEMS -> break
		:: else ->
			whole = true;
			j = 0;
			do
			:: j == W -> break
			:: else ->
#if BROKEN == 1
				if
				:: j == 0 && lf[taken * W] != FLAG(pos + taken) -> whole = false
				:: else -> skip
				fi;
#else
				if
				:: lf[taken * W + j] != FLAG(pos + taken) -> whole = false
				:: else -> skip
				fi;
#endif
				j++
			od;
			if
			:: whole -> taken++
			:: else -> break
			fi
		od;
		end = pos + taken;
		i = pos;
		do
		:: i == end -> break
		:: else ->
			j = 0;
			do
			:: j == W -> break
			:: else -> assert(ld[(i - pos) * W + j] == i + 1); j++
			od;
			c = 0;
			do
			:: c == NCH -> break
			:: else -> assert(read_done[c] + DEPTH >= i + 1); c++
			od;
			dtag[SLOT(i)] = i + 1;
			dlast[SLOT(i)] = ll[i - pos];
			i++
		od;
		dseq = end;	/* G1 */
		pos = end;
		/*
		 * A pass that took nothing changed nothing: the passes that follow
		 * until word 0 of the next item carries its flag are skipped (an
		 * idle poller blocks here, so a protocol that never feeds it ends
		 * in a deadlock spin can see).
		 */
		if
		:: taken == 0 && pos < NITEMS -> flag[WORD(pos, 0)] == FLAG(pos)
		:: else -> skip
		fi
	od
}

proctype channel(byte me)
{
	byte p = 0;
	bool last;

	do
	:: p == NITEMS -> break
	:: else ->
		dseq > p;	/* G1' */
		assert(dtag[SLOT(p)] == p + 1);
		last = dlast[SLOT(p)];
		read_done[me] = p + 1;
		if
		:: last -> consumed[me] = p + 1	/* E1 */
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
