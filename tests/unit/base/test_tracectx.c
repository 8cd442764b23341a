/* Unit tests: W3C traceparent parsing and formatting (tracectx.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tracectx.h"
#include "unit.h"

#define TRACE "4bf92f3577b34da6a3ce929d0e0e4736"
#define PARENT "00f067aa0ba902b7"

static void test_joins_a_valid_trace(void **state)
{
	struct tracectx a, b;
	char out[TRACECTX_HEADER_LEN + 1];

	(void)state;
	tracectx_begin(&a, "00-" TRACE "-" PARENT "-01");
	assert_string_equal(a.tc_trace_id, TRACE);
	assert_string_equal(a.tc_flags, "01");
	assert_int_equal(strlen(a.tc_span_id), 16);
	assert_string_not_equal(a.tc_span_id, PARENT);
	tracectx_begin(&b, "00-" TRACE "-" PARENT "-01");
	assert_string_not_equal(a.tc_span_id, b.tc_span_id); /* a span of its own each */
	tracectx_format(&a, out);
	assert_int_equal(strlen(out), TRACECTX_HEADER_LEN);
	assert_memory_equal(out, "00-" TRACE "-", 36);
	/* a later version is read as 00, extra fields after a dash ignored */
	tracectx_begin(&a, "01-" TRACE "-" PARENT "-00-more");
	assert_string_equal(a.tc_trace_id, TRACE);
}

static void test_starts_a_trace_on_anything_else(void **state)
{
	static const char *const bad[] = {
		NULL,
		"",
		"00-" TRACE "-" PARENT "-0",
		"00-" TRACE "-" PARENT "-01-x", /* 00 must be exactly 55 long */
		"ff-" TRACE "-" PARENT "-01",	/* version ff */
		"00-00000000000000000000000000000000-" PARENT "-01", /* zero trace id */
		"00-" TRACE "-0000000000000000-01",		     /* zero parent id */
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-" PARENT "-01", /* upper case */
		"00_" TRACE "-" PARENT "-01",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct tracectx tc;
		tracectx_begin(&tc, bad[i]);
		assert_string_not_equal(tc.tc_trace_id, TRACE);
		assert_int_equal(strlen(tc.tc_trace_id), 32);
		assert_string_equal(tc.tc_flags, "00");
	}
}

UNIT_MAIN(cmocka_unit_test(test_joins_a_valid_trace),
	  cmocka_unit_test(test_starts_a_trace_on_anything_else))
