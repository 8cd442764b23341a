/* Janitor. Measures the database's clock; sweeping ends records' lives
 * (and deletes old fences and audit events) in small batches, each its own short
 * transaction that skips locked rows, so claims never wait behind it, with
 * a rest after each batch so that a large backlog does not crowd claims out;
 * a transaction-scoped advisory lock keeps it to one instance at a time. */
#include "janitor.h"

#include <malloc.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "auth.h"
#include "bgthread.h"
#include "config.h"
#include "keys.h"
#include "gateway.h"
#include "log.h"
#include "metrics.h"
#include "opcache.h"
#include "replaycache.h"
#include "store.h"

static struct {
	struct bgthread bg;
	int sweep_interval;
	int fence_retention;
} janitor = { .bg = BGTHREAD_INITIALIZER };

/* A reading is kept when its round trip was short enough to say something
 * (half of it is the reading's uncertainty) and it moved the offset by more
 * than that: the clock idemd times things by does not jitter. */
#define JANITOR_CLOCK_MAX_RTT_MS 200
#define JANITOR_CLOCK_STEP_MS 2

int janitor_measure_clock(void)
{
	/* against the monotonic clock, which no step of the host's clock
	 * moves: a step between two measurements changes nothing idemd times */
	int64_t db, t0 = idemd_mono_ms();

	if (store_clock(&db) < 0)
		return -1;
	int64_t t1 = idemd_mono_ms();
	if (t1 - t0 > JANITOR_CLOCK_MAX_RTT_MS)
		return -1;
	int64_t offset = db - (t0 + t1) / 2, old = idemd_clock_offset_ms;
	int64_t skew = db + (t1 - t0) / 2 - idemd_local_unix_ms();
#ifdef IDEMD_MUTANT_CLOCK_OFFSET_IGNORED
	offset = old;
#endif
	idemd_clock_skew_ms = skew;
	if (offset - old > JANITOR_CLOCK_STEP_MS || old - offset > JANITOR_CLOCK_STEP_MS) {
		idemd_clock_offset_ms = offset;
		if (skew > 1000 || skew < -1000)
			log_warn("janitor: this host's clock is %lld ms %s the database's; idemd "
				 "follows the database's",
				 (long long)(skew > 0 ? skew : -skew),
				 skew > 0 ? "behind" : "ahead of");
	}
	return 0;
}

static double janitor_ms_since(const struct timespec *t0)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - t0->tv_sec) * 1e3 + (double)(now.tv_nsec - t0->tv_nsec) / 1e6;
}

/* Waits MS milliseconds unless the janitor is told to stop: 1 when told. */
static int janitor_rest(double ms)
{
	struct timespec until = bgthread_deadline(ms);
	int stop;

	pthread_mutex_lock(&janitor.bg.lock);
	if (!janitor.bg.stop)
		pthread_cond_timedwait(&janitor.bg.wake, &janitor.bg.lock, &until);
	stop = janitor.bg.stop;
	pthread_mutex_unlock(&janitor.bg.lock);
	return stop;
}

long janitor_sweep_now(int paced)
{
	long total = 0, fences = 0;
	/* each batch goes on where the last one stopped */
	struct store_swept s = { .sw_after = "" };
	int full, deleted;

	do {
		struct timespec t0;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		if (store_sweep(JANITOR_SWEEP_BATCH, janitor.fence_retention,
				janitor.sweep_interval, &s) < 0)
			return -1;
		if (s.sw_ended < 0)
			break; /* another instance is sweeping */
		total += s.sw_ended;
		fences += s.sw_deleted;
		full = s.sw_ended + s.sw_deleted + s.sw_moved == JANITOR_SWEEP_BATCH;
		if (full && paced) {
			double rest = janitor_ms_since(&t0);
			if (janitor_rest(rest < 500 ? rest : 500))
				break;
		}
	} while (full);
	if (fences > 0)
		log_info("janitor: deleted %ld fences of records ended over %d s ago", fences,
			 janitor.fence_retention);
	/* and the audit events past their retention, in the same batches */
	int events = 0;
	do {
		if (store_events_sweep(JANITOR_SWEEP_BATCH, &deleted) < 0)
			break;
		events += deleted;
	} while (deleted == JANITOR_SWEEP_BATCH);
	if (events > 0)
		log_info("janitor: swept %d audit events past their retention", events);
	if (total > 0) {
		metrics_add(METRIC_SWEPT, total);
		log_info("janitor: ended the life of %ld expired records", total);
	}
	return total;
}

/* The ids of the tenant/operation pairs metrics labels by name. */
static void janitor_resolve_pairs(void)
{
	size_t n = metrics_pairs_to_resolve(0);

	for (size_t i = 0; i < n; i++) {
		const char *tenant, *operation;
		uint32_t tenant_id;
		struct operation op;
		int found = 0;

		metrics_pair_name(i, &tenant, &operation);
		if (store_tenant_by_name(tenant, &tenant_id, &found) < 0 ||
		    (found && opcache_by_name(tenant_id, operation, &op, &found) < 0))
			return; /* the database is away: the next pass */
		if (found)
			metrics_pair_resolved(i, tenant_id, op.op_id);
	}
}

/* The records stuck in progress (idemd_records_stuck; kept as they were
 * when the count fails); the seconds until the next count. No index finds
 * records in progress (migrations/0017), so the count reads the whole
 * table: it is made again after JANITOR_STUCK_INTERVAL_SECONDS or
 * JANITOR_STUCK_SPACING times as long as it took, whichever is longer, so
 * that on a large table it takes about 1 % of one core per instance with
 * PostgreSQL's two parallel workers beside its backend (0.5-0.7 s for 10
 * million records: bench/ops_figures.sh). */
static int janitor_count_stuck(void)
{
	struct metrics_stuck *rows;
	struct timespec t0;
	size_t n;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (store_records_stuck(&rows, &n) < 0)
		return JANITOR_STUCK_INTERVAL_SECONDS;
	metrics_set_stuck(rows, n);
	free(rows);
	double spaced = janitor_ms_since(&t0) * JANITOR_STUCK_SPACING / 1e3;
	return spaced > JANITOR_STUCK_INTERVAL_SECONDS ? (int)spaced
						       : JANITOR_STUCK_INTERVAL_SECONDS;
}

/* Statistics autovacuum has left far behind (a new deployment's records in
 * its first minutes, or autovacuum busy elsewhere) brought up to date, so
 * that every connection's plans are made again for the tables as they are
 * (store_refresh_statistics); whether that reached PostgreSQL is
 * idemd_db_up. */
static void janitor_refresh_statistics(void)
{
	int n, ok = store_refresh_statistics(&n) == 0;

	metrics_set_db_up(ok);
	if (ok && n > 0)
		log_info("janitor: analyzed %d table%s whose statistics autovacuum had left "
			 "behind",
			 n, n == 1 ? "" : "s");
}

/* Tenants deleted on any instance (`idemd tenant delete`): once the
 * tenants' count or id sum changes, the operations and the answers held in
 * memory are dropped (the API keys go with auth_refresh), so no deleted
 * tenant's policy or stored answer is served from memory a second later;
 * and every JANITOR_ORPHANS_INTERVAL_SECONDS the rows that claims racing a
 * deletion left under a tenant id that no longer exists are deleted. */
static struct {
	int64_t count, sum; /* the tenants as last seen (-1: not read) */
	time_t last_orphans;
} janitor_seen = { -1, -1, 0 };

static void janitor_tenants(time_t now)
{
	int64_t c, s, deleted = 0;

	if (store_tenants_sum(&c, &s) == 0 && (c != janitor_seen.count || s != janitor_seen.sum)) {
		opcache_clear();
		replaycache_clear();
		janitor_seen.count = c;
		janitor_seen.sum = s;
	}
	if (now - janitor_seen.last_orphans >= JANITOR_ORPHANS_INTERVAL_SECONDS) {
		janitor_seen.last_orphans = now;
		if (store_orphans_delete(&deleted) == 0 && deleted > 0)
			log_info("janitor: deleted %lld rows of tenants that no longer exist",
				 (long long)deleted);
	}
}

/* What the janitor does every second: the clock, the operations in use,
 * the API keys, the tenants, this instance's route needs. *OPS and *KEYS
 * say whether the last reload of each worked (a failure is said once per
 * outage). */
static void janitor_each_second(int *ops, int *keys)
{
	/* a reading that failed or took too long keeps the offset measured
	 * before; the next second reads again */
	if (janitor_measure_clock() != 0)
		log_debug("janitor: the database's clock could not be read");
	/* the operations in use, reloaded before request threads would find
	 * them expired and read them themselves (the pool logs the
	 * database's state) */
	int reloaded = opcache_refresh(OPCACHE_REFRESH_AGE) == 0;
	if (!reloaded && *ops)
		log_warn("janitor: could not reload the operations in use; request threads "
			 "read them themselves meanwhile");
	*ops = reloaded;
	/* API keys added or revoked on any instance (auth.c) */
	int read = auth_refresh() == 0;
	if (!read && *keys)
		log_warn("janitor: could not read the API keys; keys not read yet are looked up "
			 "one by one meanwhile");
	*keys = read;
	janitor_tenants(time(NULL));
	/* this instance's routes still count when leases change */
	gateway_needs_renew();
}

static void *janitor_main(void *arg)
{
	time_t last_keys = time(NULL), last_sweep = time(NULL), last_trim = time(NULL);
	time_t last_stuck = 0, last_stats = 0;
	int stuck_every = JANITOR_STUCK_INTERVAL_SECONDS;
	int ops_reloaded = 1, api_keys_read = 1;

	(void)arg;
	pthread_mutex_lock(&janitor.bg.lock);
	while (!janitor.bg.stop) {
		struct timespec until = bgthread_deadline(1000);
		pthread_cond_timedwait(&janitor.bg.wake, &janitor.bg.lock, &until);
		if (janitor.bg.stop)
			break;
		pthread_mutex_unlock(&janitor.bg.lock);
		time_t now = time(NULL);
		janitor_each_second(&ops_reloaded, &api_keys_read);
		if (now - last_keys >= JANITOR_KEYS_INTERVAL_SECONDS) {
			last_keys = now;
			if (keys_refresh() < 0)
				log_warn("janitor: could not refresh signing keys");
		}
		if (now - last_stats >= JANITOR_STUCK_INTERVAL_SECONDS) {
			last_stats = now;
			janitor_resolve_pairs();
			janitor_refresh_statistics();
		}
		if (now - last_stuck >= stuck_every) {
			last_stuck = now;
			stuck_every = janitor_count_stuck();
		}
		if (now - last_sweep >= janitor.sweep_interval) {
			last_sweep = now;
			(void)janitor_sweep_now(1);
		}
		if (now - last_trim >= JANITOR_TRIM_INTERVAL_SECONDS) {
			/* give memory freed after a burst of connections back */
			last_trim = now;
			malloc_trim(0);
		}
		pthread_mutex_lock(&janitor.bg.lock);
	}
	pthread_mutex_unlock(&janitor.bg.lock);
	return NULL;
}

int janitor_start(const struct config *cfg)
{
	janitor.sweep_interval = cfg->sweep_interval_seconds;
	janitor.fence_retention = cfg->fence_retention_seconds;
	/* the tenants as they are at the start: what changes after is a change
	 * (unread now: the first sight counts as one) */
	if (store_tenants_sum(&janitor_seen.count, &janitor_seen.sum) < 0)
		janitor_seen.count = janitor_seen.sum = -1;
	return bgthread_start(&janitor.bg, janitor_main);
}

void janitor_stop(void)
{
	bgthread_stop(&janitor.bg);
}
