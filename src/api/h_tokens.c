/* Tokens API: issue, introspect, revoke, and the claim / complete / release
 * state machine. Order of checks (api/openapi.yaml): token format, signature,
 * scope, then the record (in one SQL function call). */
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "answer.h"
#include "batcher.h"
#include "fingerprint.h"
#include "handlers.h"
#include "keys.h"
#include "metrics.h"
#include "opcache.h"
#include "randpool.h"
#include "replaycache.h"
#include "reqjson.h"
#include "router.h"
#include "store.h"
#include "engine.h"
#include "versionkey.h"

#define H_TOKENS_MAX_COUNT 100

/* The longest JSON object of one issued token (h_token_make). */
#define H_TOKEN_TEXT_MAX \
	(96 /* names, quotes, commas, braces */ + TOKEN_MAX_CHARS + 2 * TOKEN_ID_BYTES + \
	 6 * STORE_NAME_MAX + 6 * TOKEN_SUBJECT_MAX + RFC3339_MAX + 24 /* version */)

/* Appends the literal S at *P. */
#define H_PUT(p, s) \
	do { \
		memcpy(p, s, sizeof(s) - 1); \
		p += sizeof(s) - 1; \
	} while (0)

/* Issues one token for OP and SUBJECT and writes its JSON object, as
 * json_dumps would write it, at OUT (H_TOKEN_TEXT_MAX bytes); returns the
 * length, or 0 on failure. */
static size_t h_token_make(const struct operation *op, const char *subject, int64_t ttl,
			   int has_version, int64_t version, char *out)
{
	struct token t = { 0 };
	char text[TOKEN_MAX_CHARS + 1], hex[2 * TOKEN_ID_BYTES + 1];
	int64_t now = idemd_unix_ms();
	char *p = out;

	t.tenant_id = op->op_tenant_id;
	t.operation_id = op->op_id;
	randpool_buf(t.id, sizeof(t.id));
	t.issued_at = (uint32_t)(now / 1000);
	t.expires_at = token_expiry(now, ttl);
	t.has_version = has_version;
	t.version = (uint64_t)version;
	t.subject_len = strlen(subject);
	memcpy(t.subject, subject, t.subject_len + 1);
	if (keys_sign_token(&t, text, sizeof(text)) < 0)
		return 0;
	token_id_hex(t.id, hex);
	/* token, id and the time need no escaping: base64url, hex, digits */
	H_PUT(p, "{\"token\":\"");
	size_t n = strlen(text);
	memcpy(p, text, n);
	p += n;
	H_PUT(p, "\",\"id\":\"");
	memcpy(p, hex, 2 * TOKEN_ID_BYTES);
	p += 2 * TOKEN_ID_BYTES;
	H_PUT(p, "\",\"operation\":\"");
	p += reqjson_escape(p, op->op_name, strnlen(op->op_name, STORE_NAME_MAX));
	H_PUT(p, "\",\"subject\":\"");
	p += reqjson_escape(p, subject, t.subject_len);
	H_PUT(p, "\",\"expires_at\":\"");
	p += rfc3339_text((int64_t)t.expires_at * 1000, p);
	H_PUT(p, "\"");
	if (has_version)
		p += snprintf(p, 32, ",\"version\":%" PRId64, version);
	H_PUT(p, "}");
	return (size_t)(p - out);
}

/* The members of an issue request. */
struct h_issue {
	char opname[STORE_NAME_MAX + 1];
	char subject[TOKEN_SUBJECT_MAX + 1];
	int64_t ttl, count;
	int has_ttl, has_count;
};

/* Whether the members F of a flat issue body (operation, subject,
 * ttl_seconds, count) are within bounds: the two strings present and of
 * 1 to their most bytes, the two numbers absent or within their range. */
static int h_issue_flat_ok(const struct reqjson_field f[4])
{
	return f[0].rf_present && f[0].rf_len >= 1 && f[0].rf_len <= STORE_NAME_MAX &&
	       f[1].rf_present && f[1].rf_len >= 1 && f[1].rf_len <= TOKEN_SUBJECT_MAX &&
	       (!f[2].rf_present ||
		(f[2].rf_num >= 1 && f[2].rf_num <= KEYS_MAX_TOKEN_TTL_SECONDS)) &&
	       (!f[3].rf_present || (f[3].rf_num >= 1 && f[3].rf_num <= H_TOKENS_MAX_COUNT));
}

/* The fast way for a simple body (reqjson_flat) with every member valid: 1
 * with A filled; 0 to go the full way, which answers everything else. */
static int h_issue_fast(const struct request *req, struct h_issue *a)
{
	struct reqjson_field f[4] = {
		{ .rf_name = "operation", .rf_type = REQJSON_STRING },
		{ .rf_name = "subject", .rf_type = REQJSON_STRING },
		{ .rf_name = "ttl_seconds", .rf_type = REQJSON_UINT },
		{ .rf_name = "count", .rf_type = REQJSON_UINT },
	};

	if (!reqjson_flat(req->req_body ? req->req_body : "", req->req_body_len, f, 4) ||
	    !h_issue_flat_ok(f))
		return 0;
	memcpy(a->opname, f[0].rf_str, f[0].rf_len);
	a->opname[f[0].rf_len] = '\0';
	if (!reqjson_valid_name(a->opname))
		return 0;
	memcpy(a->subject, f[1].rf_str, f[1].rf_len);
	a->subject[f[1].rf_len] = '\0';
	a->has_ttl = f[2].rf_present;
	a->ttl = f[2].rf_num;
	a->has_count = f[3].rf_present;
	a->count = f[3].rf_num;
	return 1;
}

/* The full way: jansson and the field checks. 0, or -1 after replying. */
static int h_issue_parse(struct request *req, struct h_issue *a)
{
	static const char *const allowed[] = { "operation", "subject", "ttl_seconds", "count",
					       NULL };
	const char *opname, *subject;
	json_t *body = http_body_object(req, allowed);
	int rc = -1;

	if (body == NULL)
		return -1;
	if (reqjson_string(req, body, "operation", 1, 1, STORE_NAME_MAX, &opname) < 0 ||
	    reqjson_string(req, body, "subject", 1, 1, TOKEN_SUBJECT_MAX, &subject) < 0 ||
	    reqjson_int(req, body, "ttl_seconds", 0, 1, KEYS_MAX_TOKEN_TTL_SECONDS, &a->ttl,
			&a->has_ttl) < 0 ||
	    reqjson_int(req, body, "count", 0, 1, H_TOKENS_MAX_COUNT, &a->count, &a->has_count) < 0)
		goto done;
	if (!reqjson_valid_name(opname)) {
		request_fail(req, 400, "invalid_request",
			     "field operation must match [a-z0-9._-]{1,64}");
		goto done;
	}
	snprintf(a->opname, sizeof(a->opname), "%s", opname);
	snprintf(a->subject, sizeof(a->subject), "%s", subject);
	rc = 0;
done:
	json_decref(body);
	return rc;
}

/* The operation's version for SUBJECT (OP has a version_key) into
 * *VERSION; 0, or -1 after replying (400 when SUBJECT cannot form the key,
 * 503 when the database does not answer). */
static int h_issue_version(struct request *req, const struct operation *op, const char *subject,
			   int64_t *version)
{
	char vkey[VERSIONKEY_MAX + 1];

	if (versionkey_expand(op->op_version_key, subject, vkey, sizeof(vkey)) < 0) {
		request_fail(req, 400, "invalid_request",
			     "this subject cannot form the operation's version key");
		return -1;
	}
	if (store_version_get(req->req_tenant_id, vkey, version) < 0) {
		request_unavailable(req);
		return -1;
	}
	return 0;
}

/* Issues one token for OP and SUBJECT and replies 201 with its object,
 * or 503 when it cannot. */
static void h_issue_one(struct request *req, const struct operation *op, const char *subject,
			int64_t ttl, int64_t version)
{
	char one[H_TOKEN_TEXT_MAX + 1];
	size_t n = h_token_make(op, subject, ttl, op->op_has_version_key, version, one);

	if (n == 0) {
		request_unavailable(req);
		return;
	}
	metrics_add(METRIC_TOKENS_ISSUED, 1);
	one[n++] = '\n';
	http_reply_bytes(req, 201, "application/json", one, n);
}

/* Issues COUNT tokens for OP and SUBJECT and replies 201 with
 * {"tokens":[...]}, or 503 when it cannot. */
static void h_issue_many(struct request *req, const struct operation *op, const char *subject,
			 int64_t ttl, int64_t version, int64_t count)
{
	char *list = malloc((size_t)count * (H_TOKEN_TEXT_MAX + 1) + 16);

	if (list == NULL) {
		request_unavailable(req);
		return;
	}
	char *p = list;
	H_PUT(p, "{\"tokens\":[");
	for (int64_t i = 0; i < count; i++) {
		size_t n = h_token_make(op, subject, ttl, op->op_has_version_key, version, p);
		if (n == 0) {
			request_unavailable(req);
			goto done;
		}
		p += n;
		if (i + 1 < count)
			H_PUT(p, ",");
	}
	H_PUT(p, "]}\n");
	metrics_add(METRIC_TOKENS_ISSUED, (long)count);
	http_reply_bytes(req, 201, "application/json", list, (size_t)(p - list));
done:
	free(list);
}

void h_token_issue(struct request *req)
{
	struct h_issue a;
	struct operation op;
	const char *opname = a.opname, *subject = a.subject;
	int64_t ttl, count, version = 0;
	int has_ttl, has_count, found;

	if (!h_issue_fast(req, &a) && h_issue_parse(req, &a) < 0)
		return;
	ttl = a.ttl;
	count = a.count;
	has_ttl = a.has_ttl;
	has_count = a.has_count;
	if (engine_rate_check(req, has_count ? (int)count : 1) < 0)
		return;
	if (opcache_by_name(req->req_tenant_id, opname, &op, &found) < 0) {
		request_unavailable(req);
		return;
	}
	if (!found) {
		answer_problem(req, OUTCOME_OPERATION_UNKNOWN, NULL);
		return;
	}
	if (has_ttl && ttl > op.op_token_ttl_seconds) {
		request_fail(req, 400, "invalid_request",
			     "ttl_seconds must not exceed the operation's token_ttl_seconds (%d)",
			     op.op_token_ttl_seconds);
		return;
	}
	if (!has_ttl)
		ttl = op.op_token_ttl_seconds;
	if (op.op_has_version_key && h_issue_version(req, &op, subject, &version) < 0)
		return;
	if (!has_count)
		h_issue_one(req, &op, subject, ttl, version);
	else
		h_issue_many(req, &op, subject, ttl, version, count);
}

void h_token_get(struct request *req)
{
	struct token t;
	struct operation op;
	struct record_view rv;
	int found;
	char hex[2 * TOKEN_ID_BYTES + 1];

	if (engine_from_path(req, &t) < 0)
		return;
	if (opcache_by_id(t.operation_id, &op, &found) < 0 ||
	    store_record_get(req->req_tenant_id, t.id, &rv) < 0) {
		request_unavailable(req);
		return;
	}
	int64_t now = idemd_unix_ms();
	int expired = now >= (int64_t)t.expires_at * 1000;
	const char *state = rv.rv_found ? engine_record_state(&rv, now, 0) : "issued";
	if (expired && strcmp(state, "issued") == 0)
		state = "expired";
	token_id_hex(t.id, hex);
	json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:o,s:i}", "id", hex, "operation",
			      found ? op.op_name : "", "subject", t.subject, "state", state,
			      "expires_at", rfc3339_json((int64_t)t.expires_at * 1000), "attempt",
			      rv.rv_attempt);
	engine_record_fields(o, &rv, state);
	store_record_view_free(&rv);
	http_reply_json(req, 200, o);
}

void h_token_revoke(struct request *req)
{
	struct token t;
	int in_use;

	if (engine_from_path(req, &t) < 0)
		return;
	if (store_revoke(req->req_tenant_id, t.id, t.operation_id, t.subject, (int64_t)t.expires_at,
			 req->req_by, &in_use) < 0) {
		request_unavailable(req);
		return;
	}
	if (in_use) {
		request_fail(req, 409, "token_in_use",
			     "the token is in progress or completed and cannot be revoked");
		return;
	}
	metrics_add(METRIC_REVOCATIONS, 1);
	http_reply_empty(req, 204);
}

/* A claim went through: 201 with the attempt and its lease. */
static int h_token_claimed(struct request *req, const struct claim_result *res, void *arg)
{
	(void)arg;
	if (res == NULL)
		return 0;
	json_t *o = json_pack("{s:s,s:i,s:o}", "state", "in_progress", "attempt", res->cr_attempt,
			      "lease_expires_at", rfc3339_json(res->cr_lease_expires_at));
	if (o != NULL && res->cr_checkpoint != NULL)
		json_object_set(o, "checkpoint", res->cr_checkpoint);
	http_reply_json(req, 201, o);
	return 0;
}

void h_token_claim(struct request *req)
{
	static const char *const allowed[] = { "fingerprint", "request", NULL };
	struct token t;
	uint8_t fp[FINGERPRINT_BYTES];
	int has_fp = 0;
	json_t *body = NULL;

	if (engine_from_path(req, &t) < 0 || engine_replay_raw(req, &t) < 0)
		return;
	body = http_body_object(req, allowed);
	if (body == NULL)
		return;
	if (engine_fingerprint(req, body, fp, &has_fp) < 0)
		goto done;
	if (engine_claim_cached(req, &t, has_fp ? fp : NULL, NULL) < 0 ||
	    engine_claim(req, &t, NULL, has_fp ? fp : NULL, NULL, h_token_claimed, 0, NULL) < 0)
		goto done; /* replied at once */
			   /* suspended: the batcher thread answers */
done:
	json_decref(body);
}

void h_token_act(struct request *req)
{
	struct token t;

	if (engine_from_path(req, &t) == 0)
		engine_act(req, &t, 0, (enum engine_action)req->req_route->arg);
}
