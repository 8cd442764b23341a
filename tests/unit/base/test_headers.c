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
#include "unit.h"

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
#define FIELDS(...) \
	(const struct headers_field[]){ __VA_ARGS__ }, \
		LEN(((const struct headers_field[]){ __VA_ARGS__ }))
#define LINES(...) ((const char *const[]){ __VA_ARGS__, NULL })
#define NO_LINES ((const char *const[]){ NULL })

static const struct headers_forward_args fwd_args = {
	.fa_token_id = HEX,
	.fa_subject = "alice",
	.fa_client_ip = "203.0.113.7",
	.fa_request_id = "req-1",
	.fa_trust_forwarded = 0,
};

/* One forward with fwd_args (trust and subject aside) and the lines it must
 * give, in order: KEEP (the client's fields that go through), then idemd's
 * own (Idempotency-Key, Idempotency-Subject, "X-Forwarded-For: " XFF,
 * X-Request-Id, "Expect:"), then "Content-Type:" when CT_REMOVED (the
 * client sent none, so libcurl's default one is removed). */
struct fwd_case {
	const struct headers_field *f;
	size_t n;
	int trust;
	const char *subject; /* NULL: fwd_args' */
	const char *const *keep;
	const char *xff;
	int ct_removed;
};

#define XFF_OWN "203.0.113.7"

static const struct fwd_case fwd_cases[] = {
	/* plain: every end-to-end field, repeated ones too */
	{ FIELDS({ "Content-Type", "application/json" }, { "Authorization", "Bearer abc" },
		 { "X-Note", "a, b" }, { "X-Note", "c" }),
	  0, NULL,
	  LINES("Content-Type: application/json", "Authorization: Bearer abc", "X-Note: a, b",
		"X-Note: c"),
	  XFF_OWN, 0 },
	{ NULL, 0, 0, NULL, NO_LINES, XFF_OWN, 1 },
	/* dropped: framing, hop-by-hop, idemd's own names */
	{ FIELDS({ "Host", "evil.example" }, { "Content-Length", "40" },
		 { "Transfer-Encoding", "chunked" }, { "Expect", "100-continue" },
		 { "Accept-Encoding", "gzip" }, { "idempotency-key", "other" },
		 { "IDEMPOTENCY-SUBJECT", "mallory" }, { "X-Request-Id", "theirs" },
		 { "Connection", "keep-alive" }, { "Keep-Alive", "timeout=5" },
		 { "TE", "trailers" }, { "Trailer", "X-T" }, { "Upgrade", "h2c" },
		 { "Proxy-Authorization", "Basic eA==" }, { "proxy-connection", "close" },
		 { "Accept", "application/json" }, { "X-Keep", "1" }),
	  0, NULL, LINES("Accept: application/json", "X-Keep: 1"), XFF_OWN, 1 },
	/* a client's own X-Forwarded-For chain is dropped unless the route
	 * trusts its proxy */
	{ FIELDS({ "X-Forwarded-For", "10.0.0.1, 10.0.0.2" }, { "X-Note", "n" },
		 { "X-Forwarded-For", "" }, { "x-forwarded-for", "192.168.1.1" }),
	  0, NULL, LINES("X-Note: n"), XFF_OWN, 1 },
	{ FIELDS({ "X-Forwarded-For", "" }), 0, NULL, NO_LINES, XFF_OWN, 1 },
	{ FIELDS({ "X-Forwarded-For", "10.0.0.1, 10.0.0.2" }, { "X-Note", "n" },
		 { "X-Forwarded-For", "" }, { "x-forwarded-for", "192.168.1.1" }),
	  1, NULL, LINES("X-Note: n"), "10.0.0.1, 10.0.0.2, 192.168.1.1, 203.0.113.7", 1 },
	{ FIELDS({ "X-Forwarded-For", "" }), 1, NULL, NO_LINES, XFF_OWN, 1 },
	/* the proxy's own fields pass only when the route trusts it */
	{ FIELDS({ "Forwarded", "for=192.0.2.1;proto=https" }, { "X-Real-IP", "192.0.2.1" },
		 { "X-Forwarded-Host", "shop.example" }, { "X-Forwarded-Proto", "https" },
		 { "X-Forwarded-Port", "443" }, { "X-Note", "n" }),
	  0, NULL, LINES("X-Note: n"), XFF_OWN, 1 },
	{ FIELDS({ "Forwarded", "for=192.0.2.1;proto=https" }, { "X-Real-IP", "192.0.2.1" },
		 { "X-Forwarded-Host", "shop.example" }, { "X-Forwarded-Proto", "https" },
		 { "X-Forwarded-Port", "443" }, { "X-Note", "n" }),
	  1, NULL,
	  LINES("Forwarded: for=192.0.2.1;proto=https", "X-Real-IP: 192.0.2.1",
		"X-Forwarded-Host: shop.example", "X-Forwarded-Proto: https",
		"X-Forwarded-Port: 443", "X-Note: n"),
	  XFF_OWN, 1 },
	/* the Connection header may come after the headers it names, and
	 * there may be several */
	{ FIELDS({ "X-Foo", "1" }, { "X-Bar", "2" }, { "X-Baz", "3" },
		 { "Content-Type", "text/plain" }, { "Connection", "X-Foo,\tcontent-type" },
		 { "connection", " x-bar " }, { "X-Foo-Bar", "4" }),
	  0, NULL, LINES("X-Baz: 3", "X-Foo-Bar: 4"), XFF_OWN, 1 },
	/* naming idemd's own headers removes only the client's copies */
	{ FIELDS({ "Connection", "Idempotency-Key, X-Request-Id, X-Forwarded-For" },
		 { "X-Forwarded-For", "10.0.0.1" }),
	  1, NULL, NO_LINES, "10.0.0.1, 203.0.113.7", 1 },
	/* empty values go as "Name;" (libcurl's way to send one) */
	{ FIELDS({ "X-Empty", "" }, { "Content-Type", "" }, { "X-Tab", "a\tb" }), 0, NULL,
	  LINES("X-Empty;", "Content-Type;", "X-Tab: a\tb"), XFF_OWN, 0 },
	/* test_forward_invalid_field's fields minus the bad one */
	{ FIELDS({ "X-Ok", "1" }), 0, NULL, LINES("X-Ok: 1"), XFF_OWN, 1 },
	/* inner spaces and non-ASCII bytes in the subject are fine */
	{ FIELDS({ "X-Ok", "1" }), 0, "a b\tc\xc3\xa9", LINES("X-Ok: 1"), XFF_OWN, 1 },
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

static void test_forward_cases(void **state)
{
	(void)state;
	for (size_t c = 0; c < LEN(fwd_cases); c++) {
		const struct fwd_case *k = &fwd_cases[c];
		struct headers_forward_args a = fwd_args;
		char subject[64], xff[128];
		const char *want[32];
		size_t n = 0;

		a.fa_trust_forwarded = k->trust;
		if (k->subject != NULL)
			a.fa_subject = k->subject;
		snprintf(subject, sizeof(subject), "Idempotency-Subject: %s", a.fa_subject);
		snprintf(xff, sizeof(xff), "X-Forwarded-For: %s", k->xff);
		for (size_t i = 0; k->keep[i] != NULL; i++)
			want[n++] = k->keep[i];
		want[n++] = "Idempotency-Key: " HEX;
		want[n++] = subject;
		want[n++] = xff;
		want[n++] = "X-Request-Id: req-1";
		want[n++] = "Expect:";
		if (k->ct_removed)
			want[n++] = "Content-Type:";
		want[n] = NULL;
		assert_true(n < LEN(want));
		expect_forward(k->f, k->n, &a, want);
	}
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

UNIT_MAIN(cmocka_unit_test(test_fixed_names), cmocka_unit_test(test_connection_tokens),
	  cmocka_unit_test(test_is_token), cmocka_unit_test(test_value_ok),
	  cmocka_unit_test(test_is_alias), cmocka_unit_test(test_never_stored),
	  cmocka_unit_test(test_forward_cases), cmocka_unit_test(test_forward_invalid_field),
	  cmocka_unit_test(test_forward_invalid_args), cmocka_unit_test(test_tiling_plain),
	  cmocka_unit_test(test_tiling_nul_in_value), cmocka_unit_test(test_tiling_obs_fold),
	  cmocka_unit_test(test_tiling_bounds))
