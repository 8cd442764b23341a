/* What the unit test programs share: UNIT_MAIN(test, ...), the main that
 * runs the cmocka tests listed as one group, with no group setup, and
 * UNIT_COUNT(array), the number of elements of a table of cases. */
#ifndef IDEMD_UNIT_H
#define IDEMD_UNIT_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#define UNIT_MAIN(...) \
	int main(void) \
	{ \
		const struct CMUnitTest tests[] = { __VA_ARGS__ }; \
		return cmocka_run_group_tests(tests, NULL, NULL); \
	}

#define UNIT_COUNT(a) (sizeof(a) / sizeof((a)[0]))

#endif
