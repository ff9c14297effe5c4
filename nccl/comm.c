/* SPDX-License-Identifier: MIT */
/*
 * Communicators: ncclUniqueId is collc's unique id (both 128 bytes), and each
 * ncclComm is a collc communicator on a collcd connection of its own, so two
 * ranks in one process (ncclCommInitAll, one thread per GPU) work. collc's
 * init blocks until every rank joined: inits called inside a group run at the
 * outermost ncclGroupEnd, one thread each (coll.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "nccl/internal.h"

_Static_assert(sizeof(ncclUniqueId) == sizeof(struct collc_unique_id),
	       "ncclUniqueId carries a collc unique id");

SHIM_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
	struct collc_unique_id id;
	struct collc_ctx *ctx;
	int r;

	if (!uniqueId)
		return collc__nccl_fail(ncclInvalidArgument, "ncclGetUniqueId", "uniqueId is NULL");
	r = collc_connect(NULL, &ctx);
	if (r < 0)
		return collc__nccl_errno(r, "ncclGetUniqueId", "cannot connect to collcd");
	r = collc_get_unique_id(ctx, &id);
	collc_disconnect(ctx);
	if (r < 0)
		return collc__nccl_errno(r, "ncclGetUniqueId", "collcd gave no unique id");
	memcpy(uniqueId, &id, sizeof(id));
	return ncclSuccess;
}
SHIM_ALIAS(ncclGetUniqueId);

ncclResult_t collc__nccl_comm_join(struct ncclComm *comm, const char *call)
{
	int r;

	if (comm->device < 0)
		return collc__nccl_fail(ncclUnhandledCudaError, call,
					"a communicator needs a CUDA device: %s", collc__cu_why());
	r = collc_connect(NULL, &comm->ctx);
	if (r < 0)
		return collc__nccl_errno(r, call, "cannot connect to collcd");
	r = collc_comm_init(comm->ctx, (const struct collc_unique_id *)&comm->id, comm->nranks,
			    comm->rank, comm->device, &comm->cc);
	if (r < 0) {
		collc_disconnect(comm->ctx);
		comm->ctx = NULL;
		return collc__nccl_errno(r, call, "collcd refused the communicator");
	}
	return ncclSuccess;
}

static void comm_free(struct ncclComm *comm)
{
	if (comm->ctx)
		collc__nccl_stages_free(comm);
	collc__nccl_side_free(comm);
	collc__nccl_regs_free(comm);
	if (comm->ctx)
		collc_disconnect(comm->ctx);
	pthread_mutex_destroy(&comm->lock);
	comm->magic = 0;
	free(comm);
}

static ncclResult_t check_config(const ncclConfig_t *config, const char *call)
{
	if (!config)
		return ncclSuccess;
	/* NCCL refuses a config not set up by NCCL_CONFIG_INITIALIZER the same way. */
	if (config->magic != 0xcafebeef || config->size < offsetof(ncclConfig_t, cgaClusterSize))
		return collc__nccl_fail(ncclInvalidArgument, call,
					"config was not initialized with NCCL_CONFIG_INITIALIZER");
	return ncclSuccess;
}

static ncclResult_t comm_init(ncclComm_t *ret_comm, int nranks, const ncclUniqueId *id, int rank,
			      ncclConfig_t *config, const char *call)
{
	struct ncclComm *comm;
	ncclResult_t res;
	int device, r;

	if (!ret_comm)
		return collc__nccl_fail(ncclInvalidArgument, call, "comm is NULL");
	if (nranks < 1)
		return collc__nccl_fail(ncclInvalidArgument, call, "nranks %d is not positive",
					nranks);
	if (rank < 0 || rank >= nranks)
		return collc__nccl_fail(ncclInvalidArgument, call, "rank %d is not in [0, %d)",
					rank, nranks);
	res = check_config(config, call);
	if (res != ncclSuccess)
		return res;
	/* Inside a group the failure comes from ncclGroupEnd, as NCCL's init errors do. */
	r = collc__cu_current_device(&device);
	if (r < 0 && collc__nccl_group_depth() == 0)
		return collc__nccl_fail(ncclUnhandledCudaError, call,
					"a communicator needs a CUDA device: %s", collc__cu_why());
	if (r < 0)
		device = -1;
	comm = calloc(1, sizeof(*comm));
	if (!comm)
		return collc__nccl_fail(ncclSystemError, call, "out of memory");
	comm->magic = SHIM_COMM_MAGIC;
	comm->nranks = nranks;
	comm->rank = rank;
	comm->device = device;
	comm->id = *id;
	pthread_mutex_init(&comm->lock, NULL);
	if (collc__nccl_group_depth() > 0) {
		/* NCCL's contract: *comm is set now, the init runs at ncclGroupEnd. */
		comm->init_result = ncclInProgress;
		res = collc__nccl_group_add_init(comm);
		if (res != ncclSuccess) {
			comm_free(comm);
			return res;
		}
		*ret_comm = comm;
		return ncclSuccess;
	}
	res = collc__nccl_comm_join(comm, call);
	if (res != ncclSuccess) {
		comm_free(comm);
		return res;
	}
	*ret_comm = comm;
	return ncclSuccess;
}

SHIM_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId,
					  int rank)
{
	return comm_init(comm, nranks, &commId, rank, NULL, "ncclCommInitRank");
}
SHIM_ALIAS(ncclCommInitRank);

SHIM_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId,
						int rank, ncclConfig_t *config)
{
	return comm_init(comm, nranks, &commId, rank, config, "ncclCommInitRankConfig");
}
SHIM_ALIAS(ncclCommInitRankConfig);

/* Every rank holds all nId ids: the first names the communicator for all of them. */
SHIM_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank,
						  int nId, ncclUniqueId *commIds,
						  ncclConfig_t *config)
{
	if (nId < 1 || !commIds)
		return collc__nccl_fail(ncclInvalidArgument, "ncclCommInitRankScalable",
					"no unique id (nId %d)", nId);
	return comm_init(newcomm, nranks, &commIds[0], myrank, config, "ncclCommInitRankScalable");
}
SHIM_ALIAS(ncclCommInitRankScalable);

/* One rank per device of devlist (NULL: devices 0..ndev-1), all joined at once (a group). */
SHIM_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
	static const char call[] = "ncclCommInitAll";
	ncclUniqueId id;
	ncclResult_t res;
	int prev = 0, r;

	if (!comms)
		return collc__nccl_fail(ncclInvalidArgument, call, "comms is NULL");
	if (ndev < 1)
		return collc__nccl_fail(ncclInvalidArgument, call, "ndev %d is not positive", ndev);
	if (collc__nccl_group_depth() > 0)
		return collc__nccl_fail(ncclInvalidUsage, call, "not allowed inside a group");
	for (int i = 0; devlist && i < ndev; i++)
		if (devlist[i] < 0)
			return collc__nccl_fail(ncclInvalidArgument, call,
						"devlist[%d] = %d is no device", i, devlist[i]);
	r = collc__cu_current_device(&prev);
	if (r < 0)
		return collc__nccl_fail(ncclUnhandledCudaError, call,
					"a communicator needs a CUDA device: %s", collc__cu_why());
	res = ncclGetUniqueId(&id);
	if (res != ncclSuccess)
		return res;
	memset(comms, 0, sizeof(*comms) * (size_t)ndev);
	res = ncclGroupStart();
	for (int i = 0; res == ncclSuccess && i < ndev; i++) {
		res = comm_init(&comms[i], ndev, &id, i, NULL, call);
		if (res == ncclSuccess)
			comms[i]->device = devlist ? devlist[i] : i;
	}
	if (res != ncclSuccess) {
		/* The group runs none of the queued inits (they would wait for the missing rank). */
		collc__nccl_group_fail(res);
		ncclGroupEnd();
		for (int i = 0; i < ndev; i++)
			if (comms[i])
				ncclCommDestroy(comms[i]);
		memset(comms, 0, sizeof(*comms) * (size_t)ndev);
		return res;
	}
	res = ncclGroupEnd();
	if (res != ncclSuccess) {
		for (int i = 0; i < ndev; i++)
			ncclCommDestroy(comms[i]);
		memset(comms, 0, sizeof(*comms) * (size_t)ndev);
	}
	return res;
}
SHIM_ALIAS(ncclCommInitAll);

/* Stream-ordered calls need no host flush: what was enqueued completes on its streams. */
SHIM_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
	return collc__nccl_check_comm(comm, "ncclCommFinalize");
}
SHIM_ALIAS(ncclCommFinalize);

static ncclResult_t comm_end(ncclComm_t comm, int abort, const char *call)
{
	int r = 0;

	if (!comm)
		return ncclSuccess; /* NCCL: destroying NULL is a no-op */
	if (comm->magic != SHIM_COMM_MAGIC)
		return collc__nccl_fail(ncclInvalidArgument, call,
					"comm is not a live communicator of this library");
	if (collc__nccl_group_uses(comm))
		return collc__nccl_fail(ncclInvalidUsage, call,
					"the open group has calls on comm queued");
	if (comm->cc)
		r = abort ? collc_comm_abort(comm->cc) : collc_comm_destroy(comm->cc);
	if (abort && comm->cc)
		collc_comm_destroy(comm->cc);
	comm->cc = NULL;
	comm_free(comm);
	return r < 0 ? collc__nccl_errno(r, call, "collcd") : ncclSuccess;
}

SHIM_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	return comm_end(comm, 0, "ncclCommDestroy");
}
SHIM_ALIAS(ncclCommDestroy);

SHIM_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm)
{
	return comm_end(comm, 1, "ncclCommAbort");
}
SHIM_ALIAS(ncclCommAbort);

SHIM_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
	static const char call[] = "ncclCommGetAsyncError";
	int r;

	if (!asyncError)
		return collc__nccl_fail(ncclInvalidArgument, call, "asyncError is NULL");
	if (!comm || comm->magic != SHIM_COMM_MAGIC)
		return collc__nccl_check_comm(comm, call);
	/* Inits are blocking, so never ncclInProgress but for one a group has not run yet. */
	if (comm->init_result != ncclSuccess) {
		*asyncError = (ncclResult_t)comm->init_result;
		return ncclSuccess;
	}
	if (!collc_comm_get_async_error) {
		*asyncError = ncclSuccess; /* nothing stream-ordered can have run */
		return ncclSuccess;
	}
	r = collc_comm_get_async_error(comm->cc);
	*asyncError = r < 0 ? collc__nccl_errno(r, call, "a stream-ordered call failed")
			    : ncclSuccess;
	return ncclSuccess;
}
SHIM_ALIAS(ncclCommGetAsyncError);

/* The getters' checks: comm live, out (named name) not NULL. */
static ncclResult_t query_check(const ncclComm_t comm, const int *out, const char *call,
				const char *name)
{
	ncclResult_t res = collc__nccl_check_comm(comm, call);

	if (res == ncclSuccess && !out)
		res = collc__nccl_fail(ncclInvalidArgument, call, "%s is NULL", name);
	return res;
}

SHIM_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
	ncclResult_t res = query_check(comm, count, "ncclCommCount", "count");

	if (res == ncclSuccess)
		*count = comm->nranks;
	return res;
}
SHIM_ALIAS(ncclCommCount);

SHIM_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
	ncclResult_t res = query_check(comm, device, "ncclCommCuDevice", "device");

	if (res == ncclSuccess)
		*device = comm->device;
	return res;
}
SHIM_ALIAS(ncclCommCuDevice);

SHIM_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
	ncclResult_t res = query_check(comm, rank, "ncclCommUserRank", "rank");

	if (res == ncclSuccess)
		*rank = comm->rank;
	return res;
}
SHIM_ALIAS(ncclCommUserRank);

/* What each rank of a split tells the others (gathered in device memory: a GPU communicator). */
struct split_rec {
	int32_t color, key, rank, reserved;
	struct collc_unique_id id; /* the new communicator's, should this rank lead its color */
};

/* One allgather of every rank's split_rec over comm, through memory collcd exported. */
static ncclResult_t split_gather(struct ncclComm *comm, const struct split_rec *mine,
				 struct split_rec *all, const char *call)
{
	size_t bytes = sizeof(*mine) * (size_t)(comm->nranks + 1);
	collc_req req;
	char *p = NULL;
	int r;

	if (collc__cu_push_device(comm->device) < 0)
		return collc__nccl_fail(ncclUnhandledCudaError, call, "no context on device %d",
					comm->device);
	r = collc_mem_alloc(comm->ctx, bytes, comm->device, (void **)&p);
	if (r < 0)
		goto out;
	r = collc__cu_copy(p, mine, sizeof(*mine), 1);
	if (r == 0)
		r = collc_allgather(comm->cc, p, p + sizeof(*mine), sizeof(*mine), COLLC_UINT8,
				    &req);
	if (r == 0)
		r = collc_wait(comm->ctx, req, -1);
	if (r == 0)
		r = collc__cu_copy(all, p + sizeof(*mine), sizeof(*mine) * (size_t)comm->nranks, 0);
	collc_mem_free(comm->ctx, p);
out:
	collc__cu_pop();
	return r < 0 ? collc__nccl_errno(r, call, "gathering the ranks' colors") : ncclSuccess;
}

/*
 * Collective over comm: ranks of one color form a new communicator, ordered by
 * (key, rank in comm), named by a unique id its first rank made; every rank
 * makes one before the gather, so the split is a single collective.
 */
SHIM_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
				       ncclConfig_t *config)
{
	static const char call[] = "ncclCommSplit";
	struct split_rec mine = { 0 }, *all;
	ncclResult_t res = collc__nccl_check_comm(comm, call);
	int lead = -1, n = 0, rank = 0, r, prev = -1;

	if (res != ncclSuccess)
		return res;
	if (!newcomm)
		return collc__nccl_fail(ncclInvalidArgument, call, "newcomm is NULL");
	if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
		return collc__nccl_fail(ncclInvalidArgument, call, "color %d is negative", color);
	res = check_config(config, call);
	if (res != ncclSuccess)
		return res;
	if (collc__nccl_group_depth() > 0)
		return collc__nccl_fail(ncclInvalidUsage, call, "not supported inside a group");
	mine.color = color;
	mine.key = key;
	mine.rank = comm->rank;
	if (color != NCCL_SPLIT_NOCOLOR) {
		r = collc_get_unique_id(comm->ctx, &mine.id);
		if (r < 0)
			return collc__nccl_errno(r, call, "collcd gave no unique id");
	}
	all = calloc((size_t)comm->nranks, sizeof(*all));
	if (!all)
		return collc__nccl_fail(ncclSystemError, call, "out of memory");
	res = split_gather(comm, &mine, all, call);
	for (int q = 0; res == ncclSuccess && q < comm->nranks; q++) {
		if (all[q].rank != q)
			res = collc__nccl_fail(ncclInternalError, call, "rank %d sent rank %d", q,
					       all[q].rank);
		if (color == NCCL_SPLIT_NOCOLOR || all[q].color != color)
			continue;
		if (lead < 0)
			lead = q;
		n++;
		if (all[q].key < key || (all[q].key == key && q < comm->rank))
			rank++;
	}
	if (res == ncclSuccess && color == NCCL_SPLIT_NOCOLOR) {
		*newcomm = NULL;
	} else if (res == ncclSuccess) {
		/* The new communicator lives on the parent's device. */
		r = collc__cu_push_device(comm->device);
		if (r == 0 && collc__cu_current_device(&prev) == 0 && prev == comm->device)
			res = comm_init(newcomm, n, (const ncclUniqueId *)&all[lead].id, rank,
					config, call);
		else
			res = collc__nccl_fail(ncclUnhandledCudaError, call,
					       "no context on device %d", comm->device);
		if (r == 0)
			collc__cu_pop();
	}
	free(all);
	return res;
}
SHIM_ALIAS(ncclCommSplit);
