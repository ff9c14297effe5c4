/* SPDX-License-Identifier: MIT */
/*
 * The results of a run: the table, the CSV and the plot.
 */
#ifndef COLLC_BENCH_REPORT_H
#define COLLC_BENCH_REPORT_H

#include <stdio.h>

#include "bench/bench.h"
#include "bench/tcp_limit.h"

/* The table, the CSV and the plot. */
struct report_row {
	const struct bench_size *sz;
	struct size_stats c; /* collc */
	struct size_stats p; /* the peer, when there is one */
};

struct report {
	const struct bench_cfg *cfg;
	const char *peer_name; /* "NCCL", "MPI" or NULL */
	const char *backend;
	const struct tcp_limit *tcp; /* the raw TCP limit of an inter-node run, or NULL */
	struct report_row rows[BENCH_MAX_SIZES];
};

void report_table(FILE *f, const struct report *rp);
int report_csv(const char *path, const struct report *rp);
/* Plots a CSV written by report_csv (gnuplot, else python3-matplotlib). */
int report_plot(const char *csv, const char *png, const char *title);

#endif /* COLLC_BENCH_REPORT_H */
