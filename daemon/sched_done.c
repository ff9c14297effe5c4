/* SPDX-License-Identifier: MIT */
/*
 * Done words (proto/shm.h): a host-form collective completes where its rank
 * waits, without the hops through collcd's threads and the CQ. At hello the
 * scheduler maps the client's done words for every executor (host_map, or
 * its own mapping where an executor stores through plain pointers); launch
 * names the rank's word in its item; the executor stores the ticket once
 * the item ended without error (D1). A client that leaves may still be
 * named by items in the FIFOs, so its words stay mapped until every FIFO
 * consumed what had been written when it left.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/atomics.h"
#include "daemon/log.h"
#include "daemon/sched_int.h"
#include "proto/algo_copy.h"

/*
 * The mapping covers the gates before the done words: the executors watch
 * the gates' go words of stream collectives handed to them (sched_gated.c).
 */
#define GATES_BYTES (COLLC_GATES * sizeof(struct collc_gate))
#define WORDS_BYTES (GATES_BYTES + COLLC_DONES * sizeof(uint32_t))
_Static_assert(COLLC_SHM_DONES_OFF == COLLC_SHM_GATES_OFF + GATES_BYTES, "gates, then done words");

struct dones {
	struct dones *next;
	void *host;                       /* the scheduler's mapping (of the gates) */
	uint64_t addr[EXEC_MAX];          /* executor-space address of gate 0; 0: none */
	void *handle[EXEC_MAX];           /* host_map's, for host_unmap */
	uint64_t tail[SCHED_MAX_DEVICES]; /* retired: each FIFO's tail when its client left */
};

static struct dones *retired;

static void *map_words(const struct sched_client *c)
{
	void *p = mmap(NULL, WORDS_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, c->shm_fd,
		       COLLC_SHM_GATES_OFF);

	return p == MAP_FAILED ? NULL : p;
}

void sched_dones_open(struct sched_client *c)
{
	struct dones *d = calloc(1, sizeof(*d));

	if (!d || !(d->host = map_words(c))) {
		/* The client still completes through its CQEs. */
		log_warn("client %u: no done words: %s", c->id, d ? strerror(errno) : "no memory");
		sched.done_map_failures++;
		free(d);
		return;
	}
	for (uint32_t i = 0; i < sched.nexecs; i++) {
		const struct exec_backend *ex = sched.execs[i].ex;
		void *p;

		if (!ex->host_map) {
			d->addr[i] = (uint64_t)(uintptr_t)d->host;
			continue;
		}
		/* The executor owns a mapping of its own from here on. */
		p = map_words(c);
		if (!p || ex->host_map(p, WORDS_BYTES, &d->addr[i], &d->handle[i]) < 0) {
			log_warn("client %u: %s executor: no done words", c->id, ex->name);
			sched.done_map_failures++;
			if (p)
				munmap(p, WORDS_BYTES);
			d->addr[i] = 0;
			d->handle[i] = NULL;
		}
	}
	c->dones = d;
}

static void dones_free(struct dones *d)
{
	for (uint32_t i = 0; i < sched.nexecs; i++) {
		const struct exec_backend *ex = sched.execs[i].ex;

		/* A fini that freed its memory took these with it. */
		if (d->handle[i] && !(sched.execs_stopped && ex->fini_frees))
			ex->host_unmap(d->handle[i]);
	}
	munmap(d->host, WORDS_BYTES);
	free(d);
}

void sched_dones_retire(struct sched_client *c)
{
	struct dones *d = c->dones;

	c->dones = NULL;
	if (!d)
		return;
	if (sched.execs_stopped) {
		dones_free(d);
		return;
	}
	for (uint32_t k = 0; k < sched.ndevs; k++)
		d->tail[k] = sched.fifos[k].tail;
	d->next = retired;
	retired = d;
}

/* Nonzero once every item written before the client left has been consumed. */
static int dones_idle(const struct dones *d)
{
	for (uint32_t k = 0; k < sched.ndevs; k++) {
		const struct fifo_host *fh = &sched.fifos[k];

		if (d->tail[k] && fh->f &&
		    !sched_coll_done_on(k, d->tail[k] - 1, 0,
					sched.execs[fh->exec_idx].ex->max_channels))
			return 0;
	}
	return 1;
}

void sched_dones_reap(int all)
{
	for (struct dones **pd = &retired; *pd;) {
		struct dones *d = *pd;

		if (all || dones_idle(d)) {
			*pd = d->next;
			dones_free(d);
			continue;
		}
		pd = &d->next;
	}
}

int sched_done_seen(const struct sched_client *c, const struct collc_sqe *e)
{
	const uint32_t ticket = (uint32_t)e->user_data;

	/* Client memory: a forged word only keeps its own communicator's revoke waiting. */
	return c->dones && ticket && !e->flags &&
	       load_relaxed(&((const uint32_t *)((const char *)c->dones->host +
						  GATES_BYTES))[e->user_data % COLLC_DONES]) == ticket;
}

uint64_t sched_gate_go_addr(const struct sched_client *c, uint32_t exec_idx, uint32_t gate)
{
	const struct dones *d = c->dones;

	if (!d || !d->addr[exec_idx] || gate >= COLLC_GATES)
		return 0;
	return d->addr[exec_idx] + gate * sizeof(struct collc_gate) +
	       offsetof(struct collc_gate, go);
}

void sched_done_fill(const struct comm *cm, const struct slot_rank *sr, struct collc_work_item *it)
{
	const struct collc_sqe *e = &sr->sqe;
	const struct dones *d = sr->client->dones;
	const uint32_t ticket = (uint32_t)e->user_data;

	it->done = 0;
	it->done_val = 0;
	/*
	 * Only where the rank's end frees its buffers: a copy list has no
	 * closing barrier (a peer may still read or write them), and across
	 * daemons the proxy may still be sending. And only on one channel:
	 * counting the channel blocks of a rank (an atomic, then a second
	 * system fence) delayed the end of 16 KiB-1 MiB all-reduces by 1.2 us
	 * on the grid (bench/RESULTS.md), far more than the word saves.
	 */
	if (!d || !d->addr[cm->exec_idx] || e->flags || !ticket || collc_copy_coll(e->opcode) ||
	    COLLC_OP_IS_P2P(e->opcode) || cm->local || it->nchannels != 1)
		return;
	it->done = d->addr[cm->exec_idx] + GATES_BYTES +
		   (e->user_data % COLLC_DONES) * sizeof(uint32_t);
	it->done_val = ticket;
	sched.done_items++;
}
