/* SPDX-License-Identifier: MIT */
/*
 * A table of symbols to resolve in a dlopen()ed library: libcollc and
 * libnccl-collc each load the CUDA driver so, each with its own table.
 */
#ifndef COLLC_COMMON_DLSYMS_H
#define COLLC_COMMON_DLSYMS_H

#include <dlfcn.h>
#include <stddef.h>

struct dl_sym {
	const char *name;
	void **fn;
};

/* Resolves syms[0..n) in h: NULL, else the name of the first symbol h lacks. */
static inline const char *dl_syms(void *h, const struct dl_sym *syms, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		*syms[i].fn = dlsym(h, syms[i].name);
		if (!*syms[i].fn)
			return syms[i].name;
	}
	return NULL;
}

#endif
