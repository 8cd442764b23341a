/*
 * Batches of caller keys: POST /v1/operations/{op}/claims and
 * /completions, 1..500 items, for queue consumers that claim what one poll
 * brought. Each item is decided exactly as if it came alone (the same
 * validators, the same claim and complete functions, the same outcome
 * table), answers come back in request order, and the items that need the
 * database go to it as one set: one statement, one round trip, one commit.
 *
 * An item's own refusal (an invalid key, a malformed field) is its answer;
 * the batch itself is refused (400) only when it is malformed as a whole
 * or repeats a key. Ownership: a struct h_batch holds everything of one
 * batch request until its answer is built; the request body's JSON (whose
 * strings the items borrow) lives as long.
 */
#include <stdlib.h>
#include <string.h>

#include "answer.h"
#include "batcher.h"
#include "callerkey.h"
#include "claim.h"
#include "handlers.h"
#include "log.h"
#include "metrics.h"
#include "opcache.h"
#include "reqjson.h"
#include "engine.h"
#include "store.h"

struct h_item {
	const char *key;  /* in the body, then in own; NULL when unusable */
	const char *sent; /* the "key" as sent when a string, else NULL */
	char *own;	  /* owned copy of sent once the body is gone */
	struct token t;	  /* the record the key names */
	uint8_t fp[STORE_HASH_BYTES];
	int has_fp;
	unsigned status;	       /* decided before the database, else 0 */
	const char *code;	       /* a malformed item's code (status 400) */
	enum outcome outcome;	       /* else an outcome the engine decided (status 0) */
	struct stored_response cached; /* status 200 from the replay cache */
	int64_t attempt;	       /* completions */
	int db;			       /* index in the set, or -1 */
};

struct h_batch {
	struct batcher_job hb_job;
	/* an item's answer, on the request thread once committed */
	json_t *(*hb_item_answer)(struct h_batch *b, struct h_item *it);
	struct request *hb_req;
	json_t *hb_body;
	struct operation hb_op;
	size_t hb_n, hb_m; /* items; of them, in the set */
	struct h_item *hb_items;
	/* the set: hb_m elements */
	struct claim_args *hb_cargs;
	struct claim_result *hb_cres;
	struct complete_args *hb_pargs;
	struct complete_result *hb_pres;
	struct stored_response *hb_resp; /* completions' responses */
	char (*hb_vkeys)[VERSIONKEY_MAX + 1];
	int *hb_rcs;
};

static void h_batch_free(struct h_batch *b)
{
	if (b == NULL)
		return;
	for (size_t i = 0; b->hb_items != NULL && i < b->hb_n; i++) {
		store_response_free(&b->hb_items[i].cached);
		free(b->hb_items[i].own);
	}
	for (size_t k = 0; k < b->hb_m; k++) {
		if (b->hb_cres != NULL)
			store_response_free(&b->hb_cres[k].cr_response);
		if (b->hb_pres != NULL)
			store_response_free(&b->hb_pres[k].cpr_stored);
		if (b->hb_resp != NULL)
			store_response_free(&b->hb_resp[k]);
	}
	free(b->hb_items);
	free(b->hb_cargs);
	free(b->hb_cres);
	free(b->hb_pargs);
	free(b->hb_pres);
	free(b->hb_resp);
	free(b->hb_vkeys);
	free(b->hb_rcs);
	json_decref(b->hb_body);
	free(b);
}

/* Item I refused before the database with STATUS and CODE: malformed. */
static void h_item_refuse(struct h_item *it, unsigned status, const char *code)
{
	it->status = status;
	it->code = code;
}

/* Item I decided before the database with engine outcome O. */
static void h_item_decided(struct h_item *it, enum outcome o)
{
	it->status = answer_status(o);
	it->code = NULL;
	it->outcome = o;
}

/* Item I refused by a check of its fields (reqjson_why): 400
 * invalid_request, or 503 unavailable when WHY is empty. */
static void h_item_check_refused(struct h_item *it, const char *why)
{
	if (why[0] == '\0')
		h_item_decided(it, OUTCOME_UNAVAILABLE);
	else
		h_item_refuse(it, 400, "invalid_request");
}

/* Each of the hb_n ITEMS: its key checked (an unusable one refuses its item)
 * and the record it names, a first claim's expiry counted from NOW (unix
 * ms); 0, or -1 after replying 400 when two items have the same key. */
static int h_batch_keys(struct h_batch *b, json_t *items, int64_t now)
{
	struct request *req = b->hb_req;

	for (size_t i = 0; i < b->hb_n; i++) {
		struct h_item *it = &b->hb_items[i];
		json_t *o = json_array_get(items, i), *k = json_object_get(o, "key");
		it->db = -1;
		if (!json_is_object(o) || !json_is_string(k)) {
			h_item_refuse(it, 400, "invalid_request");
			continue;
		}
		const char *key = json_string_value(k);
		size_t len = json_string_length(k);
		it->sent = key;
		if (strlen(key) != len || !callerkey_valid(key, len)) {
			h_item_refuse(it, 400, "idempotency_key_invalid");
			continue;
		}
		for (size_t j = 0; j < i; j++) {
			if (b->hb_items[j].key != NULL && strcmp(b->hb_items[j].key, key) == 0) {
				request_fail(req, 400, "invalid_request",
					     "items %zu and %zu have the same key", j, i);
				return -1;
			}
		}
		it->key = key;
		callerkey_address(req->req_tenant_id, &b->hb_op, key, len, NULL, now, &it->t);
	}
	return 0;
}

/*
 * The batch's body and operation, and each item's key and record. Returns
 * the batch (items allocated, keys checked), or NULL after replying: an
 * unknown operation, no "items" array of 1..500, a key twice.
 */
static struct h_batch *h_batch_new(struct request *req)
{
	static const char *const allowed[] = { "items", NULL };
	struct h_batch *b = calloc(1, sizeof(*b));
	json_t *items;
	int found;

	if (b == NULL) {
		request_unavailable(req);
		return NULL;
	}
	b->hb_req = req;
	b->hb_job.bj_rc = 0;
	if (reqjson_name_param(req, 0) == NULL ||
	    (b->hb_body = http_body_object(req, allowed)) == NULL)
		goto fail;
	items = json_object_get(b->hb_body, "items");
	if (!json_is_array(items) || json_array_size(items) == 0 ||
	    json_array_size(items) > BATCHER_SET_MAX) {
		request_fail(req, 400, "invalid_request", "items must be an array of 1 to %d items",
			     BATCHER_SET_MAX);
		goto fail;
	}
	if (opcache_by_name(req->req_tenant_id, req->req_params[0], &b->hb_op, &found) < 0) {
		request_unavailable(req);
		goto fail;
	}
	if (!found) {
		answer_problem(req, OUTCOME_OPERATION_UNKNOWN, NULL);
		goto fail;
	}
	b->hb_n = json_array_size(items);
	b->hb_items = calloc(b->hb_n, sizeof(*b->hb_items));
	if (b->hb_items == NULL) {
		request_unavailable(req);
		goto fail;
	}
	if (h_batch_keys(b, items, idemd_unix_ms()) != 0)
		goto fail;
	return b;
fail:
	h_batch_free(b);
	return NULL;
}

/* Allocates the set, room for every item (hb_m counts those in it); 0, or
 * -1 after replying. */
static int h_batch_set(struct h_batch *b, int claims)
{
	size_t m = b->hb_n;

	b->hb_rcs = calloc(m, sizeof(*b->hb_rcs));
	if (claims) {
		b->hb_cargs = calloc(m, sizeof(*b->hb_cargs));
		b->hb_cres = calloc(m, sizeof(*b->hb_cres));
		b->hb_vkeys = calloc(m, sizeof(*b->hb_vkeys));
	} else {
		b->hb_pargs = calloc(m, sizeof(*b->hb_pargs));
		b->hb_pres = calloc(m, sizeof(*b->hb_pres));
		b->hb_resp = calloc(m, sizeof(*b->hb_resp));
	}
	if (b->hb_rcs == NULL ||
	    (claims && (b->hb_cargs == NULL || b->hb_cres == NULL || b->hb_vkeys == NULL)) ||
	    (!claims && (b->hb_pargs == NULL || b->hb_pres == NULL || b->hb_resp == NULL))) {
		request_unavailable(b->hb_req);
		return -1;
	}
	return 0;
}

static void h_batch_answer(struct request *req, void *arg);

/* Batcher thread: the set is committed; the answer is built on the
 * request's thread. */
static void h_batch_done(struct batcher_job *j)
{
	struct h_batch *b = IDEMD_CONTAINER_OF(j, struct h_batch, hb_job);

	http_resume_then(b->hb_req, h_batch_answer, b);
}

/* Lets the parsed body go before the batch waits for its turn: what the
 * items still need of it (the keys as sent) is copied, so a queued batch
 * holds about its text, not its parse. 0, or -1 (out of memory). */
static int h_batch_drop_body(struct h_batch *b)
{
	for (size_t i = 0; i < b->hb_n; i++) {
		struct h_item *it = &b->hb_items[i];
		if (it->sent == NULL)
			continue;
		if ((it->own = strdup(it->sent)) == NULL)
			return -1;
		it->key = it->key != NULL ? it->own : NULL;
		it->sent = it->own;
	}
	json_decref(b->hb_body);
	b->hb_body = NULL;
	return 0;
}

/* Queues the set (or answers at once when no item needs the database). */
static void h_batch_run(struct h_batch *b, int claims,
			json_t *(*item_answer)(struct h_batch *b, struct h_item *it))
{
	b->hb_item_answer = item_answer;
	if (h_batch_drop_body(b) < 0) {
		request_unavailable(b->hb_req);
		h_batch_free(b);
		return;
	}
	if (b->hb_m == 0) {
		h_batch_answer(b->hb_req, b);
		return;
	}
	b->hb_job.bj_kind = claims ? BATCHER_CLAIM : BATCHER_COMPLETE;
	b->hb_job.bj_claim = b->hb_cargs;
	b->hb_job.bj_claim_result = b->hb_cres;
	b->hb_job.bj_complete = b->hb_pargs;
	b->hb_job.bj_complete_result = b->hb_pres;
	b->hb_job.bj_n = b->hb_m;
	b->hb_job.bj_rcs = b->hb_rcs;
	b->hb_job.bj_done = h_batch_done;
	http_suspend(b->hb_req);
	batcher_submit(&b->hb_job);
}

/* A takeover resumes from the last recovery point: like a single claim's
 * 201, a taken-over item carries the record's latest checkpoint (one read,
 * only for items at attempt 2 or later). */
static void h_item_checkpoint(json_t *o, const struct token *t)
{
	struct record_view rv;

	if (store_record_get(t->tenant_id, t->id, &rv) < 0) {
		log_warn("batch claim: the checkpoint of a taken-over record could not be read");
		return;
	}
	json_t *cp = engine_checkpoint_json(&rv);
	store_record_view_free(&rv);
	if (cp != NULL)
		json_object_set_new(o, "checkpoint", cp);
}

/* What a refused item's code means, as a single claim's problem says it. */
/* The answer of item IT decided with outcome O (values V, may be NULL). */
static json_t *h_item_outcome(const struct h_item *it, enum outcome o,
			      const struct outcome_values *v)
{
	json_t *o_ = json_pack("{s:o}", "key", it->sent ? json_string(it->sent) : json_null());

	if (o_ != NULL)
		answer_item(o_, o, v);
	return o_;
}

/* The answer of item IT decided before the database: malformed (its
 * code), or an engine outcome. */
static json_t *h_item_early(const struct h_item *it)
{
	json_t *o;

	if (it->code == NULL)
		return h_item_outcome(it, it->outcome, NULL);
	o = json_pack("{s:o,s:i,s:s,s:s}", "key", it->sent ? json_string(it->sent) : json_null(),
		      "status", (int)it->status, "code", it->code, "detail",
		      strcmp(it->code, "idempotency_key_invalid") == 0
			      ? "a key is 1 to 255 bytes of visible ASCII (0x21-0x7e)"
			      : "the item is malformed (fields, types or sizes)");
	return o;
}

/* Whether the database step of the set failed for every item: then the
 * whole request is 503 with Retry-After (one answer for one condition).
 * When part of it committed (the first statement, before the second
 * failed), the items it decided are answered, each as if alone, and the
 * others each say 503: nothing committed goes unanswered. */
static int h_batch_unavailable(struct request *req, struct h_batch *b)
{
	for (size_t k = 0; k < b->hb_m; k++)
		if (b->hb_rcs[k] == 0)
			return 0;
	if (b->hb_m == 0)
		return 0;
	h_batch_free(b);
	request_unavailable(req);
	return 1;
}

/* Answers every item, on the request's thread: 503 unavailable for an
 * item whose statement failed, else h_batch_run's ITEM_ANSWER. */
static void h_batch_answer(struct request *req, void *arg)
{
	struct h_batch *b = arg;
	if (h_batch_unavailable(req, b))
		return;
	json_t *items = json_array();

	for (size_t i = 0; items != NULL && i < b->hb_n; i++) {
		struct h_item *it = &b->hb_items[i];
		json_t *o;
		if (it->db >= 0 && b->hb_rcs[it->db] < 0) {
			/* its statement did not run */
			metrics_add(METRIC_DB_UNAVAILABLE, 1);
			o = h_item_outcome(it, OUTCOME_UNAVAILABLE, NULL);
		} else {
			o = b->hb_item_answer(b, it);
		}
		json_array_append_new(items, o);
	}
	h_batch_free(b);
	http_reply_json(req, 200, items ? json_pack("{s:o}", "items", items) : NULL);
}

static json_t *h_item_id(const struct h_item *it)
{
	char hex[2 * TOKEN_ID_BYTES + 1];

	token_id_hex(it->t.id, hex);
	return json_string(hex);
}

/* A batch of claims (CLAIMS) or completions: each item with a key
 * checked and added to the set by PREPARE, the claims counted against the
 * tenant's quota, the set run, and every item answered by ITEM_ANSWER. */
static void h_batch(struct request *req, int claims,
		    void (*prepare)(struct h_batch *b, struct h_item *it, json_t *o),
		    json_t *(*item_answer)(struct h_batch *b, struct h_item *it))
{
	struct h_batch *b = h_batch_new(req);

	if (b == NULL)
		return;
	if (h_batch_set(b, claims) < 0) {
		h_batch_free(b);
		return;
	}
	json_t *items = json_object_get(b->hb_body, "items");
	for (size_t i = 0; i < b->hb_n; i++)
		if (b->hb_items[i].key != NULL)
			prepare(b, &b->hb_items[i], json_array_get(items, i));
	/* the items that reach the database count against the tenant's quota */
	if (claims && b->hb_m > 0 && engine_claim_quota(req, (int)b->hb_m) < 0) {
		h_batch_free(b);
		return;
	}
	h_batch_run(b, claims, item_answer);
}

/* ---------------------------------------------------------------- claims */

/* One claim item's answer, after the set ran (or without it). */
static json_t *h_claim_item_answer(struct h_batch *b, struct h_item *it)
{
	struct outcome_values v;
	json_t *o;

	if (it->status == 200) {
		o = h_item_outcome(it, OUTCOME_REPLAY, NULL);
		json_object_set_new(o, "id", h_item_id(it));
		json_object_set_new(o, "response", reqjson_response(&it->cached));
		return o;
	}
	if (it->db < 0)
		return h_item_early(it);
	struct claim_result *res = &b->hb_cres[it->db];
	o = h_item_outcome(it, claim_outcome(res, 1, &v), &v);
	claim_settled(&it->t, it->has_fp ? it->fp : NULL, res, 0, 0);
	switch (res->cr_outcome) {
	case CLAIM_CLAIMED:
		json_object_set_new(o, "id", h_item_id(it));
		json_object_set_new(o, "attempt", json_integer(res->cr_attempt));
		json_object_set_new(o, "lease_expires_at", rfc3339_json(res->cr_lease_expires_at));
		if (res->cr_attempt > 1)
			h_item_checkpoint(o, &it->t);
		break;
	case CLAIM_REPLAY:
		json_object_set_new(o, "id", h_item_id(it));
		json_object_set_new(o, "attempt", json_integer(res->cr_attempt));
		json_object_set_new(o, "response", reqjson_response(&res->cr_response));
		break;
	case CLAIM_IN_PROGRESS:
		json_object_set_new(o, "attempt", json_integer(res->cr_attempt));
		break;
	default:
		break;
	}
	return o;
}

/* Item I's fields, the replay cache, then its claim arguments: in the set
 * when it needs the database. */
static void h_claim_item_prepare(struct h_batch *b, struct h_item *it, json_t *o)
{
	static const char *const allowed[] = { "key", "fingerprint", "request", "subject", NULL };
	char why[REQJSON_WHY];
	const char *subject;

	if (reqjson_only_why(o, allowed, why) < 0 ||
	    reqjson_string_why(o, "subject", 0, 1, TOKEN_SUBJECT_MAX, &subject, why) < 0 ||
	    engine_fingerprint_why(o, it->fp, &it->has_fp, why) < 0) {
		h_item_check_refused(it, why);
		return;
	}
	if (subject != NULL) {
		it->t.subject_len = strlen(subject);
		memcpy(it->t.subject, subject, it->t.subject_len + 1);
	}
	switch (claim_cached(&it->t, it->has_fp ? it->fp : NULL, 0, &it->cached, NULL, NULL)) {
	case REPLAYCACHE_HIT:
		it->status = 200;
		return;
	case REPLAYCACHE_OTHER_FP:
		h_item_decided(it, OUTCOME_FINGERPRINT_MISMATCH);
		return;
	case REPLAYCACHE_MISS:
		break;
	}
	size_t k = b->hb_m;
	if (claim_args_fill(&it->t, &b->hb_op, it->has_fp ? it->fp : NULL, NULL, b->hb_vkeys[k],
			    &b->hb_cargs[k]) != NULL) {
		h_item_refuse(it, 400, "invalid_request");
		return;
	}
	b->hb_cargs[k].by = b->hb_req->req_by;
	it->db = (int)k;
	b->hb_m++;
}

void h_key_claims(struct request *req)
{
	h_batch(req, 1, h_claim_item_prepare, h_claim_item_answer);
}

/* ---------------------------------------------------------------- completions */

/* One completion item's answer, after the set ran (or without it). */
static json_t *h_complete_item_answer(struct h_batch *b, struct h_item *it)
{
	struct outcome_values v = { .ov_attempt = it->attempt };

	if (it->db < 0)
		return h_item_early(it);
	struct complete_result *res = &b->hb_pres[it->db];
	switch (res->cpr_outcome) {
	case COMPLETE_STORED:
	case COMPLETE_ALREADY:
		if (res->cpr_outcome == COMPLETE_ALREADY &&
		    !engine_same_response(&b->hb_resp[it->db], &res->cpr_stored))
			return h_item_outcome(it, OUTCOME_COMPLETION_CONFLICT, &v);
		engine_completion_keep(it->t.tenant_id, it->t.id, res);
		return h_item_outcome(it, OUTCOME_STORED, NULL);
	case COMPLETE_LEASE_LOST:
		return h_item_outcome(it, OUTCOME_LEASE_LOST, &v);
	case COMPLETE_NOT_IN_PROGRESS:
	case COMPLETE_NO_RECORD:
		break;
	}
	return h_item_outcome(it, OUTCOME_NOT_IN_PROGRESS, &v);
}

/* Checks a completion item O and adds it to the set. */
static void h_complete_item_prepare(struct h_batch *b, struct h_item *it, json_t *o)
{
	char why[REQJSON_WHY];
	size_t k = b->hb_m;

	if (engine_complete_parse_why(o, "key", &it->attempt, &b->hb_resp[k], why) < 0) {
		store_response_free(&b->hb_resp[k]);
		h_item_check_refused(it, why);
		return;
	}
	struct complete_args *a = &b->hb_pargs[k];
	a->tenant_id = it->t.tenant_id;
	a->token_id = it->t.id;
	a->attempt = (int)it->attempt;
	a->resp = &b->hb_resp[k];
	a->retention_seconds = b->hb_op.op_retention_seconds;
	a->audit_seconds = store_audit_seconds(&b->hb_op);
	a->by = b->hb_req->req_by;
	it->db = (int)k;
	b->hb_m++;
}

void h_key_completions(struct request *req)
{
	h_batch(req, 0, h_complete_item_prepare, h_complete_item_answer);
}
