/* HTTP header rules: valid names and values, hop-by-hop headers, what a
 * gateway forward sends upstream and what may be stored and replayed. */
#include "headers.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "buf.h"

/* RFC 9110 tchar. */
static int headers_tchar(unsigned char c)
{
	unsigned char l = c | 0x20;

	return (c >= '0' && c <= '9') || (l >= 'a' && l <= 'z') ||
	       (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

int headers_is_token(const char *name, size_t len)
{
	if (len == 0)
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!headers_tchar((unsigned char)name[i]))
			return 0;
	return 1;
}

int headers_value_ok(const char *value, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)value[i];
		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return 0;
	}
	return 1;
}

/* Headers idemd sets, strips or frames by: a client may not send them
 * under a '_' spelling on a gateway route. */
static const char *const headers_own[] = {
	"idempotency-key",
	"idempotency-subject",
	"idempotency-timeout-ms",
	"idempotency-deadline",
	"x-request-id",
	"x-forwarded-for",
	"x-forwarded-host",
	"x-forwarded-proto",
	"x-forwarded-port",
	"x-real-ip",
	"forwarded",
	"content-length",
	"transfer-encoding",
	"host",
	"connection",
};

static int headers_in(const char *name, const char *const *list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcasecmp(name, list[i]) == 0)
			return 1;
	return 0;
}

int headers_is_alias(const char *name)
{
	char dashed[32];
	size_t n = strlen(name);

	if (strchr(name, '_') == NULL || n >= sizeof(dashed))
		return 0;
	for (size_t i = 0; i <= n; i++)
		dashed[i] = name[i] == '_' ? '-' : name[i];
	return headers_in(dashed, headers_own, IDEMD_ARRAY_LEN(headers_own));
}

int headers_hop_by_hop(const char *name, const char *connection)
{
	static const char *const hop[] = { "connection", "keep-alive",	      "te",
					   "trailer",	 "transfer-encoding", "upgrade" };
	size_t n = strlen(name);

	if (headers_in(name, hop, IDEMD_ARRAY_LEN(hop)) || strncasecmp(name, "proxy-", 6) == 0)
		return 1;
	for (const char *p = connection; p != NULL && *p != '\0';) {
		p += strspn(p, ", \t");
		size_t len = strcspn(p, ", \t");
		if (len == n && strncasecmp(p, name, n) == 0)
			return 1;
		p += len;
	}
	return 0;
}

int headers_never_stored(const char *name)
{
	static const char *const never[] = { "content-length", "set-cookie", "idempotent-replayed",
					     "x-request-id" };

	return headers_hop_by_hop(name, NULL) || headers_in(name, never, IDEMD_ARRAY_LEN(never)) ||
	       strncasecmp(name, "access-control-", 15) == 0;
}

/* ---------------------------------------------------------------- forward */

/* Client headers a forward never passes on besides the hop-by-hop ones. */
static const char *const headers_dropped[] = {
	"host",
	"content-length",
	"expect",
	"accept-encoding",
	"idempotency-key",
	"idempotency-subject",
	"idempotency-timeout-ms",
	"idempotency-deadline",
	"x-request-id",
	"x-forwarded-for",
	"traceparent",
};

/* ... and these unless the route trusts its clients' proxies. */
static const char *const headers_forwarding[] = {
	"forwarded", "x-real-ip", "x-forwarded-host", "x-forwarded-proto", "x-forwarded-port",
};

/* Appends "NAME: VALUE", or "NAME;" (libcurl's form of an empty value)
 * when VALUE is blank: libcurl reads "NAME:" followed by blanks alone as
 * "remove NAME", and would not send it. */
static int headers_append(struct curl_slist **list, const char *name, const char *value)
{
	struct buf line = { 0 };
	struct curl_slist *l = NULL;
	int blank = value[strspn(value, " \t")] == '\0';

	/* a failed append marks LINE, checked once */
	(void)buf_str(&line, name);
	(void)buf_str(&line, blank ? ";" : ": ");
	if (!blank)
		(void)buf_str(&line, value);
	if (!line.b_failed)
		l = curl_slist_append(*list, line.b_data);
	buf_free(&line);
	if (l == NULL)
		return -1;
	*list = l;
	return 0;
}

static int headers_raw(struct curl_slist **list, const char *line)
{
	struct curl_slist *l = curl_slist_append(*list, line);

	if (l == NULL)
		return -1;
	*list = l;
	return 0;
}

static int headers_field_ok(const struct headers_field *f)
{
	return headers_is_token(f->hf_name, strlen(f->hf_name)) &&
	       headers_value_ok(f->hf_value, strlen(f->hf_value)) && !headers_is_alias(f->hf_name);
}

/* Where P lies in T's block (an offset below ht_len), or SIZE_MAX. */
static size_t headers_tiling_at(const struct headers_tiling *t, const char *p)
{
	uintptr_t off = (uintptr_t)p - (uintptr_t)t->ht_block;

	return off < t->ht_len ? (size_t)off : SIZE_MAX;
}

/* Steps over the line end at ht_at: one or two NULs, no more. */
static int headers_tiling_line_end(struct headers_tiling *t)
{
	size_t z = 0;

	while (t->ht_at < t->ht_len && t->ht_block[t->ht_at] == '\0' && z < 3) {
		t->ht_at++;
		z++;
	}
	return z == 1 || z == 2;
}

void headers_tiling_begin(struct headers_tiling *t, const char *block, size_t len, size_t first)
{
	t->ht_block = block;
	t->ht_len = len;
	t->ht_at = first;
	t->ht_ok = block != NULL && first < len;
}

void headers_tiling_field(struct headers_tiling *t, const char *name, size_t name_len,
			  const char *value, size_t value_len)
{
	if (!t->ht_ok)
		return;
	size_t n = headers_tiling_at(t, name), v = headers_tiling_at(t, value);
	/* the name starts its line; its colon became a NUL; blanks, then
	 * the value, which ends the line */
	if (!headers_tiling_line_end(t) || n != t->ht_at || v == SIZE_MAX ||
	    name_len >= t->ht_len - n || t->ht_block[n + name_len] != '\0' || v <= n + name_len ||
	    value_len > t->ht_len - v) {
		t->ht_ok = 0;
		return;
	}
	for (size_t i = n + name_len + 1; i < v; i++) {
		if (t->ht_block[i] != ' ' && t->ht_block[i] != '\t') {
			t->ht_ok = 0;
			return;
		}
	}
	t->ht_at = v + value_len;
}

int headers_tiling_end(const struct headers_tiling *t)
{
	size_t rest = t->ht_len - t->ht_at;

	/* the last line's end and the empty line's: 2 to 4 NULs, then nothing */
	if (!t->ht_ok || rest < 2 || rest > 4)
		return 0;
	for (size_t i = t->ht_at; i < t->ht_len; i++)
		if (t->ht_block[i] != '\0')
			return 0;
	return 1;
}

int headers_arg_ok(const char *s)
{
	size_t n = strlen(s);

	return n > 0 && headers_value_ok(s, n) && s[0] != ' ' && s[n - 1] != ' ' && s[0] != '\t' &&
	       s[n - 1] != '\t';
}

/* Whether every string of A can travel as a header value. */
static int headers_forward_args_ok(const struct headers_forward_args *a)
{
	return headers_arg_ok(a->fa_token_id) &&
	       (a->fa_subject == NULL || headers_arg_ok(a->fa_subject)) &&
	       headers_arg_ok(a->fa_client_ip) && headers_arg_ok(a->fa_request_id);
}

/* Checks the N FIELDS and gathers the values of their Connection headers
 * into CONN, each after a comma (a failed append marks CONN); 0, or -1 on
 * a field that cannot travel as a header. */
static int headers_connection_list(const struct headers_field *fields, size_t n, struct buf *conn)
{
	for (size_t i = 0; i < n; i++) {
		if (!headers_field_ok(&fields[i]))
			return -1;
		if (strcasecmp(fields[i].hf_name, "connection") == 0) {
			(void)buf_str(conn, ",");
			(void)buf_str(conn, fields[i].hf_value);
		}
	}
	return 0;
}

/* Adds a client's X-Forwarded-For VALUE to the chain XFF, only from a proxy
 * the route trusts (TRUST) and when not empty (a failed append marks
 * XFF). */
static void headers_chain_forwarded(struct buf *xff, const char *value, int trust)
{
	if (trust && *value != '\0') {
		if (xff->b_len > 0)
			(void)buf_str(xff, ", ");
		(void)buf_str(xff, value);
	}
}

/* Whether a client header NAME stays behind: dropped, hop-by-hop (CONN:
 * the Connection headers' names, may be NULL) or, unless TRUST, one of
 * the forwarding headers. */
static int headers_left_out(const char *name, const char *conn, int trust)
{
	return headers_in(name, headers_dropped, IDEMD_ARRAY_LEN(headers_dropped)) ||
	       headers_hop_by_hop(name, conn) ||
	       (!trust &&
		headers_in(name, headers_forwarding, IDEMD_ARRAY_LEN(headers_forwarding)));
}

/* Appends idemd's own lines to LIST after the client's: Idempotency-Key,
 * Idempotency-Subject, X-Forwarded-For (XFF, the whole chain),
 * X-Request-Id, traceparent, then the removal of Expect and, without
 * HAS_TYPE, of Content-Type; 0, or -1 out of memory. */
static int headers_append_own(struct curl_slist **list, const struct headers_forward_args *a,
			      const char *xff, int has_type)
{
	if (headers_append(list, "Idempotency-Key", a->fa_token_id) < 0 ||
	    (a->fa_subject != NULL &&
	     headers_append(list, "Idempotency-Subject", a->fa_subject) < 0) ||
	    headers_append(list, "X-Forwarded-For", xff) < 0 ||
	    headers_append(list, "X-Request-Id", a->fa_request_id) < 0 ||
	    (a->fa_traceparent != NULL &&
	     headers_append(list, "traceparent", a->fa_traceparent) < 0) ||
	    /* "Name:" alone removes what libcurl would add by itself */
	    headers_raw(list, "Expect:") < 0 ||
	    (!has_type && headers_raw(list, "Content-Type:") < 0))
		return -1;
	return 0;
}

int headers_forward(const struct headers_field *fields, size_t n,
		    const struct headers_forward_args *a, struct curl_slist **out)
{
	struct buf conn = { 0 }, xff = { 0 };
	struct curl_slist *list = NULL;
	int rc = HEADERS_OK, has_type = 0;

	*out = NULL;
	if (!headers_forward_args_ok(a))
		return HEADERS_INVALID;
	if (headers_connection_list(fields, n, &conn) != 0) {
		buf_free(&conn);
		return HEADERS_INVALID;
	}
	for (size_t i = 0; i < n && rc == HEADERS_OK && !conn.b_failed; i++) {
		const char *name = fields[i].hf_name, *value = fields[i].hf_value;
		if (strcasecmp(name, "x-forwarded-for") == 0) {
			headers_chain_forwarded(&xff, value, a->fa_trust_forwarded);
			continue;
		}
		if (headers_left_out(name, conn.b_data, a->fa_trust_forwarded))
			continue;
		has_type |= strcasecmp(name, "content-type") == 0;
		if (headers_append(&list, name, value) < 0)
			rc = HEADERS_NOMEM;
	}
	if (xff.b_len > 0)
		(void)buf_str(&xff, ", ");
	(void)buf_str(&xff, a->fa_client_ip);
	if (rc == HEADERS_OK && (conn.b_failed || xff.b_failed ||
				 headers_append_own(&list, a, xff.b_data, has_type) < 0))
		rc = HEADERS_NOMEM;
	buf_free(&conn);
	buf_free(&xff);
	if (rc != HEADERS_OK) {
		curl_slist_free_all(list);
		return rc;
	}
	*out = list;
	return HEADERS_OK;
}
