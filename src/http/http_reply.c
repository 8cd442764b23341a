/* HTTP replies: the reply a request carries until http.c sends it (status,
 * body, headers), or the problem a check recorded instead (request_fail),
 * which http.c answers through problem_answer; the text of a JSON reply
 * (http_json_text). Nothing here needs a
 * connection, so unit tests read the replies these make as they are. */
#include "http_int.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "utf8.h"

void http_clear_reply(struct request *req)
{
	if (req->rep_response != NULL)
		MHD_destroy_response(req->rep_response);
	req->rep_response = NULL;
	req->rep_body = NULL;
	req->rep_problem.rp_status = 0;
	req->rep_problem.rp_n_headers = 0;
}

void request_fail(struct request *req, unsigned status, const char *code, const char *fmt, ...)
{
	struct request_problem *p = &req->rep_problem;
	va_list ap;

	http_clear_reply(req);
	va_start(ap, fmt);
	int full = vsnprintf(p->rp_detail, sizeof(p->rp_detail), fmt, ap);
	va_end(ap);
	if (full >= (int)sizeof(p->rp_detail))
		utf8_cut_tail(p->rp_detail);
	p->rp_status = status;
	p->rp_code = code;
	req->rep_status = status;
	req->rep_code = code;
	req->rep_len = 0;
}

void request_unavailable(struct request *req)
{
	metrics_add(METRIC_DB_UNAVAILABLE, 1);
	request_fail(req, 503, "unavailable", "the database is unavailable; retry shortly");
	http_set_header(req, "Retry-After", "1");
}

void http_reply_bytes(struct request *req, unsigned status, const char *content_type,
		      const void *data, size_t len)
{
	char *copy = malloc(len > 0 ? len : 1);

	if (copy == NULL) {
		http_clear_reply(req);
		req->rep_status = status;
		req->rep_len = 0;
		return;
	}
	if (len > 0)
		memcpy(copy, data, len);
	http_reply_take(req, status, content_type, copy, len);
}

void http_reply_take(struct request *req, unsigned status, const char *content_type, char *data,
		     size_t len)
{
	http_clear_reply(req);
	if (status < 400)
		req->rep_code = NULL;
	req->rep_response = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
	if (req->rep_response == NULL)
		free(data);
	else
		req->rep_body = data;
	req->rep_status = status;
	req->rep_len = len;
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
	struct request_problem *p = &req->rep_problem;

	if (req->rep_response != NULL) {
		MHD_add_response_header(req->rep_response, name, value);
	} else if (p->rp_status != 0 && p->rp_n_headers < REQUEST_PROBLEM_HEADERS) {
		snprintf(p->rp_name[p->rp_n_headers], sizeof(p->rp_name[0]), "%s", name);
		snprintf(p->rp_value[p->rp_n_headers], sizeof(p->rp_value[0]), "%s", value);
		p->rp_n_headers++;
	}
}
