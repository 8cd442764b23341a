/* Migrations. Each file runs in its own transaction; the whole run holds a
 * session advisory lock so concurrent migrators apply each file once. */
#include "migrate.h"

#include <dirent.h>
#include <errno.h>
#include <libpq-fe.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "log.h"

#ifndef IDEMD_MIGRATIONS_DIR
#define IDEMD_MIGRATIONS_DIR "migrations"
#endif

#define MIGRATE_LOCK_KEY "7428136"
#define MIGRATE_MAX_FILES 1000
#define MIGRATE_MAX_BYTES (4 * 1024 * 1024)

struct migrate_file {
	char name[256];
	char checksum[2 * 32 + 1];
	char *sql;
};

const char *migrate_dir(void)
{
	const char *dir = getenv("IDEMD_MIGRATIONS_DIR");

	return dir != NULL && *dir != '\0' ? dir : IDEMD_MIGRATIONS_DIR;
}

static int migrate_name_ok(const char *name)
{
	size_t n = strlen(name);

	return n > 9 && n < 200 && strspn(name, "0123456789") == 4 && name[4] == '_' &&
	       strcmp(name + n - 4, ".sql") == 0;
}

static int migrate_cmp(const void *a, const void *b)
{
	return strcmp(((const struct migrate_file *)a)->name, ((const struct migrate_file *)b)->name);
}

static void migrate_files_free(struct migrate_file *files, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(files[i].sql);
	free(files);
}

static char *migrate_read(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;

	if (f == NULL)
		return NULL;
	buf = malloc(MIGRATE_MAX_BYTES + 1);
	if (buf != NULL) {
		*len = fread(buf, 1, MIGRATE_MAX_BYTES + 1, f);
		if (ferror(f) || *len > MIGRATE_MAX_BYTES) {
			free(buf);
			buf = NULL;
		} else {
			buf[*len] = '\0';
		}
	}
	fclose(f);
	return buf;
}

/* Lists the migration files, sorted, with contents and checksums. */
static int migrate_files(struct migrate_file **out, size_t *count)
{
	const char *dir = migrate_dir();
	DIR *d = opendir(dir);
	struct migrate_file *files = NULL;
	size_t n = 0;
	struct dirent *e;

	if (d == NULL) {
		log_error("migrate: cannot open %s: %s", dir, strerror(errno));
		return -1;
	}
	files = calloc(MIGRATE_MAX_FILES, sizeof(*files));
	if (files == NULL) {
		closedir(d);
		return -1;
	}
	while ((e = readdir(d)) != NULL) {
		if (!migrate_name_ok(e->d_name) || n == MIGRATE_MAX_FILES)
			continue;
		char path[4096];
		size_t len = 0;
		uint8_t hash[32];
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		snprintf(files[n].name, sizeof(files[n].name), "%s", e->d_name);
		files[n].sql = migrate_read(path, &len);
		if (files[n].sql == NULL) {
			log_error("migrate: cannot read %s", path);
			closedir(d);
			migrate_files_free(files, n);
			return -1;
		}
		crypto_generichash(hash, sizeof(hash), (unsigned char *)files[n].sql, len, NULL, 0);
		sodium_bin2hex(files[n].checksum, sizeof(files[n].checksum), hash, sizeof(hash));
		n++;
	}
	closedir(d);
	qsort(files, n, sizeof(*files), migrate_cmp);
	*out = files;
	*count = n;
	return 0;
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

/* Applies FILE unless recorded; refuses a recorded file whose checksum changed. */
static int migrate_apply(PGconn *pg, const struct migrate_file *file, int *applied)
{
	const char *v[] = { file->name, file->checksum };
	PGresult *r = PQexecParams(pg, "SELECT checksum FROM schema_migrations WHERE name = $1",
				   1, NULL, v, NULL, NULL, 0);

	*applied = 0;
	if (!migrate_ok(pg, r, file->name)) {
		PQclear(r);
		return -1;
	}
	if (PQntuples(r) == 1) {
		int same = strcmp(PQgetvalue(r, 0, 0), file->checksum) == 0;
		PQclear(r);
		if (!same) {
			log_error("migrate: %s was changed after it was applied; "
				  "add a new migration instead of editing an applied one", file->name);
			return -1;
		}
		return 0;
	}
	PQclear(r);
	if (migrate_exec(pg, "BEGIN", "begin") < 0)
		return -1;
	if (migrate_exec(pg, file->sql, file->name) < 0)
		goto fail;
	r = PQexecParams(pg, "INSERT INTO schema_migrations(name, checksum) VALUES ($1, $2)",
			 2, NULL, v, NULL, NULL, 0);
	if (!migrate_ok(pg, r, file->name)) {
		PQclear(r);
		goto fail;
	}
	PQclear(r);
	if (migrate_exec(pg, "COMMIT", "commit") < 0)
		return -1;
	*applied = 1;
	log_info("migrate: applied %s", file->name);
	return 0;
fail:
	(void)migrate_exec(pg, "ROLLBACK", "rollback");
	return -1;
}

int migrate_run(const char *conninfo)
{
	struct migrate_file *files = NULL;
	size_t n = 0, done = 0;
	int ret = -1;
	PGconn *pg;

	if (migrate_files(&files, &n) < 0)
		return -1;
	pg = db_connect(conninfo);
	if (pg == NULL)
		goto out;
	if (migrate_exec(pg, "SET client_min_messages = warning", "settings") < 0 ||
	    migrate_exec(pg, "SELECT pg_advisory_lock(" MIGRATE_LOCK_KEY ")", "lock") < 0)
		goto out;
	if (migrate_exec(pg, "CREATE TABLE IF NOT EXISTS schema_migrations ("
			     "name text PRIMARY KEY, checksum text NOT NULL, "
			     "applied_at timestamptz NOT NULL DEFAULT now())", "schema_migrations") < 0)
		goto out;
	for (size_t i = 0; i < n; i++) {
		int applied;
		if (migrate_apply(pg, &files[i], &applied) < 0)
			goto out;
		done += (size_t)applied;
	}
	log_info("migrate: %zu applied, %zu already current", done, n - done);
	ret = 0;
out:
	if (pg != NULL) {
		/* the lock ends with the session too; unlock for clarity */
		PQclear(PQexec(pg, "SELECT pg_advisory_unlock(" MIGRATE_LOCK_KEY ")"));
		PQfinish(pg);
	}
	migrate_files_free(files, n);
	return ret;
}

int migrate_schema_current(void)
{
	static const struct db_stmt st_applied = { 63, "migrations_applied",
		"SELECT name, checksum FROM schema_migrations WHERE to_regclass('schema_migrations') "
		"IS NOT NULL ORDER BY name", 0 };
	static const struct db_stmt st_exists = { 62, "migrations_table",
		"SELECT to_regclass('schema_migrations') IS NOT NULL", 0 };
	struct migrate_file *files = NULL;
	size_t n = 0;
	int ret = -1;

	if (migrate_files(&files, &n) < 0)
		return 0;
	struct db_conn *c = db_acquire();
	if (c == NULL)
		goto out;
	PGresult *r = db_exec(c, &st_exists, NULL, NULL, NULL);
	if (r == NULL)
		goto release;
	int exists = PQgetvalue(r, 0, 0)[0] == 't';
	PQclear(r);
	if (!exists) {
		ret = 0;
		goto release;
	}
	r = db_exec(c, &st_applied, NULL, NULL, NULL);
	if (r == NULL)
		goto release;
	ret = (size_t)PQntuples(r) == n;
	for (size_t i = 0; ret == 1 && i < n; i++)
		ret = strcmp(PQgetvalue(r, (int)i, 0), files[i].name) == 0 &&
		      strcmp(PQgetvalue(r, (int)i, 1), files[i].checksum) == 0;
	PQclear(r);
release:
	db_release(c);
out:
	migrate_files_free(files, n);
	return ret;
}
