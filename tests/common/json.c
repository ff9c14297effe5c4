/* SPDX-License-Identifier: MIT */
/* A strict recursive-descent JSON parser (see json.h). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

#define MAX_DEPTH 64

struct parser {
	const char *s;
	size_t len, pos;
	char *err;
	size_t errlen;
	int failed;
};

static int fail(struct parser *p, const char *what)
{
	if (!p->failed)
		snprintf(p->err, p->errlen, "offset %zu: %s", p->pos, what);
	p->failed = 1;
	return -1;
}

static void skip_ws(struct parser *p)
{
	while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
				   p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
		p->pos++;
}

static int peek(const struct parser *p)
{
	return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1;
}

static int literal(struct parser *p, const char *word)
{
	size_t n = strlen(word);

	if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
		return fail(p, "invalid literal");
	p->pos += n;
	return 0;
}

static int is_digit(int c)
{
	return c >= '0' && c <= '9';
}

static int number(struct parser *p, struct json *v)
{
	size_t start = p->pos;
	char buf[128];

	if (peek(p) == '-')
		p->pos++;
	if (peek(p) == '0') {
		p->pos++;
	} else if (is_digit(peek(p))) {
		while (is_digit(peek(p)))
			p->pos++;
	} else {
		return fail(p, "invalid number");
	}
	if (peek(p) == '.') {
		p->pos++;
		if (!is_digit(peek(p)))
			return fail(p, "digit expected after '.'");
		while (is_digit(peek(p)))
			p->pos++;
	}
	if (peek(p) == 'e' || peek(p) == 'E') {
		p->pos++;
		if (peek(p) == '+' || peek(p) == '-')
			p->pos++;
		if (!is_digit(peek(p)))
			return fail(p, "digit expected in exponent");
		while (is_digit(peek(p)))
			p->pos++;
	}
	if (p->pos - start >= sizeof(buf))
		return fail(p, "number too long");
	memcpy(buf, p->s + start, p->pos - start);
	buf[p->pos - start] = '\0';
	v->type = JSON_NUMBER;
	v->number = strtod(buf, NULL);
	return 0;
}

static int hex4(struct parser *p, unsigned *out)
{
	unsigned v = 0;

	for (int i = 0; i < 4; i++) {
		int c = peek(p);

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (unsigned)(c - 'A' + 10);
		else
			return fail(p, "invalid \\u escape");
		p->pos++;
	}
	*out = v;
	return 0;
}

static size_t put_utf8(char *o, unsigned cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | cp >> 6);
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | cp >> 12);
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | cp >> 18);
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* The one-character escapes and what each stands for. */
static const char escaped[] = "\"\\/bfnrt";
static const char unescaped[] = "\"\\/\b\f\n\r\t";

static int string(struct parser *p, char **out)
{
	char *buf;
	size_t n = 0;

	if (peek(p) != '"')
		return fail(p, "'\"' expected");
	p->pos++;
	/* Decoded text is never longer than its source. */
	buf = malloc(p->len - p->pos + 1);
	if (!buf)
		return fail(p, "out of memory");
	for (;;) {
		int c = peek(p);
		const char *esc;
		unsigned cp, lo;

		if (c < 0) {
			free(buf);
			return fail(p, "unterminated string");
		}
		if (c < 0x20) {
			free(buf);
			return fail(p, "unescaped control character in string");
		}
		p->pos++;
		if (c == '"')
			break;
		if (c != '\\') {
			buf[n++] = (char)c;
			continue;
		}
		c = peek(p);
		p->pos++;
		esc = c > 0 ? strchr(escaped, c) : NULL;
		if (esc) {
			buf[n++] = unescaped[esc - escaped];
			continue;
		}
		if (c != 'u') {
			free(buf);
			return fail(p, "invalid escape");
		}
		if (hex4(p, &cp) < 0) {
			free(buf);
			return -1;
		}
		if (cp >= 0xd800 && cp < 0xdc00) {
			if (peek(p) != '\\' || p->pos + 1 >= p->len || p->s[p->pos + 1] != 'u') {
				free(buf);
				return fail(p, "lone high surrogate");
			}
			p->pos += 2;
			if (hex4(p, &lo) < 0 || lo < 0xdc00 || lo >= 0xe000) {
				free(buf);
				return fail(p, "invalid low surrogate");
			}
			cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
		} else if (cp >= 0xdc00 && cp < 0xe000) {
			free(buf);
			return fail(p, "lone low surrogate");
		}
		n += put_utf8(buf + n, cp);
	}
	buf[n] = '\0';
	*out = buf;
	return 0;
}

static int value(struct parser *p, struct json *v, int depth);

static int push(struct parser *p, struct json *v, size_t *cap, char *key)
{
	if (v->n == *cap) {
		size_t nc = *cap ? *cap * 2 : 8;
		struct json *t = realloc(v->items, nc * sizeof(*t));
		char **k;

		if (!t)
			return fail(p, "out of memory");
		v->items = t;
		if (v->type == JSON_OBJECT) {
			k = realloc(v->keys, nc * sizeof(*k));
			if (!k)
				return fail(p, "out of memory");
			v->keys = k;
		}
		*cap = nc;
	}
	memset(&v->items[v->n], 0, sizeof(v->items[0]));
	if (v->type == JSON_OBJECT)
		v->keys[v->n] = key;
	v->n++;
	return 0;
}

static int container(struct parser *p, struct json *v, int depth)
{
	int obj = peek(p) == '{';
	char close = obj ? '}' : ']';
	size_t cap = 0;

	if (depth >= MAX_DEPTH)
		return fail(p, "nested too deep");
	v->type = obj ? JSON_OBJECT : JSON_ARRAY;
	p->pos++;
	skip_ws(p);
	if (peek(p) == close) {
		p->pos++;
		return 0;
	}
	for (;;) {
		char *key = NULL;

		skip_ws(p);
		if (obj) {
			if (string(p, &key) < 0)
				return -1;
			skip_ws(p);
			if (peek(p) != ':') {
				free(key);
				return fail(p, "':' expected");
			}
			p->pos++;
			skip_ws(p);
		}
		if (push(p, v, &cap, key) < 0) {
			free(key);
			return -1;
		}
		if (value(p, &v->items[v->n - 1], depth + 1) < 0)
			return -1;
		skip_ws(p);
		if (peek(p) == ',') {
			p->pos++;
			skip_ws(p);
			if (peek(p) == close)
				return fail(p, "trailing comma");
			continue;
		}
		if (peek(p) == close) {
			p->pos++;
			return 0;
		}
		return fail(p, obj ? "',' or '}' expected" : "',' or ']' expected");
	}
}

static int value(struct parser *p, struct json *v, int depth)
{
	skip_ws(p);
	switch (peek(p)) {
	case '{':
	case '[':
		return container(p, v, depth);
	case '"':
		v->type = JSON_STRING;
		return string(p, &v->string);
	case 't':
		v->type = JSON_BOOL;
		v->number = 1;
		return literal(p, "true");
	case 'f':
		v->type = JSON_BOOL;
		return literal(p, "false");
	case 'n':
		v->type = JSON_NULL;
		return literal(p, "null");
	case -1:
		return fail(p, "value expected, found the end");
	default:
		return number(p, v);
	}
}

static void free_inner(struct json *v)
{
	for (size_t i = 0; i < v->n; i++) {
		free_inner(&v->items[i]);
		if (v->keys)
			free(v->keys[i]);
	}
	free(v->items);
	free(v->keys);
	free(v->string);
}

void json_free(struct json *v)
{
	if (!v)
		return;
	free_inner(v);
	free(v);
}

struct json *json_parse(const char *text, size_t len, char *err, size_t errlen)
{
	struct parser p = { .s = text, .len = len, .err = err, .errlen = errlen };
	struct json *v = calloc(1, sizeof(*v));

	if (!v) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (memchr(text, '\0', len)) {
		snprintf(err, errlen, "NUL byte in the text");
		free(v);
		return NULL;
	}
	if (value(&p, v, 0) == 0) {
		skip_ws(&p);
		if (p.pos != p.len)
			fail(&p, "text after the value");
	}
	if (p.failed) {
		json_free(v);
		return NULL;
	}
	return v;
}

const struct json *json_get(const struct json *obj, const char *key)
{
	if (!obj || obj->type != JSON_OBJECT)
		return NULL;
	for (size_t i = 0; i < obj->n; i++)
		if (strcmp(obj->keys[i], key) == 0)
			return &obj->items[i];
	return NULL;
}

const char *json_type_name(enum json_type t)
{
	static const char *const names[] = { "null", "bool", "number", "string", "array", "object" };

	return (unsigned)t < 6 ? names[t] : "?";
}

const struct json *json_at(const struct json *v, size_t i)
{
	if (!v || (v->type != JSON_ARRAY && v->type != JSON_OBJECT) || i >= v->n)
		return NULL;
	return &v->items[i];
}

double json_num(const struct json *v, double dflt)
{
	return v && (v->type == JSON_NUMBER || v->type == JSON_BOOL) ? v->number : dflt;
}

int json_has_num(const struct json *v, double x)
{
	for (size_t i = 0; v && v->type == JSON_ARRAY && i < v->n; i++)
		if (json_num(&v->items[i], x + 1) == x)
			return 1;
	return 0;
}
