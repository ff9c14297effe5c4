/* SPDX-License-Identifier: MIT */
/*
 * --vs-mpi: the MPI side of the comparison, collc-mpi-peer (mpi_peer.c)
 * run through mpirun, its lines parsed into the table's statistics.
 */
#ifndef COLLC_BENCH_VS_MPI_H
#define COLLC_BENCH_VS_MPI_H

#include "bench/bench.h"

/* --vs-mpi: runs mpi_peer through mpirun and parses its lines into st[nsizes]. */
struct mpi_opts {
	const char *mpirun;
	const char *peer;
	const char *btl; /* --mca btl: "self,vader" (shared memory) or "tcp,self" */
	char *const *extra;
	int nextra;
};

int mpi_peer_run(const struct bench_cfg *cfg, const struct mpi_opts *mo, struct size_stats *st);

#endif /* COLLC_BENCH_VS_MPI_H */
