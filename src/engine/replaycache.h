/* Replay cache: completed responses kept in process so that duplicates of
 * a completed submit are answered without a database round trip. A
 * completed response never changes, so an entry is valid until its
 * retention ends; entries are keyed by tenant and token id, so no tenant
 * can ever be served another's entry.
 * Ownership: arguments are borrowed for the call (what is kept is copied);
 * what a lookup fills in is owned by the caller, freed as its comment says. */
#ifndef IDEMD_REPLAYCACHE_H
#define IDEMD_REPLAYCACHE_H

#include <stdint.h>

#include "common.h"
#include "store.h"

#define REPLAYCACHE_SLOTS 32768
#define REPLAYCACHE_WAYS 16
#define REPLAYCACHE_MAX_BODY (64 * 1024)
/* bound on everything held, so memory stays small whatever the traffic */
#define REPLAYCACHE_MAX_BYTES (6 * 1024 * 1024)
/* largest rendered reply kept (a body of REPLAYCACHE_MAX_BODY in base64) */
#define REPLAYCACHE_MAX_REPLY (96 * 1024)
/* largest request body kept to answer the same body again without
 * parsing it (replaycache_get_raw) */
#define REPLAYCACHE_MAX_RAW 1024

/* Stores a copy of R for (TENANT, ID) with fingerprint FP (NULL: none)
 * until EXPIRES_AT (unix ms). Large bodies are not cached. */
void replaycache_put(uint32_t tenant_id, const uint8_t id[16], const uint8_t *fp,
		     const struct stored_response *r, int64_t expires_at);

/* What a lookup found. */
enum replaycache_hit {
	REPLAYCACHE_MISS = 0,	  /* nothing usable: go the full way */
	REPLAYCACHE_HIT = 1,	  /* a completed answer for this request */
	REPLAYCACHE_OTHER_FP = 2, /* a completed answer for another request's fingerprint */
};

/* 1 when a completed response of (TENANT, ID) is cached, else 0. */
int replaycache_has(uint32_t tenant_id, const uint8_t id[16]);

/*
 * An entry may also hold one rendered reply (the JSON envelope a route
 * answers duplicates with), tagged with a KIND above 0 that the caller
 * chooses, since one record may be replayed by routes of different forms.
 *
 * Looks up (TENANT, ID). REPLAYCACHE_HIT when a live entry exists and FP
 * equals its fingerprint: when REPLY is not NULL and the entry holds a
 * rendered reply of KIND, with a copy of that, owned (NUL-terminated,
 * free()), in *REPLY and *REPLY_LEN; otherwise with *REPLY NULL and OUT
 * filled with an owned copy of the response (store_response_free()).
 * REPLAYCACHE_OTHER_FP when a live entry exists with another fingerprint;
 * REPLAYCACHE_MISS when nothing usable is cached. KIND 0 and REPLY NULL
 * ask for the response alone.
 */
enum replaycache_hit replaycache_lookup(uint32_t tenant_id, const uint8_t id[16], const uint8_t *fp,
					int kind, struct stored_response *out, char **reply,
					size_t *reply_len);

/*
 * Attaches to the live entry of (TENANT, ID), if its fingerprint is FP, the
 * rendered reply REPLY of KIND (copied, kept only if the entry has none)
 * and RAW (RAW_LEN bytes, copied; NULL or longer than REPLAYCACHE_MAX_RAW:
 * none): a request body as sent that gave fingerprint FP. Nothing changes
 * when the entry holds a reply of another kind.
 */
void replaycache_set_reply(uint32_t tenant_id, const uint8_t id[16], const uint8_t *fp, int kind,
			   const void *raw, size_t raw_len, const char *reply, size_t reply_len);

/*
 * The rendered reply of KIND of (TENANT, ID) for a request whose body is
 * RAW (RAW_LEN bytes): REPLAYCACHE_HIT with an owned copy (free()) in
 * *REPLY when a live entry holds a reply of KIND and RAW equals the body
 * last attached to it byte for byte; REPLAYCACHE_MISS otherwise (go the
 * full way). The same body gives the same fingerprint, so a hit answers as
 * the full way would.
 */
enum replaycache_hit replaycache_get_raw(uint32_t tenant_id, const uint8_t id[16], int kind,
					 const void *raw, size_t raw_len, char **reply,
					 size_t *reply_len);

/*
 * A second name for the request that gave fingerprint FP: ALIAS, a hash of
 * the request's exact bytes (a route whose fingerprint is the body's JSON
 * meaning hashes its bytes too). Kept on the live entry of (TENANT, ID) if
 * its fingerprint is FP; the last one set stays.
 * replaycache_get_alias() answers a request with those bytes without
 * working out its fingerprint: REPLAYCACHE_HIT with OUT filled as by
 * replaycache_lookup() when the entry holds ALIAS, else REPLAYCACHE_MISS (go
 * the full way). The same bytes give the same fingerprint.
 */
void replaycache_set_alias(uint32_t tenant_id, const uint8_t id[16], const uint8_t *fp,
			   const uint8_t alias[STORE_HASH_BYTES]);
enum replaycache_hit replaycache_get_alias(uint32_t tenant_id, const uint8_t id[16],
					   const uint8_t alias[STORE_HASH_BYTES],
					   struct stored_response *out);

/* What the cache holds now: response bytes (counted against
 * REPLAYCACHE_MAX_BYTES) and entries. */
void replaycache_usage(size_t *bytes, size_t *entries);

/* Drops every entry: the janitor, when the tenants change (a deleted
 * tenant's answers must not outlive it); the unit tests, between cases. */
void replaycache_clear(void);

#endif
