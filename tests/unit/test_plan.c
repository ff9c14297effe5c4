/* SPDX-License-Identifier: MIT */
/*
 * daemon/plan.c: the automatic choice against the shipped thresholds
 * (cfg_defaults), forced algorithms and protocols with their fallbacks, the
 * channel bound, and invariants over a sweep of every input.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "daemon/net/net.h"
#include "daemon/node.h"
#include "daemon/plan.c"

#define KiB (1ull << 10)
#define MiB (1ull << 20)

static const int ops[] = { COLLC_OP_ALLREDUCE, COLLC_OP_ALLGATHER, COLLC_OP_REDUCE_SCATTER,
			   COLLC_OP_BROADCAST, COLLC_OP_REDUCE };

static struct collc_config defaults(uint32_t max_channels)
{
	struct collc_config cfg;

	cfg_defaults(&cfg, max_channels);
	return cfg;
}

static struct plan plan(const struct collc_config *cfg, int op, uint64_t bytes, uint32_t nranks)
{
	struct plan p;

	plan_coll(cfg, op, bytes, nranks, 0, &p);
	return p;
}

#define assert_plan(p, a, pr)                                                                      \
	do {                                                                                       \
		assert_int_equal((p).algo, (a));                                                   \
		assert_int_equal((p).proto, (pr));                                                 \
	} while (0)

static void test_support_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		assert_true(plan_algo_supported(ops[i], COLLC_ALGO_RING));
		assert_true(plan_algo_supported(ops[i], COLLC_ALGO_ONESHOT));
		assert_int_equal(plan_algo_supported(ops[i], COLLC_ALGO_TWOSHOT),
				 ops[i] == COLLC_OP_ALLREDUCE);
		assert_false(plan_algo_supported(ops[i], COLLC_ALGO_AUTO));
		/* The scheduler alone picks it, across daemons (sched_launch.c). */
		assert_false(plan_algo_supported(ops[i], COLLC_ALGO_HIER));
	}
	assert_false(plan_algo_supported(COLLC_OP_NOP, COLLC_ALGO_RING));
	assert_false(plan_algo_supported(COLLC_OP_MAX, COLLC_ALGO_RING));
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		int op = ops[i];

		for (uint32_t pr = COLLC_PROTO_SIMPLE; pr < COLLC_PROTO_MAX; pr++)
			assert_true(plan_proto_supported(op, COLLC_ALGO_RING, pr));
		assert_true(plan_proto_supported(op, COLLC_ALGO_ONESHOT, COLLC_PROTO_SIMPLE));
		assert_true(plan_proto_supported(op, COLLC_ALGO_TWOSHOT, COLLC_PROTO_SIMPLE));
		/* One-shot LL: every rank pushes lines to every other. */
		assert_int_equal(collc_oll_coll(op), op == COLLC_OP_ALLREDUCE ||
							     op == COLLC_OP_ALLGATHER ||
							     op == COLLC_OP_REDUCE_SCATTER);
		assert_int_equal(plan_proto_supported(op, COLLC_ALGO_ONESHOT, COLLC_PROTO_LL),
				 collc_oll_coll(op));
		assert_false(plan_proto_supported(op, COLLC_ALGO_ONESHOT, COLLC_PROTO_LL128));
		assert_false(plan_proto_supported(op, COLLC_ALGO_TWOSHOT, COLLC_PROTO_LL));
		assert_false(plan_proto_supported(op, COLLC_ALGO_TWOSHOT, COLLC_PROTO_LL128));
		assert_false(plan_proto_supported(op, COLLC_ALGO_RING, COLLC_PROTO_AUTO));
	}
}

/*
 * The shipped thresholds: one-shot <= 64 KiB < two-shot <= 1 MiB < ring;
 * LL128 <= 4 MiB < Simple; one-shot LL all-reduce off (0), as on the CPU
 * executor; the CUDA executor sets 512 KiB (its defaults, daemon/cuda/executor.c), on up to 8 ranks.
 */
static void test_auto_allreduce(void **state)
{
	struct collc_config cfg = defaults(4);

	(void)state;
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 0, 4), COLLC_ALGO_ONESHOT, COLLC_PROTO_SIMPLE);
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 4, 2), COLLC_ALGO_ONESHOT, COLLC_PROTO_SIMPLE);
	cfg.oneshot_ll_max_bytes = 64 * KiB;
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 0, 4), COLLC_ALGO_ONESHOT, COLLC_PROTO_LL);
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 4, 2), COLLC_ALGO_ONESHOT, COLLC_PROTO_LL);
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 64 * KiB, 8), COLLC_ALGO_ONESHOT,
		    COLLC_PROTO_LL);
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 4, 9), COLLC_ALGO_ONESHOT, COLLC_PROTO_SIMPLE);
	cfg.oneshot_ll_max_bytes = 4 * KiB;
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 4 * KiB, 2), COLLC_ALGO_ONESHOT, COLLC_PROTO_LL);
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 4 * KiB + 1, 2), COLLC_ALGO_ONESHOT,
		    COLLC_PROTO_SIMPLE);
	/* Past the one-shot limit (the CUDA backend's 512 KiB): one-shot LL still, then two-shot. */
	cfg.oneshot_ll_max_bytes = 512 * KiB;
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 512 * KiB, 2), COLLC_ALGO_ONESHOT,
		    COLLC_PROTO_LL);
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 512 * KiB + 1, 2), COLLC_ALGO_TWOSHOT,
		    COLLC_PROTO_SIMPLE);
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 512 * KiB, 9), COLLC_ALGO_TWOSHOT,
		    COLLC_PROTO_SIMPLE);
	/* Allgather and reduce-scatter too, not broadcast and reduce; ll_max_bytes is the ring's. */
	assert_plan(plan(&cfg, COLLC_OP_ALLGATHER, 512 * KiB, 2), COLLC_ALGO_ONESHOT,
		    COLLC_PROTO_LL);
	assert_plan(plan(&cfg, COLLC_OP_REDUCE_SCATTER, 512 * KiB, 2), COLLC_ALGO_ONESHOT,
		    COLLC_PROTO_LL);
	assert_plan(plan(&cfg, COLLC_OP_BROADCAST, 512 * KiB, 2), COLLC_ALGO_RING,
		    COLLC_PROTO_LL128);
	assert_plan(plan(&cfg, COLLC_OP_BROADCAST, 8, 2), COLLC_ALGO_ONESHOT, COLLC_PROTO_SIMPLE);
	cfg.ll_max_bytes = 0;
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 8, 2), COLLC_ALGO_ONESHOT, COLLC_PROTO_LL);
	/* A forced Simple keeps the size's algorithm without LL. */
	cfg.proto = COLLC_PROTO_SIMPLE;
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 512 * KiB, 2), COLLC_ALGO_TWOSHOT,
		    COLLC_PROTO_SIMPLE);
	cfg = defaults(4);
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 64 * KiB + 1, 8), COLLC_ALGO_TWOSHOT,
		    COLLC_PROTO_SIMPLE);
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 1 * MiB, 4), COLLC_ALGO_TWOSHOT,
		    COLLC_PROTO_SIMPLE);
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 1 * MiB + 1, 4), COLLC_ALGO_RING,
		    COLLC_PROTO_LL128);
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 4 * MiB, 4), COLLC_ALGO_RING, COLLC_PROTO_LL128);
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 4 * MiB + 1, 4), COLLC_ALGO_RING,
		    COLLC_PROTO_SIMPLE);
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 1ull << 40, 64), COLLC_ALGO_RING,
		    COLLC_PROTO_SIMPLE);
}

/* Beyond 8 ranks one rank reads nranks inputs: the one-shot limit shrinks to 64 KiB * 8 / n. */
static void test_auto_rank_count(void **state)
{
	struct collc_config cfg = defaults(4);

	(void)state;
	assert_int_equal(plan(&cfg, COLLC_OP_ALLREDUCE, 32 * KiB, 16).algo, COLLC_ALGO_ONESHOT);
	assert_int_equal(plan(&cfg, COLLC_OP_ALLREDUCE, 32 * KiB + 1, 16).algo, COLLC_ALGO_TWOSHOT);
	assert_int_equal(plan(&cfg, COLLC_OP_ALLREDUCE, 8 * KiB, 64).algo, COLLC_ALGO_ONESHOT);
	assert_int_equal(plan(&cfg, COLLC_OP_ALLREDUCE, 8 * KiB + 1, 64).algo, COLLC_ALGO_TWOSHOT);
	assert_int_equal(plan(&cfg, COLLC_OP_REDUCE, 8 * KiB + 1, 64).algo, COLLC_ALGO_RING);
	/* Reduce past its one-shot limit: ring, and small enough for LL. */
	assert_plan(plan(&cfg, COLLC_OP_REDUCE, 16 * KiB, 64), COLLC_ALGO_RING, COLLC_PROTO_LL);
	/* The gather-like collectives' bytes already count every rank's block. */
	assert_int_equal(plan(&cfg, COLLC_OP_ALLGATHER, 64 * KiB, 64).algo, COLLC_ALGO_ONESHOT);
	/* A single rank copies: the plan is ring whatever the size. */
	assert_int_equal(plan(&cfg, COLLC_OP_ALLREDUCE, 0, 1).algo, COLLC_ALGO_RING);
	assert_int_equal(plan(&cfg, COLLC_OP_ALLREDUCE, 1 * MiB, 1).algo, COLLC_ALGO_RING);
}

static void test_auto_other_collectives(void **state)
{
	struct collc_config cfg = defaults(4);

	(void)state;
	for (size_t i = 1; i < sizeof(ops) / sizeof(ops[0]); i++) {
		assert_plan(plan(&cfg, ops[i], 0, 4), COLLC_ALGO_ONESHOT, COLLC_PROTO_SIMPLE);
		assert_plan(plan(&cfg, ops[i], 64 * KiB, 4), COLLC_ALGO_ONESHOT,
			    COLLC_PROTO_SIMPLE);
		/* No two-shot but for all-reduce: ring right after one-shot. */
		assert_plan(plan(&cfg, ops[i], 64 * KiB + 1, 4), COLLC_ALGO_RING,
			    COLLC_PROTO_LL128);
		assert_plan(plan(&cfg, ops[i], 5 * MiB, 4), COLLC_ALGO_RING, COLLC_PROTO_SIMPLE);
	}
}

/* With algo forced to ring the protocol follows the size. */
static void test_auto_proto(void **state)
{
	struct collc_config cfg = defaults(4);

	(void)state;
	cfg.algo = COLLC_ALGO_RING;
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 0, 4), COLLC_ALGO_RING, COLLC_PROTO_LL);
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 64 * KiB, 4), COLLC_ALGO_RING, COLLC_PROTO_LL);
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 64 * KiB + 1, 4), COLLC_ALGO_RING,
		    COLLC_PROTO_LL128);
	assert_plan(plan(&cfg, COLLC_OP_BROADCAST, 4 * MiB + 1, 4), COLLC_ALGO_RING,
		    COLLC_PROTO_SIMPLE);
	cfg.ll_max_bytes = 0;
	cfg.ll128_max_bytes = 0;
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 0, 4), COLLC_ALGO_RING, COLLC_PROTO_LL);
	assert_plan(plan(&cfg, COLLC_OP_ALLREDUCE, 1, 4), COLLC_ALGO_RING, COLLC_PROTO_SIMPLE);
}

/*
 * check(cfg, op, bytes) for each size of the forced-setting tests and each
 * collective, on one config that the checks change as they go.
 */
static void each_forced(void (*check)(struct collc_config *cfg, int op, uint64_t bytes))
{
	static const uint64_t sizes[] = { 0, 1, 64 * KiB, 100 * MiB };
	struct collc_config cfg = defaults(4);

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
		for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
			check(&cfg, ops[i], sizes[s]);
}

static void forced_algo_case(struct collc_config *cfg, int op, uint64_t bytes)
{
	cfg->algo = COLLC_ALGO_RING;
	assert_int_equal(plan(cfg, op, bytes, 4).algo, COLLC_ALGO_RING);
	cfg->algo = COLLC_ALGO_ONESHOT;
	assert_plan(plan(cfg, op, bytes, 4), COLLC_ALGO_ONESHOT, COLLC_PROTO_SIMPLE);
	/* Two-shot is an all-reduce algorithm; the others fall back to ring. */
	cfg->algo = COLLC_ALGO_TWOSHOT;
	assert_int_equal(plan(cfg, op, bytes, 4).algo,
			 op == COLLC_OP_ALLREDUCE ? COLLC_ALGO_TWOSHOT : COLLC_ALGO_RING);
}

static void test_forced_algo(void **state)
{
	(void)state;
	each_forced(forced_algo_case);
}

static void forced_proto_case(struct collc_config *cfg, int op, uint64_t bytes)
{
	struct collc_config auto_cfg = defaults(4);

	/*
	 * algo auto: LL128 runs on ring only, so ring it is; LL also on one-shot
	 * all-reduce, allgather and reduce-scatter, when the size picks one-shot.
	 */
	cfg->algo = COLLC_ALGO_AUTO;
	cfg->proto = COLLC_PROTO_LL;
	if (collc_oll_coll(op) && bytes <= 64 * KiB)
		assert_plan(plan(cfg, op, bytes, 4), COLLC_ALGO_ONESHOT, COLLC_PROTO_LL);
	else
		assert_plan(plan(cfg, op, bytes, 4), COLLC_ALGO_RING, COLLC_PROTO_LL);
	cfg->proto = COLLC_PROTO_LL128;
	assert_plan(plan(cfg, op, bytes, 4), COLLC_ALGO_RING, COLLC_PROTO_LL128);
	/* Simple leaves the algorithm to the size. */
	cfg->proto = COLLC_PROTO_SIMPLE;
	assert_int_equal(plan(cfg, op, bytes, 4).proto, COLLC_PROTO_SIMPLE);
	assert_int_equal(plan(cfg, op, bytes, 4).algo, plan(&auto_cfg, op, bytes, 4).algo);
	/* Both forced: the algorithm wins, and the plan says what runs. */
	cfg->algo = COLLC_ALGO_ONESHOT;
	cfg->proto = COLLC_PROTO_LL128;
	assert_plan(plan(cfg, op, bytes, 4), COLLC_ALGO_ONESHOT, COLLC_PROTO_SIMPLE);
	cfg->proto = COLLC_PROTO_LL;
	assert_plan(plan(cfg, op, bytes, 4), COLLC_ALGO_ONESHOT,
		    collc_oll_coll(op) ? COLLC_PROTO_LL : COLLC_PROTO_SIMPLE);
	cfg->algo = COLLC_ALGO_RING;
	cfg->proto = COLLC_PROTO_LL128;
	assert_plan(plan(cfg, op, bytes, 4), COLLC_ALGO_RING, COLLC_PROTO_LL128);
	cfg->algo = COLLC_ALGO_TWOSHOT;
	cfg->proto = COLLC_PROTO_LL;
	if (op == COLLC_OP_ALLREDUCE)
		assert_plan(plan(cfg, op, bytes, 4), COLLC_ALGO_TWOSHOT, COLLC_PROTO_SIMPLE);
	else
		assert_plan(plan(cfg, op, bytes, 4), COLLC_ALGO_RING, COLLC_PROTO_LL);
	cfg->proto = COLLC_PROTO_AUTO;
}

static void test_forced_proto(void **state)
{
	(void)state;
	each_forced(forced_proto_case);
}

/*
 * All-to-all(v), send and receive are copy lists: one-shot Simple whatever
 * algo and proto force or memory flags say; channels follow their size.
 */
static void test_copies(void **state)
{
	static const int copies[] = { COLLC_OP_ALLTOALL, COLLC_OP_ALLTOALLV, COLLC_OP_SEND,
				      COLLC_OP_RECV };
	struct collc_config cfg = defaults(8);
	struct plan p;

	(void)state;
	for (size_t i = 0; i < sizeof(copies) / sizeof(copies[0]); i++) {
		int op = copies[i];

		assert_false(plan_algo_supported(op, COLLC_ALGO_RING));
		assert_true(plan_algo_supported(op, COLLC_ALGO_ONESHOT));
		assert_false(plan_algo_supported(op, COLLC_ALGO_TWOSHOT));
		assert_true(plan_proto_supported(op, COLLC_ALGO_ONESHOT, COLLC_PROTO_SIMPLE));
		assert_false(plan_proto_supported(op, COLLC_ALGO_ONESHOT, COLLC_PROTO_LL));
		/* The algo key's values. */
		for (uint32_t a = COLLC_ALGO_AUTO; a < COLLC_ALGO_HIER; a++)
			for (uint32_t pr = COLLC_PROTO_AUTO; pr < COLLC_PROTO_MAX; pr++) {
				cfg.algo = a;
				cfg.proto = pr;
				plan_coll(&cfg, op, 8, 64, PLAN_NO_PEER_READ | PLAN_INPLACE, &p);
				assert_plan(p, COLLC_ALGO_ONESHOT, COLLC_PROTO_SIMPLE);
				assert_int_equal(p.nchannels, 1);
			}
		cfg.algo = COLLC_ALGO_AUTO;
		cfg.proto = COLLC_PROTO_AUTO;
		cfg.channels = 8;
		assert_int_equal(plan(&cfg, op, 768 * KiB, 2).nchannels, 3);
		assert_int_equal(plan(&cfg, op, 1ull << 40, 2).nchannels, 8);
		cfg.channels = 2;
	}
}

static void test_channels(void **state)
{
	struct collc_config cfg = defaults(8);

	(void)state;
	assert_int_equal(cfg.channels, 2);
	assert_int_equal(plan(&cfg, COLLC_OP_ALLREDUCE, 0, 4).nchannels, 1);
	assert_int_equal(plan(&cfg, COLLC_OP_ALLREDUCE, 256 * KiB - 1, 4).nchannels, 1);
	assert_int_equal(plan(&cfg, COLLC_OP_ALLREDUCE, 512 * KiB, 4).nchannels, 2);
	assert_int_equal(plan(&cfg, COLLC_OP_ALLREDUCE, 1ull << 40, 4).nchannels, 2);
	cfg.channels = 8;
	assert_int_equal(plan(&cfg, COLLC_OP_ALLREDUCE, 768 * KiB, 4).nchannels, 3);
	assert_int_equal(plan(&cfg, COLLC_OP_ALLREDUCE, 1ull << 40, 4).nchannels, 8);
	cfg.channel_min_bytes = 1;
	assert_int_equal(plan(&cfg, COLLC_OP_ALLREDUCE, 1, 4).nchannels, 1);
	assert_int_equal(plan(&cfg, COLLC_OP_ALLREDUCE, 5, 4).nchannels, 5);
	cfg.channels = 1;
	assert_int_equal(plan(&cfg, COLLC_OP_ALLREDUCE, 1ull << 40, 4).nchannels, 1);
	/* Never above the executor's channels, whatever the config claims. */
	cfg.channels = 32;
	cfg.max_channels = 4;
	assert_int_equal(plan(&cfg, COLLC_OP_ALLREDUCE, 1ull << 40, 4).nchannels, 4);
	cfg.channel_min_bytes = 0;
	assert_int_equal(plan(&cfg, COLLC_OP_ALLREDUCE, 1ull << 40, 4).nchannels, 4);
	/* Chunk geometry is the executor's: its buffers differ between CPU and GPU. */
	assert_int_equal(plan(&cfg, COLLC_OP_ALLREDUCE, 1ull << 40, 4).chunk_bytes, 0);
}

/* Memory peers cannot read directly runs the ring, even where one-shot/two-shot are forced. */
static void test_no_peer_read(void **state)
{
	struct collc_config cfg = defaults(4);
	struct plan p;

	(void)state;
	for (uint32_t algo = 0; algo < COLLC_ALGO_HIER; algo++) /* the algo key's values */
		for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
			cfg.algo = algo;
			plan_coll(&cfg, ops[o], 8 * KiB, 4, PLAN_NO_PEER_READ, &p);
			assert_int_equal(p.algo, COLLC_ALGO_RING);
			assert_int_equal(p.proto, COLLC_PROTO_LL); /* the ring's choice at 8 KiB */
		}
	cfg.algo = COLLC_ALGO_AUTO;
	cfg.proto = COLLC_PROTO_LL128;
	plan_coll(&cfg, COLLC_OP_ALLREDUCE, 8 * KiB, 2, PLAN_NO_PEER_READ, &p);
	assert_plan(p, COLLC_ALGO_RING, COLLC_PROTO_LL128);
}

/*
 * In place without EXEC_CAP_ONESHOT_INPLACE: one-shot Simple all-reduce runs
 * two-shot (also when forced); one-shot LL, the other algorithms and the
 * other collectives keep their plan.
 */
static void test_inplace(void **state)
{
	struct collc_config cfg = defaults(32);
	struct plan p, q;

	(void)state;
	cfg.oneshot_ll_max_bytes = 512 * KiB;
	cfg.oneshot_max_bytes = 4 * MiB;
	cfg.twoshot_max_bytes = 32 * MiB;
	for (uint64_t bytes = 8; bytes <= 64 * MiB; bytes *= 2)
		for (uint32_t algo = 0; algo < COLLC_ALGO_HIER; algo++) /* the algo key's values */
			for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
				cfg.algo = algo;
				plan_coll(&cfg, ops[o], bytes, 2, 0, &p);
				plan_coll(&cfg, ops[o], bytes, 2, PLAN_INPLACE, &q);
				if (ops[o] == COLLC_OP_ALLREDUCE && p.algo == COLLC_ALGO_ONESHOT &&
				    p.proto == COLLC_PROTO_SIMPLE) {
					assert_plan(q, COLLC_ALGO_TWOSHOT, COLLC_PROTO_SIMPLE);
				} else {
					assert_plan(q, p.algo, p.proto);
				}
				assert_int_equal(q.nchannels, p.nchannels);
			}
	/* The automatic choice at 1 MiB is one-shot Simple; in place it is two-shot. */
	cfg.algo = COLLC_ALGO_AUTO;
	plan_coll(&cfg, COLLC_OP_ALLREDUCE, 1 * MiB, 2, 0, &p);
	assert_plan(p, COLLC_ALGO_ONESHOT, COLLC_PROTO_SIMPLE);
	plan_coll(&cfg, COLLC_OP_ALLREDUCE, 1 * MiB, 2, PLAN_INPLACE, &p);
	assert_plan(p, COLLC_ALGO_TWOSHOT, COLLC_PROTO_SIMPLE);
	/* One-shot LL (256 KiB) reads only its own input: it stays. */
	plan_coll(&cfg, COLLC_OP_ALLREDUCE, 256 * KiB, 2, PLAN_INPLACE, &p);
	assert_plan(p, COLLC_ALGO_ONESHOT, COLLC_PROTO_LL);
}

/* Keys left at auto take the executor's values; set ones apply to every executor. */
static void test_resolve(void **state)
{
	static const struct cfg_exec_defaults gpu = {
		.channels = 32,
		.rotate_channels = 1,
		.channel_min_bytes = 8 * KiB,
		.oneshot_ll_max_bytes = 512 * KiB,
		.oneshot_max_bytes = 4 * MiB,
		.twoshot_max_bytes = 32 * MiB,
	};
	struct collc_config cfg = defaults(32), out;
	char err[128], v[64];

	(void)state;
	cfg_resolve(&cfg, &gpu, 32, &out);
	assert_int_equal(out.channels, 32);
	assert_int_equal(out.twoshot_max_bytes, 32 * MiB);
	assert_int_equal(out.rotate_channels, 1);
	assert_int_equal(out.auto_mask, 0);
	assert_int_equal(plan(&out, COLLC_OP_ALLREDUCE, 256 * KiB, 2).algo, COLLC_ALGO_ONESHOT);
	assert_int_equal(plan(&out, COLLC_OP_ALLREDUCE, 256 * KiB, 2).proto, COLLC_PROTO_LL);
	/* Bounded by the executor's own channels. */
	cfg_resolve(&cfg, &gpu, 4, &out);
	assert_int_equal(out.channels, 4);
	assert_int_equal(out.max_channels, 4);
	assert_int_equal(cfg_apply_kv(&cfg, "twoshot_max_bytes=2M", err, sizeof(err)), 0);
	cfg_resolve(&cfg, &gpu, 32, &out);
	assert_int_equal(out.twoshot_max_bytes, 2 * MiB);
	assert_int_equal(cfg_get_key(&cfg, "twoshot_max_bytes", v, sizeof(v)), 0);
	assert_string_equal(v, "2097152");
	assert_int_equal(cfg_apply_kv(&cfg, "twoshot_max_bytes=auto", err, sizeof(err)), 0);
	assert_int_equal(cfg_get_key(&cfg, "twoshot_max_bytes", v, sizeof(v)), 0);
	assert_string_equal(v, "auto");
	cfg_resolve(&cfg, &gpu, 32, &out);
	assert_int_equal(out.twoshot_max_bytes, 32 * MiB);
	/* Keys without an executor default take no auto. */
	assert_int_equal(cfg_apply_kv(&cfg, "ll_max_bytes=auto", err, sizeof(err)), -EINVAL);
	/* Keys fixed at start are told apart. */
	out = cfg;
	assert_null(cfg_fixed_changed(&cfg, &out));
	assert_int_equal(cfg_apply_kv(&out, "cuda_lanes=3", err, sizeof(err)), 0);
	assert_string_equal(cfg_fixed_changed(&cfg, &out), "cuda_lanes");
	assert_int_equal(cfg_apply_kv(&out, "cuda_lanes=5", err, sizeof(err)), -EINVAL);
}

/* Every plan is runnable: a real algorithm the collective supports, carrying a protocol it can. */
static void test_sweep_invariants(void **state)
{
	static const uint64_t sizes[] = { 0,         1,           7,
					  4 * KiB,   64 * KiB,    64 * KiB + 1,
					  1 * MiB,   1 * MiB + 1, 4 * MiB + 1,
					  1ull << 40 };
	static const uint32_t nranks[] = { 1, 2, 3, 8, 9, 64 };
	unsigned n = 0;

	(void)state;
	for (uint32_t algo = 0; algo < COLLC_ALGO_HIER; algo++) /* the algo key's values */
		for (uint32_t proto = 0; proto < COLLC_PROTO_MAX; proto++)
			for (uint32_t ch = 1; ch <= 4; ch++)
				for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
					for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]);
					     s++)
						for (size_t r = 0;
						     r < sizeof(nranks) / sizeof(nranks[0]); r++) {
							struct collc_config cfg = defaults(4);
							struct plan p;

							cfg.algo = algo;
							cfg.proto = proto;
							cfg.channels = ch;
							p = plan(&cfg, ops[o], sizes[s], nranks[r]);
							assert_true(plan_algo_supported(ops[o],
											p.algo));
							assert_true(plan_proto_supported(
								ops[o], p.algo, p.proto));
							assert_in_range(p.nchannels, 1, ch);
							if (algo != COLLC_ALGO_AUTO &&
							    nranks[r] > 1 &&
							    plan_algo_supported(ops[o], algo))
								assert_int_equal(p.algo, algo);
							if (proto != COLLC_PROTO_AUTO &&
							    plan_proto_supported(ops[o], p.algo,
										 proto))
								assert_int_equal(p.proto, proto);
							n++;
						}
	assert_int_equal(n, 4 * 4 * 4 * 5 * 10 * 6);
}

/* The congestion control "auto" picks, with a stand-in for the kernel's answer. */
static const char *cc_refused[4];

static int fake_settable(const char *name)
{
	for (int i = 0; i < 4 && cc_refused[i]; i++)
		if (!strcmp(name, cc_refused[i]))
			return 0;
	return 1;
}

static void test_congestion_auto(void **state)
{
	struct collc_config c;
	char pick[16];

	(void)state;
	memset(cc_refused, 0, sizeof(cc_refused));
	/* Any namespace default but bbr stays. */
	assert_string_equal(cfg_cc_auto("cubic", fake_settable), "");
	assert_string_equal(cfg_cc_auto("dctcp", fake_settable), "");
	assert_string_equal(cfg_cc_auto("reno", fake_settable), "");
	assert_string_equal(cfg_cc_auto("?", fake_settable), "");
	/* bbr, of any version, gives way to cubic, else reno, else stays. */
	assert_string_equal(cfg_cc_auto("bbr", fake_settable), "cubic");
	assert_string_equal(cfg_cc_auto("bbr3", fake_settable), "cubic");
	cc_refused[0] = "cubic";
	assert_string_equal(cfg_cc_auto("bbr", fake_settable), "reno");
	cc_refused[1] = "reno";
	assert_string_equal(cfg_cc_auto("bbr", fake_settable), "");

	/* An explicit name, or "", is taken as it is. */
	cfg_tcp_congestion_pick("reno", pick, sizeof(pick));
	assert_string_equal(pick, "reno");
	cfg_tcp_congestion_pick("", pick, sizeof(pick));
	assert_string_equal(pick, "");

	/* The default is auto; bbr alone gets more data sockets; one eager limit for all. */
	cfg_defaults(&c, 4);
	assert_string_equal(c.net_tcp_congestion, "auto");
	assert_int_equal(c.net_eager_max_bytes, NODE_EAGER_MAX);
	cfg_defaults_cc(&c, 4, "bbr");
	assert_int_equal(c.net_tcp_streams, NET_TCP_BBR_STREAMS);
	assert_int_equal(c.net_eager_max_bytes, NODE_EAGER_MAX);
	cfg_defaults_cc(&c, 4, "cubic");
	assert_int_not_equal(c.net_tcp_streams, NET_TCP_BBR_STREAMS);
	cfg_defaults_cc(&c, 4, "reno");
	assert_int_not_equal(c.net_tcp_streams, NET_TCP_BBR_STREAMS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_support_table),
		cmocka_unit_test(test_auto_allreduce),
		cmocka_unit_test(test_auto_rank_count),
		cmocka_unit_test(test_auto_other_collectives),
		cmocka_unit_test(test_auto_proto),
		cmocka_unit_test(test_forced_algo),
		cmocka_unit_test(test_forced_proto),
		cmocka_unit_test(test_channels),
		cmocka_unit_test(test_copies),
		cmocka_unit_test(test_no_peer_read),
		cmocka_unit_test(test_inplace),
		cmocka_unit_test(test_resolve),
		cmocka_unit_test(test_sweep_invariants),
		cmocka_unit_test(test_congestion_auto),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
