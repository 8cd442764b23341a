/* The record engine, the claim: the replay cache, the claim's arguments
 * and checks, the batched claim with its answer on the request's thread,
 * and duplicates that wait. A record's id may come from a token, a caller
 * key (h_keys.c) or a derived gateway key: the engine does not care which.
 * engine_check.c holds the request checks, engine_complete.c the steps
 * after the claim. */
#include "engine.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <strings.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "answer.h"
#include "batcher.h"
#include "config.h"
#include "fingerprint.h"
#include "headers.h"
#include "keys.h"
#include "log.h"
#include "metrics.h"
#include "opcache.h"
#include "replaycache.h"
#include "replaycount.h"
#include "reqjson.h"
#include "versionkey.h"
#include "waiters.h"

/* The direct API's envelope of a completed claim's response (new text of
 * *LEN bytes, free with free), or NULL. */
static char *engine_replay_text(const struct stored_response *r, const struct token *t, size_t *len)
{
	(void)t;
	json_t *o = json_pack("{s:s,s:o}", "state", "completed", "response", reqjson_response(r));
	char *text = http_json_text(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY, len);

	json_decref(o);
	return text;
}

static const struct engine_replay engine_replay_direct = { ENGINE_REPLAY_DIRECT, engine_replay_text,
							   NULL };

/* Sends REPLY (an envelope of LEN bytes, taken) to a duplicate; NULL (out
 * of memory while rendering it): 503, which the client retries like any
 * other. */
static void engine_replay_send(struct request *req, char *reply, size_t len)
{
	if (reply == NULL) {
		request_unavailable(req);
		return;
	}
	http_reply_take(req, 200, "application/json", reply, len);
	http_set_header(req, "Idempotent-Replayed", "true");
}

/* Renders the envelope of T's (fingerprint FP) response R through RP and
 * keeps it in the replay cache, with the request BODY (BODY_LEN bytes) that
 * matches it, or none (NULL); the new text of *LEN bytes, or NULL. */
static char *engine_replay_render(const struct engine_replay *rp, const struct token *t,
				  const uint8_t *fp, const struct stored_response *r,
				  const char *body, size_t body_len, size_t *len)
{
	char *reply = rp->er_render(r, t, len);

	if (reply != NULL)
		replaycache_set_reply(t->tenant_id, t->id, fp, rp->er_kind, body, body_len, reply,
				      *len);
	return reply;
}

/* Answers a duplicate of T (fingerprint FP) of a completed claim from its
 * response R through RP: with REPLY (taken) when the replay cache held the
 * envelope, else renders it and keeps it there. The direct API's also
 * keeps this request's body, so that the same bytes next time are
 * answered by engine_replay_raw(). */
static void engine_replay_answer(struct request *req, const struct engine_replay *rp,
				 const struct token *t, const uint8_t *fp,
				 const struct stored_response *r, char *reply, size_t len)
{
	const char *body = NULL;

	if (rp->er_render == NULL) {
		free(reply);
		rp->er_send(req, r);
		return;
	}
	if (rp->er_kind == ENGINE_REPLAY_DIRECT)
		body = req->req_body != NULL ? req->req_body : "";
	if (reply == NULL)
		reply = engine_replay_render(rp, t, fp, r, body, req->req_body_len, &len);
	else if (body != NULL)
		replaycache_set_reply(t->tenant_id, t->id, fp, rp->er_kind, body, req->req_body_len,
				      reply, len);
	engine_replay_send(req, reply, len);
}

void engine_count_replay(const struct token *t, int waited)
{
	replaycount_add(t->tenant_id, t->id);
	metrics_duplicate(t->tenant_id, t->operation_id,
			  waited ? METRICS_DUP_WAITED : METRICS_DUP_REPLAYED);
}

int engine_replay_raw(struct request *req, const struct token *t)
{
	char *reply;
	size_t len;

	http_note_record(req, t->id);
	if (replaycache_get_raw(t->tenant_id, t->id, ENGINE_REPLAY_DIRECT,
				req->req_body ? req->req_body : "", req->req_body_len, &reply,
				&len) != REPLAYCACHE_HIT)
		return 0;
	metrics_add(METRIC_REPLAYS, 1);
	engine_count_replay(t, 0);
	http_reply_take(req, 200, "application/json", reply, len);
	http_set_header(req, "Idempotent-Replayed", "true");
	return -1;
}

/* A claim on its way through the database. */
#define ENGINE_WAIT_MAX 60

struct engine_claim {
	struct batcher_job tc_job;
	struct request *tc_req;
	struct token tc_token;
	int tc_has_fp;
	uint8_t tc_fp[STORE_HASH_BYTES];
	char tc_vkey[VERSIONKEY_MAX + 1];
	struct claim_args tc_args;
	struct claim_result tc_res;
	const struct engine_replay *tc_replay;
	char *tc_reply; /* the envelope, when a waiter found it in the replay cache */
	size_t tc_reply_len;
	engine_claimed_fn tc_claimed;
	void *tc_arg;
	int tc_answer_later;   /* CLAIMED never keeps the connection */
	int tc_wait;	       /* seconds a duplicate in progress may wait (0: 409) */
	int64_t tc_wait_until; /* unix ms */
	int64_t tc_submitted;  /* unix ms: when the claim last went to the batcher */
	struct waiter tc_waiter;
	int tc_from_cache; /* tc_res is a replay found in the replay cache */
};

/* A replay wins over a version check, not over a malformed header: 0, or
 * -1 after replying 400. */
static int engine_if_match_check(struct request *req)
{
	const char *im = req->req_no_if_match ? NULL : http_header(req, "If-Match");
	int64_t v;

	if (im != NULL && reqjson_etag(im, &v) < 0) {
		request_fail(req, 400, "invalid_request",
			     "If-Match must be one strong ETag like \"7\"");
		return -1;
	}
	return 0;
}

int engine_replay_alias(struct request *req, const struct token *t, const uint8_t *alias,
			const struct engine_replay *replay)
{
	struct stored_response r;

	if (replay->er_render != NULL ||
	    replaycache_get_alias(t->tenant_id, t->id, alias, &r) != REPLAYCACHE_HIT)
		return 0;
	if (engine_if_match_check(req) == 0) {
		http_note_record(req, t->id);
		metrics_add(METRIC_REPLAYS, 1);
		engine_count_replay(t, 0);
		replay->er_send(req, &r);
	}
	store_response_free(&r);
	return -1;
}

int engine_claim_cached(struct request *req, const struct token *t, const uint8_t *fp,
			const struct engine_replay *replay)
{
	return engine_claim_cached_as(req, t, fp, NULL, replay);
}

int engine_claim_cached_as(struct request *req, const struct token *t, const uint8_t *fp,
			   const uint8_t *alias, const struct engine_replay *replay)
{
	const struct engine_replay *rp = replay != NULL ? replay : &engine_replay_direct;
	struct stored_response r;
	char *reply = NULL;
	size_t reply_len = 0;

	if (engine_if_match_check(req) < 0)
		return -1;
	enum replaycache_hit cached = replaycache_lookup(t->tenant_id, t->id, fp, rp->er_kind, &r,
							 rp->er_render != NULL ? &reply : NULL,
							 &reply_len);

	http_note_record(req, t->id);
	if (cached == REPLAYCACHE_HIT) {
		if (alias != NULL)
			replaycache_set_alias(t->tenant_id, t->id, fp, alias);
		metrics_add(METRIC_REPLAYS, 1);
		engine_count_replay(t, 0);
		engine_replay_answer(req, rp, t, fp, &r, reply, reply_len);
		store_response_free(&r);
		return -1;
	}
	if (cached == REPLAYCACHE_OTHER_FP) {
		metrics_duplicate(t->tenant_id, t->operation_id, METRICS_DUP_FINGERPRINT_MISMATCH);
		answer_problem(req, OUTCOME_FINGERPRINT_MISMATCH, NULL);
		return -1;
	}
	return 0;
}

/* See engine.h. A points into T, FP and VKEY: they must not move while A
 * is in use. */
const char *engine_claim_args(const struct token *t, const struct operation *op, const uint8_t *fp,
			      const char *if_match, char vkey[VERSIONKEY_MAX + 1],
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
	a->seen_ms = idemd_unix_ms();
	/* a malformed If-Match is refused whether or not a counter is guarded */
	if (if_match != NULL && reqjson_etag(if_match, &a->expected) < 0)
		return "If-Match must be one strong ETag like \"7\"";
	a->expected = 0;
	if (!op->op_has_version_key)
		return NULL;
	if (t->subject_len == 0)
		return "this operation guards a version counter: send the subject that fills it";
	if (versionkey_expand(op->op_version_key, t->subject, vkey, VERSIONKEY_MAX + 1) < 0)
		return "the subject cannot form the operation's version key";
	a->version_key = vkey;
	a->require_version = op->op_require_version;
	if (if_match != NULL) {
		if (reqjson_etag(if_match, &a->expected) < 0)
			return "If-Match must be one strong ETag like \"7\"";
		a->has_expected = 1;
	} else if (t->has_version) {
		a->expected = (int64_t)t->version;
		a->has_expected = 1;
	}
	return NULL;
}

/* How long a duplicate of an in-progress claim waits: Prefer: wait=N
 * (RFC 7240; at most 60), else the operation's wait_seconds. */
static int engine_wait_seconds(struct request *req, const struct operation *op)
{
	const char *p = http_header(req, "Prefer");

	while (p != NULL && *p != '\0') {
		p += strspn(p, " \t,;");
		if (strncasecmp(p, "wait", 4) == 0) {
			const char *v = p + 4;
			v += strspn(v, " \t");
			if (*v == '=') {
				v += 1 + strspn(v + 1, " \t\"");
				long n = strspn(v, "0123456789") > 0 ? strtol(v, NULL, 10) : -1;
				if (n >= 0)
					return n > ENGINE_WAIT_MAX ? ENGINE_WAIT_MAX : (int)n;
			}
		}
		p += strcspn(p, ",;");
	}
	return op->op_wait_seconds;
}

/* The claim's policy and arguments into C: 0, or -1 after replying. */
static int engine_claim_prepare(struct request *req, struct engine_claim *c)
{
	const struct token *t = &c->tc_token;
	struct operation op;
	int found;

	if (opcache_by_id(t->operation_id, &op, &found) < 0) {
		request_unavailable(req);
		return -1;
	}
	if (!found || op.op_tenant_id != t->tenant_id) {
		answer_problem(req, OUTCOME_OPERATION_UNKNOWN, NULL);
		return -1;
	}
	c->tc_wait = engine_wait_seconds(req, &op);
	const char *why =
		engine_claim_args(t, &op, c->tc_has_fp ? c->tc_fp : NULL,
				  req->req_no_if_match ? NULL : http_header(req, "If-Match"),
				  c->tc_vkey, &c->tc_args);
	if (why != NULL) {
		request_fail(req, 400, "invalid_request", "%s", why);
		return -1;
	}
	c->tc_args.by = req->req_by;
	c->tc_args.wait = c->tc_wait > 0;
	return 0;
}

enum outcome engine_claim_outcome(const struct claim_result *res, int is_key,
				  struct outcome_values *v)
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

	v->ov_retry_after = res->cr_retry_after;
	v->ov_version = res->cr_current_version;
	v->ov_attempt = res->cr_attempt;
	/* a caller key's life starts with each claim: an expired one reached
	 * the database too late for it (a token's expiry is its own) */
	if (res->cr_outcome == CLAIM_EXPIRED && is_key)
		return OUTCOME_KEY_LIFE_SPENT;
	return outcomes[res->cr_outcome];
}

/* Answers every outcome of the database step but CLAIM_CLAIMED: returns 0
 * for that one (nothing replied), else -1 after replying. */
static int engine_claim_answer(struct request *req, struct engine_claim *c, int rc)
{
	const struct token *t = &c->tc_token;
	struct claim_result *res = &c->tc_res;
	int ret = -1;

	if (rc < 0) {
		request_unavailable(req);
		return -1;
	}
	switch (res->cr_outcome) {
	case CLAIM_CLAIMED:
		metrics_add(METRIC_CLAIMS, 1);
		ret = 0;
		break;
	case CLAIM_REPLAY:
		metrics_add(METRIC_REPLAYS, 1);
		engine_count_replay(t, req->req_waited > 0);
		if (!c->tc_from_cache)
			replaycache_put(t->tenant_id, t->id, c->tc_has_fp ? c->tc_fp : NULL,
					&res->cr_response, res->cr_record_expires_at);
		engine_replay_answer(req, c->tc_replay, t, c->tc_has_fp ? c->tc_fp : NULL,
				     &res->cr_response, c->tc_reply, c->tc_reply_len);
		c->tc_reply = NULL;
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
	if (res->cr_outcome != CLAIM_CLAIMED && res->cr_outcome != CLAIM_REPLAY) {
		struct outcome_values v;
		answer_problem(req, engine_claim_outcome(res, t->key_id == 0, &v), &v);
	}
	store_response_free(&res->cr_response);
	return ret;
}

const char *engine_record_state(const struct record_view *rv, int64_t now_ms, int lapsed)
{
	if (strcmp(rv->rv_state, "completed") == 0 || strcmp(rv->rv_state, "revoked") == 0)
		return rv->rv_state;
	if (strcmp(rv->rv_state, "in_progress") == 0) {
		if (rv->rv_lease_expires_at > now_ms)
			return "in_progress";
		if (lapsed)
			return "lease_expired";
	}
	return "issued";
}

void engine_record_fields(json_t *o, const struct record_view *rv, const char *state)
{
	if (o == NULL)
		return;
	if (strcmp(state, "in_progress") == 0 || strcmp(state, "lease_expired") == 0)
		json_object_set_new(o, "lease_expires_at", rfc3339_json(rv->rv_lease_expires_at));
	if (strcmp(state, "completed") == 0)
		json_object_set_new(o, "response", reqjson_response(&rv->rv_response));
	if (rv->rv_checkpoint_phase != NULL)
		json_object_set_new(o, "checkpoint", engine_checkpoint_json(rv));
}

json_t *engine_checkpoint_json(const struct record_view *rv)
{
	json_t *data = NULL;

	if (rv->rv_checkpoint_phase == NULL)
		return NULL;
	if (rv->rv_checkpoint_data != NULL)
		data = json_loads(rv->rv_checkpoint_data, JSON_DECODE_ANY, NULL);
	return json_pack("{s:s,s:o,s:i}", "phase", rv->rv_checkpoint_phase, "data",
			 data ? data : json_null(), "attempt", rv->rv_checkpoint_attempt);
}

/* The latest checkpoint of T's record, or NULL (none, or the database did
 * not answer: the takeover then starts from the beginning, logged). */
static json_t *engine_checkpoint_read(const struct token *t)
{
	struct record_view rv;

	if (store_record_get(t->tenant_id, t->id, &rv) < 0) {
		log_warn("claim: the checkpoint of a taken-over record could not be read");
		return NULL;
	}
	json_t *cp = engine_checkpoint_json(&rv);
	store_record_view_free(&rv);
	return cp;
}

static struct engine_claim *engine_claim_new(struct request *req, const struct token *t,
					     const uint8_t *fp, const struct engine_replay *replay)
{
	struct engine_claim *c = calloc(1, sizeof(*c));

	if (c == NULL) {
		request_unavailable(req);
		return NULL;
	}
	c->tc_req = req;
	c->tc_token = *t;
	c->tc_has_fp = fp != NULL;
	if (fp != NULL)
		memcpy(c->tc_fp, fp, STORE_HASH_BYTES);
	c->tc_replay = replay != NULL ? replay : &engine_replay_direct;
	c->tc_job.bj_kind = BATCHER_CLAIM;
	c->tc_job.bj_claim = &c->tc_args;
	c->tc_job.bj_claim_result = &c->tc_res;
	return c;
}

static void engine_claim_free(struct engine_claim *c)
{
	free(c->tc_reply);
	free(c);
}

/* The claim's answer, built on the thread that then sends it. */
static void engine_claim_finish(struct request *req, void *arg)
{
	struct engine_claim *c = arg;

	if (engine_claim_answer(req, c, c->tc_job.bj_rc) == 0) {
		/* a takeover resumes from the last recovery point */
		if (c->tc_res.cr_attempt > 1)
			c->tc_res.cr_checkpoint = engine_checkpoint_read(&c->tc_token);
		(void)c->tc_claimed(req, &c->tc_res, c->tc_arg);
		json_decref(c->tc_res.cr_checkpoint);
	} else {
		(void)c->tc_claimed(req, NULL, c->tc_arg);
	}
	engine_claim_free(c);
}

/* Batcher thread: the claim's result is committed. A granted claim whose
 * CLAIMED may keep the connection (the gateway's forward) goes on here;
 * every other is resumed at once and answered on its request's thread (the
 * one thread that answers), so that the batcher is free for the next batch
 * sooner. */
static void engine_claim_done(struct batcher_job *j);

/* Waiters' thread: the record C waits for settled, or its lease or C's
 * deadline passed. Claims again, or (EXPIRED) answers 409. */
static void engine_woken(struct waiter *w, int expired)
{
	struct engine_claim *c = IDEMD_CONTAINER_OF(w, struct engine_claim, tc_waiter);

	if (expired) {
		http_resume_then(c->tc_req, engine_claim_finish, c);
		return;
	}
	store_response_free(&c->tc_res.cr_response);
	memset(&c->tc_res, 0, sizeof(c->tc_res));
	/* the instance that stored the completion holds it in its replay
	 * cache: thousands of waiters of one record are answered from there,
	 * not by as many claims in the database, and the first of them
	 * renders the envelope that all the others then send */
	const struct engine_replay *rp = c->tc_replay;
	const uint8_t *fp = c->tc_has_fp ? c->tc_fp : NULL;
	struct stored_response r;
	char *reply = NULL;
	size_t len = 0;
	if (replaycache_lookup(c->tc_token.tenant_id, c->tc_token.id, fp, rp->er_kind, &r,
			       rp->er_render != NULL ? &reply : NULL, &len) == REPLAYCACHE_HIT) {
		if (reply == NULL && rp->er_render != NULL)
			reply = engine_replay_render(rp, &c->tc_token, fp, &r, NULL, 0, &len);
		c->tc_res.cr_outcome = CLAIM_REPLAY;
		c->tc_res.cr_response = r;
		c->tc_reply = reply;
		c->tc_reply_len = len;
		c->tc_from_cache = 1;
		c->tc_job.bj_rc = 0;
		engine_claim_done(&c->tc_job);
		return;
	}
	c->tc_from_cache = 0;
	c->tc_submitted = idemd_unix_ms();
	c->tc_args.seen_ms = c->tc_submitted; /* judged as of this try */
	batcher_submit(&c->tc_job);
}

/* Batcher thread: a duplicate in progress that may wait is parked with the
 * waiters; 1 then (the connection stays suspended), else 0. */
static int engine_wait(struct engine_claim *c)
{
	struct waiter *w = &c->tc_waiter;
	int64_t now = idemd_unix_ms();

	if (c->tc_job.bj_rc != 0 || c->tc_res.cr_outcome != CLAIM_IN_PROGRESS || c->tc_wait == 0 ||
	    now >= c->tc_wait_until)
		return 0;
	w->w_tenant = c->tc_token.tenant_id;
	memcpy(w->w_id, c->tc_token.id, sizeof(w->w_id));
	w->w_deadline_ms = c->tc_wait_until;
	/* a holder that died frees the record when its lease ends */
	w->w_retry_ms = c->tc_res.cr_lease_expires_at + 20;
	if (w->w_retry_ms > w->w_deadline_ms)
		w->w_retry_ms = w->w_deadline_ms;
	w->w_wake = engine_woken;
	if (waiters_add(w, c->tc_submitted - 1) < 0)
		return 0;
	c->tc_req->req_waited = c->tc_wait;
	store_response_free(&c->tc_res.cr_response);
	return 1;
}

static void engine_claim_done(struct batcher_job *j)
{
	struct engine_claim *c = IDEMD_CONTAINER_OF(j, struct engine_claim, tc_job);
	struct request *req = c->tc_req;
	int keep = 0;

	if (engine_wait(c))
		return;

	/* every answer is built on the request's own thread */
	if (c->tc_answer_later || j->bj_rc != 0 || c->tc_res.cr_outcome != CLAIM_CLAIMED) {
		http_resume_then(req, engine_claim_finish, c);
		return;
	}
	/* a granted claim whose CLAIMED may keep the connection (the gateway
	 * starts its forward) goes on here; nothing is answered yet */
	(void)engine_claim_answer(req, c, 0);
	keep = c->tc_claimed(req, &c->tc_res, c->tc_arg);
	engine_claim_free(c);
	if (!keep)
		http_resume(req);
}

int engine_claim(struct request *req, const struct token *t, const uint8_t *fp,
		 const struct engine_replay *replay, engine_claimed_fn claimed, int keeps,
		 void *arg)
{
	if (engine_claim_quota(req, 1) < 0)
		return -1;
	struct engine_claim *c = engine_claim_new(req, t, fp, replay);

	if (c == NULL)
		return -1;
	if (engine_claim_prepare(req, c) < 0) {
		engine_claim_free(c);
		return -1;
	}
	c->tc_claimed = claimed;
	c->tc_arg = arg;
	c->tc_answer_later = keeps == 0;
	c->tc_job.bj_done = engine_claim_done;
	c->tc_submitted = idemd_unix_ms();
	c->tc_args.seen_ms = c->tc_submitted;
	c->tc_wait_until = c->tc_submitted + (int64_t)c->tc_wait * 1000;
	http_suspend(req);
	batcher_submit(&c->tc_job);
	return 0;
}
