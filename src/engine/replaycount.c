/* Replay counts: an open-addressing hash of record → pending count, behind
 * one mutex; the flusher swaps it with an empty spare, then writes the
 * swapped-out table in one UPDATE outside the lock. A flush the database
 * refuses puts its counts back, so nothing is lost while PostgreSQL is down
 * (bounded by the table's capacity). */
#include "replaycount.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bgthread.h"
#include "log.h"
#include "store.h"

struct rc_entry {
	uint32_t re_tenant;
	uint32_t re_used; /* 0: free slot */
	int64_t re_count;
	uint8_t re_id[16];
};

static struct {
	struct bgthread bg;		 /* its lock guards everything below */
	pthread_mutex_t flush_lock;	 /* one flush at a time */
	struct rc_entry *active, *spare; /* each REPLAYCOUNT_CAPACITY slots; owned */
	size_t used;
	size_t in_flight; /* records of the table a flush is writing */
	long dropped;
} rc = { .bg = BGTHREAD_INITIALIZER, .flush_lock = PTHREAD_MUTEX_INITIALIZER };

static size_t rc_hash(uint32_t tenant, const uint8_t id[16])
{
	uint64_t h;

	/* the id is a MAC or BLAKE2b output: its bytes are already uniform */
	memcpy(&h, id, sizeof(h));
	return (size_t)((h ^ tenant) % REPLAYCOUNT_CAPACITY);
}

/* Adds N to (TENANT, ID) in TABLE; lock held. 0, or -1 when full. */
static int rc_put(struct rc_entry *table, uint32_t tenant, const uint8_t id[16], int64_t n)
{
	size_t i = rc_hash(tenant, id);

	for (size_t probe = 0; probe < REPLAYCOUNT_CAPACITY; probe++) {
		struct rc_entry *e = &table[(i + probe) % REPLAYCOUNT_CAPACITY];
		if (!e->re_used) {
			if (rc.used >= REPLAYCOUNT_CAPACITY - 1)
				return -1;
			e->re_used = 1;
			e->re_tenant = tenant;
			memcpy(e->re_id, id, 16);
			e->re_count = n;
			rc.used++;
			return 0;
		}
		if (e->re_tenant == tenant && memcmp(e->re_id, id, 16) == 0) {
			e->re_count += n;
			return 0;
		}
	}
	return -1;
}

void replaycount_add(uint32_t tenant_id, const uint8_t id[16])
{
	pthread_mutex_lock(&rc.bg.lock);
	if (rc.active != NULL) {
		if (rc_put(rc.active, tenant_id, id, 1) < 0)
			rc.dropped++;
		else if (rc.used == REPLAYCOUNT_EARLY)
			pthread_cond_signal(&rc.bg.wake);
	}
	pthread_mutex_unlock(&rc.bg.lock);
}

static int rc_cmp(const void *a, const void *b)
{
	const struct rc_entry *x = a, *y = b;

	if (x->re_tenant != y->re_tenant)
		return x->re_tenant < y->re_tenant ? -1 : 1;
	return memcmp(x->re_id, y->re_id, 16);
}

/* Moves the used slots of TABLE (REPLAYCOUNT_CAPACITY of them) to its
 * front, in record order; how many. TABLE is the one a flush swapped out:
 * called without bg.lock. */
static size_t rc_compact(struct rc_entry *table)
{
	size_t n = 0;

	for (size_t i = 0; i < REPLAYCOUNT_CAPACITY; i++)
		if (table[i].re_used)
			table[n++] = table[i];
	qsort(table, n, sizeof(*table), rc_cmp);
	return n;
}

/* Adds the counts of the first N entries of TABLE to the records in one
 * statement (store_replays_add); 0, or -1. */
static int rc_store(const struct rc_entry *table, size_t n)
{
	uint32_t *tenants = malloc(n * sizeof(*tenants));
	uint8_t(*ids)[16] = malloc(n * sizeof(*ids));
	int64_t *counts = malloc(n * sizeof(*counts));
	int ret;

	if (tenants == NULL || ids == NULL || counts == NULL) {
		ret = -1;
	} else {
		for (size_t i = 0; i < n; i++) {
			tenants[i] = table[i].re_tenant;
			memcpy(ids[i], table[i].re_id, 16);
			counts[i] = table[i].re_count;
		}
		ret = store_replays_add(n, tenants, ids, counts);
	}
	free(tenants);
	free(ids);
	free(counts);
	return ret;
}

int replaycount_flush(void)
{
	struct rc_entry *table;
	size_t n;
	int ret;

	pthread_mutex_lock(&rc.flush_lock);
	pthread_mutex_lock(&rc.bg.lock);
	table = rc.active;
	if (table == NULL || rc.used == 0) {
		pthread_mutex_unlock(&rc.bg.lock);
		pthread_mutex_unlock(&rc.flush_lock);
		return 0;
	}
	rc.active = rc.spare;
	rc.spare = NULL;
	rc.in_flight = rc.used;
	rc.used = 0;
	pthread_mutex_unlock(&rc.bg.lock);

	n = rc_compact(table);
	ret = rc_store(table, n);

	pthread_mutex_lock(&rc.bg.lock);
	if (ret < 0) {
		/* back into the live table, merged with what came meanwhile */
		for (size_t i = 0; i < n; i++)
			if (rc_put(rc.active, table[i].re_tenant, table[i].re_id,
				   table[i].re_count) < 0)
				rc.dropped += (long)table[i].re_count;
	}
	memset(table, 0, REPLAYCOUNT_CAPACITY * sizeof(*table));
	rc.spare = table;
	rc.in_flight = 0;
	pthread_mutex_unlock(&rc.bg.lock);
	pthread_mutex_unlock(&rc.flush_lock);
	if (ret < 0)
		log_warn("replaycount: could not add the replay counts of %zu records; kept for "
			 "the next flush",
			 n);
	return ret;
}

static void *rc_main(void *arg)
{
	int failed = 0;

	(void)arg;
	pthread_mutex_lock(&rc.bg.lock);
	while (!rc.bg.stop) {
		struct timespec until = bgthread_deadline(REPLAYCOUNT_FLUSH_SECONDS * 1000.0);
		/* a table three quarters full is flushed at once, unless the
		 * last flush failed: then the database is given the whole
		 * interval */
		while (!rc.bg.stop && (failed || rc.used < REPLAYCOUNT_EARLY) &&
		       pthread_cond_timedwait(&rc.bg.wake, &rc.bg.lock, &until) == 0)
			;
		if (rc.bg.stop)
			break;
		pthread_mutex_unlock(&rc.bg.lock);
		failed = replaycount_flush() < 0;
		pthread_mutex_lock(&rc.bg.lock);
	}
	pthread_mutex_unlock(&rc.bg.lock);
	return NULL;
}

int replaycount_start(void)
{
	rc.active = calloc(REPLAYCOUNT_CAPACITY, sizeof(struct rc_entry));
	rc.spare = calloc(REPLAYCOUNT_CAPACITY, sizeof(struct rc_entry));
	rc.used = 0;
	if (rc.active == NULL || rc.spare == NULL || bgthread_start(&rc.bg, rc_main) < 0) {
		free(rc.active);
		free(rc.spare);
		rc.active = rc.spare = NULL;
		return -1;
	}
	return 0;
}

void replaycount_stop(void)
{
	size_t left;

	if (!rc.bg.running)
		return;
	bgthread_stop(&rc.bg);
	for (int i = 0; i < 10 && replaycount_flush() < 0; i++)
		nanosleep(&(struct timespec){ 0, 300000000L }, NULL);
	pthread_mutex_lock(&rc.bg.lock);
	left = rc.used;
	free(rc.active);
	free(rc.spare);
	rc.active = rc.spare = NULL;
	rc.used = 0;
	pthread_mutex_unlock(&rc.bg.lock);
	if (left > 0)
		log_warn("replaycount: the replay counts of %zu records were not saved", left);
}

void replaycount_usage(size_t *pending, long *dropped)
{
	pthread_mutex_lock(&rc.bg.lock);
	*pending = rc.used + rc.in_flight;
	*dropped = rc.dropped;
	pthread_mutex_unlock(&rc.bg.lock);
}
