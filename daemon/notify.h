/* SPDX-License-Identifier: MIT */
/* The service manager: readiness, status, watchdog and socket activation. */
#ifndef COLLCD_NOTIFY_H
#define COLLCD_NOTIFY_H

#include <uv.h>

/*
 * Sockets passed by the service manager (LISTEN_FDS); 0 when none.
 * ret_admin[i] is 1 for the socket named "admin" (FileDescriptorName=).
 */
int notify_listen_fds(const int **ret_fds, const int **ret_admin);
/* Starts the status and watchdog timer on the loop. */
int notify_init(uv_loop_t *loop);
void notify_fini(void);
void notify_ready(void);
void notify_reloading(void);
void notify_stopping(void);

#endif
