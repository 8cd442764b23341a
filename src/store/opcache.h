/* Operation cache: operation policies by (tenant, name) and by id, so that
 * issuing a token needs no database round trip. Entries live a few seconds;
 * a PUT on this instance replaces its entry at once. The janitor reloads
 * the entries in use before they expire (opcache_refresh), so request
 * threads read the database only for an operation they have not used
 * lately, or when the janitor could not reach it.
 * Ownership: arguments are borrowed for the call; a lookup copies the
 * operation into OP, the caller's. */
#ifndef IDEMD_OPCACHE_H
#define IDEMD_OPCACHE_H

#include "common.h"
#include "store.h"

#define OPCACHE_TTL_SECONDS 5

/* Fills OP. Returns 0 with *found, or -1 when the database is unavailable. */
int opcache_by_name(uint32_t tenant_id, const char *name, struct operation *op,
		    int *found) IDEMD_WUR;
int opcache_by_id(uint32_t op_id, struct operation *op, int *found) IDEMD_WUR;

/* Records OP as just written. */
void opcache_put(const struct operation *op);
/* Forgets every entry (a tenant was deleted somewhere: its operations
 * must not be served from memory); they are read again as used. */
void opcache_clear(void);

/* Janitor: reloads every entry used since it was loaded and at least
 * MIN_AGE seconds old. 0, or -1 when the database did not answer (the rest
 * wait for the next pass). */
int opcache_refresh(int min_age) IDEMD_WUR;
/* the janitor's MIN_AGE: reloaded a second or two before they expire */
#define OPCACHE_REFRESH_AGE (OPCACHE_TTL_SECONDS - 2)

#endif
