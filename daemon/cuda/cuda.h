/* SPDX-License-Identifier: MIT */
/*
 * The CUDA executor's entry points for the registry (exec.c); everything else
 * goes through struct exec_backend. Without CUDA, cuda/stub.c answers -ENODEV.
 */
#ifndef COLLCD_EXEC_CUDA_H
#define COLLCD_EXEC_CUDA_H

#include "daemon/exec.h"

/* 1 when the CUDA executor was built in and a GPU is present. */
int exec_cuda_available(void);
/* -EPERM: init->require_mps and a GPU not served by MPS. */
int exec_cuda_init(const struct exec_init *init, const struct exec_backend **ret);

#endif
