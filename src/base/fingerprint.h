/*
 * Request fingerprints: a 32-byte digest identifying what a claim asked
 * for, so that a token reused for a different request is caught (422).
 * Domain-separated: a client-supplied string hashes as "s:" + string, a JSON
 * request as "j:" + its canonical text, so the two can never collide.
 *
 * Canonical JSON (jansson's compact dump, keys sorted): object keys in
 * bytewise order at every nesting level, no insignificant whitespace,
 * strings as raw UTF-8 with only the escapes JSON requires (so "\u00e9" and
 * "é" are the same). Numbers keep jansson's integer/real distinction: 1 and
 * 1.0 are different requests; a real prints with 17 significant digits, so
 * 1.5, 1.50 and 15e-1 are the same. Integers outside the range of
 * json_int_t and duplicate keys are the parser's business, not this one's.
 *
 * Ownership: inputs are borrowed for the call; fingerprint_canonical_json
 * returns an owned string: the caller frees it with free().
 */
#ifndef IDEMD_FINGERPRINT_H
#define IDEMD_FINGERPRINT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common.h"

#define FINGERPRINT_BYTES 32

/* BLAKE2b-256("s:" + s[0..len)). */
void fingerprint_of_string(const char *s, size_t len, uint8_t out[FINGERPRINT_BYTES]);

/* BLAKE2b-256("j:" + canonical JSON of v). Returns 0 or -1 (out of memory). */
IDEMD_WUR int fingerprint_of_json(const json_t *v, uint8_t out[FINGERPRINT_BYTES]);

/* Canonical JSON text of v (owned: free() it), NULL on failure. */
IDEMD_WUR char *fingerprint_canonical_json(const json_t *v);

#endif
