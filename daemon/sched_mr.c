/* SPDX-License-Identifier: MIT */
/*
 * Registrations: a host mapping the scheduler unmaps, or executor memory it
 * lets go through the executor; either lives until the client released it
 * and no submission names it any more.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/mman.h>

#include "daemon/sched_int.h"

/* Lets go of memory a registration holds: its host mapping, or the executor's memory. */
void sched_mr_free_mem(const struct exec_backend *ex, void *exec_mem, void *addr, uint64_t size)
{
	if (ex) {
		if (!(sched.execs_stopped && ex->fini_frees))
			ex->mem_release(exec_mem);
	} else {
		munmap(addr, size);
	}
}

void sched_mr_put(struct mr *m)
{
	if (!m || --m->refs > 0 || !m->released)
		return;
	sched_mr_free_mem(m->exec, m->exec_mem, m->addr, m->size);
	free(m);
}

struct mr *sched_mr_lookup(struct sched_client *c, uint32_t id)
{
	struct mr *m;

	if (id == COLLC_MR_NONE || id > c->nmrs)
		return NULL;
	m = c->mrs[id - 1];
	return m && !m->released ? m : NULL;
}

void sched_mr_release(struct sched_client *c, uint32_t id)
{
	struct mr *m = sched_mr_lookup(c, id);

	if (!m)
		return;
	c->mrs[id - 1] = NULL;
	c->nmrs_live--;
	c->mr_bytes -= m->size;
	m->released = 1;
	m->refs++;
	sched_mr_put(m);
}
