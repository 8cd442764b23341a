/* Version counters API: read and bump per-tenant counters with strong ETags. */
#include <string.h>

#include "handlers.h"
#include "reqjson.h"
#include "store.h"
#include "versionkey.h"

/* The {key} path segment, or NULL after replying. */
static const char *h_version_key(struct request *req)
{
	const char *key = req->req_params[0];

	if (strlen(key) != req->req_param_lens[0] || !versionkey_valid(key)) {
		request_fail(req, 400, "invalid_request",
			     "version keys are 1 to %d printable ASCII characters", VERSIONKEY_MAX);
		return NULL;
	}
	return key;
}

static void h_version_reply(struct request *req, unsigned status, const char *key, int64_t version)
{
	char etag[32];

	reqjson_etag_format(version, etag, sizeof(etag));
	http_reply_json(req, status,
			json_pack("{s:s,s:I}", "key", key, "version", (json_int_t)version));
	http_set_header(req, "ETag", etag);
}

void h_version_get(struct request *req)
{
	int64_t version;
	const char *key = h_version_key(req);

	if (key == NULL)
		return;
	if (store_version_get(req->req_tenant_id, key, &version) < 0) {
		request_unavailable(req);
		return;
	}
	h_version_reply(req, 200, key, version);
}

void h_version_bump(struct request *req)
{
	int64_t expected, version;
	int ok;
	static const char *const none[] = { NULL };
	const char *key = h_version_key(req);
	json_t *body;

	if (key == NULL)
		return;
	/* no body, or an empty object: any member is an unknown field */
	if ((body = http_body_object(req, none)) == NULL)
		return;
	json_decref(body);
	const char *im = req->req_h_if_match;
	if (im == NULL) {
		request_fail(req, 428, "version_required",
			     "send If-Match with the current ETag to bump a counter");
		return;
	}
	if (reqjson_etag(im, &expected) < 0) {
		request_fail(req, 400, "invalid_request",
			     "If-Match must be one strong ETag like \"7\"");
		return;
	}
	if (store_version_bump(req->req_tenant_id, key, expected, &ok, &version) < 0) {
		request_unavailable(req);
		return;
	}
	if (!ok) {
		char etag[32];
		reqjson_etag_format(version, etag, sizeof(etag));
		request_fail(req, 412, "version_mismatch", "the counter is at version %lld",
			     (long long)version);
		http_set_header(req, "ETag", etag);
		return;
	}
	h_version_reply(req, 200, key, version);
}
