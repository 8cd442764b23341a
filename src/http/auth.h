/* Authentication: API keys (generation, hashing), every key the database
 * holds kept in memory (the known set) and a cache from key hash to tenant,
 * so that requests need no database round trip and a genuine key never
 * waits on the rate-limited lookup of unknown keys.
 * Ownership: arguments are borrowed for the call. */
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

/*
 * How long a known key is believed without asking the database again. A
 * key revoked (or whose tenant was deleted) is refused by every instance
 * within this much, plus one database round trip. While the database
 * cannot answer, a known key stays accepted (and is asked about again each
 * second): revocations need the database anyway.
 */
#define AUTH_RECHECK_MS 5000
/* A key the database refused is refused again without asking for this
 * long; and at most this many keys known to neither cache are looked up
 * per second, of which at most AUTH_LOOKUPS_PER_CLIENT for one client
 * (beyond either: AUTH_UNAVAILABLE, answered 503 with Retry-After), so
 * that one address sending made-up keys leaves the rest to the others. */
#define AUTH_NEGATIVE_MS 1000
#define AUTH_LOOKUPS_PER_SECOND 1000
#define AUTH_LOOKUPS_PER_CLIENT 100
/* Clients are told apart by a slot number below this (a keyed hash of
 * the IPv4 address or of the IPv6 prefix of ipv6_client_prefix bits:
 * http_client_slot). */
#define AUTH_CLIENT_SLOTS 1024

/* Resolves KEY, sent by the client of slot CLIENT, to its tenant: AUTH_OK,
 * AUTH_DENIED or AUTH_UNAVAILABLE. */
int auth_check(const char *key, size_t client, uint32_t *tenant_id) IDEMD_WUR;

/*
 * What one connection last authenticated with, so that its next request
 * with the same key skips the hash and the cache. It holds the key text:
 * auth_memo_wipe() it when the connection ends. Zeroed is empty.
 */
struct auth_memo {
	unsigned char am_key[64]; /* the key, zero-padded for crypto_verify_64 */
	uint32_t am_tenant_id;
	uint32_t am_key_id;    /* the key's id (tenant list shows it), for the audit trail */
	unsigned am_gen;       /* auth_cache_clear() generation it was filled in; 0: empty */
	int64_t am_checked_ms; /* when the database last confirmed the key (auth clock) */
};

/* auth_check() through MEMO (NULL: none). */
int auth_check_memo(const char *key, size_t client, struct auth_memo *memo,
		    uint32_t *tenant_id) IDEMD_WUR;
void auth_memo_wipe(struct auth_memo *memo);

/* Reads the keys the database holds into the known set, which answers for
 * them without the rate-limited lookup: at once when their count or id sum
 * changed since the last read, else only notes that the set was confirmed
 * now. serve calls it before the listener opens, the janitor once a
 * second. 0, or -1 (database or memory; the set stays as it was). */
int auth_refresh(void) IDEMD_WUR;
/* For tests: forgets every known key, the known set too (and makes every
 * memo stale), so that each test case starts from an empty set. */
void auth_cache_clear(void);

/* For tests: the clock of AUTH_RECHECK_MS, in ms (NULL:
 * CLOCK_MONOTONIC_COARSE), so that a test steps its time instead of
 * sleeping through the recheck. */
void auth_set_clock(int64_t (*now_ms)(void));

#endif
