/* SPDX-License-Identifier: MIT */
/*
 * collcctl: look at and retune a running collcd.
 *
 *   collcctl [--socket PATH] status [--json] | top | metrics | get KEY | set KEY=VALUE...
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "client/ctlsock.h"
#include "proto/wire.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: collcctl [--socket PATH] COMMAND\n"
		"\n"
		"  status [--json]     clients, communicators, devices, queue depths\n"
		"  top                 status, refreshed every second (q quits)\n"
		"  metrics             Prometheus text format\n"
		"  get KEY             one configuration value\n"
		"  set KEY=VALUE...    change the configuration now (root or the admin socket)\n");
}

static int connect_to(const char *path, int *fd)
{
	int r = ctl_connect(path, fd);

	if (r < 0)
		fprintf(stderr, "collcctl: %s: %s\n", path, strerror(-r));
	return r;
}

static int ask(int fd, uint16_t type, const void *payload, size_t len, struct ctl_reply *rep)
{
	uint32_t id = 0;
	int r = ctl_request(fd, &id, type, payload, len, -1, 10000, rep);

	if (r < 0)
		fprintf(stderr, "collcctl: request failed: %s\n", strerror(-r));
	return r;
}

static int print_text(int fd, uint16_t type, const void *payload, size_t len)
{
	struct ctl_reply rep;
	int r = ask(fd, type, payload, len, &rep);

	if (r < 0)
		return 1;
	if (rep.status < 0) {
		fprintf(stderr, "collcctl: %s%s%s\n", rep.len ? rep.data : "", rep.len ? ": " : "",
			strerror(-rep.status));
		ctl_reply_free(&rep);
		return 1;
	}
	fwrite(rep.data, 1, rep.len, stdout);
	if (rep.len && rep.data[rep.len - 1] != '\n')
		putchar('\n');
	ctl_reply_free(&rep);
	return 0;
}

static int cmd_top(int fd)
{
	struct collc_msg_status_req q = { 0 };
	struct termios old, raw;
	int tty = isatty(STDIN_FILENO), rc = 0;

	if (tty) {
		tcgetattr(STDIN_FILENO, &old);
		raw = old;
		raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
		raw.c_cc[VMIN] = 0;
		raw.c_cc[VTIME] = 0;
		tcsetattr(STDIN_FILENO, TCSANOW, &raw);
	}
	for (;;) {
		struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
		struct ctl_reply rep;
		char c;

		if (ask(fd, COLLC_MSG_STATUS, &q, sizeof(q), &rep) < 0) {
			rc = 1;
			break;
		}
		/* Home the cursor and clear, like top(1). */
		printf("\033[H\033[2J%s\n(q quits)\n", rep.data ? rep.data : "");
		fflush(stdout);
		ctl_reply_free(&rep);
		if (poll(&p, 1, 1000) > 0) {
			ssize_t n = read(STDIN_FILENO, &c, 1);

			if (n == 0 || (n == 1 && (c == 'q' || c == 'Q')))
				break;
		}
	}
	if (tty)
		tcsetattr(STDIN_FILENO, TCSANOW, &old);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *path = NULL, *cmd;
	int c, fd, rc;

	while ((c = getopt_long(argc, argv, "+s:h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			path = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	path = ctl_socket_path(path);
	cmd = argv[optind++];
	if (strcmp(cmd, "set") == 0) {
		char admin[256], words[1024] = "";
		size_t n = 0;

		if (optind >= argc) {
			usage(stderr);
			return 2;
		}
		for (int i = optind; i < argc; i++) {
			if (!strchr(argv[i], '=') || n + strlen(argv[i]) + 2 > sizeof(words)) {
				fprintf(stderr, "collcctl: set takes KEY=VALUE words, got '%s'\n",
					argv[i]);
				return 2;
			}
			n += (size_t)snprintf(words + n, sizeof(words) - n, "%s%s", n ? " " : "",
					      argv[i]);
		}
		/* The admin socket, where there is one we may open, grants set. */
		snprintf(admin, sizeof(admin), "%s.admin", path);
		if (access(admin, W_OK) != 0 || ctl_connect(admin, &fd) < 0)
			if (connect_to(path, &fd) < 0)
				return 1;
		rc = print_text(fd, COLLC_MSG_SET, words, n);
	} else if (strcmp(cmd, "status") == 0) {
		struct collc_msg_status_req q = { 0 };

		if (optind < argc && strcmp(argv[optind], "--json") == 0) {
			q.flags = COLLC_STATUS_JSON;
			optind++;
		}
		if (optind < argc) {
			usage(stderr);
			return 2;
		}
		if (connect_to(path, &fd) < 0)
			return 1;
		rc = print_text(fd, COLLC_MSG_STATUS, &q, sizeof(q));
	} else if (strcmp(cmd, "metrics") == 0 && optind == argc) {
		if (connect_to(path, &fd) < 0)
			return 1;
		rc = print_text(fd, COLLC_MSG_METRICS, NULL, 0);
	} else if (strcmp(cmd, "get") == 0 && optind + 1 == argc) {
		if (connect_to(path, &fd) < 0)
			return 1;
		rc = print_text(fd, COLLC_MSG_GET, argv[optind], strlen(argv[optind]));
	} else if (strcmp(cmd, "top") == 0 && optind == argc) {
		if (connect_to(path, &fd) < 0)
			return 1;
		rc = cmd_top(fd);
	} else {
		usage(stderr);
		return 2;
	}
	close(fd);
	return rc;
}
