/* Request JSON helpers. */
#include "reqjson.h"

#include <errno.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "jsonmem.h"
#include "utf8.h"

int reqjson_why(char why[REQJSON_WHY], const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	int full = vsnprintf(why, REQJSON_WHY, fmt, ap);
	va_end(ap);
	if (full >= REQJSON_WHY)
		utf8_cut_tail(why);
	return -1;
}

int reqjson_only_why(json_t *obj, const char *const *allowed, char why[REQJSON_WHY])
{
	const char *key;
	json_t *value;

	json_object_foreach(obj, key, value)
	{
		size_t i;
		for (i = 0; allowed[i] != NULL; i++)
			if (strcmp(key, allowed[i]) == 0)
				break;
		if (allowed[i] == NULL) {
			json_t *name = json_string(key);
			reqjson_why(why, "unknown field %s", name ? key : "(not UTF-8)");
			json_decref(name);
			return -1;
		}
	}
	return 0;
}

int reqjson_only(struct request *req, json_t *obj, const char *const *allowed)
{
	char why[REQJSON_WHY];

	return reqjson_refused(req, reqjson_only_why(obj, allowed, why), why);
}

/* OBJ's member NAME into *V (NULL: absent). 0, or -1 (WHY) when it is
 * REQUIRED and absent. */
static int reqjson_member(json_t *obj, const char *name, int required, json_t **v,
			  char why[REQJSON_WHY])
{
	*v = json_object_get(obj, name);
	if (*v != NULL || !required)
		return 0;
	return reqjson_why(why, "field %s is required", name);
}

int reqjson_int_why(json_t *obj, const char *name, int required, int64_t min, int64_t max,
		    int64_t *out, int *present, char why[REQJSON_WHY])
{
	json_t *v;

	*present = 0;
	if (reqjson_member(obj, name, required, &v, why) < 0)
		return -1;
	if (v == NULL)
		return 0;
	*present = 1;
	/* JSON Schema (OpenAPI 3.1) counts 30.0 as an integer: so does idemd */
	double r = json_is_real(v) ? json_real_value(v) : 0;
	int integral = json_is_real(v) && r >= (double)min && r <= (double)max &&
		       r >= -9223372036854775808.0 && r < 9223372036854775808.0 &&
		       r == (double)(int64_t)r;
	if (!integral &&
	    (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max))
		return reqjson_why(why, "field %s must be an integer from %" PRId64 " to %" PRId64,
				   name, min, max);
	*out = integral ? (int64_t)r : json_integer_value(v);
	return 0;
}

int reqjson_int(struct request *req, json_t *obj, const char *name, int required, int64_t min,
		int64_t max, int64_t *out, int *present)
{
	char why[REQJSON_WHY];

	return reqjson_refused(
		req, reqjson_int_why(obj, name, required, min, max, out, present, why), why);
}

int reqjson_string_why(json_t *obj, const char *name, int required, size_t minlen, size_t maxlen,
		       const char **out, char why[REQJSON_WHY])
{
	json_t *v;

	*out = NULL;
	if (reqjson_member(obj, name, required, &v, why) < 0)
		return -1;
	if (v == NULL)
		return 0;
	if (!json_is_string(v) || json_string_length(v) < minlen ||
	    json_string_length(v) > maxlen || strlen(json_string_value(v)) != json_string_length(v))
		return reqjson_why(why, "field %s must be a string of %zu to %zu bytes without NUL",
				   name, minlen, maxlen);
	*out = json_string_value(v);
	return 0;
}

int reqjson_string(struct request *req, json_t *obj, const char *name, int required, size_t minlen,
		   size_t maxlen, const char **out)
{
	char why[REQJSON_WHY];

	return reqjson_refused(
		req, reqjson_string_why(obj, name, required, minlen, maxlen, out, why), why);
}

static const char *reqjson_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

/* A string of printable ASCII without escapes at P (on its opening quote):
 * its characters in *STR, *LEN; the position after the closing quote, or
 * NULL. */
static const char *reqjson_flat_string(const char *p, const char *end, const char **str,
				       size_t *len)
{
	const char *q = ++p;

	while (q < end && *q != '"') {
		if (*q < 0x20 || *q > 0x7e || *q == '\\')
			return NULL;
		q++;
	}
	if (q == end)
		return NULL;
	*str = p;
	*len = (size_t)(q - p);
	return q + 1;
}

/* A natural number at P (before END) of at most 15 digits without a
 * leading zero into *V: where it ends, or NULL when it is anything else. */
static const char *reqjson_flat_number(const char *p, const char *end, int64_t *v)
{
	const char *d = p;

	*v = 0;
	while (p < end && *p >= '0' && *p <= '9' && p - d < 16)
		*v = *v * 10 + (*p++ - '0');
	if (p == d || (*d == '0' && p - d > 1) || p - d > 15)
		return NULL;
	/* nothing like ".5" or "e3" after */
	if (p < end && (*p == '.' || *p == 'e' || *p == 'E'))
		return NULL;
	return p;
}

/* A member's value at P (before END, not at END) into M: a string or a
 * number (reqjson_flat_number). Where it ends, or NULL. */
static const char *reqjson_flat_value(const char *p, const char *end, struct reqjson_member *m)
{
	m->rm_is_string = *p == '"';
	if (m->rm_is_string)
		return reqjson_flat_string(p, end, &m->rm_str, &m->rm_len);
	return reqjson_flat_number(p, end, &m->rm_num);
}

/* One member at P ("name": value) into M: where it ends, or NULL. */
static const char *reqjson_flat_member(const char *p, const char *end, struct reqjson_member *m)
{
	*m = (struct reqjson_member){ 0 };
	if (p == end || *p != '"' ||
	    (p = reqjson_flat_string(p, end, &m->rm_name, &m->rm_name_len)) == NULL)
		return NULL;
	p = reqjson_ws(p, end);
	if (p == end || *p++ != ':')
		return NULL;
	p = reqjson_ws(p, end);
	if (p == end)
		return NULL;
	return reqjson_flat_value(p, end, m);
}

int reqjson_members(const char *s, size_t len, struct reqjson_member *out, size_t max, size_t *n)
{
	const char *p = s, *end = s + len;
	struct reqjson_member m;

	*n = 0;

	p = reqjson_ws(p, end);
	if (p == end || *p++ != '{')
		return 0;
	p = reqjson_ws(p, end);
	if (p < end && *p == '}')
		return reqjson_ws(p + 1, end) == end;
	for (;;) {
		if ((p = reqjson_flat_member(p, end, &m)) == NULL)
			return 0;
		if (*n == max)
			return 0;
		out[(*n)++] = m;
		p = reqjson_ws(p, end);
		if (p == end)
			return 0;
		if (*p == '}')
			return reqjson_ws(p + 1, end) == end;
		if (*p++ != ',')
			return 0;
		p = reqjson_ws(p, end);
	}
}

/* At most this many members are read by reqjson_flat(). */
#define REQJSON_FLAT_MAX 8

int reqjson_flat(const char *s, size_t len, struct reqjson_field *fields, size_t n)
{
	struct reqjson_member m[REQJSON_FLAT_MAX];
	size_t nm;

	for (size_t i = 0; i < n; i++)
		fields[i].rf_present = 0;
	/* each member one of the fields, of its type, once: never more
	 * members than fields */
	if (n > REQJSON_FLAT_MAX || !reqjson_members(s, len, m, n, &nm))
		return 0;
	for (size_t k = 0; k < nm; k++) {
		struct reqjson_field *f = NULL;
		for (size_t i = 0; i < n && f == NULL; i++)
			if (strlen(fields[i].rf_name) == m[k].rm_name_len &&
			    memcmp(fields[i].rf_name, m[k].rm_name, m[k].rm_name_len) == 0)
				f = &fields[i];
		if (f == NULL || f->rf_present ||
		    m[k].rm_is_string != (f->rf_type == REQJSON_STRING))
			return 0;
		f->rf_present = 1;
		f->rf_str = m[k].rm_str;
		f->rf_len = m[k].rm_len;
		f->rf_num = m[k].rm_num;
	}
	return 1;
}

size_t reqjson_escape(char *out, const char *s, size_t len)
{
	static const char hex[] = "0123456789ABCDEF";
	char *p = out;

	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c != '"' && c != '\\') {
			*p++ = (char)c;
			continue;
		}
		*p++ = '\\';
		switch (c) {
		case '"':
			*p++ = '"';
			break;
		case '\\':
			*p++ = '\\';
			break;
		case '\b':
			*p++ = 'b';
			break;
		case '\f':
			*p++ = 'f';
			break;
		case '\n':
			*p++ = 'n';
			break;
		case '\r':
			*p++ = 'r';
			break;
		case '\t':
			*p++ = 't';
			break;
		default:
			memcpy(p, "u00", 3);
			p[3] = hex[c >> 4];
			p[4] = hex[c & 15];
			p += 5;
		}
	}
	return (size_t)(p - out);
}

json_t *reqjson_response(const struct stored_response *r)
{
	json_t *headers = json_loads(r->sr_headers ? r->sr_headers : "{}", 0, NULL);
	json_t *out = json_pack("{s:i,s:o}", "status", r->sr_status, "headers",
				headers ? headers : json_object());

	if (out == NULL)
		return NULL;
	if (r->sr_is_json) {
		json_t *body = json_loadb((const char *)r->sr_body, r->sr_body_len,
					  JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
		json_object_set_new(out, "body", body ? body : json_null());
	} else if (r->sr_body_len > 0) {
		size_t n =
			sodium_base64_encoded_len(r->sr_body_len, sodium_base64_VARIANT_ORIGINAL);
		char *b64 = malloc(n);
		if (b64 == NULL) {
			json_decref(out);
			return NULL;
		}
		sodium_bin2base64(b64, n, r->sr_body, r->sr_body_len,
				  sodium_base64_VARIANT_ORIGINAL);
		json_object_set_new(out, "body_base64", json_string(b64));
		free(b64);
	} else {
		json_object_set_new(out, "body", json_null());
	}
	return out;
}

/* The most headers reqjson_response_text copies without jansson. */
#define REQJSON_TEXT_HEADERS 32

/* Whether stored headers H are a flat object of strings, each name once
 * (jansson would keep the last of a repeated one): its members in M. */
static int reqjson_plain_headers(const char *h, struct reqjson_member *m, size_t *n)
{
	if (!reqjson_members(h, strlen(h), m, REQJSON_TEXT_HEADERS, n))
		return 0;
	for (size_t i = 0; i < *n; i++) {
		if (!m[i].rm_is_string)
			return 0;
		for (size_t k = 0; k < i; k++)
			if (m[k].rm_name_len == m[i].rm_name_len &&
			    memcmp(m[k].rm_name, m[i].rm_name, m[i].rm_name_len) == 0)
				return 0;
	}
	return 1;
}

/* Appends R's body member: the JSON as it is, its bytes in base64, or
 * null. */
static void reqjson_body_text(struct buf *b, const struct stored_response *r)
{
	if (r->sr_is_json) {
		(void)buf_str(b, ",\"body\":");
		(void)buf_add(b, r->sr_body, r->sr_body_len);
		return;
	}
	if (r->sr_body_len == 0) {
		(void)buf_str(b, ",\"body\":null");
		return;
	}
	size_t len = sodium_base64_encoded_len(r->sr_body_len, sodium_base64_VARIANT_ORIGINAL);
	char *b64 = malloc(len);
	if (b64 == NULL) {
		b->b_failed = 1;
		return;
	}
	sodium_bin2base64(b64, len, r->sr_body, r->sr_body_len, sodium_base64_VARIANT_ORIGINAL);
	(void)buf_str(b, ",\"body_base64\":\"");
	(void)buf_str(b, b64);
	(void)buf_str(b, "\"");
	free(b64);
}

int reqjson_response_text(struct buf *b, const struct stored_response *r, int own_body)
{
	const char *h = r->sr_headers ? r->sr_headers : "{}";
	struct reqjson_member m[REQJSON_TEXT_HEADERS];
	size_t n = 0;
	char num[32];

	if (!reqjson_plain_headers(h, m, &n) || (r->sr_is_json && !own_body)) {
		json_t *o = reqjson_response(r);
		char *text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
		json_decref(o);
		if (text == NULL)
			b->b_failed = 1;
		int rc = text ? buf_str(b, text) : -1;
		free(text);
		return rc;
	}
	snprintf(num, sizeof(num), "%d", r->sr_status);
	(void)buf_str(b, "{\"status\":");
	(void)buf_str(b, num);
	(void)buf_str(b, ",\"headers\":{");
	for (size_t i = 0; i < n; i++) {
		(void)buf_str(b, i > 0 ? ",\"" : "\"");
		(void)buf_add(b, m[i].rm_name, m[i].rm_name_len);
		(void)buf_str(b, "\":\"");
		(void)buf_add(b, m[i].rm_str, m[i].rm_len);
		(void)buf_str(b, "\"");
	}
	(void)buf_str(b, "}");
	reqjson_body_text(b, r);
	(void)buf_str(b, "}");
	return b->b_failed ? -1 : 0;
}

int reqjson_etag(const char *value, int64_t *out)
{
	char *end;
	int weak = 0;

	while (*value == ' ')
		value++;
	/* W/"N" is well formed, but RFC 9110's strong comparison, which If-Match
	 * uses, never matches a weak tag: it stands for no version at all */
	if (value[0] == 'W' && value[1] == '/') {
		weak = 1;
		value += 2;
	}
	if (value[0] != '"' || value[1] < '0' || value[1] > '9')
		return -1;
	if (value[1] == '0' && value[2] != '"')
		return -1; /* strong comparison is by characters: "07" is not "7" */
	errno = 0;
	long long v = strtoll(value + 1, &end, 10);
	if (errno != 0 || *end != '"' || v < 0)
		return -1;
	end++;
	while (*end == ' ')
		end++;
	if (*end != '\0')
		return -1;
	*out = weak ? REQJSON_ETAG_WEAK : v;
	return 0;
}

void reqjson_etag_format(int64_t version, char *out, size_t outlen)
{
	snprintf(out, outlen, "\"%" PRId64 "\"", version);
}

int reqjson_valid_name(const char *s)
{
	size_t n = strlen(s);

	return n >= 1 && n <= STORE_NAME_MAX &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

const char *reqjson_name_param(struct request *req, unsigned i)
{
	const char *name = req->req_params[i];

	if (name == NULL || strlen(name) != req->req_param_lens[i] || !reqjson_valid_name(name)) {
		request_fail(req, 400, "invalid_request",
			     "operation names match [a-z0-9._-]{1,64}");
		return NULL;
	}
	return name;
}

json_t *reqjson_load_body(struct request *req, json_error_t *err, int *over)
{
	json_t *v =
		jsonmem_load(req->req_body, req->req_body_len, JSON_REJECT_DUPLICATES, err, over);
	if (*over)
		request_fail(req, 413, "payload_too_large",
			     "the body's JSON takes more than %zu bytes to hold",
			     jsonmem_budget(req->req_body_len));
	return v;
}

/* 1 when V, or a string anywhere inside it, holds a NUL. */
static int reqjson_has_nul(json_t *v)
{
	const char *key;
	json_t *m;
	size_t i;

	if (json_is_string(v))
		return memchr(json_string_value(v), '\0', json_string_length(v)) != NULL;
	if (json_is_array(v)) {
		json_array_foreach(v, i, m) if (reqjson_has_nul(m)) return 1;
	}
	if (json_is_object(v)) {
		json_object_foreach(v, key, m) if (reqjson_has_nul(m)) return 1;
	}
	return 0;
}

/* 1 when a string of OBJ holds a NUL outside the members that are any
 * JSON (request, body), in OBJ or in the objects of its "items". */
static int reqjson_nul_outside(json_t *obj, int depth)
{
	const char *key;
	json_t *m;
	size_t i;

	json_object_foreach(obj, key, m)
	{
		if (strcmp(key, "request") == 0 || strcmp(key, "body") == 0)
			continue;
		if (depth == 0 && strcmp(key, "items") == 0 && json_is_array(m)) {
			json_t *it;
			json_array_foreach(m, i, it) if (json_is_object(it)
								 ? reqjson_nul_outside(it, 1)
								 : reqjson_has_nul(it)) return 1;
			continue;
		}
		if (reqjson_has_nul(m))
			return 1;
	}
	return 0;
}

json_t *http_body_object(struct request *req, const char *const *allowed)
{
	json_error_t err;
	int over;

	if (req->req_body_len == 0)
		return json_object();
	/* "\u0000" is JSON: taken inside request and body (any JSON, and
	 * never read as C text), refused elsewhere below */
	json_t *v = jsonmem_load(req->req_body, req->req_body_len,
				 JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &err, &over);
	if (over) {
		request_fail(req, 413, "payload_too_large",
			     "the body's JSON takes more than %zu bytes to hold",
			     jsonmem_budget(req->req_body_len));
		return NULL;
	}
	if (v == NULL) {
		request_fail(req, 400, "invalid_request", "malformed JSON at position %d",
			     err.position);
		return NULL;
	}
	if (!json_is_object(v)) {
		json_decref(v);
		request_fail(req, 400, "invalid_request", "the body must be a JSON object");
		return NULL;
	}
	if (reqjson_nul_outside(v, 0)) {
		json_decref(v);
		request_fail(req, 400, "invalid_request",
			     "\\u0000 is taken only inside request and body");
		return NULL;
	}
	if (allowed != NULL && reqjson_only(req, v, allowed) < 0) {
		json_decref(v);
		return NULL;
	}
	return v;
}
