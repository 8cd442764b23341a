/* The front of the record engine, after the claim: complete (batched, answered after
 * the commit), release, extend and checkpoint of a record, each fenced by
 * the attempt that holds it. */
#include "answer.h"
#include "engine.h"

#include <inttypes.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batcher.h"
#include "headers.h"
#include "log.h"
#include "metrics.h"
#include "opcache.h"
#include "replaycache.h"
#include "reqjson.h"

#define ENGINE_MAX_STORED_HEADERS 64
#define ENGINE_CHECKPOINT_MAX (64 * 1024)

/* For a caller key (IS_KEY), no record at all (the statement said so:
 * NO_RECORD) is 404 record_not_found rather than 409 not_in_progress: -1
 * after replying so, else 0. */
static int engine_not_found(struct request *req, int is_key, int no_record)
{
	if (!is_key || !no_record)
		return 0;
	answer_problem(req, OUTCOME_RECORD_NOT_FOUND, NULL);
	return -1;
}

/* Validates a complete body into RESP (headers text and body owned). */
/* A completion's body, from JBODY (JSON) or B64 (base64) or neither, into
 * RESP (owned). 0, or -1 with WHY (empty: out of memory). */
static int engine_complete_body(json_t *jbody, const char *b64, struct stored_response *resp,
				char why[REQJSON_WHY])
{
	if (jbody != NULL && b64 != NULL)
		return reqjson_why(why, "send body or body_base64, not both");
	if (b64 != NULL) {
		size_t max = strlen(b64) + 1;
		resp->sr_body = malloc(max);
		if (resp->sr_body == NULL) {
			why[0] = '\0';
			return -1;
		}
		if (sodium_base642bin(resp->sr_body, max, b64, strlen(b64), NULL,
				      &resp->sr_body_len, NULL,
				      sodium_base64_VARIANT_ORIGINAL) != 0)
			return reqjson_why(why, "body_base64 is not valid base64");
	} else if (jbody != NULL) {
		resp->sr_body = (unsigned char *)json_dumps(jbody, JSON_COMPACT | JSON_ENCODE_ANY);
		resp->sr_body_len = resp->sr_body ? strlen((char *)resp->sr_body) : 0;
		resp->sr_is_json = 1;
		if (resp->sr_body == NULL) {
			why[0] = '\0';
			return -1;
		}
	}
	return 0;
}

int engine_complete_parse_why(json_t *body, const char *extra, int64_t *attempt,
			      struct stored_response *resp, char why[REQJSON_WHY])
{
	const char *const allowed[] = { "attempt",     "status", "headers", "body",
					"body_base64", extra,	 NULL };
	int64_t status;
	int present;
	const char *b64;

	memset(resp, 0, sizeof(*resp));
	if (reqjson_only_why(body, allowed, why) < 0 ||
	    reqjson_int_why(body, "attempt", 1, 1, INT32_MAX, attempt, &present, why) < 0 ||
	    reqjson_int_why(body, "status", 1, 100, 599, &status, &present, why) < 0 ||
	    reqjson_string_why(body, "body_base64", 0, 0, SIZE_MAX, &b64, why) < 0)
		return -1;
	resp->sr_status = (int)status;
	json_t *headers = json_object_get(body, "headers");
	if (headers != NULL &&
	    engine_check_headers_why(headers, ENGINE_MAX_STORED_HEADERS, why) < 0)
		return -1;
	if (engine_complete_body(json_object_get(body, "body"), b64, resp, why) < 0)
		return -1;
	resp->sr_headers = headers ? json_dumps(headers, JSON_COMPACT | JSON_SORT_KEYS)
				   : strdup("{}");
	if (resp->sr_headers == NULL) {
		why[0] = '\0';
		return -1;
	}
	return 0;
}

int engine_complete_parse(struct request *req, json_t *body, const char *extra, int64_t *attempt,
			  struct stored_response *resp)
{
	char why[REQJSON_WHY];

	return reqjson_refused(req, engine_complete_parse_why(body, extra, attempt, resp, why),
			       why);
}

/* A complete on its way through the database. */
struct engine_complete {
	struct batcher_job hc_job;
	struct request *hc_req;
	struct token hc_token;
	int hc_is_key; /* a caller key: never claimed is 404 */
	int64_t hc_attempt;
	struct stored_response hc_resp;
	struct complete_args hc_args;
	struct complete_result hc_res;
};

static void engine_complete_free(struct engine_complete *c)
{
	store_response_free(&c->hc_res.cpr_stored);
	store_response_free(&c->hc_resp);
	free(c);
}

/* 1 when a repeated completion A says what the stored one B says: same
 * status, headers (as JSON values) and body bytes. */
int engine_same_response(const struct stored_response *a, const struct stored_response *b)
{
	if (a->sr_status != b->sr_status || a->sr_body_len != b->sr_body_len ||
	    (a->sr_body_len > 0 && memcmp(a->sr_body, b->sr_body, a->sr_body_len) != 0))
		return 0;
	json_t *ha = json_loads(a->sr_headers ? a->sr_headers : "{}", 0, NULL);
	json_t *hb = json_loads(b->sr_headers ? b->sr_headers : "{}", 0, NULL);
	int same = ha != NULL && hb != NULL && json_equal(ha, hb);
	json_decref(ha);
	json_decref(hb);
	return same;
}

/* The complete's answer, built on the request's thread after the resume. */
/* 200 {"state":"completed","response","expires_at"} for a completion that
 * committed: the response as stored, rendered without parsing it again
 * when it is the one this request sent (COMPLETE_STORED: the database
 * holds the body idemd dumped). */
static void engine_completed_reply(struct request *req, const struct complete_result *res)
{
	struct buf b = { 0 };
	char at[RFC3339_MAX];

	(void)buf_str(&b, "{\"state\":\"completed\",\"response\":");
	int rc = reqjson_response_text(&b, &res->cpr_stored, res->cpr_outcome == COMPLETE_STORED);
	(void)buf_str(&b, ",\"expires_at\":\"");
	(void)buf_add(&b, at, rfc3339_text(res->cpr_expires_at, at));
	(void)buf_str(&b, "\"}\n");
	if (rc != 0 || b.b_failed) {
		buf_free(&b);
		request_unavailable(req);
		return;
	}
	size_t len = b.b_len;
	http_reply_take(req, 200, "application/json", buf_take(&b), len);
}

static void engine_complete_answer(struct request *req, void *arg)
{
	struct engine_complete *c = arg;
	struct complete_result *res = &c->hc_res;
	struct outcome_values v = { .ov_attempt = c->hc_attempt };

	if (c->hc_job.bj_rc < 0) {
		request_unavailable(req);
		goto done;
	}
	if (res->cpr_outcome == COMPLETE_ALREADY &&
	    !engine_same_response(&c->hc_resp, &res->cpr_stored)) {
		answer_problem(req, OUTCOME_COMPLETION_CONFLICT, &v);
		goto done;
	}
	switch (res->cpr_outcome) {
	case COMPLETE_STORED:
	case COMPLETE_ALREADY:
		engine_completion_keep(req->req_tenant_id, c->hc_token.id, res);
		engine_completed_reply(req, res);
		break;
	case COMPLETE_LEASE_LOST:
		answer_problem(req, OUTCOME_LEASE_LOST, &v);
		break;
	case COMPLETE_NOT_IN_PROGRESS:
	case COMPLETE_NO_RECORD:
		if (engine_not_found(req, c->hc_is_key, res->cpr_outcome == COMPLETE_NO_RECORD) < 0)
			break;
		answer_problem(req, OUTCOME_NOT_IN_PROGRESS, &v);
		break;
	}
done:
	engine_complete_free(c);
}

void engine_completion_keep(uint32_t tenant_id, const uint8_t id[16],
			    const struct complete_result *res)
{
	if (res->cpr_outcome == COMPLETE_STORED)
		metrics_add(METRIC_COMPLETIONS, 1);
	/* duplicates that follow are answered from memory */
	replaycache_put(tenant_id, id, res->cpr_has_fingerprint ? res->cpr_fingerprint : NULL,
			&res->cpr_stored, res->cpr_expires_at);
}

/* Batcher thread: the complete is committed (or refused); resume at once. */
static void engine_completed(struct batcher_job *j)
{
	struct engine_complete *c = IDEMD_CONTAINER_OF(j, struct engine_complete, hc_job);

	http_resume_then(c->hc_req, engine_complete_answer, c);
}

void engine_complete(struct request *req, const struct token *tok, int is_key)
{
	struct token t = *tok;
	struct operation op;
	struct engine_complete *c = NULL;
	int found;
	json_t *body = NULL;

	http_note_record(req, tok->id);
	body = http_body_object(req, NULL);
	if (body == NULL)
		return;
	c = calloc(1, sizeof(*c));
	if (c == NULL) {
		request_unavailable(req);
		goto done;
	}
	if (engine_complete_parse(req, body, NULL, &c->hc_attempt, &c->hc_resp) < 0)
		goto done;
	if (opcache_by_id(t.operation_id, &op, &found) < 0) {
		request_unavailable(req);
		goto done;
	}
	if (!found) {
		answer_problem(req, OUTCOME_OPERATION_UNKNOWN, NULL);
		goto done;
	}
	c->hc_req = req;
	c->hc_token = t;
	c->hc_is_key = is_key;
	c->hc_args.tenant_id = req->req_tenant_id;
	c->hc_args.token_id = c->hc_token.id;
	c->hc_args.attempt = (int)c->hc_attempt;
	c->hc_args.resp = &c->hc_resp;
	c->hc_args.retention_seconds = op.op_retention_seconds;
	c->hc_args.audit_seconds = store_audit_seconds(&op);
	c->hc_args.by = req->req_by;
	c->hc_job.bj_kind = BATCHER_COMPLETE;
	c->hc_job.bj_complete = &c->hc_args;
	c->hc_job.bj_complete_result = &c->hc_res;
	c->hc_job.bj_done = engine_completed;
	http_suspend(req);
	batcher_submit(&c->hc_job);
	c = NULL;
done:
	if (c != NULL)
		engine_complete_free(c);
	json_decref(body);
}

/* Answers a fenced write's refusal (409 lease_lost or not_in_progress, or
 * for a caller key never claimed 404) and returns -1; 0 when OUTCOME is
 * RELEASE_DONE and the caller answers. */
static int engine_fenced(struct request *req, int is_key, enum release_outcome outcome,
			 int64_t attempt)
{
	struct outcome_values v = { .ov_attempt = attempt };

	if (outcome == RELEASE_DONE)
		return 0;
	if (outcome == RELEASE_LEASE_LOST)
		answer_problem(req, OUTCOME_LEASE_LOST, &v);
	else if (engine_not_found(req, is_key, outcome == RELEASE_NO_RECORD) == 0)
		answer_problem(req, OUTCOME_NOT_IN_PROGRESS, &v);
	return -1;
}

/* The body of a fenced write: ALLOWED members, "attempt" among them. The
 * body (new reference) or NULL after replying. */
static json_t *engine_fenced_body(struct request *req, const char *const *allowed, int64_t *attempt)
{
	int present;
	json_t *body = http_body_object(req, allowed);

	if (body != NULL &&
	    reqjson_int(req, body, "attempt", 1, 1, INT32_MAX, attempt, &present) < 0) {
		json_decref(body);
		body = NULL;
	}
	return body;
}

void engine_release(struct request *req, const struct token *t, int is_key)
{
	static const char *const allowed[] = { "attempt", NULL };
	enum release_outcome outcome;
	int64_t attempt;
	json_t *body = engine_fenced_body(req, allowed, &attempt);

	http_note_record(req, t->id);
	if (body == NULL)
		return;
	if (store_release(req->req_tenant_id, t->id, (int)attempt, req->req_by, &outcome) < 0)
		request_unavailable(req);
	else if (engine_fenced(req, is_key, outcome, attempt) == 0) {
		metrics_add(METRIC_RELEASES, 1);
		http_reply_json(req, 200,
				json_pack("{s:s,s:I}", "state", "issued", "attempt",
					  (json_int_t)attempt));
	}
	json_decref(body);
}

void engine_extend(struct request *req, const struct token *t, int is_key)
{
	static const char *const allowed[] = { "attempt", "lease_seconds", NULL };
	enum release_outcome outcome;
	struct operation op;
	int64_t attempt, lease, until;
	int present, found;
	json_t *body = engine_fenced_body(req, allowed, &attempt);

	http_note_record(req, t->id);
	if (body == NULL)
		return;
	if (opcache_by_id(t->operation_id, &op, &found) < 0 || !found) {
		request_unavailable(req);
		goto done;
	}
	if (reqjson_int(req, body, "lease_seconds", 0, 1, op.op_lease_seconds, &lease, &present) <
	    0)
		goto done;
	if (!present)
		lease = op.op_lease_seconds;
	if (store_extend(req->req_tenant_id, t->id, (int)attempt, (int)lease, req->req_by, &outcome,
			 &until) < 0)
		request_unavailable(req);
	else if (engine_fenced(req, is_key, outcome, attempt) == 0)
		http_reply_json(req, 200,
				json_pack("{s:s,s:I,s:o}", "state", "in_progress", "attempt",
					  (json_int_t)attempt, "lease_expires_at",
					  rfc3339_json(until)));
done:
	json_decref(body);
}

/* 1 when PHASE is 1..64 characters of [a-z0-9._-]. */
static int engine_phase_ok(const char *phase)
{
	size_t n = strlen(phase);

	return n >= 1 && n <= 64 && strspn(phase, "abcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

void engine_checkpoint(struct request *req, const struct token *t, int is_key)
{
	static const char *const allowed[] = { "attempt", "phase", "data", NULL };
	enum release_outcome outcome;
	int64_t attempt;
	const char *phase;
	char *data = NULL;
	json_t *body = engine_fenced_body(req, allowed, &attempt);

	http_note_record(req, t->id);
	if (body == NULL)
		return;
	if (reqjson_string(req, body, "phase", 1, 1, 64, &phase) < 0)
		goto done;
	if (!engine_phase_ok(phase)) {
		request_fail(req, 400, "invalid_request", "phase must be 1 to 64 of [a-z0-9._-]");
		goto done;
	}
	json_t *jdata = json_object_get(body, "data");
	if (jdata != NULL) {
		data = json_dumps(jdata, JSON_COMPACT | JSON_ENCODE_ANY);
		if (data == NULL) {
			request_unavailable(req);
			goto done;
		}
		if (strlen(data) > ENGINE_CHECKPOINT_MAX) {
			request_fail(req, 400, "invalid_request",
				     "checkpoint data is at most %d bytes of JSON",
				     ENGINE_CHECKPOINT_MAX);
			goto done;
		}
	}
	if (store_checkpoint(req->req_tenant_id, t->id, (int)attempt, phase, data, req->req_by,
			     &outcome) < 0)
		request_unavailable(req);
	else if (engine_fenced(req, is_key, outcome, attempt) == 0)
		http_reply_json(req, 200,
				json_pack("{s:s,s:{s:s,s:o,s:I}}", "state", "in_progress",
					  "checkpoint", "phase", phase, "data",
					  jdata ? json_incref(jdata) : json_null(), "attempt",
					  (json_int_t)attempt));
done:
	free(data);
	json_decref(body);
}

void engine_act(struct request *req, const struct token *t, int is_key, enum engine_action a)
{
	static void (*const run[])(struct request *, const struct token *, int) = {
		[ENGINE_COMPLETE] = engine_complete,
		[ENGINE_RELEASE] = engine_release,
		[ENGINE_EXTEND] = engine_extend,
		[ENGINE_CHECKPOINT] = engine_checkpoint,
	};

	/* a route's arg names the action: one that names none is a bug in
	 * the route table, answered 500 rather than followed */
	if ((size_t)a >= sizeof(run) / sizeof(run[0]) || run[a] == NULL) {
		request_fail(req, 500, "internal", "the request could not be answered");
		return;
	}
	run[a](req, t, is_key);
}
