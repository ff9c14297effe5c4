/* SPDX-License-Identifier: MIT */
/*
 * libcollc's registration table: the ranges collcd maps, host or device, by
 * their region id (mr); the memory requests that make and release them, and
 * collc_mem_free / collc_mem_deregister, which work alike for every kind.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client/gpu.h"
#include "client/internal.h"

const struct reg *collc__reg_find(const struct collc_ctx *ctx, uintptr_t p, size_t len)
{
	for (size_t i = 0; i < ctx->nregs; i++) {
		const struct reg *g = &ctx->regs[i];

		if (p >= g->start && p - g->start <= g->len && len <= g->len - (p - g->start))
			return g;
	}
	return NULL;
}

int collc__reg_overlaps(const struct collc_ctx *ctx, uintptr_t a, uintptr_t b)
{
	for (size_t i = 0; i < ctx->nregs; i++) {
		const struct reg *g = &ctx->regs[i];

		if (a < g->map + g->maplen && g->map < b)
			return 1;
	}
	return 0;
}

int collc__reg_add(struct collc_ctx *ctx, const struct reg *g)
{
	struct reg *t;
	int r = 0;

	pthread_mutex_lock(&ctx->ring_lock);
	t = realloc(ctx->regs, (ctx->nregs + 1) * sizeof(*t));
	if (t) {
		ctx->regs = t;
		ctx->regs[ctx->nregs++] = *g;
	} else {
		r = -ENOMEM;
	}
	pthread_mutex_unlock(&ctx->ring_lock);
	return r;
}

/* Removes the registration of `kind` that starts at ptr into *out. */
static int reg_take(struct collc_ctx *ctx, void *ptr, int kind, struct reg *out)
{
	int r = -EINVAL;

	pthread_mutex_lock(&ctx->ring_lock);
	for (size_t i = 0; i < ctx->nregs; i++)
		if (ctx->regs[i].start == (uintptr_t)ptr && ctx->regs[i].kind == kind) {
			*out = ctx->regs[i];
			ctx->regs[i] = ctx->regs[--ctx->nregs];
			r = 0;
			break;
		}
	pthread_mutex_unlock(&ctx->ring_lock);
	return r;
}

int collc__mem_request(struct collc_ctx *ctx, uint16_t type, const void *payload, size_t len,
		       int send_fd, struct collc_msg_mem_reply *mr, int *ret_fd)
{
	struct ctl_reply rep;
	int r = collc__request(ctx, type, payload, len, send_fd, &rep);

	if (r < 0)
		return r;
	r = rep.status;
	collc__reply_body(&rep, mr, sizeof(*mr));
	if (r == 0 && ret_fd) {
		if (rep.nfds != 1) {
			r = -EPROTO;
		} else {
			*ret_fd = rep.fds[0];
			rep.nfds = 0;
		}
	}
	ctl_reply_free(&rep);
	return r;
}

int collc__mem_release(struct collc_ctx *ctx, uint32_t mr)
{
	struct collc_msg_mem_release q = { .mr = mr };

	return collc__request_status(ctx, COLLC_MSG_MEM_RELEASE, &q, sizeof(q));
}

/*
 * Undoes what the library holds for g once collcd let it go. A registration's
 * pages stay mapped (they are the user's memory) and memfd-backed: a later
 * registration of them reuses the backing.
 */
static void reg_unmap(const struct reg *g)
{
	if (g->kind == REG_ALLOC)
		munmap((void *)g->map, g->maplen);
	else if (g->kind == REG_DEV_ALLOC)
		collc__gpu_unmap(g->map, g->maplen);
	else if (g->fd >= 0)
		close(g->fd);
}

/* Forgets the registration of kind host_kind or dev_kind at ptr, here and in collcd. */
static int reg_drop(struct collc_ctx *ctx, void *ptr, int host_kind, int dev_kind)
{
	struct reg g;
	int r;

	if (!ctx || !ptr ||
	    (reg_take(ctx, ptr, host_kind, &g) < 0 && reg_take(ctx, ptr, dev_kind, &g) < 0))
		return -EINVAL;
	r = collc__mem_release(ctx, g.mr);
	reg_unmap(&g);
	/* A lost collcd has dropped the region already. */
	return r == -ECONNRESET ? 0 : r;
}

int collc_mem_free(struct collc_ctx *ctx, void *ptr)
{
	return reg_drop(ctx, ptr, REG_ALLOC, REG_DEV_ALLOC);
}

int collc_mem_deregister(struct collc_ctx *ctx, void *ptr)
{
	return reg_drop(ctx, ptr, REG_REGISTER, REG_DEV_REGISTER);
}

void collc__reg_fini(struct collc_ctx *ctx)
{
	for (size_t i = 0; i < ctx->nregs; i++)
		reg_unmap(&ctx->regs[i]);
	free(ctx->regs);
	ctx->regs = NULL;
	ctx->nregs = 0;
}
