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

const char *rd_dtype_name(collc_dtype dt);
const char *rd_op_name(collc_redop op);

#endif
