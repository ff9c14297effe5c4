/* SPDX-License-Identifier: MIT */
/*
 * Output: the human table, the CSV (same columns, machine-readable), and a
 * PNG with two panels (latency vs size, busbw vs size, log axes) drawn from
 * the CSV by gnuplot, or by python3-matplotlib where gnuplot is missing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/proc.h"
#include "bench/report.h"

struct derived {
	double algbw, busbw, ops;
	double busbw1; /* one collective on its own: from p50 */
};

static struct derived derive(const struct report *rp, const struct report_row *row,
			     const struct size_stats *st)
{
	double f = bench_busbw_factor(rp->cfg->coll, rp->cfg->nranks);
	struct derived d;
	double t = st->pipe_us * 1e-6;

	d.algbw = (double)row->sz->bytes / t / 1e9;
	d.busbw = d.algbw * f;
	d.ops = 1.0 / t;
	d.busbw1 = (double)row->sz->bytes / (st->p50_us * 1e-6) / 1e9 * f;
	return d;
}

static const char *status_word(int status)
{
	switch (status) {
	case RES_OK:
		return "ok";
	case RES_WRONG:
		return "wrong";
	case RES_ERROR:
		return "error";
	case RES_SKIPPED:
		return "skipped";
	default:
		return "not-run";
	}
}

static int has_mode(const struct report *rp, int m)
{
	return (rp->modes >> m) & 1;
}

void report_pick_best(struct report *rp)
{
	for (int s = 0; s < rp->cfg->nsizes; s++) {
		struct report_row *row = &rp->rows[s];
		const struct size_stats *worst = NULL;

		row->p50_mode = row->pipe_mode = -1;
		if (!rp->modes)
			continue;
		for (int m = 0; m < NCCL_NUM_MODES; m++) {
			const struct size_stats *st = &row->pm[m];

			if (!has_mode(rp, m))
				continue;
			if (st->status != RES_OK) {
				if (!worst || bench_status_rank(st->status) >
						      bench_status_rank(worst->status))
					worst = st;
				continue;
			}
			/* Ties go to the mode listed first. */
			if (row->p50_mode < 0 || st->p50_us < row->pm[row->p50_mode].p50_us)
				row->p50_mode = m;
			if (row->pipe_mode < 0 || st->pipe_us < row->pm[row->pipe_mode].pipe_us)
				row->pipe_mode = m;
		}
		memset(&row->p, 0, sizeof(row->p));
		if (row->p50_mode >= 0) {
			row->p.status = RES_OK;
			row->p.p50_us = row->pm[row->p50_mode].p50_us;
			row->p.p99_us = row->pm[row->p50_mode].p99_us;
			row->p.pipe_us = row->pm[row->pipe_mode].pipe_us;
		} else if (worst) {
			row->p = *worst;
		}
	}
}

int report_failed(const struct report *rp)
{
	for (int s = 0; s < rp->cfg->nsizes; s++) {
		const struct report_row *row = &rp->rows[s];

		if (row->c.status != RES_OK)
			return 1;
		if (rp->peer_name && row->p.status != RES_OK)
			return 1;
		for (int m = 0; m < NCCL_NUM_MODES; m++)
			if (has_mode(rp, m) && row->pm[m].status != RES_OK &&
			    row->pm[m].status != RES_SKIPPED)
				return 1;
	}
	return 0;
}

/* Size s's numbers of collc (who < 0), the peer's best (who == NCCL_NUM_MODES) or a peer mode. */
static const struct size_stats *stats_at(const struct report *rp, int s, int who)
{
	const struct report_row *row = &rp->rows[s];

	return who < 0 ? &row->c : who == NCCL_NUM_MODES ? &row->p : &row->pm[who];
}

/*
 * One line per failed size (and per skipped mode); a message repeated over
 * consecutive sizes is printed once.
 */
static void print_failures(FILE *f, const struct report *rp, int who)
{
	const char *last = NULL;
	char name[48] = "";
	int repeats = 0;

	if (who >= 0)
		snprintf(name, sizeof(name), "%s%s%s at ", rp->peer_name,
			 who < NCCL_NUM_MODES ? " " : "",
			 who < NCCL_NUM_MODES ? nccl_mode_names[who] : "");
	for (int s = 0; s < rp->cfg->nsizes; s++) {
		const struct size_stats *st = stats_at(rp, s, who);
		int skipped = st->status == RES_SKIPPED && who >= 0 && who < NCCL_NUM_MODES;

		if (st->status != RES_WRONG && st->status != RES_ERROR && !skipped)
			continue;
		if (last && strcmp(last, st->msg) == 0) {
			repeats++;
			continue;
		}
		if (repeats)
			fprintf(f, "#   (the same for %d more sizes)\n", repeats);
		repeats = 0;
		last = st->msg;
		fprintf(f, "#   %s%llu bytes: %s: %s\n", name,
			(unsigned long long)rp->rows[s].sz->bytes,
			st->status == RES_WRONG   ? "wrong result"
			: st->status == RES_ERROR ? "error"
						  : "skipped",
			st->msg);
	}
	if (repeats)
		fprintf(f, "#   (the same for %d more sizes)\n", repeats);
}

/* The width of the "by" columns: the longest mode name run. */
static int mode_width(const struct report *rp)
{
	int w = 2;

	for (int m = 0; m < NCCL_NUM_MODES; m++)
		if (has_mode(rp, m) && (int)strlen(nccl_mode_names[m]) > w)
			w = (int)strlen(nccl_mode_names[m]);
	return w;
}

/* Daemons pinned to CPUs (bench/run-multinode.sh --pin): where each runs; ranks follow them. */
static void print_placement(FILE *f, const struct bench_cfg *cfg)
{
	int any = 0;

	for (int i = 0; i < cfg->nsockets; i++) {
		char cpus[128];
		cpu_set_t set;
		pid_t pid = bench_socket_pid(cfg->sockets[i]);

		if (pid <= 0 || bench_pid_cpus(pid, &set, cpus, sizeof(cpus)) <= 0)
			continue;
		fprintf(f, "%s daemon %d on CPUs %s", any ? "," : "# placement:", i, cpus);
		any = 1;
	}
	if (any)
		fprintf(f, "; each rank and raw TCP stream on its daemon's CPUs\n");
}

/* One measurement's slower direction (GB/s); 0 when not measured. */
static double tcp_slower(const struct tcp_limit *t, int mem)
{
	const double *g;

	if (!t || !t->ok)
		return 0;
	g = mem ? t->mem_gbps : t->gbps;
	return g[0] < g[1] ? g[0] : g[1];
}

/*
 * The raw TCP limit of an inter-node run (GB/s; 0 when not measured): the
 * slower direction of the faster of the two measurements, before and after
 * the collc ranks ran. Raw TCP between the namespaces of a shared host
 * wanders from minute to minute (bench/RESULTS.md); collc is held to the
 * better figure.
 */
static double tcp_limit(const struct report *rp)
{
	const double a = tcp_slower(rp->tcp, 0), b = tcp_slower(rp->tcp_after, 0);

	return a > b ? a : b;
}

/*
 * A size's own limit (GB/s; 0 when not measured), from the measurements
 * just before and after it, by the same rule: the wire streams (mem 0) or
 * those walking buffers of the size (mem 1).
 */
static double row_limit(const struct report_row *row, int mem)
{
	const double a = tcp_slower(&row->tcp[0], mem), b = tcp_slower(&row->tcp[1], mem);

	return a > b ? a : b;
}

int report_row_tcp(const struct report *rp, const struct report_row *row)
{
	return rp->tcp_row_bytes && row->sz->bytes >= rp->tcp_row_bytes &&
	       row->sz->bytes <= TCP_LIMIT_MEM_MAX;
}

/* Whether any size has its own limit from streams walking buffers of the size (the xMem column). */
static int any_row_limit(const struct report *rp)
{
	for (int s = 0; rp->tcp_row_bytes && s < rp->cfg->nsizes; s++)
		if (row_limit(&rp->rows[s], 1) > 0)
			return 1;
	return 0;
}

/* The table of the limits measured around sizes, after the main one. */
static void print_row_limits(FILE *f, const struct report *rp)
{
	if (!rp->tcp_row_bytes)
		return;
	fprintf(f,
		"#\n# raw TCP around each size of %llu MiB and more, while the ranks waited "
		"(GB/s, a -> b and b -> a):\n"
		"#   wire: one 1 MiB buffer each end; memory: each end walks a buffer of the size, "
		"1 MiB a call\n"
		"# %10s %19s %19s %19s %19s\n",
		(unsigned long long)(rp->tcp_row_bytes >> 20), "size(B)", "wire before",
		"wire after", "memory before", "memory after");
	for (int s = 0; s < rp->cfg->nsizes; s++) {
		const struct report_row *row = &rp->rows[s];

		if (!report_row_tcp(rp, row))
			continue;
		fprintf(f, "  %10llu", (unsigned long long)row->sz->bytes);
		for (int mem = 0; mem < 2; mem++)
			for (int k = 0; k < 2; k++) {
				const struct tcp_limit *t = &row->tcp[k];
				const double *g = mem ? t->mem_gbps : t->gbps;

				if (t->ok && g[0] > 0)
					fprintf(f, "      %6.3f %6.3f", g[0], g[1]);
				else
					fprintf(f, " %19s", "not measured");
			}
		fprintf(f, "\n");
	}
}

/* How collc's ranks submitted and what p50 and pipe time in that mode. */
static void print_collc_mode(FILE *f, const struct bench_cfg *cfg, int depth)
{
	const char *coll = bench_coll_names[cfg->coll];
	int sr = cfg->coll == BENCH_SENDRECV;

	switch (cfg->collc_mode) {
	case CMODE_STREAM:
		fprintf(f,
			"# collc mode stream: %s%s%s on a non-blocking CUDA stream per rank%s;\n"
			"#   p50/p99 = enqueue + cudaStreamSynchronize; pipe = back to back on the "
			"stream, timed with CUDA events\n"
			"#   (%d receive slots)\n",
			sr ? "collc_recv_stream() and collc_send_stream()" : "collc_",
			sr ? "" : coll, sr ? "" : "_stream()",
			sr ? " (the sends on a second one, forked and joined)" : "", depth);
		break;
	case CMODE_GRAPH:
		fprintf(f,
			"# collc mode graph: collc_%s_stream() captured into CUDA graphs once per "
			"size; p50/p99 = a graph of one\n"
			"#   collective replayed to completion (cudaGraphLaunch + "
			"cudaStreamSynchronize); pipe = a graph of %d replayed\n"
			"#   back to back, timed with CUDA events\n",
			coll, depth);
		break;
	default:
		fprintf(f, "# collc mode host: %s%s%s then collc_wait() (requests)\n",
			sr ? "collc_recv() and collc_send()" : "collc_", sr ? "" : coll,
			sr ? "" : "()");
		break;
	}
}

static void print_header(FILE *f, const struct report *rp)
{
	const struct bench_cfg *cfg = rp->cfg;
	const char *pn = rp->peer_name;
	int depth = cfg->depth < cfg->iters ? cfg->depth : cfg->iters;
	int tcp_ok = rp->tcp && rp->tcp->ok;
	char root[24] = "", pipe_how[48] = "back to back on one stream";

	if (cfg->coll == BENCH_BROADCAST || cfg->coll == BENCH_REDUCE)
		snprintf(root, sizeof(root), ", root %d", cfg->root);
	if (cfg->collc_mode == CMODE_HOST)
		snprintf(pipe_how, sizeof(pipe_how), "with %d outstanding", cfg->depth);
	fprintf(f,
		"#\n# collc-bench: %s, %d ranks, %s, %s%s, %s backend, %d iterations (+%d warmup), "
		"depth %d\n",
		bench_coll_names[cfg->coll], cfg->nranks, bench_dtype_names[cfg->dtype],
		bench_coll_reduces(cfg->coll) ? "sum" : "copy", root, rp->backend, cfg->iters,
		cfg->warmup, depth);
	print_collc_mode(f, cfg, depth);
	fprintf(f,
		"# size: nccl-tests' size (allgather, reduce_scatter, alltoall: the whole nranks x "
		"count buffer); count: size / dtype size\n"
		"# p50/p99: end-to-end latency, call to completion seen by the rank, max over ranks "
		"per iteration\n"
		"# pipe: time per collective %s (total / iterations, max over "
		"ranks); algbw = size / pipe,\n"
		"#       busbw = algbw * %s; ops/s = 1 / pipe\n"
		"# busbw1: one collective on its own, busbw from p50 = size / p50 * the same factor\n",
		pipe_how,
		cfg->coll == BENCH_ALLREDUCE ? "2(n-1)/n"
		: cfg->coll == BENCH_ALLGATHER || cfg->coll == BENCH_REDUCE_SCATTER ||
				cfg->coll == BENCH_ALLTOALL
			? "(n-1)/n"
			: "1");
	if (cfg->nsockets > 1) {
		fprintf(f,
			"# ranks round-robin over %d collcd daemons (rank r on daemon r %% %d)\n",
			cfg->nsockets, cfg->nsockets);
		print_placement(f, cfg);
	}
	if (tcp_ok && rp->tcp_after && rp->tcp_after->ok)
		fprintf(f,
			"# raw TCP: %.3f GB/s first -> second daemon, %.3f GB/s back before the collc "
			"ranks ran, %.3f and %.3f after (%s, one 1 MiB buffer each end);\n"
			"#   the limit is the slower direction of the faster measurement, %.3f GB/s; "
			"xTCP = collc busbw / limit\n",
			rp->tcp->gbps[0], rp->tcp->gbps[1], rp->tcp_after->gbps[0],
			rp->tcp_after->gbps[1], rp->tcp->where, tcp_limit(rp));
	else if (tcp_ok)
		fprintf(f,
			"# raw TCP: %.3f GB/s first -> second daemon, %.3f GB/s back (%s, one 1 MiB "
			"buffer each end; not measured again after the collc ranks: %s);\n"
			"#   the limit is the slower one, %.3f GB/s; xTCP = collc busbw / limit\n",
			rp->tcp->gbps[0], rp->tcp->gbps[1], rp->tcp->where,
			rp->tcp_after ? rp->tcp_after->err : "not asked", tcp_limit(rp));
	else if (rp->tcp)
		fprintf(f, "# raw TCP between the first two daemons: not measured (%s)\n",
			rp->tcp->err);
	if (tcp_ok && rp->tcp_row_bytes)
		fprintf(f,
			"# sizes of %llu MiB and more: raw TCP measured again just before and after "
			"each while the ranks waited (table below);\n"
			"#   their xTCP is against the limit of those, by the same rule, and xMem "
			"against that of streams walking buffers of the size\n",
			(unsigned long long)(rp->tcp_row_bytes >> 20));
	if (!pn)
		return;
	fprintf(f,
		"# %s columns: the same quantities for %s; x p50, x p99, x pipe = %s time / "
		"collc time: > 1 means collc is faster\n",
		pn, pn, pn);
	if (rp->modes) {
		fprintf(f, "# %s at its best, per size and metric over its modes:", pn);
		for (int m = 0; m < NCCL_NUM_MODES; m++)
			if (has_mode(rp, m))
				fprintf(f, " %s", nccl_mode_names[m]);
		fprintf(f,
			"\n#   p50 (with its p99 and busbw1) from the mode with the lowest p50, pipe "
			"(with busbw) from the mode\n"
			"#   with the lowest pipe; \"by\" names the mode. plain: cudaMalloc'd buffers, "
			"launches on one stream;\n"
			"#   win: ncclMemAlloc'd buffers registered as symmetric windows "
			"(NCCL_WIN_COLL_SYMMETRIC);\n"
			"#   graph: launches replayed from CUDA graphs (p50: a graph of one collective; "
			"pipe: a graph of %d)\n",
			depth);
	}
	if (cfg->peer == PEER_NCCL && cfg->collc_mode == CMODE_HOST)
		fprintf(f,
			"# NOTE x pipe: collc's %d outstanding collectives may overlap (run side by "
			"side), while %s's serialize on one stream\n",
			depth, pn);
}

void report_table(FILE *f, const struct report *rp)
{
	const struct bench_cfg *cfg = rp->cfg;
	const char *pn = rp->peer_name;
	int nbad = 0, w = mode_width(rp), tcp_ok = rp->tcp && rp->tcp->ok;
	double tcp_lim = tcp_limit(rp);
	int mem_col = tcp_ok && any_row_limit(rp);

	print_header(f, rp);
	fprintf(f, "#\n# %10s %11s %9s %9s %9s %8s %8s %10s %8s", "size(B)", "count", "p50(us)",
		"p99(us)", "pipe(us)", "algbw", "busbw", "ops/s", "busbw1");
	if (tcp_ok)
		fprintf(f, " %5s", "xTCP");
	if (mem_col)
		fprintf(f, " %5s", "xMem");
	if (pn && rp->modes)
		fprintf(f, " | %4s %9s %-*s %9s %9s %-*s %8s %8s | %6s %6s %6s", pn, "p50(us)", w,
			"by", "p99(us)", "pipe(us)", w, "by", "busbw", "busbw1", "x p50", "x p99",
			"x pipe");
	else if (pn)
		fprintf(f, " | %4s %9s %9s %9s %8s %8s | %6s %6s %6s", pn, "p50(us)", "p99(us)",
			"pipe(us)", "busbw", "busbw1", "x p50", "x p99", "x pipe");
	fprintf(f, "\n");
	for (int s = 0; s < cfg->nsizes; s++) {
		const struct report_row *row = &rp->rows[s];

		fprintf(f, "  %10llu %11llu", (unsigned long long)row->sz->bytes,
			(unsigned long long)row->sz->elems);
		if (row->c.status == RES_OK) {
			struct derived d = derive(rp, row, &row->c);

			fprintf(f, " %9.2f %9.2f %9.2f %8.3f %8.3f %10.0f %8.3f", row->c.p50_us,
				row->c.p99_us, row->c.pipe_us, d.algbw, d.busbw, d.ops, d.busbw1);
			if (tcp_ok)
				fprintf(f, " %5.2f",
					d.busbw / (row_limit(row, 0) > 0 ? row_limit(row, 0)
									 : tcp_lim));
			if (mem_col && row_limit(row, 1) > 0)
				fprintf(f, " %5.2f", d.busbw / row_limit(row, 1));
			else if (mem_col)
				fprintf(f, " %5s", "-");
		} else {
			/* No numbers for a size that was wrong, failed or did not run. */
			fprintf(f,
				mem_col  ? " %-79s"
				: tcp_ok ? " %-73s"
					 : " %-67s",
				row->c.status == RES_WRONG   ? "   collc: WRONG RESULT"
				: row->c.status == RES_ERROR ? "   collc: ERROR"
							     : "   collc: not run");
			nbad++;
		}
		if (pn && row->p.status == RES_OK) {
			struct derived d = derive(rp, row, &row->p);

			if (rp->modes)
				fprintf(f, " | %4s %9.2f %-*s %9.2f %9.2f %-*s %8.3f %8.3f |", "",
					row->p.p50_us, w, nccl_mode_names[row->p50_mode],
					row->p.p99_us, row->p.pipe_us, w,
					nccl_mode_names[row->pipe_mode], d.busbw, d.busbw1);
			else
				fprintf(f, " | %4s %9.2f %9.2f %9.2f %8.3f %8.3f |", "",
					row->p.p50_us, row->p.p99_us, row->p.pipe_us, d.busbw,
					d.busbw1);
			if (row->c.status == RES_OK)
				fprintf(f, " %6.2f %6.2f %6.2f", row->p.p50_us / row->c.p50_us,
					row->p.p99_us / row->c.p99_us,
					row->p.pipe_us / row->c.pipe_us);
		} else if (pn) {
			fprintf(f, " | %4s %s", pn, status_word(row->p.status));
		}
		fprintf(f, "\n");
	}
	print_row_limits(f, rp);
	if (pn && rp->modes & (rp->modes - 1)) {
		/* More than one mode: each one's numbers, * on the one the table took. */
		fprintf(f,
			"#\n# %s by mode: p50 and pipe (us); * marks the figure the table took\n#"
			" %10s",
			pn, "size(B)");
		for (int m = 0; m < NCCL_NUM_MODES; m++)
			if (has_mode(rp, m))
				fprintf(f, " | %-9s %9s  %9s ", nccl_mode_names[m], "p50(us)",
					"pipe(us)");
		fprintf(f, "\n");
		for (int s = 0; s < cfg->nsizes; s++) {
			const struct report_row *row = &rp->rows[s];

			fprintf(f, "  %10llu", (unsigned long long)row->sz->bytes);
			for (int m = 0; m < NCCL_NUM_MODES; m++) {
				const struct size_stats *st = &row->pm[m];

				if (!has_mode(rp, m))
					continue;
				if (st->status == RES_OK)
					fprintf(f, " | %9s %9.2f%c %9.2f%c", "", st->p50_us,
						row->p50_mode == m ? '*' : ' ', st->pipe_us,
						row->pipe_mode == m ? '*' : ' ');
				else
					fprintf(f, " | %9s %-21s", "", status_word(st->status));
			}
			fprintf(f, "\n");
		}
	}
	if (nbad) {
		fprintf(f, "#\n# collc sizes without numbers:\n");
		print_failures(f, rp, -1);
	}
	if (pn && rp->modes) {
		for (int m = 0; m < NCCL_NUM_MODES; m++)
			if (has_mode(rp, m))
				print_failures(f, rp, m);
	} else if (pn) {
		print_failures(f, rp, NCCL_NUM_MODES);
	}
	fflush(f);
}

static void csv_stats(FILE *f, const struct report *rp, const struct report_row *row,
		      const struct size_stats *st)
{
	fprintf(f, ",%s", status_word(st->status));
	if (st->status == RES_OK) {
		struct derived d = derive(rp, row, st);

		fprintf(f, ",%.6g,%.6g,%.6g,%.6g,%.6g,%.6g", st->p50_us, st->p99_us, st->pipe_us,
			d.algbw, d.busbw, d.ops);
	} else {
		fprintf(f, ",,,,,,");
	}
}

/* The CSV names of the modes: nccl_<name>_status and so on. */
static const char *const csv_mode_names[NCCL_NUM_MODES] = { "plain", "win", "graph", "win_graph" };

int report_csv(const char *path, const struct report *rp)
{
	const struct bench_cfg *cfg = rp->cfg;
	FILE *f = fopen(path, "we");

	if (!f) {
		fprintf(stderr, "collc-bench: %s: %s\n", path, strerror(errno));
		return -1;
	}
	/* Columns 1-24 as they always were; later ones appended only, so old readers still work. */
	fprintf(f,
		"coll,nranks,dtype,backend,peer,bytes,count,status,p50_us,p99_us,pipe_us,"
		"algbw_GBps,busbw_GBps,ops_per_s,peer_status,peer_p50_us,peer_p99_us,peer_pipe_us,"
		"peer_algbw_GBps,peer_busbw_GBps,peer_ops_per_s,ratio_p50,ratio_p99,ratio_pipe,"
		"busbw1_GBps,peer_busbw1_GBps,peer_p50_mode,peer_pipe_mode");
	for (int m = 0; m < NCCL_NUM_MODES; m++)
		fprintf(f, ",nccl_%s_status,nccl_%s_p50_us,nccl_%s_p99_us,nccl_%s_pipe_us",
			csv_mode_names[m], csv_mode_names[m], csv_mode_names[m], csv_mode_names[m]);
	fprintf(f, ",collc_mode\n");
	for (int s = 0; s < cfg->nsizes; s++) {
		const struct report_row *row = &rp->rows[s];
		int cok = row->c.status == RES_OK, pok = rp->peer_name && row->p.status == RES_OK;

		fprintf(f, "%s,%d,%s,%s,%s,%llu,%llu", bench_coll_names[cfg->coll], cfg->nranks,
			bench_dtype_names[cfg->dtype], rp->backend,
			rp->peer_name ? rp->peer_name : "", (unsigned long long)row->sz->bytes,
			(unsigned long long)row->sz->elems);
		csv_stats(f, rp, row, &row->c);
		if (rp->peer_name) {
			csv_stats(f, rp, row, &row->p);
		} else {
			fprintf(f, ",,,,,,,");
		}
		if (cok && pok)
			fprintf(f, ",%.4g,%.4g,%.4g", row->p.p50_us / row->c.p50_us,
				row->p.p99_us / row->c.p99_us, row->p.pipe_us / row->c.pipe_us);
		else
			fprintf(f, ",,,");
		if (cok)
			fprintf(f, ",%.6g", derive(rp, row, &row->c).busbw1);
		else
			fprintf(f, ",");
		if (pok)
			fprintf(f, ",%.6g", derive(rp, row, &row->p).busbw1);
		else
			fprintf(f, ",");
		fprintf(f, ",%s,%s",
			pok && row->p50_mode >= 0 ? nccl_mode_names[row->p50_mode] : "",
			pok && row->pipe_mode >= 0 ? nccl_mode_names[row->pipe_mode] : "");
		for (int m = 0; m < NCCL_NUM_MODES; m++) {
			const struct size_stats *st = &row->pm[m];

			if (!has_mode(rp, m))
				fprintf(f, ",,,,");
			else if (st->status == RES_OK)
				fprintf(f, ",ok,%.6g,%.6g,%.6g", st->p50_us, st->p99_us,
					st->pipe_us);
			else
				fprintf(f, ",%s,,,", status_word(st->status));
		}
		fprintf(f, ",%s\n", collc_mode_names[cfg->collc_mode]);
	}
	if (fclose(f) != 0) {
		fprintf(stderr, "collc-bench: writing %s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
}

/* From the CSV: the peer's name and whether collc and the peer have any numbers. */
static int csv_scan(const char *csv, char *peer, size_t len, int *have_collc, int *have_peer)
{
	FILE *f = fopen(csv, "re");
	char line[2048];
	int first = 1;

	*have_collc = *have_peer = 0;
	peer[0] = 0;
	if (!f) {
		fprintf(stderr, "collc-bench: %s: %s\n", csv, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		char *field[64], *p = line;
		int n = 0;

		if (first) {
			first = 0;
			if (strncmp(line, "coll,nranks,", 12) != 0) {
				fprintf(stderr, "collc-bench: %s is not a collc-bench CSV\n", csv);
				fclose(f);
				return -1;
			}
			continue;
		}
		line[strcspn(line, "\r\n")] = 0;
		while (n < 64) {
			field[n++] = p;
			p = strchr(p, ',');
			if (!p)
				break;
			*p++ = 0;
		}
		if (n < 24)
			continue;
		if (field[4][0])
			snprintf(peer, len, "%s", field[4]);
		*have_collc |= strcmp(field[7], "ok") == 0;
		*have_peer |= strcmp(field[14], "ok") == 0;
	}
	fclose(f);
	return 0;
}

/* %s: the latency curves, then the bandwidth curves (one "plot" each). */
static const char gnuplot_script[] = "set datafile separator ','\n"
				     "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
				     "  set terminal pngcairo size 1400,560 font 'sans,10'\n"
				     "} else {\n"
				     "  set terminal png size 1400,560\n"
				     "}\n"
				     "set output png\n"
				     "set key autotitle columnheader\n"
				     "set multiplot layout 1,2 title ttl\n"
				     "set logscale x 2\n"
				     "set logscale y 10\n"
				     "set xtics 16\n"
				     "set grid\n"
				     "set format x '%%.0b%%B'\n"
				     "set format y '%%g'\n"
				     "set xlabel 'size (bytes, nccl-tests definition)'\n"
				     "set key top left\n"
				     "set ylabel 'end-to-end latency (us)'\n"
				     "set title 'latency: p50 (solid), p99 (dashed)'\n"
				     "plot %s\n"
				     "set ylabel 'busbw (GB/s)'\n"
				     "set title 'bus bandwidth (from pipelined time)'\n"
				     "plot %s\n"
				     "unset multiplot\n";

/* Columns of the CSV: 6 bytes, 9/10 collc p50/p99, 13 collc busbw, 16/17/20 the peer's. */
static const char gp_collc_lat[] =
	"csv using 6:9 with linespoints lw 2 pt 7 ps 0.6 lc rgb '#1f77b4' title 'collc p50', "
	"csv using 6:10 with linespoints lw 1 dt 2 pt 7 ps 0.4 lc rgb '#1f77b4' title 'collc p99'";
static const char gp_collc_bw[] =
	"csv using 6:13 with linespoints lw 2 pt 7 ps 0.6 lc rgb '#1f77b4' title 'collc'";
static const char gp_peer_lat[] =
	"csv using 6:16 with linespoints lw 2 pt 5 ps 0.6 lc rgb '#d62728' title peer.' p50', "
	"csv using 6:17 with linespoints lw 1 dt 2 pt 5 ps 0.4 lc rgb '#d62728' title peer.' p99'";
static const char gp_peer_bw[] =
	"csv using 6:20 with linespoints lw 2 pt 5 ps 0.6 lc rgb '#d62728' title peer";

static const char python_script[] =
	"import csv, sys\n"
	"import matplotlib\n"
	"matplotlib.use('Agg')\n"
	"import matplotlib.pyplot as plt\n"
	"src, png, ttl = sys.argv[1:4]\n"
	"rows = list(csv.DictReader(open(src)))\n"
	"fig, (a, b) = plt.subplots(1, 2, figsize=(14, 5.6))\n"
	"def series(status, col):\n"
	"    pts = [(float(r['bytes']), float(r[col])) for r in rows if r[status] == 'ok' and r[col]]\n"
	"    return [p[0] for p in pts], [p[1] for p in pts]\n"
	"peer = next((r['peer'] for r in rows if r['peer']), '')\n"
	"for who, pre, st, c in (('collc', '', 'status', 'tab:blue'), (peer, 'peer_', 'peer_status', 'tab:red')):\n"
	"    if not who or not any(r[st] == 'ok' for r in rows):\n"
	"        continue\n"
	"    a.plot(*series(st, pre + 'p50_us'), 'o-', color=c, label=who + ' p50')\n"
	"    a.plot(*series(st, pre + 'p99_us'), 'o--', color=c, ms=3, label=who + ' p99')\n"
	"    b.plot(*series(st, pre + 'busbw_GBps'), 'o-', color=c, label=who)\n"
	"for ax, yl, t in ((a, 'end-to-end latency (us)', 'latency: p50 (solid), p99 (dashed)'),\n"
	"                  (b, 'busbw (GB/s)', 'bus bandwidth (from pipelined time)')):\n"
	"    ax.set_xscale('log', base=2); ax.set_yscale('log'); ax.grid(True, which='both', alpha=0.3)\n"
	"    ax.set_xlabel('size (bytes, nccl-tests definition)'); ax.set_ylabel(yl); ax.set_title(t)\n"
	"    ax.legend(loc='upper left')\n"
	"fig.suptitle(ttl)\n"
	"fig.tight_layout()\n"
	"fig.savefig(png, dpi=100)\n";

/* Runs argv with `input` on its stdin; returns its exit status, 127 when it cannot start. */
static int run_with_input(char *const argv[], const char *input)
{
	int pfd[2], st;
	pid_t pid;
	size_t len = input ? strlen(input) : 0, off = 0;

	if (pipe(pfd) < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		dup2(pfd[0], 0);
		close(pfd[0]);
		close(pfd[1]);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(pfd[0]);
	while (off < len) {
		ssize_t w = write(pfd[1], input + off, len - off);

		if (w <= 0)
			break;
		off += (size_t)w;
	}
	close(pfd[1]);
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static char *quote(const char *s)
{
	/* A gnuplot single-quoted string: '' stands for one quote. */
	size_t n = strlen(s);
	char *q = malloc(2 * n + 3), *p = q;

	if (!q)
		return NULL;
	*p++ = '\'';
	for (; *s; s++) {
		if (*s == '\'')
			*p++ = '\'';
		*p++ = *s;
	}
	*p++ = '\'';
	*p = 0;
	return q;
}

int report_plot(const char *csv, const char *png, const char *title)
{
	char peer[32], *script = NULL, *vars = NULL, *lat = NULL, *bw = NULL, *qc, *qp, *qt, *qpeer;
	int have_collc, have_peer, r;
	char *gp_argv[] = { "gnuplot",
			    NULL }; /* the script on stdin ("-" breaks if-blocks in 5.4) */
	char *py_argv[] = { "python3", "-", (char *)csv, (char *)png, (char *)title, NULL };

	if (csv_scan(csv, peer, sizeof(peer), &have_collc, &have_peer) < 0)
		return -1;
	if (!have_collc && !have_peer) {
		fprintf(stderr, "collc-bench: no numbers in %s: no plot\n", csv);
		return -1;
	}
	qc = quote(csv);
	qp = quote(png);
	qt = quote(title);
	qpeer = quote(peer);
	if (qc && qp && qt && qpeer &&
	    asprintf(&lat, "%s%s%s", have_collc ? gp_collc_lat : "",
		     have_collc && have_peer ? ", " : "", have_peer ? gp_peer_lat : "") > 0 &&
	    asprintf(&bw, "%s%s%s", have_collc ? gp_collc_bw : "",
		     have_collc && have_peer ? ", " : "", have_peer ? gp_peer_bw : "") > 0 &&
	    asprintf(&vars, gnuplot_script, lat, bw) > 0 &&
	    asprintf(&script, "csv=%s; png=%s; ttl=%s; peer=%s\n%s", qc, qp, qt, qpeer, vars) > 0) {
		r = run_with_input(gp_argv, script);
	} else {
		r = -1;
	}
	free(qc);
	free(qp);
	free(qt);
	free(qpeer);
	free(vars);
	free(lat);
	free(bw);
	free(script);
	if (r == 0 && access(png, R_OK) == 0)
		return 0;
	if (r != 127) {
		fprintf(stderr, "collc-bench: gnuplot failed (status %d) plotting %s\n", r, csv);
		return -1;
	}
	r = run_with_input(py_argv, python_script);
	if (r == 0)
		return 0;
	fprintf(stderr,
		"collc-bench: no plot: neither gnuplot nor python3 with matplotlib worked "
		"(Debian: gnuplot-nox or python3-matplotlib). The CSV %s has everything; plot it "
		"elsewhere with: collc-bench --from-csv %s --plot %s\n",
		csv, csv, png);
	return -1;
}
