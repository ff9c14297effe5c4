/* SPDX-License-Identifier: MIT */
/*
 * The CUDA executor's host side: every GPU of the node keeps one persistent
 * grid (persist_kernel.cu) resident; this file finds the GPUs, enables peer
 * access, allocates the work FIFOs (mapped pinned host memory) and the
 * connections (VMM memory in the receiver's GPU), places ranks on GPUs and
 * sets up, aborts and tears down communicators. The rest of the host side:
 * driver.c (driver entry points, VMM memory), window.c (launching and
 * stopping the grids, the quiesce window, the service thread that watches
 * for sticky CUDA errors), memory.c (importing and allocating client memory),
 * mps.c (the MPS check), xconn.c and xlink.c (the rings of communicators
 * spanning daemons that cross to another daemon, in mapped host memory, and
 * the proxy's view of them); internal.h is what they share.
 *
 * A GPU serves `nlanes` FIFOs (executor devices gpu * nlanes + lane), so
 * that ranks of one communicator can share a GPU: the k-th rank on a GPU
 * runs on lane k.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "common/atomics.h"
#include "common/futex.h"
#include "daemon/cuda/grid.h"
#include "daemon/cuda/internal.h"
#include "daemon/cuda/xlink.h"
#include "daemon/exec.h"
#include "daemon/cuda/cuda.h"
#include "daemon/log.h"
#include "proto/shm.h"
#include "proto/wire.h"

/*
 * Abort words of the communicators, in mapped host memory: the host sets a
 * communicator's word when it is revoked (cuda_comm_abort), the grid's
 * waiters read it (persist_kernel.cu check_abort). Taken at setup, given
 * back at teardown; never freed while a grid is resident.
 */
#define CUDA_REVOKE_WORDS 16384u

struct gpu *gpus;
uint32_t ngpus, nlanes, nchan;
uint32_t trace;           /* config cuda_trace */
uint32_t breadcrumbs = 1; /* config cuda_breadcrumbs */
/*
 * Config cuda_idle_sleep_ns: how long an idle channel block sleeps between
 * polls of its lane (after 4096 polls without an item); 0 spins without
 * sleeping, which takes issue slots from client kernels on the same SMs.
 */
uint32_t idle_sleep_ns = 200;
int require_mps;
void (*notify)(void); /* wakes the scheduler (exec_init) */
static struct lane_track *track;
uint64_t kicked_coll; /* newest collective whose items are all written */
uint64_t kicked_items;

static pthread_t svc_thread;
static int svc_started;
static uint32_t *revoke_words;    /* CUDA_REVOKE_WORDS, mapped host memory */
static uint64_t revoke_words_dev; /* their device address */
static uint8_t *revoke_used;
static uint32_t revoke_hint;
static pthread_mutex_t revoke_lock = PTHREAD_MUTEX_INITIALIZER;

static uint32_t gpu_of(uint32_t dev)
{
	return dev / nlanes;
}

static uint32_t lane_of(uint32_t dev)
{
	return dev % nlanes;
}

int cuda_gpu_by_uuid(const uint8_t *uuid, int32_t ordinal)
{
	static const uint8_t zero[16];

	if (memcmp(uuid, zero, 16) == 0)
		return ordinal >= 0 && (uint32_t)ordinal < ngpus ? ordinal : -1;
	for (uint32_t g = 0; g < ngpus; g++)
		if (memcmp(gpus[g].uuid, uuid, 16) == 0)
			return (int)g;
	return -1;
}

/* Backend table */

static struct collc_work_fifo *cuda_fifo(uint32_t dev)
{
	return gpus[gpu_of(dev)].fifo[lane_of(dev)];
}

/*
 * L1: item pos of dev's FIFO, whose seq is published, into the poller's copy
 * (grid.h struct cuda_ll_fifo): 8-byte stores, each word carrying the flag;
 * pairs with L1' in the poller. The host rewrites a slot only after every
 * channel consumed its last item, as for the FIFO itself.
 */
static void ll_publish(uint32_t dev, uint64_t pos)
{
	const uint32_t *src =
		(const uint32_t *)&cuda_fifo(dev)->items[pos & (COLLC_FIFO_DEPTH - 1)];
	struct cuda_ll_item *d =
		&gpus[gpu_of(dev)].ll[lane_of(dev)]->items[pos & (COLLC_FIFO_DEPTH - 1)];
	const uint64_t flag = (uint64_t)(uint32_t)(pos + 1) << 32;

	for (uint32_t j = 0; j < CUDA_LL_WORDS; j++)
		store_relaxed(&d->w[j], flag | src[j]);
}

static void cuda_kick(uint32_t dev)
{
	struct collc_work_fifo *f = cuda_fifo(dev);
	struct lane_track *t = &track[dev];
	uint64_t last = 0, items = 0;

	/* The scheduler calls us after every item of a collective is written, on its thread. */
	for (;;) {
		struct collc_work_item *it = &f->items[t->tail & (COLLC_FIFO_DEPTH - 1)];

		if (load_acquire(&it->seq) != t->tail + 1)
			break;
		ll_publish(dev, t->tail);
		last = it->coll_id;
		t->tail++;
		items++;
	}
	if (last > load_relaxed(&kicked_coll))
		store_release(&kicked_coll, last);
	store_relaxed(&kicked_items, load_relaxed(&kicked_items) + items);
	/*
	 * K1: kicked_items, then svc_slow, with a full fence between; pairs with
	 * K2 in cuda_svc_main(). Either this sees svc_slow set and wakes the
	 * service thread, or the service thread sees the new items and keeps its
	 * short poll: it never sleeps its idle period with work in flight.
	 */
	fence_seq_cst();
	if (load_relaxed(&svc_slow))
		cuda_svc_wake();
}

/* Gated items (exec.h): the decision words live in the GPU's device state. */
static uint64_t cuda_gate_decision(uint32_t dev, uint64_t pos)
{
	struct cuda_dstate *ds = gpus[gpu_of(dev)].ds;

	return (uint64_t)(uintptr_t)&ds->gate_dec[lane_of(dev)][pos & (COLLC_FIFO_DEPTH - 1)];
}

static void cuda_gate_cancel(uint32_t dev, uint64_t upto)
{
	struct cuda_hlane *h = &gpus[gpu_of(dev)].hctrl->lane[lane_of(dev)];

	/* Only ever raised; the poller reads it each pass. */
	if (upto > load_relaxed(&h->cancel))
		store_release(&h->cancel, upto);
}

static uint32_t cuda_gate_outcome(uint32_t dev, uint64_t pos)
{
	/* Pairs with GD in the poller (persist_kernel.cu): the outcome before the item goes on. */
	return collc_gate_decided(
		load_acquire(&gpus[gpu_of(dev)]
				      .hctrl->outcome[lane_of(dev)][pos & (COLLC_FIFO_DEPTH - 1)]),
		pos + 1);
}

static int cuda_place(uint32_t nranks, const struct collc_msg_comm_init *const *joins,
		      uint32_t *ret_devs)
{
	uint32_t on_gpu[COLLC_MAX_RANKS] = { 0 };

	for (uint32_t r = 0; r < nranks; r++) {
		int g;

		if (joins[r]->device < 0)
			return -ENODEV;
		g = cuda_gpu_by_uuid(joins[r]->device_uuid, joins[r]->device);
		if (g < 0)
			return -EINVAL;
		if (on_gpu[g] >= nlanes) {
			log_warn("communicator has more than %u ranks on gpu%d (config cuda_lanes)",
				 nlanes, g);
			return -EINVAL;
		}
		ret_devs[r] = (uint32_t)g * nlanes + on_gpu[g]++;
	}
	for (uint32_t r = 0; r < nranks; r++)
		for (uint32_t s = 0; s < nranks; s++) {
			uint32_t a = gpu_of(ret_devs[r]), b = gpu_of(ret_devs[s]);

			if (a != b && !gpus[a].peer_ok[b])
				return -EINVAL;
		}
	return 0;
}

/*
 * One rank's region: its struct cuda_rank, then per channel its struct
 * cuda_chan, its ring connection buffers and its one-shot LL inbox.
 */
/* A rank's region: its channel states, buffers, one-shot LL inboxes and (group rings) scratch. */
static size_t comm_region_bytes(uint32_t nranks, uint32_t group)
{
	return 4096 + (size_t)nchan * (CUDA_CHAN_STRIDE + CUDA_BUFS_STRIDE +
				       CUDA_OLL_STRIDE(nranks) + (group ? CUDA_SIMPLE_SLOT : 0));
}

static uint64_t chan_addr(const struct vmm *v, uint32_t c)
{
	return (uint64_t)v->ptr + 4096 + (uint64_t)c * CUDA_CHAN_STRIDE;
}

static uint64_t bufs_addr(const struct vmm *v, uint32_t c)
{
	return (uint64_t)v->ptr + 4096 + (uint64_t)nchan * CUDA_CHAN_STRIDE +
	       (uint64_t)c * CUDA_BUFS_STRIDE;
}

static uint64_t oll_addr(const struct vmm *v, uint32_t c, uint32_t nranks)
{
	return (uint64_t)v->ptr + 4096 + (uint64_t)nchan * (CUDA_CHAN_STRIDE + CUDA_BUFS_STRIDE) +
	       (uint64_t)c * CUDA_OLL_STRIDE(nranks);
}

/* Channel c's scratch for the hierarchical reduce-scatter (cuda_chan.g_scratch). */
static uint64_t scratch_addr(const struct vmm *v, uint32_t c, uint32_t nranks)
{
	return oll_addr(v, nchan, nranks) + (uint64_t)c * CUDA_SIMPLE_SLOT;
}

/* Takes a cleared abort word; its index, or -ENOSPC. */
static int revoke_take(void)
{
	int idx = -ENOSPC;

	pthread_mutex_lock(&revoke_lock);
	for (uint32_t k = 0; k < CUDA_REVOKE_WORDS; k++) {
		uint32_t i = (revoke_hint + k) % CUDA_REVOKE_WORDS;

		if (!revoke_used[i]) {
			revoke_used[i] = 1;
			revoke_hint = i + 1;
			/* Cleared before the communicator's first item is written (W1 orders it). */
			store_relaxed(&revoke_words[i], 0u);
			idx = (int)i;
			break;
		}
	}
	pthread_mutex_unlock(&revoke_lock);
	return idx;
}

static void revoke_give(uint32_t idx)
{
	pthread_mutex_lock(&revoke_lock);
	revoke_used[idx] = 0;
	pthread_mutex_unlock(&revoke_lock);
}

/*
 * Raises the communicator's abort word twice: in mapped host memory, and in
 * every rank's struct cuda_rank (device memory, by an async copy from that
 * host word: cheap for the grid to read at the first miss of every wait).
 */
static void cuda_comm_abort(void *priv)
{
	struct ccomm *cc = priv;

	store_release(&revoke_words[cc->revoke_idx], 1u);
	for (uint32_t r = 0; r < cc->nranks; r++) {
		struct gpu *g = &gpus[cc->mem[r].gpu];
		uint64_t dst = (uint64_t)cc->mem[r].ptr + offsetof(struct cuda_rank, revoked_dev);

		if (!cc->mem[r].ptr)
			continue; /* another daemon's rank */
		cudaSetDevice(g->ord);
		if (cudaMemcpyAsync((void *)(uintptr_t)dst, &revoke_words[cc->revoke_idx],
				    sizeof(uint32_t), cudaMemcpyHostToDevice,
				    g->aux_stream) != cudaSuccess) {
			/* The grid still sees the host word, later. */
			log_warn("communicator abort: copy to gpu%d: %s", cc->mem[r].gpu,
				 cuda_err(cudaGetLastError()));
		}
	}
}

static void cuda_comm_teardown(void *priv)
{
	struct ccomm *cc = priv;

	/*
	 * cuda_comm_abort()'s copies into revoked_dev are not waited for: let
	 * them land before the memory they write is unmapped (a copy into an
	 * unmapped address is a sticky error for the whole context).
	 */
	for (uint32_t r = 0; r < cc->nranks; r++)
		if (cc->mem[r].ptr) {
			cudaSetDevice(gpus[cc->mem[r].gpu].ord);
			if (cudaStreamSynchronize(gpus[cc->mem[r].gpu].aux_stream) != cudaSuccess)
				log_warn("communicator teardown: gpu%d: %s", cc->mem[r].gpu,
					 cuda_err(cudaGetLastError()));
		}
	for (uint32_t r = 0; r < cc->nranks; r++)
		cuda_vmm_free(&cc->mem[r]);
	if (cc->x)
		for (size_t i = 0; i < (cc->group ? 2 : 1) * (size_t)cc->nranks * nchan; i++)
			if (cc->x[i])
				cuda_xconn_give(cc->x[i]);
	if (cc->revoke_idx != UINT32_MAX)
		revoke_give(cc->revoke_idx);
	free(cc->x);
	free(cc->local);
	free(cc);
}

/* Does rank i run here? (local NULL: every rank does.) */
static int here(const uint8_t *local, uint32_t i)
{
	return !local || local[i];
}

/*
 * Sets up the ranks that run here (local NULL: all of them). A connection
 * to a rank of another daemon is left empty (0) until comm_link gives it a
 * ring in mapped host memory; only the ring/Simple path runs across
 * daemons (sched_launch.c), and the hierarchical all-reduce over the group
 * rings (group: the ranks of each daemon's block, else 0), so the other
 * fields are never used there.
 */
static int comm_setup(uint32_t nranks, const uint32_t *devs, const uint8_t *local,
		      const uint8_t *order, uint32_t group, uint64_t *ret_comm_dev, void **ret_priv)
{
	struct ccomm *cc = calloc(1, sizeof(*cc) + nranks * sizeof(struct vmm));
	struct cuda_chan *img = calloc(1, sizeof(*img));
	struct cuda_rank rk;
	int r = -ENOMEM;

	if (!cc || !img)
		goto err;
	cc->nranks = nranks;
	cc->group = group;
	cc->revoke_idx = UINT32_MAX;
	if (local) {
		cc->local = malloc(nranks);
		cc->x = calloc((group ? 2 : 1) * (size_t)nranks * nchan, sizeof(*cc->x));
		if (!cc->local || !cc->x)
			goto err;
		memcpy(cc->local, local, nranks);
	}
	r = revoke_take();
	if (r < 0)
		goto err;
	cc->revoke_idx = (uint32_t)r;
	for (uint32_t i = 0; i < nranks; i++) {
		struct gpu *g;

		if (!here(local, i))
			continue;
		g = &gpus[gpu_of(devs[i])];
		r = cuda_vmm_alloc((int)gpu_of(devs[i]), comm_region_bytes(nranks, group), 0,
				   &cc->mem[i]);
		if (r < 0)
			goto err;
		if (cudaMemsetAsync((void *)(uintptr_t)cc->mem[i].ptr, 0, cc->mem[i].size,
				    g->aux_stream) != cudaSuccess) {
			r = -EIO;
			goto err;
		}
	}
	for (uint32_t i = 0; i < nranks; i++) {
		uint32_t nx = (i + 1) % nranks, pv = (i + nranks - 1) % nranks;
		struct gpu *g;

		if (!here(local, i))
			continue;
		g = &gpus[gpu_of(devs[i])];
		cudaSetDevice(g->ord);
		memset(&rk, 0, sizeof(rk));
		rk.nranks = nranks;
		rk.rank = i;
		rk.nchannels = nchan;
		rk.revoked = revoke_words_dev + (uint64_t)cc->revoke_idx * sizeof(uint32_t);
		for (uint32_t c = 0; c < nchan; c++) {
			memset(img, 0, sizeof(*img));
			img->buf_simple = bufs_addr(&cc->mem[i], c);
			img->buf_ll = img->buf_simple + CUDA_SIMPLE_BYTES;
			img->buf_ll128 = img->buf_ll + CUDA_LL_BYTES;
			if (here(local, nx)) {
				img->next_simple = bufs_addr(&cc->mem[nx], c);
				img->next_ll = img->next_simple + CUDA_SIMPLE_BYTES;
				img->next_ll128 = img->next_ll + CUDA_LL_BYTES;
				img->next_tail = chan_addr(&cc->mem[nx], c) +
						 offsetof(struct cuda_chan, tail);
			}
			if (here(local, pv))
				img->prev_head = chan_addr(&cc->mem[pv], c) +
						 offsetof(struct cuda_chan, head);
			/* Zeroed above: no LL flag (a generation + 1 >= 2) matches a fresh line. */
			img->oll_inbox = oll_addr(&cc->mem[i], c, nranks);
			for (uint32_t p = 0; p < nranks; p++) {
				if (!here(local, p))
					continue;
				img->peers[p] = chan_addr(&cc->mem[p], c);
				img->oll_peer[p] = oll_addr(&cc->mem[p], c, nranks);
			}
			if (order) {
				img->ordered = 1;
				memcpy(img->order, order, nranks);
			}
			img->group = group;
			if (group)
				img->g_scratch = scratch_addr(&cc->mem[i], c, nranks);
			rk.chan[c] = chan_addr(&cc->mem[i], c);
			if (cudaMemcpyAsync((void *)(uintptr_t)chan_addr(&cc->mem[i], c), img,
					    sizeof(*img), cudaMemcpyHostToDevice,
					    g->aux_stream) != cudaSuccess ||
			    cudaStreamSynchronize(g->aux_stream) != cudaSuccess) {
				r = -EIO;
				goto err;
			}
		}
		if (cudaMemcpyAsync((void *)(uintptr_t)cc->mem[i].ptr, &rk, sizeof(rk),
				    cudaMemcpyHostToDevice, g->aux_stream) != cudaSuccess ||
		    cudaStreamSynchronize(g->aux_stream) != cudaSuccess) {
			r = -EIO;
			goto err;
		}
		ret_comm_dev[i] = (uint64_t)cc->mem[i].ptr;
	}
	free(img);
	*ret_priv = cc;
	return 0;

err:
	log_err("communicator setup on the GPUs failed: %s", strerror(-r));
	cudaGetLastError();
	free(img);
	if (cc)
		cuda_comm_teardown(cc);
	return r;
}

static int cuda_comm_setup(uint32_t nranks, const uint32_t *devs, uint64_t *ret_comm_dev,
			   void **ret_priv)
{
	return comm_setup(nranks, devs, NULL, NULL, 0, ret_comm_dev, ret_priv);
}

static int cuda_comm_setup_part(uint32_t nranks, const uint32_t *devs, const uint8_t *local,
				const uint8_t *order, uint32_t group, uint64_t *ret_comm_dev,
				void **ret_priv)
{
	/* Group rings: whole blocks, of at least two ranks, on at least two daemons. */
	if (group && (group < 2 || nranks % group || nranks / group < 2))
		return -EINVAL;
	return comm_setup(nranks, devs, local, order, group, ret_comm_dev, ret_priv);
}

/* Host-written fields of rank i's struct cuda_chan on channel c, rewritten in its GPU memory. */
static int chan_patch(const struct ccomm *cc, uint32_t i, uint32_t c, size_t off,
		      const uint64_t *vals, uint32_t nvals)
{
	struct gpu *g = &gpus[cc->mem[i].gpu];
	uint64_t dst = chan_addr(&cc->mem[i], c) + off;

	cudaSetDevice(g->ord);
	if (cudaMemcpyAsync((void *)(uintptr_t)dst, vals, nvals * sizeof(uint64_t),
			    cudaMemcpyHostToDevice, g->aux_stream) != cudaSuccess ||
	    cudaStreamSynchronize(g->aux_stream) != cudaSuccess) {
		log_err("ring across daemons: gpu%d: %s", cc->mem[i].gpu,
			cuda_err(cudaGetLastError()));
		return -EIO;
	}
	return 0;
}

/* Rank's receive ring on channel chan (group: its group ring) is the xconn at device address d. */
static int link_recv(const struct ccomm *cc, uint32_t rank, uint32_t chan, int group, uint64_t d)
{
	const uint64_t buf = d + offsetof(struct cuda_xconn, buf);
	const uint64_t head = d + offsetof(struct cuda_xconn, head);
	const uint64_t tail = d + offsetof(struct cuda_xconn, tail);
	int r;

	if (group) {
		const uint64_t g[] = { buf, tail, head };

		_Static_assert(offsetof(struct cuda_chan, g_head) ==
				       offsetof(struct cuda_chan, g_buf) + 2 * sizeof(uint64_t),
			       "g_buf .. g_head in a row");
		r = chan_patch(cc, rank, chan, offsetof(struct cuda_chan, g_buf), g, 3);
		/* The step lengths the proxy posts, which the grid checks (prims.h). */
		if (r == 0)
			r = chan_patch(cc, rank, chan, offsetof(struct cuda_chan, g_prev_x), &d, 1);
		return r;
	}
	r = chan_patch(cc, rank, chan, offsetof(struct cuda_chan, buf_simple), &buf, 1);
	if (r == 0)
		r = chan_patch(cc, rank, chan, offsetof(struct cuda_chan, prev_head), &head, 1);
	if (r == 0)
		r = chan_patch(cc, rank, chan, offsetof(struct cuda_chan, tail_at), &tail, 1);
	if (r == 0)
		r = chan_patch(cc, rank, chan, offsetof(struct cuda_chan, prev_x), &d, 1);
	return r;
}

/* Rank pv's send ring on channel chan (group: its group ring) is the xconn at device address d. */
static int link_send(const struct ccomm *cc, uint32_t pv, uint32_t chan, int group, uint64_t d)
{
	const uint64_t buf = d + offsetof(struct cuda_xconn, buf);
	const uint64_t head = d + offsetof(struct cuda_xconn, head);
	const uint64_t tail = d + offsetof(struct cuda_xconn, tail);
	const uint64_t len = d + offsetof(struct cuda_xconn, len);
	const uint64_t next[] = { buf, 0, 0, tail };
	int r;

	if (group) {
		const uint64_t g[] = { buf, tail, head, len };

		_Static_assert(offsetof(struct cuda_chan, g_next_len) ==
				       offsetof(struct cuda_chan, g_next_buf) +
					       3 * sizeof(uint64_t),
			       "g_next_buf .. g_next_len in a row");
		return chan_patch(cc, pv, chan, offsetof(struct cuda_chan, g_next_buf), g, 4);
	}
	/* The LL buffers stay 0: only Simple runs across daemons. */
	_Static_assert(offsetof(struct cuda_chan, next_tail) ==
			       offsetof(struct cuda_chan, next_simple) + 3 * sizeof(uint64_t),
		       "next_simple .. next_tail in a row");
	r = chan_patch(cc, pv, chan, offsetof(struct cuda_chan, next_simple), next, 4);
	/* Not tail_at: pv's own receive ring may cross too (its own comm_link). */
	if (r == 0)
		r = chan_patch(cc, pv, chan, offsetof(struct cuda_chan, head_at), &head, 1);
	if (r == 0)
		r = chan_patch(cc, pv, chan, offsetof(struct cuda_chan, next_len), &len, 1);
	return r;
}

/*
 * The Simple ring that rank receives on, on channel chan, where it crosses
 * daemons (exec.h comm_link): the flat ring's (from rank - 1) or the group
 * ring's (from rank - group). It lives in mapped host memory (xconn.c): if
 * the rank runs here, it becomes the rank's receive ring (buffer, tail, and
 * the head it posts); if its previous rank runs here, that rank's send
 * ring (buffer, tail, the step lengths for the proxy, and the head it waits
 * on). Called on the scheduler thread before any item of the communicator
 * is written, so no block has loaded these fields yet.
 */
static int cuda_comm_link(void *priv, uint32_t rank, uint32_t chan, uint32_t ring,
			  struct exec_link *ret)
{
	struct ccomm *cc = priv;
	const int group = ring == EXEC_RING_GROUP;
	uint32_t pv;
	struct cuda_xconn *h, **slot;
	uint64_t d;
	int r;

	if (!cc->local || rank >= cc->nranks || chan >= nchan ||
	    (ring != EXEC_RING_FLAT && !(group && cc->group)))
		return -EINVAL;
	pv = (rank + cc->nranks - (group ? cc->group : 1)) % cc->nranks;
	/* Only rings between two daemons are the proxy's. */
	if (!cc->local[rank] == !cc->local[pv])
		return -EINVAL;
	slot = &cc->x[((size_t)group * cc->nranks + rank) * nchan + chan];
	if (!*slot) {
		r = cuda_xconn_take(&h, &d);
		if (r < 0)
			return r;
		r = cc->local[rank] ? link_recv(cc, rank, chan, group, d)
				    : link_send(cc, pv, chan, group, d);
		if (r < 0) {
			cuda_xconn_give(h);
			return r;
		}
		*slot = h;
	}
	cuda_xconn_link(*slot, ret);
	return 0;
}

/* Has the grid found a step of another length on a receive ring across daemons? */
static int cuda_comm_broken(void *priv)
{
	const struct ccomm *cc = priv;

	if (!cc->x)
		return 0;
	for (size_t i = 0; i < (cc->group ? 2 : 1) * (size_t)cc->nranks * nchan; i++)
		/* P1'': pairs with P1 in device/prims.h (before the item's work_consumed, E1). */
		if (cc->x[i] && load_acquire(&cc->x[i]->broken))
			return 1;
	return 0;
}

static void cuda_device_name(uint32_t dev, char *out, uint32_t outlen)
{
	snprintf(out, outlen, "gpu%u.%u %s", gpu_of(dev), lane_of(dev), gpus[gpu_of(dev)].name);
}

static int cuda_device_active(uint32_t dev)
{
	return 1;
}

/* Writes a quit item at the tail of every lane (the scheduler has stopped). */
static void post_quit(void)
{
	for (uint32_t d = 0; d < ngpus * nlanes; d++) {
		struct collc_work_fifo *f = cuda_fifo(d);
		uint64_t tail = UINT64_MAX, t0 = now_ns();
		struct collc_work_item *it;

		for (uint32_t c = 0; c < nchan; c++)
			if (load_acquire(&f->ctrl.work_consumed[c].value) < tail)
				tail = load_acquire(&f->ctrl.work_consumed[c].value);
		while (load_acquire(&f->items[tail & (COLLC_FIFO_DEPTH - 1)].seq) == tail + 1)
			tail++;
		for (uint32_t c = 0; c < nchan; c++)
			while (tail >= COLLC_FIFO_DEPTH &&
			       load_acquire(&f->ctrl.work_consumed[c].value) <
				       tail - COLLC_FIFO_DEPTH + 1) {
				if (now_ns() - t0 > 2000000000ull)
					return;
				usleep(100);
			}
		it = &f->items[tail & (COLLC_FIFO_DEPTH - 1)];
		memset(it, 0, offsetof(struct collc_work_item, seq));
		it->kind = COLLC_WORK_QUIT;
		it->batch_last = 1; /* B2: a batch of its own */
		store_release(&it->seq, tail + 1);
		store_release(&f->ctrl.published, tail + 1); /* B1 */
		ll_publish(d, tail);
	}
}

/* Config cuda_trace: the means the channel blocks summed (cuda/grid.h); the grids have quit. */
static void log_trace(void)
{
	static uint64_t tr[CUDA_MAX_LANES][COLLC_MAX_CHANNELS][CUDA_TRACE_N];

	for (uint32_t g = 0; g < ngpus; g++) {
		if (cudaSetDevice(gpus[g].ord) != cudaSuccess ||
		    cudaMemcpy(tr, gpus[g].ds->chan_trace, sizeof(tr), cudaMemcpyDeviceToHost) !=
			    cudaSuccess) {
			log_warn("cuda_trace: cannot read gpu%u's sums", g);
			continue;
		}
		for (uint32_t l = 0; l < nlanes; l++)
			for (uint32_t c = 0; c < nchan; c++) {
				const uint64_t *t = tr[l][c];
				double n = (double)t[CUDA_TRACE_ITEMS];

				if (!t[CUDA_TRACE_ITEMS])
					continue;
				log_info(
					"trace gpu%u.%u channel %u: %llu items, means in us: poller "
					"reads %.2f, dseq seen %.2f, item load %.2f, state %.2f, "
					"algorithm %.2f (one-shot LL push -> last line %.2f), "
					"barrier + fence + work_consumed %.2f",
					g, l, c, (unsigned long long)t[CUDA_TRACE_ITEMS],
					t[CUDA_TRACE_COPY] / 1e3 / n, t[CUDA_TRACE_SEEN] / 1e3 / n,
					t[CUDA_TRACE_ITEM] / 1e3 / n, t[CUDA_TRACE_STATE] / 1e3 / n,
					t[CUDA_TRACE_ALG] / 1e3 / n,
					t[CUDA_TRACE_OLLWAIT] / 1e3 / n,
					t[CUDA_TRACE_END] / 1e3 / n);
			}
	}
}

static void cuda_fini(void)
{
	int exited;

	if (svc_started) {
		store_relaxed(&svc_stop, 1u);
		cuda_svc_wake();
		pthread_join(svc_thread, NULL);
	}
	post_quit();
	exited = cuda_wait_grids_exit(5000000000ull) == 0;
	if (!exited) {
		log_warn("grids did not quit: aborting them");
		for (uint32_t d = 0; d < ngpus * nlanes; d++)
			store_release(&cuda_fifo(d)->ctrl.abort, 1u);
		exited = cuda_wait_grids_exit(2000000000ull) == 0;
	}
	if (!exited) {
		log_err("grids still resident at exit: leaving their memory to the driver");
		return;
	}
	if (trace)
		log_trace();
	/* Requests nobody ran end now; releases nobody ran do not matter: every creg goes. */
	while (mem_reqs) {
		struct mem_req *rq = mem_reqs;

		mem_reqs = rq->next;
		cuda_mem_complete(rq, -ECANCELED, NULL, 0, -1, 0);
	}
	while (mem_waiting) {
		struct mem_req *rq = mem_waiting;

		mem_waiting = rq->next;
		cuda_mem_complete(rq, -ECANCELED, NULL, 0, -1, 0);
	}
	imp_reqs = NULL;
	rel_list = NULL;
	while (cregs) {
		struct creg *cr = cregs;

		cregs = cr->next;
		cuda_creg_release(cr);
	}
	for (struct ipc_imp *imp = imps; imp; imp = imp->next)
		imp->closing = 1;
	cuda_window_calls();
	for (uint32_t g = 0; g < ngpus; g++) {
		cudaSetDevice(gpus[g].ord);
		for (uint32_t l = 0; l < nlanes; l++) {
			cudaFreeHost(gpus[g].fifo[l]);
			cudaFreeHost(gpus[g].ll[l]);
		}
		cudaFreeHost(gpus[g].hctrl);
		cudaFreeHost(gpus[g].crumbs);
		cudaFree(gpus[g].ds);
		cudaStreamDestroy(gpus[g].grid_stream);
		cudaStreamDestroy(gpus[g].aux_stream);
		if (gpus[g].copy_stream) {
			cudaStreamDestroy(gpus[g].copy_stream);
			pthread_mutex_destroy(&gpus[g].copy_lock);
		}
		free(gpus[g].peer_ok);
	}
	free(gpus);
	gpus = NULL;
	free(track);
	cuda_xconn_fini();
	cudaFreeHost(revoke_words);
	free(revoke_used);
	if (svc_efd >= 0)
		close(svc_efd);
}

/*
 * exec.h copy(): the node layer's staging of sends and receives across
 * daemons, on the node thread. Never the legacy default stream (the grid is
 * resident: it would wait for the grid forever) nor aux_stream (the
 * scheduler's): a non-blocking stream of its own per GPU, under copy_lock.
 */
static int cuda_copy(uint32_t dev, void *dst, const void *src, size_t bytes)
{
	struct gpu *g;
	cudaError_t e;

	if (dev >= ngpus * nlanes)
		return -EINVAL;
	if (!bytes)
		return 0;
	g = &gpus[gpu_of(dev)];
	pthread_mutex_lock(&g->copy_lock);
	cudaSetDevice(g->ord);
	e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, g->copy_stream);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(g->copy_stream);
	if (e != cudaSuccess)
		cudaGetLastError();
	pthread_mutex_unlock(&g->copy_lock);
	if (e != cudaSuccess) {
		log_warn("staging copy of %zu bytes on gpu%u: %s", bytes, gpu_of(dev), cuda_err(e));
		return -EIO;
	}
	return 0;
}

static struct exec_backend cuda_backend = {
	.name = "cuda",
	.backend = COLLC_BACKEND_CUDA,
	.caps = EXEC_CAP_DEVICE_RANKS | EXEC_CAP_NET_HIER,
	/* fini frees device memory with the contexts: sched_release() leaves it. */
	.fini_frees = 1,
	.fini = cuda_fini,
	.fifo = cuda_fifo,
	.kick = cuda_kick,
	.gate_decision = cuda_gate_decision,
	.gate_cancel = cuda_gate_cancel,
	.gate_outcome = cuda_gate_outcome,
	.place = cuda_place,
	.comm_setup = cuda_comm_setup,
	.comm_abort = cuda_comm_abort,
	.comm_setup_part = cuda_comm_setup_part,
	.comm_link = cuda_comm_link,
	.comm_broken = cuda_comm_broken,
	.comm_teardown = cuda_comm_teardown,
	.device_name = cuda_device_name,
	.device_active = cuda_device_active,
	.mem_add = cuda_mem_add,
	.mem_release = cuda_mem_release,
	.host_map = cuda_host_map,
	.host_unmap = cuda_host_unmap,
	.copy = cuda_copy,
};

/* Kernels load at start, never while a grid is resident: before the first CUDA call. */
static void eager_modules(void)
{
	setenv("CUDA_MODULE_LOADING", "EAGER", 0);
}

int exec_cuda_available(void)
{
	int n = 0;

	eager_modules();
	return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

static int gpu_init(struct gpu *g, int ord)
{
	struct cudaDeviceProp p;
	CUmemAllocationProp prop = { 0 };

	g->ord = ord;
	if (cudaSetDevice(ord) != cudaSuccess || cudaGetDeviceProperties(&p, ord) != cudaSuccess)
		return -EIO;
	snprintf(g->name, sizeof(g->name), "%s", p.name);
	memcpy(g->uuid, p.uuid.bytes, 16);
	if (p.major != 9) {
		log_err("gpu%d (%s): compute capability %d.%d; this build runs on sm_90 only", ord,
			p.name, p.major, p.minor);
		return -ENODEV;
	}
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = ord;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	if (drv.granularity(&g->gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS)
		return -EIO;
	if (cudaStreamCreateWithFlags(&g->grid_stream, cudaStreamNonBlocking) != cudaSuccess ||
	    cudaStreamCreateWithFlags(&g->aux_stream, cudaStreamNonBlocking) != cudaSuccess ||
	    cudaStreamCreateWithFlags(&g->copy_stream, cudaStreamNonBlocking) != cudaSuccess)
		return -EIO;
	pthread_mutex_init(&g->copy_lock, NULL);
	for (uint32_t l = 0; l < nlanes; l++) {
		if (cudaHostAlloc((void **)&g->fifo[l], sizeof(struct collc_work_fifo),
				  cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess)
			return -ENOMEM;
		memset(g->fifo[l], 0, sizeof(struct collc_work_fifo));
		if (cudaHostAlloc((void **)&g->ll[l], sizeof(struct cuda_ll_fifo),
				  cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess)
			return -ENOMEM;
		memset(g->ll[l], 0, sizeof(struct cuda_ll_fifo));
	}
	if (cudaHostAlloc((void **)&g->hctrl, sizeof(*g->hctrl),
			  cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess)
		return -ENOMEM;
	memset(g->hctrl, 0, sizeof(*g->hctrl));
	if (breadcrumbs) {
		if (cudaHostAlloc((void **)&g->crumbs, sizeof(*g->crumbs),
				  cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess)
			return -ENOMEM;
		memset(g->crumbs, 0, sizeof(*g->crumbs));
	}
	if (cudaMalloc((void **)&g->ds, sizeof(*g->ds)) != cudaSuccess ||
	    cudaMemset(g->ds, 0, sizeof(*g->ds)) != cudaSuccess ||
	    cudaStreamSynchronize(0) != cudaSuccess)
		return -ENOMEM;
	return 0;
}

int exec_cuda_init(const struct exec_init *init, const struct exec_backend **ret)
{
	uint32_t ndevices = init->ndevices;
	uint32_t max_channels = init->max_channels ? init->max_channels : COLLC_MAX_CHANNELS;
	void *dp = NULL;
	int n = 0, r;
	cudaError_t e;

	eager_modules();
	if (max_channels < 1 || max_channels > COLLC_MAX_CHANNELS)
		return -EINVAL;
	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n == 0) {
		log_err("CUDA backend: no GPU is visible to collcd (%s)",
			e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice
				? "no NVIDIA driver or GPU on this machine"
			: e != cudaSuccess ? cuda_err(e)
					   : "0 devices");
		return -ENODEV;
	}
	if (ndevices && ndevices < (uint32_t)n)
		n = (int)ndevices;
	/* Config cuda_lanes (1..4, validated by config.c). */
	nlanes = init->cfg->cuda_lanes;
	if (nlanes < 1 || nlanes > CUDA_MAX_LANES)
		return -EINVAL;
	while ((uint32_t)n * nlanes > COLLC_MAX_RANKS)
		n--;
	nchan = max_channels;
	r = cuda_drv_load();
	if (r < 0)
		return r;
	notify = init->notify;
	require_mps = init->require_mps;
	trace = init->cfg->cuda_trace;
	breadcrumbs = init->cfg->cuda_breadcrumbs;
	if (!breadcrumbs)
		log_info(
			"cuda_breadcrumbs 0: a GPU fault's log will not say what the grid was doing");
	idle_sleep_ns = init->cfg->cuda_idle_sleep_ns;
	if (idle_sleep_ns != 200)
		log_info("cuda_idle_sleep_ns: idle channel blocks sleep %u ns between polls",
			 idle_sleep_ns);
	if (trace)
		log_warn("cuda_trace: the grid times the hops of every item it runs");
	gpus = calloc((size_t)n, sizeof(*gpus));
	track = calloc((size_t)n * nlanes, sizeof(*track));
	if (!gpus || !track)
		return -ENOMEM;
	ngpus = (uint32_t)n;
	for (uint32_t g = 0; g < ngpus; g++) {
		gpus[g].peer_ok = calloc(ngpus, 1);
		if (!gpus[g].peer_ok)
			return -ENOMEM;
		r = gpu_init(&gpus[g], (int)g);
		if (r < 0) {
			log_err("gpu%u: initialisation failed: %s", g,
				cuda_err(cudaGetLastError()));
			return r;
		}
	}
	for (uint32_t a = 0; a < ngpus; a++)
		for (uint32_t b = 0; b < ngpus; b++) {
			int ok = 0;

			if (a == b)
				continue;
			if (cudaDeviceCanAccessPeer(&ok, gpus[a].ord, gpus[b].ord) != cudaSuccess ||
			    !ok) {
				log_warn("gpu%u cannot access gpu%u: no communicator may span them",
					 a, b);
				continue;
			}
			cudaSetDevice(gpus[a].ord);
			e = cudaDeviceEnablePeerAccess(gpus[b].ord, 0);
			if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
				log_warn("gpu%u -> gpu%u peer access: %s", a, b, cuda_err(e));
				continue;
			}
			cudaGetLastError();
			gpus[a].peer_ok[b] = 1;
		}
	r = cuda_mps_check();
	if (r < 0)
		return r;
	if (cudaHostAlloc((void **)&revoke_words, CUDA_REVOKE_WORDS * sizeof(uint32_t),
			  cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess ||
	    cudaHostGetDevicePointer(&dp, revoke_words, 0) != cudaSuccess)
		return -ENOMEM;
	revoke_words_dev = (uint64_t)(uintptr_t)dp;
	memset(revoke_words, 0, CUDA_REVOKE_WORDS * sizeof(uint32_t));
	revoke_used = calloc(CUDA_REVOKE_WORDS, 1);
	if (!revoke_used)
		return -ENOMEM;
	e = (cudaError_t)cuda_grid_preload();
	if (e != cudaSuccess) {
		log_err("CUDA backend: kernel module: %s", cuda_err(e));
		return -EIO;
	}
	svc_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (svc_efd < 0)
		return -errno;
	for (uint32_t g = 0; g < ngpus; g++) {
		r = cuda_gpu_launch(&gpus[g]);
		if (r < 0)
			return r;
	}
	r = -pthread_create(&svc_thread, NULL, cuda_svc_main, NULL);
	if (r < 0)
		return r;
	svc_started = 1;
	cuda_backend.ndevices = ngpus * nlanes;
	cuda_backend.max_channels = nchan;
	/*
	 * On GPUs every channel is a resident block: large collectives need them
	 * all (measured on 2 x H200, 1 GiB all-reduce: 22 GB/s with 2, 264 with
	 * 32), and mid sizes want many too: one channel per 8 KiB, not 256 KiB,
	 * took the 1 MiB all-reduce from 70.5 to 38.9 us and 64 KiB from 38.1 to
	 * 23.6 us (p50; the same at 8 B and 8 MiB). One-shot LL all-reduces beat
	 * two-shot Simple up to 512 KiB there (p50 128 KiB 19.4 vs 25.9 us, 512
	 * KiB 23.9 vs 26.4; at 1 MiB 37.8 vs 29.3: bench/RESULTS.md); allgather
	 * and reduce-scatter take the same limit (8 B 16.9 and 17.2 us against
	 * 23.0 with one-shot Simple). Beyond that, reading peer buffers
	 * directly beats the ring: one-shot Simple up to 4 MiB (p50 1 MiB
	 * all-reduce 29.4 against 39.7 us two-shot; reduce-scatter 2 MiB 28.7
	 * against 40.2 with ring LL128, allgather 29.2 against 37.6), and
	 * two-shot all-reduces up to 32 MiB (pipelined 4 MiB 29.2 against 42.7
	 * us with ring LL128, 16 MiB 68.8 against 69.0; 64 MiB even). Measured
	 * on 2 GPUs, where one-shot and two-shot all-reduces read the same
	 * bytes; beyond 8 ranks the one-shot limit of all-reduce shrinks
	 * (plan.h). Every channel is a resident block, so small collectives in
	 * a row run side by side: they rotate over the channels.
	 */
	cuda_backend.defaults = (struct cfg_exec_defaults){
		.channels = nchan,
		.rotate_channels = 1,
		/*
		 * Copy lists write across NVLink: stores are posted, while a load
		 * from a peer keeps a block waiting a round trip (not measured yet:
		 * copy_push=0 reads instead).
		 */
		.copy_push = 1,
		.channel_min_bytes = 8 << 10,
		.oneshot_ll_max_bytes = 512 << 10,
		.oneshot_max_bytes = 4 << 20,
		.twoshot_max_bytes = 32 << 20,
	};
	log_info(
		"CUDA backend: %u GPUs x %u lanes, %u channels, grid of %u blocks x %u threads per GPU",
		ngpus, nlanes, nchan, 1 + nlanes * nchan, CUDA_THREADS);
	*ret = &cuda_backend;
	return 0;
}
