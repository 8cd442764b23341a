/* Authentication: API keys (generation, hashing) and an in-process cache
 * from key hash to tenant so most requests need no database round trip. */
#ifndef IDEMD_AUTH_H
#define IDEMD_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define AUTH_KEY_PREFIX "idk_"
/* "idk_" + base64url of 32 random bytes */
#define AUTH_KEY_CHARS (4 + 43)

enum { AUTH_OK = 0, AUTH_DENIED = -1, AUTH_UNAVAILABLE = -2 };

/* Writes a fresh key (NUL-terminated) into OUT (size > AUTH_KEY_CHARS). */
void auth_key_generate(char *out, size_t outlen);

/* BLAKE2b-256 of the key text. */
void auth_key_hash(const char *key, size_t len, uint8_t out[32]);

/* Resolves KEY to its tenant: AUTH_OK, AUTH_DENIED or AUTH_UNAVAILABLE. */
int auth_check(const char *key, uint32_t *tenant_id);

void auth_cache_clear(void);

#endif
