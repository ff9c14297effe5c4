/* SPDX-License-Identifier: MIT */
/*
 * Results: collc's -errno as ncclResult_t, the last error text, the version
 * and the error strings. Nothing prints on success; NCCL_DEBUG=WARN (or INFO,
 * TRACE) prints each failure once on stderr, as NCCL's WARN lines do.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "nccl/internal.h"

static __thread char last_error[512];
/* The process's latest, for a thread that asks about another's failure (a watchdog). */
static char last_error_any[512];
static pthread_mutex_t last_lock = PTHREAD_MUTEX_INITIALIZER;

static int debug_warn(void)
{
	static int level = -1;
	const char *s;

	if (level < 0) {
		s = getenv("NCCL_DEBUG");
		level = s && (!strcasecmp(s, "WARN") || !strcasecmp(s, "INFO") ||
			      !strcasecmp(s, "TRACE"));
	}
	return level;
}

ncclResult_t collc__nccl_fail(ncclResult_t res, const char *call, const char *fmt, ...)
{
	va_list ap;
	int n;

	n = snprintf(last_error, sizeof(last_error), "%s: ", call);
	if (n < 0 || (size_t)n >= sizeof(last_error))
		n = 0;
	va_start(ap, fmt);
	vsnprintf(last_error + n, sizeof(last_error) - n, fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&last_lock);
	memcpy(last_error_any, last_error, sizeof(last_error_any));
	pthread_mutex_unlock(&last_lock);
	if (debug_warn())
		fprintf(stderr, "collc-nccl WARN %s (%s)\n", last_error, ncclGetErrorString(res));
	return res;
}

ncclResult_t collc__nccl_result_of(int err)
{
	switch (err) {
	case 0:
		return ncclSuccess;
	case -EINVAL:
	case -ERANGE:
	case -EOVERFLOW:
		return ncclInvalidArgument;
	case -EOPNOTSUPP:
	case -ECANCELED:
	case -EEXIST:
	case -EBUSY:
		return ncclInvalidUsage;
	case -EPIPE:
	case -ECONNRESET:
	case -ETIMEDOUT:
	case -EHOSTUNREACH:
		return ncclRemoteError;
	case -EPROTO:
	case -EBADMSG:
		return ncclInternalError;
	default:
		/* -ENOMEM, -ENOENT / -ECONNREFUSED (no collcd), -ENODEV, -EACCES, ... */
		return ncclSystemError;
	}
}

ncclResult_t collc__nccl_errno(int err, const char *call, const char *what)
{
	return collc__nccl_fail(collc__nccl_result_of(err), call, "%s: %s (collc %d)", what,
				collc_strerror(err), err);
}

ncclResult_t collc__nccl_check_comm(const struct ncclComm *comm, const char *call)
{
	if (!comm)
		return collc__nccl_fail(ncclInvalidArgument, call, "comm is NULL");
	if (comm->magic != SHIM_COMM_MAGIC)
		return collc__nccl_fail(ncclInvalidArgument, call,
					"comm is not a live communicator of this library");
	if (comm->init_result == ncclInProgress)
		return collc__nccl_fail(ncclInvalidUsage, call,
					"comm is initialized by ncclGroupEnd, not yet called");
	if (comm->init_result != ncclSuccess)
		return collc__nccl_fail(ncclInvalidUsage, call, "comm failed to initialize");
	return ncclSuccess;
}

int collc__nccl_dtype(ncclDataType_t t, collc_dtype *ret)
{
	static const collc_dtype map[ncclNumTypes] = {
		[ncclInt8] = COLLC_INT8,
		[ncclUint8] = COLLC_UINT8,
		[ncclInt32] = COLLC_INT32,
		[ncclUint32] = COLLC_UINT32,
		[ncclInt64] = COLLC_INT64,
		[ncclUint64] = COLLC_UINT64,
		[ncclFloat16] = COLLC_FLOAT16,
		[ncclFloat32] = COLLC_FLOAT32,
		[ncclFloat64] = COLLC_FLOAT64,
		[ncclBfloat16] = COLLC_BFLOAT16,
		[ncclFloat8e4m3] = COLLC_FLOAT8_E4M3,
		[ncclFloat8e5m2] = COLLC_FLOAT8_E5M2,
	};

	if ((unsigned)t >= ncclNumTypes)
		return -EINVAL;
	*ret = map[t];
	return 0;
}

SHIM_EXPORT ncclResult_t ncclGetVersion(int *version)
{
	if (!version)
		return collc__nccl_fail(ncclInvalidArgument, "ncclGetVersion", "version is NULL");
	*version = NCCL_VERSION_CODE;
	return ncclSuccess;
}
SHIM_ALIAS(ncclGetVersion);

SHIM_EXPORT const char *ncclGetErrorString(ncclResult_t result)
{
	switch (result) {
	case ncclSuccess:
		return "no error";
	case ncclUnhandledCudaError:
		return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
	case ncclSystemError:
		return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
	case ncclInternalError:
		return "internal error (run with NCCL_DEBUG=WARN for details)";
	case ncclInvalidArgument:
		return "invalid argument (run with NCCL_DEBUG=WARN for details)";
	case ncclInvalidUsage:
		return "invalid usage (run with NCCL_DEBUG=WARN for details)";
	case ncclRemoteError:
		return "remote process exited or there was a network error";
	case ncclInProgress:
		return "NCCL operation in progress";
	default:
		return "unknown result code";
	}
}
SHIM_ALIAS(ncclGetErrorString);

/*
 * The calling thread's last error, else the process's, whichever communicator
 * (comm may be NULL, as in NCCL).
 */
SHIM_EXPORT const char *ncclGetLastError(ncclComm_t comm)
{
	if (last_error[0])
		return last_error;
	pthread_mutex_lock(&last_lock);
	memcpy(last_error, last_error_any, sizeof(last_error));
	pthread_mutex_unlock(&last_lock);
	return last_error;
}
SHIM_ALIAS(ncclGetLastError);
