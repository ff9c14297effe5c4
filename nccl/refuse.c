/* SPDX-License-Identifier: MIT */
/*
 * What nccl.h declares that collc does not do: each call fails with
 * ncclInvalidUsage and a last error naming it, never touching its outputs.
 * They are exported all the same, so that a program that loads the real
 * libnccl.so.2 too (LD_PRELOAD of this library) never hands a collc
 * communicator to the real NCCL. The host side of NCCL's device API
 * (nccl_device.h) calls that take a communicator are refused the same way.
 */
#define _GNU_SOURCE
#include "nccl/internal.h"

static ncclResult_t refuse(const char *call, const char *why)
{
	return collc__nccl_fail(ncclInvalidUsage, call, "not supported by collc: %s", why);
}

SHIM_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList,
					int excludeRanksCount, ncclComm_t *newcomm,
					ncclConfig_t *config, int shrinkFlags)
{
	return refuse("ncclCommShrink", "make the new communicator with ncclGetUniqueId and "
					"ncclCommInitRank");
}
SHIM_ALIAS(ncclCommShrink);

SHIM_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags)
{
	return refuse("ncclCommRevoke", "use ncclCommAbort");
}
SHIM_ALIAS(ncclCommRevoke);

SHIM_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
						  ncclDataType_t datatype,
						  ncclScalarResidence_t residence, ncclComm_t comm)
{
	return refuse("ncclRedOpCreatePreMulSum", "custom reduction operators");
}
SHIM_ALIAS(ncclRedOpCreatePreMulSum);

SHIM_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
	return refuse("ncclRedOpDestroy", "custom reduction operators");
}
SHIM_ALIAS(ncclRedOpDestroy);

SHIM_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo)
{
	return refuse("ncclGroupSimulateEnd", "no cost model; the group stays open");
}
SHIM_ALIAS(ncclGroupSimulateEnd);

/* nccl_device.h (C++ only): the arguments are never read. */
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const void *reqs, void *outDevComm);
ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const void *devComm);

SHIM_EXPORT ncclResult_t ncclDevCommCreate(ncclComm_t comm, const void *reqs, void *outDevComm)
{
	return refuse("ncclDevCommCreate", "NCCL's device API");
}
SHIM_ALIAS(ncclDevCommCreate);

SHIM_EXPORT ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const void *devComm)
{
	return refuse("ncclDevCommDestroy", "NCCL's device API");
}
SHIM_ALIAS(ncclDevCommDestroy);
