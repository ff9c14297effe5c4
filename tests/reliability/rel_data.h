/* SPDX-License-Identifier: MIT */
/*
 * Distinct, checkable data for collectives: every element of every rank's
 * input is a function of (request key, rank, index), chosen per (dtype, op) so
 * that the exact result is known whatever order the executor reduces in
 * (small integers for floats, multiples of nranks for AVG, full-width random
 * bits where integer wrap-around is exact).
 */
#ifndef COLLC_REL_DATA_H
#define COLLC_REL_DATA_H

#include <stddef.h>
#include <stdint.h>

#include <collc.h>

/* Element i of `rank`'s input, as the dtype's raw bits. */
uint64_t rd_elem(collc_dtype dt, collc_redop op, int nranks, int rank, uint64_t key, size_t i);
/* Fills count elements of rank's input starting at element `first`. */
void rd_fill(void *buf, size_t count, collc_dtype dt, collc_redop op, int nranks, int rank,
	     uint64_t key, size_t first);
/* op over every rank's element i, as raw bits. */
uint64_t rd_reduced(collc_dtype dt, collc_redop op, int nranks, uint64_t key, size_t i);

/*
 * Each returns -1 when correct, else the index of the first wrong element
 * (with got/want in *ret_got, *ret_want when not NULL).
 */
long rd_check_allreduce(const void *recv, size_t count, collc_dtype dt, collc_redop op, int nranks,
			uint64_t key, uint64_t *ret_got, uint64_t *ret_want);
long rd_check_allgather(const void *recv, size_t count, collc_dtype dt, int nranks, uint64_t key,
			uint64_t *ret_got, uint64_t *ret_want);
long rd_check_reduce_scatter(const void *recv, size_t count, collc_dtype dt, collc_redop op,
			     int nranks, int rank, uint64_t key, uint64_t *ret_got,
			     uint64_t *ret_want);
long rd_check_broadcast(const void *recv, size_t count, collc_dtype dt, int root, int nranks,
			uint64_t key, uint64_t *ret_got, uint64_t *ret_want);
/* reduce: the root's receive buffer holds the allreduce result. */

/*
 * A pair of processes running correct all-reduces of random dtype, op and
 * size (0..1 MiB, pause_us apart) on their own communicator, checking every
 * result, until rel_steady_stop(). Both ranks draw the same sequence.
 */
struct rel_steady {
	struct collc_unique_id uid;
	uint32_t pause_us;
	uint32_t joined;
	uint32_t stop_at;     /* 0: run on */
	uint32_t progress[2]; /* collectives done by each rank */
	uint32_t errors[2];
	uint64_t bytes[2];
};
/* The body of rank `rank` (0 or 1): 0 when every collective was correct. */
int rel_steady_rank(struct rel_steady *s, int rank);
/* Makes both ranks stop after the same collective (they are at most one apart). */
void rel_steady_stop(struct rel_steady *s);

const char *rd_dtype_name(collc_dtype dt);
const char *rd_op_name(collc_redop op);

#endif
