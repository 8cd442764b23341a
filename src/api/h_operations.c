/* Operations API: create, replace and read operation policies. */
#include <stdlib.h>
#include <string.h>

#include "gateway.h"
#include "handlers.h"
#include "opcache.h"
#include "reqjson.h"
#include "store.h"

static json_t *h_operation_json(const struct operation *op)
{
	json_t *o = json_pack("{s:s,s:i,s:i,s:i,s:b,s:i}", "name", op->op_name, "token_ttl_seconds",
			      op->op_token_ttl_seconds, "retention_seconds",
			      op->op_retention_seconds, "lease_seconds", op->op_lease_seconds,
			      "require_version", op->op_require_version, "wait_seconds",
			      op->op_wait_seconds);

	if (o != NULL)
		json_object_set_new(o, "audit_retention_seconds",
				    json_integer(op->op_audit_retention >= 0
							 ? op->op_audit_retention
							 : op->op_retention_seconds));
	if (o != NULL && op->op_has_version_key)
		json_object_set_new(o, "version_key", json_string(op->op_version_key));
	return o;
}

/* Reads the numeric fields of BODY into OP (token_ttl_seconds,
 * retention_seconds, lease_seconds, wait_seconds, audit_retention_seconds),
 * and version_key, in that order of checks, into *VKEY (borrowed from
 * BODY, NULL when absent); 0, or -1 after replying 400 to the first field
 * out of its range or of another type. */
static int h_operation_read_fields(struct request *req, json_t *body, struct operation *op,
				   const char **vkey)
{
	int64_t ttl, retention, lease, wait, audit;
	int present;

	if (reqjson_int(req, body, "token_ttl_seconds", 1, 1, 2592000, &ttl, &present) < 0 ||
	    reqjson_int(req, body, "retention_seconds", 1, 1, 31536000, &retention, &present) < 0 ||
	    reqjson_int(req, body, "lease_seconds", 1, 1, 3600, &lease, &present) < 0 ||
	    reqjson_string(req, body, "version_key", 0, 1, STORE_KEY_MAX, vkey) < 0 ||
	    reqjson_int(req, body, "wait_seconds", 0, 0, 60, &wait, &present) < 0)
		return -1;
	op->op_wait_seconds = present ? (int)wait : 0;
	if (reqjson_int(req, body, "audit_retention_seconds", 0, 0, 315360000, &audit, &present) <
	    0)
		return -1;
	op->op_audit_retention = present ? (int)audit : -1;
	op->op_token_ttl_seconds = (int)ttl;
	op->op_retention_seconds = (int)retention;
	op->op_lease_seconds = (int)lease;
	return 0;
}

/* Checks require_version (RV, NULL when absent) and version_key (VKEY,
 * NULL when absent): a boolean, printable ASCII without spaces, and a
 * version_key when require_version is true; 0, or -1 after replying 400. */
static int h_operation_check_version(struct request *req, const json_t *rv, const char *vkey)
{
	if (rv != NULL && !json_is_boolean(rv)) {
		request_fail(req, 400, "invalid_request",
			     "field require_version must be a boolean");
		return -1;
	}
	if (vkey != NULL &&
	    strspn(vkey, "!\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ"
			 "[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~") != strlen(vkey)) {
		request_fail(req, 400, "invalid_request",
			     "field version_key must be printable ASCII without spaces");
		return -1;
	}
	if (json_is_true(rv) && vkey == NULL) {
		request_fail(req, 400, "invalid_request", "require_version needs a version_key");
		return -1;
	}
	return 0;
}

/* Checks OP against this instance's gateway routes of its operation: a
 * version_key needs routes whose keys come from tokens; 0, or -1 after
 * replying 400. (That every live instance's routes fit in its lease, the
 * database checks as it writes: h_operation_refused.) */
static int h_operation_check_gateway(struct request *req, const struct operation *op)
{
	const char *derived = op->op_has_version_key
				      ? gateway_derived_route(op->op_tenant_id, op->op_name)
				      : NULL;
	if (derived != NULL) {
		request_fail(req, 400, "invalid_request",
			     "field version_key needs each submit's subject, and the gateway route "
			     "%s takes its keys from requests, which carry none; give that route "
			     "\"key\": \"token\" or leave version_key out",
			     derived);
		return -1;
	}
	return 0;
}

void h_operation_put(struct request *req)
{
	static const char *const allowed[] = { "token_ttl_seconds",	  "retention_seconds",
					       "lease_seconds",		  "version_key",
					       "require_version",	  "wait_seconds",
					       "audit_retention_seconds", NULL };
	struct operation op = { 0 };
	struct op_refusal why;
	int created, refused;
	const char *vkey;
	const char *name = reqjson_name_param(req, 0);
	json_t *body = name ? http_body_object(req, allowed) : NULL;

	if (body == NULL)
		return;
	if (h_operation_read_fields(req, body, &op, &vkey) < 0)
		goto done;
	json_t *rv = json_object_get(body, "require_version");
	if (h_operation_check_version(req, rv, vkey) < 0)
		goto done;
	op.op_tenant_id = req->req_tenant_id;
	snprintf(op.op_name, sizeof(op.op_name), "%s", name);
	op.op_has_version_key = vkey != NULL;
	if (vkey != NULL)
		snprintf(op.op_version_key, sizeof(op.op_version_key), "%s", vkey);
	op.op_require_version = json_is_true(rv);
	if (h_operation_check_gateway(req, &op) < 0)
		goto done;
	if (store_operation_put(&op, &created, &refused, &why) < 0) {
		request_unavailable(req);
		goto done;
	}
	if (refused) {
		/* a live instance's route waits longer for its upstream than the
		 * new lease would cover; nothing changed */
		request_fail(
			req, 400, "invalid_request",
			"field lease_seconds (%d) is shorter than gateway route %s of instance "
			"%s needs: its timeout_ms and forward_margin_ms take %lld ms; raise "
			"lease_seconds to at least %lld or lower that route's timeout_ms",
			op.op_lease_seconds, why.or_route, why.or_instance,
			(long long)why.or_need_ms, (long long)(why.or_need_ms + 999) / 1000);
		goto done;
	}
	opcache_put(&op);
	http_reply_json(req, created ? 201 : 200, h_operation_json(&op));
done:
	json_decref(body);
}

void h_operation_get(struct request *req)
{
	struct operation op;
	int found;
	const char *name = reqjson_name_param(req, 0);

	if (name == NULL)
		return;
	if (store_operation_get(req->req_tenant_id, name, &op, &found) < 0) {
		request_unavailable(req);
		return;
	}
	if (!found) {
		request_fail(req, 404, "not_found", "no operation named %s", name);
		return;
	}
	http_reply_json(req, 200, h_operation_json(&op));
}

void h_operation_list(struct request *req)
{
	struct operation *ops;
	size_t n;

	if (store_operation_list(req->req_tenant_id, &ops, &n) < 0) {
		request_unavailable(req);
		return;
	}
	json_t *list = json_array();
	for (size_t i = 0; list != NULL && i < n; i++)
		json_array_append_new(list, h_operation_json(&ops[i]));
	free(ops);
	http_reply_json(req, 200, json_pack("{s:o}", "operations", list ? list : json_array()));
}
