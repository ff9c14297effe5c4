/* SPDX-License-Identifier: MIT */
/*
 * A small, strict JSON (RFC 8259) parser for checking collcctl's output:
 * one value, whitespace around it, nothing else; no trailing commas, no
 * comments, control characters escaped, \u escapes well formed. The tests
 * read `collcctl status --json` with it.
 */
#ifndef COLLC_TEST_JSON_H
#define COLLC_TEST_JSON_H

#include <stddef.h>

enum json_type { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT };

struct json {
	enum json_type type;
	double number;      /* JSON_NUMBER, JSON_BOOL (0 or 1) */
	char *string;       /* JSON_STRING (escapes decoded, UTF-8) */
	size_t n;           /* JSON_ARRAY, JSON_OBJECT: number of items */
	struct json *items; /* JSON_ARRAY, JSON_OBJECT */
	char **keys;        /* JSON_OBJECT: keys[i] names items[i] */
};

/* NULL on a syntax error, with a message naming the offset in err. */
struct json *json_parse(const char *text, size_t len, char *err, size_t errlen);
void json_free(struct json *v);
/* The member named key of an object, or NULL. */
const struct json *json_get(const struct json *obj, const char *key);
const char *json_type_name(enum json_type t);
/* Item i of an array or object, or NULL. */
const struct json *json_at(const struct json *v, size_t i);
/* The number (a bool as 0 or 1), or dflt when v is none. */
double json_num(const struct json *v, double dflt);
/* 1 when the array v holds the number x. */
int json_has_num(const struct json *v, double x);

#endif /* COLLC_TEST_JSON_H */
