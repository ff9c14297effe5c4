/* SPDX-License-Identifier: MIT */
/*
 * Some CUDA calls never return while a grid is resident in the process
 * (docs/design.md §5: cudaIpcOpenMemHandle, cudaFree, ...). Those run only in a
 * quiesce window (window()): the pollers stop forwarding at a collective
 * boundary that is the same on every GPU, the grids drain and exit, the calls
 * run, the grids are launched again where they stopped. The calls allowed
 * while resident (VMM, cudaHostAlloc, async copies on other streams, stream
 * queries) run at any time.
 *
 * The service thread (cuda_svc_main) opens the windows, wakes the scheduler
 * for the grids, watches for sticky CUDA errors and runs client memory
 * requests (memory.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "common/atomics.h"
#include "common/futex.h"
#include "daemon/cuda/internal.h"
#include "daemon/log.h"

#define WINDOW_TIMEOUT_NS (30ull * 1000000000ull)
#define CLOSE_BATCH_NS    (10ull * 1000000ull) /* deferred IPC closes wait for company */
#define SVC_SLOW_MS       2                    /* slow poll with collectives in flight */
#define SVC_IDLE_MS       250 /* slow poll with none: sticky errors and dead grids are seen within it */
#define SVC_POLL_US       4 /* the service thread's poll period while collectives complete */

uint32_t svc_stop;
int svc_efd = -1;
uint32_t svc_slow; /* the service thread sleeps in a slow poll (2 ms, or long once idle) */
static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER; /* client memory (memory.c) */

/* Grids */

int cuda_gpu_launch(struct gpu *g)
{
	struct cuda_grid_args a = { 0 };
	int e;

	for (uint32_t l = 0; l < nlanes; l++) {
		void *p;

		if (cudaHostGetDevicePointer(&p, g->fifo[l], 0) != cudaSuccess)
			return -EIO;
		a.fifo[l] = p;
		if (cudaHostGetDevicePointer(&p, g->ll[l], 0) != cudaSuccess)
			return -EIO;
		a.ll[l] = p;
		g->hctrl->lane[l].gate = CUDA_GATE_OPEN;
	}
	{
		void *p;

		if (cudaHostGetDevicePointer(&p, g->hctrl, 0) != cudaSuccess)
			return -EIO;
		a.hctrl = p;
	}
	/* NULL (config cuda_breadcrumbs 0): the channel blocks leave none. */
	if (g->crumbs && cudaHostGetDevicePointer((void **)&a.crumbs, g->crumbs, 0) != cudaSuccess)
		return -EIO;
	a.ds = g->ds;
	a.nlanes = nlanes;
	a.nchannels = nchan;
	a.trace = trace;
	a.idle_sleep_ns = idle_sleep_ns;
	a.epoch = ++g->epoch;
	fence_seq_cst();
	cudaSetDevice(g->ord);
	e = cuda_grid_launch(&a, g->grid_stream);
	if (e != cudaSuccess) {
		log_err("gpu%d: grid launch: %s", g->ord, cuda_err(e));
		return -EIO;
	}
	store_release(&g->running, 1u);
	return 0;
}

/*
 * What every channel block was doing when the grids faulted or stopped
 * answering: its breadcrumb (grid.h struct cuda_crumb) and its lane's
 * progress, all in mapped host memory, which a plain load still reads when
 * no CUDA call answers any more. Blocks that ended their last item at or
 * before their channel's work_consumed and were not abandoned are summed up
 * per lane; the others get a line each.
 */
void cuda_crumbs_log(void)
{
	static const char *const states[] = { "none", "running", "ended", "abandoned" };
	struct timespec ts;

	/* Wall-clock time, to set against the MPS server's log and the kernel's Xid lines. */
	clock_gettime(CLOCK_REALTIME, &ts);
	if (!breadcrumbs) {
		log_err("the grids left no breadcrumbs (cuda_breadcrumbs 0)");
		return;
	}
	log_err("the grids' breadcrumbs at %lld.%06ld (unix time)", (long long)ts.tv_sec,
		ts.tv_nsec / 1000);
	for (uint32_t g = 0; gpus && g < ngpus; g++) {
		if (!gpus[g].crumbs)
			continue;
		for (uint32_t l = 0; l < nlanes; l++) {
			const struct collc_fifo_ctrl *ctl = &gpus[g].fifo[l]->ctrl;
			uint32_t quiet = 0;

			log_err("gpu%u.%u at the fault: items published %llu", g, l,
				(unsigned long long)load_relaxed(&ctl->published));
			for (uint32_t c = 0; c < nchan; c++) {
				const struct cuda_crumb *cr = &gpus[g].crumbs->blk[l][c];
				const uint64_t pos = load_relaxed(&cr->pos);
				const uint64_t wc = load_relaxed(&ctl->work_consumed[c].value);
				const uint32_t st = load_relaxed(&cr->state),
					       w = load_relaxed(&cr->what);

				if (st == CUDA_CRUMB_ENDED && pos <= wc) {
					quiet++;
					continue;
				}
				log_err("gpu%u.%u channel %u: item at %lld %s (communicator %llu, "
					"collective %llu, kind %u algo %u proto %u, %u channels); "
					"work_consumed %llu, abandoned %llu",
					g, l, c, (long long)pos - 1, states[st < 4 ? st : 0],
					(unsigned long long)load_relaxed(&cr->comm_id),
					(unsigned long long)load_relaxed(&cr->coll_id), w & 0xff,
					(w >> 8) & 0xff, (w >> 16) & 0xff, w >> 24,
					(unsigned long long)wc,
					(unsigned long long)load_relaxed(
						&ctl->work_consumed[c].aborted));
			}
			if (quiet)
				log_err("gpu%u.%u: %u more channels idle, their last item ended", g,
					l, quiet);
		}
	}
}

/* 1 running, 0 exited; a sticky error ends collcd. */
static int grid_running(struct gpu *g)
{
	cudaError_t e = cudaStreamQuery(g->grid_stream);

	if (e == cudaErrorNotReady)
		return 1;
	if (e != cudaSuccess)
		cuda_fatal("sticky error on the grid's stream", e);
	return 0;
}

int cuda_wait_grids_exit(uint64_t timeout_ns)
{
	uint64_t t0 = now_ns();

	for (uint32_t g = 0; g < ngpus; g++) {
		if (!load_acquire(&gpus[g].running))
			continue;
		while (grid_running(&gpus[g])) {
			if (now_ns() - t0 > timeout_ns)
				return -ETIMEDOUT;
			usleep(20);
		}
		store_release(&gpus[g].running, 0u);
	}
	return 0;
}

/*
 * A quiesce window: every grid stops at one collective boundary, calls()
 * runs with no grid resident, the grids start again where they stopped.
 * Service thread only.
 */
static void window(void (*calls)(void))
{
	uint64_t t0 = now_ns(), c = 0;

	/* 1. Hold: the pollers stop forwarding and say where they are. */
	for (uint32_t g = 0; g < ngpus; g++)
		for (uint32_t l = 0; l < nlanes; l++) {
			struct cuda_hlane *h = &gpus[g].hctrl->lane[l];

			store_relaxed(&h->ack_gate, CUDA_ACK_NONE);
			/* Q1: the reset ack before the hold; pairs with the poller's read of gate. */
			store_release(&h->gate, CUDA_GATE_HOLD);
		}
	for (uint32_t g = 0; g < ngpus; g++)
		for (uint32_t l = 0; l < nlanes; l++) {
			struct cuda_hlane *h = &gpus[g].hctrl->lane[l];

			/* Q2: pairs with the poller's fence before ack_gate: ack_pos is valid. */
			while (load_acquire(&h->ack_gate) != CUDA_GATE_HOLD) {
				if (!grid_running(&gpus[g]))
					cuda_fatal("grid exited during a quiesce window", 0);
				if (now_ns() - t0 > WINDOW_TIMEOUT_NS)
					cuda_fatal("a poller did not answer the hold", 0);
				cpu_relax();
			}
			if (load_relaxed(&h->ack_coll) > c)
				c = load_relaxed(&h->ack_coll);
		}
	/* 2. Every item of collective c and older is in every FIFO once c was kicked. */
	while (load_acquire(&kicked_coll) < c) {
		if (now_ns() - t0 > WINDOW_TIMEOUT_NS)
			cuda_fatal("the scheduler did not finish writing a collective", 0);
		usleep(1);
	}
	/* 3. The boundary: on each lane, everything up to collective c. */
	for (uint32_t g = 0; g < ngpus; g++)
		for (uint32_t l = 0; l < nlanes; l++) {
			struct cuda_hlane *h = &gpus[g].hctrl->lane[l];
			struct collc_work_fifo *f = gpus[g].fifo[l];
			uint64_t b = load_relaxed(&h->ack_pos);

			for (;;) {
				struct collc_work_item *it = &f->items[b & (COLLC_FIFO_DEPTH - 1)];

				/* W1 pairs: a whole item once its seq is seen. */
				if (load_acquire(&it->seq) != b + 1 ||
				    it->kind != COLLC_WORK_COLL || it->coll_id > c)
					break;
				b++;
			}
			store_release(&h->gate, b);
		}
	/* 4. The grids finish everything before the boundary and exit. */
	if (cuda_wait_grids_exit(WINDOW_TIMEOUT_NS) < 0)
		cuda_fatal("grids did not drain for a quiesce window", 0);
	calls();
	for (uint32_t g = 0; g < ngpus; g++)
		if (cuda_gpu_launch(&gpus[g]) < 0)
			cuda_fatal("relaunch after a quiesce window", cudaGetLastError());
	log_info("quiesce window: %.3f ms", (double)(now_ns() - t0) / 1e6);
}

/*
 * The grids cannot wake the scheduler; this thread does it for them (the CPU
 * executor's threads call notify() themselves): when any channel's
 * work_consumed moved, notify(). Returns 1 when something moved.
 */
static int notify_progress(uint64_t *ret_consumed)
{
	static uint64_t last;
	uint64_t sum = 0;

	for (uint32_t d = 0; d < ngpus * nlanes; d++) {
		struct collc_work_fifo *f = gpus[d / nlanes].fifo[d % nlanes];

		for (uint32_t c = 0; c < nchan; c++)
			sum += load_relaxed(&f->ctrl.work_consumed[c].value);
	}
	*ret_consumed = sum;
	if (sum == last)
		return 0;
	last = sum;
	notify();
	return 1;
}

/*
 * The slow poll's period: SVC_SLOW_MS while work is in flight (a long
 * collective's end still reaches a sleeping scheduler within it), SVC_IDLE_MS
 * when every item written has been consumed by every channel, shortened to
 * the next deferred IPC close. Called after K2's fence.
 */
static int slow_poll_ms(uint64_t consumed)
{
	uint64_t now = now_ns(), ms = SVC_IDLE_MS;
	uint64_t since = cuda_hreg_due();

	if (consumed < load_relaxed(&kicked_items) * nchan)
		return SVC_SLOW_MS;
	pthread_mutex_lock(&mem_lock);
	for (struct ipc_imp *imp = imps; imp; imp = imp->next)
		if (imp->closing) {
			uint64_t due = imp->close_since + CLOSE_BATCH_NS;

			ms = collc_min_u64(ms, due > now ? (due - now) / 1000000 + 1 : 1);
		}
	pthread_mutex_unlock(&mem_lock);
	if (since) {
		uint64_t due = since + CLOSE_BATCH_NS;

		ms = collc_min_u64(ms, due > now ? (due - now) / 1000000 + 1 : 1);
	}
	return (int)ms;
}

void cuda_svc_wake(void)
{
	(void)eventfd_write(svc_efd, 1);
}

void *cuda_svc_main(void *arg)
{
	struct pollfd *pfd = NULL;
	uint64_t last_progress = 0, consumed = 0;
	size_t cap = 0;

	pthread_setname_np(pthread_self(), "collc-cuda");
	/*
	 * The scheduler spins only sched_spin_us after its last event; a longer
	 * collective's completion reaches it through this thread's polls, so
	 * their period is part of the collective's latency. The default timer
	 * slack (50 us) stretched each 20 us poll to about 70 us: a 32 MiB
	 * all-reduce took 240 us end to end against 139 us pipelined.
	 */
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	while (!load_relaxed(&svc_stop)) {
		size_t n = 1;
		int need_window = 0;
		uint64_t now;

		pthread_mutex_lock(&mem_lock);
		for (struct creg *cr = cregs; cr; cr = cr->next)
			n += cr->sock >= 0;
		if (n > cap) {
			struct pollfd *t = realloc(pfd, n * 2 * sizeof(*t));

			if (t) {
				pfd = t;
				cap = n * 2;
			}
		}
		n = 0;
		if (cap) {
			pfd[n++] = (struct pollfd){ .fd = svc_efd, .events = POLLIN };
			for (struct creg *cr = cregs; cr && n < cap; cr = cr->next)
				if (cr->sock >= 0)
					pfd[n++] =
						(struct pollfd){ .fd = cr->sock, .events = POLLIN };
		}
		pthread_mutex_unlock(&mem_lock);
		/*
		 * SVC_POLL_US polls while collectives complete; once quiet for 10 ms,
		 * slow polls. K2: svc_slow, full fence, then kicked_items (in
		 * slow_poll_ms()); pairs with K1 in cuda_kick().
		 */
		if (poll(pfd, n, 0) == 0 && now_ns() - last_progress < 10000000ull)
			usleep(SVC_POLL_US);
		else if (store_relaxed(&svc_slow, 1u), fence_seq_cst(),
			 poll(pfd, n, slow_poll_ms(consumed)) > 0) {
			if (pfd[0].revents & POLLIN)
				(void)eventfd_read(svc_efd, &(eventfd_t){ 0 });
			pthread_mutex_lock(&mem_lock);
			for (size_t i = 1; i < n; i++) {
				if (!(pfd[i].revents & (POLLHUP | POLLERR | POLLIN)))
					continue;
				for (struct creg **pc = &cregs; *pc; pc = &(*pc)->next)
					if ((*pc)->sock == pfd[i].fd) {
						struct creg *cr = *pc;

						/* The client let go; the scheduler may still hold it. */
						close(cr->sock);
						cr->sock = -1;
						if (cr->sched_gone) {
							*pc = cr->next;
							cuda_creg_release(cr);
						}
						break;
					}
			}
			pthread_mutex_unlock(&mem_lock);
		}
		store_relaxed(&svc_slow, 0u);
		if (notify_progress(&consumed))
			last_progress = now_ns();
		/* A grid that died or exited on its own ends collcd (§7). */
		for (uint32_t g = 0; g < ngpus; g++)
			if (load_acquire(&gpus[g].running) && !grid_running(&gpus[g]))
				cuda_fatal("grid exited unexpectedly", cudaGetLastError());
		now = now_ns();
		pthread_mutex_lock(&mem_lock);
		cuda_mem_service();
		if (imp_reqs)
			need_window = 1;
		for (struct ipc_imp *imp = imps; imp && !need_window; imp = imp->next)
			if (imp->closing && (imp->refs || now - imp->close_since > CLOSE_BATCH_NS))
				need_window = 1;
		/* Registrations of departed clients' done words end in batches too. */
		{
			uint64_t since = cuda_hreg_due();

			if (since && now - since > CLOSE_BATCH_NS)
				need_window = 1;
		}
		for (struct ipc_imp *imp = imps; imp; imp = imp->next)
			if (imp->refs)
				imp->closing = 0; /* registered again before it closed */
		if (need_window) {
			window(cuda_window_calls);
			cuda_mem_finish_imports();
		}
		pthread_mutex_unlock(&mem_lock);
	}
	free(pfd);
	return NULL;
}
