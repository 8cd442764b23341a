/*
 * libFuzzer driver for the request-body decoders: the input is parsed as
 * http_body_object() does (jansson, JSON_REJECT_DUPLICATES) and also with
 * JSON_DECODE_ANY (a claim's "request" may be any JSON value), then run
 * through fingerprint_canonical_json / fingerprint_of_json.
 * Properties: canonical(parse(canonical(x))) == canonical(x), the parsed
 * values are json_equal, and both have the same fingerprint.
 * reqjson_flat (the issue handler's fast way) must take only objects that
 * jansson parses to the same members and values.
 * The input's NUL-separated pieces also feed the small field parsers:
 * versionkey_expand (checked against a reference expansion),
 * versionkey_valid, reqjson_etag and reqjson_valid_name; so do the
 * "version_key", "subject", "operation" and "fingerprint" members of a
 * parsed object.
 */
#include "fuzz.h"

#include <inttypes.h>

#include "fingerprint.h"
#include "reqjson.h"
#include "store.h"
#include "versionkey.h"

/* Reference: "{subject}" replaced left to right, NULL if over max bytes. */
static char *
expand_ref(const char *tmpl, const char *subject, size_t max)
{
	size_t slen = strlen(subject), used = 0;
	char *out = malloc(max + 1);

	FUZZ_CHECK(out != NULL);
	while (*tmpl != '\0') {
		const char *piece = tmpl;
		size_t n = 1;

		if (strncmp(tmpl, "{subject}", 9) == 0) {
			piece = subject;
			n = slen;
			tmpl += 9;
		} else {
			tmpl++;
		}
		if (used + n > max) {
			free(out);
			return NULL;
		}
		memcpy(out + used, piece, n);
		used += n;
	}
	out[used] = '\0';
	return out;
}

static int
valid_ref(const char *key)
{
	size_t n = strlen(key);

	for (size_t i = 0; i < n; i++)
		if ((unsigned char)key[i] <= 0x20 || (unsigned char)key[i] >= 0x7f)
			return 0;
	return n >= 1 && n <= VERSIONKEY_MAX;
}

/*
 * versionkey_expand into a heap buffer of exactly outlen bytes. For
 * outlen 0 the pointer is one past a 1-byte block, so that ASan reports
 * any write (a malloc(0) block has one addressable byte under ASan).
 */
static void
check_expand(const char *tmpl, const char *subject, size_t outlen)
{
	char *block = malloc(outlen > 0 ? outlen : 1), *ref;
	char *out = outlen > 0 ? block : block + 1;
	int rc;

	FUZZ_CHECK(block != NULL);
	rc = versionkey_expand(tmpl, subject, out, outlen);
	ref = outlen > 0 ? expand_ref(tmpl, subject, outlen - 1) : NULL;
	if (ref == NULL || !valid_ref(ref)) {
		FUZZ_CHECK(rc == -1);
	} else {
		FUZZ_CHECK(rc == 0);
		FUZZ_CHECK(strcmp(out, ref) == 0);
		FUZZ_CHECK(versionkey_valid(out));
	}
	free(ref);
	free(block);
}

static void
check_pieces(const char *tmpl, const char *subject, const char *etag,
    const char *name, size_t small)
{
	int64_t v, v2;
	char buf[32];
	size_t n = strlen(name);

	FUZZ_CHECK(versionkey_valid(tmpl) == valid_ref(tmpl));
	check_expand(tmpl, subject, VERSIONKEY_MAX + 1); /* as the handlers call it */
	check_expand(tmpl, subject, small);	/* small exact-size buffers, 0 too */

	if (reqjson_etag(etag, &v) == 0 && v == REQJSON_ETAG_WEAK) {
		/* a weak W/"N": well formed, never matches a version */
		FUZZ_CHECK(strstr(etag, "W/\"") != NULL);
	} else if (reqjson_etag(etag, &v) == 0) {
		/* Only the canonical spelling of v, give or take spaces. */
		FUZZ_CHECK(v >= 0);
		reqjson_etag_format(v, buf, sizeof(buf));
		FUZZ_CHECK(strstr(etag, buf) != NULL);
		FUZZ_CHECK(reqjson_etag(buf, &v2) == 0 && v2 == v);
	}

	FUZZ_CHECK(reqjson_valid_name(name) == (n >= 1 && n <= STORE_NAME_MAX &&
	    strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789._-") == n));
}

/* Parses text (len bytes) with flags; checks the canonical-form properties. */
static json_t *
check_json(const char *text, size_t len, size_t flags)
{
	uint8_t fp[FINGERPRINT_BYTES], fp2[FINGERPRINT_BYTES], fps[FINGERPRINT_BYTES];
	json_error_t err;
	json_t *v, *v2;
	char *c1, *c2;

	v = json_loadb(text, len, flags, &err);
	if (v == NULL)
		return NULL;
	c1 = fingerprint_canonical_json(v);
	FUZZ_CHECK(c1 != NULL);
	FUZZ_CHECK(fingerprint_of_json(v, fp) == 0);
	v2 = json_loads(c1, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &err);
	if (v2 == NULL)
		fprintf(stderr, "canonical text does not parse: %s\n", err.text);
	FUZZ_CHECK(v2 != NULL);
	c2 = fingerprint_canonical_json(v2);
	FUZZ_CHECK(c2 != NULL);
	FUZZ_CHECK(strcmp(c1, c2) == 0);
	FUZZ_CHECK(json_equal(v, v2));
	FUZZ_CHECK(fingerprint_of_json(v2, fp2) == 0);
	FUZZ_CHECK(memcmp(fp, fp2, sizeof(fp)) == 0);
	/* Domain separation: the same text as a client string differs. */
	fingerprint_of_string(c1, strlen(c1), fps);
	FUZZ_CHECK(memcmp(fp, fps, sizeof(fp)) != 0);
	free(c1);
	free(c2);
	json_decref(v2);
	return v;
}

/*
 * Visits every value, branching on its type, size class and the field
 * names the API knows. jansson itself is not instrumented, so these
 * branches are what tells libFuzzer that an input has a new shape.
 */
static unsigned
walk(json_t *v, unsigned depth)
{
	static const char *const fields[] = { "operation", "subject",
	    "ttl_seconds", "count", "fingerprint", "request", "attempt",
	    "status", "headers", "body", "body_base64", "token_ttl_seconds",
	    "retention_seconds", "lease_seconds", "version_key",
	    "require_version", NULL };
	unsigned h = depth > 8 ? 8 : depth;
	const char *key, *str;
	json_t *e;
	size_t i, n;

	switch (json_typeof(v)) {
	case JSON_OBJECT:
		json_object_foreach(v, key, e) {
			for (i = 0; fields[i] != NULL; i++)
				if (strcmp(key, fields[i]) == 0)
					break;
			h += (unsigned)i + walk(e, depth + 1);
		}
		return h + (json_object_size(v) == 0 ? 1 : 2);
	case JSON_ARRAY:
		json_array_foreach(v, i, e)
			h += walk(e, depth + 1);
		return h + (json_array_size(v) == 0 ? 3 : 4);
	case JSON_STRING:
		str = json_string_value(v);
		n = json_string_length(v);
		for (i = 0; i < n; i++) {
			unsigned char c = (unsigned char)str[i];

			if (c < 0x20)
				h += 5;		/* escaped control character */
			else if (c == '"' || c == '\\')
				h += 6;
			else if (c >= 0xf0)
				h += 7;		/* 4-byte UTF-8 (surrogate pair) */
			else if (c >= 0xe0)
				h += 8;
			else if (c >= 0xc0)
				h += 9;
		}
		return h + (strlen(str) != n ? 10 : 11);	/* NUL inside? */
	case JSON_INTEGER:
		if (json_integer_value(v) < 0)
			return h + 12;
		return h + (json_integer_value(v) > INT32_MAX ? 13 : 14);
	case JSON_REAL: {
		double d = json_real_value(v);

		if (d < -1e18 || d > 1e18)
			return h + 15;
		return h + (d == (double)(int64_t)d ? 16 : 17);
	}
	case JSON_TRUE:
	case JSON_FALSE:
		return h + 18;
	case JSON_NULL:
		return h + 19;
	}
	return h;
}

/* Borrowed string member of obj, or "" when absent or not a string. */
static const char *
member(json_t *obj, const char *name)
{
	const char *s = json_string_value(json_object_get(obj, name));

	return s != NULL ? s : "";
}

FUZZ_INITIALIZE(fuzz_init())

/* Whatever reqjson_flat takes, jansson reads the same way. */
static void
check_flat(const char *s, size_t size)
{
	struct reqjson_field f[3] = {
		{ .rf_name = "operation", .rf_type = REQJSON_STRING },
		{ .rf_name = "subject", .rf_type = REQJSON_STRING },
		{ .rf_name = "count", .rf_type = REQJSON_UINT },
	};
	json_t *v;

	if (!reqjson_flat(s, size, f, 3))
		return;
	v = json_loadb(s, size, JSON_REJECT_DUPLICATES, NULL);
	FUZZ_CHECK(v != NULL && json_is_object(v));
	FUZZ_CHECK(json_object_size(v) == (size_t)(f[0].rf_present + f[1].rf_present +
	    f[2].rf_present));
	for (int i = 0; i < 3; i++) {
		json_t *m = json_object_get(v, f[i].rf_name);
		FUZZ_CHECK((m != NULL) == f[i].rf_present);
		if (m == NULL)
			continue;
		if (f[i].rf_type == REQJSON_STRING)
			FUZZ_CHECK(json_is_string(m) && json_string_length(m) == f[i].rf_len &&
			    memcmp(json_string_value(m), f[i].rf_str, f[i].rf_len) == 0);
		else
			FUZZ_CHECK(json_is_integer(m) && json_integer_value(m) == f[i].rf_num);
	}
	json_decref(v);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *piece[4];
	json_t *v;

	v = check_json((const char *)data, size, JSON_REJECT_DUPLICATES);
	if (v != NULL) {
		(void)walk(v, 0);
		FUZZ_CHECK(json_is_object(v) || json_is_array(v));
		if (json_is_object(v)) {
			json_t *req = json_object_get(v, "request");
			char *text;

			check_pieces(member(v, "version_key"), member(v, "subject"),
			    member(v, "fingerprint"), member(v, "operation"), size % 64);
			/* The nested "request" value on its own, as a claim hashes it. */
			if (req != NULL) {
				uint8_t fp[FINGERPRINT_BYTES];

				FUZZ_CHECK(fingerprint_of_json(req, fp) == 0);
				text = fingerprint_canonical_json(req);
				FUZZ_CHECK(text != NULL);
				json_decref(check_json(text, strlen(text),
				    JSON_DECODE_ANY | JSON_REJECT_DUPLICATES));
				free(text);
			}
		}
		json_decref(v);
	}
	json_decref(check_json((const char *)data, size,
	    JSON_DECODE_ANY | JSON_REJECT_DUPLICATES));
	check_flat((const char *)data, size);

	fuzz_split(data, size, piece, 4);
	check_pieces(piece[0], piece[1], piece[2], piece[3], size % 64);
	for (int i = 0; i < 4; i++)
		free(piece[i]);
	return 0;
}
