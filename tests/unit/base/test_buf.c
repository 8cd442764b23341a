/* Unit tests for the growable buffer: appends keep the bytes and a NUL,
 * growth past the first capacity, take hands the data over, free empties. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "buf.h"
#include "unit.h"

static void test_append_and_take(void **state)
{
	struct buf b = { 0 };

	(void)state;
	assert_null(b.b_data);
	assert_int_equal(buf_str(&b, ""), 0);
	assert_string_equal(b.b_data, "");
	assert_int_equal(buf_str(&b, "abc"), 0);
	assert_int_equal(buf_add(&b, "d\0e", 3), 0);
	assert_int_equal(b.b_len, 6);
	assert_memory_equal(b.b_data, "abcd\0e", 7);
	char *data = buf_take(&b);
	assert_null(b.b_data);
	assert_int_equal(b.b_len, 0);
	assert_memory_equal(data, "abcd\0e", 7);
	free(data);
	assert_null(buf_take(&b));
}

static void test_growth(void **state)
{
	struct buf b = { 0 };
	char chunk[1000];

	(void)state;
	for (size_t i = 0; i < sizeof(chunk); i++)
		chunk[i] = (char)('a' + i % 26);
	for (int i = 0; i < 100; i++)
		assert_int_equal(buf_add(&b, chunk, sizeof(chunk)), 0);
	assert_int_equal(b.b_len, 100 * sizeof(chunk));
	assert_true(b.b_cap > b.b_len);
	assert_int_equal(b.b_data[b.b_len], '\0');
	for (int i = 0; i < 100; i++)
		assert_memory_equal(b.b_data + i * sizeof(chunk), chunk, sizeof(chunk));
	buf_free(&b);
	assert_null(b.b_data);
	assert_int_equal(b.b_len, 0);
}

/* A failed buffer refuses every later append and keeps its contents. */
static void test_failed_is_sticky(void **state)
{
	struct buf b = { 0 };

	(void)state;
	assert_int_equal(buf_str(&b, "keep"), 0);
	assert_int_equal(buf_add(&b, "x", SIZE_MAX - 2), -1);
	assert_true(b.b_failed);
	assert_int_equal(buf_str(&b, "more"), -1);
	assert_int_equal(buf_add(&b, "x", SIZE_MAX), -1);
	assert_string_equal(b.b_data, "keep");
	buf_free(&b);
	assert_false(b.b_failed);
}

UNIT_MAIN(cmocka_unit_test(test_append_and_take), cmocka_unit_test(test_growth),
	  cmocka_unit_test(test_failed_is_sticky))
