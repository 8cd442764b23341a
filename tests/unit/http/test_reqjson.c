/* Unit tests for the request JSON helpers: field checks and their 400
 * problems, ETags, names, times and stored-response rendering.
 *
 * The field checks run on a request without a connection; their problems
 * are read back from the reply as http.c would send it (unit_reply.h).
 * None of these replies carries a header. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <jansson.h>

#include "request.h"
#include "reqjson.h"
#include "store.h"
#include "unit.h"
#include "unit_reply.h"

static json_t *load(const char *text);
static void assert_no_reply(const struct request *req);
static void assert_invalid_request(struct request *req, const char *detail);
static void assert_etag_ok(const char *value, int64_t expected);
static void assert_etag_refused(const char *value);
static void assert_time(int64_t unix_ms, const char *expected);
static void assert_response(const struct stored_response *r, const char *expected);

static json_t *load(const char *text)
{
	json_error_t err;
	json_t *v = json_loads(text, JSON_DECODE_ANY, &err);

	if (v == NULL)
		fail_msg("json_loads(%s): %s", text, err.text);
	return v;
}

static void assert_no_reply(const struct request *req)
{
	assert_false(unit_replied(req));
}

/* REQ's reply is a 400 invalid_request problem with DETAIL; forgets it. */
static void assert_invalid_request(struct request *req, const char *detail)
{
	assert_int_equal(unit_reply(req), 400);
	assert_string_equal(unit_reply_code(req), "invalid_request");
	assert_int_equal(unit_reply_headers(req), 0);
	json_t *doc = unit_reply_json(req);
	assert_string_equal(json_string_value(json_object_get(doc, "code")), "invalid_request");
	assert_int_equal(json_integer_value(json_object_get(doc, "status")), 400);
	assert_string_equal(json_string_value(json_object_get(doc, "detail")), detail);
	json_decref(doc);
	unit_reply_free(req);
}

/* ---- reqjson_only ---- */

static void test_only(void **state)
{
	static const char *const allowed[] = { "operation", "subject", "count", NULL };
	static const char *const none[] = { NULL };
	struct request req = { 0 };

	(void)state;
	json_t *o = load("{}");
	assert_int_equal(reqjson_only(&req, o, allowed), 0);
	assert_int_equal(reqjson_only(&req, o, none), 0);
	json_decref(o);

	o = load("{\"operation\":\"a\",\"subject\":\"b\",\"count\":3}");
	assert_int_equal(reqjson_only(&req, o, allowed), 0);
	assert_no_reply(&req);
	json_decref(o);

	static const struct {
		const char *doc;
		const char *const *names;
		const char *detail;
	} unknown[] = {
		{ "{\"operation\":\"a\",\"Subject\":\"b\"}", allowed, "unknown field Subject" },
		{ "{\"subject\":\"b\",\"\":1}", allowed, "unknown field " },
		{ "{\"a\":1}", none, "unknown field a" },
		/* a prefix of an allowed name is not that name */
		{ "{\"count_\":1}", allowed, "unknown field count_" },
	};
	for (size_t i = 0; i < UNIT_COUNT(unknown); i++) {
		o = load(unknown[i].doc);
		assert_int_equal(reqjson_only(&req, o, unknown[i].names), -1);
		assert_invalid_request(&req, unknown[i].detail);
		json_decref(o);
	}
}

/* ---- reqjson_int ---- */

static void test_int(void **state)
{
	struct request req = { 0 };
	int64_t v = -7;
	int present = -1;

	(void)state;
	json_t *o = load("{\"n\":5,\"lo\":1,\"hi\":100,\"zero\":0,\"neg\":-1,"
			 "\"s\":\"5\",\"f\":5.5,\"g\":5.0,\"b\":true,\"z\":null,\"a\":[5],\"o\":{},"
			 "\"max\":9223372036854775807,\"min\":-9223372036854775808}");

	assert_int_equal(reqjson_int(&req, o, "n", 1, 1, 100, &v, &present), 0);
	assert_int_equal(v, 5);
	assert_int_equal(present, 1);
	assert_int_equal(reqjson_int(&req, o, "lo", 1, 1, 100, &v, &present), 0);
	assert_int_equal(v, 1);
	assert_int_equal(reqjson_int(&req, o, "hi", 1, 1, 100, &v, &present), 0);
	assert_int_equal(v, 100);
	/* a zero fraction is an integer, as JSON Schema counts it */
	assert_int_equal(reqjson_int(&req, o, "g", 1, 1, 100, &v, &present), 0);
	assert_int_equal(v, 5);
	assert_no_reply(&req);

	/* absent: fine when optional, *out untouched */
	v = -7;
	assert_int_equal(reqjson_int(&req, o, "missing", 0, 1, 100, &v, &present), 0);
	assert_int_equal(present, 0);
	assert_int_equal(v, -7);
	assert_no_reply(&req);
	assert_int_equal(reqjson_int(&req, o, "missing", 1, 1, 100, &v, &present), -1);
	assert_int_equal(present, 0);
	assert_invalid_request(&req, "field missing is required");

	/* out of range */
	assert_int_equal(reqjson_int(&req, o, "zero", 1, 1, 100, &v, &present), -1);
	assert_int_equal(present, 1);
	assert_invalid_request(&req, "field zero must be an integer from 1 to 100");
	assert_int_equal(reqjson_int(&req, o, "neg", 0, 0, 100, &v, &present), -1);
	assert_invalid_request(&req, "field neg must be an integer from 0 to 100");
	assert_int_equal(reqjson_int(&req, o, "hi", 1, 1, 99, &v, &present), -1);
	assert_invalid_request(&req, "field hi must be an integer from 1 to 99");

	/* not an integer, even when it looks like one */
	static const char *const wrong[] = { "s", "f", "b", "z", "a", "o" };
	for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
		char detail[128];
		v = -7;
		assert_int_equal(reqjson_int(&req, o, wrong[i], 1, 0, 100, &v, &present), -1);
		assert_int_equal(present, 1);
		assert_int_equal(v, -7);
		snprintf(detail, sizeof(detail), "field %s must be an integer from 0 to 100",
			 wrong[i]);
		assert_invalid_request(&req, detail);
	}

	/* the full int64 range */
	assert_int_equal(reqjson_int(&req, o, "max", 1, INT64_MIN, INT64_MAX, &v, &present), 0);
	assert_true(v == INT64_MAX);
	assert_int_equal(reqjson_int(&req, o, "min", 1, INT64_MIN, INT64_MAX, &v, &present), 0);
	assert_true(v == INT64_MIN);
	assert_no_reply(&req);
	json_decref(o);
}

/* ---- reqjson_string ---- */

static void test_string(void **state)
{
	struct request req = { 0 };
	const char *s = "stale";

	(void)state;
	json_t *o = load("{\"one\":\"a\",\"four\":\"abcd\",\"empty\":\"\","
			 "\"num\":1,\"null\":null,\"arr\":[\"a\"],\"utf8\":\"\\u00e9\"}");

	/* the HTTP parser refuses \u0000, but the check must not rely on it */
	assert_int_equal(json_object_set_new(o, "nul", json_stringn("a\0b", 3)), 0);
	assert_int_equal(reqjson_string(&req, o, "four", 1, 1, 4, &s), 0);
	assert_string_equal(s, "abcd");
	/* borrowed from the object */
	assert_ptr_equal(s, json_string_value(json_object_get(o, "four")));
	assert_int_equal(reqjson_string(&req, o, "one", 1, 1, 4, &s), 0);
	assert_string_equal(s, "a");
	assert_int_equal(reqjson_string(&req, o, "empty", 1, 0, 4, &s), 0);
	assert_string_equal(s, "");
	/* lengths are bytes: U+00E9 is two */
	assert_int_equal(reqjson_string(&req, o, "utf8", 1, 2, 2, &s), 0);
	assert_string_equal(s, "\xc3\xa9");
	assert_no_reply(&req);

	s = "stale";
	assert_int_equal(reqjson_string(&req, o, "missing", 0, 1, 4, &s), 0);
	assert_null(s);
	assert_no_reply(&req);
	s = "stale";
	assert_int_equal(reqjson_string(&req, o, "missing", 1, 1, 4, &s), -1);
	assert_null(s);
	assert_invalid_request(&req, "field missing is required");

	assert_int_equal(reqjson_string(&req, o, "four", 1, 1, 3, &s), -1);
	assert_null(s);
	assert_invalid_request(&req, "field four must be a string of 1 to 3 bytes without NUL");
	assert_int_equal(reqjson_string(&req, o, "one", 1, 2, 3, &s), -1);
	assert_invalid_request(&req, "field one must be a string of 2 to 3 bytes without NUL");
	assert_int_equal(reqjson_string(&req, o, "empty", 0, 1, 3, &s), -1);
	assert_invalid_request(&req, "field empty must be a string of 1 to 3 bytes without NUL");
	assert_int_equal(reqjson_string(&req, o, "utf8", 1, 1, 1, &s), -1);
	assert_invalid_request(&req, "field utf8 must be a string of 1 to 1 bytes without NUL");
	assert_int_equal(reqjson_string(&req, o, "nul", 1, 1, 10, &s), -1);
	assert_null(s);
	assert_invalid_request(&req, "field nul must be a string of 1 to 10 bytes without NUL");

	static const char *const wrong[] = { "num", "null", "arr" };
	for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
		char detail[128];
		assert_int_equal(reqjson_string(&req, o, wrong[i], 0, 0, 10, &s), -1);
		snprintf(detail, sizeof(detail),
			 "field %s must be a string of 0 to 10 bytes without NUL", wrong[i]);
		assert_invalid_request(&req, detail);
	}
	json_decref(o);
}

/* ---- the checks without a request ---- */

static void test_why(void **state)
{
	static const char *const allowed[] = { "subject", NULL };
	char why[REQJSON_WHY];
	const char *s;
	int64_t n;
	int present;
	struct request req = { 0 };

	(void)state;
	/* the refusal is written to WHY, and nothing is replied */
	json_t *o = load("{\"subject\":7,\"extra\":1}");
	assert_int_equal(reqjson_only_why(o, allowed, why), -1);
	assert_string_equal(why, "unknown field extra");
	assert_int_equal(reqjson_string_why(o, "subject", 0, 1, 4, &s, why), -1);
	assert_string_equal(why, "field subject must be a string of 1 to 4 bytes without NUL");
	assert_int_equal(reqjson_int_why(o, "count", 1, 0, 9, &n, &present, why), -1);
	assert_string_equal(why, "field count is required");
	assert_no_reply(&req);
	json_decref(o);

	/* a long name is cut at a character boundary, never inside one */
	char doc[1200];
	int len = snprintf(doc, sizeof(doc), "{\"");
	for (int i = 0; i < 300; i++)
		len += snprintf(doc + len, sizeof(doc) - (size_t)len, "\xc3\xa9");
	snprintf(doc + len, sizeof(doc) - (size_t)len, "\":1}");
	o = load(doc);
	assert_int_equal(reqjson_only_why(o, allowed, why), -1);
	assert_true(strlen(why) < REQJSON_WHY);
	assert_int_equal((strlen(why) - strlen("unknown field ")) % 2, 0);
	json_decref(o);

	/* a request records what WHY says, or 503 when it says nothing */
	assert_int_equal(reqjson_refused(&req, -1, "field x is required"), -1);
	assert_invalid_request(&req, "field x is required");
	assert_int_equal(reqjson_refused(&req, -1, ""), -1);
	assert_int_equal(unit_reply(&req), 503);
	unit_reply_free(&req);
	assert_int_equal(reqjson_refused(&req, 0, "unused"), 0);
	assert_no_reply(&req);
}

/* ---- ETags ---- */

static void assert_etag_ok(const char *value, int64_t expected)
{
	int64_t v = -12345;

	if (reqjson_etag(value, &v) != 0)
		fail_msg("ETag [%s] refused, expected %lld", value, (long long)expected);
	if (v != expected)
		fail_msg("ETag [%s] parsed as %lld, expected %lld", value, (long long)v,
			 (long long)expected);
}

static void assert_etag_refused(const char *value)
{
	int64_t v = -12345;

	if (reqjson_etag(value, &v) != -1)
		fail_msg("ETag [%s] accepted as %lld", value, (long long)v);
	assert_int_equal(v, -12345);
}

static void test_etag_parse(void **state)
{
	(void)state;
	assert_etag_ok("\"0\"", 0);
	assert_etag_ok("\"1\"", 1);
	assert_etag_ok("\"123\"", 123);
	assert_etag_ok(" \"7\"", 7);
	assert_etag_ok("\"7\" ", 7);
	assert_etag_ok("   \"7\"   ", 7);
	assert_etag_ok("\"9223372036854775807\"", INT64_MAX);

	assert_etag_refused("");
	assert_etag_refused(" ");
	assert_etag_refused("\"\"");
	assert_etag_refused("\"");
	assert_etag_refused("*");
	assert_etag_refused("\"*\"");
	/* weak tags are well formed but match no version (strong comparison) */
	assert_etag_ok("W/\"1\"", REQJSON_ETAG_WEAK);
	assert_etag_ok(" W/\"0\" ", REQJSON_ETAG_WEAK);
	assert_etag_refused("W/");
	assert_etag_refused("W/\"\"");
	assert_etag_refused("W/\"x\"");
	assert_etag_refused("W/ \"1\"");
	assert_etag_refused("W/W/\"1\"");
	assert_etag_refused("w/\"1\"");
	assert_etag_refused("1");
	assert_etag_refused("123");
	assert_etag_refused("'1'");
	assert_etag_refused("\"1");
	assert_etag_refused("1\"");
	assert_etag_refused("\"-1\"");
	assert_etag_refused("-\"1\"");
	assert_etag_refused("\"+1\"");
	assert_etag_refused("\" 1\"");
	assert_etag_refused("\"1 \"");
	assert_etag_refused("\"1.0\"");
	assert_etag_refused("\"1e3\"");
	assert_etag_refused("\"0x10\"");
	assert_etag_refused("\"abc\"");
	assert_etag_refused("\"9223372036854775808\"");
	assert_etag_refused("\"18446744073709551616\"");
	assert_etag_refused("\"99999999999999999999999999\"");
	assert_etag_refused("\"1\"x");
	assert_etag_refused("\"1\" x");
	assert_etag_refused("\"1\"\"");
	assert_etag_refused("\"1\",");
	assert_etag_refused("\"1\", \"2\"");
	assert_etag_refused("\"1\"\"2\"");
}

static void test_etag_format(void **state)
{
	static const int64_t versions[] = { 0, 1, 7, 123, 1000000, INT64_MAX };
	char buf[32];

	(void)state;
	reqjson_etag_format(0, buf, sizeof(buf));
	assert_string_equal(buf, "\"0\"");
	reqjson_etag_format(123, buf, sizeof(buf));
	assert_string_equal(buf, "\"123\"");
	reqjson_etag_format(INT64_MAX, buf, sizeof(buf));
	assert_string_equal(buf, "\"9223372036854775807\"");
	/* the format parses back to the same version */
	for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++) {
		int64_t v;
		reqjson_etag_format(versions[i], buf, sizeof(buf));
		assert_int_equal(reqjson_etag(buf, &v), 0);
		assert_true(v == versions[i]);
	}
	/* a short buffer truncates and stays terminated */
	memset(buf, 'x', sizeof(buf));
	reqjson_etag_format(12345, buf, 4);
	assert_string_equal(buf, "\"12");
	assert_int_equal(buf[4], 'x');
}

/* ---- names ---- */

static void test_valid_name(void **state)
{
	char name[STORE_NAME_MAX + 2];

	(void)state;
	assert_int_equal(reqjson_valid_name("a"), 1);
	assert_int_equal(reqjson_valid_name("order.create"), 1);
	assert_int_equal(reqjson_valid_name("payment-capture_v2"), 1);
	assert_int_equal(reqjson_valid_name("0"), 1);
	assert_int_equal(reqjson_valid_name("abcdefghijklmnopqrstuvwxyz0123456789._-"), 1);

	assert_int_equal(reqjson_valid_name(""), 0);
	assert_int_equal(reqjson_valid_name("Order"), 0);
	assert_int_equal(reqjson_valid_name("orderA"), 0);
	assert_int_equal(reqjson_valid_name("order create"), 0);
	assert_int_equal(reqjson_valid_name(" order"), 0);
	assert_int_equal(reqjson_valid_name("order/create"), 0);
	assert_int_equal(reqjson_valid_name("order:create"), 0);
	assert_int_equal(reqjson_valid_name("order+create"), 0);
	assert_int_equal(reqjson_valid_name("order\tcreate"), 0);
	assert_int_equal(reqjson_valid_name("caf\xc3\xa9"), 0);
	assert_int_equal(reqjson_valid_name("order%2e"), 0);

	memset(name, 'a', STORE_NAME_MAX);
	name[STORE_NAME_MAX] = '\0';
	assert_int_equal(STORE_NAME_MAX, 64);
	assert_int_equal(reqjson_valid_name(name), 1);
	name[STORE_NAME_MAX] = 'a';
	name[STORE_NAME_MAX + 1] = '\0';
	assert_int_equal(reqjson_valid_name(name), 0);
	/* a bad character at the last allowed position */
	name[STORE_NAME_MAX - 1] = 'A';
	name[STORE_NAME_MAX] = '\0';
	assert_int_equal(reqjson_valid_name(name), 0);
}

/* ---- times ---- */

static void assert_time(int64_t unix_ms, const char *expected)
{
	json_t *t = rfc3339_json(unix_ms);

	assert_non_null(t);
	assert_true(json_is_string(t));
	assert_string_equal(json_string_value(t), expected);
	json_decref(t);
}

static void test_time(void **state)
{
	(void)state;
	assert_time(0, "1970-01-01T00:00:00.000Z");
	assert_time(1, "1970-01-01T00:00:00.001Z");
	assert_time(999, "1970-01-01T00:00:00.999Z");
	assert_time(1000, "1970-01-01T00:00:01.000Z");
	assert_time(1700000000123, "2023-11-14T22:13:20.123Z");
	assert_time(951782400000, "2000-02-29T00:00:00.000Z");
	assert_time(4102444800000, "2100-01-01T00:00:00.000Z");
	assert_time(253402300799999, "9999-12-31T23:59:59.999Z");
}

/* ---- stored responses ---- */

/* reqjson_response(R) serialises (sorted keys) to EXPECTED. */
static void assert_response(const struct stored_response *r, const char *expected)
{
	json_t *out = reqjson_response(r);

	assert_non_null(out);
	char *text = json_dumps(out, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
	assert_non_null(text);
	assert_string_equal(text, expected);
	free(text);
	json_decref(out);
}

static void test_response_json(void **state)
{
	static const char body[] = "{\"id\":42,\"items\":[1,2]}";
	struct stored_response r = { 0 };

	(void)state;
	r.sr_status = 201;
	r.sr_headers = (char *)(uintptr_t) "{\"location\":\"/orders/42\"}";
	r.sr_body = (unsigned char *)(uintptr_t)body;
	r.sr_body_len = strlen(body);
	r.sr_is_json = 1;
	assert_response(&r, "{\"body\":{\"id\":42,\"items\":[1,2]},"
			    "\"headers\":{\"location\":\"/orders/42\"},\"status\":201}");

	/* any JSON value is a body, not only objects */
	static const char scalar[] = "\"done\"";
	r.sr_body = (unsigned char *)(uintptr_t)scalar;
	r.sr_body_len = strlen(scalar);
	assert_response(&r, "{\"body\":\"done\","
			    "\"headers\":{\"location\":\"/orders/42\"},\"status\":201}");
	static const char null_body[] = "null";
	r.sr_body = (unsigned char *)(uintptr_t)null_body;
	r.sr_body_len = strlen(null_body);
	assert_response(&r, "{\"body\":null,"
			    "\"headers\":{\"location\":\"/orders/42\"},\"status\":201}");

	/* only sr_body_len bytes are read */
	r.sr_body = (unsigned char *)(uintptr_t) "[1,2]garbage";
	r.sr_body_len = 5;
	assert_response(&r, "{\"body\":[1,2],"
			    "\"headers\":{\"location\":\"/orders/42\"},\"status\":201}");
}

static void test_response_base64(void **state)
{
	static const unsigned char bin[] = { 0x00, 0x01, 0xff, 0xfe, ' ', 'h', 'i' };
	struct stored_response r = { 0 };

	(void)state;
	r.sr_status = 200;
	r.sr_headers = (char *)(uintptr_t) "{\"content-type\":\"application/octet-stream\"}";
	r.sr_body = (unsigned char *)(uintptr_t)bin;
	r.sr_body_len = sizeof(bin);
	r.sr_is_json = 0;
	assert_response(&r, "{\"body_base64\":\"AAH//iBoaQ==\","
			    "\"headers\":{\"content-type\":\"application/octet-stream\"},"
			    "\"status\":200}");

	/* one byte: padded */
	r.sr_body_len = 1;
	assert_response(&r, "{\"body_base64\":\"AA==\","
			    "\"headers\":{\"content-type\":\"application/octet-stream\"},"
			    "\"status\":200}");

	/* text that is not JSON is still base64 when not flagged JSON */
	r.sr_body = (unsigned char *)(uintptr_t) "plain";
	r.sr_body_len = 5;
	assert_response(&r, "{\"body_base64\":\"cGxhaW4=\","
			    "\"headers\":{\"content-type\":\"application/octet-stream\"},"
			    "\"status\":200}");
}

static void test_response_empty(void **state)
{
	struct stored_response r = { 0 };

	(void)state;
	/* no body, no headers */
	r.sr_status = 204;
	assert_response(&r, "{\"body\":null,\"headers\":{},\"status\":204}");
	/* a zero-length body flagged JSON is null too */
	r.sr_is_json = 1;
	r.sr_body = (unsigned char *)(uintptr_t) "";
	assert_response(&r, "{\"body\":null,\"headers\":{},\"status\":204}");
	/* unreadable stored JSON degrades to null / {} rather than failing */
	r.sr_status = 200;
	r.sr_headers = (char *)(uintptr_t) "{not json";
	r.sr_body = (unsigned char *)(uintptr_t) "{not json";
	r.sr_body_len = 9;
	assert_response(&r, "{\"body\":null,\"headers\":{},\"status\":200}");
	r.sr_headers = (char *)(uintptr_t) "{}";
	assert_response(&r, "{\"body\":null,\"headers\":{},\"status\":200}");
}

/* Keys come out in the documented order: status, headers, body. */
static void test_response_order(void **state)
{
	static const char body[] = "{\"b\":1,\"a\":2}";
	struct stored_response r = { 0 };

	(void)state;
	r.sr_status = 200;
	r.sr_headers = (char *)(uintptr_t) "{\"x-b\":\"1\",\"x-a\":\"2\"}";
	r.sr_body = (unsigned char *)(uintptr_t)body;
	r.sr_body_len = strlen(body);
	r.sr_is_json = 1;
	json_t *out = reqjson_response(&r);
	assert_non_null(out);
	char *text = json_dumps(out, JSON_COMPACT | JSON_PRESERVE_ORDER);
	assert_non_null(text);
	assert_string_equal(text, "{\"status\":200,\"headers\":{\"x-b\":\"1\",\"x-a\":\"2\"},"
				  "\"body\":{\"b\":1,\"a\":2}}");
	free(text);
	json_decref(out);
}

/* reqjson_response_text gives json_dumps(reqjson_response(r)) byte for
 * byte: headers flat or not (spaces as PostgreSQL's jsonb writes them, an
 * escape, a number, a name twice, none), bodies JSON (idemd's own compact
 * dump, or anyone's), binary, empty. */
static void test_response_text(void **state)
{
	static const char *const headers[] = {
		NULL,
		"{}",
		"{\"x-order\": \"17\", \"location\": \"/orders/1\"}",
		"{\"a\":\"x\\\"y\"}",
		"{\"a\": 1}",
		"{\"a\": \"1\", \"a\": \"2\"}",
		"{\"content-type\":\"text/plain; charset=utf-8\"}",
	};
	json_t *own = json_pack("{s:i,s:s,s:[n,b,f],s:s#}", "order", 17, "name", "caf\xc3\xa9",
				"list", 1, 1.5, "nul", "a\0b", (size_t)3);
	char *own_text = json_dumps(own, JSON_COMPACT | JSON_ENCODE_ANY);
	static const unsigned char binary[] = { 0, 1, 2, 0xff, 'x' };
	static const char loose[] = "{ \"b\" : [1, 2] , \"a\":null }";

	(void)state;
	assert_non_null(own_text);
	for (size_t i = 0; i < UNIT_COUNT(headers); i++)
		for (int kind = 0; kind < 4; kind++) {
			struct stored_response r = { 0 };
			struct buf b = { 0 };
			int own_body = 0;
			r.sr_status = 201 + kind;
			r.sr_headers = (char *)(uintptr_t)headers[i];
			if (kind == 0) {
				r.sr_body = (unsigned char *)own_text;
				r.sr_body_len = strlen(own_text);
				r.sr_is_json = 1;
				own_body = 1;
			} else if (kind == 1) {
				r.sr_body = (unsigned char *)(uintptr_t)loose;
				r.sr_body_len = strlen(loose);
				r.sr_is_json = 1;
			} else if (kind == 2) {
				r.sr_body = (unsigned char *)(uintptr_t)binary;
				r.sr_body_len = sizeof(binary);
			}
			json_t *o = reqjson_response(&r);
			char *want = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
			assert_int_equal(reqjson_response_text(&b, &r, own_body), 0);
			if (strcmp(b.b_data, want) != 0)
				fail_msg("headers %zu, body %d:\n%s\n%s", i, kind, b.b_data, want);
			free(want);
			json_decref(o);
			buf_free(&b);
		}
	free(own_text);
	json_decref(own);
}

/* rfc3339_text agrees with gmtime_r and strftime, around leap days,
 * century rules, the epoch, negative times and far years. */
static void test_time_text_matches_strftime(void **state)
{
	static const int64_t fixed[] = { 0,
					 -1,
					 1,
					 999,
					 -999,
					 -1000,
					 951782400000,
					 951868799999,
					 4107542400000,
					 253402300799999,
					 253402300800000,
					 -62167219200000,
					 -62167219200001,
					 1709164800123,
					 INT64_C(32503680000000) };
	char a[RFC3339_MAX], b[64];
	uint32_t seed = 12345;

	(void)state;
	for (size_t i = 0; i < 200000 + sizeof(fixed) / sizeof(fixed[0]); i++) {
		int64_t t;
		if (i < sizeof(fixed) / sizeof(fixed[0])) {
			t = fixed[i];
		} else {
			seed = seed * 1103515245u + 12345u;
			uint64_t r = ((uint64_t)seed << 32) ^ (seed * 2654435761u);
			/* years about 1 to 9999 and a little beyond */
			t = (int64_t)(r % UINT64_C(320000000000000)) - INT64_C(63000000000000);
		}
		int64_t ms = ((t % 1000) + 1000) % 1000;
		time_t secs = (time_t)((t - ms) / 1000);
		struct tm tm;
		gmtime_r(&secs, &tm);
		size_t n = strftime(b, sizeof(b), "%Y-%m-%dT%H:%M:%S", &tm);
		snprintf(b + n, sizeof(b) - n, ".%03dZ", (int)ms);
		size_t len = rfc3339_text(t, a);
		assert_string_equal(a, b);
		assert_int_equal(len, strlen(b));
	}
}

/* The text jansson writes for the string S (without the quotes). */
static char *jansson_escaped(const char *s, size_t len)
{
	json_t *v = json_stringn(s, len);
	char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	size_t n = strlen(text);

	json_decref(v);
	memmove(text, text + 1, n - 2);
	text[n - 2] = '\0';
	return text;
}

/* reqjson_escape writes the bytes json_dumps does: every byte below 0x80
 * alone, and random strings of ASCII and multi-byte UTF-8. */
/* reqjson_flat takes only simple bodies, and each one it takes parses with
 * jansson to the same members and values. */
static void test_flat(void **state)
{
	static const struct {
		const char *body;
		int taken;
	} cases[] = {
		{ "{\"operation\":\"order.create\",\"subject\":\"user-42\"}", 1 },
		{ " {\r\n\t\"subject\" : \"u\" , \"count\":100 ,\"ttl_seconds\":0}\n ", 1 },
		{ "{}", 1 },
		{ "{ }", 1 },
		{ "{\"count\":999999999999999}", 1 },
		{ "{\"count\":1000000000000000}", 0 }, /* 16 digits */
		{ "{\"count\":01}", 0 },
		{ "{\"count\":-1}", 0 },
		{ "{\"count\":1.0}", 0 },
		{ "{\"count\":1e3}", 0 },
		{ "{\"count\":\"1\"}", 0 },
		{ "{\"subject\":1}", 0 },
		{ "{\"subject\":\"a\\\"b\"}", 0 },	/* an escape */
		{ "{\"subject\":\"caf\xc3\xa9\"}", 0 }, /* not ASCII */
		{ "{\"subject\":\"a\tb\"}", 0 },	/* a control character */
		{ "{\"subject\":\"a\",\"subject\":\"b\"}", 0 },
		{ "{\"other\":\"a\"}", 0 },
		{ "{\"subject\":\"a\",}", 0 },
		{ "{\"subject\":\"a\"", 0 },
		{ "{\"subject\":\"a\"}}", 0 },
		{ "{\"subject\":\"a\"} x", 0 },
		{ "{\"subject\" \"a\"}", 0 },
		{ "{\"subject\":}", 0 },
		{ "{\"subject\":null}", 0 },
		{ "[]", 0 },
		{ "", 0 },
		{ "{\"subj", 0 },
	};
	(void)state;
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct reqjson_field f[3] = {
			{ .rf_name = "operation", .rf_type = REQJSON_STRING },
			{ .rf_name = "subject", .rf_type = REQJSON_STRING },
			{ .rf_name = "count", .rf_type = REQJSON_UINT },
		};
		const char *b = cases[c].body;
		f[2].rf_name = strstr(b, "ttl_seconds") ? "ttl_seconds" : "count";
		int taken = reqjson_flat(b, strlen(b), f, 3);
		if (strstr(b, "ttl_seconds") != NULL) {
			/* both integer names in one body: a fourth field */
			struct reqjson_field g[4] = {
				f[0],
				f[1],
				{ .rf_name = "ttl_seconds", .rf_type = REQJSON_UINT },
				{ .rf_name = "count", .rf_type = REQJSON_UINT },
			};
			taken = reqjson_flat(b, strlen(b), g, 4);
			assert_int_equal(g[2].rf_num, 0);
			assert_int_equal(g[3].rf_num, 100);
			memcpy(f, g, sizeof(f));
		}
		if (taken != cases[c].taken)
			fail_msg("body %s: taken %d", b, taken);
		if (!taken)
			continue;
		json_t *j = json_loadb(b, strlen(b), JSON_REJECT_DUPLICATES, NULL);
		assert_non_null(j);
		for (size_t i = 0; i < 3; i++) {
			json_t *v = json_object_get(j, f[i].rf_name);
			assert_int_equal(f[i].rf_present, v != NULL);
			if (v == NULL)
				continue;
			if (f[i].rf_type == REQJSON_STRING) {
				assert_true(json_is_string(v));
				assert_int_equal(json_string_length(v), f[i].rf_len);
				assert_memory_equal(json_string_value(v), f[i].rf_str, f[i].rf_len);
			} else {
				assert_true(json_is_integer(v));
				assert_int_equal(json_integer_value(v), f[i].rf_num);
			}
		}
		json_decref(j);
	}
}

/* reqjson_members: any names, in order, at most MAX of them. */
static void test_members(void **state)
{
	static const char ok[] = "{\"location\":\"/orders/1\", \"x-a\" : \"\", \"n\": 7}";
	struct reqjson_member m[3];
	size_t n = 99;

	(void)state;
	assert_int_equal(reqjson_members(ok, strlen(ok), m, 3, &n), 1);
	assert_int_equal(n, 3);
	assert_int_equal(m[0].rm_name_len, 8);
	assert_memory_equal(m[0].rm_name, "location", 8);
	assert_true(m[0].rm_is_string);
	assert_int_equal(m[0].rm_len, 9);
	assert_memory_equal(m[0].rm_str, "/orders/1", 9);
	assert_memory_equal(m[1].rm_name, "x-a", 3);
	assert_int_equal(m[1].rm_len, 0);
	assert_false(m[2].rm_is_string);
	assert_int_equal(m[2].rm_num, 7);
	/* one member more than MAX: refused */
	assert_int_equal(reqjson_members(ok, strlen(ok), m, 2, &n), 0);
	assert_int_equal(reqjson_members("{}", 2, m, 3, &n), 1);
	assert_int_equal(n, 0);
	assert_int_equal(reqjson_members("{\"a\":1,}", 8, m, 3, &n), 0);
}

static void test_escape_matches_jansson(void **state)
{
	static const char *const pieces[] = { "a",
					      "\"",
					      "\\",
					      "/",
					      "\x7f",
					      "\t",
					      "\x01",
					      "\x1f",
					      "\xc3\xa9",
					      "\xe2\x82\xac",
					      "\xf0\x9f\x98\x80",
					      " ",
					      "\n",
					      "u" };
	char s[256], out[6 * 256 + 1];
	uint32_t seed = 99;

	(void)state;
	for (int c = 1; c < 0x80; c++) {
		s[0] = (char)c;
		char *want = jansson_escaped(s, 1);
		size_t n = reqjson_escape(out, s, 1);
		out[n] = '\0';
		assert_string_equal(out, want);
		free(want);
	}
	for (int round = 0; round < 20000; round++) {
		size_t len = 0;
		seed = seed * 1103515245u + 12345u;
		for (unsigned k = seed % 40; k > 0; k--) {
			seed = seed * 1103515245u + 12345u;
			const char *p = pieces[(seed >> 8) % (sizeof(pieces) / sizeof(pieces[0]))];
			memcpy(s + len, p, strlen(p));
			len += strlen(p);
		}
		char *want = jansson_escaped(s, len);
		size_t n = reqjson_escape(out, s, len);
		out[n] = '\0';
		assert_string_equal(out, want);
		free(want);
	}
}

UNIT_MAIN(cmocka_unit_test(test_only), cmocka_unit_test(test_int), cmocka_unit_test(test_string),
	  cmocka_unit_test(test_why), cmocka_unit_test(test_etag_parse),
	  cmocka_unit_test(test_etag_format), cmocka_unit_test(test_valid_name),
	  cmocka_unit_test(test_time), cmocka_unit_test(test_time_text_matches_strftime),
	  cmocka_unit_test(test_escape_matches_jansson), cmocka_unit_test(test_flat),
	  cmocka_unit_test(test_members), cmocka_unit_test(test_response_json),
	  cmocka_unit_test(test_response_base64), cmocka_unit_test(test_response_empty),
	  cmocka_unit_test(test_response_order), cmocka_unit_test(test_response_text))
