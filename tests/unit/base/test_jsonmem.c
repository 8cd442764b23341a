/* Unit tests for the parse budget: ordinary JSON parses within it, a body
 * of empty objects that would take far more than its size is refused with
 * the budget named as the cause, malformed JSON is not blamed on the
 * budget, and allocations outside a parse are not bounded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "jsonmem.h"

static void test_ordinary_json_parses(void **state)
{
	const char *text = "{\"items\":[{\"key\":\"k1\",\"request\":{\"sku\":\"A-1\",\"qty\":2}}]}";
	int over = 1;

	(void)state;
	json_t *v = jsonmem_load(text, strlen(text), 0, NULL, &over);
	assert_non_null(v);
	assert_int_equal(over, 0);
	json_decref(v);
}

/* N empty objects in an array: 3 bytes of text each, about 80 parsed */
static char *empty_objects(size_t n, size_t *len)
{
	char *s = malloc(3 * n + 2);
	size_t k = 0;

	assert_non_null(s);
	s[k++] = '[';
	for (size_t i = 0; i < n; i++) {
		if (i > 0)
			s[k++] = ',';
		s[k++] = '{';
		s[k++] = '}';
	}
	s[k++] = ']';
	*len = k;
	return s;
}

static void test_empty_objects_outgrow_the_budget(void **state)
{
	size_t len;
	char *text = empty_objects(300000, &len);
	json_error_t err;
	int over = 0;

	(void)state;
	assert_true(jsonmem_budget(len) < 80 * len);
	json_t *v = jsonmem_load(text, len, 0, &err, &over);
	assert_null(v);
	assert_int_equal(over, 1);
	/* a few of them are well within it */
	over = 1;
	v = jsonmem_load(text, 3 * 1000, 0, &err, &over);
	assert_null(v); /* cut short of its "]": not JSON, and not the budget's doing */
	assert_int_equal(over, 0);
	text[3 * 1000] = ']'; /* "[" and 1000 times "{}" with commas: 3000 bytes */
	v = jsonmem_load(text, 3 * 1000 + 1, 0, &err, &over);
	assert_non_null(v);
	assert_int_equal(over, 0);
	assert_int_equal(json_array_size(v), 1000);
	json_decref(v);
	free(text);
}

static void test_no_bound_outside_a_parse(void **state)
{
	int over;
	json_t *a = json_array();

	(void)state;
	/* the last parse ran out of budget; what follows is not bounded */
	size_t len;
	char *text = empty_objects(300000, &len);
	assert_null(jsonmem_load(text, len, 0, NULL, &over));
	assert_int_equal(over, 1);
	free(text);
	for (int i = 0; i < 300000; i++)
		assert_int_equal(json_array_append_new(a, json_object()), 0);
	assert_int_equal(json_array_size(a), 300000);
	json_decref(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ordinary_json_parses),
		cmocka_unit_test(test_empty_objects_outgrow_the_budget),
		cmocka_unit_test(test_no_bound_outside_a_parse),
	};

	jsonmem_init();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
