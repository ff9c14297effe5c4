/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "daemon/log.h"

int log_level = LOG_LVL_INFO;

int log_parse_level(const char *s)
{
	static const struct {
		const char *name;
		int level;
	} names[] = {
		{ "err", LOG_LVL_ERR },   { "error", LOG_LVL_ERR }, { "warning", LOG_LVL_WARN },
		{ "warn", LOG_LVL_WARN }, { "info", LOG_LVL_INFO }, { "debug", LOG_LVL_DEBUG },
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(s, names[i].name) == 0)
			return names[i].level;
	return -1;
}

/* "<N>" prefixes let journald keep the level when collcd runs under systemd. */
void log_msg(int level, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	if (level > log_level)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "<%d>collcd: %s\n", level, buf);
}
