/* Caller keys: the keys callers bring themselves (a UUID, an event id, a
 * business key), and the record each names under an operation.
 * Ownership: arguments are borrowed for the call. */
#ifndef IDEMD_CALLERKEY_H
#define IDEMD_CALLERKEY_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"
#include "token.h"

#define CALLERKEY_MAX 255

/* 1 when KEY (LEN bytes) is 1..255 bytes of visible ASCII (0x21-0x7E). */
int callerkey_valid(const char *key, size_t len);

/*
 * The record KEY (LEN bytes, valid) names under operation OP of TENANT, in
 * the form a verified token gives it (a token is one way to name a record,
 * a key another): tenant, operation, record id (BLAKE2b-128 of the
 * operation and the key: the same key under another operation is another
 * record; tokens' ids are random, so the two never meet), no subject, and
 * an expiry token_ttl_seconds from NOW_MS (unix milliseconds; token_expiry),
 * which only a first claim records. SCOPE (32 bytes, or NULL) joins the hash: a gateway
 * route's scope_headers, so that two callers' equal keys never meet.
 */
void callerkey_address(uint32_t tenant, const struct operation *op, const char *key, size_t len,
		       const uint8_t *scope, int64_t now_ms, struct token *t);

/* The key in a header VALUE: bare, or one RFC 8941 sf-string (quoted, \"
 * and \\ escaped). Into OUT (OUTLEN bytes); its length, or -1 when the
 * value is a malformed sf-string, -2 when it is too long. */
int callerkey_from_header(const char *value, char *out, size_t outlen) IDEMD_WUR;

/* The key at JSON Pointer POINTER (RFC 6901, "/a/0/b") in DOC: a string,
 * or an integer in decimal. Into OUT (OUTLEN bytes); its length, -1 when
 * nothing usable is there, -2 when it is too long. */
int callerkey_from_json(json_t *doc, const char *pointer, char *out, size_t outlen) IDEMD_WUR;

#endif
