/* SPDX-License-Identifier: MIT */
/* A small JSON reader for `collcctl status --json` (objects, arrays, strings, numbers). */
#ifndef COLLC_REL_JSON_H
#define COLLC_REL_JSON_H

#include <stddef.h>

enum jv_type { JV_NULL, JV_BOOL, JV_NUM, JV_STR, JV_ARR, JV_OBJ };

struct jv {
	enum jv_type type;
	double num;          /* JV_NUM, JV_BOOL (0/1) */
	char *str;           /* JV_STR */
	size_t n;            /* JV_ARR, JV_OBJ: entries */
	struct jv **items;
	char **keys;         /* JV_OBJ */
};

/* NULL on a syntax error. */
struct jv *jv_parse(const char *text);
void jv_free(struct jv *v);
/* NULL when v is not an object or has no such key. */
const struct jv *jv_get(const struct jv *v, const char *key);
const struct jv *jv_at(const struct jv *v, size_t i);
/* The number, or dflt when v is not one. */
double jv_num(const struct jv *v, double dflt);
/* 1 when the array v holds the number x. */
int jv_has_num(const struct jv *v, double x);

#endif
