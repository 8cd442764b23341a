/* Store: all SQL lives in src/store/, in files sharing store_int.h (which
 * lists them). This one has the value helpers and the record engine's
 * claims and completions. Statements are prepared once per pooled
 * connection; bytea parameters go in binary, everything else as text. */
#include "store_int.h"

#include <inttypes.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A claim that starts a life of its record is 'claimed', whatever its
 * attempt (a new life goes on from the last one's: migrations/0011). */
#define CLAIM_EVENT "CASE WHEN r.fresh THEN 'claimed' ELSE 'taken_over' END"
/* Leases run from the clock at the write that grants them (0011); the
 * mutant of tests/mutants.sh counts them from the transaction's start. */
#ifdef IDEMD_MUTANT_LEASE_FROM_TXN_START
#define GRANT_CLOCK "now()"
#else
#define GRANT_CLOCK "clock_timestamp()"
#endif
/* A record past its expires_at is over for every reader: its replay is
 * not served from the database, nor is it completed (each has a mutant). */
#ifdef IDEMD_MUTANT_REPLAY_DB_IGNORES_EXPIRY
#define REPLAY_LIVE "true"
#else
#define REPLAY_LIVE "rec.expires_at > x.t"
#endif
#ifdef IDEMD_MUTANT_COMPLETE_IGNORES_EXPIRY
#define COMPLETE_LIVE "true"
#else
#define COMPLETE_LIVE "rec.expires_at > clock_timestamp()"
#endif
/* Completions fence on the attempt number (the mutant does not; the
 * second, only a batch of several). */
#ifdef IDEMD_MUTANT_NO_FENCE
#define FENCE_ATTEMPT "true"
#else
#define FENCE_ATTEMPT "rec.attempt = u.attempt"
#endif
#ifdef IDEMD_MUTANT_COMPLETE_BATCH_UNFENCED
#define FENCE_ATTEMPT_MANY "true"
#else
#define FENCE_ATTEMPT_MANY FENCE_ATTEMPT
#endif
/* A record in progress, as the completion finds it: by its lease, which a
 * record holds exactly while it is in progress (the CHECK
 * records_lease_iff_in_progress, 0001), not by its state. Every record is
 * found by its primary key: no index finds records in progress since
 * migrations/0017 (a completion writes no index entry). Before it, the
 * state test let a plan made while few records were in progress walk all
 * of them: one completion beside 20,000 others in progress read 921
 * buffers instead of 20 (tests/integration/test_plans.py). */
#define IN_PROGRESS "rec.lease_expires_at IS NOT NULL"
/* The planner sees how long a statement's arrays are when it plans a call
 * for the values at hand (a custom plan), and not in the plan it keeps
 * for every call (the generic plan, costed for 10 elements); it keeps the
 * generic plan only once that costs no more than the custom plans did.
 * The first array of claim_fresh and complete_current passes through a
 * volatile expression, so the custom plans cannot see the length either:
 * from the sixth call on, each connection runs its generic plan, whatever
 * the batch's size, and plans nothing (docs/performance.md, "What is
 * planned when"). */
#define HIDDEN_LENGTH(p) "CASE WHEN random() >= 0 THEN " p " END"
/* Claims and completes exist only over arrays (migrations/0009): one
 * statement, one transaction and one commit for a whole batch, n = 1
 * included; rows sorted back into array order. */
static const struct db_stmt st_claim_many = {
	ST_CLAIM_MANY, "claim_many",
	"WITH r AS (SELECT * FROM idemd.claim($1::int[], $2::bytea[], $3::int[], $4::text[], "
	"$5::bytea[], $6::bigint[], $7::int[], $8::text[], $9::bigint[], $10::boolean[], "
	"$11::boolean[], $14::bigint[], $15::int[])), "
	"ev AS (" EVENT_COLUMNS "SELECT ($1::int[])[r.i], ($2::bytea[])[r.i], " CLAIM_EVENT ", "
	"r.attempt, NULL, NULL, " EVENT_BY("($12::text[])[r.i]") ", " EVENT_UNTIL(
		"($13::int[])[r.i]") " FROM r "
				     "WHERE r.outcome = 'claimed') "
				     "SELECT outcome, attempt, " MS(
					     "lease_expires_at") ", retry_after, resp_status, "
								 "resp_headers, resp_body, resp_is_json, current_version, i FROM r ORDER BY i",
	15
};
static const struct db_stmt st_complete_many = {
	ST_COMPLETE_MANY, "complete_many",
	"WITH r AS (SELECT * FROM idemd.complete($1::int[], $2::bytea[], $3::int[], "
	"$4::int[], $5::jsonb[], $6::bytea[], $7::boolean[], $8::int[])), "
	"ev AS (" EVENT_COLUMNS "SELECT ($1::int[])[r.i], ($2::bytea[])[r.i], 'completed', "
	"($3::int[])[r.i], ($4::int[])[r.i], NULL, " EVENT_BY("($9::text[])[r.i]") ", " EVENT_UNTIL(
		"($10::int[])[r.i]") " FROM r WHERE r.outcome = 'completed') "
				     "SELECT outcome, resp_status, resp_headers, resp_body, resp_is_json, " MS(
					     "expires_at") ", fingerprint, i FROM r ORDER BY i",
	10
};

/* The common cases in plain SQL, which costs PostgreSQL half (a fresh
 * claim and its completion) to a third (a replay) of what the PL/pgSQL
 * functions cost (bench/README.md, "Where a first submit's time goes"):
 * a claim that makes a fresh record or finds it completed, and a complete
 * of the current attempt of a record in progress. Each settles only those
 * elements and returns their rows; the rest then go through idemd.claim /
 * idemd.complete. They follow the functions' rules: the same INSERT, a
 * replay for a completed record with the same fingerprint
 * (read without a lock: completed is final), the same UPDATE with the
 * records locked in record order. A record this statement makes is not in
 * its snapshot and one it finds completed is not inserted, so no element
 * comes back twice. Their audit events ('claimed' of a fresh record,
 * 'completed') are told by the record's own columns (TOLD_EVENT,
 * migrations/0013) instead of a row each. */
/* The claim of the fresh records and replays of x (tenant, id, op,
 * subject, fp, expires, lease, by, audit, retention, holder, i, t), which the
 * statement defines first; its rows in x's order. Written once for
 * st_claim_fresh and st_claim_one. A record's sweep_at is the earliest
 * end a completion kept the operation's retention can give it, so that
 * such a completion leaves it as it is (a HOT update, COMPLETE_UPDATE)
 * and the sweeper, which looks a sweep interval after it, finds the
 * record's life over (migrations/0017). */
#define CLAIM_FROM_X \
	"ins AS (INSERT INTO records AS rec (tenant_id, token_id, operation_id, subject, state, " \
	"fingerprint, attempt, lease_expires_at, version_claimed, token_expires_at, expires_at, " \
	"sweep_at, created_at, updated_at, claimed_seq, claimed_by, claimed_trace, claimed_until, " \
	"holder) " \
	"SELECT x.tenant, x.id, x.op, x.subject, 'in_progress', x.fp, 1, " \
	"x.t + make_interval(secs => x.lease), NULL, to_timestamp(x.expires), " \
	"greatest(to_timestamp(x.expires), x.t + make_interval(secs => x.lease)), " \
	"greatest(to_timestamp(x.expires), x.t + make_interval(secs => x.retention)), " \
	"x.t, x.t, " TOLD_EVENT( \
		"x.by") ", x.t + make_interval(secs => x.audit), nullif(x.holder, 0) FROM x " \
			"WHERE x.lease > 0 AND to_timestamp(x.expires) > x.t ORDER BY x.i " \
			"ON CONFLICT (tenant_id, token_id) DO NOTHING " \
			"RETURNING rec.tenant_id, rec.token_id, rec.lease_expires_at), " \
			"got AS (SELECT x.i, ins.lease_expires_at FROM ins " \
			"JOIN x ON x.tenant = ins.tenant_id AND x.id = ins.token_id), " \
			"old AS (SELECT x.i, 'replay' AS outcome, rec.attempt, rec.expires_at AS until, " \
			"rec.response_status, rec.response_headers, rec.response_body, rec.response_is_json " \
			"FROM x JOIN records rec ON rec.tenant_id = x.tenant AND rec.token_id = x.id " \
			"WHERE rec.state = 'completed' AND rec.fingerprint IS NOT DISTINCT FROM x.fp " \
			"AND " REPLAY_LIVE ") " \
			"SELECT outcome, attempt, " MS( \
				"until") ", NULL::int, response_status, response_headers, " \
					 "response_body, response_is_json, NULL::bigint, i FROM (" \
					 "SELECT g.i, 'claimed' AS outcome, 1 AS attempt, g.lease_expires_at AS until, " \
					 "NULL::int AS response_status, NULL::jsonb AS response_headers, " \
					 "NULL::bytea AS response_body, NULL::boolean AS response_is_json FROM got g " \
					 "UNION ALL SELECT * FROM old) r ORDER BY i"
static const struct db_stmt st_claim_fresh = {
	ST_CLAIM_FRESH, "claim_fresh",
	"WITH x AS (SELECT *, " GRANT_CLOCK " AS t FROM unnest(" HIDDEN_LENGTH(
		"$1::int[]") ", $2::bytea[], $3::int[], "
			     "$4::text[], $5::bytea[], $6::bigint[], $7::int[], $8::text[], $9::int[], $10::int[], "
			     "$11::int[]) WITH ORDINALITY AS x(tenant, id, op, subject, fp, expires, lease, by, "
			     "audit, retention, holder, i)), " CLAIM_FROM_X,
	11
};
/* st_claim_fresh for a batch of one, as every batch is at low load: the
 * same parameters (one-element arrays) and rows, its one element read by
 * subscript instead of a set-returning unnest. By pgbench on this schema,
 * one client, this claim then complete_one: 416-424 us of PostgreSQL CPU
 * per first submit against 448-476 with st_claim_fresh (medians of two
 * runs, docs/performance.md). */
static const struct db_stmt st_claim_one = {
	ST_CLAIM_ONE, "claim_one",
	"WITH x AS (SELECT ($1::int[])[1] AS tenant, ($2::bytea[])[1] AS id, ($3::int[])[1] AS op, "
	"($4::text[])[1] AS subject, ($5::bytea[])[1] AS fp, ($6::bigint[])[1] AS expires, "
	"($7::int[])[1] AS lease, ($8::text[])[1] AS by, ($9::int[])[1] AS audit, "
	"($10::int[])[1] AS retention, ($11::int[])[1] AS holder, 1::bigint AS i, " GRANT_CLOCK
	" AS t), " CLAIM_FROM_X,
	11
};
/* The end of a completed record's life, from u's retention: N >= 0 keeps
 * it N seconds and at least as long as its token or key is valid; -1 - N
 * keeps it N seconds exactly (a refusal on a route anyone may call). */
#define COMPLETE_EXPIRES \
	"CASE WHEN u.retention < 0 THEN now() + make_interval(secs => -1 - u.retention) " \
	"ELSE greatest(now() + make_interval(secs => u.retention), rec.token_expires_at) END"
/* The completion's update of the records in u (tenant, id, attempt,
 * status, headers, body, is_json, retention, by, audit, i) that FROM, a
 * FROM list holding u, joins in, fenced by FENCE (the attempt); then its rows in u's order. Written once
 * for st_complete_current and st_complete_one. It finds its records by
 * primary key (IN_PROGRESS). It moves the record's sweep_at only to an
 * earlier end (a retention shorter than the operation's, a refusal kept
 * an exact time), so that a completion kept the operation's retention
 * changes no indexed column: a HOT update (migrations/0017). */
#define COMPLETE_UPDATE(from, fence) \
	"upd AS (UPDATE records rec SET state = 'completed', lease_expires_at = NULL, " \
	"response_status = u.status, response_headers = u.headers, response_body = u.body, " \
	"response_is_json = coalesce(u.is_json, false), " \
	"expires_at = " COMPLETE_EXPIRES ", sweep_at = least(rec.sweep_at, " COMPLETE_EXPIRES \
	"), " \
	"updated_at = now(), completed_at = clock_timestamp(), " \
	"(completed_seq, completed_by, completed_trace) = (SELECT " TOLD_EVENT( \
		"u.by") "), completed_until = clock_timestamp() + make_interval(secs => u.audit) " \
			"FROM " from \
			" WHERE rec.tenant_id = u.tenant AND rec.token_id = u.id AND " IN_PROGRESS \
			" AND " COMPLETE_LIVE " AND " fence " AND u.status BETWEEN 100 AND 599 " \
			"RETURNING u.i, rec.response_status, rec.response_headers, rec.response_body, " \
			"rec.response_is_json, rec.expires_at, rec.fingerprint) " \
			"SELECT 'completed', response_status, response_headers, response_body, " \
			"response_is_json, " MS( \
				"expires_at") ", fingerprint, i FROM upd ORDER BY i"
/* Its first array's length is hidden (HIDDEN_LENGTH): planned for the
 * length at hand, it was planned at 5,688 of 7,257 calls, 0.37 ms each, a
 * third of its time (pg_stat_statements). Its records are locked in
 * record order first, so that two batches cannot deadlock. */
static const struct db_stmt st_complete_current = {
	ST_COMPLETE_CURRENT, "complete_current",
	"WITH u AS (SELECT * FROM unnest(" HIDDEN_LENGTH(
		"$1::int[]") ", $2::bytea[], "
			     "$3::int[], $4::int[], "
			     "$5::jsonb[], $6::bytea[], $7::boolean[], $8::int[], $9::text[], $10::int[]) WITH ORDINALITY "
			     "AS x(tenant, id, attempt, status, headers, body, is_json, retention, by, audit, i)), "
			     "locked AS (SELECT rec.tenant_id, rec.token_id FROM records rec "
			     "WHERE (rec.tenant_id, rec.token_id) IN (SELECT u.tenant, u.id FROM u) "
			     "AND " IN_PROGRESS
			     " ORDER BY rec.tenant_id, rec.token_id FOR UPDATE), " COMPLETE_UPDATE(
				     "u JOIN locked l ON l.tenant_id = u.tenant AND l.token_id = u.id",
				     FENCE_ATTEMPT_MANY),
	10
};
/* st_complete_current for a batch of one, as every batch is at low load:
 * the same parameters (one-element arrays) and rows, without the locking
 * step, which orders the locks of several records and costs a lock
 * record and a second lookup. By pgbench on this schema, one client, a
 * claim then this: 388-438 us of PostgreSQL CPU per first submit against
 * 473-572 with st_complete_current (docs/performance.md). */
static const struct db_stmt st_complete_one = {
	ST_COMPLETE_ONE, "complete_one",
	"WITH u AS (SELECT ($1::int[])[1] AS tenant, ($2::bytea[])[1] AS id, "
	"($3::int[])[1] AS attempt, ($4::int[])[1] AS status, ($5::jsonb[])[1] AS headers, "
	"($6::bytea[])[1] AS body, ($7::boolean[])[1] AS is_json, ($8::int[])[1] AS retention, "
	"($9::text[])[1] AS by, ($10::int[])[1] AS audit, 1::bigint AS i), " COMPLETE_UPDATE(
		"u", FENCE_ATTEMPT),
	10
};

int64_t store_i64(const PGresult *r, int row, int col)
{
	return PQgetisnull(r, row, col) ? 0 : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

int store_bool(const PGresult *r, int row, int col)
{
	return !PQgetisnull(r, row, col) && PQgetvalue(r, row, col)[0] == 't';
}

/* Decodes a bytea text value into malloc'd memory (NUL-terminated). */
unsigned char *store_bytea(const PGresult *r, int row, int col, size_t *len)
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
int store_read_response(const PGresult *r, int row, int col, struct stored_response *out)
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
#ifndef IDEMD_MUTANT_LEASE_SPENT_ACKED
	/* read after the commit: a claim that waited in PostgreSQL (locks, a
	 * slow flush) longer than its lease is not acknowledged */
	if (res->cr_outcome == CLAIM_CLAIMED &&
	    res->cr_lease_expires_at - idemd_unix_ms() < STORE_LEASE_LEFT_MIN_MS)
		res->cr_outcome = CLAIM_LEASE_SPENT;
#endif
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
	else if (strcmp(o, "no_record") == 0)
		res->cpr_outcome = COMPLETE_NO_RECORD;
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

/* Runs STMT with the arrays as text parameters; the result must have N rows
 * whose last column counts 1..N. */
static PGresult *store_run_arrays(const struct db_stmt *stmt, struct buf *arrs, size_t n)
{
	const char *v[16];
	PGresult *r;

	for (int i = 0; i < stmt->nparams; i++)
		v[i] = arrs[i].b_data;
	r = db_run(stmt, v, NULL, NULL);
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

/* Every element through idemd.claim. */
static int store_claim_all(const struct claim_args *const *a, struct claim_result *const *res,
			   size_t n)
{
	struct buf arrs[STORE_CLAIM_ARRAYS] = { { 0 } };
	PGresult *r = NULL;
	int rc = -1;

	if (n == 0 || store_claim_arrays(arrs, a, n) < 0 ||
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
	store_arrays_free(arrs, STORE_CLAIM_ARRAYS);
	return rc;
}

/* Whether elements I and J of a batch name the same record. */
static int store_same_record(uint32_t ti, const uint8_t *ii, uint32_t tj, const uint8_t *ij)
{
	return ti == tj && memcmp(ii, ij, 16) == 0;
}

/* Whether the claims can go through st_claim_fresh first: no counter to
 * guard, and no record named twice (idemd.claim answers the second). */
static int store_claim_fresh_fits(const struct claim_args *const *a, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (a[i]->version_key != NULL)
			return 0;
#ifdef IDEMD_MUTANT_BATCH_TWINS
		continue;
#endif
		for (size_t j = 0; j < i; j++)
			if (store_same_record(a[i]->tenant_id, a[i]->token_id, a[j]->tenant_id,
					      a[j]->token_id))
				return 0;
	}
	return 1;
}

/* A batch given up: frees the responses of the elements DONE marks. */
static void store_claims_forget(struct claim_result *const *res, const char *done, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (done[i])
			store_response_free(&res[i]->cr_response);
}

static void store_completes_forget(struct complete_result *const *res, const char *done, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (done[i])
			store_response_free(&res[i]->cpr_stored);
}

/* Fills element i of a batch of N from each row whose column IDCOL says
 * i + 1 (FILL(R, row, i, ARG)) and marks DONE[i]: 0, or -1 when a row
 * does not fit. */
static int store_batch_rows(const PGresult *r, int idcol, char *done, size_t n,
			    int (*fill)(const PGresult *r, int row, size_t i, const void *arg),
			    const void *arg)
{
	for (int row = 0; row < PQntuples(r); row++) {
		int64_t i = store_i64(r, row, idcol) - 1;
		if (i < 0 || (size_t)i >= n || done[i] || fill(r, row, (size_t)i, arg) < 0)
			return -1;
		done[i] = 1;
	}
	return 0;
}

/* store_batch_rows' FILL of claims (ARG: their results) and of
 * completions. */
static int store_claim_fill(const PGresult *r, int row, size_t i, const void *arg)
{
	return store_claim_row(r, row, ((struct claim_result *const *)arg)[i]);
}

static int store_complete_fill(const PGresult *r, int row, size_t i, const void *arg)
{
	return store_complete_row(r, row, ((struct complete_result *const *)arg)[i]);
}

/* The elements of A (N) that DONE does not mark, through idemd.claim;
 * marks them in DONE when that answers. 0, or -1. */
static int store_claim_rest(const struct claim_args *const *a, struct claim_result *const *res,
			    size_t n, char *done)
{
	const struct claim_args **ra = malloc(n * sizeof(*ra));
	struct claim_result **rr = malloc(n * sizeof(*rr));
	size_t *ri = malloc(n * sizeof(*ri));
	size_t m = 0;
	int rc = -1;

	if (ra == NULL || rr == NULL || ri == NULL)
		goto out;
	for (size_t i = 0; i < n; i++)
		if (!done[i]) {
			ra[m] = a[i];
			ri[m] = i;
			rr[m++] = res[i];
		}
	rc = m == 0 ? 0 : store_claim_all(ra, rr, m);
#ifdef IDEMD_MUTANT_BATCH_CUT_FORGETS
	/* what the first statement decided is forgotten with the rest */
	if (rc < 0) {
		store_claims_forget(res, done, n);
		memset(done, 0, n);
		m = 0;
	}
#endif
	for (size_t k = 0; rc == 0 && k < m; k++)
		done[ri[k]] = 1;
out:
	free(ra);
	free(rr);
	free(ri);
	return rc;
}

/* Fresh records and replays in one statement (the common cases: one round
 * trip, one commit at most); whatever that did not settle then through
 * idemd.claim. What the first statement decided stays decided when the
 * second fails: its records are its elements' (their holders were told
 * nothing yet), so a rerun of the batch one by one must not run them again
 * and find its own record in progress (store.h). */
int store_claim_many(const struct claim_args *const *a, struct claim_result *const *res, size_t n,
		     char *done)
{
	memset(done, 0, n);
	if (n == 0 || !store_claim_fresh_fits(a, n)) {
		if (store_claim_all(a, res, n) < 0)
			return -1;
		memset(done, 1, n);
		return 0;
	}

	struct buf arrs[STORE_CLAIM_ARRAYS] = { { 0 } };
	PGresult *r = NULL;
	int rc = -1;

	if (store_claim_arrays(arrs, a, n) < 0)
		goto out;
	const char *v[11] = { arrs[0].b_data,  arrs[1].b_data,	arrs[2].b_data, arrs[3].b_data,
			      arrs[4].b_data,  arrs[5].b_data,	arrs[6].b_data, arrs[11].b_data,
			      arrs[12].b_data, arrs[15].b_data, arrs[14].b_data };
	/* columns as st_claim_many's, the element's index in the tenth */
	if ((r = db_run(n == 1 ? &st_claim_one : &st_claim_fresh, v, NULL, NULL)) == NULL)
		goto out;
	if (store_batch_rows(r, 9, done, n, store_claim_fill, res) < 0) {
		/* a row that does not fit: as if nothing was read */
		store_claims_forget(res, done, n);
		memset(done, 0, n);
		goto out;
	}
	rc = store_claim_rest(a, res, n, done);
out:
	PQclear(r);
	store_arrays_free(arrs, STORE_CLAIM_ARRAYS);
	return rc;
}

/* Runs STMT (st_complete_many, st_complete_current or st_complete_one: the same
 * parameters and columns) over A and fills RES[i] and DONE[i] for each row; with
 * ALL, every element must come back. 0, or -1 (then RES holds nothing). */
static int store_complete_run(const struct db_stmt *stmt, const struct complete_args *const *a,
			      struct complete_result *const *res, char *done, size_t n, int all)
{
	struct buf arrs[10] = { { 0 } };
	PGresult *r = NULL;
	int rc = -1;

	if (store_complete_arrays(arrs, a, n) < 0)
		goto out;
	if (all) {
		r = store_run_arrays(stmt, arrs, n);
	} else {
		const char *v[10];
		for (int k = 0; k < 10; k++)
			v[k] = arrs[k].b_data;
		r = db_run(stmt, v, NULL, NULL);
	}
	if (r == NULL)
		goto out;
	if (store_batch_rows(r, 7, done, n, store_complete_fill, res) == 0)
		rc = 0;
	else
		store_completes_forget(res, done, n);
out:
	PQclear(r);
	store_arrays_free(arrs, 10);
	return rc;
}

/* Whether two of the N completes A name the same record (then none goes
 * through st_complete_current: idemd.complete answers the second). */
static int store_completes_twins(const struct complete_args *const *a, size_t n)
{
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < i; j++)
			if (store_same_record(a[i]->tenant_id, a[i]->token_id, a[j]->tenant_id,
					      a[j]->token_id))
				return 1;
	return 0;
}

/* Completes of the current attempt in one statement (the common case);
 * whatever that did not store then through idemd.complete, which explains
 * it. As with claims, what the first statement stored stays decided when
 * the second fails. */
int store_complete_many(const struct complete_args *const *a, struct complete_result *const *res,
			size_t n, char *done)
{
	const struct complete_args **ra = malloc(n * sizeof(*ra));
	struct complete_result **rr = malloc(n * sizeof(*rr));
	size_t *ri = malloc(n * sizeof(*ri));
	char *rdone = calloc(n, 1);
	int twins = store_completes_twins(a, n), rc = -1;
	size_t m = 0;

	memset(done, 0, n);
	if (n == 0 || ra == NULL || rr == NULL || ri == NULL || rdone == NULL)
		goto out;
	if (!twins && store_complete_run(n == 1 ? &st_complete_one : &st_complete_current, a, res,
					 done, n, 0) < 0) {
		memset(done, 0, n);
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if (!done[i]) {
			ra[m] = a[i];
			ri[m] = i;
			rr[m++] = res[i];
		}
	rc = m == 0 ? 0 : store_complete_run(&st_complete_many, ra, rr, rdone, m, 1);
	if (rc == 0)
		for (size_t k = 0; k < m; k++)
			done[ri[k]] = 1;
out:
	free(ra);
	free(rr);
	free(ri);
	free(rdone);
	return rc;
}

int store_claim(const struct claim_args *a, struct claim_result *res)
{
	char done;

	return store_claim_many(&a, &res, 1, &done);
}

int store_complete(const struct complete_args *a, struct complete_result *res)
{
	char done;

	return store_complete_many(&a, &res, 1, &done);
}
