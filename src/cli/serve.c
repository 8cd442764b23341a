/* idemd serve: waits for the database, starts every part in order, then
 * waits for a signal: SIGHUP reloads the config, SIGTERM or SIGINT stops
 * every part in the reverse order (ARCHITECTURE.md, "Threads"). */
#include "serve.h"

#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <time.h>
#include <stdarg.h>
#include <stddef.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "auth.h"
#include "cli.h"
#include "batcher.h"
#include "config.h"
#include "db.h"
#include "gateway.h"
#include "http.h"
#include "janitor.h"
#include "jsonmem.h"
#include "keys.h"
#include "log.h"
#include "metrics.h"
#include "migrate.h"
#include "readers.h"
#include "replaycount.h"
#include "routes.h"
#include "store_fence.h"
#include "waiters.h"
#include "engine.h"

/* The config file serve was started from (NULL: defaults and environment);
 * the config SIGHUP loaded last (NULL: the one serve started with, which
 * main owns); and the configs it replaced, freed once no request can read
 * them: SERVE_RETIRED waits for the next grace period, SERVE_GRACE for the
 * one running (http_grace_begin). Reloads are unbounded; what they replace
 * is freed within a second of the last request that began before. */
static const char *serve_config_path;
static struct config *serve_current;
struct serve_retired {
	struct config *sr_cfg;
	struct serve_retired *sr_next;
};
static struct serve_retired *serve_retired, *serve_grace;
static long serve_generation = 1, serve_n_retired;

static void serve_free_retired(struct serve_retired *r)
{
	while (r != NULL) {
		struct serve_retired *next = r->sr_next;
		config_free(r->sr_cfg);
		free(r->sr_cfg);
		free(r);
		serve_n_retired--;
		r = next;
	}
}

/* Main thread, each second and after each reload: frees what the running
 * grace period waited for once it is done (the configs, and the route
 * tables, router sets and CORS sets built from them: http_grace_done), and
 * gives the memory back to the system, then starts the next grace period
 * for what was replaced since. */
static void serve_reclaim(void)
{
	if (serve_grace != NULL && http_grace_done()) {
		serve_free_retired(serve_grace);
		serve_grace = NULL;
		malloc_trim(0);
	}
	if (serve_grace == NULL && serve_retired != NULL) {
		serve_grace = serve_retired;
		serve_retired = NULL;
		http_grace_begin();
	}
	metrics_config_retired(serve_n_retired);
}

/* Puts the config that NEXT replaced on the retired list (the start one
 * stays: main owns it). */
static void serve_retire(struct config *next)
{
	struct serve_retired *r = serve_current != NULL ? malloc(sizeof(*r)) : NULL;

	if (r != NULL) {
		r->sr_cfg = serve_current;
		r->sr_next = serve_retired;
		serve_retired = r;
		serve_n_retired++;
	}
	/* out of memory for the list entry: the old config stays, unfreed */
	serve_current = next;
}

/* SIGHUP: reads the config file again and puts into force what may change
 * live (routes, cors_origins, log_level, quotas, body limits); a file that
 * fails as a whole changes nothing. One log line either way. */
static void serve_reload(const struct config **live)
{
	char changed[512], err[512];
	struct config *next;

	if (serve_config_path == NULL) {
		log_warn("serve: SIGHUP: started without a config file, nothing to reload");
		return;
	}
	if ((next = calloc(1, sizeof(*next))) == NULL)
		return;
	if (config_reload(next, *live, serve_config_path, changed, sizeof(changed), err,
			  sizeof(err)) < 0) {
		log_error("serve: reload of %s refused, the running configuration stays: %s",
			  serve_config_path, err);
		free(next);
		metrics_config_reloaded(serve_generation, 0, time(NULL));
		return;
	}
	if (gateway_reload(next) < 0) {
		log_error("serve: reload of %s refused (its routes), the running configuration "
			  "stays",
			  serve_config_path);
		config_free(next);
		free(next);
		metrics_config_reloaded(serve_generation, 0, time(NULL));
		return;
	}
	http_reload(next);
	engine_init(next);
	enum log_level level;
	if (log_level_parse(next->log_level, &level) == 0)
		log_min_level = level;
	serve_retire(next);
	*live = next;
	metrics_config_reloaded(++serve_generation, 1, time(NULL));
	/* written whatever log_level says: an operator who sent SIGHUP must
	 * see that it took effect */
	if (changed[0] != '\0')
		log_always(LOG_LEVEL_WARN,
			   "serve: reloaded %s (generation %ld); these change only with a restart "
			   "and keep their running values: %s",
			   serve_config_path, serve_generation, changed);
	else
		log_always(LOG_LEVEL_INFO, "serve: reloaded %s (generation %ld)", serve_config_path,
			   serve_generation);
}

/* Reads the schema's state into CHK, waiting for an unreachable database
 * up to database_wait_seconds with backoff (250 ms doubling to 2 s) and one
 * log line every 5 s; SIGTERM or SIGINT (blocked, in SET) ends the wait.
 * 0, or after logging -1 (not reached), -2 (refused: configuration). */
static int serve_wait_database(const struct config *cfg, const sigset_t *set,
			       struct migrate_check *chk)
{
	struct timespec t0, now;
	long waited_ms = 0, said_ms = -5000, pause_ms = 250;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	int rc;
	while ((rc = migrate_check(chk)) < 0) {
		/* a server that answered and refused (a wrong password, no such
		 * database or role) is a configuration error: no waiting for it */
		const char *why = db_last_error();
		if (strstr(why, "authentication failed") != NULL || strstr(why, "does not exist")) {
			log_error("serve: the database refused the connection (%s); check "
				  "database_url",
				  why);
			rc = -2;
			break;
		}
		if (waited_ms >= (long)cfg->database_wait_seconds * 1000) {
			log_error("serve: the database could not be reached in %d s (%s); giving "
				  "up",
				  cfg->database_wait_seconds, db_last_error());
			break;
		}
		if (waited_ms - said_ms >= 5000) {
			said_ms = waited_ms;
			log_warn("serve: waiting for the database (%ld s of at most %d): %s",
				 waited_ms / 1000, cfg->database_wait_seconds, db_last_error());
		}
		struct timespec pause = { pause_ms / 1000, (pause_ms % 1000) * 1000000L };
		int sig = sigtimedwait(set, NULL, &pause);
		if (sig == SIGTERM || sig == SIGINT) {
			log_info("serve: stopped while waiting for the database");
			break;
		}
		pause_ms = pause_ms < 2000 ? pause_ms * 2 : 2000;
		clock_gettime(CLOCK_MONOTONIC, &now);
		waited_ms = (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
	}
	db_set_quiet(0);
	if (rc == 0 && waited_ms > 0)
		log_info("serve: the database answered after %ld s", waited_ms / 1000);
	return rc;
}

/* Whether this binary may run on the schema CHK describes: 0 (a schema
 * ahead, migrations a newer idemd applied, is fine: rolling upgrades run
 * old and new binaries side by side), -1, or -2 when restarting cannot
 * help (exit 2). */
static int serve_check_schema(const struct migrate_check *chk)
{
	switch (chk->state) {
	case MIGRATE_CHANGED:
		log_error("serve: the database schema does not match this idemd: %s applied with "
			  "other contents",
			  chk->changed_names);
		return -1;
	case MIGRATE_BEHIND:
		log_error("serve: the database schema is behind: %s not applied; "
			  "run 'idemd migrate'",
			  chk->pending_names);
		return -1;
	case MIGRATE_TOO_OLD:
		/* a newer idemd applied a migration marked breaking: this binary
		 * would misread the schema */
		log_error("serve: refusing to start: the database holds %s, applied by a newer "
			  "idemd and marked breaking (not backward-compatible); this idemd is too "
			  "old for the schema: run the newer idemd",
			  chk->breaking_names);
		return -2;
	case MIGRATE_AHEAD:
		log_warn("serve: the database schema is ahead of this idemd: %s unknown "
			 "(applied by a newer idemd); starting anyway",
			 chk->unknown_names);
		return 0;
	default:
		return 0;
	}
}

/* The signing keys loaded: 0, -1, or -2 when the master key is not the
 * one the other instances use (exit 2). */
static int serve_load_keys(const struct config *cfg)
{
	int krc = keys_refresh();

	if (krc == KEYS_WRONG_MASTER) {
		const char *where;
		(void)keys_master_source(cfg->master_key_file, &where);
		log_error("serve: refusing to start: %s cannot open the signing keys; use the "
			  "master key the other instances use",
			  where);
		return -2;
	}
	if (krc < 0 || !keys_ready()) {
		log_error("serve: no signing key could be loaded; run 'idemd migrate' first");
		return -1;
	}
	return 0;
}

/* Until SIGTERM or SIGINT (returned): SIGHUP reloads the config file
 * (what may change live; the rest is named and keeps its running value),
 * and each second the configs a reload replaced are reclaimed. */
static int serve_wait_signals(const struct config *cfg, const sigset_t *set)
{
	const struct config *live = cfg;
	const struct timespec tick = { 1, 0 };
	int sig;

	for (;;) {
		sig = sigtimedwait(set, NULL, &tick);
		if (sig == SIGHUP)
			serve_reload(&live);
		else if (sig == SIGTERM || sig == SIGINT)
			return sig;
		serve_reclaim();
	}
}

/* Frees the configs reloads made; every request has ended (http_stop),
 * so nothing reads them. */
static void serve_free_configs(void)
{
	serve_free_retired(serve_grace);
	serve_free_retired(serve_retired);
	serve_grace = serve_retired = NULL;
	if (serve_current != NULL) {
		config_free(serve_current);
		free(serve_current);
		serve_current = NULL;
	}
}

/* How far serve_start() got: what serve_stop() must stop. */
enum serve_up {
	SERVE_UP_NONE,
	SERVE_UP_BATCHER,
	SERVE_UP_WAITERS,
	SERVE_UP_FENCE,
	SERVE_UP_GATEWAY,
	SERVE_UP_HTTP
};

/* Starts the engine, its threads and the listener, in order, *UP saying
 * how far it got; 0 when all run (the janitor last), else -1. */
static int serve_start(const struct config *cfg, enum serve_up *up)
{
	engine_init(cfg);
	metrics_init(cfg);
	routes_init();
	/* one clock: the database's, before the first request is timed; while
	 * it cannot be read the host's stands in, until the janitor's next
	 * reading (every second) */
	if (janitor_measure_clock() != 0)
		log_debug("serve: the database's clock could not be read yet");
	/* two batches in flight: one commits while the next gathers */
	if (batcher_start(cfg->pool_size < 2 ? 1 : 2) < 0)
		return -1;
	*up = SERVE_UP_BATCHER;
	if (waiters_start(cfg) < 0)
		return -1;
	*up = SERVE_UP_WAITERS;
	/* what the gateway forwards is held by this process's fence session: a
	 * real session, so it goes where the LISTEN session goes */
	if (store_fence_start(cfg->listen_database_url != NULL ? cfg->listen_database_url
							       : cfg->database_url) < 0) {
		log_error("serve: cannot start the fence thread");
		return -1;
	}
	*up = SERVE_UP_FENCE;
	if (gateway_start(cfg) < 0)
		return -1;
	*up = SERVE_UP_GATEWAY;
	if (replaycount_start() < 0) {
		log_error("serve: cannot start the replay count thread");
		return -1;
	}
	if (readers_start() < 0)
		return -1;
	/* every API key in memory before the first request: a genuine key
	 * never waits on the rate-limited lookup of unknown ones */
	if (auth_refresh() < 0)
		log_warn("serve: could not read the API keys; each is looked up on its first "
			 "use until the janitor reads them");
	if (http_start(cfg) < 0)
		return -1;
	*up = SERVE_UP_HTTP;
	if (janitor_start(cfg) < 0) {
		log_error("serve: cannot start the janitor thread");
		return -1;
	}
	return 0;
}

/* Stops, in order, what serve_start() started (UP), the janitor aside. */
static void serve_stop(enum serve_up up)
{
	switch (up) {
	case SERVE_UP_HTTP:
		/* the order matters: no new requests; forwards in flight end and
		 * are answered (their connections resume); only then may the
		 * daemon stop, which libmicrohttpd refuses while any connection
		 * is suspended; waiting duplicates get their 409 first */
		http_quiesce();
		waiters_drain();
		gateway_drain();
		if (http_stop() < 0) {
			/* connections still suspended hold jobs that may run: free
			 * nothing under them; the replay counts are written, then
			 * the process ends here */
			replaycount_stop();
			log_error("serve: stopping without teardown: requests were still in "
				  "flight");
			log_flush();
			_exit(1);
		}
		/* fall through */
	case SERVE_UP_GATEWAY:
		/* after the last request was answered: every replay is counted,
		 * no listing waits for a reader */
		replaycount_stop();
		readers_stop();
		gateway_stop();
		/* fall through */
	case SERVE_UP_FENCE:
		/* after the last forward's outcome was written */
		store_fence_stop();
		/* fall through */
	case SERVE_UP_WAITERS:
		waiters_stop();
		/* fall through */
	case SERVE_UP_BATCHER:
		batcher_stop();
		/* fall through */
	case SERVE_UP_NONE:
	default:
		break;
	}
}

int serve(const struct config *cfg, const char *config_path)
{
	struct migrate_check chk;
	sigset_t set;
	enum serve_up up = SERVE_UP_NONE;
	int sig, rc, ret = 1;

	serve_config_path = config_path;

	/* every thread started below inherits the mask; main waits for signals */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	/* a dozen threads allocate: a few arenas hold less idle memory than
	 * glibc's default of eight per core, and thread caches keep malloc
	 * off their locks */
	mallopt(M_ARENA_MAX, 4);

	/* the master key file is configuration: missing, unreadable or too
	 * open is a configuration error (exit 2), like every other */
	if (keys_init(cfg->master_key_file) < 0)
		return EXIT_USAGE;
	db_set_quiet(1); /* until serve_wait_database() has said it its way */
	if (db_pool_init(cfg->database_url, cfg->pool_size) < 0)
		goto keys;
	if ((rc = serve_wait_database(cfg, &set, &chk)) == 0 &&
	    (rc = serve_check_schema(&chk)) == 0)
		rc = serve_load_keys(cfg);
	if (rc < 0) {
		if (rc == -2)
			ret = EXIT_USAGE;
		goto pool;
	}
	if (serve_start(cfg, &up) == 0) {
		sig = serve_wait_signals(cfg, &set);
		log_info("serve: %s received, finishing in-flight requests", strsignal(sig));
		ret = 0;
		janitor_stop();
	}
	serve_stop(up);
pool:
	db_pool_close();
keys:
	keys_shutdown();
	metrics_shutdown();
	serve_free_configs();
	if (ret == 0)
		log_info("serve: stopped");
	return ret;
}
