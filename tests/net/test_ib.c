/* SPDX-License-Identifier: MIT */
/*
 * The ib transport without hardware: libibverbs loaded or reported missing,
 * "no RDMA device" reported cleanly, and the clear-to-send FIFO arithmetic.
 * Includes ib.c for its statics.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "daemon/net/ib.c"

#include <stdlib.h>

static void t_missing_library(void **state)
{
	struct ib_verbs v;
	int n = -1;

	memset(&g, 0, sizeof(g));
	assert_int_equal(verbs_load(&v, "libibverbs-no-such-library.so.1"), -ENOENT);
	/* A library without the verbs symbols is refused. */
	assert_int_equal(verbs_load(&v, "libm.so.6"), -EPROTO);
	assert_null(v.dl);
	/* Init without rdma-core is no failure: zero devices and a reason. */
	assert_int_equal(ib_init_lib(NULL, "libibverbs-no-such-library.so.1"), ncclSuccess);
	assert_int_equal(net_ib.devices(&n), ncclSuccess);
	assert_int_equal(n, 0);
	assert_non_null(strstr(net_ib_status(), "libibverbs not found"));
}

static void t_devices(void **state)
{
	ncclNetProperties_v8_t props;
	char handle[NCCL_NET_HANDLE_MAXSIZE];
	void *comm = (void *)1;
	int n = -1, i;

	memset(&g, 0, sizeof(g));
	assert_int_equal(net_ib.init(NULL), ncclSuccess);
	assert_int_equal(net_ib.devices(&n), ncclSuccess);
	assert_true(n >= 0);
	print_message("ib: %s\n", net_ib_status());
	if (!g.v.dl) {
		assert_non_null(strstr(net_ib_status(), "libibverbs not found"));
		assert_int_equal(n, 0);
	} else if (n == 0) {
		assert_non_null(strstr(net_ib_status(), "no RDMA device"));
	}
	for (i = 0; i < n; i++) {
		assert_int_equal(net_ib.getProperties(i, &props), ncclSuccess);
		assert_true(props.port >= 1);
		assert_true(props.speed > 0);
		assert_int_equal(props.maxRecvs, IB_FIFO_MAX_RECVS);
	}
	/* Past the last device: refused, not read out of bounds. */
	assert_int_equal(net_ib.getProperties(n, &props), ncclInvalidArgument);
	assert_int_equal(net_ib.getProperties(-1, &props), ncclInvalidArgument);
	assert_int_equal(net_ib.listen(n, handle, &comm), ncclInvalidArgument);
	assert_null(comm);
	assert_int_equal(net_ib.closeListen(NULL), ncclSuccess);
	/* A second init does not load the library again or leak it. */
	void *dl = g.v.dl;
	assert_int_equal(net_ib.init(NULL), ncclSuccess);
	assert_ptr_equal(g.v.dl, dl);
}

static void t_options(void **state)
{
	struct net_ib_opts o = { .ifname = "lo", .gid_index = 3 };

	assert_int_equal(net_ib_configure(&o), 0);
	assert_string_equal(g.opt_ifname, "lo");
	assert_int_equal(g.opt_gid_index, 3);
	o.gid_index = -1;
	assert_int_equal(net_ib_configure(&o), -EINVAL);
	o.gid_index = 256;
	assert_int_equal(net_ib_configure(&o), -EINVAL);
	o.gid_index = 0;
	o.ifname = "an-interface-name-too-long-for-linux";
	assert_int_equal(net_ib_configure(&o), -EINVAL);
	o.ifname = NULL;
	assert_int_equal(net_ib_configure(&o), 0);
	assert_string_equal(g.opt_ifname, "");
}

static void t_fifo_slots(void **state)
{
	uint64_t seq;
	uint32_t sub;
	char seen[IB_FIFO_SLOTS * IB_FIFO_MAX_RECVS] = { 0 };

	/* One window of sequence numbers covers every element exactly once. */
	for (seq = UINT64_MAX - 9; seq != UINT64_MAX - 9 + IB_FIFO_SLOTS; seq++) {
		for (sub = 0; sub < IB_FIFO_MAX_RECVS; sub++) {
			uint64_t off = ib_fifo_offset(seq, sub);

			assert_int_equal(off % sizeof(struct ib_cts), 0);
			assert_true(off + sizeof(struct ib_cts) <= IB_FIFO_BYTES);
			assert_int_equal(seen[off / sizeof(struct ib_cts)], 0);
			seen[off / sizeof(struct ib_cts)] = 1;
		}
	}
	assert_int_equal(ib_fifo_slot(IB_FIFO_SLOTS), 0);
	assert_int_equal(ib_fifo_slot(IB_FIFO_SLOTS + 5), 5);
	assert_int_equal(ib_fifo_slot(UINT64_MAX), IB_FIFO_SLOTS - 1);
}

static void t_fifo_credits(void **state)
{
	assert_true(ib_fifo_can_post(0, 0));
	assert_true(ib_fifo_can_post(IB_FIFO_SLOTS - 1, 0));
	assert_false(ib_fifo_can_post(IB_FIFO_SLOTS, 0));
	assert_true(ib_fifo_can_post(IB_FIFO_SLOTS, 1));
	/* Free-running counters across the 64-bit wrap. */
	assert_true(ib_fifo_can_post(5, UINT64_MAX - 10));
	assert_false(ib_fifo_can_post(IB_FIFO_SLOTS - 11, UINT64_MAX - 10));
	assert_true(ib_fifo_can_post(IB_FIFO_SLOTS - 12, UINT64_MAX - 10));
}

static void t_fifo_ready(void **state)
{
	struct ib_cts fifo[IB_FIFO_SLOTS][IB_FIFO_MAX_RECVS];
	uint64_t seq;

	memset(fifo, 0, sizeof(fifo));
	/* A zeroed FIFO is empty, sequence 0 included. */
	assert_false(ib_fifo_ready(&fifo[0][0], 0));
	for (seq = 0; seq < 3 * IB_FIFO_SLOTS; seq++) {
		struct ib_cts *e = (struct ib_cts *)((char *)fifo + ib_fifo_offset(seq, 2));

		assert_false(ib_fifo_ready(e, seq));
		e->seq1 = seq + 1;
		assert_true(ib_fifo_ready(e, seq));
		/* The same slot one lap later is not ready yet. */
		assert_false(ib_fifo_ready(e, seq + IB_FIFO_SLOTS));
	}
}

static void t_imm(void **state)
{
	static const uint64_t bases[] = { 0, 1000, IB_IMM_SEQ_MASK - 3, (1ULL << 32) - 7,
					  UINT64_MAX - 12 };
	uint64_t seq, base;
	uint32_t sub, got_sub;
	size_t i;

	for (i = 0; i < sizeof(bases) / sizeof(bases[0]); i++) {
		base = bases[i];
		for (seq = base; seq != base + IB_FIFO_SLOTS; seq++) {
			for (sub = 0; sub < IB_FIFO_MAX_RECVS; sub++) {
				uint64_t got;
				uint32_t imm = ib_imm_encode(seq, sub);

				assert_int_equal(ib_imm_decode(imm, base, base + IB_FIFO_SLOTS,
							       &got, &got_sub),
						 0);
				assert_true(got == seq);
				assert_int_equal(got_sub, sub);
			}
		}
		/* Not posted yet, or already completed: refused. */
		uint64_t out = 77;
		assert_int_equal(
			ib_imm_decode(ib_imm_encode(base + 3, 0), base, base + 3, &out, &sub), -1);
		assert_int_equal(ib_imm_decode(ib_imm_encode(base - 1, 0), base,
					       base + IB_FIFO_SLOTS, &out, &sub),
				 -1);
		assert_int_equal(ib_imm_decode(ib_imm_encode(base + IB_FIFO_SLOTS, 0), base,
					       base + 2 * IB_FIFO_SLOTS, &out, &sub),
				 -1);
		assert_true(out == 77);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_missing_library),
		cmocka_unit_test(t_devices),
		cmocka_unit_test(t_options),
		cmocka_unit_test(t_fifo_slots),
		cmocka_unit_test(t_fifo_credits),
		cmocka_unit_test(t_fifo_ready),
		cmocka_unit_test(t_imm),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
