/* Store: the statements of `idemd records` (cli_records.c). The operator
 * holds the database, so these read across tenants, by record id, and
 * name tenants and operations by name. Rows come back as JSON objects, one
 * member per non-NULL column, named and typed by the column (store_rows.c's
 * reader over a table made from the result: integers and booleans as
 * such, everything else as text). */
#include "store_int.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const struct db_stmt st_cli[] = {
	[STORE_CLI_RECORD] = { ST_CLI_RECORD, "cli_record",
			       "SELECT encode(r.token_id, 'hex') AS id, t.name AS tenant, o.name AS operation, "
			       "r.state, r.attempt, r.subject, "
			       "to_char(r.lease_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS lease_expires_at, "
			       "to_char(r.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS expires_at, "
			       "to_char(r.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS claimed_at, "
			       "r.response_status, r.checkpoint_phase, r.replays "
			       "FROM records r JOIN tenants t ON t.id = r.tenant_id "
			       "LEFT JOIN operations o ON o.id = r.operation_id "
			       "WHERE r.token_id = decode($1, 'hex') AND r.expires_at > now() ORDER BY t.name",
			       1 },
	[STORE_CLI_EVENTS] = { ST_CLI_EVENTS, "cli_events",
			       "SELECT encode(e.token_id, 'hex') AS id, t.name AS tenant, "
			       "to_char(e.at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS at, "
			       "e.event, e.attempt, e.status, e.phase, e.by, e.trace_id "
			       "FROM idemd.events e JOIN tenants t ON t.id = e.tenant_id "
			       "WHERE e.token_id = decode($1, 'hex') ORDER BY t.name, e.seq LIMIT 100000",
			       1 },
	[STORE_CLI_LIST] = { ST_CLI_LIST, "cli_list",
			     "SELECT encode(r.token_id, 'hex') AS id, t.name AS tenant, o.name AS operation, "
			     "r.state, r.attempt, r.subject, "
			     "to_char(r.lease_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS lease_expires_at, "
			     "to_char(r.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS claimed_at "
			     "FROM records r JOIN tenants t ON t.id = r.tenant_id "
			     "LEFT JOIN operations o ON o.id = r.operation_id "
			     "WHERE r.expires_at > now() AND ($1::text IS NULL OR t.name = $1) "
			     "AND ($2::text IS NULL OR o.name = $2) AND ($3::text IS NULL OR r.state = $3) "
			     "AND ($4::bigint IS NULL OR r.created_at <= now() - make_interval(secs => $4)) "
			     "ORDER BY r.created_at DESC LIMIT $5",
			     5 },
	/* the fenced release of 0011, for the one live record with this id,
	 * and its audit event, by "cli:<user>" */
	[STORE_CLI_RELEASE] = { ST_CLI_RELEASE, "cli_release",
				"WITH rec AS (SELECT r.tenant_id, r.operation_id FROM records r "
				"WHERE r.token_id = decode($1, 'hex') AND r.expires_at > now() "
				"ORDER BY r.tenant_id LIMIT 1), "
				"x AS (SELECT rec.tenant_id, rec.operation_id, "
				"idemd_release(rec.tenant_id, decode($1, 'hex'), $2::int) AS outcome FROM rec), "
				"ev AS (INSERT INTO record_events (tenant_id, token_id, event, attempt, status, phase, by, "
				"trace_id, expires_at) SELECT x.tenant_id, decode($1, 'hex'), 'released', $2::int, NULL, "
				"NULL, $3, NULL, idemd_audit_until(x.operation_id) FROM x WHERE x.outcome = 'released') "
				"SELECT $1 AS id, $2::int AS attempt, x.outcome FROM x",
				3 },
};

int store_cli_rows(enum store_cli_query q, const char *const *values, json_t **rows)
{
	PGresult *r = db_run(&st_cli[q], values, NULL, NULL);

	*rows = NULL;
	if (r == NULL)
		return -1;
	/* the columns as the statement names and types them */
	int n = PQnfields(r);
	struct store_col *cols = calloc(n > 0 ? (size_t)n : 1, sizeof(*cols));
	for (int c = 0; cols != NULL && c < n; c++) {
		Oid type = PQftype(r, c);
		cols[c].col = c;
		cols[c].type = type == 20 || type == 21 || type == 23 /* int8, int2, int4 */
				       ? SC_I64
				       : type == 16 /* bool */ ? SC_BOOL : SC_TEXT;
		cols[c].name = PQfname(r, c);
	}
	*rows = cols != NULL ? store_rows_json(r, PQntuples(r), cols, (size_t)n) : NULL;
	free(cols);
	PQclear(r);
	return *rows != NULL ? 0 : -1;
}
