/* SPDX-License-Identifier: MIT */
/*
 * kill -9 of a rank at random points of a collective, COLLC_KILL_TRIALS times
 * (default 200) on one collcd, with fresh rank processes per trial.
 *
 * Each trial forms a communicator of 2 or 3 ranks and SIGKILLs one of them:
 *   before-submit   the victim never submits; the others wait: -EPIPE only
 *   after-submit    the victim is killed right after its submission
 *   during-large    everyone submitted a 1..8 MiB all-reduce; killed meanwhile
 *   while-waiting   the victim sleeps in collc_wait; the others submit around
 *                   the moment of the kill
 *   during-init     (every 5th trial) the victim is blocked in collc_comm_init
 *                   with the ranks that joined before it; one rank never
 *                   joins. The joined ranks' collc_comm_init ends with -EPIPE
 *                   and collcd keeps serving.
 * A survivor's collective ends with -EPIPE or, when it completed (or was
 * already in the executor) before the revocation, with 0 and a correct
 * result; any other value fails the test. After the kill every survivor
 * submits once more: that must end with -EPIPE. Kill-to-error time (from
 * the kill, or from the submission when that came later, to collc_wait's
 * return) must stay below COLLC_KILL_BOUND_MS (100; 500 under TSan, which
 * slows everything 5-15x) in every trial; p50 and max are printed. (A
 * during-init trial of 2 ranks has no survivor to time.)
 *
 * All the while a separate pair of processes runs correct all-reduces of
 * random dtype, op and size (0..1 MiB, 200 us apart: steady but not CPU-bound,
 * since on 2 cores a saturating pair starves collcd's threads and the
 * kill-to-error tail then measures the CPU scheduler) on its own communicator
 * and checks every result: it must see zero errors. Afterwards the same collcd serves a new
 * communicator correctly, frees every revoked communicator, and holds as
 * many fds as before the trials.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rel.h"
#include "refcheck.h"

enum { PH_BEFORE_SUBMIT, PH_AFTER_SUBMIT, PH_DURING_LARGE, PH_WAITING, PH_DURING_INIT, PH_COUNT };
/* The kill comes a random time below this after the phase is reached. */
static const uint64_t phase_delay_us[PH_COUNT] = {
	[PH_BEFORE_SUBMIT] = 5000, [PH_AFTER_SUBMIT] = 500,  [PH_DURING_LARGE] = 20000,
	[PH_WAITING] = 10000,      [PH_DURING_INIT] = 20000,
};
static const char *const phase_name[PH_COUNT] = { "before-submit", "after-submit", "during-large",
						  "while-waiting", "during-init" };

#define MAX_RANKS 3

struct rank_out {
	int32_t res1, res2;
	uint64_t t_sub1, t_ret1, t_sub2, t_ret2;
	uint32_t done;
};

struct trial {
	uint32_t index, phase, nranks, victim;
	uint64_t key, rng;
	size_t count;
	struct collc_unique_id uid;
	uint32_t joined, go, killed, absent;
	uint32_t submitted[MAX_RANKS], waiting[MAX_RANKS], init_called[MAX_RANKS];
	uint64_t t_kill;
	struct rank_out out[MAX_RANKS];
};

static struct trial *T;
static struct rel_steady *S;
static int cur_rank;

/* Survivor side of one trial. */
static int survivor(struct trial *t, int rank, struct collc_ctx *ctx, struct collc_comm *comm,
		    float *send, float *recv)
{
	struct rank_out *o = &t->out[rank];
	uint64_t rng = t->rng ^ h_mix((uint64_t)rank + 1);
	collc_req req;
	int r;

	switch (t->phase) {
	case PH_AFTER_SUBMIT:
		h_sleep_us(h_rand_below(&rng, 2000));
		break;
	case PH_WAITING:
		if (h_wait_at_least(&t->waiting[t->victim], 1, 10000) < 0)
			return h_fail("trial %u: the victim never reached collc_wait", t->index);
		h_sleep_us(h_rand_below(&rng, 10000));
		break;
	}
	o->t_sub1 = h_now_ns();
	r = collc_allreduce(comm, send, recv, t->count, COLLC_FLOAT32, COLLC_SUM, &req);
	h_store(&t->submitted[rank], 1);
	if (r == 0)
		r = collc_wait(ctx, req, 10000);
	o->t_ret1 = h_now_ns();
	o->res1 = r;
	if (r != 0 && r != -EPIPE)
		return h_fail(
			"trial %u (%s, %u ranks, victim %u): rank %d: collective ended with %d (%s), want 0 or -EPIPE",
			t->index, phase_name[t->phase], t->nranks, t->victim, rank, r,
			collc_strerror(r));
	if (r == 0 && t->phase == PH_BEFORE_SUBMIT)
		return h_fail(
			"trial %u (before-submit): rank %d: a collective the victim never submitted succeeded",
			t->index, rank);
	if (r == 0) {
		struct rc_case c = { COLLC_FLOAT32, COLLC_SUM, t->count, t->key, (int)t->nranks };
		char what[128];

		snprintf(what, sizeof(what), "trial %u (%s): rank %d: completed collective",
			 t->index, phase_name[t->phase], rank);
		if (rc_check(&c, (int)t->nranks, recv, what, NULL))
			return 1;
	}
	/* Anything submitted after the kill ends with -EPIPE. */
	if (h_wait_at_least(&t->killed, 1, 20000) < 0)
		return h_fail("trial %u: the parent never killed the victim", t->index);
	o->t_sub2 = h_now_ns();
	r = collc_allreduce(comm, send, recv, 1, COLLC_FLOAT32, COLLC_SUM, &req);
	if (r == 0)
		r = collc_wait(ctx, req, 10000);
	o->t_ret2 = h_now_ns();
	o->res2 = r;
	if (r != -EPIPE)
		return h_fail(
			"trial %u (%s): rank %d: a collective submitted after the kill ended with %d (%s), want -EPIPE",
			t->index, phase_name[t->phase], rank, r, collc_strerror(r));
	r = collc_comm_destroy(comm);
	if (r < 0)
		return h_fail("trial %u: rank %d: collc_comm_destroy: %s", t->index, rank,
			      collc_strerror(r));
	collc_mem_free(ctx, send);
	collc_mem_free(ctx, recv);
	collc_disconnect(ctx);
	o->done = 1;
	return 0;
}

/* A communicator that never forms: the victim dies inside collc_comm_init. */
static int during_init(struct trial *t, int rank)
{
	struct rank_out *o = &t->out[rank];
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	int r;

	if ((uint32_t)rank == t->absent)
		return 0;
	r = h_connect(&ctx);
	if (r < 0)
		return h_fail("trial %u: rank %d: collc_connect: %s", t->index, rank,
			      collc_strerror(r));
	if ((uint32_t)rank == t->victim) {
		/* Join after everyone else who joins: collcd holds their joins already. */
		for (uint32_t q = 0; q < t->nranks; q++)
			if (q != t->victim && q != t->absent)
				h_wait_at_least(&t->init_called[q], 1, 10000);
		h_sleep_us(50000);
		h_store(&t->waiting[rank], 1);
		r = collc_comm_init(ctx, &t->uid, (int)t->nranks, rank, -1, &comm);
		for (;;)
			pause();
	}
	h_store(&t->init_called[rank], 1);
	o->t_sub1 = h_now_ns();
	r = collc_comm_init(ctx, &t->uid, (int)t->nranks, rank, -1, &comm);
	o->t_ret1 = h_now_ns();
	o->res1 = r;
	o->res2 = -EPIPE;
	if (r != -EPIPE)
		return h_fail(
			"trial %u (during-init, %u ranks, victim %u): rank %d: collc_comm_init ended with %d (%s), want -EPIPE",
			t->index, t->nranks, t->victim, rank, r, collc_strerror(r));
	collc_disconnect(ctx);
	o->done = 1;
	return 0;
}

static int trial_rank(void *arg)
{
	struct trial *t = T;
	int rank = cur_rank;
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	float *send, *recv;
	size_t bytes = t->count * sizeof(float);
	collc_req req;
	int r;

	(void)arg;
	if (t->phase == PH_DURING_INIT)
		return during_init(t, rank);
	if (h_join(&t->uid, (int)t->nranks, rank, &ctx, &comm) < 0)
		return 1;
	if ((r = collc_mem_alloc(ctx, bytes, -1, (void **)&send)) < 0 ||
	    (r = collc_mem_alloc(ctx, bytes, -1, (void **)&recv)) < 0)
		return h_fail("trial %u: rank %d: collc_mem_alloc(%zu): %s", t->index, rank, bytes,
			      collc_strerror(r));
	rc_fill(&(struct rc_case){ COLLC_FLOAT32, COLLC_SUM, t->count, t->key, (int)t->nranks },
		rank, send);
	h_add(&t->joined, 1);
	if (h_wait_at_least(&t->go, 1, 20000) < 0)
		return h_fail("trial %u: rank %d: no go from the parent", t->index, rank);
	if ((uint32_t)rank != t->victim)
		return survivor(t, rank, ctx, comm, send, recv);

	/* The victim: gets SIGKILLed somewhere below. */
	if (t->phase == PH_BEFORE_SUBMIT) {
		h_store(&t->waiting[rank], 1);
		for (;;)
			pause();
	}
	r = collc_allreduce(comm, send, recv, t->count, COLLC_FLOAT32, COLLC_SUM, &req);
	h_store(&t->submitted[rank], 1);
	if (r < 0)
		return h_fail("trial %u: victim rank %d: submit: %s", t->index, rank,
			      collc_strerror(r));
	h_store(&t->waiting[rank], 1);
	collc_wait(ctx, req, -1);
	for (;;)
		pause();
}

/* The pair that must never notice anything. */
static int steady_rank(void *arg)
{
	return rel_steady_rank(S, (int)(intptr_t)arg);
}

/* A fresh communicator on the same collcd: correct results. */
struct after {
	struct collc_unique_id uid;
};
static struct after *A;

static int after_rank(void *arg)
{
	int rank = (int)(intptr_t)arg;
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	const size_t count = 100000;
	float *send, *recv;

	if (h_join_alloc(&A->uid, 3, rank, count * 4, &ctx, &comm, (void **)&send, (void **)&recv) <
	    0)
		return 1;
	for (int it = 0; it < 5; it++) {
		struct rc_case c = { COLLC_FLOAT32, COLLC_SUM, count,
				     h_mix(h_seed + 0xaf7e + (uint64_t)it), 3 };
		char what[64];

		snprintf(what, sizeof(what), "after the trials: all-reduce %d", it);
		if (h_allreduce(&c, ctx, comm, rank, 3, send, recv, what))
			return 1;
	}
	h_leave(ctx, comm);
	return 0;
}

static int wait_collected(int fds0)
{
	uint64_t t0 = h_now_ns();
	int last_fds = -1;
	double clients = -1, comms = -1;

	/* Sessions close asynchronously: give collcd a moment to free everything. */
	while (h_now_ns() - t0 < 5000000000ull) {
		struct json *st = rel_status();

		if (!st)
			return 1;
		/* The status request itself is one client-less session: count clients with a pid. */
		clients = (double)(json_get(st, "clients") ? json_get(st, "clients")->n : 0);
		comms = (double)(json_get(st, "comms") ? json_get(st, "comms")->n : 0);
		json_free(st);
		last_fds = rel_daemon_settled_fds();
		if (clients == 0 && comms == 0 && last_fds == fds0)
			return 0;
		h_sleep_us(50000);
	}
	return h_fail(
		"collcd did not return to idle: %.0f clients, %.0f communicators, %d fds (%d before)",
		clients, comms, last_fds, fds0);
}

int main(int argc, char **argv)
{
	unsigned trials = (unsigned)rel_env_u64("COLLC_KILL_TRIALS", 200);
	/* TSan slows collcd and clients 5-15x: its pass looks for races, not for the 100 ms. */
	uint64_t bound_ms = rel_env_u64("COLLC_KILL_BOUND_MS", h_tsan() ? 500 : 100);
	uint64_t *lat = calloc(trials ? trials : 1, sizeof(*lat)), rng;
	unsigned by_phase[PH_COUNT] = { 0 }, ok_by_phase[PH_COUNT] = { 0 }, over = 0, nlat = 0;
	pid_t steady[2], after[3];
	int failed = 0, fds0, verbose = (int)rel_env_u64("COLLC_TEST_VERBOSE", 0);
	/* COLLC_KILL_PHASE=N runs only phase N (0..4), for chasing one kind of failure. */
	int only_phase = (int)rel_env_u64("COLLC_KILL_PHASE", (uint64_t)-1);
	uint64_t t_start;

	rel_init("rel_kill9", argc, argv, 90 + trials * 2);
	rng = h_seed;
	h_daemon_start(NULL);
	fds0 = rel_daemon_settled_fds();
	T = h_shared(sizeof(*T));
	S = h_shared(sizeof(*S));
	A = h_shared(sizeof(*A));
	h_unique_ids(&S->uid, 1);
	/* Steady, not saturating: on 2 cores a CPU-bound pair starves collcd's threads. */
	S->pause_us = 200;
	steady[0] = h_fork(steady_rank, (void *)0);
	steady[1] = h_fork(steady_rank, (void *)1);
	if (h_wait_at_least(&S->joined, 2, 20000) < 0)
		h_die("the steady pair did not form its communicator");
	h_log("%u trials, kill-to-error bound %" PRIu64 " ms; steady pair pids %d %d", trials,
	      bound_ms, (int)steady[0], (int)steady[1]);

	t_start = h_now_ns();
	for (unsigned i = 0; i < trials && !failed; i++) {
		struct trial *t = T;
		pid_t pids[MAX_RANKS];
		uint64_t delay_us = 0, worst = 0;
		int sample = 0;

		memset(t, 0, sizeof(*t));
		t->index = i;
		t->phase = only_phase >= 0 ? (uint32_t)only_phase : i % PH_COUNT;
		t->absent = UINT32_MAX;
		t->nranks = 2 + (uint32_t)h_rand_below(&rng, 2);
		t->victim = (uint32_t)h_rand_below(&rng, t->nranks);
		t->key = h_rand(&rng);
		t->rng = h_rand(&rng);
		t->count = t->phase == PH_DURING_LARGE ? (256u << 10) + h_rand_below(&rng, 7u << 18)
						       : 1 + h_rand_below(&rng, 4096);
		if (t->phase == PH_DURING_INIT)
			t->absent = (t->victim + 1 + (uint32_t)h_rand_below(&rng, t->nranks - 1)) %
				    t->nranks;
		h_unique_ids(&t->uid, 1);
		for (uint32_t r = 0; r < t->nranks; r++) {
			cur_rank = (int)r;
			pids[r] = h_fork(trial_rank, NULL);
		}
		if (t->phase != PH_DURING_INIT &&
		    h_wait_at_least(&t->joined, t->nranks, 20000) < 0) {
			failed = h_fail("trial %u: ranks did not join within 20 s", i);
			break;
		}
		h_store(&t->go, 1);
		switch (t->phase) {
		case PH_DURING_INIT:
			h_wait_at_least(&t->waiting[t->victim], 1, 10000);
			/* Its comm_init request is out once it sleeps for the reply. */
			if (rel_wait_in_poll(pids[t->victim], 10000) < 0)
				failed = h_fail(
					"trial %u: the victim never blocked in collc_comm_init", i);
			break;
		case PH_BEFORE_SUBMIT:
			for (uint32_t r = 0; r < t->nranks; r++)
				if (r != t->victim &&
				    h_wait_at_least(&t->submitted[r], 1, 10000) < 0)
					failed = h_fail("trial %u: rank %u never submitted", i, r);
			h_wait_at_least(&t->waiting[t->victim], 1, 10000);
			break;
		case PH_AFTER_SUBMIT:
			h_wait_at_least(&t->submitted[t->victim], 1, 10000);
			break;
		case PH_DURING_LARGE:
			for (uint32_t r = 0; r < t->nranks; r++)
				h_wait_at_least(&t->submitted[r], 1, 10000);
			break;
		case PH_WAITING:
			h_wait_at_least(&t->waiting[t->victim], 1, 10000);
			break;
		}
		delay_us = h_rand_below(&rng, phase_delay_us[t->phase]);
		h_sleep_us(delay_us);
		t->t_kill = h_now_ns();
		kill(pids[t->victim], SIGKILL);
		h_reap_one(pids[t->victim], -1, NULL);
		h_store(&t->killed, 1);
		for (uint32_t r = 0; r < t->nranks; r++) {
			char what[64];

			if (r == t->victim)
				continue;
			snprintf(what, sizeof(what), "trial %u %s rank %u", i,
				 r == t->absent ? "absent" : "survivor", r);
			failed |= h_reap_one_ok(pids[r], 20000, what);
		}
		if (failed) {
			h_log("trial %u: %s, %u ranks, victim %u, %zu floats, killed %" PRIu64
			      " us after the cue",
			      i, phase_name[t->phase], t->nranks, t->victim, t->count, delay_us);
			break;
		}
		by_phase[t->phase]++;
		/* Each survivor's first -EPIPE: from max(kill, its submission) to its return. */
		for (uint32_t r = 0; r < t->nranks; r++) {
			const struct rank_out *o = &t->out[r];
			uint64_t from, l;

			if (r == t->victim || r == t->absent)
				continue;
			if (o->res1 == -EPIPE) {
				from = o->t_sub1 > t->t_kill ? o->t_sub1 : t->t_kill;
				l = o->t_ret1 > from ? o->t_ret1 - from : 0;
			} else {
				ok_by_phase[t->phase]++;
				from = o->t_sub2 > t->t_kill ? o->t_sub2 : t->t_kill;
				l = o->t_ret2 > from ? o->t_ret2 - from : 0;
			}
			if (l > worst)
				worst = l;
			sample = 1;
		}
		if (verbose)
			h_log("trial %u: %s, %u ranks, victim %u, %zu floats, kill +%" PRIu64
			      " us: results %d/%d %d/%d, kill-to-error %.2f ms",
			      i, phase_name[t->phase], t->nranks, t->victim, t->count, delay_us,
			      t->out[0].res1, t->out[0].res2, t->out[1].res1, t->out[1].res2,
			      (double)worst / 1e6);
		if (sample) {
			lat[nlat++] = worst;
			if (worst > bound_ms * 1000000) {
				over++;
				failed = h_fail(
					"trial %u (%s, %u ranks, victim %u, %zu floats): kill-to-error %.1f ms > %" PRIu64
					" ms",
					i, phase_name[t->phase], t->nranks, t->victim, t->count,
					(double)worst / 1e6, bound_ms);
			}
		}
		if (!h_daemon_alive())
			failed = h_fail("collcd died during trial %u (%s, %u ranks, victim %u)", i,
					phase_name[t->phase], t->nranks, t->victim);
		if ((i + 1) % 50 == 0)
			h_log("%u trials done (%.1f s); steady pair at %u collectives", i + 1,
			      (double)(h_now_ns() - t_start) / 1e9, h_load(&S->progress[0]));
	}
	{
		uint64_t tot = h_now_ns() - t_start;

		rel_steady_stop(S);
		failed |= h_reap_all_ok(steady, 2, 30000, "steady rank");
		h_log("steady pair: %u + %u collectives, %.1f MiB, %u errors (want 0)",
		      S->progress[0], S->progress[1],
		      (double)(S->bytes[0] + S->bytes[1]) / 1048576.0, S->errors[0] + S->errors[1]);
		if (S->errors[0] + S->errors[1])
			failed = 1;
		if (nlat) {
			uint64_t p50 = rel_percentile(lat, nlat, 0.5),
				 p99 = rel_percentile(lat, nlat, 0.99);
			uint64_t mx = rel_percentile(lat, nlat, 1.0);

			h_log("kill-to-error over the %u of %u trials with a survivor to time (%.1f s): p50 %.2f ms, p99 %.2f ms, max %.2f ms (bound %" PRIu64
			      " ms, %u over)",
			      nlat, trials, (double)tot / 1e9, (double)p50 / 1e6, (double)p99 / 1e6,
			      (double)mx / 1e6, bound_ms, over);
		}
		for (int p = 0; p < PH_COUNT; p++)
			h_log("  %-14s %3u trials, %3u survivor collectives completed before the revocation",
			      phase_name[p], by_phase[p], ok_by_phase[p]);
	}
	if (!failed) {
		h_unique_ids(&A->uid, 1);
		for (int r = 0; r < 3; r++)
			after[r] = h_fork(after_rank, (void *)(intptr_t)r);
		failed |= h_reap_all_ok(after, 3, 30000, "post-trial rank");
		if (!failed)
			h_log("a new 3-rank communicator on the same collcd: 5 all-reduces correct");
		failed |= wait_collected(fds0);
		if (!failed)
			h_log("collcd idle again: no clients, no communicators, %d fds as before",
			      fds0);
	}
	free(lat);
	return h_finish(failed);
}
