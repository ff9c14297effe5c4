/* SPDX-License-Identifier: MIT */
#ifndef COLLCD_CONTROL_H
#define COLLCD_CONTROL_H

#include <stdint.h>

#include <uv.h>

#include "daemon/exec.h"

struct ctl_params {
	uv_loop_t *loop;
	const char *socket_path;       /* NULL: only activated sockets */
	const char *admin_socket_path; /* NULL: none */
	const int *listen_fds;         /* sockets passed by the service manager */
	const int *listen_admin;       /* per socket: grants admin verbs */
	int nlisten_fds;
	const struct exec_backend *exec;
	const uint8_t *node_id;
	const char *config_path; /* re-read on reload */
};

int ctl_init(const struct ctl_params *p);
void ctl_fini(void);
/* Wakes the loop so it runs finished scheduler commands (any thread). */
void ctl_notify_done(void);
/* Re-reads the config file and publishes it; returns 0 or -errno (logged). */
int ctl_reload(void);
/* Publishes cfg changed by "k=v" words; err receives a message on failure. */
int ctl_set(const char *words, char *err, size_t errlen);
/* Leaves RCU; the last call on the control thread. */
void ctl_unregister(void);

#endif
