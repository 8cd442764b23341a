/* Store: all SQL lives here. Statements are prepared once per pooled
 * connection; bytea parameters go in binary, everything else as text. */
#include "store.h"

#include <inttypes.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"

enum {
	ST_TENANT_CREATE = 1, ST_TENANT_BY_KEY, ST_TENANT_BY_NAME,
	ST_OP_PUT, ST_OP_GET, ST_OP_BY_ID, ST_OP_LIST,
	ST_KEYS_LOAD, ST_KEYS_NEWEST, ST_KEY_INSERT, ST_KEY_FIRST, ST_KEYS_PRUNE,
	ST_CLAIM, ST_COMPLETE, ST_RELEASE, ST_REVOKE, ST_RECORD_GET,
	ST_VERSION_GET, ST_VERSION_BUMP, ST_SWEEP,
};

#define OP_COLUMNS "id, tenant_id, name, token_ttl_seconds, retention_seconds, " \
	"lease_seconds, version_key, require_version"
#define MS(col) "(extract(epoch from " col ") * 1000)::bigint"

static const struct db_stmt st_tenant_create = { ST_TENANT_CREATE, "tenant_create",
	"WITH t AS (INSERT INTO tenants(name) VALUES ($1) ON CONFLICT (name) DO NOTHING RETURNING id), "
	"k AS (INSERT INTO api_keys(key_hash, tenant_id) SELECT $2, id FROM t RETURNING tenant_id) "
	"SELECT tenant_id FROM k", 2 };
static const struct db_stmt st_tenant_by_key = { ST_TENANT_BY_KEY, "tenant_by_key",
	"SELECT tenant_id FROM api_keys WHERE key_hash = $1", 1 };
static const struct db_stmt st_tenant_by_name = { ST_TENANT_BY_NAME, "tenant_by_name",
	"SELECT id FROM tenants WHERE name = $1", 1 };
static const struct db_stmt st_op_put = { ST_OP_PUT, "op_put",
	"INSERT INTO operations(tenant_id, name, token_ttl_seconds, retention_seconds, "
	"lease_seconds, version_key, require_version) VALUES ($1, $2, $3, $4, $5, $6, $7) "
	"ON CONFLICT (tenant_id, name) DO UPDATE SET token_ttl_seconds = EXCLUDED.token_ttl_seconds, "
	"retention_seconds = EXCLUDED.retention_seconds, lease_seconds = EXCLUDED.lease_seconds, "
	"version_key = EXCLUDED.version_key, require_version = EXCLUDED.require_version, "
	"updated_at = now() RETURNING id, (xmax = 0)", 7 };
static const struct db_stmt st_op_get = { ST_OP_GET, "op_get",
	"SELECT " OP_COLUMNS " FROM operations WHERE tenant_id = $1 AND name = $2", 2 };
static const struct db_stmt st_op_by_id = { ST_OP_BY_ID, "op_by_id",
	"SELECT " OP_COLUMNS " FROM operations WHERE id = $1", 1 };
static const struct db_stmt st_op_list = { ST_OP_LIST, "op_list",
	"SELECT " OP_COLUMNS " FROM operations WHERE tenant_id = $1 ORDER BY name LIMIT 1000", 1 };
static const struct db_stmt st_keys_load = { ST_KEYS_LOAD, "keys_load",
	"SELECT id, sealed, extract(epoch from created_at)::bigint, "
	"coalesce(extract(epoch from retired_at)::bigint, 0) FROM signing_keys ORDER BY id", 0 };
static const struct db_stmt st_keys_newest = { ST_KEYS_NEWEST, "keys_newest",
	"SELECT coalesce(max(id), 0) FROM signing_keys", 0 };
static const struct db_stmt st_key_insert = { ST_KEY_INSERT, "key_insert",
	"WITH r AS (UPDATE signing_keys SET retired_at = now() WHERE retired_at IS NULL) "
	"INSERT INTO signing_keys(sealed) VALUES ($1) RETURNING id", 1 };
static const struct db_stmt st_key_first = { ST_KEY_FIRST, "key_first",
	"SELECT idemd_first_key($1)", 1 };
static const struct db_stmt st_keys_prune = { ST_KEYS_PRUNE, "keys_prune",
	"DELETE FROM signing_keys WHERE retired_at < now() - make_interval(secs => $1)", 1 };
static const struct db_stmt st_claim = { ST_CLAIM, "claim",
	"SELECT outcome, attempt, " MS("lease_expires_at") ", retry_after, resp_status, "
	"resp_headers, resp_body, resp_is_json, current_version FROM idemd_claim($1, $2, $3, $4, $5, "
	"to_timestamp($6), $7, $8, $9, $10)", 10 };
static const struct db_stmt st_complete = { ST_COMPLETE, "complete",
	"SELECT outcome, resp_status, resp_headers, resp_body, resp_is_json, " MS("expires_at")
	", fingerprint FROM idemd_complete($1, $2, $3, $4, $5, $6, $7, $8)", 8 };
static const struct db_stmt st_release = { ST_RELEASE, "release",
	"SELECT idemd_release($1, $2, $3)", 3 };
static const struct db_stmt st_revoke = { ST_REVOKE, "revoke",
	"SELECT idemd_revoke($1, $2, $3, $4, to_timestamp($5))", 5 };
static const struct db_stmt st_record_get = { ST_RECORD_GET, "record_get",
	"SELECT state, attempt, coalesce(" MS("lease_expires_at") ", 0), " MS("expires_at") ", "
	"response_status, response_headers, response_body, response_is_json "
	"FROM records WHERE tenant_id = $1 AND token_id = $2", 2 };
static const struct db_stmt st_version_get = { ST_VERSION_GET, "version_get",
	"SELECT version FROM versions WHERE tenant_id = $1 AND key = $2", 2 };
static const struct db_stmt st_version_bump = { ST_VERSION_BUMP, "version_bump",
	"SELECT ok, version FROM idemd_version_bump($1, $2, $3)", 3 };
static const struct db_stmt st_sweep = { ST_SWEEP, "sweep",
	"SELECT CASE WHEN pg_try_advisory_xact_lock(7428137) THEN idemd_sweep($1) ELSE -1 END", 1 };

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

/* Reads status, headers, body, is_json starting at column COL. */
static int store_read_response(const PGresult *r, int col, struct stored_response *out)
{
	memset(out, 0, sizeof(*out));
	if (PQgetisnull(r, 0, col))
		return 0;
	out->sr_status = (int)store_i64(r, 0, col);
	out->sr_headers = strdup(PQgetisnull(r, 0, col + 1) ? "{}" : PQgetvalue(r, 0, col + 1));
	out->sr_body = store_bytea(r, 0, col + 2, &out->sr_body_len);
	out->sr_is_json = store_bool(r, 0, col + 3);
	if (out->sr_headers == NULL || out->sr_body == NULL) {
		store_response_free(out);
		return -1;
	}
	return 0;
}

int store_tenant_create(const char *name, const uint8_t key_hash[STORE_HASH_BYTES],
			uint32_t *tenant_id, int *exists)
{
	const char *v[] = { name, (const char *)key_hash };
	const int len[] = { 0, STORE_HASH_BYTES }, fmt[] = { 0, 1 };
	PGresult *r = store_run(&st_tenant_create, v, len, fmt);

	if (r == NULL)
		return -1;
	*exists = PQntuples(r) == 0;
	*tenant_id = *exists ? 0 : (uint32_t)store_i64(r, 0, 0);
	PQclear(r);
	return 0;
}

int store_tenant_by_key(const uint8_t key_hash[STORE_HASH_BYTES], uint32_t *tenant_id,
			int *found)
{
	const char *v[] = { (const char *)key_hash };
	const int len[] = { STORE_HASH_BYTES }, fmt[] = { 1 };
	PGresult *r = store_run(&st_tenant_by_key, v, len, fmt);

	if (r == NULL)
		return -1;
	*found = PQntuples(r) == 1;
	*tenant_id = *found ? (uint32_t)store_i64(r, 0, 0) : 0;
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
}

int store_operation_put(struct operation *op, int *created)
{
	char tenant[16], ttl[16], ret[16], lease[16];

	snprintf(tenant, sizeof(tenant), "%" PRIu32, op->op_tenant_id);
	snprintf(ttl, sizeof(ttl), "%d", op->op_token_ttl_seconds);
	snprintf(ret, sizeof(ret), "%d", op->op_retention_seconds);
	snprintf(lease, sizeof(lease), "%d", op->op_lease_seconds);
	const char *v[] = { tenant, op->op_name, ttl, ret, lease,
			    op->op_has_version_key ? op->op_version_key : NULL,
			    op->op_require_version ? "true" : "false" };
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
	{ "claimed", CLAIM_CLAIMED }, { "replay", CLAIM_REPLAY },
	{ "in_progress", CLAIM_IN_PROGRESS }, { "revoked", CLAIM_REVOKED },
	{ "fingerprint_mismatch", CLAIM_FINGERPRINT_MISMATCH }, { "expired", CLAIM_EXPIRED },
	{ "version_mismatch", CLAIM_VERSION_MISMATCH },
	{ "version_required", CLAIM_VERSION_REQUIRED },
};

int store_claim(const struct claim_args *a, struct claim_result *res)
{
	char tenant[16], op[16], expires[24], lease[16], expected[24];

	memset(res, 0, sizeof(*res));
	snprintf(tenant, sizeof(tenant), "%" PRIu32, a->tenant_id);
	snprintf(op, sizeof(op), "%" PRIu32, a->operation_id);
	snprintf(expires, sizeof(expires), "%" PRId64, a->token_expires_at);
	snprintf(lease, sizeof(lease), "%d", a->lease_seconds);
	snprintf(expected, sizeof(expected), "%" PRId64, a->expected);
	const char *v[] = { tenant, (const char *)a->token_id, op, a->subject,
			    (const char *)a->fingerprint, expires, lease, a->version_key,
			    a->has_expected ? expected : NULL,
			    a->require_version ? "true" : "false" };
	const int len[] = { 0, 16, 0, 0, STORE_HASH_BYTES, 0, 0, 0, 0, 0 };
	const int fmt[] = { 0, 1, 0, 0, 1, 0, 0, 0, 0, 0 };
	PGresult *r = store_run(&st_claim, v, len, fmt);
	if (r == NULL)
		return -1;
	int rc = -1;
	if (PQntuples(r) != 1)
		goto done;
	const char *outcome = PQgetvalue(r, 0, 0);
	size_t i;
	for (i = 0; i < IDEMD_ARRAY_LEN(store_claim_outcomes); i++)
		if (strcmp(outcome, store_claim_outcomes[i].name) == 0)
			break;
	if (i == IDEMD_ARRAY_LEN(store_claim_outcomes))
		goto done;
	res->cr_outcome = store_claim_outcomes[i].outcome;
	res->cr_attempt = (int)store_i64(r, 0, 1);
	res->cr_lease_expires_at = store_i64(r, 0, 2);
	res->cr_record_expires_at = res->cr_outcome == CLAIM_REPLAY ? res->cr_lease_expires_at : 0;
	res->cr_retry_after = (int)store_i64(r, 0, 3);
	res->cr_current_version = store_i64(r, 0, 8);
	if (res->cr_outcome == CLAIM_REPLAY && store_read_response(r, 4, &res->cr_response) < 0)
		goto done;
	rc = 0;
done:
	PQclear(r);
	return rc;
}

int store_complete(uint32_t tenant_id, const uint8_t *token_id, int attempt,
		   const struct stored_response *resp, int retention_seconds,
		   enum complete_outcome *outcome, struct stored_response *stored,
		   int64_t *expires_at, uint8_t fingerprint[STORE_HASH_BYTES],
		   int *has_fingerprint)
{
	char tenant[16], att[16], status[16], ret[16];

	memset(stored, 0, sizeof(*stored));
	snprintf(tenant, sizeof(tenant), "%" PRIu32, tenant_id);
	snprintf(att, sizeof(att), "%d", attempt);
	snprintf(status, sizeof(status), "%d", resp->sr_status);
	snprintf(ret, sizeof(ret), "%d", retention_seconds);
	const char *v[] = { tenant, (const char *)token_id, att, status, resp->sr_headers,
			    resp->sr_body ? (const char *)resp->sr_body : "",
			    resp->sr_is_json ? "true" : "false", ret };
	const int len[] = { 0, 16, 0, 0, 0, (int)resp->sr_body_len, 0, 0 };
	const int fmt[] = { 0, 1, 0, 0, 0, 1, 0, 0 };
	PGresult *r = store_run(&st_complete, v, len, fmt);
	if (r == NULL)
		return -1;
	int rc = -1;
	if (PQntuples(r) != 1)
		goto done;
	const char *o = PQgetvalue(r, 0, 0);
	if (strcmp(o, "completed") == 0)
		*outcome = COMPLETE_STORED;
	else if (strcmp(o, "already_completed") == 0)
		*outcome = COMPLETE_ALREADY;
	else if (strcmp(o, "lease_lost") == 0)
		*outcome = COMPLETE_LEASE_LOST;
	else
		*outcome = COMPLETE_NOT_IN_PROGRESS;
	*expires_at = store_i64(r, 0, 5);
	if ((*outcome == COMPLETE_STORED || *outcome == COMPLETE_ALREADY) &&
	    store_read_response(r, 1, stored) < 0)
		goto done;
	*has_fingerprint = 0;
	if (!PQgetisnull(r, 0, 6)) {
		size_t n;
		unsigned char *fp = store_bytea(r, 0, 6, &n);
		if (fp == NULL) {
			store_response_free(stored);
			goto done;
		}
		*has_fingerprint = n == STORE_HASH_BYTES;
		if (*has_fingerprint)
			memcpy(fingerprint, fp, STORE_HASH_BYTES);
		free(fp);
	}
	rc = 0;
done:
	PQclear(r);
	return rc;
}

int store_release(uint32_t tenant_id, const uint8_t *token_id, int attempt,
		  enum release_outcome *outcome)
{
	char tenant[16], att[16];

	snprintf(tenant, sizeof(tenant), "%" PRIu32, tenant_id);
	snprintf(att, sizeof(att), "%d", attempt);
	const char *v[] = { tenant, (const char *)token_id, att };
	const int len[] = { 0, 16, 0 }, fmt[] = { 0, 1, 0 };
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
		 const char *subject, int64_t token_expires_at, int *in_use)
{
	char tenant[16], op[16], expires[24];

	snprintf(tenant, sizeof(tenant), "%" PRIu32, tenant_id);
	snprintf(op, sizeof(op), "%" PRIu32, operation_id);
	snprintf(expires, sizeof(expires), "%" PRId64, token_expires_at);
	const char *v[] = { tenant, (const char *)token_id, op, subject, expires };
	const int len[] = { 0, 16, 0, 0, 0 }, fmt[] = { 0, 1, 0, 0, 0 };
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
		rc = store_read_response(r, 4, &rv->rv_response);
	}
	PQclear(r);
	return rc;
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

int store_sweep(int limit, int *deleted)
{
	char lim[16];

	snprintf(lim, sizeof(lim), "%d", limit);
	const char *v[] = { lim };
	PGresult *r = store_run(&st_sweep, v, NULL, NULL);
	if (r == NULL)
		return -1;
	*deleted = (int)store_i64(r, 0, 0);
	PQclear(r);
	return 0;
}
