/*
 * Store internals shared by its parts: store.c (pool and row helpers,
 * claims and completions), store_arrays.c (array literals),
 * store_records.c (the other record statements: release, extend,
 * checkpoint, revoke, reads, audit events, versions, sweeps, replay
 * counts), store_admin.c (tenants, API keys, operations, signing keys),
 * store_cli.c (the records CLI's) and store_rows.c (the table-driven row
 * reader). Not for other modules: they see store.h.

 *
 * Ownership: as store.h says.
 */
#ifndef IDEMD_STORE_INT_H
#define IDEMD_STORE_INT_H

#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "db.h"
#include "store.h"

/* Statement ids, one per statement of all the files (db.c prepares each
 * once per connection under its id). */
enum {
	ST_TENANT_CREATE = 1,
	ST_TENANT_BY_KEY,
	ST_TENANT_BY_NAME,
	ST_OP_PUT,
	ST_OP_GET,
	ST_OP_BY_ID,
	ST_OP_LIST,
	ST_KEYS_LOAD,
	ST_KEYS_NEWEST,
	ST_KEY_INSERT,
	ST_KEY_FIRST,
	ST_KEYS_PRUNE,
	ST_RELEASE,
	ST_REVOKE,
	ST_RECORD_GET,
	ST_VERSION_GET,
	ST_VERSION_BUMP,
	ST_SWEEP,
	ST_CLAIM_MANY,
	ST_COMPLETE_MANY,
	ST_TENANT_LIST,
	ST_TENANT_DELETE,
	ST_APIKEY_ADD,
	ST_APIKEY_REVOKE,
	ST_KEYS_TABLE,
	ST_KEYS_COUNT,
	ST_KEYS_RESEAL,
	ST_EXTEND,
	ST_CHECKPOINT,
	ST_EVENTS_GET,
	ST_EVENTS_SWEEP,
	ST_RECORD_LIST,
	ST_REPLAYS_ADD,
	ST_RECORDS_STUCK,
	ST_CLAIM_FRESH,
	ST_CLAIM_ONE,
	ST_COMPLETE_CURRENT,
	ST_COMPLETE_ONE,
	ST_CLOCK,
	ST_CLI_RECORD,
	ST_CLI_EVENTS,
	ST_CLI_LIST,
	ST_CLI_RELEASE,
	ST_STATS_STALE,
	ST_ANALYZE_RECORDS,
	ST_ANALYZE_EVENTS,
	ST_APIKEYS_ALL,
	ST_APIKEYS_SUM,
	ST_UNFENCE,
	ST_NEEDS_PUBLISH,
	ST_NEEDS_RENEW,
	ST_NEEDS_DROP,
	ST_TENANTS_SUM,
	ST_ORPHANS_DELETE,
};

/* Who did it, for the audit trail; never NULL in a statement. */
#define STORE_BY(by) ((by) != NULL ? (by) : "unknown")
#define MS(col) "(extract(epoch from " col ") * 1000)::bigint"

/*
 * Every state change writes its audit event in the same statement, so in
 * the same transaction (migrations/0007): an INSERT into record_events
 * over the change's own result, naming who did it (the last parameter);
 * or, for a fresh claim and a completion on the plain-SQL paths, in the
 * record's own columns (TOLD_EVENT). Readers read idemd.events, which has
 * both.
 */
#define EVENT_COLUMNS \
	"INSERT INTO record_events (tenant_id, token_id, event, attempt, status, " \
	"phase, by, trace_id, expires_at) "
/* The by and trace_id columns from one "by" parameter: who, then the W3C
 * trace id after a unit separator (STORE_TRACE_SEP) when the request had
 * one (http.c http_set_by). */
#define EVENT_BY(p) "split_part(" p ", chr(31), 1), nullif(split_part(" p ", chr(31), 2), '')"
/* An event a record tells in its own columns (migrations/0013): its seq,
 * drawn from the events' sequence so that it sorts among their rows, then
 * the by and trace_id of EVENT_BY. */
#define TOLD_EVENT(p) "nextval('record_events_seq_seq'), " EVENT_BY(p)
/* When an event written now may be swept: now + the operation's audit
 * retention, which the caller sends per element (store_audit_seconds). */
#define EVENT_UNTIL(secs) "now() + make_interval(secs => " secs ")"

/* Column COL of ROW as an integer (0 when NULL) or a boolean (0 when NULL). */
int64_t store_i64(const PGresult *r, int row, int col);
int store_bool(const PGresult *r, int row, int col);
/* Decodes a bytea text value into malloc'd memory (NUL-terminated). */
unsigned char *store_bytea(const PGresult *r, int row, int col, size_t *len);
/* Reads status, headers, body, is_json of ROW starting at column COL. */
int store_read_response(const PGresult *r, int row, int col, struct stored_response *out) IDEMD_WUR;

/* How a column is read (store_rows.c). */
enum store_type {
	SC_I64,	     /* int64_t (NULL: 0); JSON: an integer */
	SC_U32,	     /* uint32_t (NULL: 0) */
	SC_INT,	     /* int (NULL: 0) */
	SC_BOOL,     /* int, 1 for true (NULL: 0); JSON: true or false */
	SC_HAS,	     /* int, 1 when the column is not NULL */
	SC_TEXT,     /* char[aux], cut to fit ("" for NULL); JSON: a string */
	SC_STR,	     /* char *, a copy (NULL for NULL) */
	SC_BYTEA,    /* unsigned char *, decoded; its length in the size_t at aux */
	SC_ID,	     /* uint8_t[16], from a bytea of exactly 16 bytes */
	SC_IDS,	     /* uint32_t *, from "1,3,7"; how many in the size_t at aux */
	SC_RESPONSE, /* struct stored_response, from this column and the 3 after */
	SC_TIME,     /* JSON only: unix ms as an RFC 3339 string */
};

/* One column mapping: column COL of a result, read as TYPE into the field
 * at OFF of a struct (AUX as the type says), or into the member NAME of a
 * JSON object, which a NULL column leaves out. */
struct store_col {
	int col;
	enum store_type type;
	size_t off;
	size_t aux;
	const char *name;
};

/* The rest of a struct's store_col after its column and type: field F of
 * struct T; STORE_TEXT with its size (SC_TEXT), STORE_COUNTED with the
 * field N (SC_BYTEA, SC_IDS). */
#define STORE_FIELD(T, f) offsetof(T, f), 0, NULL
#define STORE_TEXT(T, f) offsetof(T, f), sizeof(((T *)0)->f), NULL
#define STORE_COUNTED(T, f, n) offsetof(T, f), offsetof(T, n), NULL

/* Fills the struct BASE from ROW of R by COLS; 0, or -1 (then what it
 * allocated is freed). store_free_row frees what BASE holds by COLS. */
int store_read_row(const PGresult *r, int row, const struct store_col *cols, size_t ncols,
		   void *base) IDEMD_WUR;
void store_free_row(void *base, const struct store_col *cols, size_t ncols);
/* Every row of R (taken: this clears it; NULL: the statement failed) into
 * an owned array *ROWS of *N structs of SIZE bytes (store_free_rows); 0 or -1. */
int store_read_rows(PGresult *r, const struct store_col *cols, size_t ncols, size_t size,
		    void *rows, size_t *n) IDEMD_WUR;
void store_free_rows(void *rows, size_t n, const struct store_col *cols, size_t ncols, size_t size);
/* ROW of R as an owned JSON object by COLS; the first NROWS rows as an owned
 * array of them. NULL when out of memory. */
struct json_t *store_row_json(const PGresult *r, int row, const struct store_col *cols,
			      size_t ncols);
struct json_t *store_rows_json(const PGresult *r, int nrows, const struct store_col *cols,
			       size_t ncols);
/* Runs STMT; its first row's first N columns as integers (booleans 1 or
 * 0; 0 for NULL, no row or a failed statement) into OUT. How many rows it
 * returned, or -1 when it failed. */
int store_ints(const struct db_stmt *stmt, const char *const *values, const int *lengths,
	       const int *formats, int64_t *out, int n) IDEMD_WUR;

/* PostgreSQL array literals are built in a struct buf: {e1,e2,...}
 * (store_arrays.c). */

/* Appends an element to A. */
void store_array_i64(struct buf *a, int64_t v);
void store_array_text(struct buf *a, const char *s, size_t n);
void store_array_null(struct buf *a);
void store_array_bool(struct buf *a, int v);
void store_array_bytea(struct buf *a, const uint8_t *p, size_t n);
/* Closes every array of ARRS; -1 if building any of them failed. */
int store_arrays_close(struct buf *arrs, size_t n) IDEMD_WUR;
static inline void store_arrays_free(struct buf *arrs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		buf_free(&arrs[i]);
}
/* The STORE_CLAIM_ARRAYS arrays of claims A[0..N) (st_claim_many's
 * fifteen parameters and the retention, eleven of them st_claim_fresh's),
 * and the ten
 * of completions A[0..N) (st_complete_many's and st_complete_current's);
 * closed: -1 if building any of them failed. */
#define STORE_CLAIM_ARRAYS 16
int store_claim_arrays(struct buf *arrs, const struct claim_args *const *a, size_t n) IDEMD_WUR;
int store_complete_arrays(struct buf *arrs, const struct complete_args *const *a,
			  size_t n) IDEMD_WUR;

#endif
