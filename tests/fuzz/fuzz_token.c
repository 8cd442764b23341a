/*
 * libFuzzer driver for the token codec (src/base/token.c): token_open
 * (with no key: a parse; under one key: a verification) and
 * token_from_header on arbitrary bytes, plus properties:
 *  - parse and verify agree on what is malformed;
 *  - a token that parses re-encodes (under the fixed key) to exactly the
 *    input if and only if its tag verifies under that key, never under
 *    another key;
 *  - encode -> parse gives the same fields back, for any field values the
 *    input describes, and changing any one character of the result makes
 *    verification fail.
 * Seeds (corpus/token/) are signed with the fixed key of fuzz.h.
 */
#include "fuzz.h"

#include "token.h"

static uint8_t fuzz_good_key[TOKEN_KEY_BYTES], fuzz_bad_key[TOKEN_KEY_BYTES];

static const uint8_t *
fuzz_no_key(uint32_t key_id, void *arg)
{
	(void)key_id;
	(void)arg;
	return NULL;
}

static const uint8_t *
fuzz_the_key(uint32_t key_id, void *arg)
{
	(void)key_id;
	return arg;
}

/* token_open that looks up no key: TOKEN_OK when S parses (T filled). */
static int
fuzz_parse(const char *s, size_t len, struct token *t)
{
	return token_open(s, len, t, fuzz_no_key, NULL) == TOKEN_MALFORMED ?
	    TOKEN_MALFORMED : TOKEN_OK;
}

/* token_open under KEY, whatever the key id S names. */
static int
fuzz_verify(const char *s, size_t len, const uint8_t *key)
{
	struct token t;

	return token_open(s, len, &t, fuzz_the_key, (void *)(uintptr_t)key);
}

static const char fuzz_b64url[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static int
token_equal(const struct token *a, const struct token *b)
{
	return a->key_id == b->key_id && a->tenant_id == b->tenant_id &&
	    a->operation_id == b->operation_id &&
	    memcmp(a->id, b->id, TOKEN_ID_BYTES) == 0 &&
	    a->issued_at == b->issued_at && a->expires_at == b->expires_at &&
	    a->has_version == b->has_version &&
	    (!a->has_version || a->version == b->version) &&
	    a->subject_len == b->subject_len &&
	    memcmp(a->subject, b->subject, a->subject_len + 1) == 0;
}

/* Checks what any successfully parsed token must look like. */
static void
check_parsed(const struct token *t)
{
	char hex[2 * TOKEN_ID_BYTES + 1];

	FUZZ_CHECK(t->subject_len >= 1 && t->subject_len <= TOKEN_SUBJECT_MAX);
	FUZZ_CHECK(strlen(t->subject) == t->subject_len);
	FUZZ_CHECK(t->has_version == 0 || t->has_version == 1);
	token_id_hex(t->id, hex);
	FUZZ_CHECK(strlen(hex) == 2 * TOKEN_ID_BYTES);
	FUZZ_CHECK(strspn(hex, "0123456789abcdef") == 2 * TOKEN_ID_BYTES);
}

/* The input as a token string. */
static void
fuzz_string(const uint8_t *data, size_t size)
{
	const char *s = (const char *)data;
	char enc[TOKEN_MAX_CHARS + 1], out[TOKEN_MAX_CHARS + 1], *hv, *quoted;
	struct token t, t2;
	int rp, rv, rb;

	rp = fuzz_parse(s, size, &t);
	rv = fuzz_verify(s, size, fuzz_good_key);
	rb = fuzz_verify(s, size, fuzz_bad_key);
	FUZZ_CHECK(rp == TOKEN_OK || rp == TOKEN_MALFORMED);
	FUZZ_CHECK(rv == TOKEN_OK || rv == TOKEN_BAD_SIGNATURE || rv == TOKEN_MALFORMED);
	FUZZ_CHECK((rp == TOKEN_MALFORMED) == (rv == TOKEN_MALFORMED));
	FUZZ_CHECK((rp == TOKEN_MALFORMED) == (rb == TOKEN_MALFORMED));
	if (rp == TOKEN_OK) {
		int same;

		FUZZ_CHECK(size <= TOKEN_MAX_CHARS);
		check_parsed(&t);
		FUZZ_CHECK(rb == TOKEN_BAD_SIGNATURE);
		FUZZ_CHECK(token_encode(&t, fuzz_good_key, enc, sizeof(enc)) == 0);
		same = strlen(enc) == size && memcmp(enc, s, size) == 0;
		FUZZ_CHECK(same == (rv == TOKEN_OK));
		FUZZ_CHECK(fuzz_parse(enc, strlen(enc), &t2) == TOKEN_OK);
		FUZZ_CHECK(token_equal(&t, &t2));
		FUZZ_CHECK(fuzz_verify(enc, strlen(enc), fuzz_good_key) == TOKEN_OK);
	}

	/* The same bytes as an Idempotency-Key header value. */
	hv = fuzz_strndup(data, size);
	if (token_from_header(hv, out, sizeof(out)) == 0) {
		FUZZ_CHECK(strlen(out) >= 1 && strlen(out) <= TOKEN_MAX_CHARS);
		if (fuzz_parse(out, strlen(out), &t2) == TOKEN_OK)
			check_parsed(&t2);
	}
	if (rp == TOKEN_OK) {
		/* A valid token is accepted bare and as an sf-string. */
		FUZZ_CHECK(token_from_header(hv, out, sizeof(out)) == 0);
		FUZZ_CHECK(strcmp(out, hv) == 0);
		quoted = malloc(size + 5);
		FUZZ_CHECK(quoted != NULL);
		snprintf(quoted, size + 5, " \"%s\"\t", hv);
		FUZZ_CHECK(token_from_header(quoted, out, sizeof(out)) == 0);
		FUZZ_CHECK(strcmp(out, hv) == 0);
		free(quoted);
	}
	free(hv);
}

/* Takes the next byte of the input, 0 once it is used up. */
static uint8_t
next_byte(const uint8_t *data, size_t size, size_t *pos)
{
	return *pos < size ? data[(*pos)++] : 0;
}

static uint32_t
next32(const uint8_t *data, size_t size, size_t *pos)
{
	uint32_t v = 0;

	for (int i = 0; i < 4; i++)
		v |= (uint32_t)next_byte(data, size, pos) << (8 * i);
	return v;
}

/* The input as the fields of a token: encode, parse back, tamper. */
static void
fuzz_fields(const uint8_t *data, size_t size)
{
	struct token t, t2;
	char enc[TOKEN_MAX_CHARS + 1], *exact;
	size_t pos = 0, n;
	uint8_t flags;
	int nul;

	memset(&t, 0, sizeof(t));
	flags = next_byte(data, size, &pos);
	t.has_version = flags & 1;
	t.subject_len = next_byte(data, size, &pos);
	if (!(flags & 2))	/* mostly valid lengths; sometimes anything */
		t.subject_len = 1 + t.subject_len % TOKEN_SUBJECT_MAX;
	t.key_id = next32(data, size, &pos);
	t.tenant_id = next32(data, size, &pos);
	t.operation_id = next32(data, size, &pos);
	for (int i = 0; i < TOKEN_ID_BYTES; i++)
		t.id[i] = next_byte(data, size, &pos);
	t.issued_at = next32(data, size, &pos);
	t.expires_at = next32(data, size, &pos);
	t.version = (uint64_t)next32(data, size, &pos) |
	    (uint64_t)next32(data, size, &pos) << 32;
	for (size_t i = 0; i < TOKEN_SUBJECT_MAX; i++)
		t.subject[i] = (char)next_byte(data, size, &pos);
	t.subject[TOKEN_SUBJECT_MAX] = '\0';

	nul = t.subject_len >= 1 && t.subject_len <= TOKEN_SUBJECT_MAX &&
	    memchr(t.subject, '\0', t.subject_len) != NULL;
	if (t.subject_len < 1 || t.subject_len > TOKEN_SUBJECT_MAX || nul) {
		FUZZ_CHECK(token_encode(&t, fuzz_good_key, enc, sizeof(enc)) == -1);
		return;
	}
	t.subject[t.subject_len] = '\0';
	FUZZ_CHECK(token_encode(&t, fuzz_good_key, enc, sizeof(enc)) == 0);
	n = strlen(enc);
	FUZZ_CHECK(n >= 1 && n <= TOKEN_MAX_CHARS);
	FUZZ_CHECK(strspn(enc, fuzz_b64url) == n);

	/* Exactly n + 1 bytes is enough, n is not. */
	exact = malloc(n + 1);
	FUZZ_CHECK(exact != NULL);
	FUZZ_CHECK(token_encode(&t, fuzz_good_key, exact, n + 1) == 0);
	FUZZ_CHECK(strcmp(exact, enc) == 0);
	FUZZ_CHECK(token_encode(&t, fuzz_good_key, exact, n) == -1);
	free(exact);

	FUZZ_CHECK(fuzz_parse(enc, n, &t2) == TOKEN_OK);
	FUZZ_CHECK(token_equal(&t, &t2));
	FUZZ_CHECK(fuzz_verify(enc, n, fuzz_good_key) == TOKEN_OK);
	FUZZ_CHECK(fuzz_verify(enc, n, fuzz_bad_key) == TOKEN_BAD_SIGNATURE);

	/* Any one altered character invalidates the token. */
	{
		size_t at = next_byte(data, size, &pos) % n;
		const char *c = strchr(fuzz_b64url, enc[at]);
		size_t step = 1 + next_byte(data, size, &pos) % 63;

		FUZZ_CHECK(c != NULL);
		enc[at] = fuzz_b64url[((size_t)(c - fuzz_b64url) + step) % 64];
		FUZZ_CHECK(fuzz_verify(enc, n, fuzz_good_key) != TOKEN_OK);
	}
	/* Truncated, it does not verify. */
	FUZZ_CHECK(fuzz_parse(enc, n - 1, &t2) == TOKEN_MALFORMED ||
	    fuzz_verify(enc, n - 1, fuzz_good_key) != TOKEN_OK);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_init();
	fuzz_key(fuzz_good_key);
	memcpy(fuzz_bad_key, fuzz_good_key, sizeof(fuzz_bad_key));
	fuzz_bad_key[7] ^= 0x80;
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_string(data, size);
	fuzz_fields(data, size);
	return 0;
}
