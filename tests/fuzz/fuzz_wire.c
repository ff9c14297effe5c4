/* SPDX-License-Identifier: MIT */
/*
 * Control-message parsing: wire_check() on arbitrary datagrams.
 *
 * Properties:
 *  - its verdict matches an independent reading of proto/wire.h (magic,
 *    version, length == datagram - header, request not reply, known type,
 *    payload size of that type);
 *  - *h holds the header whenever the datagram covers one (control.c echoes
 *    h.id in the error reply), and is untouched otherwise;
 *  - for a datagram that passes, the payload read as the typed struct of its
 *    type, with the field checks control.c and the scheduler apply, stays
 *    inside the datagram (the input buffer is exactly n bytes: ASan catches a
 *    read past it), and GET/SET copy into the same fixed buffers control.c
 *    uses (key[64], words[1024]) without overflowing them;
 *  - SET words go through cfg_apply_kv all-or-nothing as ctl_set() does:
 *    on error the config is unchanged, on success every field is in range.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "daemon/config.h"
#include "daemon/wire_check.h"
#include "fuzz_util.h"
#include "proto/wire.h"
#include "proto/work.h"

/*
 * Each type's payload size range, written from the comments in proto/wire.h,
 * not copied from wire_check.c.
 */
struct size_rule {
	uint16_t type;
	uint32_t min, max;
};

static const struct size_rule size_rules[] = {
	{ COLLC_MSG_HELLO, 24, 24 },         { COLLC_MSG_MEM_ALLOC, 32, 32 },
	{ COLLC_MSG_MEM_REGISTER, 32, 112 }, { COLLC_MSG_MEM_RELEASE, 8, 8 },
	{ COLLC_MSG_COMM_DESTROY, 8, 8 },    { COLLC_MSG_COMM_ABORT, 8, 8 },
	{ COLLC_MSG_STATUS, 8, 8 },          { COLLC_MSG_COMM_TIMEOUT, 8, 8 },
	{ COLLC_MSG_COMM_INIT, 160, 160 },   { COLLC_MSG_SET_EVENTFD, 0, 0 },
	{ COLLC_MSG_METRICS, 0, 0 },         { COLLC_MSG_GET, 1, 63 },
	{ COLLC_MSG_SET, 1, 1023 },
};

/* type's rule, or NULL for a type this harness does not know. */
static const struct size_rule *expected_rule(uint16_t type)
{
	for (size_t i = 0; i < sizeof(size_rules) / sizeof(size_rules[0]); i++)
		if (size_rules[i].type == type)
			return &size_rules[i];
	return NULL;
}

static volatile uint64_t sink; /* keeps the typed reads */

/* The checks control.c (and cmd_join in the scheduler) apply to each payload. */
static void typed_checks(const struct collc_msg_hdr *h, const uint8_t *payload)
{
	switch (h->type) {
	case COLLC_MSG_HELLO: {
		const struct collc_msg_hello *q = (const void *)payload;

		sink += q->api_version == 1 && q->flags == 0;
		sink += q->reserved[0] + q->reserved[1];
		break;
	}
	case COLLC_MSG_MEM_ALLOC:
	case COLLC_MSG_MEM_REGISTER: {
		const struct collc_msg_mem *q = (const void *)payload;
		int ok = q->flags == 0 && q->size != 0 && q->size <= (1ull << 40) &&
			 q->device == -1;

		sink += ok + q->device_uuid[15];
		if (h->type == COLLC_MSG_MEM_REGISTER && q->device != -1) {
			/* A GPU registration: the IPC tail the CUDA executor reads. */
			const struct collc_msg_mem_gpu_register *g = (const void *)payload;

			sink += g->ipc.handle[63] + g->ipc.offset + g->ipc.alloc_size;
		}
		break;
	}
	case COLLC_MSG_MEM_RELEASE: {
		const struct collc_msg_mem_release *q = (const void *)payload;

		sink += q->mr + q->reserved;
		break;
	}
	case COLLC_MSG_COMM_INIT: {
		struct collc_msg_comm_init req;
		const struct collc_msg_comm_init *q = (const void *)payload;

		/* control.c memcpy()s the whole struct into the command. */
		memcpy(&req, payload, sizeof(req));
		sink += req.nranks >= 1 && req.nranks <= COLLC_MAX_RANKS && req.rank < req.nranks &&
			req.flags == 0 && req.uid.magic == COLLC_UID_MAGIC;
		sink += q->device_uuid[15] + q->uid.nonce[31];
		break;
	}
	case COLLC_MSG_COMM_DESTROY:
	case COLLC_MSG_COMM_ABORT: {
		const struct collc_msg_comm_ref *q = (const void *)payload;

		sink += q->comm + q->reserved;
		break;
	}
	case COLLC_MSG_STATUS: {
		const struct collc_msg_status_req *q = (const void *)payload;

		sink += (q->flags & COLLC_STATUS_JSON) + q->reserved;
		break;
	}
	case COLLC_MSG_COMM_TIMEOUT: {
		const struct collc_msg_comm_timeout *q = (const void *)payload;

		sink += q->comm + (q->timeout_ms == UINT32_MAX);
		break;
	}
	case COLLC_MSG_GET: {
		/* As handle_get: a 64-byte key buffer, NUL-terminated after the payload. */
		char key[64], val[128];
		struct collc_config cfg;
		int r;

		memcpy(key, payload, h->length);
		key[h->length] = '\0';
		cfg_defaults(&cfg, 4);
		memset(val, 0x5a, sizeof(val));
		r = cfg_get_key(&cfg, key, val, sizeof(val));
		FUZZ_ASSERT(r == 0 || r == -ENOENT, "cfg_get_key returned %d", r);
		if (r == 0)
			FUZZ_ASSERT(memchr(val, '\0', sizeof(val)) != NULL, "value not terminated");
		break;
	}
	case COLLC_MSG_SET: {
		/* As handle_set + ctl_set: words[1024], strtok, all words or none. */
		char words[1024], buf[1024], err[256], *save = NULL, *w;
		struct collc_config cur, next;
		const char *bad;
		int r = 0;

		memcpy(words, payload, h->length);
		words[h->length] = '\0';
		if (strlen(words) >= sizeof(buf))
			break;
		snprintf(buf, sizeof(buf), "%s", words);
		cfg_defaults(&cur, 4);
		next = cur;
		for (w = strtok_r(buf, " \t\n", &save); w && r == 0;
		     w = strtok_r(NULL, " \t\n", &save)) {
			struct collc_config before = next;

			err[0] = '\0';
			r = cfg_apply_kv(&next, w, err, sizeof(err));
			FUZZ_ASSERT(r == 0 || r == -EINVAL, "cfg_apply_kv returned %d", r);
			if (r < 0) {
				FUZZ_ASSERT(fuzz_cfg_equal(&before, &next),
					    "cfg_apply_kv('%s') failed but changed the config", w);
				FUZZ_ASSERT(err[0] != '\0', "no error message for '%s'", w);
			}
		}
		if (r == 0) {
			bad = fuzz_cfg_out_of_range(&next, 4);
			FUZZ_ASSERT(!bad, "SET '%s' accepted, %s out of range", words, bad);
		}
		break;
	}
	default:
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct collc_msg_hdr h, raw;
	int r, want;

	memset(&h, 0xa5, sizeof(h));
	r = wire_check(data, size, &h);
	FUZZ_ASSERT(r == 0 || r == -EPROTO || r == -EBADMSG || r == -EOPNOTSUPP,
		    "wire_check returned %d", r);
	if (size < sizeof(raw)) {
		struct collc_msg_hdr untouched;

		memset(&untouched, 0xa5, sizeof(untouched));
		FUZZ_ASSERT(r == -EPROTO, "%zu bytes cannot hold a header, got %d", size, r);
		FUZZ_ASSERT(memcmp(&h, &untouched, sizeof(h)) == 0,
			    "*h written for a short datagram");
		return 0;
	}
	memcpy(&raw, data, sizeof(raw));
	FUZZ_ASSERT(memcmp(&h, &raw, sizeof(h)) == 0, "*h does not hold the datagram's header");

	if (raw.magic != COLLC_WIRE_MAGIC || raw.version != COLLC_WIRE_VERSION ||
	    (size_t)raw.length != size - sizeof(raw) || (raw.type & COLLC_MSG_REPLY)) {
		want = -EPROTO;
	} else if (raw.type == 0 || raw.type >= COLLC_MSG_TYPE_MAX) {
		want = -EOPNOTSUPP;
	} else {
		const struct size_rule *rule = expected_rule(raw.type);

		if (!rule) {
			/* A type newer than this harness: only the generic contract holds. */
			FUZZ_ASSERT(r == 0 || r == -EBADMSG, "type %u: got %d", raw.type, r);
			return 0;
		}
		want = raw.length >= rule->min && raw.length <= rule->max ? 0 : -EBADMSG;
		if (want == 0 && raw.type == COLLC_MSG_MEM_REGISTER) {
			/* Wire version 2: host memory 32 bytes (and an fd), a GPU 112 with its IPC handle. */
			int32_t device;

			memcpy(&device, data + sizeof(raw) + offsetof(struct collc_msg_mem, device),
			       sizeof(device));
			want = raw.length == (device == -1 ? 32u : 112u) ? 0 : -EBADMSG;
		}
	}
	FUZZ_ASSERT(r == want, "type %u length %u (datagram %zu bytes): wire_check %d, expected %d",
		    raw.type, raw.length, size, r, want);
	if (r == 0)
		typed_checks(&h, data + sizeof(h));
	return 0;
}
