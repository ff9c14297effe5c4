/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>

#include "daemon/wire_check.h"

struct len_rule {
	uint32_t min, max;
};

#define EXACTLY(T)                                                                                 \
	{                                                                                          \
		sizeof(T), sizeof(T)                                                               \
	}
static const struct len_rule rules[COLLC_MSG_TYPE_MAX] = {
	[COLLC_MSG_HELLO] = EXACTLY(struct collc_msg_hello),
	[COLLC_MSG_MEM_ALLOC] = EXACTLY(struct collc_msg_mem),
	/* Host memory: struct collc_msg_mem (and the memfd); a GPU: with its IPC handle. */
	[COLLC_MSG_MEM_REGISTER] = { sizeof(struct collc_msg_mem),
				     sizeof(struct collc_msg_mem_gpu_register) },
	[COLLC_MSG_MEM_RELEASE] = EXACTLY(struct collc_msg_mem_release),
	[COLLC_MSG_COMM_INIT] = EXACTLY(struct collc_msg_comm_init),
	[COLLC_MSG_COMM_DESTROY] = EXACTLY(struct collc_msg_comm_ref),
	[COLLC_MSG_COMM_ABORT] = EXACTLY(struct collc_msg_comm_ref),
	[COLLC_MSG_SET_EVENTFD] = { 0, 0 },
	[COLLC_MSG_STATUS] = EXACTLY(struct collc_msg_status_req),
	[COLLC_MSG_GET] = { 1, 63 },
	[COLLC_MSG_SET] = { 1, 1023 },
	[COLLC_MSG_METRICS] = { 0, 0 },
	[COLLC_MSG_COMM_TIMEOUT] = EXACTLY(struct collc_msg_comm_timeout),
};

int wire_check(const void *buf, size_t n, struct collc_msg_hdr *h)
{
	const struct len_rule *rule;

	if (n < sizeof(*h))
		return -EPROTO;
	memcpy(h, buf, sizeof(*h));
	if (h->magic != COLLC_WIRE_MAGIC || h->version != COLLC_WIRE_VERSION ||
	    h->length != n - sizeof(*h) || (h->type & COLLC_MSG_REPLY))
		return -EPROTO;
	if (h->type == 0 || h->type >= COLLC_MSG_TYPE_MAX)
		return -EOPNOTSUPP;
	rule = &rules[h->type];
	if (h->length < rule->min || h->length > rule->max)
		return -EBADMSG;
	if (h->type == COLLC_MSG_MEM_REGISTER) {
		struct collc_msg_mem q;

		/* device -1 sends 32 bytes and an fd, device >= 0 112 bytes (wire version 2). */
		memcpy(&q, (const char *)buf + sizeof(*h), sizeof(q));
		if (h->length != (q.device == -1 ? sizeof(struct collc_msg_mem)
						 : sizeof(struct collc_msg_mem_gpu_register)))
			return -EBADMSG;
	}
	return 0;
}
