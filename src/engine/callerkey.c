/* Caller keys: their form, the record id each names, and the key a gateway
 * route derives from a request (a header, a JSON member). */
#include "callerkey.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int callerkey_valid(const char *key, size_t len)
{
	if (len == 0 || len > CALLERKEY_MAX)
		return 0;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)key[i] < 0x21 || (unsigned char)key[i] > 0x7e)
			return 0;
	return 1;
}

void callerkey_address(uint32_t tenant, const struct operation *op, const char *key, size_t len,
		       const uint8_t *scope, int64_t now_ms, struct token *t)
{
	crypto_generichash_state st;
	uint32_t id = op->op_id;
	unsigned char be[4] = { (unsigned char)(id >> 24), (unsigned char)(id >> 16),
				(unsigned char)(id >> 8), (unsigned char)id };

	memset(t, 0, sizeof(*t));
	t->tenant_id = tenant;
	t->operation_id = op->op_id;
	crypto_generichash_init(&st, NULL, 0, TOKEN_ID_BYTES);
	crypto_generichash_update(&st, (const unsigned char *)"idemd caller key\n", 17);
	crypto_generichash_update(&st, be, sizeof(be));
	if (scope != NULL)
		crypto_generichash_update(&st, scope, 32);
	crypto_generichash_update(&st, (const unsigned char *)key, len);
	crypto_generichash_final(&st, t->id, TOKEN_ID_BYTES);
	t->expires_at = token_expiry(now_ms, op->op_token_ttl_seconds);
}

/* A bare key VALUE (not quoted) into OUT (OUTLEN bytes): its length, -1
 * when it holds a comma, -2 when it is too long. */
static int callerkey_bare(const char *value, char *out, size_t outlen)
{
	size_t n;

	/* a comma is what two header lines joined look like: which key? */
	if (strchr(value, ',') != NULL)
		return -1;
	n = strlen(value);
	if (n >= outlen)
		return -2;
	memcpy(out, value, n + 1);
	return (int)n;
}

/* Whether AFTER, what follows an sf-string's closing quote, may follow it:
 * nothing, or RFC 8941 parameters (;name or ;name=value, allowed and
 * ignored) in printable ASCII; a second member (",") least of all. */
static int callerkey_params_ok(const char *after)
{
	if (after[0] != '\0' && (after[0] != ';' || strchr(after, ',') != NULL))
		return 0;
	for (const char *q = after; *q != '\0'; q++)
		if ((unsigned char)*q < 0x20 || (unsigned char)*q > 0x7e)
			return 0;
	return 1;
}

int callerkey_from_header(const char *value, char *out, size_t outlen)
{
	size_t n = 0;

	if (value[0] != '"')
		return callerkey_bare(value, out, outlen);
	/* RFC 8941 sf-string: printable ASCII, \" and \\ escaped, nothing after */
	const char *p = value + 1;
	for (; *p != '"'; p++) {
		if (*p == '\\') {
			p++;
			if (*p != '"' && *p != '\\')
				return -1;
		} else if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e) {
			return -1; /* the end of the text included: unterminated */
		}
		if (n + 1 >= outlen)
			return -2;
		out[n++] = *p;
	}
	if (!callerkey_params_ok(p + 1))
		return -1;
	out[n] = '\0';
	return (int)n;
}

/* The member of OBJ named by the pointer token [TOK, TOK+LEN), with ~1 read
 * as '/' and ~0 as '~' (RFC 6901), or the element of an array it numbers. */
static json_t *callerkey_step(json_t *v, const char *tok, size_t len)
{
	char name[256];
	size_t n = 0;

	for (size_t i = 0; i < len; i++) {
		char c = tok[i];
		if (c == '~') {
			if (i + 1 == len || (tok[i + 1] != '0' && tok[i + 1] != '1'))
				return NULL;
			c = tok[++i] == '0' ? '~' : '/';
		}
		if (n + 1 >= sizeof(name))
			return NULL;
		name[n++] = c;
	}
	name[n] = '\0';
	if (json_is_object(v))
		return json_object_get(v, name);
	if (!json_is_array(v) || n == 0 || strspn(name, "0123456789") != n ||
	    (n > 1 && name[0] == '0') || n > 6)
		return NULL;
	return json_array_get(v, (size_t)strtoul(name, NULL, 10));
}

int callerkey_from_json(json_t *doc, const char *pointer, char *out, size_t outlen)
{
	json_t *v = doc;
	const char *p = pointer;

	while (v != NULL && *p == '/') {
		size_t len = strcspn(p + 1, "/");
		v = callerkey_step(v, p + 1, len);
		p += 1 + len;
	}
	if (v == NULL || *p != '\0')
		return -1;
	int n;
	if (json_is_string(v)) {
		if (json_string_length(v) >= outlen)
			return -2;
		memcpy(out, json_string_value(v), json_string_length(v) + 1);
		n = (int)json_string_length(v);
	} else if (json_is_integer(v)) {
		n = snprintf(out, outlen, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		if (n < 0 || (size_t)n >= outlen)
			return -2;
	} else {
		return -1;
	}
	return n;
}
