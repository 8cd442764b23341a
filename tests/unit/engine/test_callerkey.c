/* Unit tests for caller keys: their form, the record id each names (scope
 * by operation and by scope hash), and the keys gateway routes derive from
 * a header value (bare or sf-string) or a JSON Pointer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "callerkey.h"
#include "unit.h"

static void test_valid(void **state)
{
	char long_key[300];

	(void)state;
	memset(long_key, 'k', sizeof(long_key));
	assert_true(callerkey_valid("evt_1NqZ2xB", 11));
	assert_true(callerkey_valid("order:user-42:cart-9", 20));
	assert_true(callerkey_valid("!~", 2));
	assert_true(callerkey_valid(long_key, 255));
	assert_false(callerkey_valid(long_key, 256));
	assert_false(callerkey_valid("", 0));
	assert_false(callerkey_valid("a b", 3));
	assert_false(callerkey_valid("a\tb", 3));
	assert_false(callerkey_valid("caf\xc3\xa9", 5));
	assert_false(callerkey_valid("a\x7f", 2));
	assert_false(callerkey_valid("a\0b", 3));
}

static void test_record_ids(void **state)
{
	struct operation op1 = { .op_id = 1, .op_token_ttl_seconds = 60 };
	struct operation op2 = { .op_id = 2, .op_token_ttl_seconds = 60 };
	uint8_t scope_a[32] = { 1 }, scope_b[32] = { 2 };
	struct token a, b;

	(void)state;
	callerkey_address(7, &op1, "k1", 2, NULL, 1000000, &a);
	callerkey_address(7, &op1, "k1", 2, NULL, 2000000, &b);
	assert_memory_equal(a.id, b.id, TOKEN_ID_BYTES);
	assert_int_equal(a.tenant_id, 7);
	assert_int_equal(a.operation_id, 1);
	assert_int_equal(a.expires_at, 1060);
	callerkey_address(7, &op1, "k1", 2, NULL, 1000001, &b);
	assert_int_equal(b.expires_at, 1061); /* never less than the TTL */
	assert_int_equal(a.subject_len, 0);
	callerkey_address(7, &op2, "k1", 2, NULL, 1000000, &b);
	assert_memory_not_equal(a.id, b.id, TOKEN_ID_BYTES);
	callerkey_address(7, &op1, "k2", 2, NULL, 1000000, &b);
	assert_memory_not_equal(a.id, b.id, TOKEN_ID_BYTES);
	callerkey_address(7, &op1, "k1", 2, scope_a, 1000000, &a);
	callerkey_address(7, &op1, "k1", 2, scope_b, 1000000, &b);
	assert_memory_not_equal(a.id, b.id, TOKEN_ID_BYTES);
	callerkey_address(7, &op1, "k1", 2, scope_a, 1000000, &b);
	assert_memory_equal(a.id, b.id, TOKEN_ID_BYTES);
}

static void test_from_header(void **state)
{
	char out[8];

	(void)state;
	assert_int_equal(callerkey_from_header("abc", out, sizeof(out)), 3);
	assert_string_equal(out, "abc");
	assert_int_equal(callerkey_from_header("\"abc\"", out, sizeof(out)), 3);
	assert_string_equal(out, "abc");
	assert_int_equal(callerkey_from_header("\"a\\\"b\\\\\"", out, sizeof(out)), 4);
	assert_string_equal(out, "a\"b\\");
	assert_int_equal(callerkey_from_header("\"\"", out, sizeof(out)), 0);
	assert_int_equal(callerkey_from_header("\"abc", out, sizeof(out)), -1);
	assert_int_equal(callerkey_from_header("\"a\"b", out, sizeof(out)), -1);
	assert_int_equal(callerkey_from_header("\"a\\xb\"", out, sizeof(out)), -1);
	assert_int_equal(callerkey_from_header("\"a\tb\"", out, sizeof(out)), -1);
	assert_int_equal(callerkey_from_header("12345678", out, sizeof(out)), -2);
	assert_int_equal(callerkey_from_header("\"12345678\"", out, sizeof(out)), -2);
	/* RFC 8941 parameters are ignored; a list (two keys) is refused */
	assert_int_equal(callerkey_from_header("\"K\";v=1", out, sizeof(out)), 1);
	assert_string_equal(out, "K");
	assert_int_equal(callerkey_from_header("\"K\";a;b=\"x\"", out, sizeof(out)), 1);
	assert_int_equal(callerkey_from_header("\"K\", \"L\"", out, sizeof(out)), -1);
	assert_int_equal(callerkey_from_header("\"K\";v=1, \"L\"", out, sizeof(out)), -1);
	assert_int_equal(callerkey_from_header("a,b", out, sizeof(out)), -1);
}

static void test_from_json(void **state)
{
	json_t *doc = json_loads("{\"id\":\"evt_1\",\"n\":42,\"a/b\":\"slash\",\"m~n\":\"tilde\","
				 "\"data\":{\"object\":{\"id\":\"ch_9\"},\"list\":[\"x\",\"y\"]},"
				 "\"f\":1.5,\"t\":true,\"z\":null,\"long\":\"0123456789\"}",
				 0, NULL);
	char out[8];

	(void)state;
	assert_non_null(doc);
	assert_int_equal(callerkey_from_json(doc, "/id", out, sizeof(out)), 5);
	assert_string_equal(out, "evt_1");
	assert_int_equal(callerkey_from_json(doc, "/n", out, sizeof(out)), 2);
	assert_string_equal(out, "42");
	assert_int_equal(callerkey_from_json(doc, "/a~1b", out, sizeof(out)), 5);
	assert_string_equal(out, "slash");
	assert_int_equal(callerkey_from_json(doc, "/m~0n", out, sizeof(out)), 5);
	assert_int_equal(callerkey_from_json(doc, "/data/object/id", out, sizeof(out)), 4);
	assert_string_equal(out, "ch_9");
	assert_int_equal(callerkey_from_json(doc, "/data/list/1", out, sizeof(out)), 1);
	assert_string_equal(out, "y");
	assert_int_equal(callerkey_from_json(doc, "/data/list/01", out, sizeof(out)), -1);
	assert_int_equal(callerkey_from_json(doc, "/data/list/2", out, sizeof(out)), -1);
	assert_int_equal(callerkey_from_json(doc, "/missing", out, sizeof(out)), -1);
	assert_int_equal(callerkey_from_json(doc, "/data", out, sizeof(out)), -1);
	assert_int_equal(callerkey_from_json(doc, "/f", out, sizeof(out)), -1);
	assert_int_equal(callerkey_from_json(doc, "/t", out, sizeof(out)), -1);
	assert_int_equal(callerkey_from_json(doc, "/z", out, sizeof(out)), -1);
	assert_int_equal(callerkey_from_json(doc, "/a~2b", out, sizeof(out)), -1);
	assert_int_equal(callerkey_from_json(doc, "/long", out, sizeof(out)), -2);
	json_decref(doc);
}

UNIT_MAIN(cmocka_unit_test(test_valid), cmocka_unit_test(test_record_ids),
	  cmocka_unit_test(test_from_header), cmocka_unit_test(test_from_json))
