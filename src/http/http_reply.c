/* HTTP replies: the reply a request carries until http.c sends it (status,
 * body, headers). Unit tests replace this file (and the request-thread
 * calls of http.c) with tests/unit/fake_http.c. */
#include "http_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
	req->rep_len = len;
	if (req->rep_response != NULL && content_type != NULL)
		MHD_add_response_header(req->rep_response, "Content-Type", content_type);
}

void http_reply_take(struct request *req, unsigned status, const char *content_type, char *data,
		     size_t len)
{
	http_clear_reply(req);
	req->rep_response = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
	if (req->rep_response == NULL)
		free(data);
	req->rep_status = status;
	req->rep_len = len;
	if (req->rep_response != NULL && content_type != NULL)
		MHD_add_response_header(req->rep_response, "Content-Type", content_type);
}

void http_reply_empty(struct request *req, unsigned status)
{
	http_reply_bytes(req, status, NULL, "", 0);
}

void http_reply_json(struct request *req, unsigned status, json_t *body)
{
	size_t len;
	char *text =
		http_json_text(body, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY, &len);

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
