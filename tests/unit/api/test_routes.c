/* Unit tests for the API's routes through the router: every route of the
 * table (routes.c), parameter
 * extraction, 404 for unknown or malformed paths, 405 with the Allow list,
 * and routes added at start (the gateway's). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine.h"
#include "handlers.h"
#include "router.h"
#include "routes.h"

#define ALLOW_LEN 64

/* A sentinel the router must overwrite on a match and leave alone otherwise. */
static char sentinel[] = "untouched";

struct route_case {
	const char *method;
	const char *path;
	const char *pattern;
	void (*handler)(struct request *req);
	enum route_auth auth;
	const char *param0; /* NULL: no parameter expected */
	int arg;	    /* the action a handler of several runs, else 0 */
};

static const struct route_case route_cases[] = {
	{ "GET", "/healthz", "/healthz", h_healthz, ROUTE_PUBLIC, NULL, 0 },
	{ "GET", "/readyz", "/readyz", h_readyz, ROUTE_PUBLIC, NULL, 0 },
	{ "GET", "/metrics", "/metrics", h_metrics, ROUTE_PUBLIC, NULL, 0 },
	{ "POST", "/v1/tokens", "/v1/tokens", h_token_issue, ROUTE_API_KEY, NULL, 0 },
	{ "GET", "/v1/tokens/tok-1", "/v1/tokens/{}", h_token_get, ROUTE_API_KEY, "tok-1", 0 },
	{ "DELETE", "/v1/tokens/tok-2", "/v1/tokens/{}", h_token_revoke, ROUTE_API_KEY, "tok-2",
	  0 },
	{ "POST", "/v1/tokens/tok_3/claim", "/v1/tokens/{}/claim", h_token_claim, ROUTE_API_KEY,
	  "tok_3", 0 },
	{ "POST", "/v1/tokens/T4/complete", "/v1/tokens/{}/complete", h_token_act, ROUTE_API_KEY,
	  "T4", ENGINE_COMPLETE },
	{ "POST", "/v1/tokens/t.5/release", "/v1/tokens/{}/release", h_token_act, ROUTE_API_KEY,
	  "t.5", ENGINE_RELEASE },
	{ "POST", "/v1/tokens/t6/extend", "/v1/tokens/{}/extend", h_token_act, ROUTE_API_KEY, "t6",
	  ENGINE_EXTEND },
	{ "POST", "/v1/tokens/t7/checkpoint", "/v1/tokens/{}/checkpoint", h_token_act,
	  ROUTE_API_KEY, "t7", ENGINE_CHECKPOINT },
	{ "GET", "/v1/versions/orders:user-42", "/v1/versions/{}", h_version_get, ROUTE_API_KEY,
	  "orders:user-42", 0 },
	{ "POST", "/v1/versions/orders:user-42", "/v1/versions/{}", h_version_bump, ROUTE_API_KEY,
	  "orders:user-42", 0 },
	{ "GET", "/v1/operations", "/v1/operations", h_operation_list, ROUTE_API_KEY, NULL, 0 },
	{ "GET", "/v1/operations/order.create", "/v1/operations/{}", h_operation_get, ROUTE_API_KEY,
	  "order.create", 0 },
	{ "PUT", "/v1/operations/order.create", "/v1/operations/{}", h_operation_put, ROUTE_API_KEY,
	  "order.create", 0 },
};

/* The router's outputs, for one match or several in a row. */
struct match {
	char *params[HTTP_MAX_PARAMS];
	size_t lens[HTTP_MAX_PARAMS];
	char allow[ALLOW_LEN];
	unsigned status;
};

static void match_reset(struct match *m);
static const struct route *match(struct match *m, const char *method, const char *path);
static void params_free(char *params[HTTP_MAX_PARAMS]);
static void assert_refused(const char *method, const char *path, unsigned expected,
			   const char *expected_allow);
static void assert_not_found(const char *method, const char *path);
static void assert_not_allowed(const char *method, const char *path, const char *allow);
static const struct route *assert_match(const char *method, const char *path, const char *param0);
static void assert_param(const char *method, const char *path, const char *param0);

/* Every parameter the sentinel, the Allow buffer junk, the status 0. */
static void match_reset(struct match *m)
{
	for (int i = 0; i < HTTP_MAX_PARAMS; i++)
		m->params[i] = sentinel;
	memset(m->allow, 'x', sizeof(m->allow));
	m->status = 0;
}

static const struct route *match(struct match *m, const char *method, const char *path)
{
	return router_match(method, path, m->params, m->lens, &m->status, m->allow,
			    sizeof(m->allow));
}

static void params_free(char *params[HTTP_MAX_PARAMS])
{
	for (int i = 0; i < HTTP_MAX_PARAMS; i++) {
		if (params[i] != sentinel)
			free(params[i]);
		params[i] = NULL;
	}
}

/* METHOD PATH matches no route: status EXPECTED with the Allow list
 * EXPECTED_ALLOW, and no parameter is touched. */
static void assert_refused(const char *method, const char *path, unsigned expected,
			   const char *expected_allow)
{
	struct match m;

	match_reset(&m);
	const struct route *r = match(&m, method, path);
	if (r != NULL)
		fail_msg("%s %s matched %s %s, expected %u", method, path, r->method, r->pattern,
			 expected);
	if (m.status != expected)
		fail_msg("%s %s: status %u, expected %u", method, path, m.status, expected);
	assert_string_equal(m.allow, expected_allow);
	for (int i = 0; i < HTTP_MAX_PARAMS; i++)
		assert_ptr_equal(m.params[i], sentinel);
}

static void assert_not_found(const char *method, const char *path)
{
	assert_refused(method, path, 404, "");
}

static void assert_not_allowed(const char *method, const char *path, const char *expected_allow)
{
	assert_refused(method, path, 405, expected_allow);
}

/* METHOD PATH matches; its first parameter is PARAM0 (NULL: none) and
 * there is no other. Returns the route. */
static const struct route *assert_match(const char *method, const char *path, const char *param0)
{
	struct match m;

	match_reset(&m);
	const struct route *r = match(&m, method, path);
	if (r == NULL)
		fail_msg("%s %s did not match (status %u)", method, path, m.status);
	if (param0 != NULL) {
		assert_non_null(m.params[0]);
		assert_string_equal(m.params[0], param0);
	} else {
		assert_null(m.params[0]);
	}
	for (int i = 1; i < HTTP_MAX_PARAMS; i++)
		assert_null(m.params[i]);
	params_free(m.params);
	return r;
}

/* METHOD PATH matches with exactly one parameter PARAM0. */
static void assert_param(const char *method, const char *path, const char *param0)
{
	assert_match(method, path, param0);
}

/* A decoded NUL shows as a decoded length beyond strlen(). */
static void test_decoded_nul(void **state)
{
	struct match m;

	(void)state;
	match_reset(&m);
	assert_non_null(match(&m, "GET", "/v1/versions/abc%00def"));
	assert_int_equal(m.lens[0], 7);
	assert_int_equal(strlen(m.params[0]), 3);
	params_free(m.params);
}

static void test_every_route(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(route_cases) / sizeof(route_cases[0]); i++) {
		const struct route_case *c = &route_cases[i];
		const struct route *r = assert_match(c->method, c->path, c->param0);

		assert_string_equal(r->method, c->method);
		assert_string_equal(r->pattern, c->pattern);
		if (r->handler != c->handler)
			fail_msg("%s %s: wrong handler", c->method, c->path);
		assert_int_equal(r->auth, c->auth);
		assert_int_equal(r->arg, c->arg);
	}
}

/* A caller key's actions: one handler, the action in the route's arg, the
 * operation and the key as the two parameters. */
static void test_key_actions(void **state)
{
	static const struct {
		const char *path;
		int arg;
	} cases[] = {
		{ "/v1/operations/pay/keys/k1/complete", ENGINE_COMPLETE },
		{ "/v1/operations/pay/keys/k1/release", ENGINE_RELEASE },
		{ "/v1/operations/pay/keys/k1/extend", ENGINE_EXTEND },
		{ "/v1/operations/pay/keys/k1/checkpoint", ENGINE_CHECKPOINT },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct match m;

		match_reset(&m);
		const struct route *r = match(&m, "POST", cases[i].path);
		assert_non_null(r);
		assert_true(r->handler == h_key_act);
		assert_int_equal(r->arg, cases[i].arg);
		assert_string_equal(m.params[0], "pay");
		assert_string_equal(m.params[1], "k1");
		params_free(m.params);
	}
}

static void test_params(void **state)
{
	char big[301];

	(void)state;
	/* anything but '/' belongs to the segment, as the path arrives decoded */
	assert_param("GET", "/v1/tokens/a", "a");
	assert_param("GET", "/v1/tokens/a%20b", "a b");
	assert_param("GET", "/v1/versions/team%2F42", "team/42");
	assert_param("GET", "/v1/versions/a%zzb%4", "a%zzb%4");
	assert_param("GET", "/v1/versions/%41%6a", "Aj");
	assert_param("HEAD", "/v1/versions/k", "k");
	assert_param("GET", "/v1/tokens/a b", "a b");
	assert_param("GET", "/v1/tokens/{}", "{}");
	assert_param("GET", "/v1/tokens/..", "..");
	assert_param("POST", "/v1/tokens/claim/claim", "claim");
	assert_param("GET", "/v1/versions/a:b:c", "a:b:c");
	assert_param("GET", "/v1/versions/\xc3\xa9", "\xc3\xa9");
	assert_param("PUT", "/v1/operations/UPPER", "UPPER");
	memset(big, 'k', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	char path[400];
	strcpy(path, "/v1/tokens/");
	strcat(path, big);
	strcat(path, "/claim");
	assert_param("POST", path, big);
}

static void test_unknown_paths(void **state)
{
	(void)state;
	static const char *const paths[] = {
		"",
		"/",
		"//",
		"healthz",
		"/healthz/",
		"//healthz",
		"/healthzz",
		"/health",
		"/HEALTHZ",
		"/healthz?x=1",
		"/readyz/",
		"/metrics/x",
		"/v1",
		"/v1/",
		"/v2/tokens",
		"/V1/tokens",
		"/v1/token",
		"/v1/tokens/",
		"/v1/tokensx",
		"/v1//tokens",
		"/v1/tokens//claim",
		"/v1/tokens//",
		"/v1/tokens/abc/",
		"/v1/tokens/abc/claim/",
		"/v1/tokens/abc/claim/x",
		"/v1/tokens/abc/def",
		"/v1/tokens/abc/clai",
		"/v1/tokens/abc/claimx",
		"/v1/tokens/abc/Claim",
		"/v1/tokens/a/b/claim",
		"/v1/tokens/abc//claim",
		"/v1/versions",
		"/v1/versions/",
		"/v1/versions/a/b",
		"/v1/versions//",
		"/v1/operations/",
		"/v1/operations//",
		"/v1/operations/a/b",
		"/v1/operations/a/",
		"/v1/operationsx",
	};
	static const char *const methods[] = { "GET", "POST", "PUT", "DELETE", "PATCH" };

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
		for (size_t m = 0; m < sizeof(methods) / sizeof(methods[0]); m++)
			assert_not_found(methods[m], paths[i]);
}

static void test_wrong_method(void **state)
{
	(void)state;
	/* HEAD is served on every GET route (the GET without its body) */
	assert_not_allowed("POST", "/healthz", "GET, HEAD");
	assert_not_allowed("DELETE", "/readyz", "GET, HEAD");
	assert_not_allowed("PUT", "/metrics", "GET, HEAD");
	assert_not_allowed("GET", "/v1/tokens", "POST");
	assert_not_allowed("DELETE", "/v1/tokens", "POST");
	assert_not_allowed("POST", "/v1/tokens/abc", "GET, HEAD, DELETE");
	assert_not_allowed("PUT", "/v1/tokens/abc", "GET, HEAD, DELETE");
	assert_not_allowed("GET", "/v1/tokens/abc/claim", "POST");
	assert_not_allowed("DELETE", "/v1/tokens/abc/complete", "POST");
	assert_not_allowed("PUT", "/v1/tokens/abc/release", "POST");
	assert_not_allowed("PUT", "/v1/versions/k", "GET, HEAD, POST");
	assert_not_allowed("DELETE", "/v1/versions/k", "GET, HEAD, POST");
	assert_not_allowed("POST", "/v1/operations", "GET, HEAD");
	assert_not_allowed("PUT", "/v1/operations", "GET, HEAD");
	assert_not_allowed("POST", "/v1/operations/op", "GET, HEAD, PUT");
	assert_not_allowed("DELETE", "/v1/operations/op", "GET, HEAD, PUT");
	/* methods are case-sensitive (RFC 9110 section 9.1) */
	assert_not_allowed("get", "/healthz", "GET, HEAD");
	assert_not_allowed("post", "/v1/tokens", "POST");
	assert_not_allowed("", "/v1/tokens/abc", "GET, HEAD, DELETE");
	assert_not_allowed("PATCH", "/v1/tokens/abc", "GET, HEAD, DELETE");
}

/* The pattern text "{}" in a path is an ordinary segment, not a wildcard. */
static void test_pattern_text_in_path(void **state)
{
	(void)state;
	assert_param("GET", "/v1/operations/{}", "{}");
	assert_not_found("GET", "/v1/tokens/{}/{}");
}

/* A reused output buffer is reset: a 404 after a 405 reports no Allow. */
static void test_allow_reset(void **state)
{
	struct match m;

	(void)state;
	match_reset(&m);
	assert_null(match(&m, "PATCH", "/v1/tokens/abc"));
	assert_int_equal(m.status, 405);
	assert_string_equal(m.allow, "GET, HEAD, DELETE");
	assert_null(match(&m, "PATCH", "/nowhere"));
	assert_int_equal(m.status, 404);
	assert_string_equal(m.allow, "");
}

static void test_added_routes(void **state)
{
	static const struct route post = { "POST", "/orders", h_healthz, ROUTE_PUBLIC, NULL, 1, 0 };
	static const struct route put = { "PUT", "/orders", h_metrics, ROUTE_PUBLIC, NULL, 1, 0 };
	static const struct route get = { "GET", "/catalog", h_readyz, ROUTE_PUBLIC, NULL, 1, 0 };
	struct match m;

	(void)state;
	assert_int_equal(router_add(&post), 0);
	assert_int_equal(router_add(&put), 0);
	assert_int_equal(router_add(&get), 0);
	assert_int_equal(router_publish(), 0);
	match_reset(&m);
	assert_ptr_equal(match(&m, "POST", "/orders"), &post);
	assert_null(m.params[0]);
	assert_ptr_equal(match(&m, "PUT", "/orders"), &put);
	/* exact path only, and HEAD is not GET on an added route */
	assert_not_found("POST", "/orders/");
	assert_not_found("POST", "/order");
	assert_not_allowed("HEAD", "/catalog", "GET");
	assert_not_allowed("DELETE", "/orders", "POST, PUT");
	/* the API's own table still answers, HEAD included */
	assert_non_null(match(&m, "HEAD", "/healthz"));
	router_clear_added();
	assert_not_found("POST", "/orders");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_route),
		cmocka_unit_test(test_key_actions),
		cmocka_unit_test(test_params),
		cmocka_unit_test(test_decoded_nul),
		cmocka_unit_test(test_unknown_paths),
		cmocka_unit_test(test_wrong_method),
		cmocka_unit_test(test_pattern_text_in_path),
		cmocka_unit_test(test_allow_reset),
		cmocka_unit_test(test_added_routes),
	};

	routes_init();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
