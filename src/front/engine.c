/* The record engine's side of a request's claim: the request's checks
 * (a token's verification, a claim body's fingerprint, a stored headers
 * object, the per-tenant quotas of token issuance and claims), the replay
 * cache before the claim, a request turned into a claim (claim.c, the
 * core, which knows nothing of HTTP: its arguments, the batched database
 * step, the waits, the outcome), and the outcome turned into the answer on
 * the request's thread. A record's id may come from a token, a caller key
 * (h_keys.c) or a derived gateway key: the engine does not care which.
 * engine_complete.c holds the steps after the claim. */
#include "engine.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "answer.h"
#include "claim.h"
#include "config.h"
#include "fingerprint.h"
#include "headers.h"
#include "keys.h"
#include "log.h"
#include "metrics.h"
#include "replaycache.h"
#include "reqjson.h"
#include "store_fence.h"

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
		reply = claim_render_kept(t, fp, rp->er_kind, rp->er_render, r, body,
					  req->req_body_len, &len);
	else if (body != NULL)
		replaycache_set_reply(t->tenant_id, t->id, fp, rp->er_kind, body, req->req_body_len,
				      reply, len);
	engine_replay_send(req, reply, len);
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
	claim_count_replay(t, 0);
	http_reply_take(req, 200, "application/json", reply, len);
	http_set_header(req, "Idempotent-Replayed", "true");
	return -1;
}

/* A request's claim: the core's claim (claim.c) and what answering it
 * needs. */
struct engine_call {
	struct request *ec_req;
	struct claim *ec_claim;
	struct claim_out *ec_out; /* the claim's, once it has its outcome */
	struct token ec_token;	  /* the record */
	const uint8_t *ec_fp;	  /* NULL, or ec_fp_buf: the claim's fingerprint */
	uint8_t ec_fp_buf[STORE_HASH_BYTES];
	const struct engine_replay *ec_replay;
	engine_claimed_fn ec_claimed;
	void *ec_arg;
	int ec_keeps; /* CLAIMED may keep the connection (runs on the batcher) */
};

/* The request's If-Match (a route may ignore it) into *HAS and *V: 0, or
 * -1 after replying 400 when it is not one strong ETag. A replay wins over
 * a version check, not over a malformed header. */
static int engine_if_match(struct request *req, int *has, int64_t *v)
{
	const char *im = req->req_no_if_match ? NULL : req->req_h_if_match;

	*has = im != NULL;
	if (im != NULL && reqjson_etag(im, v) < 0) {
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
	int has;
	int64_t v;
	if (engine_if_match(req, &has, &v) == 0) {
		http_note_record(req, t->id);
		claim_count_replay(t, 0);
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
	int has;
	int64_t v;

	if (engine_if_match(req, &has, &v) < 0)
		return -1;
	enum replaycache_hit cached = claim_cached(
		t, fp, rp->er_kind, &r, rp->er_render != NULL ? &reply : NULL, &reply_len);

	http_note_record(req, t->id);
	if (cached == REPLAYCACHE_HIT) {
		if (alias != NULL)
			replaycache_set_alias(t->tenant_id, t->id, fp, alias);
		engine_replay_answer(req, rp, t, fp, &r, reply, reply_len);
		store_response_free(&r);
		return -1;
	}
	if (cached == REPLAYCACHE_OTHER_FP) {
		answer_problem(req, OUTCOME_FINGERPRINT_MISMATCH, NULL);
		return -1;
	}
	return 0;
}

/* The wait the request asks for a duplicate in progress: Prefer: wait=N
 * (RFC 7240), or -1 (none: the operation's). */
static int engine_wait_asked(struct request *req)
{
	const char *p = req->req_h_prefer;

	while (p != NULL && *p != '\0') {
		p += strspn(p, " \t,;");
		if (strncasecmp(p, "wait", 4) == 0) {
			const char *v = p + 4;
			v += strspn(v, " \t");
			if (*v == '=') {
				v += 1 + strspn(v + 1, " \t\"");
				long n = strspn(v, "0123456789") > 0 ? strtol(v, NULL, 10) : -1;
				if (n >= 0)
					return n > INT32_MAX ? INT32_MAX : (int)n;
			}
		}
		p += strcspn(p, ",;");
	}
	return -1;
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

/* Answers the claim's outcome on the request's thread: a granted claim by
 * CLAIMED, a replay with its stored response, any other through the
 * outcome table (CLAIMED then runs without a claim). */
static void engine_call_answer(struct request *req, struct engine_call *ec)
{
	struct claim_out *o = ec->ec_out;
	const struct token *t = &ec->ec_token;

	switch (o->co_outcome) {
	case OUTCOME_CLAIMED:
		/* a takeover resumes from the last recovery point */
		if (o->co_res.cr_attempt > 1)
			o->co_res.cr_checkpoint = engine_checkpoint_read(t);
		(void)ec->ec_claimed(req, &o->co_res, ec->ec_arg);
		json_decref(o->co_res.cr_checkpoint);
		o->co_res.cr_checkpoint = NULL;
		return;
	case OUTCOME_REPLAY:
		engine_replay_answer(req, ec->ec_replay, t, ec->ec_fp, &o->co_res.cr_response,
				     o->co_reply, o->co_reply_len);
		o->co_reply = NULL;
		break;
	default:
		answer_problem(req, o->co_outcome, &o->co_values);
		break;
	}
	(void)ec->ec_claimed(req, NULL, ec->ec_arg);
}

static void engine_call_free(struct engine_call *ec)
{
	claim_free(ec->ec_claim);
	free(ec);
}

/* Request thread: the claim's answer, built where it is sent. */
static void engine_call_finish(struct request *req, void *arg)
{
	struct engine_call *ec = arg;

	engine_call_answer(req, ec);
	engine_call_free(ec);
}

/* Batcher or waiters' thread: the claim has its outcome. A granted claim
 * whose CLAIMED may keep the connection (the gateway's forward) goes on
 * here; every other is resumed at once and answered on its request's
 * thread (the one thread that answers), so that the batcher is free for
 * the next batch sooner. */
static void engine_call_done(struct claim *c, struct claim_out *o, void *arg)
{
	struct engine_call *ec = arg;
	struct request *req = ec->ec_req;

	(void)c;
	ec->ec_out = o;
	req->req_waited = o->co_waited;
	if (!ec->ec_keeps || o->co_outcome != OUTCOME_CLAIMED) {
		http_resume_then(req, engine_call_finish, ec);
		return;
	}
	/* nothing is answered here */
	int keep = ec->ec_claimed(req, &o->co_res, ec->ec_arg);
	engine_call_free(ec);
	if (!keep)
		http_resume(req);
}

int engine_claim(struct request *req, const struct token *t, const struct operation *op,
		 const uint8_t *fp, const struct engine_replay *replay, engine_claimed_fn claimed,
		 int keeps, void *arg)
{
	const struct engine_replay *rp = replay != NULL ? replay : &engine_replay_direct;
	struct claim_in in = {
		.ci_token = *t,
		.ci_op = op,
		.ci_has_fp = fp != NULL,
		.ci_wait_asked = engine_wait_asked(req),
		.ci_by = req->req_by,
		.ci_kind = rp->er_kind,
		.ci_render = rp->er_render,
	};
	struct claim_refusal why;
	struct engine_call *ec;

	if (engine_claim_quota(req, 1) < 0 ||
	    engine_if_match(req, &in.ci_has_if_match, &in.ci_if_match) < 0)
		return -1;
	/* idemd holds what it forwards: the record is fenced by this
	 * process's life, never claimed without that fence */
	if (keeps && (in.ci_holder = store_fence_holder()) == 0) {
		request_unavailable(req);
		return -1;
	}
	if (fp != NULL)
		memcpy(in.ci_fp, fp, STORE_HASH_BYTES);
	ec = calloc(1, sizeof(*ec));
	if (ec == NULL) {
		request_unavailable(req);
		return -1;
	}
	ec->ec_claim = claim_new(&in, &why);
	if (ec->ec_claim == NULL) {
		free(ec);
		if (why.cf_invalid != NULL)
			request_fail(req, 400, "invalid_request", "%s", why.cf_invalid);
		else
			answer_problem(req, why.cf_outcome, NULL);
		return -1;
	}
	ec->ec_req = req;
	ec->ec_token = *t;
	if (fp != NULL)
		ec->ec_fp = memcpy(ec->ec_fp_buf, fp, STORE_HASH_BYTES);
	ec->ec_replay = rp;
	ec->ec_claimed = claimed;
	ec->ec_arg = arg;
	ec->ec_keeps = keeps;
	http_suspend(req);
	claim_submit(ec->ec_claim, engine_call_done, ec);
	return 0;
}

/* ---------------------------------------------------------------- checks */

#define ENGINE_RATE_SLOTS 4096
#define ENGINE_RATE_PROBES 8

static const struct config *_Atomic engine_cfg; /* swapped on a reload */

/* One token bucket per tenant, in a table probed from the tenant's id. */
struct engine_bucket {
	uint32_t tb_tenant_id;
	double tb_tokens;
	double tb_last;
};

static pthread_mutex_t engine_rate_lock = PTHREAD_MUTEX_INITIALIZER;
static struct engine_bucket engine_issue_buckets[ENGINE_RATE_SLOTS];
static struct engine_bucket engine_claim_buckets[ENGINE_RATE_SLOTS];

void engine_init(const struct config *cfg)
{
	engine_cfg = cfg;
}

int engine_verify(struct request *req, const char *text, struct token *t)
{
	size_t len = strlen(text);

	if (len == 0 || len > TOKEN_MAX_CHARS) {
		answer_problem(req, OUTCOME_TOKEN_MALFORMED, NULL);
		return -1;
	}
	int rc = keys_verify_token(text, len, t);
	if (rc == TOKEN_MALFORMED) {
		answer_problem(req, OUTCOME_TOKEN_MALFORMED, NULL);
		return -1;
	}
	if (rc != TOKEN_OK) {
		answer_problem(req, OUTCOME_TOKEN_INVALID, NULL);
		return -1;
	}
	if (t->tenant_id != req->req_tenant_id) {
		answer_problem(req, OUTCOME_TOKEN_OTHER_TENANT, NULL);
		return -1;
	}
	return 0;
}

int engine_from_path(struct request *req, struct token *t)
{
	if (strlen(req->req_params[0]) != req->req_param_lens[0]) {
		answer_problem(req, OUTCOME_TOKEN_MALFORMED, NULL);
		return -1;
	}
	if (engine_verify(req, req->req_params[0], t) < 0)
		return -1;
	http_note_record(req, t->id);
	return 0;
}

static double engine_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The tenant's bucket: its own if it has one among the probed slots, else a
 * free slot, else the one idle longest (only then does a tenant's bucket
 * start over). Called with the lock held. */
static struct engine_bucket *engine_bucket_of(struct engine_bucket *table, uint32_t tenant_id)
{
	struct engine_bucket *pick = NULL;

	for (size_t i = 0; i < ENGINE_RATE_PROBES; i++) {
		struct engine_bucket *b = &table[(tenant_id + i) % ENGINE_RATE_SLOTS];
		if (b->tb_last != 0 && b->tb_tenant_id == tenant_id)
			return b;
		if (pick == NULL || (pick->tb_last != 0 && b->tb_last < pick->tb_last))
			pick = b;
	}
	return pick;
}

/* Takes N from the tenant's bucket in TABLE (RATE per second, BURST): 0,
 * or -1 after replying 429 rate_limited (WHAT is limited) with Retry-After. */
static int engine_quota(struct request *req, struct engine_bucket *table, double rate, double burst,
			int n, const char *what)
{
	if (rate <= 0)
		return 0;
	double now = engine_now(), wait = 0;
	pthread_mutex_lock(&engine_rate_lock);
	struct engine_bucket *s = engine_bucket_of(table, req->req_tenant_id);
	if (s->tb_tenant_id != req->req_tenant_id || s->tb_last == 0) {
		s->tb_tenant_id = req->req_tenant_id;
		s->tb_tokens = burst;
		s->tb_last = now;
	}
	s->tb_tokens = fmin(burst, s->tb_tokens + (now - s->tb_last) * rate);
	s->tb_last = now;
	/* a batch larger than the burst goes from a full bucket and leaves it in
	 * debt, so batches cannot get round the rate */
	double need = fmin((double)n, burst);
	if (s->tb_tokens >= need)
		s->tb_tokens -= (double)n;
	else
		wait = (need - s->tb_tokens) / rate;
	pthread_mutex_unlock(&engine_rate_lock);
	if (wait == 0)
		return 0;
	char after[16];
	snprintf(after, sizeof(after), "%d", (int)ceil(wait));
	request_fail(req, 429, "rate_limited", "%s is limited to %g per second for this tenant",
		     what, rate);
	http_set_header(req, "Retry-After", after);
	return -1;
}

int engine_rate_check(struct request *req, int n)
{
	if (engine_cfg == NULL)
		return 0;
	return engine_quota(req, engine_issue_buckets, engine_cfg->issue_rate_per_second,
			    engine_cfg->issue_burst, n, "token issuance");
}

int engine_claim_quota(struct request *req, int n)
{
	if (engine_cfg == NULL)
		return 0;
	return engine_quota(req, engine_claim_buckets, engine_cfg->claim_rate_per_second,
			    engine_cfg->claim_burst, n, "claiming records");
}

int engine_fingerprint_why(json_t *body, uint8_t fp[STORE_HASH_BYTES], int *has_fp,
			   char why[REQJSON_WHY])
{
	const char *text;

	*has_fp = 0;
	if (reqjson_string_why(body, "fingerprint", 0, 1, 1024, &text, why) < 0)
		return -1;
	if (text != NULL) {
		fingerprint_of_string(text, strlen(text), fp);
		*has_fp = 1;
	} else if (json_object_get(body, "request") != NULL) {
		if (fingerprint_of_json(json_object_get(body, "request"), fp) < 0) {
			why[0] = '\0';
			return -1;
		}
		*has_fp = 1;
	}
	return 0;
}

int engine_fingerprint(struct request *req, json_t *body, uint8_t fp[STORE_HASH_BYTES], int *has_fp)
{
	char why[REQJSON_WHY];

	return reqjson_refused(req, engine_fingerprint_why(body, fp, has_fp, why), why);
}

int engine_check_headers_why(json_t *headers, size_t max, char why[REQJSON_WHY])
{
	const char *name;
	json_t *value;

	if (!json_is_object(headers) || json_object_size(headers) > max)
		return reqjson_why(why, "headers must be an object of at most %zu string values",
				   max);
	json_object_foreach(headers, name, value)
	{
		size_t n = strlen(name);
		if (n == 0 || n > 128 ||
		    strspn(name, "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
				 "abcdefghijklmnopqrstuvwxyz") != n)
			return reqjson_why(why, "a header name is not a valid token");
		if (headers_never_stored(name))
			return reqjson_why(why,
					   "header %s cannot be stored: hop-by-hop, framing, "
					   "Access-Control-*, Set-Cookie and idemd's own headers "
					   "never are",
					   name);
		const char *v = json_string_value(value);
		if (v == NULL || json_string_length(value) > 8192 ||
		    !headers_value_ok(v, json_string_length(value)))
			return reqjson_why(why, "header values must be strings without control "
						"characters (at most 8192 bytes)");
	}
	return 0;
}
