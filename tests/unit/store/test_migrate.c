/* Unit tests for the migrations compiled into idemd: at least one, sorted by
 * name without duplicates, named NNNN_name.sql, each NUL-terminated with no
 * NUL inside (it is sent to PostgreSQL as one C string); and the breaking
 * mark (a whole first line "-- idemd: breaking"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "migrate.h"
#include "unit.h"

static void test_embedded_list(void **state)
{
	(void)state;
	assert_true(migrate_embedded_count > 0);
	for (size_t i = 0; i < migrate_embedded_count; i++) {
		const struct migrate_embedded *m = &migrate_embedded[i];
		size_t n = strlen(m->name);

		assert_true(n > 9 && n < 200);
		assert_int_equal(strspn(m->name, "0123456789"), 4);
		assert_int_equal(m->name[4], '_');
		assert_string_equal(m->name + n - 4, ".sql");
		if (i > 0)
			assert_true(strcmp(migrate_embedded[i - 1].name, m->name) < 0);
		assert_true(m->len > 0);
		assert_int_equal(m->sql[m->len], '\0');
		assert_int_equal(strlen((const char *)m->sql), m->len);
	}
}

static void test_first_is_init(void **state)
{
	(void)state;
	assert_string_equal(migrate_embedded[0].name, "0001_init.sql");
	assert_non_null(strstr((const char *)migrate_embedded[0].sql, "CREATE TABLE tenants"));
}

static int breaking(const char *sql)
{
	return migrate_is_breaking((const unsigned char *)sql, strlen(sql));
}

static void test_breaking_mark(void **state)
{
	(void)state;
	assert_true(breaking("-- idemd: breaking\nALTER TABLE t DROP COLUMN c;\n"));
	assert_true(breaking("-- idemd: breaking  \r\nDROP FUNCTION f();"));
	assert_true(breaking("-- idemd: breaking"));
	/* only the whole first line, spelled exactly */
	assert_false(breaking("-- idemd: breakingly\n"));
	assert_false(breaking("-- Idemd: breaking\n"));
	assert_false(breaking(" -- idemd: breaking\n"));
	assert_false(breaking("-- idemd: breaking x\n"));
	assert_false(breaking("-- idemd: breaking\r"));
	assert_false(breaking("-- a comment\n-- idemd: breaking\n"));
	assert_false(breaking("-- idemd: break"));
	assert_false(breaking(""));
}

UNIT_MAIN(cmocka_unit_test(test_embedded_list), cmocka_unit_test(test_first_is_init),
	  cmocka_unit_test(test_breaking_mark))
