/* The outcome table: each engine outcome's status, problem code, detail
 * text (with the one value it names) and headers, in one place. */
#include "answer.h"

#include <inttypes.h>
#include <stdio.h>

#include "reqjson.h"

/* Which value of struct outcome_values a detail text names. */
enum outcome_arg { OA_NONE, OA_SECONDS, OA_VERSION, OA_ATTEMPT, OA_NUMBER };

/* The Retry-After an answer carries. */
enum outcome_retry { RA_NONE, RA_ONE, RA_SECONDS /* ov_retry_after */ };

static const struct outcome_row {
	unsigned status;
	const char *code;
	const char *detail; /* the detail, or what comes before the value ARG names */
	enum outcome_arg arg;
	const char *after; /* what comes after that value */
	enum outcome_retry retry;
	enum outcome_arg arg2; /* a second value, after AFTER (OA_NONE: none) */
	const char *after2;
} outcome_rows[OUTCOME_COUNT] = {
	[OUTCOME_CLAIMED] = { 201, NULL, NULL, OA_NONE, "", 0 },
	[OUTCOME_REPLAY] = { 200, NULL, NULL, OA_NONE, "", 0 },
	[OUTCOME_STORED] = { 200, NULL, NULL, OA_NONE, "", 0 },
	/* most first submits finish in far less than their lease: a retry in
	 * a second, and the detail says when a takeover would be allowed */
	[OUTCOME_IN_PROGRESS] = { 409, "request_in_progress",
				  "the first submit with this key (or token) is still in progress "
				  "(its lease ends in ",
				  OA_SECONDS, " s)", 1 },
	[OUTCOME_REVOKED] = { 410, "token_revoked", "the token (or key) was revoked", OA_NONE, "",
			      0 },
	[OUTCOME_FINGERPRINT_MISMATCH] = { 422, "fingerprint_mismatch",
					   "the key (or token) was first used with a different "
					   "request",
					   OA_NONE, "", 0 },
	[OUTCOME_TOKEN_EXPIRED] = { 410, "token_expired",
				    "the token (or the key's record) has expired", OA_NONE, "", 0 },
	/* a caller key's life starts with each claim: this one reached the
	 * database too late for it; nothing was written */
	[OUTCOME_KEY_LIFE_SPENT] = { 503, "unavailable",
				     "the claim reached the database too late for the key's life; "
				     "retry",
				     OA_NONE, "", 1 },
	[OUTCOME_VERSION_MISMATCH] = { 412, "version_mismatch",
				       "the data changed: the counter is at version ", OA_VERSION,
				       "", 0 },
	[OUTCOME_VERSION_REQUIRED] = { 428, "version_required",
				       "this operation requires If-Match with the current version",
				       OA_NONE, "", 0 },
	[OUTCOME_LEASE_SPENT] = { 503, "unavailable",
				  "the database took longer than the lease to grant this claim; "
				  "retry (the lease ends within a second)",
				  OA_NONE, "", 1 },
	[OUTCOME_LEASE_LOST] = { 409, "lease_lost", "attempt ", OA_ATTEMPT,
				 " is no longer the current attempt", 0 },
	[OUTCOME_NOT_IN_PROGRESS] = { 409, "not_in_progress",
				      "the record is not claimed by attempt ", OA_ATTEMPT, "", 0 },
	[OUTCOME_COMPLETION_CONFLICT] = { 409, "completion_conflict", "attempt ", OA_ATTEMPT,
					  " was already completed with another response", 0 },
	[OUTCOME_RECORD_NOT_FOUND] = { 404, "record_not_found",
				       "this key was never claimed (or was forgotten)", OA_NONE, "",
				       0 },
	[OUTCOME_UNAVAILABLE] = { 503, "unavailable", "the database is unavailable; retry shortly",
				  OA_NONE, "", 1 },
	[OUTCOME_TOKEN_MALFORMED] = { 400, "token_malformed",
				      "the token is not a valid idemd token", OA_NONE, "", 0 },
	[OUTCOME_TOKEN_INVALID] = { 403, "token_invalid", "the token's signature does not verify",
				    OA_NONE, "", 0 },
	[OUTCOME_TOKEN_OTHER_TENANT] = { 403, "token_scope_mismatch",
					 "the token belongs to another tenant", OA_NONE, "", 0 },
	[OUTCOME_TOKEN_OTHER_OPERATION] = { 403, "token_scope_mismatch",
					    "the token is for another operation than this route's",
					    OA_NONE, "", 0 },
	[OUTCOME_OPERATION_UNKNOWN] = { 422, "operation_unknown",
					"the tenant has no operation of that name", OA_NONE, "",
					0 },
	[OUTCOME_UPSTREAM_STATUS] = { 502, "upstream_invalid", "the upstream answered with status ",
				      OA_NUMBER, "", RA_ONE },
	[OUTCOME_UPSTREAM_MALFORMED] = { 502, "upstream_invalid",
					 "the upstream's answer has a malformed header line",
					 OA_NONE, "", RA_ONE },
	[OUTCOME_UPSTREAM_TOO_LARGE] = { 502, "upstream_invalid", "the upstream's answer exceeds ",
					 OA_NUMBER, " bytes", RA_ONE },
	[OUTCOME_UPSTREAM_BROKE_OFF] = { 502, "upstream_unavailable", "the upstream answered ",
					 OA_NUMBER, ", then its answer broke off", RA_ONE },
	[OUTCOME_UPSTREAM_UNREACHABLE] = { 502, "upstream_unavailable",
					   "the upstream could not be reached", OA_NONE, "",
					   RA_ONE },
	[OUTCOME_UPSTREAM_FAILED] = { 502, "upstream_unavailable",
				      "the connection to the upstream failed before it answered",
				      OA_NONE, "", RA_ONE },
	[OUTCOME_UPSTREAM_TIMEOUT] = { 504, "upstream_timeout",
				       "the upstream did not answer within ", OA_NUMBER, " ms",
				       RA_ONE },
	/* the upstream may still act: the key is held until the lease ends */
	[OUTCOME_UPSTREAM_TIMEOUT_HELD] = { 504, "upstream_timeout",
					    "the upstream did not answer within ", OA_NUMBER,
					    " ms; it may still act on the request, so the key is held "
					    "until its lease ends (in ",
					    RA_SECONDS, OA_SECONDS, " s)" },
	[OUTCOME_UPSTREAM_LOST_HELD] = { 502, "upstream_unavailable",
					 "the connection to the upstream broke after the request was "
					 "sent and before it answered; it may still act on the "
					 "request, so the key is held until its lease ends (in ",
					 OA_SECONDS, " s)", RA_SECONDS },
};

unsigned answer_status(enum outcome o)
{
	return outcome_rows[o].status;
}

/* The value of V that ARG names. */
static int64_t outcome_value(enum outcome_arg arg, const struct outcome_values *v)
{
	switch (arg) {
	case OA_SECONDS:
		return v->ov_retry_after;
	case OA_VERSION:
		return v->ov_version;
	case OA_ATTEMPT:
		return v->ov_attempt;
	case OA_NUMBER:
		return v->ov_number;
	case OA_NONE:
		break;
	}
	return 0;
}

/* The detail text of O with its values from V (NULL: zeros) into BUF. */
static void outcome_detail(enum outcome o, const struct outcome_values *v, char *buf, size_t len)
{
	static const struct outcome_values none = { 0, 0, 0, 0 };
	const struct outcome_row *r = &outcome_rows[o];

	if (v == NULL)
		v = &none;
	if (r->arg == OA_NONE)
		snprintf(buf, len, "%s", r->detail);
	else if (r->arg2 == OA_NONE)
		snprintf(buf, len, "%s%" PRId64 "%s", r->detail, outcome_value(r->arg, v),
			 r->after);
	else
		snprintf(buf, len, "%s%" PRId64 "%s%" PRId64 "%s", r->detail,
			 outcome_value(r->arg, v), r->after, outcome_value(r->arg2, v), r->after2);
}

void answer_problem(struct request *req, enum outcome o, const struct outcome_values *v)
{
	const struct outcome_row *r = &outcome_rows[o];
	char detail[256], etag[32];

	if (r->code == NULL)
		return;
	if (o == OUTCOME_UNAVAILABLE) {
		request_unavailable(req);
		return;
	}
	outcome_detail(o, v, detail, sizeof(detail));
	request_fail(req, r->status, r->code, "%s", detail);
	if (r->retry == RA_ONE) {
		http_set_header(req, "Retry-After", "1");
	} else if (r->retry == RA_SECONDS) {
		char secs[24];
		snprintf(secs, sizeof(secs), "%d",
			 v != NULL && v->ov_retry_after > 0 ? v->ov_retry_after : 1);
		http_set_header(req, "Retry-After", secs);
	}
	if (o == OUTCOME_VERSION_MISMATCH && v != NULL) {
		reqjson_etag_format(v->ov_version, etag, sizeof(etag));
		http_set_header(req, "ETag", etag);
	}
}

void answer_item(json_t *item, enum outcome o, const struct outcome_values *v)
{
	const struct outcome_row *r = &outcome_rows[o];
	char detail[256];

	json_object_set_new(item, "status", json_integer(r->status));
	if (r->code == NULL)
		return;
	outcome_detail(o, v, detail, sizeof(detail));
	json_object_set_new(item, "code", json_string(r->code));
	json_object_set_new(item, "detail", json_string(detail));
}
