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
	/* The peer, when there is one; with modes, the best of them (report_pick_best). */
	struct size_stats p;
	struct size_stats pm[NCCL_NUM_MODES]; /* each mode of the peer in rp->modes */
	int p50_mode, pipe_mode;              /* the modes p's p50 (and p99) and pipe come from */
	/* Raw TCP just before [0] and after [1] collc's ranks ran this size (tcp_row_bytes). */
	struct tcp_limit tcp[2];
};

struct report {
	const struct bench_cfg *cfg;
	const char *peer_name; /* "NCCL", "MPI" or NULL */
	const char *backend;
	unsigned modes; /* NCCL: 1 << enum nccl_mode for each mode run; 0: the peer has none */
	/*
	 * The raw TCP limit of an inter-node run, measured before the collc
	 * ranks ran (tcp) and again after (tcp_after); NULL: not measured.
	 */
	const struct tcp_limit *tcp, *tcp_after;
	/* Sizes of at least this many bytes have rows[].tcp, walking buffers of the size too; 0: none. */
	uint64_t tcp_row_bytes;
	struct report_row rows[BENCH_MAX_SIZES];
};

/*
 * With modes: each row's p from its pm[]: p50 and p99 of the mode with the
 * lowest p50, pipe of the mode with the lowest pipe, over the modes with
 * numbers (RES_OK); without any, the worst status of the modes.
 */
void report_pick_best(struct report *rp);
/* 1 when a size lacks numbers (collc or the peer) or a peer mode failed; skipped modes do not count. */
int report_failed(const struct report *rp);
/* Whether size row has raw TCP measured around it (rows[].tcp: tcp_row_bytes and up to 1 GiB). */
int report_row_tcp(const struct report *rp, const struct report_row *row);
void report_table(FILE *f, const struct report *rp);
int report_csv(const char *path, const struct report *rp);
/* Plots a CSV written by report_csv (gnuplot, else python3-matplotlib). */
int report_plot(const char *csv, const char *png, const char *title);

#endif /* COLLC_BENCH_REPORT_H */
