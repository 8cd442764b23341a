/*
 * libFuzzer driver for the request header parsers: token_from_header
 * (Idempotency-Key: bare token or RFC 8941 sf-string) and reqjson_etag
 * (If-Match: one ETag "N", or a weak W/"N" that never matches), each checked against a reference
 * grammar, and router_match / router_decode on the method and raw path of
 * the request line (percent-decoding checked against a reference).
 * The gateway's header filtering: headers_hop_by_hop (which request and
 * answer headers are never forwarded or stored), against a reference.
 * The input is split at NUL bytes (header values are C strings): piece 0
 * is the header value, pieces 1 and 2 the method and the path, pieces 3
 * and 4 a header name and a Connection header value.
 * The header list a gateway forward sends upstream (headers_forward) has
 * its own driver, fuzz_forward.c.
 */
#include "fuzz.h"

#include <errno.h>
#include <inttypes.h>
#include <strings.h>

#include "headers.h"
#include "reqjson.h"
#include "router.h"
#include "token.h"

static int
b64url_char(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	    (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/*
 * Reference for token_from_header with a buffer of TOKEN_MAX_CHARS + 1:
 * OWS (bare-token / sf-string) OWS. Writes the token into out; 0 or -1.
 */
static int
from_header_ref(const char *v, char *out)
{
	size_t start = 0, end = strlen(v), n = 0;

	while (v[start] == ' ' || v[start] == '\t')
		start++;
	while (end > start && (v[end - 1] == ' ' || v[end - 1] == '\t'))
		end--;
	if (start < end && v[start] == '"') {
		size_t i;

		for (i = start + 1; i < end; i++) {
			char c = v[i];

			if (c == '"')
				break;
			if (c == '\\') {
				if (++i == end || (v[i] != '"' && v[i] != '\\'))
					return -1;
				c = v[i];
			} else if ((unsigned char)c < 0x20 || (unsigned char)c > 0x7e) {
				return -1;
			}
			if (n == TOKEN_MAX_CHARS)
				return -1;
			out[n++] = c;
		}
		if (i + 1 != end)	/* unterminated, or something after it */
			return -1;
	} else {
		for (size_t i = start; i < end; i++) {
			if (!b64url_char(v[i]) || n == TOKEN_MAX_CHARS)
				return -1;
			out[n++] = v[i];
		}
	}
	if (n == 0)
		return -1;
	out[n] = '\0';
	return 0;
}

static const uint8_t *
no_key(uint32_t key_id, void *arg)
{
	(void)key_id;
	(void)arg;
	return NULL;
}

static void
check_token_header(const char *v)
{
	char out[TOKEN_MAX_CHARS + 1], ref[TOKEN_MAX_CHARS + 1];
	char quoted[2 * TOKEN_MAX_CHARS + 8], *exact;
	struct token t;
	size_t n, q = 0;
	int rc;

	rc = token_from_header(v, out, sizeof(out));
	FUZZ_CHECK(rc == from_header_ref(v, ref));
	if (rc != 0)
		return;
	FUZZ_CHECK(strcmp(out, ref) == 0);
	n = strlen(out);
	FUZZ_CHECK(n >= 1 && n <= TOKEN_MAX_CHARS);
	/* what a header gives is opened as any token is; only that it does
	 * not crash matters here (fuzz_token.c checks the verdicts) */
	(void)token_open(out, n, &t, no_key, NULL);

	/* Exactly n + 1 bytes is enough, n is not. */
	exact = malloc(n + 1);
	FUZZ_CHECK(exact != NULL);
	FUZZ_CHECK(token_from_header(v, exact, n + 1) == 0);
	FUZZ_CHECK(strcmp(exact, out) == 0);
	FUZZ_CHECK(token_from_header(v, exact, n) == -1);
	free(exact);

	/* Serialised again as an sf-string, it reads back the same. */
	quoted[q++] = '\t';
	quoted[q++] = '"';
	for (size_t i = 0; i < n; i++) {
		if (out[i] == '"' || out[i] == '\\')
			quoted[q++] = '\\';
		quoted[q++] = out[i];
	}
	quoted[q++] = '"';
	quoted[q++] = ' ';
	quoted[q] = '\0';
	FUZZ_CHECK(token_from_header(quoted, ref, sizeof(ref)) == 0);
	FUZZ_CHECK(strcmp(ref, out) == 0);
}

/*
 * Reference for reqjson_etag: SP* ["W/"] '"' ("0" / %x31-39 DIGIT*) '"' SP*, value
 * <= INT64_MAX (no leading zeros: strong comparison is by characters).
 */
static int
etag_ref(const char *v, int64_t *out)
{
	uint64_t x = 0;
	size_t i = strspn(v, " "), digits = 0;
	int weak = v[i] == 'W' && v[i + 1] == '/';

	if (weak)
		i += 2;
	if (v[i++] != '"')
		return -1;
	if (v[i] == '0' && v[i + 1] != '"')
		return -1;
	for (; v[i] >= '0' && v[i] <= '9'; i++, digits++) {
		if (x > ((uint64_t)INT64_MAX - (uint64_t)(v[i] - '0')) / 10)
			return -1;
		x = x * 10 + (uint64_t)(v[i] - '0');
	}
	if (digits == 0 || v[i++] != '"')
		return -1;
	i += strspn(v + i, " ");
	if (v[i] != '\0')
		return -1;
	*out = weak ? REQJSON_ETAG_WEAK : (int64_t)x;
	return 0;
}

static void
check_etag(const char *v)
{
	int64_t x = -1, y = -1;
	char buf[32];
	int rc;

	rc = reqjson_etag(v, &x);
	FUZZ_CHECK(rc == etag_ref(v, &y));
	if (rc != 0)
		return;
	FUZZ_CHECK(x == y);
	if (x == REQJSON_ETAG_WEAK)
		return; /* a weak tag: never matches, nothing to format back */
	FUZZ_CHECK(x >= 0);
	reqjson_etag_format(x, buf, sizeof(buf));
	FUZZ_CHECK(reqjson_etag(buf, &y) == 0 && y == x);
}

static int
hex_ref(char c)
{
	const char *d = "0123456789abcdef0123456789ABCDEF", *p;

	if (c == '\0' || (p = strchr(d, c)) == NULL)
		return -1;
	return (int)((size_t)(p - d) % 16);
}

/* Reference percent-decoding: "%" HEXDIG HEXDIG is one byte, else literal. */
static size_t
decode_ref(const char *s, size_t len, char *out)
{
	size_t n = 0;

	for (size_t i = 0; i < len; i++) {
		if (s[i] == '%' && i + 2 < len && hex_ref(s[i + 1]) >= 0 &&
		    hex_ref(s[i + 2]) >= 0) {
			out[n++] = (char)(hex_ref(s[i + 1]) * 16 + hex_ref(s[i + 2]));
			i += 2;
		} else {
			out[n++] = s[i];
		}
	}
	return n;
}

static void
check_decode(const char *s)
{
	size_t len = strlen(s), n = 0, rn;
	char *out, *ref;

	out = router_decode(s, len, &n);
	FUZZ_CHECK(out != NULL);
	FUZZ_CHECK(n <= len && out[n] == '\0');
	ref = malloc(len + 1);
	FUZZ_CHECK(ref != NULL);
	rn = decode_ref(s, len, ref);
	FUZZ_CHECK(rn == n && memcmp(out, ref, n) == 0);
	free(ref);
	free(out);
}

static void
check_route(const char *method, const char *path, size_t allowlen)
{
	char *params[HTTP_MAX_PARAMS] = { NULL, NULL }, *allow;
	size_t lens[HTTP_MAX_PARAMS] = { 0, 0 };
	const struct route *r;
	unsigned status = 0;

	allow = malloc(allowlen);
	FUZZ_CHECK(allow != NULL);
	r = router_match(method, path, params, lens, &status, allow, allowlen);
	FUZZ_CHECK(memchr(allow, '\0', allowlen) != NULL);
	if (r != NULL) {
		FUZZ_CHECK(strcmp(r->method, method) == 0 ||
		    (strcmp(method, "HEAD") == 0 && strcmp(r->method, "GET") == 0));
		for (int k = 0; k < HTTP_MAX_PARAMS; k++) {
			if (params[k] != NULL) {
				/* A segment decodes to 1..its raw length bytes. */
				FUZZ_CHECK(lens[k] >= 1 && lens[k] <= strlen(path));
				FUZZ_CHECK(params[k][lens[k]] == '\0');
				FUZZ_CHECK(strlen(params[k]) <= lens[k]);
			} else {
				FUZZ_CHECK(lens[k] == 0);
			}
			free(params[k]);
		}
	} else {
		FUZZ_CHECK(status == 404 || status == 405);
		FUZZ_CHECK((status == 405) == (allow[0] != '\0'));
	}
	free(allow);
}

/*
 * Reference for headers_hop_by_hop: the RFC 9110 7.6.1 list, Proxy-*,
 * or a name listed in the Connection value (split at ", \t").
 */
static int
hop_ref(const char *name, const char *connection)
{
	static const char *const hop[] = { "connection", "keep-alive", "te",
	    "trailer", "transfer-encoding", "upgrade" };
	size_t n = strlen(name);

	for (size_t i = 0; i < sizeof(hop) / sizeof(hop[0]); i++)
		if (strcasecmp(name, hop[i]) == 0)
			return 1;
	if (strncasecmp(name, "proxy-", 6) == 0)
		return 1;
	while (connection != NULL && *connection != '\0') {
		size_t len = strcspn(connection, ", \t");

		if (len > 0 && len == n && strncasecmp(connection, name, n) == 0)
			return 1;
		connection += len;
		connection += strspn(connection, ", \t");
	}
	return 0;
}

static void
check_hop(const char *name, const char *connection)
{
	/* Header names are never empty (an empty one matches a trailing ","). */
	if (name[0] == '\0')
		return;
	FUZZ_CHECK(headers_hop_by_hop(name, connection) == hop_ref(name, connection));
	FUZZ_CHECK(headers_hop_by_hop(name, NULL) == hop_ref(name, NULL));
	/* Listing the name in Connection always makes it hop-by-hop. */
	if (strpbrk(name, ", \t") == NULL)
		FUZZ_CHECK(headers_hop_by_hop(name, name) == 1);
}

FUZZ_INITIALIZE(fuzz_init())

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *piece[5];

	fuzz_split(data, size, piece, 5);
	check_token_header(piece[0]);
	check_etag(piece[0]);
	check_decode(piece[2]);
	/* 64 is the buffer http.c passes; smaller ones test the bound. */
	check_route(piece[1], piece[2], 64);
	check_route(piece[1], piece[2], 1 + size % 24);
	check_hop(piece[3], piece[4]);
	for (int i = 0; i < 5; i++)
		free(piece[i]);
	return 0;
}
