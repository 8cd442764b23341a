/* What a deleted tenant's claims leave behind: a claim in flight when the
 * tenant was deleted, or one on an instance that had not yet seen the
 * deletion, writes rows under a tenant id that no longer exists (records
 * have no foreign key to tenants: one would lock the tenant's row on every
 * claim). The janitor deletes them (store_orphans_delete), and watches
 * the tenants for deletions (store_tenants_sum). */
#include "store_int.h"

static const struct db_stmt st_tenants_sum = { ST_TENANTS_SUM, "tenants_sum",
					       "SELECT count(*), coalesce(sum(id), 0) FROM tenants",
					       0 };

/* The tenant ids of each table found with one index probe per id (its
 * primary key leads with tenant_id), those without a tenant kept; their
 * rows deleted in one statement, without the 'expired' events a record's
 * deletion writes (idemd.deleting_tenant, as idemd_tenant_delete). */
#define ORPHAN_IDS(name, table) \
	name "(id) AS ((SELECT min(tenant_id) FROM " table ") UNION ALL " \
	     "SELECT (SELECT min(x.tenant_id) FROM " table " x WHERE x.tenant_id > " name ".id) " \
	     "FROM " name " WHERE " name ".id IS NOT NULL)"
#define ORPHANS_GONE \
	"gone AS (SELECT DISTINCT id FROM (SELECT id FROM r UNION ALL SELECT id FROM e " \
	"UNION ALL SELECT id FROM v) ids WHERE id IS NOT NULL " \
	"AND NOT EXISTS (SELECT 1 FROM tenants t WHERE t.id = ids.id)), "
#define ORPHANS_DELETE \
	"quiet AS (SELECT set_config('idemd.deleting_tenant', 'on', true) AS on_), " \
	"dr AS (DELETE FROM records rec USING gone, quiet WHERE rec.tenant_id = gone.id " \
	"RETURNING 1), " \
	"de AS (DELETE FROM record_events ev USING gone WHERE ev.tenant_id = gone.id RETURNING 1), " \
	"dv AS (DELETE FROM versions ver USING gone WHERE ver.tenant_id = gone.id RETURNING 1) "
#define ORPHANS_SQL \
	"WITH RECURSIVE " ORPHAN_IDS("r", "records") ", " ORPHAN_IDS( \
		"e", "record_events") ", " ORPHAN_IDS("v", "versions") ", " ORPHANS_GONE \
		ORPHANS_DELETE "SELECT (SELECT count(*) FROM dr) + (SELECT count(*) FROM de) + (SELECT count(*) FROM dv)"
static const struct db_stmt st_orphans_delete = { ST_ORPHANS_DELETE, "orphans_delete", ORPHANS_SQL,
						  0 };

int store_tenants_sum(int64_t *count, int64_t *sum)
{
	int64_t o[2] = { 0, 0 };
	int rows = store_ints(&st_tenants_sum, NULL, NULL, NULL, o, 2);

	*count = o[0];
	*sum = o[1];
	return rows == 1 ? 0 : -1;
}

int store_orphans_delete(int64_t *deleted)
{
	int rows = store_ints(&st_orphans_delete, NULL, NULL, NULL, deleted, 1);

	return rows == 1 ? 0 : -1;
}
