/* Unit tests for the claim engine's front (engine.c): the replay
 * cache answers before the database; a claim suspends its request and
 * queues one batcher job carrying the record, fingerprint and lease; each
 * outcome of the database step is answered on the request's thread (201
 * through CLAIMED, 409 with Retry-After, 410, 412 with the ETag, 422, 428,
 * 503 when the database did not answer, a replay that fills the cache); a
 * claim refused before the database replies at once and never suspends;
 * with KEEPS a granted claim stays suspended for CLAIMED on the batcher
 * thread and every other outcome is answered on the request's thread; the
 * return rule (0 carry on, -1 replied); the issuance rate limit. The claim
 * core's outcomes alone are tested in test_claim.c.
 *
 * The batcher is replaced by the stand-in below, which keeps the job so
 * the test plays the batcher thread; so are http_request.c's calls that
 * need a connection (suspend, resume, a header), so the test plays the
 * HTTP thread too. Replies are the real http_reply.c's and problem.c's,
 * read as http.c sends them (unit_reply.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>
#include <jansson.h>

#include "batcher.h"
#include "config.h"
#include "answer.h"
#include "claim.h"
#include "engine.h"
#include "opcache.h"
#include "replaycache.h"
#include "store_fence.h"
#include "unit.h"
#include "unit_reply.h"

#define TENANT 7
#define OP_ID 4242

/* ---------------------------------------------------------------- stand-ins */

static struct batcher_job *queued;
static int n_queued;

void batcher_submit(struct batcher_job *j)
{
	queued = j;
	n_queued++;
}

/* This process's fence (store_fence.c): held, unless a test says not. */
static int32_t fence_id = 77;

int32_t store_fence_holder(void)
{
	return fence_id;
}

/* The connection: suspends and resumes counted, the builder
 * http_resume_then() was given kept for the test to run as the HTTP
 * thread does (conn_run_then). */
static struct {
	int suspends, resumes;
	void (*then)(struct request *req, void *arg);
	void *then_arg;
} conn;

void http_suspend(struct request *r)
{
	r->req_suspended = 1;
	conn.suspends++;
}

void http_resume(struct request *r)
{
	(void)r;
	conn.resumes++;
}

void http_resume_then(struct request *r, void (*fn)(struct request *req, void *arg), void *arg)
{
	assert_null(conn.then);
	conn.then = fn;
	conn.then_arg = arg;
	http_resume(r);
}

static void conn_run_then(struct request *r)
{
	void (*fn)(struct request *, void *) = conn.then;

	assert_non_null(fn);
	conn.then = NULL;
	fn(r, conn.then_arg);
}

/* What CLAIMED saw. */
static struct {
	int calls;
	int with_result;
	int attempt;
	void *arg;
} claimed;

static int on_claimed(struct request *r, const struct claim_result *res, void *arg)
{
	claimed.calls++;
	claimed.arg = arg;
	if (res != NULL) {
		claimed.with_result++;
		claimed.attempt = res->cr_attempt;
		http_reply_json(r, 201, json_pack("{s:i}", "attempt", res->cr_attempt));
	}
	return 0;
}

/* ---------------------------------------------------------------- fixtures */

static struct request req;
static struct token tok;
static uint8_t fp[STORE_HASH_BYTES];

static int setup(void **state)
{
	struct operation op = { 0 };

	(void)state;
	unit_reply_free(&req);
	memset(&req, 0, sizeof(req));
	memset(&conn, 0, sizeof(conn));
	memset(&claimed, 0, sizeof(claimed));
	queued = NULL;
	n_queued = 0;
	snprintf(req.req_id, sizeof(req.req_id), "test");
	req.req_tenant_id = TENANT;
	req.req_by = "api_key:1";
	op.op_id = OP_ID;
	op.op_tenant_id = TENANT;
	snprintf(op.op_name, sizeof(op.op_name), "order.create");
	op.op_token_ttl_seconds = 3600;
	op.op_retention_seconds = 86400;
	op.op_lease_seconds = 30;
	opcache_put(&op);
	memset(&tok, 0, sizeof(tok));
	tok.key_id = 1; /* a token signed by key 1 (a caller key's has none) */
	tok.tenant_id = TENANT;
	tok.operation_id = OP_ID;
	tok.expires_at = 4000000000u;
	for (size_t i = 0; i < sizeof(tok.id); i++)
		tok.id[i] = (uint8_t)(0xa0 + i);
	memcpy(tok.subject, "user-1", 7);
	tok.subject_len = 6;
	memset(fp, 0x5a, sizeof(fp));
	replaycache_clear();
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	replaycache_clear();
	unit_reply_free(&req);
	return 0;
}

/* The problem code of the reply, as its body says it. */
static const char *reply_code(void)
{
	static char code[64];
	json_t *doc = unit_reply_json(&req);

	snprintf(code, sizeof(code), "%s", json_string_value(json_object_get(doc, "code")));
	json_decref(doc);
	assert_string_equal(unit_reply_code(&req), code);
	return code;
}

/* Claims TOK, plays the batcher with outcome OUTCOME (RC: the batch's rc)
 * and the HTTP thread's resume; leaves the reply on REQ. */
static void claim_with(enum claim_outcome outcome, int rc, void (*fill)(struct claim_result *))
{
	assert_int_equal(engine_claim(&req, &tok, NULL, fp, NULL, on_claimed, 0, &req), 0);
	assert_int_equal(conn.suspends, 1);
	assert_false(unit_replied(&req));
	assert_int_equal(n_queued, 1);
	assert_non_null(queued);
	assert_int_equal(queued->bj_claim->holder, 0); /* the caller holds it */
	queued->bj_rc = rc;
	queued->bj_claim_result->cr_outcome = outcome;
	queued->bj_claim_result->cr_attempt = 1;
	queued->bj_claim_result->cr_lease_expires_at = 1;
	if (fill != NULL)
		fill(queued->bj_claim_result);
	queued->bj_done(queued); /* the batcher thread: resumes with a builder */
	assert_int_equal(conn.resumes, 1);
	assert_false(unit_replied(&req));
	conn_run_then(&req); /* the HTTP thread builds the reply */
	assert_true(unit_replied(&req));
	/* CLAIMED runs once whatever the outcome, and gets its argument */
	assert_int_equal(claimed.calls, 1);
	assert_ptr_equal(claimed.arg, &req);
}

/* ---------------------------------------------------------------- tests */

/* The batcher job carries the record, the fingerprint, the lease and who. */
static void test_claim_queues_the_record(void **state)
{
	(void)state;
	assert_int_equal(engine_claim(&req, &tok, NULL, fp, NULL, on_claimed, 0, &req), 0);
	assert_int_equal(queued->bj_kind, BATCHER_CLAIM);
	const struct claim_args *a = queued->bj_claim;
	assert_int_equal(a->tenant_id, TENANT);
	assert_memory_equal(a->token_id, tok.id, sizeof(tok.id));
	assert_int_equal(a->operation_id, OP_ID);
	assert_string_equal(a->subject, "user-1");
	assert_memory_equal(a->fingerprint, fp, sizeof(fp));
	assert_int_equal(a->lease_seconds, 30);
	assert_null(a->version_key);
	assert_string_equal(a->by, "api_key:1");
	/* finish it so nothing leaks */
	queued->bj_rc = 0;
	queued->bj_claim_result->cr_outcome = CLAIM_REVOKED;
	queued->bj_done(queued);
	conn_run_then(&req);
}

static void test_claimed(void **state)
{
	(void)state;
	claim_with(CLAIM_CLAIMED, 0, NULL);
	assert_int_equal(unit_reply(&req), 201);
	assert_int_equal(claimed.with_result, 1);
	assert_int_equal(claimed.attempt, 1);
}

static void fill_in_progress(struct claim_result *r)
{
	r->cr_retry_after = 12;
}

static void test_in_progress(void **state)
{
	(void)state;
	claim_with(CLAIM_IN_PROGRESS, 0, fill_in_progress);
	assert_int_equal(unit_reply(&req), 409);
	assert_string_equal(reply_code(), "request_in_progress");
	assert_string_equal(unit_reply_header(&req, "Retry-After"), "1");
	assert_int_equal(claimed.with_result, 0);
}

static void fill_version(struct claim_result *r)
{
	r->cr_current_version = 9;
}

/* Every refusal: its status and code, CLAIMED told without a result. */
static void test_refusals(void **state)
{
	static const struct {
		enum claim_outcome outcome;
		unsigned status;
		const char *code;
	} cases[] = {
		{ CLAIM_REVOKED, 410, "token_revoked" },
		{ CLAIM_EXPIRED, 410, "token_expired" },
		{ CLAIM_FINGERPRINT_MISMATCH, 422, "fingerprint_mismatch" },
		{ CLAIM_VERSION_MISMATCH, 412, "version_mismatch" },
		{ CLAIM_VERSION_REQUIRED, 428, "version_required" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		setup(state);
		claim_with(cases[i].outcome, 0, fill_version);
		assert_int_equal(unit_reply(&req), cases[i].status);
		assert_string_equal(reply_code(), cases[i].code);
		assert_int_equal(claimed.with_result, 0);
		if (cases[i].outcome == CLAIM_VERSION_MISMATCH)
			assert_string_equal(unit_reply_header(&req, "ETag"), "\"9\"");
		teardown(state);
	}
	/* a caller key (no signing key): its claim too late for its life is a
	 * retry, not an expired token */
	setup(state);
	tok.key_id = 0;
	claim_with(CLAIM_EXPIRED, 0, fill_version);
	assert_int_equal(unit_reply(&req), 503);
	assert_string_equal(reply_code(), "unavailable");
	assert_string_equal(unit_reply_header(&req, "Retry-After"), "1");
	teardown(state);
}

static void test_database_unavailable(void **state)
{
	(void)state;
	claim_with(CLAIM_CLAIMED, -1, NULL);
	assert_int_equal(unit_reply(&req), 503);
	assert_string_equal(reply_code(), "unavailable");
	assert_int_equal(claimed.with_result, 0);
}

static void fill_replay(struct claim_result *r)
{
	r->cr_response.sr_status = 202;
	r->cr_response.sr_headers = strdup("{\"x-order\":\"17\"}");
	r->cr_response.sr_body = (unsigned char *)strdup("{\"order\":17}");
	r->cr_response.sr_body_len = strlen("{\"order\":17}");
	r->cr_response.sr_is_json = 1;
	r->cr_record_expires_at = 4000000000000LL;
}

/* A completed record is replayed, and from then on the cache answers
 * without the database. */
static void test_replay_fills_the_cache(void **state)
{
	(void)state;
	assert_int_equal(engine_claim_cached(&req, &tok, fp, NULL), 0);
	assert_false(unit_replied(&req));
	claim_with(CLAIM_REPLAY, 0, fill_replay);
	assert_int_equal(unit_reply(&req), 200);
	assert_string_equal(unit_reply_header(&req, "Idempotent-Replayed"), "true");
	json_t *doc = unit_reply_json(&req);
	assert_string_equal(json_string_value(json_object_get(doc, "state")), "completed");
	json_t *resp = json_object_get(doc, "response");
	assert_int_equal(json_integer_value(json_object_get(resp, "status")), 202);
	json_decref(doc);

	unit_reply_free(&req);
	n_queued = 0;
	assert_int_equal(engine_claim_cached(&req, &tok, fp, NULL), -1);
	assert_int_equal(unit_reply(&req), 200);
	assert_string_equal(unit_reply_header(&req, "Idempotent-Replayed"), "true");
	assert_int_equal(n_queued, 0);
	/* another request's fingerprint: 422 from the cache */
	unit_reply_free(&req);
	uint8_t other[STORE_HASH_BYTES];
	memset(other, 0x11, sizeof(other));
	assert_int_equal(engine_claim_cached(&req, &tok, other, NULL), -1);
	assert_int_equal(unit_reply(&req), 422);
	assert_string_equal(reply_code(), "fingerprint_mismatch");
}

/* Refused before the database: replied at once, not suspended, CLAIMED
 * never called (its argument stays the caller's). */
static void test_refused_at_once(void **state)
{
	struct operation op = { 0 };

	(void)state;
	/* the operation guards a counter that needs a subject */
	op.op_id = OP_ID;
	op.op_tenant_id = TENANT;
	op.op_lease_seconds = 30;
	op.op_has_version_key = 1;
	snprintf(op.op_version_key, sizeof(op.op_version_key), "account:{subject}");
	opcache_put(&op);
	tok.subject_len = 0;
	tok.subject[0] = '\0';
	assert_int_equal(engine_claim(&req, &tok, NULL, fp, NULL, on_claimed, 0, &req), -1);
	assert_int_equal(unit_reply(&req), 400);
	assert_string_equal(reply_code(), "invalid_request");
	assert_true(unit_reply_holds(&req, "send the subject"));
	assert_int_equal(conn.suspends, 0);
	assert_int_equal(n_queued, 0);
	assert_int_equal(claimed.calls, 0);

	/* a malformed If-Match */
	setup(state);
	opcache_put(&op);
	req.req_h_if_match = "3";
	assert_int_equal(engine_claim(&req, &tok, NULL, fp, NULL, on_claimed, 0, &req), -1);
	assert_int_equal(unit_reply(&req), 400);
	assert_true(unit_reply_holds(&req, "If-Match"));
	assert_int_equal(n_queued, 0);

	/* an operation of another tenant */
	setup(state);
	op.op_tenant_id = TENANT + 1;
	op.op_has_version_key = 0;
	opcache_put(&op);
	assert_int_equal(engine_claim(&req, &tok, NULL, fp, NULL, on_claimed, 0, &req), -1);
	assert_int_equal(unit_reply(&req), 422);
	assert_string_equal(reply_code(), "operation_unknown");
	assert_int_equal(n_queued, 0);
}

static int on_claimed_keep(struct request *r, const struct claim_result *res, void *arg)
{
	(void)r;
	claimed.calls++;
	claimed.arg = arg;
	claimed.with_result += res != NULL;
	return res != NULL; /* the forward goes on: the callee resumes later */
}

/* KEEPS 1 (the gateway): a granted claim stays suspended for CLAIMED,
 * which runs on the batcher thread; any other outcome is resumed at once
 * and answered on the request's own thread, never on the batcher's. */
static void test_keeps(void **state)
{
	assert_int_equal(engine_claim(&req, &tok, NULL, fp, NULL, on_claimed_keep, 1, &req), 0);
	/* a claim idemd holds carries its fence; a direct one none */
	assert_int_equal(queued->bj_claim->holder, 77);
	queued->bj_rc = 0;
	queued->bj_claim_result->cr_outcome = CLAIM_CLAIMED;
	queued->bj_claim_result->cr_attempt = 1;
	queued->bj_done(queued);
	assert_int_equal(claimed.with_result, 1);
	assert_int_equal(conn.resumes, 0);
	assert_null(conn.then);
	assert_false(unit_replied(&req));

	/* no fence held (its session lost): not claimed at all */
	setup(state);
	fence_id = 0;
	n_queued = 0;
	assert_int_equal(engine_claim(&req, &tok, NULL, fp, NULL, on_claimed_keep, 1, &req), -1);
	fence_id = 77;
	assert_int_equal(n_queued, 0);
	assert_int_equal(unit_reply(&req), 503);

	setup(state);
	assert_int_equal(engine_claim(&req, &tok, NULL, fp, NULL, on_claimed_keep, 1, &req), 0);
	queued->bj_rc = 0;
	queued->bj_claim_result->cr_outcome = CLAIM_REVOKED;
	queued->bj_done(queued);
	assert_int_equal(conn.resumes, 1);
	assert_int_equal(claimed.calls, 0);
	assert_false(unit_replied(&req)); /* nothing built on the batcher */
	conn_run_then(&req);
	assert_int_equal(claimed.calls, 1);
	assert_int_equal(claimed.with_result, 0);
	assert_int_equal(unit_reply(&req), 410);
}

/* The outcomes a claim's result is: what single claims and batch items
 * answer from (the table in http/answer.c). */
static void test_claim_outcomes(void **state)
{
	struct claim_result res = { 0 };
	struct outcome_values v;

	(void)state;
	res.cr_outcome = CLAIM_CLAIMED;
	assert_int_equal(claim_outcome(&res, 0, &v), OUTCOME_CLAIMED);
	res.cr_outcome = CLAIM_REPLAY;
	assert_int_equal(claim_outcome(&res, 0, &v), OUTCOME_REPLAY);
	res.cr_outcome = CLAIM_IN_PROGRESS;
	res.cr_retry_after = 7;
	assert_int_equal(claim_outcome(&res, 0, &v), OUTCOME_IN_PROGRESS);
	assert_int_equal(v.ov_retry_after, 7);
	res.cr_outcome = CLAIM_VERSION_MISMATCH;
	res.cr_current_version = 42;
	assert_int_equal(claim_outcome(&res, 0, &v), OUTCOME_VERSION_MISMATCH);
	assert_int_equal(v.ov_version, 42);
	/* a token past its expiry; a caller key's claim too late for its life */
	res.cr_outcome = CLAIM_EXPIRED;
	assert_int_equal(claim_outcome(&res, 0, &v), OUTCOME_TOKEN_EXPIRED);
	assert_int_equal(claim_outcome(&res, 1, &v), OUTCOME_KEY_LIFE_SPENT);
	res.cr_outcome = CLAIM_VERSION_REQUIRED;
	assert_int_equal(claim_outcome(&res, 0, &v), OUTCOME_VERSION_REQUIRED);
	assert_int_equal(answer_status(OUTCOME_VERSION_REQUIRED), 428);
	/* a refusal's item carries its code, a claim's none */
	struct outcome_values none = { 0 };
	json_t *item = json_object();
	answer_item(item, OUTCOME_IN_PROGRESS, &none);
	assert_string_equal(json_string_value(json_object_get(item, "code")),
			    "request_in_progress");
	json_decref(item);
	item = json_object();
	answer_item(item, OUTCOME_CLAIMED, &none);
	assert_null(json_object_get(item, "code"));
	json_decref(item);
}

/* Issuance rate: a burst of 2 at 1 per second; the third is 429 with
 * Retry-After; another tenant has its own bucket. */
static void test_rate_check(void **state)
{
	struct config cfg = { 0 };

	(void)state;
	cfg.issue_rate_per_second = 1;
	cfg.issue_burst = 2;
	engine_init(&cfg);
	req.req_tenant_id = 901;
	assert_int_equal(engine_rate_check(&req, 1), 0);
	assert_int_equal(engine_rate_check(&req, 1), 0);
	assert_false(unit_replied(&req));
	assert_int_equal(engine_rate_check(&req, 1), -1);
	assert_int_equal(unit_reply(&req), 429);
	assert_string_equal(reply_code(), "rate_limited");
	assert_string_equal(unit_reply_header(&req, "Retry-After"), "1");
	req.req_tenant_id = 902;
	assert_int_equal(engine_rate_check(&req, 1), 0);
	cfg.issue_rate_per_second = 0;
	assert_int_equal(engine_rate_check(&req, 1000), 0);
	engine_init(NULL);
}

/* A route whose arg names no action is answered 500, not followed. */
static void test_act_unknown(void **state)
{
	(void)state;
	engine_act(&req, &tok, 0, (enum engine_action)0);
	assert_int_equal(unit_reply(&req), 500);
	assert_string_equal(reply_code(), "internal");
	engine_act(&req, &tok, 0, (enum engine_action)(ENGINE_CHECKPOINT + 1));
	assert_int_equal(unit_reply(&req), 500);
	assert_int_equal(n_queued, 0);
}

UNIT_MAIN(cmocka_unit_test_setup_teardown(test_claim_queues_the_record, setup, teardown),
	  cmocka_unit_test_setup_teardown(test_claimed, setup, teardown),
	  cmocka_unit_test_setup_teardown(test_in_progress, setup, teardown),
	  cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
	  cmocka_unit_test_setup_teardown(test_database_unavailable, setup, teardown),
	  cmocka_unit_test_setup_teardown(test_replay_fills_the_cache, setup, teardown),
	  cmocka_unit_test_setup_teardown(test_refused_at_once, setup, teardown),
	  cmocka_unit_test_setup_teardown(test_keeps, setup, teardown),
	  cmocka_unit_test_setup_teardown(test_claim_outcomes, setup, teardown),
	  cmocka_unit_test_setup_teardown(test_rate_check, setup, teardown),
	  cmocka_unit_test_setup_teardown(test_act_unknown, setup, teardown))
