/* The shared stand-in for http_reply.c and http.c's request-thread calls
 * in unit tests: see fake_http.h. */
#include "fake_http.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "http_int.h"
#include "metrics.h"
#include "problem.h"
#include "utf8.h"

struct fake_http fake_http;

int fake_http_reset(void **state)
{
	(void)state;
	free(fake_http.fh_body);
	memset(&fake_http, 0, sizeof(fake_http));
	return 0;
}

json_t *fake_http_json(void)
{
	json_error_t err;

	assert_non_null(fake_http.fh_body);
	json_t *v = json_loadb(fake_http.fh_body, fake_http.fh_body_len, 0, &err);
	if (v == NULL)
		fail_msg("reply body is not JSON: %s (%s)", fake_http.fh_body, err.text);
	return v;
}

const char *fake_http_header(const char *name)
{
	for (int i = 0; i < fake_http.fh_n_headers; i++)
		if (strcasecmp(fake_http.fh_headers[i][0], name) == 0)
			return fake_http.fh_headers[i][1];
	return NULL;
}

void fake_http_request_header(const char *name, const char *value)
{
	assert_true(fake_http.fh_n_req_headers < FAKE_HTTP_MAX_HEADERS);
	fake_http.fh_req_headers[fake_http.fh_n_req_headers][0] = name;
	fake_http.fh_req_headers[fake_http.fh_n_req_headers][1] = value;
	fake_http.fh_n_req_headers++;
}

void fake_http_run_then(struct request *req)
{
	void (*fn)(struct request *, void *) = fake_http.fh_then;

	assert_non_null(fn);
	fake_http.fh_then = NULL;
	fn(req, fake_http.fh_then_arg);
}

/* ---------------------------------------------------------------- http_reply.c */

void http_clear_reply(struct request *req)
{
	req->rep_problem.rp_status = 0;
	req->rep_problem.rp_n_headers = 0;
}

/* As http_reply.c's, then answered at once (problem_answer): the fake has
 * no send, where http.c answers it. */
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
	problem_answer(req);
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
	http_clear_reply(req);
	if (status < 400)
		req->rep_code = NULL;
	req->rep_status = status;
	free(fake_http.fh_body);
	fake_http.fh_replies++;
	fake_http.fh_status = status;
	snprintf(fake_http.fh_content_type, sizeof(fake_http.fh_content_type), "%s",
		 content_type ? content_type : "");
	fake_http.fh_body = malloc(len + 1);
	assert_non_null(fake_http.fh_body);
	memcpy(fake_http.fh_body, data, len);
	fake_http.fh_body[len] = '\0';
	fake_http.fh_body_len = len;
	fake_http.fh_n_headers = 0;
}

void http_reply_take(struct request *req, unsigned status, const char *content_type, char *data,
		     size_t len)
{
	http_reply_bytes(req, status, content_type, data, len);
	free(data);
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
	assert_non_null(text);
	http_reply_take(req, status, "application/json", text, len);
}

void http_set_header(struct request *req, const char *name, const char *value)
{
	(void)req;
	assert_true(fake_http.fh_n_headers < FAKE_HTTP_MAX_HEADERS);
	snprintf(fake_http.fh_headers[fake_http.fh_n_headers][0],
		 sizeof(fake_http.fh_headers[0][0]), "%s", name);
	snprintf(fake_http.fh_headers[fake_http.fh_n_headers][1],
		 sizeof(fake_http.fh_headers[0][1]), "%s", value);
	fake_http.fh_n_headers++;
}

/* ---------------------------------------------------------------- http.c */

const char *http_header(const struct request *req, const char *name)
{
	(void)req;
	for (int i = 0; i < fake_http.fh_n_req_headers; i++)
		if (strcasecmp(fake_http.fh_req_headers[i][0], name) == 0)
			return fake_http.fh_req_headers[i][1];
	return NULL;
}

const char *http_query(const struct request *req, const char *name)
{
	(void)req;
	(void)name;
	return NULL;
}

void http_suspend(struct request *req)
{
	req->req_suspended = 1;
	fake_http.fh_suspends++;
}

void http_resume(struct request *req)
{
	(void)req;
	fake_http.fh_resumes++;
}

void http_resume_then(struct request *req, void (*fn)(struct request *req, void *arg), void *arg)
{
	assert_null(fake_http.fh_then);
	fake_http.fh_then = fn;
	fake_http.fh_then_arg = arg;
	http_resume(req);
}

void http_note_record(struct request *req, const uint8_t id[16])
{
	static const char hex[] = "0123456789abcdef";

	for (int i = 0; i < 16; i++) {
		req->req_record[2 * i] = hex[id[i] >> 4];
		req->req_record[2 * i + 1] = hex[id[i] & 15];
	}
	req->req_record[32] = '\0';
}
