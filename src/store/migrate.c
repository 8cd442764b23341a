/* Migrations. The SQL comes from the binary (migrate_embedded, generated
 * from migrations/NNNN_name.sql at build time), never from files at run
 * time. Each one runs in its own transaction; the whole run holds a session
 * advisory lock so concurrent migrators apply each one once. */
#include "migrate.h"

#include <libpq-fe.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "log.h"

#define MIGRATE_LOCK_KEY "7428136"
#define MIGRATE_MAX 1000
#define MIGRATE_SUM_HEX (2 * 32 + 1)

/* name, checksum, applied_at (UTC) and breaking of every applied
 * migration, in byte order of the name whatever the database's collation.
 * Read through to_jsonb: a database only older binaries migrated has no
 * breaking column (and no breaking migration). */
#define MIGRATE_ROWS_SQL \
	"SELECT name, checksum, " \
	"to_char(applied_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), " \
	"coalesce(to_jsonb(m) -> 'breaking' = 'true', false) " \
	"FROM schema_migrations m ORDER BY name COLLATE \"C\""
/* the breaking column, added to tables older binaries made; they insert
 * without it and get false, which is right: they know no breaking one */
#define MIGRATE_BREAKING_COLUMN_SQL \
	"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_attribute " \
	"WHERE attrelid = 'schema_migrations'::regclass AND attname = 'breaking' " \
	"AND NOT attisdropped) THEN ALTER TABLE schema_migrations " \
	"ADD COLUMN breaking boolean NOT NULL DEFAULT false; END IF; END $$"
#define MIGRATE_EXISTS_SQL "SELECT to_regclass('schema_migrations') IS NOT NULL"

/* checksums of the embedded migrations, computed once */
static char migrate_sums[MIGRATE_MAX][MIGRATE_SUM_HEX];
/* whether each embedded migration starts with MIGRATE_BREAKING_MARK */
static unsigned char migrate_breaking[MIGRATE_MAX];
static pthread_once_t migrate_once = PTHREAD_ONCE_INIT;
static int migrate_sums_ok;

static int migrate_name_ok(const char *name)
{
	size_t n = strlen(name);

	return n > 9 && n < 200 && strspn(name, "0123456789") == 4 && name[4] == '_' &&
	       strcmp(name + n - 4, ".sql") == 0;
}

int migrate_is_breaking(const unsigned char *sql, size_t len)
{
	size_t n = sizeof(MIGRATE_BREAKING_MARK) - 1;

	if (len < n || memcmp(sql, MIGRATE_BREAKING_MARK, n) != 0)
		return 0;
	/* the whole first line: "-- idemd: breakingly" is no mark */
	while (n < len && (sql[n] == ' ' || sql[n] == '\t'))
		n++;
	return n == len || sql[n] == '\n' || (sql[n] == '\r' && n + 1 < len && sql[n + 1] == '\n');
}

static void migrate_init(void)
{
	if (migrate_embedded_count > MIGRATE_MAX) {
		log_error("migrate: %zu migrations compiled in, at most %d supported",
			  migrate_embedded_count, MIGRATE_MAX);
		return;
	}
	for (size_t i = 0; i < migrate_embedded_count; i++) {
		const struct migrate_embedded *m = &migrate_embedded[i];
		uint8_t hash[32];

		if (!migrate_name_ok(m->name) ||
		    (i > 0 && strcmp(migrate_embedded[i - 1].name, m->name) >= 0) ||
		    m->sql[m->len] != '\0' || memchr(m->sql, '\0', m->len) != NULL) {
			log_error("migrate: the compiled-in migration %s is malformed", m->name);
			return;
		}
		crypto_generichash(hash, sizeof(hash), m->sql, m->len, NULL, 0);
		sodium_bin2hex(migrate_sums[i], MIGRATE_SUM_HEX, hash, sizeof(hash));
		migrate_breaking[i] = (unsigned char)migrate_is_breaking(m->sql, m->len);
	}
	migrate_sums_ok = 1;
}

/* 0 when the embedded migrations and their checksums can be used. */
static int migrate_ready(void)
{
	if (pthread_once(&migrate_once, migrate_init) != 0)
		return -1;
	return migrate_sums_ok ? 0 : -1;
}

/* Appends NAME to the comma-separated list in BUF, or ", ..." once when it
 * no longer fits. */
static void migrate_note(char *buf, const char *name)
{
	static const char more[] = ", ...";
	size_t used = strlen(buf), need = strlen(name) + (used > 0 ? 2 : 0);

	if (used >= sizeof(more) - 1 && strcmp(buf + used - (sizeof(more) - 1), more) == 0)
		return;
	if (used + need + sizeof(more) > MIGRATE_NAMES) {
		snprintf(buf + used, MIGRATE_NAMES - used, "%s", more);
		return;
	}
	snprintf(buf + used, MIGRATE_NAMES - used, "%s%s", used > 0 ? ", " : "", name);
}

/* Prints the line of migrate_compare's list for one migration: WHAT and
 * NAME, then APPLIED_AT and whether it is BREAKING for one the database
 * holds (APPLIED_AT NULL: it holds none). Returns 0, or -1 when stdout
 * failed. */
static int migrate_print(const char *what, const char *name, const char *applied_at, int breaking)
{
	if (applied_at == NULL)
		return printf("%s %s\n", what, name) < 0 ? -1 : 0;
	return printf("%s %s %s%s\n", what, name, applied_at, breaking ? " breaking" : "") < 0 ? -1
											       : 0;
}

/* How the database stands by the counts in OUT (a later migrate_state wins). */
static enum migrate_state migrate_state_of(const struct migrate_check *out)
{
	return out->changed > 0	   ? MIGRATE_CHANGED
	       : out->pending > 0  ? MIGRATE_BEHIND
	       : out->breaking > 0 ? MIGRATE_TOO_OLD
	       : out->unknown > 0  ? MIGRATE_AHEAD
				   : MIGRATE_CURRENT;
}

/*
 * Walks the embedded migrations and the rows of R (MIGRATE_ROWS_SQL; NULL:
 * no table yet) together, fills OUT and, when LIST is set, prints one line
 * per migration to stdout. Returns 0, or -1 when stdout failed.
 */
static int migrate_compare(const PGresult *r, struct migrate_check *out, int list)
{
	size_t i = 0, j = 0, rows = r != NULL ? (size_t)PQntuples(r) : 0;
	int failed = 0;

	memset(out, 0, sizeof(*out));
	while (i < migrate_embedded_count || j < rows) {
		const char *name = j < rows ? PQgetvalue(r, (int)j, 0) : NULL;
		int cmp = i == migrate_embedded_count ? 1
			  : name == NULL	      ? -1
						      : strcmp(migrate_embedded[i].name, name);
		const char *what;
		int breaking = 0;

		if (cmp < 0) {
			name = migrate_embedded[i++].name;
			what = "pending";
			out->pending++;
			migrate_note(out->pending_names, name);
		} else if (cmp > 0) {
			what = "unknown";
			out->unknown++;
			migrate_note(out->unknown_names, name);
			if (PQgetvalue(r, (int)j, 3)[0] == 't') {
				breaking = 1;
				out->breaking++;
				migrate_note(out->breaking_names, name);
			}
		} else if (strcmp(PQgetvalue(r, (int)j, 1), migrate_sums[i]) != 0) {
			i++;
			what = "changed";
			out->changed++;
			migrate_note(out->changed_names, name);
		} else {
			i++;
			what = "applied";
		}
		if (list)
			failed |= migrate_print(what, name,
						cmp < 0 ? NULL : PQgetvalue(r, (int)j, 2),
						breaking) < 0;
		if (cmp >= 0)
			j++;
	}
	out->state = migrate_state_of(out);
	return failed ? -1 : 0;
}

static int migrate_ok(PGconn *pg, PGresult *r, const char *what)
{
	ExecStatusType st = PQresultStatus(r);
	int ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;

	if (!ok) {
		char msg[512];
		snprintf(msg, sizeof(msg), "%s", PQerrorMessage(pg));
		msg[strcspn(msg, "\n")] = '\0';
		log_error("migrate: %s: %s", what, msg);
	}
	return ok;
}

static int migrate_exec(PGconn *pg, const char *sql, const char *what)
{
	PGresult *r = PQexec(pg, sql);
	int ok = migrate_ok(pg, r, what);

	PQclear(r);
	return ok ? 0 : -1;
}

/* Runs SQL on PG; the result, or NULL after logging. */
static PGresult *migrate_query(PGconn *pg, const char *sql, const char *what)
{
	PGresult *r = PQexec(pg, sql);

	if (migrate_ok(pg, r, what))
		return r;
	PQclear(r);
	return NULL;
}

/* Applies embedded migration I unless recorded; refuses a recorded one whose
 * checksum differs. */
static int migrate_apply(PGconn *pg, size_t i, int *applied)
{
	const struct migrate_embedded *m = &migrate_embedded[i];
	const char *v[] = { m->name, migrate_sums[i], migrate_breaking[i] ? "true" : "false" };
	PGresult *r = PQexecParams(pg, "SELECT checksum FROM schema_migrations WHERE name = $1", 1,
				   NULL, v, NULL, NULL, 0);

	*applied = 0;
	if (!migrate_ok(pg, r, m->name)) {
		PQclear(r);
		return -1;
	}
	if (PQntuples(r) == 1) {
		int same = strcmp(PQgetvalue(r, 0, 0), migrate_sums[i]) == 0;
		PQclear(r);
		if (!same) {
			log_error("migrate: %s was applied with other contents than this idemd "
				  "holds; add a new migration instead of editing an applied one",
				  m->name);
			return -1;
		}
		return 0;
	}
	PQclear(r);
	if (migrate_exec(pg, "BEGIN", "begin") < 0)
		return -1;
	if (migrate_exec(pg, (const char *)m->sql, m->name) < 0)
		goto fail;
	r = PQexecParams(pg,
			 "INSERT INTO schema_migrations(name, checksum, breaking) "
			 "VALUES ($1, $2, $3)",
			 3, NULL, v, NULL, NULL, 0);
	if (!migrate_ok(pg, r, m->name)) {
		PQclear(r);
		goto fail;
	}
	PQclear(r);
	if (migrate_exec(pg, "COMMIT", "commit") < 0)
		return -1;
	*applied = 1;
	log_info("migrate: applied %s%s", m->name,
		 migrate_breaking[i] ? " (breaking: older idemd binaries will refuse to serve)"
				     : "");
	return 0;
fail:
	(void)migrate_exec(pg, "ROLLBACK", "rollback");
	return -1;
}

int migrate_run(const char *conninfo)
{
	struct migrate_check chk;
	size_t done = 0;
	int ret = -1;
	PGconn *pg;
	PGresult *r;

	if (migrate_ready() < 0)
		return -1;
	pg = db_connect(conninfo);
	if (pg == NULL)
		return -1;
	if (migrate_exec(pg, "SET client_min_messages = warning", "settings") < 0 ||
	    migrate_exec(pg, "SELECT pg_advisory_lock(" MIGRATE_LOCK_KEY ")", "lock") < 0)
		goto out;
	if (migrate_exec(pg,
			 "CREATE TABLE IF NOT EXISTS schema_migrations ("
			 "name text PRIMARY KEY, checksum text NOT NULL, "
			 "applied_at timestamptz NOT NULL DEFAULT now())",
			 "schema_migrations") < 0 ||
	    migrate_exec(pg, MIGRATE_BREAKING_COLUMN_SQL, "schema_migrations.breaking") < 0)
		goto out;
	for (size_t i = 0; i < migrate_embedded_count; i++) {
		int applied;
		if (migrate_apply(pg, i, &applied) < 0)
			goto out;
		done += (size_t)applied;
	}
	log_info("migrate: %zu applied, %zu already current", done, migrate_embedded_count - done);
	/* migrations a newer idemd applied are fine (rolling upgrades), but worth a line */
	r = migrate_query(pg, MIGRATE_ROWS_SQL, "schema_migrations");
	if (r == NULL)
		goto out;
	(void)migrate_compare(r, &chk, 0);
	PQclear(r);
	if (chk.unknown > 0)
		log_warn("migrate: the database also holds %s, unknown to this idemd "
			 "(applied by a newer one)",
			 chk.unknown_names);
	if (chk.breaking > 0)
		log_warn("migrate: %s not backward-compatible: this idemd cannot serve the "
			 "database; run the newer idemd",
			 chk.breaking_names);
	ret = 0;
out:
	/* the lock ends with the session too; unlock for clarity */
	PQclear(PQexec(pg, "SELECT pg_advisory_unlock(" MIGRATE_LOCK_KEY ")"));
	PQfinish(pg);
	return ret;
}

int migrate_status(const char *conninfo)
{
	struct migrate_check chk;
	PGresult *r = NULL;
	PGconn *pg;
	int ret = -1;

	if (migrate_ready() < 0)
		return -1;
	pg = db_connect(conninfo);
	if (pg == NULL)
		return -1;
	r = migrate_query(pg, MIGRATE_EXISTS_SQL, "schema_migrations");
	if (r == NULL)
		goto out;
	int exists = PQgetvalue(r, 0, 0)[0] == 't';
	PQclear(r);
	r = NULL;
	if (exists) {
		r = migrate_query(pg, MIGRATE_ROWS_SQL, "schema_migrations");
		if (r == NULL)
			goto out;
	}
	if (migrate_compare(r, &chk, 1) < 0 || fflush(stdout) != 0) {
		log_error("migrate: cannot write the status to stdout");
		goto out;
	}
	log_info("migrate: %zu migrations compiled in; %zu pending, %zu changed, "
		 "%zu unknown (applied by a newer idemd), %zu of them breaking",
		 migrate_embedded_count, chk.pending, chk.changed, chk.unknown, chk.breaking);
	ret = chk.state == MIGRATE_CURRENT || chk.state == MIGRATE_AHEAD ? 0 : 1;
out:
	PQclear(r);
	PQfinish(pg);
	return ret;
}

int migrate_check(struct migrate_check *out)
{
	static const struct db_stmt st_rows = { 63, "migrations_applied", MIGRATE_ROWS_SQL, 0 };
	static const struct db_stmt st_exists = { 62, "migrations_table", MIGRATE_EXISTS_SQL, 0 };
	struct db_conn *c;
	PGresult *r;
	int exists;

	memset(out, 0, sizeof(*out));
	if (migrate_ready() < 0)
		return -1;
	c = db_acquire();
	if (c == NULL)
		return -1;
	r = db_exec(c, &st_exists, NULL, NULL, NULL);
	if (r == NULL) {
		db_release(c);
		return -1;
	}
	exists = PQgetvalue(r, 0, 0)[0] == 't';
	PQclear(r);
	r = NULL;
	if (exists) {
		r = db_exec(c, &st_rows, NULL, NULL, NULL);
		if (r == NULL) {
			db_release(c);
			return -1;
		}
	}
	db_release(c);
	(void)migrate_compare(r, out, 0);
	PQclear(r);
	return 0;
}
