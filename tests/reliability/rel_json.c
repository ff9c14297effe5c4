/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "rel_json.h"

struct rd {
	const char *p;
	int depth;
};

static void ws(struct rd *r)
{
	while (isspace((unsigned char)*r->p))
		r->p++;
}

static struct jv *mk(enum jv_type t)
{
	struct jv *v = calloc(1, sizeof(*v));

	if (v)
		v->type = t;
	return v;
}

static char *str(struct rd *r)
{
	size_t cap = 16, n = 0;
	char *s;

	if (*r->p != '"')
		return NULL;
	r->p++;
	s = malloc(cap);
	while (s && *r->p && *r->p != '"') {
		char c = *r->p++;

		if (c == '\\') {
			c = *r->p++;
			switch (c) {
			case 'n': c = '\n'; break;
			case 't': c = '\t'; break;
			case 'r': c = '\r'; break;
			case 'b': c = '\b'; break;
			case 'f': c = '\f'; break;
			case 'u':
				/* Not needed by status: keep the escape as '?'. */
				for (int i = 0; i < 4 && *r->p; i++)
					r->p++;
				c = '?';
				break;
			case '\0':
				free(s);
				return NULL;
			default: break;
			}
		}
		if (n + 2 > cap) {
			char *t = realloc(s, cap *= 2);

			if (!t) {
				free(s);
				return NULL;
			}
			s = t;
		}
		s[n++] = c;
	}
	if (!s || *r->p != '"') {
		free(s);
		return NULL;
	}
	r->p++;
	s[n] = '\0';
	return s;
}

static struct jv *value(struct rd *r);

static int push(struct jv *v, struct jv *item, char *key)
{
	struct jv **it = realloc(v->items, (v->n + 1) * sizeof(*it));

	if (!it)
		return -1;
	v->items = it;
	if (v->type == JV_OBJ) {
		char **k = realloc(v->keys, (v->n + 1) * sizeof(*k));

		if (!k)
			return -1;
		v->keys = k;
		v->keys[v->n] = key;
	}
	v->items[v->n++] = item;
	return 0;
}

static struct jv *container(struct rd *r, int obj)
{
	struct jv *v = mk(obj ? JV_OBJ : JV_ARR);

	if (!v || ++r->depth > 64)
		goto fail;
	r->p++;
	ws(r);
	if (*r->p == (obj ? '}' : ']')) {
		r->p++;
		r->depth--;
		return v;
	}
	for (;;) {
		char *key = NULL;
		struct jv *item;

		ws(r);
		if (obj) {
			key = str(r);
			ws(r);
			if (!key || *r->p != ':') {
				free(key);
				goto fail;
			}
			r->p++;
		}
		item = value(r);
		if (!item || push(v, item, key) < 0) {
			free(key);
			jv_free(item);
			goto fail;
		}
		ws(r);
		if (*r->p == ',') {
			r->p++;
			continue;
		}
		if (*r->p == (obj ? '}' : ']')) {
			r->p++;
			r->depth--;
			return v;
		}
		goto fail;
	}
fail:
	jv_free(v);
	return NULL;
}

static struct jv *value(struct rd *r)
{
	struct jv *v;
	char *end;

	ws(r);
	switch (*r->p) {
	case '{':
		return container(r, 1);
	case '[':
		return container(r, 0);
	case '"':
		v = mk(JV_STR);
		if (v && !(v->str = str(r))) {
			free(v);
			return NULL;
		}
		return v;
	case 't':
	case 'f':
		v = mk(JV_BOOL);
		if (!v)
			return NULL;
		v->num = *r->p == 't';
		if (strncmp(r->p, v->num ? "true" : "false", v->num ? 4 : 5)) {
			free(v);
			return NULL;
		}
		r->p += v->num ? 4 : 5;
		return v;
	case 'n':
		if (strncmp(r->p, "null", 4))
			return NULL;
		r->p += 4;
		return mk(JV_NULL);
	default:
		v = mk(JV_NUM);
		if (!v)
			return NULL;
		v->num = strtod(r->p, &end);
		if (end == r->p) {
			free(v);
			return NULL;
		}
		r->p = end;
		return v;
	}
}

struct jv *jv_parse(const char *text)
{
	struct rd r = { text, 0 };
	struct jv *v = value(&r);

	if (!v)
		return NULL;
	ws(&r);
	if (*r.p) {
		jv_free(v);
		return NULL;
	}
	return v;
}

void jv_free(struct jv *v)
{
	if (!v)
		return;
	for (size_t i = 0; i < v->n; i++) {
		jv_free(v->items[i]);
		if (v->keys)
			free(v->keys[i]);
	}
	free(v->items);
	free(v->keys);
	free(v->str);
	free(v);
}

const struct jv *jv_get(const struct jv *v, const char *key)
{
	if (!v || v->type != JV_OBJ)
		return NULL;
	for (size_t i = 0; i < v->n; i++)
		if (strcmp(v->keys[i], key) == 0)
			return v->items[i];
	return NULL;
}

const struct jv *jv_at(const struct jv *v, size_t i)
{
	if (!v || (v->type != JV_ARR && v->type != JV_OBJ) || i >= v->n)
		return NULL;
	return v->items[i];
}

double jv_num(const struct jv *v, double dflt)
{
	return v && (v->type == JV_NUM || v->type == JV_BOOL) ? v->num : dflt;
}

int jv_has_num(const struct jv *v, double x)
{
	for (size_t i = 0; v && v->type == JV_ARR && i < v->n; i++)
		if (jv_num(v->items[i], x + 1) == x)
			return 1;
	return 0;
}
