/* Unit tests for problem documents and replies (RFC 9457): the exact body
 * request_fail records and problem_answer sends, read from the reply as
 * http.c would send it (unit_reply.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "request.h"
#include "problem.h"
#include "unit.h"
#include "unit_reply.h"

static void assert_problem(struct request *req, unsigned status, const char *code,
			   const char *detail);

/* REQ's reply is a problem document with these fields. */
static void assert_problem(struct request *req, unsigned status, const char *code,
			   const char *detail)
{
	char type[160];

	assert_int_equal(unit_reply(req), status);
	assert_string_equal(unit_reply_code(req), code);
	json_t *doc = unit_reply_json(req);
	assert_true(json_is_object(doc));
	assert_int_equal(json_object_size(doc), 5);
	snprintf(type, sizeof(type), "https://idemd.dev/problems/%s", code);
	assert_string_equal(json_string_value(json_object_get(doc, "type")), type);
	assert_string_equal(json_string_value(json_object_get(doc, "title")),
			    problem_title(status));
	assert_true(json_is_integer(json_object_get(doc, "status")));
	assert_int_equal(json_integer_value(json_object_get(doc, "status")), status);
	assert_string_equal(json_string_value(json_object_get(doc, "detail")), detail);
	assert_string_equal(json_string_value(json_object_get(doc, "code")), code);
	json_decref(doc);
}

static void test_titles(void **state)
{
	static const struct {
		unsigned status;
		const char *title;
	} cases[] = {
		{ 400, "Bad Request" },
		{ 401, "Unauthorized" },
		{ 403, "Forbidden" },
		{ 404, "Not Found" },
		{ 405, "Method Not Allowed" },
		{ 408, "Request Timeout" },
		{ 409, "Conflict" },
		{ 410, "Gone" },
		{ 412, "Precondition Failed" },
		{ 413, "Content Too Large" },
		{ 415, "Unsupported Media Type" },
		{ 422, "Unprocessable Content" },
		{ 428, "Precondition Required" },
		{ 429, "Too Many Requests" },
		{ 500, "Internal Server Error" },
		{ 502, "Bad Gateway" },
		{ 503, "Service Unavailable" },
		{ 504, "Gateway Timeout" },
		/* anything else gets a generic, never NULL, title */
		{ 0, "Error" },
		{ 200, "Error" },
		{ 418, "Error" },
		{ 599, "Error" },
		{ 4294967295u, "Error" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *t = problem_title(cases[i].status);
		assert_non_null(t);
		assert_string_equal(t, cases[i].title);
	}
}

static void test_document_fields(void **state)
{
	(void)state;
	json_t *doc = problem_document(412, "version_mismatch", "the counter is at version 7");

	assert_non_null(doc);
	assert_int_equal(json_object_size(doc), 5);
	assert_string_equal(json_string_value(json_object_get(doc, "type")),
			    "https://idemd.dev/problems/version_mismatch");
	assert_string_equal(json_string_value(json_object_get(doc, "title")),
			    "Precondition Failed");
	assert_true(json_is_integer(json_object_get(doc, "status")));
	assert_int_equal(json_integer_value(json_object_get(doc, "status")), 412);
	assert_string_equal(json_string_value(json_object_get(doc, "detail")),
			    "the counter is at version 7");
	assert_string_equal(json_string_value(json_object_get(doc, "code")), "version_mismatch");
	json_decref(doc);
}

/* Fields come out in a fixed order, so replies are byte-stable. */
static void test_document_text(void **state)
{
	(void)state;
	json_t *doc = problem_document(404, "not_found", "no such resource");
	char *text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);

	assert_non_null(text);
	assert_string_equal(text, "{\"type\":\"https://idemd.dev/problems/not_found\","
				  "\"title\":\"Not Found\",\"status\":404,"
				  "\"detail\":\"no such resource\",\"code\":\"not_found\"}");
	free(text);
	json_decref(doc);
}

static void test_document_utf8(void **state)
{
	(void)state;
	/* valid UTF-8 and characters JSON must escape are kept */
	json_t *doc = problem_document(400, "invalid_request", "caf\xc3\xa9 \"q\" \\ \n");
	assert_non_null(doc);
	assert_string_equal(json_string_value(json_object_get(doc, "detail")),
			    "caf\xc3\xa9 \"q\" \\ \n");
	json_decref(doc);
	assert_null(problem_document(400, "invalid_request", "bad \xff byte"));
	assert_null(problem_document(400, "invalid_request", "truncated \xc3"));
	assert_null(problem_document(400, "invalid_request", "overlong \xc0\xaf"));
	assert_null(problem_document(400, "invalid_request", "surrogate \xed\xa0\x80"));
	/* an empty detail is still a document */
	doc = problem_document(500, "internal", "");
	assert_non_null(doc);
	assert_string_equal(json_string_value(json_object_get(doc, "detail")), "");
	json_decref(doc);
}

static void test_reply(void **state)
{
	struct request req = { 0 };

	(void)state;
	request_fail(&req, 404, "not_found", "no such resource");
	assert_problem(&req, 404, "not_found", "no such resource");
	assert_int_equal(unit_reply_headers(&req), 0);
	unit_reply_free(&req);
}

static void test_reply_format(void **state)
{
	struct request req = { 0 };

	(void)state;
	request_fail(&req, 400, "invalid_request", "field %s must be from %d to %lld", "count", 1,
		     100LL);
	assert_problem(&req, 400, "invalid_request", "field count must be from 1 to 100");
	unit_reply_free(&req);
}

/* A detail that is not UTF-8 (say, echoing client bytes) still gets a
 * problem with the right status and code, not a 500. */
static void test_reply_invalid_utf8(void **state)
{
	struct request req = { 0 };

	(void)state;
	request_fail(&req, 422, "operation_unknown", "no operation named %s", "x\xff\xfey");
	assert_problem(&req, 422, "operation_unknown", "invalid input");
	unit_reply_free(&req);
}

/* Details are cut at 511 bytes rather than overflowing. */
static void test_reply_long_detail(void **state)
{
	struct request req = { 0 };
	char longer[2000], expected[512];

	(void)state;
	memset(longer, 'd', sizeof(longer) - 1);
	longer[sizeof(longer) - 1] = '\0';
	memset(expected, 'd', sizeof(expected) - 1);
	expected[sizeof(expected) - 1] = '\0';
	request_fail(&req, 400, "invalid_request", "%s", longer);
	assert_problem(&req, 400, "invalid_request", expected);
	unit_reply_free(&req);
}

static void test_unavailable(void **state)
{
	struct request req = { 0 };

	(void)state;
	request_unavailable(&req);
	assert_problem(&req, 503, "unavailable", "the database is unavailable; retry shortly");
	assert_int_equal(unit_reply_headers(&req), 1);
	assert_string_equal(unit_reply_header(&req, "Retry-After"), "1");
	unit_reply_free(&req);
}

/* Every code the API documents renders as a problem of its status. */
static void test_api_codes(void **state)
{
	static const struct {
		unsigned status;
		const char *code;
	} codes[] = {
		{ 400, "idempotency_key_missing" },
		{ 400, "token_malformed" },
		{ 403, "token_invalid" },
		{ 403, "token_scope_mismatch" },
		{ 410, "token_expired" },
		{ 410, "token_revoked" },
		{ 412, "version_mismatch" },
		{ 428, "version_required" },
		{ 409, "lease_lost" },
		{ 409, "request_in_progress" },
		{ 422, "fingerprint_mismatch" },
		{ 401, "unauthorized" },
		{ 400, "invalid_request" },
		{ 422, "operation_unknown" },
		{ 413, "payload_too_large" },
		{ 503, "unavailable" },
	};
	struct request req = { 0 };

	(void)state;
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		request_fail(&req, codes[i].status, codes[i].code, "detail %zu", i);
		char detail[32];
		snprintf(detail, sizeof(detail), "detail %zu", i);
		assert_problem(&req, codes[i].status, codes[i].code, detail);
	}
	unit_reply_free(&req);
}

UNIT_MAIN(cmocka_unit_test(test_titles), cmocka_unit_test(test_document_fields),
	  cmocka_unit_test(test_document_text), cmocka_unit_test(test_document_utf8),
	  cmocka_unit_test(test_reply), cmocka_unit_test(test_reply_format),
	  cmocka_unit_test(test_reply_invalid_utf8), cmocka_unit_test(test_reply_long_detail),
	  cmocka_unit_test(test_unavailable), cmocka_unit_test(test_api_codes))
