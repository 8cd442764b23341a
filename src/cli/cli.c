/* idemd's operator subcommands (see cli.h): the database and key work
 * behind migrate, tenant ..., keys rotate and master-key rotate. */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "db.h"
#include "keys.h"
#include "log.h"
#include "migrate.h"
#include "store.h"
#include "utf8.h"

/* The master key file the config names (FILE), missing: created when the
 * database holds no signing key (NKEYS); else it must be copied from
 * another instance. 0, 1, or EXIT_USAGE (said why; nothing written). */
static int cli_migrate_new_master(const char *file, int64_t nkeys)
{
	int created;

	if (nkeys > 0) {
		/* a fresh key would seal nothing the database holds, and
		 * instances made with it could not verify each other's tokens */
		fprintf(stderr,
			"idemd: migrate: the master key file %s is missing, but the "
			"database holds %" PRId64 " signing key(s) sealed under a master key: "
			"copy that file from an instance that has it (every instance must use "
			"the same one); nothing was written\n",
			file, nkeys);
		return EXIT_USAGE;
	}
	if (keys_master_create(file, &created) < 0)
		return 1;
	if (created)
		log_info("migrate: created master key file %s", file);
	return 0;
}

/* Whether the master key (from WHERE) opens the NKEYS signing keys the
 * database holds: 0, 1, or EXIT_USAGE when it is another one (said why;
 * nothing written). */
static int cli_migrate_keys_open(const char *where, int64_t nkeys)
{
	if (nkeys <= 0)
		return 0;
	int rc = keys_check();
	if (rc == KEYS_WRONG_MASTER) {
		fprintf(stderr,
			"idemd: migrate: %s cannot open the database's signing keys; "
			"use the master key the other instances use; nothing was written\n",
			where);
		return EXIT_USAGE;
	}
	return rc < 0 ? 1 : 0;
}

int cli_migrate(const struct config *cfg, int status)
{
	const char *where;
	int64_t nkeys = 0;
	uint32_t id;
	int rc, ret = 1;

	/* reads only: no master key, no migration, no signing key */
	if (status)
		return migrate_status(cfg->database_url) == 0 ? 0 : 1;
	enum keys_source src = keys_master_source(cfg->master_key_file, &where);
	if (db_pool_init(cfg->database_url, 1) < 0)
		return 1;
	if (store_keys_count(&nkeys) < 0) {
		fprintf(stderr, "idemd: migrate: the database cannot be read\n");
		goto out;
	}
	if (src == KEYS_SRC_FILE && access(cfg->master_key_file, F_OK) != 0 && errno == ENOENT) {
		rc = cli_migrate_new_master(cfg->master_key_file, nkeys);
		if (rc != 0) {
			ret = rc;
			goto out;
		}
	}
	if (keys_init(cfg->master_key_file) < 0)
		goto out;
	rc = cli_migrate_keys_open(where, nkeys);
	if (rc != 0) {
		ret = rc;
		goto keys;
	}
	if (migrate_run(cfg->database_url) < 0)
		goto keys;
	if (keys_create_first(&id) < 0)
		goto keys;
	if (id > 0)
		log_info("migrate: created signing key %u", (unsigned)id);
	ret = 0;
keys:
	keys_shutdown();
out:
	db_pool_close();
	return ret;
}

/* 1 when NAME is a valid tenant name, else says why (exit 2 follows). */
static int cli_tenant_name_ok(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > 64 ||
	    strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") !=
		    n) {
		fprintf(stderr,
			"idemd: tenant names are 1 to 64 characters of [A-Za-z0-9._-], "
			"not '%s'\n",
			name);
		return 0;
	}
	return 1;
}

/* Prints {"tenant","api_key","key_id"}; 0 or 1. */
static int cli_print_new_key(const char *name, const char *key, uint32_t key_id)
{
	printf("{\"tenant\":\"%s\",\"api_key\":\"%s\",\"key_id\":%" PRIu32 "}\n", name, key,
	       key_id);
	return fflush(stdout) == 0 ? 0 : 1;
}

/* Where a new key's hash goes: into a new tenant NAME, or beside NAME's
 * keys. 0, or -1 when the database could not be asked; *REFUSED says why
 * nothing was stored (the tenant exists, or there is none). */
typedef int (*cli_key_store_fn)(const char *name, const uint8_t hash[32], uint32_t *key_id,
				int *refused);

static int cli_store_tenant(const char *name, const uint8_t hash[32], uint32_t *key_id,
			    int *refused)
{
	uint32_t id;

	return store_tenant_create(name, hash, &id, key_id, refused);
}

static int cli_store_key(const char *name, const uint8_t hash[32], uint32_t *key_id, int *refused)
{
	int found;
	int rc = store_api_key_add(name, hash, key_id, &found);

	*refused = !found;
	return rc;
}

/* Makes a new API key, has STORE keep its hash for tenant NAME and prints
 * it; FAILED, or NOT_BEFORE NAME NOT_AFTER when refused, says what went
 * wrong. The key and its hash are wiped. 0 or 1. */
static int cli_new_key(const struct config *cfg, const char *name, cli_key_store_fn store,
		       const char *failed, const char *not_before, const char *not_after)
{
	char key[AUTH_KEY_CHARS + 8];
	uint8_t hash[32];
	uint32_t key_id;
	int refused, ret = 1;

	if (db_pool_init(cfg->database_url, 1) < 0)
		return 1;
	auth_key_generate(key, sizeof(key));
	auth_key_hash(key, strlen(key), hash);
	if (store(name, hash, &key_id, &refused) < 0)
		fprintf(stderr, "idemd: %s (is the database migrated?)\n", failed);
	else if (refused)
		fprintf(stderr, "idemd: %s%s%s\n", not_before, name, not_after);
	else
		ret = cli_print_new_key(name, key, key_id);
	sodium_memzero(key, sizeof(key));
	sodium_memzero(hash, sizeof(hash));
	db_pool_close();
	return ret;
}

int cli_tenant_create(const struct config *cfg, const char *name)
{
	if (!cli_tenant_name_ok(name))
		return EXIT_USAGE;
	return cli_new_key(cfg, name, cli_store_tenant, "could not create the tenant", "tenant ",
			   " already exists");
}

int cli_tenant_list(const struct config *cfg)
{
	struct tenant_info *t = NULL;
	size_t n = 0;
	int ret = 1;

	if (db_pool_init(cfg->database_url, 1) < 0)
		return 1;
	if (store_tenant_list(&t, &n) < 0) {
		fprintf(stderr, "idemd: could not list the tenants (is the database migrated?)\n");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		char at[32];
		struct tm tm;
		time_t secs = (time_t)t[i].ti_created_at;
		json_t *ids = json_array();
		if (ids == NULL || gmtime_r(&secs, &tm) == NULL) {
			json_decref(ids);
			goto out;
		}
		strftime(at, sizeof(at), "%Y-%m-%dT%H:%M:%SZ", &tm);
		for (size_t k = 0; k < t[i].ti_nkeys; k++)
			json_array_append_new(ids, json_integer(t[i].ti_key_ids[k]));
		json_t *o = json_pack("{s:s, s:s, s:o}", "tenant", t[i].ti_name, "created_at", at,
				      "key_ids", ids);
		char *raw = o != NULL ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
		/* no control character of a name reaches the terminal */
		char *line = raw != NULL ? utf8_escape_controls(raw, UTF8_ESCAPE_JSON) : NULL;
		free(raw);
		json_decref(o);
		if (line == NULL)
			goto out;
		puts(line);
		free(line);
	}
	ret = fflush(stdout) == 0 ? 0 : 1;
out:
	store_tenants_free(t, n);
	db_pool_close();
	return ret;
}

int cli_tenant_delete(const struct config *cfg, const char *name)
{
	int found, ret = 1;

	if (db_pool_init(cfg->database_url, 1) < 0)
		return 1;
	if (store_tenant_delete(name, &found) < 0) {
		fprintf(stderr, "idemd: could not delete the tenant (is the database migrated?)\n");
		goto out;
	}
	if (!found) {
		fprintf(stderr, "idemd: no tenant named '%s'; nothing deleted\n", name);
		goto out;
	}
	printf("{\"tenant\":\"%s\",\"deleted\":true}\n", name);
	ret = fflush(stdout) == 0 ? 0 : 1;
out:
	db_pool_close();
	return ret;
}

int cli_tenant_key_add(const struct config *cfg, const char *name)
{
	return cli_new_key(cfg, name, cli_store_key, "could not add the key", "no tenant named '",
			   "'; no key added");
}

int cli_tenant_key_revoke(const struct config *cfg, const char *name, uint32_t key_id)
{
	int tenant_found, key_found, ret = 1;

	if (db_pool_init(cfg->database_url, 1) < 0)
		return 1;
	if (store_api_key_revoke(name, key_id, &tenant_found, &key_found) < 0) {
		fprintf(stderr, "idemd: could not revoke the key (is the database migrated?)\n");
		goto out;
	}
	if (!tenant_found) {
		fprintf(stderr, "idemd: no tenant named '%s'; nothing revoked\n", name);
		goto out;
	}
	if (!key_found) {
		fprintf(stderr, "idemd: tenant '%s' has no API key %" PRIu32 "; nothing revoked\n",
			name, key_id);
		goto out;
	}
	printf("{\"tenant\":\"%s\",\"key_id\":%" PRIu32 ",\"revoked\":true}\n", name, key_id);
	ret = fflush(stdout) == 0 ? 0 : 1;
out:
	db_pool_close();
	return ret;
}

int cli_keys_rotate(const struct config *cfg)
{
	const char *where;
	uint32_t id;
	int ret = 1;

	if (keys_init(cfg->master_key_file) < 0)
		return 1;
	if (db_pool_init(cfg->database_url, 1) < 0)
		goto out;
	int rc = keys_rotate(&id);
	if (rc == KEYS_WRONG_MASTER) {
		(void)keys_master_source(cfg->master_key_file, &where);
		fprintf(stderr,
			"idemd: keys rotate: %s cannot open the active signing key; use the "
			"master key the other instances use; nothing was written\n",
			where);
		ret = EXIT_USAGE;
		goto pool;
	}
	if (rc < 0) {
		fprintf(stderr, "idemd: could not rotate the signing key\n");
		goto pool;
	}
	printf("{\"key_id\":%u}\n", (unsigned)id);
	ret = 0;
pool:
	db_pool_close();
out:
	keys_shutdown();
	return ret;
}

int cli_master_key_rotate(const struct config *cfg, const char *new_file)
{
	const char *where;
	size_t n;
	int created, ret = 1;

	if (keys_init(cfg->master_key_file) < 0)
		return 1;
	(void)keys_master_source(cfg->master_key_file, &where);
	if (db_pool_init(cfg->database_url, 1) < 0)
		goto out;
	int rc = keys_master_rotate(new_file, &created, &n);
	if (rc == KEYS_WRONG_MASTER) {
		fprintf(stderr, "idemd: master-key rotate: nothing was changed\n");
		ret = EXIT_USAGE;
		goto pool;
	}
	if (rc < 0) {
		fprintf(stderr, "idemd: master-key rotate: the signing keys were not re-sealed%s\n",
			created ? " (the new master key file was created and may be deleted)" : "");
		goto pool;
	}
	printf("{\"resealed\":%zu,\"master_key_file\":\"%s\"}\n", n, new_file);
	fprintf(stderr,
		"idemd: every signing key is now sealed under %s%s; give every instance "
		"that file as its master key (running ones go on with the keys they hold) and then "
		"destroy %s\n",
		new_file, created ? " (a new random key)" : "", where);
	ret = fflush(stdout) == 0 ? 0 : 1;
pool:
	db_pool_close();
out:
	keys_shutdown();
	return ret;
}

int cli_check_routes(const struct config *cfg)
{
	int ret = 0;

	if (cfg->n_routes == 0)
		return 0;
	if (db_pool_init(cfg->database_url, 1) < 0)
		return 1;
	for (size_t i = 0; i < cfg->n_routes; i++) {
		const struct config_route *r = &cfg->routes[i];
		uint32_t tenant_id;
		int found;
		if (store_tenant_by_name(r->tenant, &tenant_id, &found) < 0) {
			fprintf(stderr,
				"idemd: the database could not be read (unreachable or not migrated): the routes' "
				"tenants were not checked (serve checks them at start)\n");
			break;
		}
		if (!found) {
			fprintf(stderr,
				"idemd: routes[%zu] (%s %s) names tenant \"%s\", which does not "
				"exist; create it with 'idemd tenant create %s' or fix the config\n",
				i, r->method, r->path, r->tenant, r->tenant);
			ret = EXIT_USAGE;
		}
	}
	db_pool_close();
	return ret;
}
