/* Unit tests for the claim core (claim.c), on outcomes alone: no request,
 * no HTTP. A claim is checked against its operation (unknown operation,
 * a counter that needs a subject, a wait capped at 60 s); it queues one
 * batcher job with its arguments and when it reached idemd; each result
 * of the database step ends in its outcome with the values an answer
 * names (a caller key's late claim apart from an expired token; no
 * database: unavailable); a replay from the database fills the replay
 * cache; DONE runs once.
 *
 * The batcher is replaced by the stand-in below, which keeps the job so
 * the test plays the batcher thread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "batcher.h"
#include "claim.h"
#include "opcache.h"
#include "replaycache.h"
#include "unit.h"

#define TENANT 7
#define OP_ID 4243

static struct batcher_job *queued;
static int n_queued;

void batcher_submit(struct batcher_job *j)
{
	queued = j;
	n_queued++;
}

static int n_done;
static struct claim *done_claim;
static struct claim_out *done_out;

static void on_done(struct claim *c, struct claim_out *o, void *arg)
{
	assert_ptr_equal(arg, &n_done);
	n_done++;
	done_claim = c;
	done_out = o;
}

static struct operation op;
static struct claim_in in;

static int setup(void **state)
{
	(void)state;
	queued = NULL;
	n_queued = n_done = 0;
	done_claim = NULL;
	memset(&op, 0, sizeof(op));
	op.op_id = OP_ID;
	op.op_tenant_id = TENANT;
	snprintf(op.op_name, sizeof(op.op_name), "order.pay");
	op.op_token_ttl_seconds = 3600;
	op.op_retention_seconds = 86400;
	op.op_lease_seconds = 20;
	op.op_wait_seconds = 5;
	opcache_put(&op);
	memset(&in, 0, sizeof(in));
	in.ci_token.key_id = 1;
	in.ci_token.tenant_id = TENANT;
	in.ci_token.operation_id = OP_ID;
	in.ci_token.expires_at = 4000000000u;
	for (int i = 0; i < 16; i++)
		in.ci_token.id[i] = (uint8_t)(0x30 + i);
	memcpy(in.ci_token.subject, "user-2", 7);
	in.ci_token.subject_len = 6;
	in.ci_has_fp = 1;
	memset(in.ci_fp, 0x6b, sizeof(in.ci_fp));
	in.ci_wait_asked = -1;
	in.ci_by = "api_key:3";
	replaycache_clear();
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	replaycache_clear();
	return 0;
}

/* Starts IN, plays the batcher with OUTCOME (RC the batch's), and returns
 * the claim DONE got. */
static struct claim *run(enum claim_outcome outcome, int rc, void (*fill)(struct claim_result *))
{
	struct claim_refusal why;
	struct claim *c = claim_new(&in, &why);

	assert_non_null(c);
	claim_submit(c, on_done, &n_done);
	assert_int_equal(n_queued, 1);
	assert_int_equal(n_done, 0);
	queued->bj_rc = rc;
	queued->bj_claim_result->cr_outcome = outcome;
	queued->bj_claim_result->cr_attempt = 2;
	queued->bj_claim_result->cr_lease_expires_at = 1;
	if (fill != NULL)
		fill(queued->bj_claim_result);
	queued->bj_done(queued);
	assert_int_equal(n_done, 1);
	assert_ptr_equal(done_claim, c);
	return c;
}

static void test_refused_before_the_database(void **state)
{
	struct claim_refusal why;

	(void)state;
	/* an operation the cache does not hold is asked of the database,
	 * which this test has not got */
	in.ci_token.operation_id = OP_ID + 1;
	assert_null(claim_new(&in, &why));
	assert_int_equal(why.cf_outcome, OUTCOME_UNAVAILABLE);
	assert_null(why.cf_invalid);

	setup(state);
	op.op_tenant_id = TENANT + 1; /* another tenant's */
	opcache_put(&op);
	assert_null(claim_new(&in, &why));
	assert_int_equal(why.cf_outcome, OUTCOME_OPERATION_UNKNOWN);

	setup(state);
	op.op_has_version_key = 1;
	snprintf(op.op_version_key, sizeof(op.op_version_key), "acct:{subject}");
	opcache_put(&op);
	in.ci_token.subject_len = 0;
	in.ci_token.subject[0] = '\0';
	assert_null(claim_new(&in, &why));
	assert_non_null(why.cf_invalid);
	assert_non_null(strstr(why.cf_invalid, "subject"));
	assert_int_equal(n_queued, 0);
}

/* Ends claim C, queued and looked at, as a batch that failed, and frees it. */
static void end_unrun(struct claim *c)
{
	queued->bj_rc = -1;
	queued->bj_done(queued);
	claim_free(c);
}

static void test_arguments(void **state)
{
	struct claim_refusal why;

	(void)state;
	in.ci_wait_asked = 600; /* capped */
	struct claim *c = claim_new(&in, &why);
	assert_non_null(c);
	int64_t before = idemd_unix_ms();
	claim_submit(c, on_done, &n_done);
	const struct claim_args *a = queued->bj_claim;
	assert_int_equal(a->tenant_id, TENANT);
	assert_memory_equal(a->token_id, in.ci_token.id, 16);
	assert_memory_equal(a->fingerprint, in.ci_fp, STORE_HASH_BYTES);
	assert_string_equal(a->subject, "user-2");
	assert_int_equal(a->lease_seconds, 20);
	assert_string_equal(a->by, "api_key:3");
	assert_int_equal(a->wait, 1);
	assert_true(a->seen_ms >= before && a->seen_ms <= idemd_unix_ms());
	end_unrun(c);

	/* no wait asked for: the operation's; 0 asked: none */
	setup(state);
	in.ci_wait_asked = 0;
	c = claim_new(&in, &why);
	claim_submit(c, on_done, &n_done);
	assert_int_equal(queued->bj_claim->wait, 0);
	end_unrun(c);

	/* the operation handed in is used as it is, not read again: one the
	 * cache does not hold (which would be asked of the database, absent
	 * here) with a lease of its own */
	setup(state);
	struct operation given = op;
	given.op_id = OP_ID + 1;
	given.op_lease_seconds = 45;
	in.ci_token.operation_id = OP_ID + 1;
	in.ci_op = &given;
	c = claim_new(&in, &why);
	assert_non_null(c);
	claim_submit(c, on_done, &n_done);
	assert_int_equal(queued->bj_claim->lease_seconds, 45);
	end_unrun(c);
	/* another tenant's operation handed in is refused as one read is */
	setup(state);
	given.op_tenant_id = TENANT + 1;
	in.ci_op = &given;
	assert_null(claim_new(&in, &why));
	assert_int_equal(why.cf_outcome, OUTCOME_OPERATION_UNKNOWN);
}

static void fill_values(struct claim_result *r)
{
	r->cr_retry_after = 12;
	r->cr_current_version = 9;
}

static void test_outcomes(void **state)
{
	static const struct {
		enum claim_outcome res;
		enum outcome out;
	} cases[] = {
		{ CLAIM_CLAIMED, OUTCOME_CLAIMED },
		{ CLAIM_IN_PROGRESS, OUTCOME_IN_PROGRESS },
		{ CLAIM_REVOKED, OUTCOME_REVOKED },
		{ CLAIM_FINGERPRINT_MISMATCH, OUTCOME_FINGERPRINT_MISMATCH },
		{ CLAIM_EXPIRED, OUTCOME_TOKEN_EXPIRED },
		{ CLAIM_VERSION_MISMATCH, OUTCOME_VERSION_MISMATCH },
		{ CLAIM_VERSION_REQUIRED, OUTCOME_VERSION_REQUIRED },
		{ CLAIM_LEASE_SPENT, OUTCOME_LEASE_SPENT },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		setup(state);
		in.ci_wait_asked = 0; /* a duplicate in progress does not wait */
		struct claim *c = run(cases[i].res, 0, fill_values);
		const struct claim_out *o = done_out;
		assert_int_equal(o->co_outcome, cases[i].out);
		assert_int_equal(o->co_values.ov_retry_after, 12);
		assert_int_equal(o->co_values.ov_version, 9);
		assert_int_equal(o->co_values.ov_attempt, 2);
		assert_int_equal(o->co_waited, 0);
		claim_free(c);
	}
	/* a caller key (no signing key): too late for its life, a retry */
	setup(state);
	in.ci_token.key_id = 0;
	struct claim *c = run(CLAIM_EXPIRED, 0, NULL);
	assert_int_equal(done_out->co_outcome, OUTCOME_KEY_LIFE_SPENT);
	claim_free(c);
	/* no database */
	setup(state);
	c = run(CLAIM_CLAIMED, -1, NULL);
	assert_int_equal(done_out->co_outcome, OUTCOME_UNAVAILABLE);
	claim_free(c);
}

static void fill_replay(struct claim_result *r)
{
	r->cr_response.sr_status = 201;
	r->cr_response.sr_headers = strdup("{}");
	r->cr_response.sr_body = (unsigned char *)strdup("{\"id\":5}");
	r->cr_response.sr_body_len = 8;
	r->cr_response.sr_is_json = 1;
	r->cr_record_expires_at = 4000000000000LL;
}

static void test_replay_from_the_database_is_cached(void **state)
{
	struct stored_response r;

	(void)state;
	assert_int_equal(replaycache_has(TENANT, in.ci_token.id), 0);
	struct claim *c = run(CLAIM_REPLAY, 0, fill_replay);
	const struct claim_out *o = done_out;
	assert_int_equal(o->co_outcome, OUTCOME_REPLAY);
	assert_int_equal(o->co_res.cr_response.sr_status, 201);
	assert_int_equal(o->co_from_cache, 0);
	claim_free(c);
	/* the same request is now answered from memory; another is not */
	assert_int_equal(replaycache_lookup(TENANT, in.ci_token.id, in.ci_fp, 0, &r, NULL, NULL),
			 REPLAYCACHE_HIT);
	assert_int_equal(r.sr_status, 201);
	store_response_free(&r);
	uint8_t other[STORE_HASH_BYTES];
	memset(other, 0x11, sizeof(other));
	assert_int_equal(replaycache_lookup(TENANT, in.ci_token.id, other, 0, &r, NULL, NULL),
			 REPLAYCACHE_OTHER_FP);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_refused_before_the_database, setup, teardown),
		cmocka_unit_test_setup_teardown(test_arguments, setup, teardown),
		cmocka_unit_test_setup_teardown(test_outcomes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replay_from_the_database_is_cached, setup,
						teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
