/* Unit tests for the gateway's forward builder (gateway_forward.c): the
 * query rebuilt from libmicrohttpd's arguments, the URL (route target and
 * query), the timeout cut to the claim's lease, the body and method passed
 * through, and the headers sent upstream (the record id as Idempotency-Key,
 * bare for a token route and as an sf-string for a derived key, the
 * subject, the client address appended to X-Forwarded-For, the request id;
 * hop-by-hop headers dropped).
 *
 * libmicrohttpd's connection lookups (http_fields.c) are replaced below by a table of headers and arguments
 * and a fixed client address. */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>

#include <cmocka.h>

#include "config.h"
#include "gateway_int.h"
#include "headers.h"
#include "unit.h"

/* ---------------------------------------------------------------- the request */

struct fake_value {
	enum MHD_ValueKind kind;
	const char *key, *value;
};

static struct fake_value values[16];
static int n_values;

static void add_value(enum MHD_ValueKind kind, const char *key, const char *value)
{
	assert_true(n_values < 16);
	values[n_values++] = (struct fake_value){ kind, key, value };
}

/* The request's headers and query arguments, as http_fields.c hands
 * them over (a header's missing value as ""): every function of that
 * file stands in here. */
int http_fields(const struct request *r, int query, struct headers_field **out, size_t *n)
{
	enum MHD_ValueKind kind = query ? MHD_GET_ARGUMENT_KIND : MHD_HEADER_KIND;

	(void)r;
	*n = 0;
	*out = calloc(16, sizeof(**out));
	assert_non_null(*out);
	for (int i = 0; i < n_values; i++)
		if (values[i].kind == kind) {
			(*out)[*n].hf_name = values[i].key;
			(*out)[*n].hf_value = values[i].value == NULL && !query ? ""
										: values[i].value;
			(*n)++;
		}
	return 0;
}

static const char *lookup(enum MHD_ValueKind kind, const char *name)
{
	for (int i = 0; i < n_values; i++)
		if (values[i].kind == kind && strcasecmp(values[i].key, name) == 0)
			return values[i].value;
	return NULL;
}

const char *http_header(const struct request *r, const char *name)
{
	(void)r;
	return lookup(MHD_HEADER_KIND, name);
}

const char *http_query(const struct request *r, const char *name)
{
	(void)r;
	return lookup(MHD_GET_ARGUMENT_KIND, name);
}

void http_client_ip(const struct request *r, char *out, size_t len)
{
	(void)r;
	snprintf(out, len, "192.0.2.7");
}

/* ---------------------------------------------------------------- fixtures */

static struct request req;
static struct config_route rcfg;
static struct gateway_route gr;
static struct token tok;
static char target[128];

static int setup(void **state)
{
	(void)state;
	n_values = 0;
	memset(&req, 0, sizeof(req));
	req.req_method = "POST";
	req.req_path = "/orders";
	req.req_body = "{\"n\":1}";
	req.req_body_len = strlen(req.req_body);
	snprintf(req.req_id, sizeof(req.req_id), "req-1");
	memset(&rcfg, 0, sizeof(rcfg));
	rcfg.connect_timeout_ms = 1000;
	rcfg.timeout_ms = 10000;
	memset(&gr, 0, sizeof(gr));
	gr.gr_cfg = &rcfg;
	gr.gr_key = GATEWAY_KEY_TOKEN;
	snprintf(target, sizeof(target), "http://up.example:8080/orders");
	gr.gr_target = target;
	memset(&tok, 0, sizeof(tok));
	for (size_t i = 0; i < sizeof(tok.id); i++)
		tok.id[i] = (uint8_t)i;
	memcpy(tok.subject, "user-1", 7);
	tok.subject_len = 6;
	return 0;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The value of header NAME in LIST (exact name as sent), or NULL. */
static const char *line_value(const struct curl_slist *list, const char *name)
{
	size_t n = strlen(name);

	for (; list != NULL; list = list->next)
		if (strncasecmp(list->data, name, n) == 0 && list->data[n] == ':')
			return list->data + n + 1 + strspn(list->data + n + 1, " ");
	return NULL;
}

/* A job for a claim whose lease ends in LEASE_MS, with QUERY. */
static struct gateway_job *job(int64_t lease_ms, const char *query)
{
	struct operation op = { .op_retention_seconds = 3600 };
	struct claim_result res = { .cr_attempt = 2 };
	struct curl_slist *headers = curl_slist_append(NULL, "X-Test: 1");

	assert_non_null(headers);
	res.cr_lease_expires_at = now_ms() + lease_ms;
	struct gateway_job *j =
		gateway_job_new(&req, &gr, &tok, &op, &res, query, &headers, 4096, 500);
	assert_null(headers); /* taken, and freed with a job refused */
	return j;
}

/* ---------------------------------------------------------------- tests */

static void test_query_rebuilt(void **state)
{
	char *q;

	(void)state;
	assert_int_equal(gateway_query(&req, &q), 0);
	assert_string_equal(q, "");
	free(q);
	/* as libmicrohttpd hands them over: not decoded, '+' already ' ' */
	add_value(MHD_GET_ARGUMENT_KIND, "a", "1");
	add_value(MHD_HEADER_KIND, "Host", "x");
	add_value(MHD_GET_ARGUMENT_KIND, "flag", NULL);
	add_value(MHD_GET_ARGUMENT_KIND, "q", "two words");
	add_value(MHD_GET_ARGUMENT_KIND, "p", "%2F");
	add_value(MHD_GET_ARGUMENT_KIND, "u", "\xc3\xa9");
	assert_int_equal(gateway_query(&req, &q), 0);
	assert_string_equal(q, "a=1&flag&q=two+words&p=%2F&u=%C3%A9");
	free(q);
}

static void test_url_and_call(void **state)
{
	(void)state;
	struct gateway_job *j = job(60000, "");
	assert_string_equal(j->gj_call.uc_url, "http://up.example:8080/orders");
	assert_string_equal(j->gj_call.uc_method, "POST");
	assert_ptr_equal(j->gj_call.uc_body, req.req_body);
	assert_int_equal(j->gj_call.uc_body_len, req.req_body_len);
	assert_int_equal(j->gj_call.uc_max_body, 4096);
	assert_int_equal(j->gj_call.uc_connect_timeout_ms, 1000);
	assert_int_equal(j->gj_call.uc_timeout_ms, 10000);
	assert_string_equal(line_value(j->gj_call.uc_headers, "X-Test"), "1");
	assert_int_equal(j->gj_attempt, 2);
	assert_int_equal(j->gj_retention_seconds, 3600);
	assert_memory_equal(j->gj_token_id, tok.id, sizeof(tok.id));
	assert_ptr_equal(j->gj_req, &req);
	gateway_job_free(j);

	j = job(60000, "a=1");
	assert_string_equal(j->gj_call.uc_url, "http://up.example:8080/orders?a=1");
	gateway_job_free(j);

	snprintf(target, sizeof(target), "http://up.example/orders?v=2");
	j = job(60000, "a=1");
	assert_string_equal(j->gj_call.uc_url, "http://up.example/orders?v=2&a=1");
	gateway_job_free(j);
}

/* A forward never outlives its lease (less a margin), nor goes below the
 * floor. */
static void test_timeout_cut_to_the_lease(void **state)
{
	(void)state;
	struct gateway_job *j = job(3000, "");
	assert_non_null(j);
	assert_true(j->gj_call.uc_timeout_ms <= 2500);
	assert_true(j->gj_call.uc_timeout_ms >= 2300);
	/* told both ways: how long, and until when on the database's clock */
	long told = strtol(line_value(j->gj_call.uc_headers, "Idempotency-Timeout-Ms"), NULL, 10);
	long long until =
		strtoll(line_value(j->gj_call.uc_headers, "Idempotency-Deadline"), NULL, 10);
	assert_int_equal(told, j->gj_call.uc_timeout_ms);
	assert_true(until >= now_ms() + told - 200 && until <= now_ms() + told);
	gateway_job_free(j);
	/* no forward on a lease too short for one: the caller releases */
	assert_null(job(100, ""));
	assert_null(job(-2000, ""));
	j = job(800, "");
	assert_non_null(j);
	assert_true(j->gj_call.uc_timeout_ms >= 100 && j->gj_call.uc_timeout_ms <= 300);
	gateway_job_free(j);
}

/* gateway_request_headers() of the request's headers, as the submit reads
 * them. */
static struct curl_slist *request_headers(void)
{
	struct headers_field *f;
	size_t n;

	assert_int_equal(http_fields(&req, 0, &f, &n), 0);
	struct curl_slist *list = gateway_request_headers(&req, &gr, &tok, f, n);
	free(f);
	return list;
}

static void test_headers_token_route(void **state)
{
	(void)state;
	add_value(MHD_HEADER_KIND, "Content-Type", "application/json");
	add_value(MHD_HEADER_KIND, "Connection", "close, X-Secret");
	add_value(MHD_HEADER_KIND, "X-Secret", "hop");
	add_value(MHD_HEADER_KIND, "X-Forwarded-For", "198.51.100.1");
	add_value(MHD_HEADER_KIND, "Idempotency-Key", "the-token-text");
	struct curl_slist *list = request_headers();
	assert_non_null(list);
	assert_string_equal(line_value(list, "Content-Type"), "application/json");
	assert_string_equal(line_value(list, "Idempotency-Key"),
			    "000102030405060708090a0b0c0d0e0f");
	assert_string_equal(line_value(list, "Idempotency-Subject"), "user-1");
	assert_string_equal(line_value(list, "X-Request-Id"), "req-1");
	const char *xff = line_value(list, "X-Forwarded-For");
	assert_non_null(xff);
	assert_non_null(strstr(xff, "192.0.2.7"));
	assert_null(line_value(list, "Connection"));
	assert_null(line_value(list, "X-Secret"));
	curl_slist_free_all(list);
}

static void test_headers_derived_key(void **state)
{
	(void)state;
	gr.gr_key = GATEWAY_KEY_HEADER;
	tok.subject_len = 0;
	tok.subject[0] = '\0';
	struct curl_slist *list = request_headers();
	assert_non_null(list);
	/* one form on every route: the bare record id */
	assert_string_equal(line_value(list, "Idempotency-Key"),
			    "000102030405060708090a0b0c0d0e0f");
	assert_null(line_value(list, "Idempotency-Subject"));
	curl_slist_free_all(list);
}

UNIT_MAIN(cmocka_unit_test_setup(test_query_rebuilt, setup),
	  cmocka_unit_test_setup(test_url_and_call, setup),
	  cmocka_unit_test_setup(test_timeout_cut_to_the_lease, setup),
	  cmocka_unit_test_setup(test_headers_token_route, setup),
	  cmocka_unit_test_setup(test_headers_derived_key, setup))
