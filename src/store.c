/* Store: all SQL lives here. Statements are prepared once per pooled
 * connection; bytea parameters go in binary, everything else as text. */
#include "store.h"

#include <inttypes.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "reqjson.h"

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
};

#define OP_COLUMNS \
	"id, tenant_id, name, token_ttl_seconds, retention_seconds, " \
	"lease_seconds, version_key, require_version, wait_seconds, " \
	"coalesce(audit_retention_seconds, -1)"
/* Who did it, for the audit trail; never NULL in a statement. */
#define STORE_BY(by) ((by) != NULL ? (by) : "unknown")
#define MS(col) "(extract(epoch from " col ") * 1000)::bigint"

static const struct db_stmt st_tenant_create = {
	ST_TENANT_CREATE, "tenant_create",
	"WITH t AS (INSERT INTO tenants(name) VALUES ($1) ON CONFLICT (name) DO NOTHING RETURNING id), "
	"k AS (INSERT INTO api_keys(key_hash, tenant_id) SELECT $2, id FROM t RETURNING tenant_id, id) "
	"SELECT tenant_id, id FROM k",
	2
};
static const struct db_stmt st_tenant_list = {
	ST_TENANT_LIST, "tenant_list",
	"SELECT t.name, extract(epoch from t.created_at)::bigint, "
	"coalesce(string_agg(k.id::text, ',' ORDER BY k.id), '') "
	"FROM tenants t LEFT JOIN api_keys k ON k.tenant_id = t.id GROUP BY t.id ORDER BY t.name",
	0
};
static const struct db_stmt st_tenant_delete = { ST_TENANT_DELETE, "tenant_delete",
						 "SELECT idemd_tenant_delete($1)", 1 };
static const struct db_stmt st_apikey_add = {
	ST_APIKEY_ADD, "apikey_add",
	"INSERT INTO api_keys(key_hash, tenant_id) SELECT $2, id FROM tenants WHERE name = $1 "
	"RETURNING id",
	2
};
static const struct db_stmt st_apikey_revoke = {
	ST_APIKEY_REVOKE, "apikey_revoke",
	"WITH t AS (SELECT id FROM tenants WHERE name = $1), "
	"d AS (DELETE FROM api_keys k USING t WHERE k.tenant_id = t.id AND k.id = $2 RETURNING k.id) "
	"SELECT (SELECT count(*) FROM t), (SELECT count(*) FROM d)",
	2
};
static const struct db_stmt st_tenant_by_key = {
	ST_TENANT_BY_KEY, "tenant_by_key", "SELECT tenant_id, id FROM api_keys WHERE key_hash = $1",
	1
};
static const struct db_stmt st_tenant_by_name = { ST_TENANT_BY_NAME, "tenant_by_name",
						  "SELECT id FROM tenants WHERE name = $1", 1 };
static const struct db_stmt st_op_put = {
	ST_OP_PUT, "op_put",
	"INSERT INTO operations(tenant_id, name, token_ttl_seconds, retention_seconds, "
	"lease_seconds, version_key, require_version, wait_seconds, audit_retention_seconds) "
	"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, nullif($9::int, -1)) "
	"ON CONFLICT (tenant_id, name) DO UPDATE SET token_ttl_seconds = EXCLUDED.token_ttl_seconds, "
	"retention_seconds = EXCLUDED.retention_seconds, lease_seconds = EXCLUDED.lease_seconds, "
	"version_key = EXCLUDED.version_key, require_version = EXCLUDED.require_version, "
	"wait_seconds = EXCLUDED.wait_seconds, "
	"audit_retention_seconds = EXCLUDED.audit_retention_seconds, "
	"updated_at = now() RETURNING id, (xmax = 0)",
	9
};
static const struct db_stmt st_op_get = { ST_OP_GET, "op_get",
					  "SELECT " OP_COLUMNS
					  " FROM operations WHERE tenant_id = $1 AND name = $2",
					  2 };
static const struct db_stmt st_op_by_id = { ST_OP_BY_ID, "op_by_id",
					    "SELECT " OP_COLUMNS " FROM operations WHERE id = $1",
					    1 };
static const struct db_stmt st_op_list = {
	ST_OP_LIST, "op_list",
	"SELECT " OP_COLUMNS " FROM operations WHERE tenant_id = $1 ORDER BY name LIMIT 1000", 1
};
static const struct db_stmt st_keys_load = {
	ST_KEYS_LOAD, "keys_load",
	"SELECT id, sealed, extract(epoch from created_at)::bigint, "
	"coalesce(extract(epoch from retired_at)::bigint, 0) FROM signing_keys ORDER BY id",
	0
};
static const struct db_stmt st_keys_newest = { ST_KEYS_NEWEST, "keys_newest",
					       "SELECT coalesce(max(id), 0) FROM signing_keys", 0 };
static const struct db_stmt st_key_insert = {
	ST_KEY_INSERT, "key_insert",
	"WITH r AS (UPDATE signing_keys SET retired_at = now() WHERE retired_at IS NULL) "
	"INSERT INTO signing_keys(sealed) VALUES ($1) RETURNING id",
	1
};
static const struct db_stmt st_key_first = { ST_KEY_FIRST, "key_first",
					     "SELECT idemd_first_key($1)", 1 };
static const struct db_stmt st_keys_table = { ST_KEYS_TABLE, "keys_table",
					      "SELECT to_regclass('signing_keys') IS NOT NULL", 0 };
static const struct db_stmt st_keys_count = { ST_KEYS_COUNT, "keys_count",
					      "SELECT count(*) FROM signing_keys", 0 };
static const struct db_stmt st_keys_reseal = {
	ST_KEYS_RESEAL, "keys_reseal",
	"SELECT idemd_reseal_keys($1::int[], $2::bytea[], $3::bytea[])", 3
};
static const struct db_stmt st_keys_prune = {
	ST_KEYS_PRUNE, "keys_prune",
	"DELETE FROM signing_keys WHERE retired_at < now() - make_interval(secs => $1)", 1
};
/*
 * Every state change writes its audit event in the same statement, so in
 * the same transaction (migrations/0007): an INSERT into record_events
 * over the change's own result, naming who did it (the last parameter).
 */
#define EVENT_COLUMNS \
	"INSERT INTO record_events (tenant_id, token_id, event, attempt, status, " \
	"phase, by, expires_at) "
#define CLAIM_EVENT "CASE WHEN r.attempt = 1 THEN 'claimed' ELSE 'taken_over' END"
/* When an event written now may be swept: now + the operation's audit
 * retention, which the caller sends per element (store_audit_seconds). */
#define EVENT_UNTIL(secs) "now() + make_interval(secs => " secs ")"
/* Claims and completes exist only over arrays (migrations/0009): one
 * statement, one transaction and one commit for a whole batch, n = 1
 * included; rows sorted back into array order. */
static const struct db_stmt st_claim_many = {
	ST_CLAIM_MANY, "claim_many",
	"WITH r AS (SELECT * FROM idemd.claim($1::int[], $2::bytea[], $3::int[], $4::text[], "
	"$5::bytea[], $6::bigint[], $7::int[], $8::text[], $9::bigint[], $10::boolean[], "
	"$11::boolean[])), "
	"ev AS (" EVENT_COLUMNS "SELECT ($1::int[])[r.i], ($2::bytea[])[r.i], " CLAIM_EVENT ", "
	"r.attempt, NULL, NULL, ($12::text[])[r.i], " EVENT_UNTIL(
		"($13::int[])[r.i]") " FROM r "
				     "WHERE r.outcome = 'claimed') "
				     "SELECT outcome, attempt, " MS(
					     "lease_expires_at") ", retry_after, resp_status, "
								 "resp_headers, resp_body, resp_is_json, current_version, i FROM r ORDER BY i",
	13
};
static const struct db_stmt st_complete_many = {
	ST_COMPLETE_MANY, "complete_many",
	"WITH r AS (SELECT * FROM idemd.complete($1::int[], $2::bytea[], $3::int[], "
	"$4::int[], $5::jsonb[], $6::bytea[], $7::boolean[], $8::int[])), "
	"ev AS (" EVENT_COLUMNS "SELECT ($1::int[])[r.i], ($2::bytea[])[r.i], 'completed', "
	"($3::int[])[r.i], ($4::int[])[r.i], NULL, ($9::text[])[r.i], " EVENT_UNTIL(
		"($10::int[])[r.i]") " FROM r WHERE r.outcome = 'completed') "
				     "SELECT outcome, resp_status, resp_headers, resp_body, resp_is_json, " MS(
					     "expires_at") ", fingerprint, i FROM r ORDER BY i",
	10
};
/* The fenced writes of one record: release, extend, checkpoint. */
#define FENCED_EVENT(what, attempt, phase, by) \
	"ev AS (" EVENT_COLUMNS "SELECT $1, $2, '" what "', " attempt ", NULL, " phase ", " by \
	", " \
	"idemd_audit_until(rec.operation_id) FROM r JOIN records rec ON rec.tenant_id = $1 " \
	"AND rec.token_id = $2 WHERE r.o = "
static const struct db_stmt st_release = {
	ST_RELEASE, "release",
	"WITH r AS (SELECT idemd_release($1, $2, $3) AS o), " FENCED_EVENT(
		"released", "$3", "NULL", "$4") "'released') SELECT o FROM r",
	4
};
static const struct db_stmt st_revoke = {
	ST_REVOKE, "revoke",
	"WITH r AS (SELECT idemd_revoke($1, $2, $3, $4, to_timestamp($5)) AS o), "
	"ev AS (" EVENT_COLUMNS "SELECT $1, $2, 'revoked', NULL, NULL, NULL, $6, "
	"idemd_audit_until($3) FROM r WHERE r.o = 'revoked') SELECT o FROM r",
	6
};
static const struct db_stmt st_record_get = {
	ST_RECORD_GET, "record_get",
	"SELECT state, attempt, coalesce(" MS("lease_expires_at") ", 0), " MS(
		"expires_at") ", "
			      "response_status, response_headers, response_body, response_is_json, subject, "
			      "operation_id, checkpoint_phase, checkpoint_data::text, checkpoint_attempt, replays "
			      "FROM records WHERE tenant_id = $1 AND token_id = $2",
	2
};
/* Replay counts gathered in memory (replaycount.c), added in one statement;
 * the rows are locked in record order, the order claim batches lock in,
 * whatever plan the UPDATE gets. */
static const struct db_stmt st_replays_add = {
	ST_REPLAYS_ADD, "replays_add",
	"WITH l AS (SELECT r.tenant_id, r.token_id, u.n FROM records r "
	"JOIN unnest($1::int[], $2::bytea[], $3::bigint[]) AS u(t, id, n) "
	"ON r.tenant_id = u.t AND r.token_id = u.id "
	"ORDER BY r.tenant_id, r.token_id FOR UPDATE OF r) "
	"UPDATE records r SET replays = r.replays + l.n FROM l "
	"WHERE r.tenant_id = l.tenant_id AND r.token_id = l.token_id",
	3
};
/* Reads only the partial index records_in_progress_lease_idx (0010). */
static const struct db_stmt st_records_stuck = {
	ST_RECORDS_STUCK, "records_stuck",
	"SELECT tenant_id, operation_id, count(*) FROM records "
	"WHERE state = 'in_progress' AND lease_expires_at < now() "
	"GROUP BY tenant_id, operation_id LIMIT 10000",
	0
};
static const struct db_stmt st_extend = {
	ST_EXTEND, "extend",
	"WITH r AS (SELECT outcome AS o, lease_expires_at FROM idemd_extend($1, $2, $3, $4)), " FENCED_EVENT(
		"extended", "$3", "NULL",
		"$5") "'extended') "
		      "SELECT o, coalesce(" MS("lease_expires_at") ", 0) FROM r",
	5
};
static const struct db_stmt st_checkpoint = {
	ST_CHECKPOINT, "checkpoint",
	"WITH r AS (SELECT idemd_checkpoint($1, $2, $3, $4, $5::jsonb) AS o), " FENCED_EVENT(
		"checkpoint", "$3", "$4", "$6") "'saved') SELECT o FROM r",
	6
};
static const struct db_stmt st_events_get = {
	ST_EVENTS_GET, "events_get",
	"SELECT " MS("at") ", event, attempt, status, phase, by FROM record_events "
			   "WHERE tenant_id = $1 AND token_id = $2 ORDER BY seq LIMIT 1000",
	2
};
static const struct db_stmt st_record_list = {
	ST_RECORD_LIST, "record_list",
	"SELECT token_id, operation_id, state, subject, attempt, "
	"coalesce(" MS("lease_expires_at") ", 0), " MS(
		"expires_at") ", "
			      "(extract(epoch from created_at) * 1000000)::bigint FROM records "
			      "WHERE tenant_id = $1 AND ($2::int IS NULL OR operation_id = $2) "
			      "AND ($3::text IS NULL OR state = $3) AND ($4::text IS NULL OR subject = $4) "
			      "AND ($5::bigint IS NULL OR created_at <= now() - make_interval(secs => $5)) "
			      "AND ($6::bigint IS NULL OR (created_at, token_id) < "
			      "('epoch'::timestamptz + ($6::bigint || ' microseconds')::interval, $7::bytea)) "
			      "ORDER BY created_at DESC, token_id DESC LIMIT $8",
	8
};
static const struct db_stmt st_events_sweep = { ST_EVENTS_SWEEP, "events_sweep",
						"SELECT idemd_sweep_events($1)", 1 };
static const struct db_stmt st_version_get = {
	ST_VERSION_GET, "version_get",
	"SELECT version FROM versions WHERE tenant_id = $1 AND key = $2", 2
};
static const struct db_stmt st_version_bump = {
	ST_VERSION_BUMP, "version_bump", "SELECT ok, version FROM idemd_version_bump($1, $2, $3)", 3
};
static const struct db_stmt st_sweep = {
	ST_SWEEP, "sweep",
	"SELECT deleted, coalesce(floor(extract(epoch from last_expiry) * 1000)::bigint, $2::bigint) "
	"FROM idemd_sweep_after($1::int, CASE WHEN $2::bigint > 0 THEN to_timestamp($2::bigint / 1000.0) END)",
	2
};

/* Runs STMT on a pooled connection; the connection goes back at once. */
static PGresult *store_run(const struct db_stmt *stmt, const char *const *values,
			   const int *lengths, const int *formats)
{
	struct db_conn *c = db_acquire();

	if (c == NULL)
		return NULL;
	PGresult *r = db_exec(c, stmt, values, lengths, formats);
	db_release(c);
	return r;
}

static int64_t store_i64(const PGresult *r, int row, int col)
{
	return PQgetisnull(r, row, col) ? 0 : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

static int store_bool(const PGresult *r, int row, int col)
{
	return !PQgetisnull(r, row, col) && PQgetvalue(r, row, col)[0] == 't';
}

void store_response_free(struct stored_response *r)
{
	free(r->sr_headers);
	free(r->sr_body);
	memset(r, 0, sizeof(*r));
}

/* Decodes a bytea text value into malloc'd memory (NUL-terminated). */
static unsigned char *store_bytea(const PGresult *r, int row, int col, size_t *len)
{
	size_t n = 0;
	unsigned char *raw = NULL, *out;

	*len = 0;
	if (!PQgetisnull(r, row, col)) {
		raw = PQunescapeBytea((const unsigned char *)PQgetvalue(r, row, col), &n);
		if (raw == NULL)
			return NULL;
	}
	out = malloc(n + 1);
	if (out != NULL) {
		if (n > 0)
			memcpy(out, raw, n);
		out[n] = '\0';
		*len = n;
	}
	PQfreemem(raw);
	return out;
}

/* Reads status, headers, body, is_json of ROW starting at column COL. */
static int store_read_response(const PGresult *r, int row, int col, struct stored_response *out)
{
	memset(out, 0, sizeof(*out));
	if (PQgetisnull(r, row, col))
		return 0;
	out->sr_status = (int)store_i64(r, row, col);
	out->sr_headers = strdup(PQgetisnull(r, row, col + 1) ? "{}" : PQgetvalue(r, row, col + 1));
	out->sr_body = store_bytea(r, row, col + 2, &out->sr_body_len);
	out->sr_is_json = store_bool(r, row, col + 3);
	if (out->sr_headers == NULL || out->sr_body == NULL) {
		store_response_free(out);
		return -1;
	}
	return 0;
}

int store_tenant_create(const char *name, const uint8_t key_hash[STORE_HASH_BYTES],
			uint32_t *tenant_id, uint32_t *key_id, int *exists)
{
	const char *v[] = { name, (const char *)key_hash };
	const int len[] = { 0, STORE_HASH_BYTES }, fmt[] = { 0, 1 };
	PGresult *r = store_run(&st_tenant_create, v, len, fmt);

	if (r == NULL)
		return -1;
	*exists = PQntuples(r) == 0;
	*tenant_id = *exists ? 0 : (uint32_t)store_i64(r, 0, 0);
	*key_id = *exists ? 0 : (uint32_t)store_i64(r, 0, 1);
	PQclear(r);
	return 0;
}

void store_tenants_free(struct tenant_info *t, size_t n)
{
	for (size_t i = 0; t != NULL && i < n; i++)
		free(t[i].ti_key_ids);
	free(t);
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

int store_tenant_list(struct tenant_info **tenants, size_t *n)
{
	PGresult *r = store_run(&st_tenant_list, NULL, NULL, NULL);

	if (r == NULL)
		return -1;
	int rows = PQntuples(r);
	*tenants = calloc(rows > 0 ? (size_t)rows : 1, sizeof(**tenants));
	if (*tenants == NULL) {
		PQclear(r);
		return -1;
	}
	for (int i = 0; i < rows; i++) {
		struct tenant_info *t = &(*tenants)[i];
		snprintf(t->ti_name, sizeof(t->ti_name), "%s", PQgetvalue(r, i, 0));
		t->ti_created_at = store_i64(r, i, 1);
		if (store_id_list(PQgetvalue(r, i, 2), &t->ti_key_ids, &t->ti_nkeys) < 0) {
			store_tenants_free(*tenants, (size_t)i + 1);
			*tenants = NULL;
			PQclear(r);
			return -1;
		}
	}
	*n = (size_t)rows;
	PQclear(r);
	return 0;
}

int store_tenant_delete(const char *name, int *found)
{
	const char *v[] = { name };
	PGresult *r = store_run(&st_tenant_delete, v, NULL, NULL);

	if (r == NULL)
		return -1;
	*found = PQntuples(r) == 1 && store_bool(r, 0, 0);
	PQclear(r);
	return 0;
}

int store_api_key_add(const char *tenant, const uint8_t key_hash[STORE_HASH_BYTES],
		      uint32_t *key_id, int *found)
{
	const char *v[] = { tenant, (const char *)key_hash };
	const int len[] = { 0, STORE_HASH_BYTES }, fmt[] = { 0, 1 };
	PGresult *r = store_run(&st_apikey_add, v, len, fmt);

	if (r == NULL)
		return -1;
	*found = PQntuples(r) == 1;
	*key_id = *found ? (uint32_t)store_i64(r, 0, 0) : 0;
	PQclear(r);
	return 0;
}

int store_api_key_revoke(const char *tenant, uint32_t key_id, int *tenant_found, int *key_found)
{
	char id[16];

	snprintf(id, sizeof(id), "%" PRIu32, key_id);
	const char *v[] = { tenant, id };
	PGresult *r = store_run(&st_apikey_revoke, v, NULL, NULL);
	if (r == NULL)
		return -1;
	int rc = PQntuples(r) == 1 ? 0 : -1;
	if (rc == 0) {
		*tenant_found = store_i64(r, 0, 0) > 0;
		*key_found = store_i64(r, 0, 1) > 0;
	}
	PQclear(r);
	return rc;
}

int store_tenant_by_key(const uint8_t key_hash[STORE_HASH_BYTES], uint32_t *tenant_id,
			uint32_t *key_id, int *found)
{
	const char *v[] = { (const char *)key_hash };
	const int len[] = { STORE_HASH_BYTES }, fmt[] = { 1 };
	PGresult *r = store_run(&st_tenant_by_key, v, len, fmt);

	if (r == NULL)
		return -1;
	*found = PQntuples(r) == 1;
	*tenant_id = *found ? (uint32_t)store_i64(r, 0, 0) : 0;
	*key_id = *found ? (uint32_t)store_i64(r, 0, 1) : 0;
	PQclear(r);
	return 0;
}

int store_tenant_by_name(const char *name, uint32_t *tenant_id, int *found)
{
	const char *v[] = { name };
	PGresult *r = store_run(&st_tenant_by_name, v, NULL, NULL);

	if (r == NULL)
		return -1;
	*found = PQntuples(r) == 1;
	*tenant_id = *found ? (uint32_t)store_i64(r, 0, 0) : 0;
	PQclear(r);
	return 0;
}

static void store_read_operation(const PGresult *r, int row, struct operation *op)
{
	memset(op, 0, sizeof(*op));
	op->op_id = (uint32_t)store_i64(r, row, 0);
	op->op_tenant_id = (uint32_t)store_i64(r, row, 1);
	snprintf(op->op_name, sizeof(op->op_name), "%s", PQgetvalue(r, row, 2));
	op->op_token_ttl_seconds = (int)store_i64(r, row, 3);
	op->op_retention_seconds = (int)store_i64(r, row, 4);
	op->op_lease_seconds = (int)store_i64(r, row, 5);
	op->op_has_version_key = !PQgetisnull(r, row, 6);
	if (op->op_has_version_key)
		snprintf(op->op_version_key, sizeof(op->op_version_key), "%s",
			 PQgetvalue(r, row, 6));
	op->op_require_version = store_bool(r, row, 7);
	op->op_wait_seconds = (int)store_i64(r, row, 8);
	op->op_audit_retention = (int)store_i64(r, row, 9);
}

int store_operation_put(struct operation *op, int *created)
{
	char tenant[16], ttl[16], ret[16], lease[16], wait[16], audit[16];

	snprintf(wait, sizeof(wait), "%d", op->op_wait_seconds);
	snprintf(audit, sizeof(audit), "%d", op->op_audit_retention);
	snprintf(tenant, sizeof(tenant), "%" PRIu32, op->op_tenant_id);
	snprintf(ttl, sizeof(ttl), "%d", op->op_token_ttl_seconds);
	snprintf(ret, sizeof(ret), "%d", op->op_retention_seconds);
	snprintf(lease, sizeof(lease), "%d", op->op_lease_seconds);
	const char *v[] = { tenant,
			    op->op_name,
			    ttl,
			    ret,
			    lease,
			    op->op_has_version_key ? op->op_version_key : NULL,
			    op->op_require_version ? "true" : "false",
			    wait,
			    audit };
	PGresult *r = store_run(&st_op_put, v, NULL, NULL);
	if (r == NULL)
		return -1;
	op->op_id = (uint32_t)store_i64(r, 0, 0);
	*created = store_bool(r, 0, 1);
	PQclear(r);
	return 0;
}

int store_operation_get(uint32_t tenant_id, const char *name, struct operation *op, int *found)
{
	char tenant[16];

	snprintf(tenant, sizeof(tenant), "%" PRIu32, tenant_id);
	const char *v[] = { tenant, name };
	PGresult *r = store_run(&st_op_get, v, NULL, NULL);
	if (r == NULL)
		return -1;
	*found = PQntuples(r) == 1;
	if (*found)
		store_read_operation(r, 0, op);
	PQclear(r);
	return 0;
}

int store_operation_by_id(uint32_t op_id, struct operation *op, int *found)
{
	char id[16];

	snprintf(id, sizeof(id), "%" PRIu32, op_id);
	const char *v[] = { id };
	PGresult *r = store_run(&st_op_by_id, v, NULL, NULL);
	if (r == NULL)
		return -1;
	*found = PQntuples(r) == 1;
	if (*found)
		store_read_operation(r, 0, op);
	PQclear(r);
	return 0;
}

int store_operation_list(uint32_t tenant_id, struct operation **ops, size_t *n)
{
	char tenant[16];

	snprintf(tenant, sizeof(tenant), "%" PRIu32, tenant_id);
	const char *v[] = { tenant };
	PGresult *r = store_run(&st_op_list, v, NULL, NULL);
	if (r == NULL)
		return -1;
	int rows = PQntuples(r);
	*ops = calloc(rows > 0 ? (size_t)rows : 1, sizeof(**ops));
	if (*ops == NULL) {
		PQclear(r);
		return -1;
	}
	for (int i = 0; i < rows; i++)
		store_read_operation(r, i, &(*ops)[i]);
	*n = (size_t)rows;
	PQclear(r);
	return 0;
}

int store_keys_load(struct sealed_key **keys, size_t *n)
{
	PGresult *r = store_run(&st_keys_load, NULL, NULL, NULL);

	if (r == NULL)
		return -1;
	int rows = PQntuples(r);
	*keys = calloc(rows > 0 ? (size_t)rows : 1, sizeof(**keys));
	if (*keys == NULL) {
		PQclear(r);
		return -1;
	}
	for (int i = 0; i < rows; i++) {
		struct sealed_key *k = &(*keys)[i];
		k->sk_id = (uint32_t)store_i64(r, i, 0);
		k->sk_sealed = store_bytea(r, i, 1, &k->sk_len);
		k->sk_created_at = store_i64(r, i, 2);
		k->sk_retired_at = store_i64(r, i, 3);
		if (k->sk_sealed == NULL) {
			store_keys_free(*keys, (size_t)i);
			PQclear(r);
			return -1;
		}
	}
	*n = (size_t)rows;
	PQclear(r);
	return 0;
}

void store_keys_free(struct sealed_key *keys, size_t n)
{
	for (size_t i = 0; keys != NULL && i < n; i++)
		free(keys[i].sk_sealed);
	free(keys);
}

int store_keys_newest(uint32_t *id)
{
	PGresult *r = store_run(&st_keys_newest, NULL, NULL, NULL);

	if (r == NULL)
		return -1;
	*id = (uint32_t)store_i64(r, 0, 0);
	PQclear(r);
	return 0;
}

int store_key_insert(const unsigned char *sealed, size_t len, int first_only, uint32_t *id)
{
	const char *v[] = { (const char *)sealed };
	const int lens[] = { (int)len }, fmt[] = { 1 };
	PGresult *r = store_run(first_only ? &st_key_first : &st_key_insert, v, lens, fmt);

	if (r == NULL)
		return -1;
	*id = (uint32_t)store_i64(r, 0, 0);
	PQclear(r);
	return 0;
}

int store_keys_count(int64_t *n)
{
	PGresult *r = store_run(&st_keys_table, NULL, NULL, NULL);

	if (r == NULL)
		return -1;
	int present = store_bool(r, 0, 0);
	PQclear(r);
	*n = 0;
	if (!present)
		return 0;
	r = store_run(&st_keys_count, NULL, NULL, NULL);
	if (r == NULL)
		return -1;
	*n = store_i64(r, 0, 0);
	PQclear(r);
	return 0;
}

int store_keys_prune(int64_t max_age_seconds)
{
	char age[24];

	snprintf(age, sizeof(age), "%" PRId64, max_age_seconds);
	const char *v[] = { age };
	PGresult *r = store_run(&st_keys_prune, v, NULL, NULL);
	if (r == NULL)
		return -1;
	PQclear(r);
	return 0;
}

static const struct {
	const char *name;
	enum claim_outcome outcome;
} store_claim_outcomes[] = {
	{ "claimed", CLAIM_CLAIMED },
	{ "replay", CLAIM_REPLAY },
	{ "in_progress", CLAIM_IN_PROGRESS },
	{ "revoked", CLAIM_REVOKED },
	{ "fingerprint_mismatch", CLAIM_FINGERPRINT_MISMATCH },
	{ "expired", CLAIM_EXPIRED },
	{ "version_mismatch", CLAIM_VERSION_MISMATCH },
	{ "version_required", CLAIM_VERSION_REQUIRED },
};

/* Fills RES from ROW of a claim result (columns as st_claim_many). 0 or -1. */
static int store_claim_row(const PGresult *r, int row, struct claim_result *res)
{
	const char *outcome = PQgetvalue(r, row, 0);
	size_t i;

	memset(res, 0, sizeof(*res));
	for (i = 0; i < IDEMD_ARRAY_LEN(store_claim_outcomes); i++)
		if (strcmp(outcome, store_claim_outcomes[i].name) == 0)
			break;
	if (i == IDEMD_ARRAY_LEN(store_claim_outcomes))
		return -1;
	res->cr_outcome = store_claim_outcomes[i].outcome;
	res->cr_attempt = (int)store_i64(r, row, 1);
	res->cr_lease_expires_at = store_i64(r, row, 2);
	res->cr_record_expires_at = res->cr_outcome == CLAIM_REPLAY ? res->cr_lease_expires_at : 0;
	res->cr_retry_after = (int)store_i64(r, row, 3);
	res->cr_current_version = store_i64(r, row, 8);
	if (res->cr_outcome == CLAIM_REPLAY &&
	    store_read_response(r, row, 4, &res->cr_response) < 0)
		return -1;
	return 0;
}

/* Fills RES from ROW of a complete result (columns as st_complete_many). 0 or -1. */
static int store_complete_row(const PGresult *r, int row, struct complete_result *res)
{
	const char *o = PQgetvalue(r, row, 0);

	memset(res, 0, sizeof(*res));
	if (strcmp(o, "completed") == 0)
		res->cpr_outcome = COMPLETE_STORED;
	else if (strcmp(o, "already_completed") == 0)
		res->cpr_outcome = COMPLETE_ALREADY;
	else if (strcmp(o, "lease_lost") == 0)
		res->cpr_outcome = COMPLETE_LEASE_LOST;
	else
		res->cpr_outcome = COMPLETE_NOT_IN_PROGRESS;
	res->cpr_expires_at = store_i64(r, row, 5);
	if ((res->cpr_outcome == COMPLETE_STORED || res->cpr_outcome == COMPLETE_ALREADY) &&
	    store_read_response(r, row, 1, &res->cpr_stored) < 0)
		return -1;
	if (!PQgetisnull(r, row, 6)) {
		size_t n;
		unsigned char *fp = store_bytea(r, row, 6, &n);
		if (fp == NULL) {
			store_response_free(&res->cpr_stored);
			return -1;
		}
		res->cpr_has_fingerprint = n == STORE_HASH_BYTES;
		if (res->cpr_has_fingerprint)
			memcpy(res->cpr_fingerprint, fp, STORE_HASH_BYTES);
		free(fp);
	}
	return 0;
}

/* ------------------------------------------------------------ array literals */

/* A PostgreSQL array literal being built: {e1,e2,...}. */
struct store_array {
	char *sa_buf;
	size_t sa_len, sa_cap;
	int sa_failed;
};

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

static void store_array_i64(struct store_array *a, int64_t v)
{
	char num[24];

	store_array_next(a);
	store_array_put(a, num, (size_t)snprintf(num, sizeof(num), "%" PRId64, v));
}

static void store_array_null(struct store_array *a)
{
	store_array_next(a);
	store_array_put(a, "NULL", 4);
}

/* A quoted element; '"' and '\' are escaped with '\'. */
static void store_array_text(struct store_array *a, const char *s, size_t n)
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
static void store_array_bytea(struct store_array *a, const uint8_t *p, size_t n)
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

static void store_array_bool(struct store_array *a, int v)
{
	store_array_next(a);
	store_array_put(a, v ? "t" : "f", 1);
}

/* Closes every array of ARRS; -1 if building any of them failed. */
static int store_arrays_close(struct store_array *arrs, size_t n)
{
	int rc = 0;

	for (size_t i = 0; i < n; i++) {
		store_array_put(&arrs[i], "}", 1);
		if (arrs[i].sa_failed)
			rc = -1;
	}
	return rc;
}

static void store_arrays_free(struct store_array *arrs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(arrs[i].sa_buf);
}

/* Runs STMT with the arrays as text parameters; the result must have N rows
 * whose last column counts 1..N. */
static PGresult *store_run_arrays(const struct db_stmt *stmt, struct store_array *arrs, size_t n)
{
	const char *v[16];
	PGresult *r;

	for (int i = 0; i < stmt->nparams; i++)
		v[i] = arrs[i].sa_buf;
	r = store_run(stmt, v, NULL, NULL);
	if (r == NULL)
		return NULL;
	if ((size_t)PQntuples(r) != n) {
		PQclear(r);
		return NULL;
	}
	for (size_t i = 0; i < n; i++)
		if (store_i64(r, (int)i, PQnfields(r) - 1) != (int64_t)i + 1) {
			PQclear(r);
			return NULL;
		}
	return r;
}

int store_claim_many(const struct claim_args *const *a, struct claim_result *const *res, size_t n)
{
	struct store_array arrs[13] = { { 0 } };
	PGresult *r = NULL;
	int rc = -1;

	for (size_t i = 0; i < n; i++) {
		const struct claim_args *c = a[i];
		store_array_i64(&arrs[0], c->tenant_id);
		store_array_bytea(&arrs[1], c->token_id, 16);
		store_array_i64(&arrs[2], c->operation_id);
		if (c->subject != NULL)
			store_array_text(&arrs[3], c->subject, strlen(c->subject));
		else
			store_array_null(&arrs[3]);
		if (c->fingerprint != NULL)
			store_array_bytea(&arrs[4], c->fingerprint, STORE_HASH_BYTES);
		else
			store_array_null(&arrs[4]);
		store_array_i64(&arrs[5], c->token_expires_at);
		store_array_i64(&arrs[6], c->lease_seconds);
		if (c->version_key != NULL)
			store_array_text(&arrs[7], c->version_key, strlen(c->version_key));
		else
			store_array_null(&arrs[7]);
		if (c->has_expected)
			store_array_i64(&arrs[8], c->expected);
		else
			store_array_null(&arrs[8]);
		store_array_bool(&arrs[9], c->require_version);
		store_array_bool(&arrs[10], c->wait);
		store_array_text(&arrs[11], STORE_BY(c->by), strlen(STORE_BY(c->by)));
		store_array_i64(&arrs[12], c->audit_seconds);
	}
	if (n == 0 || store_arrays_close(arrs, 13) < 0 ||
	    (r = store_run_arrays(&st_claim_many, arrs, n)) == NULL)
		goto done;
	size_t i;
	for (i = 0; i < n; i++)
		if (store_claim_row(r, (int)i, res[i]) < 0)
			break;
	if (i == n) {
		rc = 0;
	} else {
		while (i-- > 0)
			store_response_free(&res[i]->cr_response);
	}
done:
	PQclear(r);
	store_arrays_free(arrs, 13);
	return rc;
}

int store_complete_many(const struct complete_args *const *a, struct complete_result *const *res,
			size_t n)
{
	struct store_array arrs[10] = { { 0 } };
	PGresult *r = NULL;
	int rc = -1;

	for (size_t i = 0; i < n; i++) {
		const struct complete_args *c = a[i];
		const struct stored_response *resp = c->resp;
		store_array_i64(&arrs[0], c->tenant_id);
		store_array_bytea(&arrs[1], c->token_id, 16);
		store_array_i64(&arrs[2], c->attempt);
		store_array_i64(&arrs[3], resp->sr_status);
		store_array_text(&arrs[4], resp->sr_headers, strlen(resp->sr_headers));
		store_array_bytea(&arrs[5], resp->sr_body, resp->sr_body ? resp->sr_body_len : 0);
		store_array_bool(&arrs[6], resp->sr_is_json);
		store_array_i64(&arrs[7], c->retention_seconds);
		store_array_text(&arrs[8], STORE_BY(c->by), strlen(STORE_BY(c->by)));
		store_array_i64(&arrs[9], c->audit_seconds);
	}
	if (n == 0 || store_arrays_close(arrs, 10) < 0 ||
	    (r = store_run_arrays(&st_complete_many, arrs, n)) == NULL)
		goto done;
	size_t i;
	for (i = 0; i < n; i++)
		if (store_complete_row(r, (int)i, res[i]) < 0)
			break;
	if (i == n) {
		rc = 0;
	} else {
		while (i-- > 0)
			store_response_free(&res[i]->cpr_stored);
	}
done:
	PQclear(r);
	store_arrays_free(arrs, 10);
	return rc;
}

int store_claim(const struct claim_args *a, struct claim_result *res)
{
	return store_claim_many(&a, &res, 1);
}

int store_complete(const struct complete_args *a, struct complete_result *res)
{
	return store_complete_many(&a, &res, 1);
}

void store_record_view_free(struct record_view *v)
{
	store_response_free(&v->rv_response);
	free(v->rv_checkpoint_phase);
	free(v->rv_checkpoint_data);
	v->rv_checkpoint_phase = v->rv_checkpoint_data = NULL;
}

/* The outcome text of extend and checkpoint as a release outcome. */
static enum release_outcome store_fence_outcome(const char *o, const char *done)
{
	if (strcmp(o, done) == 0)
		return RELEASE_DONE;
	return strcmp(o, "lease_lost") == 0 ? RELEASE_LEASE_LOST : RELEASE_NOT_IN_PROGRESS;
}

int store_extend(uint32_t tenant_id, const uint8_t *token_id, int attempt, int lease_seconds,
		 const char *by, enum release_outcome *outcome, int64_t *lease_expires_at)
{
	char tenant[16], att[16], lease[16];

	snprintf(tenant, sizeof(tenant), "%" PRIu32, tenant_id);
	snprintf(att, sizeof(att), "%d", attempt);
	snprintf(lease, sizeof(lease), "%d", lease_seconds);
	const char *v[] = { tenant, (const char *)token_id, att, lease, STORE_BY(by) };
	const int len[] = { 0, 16, 0, 0, 0 }, fmt[] = { 0, 1, 0, 0, 0 };
	PGresult *r = store_run(&st_extend, v, len, fmt);
	if (r == NULL)
		return -1;
	*outcome = store_fence_outcome(PQntuples(r) == 1 ? PQgetvalue(r, 0, 0) : "", "extended");
	*lease_expires_at = PQntuples(r) == 1 ? store_i64(r, 0, 1) : 0;
	PQclear(r);
	return 0;
}

int store_checkpoint(uint32_t tenant_id, const uint8_t *token_id, int attempt, const char *phase,
		     const char *data, const char *by, enum release_outcome *outcome)
{
	char tenant[16], att[16];

	snprintf(tenant, sizeof(tenant), "%" PRIu32, tenant_id);
	snprintf(att, sizeof(att), "%d", attempt);
	const char *v[] = { tenant, (const char *)token_id, att, phase, data, STORE_BY(by) };
	const int len[] = { 0, 16, 0, 0, 0, 0 }, fmt[] = { 0, 1, 0, 0, 0, 0 };
	PGresult *r = store_run(&st_checkpoint, v, len, fmt);
	if (r == NULL)
		return -1;
	*outcome = store_fence_outcome(PQntuples(r) == 1 ? PQgetvalue(r, 0, 0) : "", "saved");
	PQclear(r);
	return 0;
}

int store_release(uint32_t tenant_id, const uint8_t *token_id, int attempt, const char *by,
		  enum release_outcome *outcome)
{
	char tenant[16], att[16];

	snprintf(tenant, sizeof(tenant), "%" PRIu32, tenant_id);
	snprintf(att, sizeof(att), "%d", attempt);
	const char *v[] = { tenant, (const char *)token_id, att, STORE_BY(by) };
	const int len[] = { 0, 16, 0, 0 }, fmt[] = { 0, 1, 0, 0 };
	PGresult *r = store_run(&st_release, v, len, fmt);
	if (r == NULL)
		return -1;
	const char *o = PQntuples(r) == 1 ? PQgetvalue(r, 0, 0) : "";
	if (strcmp(o, "released") == 0)
		*outcome = RELEASE_DONE;
	else if (strcmp(o, "lease_lost") == 0)
		*outcome = RELEASE_LEASE_LOST;
	else
		*outcome = RELEASE_NOT_IN_PROGRESS;
	PQclear(r);
	return 0;
}

int store_revoke(uint32_t tenant_id, const uint8_t *token_id, uint32_t operation_id,
		 const char *subject, int64_t token_expires_at, const char *by, int *in_use)
{
	char tenant[16], op[16], expires[24];

	snprintf(tenant, sizeof(tenant), "%" PRIu32, tenant_id);
	snprintf(op, sizeof(op), "%" PRIu32, operation_id);
	snprintf(expires, sizeof(expires), "%" PRId64, token_expires_at);
	const char *v[] = { tenant, (const char *)token_id, op, subject, expires, STORE_BY(by) };
	const int len[] = { 0, 16, 0, 0, 0, 0 }, fmt[] = { 0, 1, 0, 0, 0, 0 };
	PGresult *r = store_run(&st_revoke, v, len, fmt);
	if (r == NULL)
		return -1;
	*in_use = PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "in_use") == 0;
	PQclear(r);
	return 0;
}

int store_record_get(uint32_t tenant_id, const uint8_t *token_id, struct record_view *rv)
{
	char tenant[16];

	memset(rv, 0, sizeof(*rv));
	snprintf(tenant, sizeof(tenant), "%" PRIu32, tenant_id);
	const char *v[] = { tenant, (const char *)token_id };
	const int len[] = { 0, 16 }, fmt[] = { 0, 1 };
	PGresult *r = store_run(&st_record_get, v, len, fmt);
	if (r == NULL)
		return -1;
	int rc = 0;
	rv->rv_found = PQntuples(r) == 1;
	if (rv->rv_found) {
		snprintf(rv->rv_state, sizeof(rv->rv_state), "%s", PQgetvalue(r, 0, 0));
		rv->rv_attempt = (int)store_i64(r, 0, 1);
		rv->rv_lease_expires_at = store_i64(r, 0, 2);
		rv->rv_expires_at = store_i64(r, 0, 3);
		rv->rv_has_subject = !PQgetisnull(r, 0, 8);
		snprintf(rv->rv_subject, sizeof(rv->rv_subject), "%s", PQgetvalue(r, 0, 8));
		rv->rv_operation_id = (uint32_t)store_i64(r, 0, 9);
		rv->rv_replays = store_i64(r, 0, 13);
		rc = store_read_response(r, 0, 4, &rv->rv_response);
		if (rc == 0 && !PQgetisnull(r, 0, 10)) {
			rv->rv_checkpoint_phase = strdup(PQgetvalue(r, 0, 10));
			rv->rv_checkpoint_data =
				PQgetisnull(r, 0, 11) ? NULL : strdup(PQgetvalue(r, 0, 11));
			rv->rv_checkpoint_attempt = (int)store_i64(r, 0, 12);
			if (rv->rv_checkpoint_phase == NULL ||
			    (!PQgetisnull(r, 0, 11) && rv->rv_checkpoint_data == NULL)) {
				store_record_view_free(rv);
				rc = -1;
			}
		}
	}
	PQclear(r);
	return rc;
}

int store_events_get(uint32_t tenant_id, const uint8_t *token_id, json_t **events)
{
	char tenant[16];

	snprintf(tenant, sizeof(tenant), "%" PRIu32, tenant_id);
	const char *v[] = { tenant, (const char *)token_id };
	const int len[] = { 0, 16 }, fmt[] = { 0, 1 };
	PGresult *r = store_run(&st_events_get, v, len, fmt);
	if (r == NULL)
		return -1;
	json_t *a = json_array();
	for (int i = 0; a != NULL && i < PQntuples(r); i++) {
		json_t *e = json_pack("{s:o,s:s}", "at", reqjson_time(store_i64(r, i, 0)), "event",
				      PQgetvalue(r, i, 1));
		if (e != NULL && !PQgetisnull(r, i, 2))
			json_object_set_new(e, "attempt", json_integer(store_i64(r, i, 2)));
		if (e != NULL && !PQgetisnull(r, i, 3))
			json_object_set_new(e, "status", json_integer(store_i64(r, i, 3)));
		if (e != NULL && !PQgetisnull(r, i, 4))
			json_object_set_new(e, "phase", json_string(PQgetvalue(r, i, 4)));
		if (e != NULL)
			json_object_set_new(e, "by", json_string(PQgetvalue(r, i, 5)));
		if (e == NULL || json_array_append_new(a, e) < 0) {
			json_decref(a);
			a = NULL;
		}
	}
	PQclear(r);
	*events = a;
	return a != NULL ? 0 : -1;
}

int store_record_list(uint32_t tenant_id, const struct record_filter *f, size_t limit,
		      struct record_row **rows, size_t *n)
{
	char tenant[16], op[16], older[24], after[24], lim[16];

	*rows = NULL;
	*n = 0;
	snprintf(tenant, sizeof(tenant), "%" PRIu32, tenant_id);
	snprintf(op, sizeof(op), "%" PRIu32, f->rf_operation_id);
	snprintf(older, sizeof(older), "%" PRId64, f->rf_older_than);
	snprintf(after, sizeof(after), "%" PRId64, f->rf_after_us);
	snprintf(lim, sizeof(lim), "%zu", limit);
	const char *v[] = { tenant,
			    f->rf_operation_id ? op : NULL,
			    f->rf_state,
			    f->rf_subject,
			    f->rf_older_than >= 0 ? older : NULL,
			    f->rf_has_after ? after : NULL,
			    f->rf_has_after ? (const char *)f->rf_after_id : NULL,
			    lim };
	const int len[] = { 0, 0, 0, 0, 0, 0, 16, 0 }, fmt[] = { 0, 0, 0, 0, 0, 0, 1, 0 };
	PGresult *r = store_run(&st_record_list, v, len, fmt);
	if (r == NULL)
		return -1;
	size_t m = (size_t)PQntuples(r);
	struct record_row *out = m > 0 ? calloc(m, sizeof(*out)) : NULL;
	if (m > 0 && out == NULL) {
		PQclear(r);
		return -1;
	}
	for (size_t i = 0; i < m; i++) {
		int row = (int)i;
		size_t idlen;
		unsigned char *id = store_bytea(r, row, 0, &idlen);
		if (id == NULL || idlen != 16) {
			free(id);
			free(out);
			PQclear(r);
			return -1;
		}
		memcpy(out[i].rr_id, id, 16);
		free(id);
		out[i].rr_operation_id = (uint32_t)store_i64(r, row, 1);
		snprintf(out[i].rr_state, sizeof(out[i].rr_state), "%s", PQgetvalue(r, row, 2));
		out[i].rr_has_subject = !PQgetisnull(r, row, 3);
		snprintf(out[i].rr_subject, sizeof(out[i].rr_subject), "%s", PQgetvalue(r, row, 3));
		out[i].rr_attempt = (int)store_i64(r, row, 4);
		out[i].rr_lease_expires_at = store_i64(r, row, 5);
		out[i].rr_expires_at = store_i64(r, row, 6);
		out[i].rr_created_us = store_i64(r, row, 7);
	}
	PQclear(r);
	*rows = out;
	*n = m;
	return 0;
}

int store_events_sweep(int limit, int *deleted)
{
	char lim[16];

	snprintf(lim, sizeof(lim), "%d", limit);
	const char *v[] = { lim };
	PGresult *r = store_run(&st_events_sweep, v, NULL, NULL);
	if (r == NULL)
		return -1;
	*deleted = (int)store_i64(r, 0, 0);
	PQclear(r);
	return 0;
}

int store_version_get(uint32_t tenant_id, const char *key, int64_t *version)
{
	char tenant[16];

	snprintf(tenant, sizeof(tenant), "%" PRIu32, tenant_id);
	const char *v[] = { tenant, key };
	PGresult *r = store_run(&st_version_get, v, NULL, NULL);
	if (r == NULL)
		return -1;
	*version = PQntuples(r) == 1 ? store_i64(r, 0, 0) : 0;
	PQclear(r);
	return 0;
}

int store_version_bump(uint32_t tenant_id, const char *key, int64_t expected, int *ok,
		       int64_t *version)
{
	char tenant[16], exp[24];

	snprintf(tenant, sizeof(tenant), "%" PRIu32, tenant_id);
	snprintf(exp, sizeof(exp), "%" PRId64, expected);
	const char *v[] = { tenant, key, exp };
	PGresult *r = store_run(&st_version_bump, v, NULL, NULL);
	if (r == NULL)
		return -1;
	int rc = PQntuples(r) == 1 ? 0 : -1;
	if (rc == 0) {
		*ok = store_bool(r, 0, 0);
		*version = store_i64(r, 0, 1);
	}
	PQclear(r);
	return rc;
}

int store_sweep(int limit, int64_t *after_ms, int *deleted)
{
	char lim[16], after[24];

	snprintf(lim, sizeof(lim), "%d", limit);
	snprintf(after, sizeof(after), "%" PRId64, *after_ms);
	const char *v[] = { lim, after };
	PGresult *r = store_run(&st_sweep, v, NULL, NULL);
	if (r == NULL)
		return -1;
	*deleted = (int)store_i64(r, 0, 0);
	*after_ms = store_i64(r, 0, 1);
	PQclear(r);
	return 0;
}

/* Signing keys again: the re-seal needs the array helpers above. */
int store_keys_reseal(const struct sealed_key *old, const unsigned char *const *sealed,
		      const size_t *lens, size_t n, int *ok)
{
	struct store_array arrs[3] = { { 0 } };
	PGresult *r = NULL;
	int rc = -1;

	*ok = 1;
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		store_array_i64(&arrs[0], old[i].sk_id);
		store_array_bytea(&arrs[1], old[i].sk_sealed, old[i].sk_len);
		store_array_bytea(&arrs[2], sealed[i], lens[i]);
	}
	if (store_arrays_close(arrs, 3) < 0)
		goto done;
	const char *v[] = { arrs[0].sa_buf, arrs[1].sa_buf, arrs[2].sa_buf };
	r = store_run(&st_keys_reseal, v, NULL, NULL);
	if (r == NULL || PQntuples(r) != 1)
		goto done;
	*ok = store_bool(r, 0, 0);
	rc = 0;
done:
	PQclear(r);
	store_arrays_free(arrs, 3);
	return rc;
}

int store_replays_add(size_t n, const uint32_t *tenant_ids, const uint8_t (*ids)[16],
		      const int64_t *counts)
{
	struct store_array arrs[3] = { { 0 } };
	int rc = -1;

	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		store_array_i64(&arrs[0], tenant_ids[i]);
		store_array_bytea(&arrs[1], ids[i], 16);
		store_array_i64(&arrs[2], counts[i]);
	}
	if (store_arrays_close(arrs, 3) == 0) {
		const char *v[] = { arrs[0].sa_buf, arrs[1].sa_buf, arrs[2].sa_buf };
		PGresult *r = store_run(&st_replays_add, v, NULL, NULL);
		rc = r != NULL ? 0 : -1;
		PQclear(r);
	}
	store_arrays_free(arrs, 3);
	return rc;
}

int store_records_stuck(struct stuck_count **rows, size_t *n)
{
	PGresult *r = store_run(&st_records_stuck, NULL, NULL, NULL);

	*rows = NULL;
	*n = 0;
	if (r == NULL)
		return -1;
	size_t m = (size_t)PQntuples(r);
	struct stuck_count *out = calloc(m ? m : 1, sizeof(*out));
	if (out == NULL) {
		PQclear(r);
		return -1;
	}
	for (size_t i = 0; i < m; i++) {
		out[i].sc_tenant_id = (uint32_t)store_i64(r, (int)i, 0);
		out[i].sc_operation_id = (uint32_t)store_i64(r, (int)i, 1);
		out[i].sc_count = store_i64(r, (int)i, 2);
	}
	PQclear(r);
	*rows = out;
	*n = m;
	return 0;
}
