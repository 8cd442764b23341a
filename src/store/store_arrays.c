/* PostgreSQL array literals built as text ({...}), one per parameter of
 * a batched statement. */
#include "store_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void store_array_put(struct store_array *a, const char *s, size_t n)
{
	if (a->sa_failed)
		return;
	if (a->sa_len + n + 1 > a->sa_cap) {
		size_t cap = a->sa_cap ? a->sa_cap : 256;
		while (cap < a->sa_len + n + 1)
			cap *= 2;
		char *b = realloc(a->sa_buf, cap);
		if (b == NULL) {
			a->sa_failed = 1;
			return;
		}
		a->sa_buf = b;
		a->sa_cap = cap;
	}
	memcpy(a->sa_buf + a->sa_len, s, n);
	a->sa_len += n;
	a->sa_buf[a->sa_len] = '\0';
}

/* Starts the next element: '{' before the first, ',' before the others. */
static void store_array_next(struct store_array *a)
{
	store_array_put(a, a->sa_len == 0 ? "{" : ",", 1);
}

void store_array_i64(struct store_array *a, int64_t v)
{
	char num[24];

	store_array_next(a);
	store_array_put(a, num, (size_t)snprintf(num, sizeof(num), "%" PRId64, v));
}

void store_array_null(struct store_array *a)
{
	store_array_next(a);
	store_array_put(a, "NULL", 4);
}

/* A quoted element; '"' and '\' are escaped with '\'. */
void store_array_text(struct store_array *a, const char *s, size_t n)
{
	store_array_next(a);
	store_array_put(a, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		size_t run = i;
		while (run < n && s[run] != '"' && s[run] != '\\')
			run++;
		store_array_put(a, s + i, run - i);
		if (run == n)
			break;
		store_array_put(a, "\\", 1);
		store_array_put(a, s + run, 1);
		i = run;
	}
	store_array_put(a, "\"", 1);
}

/* A bytea element in hex input form: "\\x0a1b..." (the backslash escaped). */
void store_array_bytea(struct store_array *a, const uint8_t *p, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	char chunk[128];

	store_array_next(a);
	store_array_put(a, "\"\\\\x", 4);
	for (size_t i = 0; i < n;) {
		size_t k = 0;
		for (; i < n && k < sizeof(chunk); i++) {
			chunk[k++] = hex[p[i] >> 4];
			chunk[k++] = hex[p[i] & 15];
		}
		store_array_put(a, chunk, k);
	}
	store_array_put(a, "\"", 1);
}

void store_array_bool(struct store_array *a, int v)
{
	store_array_next(a);
	store_array_put(a, v ? "t" : "f", 1);
}

/* Closes every array of ARRS; -1 if building any of them failed. */
int store_arrays_close(struct store_array *arrs, size_t n)
{
	int rc = 0;

	for (size_t i = 0; i < n; i++) {
		store_array_put(&arrs[i], "}", 1);
		if (arrs[i].sa_failed)
			rc = -1;
	}
	return rc;
}

void store_arrays_free(struct store_array *arrs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(arrs[i].sa_buf);
}
