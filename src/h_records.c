/* Records by id: GET /v1/records/{id} (a record, whichever way its id was
 * made: a token's id, a caller key's, the one forwarded upstream) and
 * GET /v1/records/{id}/events (its audit trail, which may outlive it). */
#include <string.h>
#include <time.h>

#include "handlers.h"
#include "opcache.h"
#include "problem.h"
#include "reqjson.h"
#include "store.h"
#include "token.h"
#include "tokenreq.h"

/* The {id} path segment as 16 bytes. 0, or -1 after replying 400. */
static int h_record_id(struct request *req, uint8_t id[TOKEN_ID_BYTES])
{
	const char *hex = req->req_params[0];

	if (req->req_param_lens[0] != 2 * TOKEN_ID_BYTES ||
	    strspn(hex, "0123456789abcdef") != 2 * TOKEN_ID_BYTES) {
		problem_reply(req, 400, "invalid_request",
			      "a record id is 32 lower-case hex digits");
		return -1;
	}
	for (int i = 0; i < TOKEN_ID_BYTES; i++) {
		int hi = hex[2 * i] <= '9' ? hex[2 * i] - '0' : hex[2 * i] - 'a' + 10;
		int lo = hex[2 * i + 1] <= '9' ? hex[2 * i + 1] - '0' : hex[2 * i + 1] - 'a' + 10;
		id[i] = (uint8_t)(hi * 16 + lo);
	}
	return 0;
}

void h_record_get(struct request *req)
{
	uint8_t id[TOKEN_ID_BYTES];
	struct record_view rv;
	struct operation op;
	struct timespec now;
	int found = 0;

	if (h_record_id(req, id) < 0)
		return;
	if (store_record_get(req->req_tenant_id, id, &rv) < 0) {
		problem_unavailable(req);
		return;
	}
	if (!rv.rv_found) {
		problem_reply(req, 404, "record_not_found", "no record with this id");
		return;
	}
	if (opcache_by_id(rv.rv_operation_id, &op, &found) < 0) {
		store_record_view_free(&rv);
		problem_unavailable(req);
		return;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	int64_t now_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
	const char *state = "issued";
	if (strcmp(rv.rv_state, "completed") == 0 || strcmp(rv.rv_state, "revoked") == 0)
		state = rv.rv_state;
	else if (strcmp(rv.rv_state, "in_progress") == 0)
		state = rv.rv_lease_expires_at > now_ms ? "in_progress" : "lease_expired";
	json_t *o = json_pack("{s:s,s:s,s:s,s:o,s:i}", "id", req->req_params[0], "operation",
			      found ? op.op_name : "", "state", state, "expires_at",
			      reqjson_time(rv.rv_expires_at), "attempt", rv.rv_attempt);
	if (o != NULL && rv.rv_has_subject)
		json_object_set_new(o, "subject", json_string(rv.rv_subject));
	if (o != NULL && strcmp(rv.rv_state, "in_progress") == 0)
		json_object_set_new(o, "lease_expires_at", reqjson_time(rv.rv_lease_expires_at));
	if (o != NULL && strcmp(state, "completed") == 0)
		json_object_set_new(o, "response", reqjson_response(&rv.rv_response));
	if (o != NULL && rv.rv_checkpoint_phase != NULL)
		json_object_set_new(o, "checkpoint", tokenreq_checkpoint_json(&rv));
	store_record_view_free(&rv);
	http_reply_json(req, 200, o);
}

void h_record_events(struct request *req)
{
	uint8_t id[TOKEN_ID_BYTES];
	json_t *events;

	if (h_record_id(req, id) < 0)
		return;
	if (store_events_get(req->req_tenant_id, id, &events) < 0) {
		problem_unavailable(req);
		return;
	}
	if (json_array_size(events) == 0) {
		json_decref(events);
		problem_reply(req, 404, "record_not_found", "no record or audit trail with this id");
		return;
	}
	http_reply_json(req, 200, json_pack("{s:o}", "events", events));
}
