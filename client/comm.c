/* SPDX-License-Identifier: MIT */
/* libcollc's communicators: the unique id, joining, leaving, aborting, the timeout. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "client/gpu.h"
#include "client/internal.h"
#include "proto/work.h"

int collc_get_unique_id(struct collc_ctx *ctx, struct collc_unique_id *ret_id)
{
	struct collc_uid uid = { .magic = COLLC_UID_MAGIC, .version = COLLC_UID_VERSION_LOCAL };

	if (!ctx || !ret_id)
		return -EINVAL;
	memcpy(uid.node_id, ctx->node_id, sizeof(uid.node_id));
	if (getrandom(uid.nonce, sizeof(uid.nonce), 0) != sizeof(uid.nonce))
		return -errno ? -errno : -EIO;
	if (ctx->net_family) {
		/* A listening collcd: ranks on other daemons can join it with the secret. */
		uid.version = COLLC_UID_VERSION_NET;
		uid.net_family = ctx->net_family;
		uid.net_port = ctx->net_port;
		memcpy(uid.net_addr, ctx->net_addr, sizeof(uid.net_addr));
		if (getrandom(uid.secret, sizeof(uid.secret), 0) != sizeof(uid.secret))
			return -errno ? -errno : -EIO;
	}
	memcpy(ret_id->bytes, &uid, sizeof(uid));
	return 0;
}

int collc_comm_init(struct collc_ctx *ctx, const struct collc_unique_id *id, int nranks, int rank,
		    int device, struct collc_comm **ret_comm)
{
	struct collc_msg_comm_init q = { 0 };
	struct collc_msg_comm_reply cr;
	struct collc_comm *comm;
	struct ctl_reply rep;
	int r;

	if (!ctx || !id || !ret_comm || nranks < 1 || nranks > (int)COLLC_MAX_RANKS || rank < 0 ||
	    rank >= nranks || device < -1)
		return -EINVAL;
	memcpy(&q.uid, id->bytes, sizeof(q.uid));
	if (q.uid.magic != COLLC_UID_MAGIC)
		return -EINVAL;
	if (device >= 0 && !(ctx->backend & COLLC_BACKEND_CUDA))
		return -ENODEV;
	q.nranks = (uint32_t)nranks;
	q.rank = (uint32_t)rank;
	q.device = device;
	/* collcd sees other ordinals (CUDA_VISIBLE_DEVICES): it places ranks by UUID. */
	if (device >= 0 && collc__gpu_uuid(device, q.device_uuid) < 0)
		return -ENODEV;
	comm = calloc(1, sizeof(*comm));
	if (!comm)
		return -ENOMEM;
	r = collc__request(ctx, COLLC_MSG_COMM_INIT, &q, sizeof(q), -1, &rep);
	if (r == 0) {
		r = rep.status;
		collc__reply_body(&rep, &cr, sizeof(cr));
		ctl_reply_free(&rep);
	}
	if (r < 0) {
		free(comm);
		return r;
	}
	comm->ctx = ctx;
	comm->handle = cr.comm;
	comm->comm_id = cr.comm_id;
	comm->nranks = nranks;
	comm->rank = rank;
	comm->device = device;
	/*
	 * The stream forms' setup (the gates mapped, the device words), now
	 * rather than at the first stream call, which may be inside a capture or
	 * a group. A failure here shows again at that call.
	 */
	if (device >= 0)
		collc__stream_prepare(ctx, device);
	*ret_comm = comm;
	return 0;
}

static int comm_ref(struct collc_comm *comm, uint16_t type)
{
	struct collc_msg_comm_ref q = { .comm = comm->handle };

	return collc__request_status(comm->ctx, type, &q, sizeof(q));
}

int collc_comm_destroy(struct collc_comm *comm)
{
	int r;

	if (!comm)
		return -EINVAL;
	r = comm_ref(comm, COLLC_MSG_COMM_DESTROY);
	collc__stream_comm_gone(comm);
	/* The handle is gone either way: a lost collcd has dropped it already. */
	free(comm);
	return r == -ECONNRESET ? 0 : r;
}

int collc_comm_abort(struct collc_comm *comm)
{
	if (!comm)
		return -EINVAL;
	return comm_ref(comm, COLLC_MSG_COMM_ABORT);
}

int collc_comm_set_timeout(struct collc_comm *comm, int timeout_ms)
{
	struct collc_msg_comm_timeout q;

	if (!comm || timeout_ms < -1)
		return -EINVAL;
	q.comm = comm->handle;
	q.timeout_ms = timeout_ms < 0 ? UINT32_MAX : (uint32_t)timeout_ms;
	return collc__request_status(comm->ctx, COLLC_MSG_COMM_TIMEOUT, &q, sizeof(q));
}

int collc_comm_rank(const struct collc_comm *comm)
{
	return comm ? comm->rank : -EINVAL;
}

int collc_comm_nranks(const struct collc_comm *comm)
{
	return comm ? comm->nranks : -EINVAL;
}
