/* SPDX-License-Identifier: MIT */
/*
 * libcollc's host memory: collc_mem_alloc maps a memfd from collcd;
 * collc_mem_register moves the user's private pages into a memfd of ours
 * (a backing) at the same address and hands collcd that. Device memory goes
 * to mem_gpu.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "client/internal.h"

/* Is every page of [a, b) private anonymous memory of this process? */
static int range_is_private_anon(uintptr_t a, uintptr_t b)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];
	uintptr_t covered = a;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f) && covered < b) {
		unsigned long lo, hi, off, inode;
		char perms[8], dev[16], path[256] = "";

		if (sscanf(line, "%lx-%lx %7s %lx %15s %lu %255s", &lo, &hi, perms, &off, dev,
			   &inode, path) < 6)
			continue;
		if (hi <= covered || lo > covered)
			continue;
		if (perms[0] != 'r' || perms[1] != 'w' || perms[3] != 'p' || inode != 0 ||
		    (path[0] && strcmp(path, "[heap]") != 0))
			break;
		covered = hi;
	}
	fclose(f);
	return covered >= b;
}

/*
 * Are the pages of k still mapped from its memfd, each at its own offset?
 * free() may have unmapped them and a later mmap put other memory there.
 */
static int backing_intact(const struct backing *k)
{
	FILE *f = fopen("/proc/self/maps", "re");
	struct stat st;
	char line[512];
	uintptr_t covered = k->a;

	if (!f)
		return 0;
	if (fstat(k->fd, &st) < 0) {
		fclose(f);
		return 0;
	}
	while (fgets(line, sizeof(line), f) && covered < k->b) {
		unsigned long lo, hi, off, inode;
		char perms[8], dev[16];

		if (sscanf(line, "%lx-%lx %7s %lx %15s %lu", &lo, &hi, perms, &off, dev, &inode) <
		    6)
			continue;
		if (hi <= covered || lo > covered)
			continue;
		/* The page at `covered` must be file offset covered - k->a of k's memfd. */
		if (inode != (unsigned long)st.st_ino || perms[3] != 's' ||
		    off + (covered - lo) != covered - k->a)
			break;
		covered = hi;
	}
	fclose(f);
	return covered >= k->b;
}

/* Forgets backings whose pages are no longer theirs. Under mem_lock. */
static void backing_prune(struct collc_ctx *ctx, uintptr_t a, uintptr_t b)
{
	for (struct backing **pk = &ctx->backings; *pk;) {
		struct backing *k = *pk;

		if (k->a < b && a < k->b && !backing_intact(k)) {
			*pk = k->next;
			close(k->fd);
			free(k);
			continue;
		}
		pk = &k->next;
	}
}

/* The backing that holds page address a, if any. Under mem_lock. */
static struct backing *backing_at(struct collc_ctx *ctx, uintptr_t a)
{
	for (struct backing *k = ctx->backings; k; k = k->next)
		if (a >= k->a && a < k->b)
			return k;
	return NULL;
}

/* Does some backing other than skip start inside [a, b)? Under mem_lock. */
static int backing_within(struct collc_ctx *ctx, uintptr_t a, uintptr_t b,
			  const struct backing *skip)
{
	for (struct backing *k = ctx->backings; k; k = k->next)
		if (k != skip && k->a < b && a < k->b)
			return 1;
	return 0;
}

/*
 * Moves the private pages [a, b) into file offset off of fd and maps the file
 * there instead: same address, same contents, now shareable with collcd.
 */
static int reback(int fd, off_t off, uintptr_t a, uintptr_t b)
{
	void *tmp = mmap(NULL, b - a, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off);
	struct iovec to = { .iov_base = tmp, .iov_len = b - a };
	struct iovec from = { .iov_base = (void *)a, .iov_len = b - a };

	if (tmp == MAP_FAILED)
		return -errno;
	/*
	 * Whole pages, so also the bytes around the user's range: the kernel
	 * copies them (a memory checker would flag a memcpy across allocations).
	 */
	if (process_vm_readv(getpid(), &to, 1, &from, 1, 0) != (ssize_t)(b - a))
		memcpy(tmp, (void *)a, b - a);
	munmap(tmp, b - a);
	if (mmap((void *)a, b - a, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, off) ==
	    MAP_FAILED)
		return -errno;
	return 0;
}

/*
 * Finds or makes the backing that covers the pages [a, b): a registration
 * inside pages registered before (or since deregistered) reuses their memfd,
 * one that runs past their end grows it. Under mem_lock.
 */
static int backing_cover(struct collc_ctx *ctx, uintptr_t a, uintptr_t b, struct backing **ret)
{
	struct backing *k = backing_at(ctx, a);
	int r;

	if (!k) {
		if (backing_within(ctx, a, b, NULL))
			return -EEXIST; /* it would have to grow a backing downwards */
		if (!range_is_private_anon(a, b))
			return -EINVAL;
		k = calloc(1, sizeof(*k));
		if (!k)
			return -ENOMEM;
		k->fd = memfd_create("collc-reg", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (k->fd < 0) {
			r = -errno;
			free(k);
			return r;
		}
		r = ftruncate(k->fd, (off_t)(b - a)) < 0 ? -errno : reback(k->fd, 0, a, b);
		if (r < 0) {
			close(k->fd);
			free(k);
			return r;
		}
		k->a = a;
		k->b = b;
		k->next = ctx->backings;
		ctx->backings = k;
	} else if (b > k->b) {
		if (backing_within(ctx, k->b, b, k) || !range_is_private_anon(k->b, b))
			return -EEXIST;
		if (ftruncate(k->fd, (off_t)(b - k->a)) < 0)
			return -errno;
		r = reback(k->fd, (off_t)(k->b - k->a), k->b, b);
		if (r < 0)
			return r;
		k->b = b;
	}
	*ret = k;
	return 0;
}

int collc_mem_alloc(struct collc_ctx *ctx, size_t size, int device, void **ret_ptr)
{
	struct collc_msg_mem q = { .size = size, .device = -1 };
	struct collc_msg_mem_reply mr;
	struct reg g = { .kind = REG_ALLOC };
	void *p;
	int fd, r;

	if (!ctx || !ret_ptr || size == 0 || device < -1)
		return -EINVAL;
	if (device >= 0)
		return collc__gpu_mem_alloc(ctx, size, device, ret_ptr);
	r = collc__mem_request(ctx, COLLC_MSG_MEM_ALLOC, &q, sizeof(q), -1, &mr, &fd);
	if (r < 0)
		return r;
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		r = -errno;
		collc__mem_release(ctx, mr.mr);
		return r;
	}
	g.start = g.map = (uintptr_t)p;
	g.len = g.maplen = size;
	g.mr = mr.mr;
	g.fd = -1;
	r = collc__reg_add(ctx, &g);
	if (r < 0) {
		munmap(p, size);
		collc__mem_release(ctx, mr.mr);
		return r;
	}
	*ret_ptr = p;
	return 0;
}

int collc_mem_register(struct collc_ctx *ctx, void *ptr, size_t size, int device)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a, b;
	struct collc_msg_mem q = { .device = -1 };
	struct collc_msg_mem_reply mr;
	struct reg g = { .kind = REG_REGISTER, .fd = -1 };
	const struct reg *in;
	struct backing *k = NULL;
	int r;

	if (!ctx || !ptr || size == 0 || device < -1 || (uintptr_t)ptr + size < (uintptr_t)ptr)
		return -EINVAL;
	if (device >= 0)
		return collc__gpu_mem_register(ctx, ptr, size, device);
	a = (uintptr_t)ptr & ~(pg - 1);
	b = ((uintptr_t)ptr + size + pg - 1) & ~(pg - 1);
	pthread_mutex_lock(&ctx->ring_lock);
	in = collc__reg_find(ctx, (uintptr_t)ptr, size);
	r = in && in->kind == REG_ALLOC;
	pthread_mutex_unlock(&ctx->ring_lock);
	if (r)
		return 0; /* inside memory from collc_mem_alloc: collcd maps it already */
	pthread_mutex_lock(&ctx->mem_lock);
	backing_prune(ctx, a, b);
	r = backing_cover(ctx, a, b, &k);
	if (r < 0)
		goto out;
	/* collcd maps the backing from its start to the end of this range. */
	q.size = b - k->a;
	r = collc__mem_request(ctx, COLLC_MSG_MEM_REGISTER, &q, sizeof(q), k->fd, &mr, NULL);
	if (r < 0)
		goto out; /* the pages stay memfd-backed, with the user's data */
	g.start = (uintptr_t)ptr;
	g.len = size;
	g.map = k->a;
	g.maplen = b - k->a;
	g.mr = mr.mr;
	r = collc__reg_add(ctx, &g);
	if (r < 0)
		collc__mem_release(ctx, mr.mr);
out:
	pthread_mutex_unlock(&ctx->mem_lock);
	return r;
}

void collc__backing_fini(struct collc_ctx *ctx)
{
	while (ctx->backings) {
		struct backing *k = ctx->backings;

		ctx->backings = k->next;
		close(k->fd); /* the pages stay mapped: they are the user's memory */
		free(k);
	}
}
