/* Store: tenants, API keys, operations and signing keys (see store.c). */
#include "store_int.h"

#include <inttypes.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OP_COLUMNS \
	"id, tenant_id, name, token_ttl_seconds, retention_seconds, " \
	"lease_seconds, version_key, require_version, wait_seconds, " \
	"coalesce(audit_retention_seconds, -1)"

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

/* Re-seals every signing key in one statement, over array literals. */
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
