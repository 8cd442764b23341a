/* Store: tenants, API keys, operations and signing keys (see store.c). */
#include "store_int.h"

#include <inttypes.h>
#include <libpq-fe.h>
#include <sodium.h>
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
static const struct db_stmt st_apikeys_all = {
	ST_APIKEYS_ALL, "apikeys_all",
	"SELECT tenant_id, id, encode(key_hash, 'hex') FROM api_keys", 0
};
static const struct db_stmt st_apikeys_sum = {
	ST_APIKEYS_SUM, "apikeys_sum", "SELECT count(*), coalesce(sum(id), 0) FROM api_keys", 0
};
static const struct db_stmt st_tenant_by_name = { ST_TENANT_BY_NAME, "tenant_by_name",
						  "SELECT id FROM tenants WHERE name = $1", 1 };
/* The operation's row locked, the route needs checked, then written
 * (migrations/0020). */
static const struct db_stmt st_op_put = {
	ST_OP_PUT, "op_put",
	"SELECT coalesce(id, 0), created, refused, instance, route, need_ms "
	"FROM idemd.op_put($1, $2, $3, $4, $5, $6, $7, $8, $9)",
	9
};
static const struct db_stmt st_needs_publish = {
	ST_NEEDS_PUBLISH, "needs_publish",
	"WITH n AS (SELECT * FROM unnest($2::int[], $3::text[], $4::text[], $5::bigint[]) "
	"AS n(tenant, op, route, need)), "
	"gone AS (DELETE FROM route_needs rn WHERE rn.instance = $1 AND NOT EXISTS (SELECT 1 "
	"FROM n WHERE n.tenant = rn.tenant_id AND n.op = rn.operation AND n.route = rn.route)) "
	"INSERT INTO route_needs (instance, tenant_id, operation, route, need_ms, expires_at) "
	"SELECT $1, n.tenant, n.op, n.route, max(n.need), clock_timestamp() + interval '30 s' "
	"FROM n GROUP BY n.tenant, n.op, n.route "
	"ON CONFLICT (tenant_id, operation, instance, route) DO UPDATE "
	"SET need_ms = EXCLUDED.need_ms, expires_at = EXCLUDED.expires_at",
	5
};
static const struct db_stmt st_needs_renew = {
	ST_NEEDS_RENEW, "needs_renew",
	"WITH r AS (UPDATE route_needs SET expires_at = clock_timestamp() + interval '30 s' "
	"WHERE instance = $1 RETURNING tenant_id, operation, need_ms) "
	"SELECT count(*) FROM r JOIN operations o ON o.tenant_id = r.tenant_id "
	"AND o.name = r.operation WHERE r.need_ms > o.lease_seconds::bigint * 1000",
	1
};
static const struct db_stmt st_needs_drop = { ST_NEEDS_DROP, "needs_drop",
					      "DELETE FROM route_needs WHERE instance = $1", 1 };
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

#define OP(f) STORE_FIELD(struct operation, f)
#define TENANT(f) STORE_FIELD(struct tenant_info, f)
#define KEY(f) STORE_FIELD(struct sealed_key, f)

/* The columns of OP_COLUMNS, of st_tenant_list and of st_keys_load. */
static const struct store_col op_cols[] = { { 0, SC_U32, OP(op_id) },
					    { 1, SC_U32, OP(op_tenant_id) },
					    { 2, SC_TEXT, STORE_TEXT(struct operation, op_name) },
					    { 3, SC_INT, OP(op_token_ttl_seconds) },
					    { 4, SC_INT, OP(op_retention_seconds) },
					    { 5, SC_INT, OP(op_lease_seconds) },
					    { 6, SC_HAS, OP(op_has_version_key) },
					    { 6, SC_TEXT,
					      STORE_TEXT(struct operation, op_version_key) },
					    { 7, SC_BOOL, OP(op_require_version) },
					    { 8, SC_INT, OP(op_wait_seconds) },
					    { 9, SC_INT, OP(op_audit_retention) } };
static const struct store_col tenant_cols[] = {
	{ 0, SC_TEXT, STORE_TEXT(struct tenant_info, ti_name) },
	{ 1, SC_I64, TENANT(ti_created_at) },
	{ 2, SC_IDS, STORE_COUNTED(struct tenant_info, ti_key_ids, ti_nkeys) }
};
static const struct store_col key_cols[] = {
	{ 0, SC_U32, KEY(sk_id) },
	{ 1, SC_BYTEA, STORE_COUNTED(struct sealed_key, sk_sealed, sk_len) },
	{ 2, SC_I64, KEY(sk_created_at) },
	{ 3, SC_I64, KEY(sk_retired_at) }
};

int store_tenant_create(const char *name, const uint8_t key_hash[STORE_HASH_BYTES],
			uint32_t *tenant_id, uint32_t *key_id, int *exists)
{
	const char *v[] = { name, (const char *)key_hash };
	const int len[] = { 0, STORE_HASH_BYTES }, fmt[] = { 0, 1 };
	int64_t o[2];
	int rows = store_ints(&st_tenant_create, v, len, fmt, o, 2);

	*exists = rows == 0;
	*tenant_id = (uint32_t)o[0];
	*key_id = (uint32_t)o[1];
	return rows < 0 ? -1 : 0;
}

int store_tenant_list(struct tenant_info **tenants, size_t *n)
{
	return store_read_rows(db_run(&st_tenant_list, NULL, NULL, NULL), tenant_cols,
			       IDEMD_ARRAY_LEN(tenant_cols), sizeof(**tenants), tenants, n);
}

void store_tenants_free(struct tenant_info *t, size_t n)
{
	store_free_rows(t, n, tenant_cols, IDEMD_ARRAY_LEN(tenant_cols), sizeof(*t));
}

int store_tenant_delete(const char *name, int *found)
{
	const char *v[] = { name };
	int64_t deleted;
	int rows = store_ints(&st_tenant_delete, v, NULL, NULL, &deleted, 1);

	*found = rows == 1 && deleted;
	return rows < 0 ? -1 : 0;
}

int store_api_key_add(const char *tenant, const uint8_t key_hash[STORE_HASH_BYTES],
		      uint32_t *key_id, int *found)
{
	const char *v[] = { tenant, (const char *)key_hash };
	const int len[] = { 0, STORE_HASH_BYTES }, fmt[] = { 0, 1 };
	int64_t id;
	int rows = store_ints(&st_apikey_add, v, len, fmt, &id, 1);

	*found = rows == 1;
	*key_id = *found ? (uint32_t)id : 0;
	return rows < 0 ? -1 : 0;
}

int store_api_key_revoke(const char *tenant, uint32_t key_id, int *tenant_found, int *key_found)
{
	char id[16];
	int64_t o[2];

	snprintf(id, sizeof(id), "%" PRIu32, key_id);
	const char *v[] = { tenant, id };
	if (store_ints(&st_apikey_revoke, v, NULL, NULL, o, 2) != 1)
		return -1;
	*tenant_found = o[0] > 0;
	*key_found = o[1] > 0;
	return 0;
}

int store_tenant_by_key(const uint8_t key_hash[STORE_HASH_BYTES], uint32_t *tenant_id,
			uint32_t *key_id, int *found)
{
	const char *v[] = { (const char *)key_hash };
	const int len[] = { STORE_HASH_BYTES }, fmt[] = { 1 };
	int64_t o[2];
	int rows = store_ints(&st_tenant_by_key, v, len, fmt, o, 2);

	*found = rows == 1;
	*tenant_id = *found ? (uint32_t)o[0] : 0;
	*key_id = *found ? (uint32_t)o[1] : 0;
	return rows < 0 ? -1 : 0;
}

int store_api_keys_all(struct api_key_row **keys, size_t *n)
{
	PGresult *r = db_run(&st_apikeys_all, NULL, NULL, NULL);
	int ret = -1, rows = r != NULL ? PQntuples(r) : -1;
	struct api_key_row *k = NULL;
	size_t got = 0;

	if (rows < 0)
		goto done;
	if (rows > 0 && (k = calloc((size_t)rows, sizeof(*k))) == NULL)
		goto done;
	for (int i = 0; i < rows; i++) {
		const char *hex = PQgetvalue(r, i, 2);
		if (sodium_hex2bin(k[got].ak_hash, sizeof(k[got].ak_hash), hex, strlen(hex), NULL,
				   NULL, NULL) != 0)
			continue; /* the schema holds 32 bytes; never seen */
		k[got].ak_tenant_id = (uint32_t)store_i64(r, i, 0);
		k[got].ak_key_id = (uint32_t)store_i64(r, i, 1);
		got++;
	}
	*keys = k;
	*n = got;
	k = NULL;
	ret = 0;
done:
	free(k);
	PQclear(r);
	return ret;
}

int store_api_keys_sum(int64_t *count, int64_t *sum)
{
	int64_t o[2];
	int rows = store_ints(&st_apikeys_sum, NULL, NULL, NULL, o, 2);

	*count = o[0];
	*sum = o[1];
	return rows == 1 ? 0 : -1;
}

int store_tenant_by_name(const char *name, uint32_t *tenant_id, int *found)
{
	const char *v[] = { name };
	int64_t id;
	int rows = store_ints(&st_tenant_by_name, v, NULL, NULL, &id, 1);

	*found = rows == 1;
	*tenant_id = *found ? (uint32_t)id : 0;
	return rows < 0 ? -1 : 0;
}

int store_operation_put(struct operation *op, int *created, int *refused, struct op_refusal *why)
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
	PGresult *r = db_run(&st_op_put, v, NULL, NULL);
	if (r == NULL)
		return -1;
	if (PQntuples(r) != 1) {
		PQclear(r);
		return -1;
	}
	*refused = store_bool(r, 0, 2);
	memset(why, 0, sizeof(*why));
	if (*refused) {
		snprintf(why->or_instance, sizeof(why->or_instance), "%s", PQgetvalue(r, 0, 3));
		snprintf(why->or_route, sizeof(why->or_route), "%s", PQgetvalue(r, 0, 4));
		why->or_need_ms = store_i64(r, 0, 5);
	} else {
		op->op_id = (uint32_t)store_i64(r, 0, 0);
		*created = store_bool(r, 0, 1);
	}
	PQclear(r);
	return 0;
}

int store_route_needs_publish(const char *instance, const struct route_need *needs, size_t n)
{
	struct buf arrs[4] = { { 0 } };
	int rc = -1;

	for (size_t i = 0; i < n; i++) {
		store_array_i64(&arrs[0], needs[i].rn_tenant_id);
		store_array_text(&arrs[1], needs[i].rn_operation, strlen(needs[i].rn_operation));
		store_array_text(&arrs[2], needs[i].rn_route, strlen(needs[i].rn_route));
		store_array_i64(&arrs[3], needs[i].rn_need_ms);
	}
	for (size_t k = 0; k < 4; k++)
		if (n == 0)
			(void)buf_str(&arrs[k], "{");
	if (store_arrays_close(arrs, 4) == 0) {
		const char *v[] = { instance, arrs[0].b_data, arrs[1].b_data, arrs[2].b_data,
				    arrs[3].b_data };
		PGresult *r = db_run(&st_needs_publish, v, NULL, NULL);
		rc = r != NULL ? 0 : -1;
		PQclear(r);
	}
	store_arrays_free(arrs, 4);
	return rc;
}

int store_route_needs_renew(const char *instance, int *short_leases)
{
	const char *v[] = { instance };
	int64_t n;

	if (store_ints(&st_needs_renew, v, NULL, NULL, &n, 1) != 1)
		return -1;
	*short_leases = (int)n;
	return 0;
}

int store_route_needs_drop(const char *instance)
{
	const char *v[] = { instance };
	PGresult *r = db_run(&st_needs_drop, v, NULL, NULL);

	if (r == NULL)
		return -1;
	PQclear(r);
	return 0;
}

/* The operation ST finds with V into *OP (zeroed first), if one. */
static int store_operation_read(const struct db_stmt *st, const char *const *v,
				struct operation *op, int *found)
{
	PGresult *r = db_run(st, v, NULL, NULL);

	if (r == NULL)
		return -1;
	*found = PQntuples(r) == 1;
	if (*found)
		memset(op, 0, sizeof(*op));
	int rc = *found ? store_read_row(r, 0, op_cols, IDEMD_ARRAY_LEN(op_cols), op) : 0;
	PQclear(r);
	return rc;
}

int store_operation_get(uint32_t tenant_id, const char *name, struct operation *op, int *found)
{
	char tenant[16];

	snprintf(tenant, sizeof(tenant), "%" PRIu32, tenant_id);
	const char *v[] = { tenant, name };
	return store_operation_read(&st_op_get, v, op, found);
}

int store_operation_by_id(uint32_t op_id, struct operation *op, int *found)
{
	char id[16];

	snprintf(id, sizeof(id), "%" PRIu32, op_id);
	const char *v[] = { id };
	return store_operation_read(&st_op_by_id, v, op, found);
}

int store_operation_list(uint32_t tenant_id, struct operation **ops, size_t *n)
{
	char tenant[16];

	snprintf(tenant, sizeof(tenant), "%" PRIu32, tenant_id);
	const char *v[] = { tenant };
	return store_read_rows(db_run(&st_op_list, v, NULL, NULL), op_cols,
			       IDEMD_ARRAY_LEN(op_cols), sizeof(**ops), ops, n);
}

int store_keys_load(struct sealed_key **keys, size_t *n)
{
	return store_read_rows(db_run(&st_keys_load, NULL, NULL, NULL), key_cols,
			       IDEMD_ARRAY_LEN(key_cols), sizeof(**keys), keys, n);
}

void store_keys_free(struct sealed_key *keys, size_t n)
{
	store_free_rows(keys, n, key_cols, IDEMD_ARRAY_LEN(key_cols), sizeof(*keys));
}

int store_keys_newest(uint32_t *id)
{
	int64_t newest;
	int rows = store_ints(&st_keys_newest, NULL, NULL, NULL, &newest, 1);

	*id = (uint32_t)newest;
	return rows < 0 ? -1 : 0;
}

int store_key_insert(const unsigned char *sealed, size_t len, int first_only, uint32_t *id)
{
	const char *v[] = { (const char *)sealed };
	const int lens[] = { (int)len }, fmt[] = { 1 };
	int64_t inserted;
	int rows =
		store_ints(first_only ? &st_key_first : &st_key_insert, v, lens, fmt, &inserted, 1);

	*id = (uint32_t)inserted;
	return rows < 0 ? -1 : 0;
}

int store_keys_count(int64_t *n)
{
	int64_t present;

	*n = 0;
	if (store_ints(&st_keys_table, NULL, NULL, NULL, &present, 1) < 0)
		return -1;
	if (!present)
		return 0;
	return store_ints(&st_keys_count, NULL, NULL, NULL, n, 1) < 0 ? -1 : 0;
}

int store_keys_prune(int64_t max_age_seconds)
{
	char age[24];

	snprintf(age, sizeof(age), "%" PRId64, max_age_seconds);
	const char *v[] = { age };
	return store_ints(&st_keys_prune, v, NULL, NULL, NULL, 0) < 0 ? -1 : 0;
}

/* Re-seals every signing key in one statement, over array literals. */
int store_keys_reseal(const struct sealed_key *old, const unsigned char *const *sealed,
		      const size_t *lens, size_t n, int *ok)
{
	struct buf arrs[3] = { { 0 } };
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
	const char *v[] = { arrs[0].b_data, arrs[1].b_data, arrs[2].b_data };
	int64_t resealed;
	if (store_ints(&st_keys_reseal, v, NULL, NULL, &resealed, 1) != 1)
		goto done;
	*ok = (int)resealed;
	rc = 0;
done:
	store_arrays_free(arrs, 3);
	return rc;
}
