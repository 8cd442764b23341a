/* Migrations: the migrations/NNNN_name.sql files, compiled into the binary,
 * applied in order, once each, under an advisory lock, recording name,
 * checksum and whether it is breaking; and the comparison of a database with
 * them.
 *
 * A migration whose first line is MIGRATE_BREAKING_MARK is not backward-
 * compatible: binaries that do not know it must not serve the schema it
 * made. schema_migrations.breaking records the mark, so that such a binary
 * (one older than the migration) sees it and refuses.
 * Ownership: arguments are borrowed for the call; a struct migrate_check is
 * the caller's, its names held inside it. */
#ifndef IDEMD_MIGRATE_H
#define IDEMD_MIGRATE_H

#include "common.h"

/* One migration compiled in. SQL holds LEN bytes and a NUL after them. */
struct migrate_embedded {
	const char *name;
	const unsigned char *sql;
	size_t len;
};

/* Generated at build time (cmake/embed_migrations.cmake), sorted by name. */
extern const struct migrate_embedded migrate_embedded[];
extern const size_t migrate_embedded_count;

/* How the database stands against the migrations this binary holds; a
 * later one wins over an earlier one. */
enum migrate_state {
	MIGRATE_CURRENT, /* every one applied, nothing else */
	MIGRATE_AHEAD,	 /* every one applied, and some this binary does not know */
	MIGRATE_TOO_OLD, /* ahead, and one of those unknown is marked breaking */
	MIGRATE_BEHIND,	 /* some not applied */
	MIGRATE_CHANGED, /* some applied with other contents */
};

#define MIGRATE_NAMES 512

/* The first line of a migration that old binaries must not serve. */
#define MIGRATE_BREAKING_MARK "-- idemd: breaking"

/* 1 when SQL (LEN bytes) starts with the line MIGRATE_BREAKING_MARK. */
int migrate_is_breaking(const unsigned char *sql, size_t len);

/* What migrate_check found: names are comma-separated ("" when none; cut
 * short with ", ..." when long). */
struct migrate_check {
	enum migrate_state state;
	size_t pending, changed, unknown, breaking;
	char pending_names[MIGRATE_NAMES];
	char changed_names[MIGRATE_NAMES];
	char unknown_names[MIGRATE_NAMES];
	char breaking_names[MIGRATE_NAMES]; /* the unknown ones marked breaking */
};

/* Applies pending migrations. Returns 0, or -1 after logging why (an applied
 * migration whose contents changed, an SQL error, no database). */
int migrate_run(const char *conninfo) IDEMD_WUR;

/* Compares the database with the migrations, through the pool. Returns 0 and
 * fills OUT, or -1 when the database could not answer. */
int migrate_check(struct migrate_check *out) IDEMD_WUR;

/* Prints one line per migration to stdout: "applied NAME TIME", "pending
 * NAME", "changed NAME TIME" (applied with other contents) or "unknown NAME
 * TIME" (applied by a newer binary; "unknown NAME TIME breaking" when marked
 * breaking). Returns 0 when the schema is current or ahead, 1 when it is
 * behind, changed or ahead by a breaking migration, -1 when the database
 * could not answer (logged). */
int migrate_status(const char *conninfo) IDEMD_WUR;

#endif
