/* SPDX-License-Identifier: MIT */
/* libcollc's GPU helpers (gpu.c): -ENODEV where no CUDA driver is present. */
#ifndef COLLC_CLIENT_GPU_H
#define COLLC_CLIENT_GPU_H

#include <stddef.h>
#include <stdint.h>

/* The UUID of device ordinal `device` in this process's view. */
int collc__gpu_uuid(int device, uint8_t uuid[16]);
/* Maps size bytes of the VMM allocation behind fd for device; the caller closes fd. */
int collc__gpu_map(int device, int fd, size_t size, uintptr_t *ret_ptr);
void collc__gpu_unmap(uintptr_t ptr, size_t size);
/* The IPC handle of the allocation holding ptr, and ptr's offset in it. */
int collc__gpu_ipc(int device, uintptr_t ptr, uint8_t handle[64], uint64_t *ret_offset,
		   uint64_t *ret_alloc_size);
/* The driver's id of the allocation holding ptr: never reused within this process. */
int collc__gpu_buffer_id(uintptr_t ptr, uint64_t *ret_id);

/* Maps host memory p (page aligned) into the GPUs' address space: its device address. */
int collc__gpu_host_map(int device, void *p, size_t size, uint64_t *ret_dev);
void collc__gpu_host_unmap(void *p);
/* The device ordinal of a stream's context (NULL: the current context's). */
int collc__gpu_stream_device(void *stream, int *ret_device);
/* 1 when stream is being captured into a graph, 0 when not, <0 on error. */
int collc__gpu_capturing(void *stream);
/* Stores val in the n 32-bit words at device address addr, from a private stream; waits. */
int collc__gpu_poke(int device, uint64_t addr, uint32_t val, size_t n);
/*
 * The path of device's stream gates (COLLC_STREAM_PATH_*), chosen once per
 * device; with the kernel path, the gate kernel is loaded into the device's
 * primary context. -errno as collc_comm_get_stream_path() says.
 */
int collc__gpu_stream_path(int device);
/*
 * collc__gpu_stream_path(device), with the gate kernel also loaded into
 * stream's context where that path needs it; a context first met while
 * capturing gets -EOPNOTSUPP (nothing is loaded inside a capture).
 */
int collc__gpu_stream_ready(void *stream, int device, int capturing);
/*
 * Enqueues on stream (of device, readied by collc__gpu_stream_ready()):
 * write go_val to go, wait until done reaches done_val (cyclic >=; with rearm
 * ==) and with rearm clear done again (device addresses). Stream memory
 * operations or one gate kernel launch, as the device's path says.
 */
int collc__gpu_stream_gate(void *stream, int device, uint64_t go, uint32_t go_val, uint64_t done,
			   uint32_t done_val, int rearm);
/*
 * The two halves of collc__gpu_stream_gate() without rearm, on the memops
 * path only (-EOPNOTSUPP on the kernel path, whose one launch does both):
 * the write of go, and the wait for done (cyclic >=).
 */
int collc__gpu_stream_go(void *stream, int device, uint64_t go, uint32_t go_val);
int collc__gpu_stream_wait(void *stream, int device, uint64_t done, uint32_t done_val);

#endif
