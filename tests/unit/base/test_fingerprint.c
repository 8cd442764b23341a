/* Unit tests for request fingerprints and canonical JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#include <sodium.h>

#include "fingerprint.h"

static json_t *load(const char *text);
static void fp_json(const char *text, uint8_t out[FINGERPRINT_BYTES]);
static void assert_canonical(const char *text, const char *expected);
static void assert_same(const char *a, const char *b);
static void assert_differ(const char *a, const char *b);

static json_t *load(const char *text)
{
	json_error_t err;
	json_t *v = json_loads(text, JSON_DECODE_ANY, &err);

	if (v == NULL)
		fail_msg("json_loads(%s): %s", text, err.text);
	return v;
}

static void fp_json(const char *text, uint8_t out[FINGERPRINT_BYTES])
{
	json_t *v = load(text);

	assert_int_equal(fingerprint_of_json(v, out), 0);
	json_decref(v);
}

static void assert_canonical(const char *text, const char *expected)
{
	json_t *v = load(text);
	char *c = fingerprint_canonical_json(v);

	assert_non_null(c);
	assert_string_equal(c, expected);
	free(c);
	json_decref(v);
}

static void assert_same(const char *a, const char *b)
{
	uint8_t fa[FINGERPRINT_BYTES], fb[FINGERPRINT_BYTES];

	fp_json(a, fa);
	fp_json(b, fb);
	assert_memory_equal(fa, fb, FINGERPRINT_BYTES);
}

static void assert_differ(const char *a, const char *b)
{
	uint8_t fa[FINGERPRINT_BYTES], fb[FINGERPRINT_BYTES];

	fp_json(a, fa);
	fp_json(b, fb);
	assert_memory_not_equal(fa, fb, FINGERPRINT_BYTES);
}

static void test_key_order(void **state)
{
	(void)state;
	assert_same("{\"a\":1,\"b\":2,\"c\":3}", "{\"c\":3,\"a\":1,\"b\":2}");
	assert_canonical("{\"b\":2,\"a\":1}", "{\"a\":1,\"b\":2}");
}

static void test_whitespace_and_nesting(void **state)
{
	const char *a = "{\"z\":{\"y\":[1,{\"b\":true,\"a\":null}],\"x\":\"s\"},"
			"\"a\":[{\"k2\":1.5,\"k1\":\"v\",\"k0\":{\"q\":[],\"p\":{}}}]}";
	const char *b = " {\n  \"a\" : [ { \"k0\" : { \"p\" : { } , \"q\" : [ ] } ,\n"
			"\t\"k1\":\"v\", \"k2\" : 1.5 } ] ,\r\n"
			"  \"z\" : { \"x\" : \"s\" , \"y\" : [ 1 , { \"a\" : null ,"
			" \"b\" : true } ] }\n}\n";

	(void)state;
	assert_same(a, b);
	assert_canonical(b, "{\"a\":[{\"k0\":{\"p\":{},\"q\":[]},\"k1\":\"v\","
			    "\"k2\":1.5}],\"z\":{\"x\":\"s\",\"y\":[1,{\"a\":null,"
			    "\"b\":true}]}}");
}

/* Keys sort by their UTF-8 bytes at every level, not by locale. */
static void test_bytewise_order(void **state)
{
	(void)state;
	assert_canonical("{\"\xc3\xa9\":1,\"ab\":2,\"a\":3,\"_\":4,\"Z\":5,\"\":6,"
			 "\"n\":{\"\xc3\xa9\":1,\"e\":2,\"E\":3,\"f\":4}}",
			 "{\"\":6,\"Z\":5,\"_\":4,\"a\":3,\"ab\":2,"
			 "\"n\":{\"E\":3,\"e\":2,\"f\":4,\"\xc3\xa9\":1},\"\xc3\xa9\":1}");
}

static void test_equivalent_spellings(void **state)
{
	(void)state;
	assert_same("{\"k\":\"\\u00e9\"}", "{\"k\":\"\xc3\xa9\"}");
	assert_same("{\"k\":\"a\\/b\"}", "{\"k\":\"a/b\"}");
	assert_same("[1.5]", "[1.50]");
	assert_same("[1.5]", "[15e-1]");
	assert_same("[100.0]", "[1e2]");
	assert_canonical("[\"\\u0041\\n\", 1e2, -0, 0.5]", "[\"A\\n\",100.0,0,0.5]");
}

static void test_different_values(void **state)
{
	(void)state;
	assert_differ("{\"a\":1}", "{\"a\":2}");
	assert_differ("{\"a\":1}", "{\"b\":1}");
	assert_differ("{\"a\":1}", "{\"a\":\"1\"}");
	assert_differ("{\"a\":1}", "{\"a\":1.0}"); /* integer vs real */
	assert_differ("{\"a\":1}", "{\"a\":true}");
	assert_differ("{\"a\":null}", "{\"a\":\"null\"}");
	assert_differ("{\"a\":1}", "{\"a\":1,\"b\":null}");
	assert_differ("{\"a\":{\"b\":1}}", "{\"a\":{\"b\":1,\"c\":1}}");
	assert_differ("{}", "[]");
	assert_differ("\"\"", "null");
}

static void test_arrays_keep_order(void **state)
{
	(void)state;
	assert_differ("[1,2]", "[2,1]");
	assert_differ("{\"a\":[{\"x\":1},{\"y\":2}]}", "{\"a\":[{\"y\":2},{\"x\":1}]}");
	assert_canonical("[3,1,2]", "[3,1,2]");
}

static void test_domain_separation(void **state)
{
	const char *text = "{\"a\":1}";
	uint8_t fs[FINGERPRINT_BYTES], fj[FINGERPRINT_BYTES];
	uint8_t want[FINGERPRINT_BYTES];

	(void)state;
	fingerprint_of_string(text, strlen(text), fs);
	fp_json(text, fj);
	assert_memory_not_equal(fs, fj, FINGERPRINT_BYTES);

	crypto_generichash(want, sizeof(want), (const unsigned char *)"s:{\"a\":1}", 9, NULL, 0);
	assert_memory_equal(fs, want, FINGERPRINT_BYTES);
	crypto_generichash(want, sizeof(want), (const unsigned char *)"j:{\"a\":1}", 9, NULL, 0);
	assert_memory_equal(fj, want, FINGERPRINT_BYTES);

	/* A JSON string and the same client string differ as well. */
	fingerprint_of_string("x", 1, fs);
	fp_json("\"x\"", fj);
	assert_memory_not_equal(fs, fj, FINGERPRINT_BYTES);
	fingerprint_of_string("y", 1, fj);
	assert_memory_not_equal(fs, fj, FINGERPRINT_BYTES);

	/* The length is what counts, not a NUL terminator. */
	fingerprint_of_string("ab\0c", 4, fs);
	fingerprint_of_string("ab", 2, fj);
	assert_memory_not_equal(fs, fj, FINGERPRINT_BYTES);
	fingerprint_of_string("", 0, fs);
	crypto_generichash(want, sizeof(want), (const unsigned char *)"s:", 2, NULL, 0);
	assert_memory_equal(fs, want, FINGERPRINT_BYTES);
}

static void test_null_input(void **state)
{
	uint8_t f[FINGERPRINT_BYTES];

	(void)state;
	assert_null(fingerprint_canonical_json(NULL));
	assert_int_equal(fingerprint_of_json(NULL, f), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_key_order),
		cmocka_unit_test(test_whitespace_and_nesting),
		cmocka_unit_test(test_bytewise_order),
		cmocka_unit_test(test_equivalent_spellings),
		cmocka_unit_test(test_different_values),
		cmocka_unit_test(test_arrays_keep_order),
		cmocka_unit_test(test_domain_separation),
		cmocka_unit_test(test_null_input),
	};

	if (sodium_init() < 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
