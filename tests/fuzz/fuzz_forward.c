/*
 * libFuzzer driver for headers_forward: the header lines a gateway forward
 * hands libcurl, built from the client's request headers and idemd's own.
 *
 * Input: byte 0 holds flags (bit 0: trust_forwarded; bit 1: the subject is
 * the next line of the input, else bits 2-4 pick one from a table of valid
 * and invalid subjects). Then header lines separated by '\n' up to an
 * empty line, each split at its first ':' into name and value (no ':': the
 * whole line is the name, the value is empty); every other byte, CR, NUL,
 * space and '_' included, is kept (a NUL ends the C string it is in, as
 * libmicrohttpd's strings end). What follows the empty line is the body.
 *
 * Checked: HEADERS_INVALID exactly when a reference validator finds a field
 * (RFC 9110 token name; value without CTL but HTAB; no '_' alias of a
 * header idemd sets, strips or frames by) or the subject invalid. On
 * HEADERS_OK, the request libcurl would send (request line, Host, libcurl's
 * own defaults unless the list removes or replaces them, the list lines as
 * libcurl writes them, Content-Length, body) is read back by a strict
 * HTTP/1.1 parser: one request consuming every byte, clean names and
 * values, single framing, idemd's headers once each with idemd's values,
 * nothing hop-by-hop, no Expect, no client Accept-Encoding, no forwarding
 * headers unless trusted, and every other client field in order, unchanged.
 */
#include "fuzz.h"

#include <stdbool.h>

#include <curl/curl.h>

#include "headers.h"

#define MAX_FIELDS 128
#define MAX_UP 512

static const char TOKEN_ID[] = "000102030405060708090a0b0c0d0e0f";
static const char CLIENT_IP[] = "127.0.0.1";
static const char REQUEST_ID[] = "req-0123456789abcdef";

static const char *const subjects[8] = {
	"alice", "user-42@example.com", "a b\tc", "\xc3\xa9l\xc3\xa8ve",
	"", " alice", "alice\t", "al\rice",
};

/* ------------------------------------------------------------ reference */

static int
lower(int c)
{
	return (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c;
}

/* Case-insensitive equality of s[0..n) and the NUL-terminated lowercase w. */
static bool
eq_ci(const char *s, size_t n, const char *w)
{
	size_t i;

	for (i = 0; i < n && w[i] != '\0'; i++)
		if (lower((unsigned char)s[i]) != w[i])
			return false;
	return i == n && w[i] == '\0';
}

static bool
eq_any(const char *s, size_t n, const char *const *list, size_t k)
{
	for (size_t i = 0; i < k; i++)
		if (eq_ci(s, n, list[i]))
			return true;
	return false;
}

#define EQ_ANY(s, n, list) eq_any((s), (n), (list), sizeof(list) / sizeof((list)[0]))

/* RFC 9110 5.6.2: tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" /
 * "-" / "." / "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA */
static bool
tchar_ref(unsigned char c)
{
	switch (c) {
	case '!': case '#': case '$': case '%': case '&': case '\'': case '*':
	case '+': case '-': case '.': case '^': case '_': case '`': case '|':
	case '~':
		return true;
	default:
		return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') ||
		    (c >= 'a' && c <= 'z');
	}
}

static bool
token_ref(const char *s, size_t n)
{
	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!tchar_ref((unsigned char)s[i]))
			return false;
	return true;
}

/* field-value bytes: VCHAR, obs-text, SP, HTAB; no other CTL, no DEL. */
static bool
value_ref(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return false;
	}
	return true;
}

static const char *const own_names[] = {
	"idempotency-key", "idempotency-subject", "idempotency-timeout-ms",
	"idempotency-deadline", "x-request-id",
	"x-forwarded-for", "x-forwarded-host", "x-forwarded-proto",
	"x-forwarded-port", "x-real-ip", "forwarded", "content-length",
	"transfer-encoding", "host", "connection", "traceparent",
};

/* A name with '_' that reads, '_' as '-', as a header idemd owns. */
static bool
alias_ref(const char *s)
{
	size_t n = strlen(s);
	char *d;
	bool r;

	if (memchr(s, '_', n) == NULL)
		return false;
	d = fuzz_strndup((const uint8_t *)s, n);
	for (size_t i = 0; i < n; i++)
		if (d[i] == '_')
			d[i] = '-';
	r = EQ_ANY(d, n, own_names);
	free(d);
	return r;
}

static bool
ows(char c)
{
	return c == ' ' || c == '\t';
}

static bool
subject_ref(const char *s)
{
	size_t n = strlen(s);

	return n > 0 && value_ref(s, n) && !ows(s[0]) && !ows(s[n - 1]);
}

/* s[0..*n) with OWS trimmed on both sides. */
static const char *
trim(const char *s, size_t *n)
{
	while (*n > 0 && ows(s[0])) {
		s++;
		(*n)--;
	}
	while (*n > 0 && ows(s[*n - 1]))
		(*n)--;
	return s;
}

/* NAME listed in one of the CONN values (split at ", \t"). */
static bool
in_connection(const char *name, const char *const *conn, size_t nconn)
{
	size_t n = strlen(name);

	for (size_t k = 0; k < nconn; k++) {
		const char *p = conn[k];

		while (*p != '\0') {
			size_t len = strcspn(p, ", \t");

			if (len > 0 && len == n) {
				size_t i;

				for (i = 0; i < n; i++)
					if (lower((unsigned char)p[i]) !=
					    lower((unsigned char)name[i]))
						break;
				if (i == n)
					return true;
			}
			p += len;
			p += strspn(p, ", \t");
		}
	}
	return false;
}

static const char *const hop_names[] = {
	"connection", "keep-alive", "te", "trailer", "transfer-encoding",
	"upgrade",
};

static bool
hop_ref(const char *s, size_t n)
{
	return EQ_ANY(s, n, hop_names) ||
	    (n >= 6 && eq_ci(s, 6, "proxy-"));
}

static const char *const forwarding_names[] = {
	"forwarded", "x-real-ip", "x-forwarded-host", "x-forwarded-proto",
	"x-forwarded-port",
};

/* Client headers never passed on whatever the route (besides hop-by-hop):
 * framing, what idemd sets or appends to, and content negotiation libcurl
 * does not undo. */
static const char *const dropped_names[] = {
	"host", "content-length", "expect", "accept-encoding",
	"idempotency-key", "idempotency-subject", "idempotency-timeout-ms",
	"idempotency-deadline", "x-request-id", "x-forwarded-for", "traceparent",
};

/* The headers idemd itself puts in the upstream request. */
static const char *const set_names[] = {
	"host", "content-length", "idempotency-key", "idempotency-subject",
	"x-request-id", "x-forwarded-for",
};

/* --------------------------------------------------------------- buffer */

struct buf {
	char *s;
	size_t len, cap;
};

static void
put(struct buf *b, const void *p, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;

		while (cap < b->len + n + 1)
			cap *= 2;
		b->s = realloc(b->s, cap);
		FUZZ_CHECK(b->s != NULL);
		b->cap = cap;
	}
	if (n > 0)
		memcpy(b->s + b->len, p, n);
	b->len += n;
	b->s[b->len] = '\0';
}

static void
puts_(struct buf *b, const char *s)
{
	put(b, s, strlen(s));
}

/* ----------------------------------------------------- libcurl's writing */

/* libcurl's Curl_checkheaders: a list line for NAME ("NAME:" / "NAME;"). */
static bool
list_has(const struct curl_slist *l, const char *name)
{
	size_t n = strlen(name);

	for (; l != NULL; l = l->next)
		if (strlen(l->data) > n && eq_ci(l->data, n, name) &&
		    (l->data[n] == ':' || l->data[n] == ';'))
			return true;
	return false;
}

static bool
curl_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' ||
	    c == '\f';
}

/*
 * Appends LINE as libcurl's Curl_add_custom_headers writes it: "Name: v"
 * as is when v is not blank; "Name:" with a blank v is not sent (it only
 * removes an internal header); "Name;" is sent as "Name:"; anything else
 * is not sent. Returns 1 when something was written.
 */
static int
curl_line(struct buf *b, const char *line)
{
	const char *p = strchr(line, ':');

	if (p != NULL) {
		if (p == line)
			return 0;
		for (p++; *p != '\0' && curl_space(*p); p++)
			;
		if (*p == '\0')
			return 0;
		puts_(b, line);
		puts_(b, "\r\n");
		return 1;
	}
	p = strchr(line, ';');
	if (p == NULL || p == line)
		return 0;
	for (const char *q = p + 1; *q != '\0'; q++)
		if (!curl_space(*q))
			return 0;	/* "reserved for future use": not sent */
	if (p[1] != '\0')
		return 0;	/* blanks after ';': libcurl sends nothing */
	put(b, line, (size_t)(p - line));
	puts_(b, ":\r\n");
	return 1;
}

/* ------------------------------------------------------- strict parser */

struct field {
	const char *name, *value;
	size_t nlen, vlen;	/* value with OWS trimmed */
};

struct parsed {
	struct field f[MAX_UP];
	size_t n;
	const char *body;
	size_t body_len;
};

/*
 * A strict RFC 9112 request parser: request-line, field lines ending in
 * CRLF (no bare CR or LF, no obs-fold, token names, field-value bytes),
 * empty line, a body framed by exactly one Content-Length (a
 * Transfer-Encoding fails), and nothing after it. 0 or -1.
 */
static int
parse_request(const char *s, size_t len, struct parsed *out)
{
	size_t i = 0, cl_count = 0;
	unsigned long long cl = 0;

	/* request-line: method SP request-target SP HTTP-version CRLF */
	size_t m = 0;
	while (i < len && tchar_ref((unsigned char)s[i]))
		i++, m++;
	if (m == 0 || i >= len || s[i++] != ' ')
		return -1;
	size_t t = 0;
	while (i < len && (unsigned char)s[i] > 0x20 && (unsigned char)s[i] != 0x7f)
		i++, t++;
	if (t == 0 || i >= len || s[i++] != ' ')
		return -1;
	if (len - i < 10 || memcmp(s + i, "HTTP/1.1\r\n", 10) != 0)
		return -1;
	i += 10;

	out->n = 0;
	for (;;) {
		if (len - i >= 2 && s[i] == '\r' && s[i + 1] == '\n') {
			i += 2;
			break;
		}
		size_t start = i;
		while (i < len && tchar_ref((unsigned char)s[i]))
			i++;
		if (i == start || i >= len || s[i] != ':')
			return -1;	/* includes obs-fold and "name :" */
		size_t nlen = i - start;
		i++;
		size_t vstart = i;
		while (i < len && s[i] != '\r' && s[i] != '\n') {
			unsigned char c = (unsigned char)s[i];

			if ((c < 0x20 && c != '\t') || c == 0x7f)
				return -1;
			i++;
		}
		if (len - i < 2 || s[i] != '\r' || s[i + 1] != '\n')
			return -1;	/* bare LF, bare CR, or cut short */
		size_t vlen = i - vstart;
		const char *v = trim(s + vstart, &vlen);
		i += 2;
		if (out->n == MAX_UP)
			return -1;
		out->f[out->n++] = (struct field){ s + start, v, nlen, vlen };
		if (eq_ci(s + start, nlen, "transfer-encoding"))
			return -1;
		if (eq_ci(s + start, nlen, "content-length")) {
			if (vlen == 0 || vlen > 18 || cl_count++ > 0)
				return -1;
			cl = 0;
			for (size_t k = 0; k < vlen; k++) {
				if (v[k] < '0' || v[k] > '9')
					return -1;
				cl = cl * 10 + (unsigned)(v[k] - '0');
			}
		}
	}
	if (cl_count != 1 || cl != len - i)
		return -1;
	out->body = s + i;
	out->body_len = (size_t)cl;
	return 0;
}

static size_t
count(const struct parsed *p, const char *name, size_t *at)
{
	size_t c = 0;

	for (size_t k = 0; k < p->n; k++)
		if (eq_ci(p->f[k].name, p->f[k].nlen, name)) {
			if (c++ == 0 && at != NULL)
				*at = k;
		}
	return c;
}

static bool
value_is(const struct field *f, const char *v)
{
	return f->vlen == strlen(v) && memcmp(f->value, v, f->vlen) == 0;
}

/* ---------------------------------------------------------------- input */

struct input {
	struct headers_field f[MAX_FIELDS];
	char *own[2 * MAX_FIELDS];
	size_t n, nown;
	char *subject;
	const uint8_t *body;
	size_t body_len;
	int trust;
};

static char *
keep(struct input *in, const uint8_t *p, size_t n)
{
	char *s = fuzz_strndup(p, n);

	in->own[in->nown++] = s;
	return s;
}

static void
read_input(const uint8_t *data, size_t size, struct input *in)
{
	size_t i = 1;
	uint8_t flags = size > 0 ? data[0] : 0;

	memset(in, 0, sizeof(*in));
	in->trust = flags & 1;
	if (flags & 2) {
		const uint8_t *nl = size > i ? memchr(data + i, '\n', size - i) : NULL;
		size_t n = nl ? (size_t)(nl - (data + i)) : size - i;

		in->subject = fuzz_strndup(data + i, size > i ? n : 0);
		i = nl ? i + n + 1 : size;
	} else {
		in->subject = fuzz_strndup((const uint8_t *)subjects[(flags >> 2) & 7],
		    strlen(subjects[(flags >> 2) & 7]));
	}
	while (i < size) {
		const uint8_t *nl = memchr(data + i, '\n', size - i);
		size_t n = nl ? (size_t)(nl - (data + i)) : size - i;
		const uint8_t *line = data + i;

		i = nl ? i + n + 1 : size;
		if (n == 0)
			break;	/* the empty line: the body follows */
		if (in->n == MAX_FIELDS)
			continue;
		const uint8_t *colon = memchr(line, ':', n);
		size_t nl_len = colon ? (size_t)(colon - line) : n;

		in->f[in->n].hf_name = keep(in, line, nl_len);
		in->f[in->n].hf_value = colon ?
		    keep(in, colon + 1, n - nl_len - 1) : keep(in, NULL, 0);
		in->n++;
	}
	in->body = data + i;
	in->body_len = size > i ? size - i : 0;
}

static void
free_input(struct input *in)
{
	for (size_t k = 0; k < in->nown; k++)
		free(in->own[k]);
	free(in->subject);
}

/* ---------------------------------------------------------------- check */

static bool
input_valid(const struct input *in)
{
	if (!subject_ref(in->subject))
		return false;
	for (size_t k = 0; k < in->n; k++) {
		const char *name = in->f[k].hf_name, *v = in->f[k].hf_value;

		if (!token_ref(name, strlen(name)) || !value_ref(v, strlen(v)) ||
		    alias_ref(name))
			return false;
	}
	return true;
}

/* 1 when the client field K is passed upstream. */
static bool
passed_on(const struct input *in, size_t k, const char *const *conn,
    size_t nconn)
{
	const char *name = in->f[k].hf_name;
	size_t n = strlen(name);

	if (EQ_ANY(name, n, dropped_names) || hop_ref(name, n) ||
	    in_connection(name, conn, nconn))
		return false;
	if (!in->trust && EQ_ANY(name, n, forwarding_names))
		return false;
	return true;
}

static void
check_forward(const struct input *in, const struct curl_slist *list)
{
	const char *conn[MAX_FIELDS];
	size_t nconn = 0, head = 1, tail = 1;
	struct buf req = { 0 }, xff = { 0 };
	struct parsed *p;
	bool has_type = false, seen_xff = false;
	char clen[32];

	for (size_t k = 0; k < in->n; k++)
		if (eq_ci(in->f[k].hf_name, strlen(in->f[k].hf_name), "connection"))
			conn[nconn++] = in->f[k].hf_value;

	/* Every list line is "Name: value" with a non-blank value, "Name;",
	 * or one of the two removals idemd asks for. */
	for (const struct curl_slist *l = list; l != NULL; l = l->next) {
		struct buf one = { 0 };

		FUZZ_CHECK(l->data != NULL);
		if (curl_line(&one, l->data) == 0)
			FUZZ_CHECK(strcmp(l->data, "Expect:") == 0 ||
			    strcmp(l->data, "Content-Type:") == 0);
		free(one.s);
	}

	/* The request libcurl writes for a POST with this list. */
	puts_(&req, "POST /orders HTTP/1.1\r\nHost: upstream\r\n");
	if (!list_has(list, "accept")) {
		puts_(&req, "Accept: */*\r\n");
		head++;
	}
	for (const struct curl_slist *l = list; l != NULL; l = l->next)
		curl_line(&req, l->data);
	snprintf(clen, sizeof(clen), "Content-Length: %zu\r\n", in->body_len);
	puts_(&req, clen);
	if (!list_has(list, "content-type")) {
		puts_(&req, "Content-Type: application/x-www-form-urlencoded\r\n");
		tail++;
	}
	if (!list_has(list, "expect")) {
		puts_(&req, "Expect: 100-continue\r\n");
		tail++;
	}
	puts_(&req, "\r\n");
	put(&req, in->body, in->body_len);

	p = malloc(sizeof(*p));
	FUZZ_CHECK(p != NULL);
	FUZZ_CHECK(parse_request(req.s, req.len, p) == 0);
	FUZZ_CHECK(p->n >= head + tail);
	FUZZ_CHECK(p->body_len == in->body_len &&
	    (in->body_len == 0 || memcmp(p->body, in->body, in->body_len) == 0));

	/* Framing and idemd's own headers, once each. */
	size_t at = 0;
	FUZZ_CHECK(count(p, "content-length", NULL) == 1);
	FUZZ_CHECK(count(p, "transfer-encoding", NULL) == 0);
	FUZZ_CHECK(count(p, "host", &at) == 1 && value_is(&p->f[at], "upstream"));
	FUZZ_CHECK(count(p, "idempotency-key", &at) == 1 &&
	    value_is(&p->f[at], TOKEN_ID));
	FUZZ_CHECK(count(p, "idempotency-subject", &at) == 1 &&
	    value_is(&p->f[at], in->subject));
	FUZZ_CHECK(count(p, "x-request-id", &at) == 1 &&
	    value_is(&p->f[at], REQUEST_ID));
	FUZZ_CHECK(count(p, "x-forwarded-for", &at) == 1);
	FUZZ_CHECK(p->f[at].vlen >= strlen(CLIENT_IP) &&
	    memcmp(p->f[at].value + p->f[at].vlen - strlen(CLIENT_IP), CLIENT_IP,
	    strlen(CLIENT_IP)) == 0);
	/* ... and exactly the client's chain (only when the route trusts its
	 * proxies), then the client's address. */
	for (size_t k = 0; k < in->n; k++) {
		const char *v = in->f[k].hf_value;

		if (!in->trust || !eq_ci(in->f[k].hf_name, strlen(in->f[k].hf_name),
		    "x-forwarded-for") || v[0] == '\0')
			continue;
		if (seen_xff)
			puts_(&xff, ", ");
		puts_(&xff, v);
		seen_xff = true;
	}
	if (seen_xff)
		puts_(&xff, ", ");
	puts_(&xff, CLIENT_IP);
	{
		size_t xl = xff.len;
		const char *xv = trim(xff.s, &xl);

		FUZZ_CHECK(p->f[at].vlen == xl && memcmp(p->f[at].value, xv, xl) == 0);
	}
	free(xff.s);

	/* Nothing hop-by-hop, no Expect, nothing the client may not set. */
	FUZZ_CHECK(count(p, "expect", NULL) == 0);
	for (size_t k = 0; k < p->n; k++) {
		const struct field *f = &p->f[k];
		char *name = fuzz_strndup((const uint8_t *)f->name, f->nlen);

		FUZZ_CHECK(token_ref(f->name, f->nlen) && value_ref(f->value, f->vlen));
		FUZZ_CHECK(!hop_ref(f->name, f->nlen));
		FUZZ_CHECK(!in_connection(name, conn, nconn) ||
		    EQ_ANY(f->name, f->nlen, set_names) || k < head ||
		    k >= p->n - tail);
		FUZZ_CHECK(!eq_ci(f->name, f->nlen, "accept-encoding"));
		if (!in->trust)
			FUZZ_CHECK(!EQ_ANY(f->name, f->nlen, forwarding_names));
		free(name);
	}

	/* Every other client field, in order, with its name and value. */
	size_t up = head;
	for (size_t k = 0; k < in->n; k++) {
		if (!passed_on(in, k, conn, nconn))
			continue;
		while (up < p->n - tail &&
		    EQ_ANY(p->f[up].name, p->f[up].nlen, set_names))
			up++;
		FUZZ_CHECK(up < p->n - tail);
		const char *name = in->f[k].hf_name, *v = in->f[k].hf_value;
		size_t vl = strlen(v);
		const char *tv = trim(v, &vl);

		FUZZ_CHECK(p->f[up].nlen == strlen(name) &&
		    memcmp(p->f[up].name, name, p->f[up].nlen) == 0);
		FUZZ_CHECK(p->f[up].vlen == vl && memcmp(p->f[up].value, tv, vl) == 0);
		has_type |= eq_ci(name, strlen(name), "content-type");
		up++;
	}
	while (up < p->n - tail && EQ_ANY(p->f[up].name, p->f[up].nlen, set_names))
		up++;
	FUZZ_CHECK(up == p->n - tail);
	/* libcurl's default Content-Type is removed when the client sent none. */
	FUZZ_CHECK(count(p, "content-type", NULL) == 0 || has_type);

	free(p);
	free(req.s);
}

FUZZ_INITIALIZE(fuzz_init())

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct input *in = malloc(sizeof(*in));
	struct curl_slist *list = (struct curl_slist *)1;
	int rc;

	FUZZ_CHECK(in != NULL);
	read_input(data, size, in);
	struct headers_forward_args a = {
		.fa_token_id = TOKEN_ID, .fa_subject = in->subject,
		.fa_client_ip = CLIENT_IP, .fa_request_id = REQUEST_ID,
		.fa_trust_forwarded = in->trust,
	};
	rc = headers_forward(in->f, in->n, &a, &list);
	if (input_valid(in)) {
		FUZZ_CHECK(rc == HEADERS_OK || rc == HEADERS_NOMEM);
	} else {
		FUZZ_CHECK(rc == HEADERS_INVALID);
	}
	if (rc != HEADERS_OK) {
		FUZZ_CHECK(list == NULL);
	} else {
		FUZZ_CHECK(list != NULL);
		check_forward(in, list);
		curl_slist_free_all(list);
	}
	free_input(in);
	free(in);
	return 0;
}
