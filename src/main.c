/* idemd: command-line entry point — arguments, signals, start and stop. */
#include <malloc.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "batcher.h"
#include "config.h"
#include "db.h"
#include "gateway.h"
#include "http.h"
#include "janitor.h"
#include "keys.h"
#include "log.h"
#include "migrate.h"
#include "store.h"
#include "tokenreq.h"

#define EXIT_USAGE 2

static const char usage[] =
	"usage: idemd [--config FILE] COMMAND\n"
	"\n"
	"commands:\n"
	"  serve               run the service (SIGTERM or SIGINT stops it cleanly)\n"
	"  migrate             apply pending migrations; create the master key file if missing\n"
	"  migrate --status    list migrations: applied, pending, or unknown (applied by a\n"
	"                      newer idemd); exit 0 when current or ahead, 1 when any pending\n"
	"  tenant create NAME  create a tenant; prints {\"tenant\",\"api_key\"}\n"
	"  keys rotate         make a new active signing key\n"
	"  check-config        validate the config file; exit 0 if valid, 2 if not\n"
	"\n"
	"options:\n"
	"  --config FILE       config file (default: $IDEMD_CONFIG, else ./idemd.json if present)\n"
	"  --help              show this help\n"
	"  --version           show the version\n"
	"\n"
	"environment: IDEMD_LISTEN and IDEMD_DATABASE_URL override the file.\n";

static int main_serve(const struct config *cfg)
{
	sigset_t set;
	int sig, ret = 1;

	/* every thread started below inherits the mask; main waits for signals */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	/* a dozen threads allocate: a few arenas hold less idle memory than
	 * glibc's default of eight per core, and thread caches keep malloc
	 * off their locks */
	mallopt(M_ARENA_MAX, 4);

	if (keys_init(cfg->master_key_file) < 0)
		return 1;
	db_use_prepared(cfg->prepared_statements);
	db_set_timeout(cfg->database_timeout_ms);
	if (db_pool_init(cfg->database_url, cfg->pool_size) < 0)
		goto keys;
	/* a schema ahead (migrations a newer idemd applied) is fine: rolling
	 * upgrades run old and new binaries side by side */
	struct migrate_check chk;
	if (migrate_check(&chk) < 0) {
		log_error("serve: the database cannot be reached");
		goto pool;
	}
	if (chk.state == MIGRATE_CHANGED) {
		log_error("serve: the database schema does not match this idemd: %s applied with "
			  "other contents", chk.changed_names);
		goto pool;
	}
	if (chk.state == MIGRATE_BEHIND) {
		log_error("serve: the database schema is behind: %s not applied; "
			  "run 'idemd migrate'", chk.pending_names);
		goto pool;
	}
	if (chk.state == MIGRATE_AHEAD)
		log_warn("serve: the database schema is ahead of this idemd: %s unknown "
			 "(applied by a newer idemd); starting anyway", chk.unknown_names);
	if (keys_refresh() < 0 || !keys_ready()) {
		log_error("serve: no signing key could be loaded; run 'idemd migrate' first");
		goto pool;
	}
	tokenreq_init(cfg);
	/* two batches in flight: one commits while the next gathers */
	if (batcher_start(cfg->pool_size < 2 ? 1 : 2) < 0)
		goto pool;
	if (gateway_start(cfg) < 0)
		goto batcher;
	if (http_start(cfg) < 0)
		goto gateway;
	if (janitor_start(cfg) < 0) {
		log_error("serve: cannot start the janitor thread");
		goto http;
	}
	sigwait(&set, &sig);
	log_info("serve: %s received, finishing in-flight requests", strsignal(sig));
	ret = 0;
	janitor_stop();
http:
	/* the order matters: no new requests; forwards in flight end and are
	 * answered (their connections resume); only then may the daemon stop,
	 * which libmicrohttpd refuses while any connection is suspended */
	http_quiesce();
	gateway_drain();
	http_stop();
gateway:
	gateway_stop();
batcher:
	batcher_stop();
pool:
	db_pool_close();
keys:
	keys_shutdown();
	if (ret == 0)
		log_info("serve: stopped");
	return ret;
}

static int main_migrate(const struct config *cfg, int status)
{
	int created;
	uint32_t id;

	/* reads only: no master key, no migration, no signing key */
	if (status)
		return migrate_status(cfg->database_url) == 0 ? 0 : 1;
	if (keys_master_create(cfg->master_key_file, &created) < 0)
		return 1;
	if (created)
		log_info("migrate: created master key file %s", cfg->master_key_file);
	if (migrate_run(cfg->database_url) < 0)
		return 1;
	if (keys_init(cfg->master_key_file) < 0 || db_pool_init(cfg->database_url, 1) < 0)
		return 1;
	int ret = 1;
	if (keys_create_first(&id) < 0)
		goto out;
	if (id > 0)
		log_info("migrate: created signing key %u", (unsigned)id);
	ret = 0;
out:
	db_pool_close();
	keys_shutdown();
	return ret;
}

static int main_tenant_create(const struct config *cfg, const char *name)
{
	char key[AUTH_KEY_CHARS + 8];
	uint8_t hash[32];
	uint32_t id;
	int exists, ret = 1;
	size_t n = strlen(name);

	if (n == 0 || n > 64 ||
	    strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != n) {
		fprintf(stderr, "idemd: tenant names are 1 to 64 characters of [A-Za-z0-9._-]\n");
		return EXIT_USAGE;
	}
	if (db_pool_init(cfg->database_url, 1) < 0)
		return 1;
	auth_key_generate(key, sizeof(key));
	auth_key_hash(key, strlen(key), hash);
	if (store_tenant_create(name, hash, &id, &exists) < 0) {
		fprintf(stderr, "idemd: could not create the tenant (is the database migrated?)\n");
		goto out;
	}
	if (exists) {
		fprintf(stderr, "idemd: tenant %s already exists\n", name);
		goto out;
	}
	printf("{\"tenant\":\"%s\",\"api_key\":\"%s\"}\n", name, key);
	ret = fflush(stdout) == 0 ? 0 : 1;
out:
	sodium_memzero(key, sizeof(key));
	db_pool_close();
	return ret;
}

static int main_keys_rotate(const struct config *cfg)
{
	uint32_t id;
	int ret = 1;

	if (keys_init(cfg->master_key_file) < 0)
		return 1;
	if (db_pool_init(cfg->database_url, 1) < 0)
		goto out;
	if (keys_rotate(&id) < 0) {
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

int main(int argc, char **argv)
{
	const char *config_path = getenv("IDEMD_CONFIG");
	const char *args[4] = { NULL };
	int nargs = 0, status = 0;
	char err[512];
	struct config cfg;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			fputs(usage, stdout);
			return 0;
		}
		if (strcmp(argv[i], "--version") == 0) {
			printf("idemd %s\n", IDEMD_VERSION);
			return 0;
		}
		if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
			config_path = argv[++i];
		} else if (strncmp(argv[i], "--config=", 9) == 0) {
			config_path = argv[i] + 9;
		} else if (strcmp(argv[i], "--status") == 0) {
			status = 1;
		} else if (argv[i][0] == '-' || nargs == 3) {
			fprintf(stderr, "idemd: unexpected argument %s\n\n%s", argv[i], usage);
			return EXIT_USAGE;
		} else {
			args[nargs++] = argv[i];
		}
	}
	if (nargs == 0) {
		fputs(usage, stderr);
		return EXIT_USAGE;
	}
	if (config_path == NULL && access("idemd.json", F_OK) == 0)
		config_path = "idemd.json";

	const char *cmd = args[0];
	if (status && !(strcmp(cmd, "migrate") == 0 && nargs == 1)) {
		fprintf(stderr, "idemd: --status goes only with migrate, alone\n\n%s", usage);
		return EXIT_USAGE;
	}
	int known = (strcmp(cmd, "serve") == 0 && nargs == 1) ||
		    (strcmp(cmd, "migrate") == 0 && nargs == 1) ||
		    (strcmp(cmd, "check-config") == 0 && nargs == 1) ||
		    (strcmp(cmd, "tenant") == 0 && nargs == 3 && strcmp(args[1], "create") == 0) ||
		    (strcmp(cmd, "keys") == 0 && nargs == 2 && strcmp(args[1], "rotate") == 0);
	if (!known) {
		fprintf(stderr, "idemd: unknown command\n\n%s", usage);
		return EXIT_USAGE;
	}
	if (sodium_init() < 0) {
		fprintf(stderr, "idemd: libsodium could not be initialised\n");
		return 1;
	}
	if (config_load(&cfg, config_path, err, sizeof(err)) < 0) {
		fprintf(stderr, "idemd: %s\n", err);
		return EXIT_USAGE;
	}
	signal(SIGPIPE, SIG_IGN);

	int ret;
	if (strcmp(cmd, "check-config") == 0) {
		fprintf(stderr, "idemd: %s is valid\n", config_path ? config_path : "the configuration");
		ret = 0;
	} else if (strcmp(cmd, "serve") == 0) {
		ret = main_serve(&cfg);
	} else if (strcmp(cmd, "migrate") == 0) {
		ret = main_migrate(&cfg, status);
	} else if (strcmp(cmd, "tenant") == 0) {
		ret = main_tenant_create(&cfg, args[2]);
	} else {
		ret = main_keys_rotate(&cfg);
	}
	config_free(&cfg);
	return ret;
}
