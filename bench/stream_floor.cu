/* SPDX-License-Identifier: MIT */
/*
 * collc-stream-floor: the floors under a stream-ordered collective on one
 * GPU, with no collc code in the way. A resident kernel stands in for the
 * grid (one thread polling a word); a host thread stands in for collcd's
 * scheduler. Each mode enqueues on one stream what a stream collective's
 * signalling needs and nothing else:
 *
 *   memops        write a device word, wait for it (the two stream memory
 *                 operations alone)
 *   host-hop      write go to mapped host memory; a host thread sees it and
 *                 writes a host word the kernel polls; the kernel stores the
 *                 device word the stream waits on (collcd's path today)
 *   device-go     write go to device memory; the kernel polls it and stores
 *                 the word the stream waits on (the grid watching go)
 *   host-go       write go to mapped host memory; the kernel polls it there
 *                 (the grid watching the gate's go in the client's region)
 *   launch        one kernel launch that stores the word (NCCL's way)
 *
 * p50: enqueue + cudaStreamSynchronize; b2b: back to back on the stream,
 * timed by CUDA events.
 *
 * Then the release: how long after the host writes a word in mapped host
 * memory does a stream that waits for it go on, as a function of how long
 * it has waited (D). The stream waits (cuStreamWaitValue32) and then
 * writes a second host word; the host writes the first D us after the
 * enqueue and times until it sees the second. The same with a one-thread
 * kernel spinning on the word instead of the wait (the gate kernel's way).
 * Every stream collective ends with such a wait for its done word.
 *
 * Usage: collc-stream-floor [iterations [fine]] (fine: D every microsecond
 * from 0 to 40; bench/RESULTS.md, "Gated items",
 * "The stream's wait").
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#define CK(x)                                                                                      \
	do {                                                                                       \
		cudaError_t e_ = (x);                                                              \
		if (e_ != cudaSuccess) {                                                           \
			fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__,                         \
				cudaGetErrorString(e_));                                           \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)
#define CD(x)                                                                                      \
	do {                                                                                       \
		CUresult r_ = (x);                                                                 \
		if (r_ != CUDA_SUCCESS) {                                                          \
			fprintf(stderr, "%s:%d: CUDA driver error %d\n", __FILE__, __LINE__,       \
				(int)r_);                                                          \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

enum { M_MEMOPS, M_HOST_HOP, M_DEVICE_GO, M_HOST_GO, M_LAUNCH, M_N };
static const char *const names[M_N] = { "memops", "host-hop", "device-go", "host-go", "launch" };

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* The grid's stand-in: stores each new value of src into sig. */
__global__ void resident(volatile uint32_t *src, volatile uint32_t *sig, volatile uint32_t *quit)
{
	uint32_t seen = 0;

	if (threadIdx.x)
		return;
	while (!*quit) {
		uint32_t v = *src;

		if (v != seen) {
			seen = v;
			__threadfence_system();
			*sig = v;
		}
	}
}

/* The gate kernel's way of waiting: spin on the word, then store. */
__global__ void spin_store(volatile uint32_t *go, volatile uint32_t *done, uint32_t v)
{
	if (threadIdx.x)
		return;
	while ((int32_t)(*go - v) < 0)
		;
	__threadfence_system();
	*done = v;
}

__global__ void store(volatile uint32_t *sig, uint32_t v)
{
	if (!threadIdx.x)
		*sig = v;
}

static volatile uint32_t *h_go, *h_fifo, *h_quit;
static volatile int host_stop;

/* collcd's stand-in: forwards each new go to the word the kernel polls. */
static void *host_hop(void *arg)
{
	uint32_t seen = 0;

	(void)arg;
	while (!host_stop) {
		uint32_t v = *h_go;

		if (v != seen) {
			seen = v;
			__sync_synchronize();
			*h_fifo = v;
		}
	}
	return NULL;
}

/*
 * The release after a wait of D us (the header): for each D, p50 and p90
 * of host store -> the stream's (or the kernel's) store seen by the host.
 */
static void release(cudaStream_t s, int iters, uint32_t *hbuf, uint32_t *dbuf, int fine)
{
	std::vector<int> delays = { 0, 2, 5, 10, 20, 50, 100 };
	volatile uint32_t *go = hbuf + 96, *done = hbuf + 128;
	const CUdeviceptr d_go = (CUdeviceptr)(dbuf + 96), d_done = (CUdeviceptr)(dbuf + 128);
	uint32_t v = 0;

	if (fine) { /* every microsecond to 40: the wait's period shows */
		delays.resize(41);
		for (int d = 0; d <= 40; d++)
			delays[d] = d;
	}
	printf("# release: host store -> the waiter's store seen by the host, after the waiter "
	       "waited D us; %d iterations each\n",
	       iters);
	printf("# %6s  %21s  %21s\n", "D(us)", "stream wait p50/p90", "spin kernel p50/p90");
	*go = *done = 0;
	for (const int dl : delays) {
		std::vector<double> lat[2];

		for (int how = 0; how < 2; how++) {
			for (int i = 0; i < iters + 20; i++) {
				double t0, tw;

				v++;
				t0 = now_us();
				if (how == 0) {
					CD(cuStreamWaitValue32((CUstream)s, d_go, v,
							       CU_STREAM_WAIT_VALUE_GEQ));
					CD(cuStreamWriteValue32((CUstream)s, d_done, v, 0));
				} else {
					spin_store<<<1, 32, 0, s>>>((uint32_t *)d_go,
								    (uint32_t *)d_done, v);
				}
				while (now_us() - t0 < dl)
					;
				tw = now_us();
				__sync_synchronize();
				*go = v;
				while (*done != v)
					;
				if (i >= 20)
					lat[how].push_back(now_us() - tw);
			}
			CK(cudaStreamSynchronize(s));
			std::sort(lat[how].begin(), lat[how].end());
		}
		printf("  %6d  %9.2f / %9.2f  %9.2f / %9.2f\n", dl, lat[0][lat[0].size() / 2],
		       lat[0][lat[0].size() * 9 / 10], lat[1][lat[1].size() / 2],
		       lat[1][lat[1].size() * 9 / 10]);
	}
}

int main(int argc, char **argv)
{
	const int iters = argc > 1 ? atoi(argv[1]) : 2000;
	uint32_t *hbuf, *dmem, *d_go_h, *d_fifo_h, *d_quit_h, v = 0;
	cudaStream_t ks, s;
	cudaEvent_t e0, e1;

	if (iters < 10) {
		fprintf(stderr, "usage: collc-stream-floor [iterations >= 10 [fine]]\n");
		return 2;
	}
	CK(cudaSetDevice(0));
	CD(cuInit(0));
	CK(cudaHostAlloc((void **)&hbuf, 4096, cudaHostAllocMapped));
	memset(hbuf, 0, 4096);
	h_go = hbuf;
	h_fifo = hbuf + 32;
	h_quit = hbuf + 64;
	CK(cudaHostGetDevicePointer((void **)&d_go_h, hbuf, 0));
	d_fifo_h = d_go_h + 32;
	d_quit_h = d_go_h + 64;
	CK(cudaMalloc((void **)&dmem, 4096));
	CK(cudaStreamCreateWithFlags(&ks, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	printf("# collc-stream-floor: %d iterations per mode; p50 = enqueue + synchronize, "
	       "b2b = back to back (CUDA events)\n",
	       iters);
	for (int mode = 0; mode < M_N; mode++) {
		/* Device words 128 bytes apart: go, the word the stream waits on. */
		uint32_t *d_go = dmem, *d_sig = dmem + 32;
		const CUstream cs = (CUstream)s;
		std::vector<double> lat;
		pthread_t th;
		float ms;

		CK(cudaMemset(dmem, 0, 4096));
		CK(cudaDeviceSynchronize());
		v = 0;
		*h_go = *h_fifo = *h_quit = 0;
		if (mode == M_HOST_HOP) {
			host_stop = 0;
			pthread_create(&th, NULL, host_hop, NULL);
		}
		if (mode == M_HOST_HOP || mode == M_DEVICE_GO || mode == M_HOST_GO)
			resident<<<1, 32, 0, ks>>>(mode == M_HOST_HOP  ? d_fifo_h
						   : mode == M_HOST_GO ? d_go_h
								       : d_go,
						   d_sig, d_quit_h);
		usleep(20000);
		/* Where the stream writes go, and the word it then waits for. */
		const CUdeviceptr go_at =
			(CUdeviceptr)(mode == M_HOST_HOP || mode == M_HOST_GO ? d_go_h : d_go);
		const CUdeviceptr wait_at = (CUdeviceptr)(mode == M_MEMOPS ? d_go : d_sig);
		auto one = [&](void) {
			v++;
			if (mode == M_LAUNCH) {
				store<<<1, 32, 0, s>>>(d_sig, v);
				return;
			}
			CD(cuStreamWriteValue32(cs, go_at, v, 0));
			CD(cuStreamWaitValue32(cs, wait_at, v, CU_STREAM_WAIT_VALUE_GEQ));
		};
		for (int i = 0; i < 200; i++)
			one();
		CK(cudaStreamSynchronize(s));
		for (int i = 0; i < iters; i++) {
			const double t0 = now_us();

			one();
			CK(cudaStreamSynchronize(s));
			lat.push_back(now_us() - t0);
		}
		CK(cudaEventRecord(e0, s));
		for (int i = 0; i < iters; i++)
			one();
		CK(cudaEventRecord(e1, s));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		std::sort(lat.begin(), lat.end());
		printf("%-10s p50 %7.2f us  p90 %7.2f us  b2b %6.2f us\n", names[mode],
		       lat[lat.size() / 2], lat[lat.size() * 9 / 10], ms * 1000.0 / iters);
		*h_quit = 1;
		CK(cudaStreamSynchronize(ks));
		if (mode == M_HOST_HOP) {
			host_stop = 1;
			pthread_join(th, NULL);
		}
	}
	release(s, iters, hbuf, d_go_h, argc > 2 && !strcmp(argv[2], "fine"));
	return 0;
}
