/*
 * Config setters: one per value type (integers within bounds, doubles,
 * booleans, strings and string lists through their check,
 * release_on), each storing a JSON value into the field its
 * cfg_key row names, or writing why not into ERR; and the walker that
 * applies a table of them to a JSON object (config_load_object).
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
void config_copy_printable(char *dst, size_t n, const char *src)
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

static void *field(void *base, size_t off)
{
	return (char *)base + off;
}

/* Reads an integer within [k->min, k->max]. */
static int get_integer(const struct cfg_key *k, json_t *v, const char *name, long long *out,
		       char *err, size_t errlen)
{
	long long n = 0;

	if (!json_is_integer(v))
		return config_fail(err, errlen, "\"%s\" must be an integer", name);
	n = (long long)json_integer_value(v);
	if (n < k->min || n > k->max)
		return config_fail(err, errlen, "\"%s\" must be between %lld and %lld", name,
				   k->min, k->max);
	*out = n;
	return 0;
}

int config_set_int(const struct cfg_key *k, void *base, json_t *v, const char *name, char *err,
		   size_t errlen)
{
	long long n = 0;

	if (get_integer(k, v, name, &n, err, errlen) == -1)
		return -1;
	*(int *)field(base, k->off) = (int)n;
	return 0;
}

int config_set_long(const struct cfg_key *k, void *base, json_t *v, const char *name, char *err,
		    size_t errlen)
{
	long long n = 0;

	if (get_integer(k, v, name, &n, err, errlen) == -1)
		return -1;
	*(long *)field(base, k->off) = (long)n;
	return 0;
}

int config_set_size(const struct cfg_key *k, void *base, json_t *v, const char *name, char *err,
		    size_t errlen)
{
	long long n = 0;

	if (get_integer(k, v, name, &n, err, errlen) == -1)
		return -1;
	*(size_t *)field(base, k->off) = (size_t)n;
	return 0;
}

/* Integers and reals alike, within [k->min, k->max]. */
int config_set_double(const struct cfg_key *k, void *base, json_t *v, const char *name, char *err,
		      size_t errlen)
{
	double d;

	if (!json_is_number(v))
		return config_fail(err, errlen, "\"%s\" must be a number", name);
	d = json_number_value(v);
	if (!(d >= (double)k->min && d <= (double)k->max))
		return config_fail(err, errlen, "\"%s\" must be between %lld and %lld", name,
				   k->min, k->max);
	*(double *)field(base, k->off) = d;
	return 0;
}

int config_set_bool(const struct cfg_key *k, void *base, json_t *v, const char *name, char *err,
		    size_t errlen)
{
	if (!json_is_boolean(v))
		return config_fail(err, errlen, "\"%s\" must be true or false", name);
	*(int *)field(base, k->off) = json_is_true(v);
	return 0;
}

/* A string (copied), null if CFG_NULLABLE, then k->check if any. */
int config_set_string(const struct cfg_key *k, void *base, json_t *v, const char *name, char *err,
		      size_t errlen)
{
	char **dst = field(base, k->off);
	const char *why;
	char *s;

	if (json_is_null(v) && (k->flags & CFG_NULLABLE)) {
		free(*dst);
		*dst = NULL;
		return 0;
	}
	if (!json_is_string(v))
		return config_fail(err, errlen, "\"%s\" must be a string%s", name,
				   (k->flags & CFG_NULLABLE) ? " or null" : "");
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

/* "release_on": statuses (100..599) and classes ("1xx".."5xx") after which
 * a forward's claim is released rather than its answer stored. */
int config_set_release_on(const struct cfg_key *k, void *base, json_t *v, const char *name,
			  char *err, size_t errlen)
{
	unsigned char *on = field(base, k->off);
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

/* An array of at most k->max distinct non-empty strings, each passing k->check. */
int config_set_strlist(const struct cfg_key *k, void *base, json_t *v, const char *name, char *err,
		       size_t errlen)
{
	char ***dst = field(base, k->off);
	size_t *count = field(base, k->count_off);
	char **list = NULL;
	char ename[128];
	const char *why;
	json_t *e;
	size_t n, i, j;
	int ret = -1;

	if (!json_is_array(v))
		return config_fail(err, errlen, "\"%s\" must be an array of strings", name);
	n = json_array_size(v);
	if (n > (size_t)k->max)
		return config_fail(err, errlen, "\"%s\" must have at most %lld entries", name,
				   k->max);
	if (n > 0 && (list = calloc(n, sizeof(*list))) == NULL)
		return config_fail(err, errlen, "out of memory");
	json_array_foreach(v, i, e)
	{
		snprintf(ename, sizeof(ename), "%s[%zu]", name, i);
		if (!json_is_string(e)) {
			config_fail(err, errlen, "\"%s\" must be a string", ename);
			goto done;
		}
		if (json_string_length(e) == 0) {
			config_fail(err, errlen, "\"%s\" must not be empty", ename);
			goto done;
		}
		if ((list[i] = strdup(json_string_value(e))) == NULL) {
			config_fail(err, errlen, "out of memory");
			goto done;
		}
		if (k->check != NULL && (why = k->check(list[i])) != NULL) {
			config_fail(err, errlen, "\"%s\" %s", ename, why);
			goto done;
		}
		for (j = 0; j < i; j++) {
			if (strcmp(list[i], list[j]) == 0) {
				config_fail(err, errlen, "\"%s\" duplicates \"%s[%zu]\"", ename,
					    name, j);
				goto done;
			}
		}
	}
	config_strlist_free(*dst, *count);
	*dst = list;
	*count = n;
	list = NULL;
	ret = 0;
done:
	config_strlist_free(list, n);
	return ret;
}

void config_strlist_free(char **list, size_t n)
{
	size_t i;

	if (list == NULL)
		return;
	for (i = 0; i < n; i++)
		free(list[i]);
	free(list);
}

/*
 * Fills BASE from OBJ by the table KEYS: unknown keys are errors, absent
 * keys take their default, absent CFG_REQUIRED keys are errors. PREFIX is
 * put before key names in messages ("routes[0].").
 */
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
			config_copy_printable(shown, sizeof(shown), key);
			return config_fail(err, errlen, "unknown key \"%s%s\"", prefix, shown);
		}
	}
	for (i = 0; i < nkeys; i++) {
		const struct cfg_key *k = &keys[i];

		snprintf(name, sizeof(name), "%s%s", prefix, k->name);
		if ((v = json_object_get(obj, k->name)) != NULL) {
			rc = k->set(k, base, v, name, err, errlen);
		} else if (k->flags & CFG_REQUIRED) {
			return config_fail(err, errlen, "\"%s\" is required", name);
		} else if (k->def != NULL) {
			json_t *def = json_loads(k->def, JSON_DECODE_ANY, NULL);

			if (def == NULL)
				return config_fail(err, errlen, "bad built-in default for \"%s\"",
						   name);
			rc = k->set(k, base, def, name, err, errlen);
			json_decref(def);
		} else {
			rc = 0;
		}
		if (rc == -1)
			return -1;
	}
	return 0;
}
