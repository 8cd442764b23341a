/* Unit tests for the token codec: round trips, tamper and malformed input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <sodium.h>

#include "token.h"

#define TAG_BYTES 16

static const uint8_t key[TOKEN_KEY_BYTES] = {
	1,  2,	3,  4,	5,  6,	7,  8,	9,  10, 11, 12, 13, 14, 15, 16,
	17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32,
};

static void make_token(struct token *t, int has_version, size_t subject_len);
static void encode_ok(const struct token *t, char out[TOKEN_MAX_CHARS + 1]);
static int parse_only(const char *s, size_t len, struct token *t);
static int verify_under(const char *s, size_t len, const uint8_t *k);
static int accepted(const char *s, size_t len);
static void assert_same_token(const struct token *a, const struct token *b);
static void decode_raw(const char *s, uint8_t *bin, size_t *n);
static void encode_raw(const uint8_t *bin, size_t n, char *out, size_t outlen);
static void round_trip(int has_version, size_t subject_len);

static void make_token(struct token *t, int has_version, size_t subject_len)
{
	memset(t, 0, sizeof(*t));
	t->key_id = 7;
	t->tenant_id = 0xdeadbeef;
	t->operation_id = 42;
	for (size_t i = 0; i < TOKEN_ID_BYTES; i++)
		t->id[i] = (uint8_t)(0xa0 + i);
	t->issued_at = 1700000000;
	t->expires_at = 1700003600;
	t->has_version = has_version;
	t->version = has_version ? UINT64_C(0x0102030405060708) : 0;
	t->subject_len = subject_len;
	for (size_t i = 0; i < subject_len; i++)
		t->subject[i] = (char)(1 + i * 7 % 255); /* any non-NUL byte */
	t->subject[subject_len] = '\0';
}

static void encode_ok(const struct token *t, char out[TOKEN_MAX_CHARS + 1])
{
	assert_int_equal(token_encode(t, key, out, TOKEN_MAX_CHARS + 1), 0);
	assert_true(strlen(out) <= TOKEN_MAX_CHARS);
}

static const uint8_t *key_of(uint32_t key_id, void *arg)
{
	(void)arg;
	return key_id == 7 ? key : NULL;
}

static const uint8_t *no_key(uint32_t key_id, void *arg)
{
	(void)key_id;
	(void)arg;
	return NULL;
}

static const uint8_t *the_key(uint32_t key_id, void *arg)
{
	(void)key_id;
	return arg;
}

/* token_open that looks up no key: TOKEN_OK when S parses (T filled),
 * else TOKEN_MALFORMED. */
static int parse_only(const char *s, size_t len, struct token *t)
{
	return token_open(s, len, t, no_key, NULL) == TOKEN_MALFORMED ? TOKEN_MALFORMED : TOKEN_OK;
}

/* token_open under K, whatever the key id S names. */
static int verify_under(const char *s, size_t len, const uint8_t *k)
{
	struct token t;

	return token_open(s, len, &t, the_key, (void *)(uintptr_t)k);
}

/* Would a server accept s under the right key? token_open through the
 * key table must say the same as a parse and a check under the key. */
static int accepted(const char *s, size_t len)
{
	struct token t, o;
	int ok = parse_only(s, len, &t) == TOKEN_OK && verify_under(s, len, key) == TOKEN_OK;

	if (ok && t.key_id == 7) {
		assert_int_equal(token_open(s, len, &o, key_of, NULL), TOKEN_OK);
		assert_same_token(&t, &o);
	} else {
		assert_int_not_equal(token_open(s, len, &o, key_of, NULL), TOKEN_OK);
	}
	return ok;
}

static void assert_same_token(const struct token *a, const struct token *b)
{
	assert_int_equal(a->key_id, b->key_id);
	assert_int_equal(a->tenant_id, b->tenant_id);
	assert_int_equal(a->operation_id, b->operation_id);
	assert_memory_equal(a->id, b->id, TOKEN_ID_BYTES);
	assert_int_equal(a->issued_at, b->issued_at);
	assert_int_equal(a->expires_at, b->expires_at);
	assert_int_equal(!!a->has_version, !!b->has_version);
	if (a->has_version)
		assert_true(a->version == b->version);
	assert_int_equal(a->subject_len, b->subject_len);
	assert_memory_equal(a->subject, b->subject, a->subject_len + 1);
}

/* Decodes s into its raw bytes: payload || tag. */
static void decode_raw(const char *s, uint8_t *bin, size_t *n)
{
	assert_int_equal(sodium_base642bin(bin, 256, s, strlen(s), NULL, n, NULL,
					   sodium_base64_VARIANT_URLSAFE_NO_PADDING),
			 0);
}

/* Re-signs an (edited) payload || tag and encodes it. */
static void encode_raw(const uint8_t *bin, size_t n, char *out, size_t outlen)
{
	uint8_t copy[256];

	memcpy(copy, bin, n);
	crypto_generichash(copy + n - TAG_BYTES, TAG_BYTES, copy, n - TAG_BYTES, key,
			   TOKEN_KEY_BYTES);
	sodium_bin2base64(out, outlen, copy, n, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
}

static void round_trip(int has_version, size_t subject_len)
{
	struct token in, out;
	char s[TOKEN_MAX_CHARS + 1];

	make_token(&in, has_version, subject_len);
	encode_ok(&in, s);
	for (const char *p = s; *p; p++)
		assert_non_null(strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZ"
				       "abcdefghijklmnopqrstuvwxyz0123456789-_",
				       *p));
	assert_int_equal(parse_only(s, strlen(s), &out), TOKEN_OK);
	assert_int_equal(verify_under(s, strlen(s), key), TOKEN_OK);
	assert_same_token(&in, &out);
	assert_int_equal(token_open(s, strlen(s), &out, key_of, NULL), TOKEN_OK);
	assert_same_token(&in, &out);
}

/* The table encoder writes what libsodium's base64url writes, for every
 * length a token can have. */
static void test_encode_matches_libsodium(void **state)
{
	struct token t;
	char s[TOKEN_MAX_CHARS + 1], ref[TOKEN_MAX_CHARS + 1];
	uint8_t bin[256];
	size_t n;

	(void)state;
	for (int v = 0; v <= 1; v++)
		for (size_t len = 1; len <= TOKEN_SUBJECT_MAX; len++) {
			make_token(&t, v, len);
			randombytes_buf(t.id, sizeof(t.id));
			encode_ok(&t, s);
			decode_raw(s, bin, &n);
			sodium_bin2base64(ref, sizeof(ref), bin, n,
					  sodium_base64_VARIANT_URLSAFE_NO_PADDING);
			assert_string_equal(s, ref);
		}
}

/* An unknown key id is a bad signature, not a malformed token. */
static void test_open_unknown_key(void **state)
{
	struct token t;
	char s[TOKEN_MAX_CHARS + 1];

	(void)state;
	make_token(&t, 0, 5);
	t.key_id = 8;
	encode_ok(&t, s);
	assert_int_equal(token_open(s, strlen(s), &t, key_of, NULL), TOKEN_BAD_SIGNATURE);
}

static void test_round_trip(void **state)
{
	(void)state;
	for (int v = 0; v <= 1; v++) {
		round_trip(v, 1);
		round_trip(v, 10);
		round_trip(v, TOKEN_SUBJECT_MAX);
	}
}

static void test_utf8_subject(void **state)
{
	struct token in, out;
	char s[TOKEN_MAX_CHARS + 1];
	const char *subj = "user-\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";

	(void)state;
	make_token(&in, 0, 1);
	in.subject_len = strlen(subj);
	memcpy(in.subject, subj, in.subject_len + 1);
	encode_ok(&in, s);
	assert_int_equal(parse_only(s, strlen(s), &out), TOKEN_OK);
	assert_string_equal(out.subject, subj);
}

static void test_max_length(void **state)
{
	struct token t;
	char s[TOKEN_MAX_CHARS + 1];

	(void)state;
	make_token(&t, 1, TOKEN_SUBJECT_MAX);
	t.key_id = t.tenant_id = t.operation_id = UINT32_MAX;
	t.issued_at = t.expires_at = UINT32_MAX;
	t.version = UINT64_MAX;
	encode_ok(&t, s);
	assert_int_equal(strlen(s), 255);
	assert_true(accepted(s, strlen(s)));

	/* A buffer exactly as long as needed works, one byte less does not. */
	assert_int_equal(token_encode(&t, key, s, 256), 0);
	assert_int_equal(token_encode(&t, key, s, 255), -1);
}

static void test_every_truncation_rejected(void **state)
{
	struct token t;
	char s[TOKEN_MAX_CHARS + 1];

	(void)state;
	for (int v = 0; v <= 1; v++) {
		make_token(&t, v, v ? TOKEN_SUBJECT_MAX : 1);
		encode_ok(&t, s);
		for (size_t len = 0; len < strlen(s); len++) {
			assert_false(accepted(s, len));
			assert_int_equal(parse_only(s, len, &t), TOKEN_MALFORMED);
		}
	}
}

static void test_every_bit_flip_rejected(void **state)
{
	struct token t;
	char s[TOKEN_MAX_CHARS + 1], m[TOKEN_MAX_CHARS + 1];
	size_t len, tried = 0;

	(void)state;
	for (int v = 0; v <= 1; v++) {
		make_token(&t, v, v ? 5 : TOKEN_SUBJECT_MAX);
		encode_ok(&t, s);
		len = strlen(s);
		for (size_t i = 0; i < len; i++) {
			for (int bit = 0; bit < 8; bit++) {
				memcpy(m, s, len + 1);
				m[i] = (char)(m[i] ^ (1 << bit));
				assert_false(accepted(m, len));
				tried++;
			}
		}
	}
	assert_true(tried > 8 * 100);
}

static void test_wrong_key(void **state)
{
	struct token t;
	char s[TOKEN_MAX_CHARS + 1];
	uint8_t other[TOKEN_KEY_BYTES];

	(void)state;
	make_token(&t, 1, 20);
	encode_ok(&t, s);
	memcpy(other, key, sizeof(other));
	other[31] ^= 1;
	assert_int_equal(parse_only(s, strlen(s), &t), TOKEN_OK);
	assert_int_equal(verify_under(s, strlen(s), other), TOKEN_BAD_SIGNATURE);
	assert_int_equal(verify_under(s, strlen(s), key), TOKEN_OK);
}

static void test_malformed(void **state)
{
	struct token t;
	char s[TOKEN_MAX_CHARS + 1], m[2 * TOKEN_MAX_CHARS + 2];
	size_t len;
	const char *bad = "+/.= \t~\"\\\x7f\x80\xff";

	(void)state;
	make_token(&t, 0, 30);
	encode_ok(&t, s);
	len = strlen(s);

	assert_int_equal(parse_only("", 0, &t), TOKEN_MALFORMED);
	assert_int_equal(parse_only(NULL, 0, &t), TOKEN_MALFORMED);
	assert_int_equal(verify_under("", 0, key), TOKEN_MALFORMED);

	/* Overlong: valid token plus more base64, and 257+ base64 chars. */
	memset(m, 'A', sizeof(m));
	assert_int_equal(parse_only(m, TOKEN_MAX_CHARS + 1, &t), TOKEN_MALFORMED);
	assert_int_equal(parse_only(m, sizeof(m), &t), TOKEN_MALFORMED);
	memcpy(m, s, len);
	memcpy(m + len, "AAAA", 4);
	assert_int_equal(parse_only(m, len + 4, &t), TOKEN_MALFORMED);

	/* Non-base64url characters anywhere. */
	for (const char *b = bad; *b; b++) {
		for (size_t i = 0; i < len; i += 7) {
			memcpy(m, s, len);
			m[i] = *b;
			assert_int_equal(parse_only(m, len, &t), TOKEN_MALFORMED);
		}
	}

	/* Padding. */
	memcpy(m, s, len);
	memcpy(m + len, "==", 2);
	assert_int_equal(parse_only(m, len + 1, &t), TOKEN_MALFORMED);
	assert_int_equal(parse_only(m, len + 2, &t), TOKEN_MALFORMED);

	/* Embedded or trailing NUL counted in the length. */
	memcpy(m, s, len + 1);
	assert_int_equal(parse_only(m, len + 1, &t), TOKEN_MALFORMED);
	m[len / 2] = '\0';
	assert_int_equal(parse_only(m, len, &t), TOKEN_MALFORMED);
}

static void test_non_canonical_rejected(void **state)
{
	static const char alphabet[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	struct token t;
	char s[TOKEN_MAX_CHARS + 1];
	size_t len, tried = 0;

	(void)state;
	/* Lengths 2 and 1 mod 3 leave 2 or 4 unused bits in the last char. */
	for (size_t subj = 1; subj <= 3; subj++) {
		make_token(&t, 0, subj);
		encode_ok(&t, s);
		len = strlen(s);
		if (len % 4 == 0)
			continue;
		const char *c = strchr(alphabet, s[len - 1]);
		size_t idx = (size_t)(c - alphabet);
		unsigned unused = len % 4 == 2 ? 0x0f : 0x03;
		for (unsigned low = 1; low <= unused; low++) {
			s[len - 1] = alphabet[(idx & ~(size_t)unused) | low];
			assert_int_equal(parse_only(s, len, &t), TOKEN_MALFORMED);
			assert_int_equal(verify_under(s, len, key), TOKEN_MALFORMED);
			tried++;
		}
	}
	assert_true(tried >= 3 + 15);
}

/* Correctly signed but structurally invalid payloads are still malformed. */
static void test_bad_structure(void **state)
{
	struct token t;
	char s[TOKEN_MAX_CHARS + 1], m[TOKEN_MAX_CHARS + 1];
	uint8_t bin[256];
	size_t n, subj_at = 38;

	(void)state;
	make_token(&t, 0, 10);
	encode_ok(&t, s);
	decode_raw(s, bin, &n);
	encode_raw(bin, n, m, sizeof(m));
	assert_string_equal(m, s); /* the test's re-signing is faithful */
	assert_true(accepted(m, strlen(m)));

	bin[0] = 2; /* format version */
	encode_raw(bin, n, m, sizeof(m));
	assert_int_equal(parse_only(m, strlen(m), &t), TOKEN_MALFORMED);
	bin[0] = 1;
	bin[1] = 0x02; /* unknown flag */
	encode_raw(bin, n, m, sizeof(m));
	assert_int_equal(parse_only(m, strlen(m), &t), TOKEN_MALFORMED);
	bin[1] = 0x01; /* claims a version it lacks */
	encode_raw(bin, n, m, sizeof(m));
	assert_int_equal(parse_only(m, strlen(m), &t), TOKEN_MALFORMED);
	bin[1] = 0;
	for (int sl = 0; sl < 256; sl++) { /* subject_len must fit */
		bin[subj_at] = (uint8_t)sl;
		encode_raw(bin, n, m, sizeof(m));
		assert_int_equal(parse_only(m, strlen(m), &t),
				 sl == 10 ? TOKEN_OK : TOKEN_MALFORMED);
	}
	bin[subj_at] = 10;
	bin[subj_at + 3] = '\0'; /* NUL inside the subject */
	encode_raw(bin, n, m, sizeof(m));
	assert_int_equal(parse_only(m, strlen(m), &t), TOKEN_MALFORMED);
}

static void test_encode_refuses_bad_subject(void **state)
{
	struct token t;
	char s[TOKEN_MAX_CHARS + 1];

	(void)state;
	make_token(&t, 0, 1);
	t.subject_len = 0;
	assert_int_equal(token_encode(&t, key, s, sizeof(s)), -1);
	make_token(&t, 0, TOKEN_SUBJECT_MAX);
	t.subject_len = TOKEN_SUBJECT_MAX + 1;
	assert_int_equal(token_encode(&t, key, s, sizeof(s)), -1);
	make_token(&t, 0, 10);
	t.subject[4] = '\0';
	assert_int_equal(token_encode(&t, key, s, sizeof(s)), -1);
	make_token(&t, 0, 10);
	t.subject[0] = '\0';
	assert_int_equal(token_encode(&t, key, s, sizeof(s)), -1);
	make_token(&t, 0, 10);
	assert_int_equal(token_encode(&t, key, s, 10), -1);
}

/* A token lives at least its TTL: the issue time is rounded up, not down. */
static void test_expiry_rounds_up(void **state)
{
	(void)state;
	assert_int_equal(token_expiry(1700000000000, 1), 1700000001);
	assert_int_equal(token_expiry(1700000000001, 1), 1700000002);
	assert_int_equal(token_expiry(1700000000999, 60), 1700000061);
	int64_t now = idemd_unix_ms();
	assert_true((int64_t)token_expiry(now, 1) * 1000 >= now + 1000);
	assert_true((int64_t)token_expiry(now, 1) * 1000 < now + 2000);
}

static void test_id_hex(void **state)
{
	uint8_t id[TOKEN_ID_BYTES];
	char hex[2 * TOKEN_ID_BYTES + 1];

	(void)state;
	for (size_t i = 0; i < sizeof(id); i++)
		id[i] = (uint8_t)(i * 17);
	token_id_hex(id, hex);
	assert_string_equal(hex, "00112233445566778899aabbccddeeff");
}

static void test_from_header(void **state)
{
	char out[TOKEN_MAX_CHARS + 1], big[TOKEN_MAX_CHARS + 8];
	struct token t;
	char s[TOKEN_MAX_CHARS + 1], q[TOKEN_MAX_CHARS + 8];
	static const char *const bad[] = {
		"",	     "   ",	  "\"\"",	  "\"abc",    "abc\"",
		"\"abc\"x",  "\"abc\" x", "\"abc\";a=1",  "a\"bc\"",  "\"a\\nb\"",
		"\"abc\\\"", "\"a\\",	  "ab c",	  "ab,c",     "a\\b",
		"\"a\tb\"",  "\"a\x01\"", "\"\xc3\xa9\"", "\xc3\xa9", "abc\x7f",
		"\"abc\"\"", "ab;c",	  "ab=",	  "ab+/",     "a.b",
	};

	(void)state;
	assert_int_equal(token_from_header("abc", out, sizeof(out)), 0);
	assert_string_equal(out, "abc");
	assert_int_equal(token_from_header("\"abc\"", out, sizeof(out)), 0);
	assert_string_equal(out, "abc");
	assert_int_equal(token_from_header("  abc\t", out, sizeof(out)), 0);
	assert_string_equal(out, "abc");
	assert_int_equal(token_from_header(" \"abc\" ", out, sizeof(out)), 0);
	assert_string_equal(out, "abc");
	assert_int_equal(token_from_header("\"a\\\"b\\\\c\"", out, sizeof(out)), 0);
	assert_string_equal(out, "a\"b\\c");
	assert_int_equal(token_from_header("\"a b\"", out, sizeof(out)), 0);
	assert_string_equal(out, "a b");

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (token_from_header(bad[i], out, sizeof(out)) != -1)
			fail_msg("accepted header value %zu: %s", i, bad[i]);
	assert_int_equal(token_from_header(NULL, out, sizeof(out)), -1);

	/* A real token, bare and quoted. */
	make_token(&t, 1, TOKEN_SUBJECT_MAX);
	encode_ok(&t, s);
	assert_int_equal(token_from_header(s, out, sizeof(out)), 0);
	assert_string_equal(out, s);
	snprintf(q, sizeof(q), "\"%s\"", s);
	assert_int_equal(token_from_header(q, out, sizeof(out)), 0);
	assert_string_equal(out, s);
	assert_true(accepted(out, strlen(out)));

	/* Too long: over TOKEN_MAX_CHARS, or over the output buffer. */
	memset(big, 'A', TOKEN_MAX_CHARS);
	big[TOKEN_MAX_CHARS] = '\0';
	assert_int_equal(token_from_header(big, out, sizeof(out)), 0);
	big[TOKEN_MAX_CHARS] = 'A';
	big[TOKEN_MAX_CHARS + 1] = '\0';
	assert_int_equal(token_from_header(big, out, sizeof(out)), -1);
	big[0] = '"';
	big[TOKEN_MAX_CHARS + 1] = '"';
	big[TOKEN_MAX_CHARS + 2] = '\0';
	assert_int_equal(token_from_header(big, out, sizeof(out)), 0);
	big[TOKEN_MAX_CHARS + 1] = 'A';
	big[TOKEN_MAX_CHARS + 2] = '"';
	big[TOKEN_MAX_CHARS + 3] = '\0';
	assert_int_equal(token_from_header(big, out, sizeof(out)), -1);
	assert_int_equal(token_from_header("abcd", out, 4), -1);
	assert_int_equal(token_from_header("abc", out, 4), 0);
	assert_int_equal(token_from_header("abc", out, 0), -1);
}

/* The reference the decoder must agree with: libsodium's decoder, and the
 * re-encoding giving the input back. */
static int reference_decode(const char *s, size_t len, uint8_t *out, size_t max, size_t *n)
{
	char canon[512];

	if (sodium_base642bin(out, max, s, len, NULL, n, NULL,
			      sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0)
		return -1;
	sodium_bin2base64(canon, sizeof(canon), out, *n, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
	return strlen(canon) == len && memcmp(canon, s, len) == 0 ? 0 : -1;
}

/* Random strings over the alphabet plus padding, standard base64 digits,
 * spaces, NUL and high bytes, of every length up to 40. */
static void test_b64url_matches_reference(void **state)
{
	static const char extra[] = "=+/ .\x80\xff";
	uint8_t a[64], b[64];
	char s[41];
	size_t na, nb;

	(void)state;
	for (int round = 0; round < 200000; round++) {
		size_t len = randombytes_uniform(41);
		for (size_t i = 0; i < len; i++) {
			uint32_t r = randombytes_uniform(80);
			if (r < 64)
				s[i] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
				       "0123456789-_"[r];
			else if (r < 79)
				s[i] = extra[r % (sizeof(extra) - 1)];
			else
				s[i] = '\0';
		}
		int ra = token_b64url_decode(s, len, a, sizeof(a), &na);
		int rb = reference_decode(s, len, b, sizeof(b), &nb);
		assert_int_equal(ra, rb);
		if (ra == 0) {
			assert_int_equal(na, nb);
			assert_memory_equal(a, b, na);
		}
	}
	/* output bound */
	assert_int_equal(token_b64url_decode("AAAA", 4, a, 2, &na), -1);
	assert_int_equal(token_b64url_decode("AAAA", 4, a, 3, &na), 0);
	assert_int_equal(na, 3);
	assert_int_equal(token_b64url_decode("", 0, a, 0, &na), 0);
	assert_int_equal(na, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_encode_matches_libsodium),
		cmocka_unit_test(test_open_unknown_key),
		cmocka_unit_test(test_utf8_subject),
		cmocka_unit_test(test_max_length),
		cmocka_unit_test(test_every_truncation_rejected),
		cmocka_unit_test(test_every_bit_flip_rejected),
		cmocka_unit_test(test_wrong_key),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_non_canonical_rejected),
		cmocka_unit_test(test_bad_structure),
		cmocka_unit_test(test_encode_refuses_bad_subject),
		cmocka_unit_test(test_expiry_rounds_up),
		cmocka_unit_test(test_id_hex),
		cmocka_unit_test(test_from_header),
		cmocka_unit_test(test_b64url_matches_reference),
	};

	if (sodium_init() < 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
