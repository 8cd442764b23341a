/* Migrations: applies migrations/NNNN_name.sql in order, once each, under
 * an advisory lock, recording name and checksum. */
#ifndef IDEMD_MIGRATE_H
#define IDEMD_MIGRATE_H

#include "common.h"

/* Applies pending migrations. Returns 0, or -1 after logging why (a changed
 * applied file, an SQL error, no database). */
int migrate_run(const char *conninfo) IDEMD_WUR;

/* Compares the database with the migration files: 1 current, 0 behind or
 * changed, -1 the database could not answer. Uses the pool. */
int migrate_schema_current(void);

/* The folder holding the migration files. */
const char *migrate_dir(void);

#endif
