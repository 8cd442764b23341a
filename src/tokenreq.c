/* Record requests: token verification and scope, then the claim, complete
 * and release of a record, whichever way its id was made (a token, or a
 * caller key: h_keys.c), and the per-tenant issuance rate limit (a token
 * bucket per tenant slot). */
#include "tokenreq.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <strings.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "batcher.h"
#include "config.h"
#include "fingerprint.h"
#include "headers.h"
#include "keys.h"
#include "log.h"
#include "metrics.h"
#include "opcache.h"
#include "problem.h"
#include "replaycache.h"
#include "replaycount.h"
#include "reqjson.h"
#include "versionkey.h"
#include "waiters.h"

#define TOKENREQ_RATE_SLOTS 4096
#define TOKENREQ_RATE_PROBES 8

static const struct config *tokenreq_cfg;

/* One token bucket per tenant, in a table probed from the tenant's id. */
struct tokenreq_bucket {
	uint32_t tb_tenant_id;
	double tb_tokens;
	double tb_last;
};

static pthread_mutex_t tokenreq_rate_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tokenreq_bucket tokenreq_buckets[TOKENREQ_RATE_SLOTS];

void tokenreq_init(const struct config *cfg)
{
	tokenreq_cfg = cfg;
}

int tokenreq_verify(struct request *req, const char *text, struct token *t)
{
	size_t len = strlen(text);

	if (len == 0 || len > TOKEN_MAX_CHARS) {
		problem_reply(req, 400, "token_malformed", "the token is not a valid idemd token");
		return -1;
	}
	int rc = keys_verify_token(text, len, t);
	if (rc == TOKEN_MALFORMED) {
		problem_reply(req, 400, "token_malformed", "the token is not a valid idemd token");
		return -1;
	}
	if (rc != TOKEN_OK) {
		problem_reply(req, 403, "token_invalid", "the token's signature does not verify");
		return -1;
	}
	if (t->tenant_id != req->req_tenant_id) {
		problem_reply(req, 403, "token_scope_mismatch", "the token belongs to another tenant");
		return -1;
	}
	return 0;
}

int tokenreq_from_path(struct request *req, struct token *t)
{
	if (strlen(req->req_params[0]) != req->req_param_lens[0]) {
		problem_reply(req, 400, "token_malformed", "the token is not a valid idemd token");
		return -1;
	}
	if (tokenreq_verify(req, req->req_params[0], t) < 0)
		return -1;
	http_note_record(req, t->id);
	return 0;
}

static double tokenreq_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The tenant's bucket: its own if it has one among the probed slots, else a
 * free slot, else the one idle longest (only then does a tenant's bucket
 * start over). Called with the lock held. */
static struct tokenreq_bucket *tokenreq_bucket_of(uint32_t tenant_id)
{
	struct tokenreq_bucket *pick = NULL;

	for (size_t i = 0; i < TOKENREQ_RATE_PROBES; i++) {
		struct tokenreq_bucket *b =
			&tokenreq_buckets[(tenant_id + i) % TOKENREQ_RATE_SLOTS];
		if (b->tb_last != 0 && b->tb_tenant_id == tenant_id)
			return b;
		if (pick == NULL || (pick->tb_last != 0 && b->tb_last < pick->tb_last))
			pick = b;
	}
	return pick;
}

int tokenreq_rate_allow(struct request *req, int n)
{
	double rate = tokenreq_cfg ? tokenreq_cfg->issue_rate_per_second : 0;

	if (rate <= 0)
		return 1;
	double burst = tokenreq_cfg->issue_burst, now = tokenreq_now(), wait = 0;
	pthread_mutex_lock(&tokenreq_rate_lock);
	struct tokenreq_bucket *s = tokenreq_bucket_of(req->req_tenant_id);
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
	pthread_mutex_unlock(&tokenreq_rate_lock);
	if (wait == 0)
		return 1;
	char after[16];
	snprintf(after, sizeof(after), "%d", (int)ceil(wait));
	problem_reply(req, 429, "rate_limited", "token issuance is limited to %g per second",
		      rate);
	http_set_header(req, "Retry-After", after);
	return 0;
}

int tokenreq_fingerprint(struct request *req, json_t *body, uint8_t fp[STORE_HASH_BYTES],
			 int *has_fp)
{
	const char *text;

	*has_fp = 0;
	if (reqjson_string(req, body, "fingerprint", 0, 1, 1024, &text) < 0)
		return -1;
	if (text != NULL) {
		fingerprint_of_string(text, strlen(text), fp);
		*has_fp = 1;
	} else if (json_object_get(body, "request") != NULL) {
		if (fingerprint_of_json(json_object_get(body, "request"), fp) < 0) {
			problem_unavailable(req);
			return -1;
		}
		*has_fp = 1;
	}
	return 0;
}

int tokenreq_check_headers(struct request *req, json_t *headers, size_t max)
{
	const char *name;
	json_t *value;

	if (!json_is_object(headers) || json_object_size(headers) > max) {
		problem_reply(req, 400, "invalid_request",
			      "headers must be an object of at most %zu string values", max);
		return -1;
	}
	json_object_foreach(headers, name, value) {
		size_t n = strlen(name);
		if (n == 0 || n > 128 ||
		    strspn(name, "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
				 "abcdefghijklmnopqrstuvwxyz") != n) {
			problem_reply(req, 400, "invalid_request", "a header name is not a valid token");
			return -1;
		}
		if (headers_never_stored(name)) {
			problem_reply(req, 400, "invalid_request",
				      "header %s cannot be stored: hop-by-hop, framing, "
				      "Access-Control-*, Set-Cookie and idemd's own headers never are",
				      name);
			return -1;
		}
		const char *v = json_string_value(value);
		if (v == NULL || json_string_length(value) > 8192 ||
		    !headers_value_ok(v, json_string_length(value))) {
			problem_reply(req, 400, "invalid_request",
				      "header values must be strings without control characters "
				      "(at most 8192 bytes)");
			return -1;
		}
	}
	return 0;
}

/* The direct API's reply to a duplicate of a completed claim (new text,
 * free with free), or NULL. */
static char *tokenreq_replay_text(const struct stored_response *r)
{
	json_t *o = json_pack("{s:s,s:o}", "state", "completed", "response", reqjson_response(r));
	char *text = http_json_text(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY, NULL);

	json_decref(o);
	return text;
}

/* Sends TEXT (LEN bytes) as the reply to a duplicate; NULL (out of memory
 * while rendering it): 503, which the client retries like any other. */
static void tokenreq_replay_send(struct request *req, const char *text, size_t len)
{
	if (text == NULL) {
		problem_unavailable(req);
		return;
	}
	http_reply_bytes(req, 200, "application/json", text, len);
	http_set_header(req, "Idempotent-Replayed", "true");
}

/* Replays a completed response to a duplicate. */
static void tokenreq_replay(struct request *req, const struct stored_response *r,
			    const struct token *t)
{
	(void)t;
	char *text = tokenreq_replay_text(r);

	tokenreq_replay_send(req, text, text ? strlen(text) : 0);
	free(text);
}

/* A replay cache hit of the direct API: sends REPLY (the rendered reply,
 * or NULL to render R), and keeps the rendered reply and this request's
 * body in the entry, so that the same body next time is answered by
 * tokenreq_replay_raw(). */
static void tokenreq_replay_cached(struct request *req, const struct token *t,
				   const uint8_t *fp, const struct stored_response *r,
				   char *reply, size_t reply_len)
{
	char *text = reply;

	if (text == NULL) {
		text = tokenreq_replay_text(r);
		reply_len = text ? strlen(text) : 0;
	}
	tokenreq_replay_send(req, text, reply_len);
	if (text != NULL)
		replaycache_set_reply(t->tenant_id, t->id, fp, req->req_body ? req->req_body : "",
				      req->req_body_len, text, reply_len);
	if (text != reply)
		free(text);
}

void tokenreq_count_replay(const struct token *t, int waited)
{
	replaycount_add(t->tenant_id, t->id);
	metrics_duplicate(t->tenant_id, t->operation_id,
			  waited ? METRICS_DUP_WAITED : METRICS_DUP_REPLAYED);
}

int tokenreq_replay_raw(struct request *req, const struct token *t)
{
	char *reply;
	size_t len;

	http_note_record(req, t->id);
	if (replaycache_get_raw(t->tenant_id, t->id, req->req_body ? req->req_body : "",
				req->req_body_len, &reply, &len) != 1)
		return 0;
	metrics_add(METRIC_REPLAYS, 1);
	tokenreq_count_replay(t, 0);
	http_reply_take(req, 200, "application/json", reply, len);
	http_set_header(req, "Idempotent-Replayed", "true");
	return 1;
}

/* A claim on its way through the database. */
#define TOKENREQ_WAIT_MAX 60

static int64_t tokenreq_unix_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct tokenreq_claim {
	struct batcher_job tc_job;
	struct request *tc_req;
	struct token tc_token;
	int tc_has_fp;
	uint8_t tc_fp[STORE_HASH_BYTES];
	char tc_vkey[VERSIONKEY_MAX + 1];
	struct claim_args tc_args;
	struct claim_result tc_res;
	tokenreq_replay_fn tc_replay;
	tokenreq_claimed_fn tc_claimed;
	void *tc_arg;
	int tc_answer_later;        /* CLAIMED never keeps the connection */
	int tc_wait;                /* seconds a duplicate in progress may wait (0: 409) */
	int64_t tc_wait_until;      /* unix ms */
	int64_t tc_submitted;       /* unix ms: when the claim last went to the batcher */
	struct waiter tc_waiter;
};

int tokenreq_claim_cached(struct request *req, const struct token *t, const uint8_t *fp,
			  tokenreq_replay_fn replay)
{
	struct stored_response r;
	char *reply = NULL;
	size_t reply_len = 0;
	int direct = replay == NULL;
	int cached = replaycache_lookup(t->tenant_id, t->id, fp, &r, direct ? &reply : NULL,
					&reply_len);

	http_note_record(req, t->id);
	if (cached == 1) {
		metrics_add(METRIC_REPLAYS, 1);
		tokenreq_count_replay(t, 0);
		if (direct)
			tokenreq_replay_cached(req, t, fp, &r, reply, reply_len);
		else
			replay(req, &r, t);
		free(reply);
		store_response_free(&r);
		return 1;
	}
	if (cached == 2) {
		metrics_duplicate(t->tenant_id, t->operation_id, METRICS_DUP_FINGERPRINT_MISMATCH);
		problem_reply(req, 422, "fingerprint_mismatch",
			      "the token was first used with a different request");
		return 1;
	}
	return 0;
}

/*
 * Everything else before the database: the operation, the version
 * precondition. Returns 1 with C's claim arguments filled, or 0 after
 * replying. C must not move afterwards (the arguments point into it).
 */
const char *tokenreq_claim_args(const struct token *t, const struct operation *op,
				const uint8_t *fp, const char *if_match,
				char vkey[VERSIONKEY_MAX + 1], struct claim_args *a)
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
static int tokenreq_wait_seconds(struct request *req, const struct operation *op)
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
					return n > TOKENREQ_WAIT_MAX ? TOKENREQ_WAIT_MAX : (int)n;
			}
		}
		p += strcspn(p, ",;");
	}
	return op->op_wait_seconds;
}

static int tokenreq_claim_prepare(struct request *req, struct tokenreq_claim *c)
{
	const struct token *t = &c->tc_token;
	struct operation op;
	int found;

	if (opcache_by_id(t->operation_id, &op, &found) < 0) {
		problem_unavailable(req);
		return 0;
	}
	if (!found || op.op_tenant_id != t->tenant_id) {
		problem_reply(req, 422, "operation_unknown", "the token's operation no longer exists");
		return 0;
	}
	c->tc_wait = tokenreq_wait_seconds(req, &op);
	const char *why = tokenreq_claim_args(t, &op, c->tc_has_fp ? c->tc_fp : NULL,
					      req->req_no_if_match ? NULL : http_header(req, "If-Match"),
					      c->tc_vkey, &c->tc_args);
	if (why != NULL) {
		problem_reply(req, 400, "invalid_request", "%s", why);
		return 0;
	}
	c->tc_args.by = req->req_by;
	c->tc_args.wait = c->tc_wait > 0;
	return 1;
}

void tokenreq_claim_verdict(const struct claim_result *res, struct tokenreq_verdict *v)
{
	static const struct tokenreq_verdict verdicts[] = {
		[CLAIM_CLAIMED] = { 201, NULL, NULL },
		[CLAIM_REPLAY] = { 200, NULL, NULL },
		[CLAIM_IN_PROGRESS] = { 409, "request_in_progress",
					"the first submit is still in progress" },
		[CLAIM_REVOKED] = { 410, "token_revoked", "the token was revoked" },
		[CLAIM_FINGERPRINT_MISMATCH] = { 422, "fingerprint_mismatch",
						 "first used with a different request" },
		[CLAIM_EXPIRED] = { 410, "token_expired", "the token has expired" },
		[CLAIM_VERSION_MISMATCH] = { 412, "version_mismatch", "the data changed" },
		[CLAIM_VERSION_REQUIRED] = { 428, "version_required",
					     "this operation requires If-Match with the current "
					     "version" },
	};

	*v = verdicts[res->cr_outcome];
}

/* Answers every outcome of the database step but CLAIM_CLAIMED: returns 1
 * for that one (nothing replied), else 0 after replying. */
static int tokenreq_claim_answer(struct request *req, struct tokenreq_claim *c, int rc)
{
	const struct token *t = &c->tc_token;
	struct claim_result *res = &c->tc_res;
	char etag[32];
	int ret = 0;

	if (rc < 0) {
		metrics_add(METRIC_DB_UNAVAILABLE, 1);
		problem_unavailable(req);
		return 0;
	}
	switch (res->cr_outcome) {
	case CLAIM_CLAIMED:
		metrics_add(METRIC_CLAIMS, 1);
		ret = 1;
		break;
	case CLAIM_REPLAY:
		metrics_add(METRIC_REPLAYS, 1);
		tokenreq_count_replay(t, req->req_waited > 0);
		replaycache_put(t->tenant_id, t->id, c->tc_has_fp ? c->tc_fp : NULL,
				&res->cr_response, res->cr_record_expires_at);
		c->tc_replay(req, &res->cr_response, t);
		break;
	case CLAIM_IN_PROGRESS:
		metrics_add(METRIC_CONFLICTS, 1);
		metrics_duplicate(t->tenant_id, t->operation_id, METRICS_DUP_IN_PROGRESS);
		/* most first submits finish in far less than their lease: ask for a
		 * retry in a second, and say when the lease would allow a takeover */
		problem_reply(req, 409, "request_in_progress",
			      "the first submit of this token is still in progress (its lease ends in %d s)",
			      res->cr_retry_after);
		http_set_header(req, "Retry-After", "1");
		break;
	case CLAIM_REVOKED:
		problem_reply(req, 410, "token_revoked", "the token was revoked");
		break;
	case CLAIM_FINGERPRINT_MISMATCH:
		metrics_duplicate(t->tenant_id, t->operation_id, METRICS_DUP_FINGERPRINT_MISMATCH);
		problem_reply(req, 422, "fingerprint_mismatch",
			      "the token (or key) was first used with a different request");
		break;
	case CLAIM_EXPIRED:
		problem_reply(req, 410, "token_expired", "the token has expired");
		break;
	case CLAIM_VERSION_MISMATCH:
		reqjson_etag_format(res->cr_current_version, etag, sizeof(etag));
		problem_reply(req, 412, "version_mismatch",
			      "the data changed: the counter is at version %lld",
			      (long long)res->cr_current_version);
		http_set_header(req, "ETag", etag);
		break;
	case CLAIM_VERSION_REQUIRED:
		problem_reply(req, 428, "version_required",
			      "this operation requires If-Match with the current version");
		break;
	}
	store_response_free(&res->cr_response);
	return ret;
}

const char *tokenreq_record_state(const struct record_view *rv, int64_t now_ms, int lapsed)
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

void tokenreq_record_fields(json_t *o, const struct record_view *rv, const char *state)
{
	if (o == NULL)
		return;
	if (strcmp(state, "in_progress") == 0 || strcmp(state, "lease_expired") == 0)
		json_object_set_new(o, "lease_expires_at", reqjson_time(rv->rv_lease_expires_at));
	if (strcmp(state, "completed") == 0)
		json_object_set_new(o, "response", reqjson_response(&rv->rv_response));
	if (rv->rv_checkpoint_phase != NULL)
		json_object_set_new(o, "checkpoint", tokenreq_checkpoint_json(rv));
}

json_t *tokenreq_checkpoint_json(const struct record_view *rv)
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
static json_t *tokenreq_checkpoint_read(const struct token *t)
{
	struct record_view rv;

	if (store_record_get(t->tenant_id, t->id, &rv) < 0) {
		log_warn("claim: the checkpoint of a taken-over record could not be read");
		return NULL;
	}
	json_t *cp = tokenreq_checkpoint_json(&rv);
	store_record_view_free(&rv);
	return cp;
}

static struct tokenreq_claim *tokenreq_claim_new(struct request *req, const struct token *t,
						 const uint8_t *fp, tokenreq_replay_fn replay)
{
	struct tokenreq_claim *c = calloc(1, sizeof(*c));

	if (c == NULL) {
		problem_unavailable(req);
		return NULL;
	}
	c->tc_req = req;
	c->tc_token = *t;
	c->tc_has_fp = fp != NULL;
	if (fp != NULL)
		memcpy(c->tc_fp, fp, STORE_HASH_BYTES);
	c->tc_replay = replay != NULL ? replay : tokenreq_replay;
	c->tc_job.bj_kind = BATCHER_CLAIM;
	c->tc_job.bj_claim = &c->tc_args;
	c->tc_job.bj_claim_result = &c->tc_res;
	return c;
}

/* The claim's answer, built on the thread that then sends it. */
static void tokenreq_claim_finish(struct request *req, void *arg)
{
	struct tokenreq_claim *c = arg;

	if (tokenreq_claim_answer(req, c, c->tc_job.bj_rc) == 1) {
		/* a takeover resumes from the last recovery point */
		if (c->tc_res.cr_attempt > 1)
			c->tc_res.cr_checkpoint = tokenreq_checkpoint_read(&c->tc_token);
		(void)c->tc_claimed(req, &c->tc_res, c->tc_arg);
		json_decref(c->tc_res.cr_checkpoint);
	} else {
		(void)c->tc_claimed(req, NULL, c->tc_arg);
	}
	free(c);
}

/* Batcher thread: the claim's result is committed. A claim whose CLAIMED
 * may keep the connection (the gateway's forward) is answered here; every
 * other is resumed at once and answered on its request thread, so that the
 * batcher is free for the next batch sooner. */
static void tokenreq_claim_done(struct batcher_job *j);

/* Waiters' thread: the record C waits for settled, or its lease or C's
 * deadline passed. Claims again, or (EXPIRED) answers 409. */
static void tokenreq_woken(struct waiter *w, int expired)
{
	struct tokenreq_claim *c =
		(struct tokenreq_claim *)(void *)((char *)w - offsetof(struct tokenreq_claim,
								       tc_waiter));

	if (expired) {
		http_resume_then(c->tc_req, tokenreq_claim_finish, c);
		return;
	}
	store_response_free(&c->tc_res.cr_response);
	memset(&c->tc_res, 0, sizeof(c->tc_res));
	c->tc_submitted = tokenreq_unix_ms();
	batcher_submit(&c->tc_job);
}

/* Batcher thread: a duplicate in progress that may wait is parked with the
 * waiters; 1 then (the connection stays suspended), else 0. */
static int tokenreq_wait(struct tokenreq_claim *c)
{
	struct waiter *w = &c->tc_waiter;
	int64_t now = tokenreq_unix_ms();

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
	w->w_wake = tokenreq_woken;
	if (waiters_add(w, c->tc_submitted - 1) < 0)
		return 0;
	c->tc_req->req_waited = c->tc_wait;
	store_response_free(&c->tc_res.cr_response);
	return 1;
}

static void tokenreq_claim_done(struct batcher_job *j)
{
	struct tokenreq_claim *c = (struct tokenreq_claim *)(void *)j;
	struct request *req = c->tc_req;
	int keep = 0;

	if (tokenreq_wait(c))
		return;

	if (c->tc_answer_later) {
		http_resume_then(req, tokenreq_claim_finish, c);
		return;
	}
	if (tokenreq_claim_answer(req, c, j->bj_rc) == 1)
		keep = c->tc_claimed(req, &c->tc_res, c->tc_arg);
	else
		(void)c->tc_claimed(req, NULL, c->tc_arg);
	free(c);
	if (!keep)
		http_resume(req);
}

int tokenreq_claim_async(struct request *req, const struct token *t, const uint8_t *fp,
			 tokenreq_replay_fn replay, tokenreq_claimed_fn claimed, int keeps,
			 void *arg)
{
	struct tokenreq_claim *c = tokenreq_claim_new(req, t, fp, replay);

	if (c == NULL)
		return 0;
	if (tokenreq_claim_prepare(req, c) == 0) {
		free(c);
		return 0;
	}
	c->tc_claimed = claimed;
	c->tc_arg = arg;
	c->tc_answer_later = keeps == 0;
	c->tc_job.bj_done = tokenreq_claim_done;
	c->tc_submitted = tokenreq_unix_ms();
	c->tc_wait_until = c->tc_submitted + (int64_t)c->tc_wait * 1000;
	http_suspend(req);
	batcher_submit(&c->tc_job);
	return 1;
}

/* ---------------------------------------------------------------- complete, release */

#define TOKENREQ_MAX_STORED_HEADERS 64
#define TOKENREQ_CHECKPOINT_MAX (64 * 1024)

/* For a caller key (IS_KEY), a record that does not exist is 404
 * record_not_found rather than 409 not_in_progress: 1 after replying so
 * (or 503), else 0. */
static int tokenreq_not_found(struct request *req, const struct token *t, int is_key)
{
	struct record_view rv;

	if (!is_key)
		return 0;
	if (store_record_get(t->tenant_id, t->id, &rv) < 0) {
		problem_unavailable(req);
		return 1;
	}
	store_record_view_free(&rv);
	if (rv.rv_found)
		return 0;
	problem_reply(req, 404, "record_not_found", "this key was never claimed (or was forgotten)");
	return 1;
}

/* Validates a complete body into RESP (headers text and body owned). */
int tokenreq_complete_parse(struct request *req, json_t *body, const char *extra,
			    int64_t *attempt, struct stored_response *resp)
{
	const char *const allowed[] = { "attempt", "status", "headers", "body", "body_base64",
		extra, NULL };
	int64_t status;
	int present;
	const char *b64;

	memset(resp, 0, sizeof(*resp));
	if (reqjson_only(req, body, allowed) < 0 ||
	    reqjson_int(req, body, "attempt", 1, 1, INT32_MAX, attempt, &present) < 0 ||
	    reqjson_int(req, body, "status", 1, 100, 599, &status, &present) < 0 ||
	    reqjson_string(req, body, "body_base64", 0, 0, SIZE_MAX, &b64) < 0)
		return -1;
	resp->sr_status = (int)status;
	json_t *headers = json_object_get(body, "headers");
	if (headers != NULL && tokenreq_check_headers(req, headers, TOKENREQ_MAX_STORED_HEADERS) < 0)
		return -1;
	json_t *jbody = json_object_get(body, "body");
	if (jbody != NULL && b64 != NULL) {
		problem_reply(req, 400, "invalid_request", "send body or body_base64, not both");
		return -1;
	}
	resp->sr_headers = headers ? json_dumps(headers, JSON_COMPACT | JSON_SORT_KEYS)
				   : strdup("{}");
	if (b64 != NULL) {
		size_t max = strlen(b64) + 1;
		resp->sr_body = malloc(max);
		if (resp->sr_body == NULL ||
		    sodium_base642bin(resp->sr_body, max, b64, strlen(b64), NULL,
				      &resp->sr_body_len, NULL, sodium_base64_VARIANT_ORIGINAL) != 0) {
			problem_reply(req, 400, "invalid_request", "body_base64 is not valid base64");
			return -1;
		}
	} else if (jbody != NULL) {
		resp->sr_body = (unsigned char *)json_dumps(jbody, JSON_COMPACT | JSON_ENCODE_ANY);
		resp->sr_body_len = resp->sr_body ? strlen((char *)resp->sr_body) : 0;
		resp->sr_is_json = 1;
	}
	if (resp->sr_headers == NULL || (jbody != NULL && resp->sr_body == NULL)) {
		problem_unavailable(req);
		return -1;
	}
	return 0;
}

/* A complete on its way through the database. */
struct tokenreq_complete {
	struct batcher_job hc_job;
	struct request *hc_req;
	struct token hc_token;
	int hc_is_key;                 /* a caller key: never claimed is 404 */
	int64_t hc_attempt;
	struct stored_response hc_resp;
	struct complete_args hc_args;
	struct complete_result hc_res;
};

static void tokenreq_complete_free(struct tokenreq_complete *c)
{
	store_response_free(&c->hc_res.cpr_stored);
	store_response_free(&c->hc_resp);
	free(c);
}

/* 1 when a repeated completion A says what the stored one B says: same
 * status, headers (as JSON values) and body bytes. */
int tokenreq_same_response(const struct stored_response *a, const struct stored_response *b)
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
static void tokenreq_complete_answer(struct request *req, void *arg)
{
	struct tokenreq_complete *c = arg;
	struct complete_result *res = &c->hc_res;

	if (c->hc_job.bj_rc < 0) {
		problem_unavailable(req);
		goto done;
	}
	if (res->cpr_outcome == COMPLETE_ALREADY && !tokenreq_same_response(&c->hc_resp, &res->cpr_stored)) {
		problem_reply(req, 409, "completion_conflict",
			      "attempt %" PRId64 " was already completed with another response",
			      c->hc_attempt);
		goto done;
	}
	switch (res->cpr_outcome) {
	case COMPLETE_STORED:
	case COMPLETE_ALREADY:
		if (res->cpr_outcome == COMPLETE_STORED)
			metrics_add(METRIC_COMPLETIONS, 1);
		/* duplicates that follow are answered from memory */
		replaycache_put(req->req_tenant_id, c->hc_token.id,
				res->cpr_has_fingerprint ? res->cpr_fingerprint : NULL,
				&res->cpr_stored, res->cpr_expires_at);
		http_reply_json(req, 200, json_pack("{s:s,s:o,s:o}", "state", "completed",
						    "response", reqjson_response(&res->cpr_stored),
						    "expires_at", reqjson_time(res->cpr_expires_at)));
		break;
	case COMPLETE_LEASE_LOST:
		problem_reply(req, 409, "lease_lost",
			      "attempt %" PRId64 " is no longer the current attempt", c->hc_attempt);
		break;
	case COMPLETE_NOT_IN_PROGRESS:
		if (tokenreq_not_found(req, &c->hc_token, c->hc_is_key))
			break;
		problem_reply(req, 409, "not_in_progress", "the token is not claimed by attempt %" PRId64,
			      c->hc_attempt);
		break;
	}
done:
	tokenreq_complete_free(c);
}

/* Batcher thread: the complete is committed (or refused); resume at once. */
static void tokenreq_completed(struct batcher_job *j)
{
	struct tokenreq_complete *c = (struct tokenreq_complete *)(void *)j;

	http_resume_then(c->hc_req, tokenreq_complete_answer, c);
}

void tokenreq_complete(struct request *req, const struct token *tok, int is_key)
{
	struct token t = *tok;
	struct operation op;
	struct tokenreq_complete *c = NULL;
	int found;
	json_t *body = NULL;

	http_note_record(req, tok->id);
	body = http_body_object(req);
	if (body == NULL)
		return;
	c = calloc(1, sizeof(*c));
	if (c == NULL) {
		problem_unavailable(req);
		goto done;
	}
	if (tokenreq_complete_parse(req, body, NULL, &c->hc_attempt, &c->hc_resp) < 0)
		goto done;
	if (opcache_by_id(t.operation_id, &op, &found) < 0) {
		problem_unavailable(req);
		goto done;
	}
	if (!found) {
		problem_reply(req, 422, "operation_unknown", "the token's operation no longer exists");
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
	c->hc_job.bj_done = tokenreq_completed;
	http_suspend(req);
	batcher_submit(&c->hc_job);
	c = NULL;
done:
	if (c != NULL)
		tokenreq_complete_free(c);
	json_decref(body);
}

/* Answers a fenced write's refusal (409 lease_lost or not_in_progress, or
 * for a caller key never claimed 404); 1 when OUTCOME is RELEASE_DONE and
 * the caller answers. */
static int tokenreq_fenced(struct request *req, const struct token *t, int is_key,
			   enum release_outcome outcome, int64_t attempt)
{
	if (outcome == RELEASE_DONE)
		return 1;
	if (outcome == RELEASE_LEASE_LOST)
		problem_reply(req, 409, "lease_lost",
			      "attempt %" PRId64 " is no longer the current attempt", attempt);
	else if (!tokenreq_not_found(req, t, is_key))
		problem_reply(req, 409, "not_in_progress", "the token is not claimed by attempt %" PRId64,
			      attempt);
	return 0;
}

/* The body of a fenced write: ALLOWED members, "attempt" among them. The
 * body (new reference) or NULL after replying. */
static json_t *tokenreq_fenced_body(struct request *req, const char *const *allowed,
				    int64_t *attempt)
{
	int present;
	json_t *body = http_body_object(req);

	if (body != NULL && (reqjson_only(req, body, allowed) < 0 ||
			     reqjson_int(req, body, "attempt", 1, 1, INT32_MAX, attempt,
					 &present) < 0)) {
		json_decref(body);
		body = NULL;
	}
	return body;
}

void tokenreq_release(struct request *req, const struct token *t, int is_key)
{
	static const char *const allowed[] = { "attempt", NULL };
	enum release_outcome outcome;
	int64_t attempt;
	json_t *body = tokenreq_fenced_body(req, allowed, &attempt);

	http_note_record(req, t->id);
	if (body == NULL)
		return;
	if (store_release(req->req_tenant_id, t->id, (int)attempt, req->req_by, &outcome) < 0)
		problem_unavailable(req);
	else if (tokenreq_fenced(req, t, is_key, outcome, attempt)) {
		metrics_add(METRIC_RELEASES, 1);
		http_reply_json(req, 200, json_pack("{s:s,s:I}", "state", "issued", "attempt",
						    (json_int_t)attempt));
	}
	json_decref(body);
}

void tokenreq_extend(struct request *req, const struct token *t, int is_key)
{
	static const char *const allowed[] = { "attempt", "lease_seconds", NULL };
	enum release_outcome outcome;
	struct operation op;
	int64_t attempt, lease, until;
	int present, found;
	json_t *body = tokenreq_fenced_body(req, allowed, &attempt);

	http_note_record(req, t->id);
	if (body == NULL)
		return;
	if (opcache_by_id(t->operation_id, &op, &found) < 0 || !found) {
		problem_unavailable(req);
		goto done;
	}
	if (reqjson_int(req, body, "lease_seconds", 0, 1, op.op_lease_seconds, &lease,
			&present) < 0)
		goto done;
	if (!present)
		lease = op.op_lease_seconds;
	if (store_extend(req->req_tenant_id, t->id, (int)attempt, (int)lease, req->req_by, &outcome,
			 &until) < 0)
		problem_unavailable(req);
	else if (tokenreq_fenced(req, t, is_key, outcome, attempt))
		http_reply_json(req, 200, json_pack("{s:s,s:I,s:o}", "state", "in_progress",
						    "attempt", (json_int_t)attempt,
						    "lease_expires_at", reqjson_time(until)));
done:
	json_decref(body);
}

/* 1 when PHASE is 1..64 characters of [a-z0-9._-]. */
static int tokenreq_phase_ok(const char *phase)
{
	size_t n = strlen(phase);

	return n >= 1 && n <= 64 && strspn(phase, "abcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

void tokenreq_checkpoint(struct request *req, const struct token *t, int is_key)
{
	static const char *const allowed[] = { "attempt", "phase", "data", NULL };
	enum release_outcome outcome;
	int64_t attempt;
	const char *phase;
	char *data = NULL;
	json_t *body = tokenreq_fenced_body(req, allowed, &attempt);

	http_note_record(req, t->id);
	if (body == NULL)
		return;
	if (reqjson_string(req, body, "phase", 1, 1, 64, &phase) < 0)
		goto done;
	if (!tokenreq_phase_ok(phase)) {
		problem_reply(req, 400, "invalid_request", "phase must be 1 to 64 of [a-z0-9._-]");
		goto done;
	}
	json_t *jdata = json_object_get(body, "data");
	if (jdata != NULL) {
		data = json_dumps(jdata, JSON_COMPACT | JSON_ENCODE_ANY);
		if (data == NULL) {
			problem_unavailable(req);
			goto done;
		}
		if (strlen(data) > TOKENREQ_CHECKPOINT_MAX) {
			problem_reply(req, 400, "invalid_request",
				      "checkpoint data is at most %d bytes of JSON",
				      TOKENREQ_CHECKPOINT_MAX);
			goto done;
		}
	}
	if (store_checkpoint(req->req_tenant_id, t->id, (int)attempt, phase, data, req->req_by,
			     &outcome) < 0)
		problem_unavailable(req);
	else if (tokenreq_fenced(req, t, is_key, outcome, attempt))
		http_reply_json(req, 200, json_pack("{s:s,s:{s:s,s:o,s:I}}", "state", "in_progress",
						    "checkpoint", "phase", phase, "data",
						    jdata ? json_incref(jdata) : json_null(),
						    "attempt", (json_int_t)attempt));
done:
	free(data);
	json_decref(body);
}
