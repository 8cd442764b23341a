/* Replay counts: how many duplicates each record answered from its stored
 * response, counted in memory so that a replay writes nothing to
 * PostgreSQL on its path, and added to records.replays by one statement per
 * flush, at most REPLAYCOUNT_FLUSH_SECONDS (plus one statement) late.
 * Ownership: arguments are borrowed for the call. */
#ifndef IDEMD_REPLAYCOUNT_H
#define IDEMD_REPLAYCOUNT_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define REPLAYCOUNT_FLUSH_SECONDS 5
/* Distinct records counted between two flushes; past three quarters of it
 * the flusher runs at once (each flushed record is one row updated, so the
 * longer counts gather, the fewer rows a storm of replays writes). A replay
 * of yet another record when the table is full is dropped and counted in
 * idemd_replay_counts_dropped_total. Two tables of it: 2 MiB. */
#define REPLAYCOUNT_CAPACITY 32768
#define REPLAYCOUNT_EARLY (REPLAYCOUNT_CAPACITY / 4 * 3)

/* Allocates the tables and starts the flusher thread. 0 or -1. */
int replaycount_start(void) IDEMD_WUR;

/* Stops the flusher and flushes what is left (after the last request was
 * answered); a flush that fails is retried for up to about 3 s, then the
 * loss is logged with its size. Safe when never started. */
void replaycount_stop(void);

/* One more replay of record (TENANT_ID, ID): any thread, never blocks on
 * the database (a short mutex). A no-op before start. */
void replaycount_add(uint32_t tenant_id, const uint8_t id[16]);

/* Runs one flush now (tests, shutdown): 0, or -1 when the database did not
 * take it (the counts are kept for the next flush). */
int replaycount_flush(void) IDEMD_WUR;

/* Records whose counts are not in the database yet (those a flush is
 * writing included, so a flush in flight never hides them; a record
 * counted again meanwhile is in both until the flush ends), and replays
 * dropped on a full table. */
void replaycount_usage(size_t *pending, long *dropped);

#endif
