/*
 * The key tables' walker: config_load_object applies a table (config.c,
 * config_routes.c) to a JSON object, through one setter per value type
 * (numbers within bounds, booleans, strings and string lists through
 * their check, addresses, release_on), each storing a JSON value into the
 * field its cfg_key row names or writing why not into ERR;
 * config_free_object frees what a table's fields hold.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* strdup, strndup, explicit_bzero */
#endif

#include "config_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "headers.h"

/* Writes "config: " and the message into ERR; returns -1. */
int config_fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (err == NULL || errlen == 0)
		return -1;
	n = snprintf(err, errlen, "config: ");
	if (n < 0 || (size_t)n >= errlen)
		return -1;
	va_start(ap, fmt);
	vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

/* Copies at most 64 bytes of SRC for an error line, '?' for unprintable bytes. */
static void copy_printable(char *dst, size_t n, const char *src)
{
	size_t i;

	for (i = 0; i + 1 < n && i < 64 && src[i] != '\0'; i++)
		dst[i] = (src[i] >= 0x20 && src[i] < 0x7f && src[i] != '"') ? src[i] : '?';
	if (src[i] != '\0' && i + 4 < n) {
		memcpy(dst + i, "...", 3);
		i += 3;
	}
	dst[i] = '\0';
}

/* CFG_BOOL: true or false; CFG_INT, CFG_LONG, CFG_SIZE: an integer;
 * CFG_DOUBLE: integers and reals alike; numbers within [k->min, k->max]. */
static int set_scalar(const struct cfg_key *k, void *base, json_t *v, const char *name, char *err,
		      size_t errlen)
{
	void *p = cfg_field(base, k->off);
	int real = k->type == CFG_DOUBLE;
	long long n;
	double d;

	if (k->type == CFG_BOOL) {
		if (!json_is_boolean(v))
			return config_fail(err, errlen, "\"%s\" must be true or false", name);
		*(int *)p = json_is_true(v);
		return 0;
	}
	if (real ? !json_is_number(v) : !json_is_integer(v))
		return config_fail(err, errlen, "\"%s\" must be %s", name,
				   real ? "a number" : "an integer");
	n = real ? 0 : (long long)json_integer_value(v);
	d = json_number_value(v);
	if (real ? !(d >= (double)k->min && d <= (double)k->max) : (n < k->min || n > k->max))
		return config_fail(err, errlen, "\"%s\" must be between %lld and %lld", name,
				   k->min, k->max);
	if (k->type == CFG_INT)
		*(int *)p = (int)n;
	else if (k->type == CFG_LONG)
		*(long *)p = (long)n;
	else if (k->type == CFG_SIZE)
		*(size_t *)p = (size_t)n;
	else
		*(double *)p = d;
	return 0;
}

/* 1: V is null and K's key may be; 0: V is a string; -1: neither. */
static int string_or_null(const struct cfg_key *k, json_t *v, const char *name, char *err,
			  size_t errlen)
{
	if (json_is_null(v) && (k->flags & CFG_NULLABLE))
		return 1;
	if (!json_is_string(v))
		return config_fail(err, errlen, "\"%s\" must be a string%s", name,
				   (k->flags & CFG_NULLABLE) ? " or null" : "");
	return 0;
}

/* A string (copied), null if CFG_NULLABLE, then k->check if any. */
static int set_string(const struct cfg_key *k, void *base, json_t *v, const char *name, char *err,
		      size_t errlen)
{
	char **dst = cfg_field(base, k->off);
	const char *why;
	char *s;
	int rc = string_or_null(k, v, name, err, errlen);

	if (rc == -1)
		return -1;
	if (rc == 1) {
		free(*dst);
		*dst = NULL;
		return 0;
	}
	if ((k->flags & CFG_NONEMPTY) && json_string_length(v) == 0)
		return config_fail(err, errlen, "\"%s\" must not be empty", name);
	if ((s = strdup(json_string_value(v))) == NULL)
		return config_fail(err, errlen, "out of memory");
	if (k->check != NULL && (why = k->check(s)) != NULL) {
		free(s);
		return config_fail(err, errlen, "\"%s\" %s", name, why);
	}
	free(*dst);
	*dst = s;
	return 0;
}

/* A listen address (config_store_address), or null if CFG_NULLABLE. */
static int set_address(const struct cfg_key *k, void *base, json_t *v, const char *name, char *err,
		       size_t errlen)
{
	char label[136];
	int rc = string_or_null(k, v, name, err, errlen);

	if (rc != 0)
		return rc == 1 ? 0 : -1;
	snprintf(label, sizeof(label), "\"%s\"", name);
	return config_store_address(cfg_field(base, k->off), cfg_field(base, k->off2),
				    json_string_value(v), label, err, errlen);
}

/* "release_on": statuses (100..599) and classes ("1xx".."5xx") after which
 * a forward's claim is released rather than its answer stored. */
static int set_release_on(const struct cfg_key *k, void *base, json_t *v, const char *name,
			  char *err, size_t errlen)
{
	unsigned char *on = cfg_field(base, k->off);
	json_t *e;
	size_t i;

	if (!json_is_array(v))
		return config_fail(err, errlen,
				   "\"%s\" must be an array of statuses and classes "
				   "like [\"5xx\", 429]",
				   name);
	memset(on, 0, 600);
	json_array_foreach(v, i, e)
	{
		const char *s = json_string_value(e);
		if (json_is_integer(e) && json_integer_value(e) >= 100 &&
		    json_integer_value(e) <= 599) {
			on[json_integer_value(e)] = 1;
		} else if (s != NULL && strlen(s) == 3 && s[0] >= '1' && s[0] <= '5' &&
			   s[1] == 'x' && s[2] == 'x') {
			memset(on + (s[0] - '0') * 100, 1, 100);
		} else {
			return config_fail(err, errlen,
					   "\"%s[%zu]\" must be a status from 100 to 599 "
					   "or a class \"1xx\" to \"5xx\"",
					   name, i);
		}
	}
	return 0;
}

static void strings_free(void *arr, size_t n)
{
	char **list = arr;

	for (size_t i = 0; list != NULL && i < n; i++)
		free(list[i]);
	free(list);
}

/* Element I of a CFG_STRLIST: a non-empty string passing k->check, unlike
 * those before it. */
static int load_string(const struct cfg_key *k, void *arr, size_t i, json_t *e, const char *name,
		       char *err, size_t errlen)
{
	const struct cfg_key elem = { .type = CFG_STRING,
				      .flags = CFG_NONEMPTY,
				      .check = k->check };
	char **list = arr;
	char ename[160];

	snprintf(ename, sizeof(ename), "%s[%zu]", name, i);
	if (set_string(&elem, &list[i], e, ename, err, errlen) == -1)
		return -1;
	for (size_t j = 0; j < i; j++)
		if (strcmp(list[i], list[j]) == 0)
			return config_fail(err, errlen, "\"%s\" duplicates \"%s[%zu]\"", ename,
					   name, j);
	return 0;
}

static const struct cfg_list strings = { "strings", sizeof(char *), load_string, strings_free };

/* CFG_STRLIST and CFG_ROUTES: an array of at most k->max elements, each
 * loaded by L; replaces the list only once all are. */
static int set_list(const struct cfg_key *k, void *base, json_t *v, const char *name,
		    const struct cfg_list *l, char *err, size_t errlen)
{
	void **dst = cfg_field(base, k->off), *arr = NULL;
	size_t *count = cfg_field(base, k->off2);
	size_t n = json_array_size(v), i;
	json_t *e;

	if (!json_is_array(v))
		return config_fail(err, errlen, "\"%s\" must be an array of %s", name, l->what);
	if (n > (size_t)k->max)
		return config_fail(err, errlen, "\"%s\" must have at most %lld entries", name,
				   k->max);
	if (n > 0 && (arr = calloc(n, l->size)) == NULL)
		return config_fail(err, errlen, "out of memory");
	json_array_foreach(v, i, e)
	{
		if (l->load(k, arr, i, e, name, err, errlen) == -1) {
			l->free(arr, n);
			return -1;
		}
	}
	l->free(*dst, *count);
	*dst = arr;
	*count = n;
	return 0;
}

/* Stores V into the field K names in BASE, by K's type. */
static int set_value(const struct cfg_key *k, void *base, json_t *v, const char *name, char *err,
		     size_t errlen)
{
	switch (k->type) {
	case CFG_STRING:
		return set_string(k, base, v, name, err, errlen);
	case CFG_STRLIST:
		return set_list(k, base, v, name, &strings, err, errlen);
	case CFG_ADDRESS:
		return set_address(k, base, v, name, err, errlen);
	case CFG_ROUTES:
		return set_list(k, base, v, name, &config_route_list, err, errlen);
	case CFG_RELEASE_ON:
		return set_release_on(k, base, v, name, err, errlen);
	default:
		return set_scalar(k, base, v, name, err, errlen);
	}
}

int config_load_object(void *base, const struct cfg_key *keys, size_t nkeys, json_t *obj,
		       const char *prefix, char *err, size_t errlen)
{
	char name[128], shown[72];
	const char *key;
	json_t *v;
	size_t i;
	int rc;

	json_object_foreach(obj, key, v)
	{
		for (i = 0; i < nkeys; i++)
			if (strcmp(key, keys[i].name) == 0)
				break;
		if (i == nkeys) {
			copy_printable(shown, sizeof(shown), key);
			return config_fail(err, errlen, "unknown key \"%s%s\"", prefix, shown);
		}
	}
	for (i = 0; i < nkeys; i++) {
		const struct cfg_key *k = &keys[i];
		json_t *def = NULL;

		snprintf(name, sizeof(name), "%s%s", prefix, k->name);
		if ((v = json_object_get(obj, k->name)) == NULL) {
			if (k->flags & CFG_REQUIRED)
				return config_fail(err, errlen, "\"%s\" is required", name);
			if (k->def == NULL)
				continue;
			if ((v = def = json_loads(k->def, JSON_DECODE_ANY, NULL)) == NULL)
				return config_fail(err, errlen, "bad built-in default for \"%s\"",
						   name);
		}
		rc = set_value(k, base, v, name, err, errlen);
		json_decref(def);
		if (rc == -1)
			return -1;
	}
	return 0;
}

void config_free_object(void *base, const struct cfg_key *keys, size_t nkeys)
{
	for (size_t i = 0; i < nkeys; i++) {
		const struct cfg_key *k = &keys[i];
		void *p = cfg_field(base, k->off);
		char *s;

		switch (k->type) {
		case CFG_STRING:
		case CFG_ADDRESS:
			if ((s = *(char **)p) != NULL && (k->flags & CFG_SECRET))
				explicit_bzero(s, strlen(s));
			free(s);
			break;
		case CFG_STRLIST:
		case CFG_ROUTES:
			(k->type == CFG_ROUTES ? &config_route_list : &strings)
				->free(*(void **)p, *(size_t *)cfg_field(base, k->off2));
			break;
		default:
			break;
		}
	}
}
