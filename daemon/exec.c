/* SPDX-License-Identifier: MIT */
/*
 * The executor registry: the one place, with the executors themselves, that
 * knows them by name. A new executor is a folder and one line in start().
 */
#include <errno.h>
#include <string.h>

#include "daemon/cpu/cpu.h"
#include "daemon/cuda/cuda.h"
#include "daemon/exec.h"
#include "daemon/log.h"

static const struct exec_backend *execs[EXEC_MAX];
static uint32_t nexecs;

int exec_start(const char *mode, const struct exec_init *init)
{
	const struct exec_backend *ex;
	int want_cpu = strcmp(mode, "cuda") != 0;
	int want_cuda = strcmp(mode, "cuda") == 0 ||
			(strcmp(mode, "auto") == 0 && exec_cuda_available());
	int r;

	if (strcmp(mode, "auto") && strcmp(mode, "cpu") && strcmp(mode, "cuda"))
		return -EINVAL;
	/* The CPU executor first: device -1 ranks and host memory are its own. */
	if (want_cpu) {
		r = exec_cpu_init(init, &ex);
		if (r < 0)
			return r;
		execs[nexecs++] = ex;
	}
	if (want_cuda) {
		r = exec_cuda_init(init, &ex);
		/* -EPERM: --require-mps and no MPS; never carry on without the GPUs then. */
		if (r < 0 && (strcmp(mode, "cuda") == 0 || r == -EPERM)) {
			exec_stop();
			return r;
		}
		if (r == 0)
			execs[nexecs++] = ex;
		else
			log_warn("CUDA executor unavailable (%s): host memory only", strerror(-r));
	}
	return 0;
}

void exec_stop(void)
{
	while (nexecs)
		execs[--nexecs]->fini();
}

uint32_t exec_count(void)
{
	return nexecs;
}

const struct exec_backend *exec_get(uint32_t i)
{
	return i < nexecs ? execs[i] : NULL;
}

uint32_t exec_backend_mask(void)
{
	uint32_t m = 0;

	for (uint32_t i = 0; i < nexecs; i++)
		m |= execs[i]->backend;
	return m;
}

const struct exec_backend *exec_for_device(int32_t device)
{
	for (uint32_t i = 0; i < nexecs; i++)
		if (execs[i]->caps & (device == -1 ? EXEC_CAP_HOST_RANKS : EXEC_CAP_DEVICE_RANKS))
			return execs[i];
	return NULL;
}
