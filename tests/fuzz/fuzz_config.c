/* SPDX-License-Identifier: MIT */
/*
 * The configuration parser: cfg_apply_kv() and cfg_apply_file().
 *
 * Input: byte 0 picks the mode (bit 0: file, else key=value lines) and
 * byte 1 the executor's channel count (1..COLLC_MAX_CHANNELS); byte 2 the
 * error buffer's length (1..256); the rest is text.
 *
 *  kv mode:   every '\n'-separated piece goes through cfg_apply_kv in turn.
 *  file mode: the text is the file (written to a memfd, read back through
 *             /proc/self/fd/N) and goes through cfg_apply_file.
 *
 * Properties:
 *  - on error the config is unchanged and err holds a terminated message
 *    that fits errlen (the bytes after errlen are never written);
 *  - on success every field is within the range config.c documents and
 *    max_channels did not move;
 *  - what cfg_get_key prints for each key parses back to the same config;
 *  - cfg_apply_file means what collcd(8) says a config file is: lines of
 *    "key = value", '#' starts a comment, blanks do not count, all lines or
 *    none. A reference reader that holds whole lines (however long) must
 *    reach the same verdict and the same config.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon/config.h"
#include "fuzz_util.h"

static const char *const keys[] = {
	"channels",
	"proto",
	"algo",
	"op_timeout_ms",
	"oneshot_max_bytes",
	"twoshot_max_bytes",
	"ll_max_bytes",
	"oneshot_ll_max_bytes",
	"ll128_max_bytes",
	"channel_min_bytes",
	"sched_spin_us",
	"gate_spin_us",
	"exec_spin_us",
	"listen",
	"net",
	"net_ifname",
	"net_timeout_ms",
	"net_spin_us",
	"net_eager_max_bytes",
	"net_eager_staged_max_bytes",
};

static int memfd = -1;
static char memfd_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct collc_config c, before;
	char err[128];
	int r;

	memfd = memfd_create("collc-fuzz-config", MFD_CLOEXEC);
	if (memfd < 0) {
		perror("memfd_create");
		abort();
	}
	snprintf(memfd_path, sizeof(memfd_path), "/proc/self/fd/%d", memfd);
	/* A file that is not there: an error, config unchanged. */
	cfg_defaults(&c, 4);
	before = c;
	r = cfg_apply_file(&c, "/nonexistent/collcd.conf", err, sizeof(err));
	FUZZ_ASSERT(r == -ENOENT && fuzz_cfg_equal(&c, &before), "missing file: %d", r);
	return 0;
}

static void check_err(const char *err, size_t errlen, size_t cap, const char *what)
{
	FUZZ_ASSERT(memchr(err, '\0', errlen) != NULL, "%s: message not terminated within errlen",
		    what);
	for (size_t i = errlen; i < cap; i++)
		FUZZ_ASSERT((unsigned char)err[i] == 0xee, "%s: err written past errlen %zu", what,
			    errlen);
}

static void check_success(const struct collc_config *c, uint32_t maxch, const char *what)
{
	const char *bad = fuzz_cfg_out_of_range(c, maxch);

	if (bad)
		fuzz_cfg_print("config", c);
	FUZZ_ASSERT(!bad, "%s accepted, %s out of range", what, bad);
}

/*
 * What what(input) returned: 0 with a config in range, or -EINVAL with the
 * config as it was before and err (cap bytes, errlen of them offered) kept.
 */
static void check_outcome(int r, const struct collc_config *c, const struct collc_config *before,
			  const char *err, size_t errlen, size_t cap, uint32_t maxch,
			  const char *what, const char *input)
{
	FUZZ_ASSERT(r == 0 || r == -EINVAL, "%s returned %d", what, r);
	if (r < 0) {
		FUZZ_ASSERT(fuzz_cfg_equal(c, before), "%s('%.80s') failed but changed the config",
			    what, input);
		check_err(err, errlen, cap, what);
	} else {
		check_success(c, maxch, what);
	}
}

/* Every value cfg_get_key prints parses back to itself. */
static void check_roundtrip(const struct collc_config *c)
{
	struct collc_config back = *c;
	char val[128], kv[192], err[256];

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		int r = cfg_get_key(c, keys[i], val, sizeof(val));

		FUZZ_ASSERT(r == 0, "cfg_get_key(%s) = %d", keys[i], r);
		snprintf(kv, sizeof(kv), "%s=%s", keys[i], val);
		r = cfg_apply_kv(&back, kv, err, sizeof(err));
		FUZZ_ASSERT(r == 0, "'%s' (printed by cfg_get_key) does not parse: %s", kv, err);
	}
	FUZZ_ASSERT(fuzz_cfg_equal(c, &back), "printed values parse to a different config");
}

/* The documented meaning of a config file, with no limit on line length. */
static int reference_file(struct collc_config *cfg, const char *text, size_t len)
{
	struct collc_config next = *cfg;
	char *kv = malloc(len + 1), err[256];
	size_t i = 0;

	if (!kv)
		abort();
	while (i < len) {
		size_t q = 0;
		int content = 1;

		for (; i < len && text[i] != '\n'; i++) {
			if (text[i] == '#' || text[i] == '\0')
				content = 0;
			if (content && !isspace((unsigned char)text[i]))
				kv[q++] = text[i];
		}
		i++; /* the newline */
		kv[q] = '\0';
		if (q && cfg_apply_kv(&next, kv, err, sizeof(err)) < 0) {
			free(kv);
			return -EINVAL;
		}
	}
	free(kv);
	*cfg = next;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct collc_config cfg, before;
	uint32_t maxch;
	size_t errlen;
	char err[300];
	const char *text;
	size_t tlen;
	int file, r;

	if (size < 3)
		return 0;
	file = data[0] & 1;
	maxch = 1u + data[1] % COLLC_MAX_CHANNELS;
	errlen = 1u + data[2] % 256u;
	text = (const char *)data + 3;
	tlen = size - 3;
	cfg_defaults(&cfg, maxch);
	check_success(&cfg, maxch, "cfg_defaults");

	if (!file) {
		char *piece = malloc(tlen + 1);
		size_t i = 0;

		if (!piece)
			abort();
		while (i <= tlen) {
			size_t j = i;

			while (j < tlen && text[j] != '\n')
				j++;
			memcpy(piece, text + i, j - i);
			piece[j - i] = '\0';
			before = cfg;
			memset(err, 0xee, sizeof(err));
			r = cfg_apply_kv(&cfg, piece, err, errlen);
			check_outcome(r, &cfg, &before, err, errlen, sizeof(err), maxch,
				      "cfg_apply_kv", piece);
			i = j + 1;
		}
		free(piece);
		check_roundtrip(&cfg);
		return 0;
	}

	{
		struct collc_config ref;
		int want;

		if (ftruncate(memfd, 0) < 0 || pwrite(memfd, text, tlen, 0) != (ssize_t)tlen)
			abort();
		before = cfg;
		memset(err, 0xee, sizeof(err));
		r = cfg_apply_file(&cfg, memfd_path, err, errlen);
		check_outcome(r, &cfg, &before, err, errlen, sizeof(err), maxch, "cfg_apply_file",
			      memfd_path);
		if (r == 0)
			check_roundtrip(&cfg);
		ref = before;
		want = reference_file(&ref, text, tlen);
		if (want != r || (r == 0 && !fuzz_cfg_equal(&cfg, &ref))) {
			fuzz_cfg_print("cfg_apply_file", &cfg);
			fuzz_cfg_print("reference     ", &ref);
		}
		FUZZ_ASSERT(want == r, "cfg_apply_file returned %d (%s), a whole-line reader %d", r,
			    r < 0 && errlen ? err : "", want);
		FUZZ_ASSERT(r < 0 || fuzz_cfg_equal(&cfg, &ref),
			    "cfg_apply_file and a whole-line reader disagree on the config");
	}
	return 0;
}
