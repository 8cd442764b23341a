/* Unit tests for CORS: exact origin matching, the preflight and actual
 * response header sets, and decorating a libmicrohttpd response. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cors.h"
#include "unit.h"

static char origin_a[] = "http://localhost:3000";
static char origin_b[] = "https://shop.example";
static char *const origins[] = { origin_a, origin_b };

static int setup_two(void **state)
{
	(void)state;
	cors_init(origins, 2);
	return 0;
}

static int setup_none(void **state)
{
	(void)state;
	cors_init(NULL, 0);
	return 0;
}

/* Value of NAME among the N headers H, or NULL. */
static const char *find(const struct cors_header *h, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(h[i].ch_name, name) == 0)
			return h[i].ch_value;
	return NULL;
}

static void test_exact_origin_match(void **state)
{
	static const char *const refused[] = {
		"https://shop.example/",
		"https://shop.example:443",
		"HTTPS://shop.example",
		"https://shop.example.evil",
		"http://shop.example",
		"null",
		"",
		"*",
		"https://shop.exampl",
	};

	(void)state;
	assert_ptr_equal(cors_allowed("https://shop.example"), origin_b);
	assert_ptr_equal(cors_allowed("http://localhost:3000"), origin_a);
	assert_null(cors_allowed(NULL));
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		assert_null(cors_allowed(refused[i]));
}

static void test_is_preflight(void **state)
{
	(void)state;
	assert_true(cors_is_preflight("OPTIONS", "https://a", "POST"));
	assert_false(cors_is_preflight("OPTIONS", NULL, "POST"));
	assert_false(cors_is_preflight("OPTIONS", "https://a", NULL));
	assert_false(cors_is_preflight("POST", "https://a", "POST"));
	assert_false(cors_is_preflight("options", "https://a", "POST"));
}

static void test_preflight_headers(void **state)
{
	struct cors_header h[CORS_MAX_HEADERS];

	(void)state;
	size_t n = cors_preflight_headers("https://shop.example", "POST, PUT", h);
	assert_int_equal(n, 6);
	assert_string_equal(find(h, n, "Access-Control-Allow-Origin"), "https://shop.example");
	assert_string_equal(find(h, n, "Access-Control-Allow-Credentials"), "true");
	assert_string_equal(find(h, n, "Access-Control-Allow-Methods"), "POST, PUT");
	const char *allow = find(h, n, "Access-Control-Allow-Headers");
	assert_non_null(allow);
	for (const char *want = "Content-Type\0Idempotency-Key\0If-Match\0Authorization\0"
				"X-Request-Id\0";
	     *want != '\0'; want += strlen(want) + 1)
		assert_non_null(strstr(allow, want));
	assert_string_equal(find(h, n, "Access-Control-Max-Age"), CORS_MAX_AGE_SECONDS);
	assert_string_equal(find(h, n, "Vary"), "Origin");

	assert_int_equal(cors_preflight_headers("https://evil.example", "POST", h), 0);
	assert_int_equal(cors_preflight_headers(NULL, "POST", h), 0);
}

static void test_response_headers(void **state)
{
	struct cors_header h[CORS_MAX_HEADERS];

	(void)state;
	size_t n = cors_response_headers("http://localhost:3000", h);
	assert_int_equal(n, 4);
	assert_string_equal(find(h, n, "Vary"), "Origin");
	assert_string_equal(find(h, n, "Access-Control-Allow-Origin"), "http://localhost:3000");
	assert_string_equal(find(h, n, "Access-Control-Allow-Credentials"), "true");
	const char *expose = find(h, n, "Access-Control-Expose-Headers");
	assert_non_null(expose);
	assert_non_null(strstr(expose, "Idempotent-Replayed"));
	assert_non_null(strstr(expose, "ETag"));
	assert_non_null(strstr(expose, "Retry-After"));

	/* an unknown origin learns nothing, but caches must key on Origin */
	n = cors_response_headers("https://evil.example", h);
	assert_int_equal(n, 1);
	assert_string_equal(h[0].ch_name, "Vary");
	assert_int_equal(cors_response_headers(NULL, h), 0);
}

static void test_nothing_configured(void **state)
{
	struct cors_header h[CORS_MAX_HEADERS];

	(void)state;
	assert_null(cors_allowed("https://shop.example"));
	assert_int_equal(cors_response_headers("https://shop.example", h), 0);
	assert_int_equal(cors_preflight_headers("https://shop.example", "POST", h), 0);
}

static void test_decorate(void **state)
{
	(void)state;
	struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
	assert_non_null(r);
	cors_decorate(r, "https://shop.example");
	assert_string_equal(MHD_get_response_header(r, "Access-Control-Allow-Origin"),
			    "https://shop.example");
	assert_string_equal(MHD_get_response_header(r, "Vary"), "Origin");
	assert_string_equal(MHD_get_response_header(r, "Access-Control-Expose-Headers"),
			    CORS_EXPOSE_HEADERS);
	/* a second pass (or a preflight's own set) adds nothing */
	cors_decorate(r, "https://shop.example");
	int count = MHD_get_response_headers(r, NULL, NULL);
	assert_int_equal(count, 4);
	MHD_destroy_response(r);

	r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
	assert_non_null(r);
	cors_decorate(r, "https://evil.example");
	assert_null(MHD_get_response_header(r, "Access-Control-Allow-Origin"));
	assert_string_equal(MHD_get_response_header(r, "Vary"), "Origin");
	MHD_destroy_response(r);
}

UNIT_MAIN(cmocka_unit_test_setup(test_exact_origin_match, setup_two),
	  cmocka_unit_test_setup(test_is_preflight, setup_two),
	  cmocka_unit_test_setup(test_preflight_headers, setup_two),
	  cmocka_unit_test_setup(test_response_headers, setup_two),
	  cmocka_unit_test_setup(test_nothing_configured, setup_none),
	  cmocka_unit_test_setup(test_decorate, setup_two))
