/* Waiters: duplicates parked until the record they wait for settles, its
 * lease ends or their deadline passes; one thread LISTENs to PostgreSQL's
 * notifications of settled records. */
#include "waiters.h"

#include <sodium.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "db.h"
#include "log.h"
#include "replaycache.h"
#include "store_listen.h"

#define WAITERS_TENANT_SLOTS 256
#define WAITERS_TICK_MS 100
#define WAITERS_OFFLINE_RECHECK_MS 250
#define WAITERS_RECONNECT_MS 1000
/* a LISTEN whose own probe never comes back (a transaction-pooling proxy
 * in between) is tried again this much later */
#define WAITERS_REPROBE_MS 60000
#define WAITERS_PROBE_WAIT_MS 1000
#define WAITERS_RECENT 4096
/* records whose first notified waiter may lead the others in one pass */
#define WAITERS_LEADERS 64
/* a follower goes to the database itself when its leader's answer is not
 * cached this much later (the leader was not answered with a replay) */
#define WAITERS_FOLLOW_MS 250
/* how often followers look for their leader's answer */
#define WAITERS_FOLLOW_TICK_MS 5

/* A record recently notified: a waiter added just after its notification
 * (its claim saw "in progress" an instant before) must not miss it. */
struct waiters_recent {
	uint32_t tenant;
	uint8_t id[16];
	int64_t at_ms;
};

static struct {
	pthread_mutex_t lock;
	struct waiter *head;
	int count, max;
	/* waiters per tenant, in hashed slots: one tenant may hold at most
	 * half of max_waiters, so another's Prefer: wait still waits */
	int per_tenant[WAITERS_TENANT_SLOTS];
	int running, stopping;
	int online;				      /* the LISTEN connection is up (under lock) */
	struct waiters_recent recent[WAITERS_RECENT]; /* a ring, under lock */
	size_t n_recent;
	pthread_t thread;
	char *conninfo;
	struct store_listener *pg; /* the LISTEN session (thread only) */
	int64_t last_connect_ms;   /* thread only */
	int64_t retry_after_ms;	   /* thread only: no (re)connect before */
	unsigned drops_seen;	   /* thread only: db_drop_count() at connect */
	int offline_only;	   /* nothing to LISTEN to: re-checks only */
} wt = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* (Re)opens the LISTEN connection; on success every waiter is due, since
 * notifications sent while it was down are lost. Thread only. */
static void waiters_connect(void)
{
	int64_t now = idemd_unix_ms();

	if (wt.offline_only || wt.pg != NULL || now - wt.last_connect_ms < WAITERS_RECONNECT_MS ||
	    now < wt.retry_after_ms)
		return;
	wt.last_connect_ms = now;
	wt.drops_seen = db_drop_count();
	struct store_listener *l;
	switch (store_listen_open(wt.conninfo, WAITERS_PROBE_WAIT_MS, &l)) {
	case STORE_LISTEN_OK:
		break;
	case STORE_LISTEN_NOT_HEARD:
		log_warn("waiters: notifications do not arrive on this connection (a "
			 "transaction-pooling proxy?); duplicates that wait look again every %d ms",
			 WAITERS_OFFLINE_RECHECK_MS);
		wt.retry_after_ms = now + WAITERS_REPROBE_MS;
		return;
	case STORE_LISTEN_FAILED:
		log_warn("waiters: cannot LISTEN; duplicates that wait look again every %d ms",
			 WAITERS_OFFLINE_RECHECK_MS);
		return;
	}
	wt.pg = l;
	pthread_mutex_lock(&wt.lock);
	wt.online = 1;
	for (struct waiter *w = wt.head; w != NULL; w = w->w_next)
		w->w_due = 1;
	pthread_mutex_unlock(&wt.lock);
}

/* Marks the waiters of the record named by PAYLOAD ("tenant:hex id") due. */
static void waiters_notified(void *arg, const char *payload)
{
	unsigned long tenant;
	uint8_t id[16];
	char *end;

	(void)arg;
	tenant = strtoul(payload, &end, 10);
	if (*end != ':' || strlen(end + 1) != 32)
		return;
	for (int i = 0; i < 16; i++) {
		unsigned v;
		if (sscanf(end + 1 + 2 * i, "%2x", &v) != 1)
			return;
		id[i] = (uint8_t)v;
	}
	pthread_mutex_lock(&wt.lock);
	struct waiters_recent *rc = &wt.recent[wt.n_recent++ % WAITERS_RECENT];
	rc->tenant = (uint32_t)tenant;
	memcpy(rc->id, id, 16);
	rc->at_ms = idemd_unix_ms();
	for (struct waiter *w = wt.head; w != NULL; w = w->w_next)
		if (w->w_tenant == tenant && memcmp(w->w_id, id, 16) == 0)
			w->w_due = 1;
	pthread_mutex_unlock(&wt.lock);
}

/* Closes the LISTEN connection; waiters_connect() opens a new one. Thread only. */
static void waiters_offline(const char *why)
{
	log_warn("waiters: %s; reconnecting", why);
	store_listen_close(wt.pg);
	wt.pg = NULL;
	/* notifications are lost until it is back: everyone looks again
	 * soon, and again after each look (waiters_add), so none is
	 * stranded until its holder's lease ends */
	int64_t soon = idemd_unix_ms() + WAITERS_OFFLINE_RECHECK_MS;
	pthread_mutex_lock(&wt.lock);
	wt.online = 0;
	for (struct waiter *w = wt.head; w != NULL; w = w->w_next)
		if (w->w_retry_ms > soon)
			w->w_retry_ms = soon;
	pthread_mutex_unlock(&wt.lock);
}

/* Waits up to TICK_MS for notifications and reads them. Thread only. */
static void waiters_listen(int tick_ms)
{
	if (wt.pg == NULL) {
		struct timespec ts = { 0, tick_ms * 1000000L };
		nanosleep(&ts, NULL);
		return;
	}
	/* the pool dropped a connection to a server that went away, froze or
	 * turned read-only: the primary may have moved (a failover or a
	 * switchover), and notifications are sent on the primary only, so
	 * this connection follows it even when its own socket looks fine (a
	 * frozen server keeps it open) */
	if (db_drop_count() != wt.drops_seen) {
		waiters_offline("the database connections were dropped (failover?)");
		return;
	}
	if (store_listen_wait(wt.pg, tick_ms, waiters_notified, NULL) < 0)
		waiters_offline("the LISTEN connection was lost");
}

/* Unlinks the waiters that are due (notified, retry time, deadline; all of
 * them when stopping) into *OUT, in order. */
static struct waiter *waiters_take_due(int64_t now, int *stopping, int *following)
{
	struct waiter *out = NULL, **tail = &out, **link = &wt.head;
	/* Records notified but not in the replay cache: one waiter each (a
	 * leader) claims again in the database this pass; the others follow
	 * once its answer is in the cache, or WAITERS_FOLLOW_MS later. So
	 * thousands of waiters of one record cost one claim, not thousands. */
	struct {
		uint32_t tenant;
		const uint8_t *id;
	} leaders[WAITERS_LEADERS];
	size_t n_leaders = 0;

	*following = 0;
	pthread_mutex_lock(&wt.lock);
	*stopping = wt.stopping;
	while (*link != NULL) {
		struct waiter *w = *link;
		int take = wt.stopping || now >= w->w_retry_ms || now >= w->w_deadline_ms;
		if (!take && w->w_due == 1) {
			size_t i = 0;
			take = 1;
			if (!replaycache_has(w->w_tenant, w->w_id)) {
				while (i < n_leaders && (leaders[i].tenant != w->w_tenant ||
							 memcmp(leaders[i].id, w->w_id, 16) != 0))
					i++;
				if (i < n_leaders) {
					w->w_due = 2;
					w->w_retry_ms = now + WAITERS_FOLLOW_MS;
					take = 0;
				} else if (n_leaders < WAITERS_LEADERS) {
					leaders[n_leaders].tenant = w->w_tenant;
					leaders[n_leaders].id = w->w_id;
					n_leaders++;
				}
			}
		} else if (!take && w->w_due == 2) {
			take = replaycache_has(w->w_tenant, w->w_id);
		}
		if (take) {
			*link = w->w_next;
			w->w_next = NULL;
			*tail = w;
			tail = &w->w_next;
			wt.count--;
			wt.per_tenant[w->w_tenant % WAITERS_TENANT_SLOTS]--;
		} else {
			*following |= w->w_due == 2;
			link = &w->w_next;
		}
	}
	pthread_mutex_unlock(&wt.lock);
	return out;
}

static void *waiters_main(void *arg)
{
	int following = 0;

	(void)arg;
	for (;;) {
		waiters_connect();
		waiters_listen(following ? WAITERS_FOLLOW_TICK_MS : WAITERS_TICK_MS);
		int64_t now = idemd_unix_ms();
		int stopping;
		struct waiter *w = waiters_take_due(now, &stopping, &following);
		while (w != NULL) {
			struct waiter *next = w->w_next;
			int expired = stopping || now >= w->w_deadline_ms;
			w->w_due = 0;
			w->w_wake(w, expired);
			w = next;
		}
		pthread_mutex_lock(&wt.lock);
		int done = wt.stopping && wt.head == NULL;
		pthread_mutex_unlock(&wt.lock);
		if (done)
			return NULL;
	}
}

int waiters_start(const struct config *cfg)
{
	/* notifications reach only a session of its own: through a
	 * transaction-pooling proxy (prepared_statements false) LISTEN is
	 * accepted and then nothing arrives, so there is nothing to listen to
	 * unless listen_database_url reaches PostgreSQL itself */
	const char *url = cfg->listen_database_url   ? cfg->listen_database_url
			  : cfg->prepared_statements ? cfg->database_url
						     : NULL;

	wt.max = cfg->max_waiters;
	wt.stopping = 0;
	wt.offline_only = url == NULL;
	wt.conninfo = strdup(url != NULL ? url : "");
	if (url == NULL)
		log_warn(
			"waiters: prepared_statements is false (a transaction-pooling proxy?) and "
			"no listen_database_url is set: duplicates that wait look again every %d ms "
			"instead of being notified",
			WAITERS_OFFLINE_RECHECK_MS);
	if (wt.conninfo == NULL || pthread_create(&wt.thread, NULL, waiters_main, NULL) != 0) {
		log_error("waiters: cannot start the thread");
		free(wt.conninfo);
		wt.conninfo = NULL;
		return -1;
	}
	wt.running = 1;
	return 0;
}

int waiters_add(struct waiter *w, int64_t since_ms)
{
	int ret = -1;

	pthread_mutex_lock(&wt.lock);
	int *mine = &wt.per_tenant[w->w_tenant % WAITERS_TENANT_SLOTS];
	if (wt.running && !wt.stopping && wt.count < wt.max && *mine < (wt.max + 1) / 2) {
		size_t n = wt.n_recent < WAITERS_RECENT ? wt.n_recent : WAITERS_RECENT;
		int seen = 0;
		for (size_t i = 0; i < n && !seen; i++)
			seen = wt.recent[i].at_ms >= since_ms &&
			       wt.recent[i].tenant == w->w_tenant &&
			       memcmp(wt.recent[i].id, w->w_id, 16) == 0;
		/* no notification can come while offline: look again soon */
		int64_t soon = idemd_unix_ms() + WAITERS_OFFLINE_RECHECK_MS;
		if (!wt.online && w->w_retry_ms > soon)
			w->w_retry_ms = soon;
		w->w_due = seen;
		w->w_next = wt.head;
		wt.head = w;
		wt.count++;
		(*mine)++;
		ret = 0;
	}
	pthread_mutex_unlock(&wt.lock);
	return ret;
}

int waiters_count(void)
{
	pthread_mutex_lock(&wt.lock);
	int n = wt.count;
	pthread_mutex_unlock(&wt.lock);
	return n;
}

void waiters_drain(void)
{
	pthread_mutex_lock(&wt.lock);
	wt.stopping = 1;
	pthread_mutex_unlock(&wt.lock);
	/* the thread answers the rest within a tick, then ends */
	if (wt.running) {
		pthread_join(wt.thread, NULL);
		wt.running = 0;
	}
}

void waiters_stop(void)
{
	waiters_drain();
	if (wt.pg != NULL)
		store_listen_close(wt.pg);
	wt.pg = NULL;
	if (wt.conninfo != NULL)
		sodium_memzero(wt.conninfo, strlen(wt.conninfo));
	free(wt.conninfo);
	wt.conninfo = NULL;
}
