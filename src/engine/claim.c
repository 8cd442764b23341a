/* The claim core (claim.h): a claim's arguments from its operation, the
 * batched database step, duplicates that wait, and the outcome, counted
 * once. No request and no answer: engine.c does those. */
#include "claim.h"

#include <stdlib.h>
#include <string.h>

#include "batcher.h"
#include "log.h"
#include "metrics.h"
#include "opcache.h"
#include "replaycache.h"
#include "replaycount.h"
#include "versionkey.h"
#include "waiters.h"

/* The longest wait a caller may ask for (Prefer: wait=N), seconds. */
#define CLAIM_WAIT_MAX 60

struct claim {
	struct batcher_job cl_job;
	struct claim_in cl_in;
	char cl_vkey[VERSIONKEY_MAX + 1];
	struct claim_args cl_args;
	struct claim_out cl_out;
	int cl_wait;	       /* seconds a duplicate in progress may wait (0: none) */
	int64_t cl_wait_until; /* unix ms */
	int64_t cl_submitted;  /* unix ms: when the claim last went to the batcher */
	struct waiter cl_waiter;
	claim_done_fn cl_done;
	void *cl_arg;
};

void claim_count_replay(const struct token *t, int waited)
{
	metrics_add(METRIC_REPLAYS, 1);
	replaycount_add(t->tenant_id, t->id);
	metrics_duplicate(t->tenant_id, t->operation_id,
			  waited ? METRICS_DUP_WAITED : METRICS_DUP_REPLAYED);
}

char *claim_render_kept(const struct token *t, const uint8_t *fp, int kind, claim_render_fn render,
			const struct stored_response *r, const void *raw, size_t raw_len,
			size_t *len)
{
	char *reply = render(r, t, len);

	if (reply != NULL)
		replaycache_set_reply(t->tenant_id, t->id, fp, kind, raw, raw_len, reply, *len);
	return reply;
}

/* See claim.h. A points into T, FP and VKEY: they must not move while A is
 * in use. */
const char *claim_args_fill(const struct token *t, const struct operation *op, const uint8_t *fp,
			    const int64_t *if_match, char vkey[VERSIONKEY_MAX + 1],
			    struct claim_args *a)
{
	memset(a, 0, sizeof(*a));
	a->tenant_id = t->tenant_id;
	a->token_id = t->id;
	a->operation_id = t->operation_id;
	a->subject = t->subject_len > 0 ? t->subject : NULL; /* a caller key may have none */
	a->fingerprint = fp;
	a->token_expires_at = t->expires_at;
	a->lease_seconds = op->op_lease_seconds;
	a->audit_seconds = store_audit_seconds(op);
	a->retention_seconds = op->op_retention_seconds;
	a->seen_ms = idemd_unix_ms();
	if (!op->op_has_version_key)
		return NULL;
	if (t->subject_len == 0)
		return "this operation guards a version counter: send the subject that fills it";
	if (versionkey_expand(op->op_version_key, t->subject, vkey, VERSIONKEY_MAX + 1) < 0)
		return "the subject cannot form the operation's version key";
	a->version_key = vkey;
	a->require_version = op->op_require_version;
	if (if_match != NULL) {
		a->expected = *if_match;
		a->has_expected = 1;
	} else if (t->has_version) {
		a->expected = (int64_t)t->version;
		a->has_expected = 1;
	}
	return NULL;
}

enum outcome claim_outcome(const struct claim_result *res, int is_key, struct outcome_values *v)
{
	static const enum outcome outcomes[] = {
		[CLAIM_CLAIMED] = OUTCOME_CLAIMED,
		[CLAIM_REPLAY] = OUTCOME_REPLAY,
		[CLAIM_IN_PROGRESS] = OUTCOME_IN_PROGRESS,
		[CLAIM_REVOKED] = OUTCOME_REVOKED,
		[CLAIM_FINGERPRINT_MISMATCH] = OUTCOME_FINGERPRINT_MISMATCH,
		[CLAIM_EXPIRED] = OUTCOME_TOKEN_EXPIRED,
		[CLAIM_VERSION_MISMATCH] = OUTCOME_VERSION_MISMATCH,
		[CLAIM_VERSION_REQUIRED] = OUTCOME_VERSION_REQUIRED,
		[CLAIM_LEASE_SPENT] = OUTCOME_LEASE_SPENT,
	};

	memset(v, 0, sizeof(*v));
	v->ov_retry_after = res->cr_retry_after;
	v->ov_version = res->cr_current_version;
	v->ov_attempt = res->cr_attempt;
	/* a caller key's life starts with each claim: an expired one reached
	 * the database too late for it (a token's expiry is its own) */
	if (res->cr_outcome == CLAIM_EXPIRED && is_key)
		return OUTCOME_KEY_LIFE_SPENT;
	return outcomes[res->cr_outcome];
}

struct claim *claim_new(const struct claim_in *in, struct claim_refusal *why)
{
	struct claim *c = calloc(1, sizeof(*c));
	const struct token *t = &in->ci_token;
	struct operation op;
	int found = 1;

	why->cf_invalid = NULL;
	why->cf_outcome = OUTCOME_UNAVAILABLE;
	if (c == NULL)
		return NULL;
	if (in->ci_op != NULL) {
		op = *in->ci_op;
	} else if (opcache_by_id(t->operation_id, &op, &found) < 0) {
		free(c);
		return NULL;
	}
	if (!found || op.op_tenant_id != t->tenant_id) {
		why->cf_outcome = OUTCOME_OPERATION_UNKNOWN;
		free(c);
		return NULL;
	}
	c->cl_in = *in;
	c->cl_in.ci_op = NULL; /* borrowed for this call only */
	c->cl_wait = in->ci_wait_asked < 0		  ? op.op_wait_seconds
		     : in->ci_wait_asked > CLAIM_WAIT_MAX ? CLAIM_WAIT_MAX
							  : in->ci_wait_asked;
	why->cf_invalid = claim_args_fill(&c->cl_in.ci_token, &op,
					  c->cl_in.ci_has_fp ? c->cl_in.ci_fp : NULL,
					  in->ci_has_if_match ? &in->ci_if_match : NULL, c->cl_vkey,
					  &c->cl_args);
	if (why->cf_invalid != NULL) {
		free(c);
		return NULL;
	}
	c->cl_args.by = in->ci_by;
	c->cl_args.holder = in->ci_holder;
	c->cl_args.wait = c->cl_wait > 0;
	c->cl_job.bj_kind = BATCHER_CLAIM;
	c->cl_job.bj_claim = &c->cl_args;
	c->cl_job.bj_claim_result = &c->cl_out.co_res;
	return c;
}

/* The fingerprint the claim was made with, or NULL. */
static const uint8_t *claim_fp(const struct claim *c)
{
	return c->cl_in.ci_has_fp ? c->cl_in.ci_fp : NULL;
}

void claim_free(struct claim *c)
{
	if (c == NULL)
		return;
	free(c->cl_out.co_reply);
	store_response_free(&c->cl_out.co_res.cr_response);
	free(c);
}

enum replaycache_hit claim_cached(const struct token *t, const uint8_t *fp, int kind,
				  struct stored_response *r, char **reply, size_t *len)
{
	enum replaycache_hit hit = replaycache_lookup(t->tenant_id, t->id, fp, kind, r, reply, len);

	if (hit == REPLAYCACHE_HIT) {
		claim_count_replay(t, 0);
	} else if (hit == REPLAYCACHE_OTHER_FP) {
		metrics_duplicate(t->tenant_id, t->operation_id, METRICS_DUP_FINGERPRINT_MISMATCH);
	}
	return hit;
}

void claim_settled(const struct token *t, const uint8_t *fp, const struct claim_result *res,
		   int waited, int from_cache)
{
	switch (res->cr_outcome) {
	case CLAIM_CLAIMED:
		metrics_add(METRIC_CLAIMS, 1);
		break;
	case CLAIM_REPLAY:
		claim_count_replay(t, waited);
		if (!from_cache)
			replaycache_put(t->tenant_id, t->id, fp, &res->cr_response,
					res->cr_record_expires_at);
		break;
	case CLAIM_IN_PROGRESS:
		metrics_add(METRIC_CONFLICTS, 1);
		metrics_duplicate(t->tenant_id, t->operation_id, METRICS_DUP_IN_PROGRESS);
		break;
	case CLAIM_FINGERPRINT_MISMATCH:
		metrics_duplicate(t->tenant_id, t->operation_id, METRICS_DUP_FINGERPRINT_MISMATCH);
		break;
	case CLAIM_LEASE_SPENT:
		metrics_add(METRIC_DB_UNAVAILABLE, 1);
		break;
	default:
		break;
	}
}

/* The claim's outcome from its database step (RC) or the replay cache,
 * counted; then DONE. */
static void claim_settle(struct claim *c, int rc)
{
	const struct token *t = &c->cl_in.ci_token;
	struct claim_out *o = &c->cl_out;

	if (rc < 0) {
		o->co_outcome = OUTCOME_UNAVAILABLE;
	} else {
		/* granted too late to be used: nobody will record an answer for
		 * it, so it keeps only its lease, not this process's fence */
		if (o->co_res.cr_outcome == CLAIM_LEASE_SPENT && c->cl_args.holder != 0 &&
		    store_unfence(t->tenant_id, t->id, o->co_res.cr_attempt) < 0)
			log_warn("claim: a spent claim could not be let go (database unavailable); "
				 "it stays held until this process stops");
		o->co_outcome = claim_outcome(&o->co_res, t->key_id == 0, &o->co_values);
		claim_settled(t, claim_fp(c), &o->co_res, o->co_waited > 0, o->co_from_cache);
	}
	c->cl_done(c, o, c->cl_arg);
}

static void claim_job_done(struct batcher_job *j);

/* Waiters' thread: the record C waits for settled, or its lease or C's
 * deadline passed. Claims again, or (EXPIRED) ends in the last outcome. */
static void claim_woken(struct waiter *w, int expired)
{
	struct claim *c = IDEMD_CONTAINER_OF(w, struct claim, cl_waiter);
	struct claim_out *o = &c->cl_out;

	if (expired) {
		claim_settle(c, 0);
		return;
	}
	store_response_free(&o->co_res.cr_response);
	memset(&o->co_res, 0, sizeof(o->co_res));
	/* the instance that stored the completion holds it in its replay
	 * cache: thousands of waiters of one record are answered from there,
	 * not by as many claims in the database, and the first of them
	 * renders the reply that all the others then send */
	const struct token *t = &c->cl_in.ci_token;
	const uint8_t *fp = claim_fp(c);
	int kind = c->cl_in.ci_render != NULL ? c->cl_in.ci_kind : 0;
	struct stored_response r;
	char *reply = NULL;
	size_t len = 0;
	if (replaycache_lookup(t->tenant_id, t->id, fp, kind, &r, kind > 0 ? &reply : NULL, &len) ==
	    REPLAYCACHE_HIT) {
		if (reply == NULL && kind > 0)
			reply = claim_render_kept(t, fp, kind, c->cl_in.ci_render, &r, NULL, 0,
						  &len);
		o->co_res.cr_outcome = CLAIM_REPLAY;
		o->co_res.cr_response = r;
		o->co_reply = reply;
		o->co_reply_len = len;
		o->co_from_cache = 1;
		claim_settle(c, 0);
		return;
	}
	o->co_from_cache = 0;
	c->cl_submitted = idemd_unix_ms();
	c->cl_args.seen_ms = c->cl_submitted; /* judged as of this try */
	batcher_submit(&c->cl_job);
}

/* Batcher thread: a duplicate in progress that may wait is parked with the
 * waiters; 1 then, else 0. */
static int claim_park(struct claim *c)
{
	struct waiter *w = &c->cl_waiter;
	int64_t now = idemd_unix_ms();

	if (c->cl_job.bj_rc != 0 || c->cl_out.co_res.cr_outcome != CLAIM_IN_PROGRESS ||
	    c->cl_wait == 0 || now >= c->cl_wait_until)
		return 0;
	w->w_tenant = c->cl_in.ci_token.tenant_id;
	memcpy(w->w_id, c->cl_in.ci_token.id, sizeof(w->w_id));
	w->w_deadline_ms = c->cl_wait_until;
	/* a holder that died frees the record when its lease ends */
	w->w_retry_ms = c->cl_out.co_res.cr_lease_expires_at + 20;
	if (w->w_retry_ms > w->w_deadline_ms)
		w->w_retry_ms = w->w_deadline_ms;
	w->w_wake = claim_woken;
	if (waiters_add(w, c->cl_submitted - 1) < 0)
		return 0;
	c->cl_out.co_waited = c->cl_wait;
	store_response_free(&c->cl_out.co_res.cr_response);
	return 1;
}

/* Batcher thread: the claim's database step committed (or failed). */
static void claim_job_done(struct batcher_job *j)
{
	struct claim *c = IDEMD_CONTAINER_OF(j, struct claim, cl_job);

	if (claim_park(c))
		return;
	claim_settle(c, j->bj_rc);
}

void claim_submit(struct claim *c, claim_done_fn done, void *arg)
{
	c->cl_done = done;
	c->cl_arg = arg;
	c->cl_job.bj_done = claim_job_done;
	c->cl_submitted = idemd_unix_ms();
	c->cl_args.seen_ms = c->cl_submitted;
	c->cl_wait_until = c->cl_submitted + (int64_t)c->cl_wait * 1000;
	batcher_submit(&c->cl_job);
}
