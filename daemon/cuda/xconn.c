/* SPDX-License-Identifier: MIT */
/*
 * The grid's rings that cross to another daemon (grid.h struct cuda_xconn):
 * mapped pinned host memory that a channel block and the network proxy
 * (daemon/node.c) share, as NCCL's net transport does without GPUDirect.
 * On the sender's daemon the grid writes steps into the remote receiver's
 * staging ring and the proxy sends them; on the receiver's daemon the proxy
 * lands steps in the local rank's receive ring and the grid consumes them.
 *
 * Orderings across PCIe (the grid's side in cuda/device/prims.h):
 *   X1 (grid, sender): the payload and len[slot], __threadfence_system, then
 *      tail (S1); pairs with X1' in xlink.c, the proxy's acquire load of
 *      tail before it reads len and the slot.
 *   X2 (grid, receiver): payload loads done, __threadfence_system, then head
 *      (R2); pairs with X2' in xlink.c, the proxy's acquire load of head
 *      before it lets the transport write the slot again.
 *   X3 (proxy, receiver, xlink.c): the landed payload and len, then tail
 *      with release; pairs with the grid's system-scope acquire of tail (R1,
 *      ld.acquire.sys in wait_ge()) before it loads the slot.
 *   X4 (proxy, sender, xlink.c): the transport took the slot, then head
 *      with release; pairs with the grid's system-scope acquire of head (S2)
 *      before it overwrites the slot.
 *
 * The grid cannot write an eventfd, so these links have no watch: the proxy
 * polls them (spins, then naps of tens of microseconds) while a collective
 * of their communicator is in flight, and sleeps on its sockets otherwise.
 *
 * cudaFreeHost never returns while a grid is resident (docs/design.md §5), so
 * rings are never freed while collcd runs: a torn-down communicator's go back
 * to a pool that the next one takes from; fini frees them after the grids quit.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "daemon/cuda/internal.h"
#include "daemon/log.h"

struct xbuf {
	struct xbuf *next; /* every ring ever allocated */
	struct xbuf *free_next;
	struct cuda_xconn *h; /* host view */
	uint64_t d;           /* device address of the same */
	uint8_t in_use;
};

static pthread_mutex_t xlock = PTHREAD_MUTEX_INITIALIZER;
static struct xbuf *xall, *xfree;

int cuda_xconn_take(struct cuda_xconn **ret_h, uint64_t *ret_d)
{
	struct xbuf *x;
	void *h = NULL, *d = NULL;

	pthread_mutex_lock(&xlock);
	x = xfree;
	if (x) {
		xfree = x->free_next;
		x->in_use = 1;
	}
	pthread_mutex_unlock(&xlock);
	if (!x) {
		/* cudaHostAlloc is one of the calls that return with a grid resident. */
		if (cudaHostAlloc(&h, sizeof(struct cuda_xconn),
				  cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
			log_err("ring across daemons: %s", cuda_err(cudaGetLastError()));
			return -ENOMEM;
		}
		if (cudaHostGetDevicePointer(&d, h, 0) != cudaSuccess) {
			log_err("ring across daemons: no device address: %s",
				cuda_err(cudaGetLastError()));
			d = NULL;
		}
		x = calloc(1, sizeof(*x));
		if (!x)
			return -ENOMEM; /* h stays until exit: cudaFreeHost would hang now */
		x->h = h;
		x->d = (uint64_t)(uintptr_t)d;
		x->in_use = d != NULL;
		/* Listed either way, so fini frees it; one without a device address is never lent. */
		pthread_mutex_lock(&xlock);
		x->next = xall;
		xall = x;
		pthread_mutex_unlock(&xlock);
		if (!d)
			return -EIO;
	}
	/* Fresh steps: written before any item of the communicator (W1 orders them). */
	memset(x->h, 0, offsetof(struct cuda_xconn, buf));
	*ret_h = x->h;
	*ret_d = x->d;
	return 0;
}

void cuda_xconn_give(struct cuda_xconn *h)
{
	pthread_mutex_lock(&xlock);
	for (struct xbuf *x = xall; x; x = x->next)
		if (x->h == h && x->in_use) {
			x->in_use = 0;
			x->free_next = xfree;
			xfree = x;
			break;
		}
	pthread_mutex_unlock(&xlock);
}

void cuda_xconn_fini(void)
{
	while (xall) {
		struct xbuf *x = xall;

		xall = x->next;
		cudaFreeHost(x->h);
		free(x);
	}
	xfree = NULL;
}
