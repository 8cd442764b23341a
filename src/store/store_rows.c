/* Store: the table-driven row reader of store_admin.c, store_records.c and
 * store_cli.c. A table of struct store_col, one row per column, says where
 * each column goes and as what: into a struct (store_read_row, and
 * store_read_rows for a result's every row into an array), or into a JSON
 * object's member (store_row_json); store_free_row frees by the same
 * table. And the one-row statements whose answer is a few integers
 * (store_ints). */
#include "store_int.h"

#include <jansson.h>
#include <libpq-fe.h>
#include <stdlib.h>
#include <string.h>

#include "rfc3339.h"

static void *field(void *base, size_t off)
{
	return (char *)base + off;
}

/* Parses "1,3,7" into a new array (free()); 0 or -1. */
static int store_id_list(const char *s, uint32_t **ids, size_t *n)
{
	size_t cap = 1;

	for (const char *p = s; *p != '\0'; p++)
		cap += *p == ',';
	*n = 0;
	*ids = calloc(cap, sizeof(**ids));
	if (*ids == NULL)
		return -1;
	while (*s != '\0') {
		char *end;
		unsigned long v = strtoul(s, &end, 10);
		if (end == s || (*end != ',' && *end != '\0') || *n == cap)
			return -1;
		(*ids)[(*n)++] = (uint32_t)v;
		s = *end == ',' ? end + 1 : end;
	}
	return 0;
}

/* A text column into *OUT: a new string (free()), NULL for a NULL; 0, or
 * -1 out of memory. */
static int store_read_str(const PGresult *r, int row, int col, char **out)
{
	*out = PQgetisnull(r, row, col) ? NULL : strdup(PQgetvalue(r, row, col));
	return PQgetisnull(r, row, col) || *out != NULL ? 0 : -1;
}

/* A 16-byte id (a bytea column) into ID; 0, or -1 when it is not 16 bytes
 * or out of memory (ID then unchanged). */
static int store_read_id(const PGresult *r, int row, int col, uint8_t *id)
{
	size_t n;
	unsigned char *v = store_bytea(r, row, col, &n);
	int ok = v != NULL && n == 16;

	if (ok)
		memcpy(id, v, 16);
	free(v);
	return ok ? 0 : -1;
}

/* One column into the struct BASE; 0, or -1 (what it allocated is kept
 * in BASE for store_free_row). */
static int store_read_col(const PGresult *r, int row, const struct store_col *c, void *base)
{
	const char *v = PQgetvalue(r, row, c->col);
	void *p = field(base, c->off);

	switch (c->type) {
	case SC_U32:
		*(uint32_t *)p = (uint32_t)store_i64(r, row, c->col);
		return 0;
	case SC_INT:
		*(int *)p = (int)store_i64(r, row, c->col);
		return 0;
	case SC_BOOL:
		*(int *)p = store_bool(r, row, c->col);
		return 0;
	case SC_HAS:
		*(int *)p = !PQgetisnull(r, row, c->col);
		return 0;
	case SC_TEXT:
		snprintf(p, c->aux, "%s", v);
		return 0;
	case SC_STR:
		return store_read_str(r, row, c->col, p);
	case SC_BYTEA:
		*(unsigned char **)p = store_bytea(r, row, c->col, field(base, c->aux));
		return *(unsigned char **)p != NULL ? 0 : -1;
	case SC_ID:
		return store_read_id(r, row, c->col, p);
	case SC_IDS:
		return store_id_list(v, p, field(base, c->aux));
	case SC_RESPONSE:
		return store_read_response(r, row, c->col, p);
	default:
		*(int64_t *)p = store_i64(r, row, c->col);
		return 0;
	}
}

int store_read_row(const PGresult *r, int row, const struct store_col *cols, size_t ncols,
		   void *base)
{
	for (size_t i = 0; i < ncols; i++) {
		if (store_read_col(r, row, &cols[i], base) < 0) {
			store_free_row(base, cols, ncols);
			return -1;
		}
	}
	return 0;
}

void store_free_row(void *base, const struct store_col *cols, size_t ncols)
{
	for (size_t i = 0; i < ncols; i++) {
		void **p = field(base, cols[i].off);

		if (cols[i].type == SC_RESPONSE) {
			store_response_free((struct stored_response *)p);
		} else if (cols[i].type == SC_STR || cols[i].type == SC_BYTEA ||
			   cols[i].type == SC_IDS) {
			free(*p);
			*p = NULL;
		}
	}
}

int store_read_rows(PGresult *r, const struct store_col *cols, size_t ncols, size_t size,
		    void *rows, size_t *n)
{
	size_t m = r != NULL ? (size_t)PQntuples(r) : 0;
	char *out = r != NULL ? calloc(m > 0 ? m : 1, size) : NULL;
	size_t i;

	*(void **)rows = NULL;
	*n = 0;
	for (i = 0; out != NULL && i < m; i++)
		if (store_read_row(r, (int)i, cols, ncols, out + i * size) < 0)
			break;
	PQclear(r);
	if (out == NULL || i < m) {
		store_free_rows(out, i, cols, ncols, size);
		return -1;
	}
	*(void **)rows = out;
	*n = m;
	return 0;
}

void store_free_rows(void *rows, size_t n, const struct store_col *cols, size_t ncols, size_t size)
{
	for (size_t i = 0; rows != NULL && i < n; i++)
		store_free_row((char *)rows + i * size, cols, ncols);
	free(rows);
}

json_t *store_row_json(const PGresult *r, int row, const struct store_col *cols, size_t ncols)
{
	json_t *o = json_object();

	for (size_t i = 0; o != NULL && i < ncols; i++) {
		const struct store_col *c = &cols[i];
		const char *v = PQgetvalue(r, row, c->col);
		json_t *j;

		if (PQgetisnull(r, row, c->col))
			continue;
		if (c->type == SC_TIME)
			j = rfc3339_json(store_i64(r, row, c->col));
		else if (c->type == SC_BOOL)
			j = json_boolean(v[0] == 't');
		else if (c->type == SC_TEXT)
			j = json_string(v);
		else
			j = json_integer(strtoll(v, NULL, 10));
		if (json_object_set_new(o, c->name, j) < 0) {
			json_decref(o);
			o = NULL;
		}
	}
	return o;
}

json_t *store_rows_json(const PGresult *r, int nrows, const struct store_col *cols, size_t ncols)
{
	json_t *a = json_array();

	for (int i = 0; a != NULL && i < nrows; i++) {
		if (json_array_append_new(a, store_row_json(r, i, cols, ncols)) < 0) {
			json_decref(a);
			a = NULL;
		}
	}
	return a;
}

int store_ints(const struct db_stmt *stmt, const char *const *values, const int *lengths,
	       const int *formats, int64_t *out, int n)
{
	PGresult *r = db_run(stmt, values, lengths, formats);
	int rows = r != NULL ? PQntuples(r) : -1;

	for (int c = 0; c < n; c++)
		out[c] = rows < 1			  ? 0
			 : PQftype(r, c) == 16 /* bool */ ? store_bool(r, 0, c)
							  : store_i64(r, 0, c);
	PQclear(r);
	return rows;
}
