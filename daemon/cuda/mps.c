/* SPDX-License-Identifier: MIT */
/*
 * The CUDA executor's MPS check: without MPS, client kernels time-slice with
 * the resident grids; --require-mps refuses to start then.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/cuda/internal.h"
#include "daemon/log.h"

/* Is an nvidia-cuda-mps-server process running (it starts for our context)? */
static int mps_server_running(void)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	int found = 0;

	if (!d)
		return 0;
	while (!found && (e = readdir(d))) {
		char path[300], buf[256];
		ssize_t n;
		int fd;

		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n > 0) {
			buf[n] = '\0';
			found = strstr(buf, "nvidia-cuda-mps-server") != NULL;
		}
	}
	closedir(d);
	return found;
}

int cuda_mps_check(void)
{
	const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
	char path[512];
	struct stat st;
	int pipe_ok, server;

	snprintf(path, sizeof(path), "%s/control", dir ? dir : "/tmp/nvidia-mps");
	pipe_ok = stat(path, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode));
	server = mps_server_running();
	if (pipe_ok && server) {
		log_info("MPS: the MPS control daemon serves these GPUs (%s)", path);
		return 0;
	}
	if (require_mps) {
		log_err("MPS: %s (%s); --require-mps: refusing to start",
			pipe_ok ? "an MPS control daemon exists but no MPS server serves collcd"
				: "no MPS control daemon (start nvidia-cuda-mps-control -d)",
			path);
		return -EPERM;
	}
	log_warn("MPS: %s (%s): client kernels will time-slice with the resident grids (measured "
		 "2.2x slower); start nvidia-cuda-mps-control -d before collcd",
		 pipe_ok ? "an MPS control daemon exists but no MPS server serves collcd"
			 : "no MPS control daemon found",
		 path);
	return 0;
}
