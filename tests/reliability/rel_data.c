/* SPDX-License-Identifier: MIT */
#include <inttypes.h>
#include <string.h>

#include "rel.h"
#include "rel_data.h"

static const unsigned width[COLLC_NUM_DTYPES] = { 1, 1, 4, 4, 8, 8, 2, 2, 4, 8 };

const char *rd_dtype_name(collc_dtype dt)
{
	static const char *const n[COLLC_NUM_DTYPES] = { "int8",   "uint8",   "int32",   "uint32",
							 "int64",  "uint64",  "float16", "bfloat16",
							 "float32", "float64" };

	return (unsigned)dt < COLLC_NUM_DTYPES ? n[dt] : "?";
}

const char *rd_op_name(collc_redop op)
{
	static const char *const n[COLLC_NUM_REDOPS] = { "sum", "prod", "max", "min", "avg" };

	return (unsigned)op < COLLC_NUM_REDOPS ? n[op] : "?";
}

static int is_float(collc_dtype dt)
{
	return dt >= COLLC_FLOAT16;
}

static int is_signed_int(collc_dtype dt)
{
	return dt == COLLC_INT8 || dt == COLLC_INT32 || dt == COLLC_INT64;
}

static uint64_t mask(collc_dtype dt)
{
	return width[dt] == 8 ? UINT64_MAX : (1ull << (8 * width[dt])) - 1;
}

static int64_t sext(collc_dtype dt, uint64_t v)
{
	unsigned sh = 64 - 8 * width[dt];

	return (int64_t)(v << sh) >> sh;
}

/* A small integer (|v| <= 2048) in the float dtype's encoding: exact. */
static uint64_t enc_float(collc_dtype dt, double v)
{
	float f = (float)v;
	uint32_t fb;

	switch (dt) {
	case COLLC_FLOAT64: {
		uint64_t b;

		memcpy(&b, &v, 8);
		return b;
	}
	case COLLC_FLOAT32:
		memcpy(&fb, &f, 4);
		return fb;
	case COLLC_BFLOAT16:
		memcpy(&fb, &f, 4);
		return fb >> 16;
	default: { /* float16 */
		uint64_t s = v < 0 ? 0x8000u : 0, m = (uint64_t)(v < 0 ? -v : v);
		int e = 0;

		if (m == 0)
			return s;
		while ((m >> (e + 1)) != 0)
			e++;
		return s | (uint64_t)(e + 15) << 10 | ((m << (10 - e)) & 0x3ffu);
	}
	}
}

/* The small integer a generated float element stands for. */
static int64_t small_value(collc_dtype dt, collc_redop op, int nranks, uint64_t h)
{
	static const int prod_vals[4] = { -2, -1, 1, 2 };

	(void)dt;
	switch (op) {
	case COLLC_PROD:
		return prod_vals[h & 3];
	case COLLC_AVG:
		return (int64_t)nranks * ((int64_t)(h % 9) - 4);
	default:
		return (int64_t)(h % 17) - 8;
	}
}

uint64_t rd_elem(collc_dtype dt, collc_redop op, int nranks, int rank, uint64_t key, size_t i)
{
	uint64_t h = rel_mix(key ^ rel_mix(((uint64_t)(unsigned)rank << 48) ^ (uint64_t)i));

	if (is_float(dt))
		return enc_float(dt, (double)small_value(dt, op, nranks, h));
	if (op == COLLC_AVG) {
		int64_t u = is_signed_int(dt) ? (int64_t)(h % 9) - 4 : (int64_t)(h % 9);

		return (uint64_t)(u * nranks) & mask(dt);
	}
	return h & mask(dt);
}

uint64_t rd_reduced(collc_dtype dt, collc_redop op, int nranks, uint64_t key, size_t i)
{
	if (is_float(dt)) {
		double acc = 0;

		for (int r = 0; r < nranks; r++) {
			uint64_t h = rel_mix(key ^ rel_mix(((uint64_t)(unsigned)r << 48) ^ (uint64_t)i));
			double v = (double)small_value(dt, op, nranks, h);

			if (r == 0)
				acc = v;
			else if (op == COLLC_PROD)
				acc *= v;
			else if (op == COLLC_MAX)
				acc = v > acc ? v : acc;
			else if (op == COLLC_MIN)
				acc = v < acc ? v : acc;
			else
				acc += v;
		}
		if (op == COLLC_AVG)
			acc /= nranks;
		if (acc == 0)
			acc = 0; /* +0 */
		return enc_float(dt, acc);
	}
	{
		uint64_t acc = 0;

		for (int r = 0; r < nranks; r++) {
			uint64_t v = rd_elem(dt, op, nranks, r, key, i);

			if (r == 0) {
				acc = v;
			} else if (op == COLLC_PROD) {
				acc *= v;
			} else if (op == COLLC_MAX || op == COLLC_MIN) {
				int gt = is_signed_int(dt) ? sext(dt, v) > sext(dt, acc) : v > acc;

				if ((op == COLLC_MAX) == gt && v != acc)
					acc = v;
			} else {
				acc += v;
			}
			acc &= mask(dt);
		}
		if (op == COLLC_AVG)
			acc = is_signed_int(dt) ? (uint64_t)(sext(dt, acc) / nranks) & mask(dt)
						: acc / (uint64_t)nranks;
		return acc & mask(dt);
	}
}

static void put(void *buf, size_t j, collc_dtype dt, uint64_t v)
{
	memcpy((char *)buf + j * width[dt], &v, width[dt]); /* little endian */
}

static uint64_t get(const void *buf, size_t j, collc_dtype dt)
{
	uint64_t v = 0;

	memcpy(&v, (const char *)buf + j * width[dt], width[dt]);
	return v;
}

void rd_fill(void *buf, size_t count, collc_dtype dt, collc_redop op, int nranks, int rank,
	     uint64_t key, size_t first)
{
	for (size_t i = 0; i < count; i++)
		put(buf, i, dt, rd_elem(dt, op, nranks, rank, key, first + i));
}

static long mismatch(uint64_t got, uint64_t want, size_t i, uint64_t *ret_got, uint64_t *ret_want)
{
	if (ret_got)
		*ret_got = got;
	if (ret_want)
		*ret_want = want;
	return (long)i;
}

long rd_check_allreduce(const void *recv, size_t count, collc_dtype dt, collc_redop op, int nranks,
			uint64_t key, uint64_t *ret_got, uint64_t *ret_want)
{
	for (size_t i = 0; i < count; i++) {
		uint64_t want = rd_reduced(dt, op, nranks, key, i), got = get(recv, i, dt);

		if (got != want)
			return mismatch(got, want, i, ret_got, ret_want);
	}
	return -1;
}

long rd_check_allgather(const void *recv, size_t count, collc_dtype dt, int nranks, uint64_t key,
			uint64_t *ret_got, uint64_t *ret_want)
{
	for (int r = 0; r < nranks; r++)
		for (size_t i = 0; i < count; i++) {
			uint64_t want = rd_elem(dt, COLLC_SUM, nranks, r, key, i);
			uint64_t got = get(recv, (size_t)r * count + i, dt);

			if (got != want)
				return mismatch(got, want, (size_t)r * count + i, ret_got, ret_want);
		}
	return -1;
}

long rd_check_reduce_scatter(const void *recv, size_t count, collc_dtype dt, collc_redop op,
			     int nranks, int rank, uint64_t key, uint64_t *ret_got,
			     uint64_t *ret_want)
{
	for (size_t i = 0; i < count; i++) {
		uint64_t want = rd_reduced(dt, op, nranks, key, (size_t)rank * count + i);
		uint64_t got = get(recv, i, dt);

		if (got != want)
			return mismatch(got, want, i, ret_got, ret_want);
	}
	return -1;
}

long rd_check_broadcast(const void *recv, size_t count, collc_dtype dt, int root, int nranks,
			uint64_t key, uint64_t *ret_got, uint64_t *ret_want)
{
	for (size_t i = 0; i < count; i++) {
		uint64_t want = rd_elem(dt, COLLC_SUM, nranks, root, key, i), got = get(recv, i, dt);

		if (got != want)
			return mismatch(got, want, i, ret_got, ret_want);
	}
	return -1;
}

int rel_steady_rank(struct rel_steady *s, int rank)
{
	struct collc_ctx *ctx;
	struct collc_comm *comm;
	const size_t cap = 1 << 20;
	void *send, *recv;
	uint64_t rng = rel_seed ^ 0x57eadull;
	int r;

	if (rel_join(&s->uid, 2, rank, &ctx, &comm) < 0)
		return 1;
	if ((r = collc_mem_alloc(ctx, cap, -1, &send)) < 0 || (r = collc_mem_alloc(ctx, cap, -1, &recv)) < 0)
		return rel_fail("steady rank %d: collc_mem_alloc: %s", rank, collc_strerror(r));
	rel_add(&s->joined, 1);
	for (uint32_t it = 0;; it++) {
		uint32_t stop = rel_load(&s->stop_at);
		collc_dtype dt = (collc_dtype)rel_rand_below(&rng, COLLC_NUM_DTYPES);
		collc_redop op = (collc_redop)rel_rand_below(&rng, COLLC_NUM_REDOPS);
		static const size_t sizes[] = { 0, 1, 7, 1000, 4096, 65536, 262144, 1 << 20 };
		/* Mostly small; a 1 MiB one every 16th. */
		size_t count = sizes[rel_rand_below(&rng, it % 16 == 0 ? 8 : 7)] / collc_dtype_size(dt);
		uint64_t key = rel_mix(rel_seed ^ it), got, want;
		collc_req req;
		long bad;

		if (stop && it >= stop)
			break;
		rd_fill(send, count, dt, op, 2, rank, key, 0);
		memset(recv, 0xa5, count * collc_dtype_size(dt));
		r = collc_allreduce(comm, send, recv, count, dt, op, &req);
		if (r == 0)
			r = collc_wait(ctx, req, 20000);
		if (r < 0) {
			s->errors[rank]++;
			return rel_fail("steady rank %d: collective %u (%s %s x%zu) ended with %s", rank, it,
					rd_dtype_name(dt), rd_op_name(op), count, collc_strerror(r));
		}
		bad = rd_check_allreduce(recv, count, dt, op, 2, key, &got, &want);
		if (bad >= 0) {
			s->errors[rank]++;
			return rel_fail("steady rank %d: collective %u (%s %s x%zu) wrong at %ld: %#" PRIx64
					", want %#" PRIx64,
					rank, it, rd_dtype_name(dt), rd_op_name(op), count, bad, got, want);
		}
		s->bytes[rank] += count * collc_dtype_size(dt);
		rel_store(&s->progress[rank], it + 1);
		if (s->pause_us)
			rel_sleep_us(s->pause_us);
	}
	collc_comm_destroy(comm);
	collc_disconnect(ctx);
	return 0;
}

void rel_steady_stop(struct rel_steady *s)
{
	uint32_t p0 = rel_load(&s->progress[0]), p1 = rel_load(&s->progress[1]);

	rel_store(&s->stop_at, (p0 > p1 ? p0 : p1) + 3);
}
