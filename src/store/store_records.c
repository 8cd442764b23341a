/* Store: the record statements other than claims and completions (see
 * store.c): release, extend, checkpoint, revoke, record get and list,
 * audit events, versions, sweeps, replay counts, stuck records, the hot
 * tables' statistics. */
#include "store_int.h"

#include <inttypes.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The fenced writes of one record: release, extend, checkpoint. */
#define FENCED_EVENT(what, attempt, phase, by) \
	"ev AS (" EVENT_COLUMNS "SELECT $1, $2, '" what "', " attempt ", NULL, " phase \
	", " EVENT_BY( \
		by) ", " \
		    "idemd_audit_until(rec.operation_id) FROM r JOIN records rec ON rec.tenant_id = $1 " \
		    "AND rec.token_id = $2 WHERE r.o = "
static const struct db_stmt st_release = {
	ST_RELEASE, "release",
	"WITH r AS (SELECT idemd_release($1, $2, $3) AS o), " FENCED_EVENT(
		"released", "$3", "NULL", "$4") "'released') SELECT o FROM r",
	4
};
/* A gateway forward given up with its outcome unknown: the record keeps
 * its lease, and only its lease, from here (migrations/0020). */
static const struct db_stmt st_unfence = {
	ST_UNFENCE, "unfence",
	"UPDATE records SET holder = NULL WHERE tenant_id = $1 AND token_id = $2 AND attempt = $3 "
	"AND lease_expires_at IS NOT NULL AND holder IS NOT NULL",
	3
};
static const struct db_stmt st_revoke = {
	ST_REVOKE, "revoke",
	"WITH r AS (SELECT idemd_revoke($1, $2, $3, $4, to_timestamp($5)) AS o), "
	"ev AS (" EVENT_COLUMNS "SELECT $1, $2, 'revoked', NULL, NULL, NULL, " EVENT_BY(
		"$6") ", "
		      "idemd_audit_until($3) FROM r WHERE r.o = 'revoked') SELECT o FROM r",
	6
};
static const struct db_stmt st_record_get = {
	ST_RECORD_GET, "record_get",
	"SELECT state, attempt, coalesce(" MS("lease_expires_at") ", 0), " MS(
		"expires_at") ", "
			      "response_status, response_headers, response_body, response_is_json, subject, "
			      "operation_id, checkpoint_phase, checkpoint_data::text, checkpoint_attempt, replays "
			      "FROM records WHERE tenant_id = $1 AND token_id = $2 AND expires_at > now()",
	2
};
/* Replay counts gathered in memory (replaycount.c), added in one statement.
 * Only completed records are replayed; completions lock records in progress
 * only, and claims lock a completed record only when it completed under
 * them. Should a flush ever deadlock, the loser keeps its counts for the
 * next flush. No explicit row locks: each would
 * write the row once more. */
static const struct db_stmt st_replays_add = {
	ST_REPLAYS_ADD, "replays_add",
	"UPDATE records r SET replays = r.replays + u.n "
	"FROM unnest($1::int[], $2::bytea[], $3::bigint[]) AS u(t, id, n) "
	"WHERE r.tenant_id = u.t AND r.token_id = u.id",
	3
};
/* No index finds records in progress (a completion writes no index
 * entry: migrations/0017): this reads the whole table, and the janitor
 * spaces its runs by their cost (janitor_count_stuck). */
static const struct db_stmt st_records_stuck = {
	ST_RECORDS_STUCK, "records_stuck",
	"SELECT tenant_id, operation_id, count(*) FROM records "
	"WHERE state = 'in_progress' AND lease_expires_at < now() AND expires_at > now() "
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
	"SELECT " MS(
		"at") ", event, attempt, status, phase, by, seq, trace_id FROM idemd.events "
		      "WHERE tenant_id = $1 AND token_id = $2 AND seq > $3 ORDER BY seq LIMIT $4",
	4
};
static const struct db_stmt st_record_list = {
	ST_RECORD_LIST, "record_list",
	"SELECT token_id, operation_id, state, subject, attempt, "
	"coalesce(" MS("lease_expires_at") ", 0), " MS(
		"expires_at") ", "
			      "(extract(epoch from created_at) * 1000000)::bigint FROM records "
			      "WHERE tenant_id = $1 AND expires_at > now() AND ($2::int IS NULL OR operation_id = $2) "
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
	ST_SWEEP, "sweep", "SELECT ended, deleted, moved, last FROM idemd.sweep($1, $2, $3, $4)", 4
};
static const struct db_stmt st_clock = { ST_CLOCK, "clock", "SELECT " MS("clock_timestamp()"), 0 };
/* Whether records (then record_events) changed by more rows since their
 * statistics were made than the tables held then, and by STORE_STALE_ROWS
 * at least: far past autovacuum's own threshold (a tenth), so autovacuum
 * is behind. */
#define STORE_STALE_ROWS "1000"
static const struct db_stmt st_stats_stale = {
	ST_STATS_STALE, "stats_stale",
	"SELECT coalesce(bool_or(s.relname = 'records'), false), "
	"coalesce(bool_or(s.relname = 'record_events'), false) "
	"FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid "
	"WHERE s.relid IN ('records'::regclass, 'record_events'::regclass) "
	"AND s.n_mod_since_analyze >= " STORE_STALE_ROWS " "
	"AND s.n_mod_since_analyze > greatest(c.reltuples, 0)",
	0
};
/* SKIP_LOCKED: another instance analyzing the table already is enough. */
static const struct db_stmt st_analyze_records = { ST_ANALYZE_RECORDS, "analyze_records",
						   "ANALYZE (SKIP_LOCKED) records", 0 };
static const struct db_stmt st_analyze_events = { ST_ANALYZE_EVENTS, "analyze_events",
						  "ANALYZE (SKIP_LOCKED) record_events", 0 };

#define RV(f) STORE_FIELD(struct record_view, f)
#define RR(f) STORE_FIELD(struct record_row, f)
#define STUCK(f) STORE_FIELD(struct metrics_stuck, f)

/* The columns of st_record_get (the checkpoint's when it has one), of
 * st_events_get (a JSON object each), of st_record_list and of
 * st_records_stuck. */
static const struct store_col record_cols[] = {
	{ 0, SC_TEXT, STORE_TEXT(struct record_view, rv_state) },
	{ 1, SC_INT, RV(rv_attempt) },
	{ 2, SC_I64, RV(rv_lease_expires_at) },
	{ 3, SC_I64, RV(rv_expires_at) },
	{ 4, SC_RESPONSE, RV(rv_response) },
	{ 8, SC_HAS, RV(rv_has_subject) },
	{ 8, SC_TEXT, STORE_TEXT(struct record_view, rv_subject) },
	{ 9, SC_U32, RV(rv_operation_id) },
	{ 13, SC_I64, RV(rv_replays) }
};
static const struct store_col checkpoint_cols[] = { { 10, SC_STR, RV(rv_checkpoint_phase) },
						    { 11, SC_STR, RV(rv_checkpoint_data) },
						    { 12, SC_INT, RV(rv_checkpoint_attempt) } };
static const struct store_col event_cols[] = {
	{ 0, SC_TIME, .name = "at" },	   { 1, SC_TEXT, .name = "event" },
	{ 2, SC_I64, .name = "attempt" },  { 3, SC_I64, .name = "status" },
	{ 4, SC_TEXT, .name = "phase" },   { 5, SC_TEXT, .name = "by" },
	{ 7, SC_TEXT, .name = "trace_id" }
};
static const struct store_col row_cols[] = {
	{ 0, SC_ID, RR(rr_id) },
	{ 1, SC_U32, RR(rr_operation_id) },
	{ 2, SC_TEXT, STORE_TEXT(struct record_row, rr_state) },
	{ 3, SC_HAS, RR(rr_has_subject) },
	{ 3, SC_TEXT, STORE_TEXT(struct record_row, rr_subject) },
	{ 4, SC_INT, RR(rr_attempt) },
	{ 5, SC_I64, RR(rr_lease_expires_at) },
	{ 6, SC_I64, RR(rr_expires_at) },
	{ 7, SC_I64, RR(rr_created_us) }
};
static const struct store_col stuck_cols[] = { { 0, SC_U32, STUCK(ms_tenant_id) },
					       { 1, SC_U32, STUCK(ms_operation_id) },
					       { 2, SC_I64, STUCK(ms_count) } };

void store_record_view_free(struct record_view *v)
{
	store_response_free(&v->rv_response);
	free(v->rv_checkpoint_phase);
	free(v->rv_checkpoint_data);
	v->rv_checkpoint_phase = v->rv_checkpoint_data = NULL;
}

/* A fenced write of one record (release, extend, checkpoint): $1 tenant,
 * $2 record id, $3 attempt, then the N values of EXTRA, then who. Its
 * answer's first column is the outcome (DONE: its word for done), its
 * second the new lease (*LEASE, unless NULL). */
static int store_fenced(const struct db_stmt *stmt, uint32_t tenant_id, const uint8_t *token_id,
			int attempt, const char *const *extra, int n, const char *by,
			const char *done, enum release_outcome *outcome, int64_t *lease)
{
	char tenant[16], att[16];
	const char *v[6] = { tenant, (const char *)token_id, att };
	const int len[6] = { 0, 16 }, fmt[6] = { 0, 1 };

	snprintf(tenant, sizeof(tenant), "%" PRIu32, tenant_id);
	snprintf(att, sizeof(att), "%d", attempt);
	for (int i = 0; i < n; i++)
		v[3 + i] = extra[i];
	v[3 + n] = STORE_BY(by);
	PGresult *r = db_run(stmt, v, len, fmt);
	if (r == NULL)
		return -1;
	const char *o = PQntuples(r) == 1 ? PQgetvalue(r, 0, 0) : "";
	if (strcmp(o, done) == 0)
		*outcome = RELEASE_DONE;
	else if (strcmp(o, "no_record") == 0)
		*outcome = RELEASE_NO_RECORD;
	else
		*outcome = strcmp(o, "lease_lost") == 0 ? RELEASE_LEASE_LOST
							: RELEASE_NOT_IN_PROGRESS;
	if (lease != NULL)
		*lease = PQntuples(r) == 1 ? store_i64(r, 0, 1) : 0;
	PQclear(r);
	return 0;
}

int store_extend(uint32_t tenant_id, const uint8_t *token_id, int attempt, int lease_seconds,
		 const char *by, enum release_outcome *outcome, int64_t *lease_expires_at)
{
	char lease[16];

	snprintf(lease, sizeof(lease), "%d", lease_seconds);
	const char *extra[] = { lease };
	return store_fenced(&st_extend, tenant_id, token_id, attempt, extra, 1, by, "extended",
			    outcome, lease_expires_at);
}

int store_checkpoint(uint32_t tenant_id, const uint8_t *token_id, int attempt, const char *phase,
		     const char *data, const char *by, enum release_outcome *outcome)
{
	const char *extra[] = { phase, data };

	return store_fenced(&st_checkpoint, tenant_id, token_id, attempt, extra, 2, by, "saved",
			    outcome, NULL);
}

int store_release(uint32_t tenant_id, const uint8_t *token_id, int attempt, const char *by,
		  enum release_outcome *outcome)
{
	return store_fenced(&st_release, tenant_id, token_id, attempt, NULL, 0, by, "released",
			    outcome, NULL);
}

int store_unfence(uint32_t tenant_id, const uint8_t *token_id, int attempt)
{
	char tenant[16], att[16];
	const char *v[3] = { tenant, (const char *)token_id, att };
	const int len[3] = { 0, 16 }, fmt[3] = { 0, 1 };

	snprintf(tenant, sizeof(tenant), "%" PRIu32, tenant_id);
	snprintf(att, sizeof(att), "%d", attempt);
	PGresult *r = db_run(&st_unfence, v, len, fmt);
	if (r == NULL)
		return -1;
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
	PGresult *r = db_run(&st_revoke, v, len, fmt);
	if (r == NULL)
		return -1;
	*in_use = PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "in_use") == 0;
	PQclear(r);
	return 0;
}

int store_record_get(uint32_t tenant_id, const uint8_t *token_id, struct record_view *rv)
{
	char tenant[16];
	int rc = 0;

	memset(rv, 0, sizeof(*rv));
	snprintf(tenant, sizeof(tenant), "%" PRIu32, tenant_id);
	const char *v[] = { tenant, (const char *)token_id };
	const int len[] = { 0, 16 }, fmt[] = { 0, 1 };
	PGresult *r = db_run(&st_record_get, v, len, fmt);
	if (r == NULL)
		return -1;
	rv->rv_found = PQntuples(r) == 1;
	if (rv->rv_found)
		rc = store_read_row(r, 0, record_cols, IDEMD_ARRAY_LEN(record_cols), rv);
	if (rc == 0 && rv->rv_found && !PQgetisnull(r, 0, 10) &&
	    store_read_row(r, 0, checkpoint_cols, IDEMD_ARRAY_LEN(checkpoint_cols), rv) < 0) {
		store_record_view_free(rv);
		rc = -1;
	}
	PQclear(r);
	return rc;
}

int store_events_get(uint32_t tenant_id, const uint8_t *token_id, int64_t after, int limit,
		     json_t **events, int64_t *next)
{
	char tenant[16], aft[24], lim[16];

	snprintf(tenant, sizeof(tenant), "%" PRIu32, tenant_id);
	snprintf(aft, sizeof(aft), "%" PRId64, after);
	snprintf(lim, sizeof(lim), "%d", limit + 1); /* one more: is there a next page? */
	const char *v[] = { tenant, (const char *)token_id, aft, lim };
	const int len[] = { 0, 16, 0, 0 }, fmt[] = { 0, 1, 0, 0 };
	PGresult *r = db_run(&st_events_get, v, len, fmt);
	if (r == NULL)
		return -1;
	int rows = PQntuples(r) > limit ? limit : PQntuples(r);
	*next = PQntuples(r) > limit ? store_i64(r, rows - 1, 6) : 0;
	*events = store_rows_json(r, rows, event_cols, IDEMD_ARRAY_LEN(event_cols));
	PQclear(r);
	return *events != NULL ? 0 : -1;
}

int store_record_list(uint32_t tenant_id, const struct record_filter *f, size_t limit,
		      struct record_row **rows, size_t *n)
{
	char tenant[16], op[16], older[24], after[24], lim[16];

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
	return store_read_rows(db_run(&st_record_list, v, len, fmt), row_cols,
			       IDEMD_ARRAY_LEN(row_cols), sizeof(**rows), rows, n);
}

int store_events_sweep(int limit, int *deleted)
{
	char lim[16];
	int64_t o;

	snprintf(lim, sizeof(lim), "%d", limit);
	const char *v[] = { lim };
	if (store_ints(&st_events_sweep, v, NULL, NULL, &o, 1) < 0)
		return -1;
	*deleted = (int)o;
	return 0;
}

int store_version_get(uint32_t tenant_id, const char *key, int64_t *version)
{
	char tenant[16];
	int64_t o;

	snprintf(tenant, sizeof(tenant), "%" PRIu32, tenant_id);
	const char *v[] = { tenant, key };
	int rows = store_ints(&st_version_get, v, NULL, NULL, &o, 1);
	if (rows < 0)
		return -1;
	*version = rows == 1 ? o : 0;
	return 0;
}

int store_version_bump(uint32_t tenant_id, const char *key, int64_t expected, int *ok,
		       int64_t *version)
{
	char tenant[16], exp[24];
	int64_t o[2];

	snprintf(tenant, sizeof(tenant), "%" PRIu32, tenant_id);
	snprintf(exp, sizeof(exp), "%" PRId64, expected);
	const char *v[] = { tenant, key, exp };
	if (store_ints(&st_version_bump, v, NULL, NULL, o, 2) != 1)
		return -1;
	*ok = (int)o[0];
	*version = o[1];
	return 0;
}

#define SWEPT(f) STORE_FIELD(struct store_swept, f)
static const struct store_col swept_cols[] = {
	{ 0, SC_INT, SWEPT(sw_ended) },
	{ 1, SC_INT, SWEPT(sw_deleted) },
	{ 2, SC_INT, SWEPT(sw_moved) },
	{ 3, SC_TEXT, STORE_TEXT(struct store_swept, sw_after) },
};

int store_sweep(int limit, int keep_seconds, int late_seconds, struct store_swept *swept)
{
	char lim[16], keep[16], late[16];
	int rc = -1;

	snprintf(lim, sizeof(lim), "%d", limit);
	snprintf(keep, sizeof(keep), "%d", keep_seconds);
	snprintf(late, sizeof(late), "%d", late_seconds);
	const char *v[] = { lim, keep, swept->sw_after[0] != '\0' ? swept->sw_after : NULL, late };
	PGresult *r = db_run(&st_sweep, v, NULL, NULL);
	if (r != NULL && PQntuples(r) == 1)
		rc = store_read_row(r, 0, swept_cols, IDEMD_ARRAY_LEN(swept_cols), swept);
	PQclear(r);
	return rc;
}

int store_replays_add(size_t n, const uint32_t *tenant_ids, const uint8_t (*ids)[16],
		      const int64_t *counts)
{
	struct buf arrs[3] = { { 0 } };
	int rc = -1;

	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		store_array_i64(&arrs[0], tenant_ids[i]);
		store_array_bytea(&arrs[1], ids[i], 16);
		store_array_i64(&arrs[2], counts[i]);
	}
	if (store_arrays_close(arrs, 3) == 0) {
		const char *v[] = { arrs[0].b_data, arrs[1].b_data, arrs[2].b_data };
		PGresult *r = db_run(&st_replays_add, v, NULL, NULL);
		rc = r != NULL ? 0 : -1;
		PQclear(r);
	}
	store_arrays_free(arrs, 3);
	return rc;
}

int store_records_stuck(struct metrics_stuck **rows, size_t *n)
{
	return store_read_rows(db_run(&st_records_stuck, NULL, NULL, NULL), stuck_cols,
			       IDEMD_ARRAY_LEN(stuck_cols), sizeof(**rows), rows, n);
}

int store_refresh_statistics(int *analyzed)
{
	const struct db_stmt *analyze[2] = { &st_analyze_records, &st_analyze_events };
	int64_t stale[2];

	*analyzed = 0;
	if (store_ints(&st_stats_stale, NULL, NULL, NULL, stale, 2) < 0)
		return -1;
	for (int i = 0; i < 2; i++) {
		if (!stale[i])
			continue;
		PGresult *r = db_run(analyze[i], NULL, NULL, NULL);
		if (r == NULL)
			return -1;
		PQclear(r);
		(*analyzed)++;
	}
	return 0;
}

int store_clock(int64_t *db_ms)
{
	return store_ints(&st_clock, NULL, NULL, NULL, db_ms, 1) < 0 ? -1 : 0;
}
