/* JSON over HTTP: the text of a JSON reply and the JSON object body of a
 * request. Apart from http_reply.c so that unit tests can replace the
 * replies and keep these. */
#include "http.h"

#include <stdlib.h>
#include <string.h>

#include "jsonmem.h"
#include "problem.h"

char *http_json_text(const json_t *v, size_t flags, size_t *len)
{
	char *text = v ? json_dumps(v, flags) : NULL;
	size_t n = text ? strlen(text) : 0;
	char *line = text ? realloc(text, n + 2) : NULL;

	if (line == NULL) {
		free(text);
		return NULL;
	}
	line[n] = '\n';
	line[n + 1] = '\0';
	if (len != NULL)
		*len = n + 1;
	return line;
}

json_t *http_body_object(struct request *req)
{
	json_error_t err;

	if (req->req_body_len == 0)
		return json_object();
	int over;
	json_t *v =
		jsonmem_load(req->req_body, req->req_body_len, JSON_REJECT_DUPLICATES, &err, &over);
	if (v == NULL && over) {
		problem_reply(req, 413, "payload_too_large",
			      "the body's JSON takes more than %zu bytes to hold",
			      jsonmem_budget(req->req_body_len));
		return NULL;
	}
	if (v == NULL) {
		problem_reply(req, 400, "invalid_request", "malformed JSON at position %d",
			      err.position);
		return NULL;
	}
	if (!json_is_object(v)) {
		json_decref(v);
		problem_reply(req, 400, "invalid_request", "the body must be a JSON object");
		return NULL;
	}
	return v;
}
