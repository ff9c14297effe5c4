/* SPDX-License-Identifier: MIT */
/* A shared library that is not a net plugin: it exports no ncclNetPlugin_v8. */
int collc_test_not_a_plugin(void);
int collc_test_not_a_plugin(void)
{
	return 0;
}
