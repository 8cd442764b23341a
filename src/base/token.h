/*
 * Token codec: turns a struct token into the signed, URL-safe token string
 * handed to clients and back. Pure functions: no database, no globals, no
 * key storage (the caller passes the signing key in and keeps it).
 *
 * Ownership: every function only borrows its arguments for the duration of
 * the call and writes into caller-provided buffers; nothing is allocated.
 *
 * Wire format (little-endian), base64url without padding of payload || tag:
 *   ver u8 (=1) | flags u8 (bit0: has version) | key_id u32 | tenant_id u32 |
 *   operation_id u32 | id[16] | issued_at u32 | expires_at u32 |
 *   [version u64 if flags&1] | subject_len u8 (1..128) | subject
 *   tag = keyed BLAKE2b-128 of the payload under the 32-byte signing key.
 */
#ifndef IDEMD_TOKEN_H
#define IDEMD_TOKEN_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define TOKEN_ID_BYTES 16
#define TOKEN_MAX_CHARS 256
#define TOKEN_SUBJECT_MAX 128
#define TOKEN_KEY_BYTES 32 /* signing key size */

struct token {
	uint32_t key_id, tenant_id, operation_id;
	uint8_t id[TOKEN_ID_BYTES];
	uint32_t issued_at, expires_at; /* unix seconds */
	int has_version;
	uint64_t version;		     /* meaningful only if has_version */
	size_t subject_len;		     /* 1..TOKEN_SUBJECT_MAX */
	char subject[TOKEN_SUBJECT_MAX + 1]; /* NUL-terminated; no NUL inside */
};

enum token_status { TOKEN_OK = 0, TOKEN_MALFORMED = -1, TOKEN_BAD_SIGNATURE = -2 };

/*
 * Writes the token string (NUL-terminated) into out, which must hold at
 * least TOKEN_MAX_CHARS + 1 bytes (a shorter buffer works if the token fits).
 * Returns 0, or -1 if a field is invalid (subject length outside 1..128 or a
 * NUL byte in the subject) or out is too small.
 */
IDEMD_WUR int token_encode(const struct token *t, const uint8_t key[TOKEN_KEY_BYTES], char *out,
			   size_t outlen);

/*
 * Strict, bounded parse of s[0..len): base64url alphabet only, no padding,
 * canonical encoding, format version 1, no unknown flags, subject length
 * matching the total length exactly, no NUL in the subject; fills t
 * (including key_id) and returns TOKEN_MALFORMED when it does not parse,
 * leaving t unspecified. Then checks the tag, in constant time, under the
 * key that key_of(t->key_id, arg) returns: TOKEN_OK, or
 * TOKEN_BAD_SIGNATURE (key_of's NULL, no such key, too; t stays filled).
 * s need not be NUL-terminated. The key is used before token_open returns.
 */
IDEMD_WUR int token_open(const char *s, size_t len, struct token *t,
			 const uint8_t *(*key_of)(uint32_t key_id, void *arg), void *arg);

/*
 * Strict base64url (no padding) decoder: only the canonical encoding of
 * some bytes is accepted, that is only digits of the URL-safe alphabet, no
 * length of 1 mod 4, and zero bits after the last byte. Writes at most
 * outmax bytes to out and their number to *n. Returns 0, or -1.
 */
IDEMD_WUR int token_b64url_decode(const char *s, size_t len, uint8_t *out, size_t outmax,
				  size_t *n);

/* Writes id as 32 lowercase hex characters plus NUL. */
void token_id_hex(const uint8_t id[TOKEN_ID_BYTES], char out[2 * TOKEN_ID_BYTES + 1]);

/* The expiry, in unix seconds, of a token or record made at NOW_MS with a
 * time to live of TTL seconds: NOW_MS rounded up to a whole second, plus
 * TTL. It lives at least TTL seconds and less than TTL + 1. */
uint32_t token_expiry(int64_t now_ms, int64_t ttl);

/*
 * Extracts the token from an Idempotency-Key header value (NUL-terminated):
 * either bare (base64url characters only), or an RFC 8941 sf-string ("..."
 * of printable ASCII with only \" and \\ escapes). Surrounding spaces and
 * tabs are ignored. Copies the token, NUL-terminated,
 * into out. Returns 0, or -1 if the value is empty, badly quoted, has
 * trailing garbage, or is longer than TOKEN_MAX_CHARS or outlen - 1.
 * The result still has to go through token_open.
 */
IDEMD_WUR int token_from_header(const char *value, char *out, size_t outlen);

#endif
