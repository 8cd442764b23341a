/* Unit tests for the HTTP reply helpers and body parsing that need no
 * connection: replies are built with MHD_create_response_from_buffer, which
 * works without one, and nothing here looks up a request header. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#include <microhttpd.h>

#include "reqjson.h"
#include "request.h"
#include "http_int.h"
#include "problem.h"
#include "unit.h"

static void req_init(struct request *req, const char *body, size_t len);
static void req_done(struct request *req);
static const char *content_type(struct request *req);
static void assert_body_refused(const char *body, size_t len);

static void req_init(struct request *req, const char *body, size_t len)
{
	memset(req, 0, sizeof(*req));
	req->req_method = "POST";
	if (body != NULL) {
		req->req_body = malloc(len + 1);
		assert_non_null(req->req_body);
		memcpy(req->req_body, body, len);
		req->req_body[len] = '\0';
		req->req_body_len = len;
	}
}

/* Frees what http.c's completion callback would. */
static void req_done(struct request *req)
{
	if (req->rep_response != NULL)
		MHD_destroy_response(req->rep_response);
	free(req->req_body);
	memset(req, 0, sizeof(*req));
}

/* The Content-Type REQ is answered with (its problem answered first, as
 * http.c does when it sends). */
static const char *content_type(struct request *req)
{
	problem_answer(req);
	assert_non_null(req->rep_response);
	return MHD_get_response_header(req->rep_response, "Content-Type");
}

/* BODY is not a JSON object: NULL and a 400 problem. */
static void assert_body_refused(const char *body, size_t len)
{
	struct request req;

	req_init(&req, body, len);
	json_t *v = http_body_object(&req, NULL);
	if (v != NULL) {
		json_decref(v);
		fail_msg("body [%.*s] accepted", (int)len, body);
	}
	assert_int_equal(req.rep_status, 400);
	assert_string_equal(content_type(&req), "application/problem+json");
	req_done(&req);
}

/* libmicrohttpd's messages pass through http_redact_paths: no path (caller
 * keys and tokens travel in it) reaches the log. */
static void test_redact_paths(void **state)
{
	char out[128];

	(void)state;
	http_redact_paths("Error processing request for `/v1/operations/job/keys/"
			  "alice%40example.com%3Aorder-1/claim'. Closing.\nmore",
			  out, sizeof(out));
	assert_string_equal(out, "Error processing request for `[path]'. Closing.");
	http_redact_paths("GET /v1/tokens/abc HTTP/1.1 from http://h/x?k=1", out, sizeof(out));
	assert_string_equal(out, "GET [path] HTTP/1.1 from http:[path]");
	http_redact_paths("no path here", out, sizeof(out));
	assert_string_equal(out, "no path here");
	http_redact_paths("/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", out, 8);
	assert_string_equal(out, "[path]");
}

static void test_body_object(void **state)
{
	struct request req;

	(void)state;
	/* an empty body is {} */
	req_init(&req, NULL, 0);
	json_t *v = http_body_object(&req, NULL);
	assert_non_null(v);
	assert_true(json_is_object(v));
	assert_int_equal(json_object_size(v), 0);
	assert_null(req.rep_response);
	json_decref(v);
	req_done(&req);

	req_init(&req, "{\"a\":1,\"b\":[true,null]}", 23);
	v = http_body_object(&req, NULL);
	assert_non_null(v);
	assert_int_equal(json_integer_value(json_object_get(v, "a")), 1);
	assert_null(req.rep_response);
	json_decref(v);
	req_done(&req);

	/* surrounding whitespace is fine */
	req_init(&req, " \n{}\r\n ", 7);
	v = http_body_object(&req, NULL);
	assert_non_null(v);
	json_decref(v);
	req_done(&req);
}

static void test_body_refused(void **state)
{
	(void)state;
	assert_body_refused("{", 1);
	assert_body_refused("}", 1);
	assert_body_refused("[1]", 3);
	assert_body_refused("[]", 2);
	assert_body_refused("1", 1);
	assert_body_refused("\"s\"", 3);
	assert_body_refused("null", 4);
	assert_body_refused("true", 4);
	assert_body_refused(" ", 1);
	assert_body_refused("{} {}", 5);
	assert_body_refused("{}x", 3);
	assert_body_refused("{\"a\":1,\"a\":2}", 13);
	assert_body_refused("{\"a\":\"\\u0000\"}", 14);
	assert_body_refused("{\"a\":\"\xff\"}", 9);
	assert_body_refused("{'a':1}", 7);
	assert_body_refused("{\"a\":1,}", 8);
	assert_body_refused("{\"a\":NaN}", 9);
	/* a NUL byte inside the declared length */
	assert_body_refused("{}\0", 3);
	assert_body_refused("\0{}", 3);
}

/* Deeply nested input is refused, not a stack overflow. */
static void test_body_deep(void **state)
{
	enum { DEPTH = 100000 };
	char *deep = malloc(2 * DEPTH + 16);

	(void)state;
	assert_non_null(deep);
	size_t n = 0;
	memcpy(deep, "{\"a\":", 5);
	n = 5;
	for (int i = 0; i < DEPTH; i++)
		deep[n++] = '[';
	for (int i = 0; i < DEPTH; i++)
		deep[n++] = ']';
	deep[n++] = '}';
	assert_body_refused(deep, n);
	free(deep);
}

static void test_reply_json(void **state)
{
	struct request req;

	(void)state;
	req_init(&req, NULL, 0);
	http_reply_json(&req, 201, json_pack("{s:i}", "a", 1));
	assert_int_equal(req.rep_status, 201);
	assert_string_equal(content_type(&req), "application/json");
	/* any JSON value may be a reply */
	http_reply_json(&req, 200, json_string("x"));
	assert_int_equal(req.rep_status, 200);
	assert_string_equal(content_type(&req), "application/json");
	/* a failed build (NULL) becomes a bare 500 */
	http_reply_json(&req, 200, NULL);
	assert_int_equal(req.rep_status, 500);
	assert_null(content_type(&req));
	req_done(&req);
}

static void test_reply_empty(void **state)
{
	struct request req;

	(void)state;
	req_init(&req, NULL, 0);
	http_reply_empty(&req, 204);
	assert_int_equal(req.rep_status, 204);
	assert_null(content_type(&req));
	http_reply_bytes(&req, 200, "text/plain", "hello", 5);
	assert_int_equal(req.rep_status, 200);
	assert_string_equal(content_type(&req), "text/plain");
	req_done(&req);
}

static void test_headers(void **state)
{
	struct request req;
	char name[32], value[32];

	(void)state;
	req_init(&req, NULL, 0);
	http_reply_empty(&req, 200);
	/* copied: the caller's buffers may change afterwards */
	snprintf(name, sizeof(name), "ETag");
	snprintf(value, sizeof(value), "\"7\"");
	http_set_header(&req, name, value);
	name[0] = value[1] = '#';
	assert_string_equal(MHD_get_response_header(req.rep_response, "ETag"), "\"7\"");
	/* a new reply drops the headers set for the one it replaces */
	request_fail(&req, 409, "lease_lost", "a newer attempt holds the lease");
	assert_int_equal(req.rep_status, 409);
	/* a failure is recorded, not answered: http.c answers it as it sends */
	assert_null(req.rep_response);
	http_set_header(&req, "Retry-After", "2");
	problem_answer(&req);
	assert_non_null(req.rep_response);
	assert_null(MHD_get_response_header(req.rep_response, "ETag"));
	assert_string_equal(MHD_get_response_header(req.rep_response, "Retry-After"), "2");
	assert_string_equal(req.rep_code, "lease_lost");
	req_done(&req);
	/* without a reply there is nothing to add to, and nothing breaks */
	req_init(&req, NULL, 0);
	http_set_header(&req, "ETag", "\"8\"");
	assert_null(req.rep_response);
	req_done(&req);
}

/* The real reply path keeps status and type when the detail is not UTF-8. */
static void test_problem_fallback(void **state)
{
	struct request req;

	(void)state;
	req_init(&req, NULL, 0);
	request_fail(&req, 422, "operation_unknown", "no operation named %s", "\xc3\x28");
	problem_answer(&req);
	assert_int_equal(req.rep_status, 422);
	assert_string_equal(content_type(&req), "application/problem+json");
	req_done(&req);

	req_init(&req, NULL, 0);
	request_unavailable(&req);
	problem_answer(&req);
	assert_int_equal(req.rep_status, 503);
	assert_string_equal(content_type(&req), "application/problem+json");
	assert_string_equal(MHD_get_response_header(req.rep_response, "Retry-After"), "1");
	req_done(&req);
}

UNIT_MAIN(cmocka_unit_test(test_redact_paths), cmocka_unit_test(test_body_object),
	  cmocka_unit_test(test_body_refused), cmocka_unit_test(test_body_deep),
	  cmocka_unit_test(test_reply_json), cmocka_unit_test(test_reply_empty),
	  cmocka_unit_test(test_headers), cmocka_unit_test(test_problem_fallback))
