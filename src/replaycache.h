/* Replay cache: completed responses kept in process so that duplicates of
 * a completed submit are answered without a database round trip. A
 * completed response never changes, so an entry is valid until its
 * retention ends; entries are keyed by tenant and token id, so no tenant
 * can ever be served another's entry. */
#ifndef IDEMD_REPLAYCACHE_H
#define IDEMD_REPLAYCACHE_H

#include <stdint.h>

#include "common.h"
#include "store.h"

#define REPLAYCACHE_SLOTS 32768
#define REPLAYCACHE_WAYS 4
#define REPLAYCACHE_MAX_BODY (64 * 1024)
/* bound on everything held, so memory stays small whatever the traffic */
#define REPLAYCACHE_MAX_BYTES (8 * 1024 * 1024)

/* Stores a copy of R for (TENANT, ID) with fingerprint FP (NULL: none)
 * until EXPIRES_AT (unix ms). Large bodies are not cached. */
void replaycache_put(uint32_t tenant_id, const uint8_t id[16], const uint8_t *fp,
		     const struct stored_response *r, int64_t expires_at);

/*
 * Looks up (TENANT, ID). Returns 1 and fills OUT with a new copy (free with
 * store_response_free) when a live entry exists and FP equals its
 * fingerprint; 2 when a live entry exists with another fingerprint; 0 when
 * nothing usable is cached.
 */
int replaycache_get(uint32_t tenant_id, const uint8_t id[16], const uint8_t *fp,
		    struct stored_response *out);

void replaycache_clear(void);

#endif
