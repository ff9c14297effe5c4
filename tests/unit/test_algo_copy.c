/* SPDX-License-Identifier: MIT */
/*
 * proto/algo_copy.h: over random copy lists (sizes of every element size,
 * zeros among them) and every channel count, the channels' shares cover
 * every byte of every copy exactly once, each piece starts and ends on an
 * element, and the pieces of a channel come in list order.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "proto/algo_copy.h"

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static void test_counts(void **state)
{
	(void)state;
	assert_true(collc_copy_coll(COLLC_OP_ALLTOALL));
	assert_true(collc_copy_coll(COLLC_OP_ALLTOALLV));
	assert_true(collc_copy_coll(COLLC_OP_SEND));
	assert_true(collc_copy_coll(COLLC_OP_RECV));
	assert_false(collc_copy_coll(COLLC_OP_ALLREDUCE));
	assert_false(collc_copy_coll(COLLC_OP_REDUCE));
	assert_int_equal(collc_copy_count(COLLC_OP_ALLTOALL, 7), 7);
	assert_int_equal(collc_copy_count(COLLC_OP_ALLTOALLV, 64), 64);
	assert_int_equal(collc_copy_count(COLLC_OP_SEND, 7), 1);
	assert_int_equal(collc_copy_count(COLLC_OP_RECV, 7), 1);
}

/* The relay's packed lengths (across daemons): both come back, up to 4 GiB - 1 each. */
static void test_relay_pack(void **state)
{
	static const uint64_t v[] = { 0, 1, 7, 4096, 0x80000000ull, COLLC_RELAY_BLOCK_MAX };

	(void)state;
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		for (size_t j = 0; j < sizeof(v) / sizeof(v[0]); j++) {
			uint64_t p = collc_relay_pack(v[i], v[j]);

			assert_int_equal(collc_relay_send_bytes(p), v[i]);
			assert_int_equal(collc_relay_recv_bytes(p), v[j]);
		}
}

static void test_cover(void **state)
{
	static uint8_t seen[1 << 20];
	uint64_t seed = 1;

	(void)state;
	for (int round = 0; round < 400; round++) {
		uint64_t es = 1ull << (mix(++seed) % 4), bytes[COLLC_MAX_RANKS], total = 0;
		uint32_t n = 1 + (uint32_t)(mix(++seed) % COLLC_MAX_RANKS);

		for (uint32_t k = 0; k < n; k++) {
			uint64_t x = mix(++seed);

			bytes[k] = x % 4 == 0 ? 0 : es * (x >> 8) % (16384 / n + 1) / es * es;
			total += bytes[k];
		}
		assert_true(total <= sizeof(seen));
		for (uint32_t nch = 1; nch <= 32; nch += 1 + nch / 4) {
			memset(seen, 0, total);
			for (uint32_t sh = 0; sh < nch; sh++) {
				uint64_t lo, hi, start = 0, last_end = 0;

				collc_copy_share(total, nch, sh, 16, &lo, &hi);
				assert_true(lo <= hi && hi <= total);
				assert_true(lo % 16 == 0 || lo == total);
				for (uint32_t k = 0; k < n; start += bytes[k], k++) {
					uint64_t off, len;

					collc_copy_clip(start, bytes[k], lo, hi, &off, &len);
					if (!len)
						continue;
					assert_true(off + len <= bytes[k]);
					assert_int_equal(off % es, 0);
					assert_int_equal(len % es, 0);
					assert_true(start + off >= last_end);
					last_end = start + off + len;
					for (uint64_t b = start + off; b < start + off + len; b++)
						seen[b]++;
				}
			}
			for (uint64_t b = 0; b < total; b++)
				if (seen[b] != 1)
					fail_msg(
						"round %d, %u copies, %u channels: byte %llu copied %u "
						"times",
						round, n, nch, (unsigned long long)b, seen[b]);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counts),
		cmocka_unit_test(test_relay_pack),
		cmocka_unit_test(test_cover),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
