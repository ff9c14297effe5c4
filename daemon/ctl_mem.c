/* SPDX-License-Identifier: MIT */
/*
 * Memory requests: host memory collcd maps (a memfd it makes or the client's
 * sealed one), and device memory its executor allocates or imports, which
 * completes on the executor's thread and comes back through ctl_done_async.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/atomics.h"
#include "daemon/config.h"
#include "daemon/ctl_int.h"
#include "daemon/exec.h"
#include "daemon/log.h"

static void done_mem(struct sched_cmd *cmd)
{
	struct cmd_ctx *c;
	struct session *s = ctl_cmd_end(cmd, &c);
	struct collc_msg_mem_reply rep = { .st.status = cmd->result };

	if (s) {
		rep.mr = cmd->u.mr.mr;
		rep.size = cmd->u.mr.size;
		/* An allocation hands its memfd to the client; a registration needs no fd back. */
		if (cmd->result == 0 && c->type == COLLC_MSG_MEM_ALLOC)
			ctl_reply_struct(s, c->type, c->id, 0, &rep, sizeof(rep),
					 &cmd->u.mr.reply_fd, 1);
		else
			ctl_reply_struct(s, c->type, c->id, cmd->result, &rep, sizeof(rep), NULL,
					 0);
	}
	/*
	 * The registration keeps no fd (a host mapping or the executor's handle);
	 * the scheduler released the memory on failure. Our copy of the reply
	 * fd (sent or not) closes here.
	 */
	if (cmd->u.mr.reply_fd >= 0)
		close(cmd->u.mr.reply_fd);
	free(c);
}

/*
 * Hands a registration to the scheduler. reply_fd: what the client gets (a
 * memfd, or a GPU allocation's socket; -1: none); ex NULL: addr is host
 * memory we mapped, else executor memory of handle exec_mem. All of it is
 * ours until then.
 */
static void mem_post(struct session *s, uint16_t type, uint32_t id, int reply_fd, void *addr,
		     uint64_t size, const struct exec_backend *ex, void *exec_mem, uint32_t flags)
{
	struct cmd_ctx *c = ctl_cmd_new(s, CMD_MR_ADD, type, id, done_mem);

	if (!c) {
		if (ex)
			ex->mem_release(exec_mem);
		else
			munmap(addr, size);
		if (reply_fd >= 0)
			close(reply_fd);
		ctl_reply_status(s, type, id, -EBUSY);
		return;
	}
	c->cmd.u.mr.reply_fd = reply_fd;
	c->cmd.u.mr.addr = addr;
	c->cmd.u.mr.size = size;
	c->cmd.u.mr.exec = ex;
	c->cmd.u.mr.exec_mem = exec_mem;
	c->cmd.u.mr.flags = flags;
	ctl_cmd_post(c);
}

/*
 * Device memory is allocated or imported by its executor, which may have to
 * wait for a quiesce window of the grids (milliseconds): mem_add queues it
 * on the executor's own thread, whose completion (mem_done_cb) queues it
 * here and wakes the loop (ctl_done_async). The session stays allocated
 * meanwhile (pending).
 */
struct dev_mem {
	struct dev_mem *next;
	struct session *s;
	const struct exec_backend *ex;
	uint16_t type;
	uint32_t id;
	int r;
	struct exec_mem m;
};

static pthread_mutex_t mem_done_lock = PTHREAD_MUTEX_INITIALIZER;
static struct dev_mem *mem_done_head; /* completions the loop has not taken */
static int mem_done_closed;           /* ctl_fini() ran: nobody takes them */

/* Lets go of what a completion brought when nobody will use it. */
static void dev_mem_drop(struct dev_mem *d)
{
	if (d->r == 0) {
		d->ex->mem_release(d->m.handle);
		if (d->m.fd >= 0)
			close(d->m.fd);
	}
}

/* The executor's thread. */
static void mem_done_cb(void *arg, int result, const struct exec_mem *m)
{
	struct dev_mem *d = arg;

	d->r = result;
	if (result == 0)
		d->m = *m;
	pthread_mutex_lock(&mem_done_lock);
	if (mem_done_closed) {
		pthread_mutex_unlock(&mem_done_lock);
		dev_mem_drop(d);
		free(d);
		return;
	}
	d->next = mem_done_head;
	mem_done_head = d;
	/* Under the lock: ctl_fini() cannot close the handle in between. */
	uv_async_send(&ctl_done_async);
	pthread_mutex_unlock(&mem_done_lock);
}

static void dev_mem_finish(struct dev_mem *d)
{
	struct session *s = d->s;

	s->pending--;
	if (s->closed) {
		/* Nobody to tell: the memory goes back at once. */
		dev_mem_drop(d);
		ctl_session_maybe_free(s);
	} else if (d->r < 0) {
		ctl_reply_status(s, d->type, d->id, d->r);
	} else {
		mem_post(s, d->type, d->id, d->m.fd, (void *)(uintptr_t)d->m.addr, d->m.size, d->ex,
			 d->m.handle, d->m.flags);
	}
	free(d);
}

/* Loop thread: takes the completions, oldest first. */
void ctl_run_mem_done(void)
{
	struct dev_mem *list, *rev = NULL, *next;

	pthread_mutex_lock(&mem_done_lock);
	list = mem_done_head;
	mem_done_head = NULL;
	pthread_mutex_unlock(&mem_done_lock);
	for (; list; list = next) {
		next = list->next;
		list->next = rev;
		rev = list;
	}
	for (; rev; rev = next) {
		next = rev->next;
		dev_mem_finish(rev);
	}
}

static void handle_dev_mem(struct session *s, const struct collc_msg_hdr *h, const void *payload,
			   int nfds)
{
	const struct collc_msg_mem *q = payload;
	const struct exec_backend *ex = exec_for_device(q->device);
	struct dev_mem *d;
	int r;

	if (!ex || !ex->mem_add) {
		ctl_reply_status(s, h->type, h->id, -ENODEV);
		return;
	}
	/* The IPC handle travels in the payload since wire version 2: no fd. */
	if (nfds) {
		ctl_reply_status(s, h->type, h->id, -EBADF);
		return;
	}
	if (s->pending >= MAX_PENDING_CMDS || !(d = calloc(1, sizeof(*d)))) {
		ctl_reply_status(s, h->type, h->id, -EBUSY);
		return;
	}
	d->s = s;
	d->ex = ex;
	d->type = h->type;
	d->id = h->id;
	r = ex->mem_add(h->type, payload, h->length, mem_done_cb, d);
	if (r < 0) {
		free(d);
		ctl_reply_status(s, h->type, h->id, r);
		return;
	}
	s->pending++;
}

void ctl_handle_mem(struct session *s, const struct collc_msg_hdr *h, const void *payload, int *fds,
		    int nfds)
{
	const struct collc_msg_mem *q = payload;
	struct stat st;
	void *addr;
	int fd = -1, reply_fd = -1, r;

	if (q->flags || q->size == 0 || q->size > MAX_MEM_BYTES) {
		ctl_reply_status(s, h->type, h->id, -EINVAL);
		return;
	}
	if (q->device != -1) {
		handle_dev_mem(s, h, payload, nfds);
		return;
	}
	if (h->type == COLLC_MSG_MEM_ALLOC) {
		r = ctl_make_memfd("collc-mem", q->size, F_SEAL_SEAL, &fd, &addr);
		if (r < 0) {
			ctl_reply_status(s, h->type, h->id, r);
			return;
		}
	} else {
		if (nfds != 1) {
			ctl_reply_status(s, h->type, h->id, -EBADF);
			return;
		}
		/* Sealed against shrinking first: the client can never pull pages from under us. */
		if (fcntl(fds[0], F_ADD_SEALS, F_SEAL_SHRINK) < 0 || fstat(fds[0], &st) < 0 ||
		    !S_ISREG(st.st_mode) || (uint64_t)st.st_size < q->size) {
			ctl_reply_status(s, h->type, h->id, -EINVAL);
			return;
		}
		addr = mmap(NULL, q->size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
		if (addr == MAP_FAILED) {
			ctl_reply_status(s, h->type, h->id, -errno);
			return;
		}
		/* The mapping keeps the memory; the fd (closed by the caller) is not needed. */
	}
	reply_fd = fd;
	mem_post(s, h->type, h->id, reply_fd, addr, q->size, NULL, NULL, 0);
}

/* ctl_fini(): completions from now on release what they bring; those queued go now. */
void ctl_mem_fini(void)
{
	pthread_mutex_lock(&mem_done_lock);
	mem_done_closed = 1;
	pthread_mutex_unlock(&mem_done_lock);
	/* Completions that came in before: their sessions are closed, their memory goes back. */
	ctl_run_mem_done();
}
