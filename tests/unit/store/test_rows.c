/* Unit tests for the table-driven row reader (store_rows.c), over results
 * made in memory (libpq's PQmakeEmptyPGresult, no database): every column
 * type into a struct, a value that does not fit failing the whole read
 * with nothing left allocated, and rows as JSON objects (members in the
 * table's order, NULL columns left out). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "rfc3339.h"
#include "store_int.h"
#include "unit.h"

/* A result of NF text columns named NAMES typed TYPES and NROWS rows of
 * VALUES (row by row; NULL for SQL NULL). */
static PGresult *result(int nf, const char *const *names, const Oid *types, int nrows,
			const char *const *values)
{
	PGresult *r = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);
	PGresAttDesc attrs[16];

	assert_non_null(r);
	assert_true(nf <= (int)(sizeof(attrs) / sizeof(attrs[0])));
	memset(attrs, 0, sizeof(attrs));
	for (int c = 0; c < nf; c++) {
		attrs[c].name = (char *)(uintptr_t)names[c];
		attrs[c].typid = types[c];
		attrs[c].typlen = -1;
		attrs[c].atttypmod = -1;
	}
	assert_int_equal(PQsetResultAttrs(r, nf, attrs), 1);
	for (int i = 0; i < nrows * nf; i++) {
		const char *v = values[i];
		assert_int_equal(PQsetvalue(r, i / nf, i % nf, (char *)(uintptr_t)v,
					    v ? (int)strlen(v) : -1),
				 1);
	}
	return r;
}

struct row {
	int64_t big;
	uint32_t u;
	int i, b, has;
	char text[4];
	char *str;
	unsigned char *bytes;
	size_t nbytes;
	uint8_t id[16];
	uint32_t *ids;
	size_t nids;
};

#define F(f) STORE_FIELD(struct row, f)
static const struct store_col cols[] = {
	{ 0, SC_I64, F(big) }, { 1, SC_U32, F(u) },
	{ 2, SC_INT, F(i) },   { 3, SC_BOOL, F(b) },
	{ 4, SC_HAS, F(has) }, { 4, SC_TEXT, STORE_TEXT(struct row, text) },
	{ 5, SC_STR, F(str) }, { 6, SC_BYTEA, STORE_COUNTED(struct row, bytes, nbytes) },
	{ 7, SC_ID, F(id) },   { 8, SC_IDS, STORE_COUNTED(struct row, ids, nids) },
};
static const char *const names[] = { "big", "u", "i", "b", "t", "s", "bytes", "id", "ids" };
static const Oid types[] = { 20, 23, 23, 16, 25, 25, 17, 17, 25 };
#define ID16 "\\x000102030405060708090a0b0c0d0e0f"

static void test_struct_rows(void **state)
{
	const char *values[] = {
		"9000000000", "4000000000", "-7", "t",	"abcdef", "phase", "\\x0102", ID16, "1,3,7",
		NULL,	      NULL,	    NULL, NULL, NULL,	  NULL,	   NULL,      ID16, "",
	};
	struct row *rows;
	size_t n;

	(void)state;
	assert_int_equal(store_read_rows(result(9, names, types, 2, values), cols,
					 IDEMD_ARRAY_LEN(cols), sizeof(*rows), &rows, &n),
			 0);
	assert_int_equal(n, 2);
	assert_int_equal(rows[0].big, 9000000000LL);
	assert_int_equal(rows[0].u, 4000000000U);
	assert_int_equal(rows[0].i, -7);
	assert_int_equal(rows[0].b, 1);
	assert_int_equal(rows[0].has, 1);
	assert_string_equal(rows[0].text, "abc"); /* cut to fit */
	assert_string_equal(rows[0].str, "phase");
	assert_int_equal(rows[0].nbytes, 2);
	assert_memory_equal(rows[0].bytes, "\x01\x02", 2);
	assert_int_equal(rows[0].id[15], 15);
	assert_int_equal(rows[0].nids, 3);
	assert_int_equal(rows[0].ids[2], 7);
	/* NULL: 0, "", no copy; a bytea NULL is an empty buffer */
	assert_int_equal(rows[1].big + rows[1].u + rows[1].i + rows[1].b + rows[1].has, 0);
	assert_string_equal(rows[1].text, "");
	assert_null(rows[1].str);
	assert_non_null(rows[1].bytes);
	assert_int_equal(rows[1].nbytes, 0);
	assert_int_equal(rows[1].nids, 0);
	store_free_rows(rows, n, cols, IDEMD_ARRAY_LEN(cols), sizeof(*rows));

	/* no rows: an empty array; a failed statement: -1 */
	assert_int_equal(store_read_rows(result(9, names, types, 0, NULL), cols,
					 IDEMD_ARRAY_LEN(cols), sizeof(*rows), &rows, &n),
			 0);
	assert_int_equal(n, 0);
	free(rows);
	assert_int_equal(
		store_read_rows(NULL, cols, IDEMD_ARRAY_LEN(cols), sizeof(*rows), &rows, &n), -1);
	assert_null(rows);
}

/* A record id that is not 16 bytes, or a key list that does not parse,
 * fails the whole read; what earlier rows held is freed (ASan would say). */
static void test_struct_refusals(void **state)
{
	const char *short_id[] = { "1", "2", "3", "f", "x", "s", "\\x01", ID16,	   "1",
				   "1", "2", "3", "f", "x", "s", "\\x01", "\\x01", "1" };
	const char *bad_ids[] = { "1", "2", "3", "f", "x", "s", "\\x01", ID16, "1,x" };
	struct row *rows;
	size_t n = 9;

	(void)state;
	assert_int_equal(store_read_rows(result(9, names, types, 2, short_id), cols,
					 IDEMD_ARRAY_LEN(cols), sizeof(*rows), &rows, &n),
			 -1);
	assert_null(rows);
	assert_int_equal(n, 0);
	assert_int_equal(store_read_rows(result(9, names, types, 1, bad_ids), cols,
					 IDEMD_ARRAY_LEN(cols), sizeof(*rows), &rows, &n),
			 -1);
}

static void test_json_rows(void **state)
{
	static const struct store_col jcols[] = {
		{ 0, SC_TIME, .name = "at" },
		{ 1, SC_TEXT, .name = "event" },
		{ 2, SC_I64, .name = "attempt" },
		{ 3, SC_BOOL, .name = "ok" },
	};
	const char *const jnames[] = { "at", "event", "attempt", "ok" };
	const Oid jtypes[] = { 20, 25, 23, 16 };
	const char *values[] = { "1700000000123", "claimed", "2", "f", "0", "revoked", NULL, NULL };
	PGresult *r = result(4, jnames, jtypes, 2, values);
	char want[256], at[RFC3339_MAX];
	json_t *a;

	(void)state;
	a = store_rows_json(r, 2, jcols, IDEMD_ARRAY_LEN(jcols));
	assert_non_null(a);
	char *text = json_dumps(a, JSON_COMPACT | JSON_PRESERVE_ORDER);
	rfc3339_text(1700000000123LL, at);
	snprintf(want, sizeof(want),
		 "[{\"at\":\"%s\",\"event\":\"claimed\",\"attempt\":2,\"ok\":false},"
		 "{\"at\":\"1970-01-01T00:00:00.000Z\",\"event\":\"revoked\"}]",
		 at);
	assert_string_equal(text, want);
	free(text);
	json_decref(a);
	/* the first row only */
	a = store_rows_json(r, 1, jcols, IDEMD_ARRAY_LEN(jcols));
	assert_int_equal(json_array_size(a), 1);
	json_decref(a);
	PQclear(r);
}

UNIT_MAIN(cmocka_unit_test(test_struct_rows), cmocka_unit_test(test_struct_refusals),
	  cmocka_unit_test(test_json_rows))
