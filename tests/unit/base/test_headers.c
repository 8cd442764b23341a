/* Unit tests for the header rules: hop-by-hop names, tokens, values,
 * aliases, what is never stored, and the headers a forward sends. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>
#include <string.h>

#include "headers.h"

#define LEN(a) (sizeof(a) / sizeof((a)[0]))

static void test_fixed_names(void **state)
{
	static const char *const hop[] = { "Connection",
					   "keep-alive",
					   "TE",
					   "Trailer",
					   "Transfer-Encoding",
					   "UPGRADE",
					   "Proxy-Authorization",
					   "proxy-connection",
					   "Proxy-Whatever" };
	static const char *const end_to_end[] = { "Authorization", "Content-Type", "Cookie",
						  "Host",	   "X-Proxy-Id",   "Tee",
						  "Trailers",	   "Connection-Id" };

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

static void test_is_token(void **state)
{
	static const char *const good[] = { "X-Foo", "a", "Content-Type", "x_y",
					    "!#$%&'*+-.^_`|~09AZaz" };
	static const char *const bad[] = { "X Foo", "X:Foo", "X-Foo:", "\"X\"", "(",
					   ")",	    ",",     "/",      ";",	"<",
					   "=",	    ">",     "?",      "@",	"[",
					   "\\",    "]",     "{",      "}",	"X\tY",
					   "X\rY",  "X\nY",  "\x7f",   "\x01",	"caf\xc3\xa9" };

	(void)state;
	for (size_t i = 0; i < LEN(good); i++)
		assert_true(headers_is_token(good[i], strlen(good[i])));
	for (size_t i = 0; i < LEN(bad); i++)
		assert_false(headers_is_token(bad[i], strlen(bad[i])));
	assert_false(headers_is_token("", 0));
	assert_false(headers_is_token("X-Foo", 0));
	/* the length counts, not the NUL: a NUL inside is refused, a
	 * shorter length reads only the prefix */
	assert_false(headers_is_token("X-Foo\0bar", 9));
	assert_true(headers_is_token("X-Foo\0bar", 5));
	assert_true(headers_is_token("X Foo", 1));
	assert_false(headers_is_token("X Foo", 2));
}

static void test_value_ok(void **state)
{
	(void)state;
	assert_true(headers_value_ok("", 0));
	assert_true(headers_value_ok("text/plain; q=0.5", 17));
	assert_true(headers_value_ok("a\tb", 3));
	assert_true(headers_value_ok("\t", 1));
	assert_true(headers_value_ok(" ~ ", 3));
	assert_true(headers_value_ok("\x80\xff caf\xc3\xa9", 8));
	assert_false(headers_value_ok("a\rb", 3));
	assert_false(headers_value_ok("a\nb", 3));
	assert_false(headers_value_ok("a\r\nX-Injected: 1", 16));
	assert_false(headers_value_ok("a\0b", 3));
	assert_true(headers_value_ok("a\0b", 1));
	assert_false(headers_value_ok("\x01", 1));
	assert_false(headers_value_ok("\x1f", 1));
	assert_false(headers_value_ok("\x0b", 1));
	assert_false(headers_value_ok("a\x7f", 2));
	assert_true(headers_value_ok("a\x7f", 1));
}

static void test_is_alias(void **state)
{
	static const char *const alias[] = {
		"Idempotency_Subject", "idempotency_key", "IDEMPOTENCY_KEY",  "X_Request_Id",
		"x_forwarded_for",     "X-Forwarded_For", "X_Forwarded_Host", "X_Forwarded_Proto",
		"X_Forwarded_Port",    "X_Real_IP",	  "Content_Length",   "transfer_encoding"
	};
	static const char *const not_alias[] = { "Idempotency-Subject",
						 "Idempotency-Key",
						 "X-Forwarded-For",
						 "X_Custom",
						 "Idempotency__Subject",
						 "Idempotency_Subjects",
						 "_Idempotency_Key",
						 "Content_Type",
						 "Forwarded",
						 "Host",
						 "Connection",
						 "X_Padding_Padding_Padding_Padding_Padding" };

	(void)state;
	for (size_t i = 0; i < LEN(alias); i++)
		assert_true(headers_is_alias(alias[i]));
	for (size_t i = 0; i < LEN(not_alias); i++)
		assert_false(headers_is_alias(not_alias[i]));
}

static void test_never_stored(void **state)
{
	static const char *const never[] = { "set-cookie",
					     "Set-Cookie",
					     "content-length",
					     "Transfer-Encoding",
					     "transfer-encoding",
					     "access-control-allow-origin",
					     "Access-Control-Expose-Headers",
					     "connection",
					     "keep-alive",
					     "proxy-x",
					     "Proxy-Authenticate",
					     "idempotent-replayed",
					     "Idempotent-Replayed",
					     "x-request-id",
					     "X-Request-Id",
					     "TE",
					     "trailer",
					     "upgrade" };
	static const char *const stored[] = { "content-type",  "Content-Type",
					      "location",      "etag",
					      "x-foo",	       "cache-control",
					      "set-cookie2",   "access-control",
					      "x-request-ids", "content-length-x" };

	(void)state;
	for (size_t i = 0; i < LEN(never); i++)
		assert_true(headers_never_stored(never[i]));
	for (size_t i = 0; i < LEN(stored); i++)
		assert_false(headers_never_stored(stored[i]));
}

/* ------------------------------------------------------------- forward */

#define HEX "000102030405060708090a0b0c0d0e0f"

static const struct headers_forward_args fwd_args = {
	.fa_token_id = HEX,
	.fa_subject = "alice",
	.fa_client_ip = "203.0.113.7",
	.fa_request_id = "req-1",
	.fa_trust_forwarded = 0,
};

/* Runs headers_forward and checks the list is exactly WANT (NULL-ended). */
static void expect_forward(const struct headers_field *f, size_t n,
			   const struct headers_forward_args *a, const char *const *want)
{
	struct curl_slist *list = (struct curl_slist *)(void *)&list, *l;
	size_t i = 0;

	assert_int_equal(headers_forward(f, n, a, &list), HEADERS_OK);
	assert_non_null(list);
	for (l = list; l != NULL && want[i] != NULL; l = l->next, i++)
		assert_string_equal(l->data, want[i]);
	assert_null(l);
	assert_null(want[i]);
	curl_slist_free_all(list);
}

static void expect_invalid(const struct headers_field *f, size_t n,
			   const struct headers_forward_args *a)
{
	struct curl_slist *list = (struct curl_slist *)(void *)&list;

	assert_int_equal(headers_forward(f, n, a, &list), HEADERS_INVALID);
	assert_null(list);
}

static void test_forward_plain(void **state)
{
	static const struct headers_field f[] = {
		{ "Content-Type", "application/json" },
		{ "Authorization", "Bearer abc" },
		{ "X-Note", "a, b" },
		{ "X-Note", "c" },
	};
	static const char *const want[] = { "Content-Type: application/json",
					    "Authorization: Bearer abc",
					    "X-Note: a, b",
					    "X-Note: c",
					    "Idempotency-Key: " HEX,
					    "Idempotency-Subject: alice",
					    "X-Forwarded-For: 203.0.113.7",
					    "X-Request-Id: req-1",
					    "Expect:",
					    NULL };
	static const char *const want_none[] = { "Idempotency-Key: " HEX,
						 "Idempotency-Subject: alice",
						 "X-Forwarded-For: 203.0.113.7",
						 "X-Request-Id: req-1",
						 "Expect:",
						 "Content-Type:",
						 NULL };

	(void)state;
	expect_forward(f, LEN(f), &fwd_args, want);
	/* no client Content-Type: libcurl's default one is removed */
	expect_forward(NULL, 0, &fwd_args, want_none);
}

static void test_forward_drops(void **state)
{
	static const struct headers_field f[] = {
		{ "Host", "evil.example" },
		{ "Content-Length", "40" },
		{ "Transfer-Encoding", "chunked" },
		{ "Expect", "100-continue" },
		{ "Accept-Encoding", "gzip" },
		{ "idempotency-key", "other" },
		{ "IDEMPOTENCY-SUBJECT", "mallory" },
		{ "X-Request-Id", "theirs" },
		{ "Connection", "keep-alive" },
		{ "Keep-Alive", "timeout=5" },
		{ "TE", "trailers" },
		{ "Trailer", "X-T" },
		{ "Upgrade", "h2c" },
		{ "Proxy-Authorization", "Basic eA==" },
		{ "proxy-connection", "close" },
		{ "Accept", "application/json" },
		{ "X-Keep", "1" },
	};
	static const char *const want[] = { "Accept: application/json",
					    "X-Keep: 1",
					    "Idempotency-Key: " HEX,
					    "Idempotency-Subject: alice",
					    "X-Forwarded-For: 203.0.113.7",
					    "X-Request-Id: req-1",
					    "Expect:",
					    "Content-Type:",
					    NULL };

	(void)state;
	expect_forward(f, LEN(f), &fwd_args, want);
}

static void test_forward_xff(void **state)
{
	static const struct headers_field chain[] = {
		{ "X-Forwarded-For", "10.0.0.1, 10.0.0.2" },
		{ "X-Note", "n" },
		{ "X-Forwarded-For", "" },
		{ "x-forwarded-for", "192.168.1.1" },
	};
	static const char *const want_chain[] = {
		"X-Note: n",
		"Idempotency-Key: " HEX,
		"Idempotency-Subject: alice",
		"X-Forwarded-For: 10.0.0.1, 10.0.0.2, 192.168.1.1, 203.0.113.7",
		"X-Request-Id: req-1",
		"Expect:",
		"Content-Type:",
		NULL
	};
	static const struct headers_field empty[] = { { "X-Forwarded-For", "" } };
	static const char *const want_alone[] = { "Idempotency-Key: " HEX,
						  "Idempotency-Subject: alice",
						  "X-Forwarded-For: 203.0.113.7",
						  "X-Request-Id: req-1",
						  "Expect:",
						  "Content-Type:",
						  NULL };
	static const char *const want_untrusted[] = { "X-Note: n",
						      "Idempotency-Key: " HEX,
						      "Idempotency-Subject: alice",
						      "X-Forwarded-For: 203.0.113.7",
						      "X-Request-Id: req-1",
						      "Expect:",
						      "Content-Type:",
						      NULL };
	struct headers_forward_args trusted = fwd_args;

	(void)state;
	/* a client's own chain is dropped unless the route trusts its proxy */
	expect_forward(chain, LEN(chain), &fwd_args, want_untrusted);
	expect_forward(empty, LEN(empty), &fwd_args, want_alone);
	trusted.fa_trust_forwarded = 1;
	expect_forward(chain, LEN(chain), &trusted, want_chain);
	expect_forward(empty, LEN(empty), &trusted, want_alone);
}

static void test_forward_trust(void **state)
{
	static const struct headers_field f[] = {
		{ "Forwarded", "for=192.0.2.1;proto=https" },
		{ "X-Real-IP", "192.0.2.1" },
		{ "X-Forwarded-Host", "shop.example" },
		{ "X-Forwarded-Proto", "https" },
		{ "X-Forwarded-Port", "443" },
		{ "X-Note", "n" },
	};
	static const char *const want_off[] = { "X-Note: n",
						"Idempotency-Key: " HEX,
						"Idempotency-Subject: alice",
						"X-Forwarded-For: 203.0.113.7",
						"X-Request-Id: req-1",
						"Expect:",
						"Content-Type:",
						NULL };
	static const char *const want_on[] = { "Forwarded: for=192.0.2.1;proto=https",
					       "X-Real-IP: 192.0.2.1",
					       "X-Forwarded-Host: shop.example",
					       "X-Forwarded-Proto: https",
					       "X-Forwarded-Port: 443",
					       "X-Note: n",
					       "Idempotency-Key: " HEX,
					       "Idempotency-Subject: alice",
					       "X-Forwarded-For: 203.0.113.7",
					       "X-Request-Id: req-1",
					       "Expect:",
					       "Content-Type:",
					       NULL };
	struct headers_forward_args trusted = fwd_args;

	(void)state;
	expect_forward(f, LEN(f), &fwd_args, want_off);
	trusted.fa_trust_forwarded = 1;
	expect_forward(f, LEN(f), &trusted, want_on);
}

static void test_forward_connection(void **state)
{
	/* the Connection header may come after the headers it names, and
	 * there may be several */
	static const struct headers_field f[] = {
		{ "X-Foo", "1" },
		{ "X-Bar", "2" },
		{ "X-Baz", "3" },
		{ "Content-Type", "text/plain" },
		{ "Connection", "X-Foo,\tcontent-type" },
		{ "connection", " x-bar " },
		{ "X-Foo-Bar", "4" },
	};
	static const char *const want[] = { "X-Baz: 3",
					    "X-Foo-Bar: 4",
					    "Idempotency-Key: " HEX,
					    "Idempotency-Subject: alice",
					    "X-Forwarded-For: 203.0.113.7",
					    "X-Request-Id: req-1",
					    "Expect:",
					    "Content-Type:",
					    NULL };
	/* naming idemd's own headers removes only the client's copies */
	static const struct headers_field own[] = {
		{ "Connection", "Idempotency-Key, X-Request-Id, X-Forwarded-For" },
		{ "X-Forwarded-For", "10.0.0.1" },
	};
	static const char *const want_own[] = { "Idempotency-Key: " HEX,
						"Idempotency-Subject: alice",
						"X-Forwarded-For: 10.0.0.1, 203.0.113.7",
						"X-Request-Id: req-1",
						"Expect:",
						"Content-Type:",
						NULL };

	struct headers_forward_args trusted = fwd_args;

	(void)state;
	trusted.fa_trust_forwarded = 1;
	expect_forward(f, LEN(f), &fwd_args, want);
	expect_forward(own, LEN(own), &trusted, want_own);
}

static void test_forward_empty_values(void **state)
{
	static const struct headers_field f[] = {
		{ "X-Empty", "" },
		{ "Content-Type", "" },
		{ "X-Tab", "a\tb" },
	};
	static const char *const want[] = { "X-Empty;",
					    "Content-Type;",
					    "X-Tab: a\tb",
					    "Idempotency-Key: " HEX,
					    "Idempotency-Subject: alice",
					    "X-Forwarded-For: 203.0.113.7",
					    "X-Request-Id: req-1",
					    "Expect:",
					    NULL };

	(void)state;
	expect_forward(f, LEN(f), &fwd_args, want);
}

static void test_forward_invalid_field(void **state)
{
	static const struct headers_field bad[][2] = {
		{ { "X-Ok", "1" }, { "X Note", "x" } },
		{ { "X-Ok", "1" }, { "X-Note ", "x" } },
		{ { "X-Ok", "1" }, { "", "x" } },
		{ { "X-Ok", "1" }, { "X-Note:", "x" } },
		{ { "X-Ok", "1" }, { "X-Note", "a\rIdempotency-Subject: mallory" } },
		{ { "X-Ok", "1" }, { "X-Note", "a\nb" } },
		{ { "X-Ok", "1" }, { "X-Note", "a\x7f" } },
		{ { "X-Ok", "1" }, { "X-Note", "\x01" } },
		{ { "X-Ok", "1" }, { "Idempotency_Subject", "mallory" } },
		{ { "X-Ok", "1" }, { "x_forwarded_for", "10.0.0.1" } },
		{ { "X-Note", "a\r\n" }, { "X-Ok", "1" } },
	};

	(void)state;
	for (size_t i = 0; i < LEN(bad); i++)
		expect_invalid(bad[i], 2, &fwd_args);
	/* the same fields minus the bad one go through */
	{
		static const struct headers_field ok[] = { { "X-Ok", "1" } };
		static const char *const want[] = { "X-Ok: 1",
						    "Idempotency-Key: " HEX,
						    "Idempotency-Subject: alice",
						    "X-Forwarded-For: 203.0.113.7",
						    "X-Request-Id: req-1",
						    "Expect:",
						    "Content-Type:",
						    NULL };

		expect_forward(ok, LEN(ok), &fwd_args, want);
	}
}

static void test_forward_invalid_args(void **state)
{
	static const char *const subjects[] = { "ali\rce",
						"alice\n",
						" alice",
						"alice ",
						"\talice",
						"alice\t",
						"",
						"al\x7f"
						"ice" };
	static const struct headers_field f[] = { { "X-Ok", "1" } };
	struct headers_forward_args a = fwd_args;

	(void)state;
	for (size_t i = 0; i < LEN(subjects); i++) {
		a.fa_subject = subjects[i];
		expect_invalid(f, LEN(f), &a);
		expect_invalid(NULL, 0, &a);
	}
	/* inner spaces and non-ASCII bytes are fine */
	{
		static const char *const want[] = { "X-Ok: 1",
						    "Idempotency-Key: " HEX,
						    "Idempotency-Subject: a b\tc\xc3\xa9",
						    "X-Forwarded-For: 203.0.113.7",
						    "X-Request-Id: req-1",
						    "Expect:",
						    "Content-Type:",
						    NULL };

		a.fa_subject = "a b\tc\xc3\xa9";
		expect_forward(f, LEN(f), &a, want);
	}
	a = fwd_args;
	a.fa_request_id = "req\r\nX-Evil: 1";
	expect_invalid(f, LEN(f), &a);
	a = fwd_args;
	a.fa_client_ip = "";
	expect_invalid(f, LEN(f), &a);
}

/* Lays out RAW (LEN bytes, a request's header section) as libmicrohttpd
 * 0.9.75 does in place (connection.c: get_next_header_line turns CRLF or
 * LF into NULs, process_header_line the colon into a NUL and skips blanks,
 * the value is strlen'd; process_broken_line joins a line that starts with
 * a blank onto a copy of the name) and runs the tiling check over it. */
static int tiled_like_mhd(const char *raw, size_t len)
{
	static char block[1024], moved[8][64];
	struct headers_tiling t;
	const char *name = NULL, *value = NULL;
	size_t nmoved = 0, first = 0, at = 0;

	assert_true(len < sizeof(block));
	memcpy(block, raw, len);
	for (int line = 0;; line++) {
		size_t start = at;
		while (at < len && block[at] != '\n' &&
		       !(block[at] == '\r' && at + 1 < len && block[at + 1] == '\n'))
			at++;
		assert_true(at < len);
		if (block[at] == '\r')
			block[at++] = '\0';
		block[at++] = '\0';
		if (line == 0) {
			first = strlen(block); /* where the version's strlen ends */
			headers_tiling_begin(&t, block, len, first);
			continue;
		}
		if (name != NULL && (block[start] == ' ' || block[start] == '\t')) {
			const char *tail = block + start + strspn(block + start, " \t");
			assert_true(nmoved < 8);
			snprintf(moved[nmoved], sizeof(moved[0]), "%s%s", name, tail);
			name = moved[nmoved++];
			continue;
		}
		if (name != NULL)
			headers_tiling_field(&t, name, strlen(name), value, strlen(value));
		if (block[start] == '\0')
			break;
		char *colon = strchr(block + start, ':');
		assert_non_null(colon);
		*colon = '\0';
		name = block + start;
		value = colon + 1 + strspn(colon + 1, " \t");
	}
	assert_int_equal(at, len);
	return headers_tiling_end(&t);
}

#define TILED(lit) tiled_like_mhd(lit, sizeof(lit) - 1)

static void test_tiling_plain(void **state)
{
	(void)state;
	assert_true(TILED("GET / HTTP/1.1\r\nHost: a\r\nX-Note: b c\r\n\r\n"));
	assert_true(TILED("GET / HTTP/1.1\r\n\r\n"));
	assert_true(TILED("GET / HTTP/1.1\nHost: a\nX-Note:b\n\n"));
	assert_true(TILED("GET / HTTP/1.1\r\nHost: a\nX-Note: \t b\t\r\n\n"));
	assert_true(TILED("GET / HTTP/1.1\r\nX-Empty:\r\nX-Blank:   \r\n\r\n"));
	assert_true(TILED("GET / HTTP/1.1\r\nX-Text: caf\xc3\xa9\r\n\r\n"));
}

static void test_tiling_nul_in_value(void **state)
{
	(void)state;
	assert_false(TILED("GET / HTTP/1.1\r\nX-Note: a\0b\r\nHost: a\r\n\r\n"));
	assert_false(TILED("GET / HTTP/1.1\r\nHost: a\r\nX-Note: a\0b\r\n\r\n"));
	assert_false(TILED("GET / HTTP/1.1\r\nX-Note: \0b\r\n\r\n"));
	assert_false(TILED("GET / HTTP/1.1\r\nX-Note: a\0\r\nHost: a\r\n\r\n"));
	assert_false(TILED("GET / HTTP/1.1\r\nX-Note: a\0\r\n\r\n"));
	assert_false(TILED("GET / HTTP/1.1\r\nX-Note: a\0\0\nHost: a\r\n\r\n"));
	assert_false(TILED("GET / HTTP/1.1\0x\r\nHost: a\r\n\r\n"));
	/* a NUL right before a bare LF looks like CRLF: nothing follows it */
	assert_true(TILED("GET / HTTP/1.1\r\nX-Note: a\0\nHost: a\r\n\r\n"));
}

static void test_tiling_obs_fold(void **state)
{
	(void)state;
	assert_false(TILED("GET / HTTP/1.1\r\nX-Note: a\r\n folded\r\n\r\n"));
	assert_false(TILED("GET / HTTP/1.1\r\nX-Note: a\r\n\tfolded\r\nHost: a\r\n\r\n"));
	assert_false(TILED("GET / HTTP/1.1\nX-Note: a\n b\n c\n\n"));
}

static void test_tiling_bounds(void **state)
{
	struct headers_tiling t;
	const char block[] = "GET\0/\0HTTP/1.1\0\0X\0 v\0\0\0";
	const char elsewhere[] = "X";

	(void)state;
	headers_tiling_begin(&t, block, sizeof(block), 14);
	headers_tiling_field(&t, block + 16, 1, block + 19, 1);
	assert_true(headers_tiling_end(&t));
	/* a name outside the block */
	headers_tiling_begin(&t, block, sizeof(block), 14);
	headers_tiling_field(&t, elsewhere, 1, block + 19, 1);
	assert_false(headers_tiling_end(&t));
	/* a value running past the block */
	headers_tiling_begin(&t, block, sizeof(block), 14);
	headers_tiling_field(&t, block + 16, 1, block + 19, 100);
	assert_false(headers_tiling_end(&t));
	/* a request line end outside the block */
	headers_tiling_begin(&t, block, sizeof(block), sizeof(block));
	assert_false(headers_tiling_end(&t));
	headers_tiling_begin(&t, NULL, 0, 0);
	assert_false(headers_tiling_end(&t));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fixed_names),
		cmocka_unit_test(test_connection_tokens),
		cmocka_unit_test(test_is_token),
		cmocka_unit_test(test_value_ok),
		cmocka_unit_test(test_is_alias),
		cmocka_unit_test(test_never_stored),
		cmocka_unit_test(test_forward_plain),
		cmocka_unit_test(test_forward_drops),
		cmocka_unit_test(test_forward_xff),
		cmocka_unit_test(test_forward_trust),
		cmocka_unit_test(test_forward_connection),
		cmocka_unit_test(test_forward_empty_values),
		cmocka_unit_test(test_forward_invalid_field),
		cmocka_unit_test(test_forward_invalid_args),
		cmocka_unit_test(test_tiling_plain),
		cmocka_unit_test(test_tiling_nul_in_value),
		cmocka_unit_test(test_tiling_obs_fold),
		cmocka_unit_test(test_tiling_bounds),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
