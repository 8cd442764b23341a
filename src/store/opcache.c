/* Operation cache: a small direct-mapped table under a read-write lock,
 * indexed twice (by name and by id) over the same entries, with a flag per
 * slot that says it was read since it was loaded (the janitor reloads
 * those). */
#include "opcache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OPCACHE_SLOTS 1024

struct opcache_entry {
	struct operation oe_op;
	time_t oe_loaded;
	int oe_used;
};

static struct opcache_entry opcache_by_name_slots[OPCACHE_SLOTS];
static struct opcache_entry opcache_by_id_slots[OPCACHE_SLOTS];
static pthread_rwlock_t opcache_lock = PTHREAD_RWLOCK_INITIALIZER;
/* read since loaded, per slot (set by readers under the read lock) */
static atomic_uchar opcache_name_read[OPCACHE_SLOTS], opcache_id_read[OPCACHE_SLOTS];

static void opcache_mark_read(atomic_uchar *flag)
{
	/* written only when it changes: readers do not bounce the line */
	if (atomic_load_explicit(flag, memory_order_relaxed) == 0)
		atomic_store_explicit(flag, 1, memory_order_relaxed);
}

static size_t opcache_name_slot(uint32_t tenant_id, const char *name)
{
	uint64_t h = 1469598103934665603ULL ^ tenant_id;

	for (const char *p = name; *p != '\0'; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	return (size_t)(h % OPCACHE_SLOTS);
}

static time_t opcache_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec;
}

void opcache_put(const struct operation *op)
{
	time_t now = opcache_now();

	pthread_rwlock_wrlock(&opcache_lock);
	size_t na = opcache_name_slot(op->op_tenant_id, op->op_name),
	       nb = op->op_id % OPCACHE_SLOTS;
	struct opcache_entry *a = &opcache_by_name_slots[na];
	struct opcache_entry *b = &opcache_by_id_slots[nb];
	a->oe_op = *op;
	a->oe_loaded = now;
	a->oe_used = 1;
	*b = *a;
	atomic_store_explicit(&opcache_name_read[na], 0, memory_order_relaxed);
	atomic_store_explicit(&opcache_id_read[nb], 0, memory_order_relaxed);
	pthread_rwlock_unlock(&opcache_lock);
}

static int opcache_fresh(const struct opcache_entry *e, time_t now)
{
	return e->oe_used && now - e->oe_loaded < OPCACHE_TTL_SECONDS;
}

int opcache_by_name(uint32_t tenant_id, const char *name, struct operation *op, int *found)
{
	time_t now = opcache_now();
	int hit = 0;

	size_t slot = opcache_name_slot(tenant_id, name);
	pthread_rwlock_rdlock(&opcache_lock);
	const struct opcache_entry *e = &opcache_by_name_slots[slot];
	if (opcache_fresh(e, now) && e->oe_op.op_tenant_id == tenant_id &&
	    strcmp(e->oe_op.op_name, name) == 0) {
		*op = e->oe_op;
		hit = 1;
		opcache_mark_read(&opcache_name_read[slot]);
	}
	pthread_rwlock_unlock(&opcache_lock);
	if (hit) {
		*found = 1;
		return 0;
	}
	if (store_operation_get(tenant_id, name, op, found) < 0)
		return -1;
	if (*found)
		opcache_put(op);
	return 0;
}

int opcache_by_id(uint32_t op_id, struct operation *op, int *found)
{
	time_t now = opcache_now();
	int hit = 0;

	pthread_rwlock_rdlock(&opcache_lock);
	const struct opcache_entry *e = &opcache_by_id_slots[op_id % OPCACHE_SLOTS];
	if (opcache_fresh(e, now) && e->oe_op.op_id == op_id) {
		*op = e->oe_op;
		hit = 1;
		opcache_mark_read(&opcache_id_read[op_id % OPCACHE_SLOTS]);
	}
	pthread_rwlock_unlock(&opcache_lock);
	if (hit) {
		*found = 1;
		return 0;
	}
	if (store_operation_by_id(op_id, op, found) < 0)
		return -1;
	if (*found)
		opcache_put(op);
	return 0;
}

static int opcache_id_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* Adds the id of E to IDS (*N of them) if E was read since loaded and is
 * MIN_AGE old. Called with the read lock held. */
static void opcache_due(const struct opcache_entry *e, atomic_uchar *read, time_t now, int min_age,
			uint32_t *ids, size_t *n)
{
	if (e->oe_used && now - e->oe_loaded >= min_age &&
	    atomic_load_explicit(read, memory_order_relaxed))
		ids[(*n)++] = e->oe_op.op_id;
}

int opcache_refresh(int min_age)
{
	static uint32_t ids[2 * OPCACHE_SLOTS]; /* the janitor's thread only */
	time_t now = opcache_now();
	size_t n = 0;

	pthread_rwlock_rdlock(&opcache_lock);
	for (size_t i = 0; i < OPCACHE_SLOTS; i++) {
		opcache_due(&opcache_by_id_slots[i], &opcache_id_read[i], now, min_age, ids, &n);
		opcache_due(&opcache_by_name_slots[i], &opcache_name_read[i], now, min_age, ids,
			    &n);
	}
	pthread_rwlock_unlock(&opcache_lock);
	/* an entry in both tables is loaded once (opcache_put sets both) */
	qsort(ids, n, sizeof(ids[0]), opcache_id_cmp);
	for (size_t i = 0; i < n; i++) {
		struct operation op;
		int found = 0;
		if (i > 0 && ids[i] == ids[i - 1])
			continue;
		if (store_operation_by_id(ids[i], &op, &found) < 0)
			return -1;
		/* one deleted meanwhile is left to expire, as without this */
		if (found)
			opcache_put(&op);
	}
	return 0;
}
