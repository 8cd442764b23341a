/* Records: GET /v1/records/{id} (a record, whichever way its id was made: a
 * token's id, a caller key's, the one forwarded upstream), GET
 * /v1/records/{id}/events (its audit trail, which may outlive it) and
 * GET /v1/records (a listing, newest claim first, keyset-paginated: for
 * finding work stuck in progress). A listing and an event page read many
 * rows: their statements run on the readers (readers.h), within the
 * tenant's listing share (http_listing_take), never on an HTTP worker. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "handlers.h"
#include "opcache.h"
#include "readers.h"
#include "reqjson.h"
#include "router.h"
#include "store.h"
#include "token.h"
#include "engine.h"

/* The {id} path segment as 16 bytes. 0, or -1 after replying 400. */
static int h_record_id(struct request *req, uint8_t id[TOKEN_ID_BYTES])
{
	const char *hex = req->req_params[0];

	if (req->req_param_lens[0] != 2 * TOKEN_ID_BYTES ||
	    strspn(hex, "0123456789abcdef") != 2 * TOKEN_ID_BYTES) {
		request_fail(req, 400, "invalid_request",
			     "a record id is 32 lower-case hex digits");
		return -1;
	}
	for (int i = 0; i < TOKEN_ID_BYTES; i++) {
		int hi = hex[2 * i] <= '9' ? hex[2 * i] - '0' : hex[2 * i] - 'a' + 10;
		int lo = hex[2 * i + 1] <= '9' ? hex[2 * i + 1] - '0' : hex[2 * i + 1] - 'a' + 10;
		id[i] = (uint8_t)(hi * 16 + lo);
	}
	return 0;
}

void h_record_get(struct request *req)
{
	uint8_t id[TOKEN_ID_BYTES];
	struct record_view rv;
	struct operation op;
	int found = 0;

	if (h_record_id(req, id) < 0)
		return;
	http_note_record(req, id);
	if (store_record_get(req->req_tenant_id, id, &rv) < 0) {
		request_unavailable(req);
		return;
	}
	if (!rv.rv_found) {
		request_fail(req, 404, "record_not_found", "no record with this id");
		return;
	}
	if (opcache_by_id(rv.rv_operation_id, &op, &found) < 0) {
		store_record_view_free(&rv);
		request_unavailable(req);
		return;
	}
	int64_t now_ms = idemd_unix_ms();
	const char *state = engine_record_state(&rv, now_ms, 1);
	json_t *o = json_pack("{s:s,s:s,s:s,s:o,s:i}", "id", req->req_params[0], "operation",
			      found ? op.op_name : "", "state", state, "expires_at",
			      rfc3339_json(rv.rv_expires_at), "attempt", rv.rv_attempt);
	if (o != NULL && rv.rv_has_subject)
		json_object_set_new(o, "subject", json_string(rv.rv_subject));
	/* flushed from memory every few seconds (replaycount.c): may lag */
	if (o != NULL)
		json_object_set_new(o, "replays", json_integer(rv.rv_replays));
	engine_record_fields(o, &rv, state);
	store_record_view_free(&rv);
	http_reply_json(req, 200, o);
}

#define H_RECORDS_DEFAULT 100
#define H_RECORDS_MAX 500
#define H_EVENTS_MAX 1000

static int h_query_int(struct request *req, const char *name, int64_t max, int64_t *out);

/* A listing or an event page: what its handler parsed, and what the
 * statement, run by a reader, gave. Owned by its handler until submitted,
 * then freed by its answer. */
struct h_read {
	struct reader_job hr_job;
	int hr_rc; /* the statement's: 0, or -1 (unavailable) */
	int64_t hr_limit;
	/* a listing: the filter (rf_subject is hr_subject) and the rows */
	struct record_filter hr_filter;
	char *hr_subject;
	struct record_row *hr_rows;
	size_t hr_n;
	/* an event page */
	uint8_t hr_id[TOKEN_ID_BYTES];
	int64_t hr_after, hr_next;
	json_t *hr_events;
};

/* Submits R (new, or NULL when out of memory) to the readers with RUN and
 * ANSWER, within REQ's listing share: 0, or -1 after replying (R and its
 * subject freed). */
static int h_read_submit(struct request *req, struct h_read *r, void (*run)(struct reader_job *),
			 void (*answer)(struct request *, void *))
{
	if (r == NULL) {
		request_unavailable(req);
		return -1;
	}
	if (http_listing_take(req) < 0) {
		free(r->hr_subject);
		free(r);
		return -1;
	}
	r->hr_job.rj_req = req;
	r->hr_job.rj_tenant_id = req->req_tenant_id;
	r->hr_job.rj_run = run;
	r->hr_job.rj_answer = answer;
	readers_submit(&r->hr_job);
	return 0;
}

static void h_record_events_run(struct reader_job *j)
{
	struct h_read *r = IDEMD_CONTAINER_OF(j, struct h_read, hr_job);

	r->hr_rc = store_events_get(j->rj_tenant_id, r->hr_id, r->hr_after, (int)r->hr_limit,
				    &r->hr_events, &r->hr_next);
}

static void h_record_events_answer(struct request *req, void *arg)
{
	struct h_read *r = arg;
	char cur[24];

	http_listing_give(req);
	if (r->hr_rc < 0) {
		request_unavailable(req);
	} else if (json_array_size(r->hr_events) == 0 && r->hr_after == 0) {
		json_decref(r->hr_events);
		request_fail(req, 404, "record_not_found", "no record or audit trail with this id");
	} else {
		snprintf(cur, sizeof(cur), "%" PRId64, r->hr_next);
		http_reply_json(req, 200,
				json_pack("{s:o,s:o}", "events", r->hr_events, "next_cursor",
					  r->hr_next != 0 ? json_string(cur) : json_null()));
	}
	free(r);
}

/* GET /v1/records/{id}/events[?limit=&cursor=]: pages of at most LIMIT
 * (1..1000, default 1000) events; "next_cursor" (opaque: the last event's
 * sequence number) asks for the next, null on the last page. */
void h_record_events(struct request *req)
{
	uint8_t id[TOKEN_ID_BYTES];
	int64_t limit = H_EVENTS_MAX, after = 0;

	if (h_record_id(req, id) < 0)
		return;
	http_note_record(req, id);
	if (h_query_int(req, "limit", H_EVENTS_MAX, &limit) < 0 ||
	    h_query_int(req, "cursor", INT64_MAX, &after) < 0)
		return;
	if (limit < 1) {
		request_fail(req, 400, "invalid_request", "limit must be from 1 to %d",
			     H_EVENTS_MAX);
		return;
	}
	struct h_read *r = calloc(1, sizeof(*r));
	if (r != NULL) {
		memcpy(r->hr_id, id, sizeof(r->hr_id));
		r->hr_after = after;
		r->hr_limit = limit;
	}
	(void)h_read_submit(req, r, h_record_events_run, h_record_events_answer);
}

/* A non-negative integer query argument NAME into *OUT (absent: untouched).
 * 0, or -1 after replying 400. */
static int h_query_int(struct request *req, const char *name, int64_t max, int64_t *out)
{
	const char *v = http_query(req, name);
	char *end;

	if (v == NULL)
		return 0;
	long long n = strtoll(v, &end, 10);
	if (*v == '\0' || *end != '\0' || n < 0 || n > max ||
	    strspn(v, "0123456789") != strlen(v)) {
		request_fail(req, 400, "invalid_request",
			     "%s must be an integer from 0 to %" PRId64, name, max);
		return -1;
	}
	*out = n;
	return 0;
}

/* The state= filter ST into F: one of the four states; 0, or -1 after
 * replying 400. */
static int h_filter_state(struct request *req, const char *st, struct record_filter *f)
{
	static const char *const states[] = { "issued", "in_progress", "completed", "revoked" };
	size_t i;

	for (i = 0; i < IDEMD_ARRAY_LEN(states) && strcmp(st, states[i]) != 0; i++)
		;
	if (i == IDEMD_ARRAY_LEN(states)) {
		request_fail(req, 400, "invalid_request",
			     "state must be issued, in_progress, completed or revoked");
		return -1;
	}
	f->rf_state = states[i];
	return 0;
}

/* The cursor= argument CURSOR ("microseconds.32 hex digits", as
 * h_record_list gives it) into F; 0, or -1 after replying 400. */
static int h_filter_cursor(struct request *req, const char *cursor, struct record_filter *f)
{
	char hex[33];
	long long us;
	int used = 0;

	if (sscanf(cursor, "%lld.%32[0-9a-f]%n", &us, hex, &used) != 2 || cursor[used] != '\0' ||
	    strlen(hex) != 32 || us < 0) {
		request_fail(req, 400, "invalid_request", "cursor is not one this API gave");
		return -1;
	}
	for (int i = 0; i < 16; i++) {
		unsigned b;
		if (sscanf(hex + 2 * i, "%2x", &b) != 1)
			return -1;
		f->rf_after_id[i] = (uint8_t)b;
	}
	f->rf_after_us = us;
	f->rf_has_after = 1;
	return 0;
}

/* The subject= argument SUBJ, percent-decoded into *SUBJECT (owned: the
 * caller frees it with free(), even on failure) and F; 0, or -1 after
 * replying (503 when out of memory, 400 when no subject can be it). */
static int h_filter_subject(struct request *req, const char *subj, char **subject,
			    struct record_filter *f)
{
	size_t n;

	*subject = router_decode(subj, strlen(subj), &n);
	if (*subject == NULL) {
		request_unavailable(req);
		return -1;
	}
	/* what a subject can be (1..128 bytes of UTF-8, no NUL): anything
	 * else matches nothing and must not reach PostgreSQL as text */
	json_t *valid = n >= 1 && n <= 128 && strlen(*subject) == n ? json_stringn(*subject, n)
								    : NULL;
	if (valid == NULL) {
		request_fail(req, 400, "invalid_request",
			     "subject must be 1 to 128 bytes of UTF-8 without NUL");
		return -1;
	}
	json_decref(valid);
	f->rf_subject = *subject;
	return 0;
}

/* The filters of GET /v1/records into F (*NONE: an operation that does
 * not exist, so nothing matches). SUBJECT receives the decoded subject. 0,
 * or -1 after replying. */
static int h_record_filter(struct request *req, struct record_filter *f, int64_t *limit,
			   char **subject, int *none)
{
	const char *op = http_query(req, "operation"), *st = http_query(req, "state");
	const char *cursor = http_query(req, "cursor"), *subj = http_query(req, "subject");
	struct operation o;
	int found;

	memset(f, 0, sizeof(*f));
	f->rf_older_than = -1;
	*limit = H_RECORDS_DEFAULT;
	if (h_query_int(req, "limit", H_RECORDS_MAX, limit) < 0 ||
	    h_query_int(req, "older_than", 315360000, &f->rf_older_than) < 0)
		return -1;
	if (*limit < 1) {
		request_fail(req, 400, "invalid_request", "limit must be from 1 to %d",
			     H_RECORDS_MAX);
		return -1;
	}
	if (st != NULL && h_filter_state(req, st, f) < 0)
		return -1;
	if (cursor != NULL && h_filter_cursor(req, cursor, f) < 0)
		return -1;
	if (subj != NULL && h_filter_subject(req, subj, subject, f) < 0)
		return -1;
	*none = 0;
	if (op != NULL) {
		if (opcache_by_name(req->req_tenant_id, op, &o, &found) < 0) {
			request_unavailable(req);
			return -1;
		}
		*none = !found;
		f->rf_operation_id = o.op_id;
	}
	return 0;
}

/* One record of a GET /v1/records page (its operation's name "" when the
 * operation is gone); new, or NULL. */
static json_t *h_record_row_json(const struct record_row *r)
{
	char hex[2 * TOKEN_ID_BYTES + 1];
	struct operation op;
	int found = 0;

	if (opcache_by_id(r->rr_operation_id, &op, &found) < 0)
		found = 0;
	token_id_hex(r->rr_id, hex);
	json_t *o = json_pack("{s:s,s:s,s:s,s:i,s:o,s:o}", "id", hex, "operation",
			      found ? op.op_name : "", "state", r->rr_state, "attempt",
			      r->rr_attempt, "claimed_at", rfc3339_json(r->rr_created_us / 1000),
			      "expires_at", rfc3339_json(r->rr_expires_at));
	if (o != NULL && r->rr_has_subject)
		json_object_set_new(o, "subject", json_string(r->rr_subject));
	if (o != NULL && strcmp(r->rr_state, "in_progress") == 0)
		json_object_set_new(o, "lease_expires_at", rfc3339_json(r->rr_lease_expires_at));
	return o;
}

/* The page of N ROWS (one more than LIMIT when more follow) as the reply. */
static void h_record_list_reply(struct request *req, const struct record_row *rows, size_t n,
				int64_t limit)
{
	int more = n > (size_t)limit;
	if (more)
		n = (size_t)limit;
	json_t *list = json_array();
	char hex[2 * TOKEN_ID_BYTES + 1], cursor[64];
	for (size_t i = 0; list != NULL && i < n; i++)
		json_array_append_new(list, h_record_row_json(&rows[i]));
	json_t *next = json_null();
	if (more) {
		token_id_hex(rows[n - 1].rr_id, hex);
		snprintf(cursor, sizeof(cursor), "%" PRId64 ".%s", rows[n - 1].rr_created_us, hex);
		next = json_string(cursor);
	}
	if (list == NULL || next == NULL) {
		json_decref(list);
		json_decref(next);
		request_unavailable(req);
		return;
	}
	http_reply_json(req, 200, json_pack("{s:o,s:o}", "records", list, "next_cursor", next));
}

static void h_record_list_run(struct reader_job *j)
{
	struct h_read *r = IDEMD_CONTAINER_OF(j, struct h_read, hr_job);

	/* one row more than the page: next_cursor is null exactly when
	 * nothing follows, a full last page included */
	r->hr_rc = store_record_list(j->rj_tenant_id, &r->hr_filter, (size_t)r->hr_limit + 1,
				     &r->hr_rows, &r->hr_n);
}

static void h_record_list_answer(struct request *req, void *arg)
{
	struct h_read *r = arg;

	http_listing_give(req);
	if (r->hr_rc < 0)
		request_unavailable(req);
	else
		h_record_list_reply(req, r->hr_rows, r->hr_n, r->hr_limit);
	free(r->hr_rows);
	free(r->hr_subject);
	free(r);
}

void h_record_list(struct request *req)
{
	struct record_filter f;
	char *subject = NULL;
	int64_t limit;
	int none = 0;

	if (h_record_filter(req, &f, &limit, &subject, &none) < 0) {
		free(subject);
		return;
	}
	if (none) { /* an operation that does not exist: nothing to read */
		h_record_list_reply(req, NULL, 0, limit);
		free(subject);
		return;
	}
	struct h_read *r = calloc(1, sizeof(*r));
	if (r == NULL)
		free(subject);
	else {
		r->hr_filter = f;
		r->hr_subject = subject;
		r->hr_limit = limit;
	}
	(void)h_read_submit(req, r, h_record_list_run, h_record_list_answer);
}
