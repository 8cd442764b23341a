/* Caller keys: records addressed by (tenant, operation, key) for callers
 * that bring their own Idempotency-Key (service calls, webhooks, queue
 * consumers). A key is turned into a record id and then goes through the
 * same claim, complete and release as a token (engine.c); only what a
 * signature would have said is checked here: the key's form, the
 * operation, the subject. */
#include <stdio.h>
#include <string.h>

#include "answer.h"
#include "callerkey.h"
#include "fingerprint.h"
#include "handlers.h"
#include "opcache.h"
#include "reqjson.h"
#include "router.h"
#include "store.h"
#include "engine.h"

/* The record address of the {op}/keys/{key} path (callerkey_address); OP
 * receives the policy. 0, or -1 after replying (400 invalid_request for a
 * name outside [a-z0-9._-]{1,64}, 400 idempotency_key_invalid, 422
 * operation_unknown, 503). */
static int h_key_address(struct request *req, struct token *t, struct operation *op)
{
	const char *name = reqjson_name_param(req, 0), *key = req->req_params[1];
	size_t klen = req->req_param_lens[1];
	int found;

	if (name == NULL)
		return -1;
	if (strlen(key) != klen || !callerkey_valid(key, klen)) {
		request_fail(req, 400, "idempotency_key_invalid",
			     "a key is 1 to %d characters of visible ASCII (percent-encoded in "
			     "the path where needed)",
			     CALLERKEY_MAX);
		return -1;
	}
	if (opcache_by_name(req->req_tenant_id, name, op, &found) < 0) {
		request_unavailable(req);
		return -1;
	}
	if (!found) {
		answer_problem(req, OUTCOME_OPERATION_UNKNOWN, NULL);
		return -1;
	}
	callerkey_address(req->req_tenant_id, op, key, klen, NULL, idemd_unix_ms(), t);
	return 0;
}

static json_t *h_key_id(const struct token *t)
{
	char hex[2 * TOKEN_ID_BYTES + 1];

	token_id_hex(t->id, hex);
	return json_string(hex);
}

/* The envelope of a duplicate of a completed claim: the stored response,
 * with the id (new text of *LEN bytes, or NULL). */
static char *h_key_replay_text(const struct stored_response *r, const struct token *t, size_t *len)
{
	json_t *o = json_pack("{s:s,s:o,s:o}", "state", "completed", "id", h_key_id(t), "response",
			      reqjson_response(r));
	char *text = http_json_text(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY, len);

	json_decref(o);
	return text;
}

static const struct engine_replay h_key_replay = { ENGINE_REPLAY_KEY, h_key_replay_text, NULL };

/* The claim went through: 201 with the id, the attempt and its lease. */
static int h_key_claimed(struct request *req, const struct claim_result *res, void *arg)
{
	json_t *id = arg;

	if (res != NULL) {
		json_t *o = json_pack("{s:s,s:O,s:i,s:o}", "state", "in_progress", "id", id,
				      "attempt", res->cr_attempt, "lease_expires_at",
				      rfc3339_json(res->cr_lease_expires_at));
		if (o != NULL && res->cr_checkpoint != NULL)
			json_object_set(o, "checkpoint", res->cr_checkpoint);
		http_reply_json(req, 201, o);
	}
	json_decref(id);
	return 0;
}

void h_key_claim(struct request *req)
{
	static const char *const allowed[] = { "fingerprint", "request", "subject", NULL };
	struct token t;
	struct operation op;
	uint8_t fp[FINGERPRINT_BYTES];
	const char *subject;
	int has_fp;
	json_t *body, *id;

	if (h_key_address(req, &t, &op) < 0 || (body = http_body_object(req, allowed)) == NULL)
		return;
	if (reqjson_string(req, body, "subject", 0, 1, TOKEN_SUBJECT_MAX, &subject) < 0 ||
	    engine_fingerprint(req, body, fp, &has_fp) < 0)
		goto done;
	if (subject != NULL) {
		t.subject_len = strlen(subject);
		memcpy(t.subject, subject, t.subject_len + 1);
	}
	if (engine_claim_cached(req, &t, has_fp ? fp : NULL, &h_key_replay) < 0)
		goto done;
	id = h_key_id(&t);
	if (id == NULL) {
		request_unavailable(req);
		goto done;
	}
	if (engine_claim(req, &t, &op, has_fp ? fp : NULL, &h_key_replay, h_key_claimed, 0, id) < 0)
		json_decref(id); /* answered at once: the callback never runs */
done:
	json_decref(body);
}

void h_key_act(struct request *req)
{
	struct token t;
	struct operation op;

	if (h_key_address(req, &t, &op) == 0)
		engine_act(req, &t, 1, (enum engine_action)req->req_route->arg);
}

void h_key_get(struct request *req)
{
	struct token t;
	struct operation op;
	struct record_view rv;

	if (h_key_address(req, &t, &op) < 0)
		return;
	if (store_record_get(req->req_tenant_id, t.id, &rv) < 0) {
		request_unavailable(req);
		return;
	}
	if (!rv.rv_found) {
		request_fail(req, 404, "record_not_found",
			     "this key was never claimed (or was forgotten)");
		return;
	}
	int64_t now_ms = idemd_unix_ms();
	const char *state = engine_record_state(&rv, now_ms, 0);
	json_t *o = json_pack("{s:o,s:s,s:s,s:s,s:o,s:i}", "id", h_key_id(&t), "operation",
			      op.op_name, "key", req->req_params[1], "state", state, "expires_at",
			      rfc3339_json(rv.rv_expires_at), "attempt", rv.rv_attempt);
	if (o != NULL && rv.rv_has_subject)
		json_object_set_new(o, "subject", json_string(rv.rv_subject));
	engine_record_fields(o, &rv, state);
	store_record_view_free(&rv);
	http_reply_json(req, 200, o);
}
