/* Unit tests for the header rules: hop-by-hop names, tokens, values,
 * aliases, what is never stored, and the headers a forward sends. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "headers.h"

static void test_fixed_names(void **state)
{
	static const char *const hop[] = { "Connection", "keep-alive", "TE", "Trailer",
		"Transfer-Encoding", "UPGRADE", "Proxy-Authorization", "proxy-connection",
		"Proxy-Whatever" };
	static const char *const end_to_end[] = { "Authorization", "Content-Type", "Cookie",
		"Host", "X-Proxy-Id", "Tee", "Trailers", "Connection-Id" };

	(void)state;
	for (size_t i = 0; i < sizeof(hop) / sizeof(hop[0]); i++)
		assert_true(headers_hop_by_hop(hop[i], NULL));
	for (size_t i = 0; i < sizeof(end_to_end) / sizeof(end_to_end[0]); i++)
		assert_false(headers_hop_by_hop(end_to_end[i], NULL));
}

static void test_connection_tokens(void **state)
{
	const char *conn = "keep-alive, X-Drop-Me,x-other ,\tX-Tab";

	(void)state;
	assert_true(headers_hop_by_hop("X-Drop-Me", conn));
	assert_true(headers_hop_by_hop("x-drop-me", conn));
	assert_true(headers_hop_by_hop("X-Other", conn));
	assert_true(headers_hop_by_hop("X-Tab", conn));
	assert_false(headers_hop_by_hop("X-Drop", conn));
	assert_false(headers_hop_by_hop("X-Drop-Me-Too", conn));
	assert_false(headers_hop_by_hop("X-Custom", ""));
	assert_false(headers_hop_by_hop("X-Custom", ",,, ,"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fixed_names),
		cmocka_unit_test(test_connection_tokens),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
