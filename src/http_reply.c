/* HTTP replies: the reply a request carries until http.c sends it (status,
 * body, headers), JSON text, and the JSON object body of a request. Unit
 * tests replace this file with tests/unit/fake_http_reply.c. */
#include "http_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "problem.h"

void http_clear_reply(struct request *req)
{
	if (req->rep_response != NULL)
		MHD_destroy_response(req->rep_response);
	req->rep_response = NULL;
}

void http_reply_discard(struct request *req)
{
	http_clear_reply(req);
}

void http_reply_bytes(struct request *req, unsigned status, const char *content_type,
		      const void *data, size_t len)
{
	http_clear_reply(req);
	if (status < 400)
		req->rep_code = NULL;
	/* libmicrohttpd copies the buffer; the cast is its API's, not a write */
	req->rep_response = MHD_create_response_from_buffer(len, (void *)(uintptr_t)data,
							    MHD_RESPMEM_MUST_COPY);
	req->rep_status = status;
	if (req->rep_response != NULL && content_type != NULL)
		MHD_add_response_header(req->rep_response, "Content-Type", content_type);
}

void http_reply_take(struct request *req, unsigned status, const char *content_type,
		     char *data, size_t len)
{
	http_clear_reply(req);
	req->rep_response = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
	if (req->rep_response == NULL)
		free(data);
	req->rep_status = status;
	if (req->rep_response != NULL && content_type != NULL)
		MHD_add_response_header(req->rep_response, "Content-Type", content_type);
}

void http_reply_empty(struct request *req, unsigned status)
{
	http_reply_bytes(req, status, NULL, "", 0);
}

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

void http_reply_json(struct request *req, unsigned status, json_t *body)
{
	size_t len;
	char *text = http_json_text(body, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY, &len);

	json_decref(body);
	if (text == NULL) {
		http_reply_empty(req, 500);
		return;
	}
	http_reply_take(req, status, "application/json", text, len);
}

void http_set_header(struct request *req, const char *name, const char *value)
{
	if (req->rep_response != NULL)
		MHD_add_response_header(req->rep_response, name, value);
}

json_t *http_body_object(struct request *req)
{
	json_error_t err;

	if (req->req_body_len == 0)
		return json_object();
	json_t *v = json_loadb(req->req_body, req->req_body_len, JSON_REJECT_DUPLICATES, &err);
	if (v == NULL) {
		problem_reply(req, 400, "invalid_request", "malformed JSON at position %d", err.position);
		return NULL;
	}
	if (!json_is_object(v)) {
		json_decref(v);
		problem_reply(req, 400, "invalid_request", "the body must be a JSON object");
		return NULL;
	}
	return v;
}
