/* Janitor: one background thread for periodic maintenance — reloading the
 * operations in use before they expire from the cache, picking up rotated
 * signing keys, measuring the database's clock, ending expired records'
 * lives, returning freed memory.
 * Ownership: arguments are borrowed for the call (janitor_start() copies
 * what it needs of CFG). */
#ifndef IDEMD_JANITOR_H
#define IDEMD_JANITOR_H

#include "common.h"

struct config;

#define JANITOR_KEYS_INTERVAL_SECONDS 5
#define JANITOR_SWEEP_BATCH 500
#define JANITOR_TRIM_INTERVAL_SECONDS 30
/* how often the rows of deleted tenants are looked for (janitor_tenants) */
#define JANITOR_ORPHANS_INTERVAL_SECONDS 5
/* The ids of the tenant/operation pairs metrics names and the check of the
 * hot tables' statistics this often; idemd_records_stuck (a read of the
 * whole table, migrations/0017) this often or JANITOR_STUCK_SPACING times
 * as long as its last count took, whichever is longer (janitor.c) */
#define JANITOR_STUCK_INTERVAL_SECONDS 15
#define JANITOR_STUCK_SPACING 300

int janitor_start(const struct config *cfg) IDEMD_WUR;
void janitor_stop(void);

/* Runs sweep batches until no row whose time to be swept came is left or
 * another instance holds the sweep lock; returns the number of records
 * whose life it ended, or -1. With PACED, rests after each batch as long
 * as it took (at most 0.5 s), so a large backlog takes at most half of one
 * database connection's time and foreground claims keep their latency,
 * and stops early when the janitor is asked to stop. */
long janitor_sweep_now(int paced);

/* Reads the database's clock and sets idemd_clock_offset_ms (common.h)
 * from it. 0, or -1 when the database did not answer in time. */
int janitor_measure_clock(void) IDEMD_WUR;

#endif
