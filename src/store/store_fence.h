/* The fence session: a database session of this serving process's own that
 * holds one session-level advisory lock for as long as the process lives,
 * so that a gateway record it holds stays in progress past its lease while
 * the process lives, however long its completion stalls
 * (migrations/0020_holder_fence.sql says the rule beside the SQL).
 * Ownership: arguments are borrowed for the call. */
#ifndef IDEMD_STORE_FENCE_H
#define IDEMD_STORE_FENCE_H

#include <stdint.h>

#include "common.h"

/* Starts the thread that keeps the fence session open on CONNINFO
 * (reconnecting, and taking its lock again, within a second of losing it).
 * Waits up to about two seconds for the first lock; 0 (also when it could
 * not be had yet: gateway claims then wait for it), or -1 when no thread
 * could be made. */
int store_fence_start(const char *conninfo) IDEMD_WUR;
/* Closes the session: from here no record is fenced by this process. */
void store_fence_stop(void);

/* The fence's id while its session holds the lock, or 0 (not connected,
 * or the lock not taken yet): a gateway claim then must not be made. */
int32_t store_fence_holder(void);

#endif
