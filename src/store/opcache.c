/* Operation cache: a small set-associative table under a read-write lock,
 * indexed twice (by name and by id) over the same entries, with a flag per
 * slot that says it was read since it was loaded (the janitor reloads
 * those). Sets are chosen by SipHash (crypto_shorthash) under a key drawn
 * at start, so no tenant can name operations that land in the set where
 * another tenant's is kept, and a set holds OPCACHE_WAYS entries, so even
 * a chance meeting evicts nothing in use. */
#include "opcache.h"

#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OPCACHE_WAYS 4
#define OPCACHE_SETS 256
#define OPCACHE_SLOTS (OPCACHE_WAYS * OPCACHE_SETS)

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

static unsigned char opcache_key[crypto_shorthash_KEYBYTES];
static pthread_once_t opcache_key_once = PTHREAD_ONCE_INIT;

static void opcache_key_draw(void)
{
	randombytes_buf(opcache_key, sizeof(opcache_key));
}

static void opcache_mark_read(atomic_uchar *flag)
{
	/* written only when it changes: readers do not bounce the line */
	if (atomic_load_explicit(flag, memory_order_relaxed) == 0)
		atomic_store_explicit(flag, 1, memory_order_relaxed);
}

/* The first slot of the set that the N bytes at WHO (a kind byte, then
 * what the index is keyed by) choose. */
static size_t opcache_set(const unsigned char *who, size_t n)
{
	uint64_t h;

	pthread_once(&opcache_key_once, opcache_key_draw);
	crypto_shorthash((unsigned char *)&h, who, n, opcache_key);
	return (size_t)(h % OPCACHE_SETS) * OPCACHE_WAYS;
}

static size_t opcache_name_set(uint32_t tenant_id, const char *name)
{
	unsigned char who[1 + 4 + sizeof(((struct operation *)0)->op_name)] = { 'n' };
	size_t len = strnlen(name, sizeof(who) - 5);

	memcpy(who + 1, &tenant_id, 4);
	memcpy(who + 5, name, len);
	return opcache_set(who, 5 + len);
}

static size_t opcache_id_set(uint32_t op_id)
{
	unsigned char who[1 + 4] = { 'i' };

	memcpy(who + 1, &op_id, 4);
	return opcache_set(who, sizeof(who));
}

static time_t opcache_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec;
}

static int opcache_fresh(const struct opcache_entry *e, time_t now)
{
	return e->oe_used && now - e->oe_loaded < OPCACHE_TTL_SECONDS;
}

/* 1 when A and B are one operation to the index by name (BY_NAME) or by id. */
static int opcache_same(const struct operation *a, const struct operation *b, int by_name)
{
	if (!by_name)
		return a->op_id == b->op_id;
	return a->op_tenant_id == b->op_tenant_id && strcmp(a->op_name, b->op_name) == 0;
}

/* The slot of the set at FIRST of SLOTS (READ: their flags) that OP goes
 * to: the one holding it already, else the first expired or unused, else
 * one not read since it was loaded, else the one loaded longest ago.
 * Called with the write lock held. */
static size_t opcache_place(const struct opcache_entry *slots, atomic_uchar *read, size_t first,
			    const struct operation *op, int by_name, time_t now)
{
	size_t best = first;
	int best_rank = 3;

	for (size_t i = first; i < first + OPCACHE_WAYS; i++) {
		const struct opcache_entry *e = &slots[i];
		if (e->oe_used && opcache_same(&e->oe_op, op, by_name))
			return i;
		int rank = 2;
		if (!opcache_fresh(e, now))
			rank = 0;
		else if (!atomic_load_explicit(&read[i], memory_order_relaxed))
			rank = 1;
		if (rank < best_rank ||
		    (rank == best_rank && e->oe_loaded < slots[best].oe_loaded)) {
			best = i;
			best_rank = rank;
		}
	}
	return best;
}

void opcache_put(const struct operation *op)
{
	time_t now = opcache_now();
	size_t name_set = opcache_name_set(op->op_tenant_id, op->op_name),
	       id_set = opcache_id_set(op->op_id);

	pthread_rwlock_wrlock(&opcache_lock);
	size_t na = opcache_place(opcache_by_name_slots, opcache_name_read, name_set, op, 1, now),
	       nb = opcache_place(opcache_by_id_slots, opcache_id_read, id_set, op, 0, now);
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

/* OP's entry in the set at FIRST of SLOTS copied into *OUT, its flag in
 * READ set: 1, or 0 when the set holds none fresh. */
static int opcache_get(const struct opcache_entry *slots, atomic_uchar *read, size_t first,
		       const struct operation *op, int by_name, struct operation *out)
{
	time_t now = opcache_now();
	int hit = 0;

	pthread_rwlock_rdlock(&opcache_lock);
	for (size_t i = first; i < first + OPCACHE_WAYS && !hit; i++) {
		const struct opcache_entry *e = &slots[i];
		if (opcache_fresh(e, now) && opcache_same(&e->oe_op, op, by_name)) {
			*out = e->oe_op;
			hit = 1;
			opcache_mark_read(&read[i]);
		}
	}
	pthread_rwlock_unlock(&opcache_lock);
	return hit;
}

int opcache_by_name(uint32_t tenant_id, const char *name, struct operation *op, int *found)
{
	struct operation want;

	want.op_tenant_id = tenant_id;
	/* a name too long for any operation is the database's to refuse */
	if (snprintf(want.op_name, sizeof(want.op_name), "%s", name) < (int)sizeof(want.op_name) &&
	    opcache_get(opcache_by_name_slots, opcache_name_read,
			opcache_name_set(tenant_id, want.op_name), &want, 1, op)) {
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
	struct operation want;

	want.op_id = op_id;
	if (opcache_get(opcache_by_id_slots, opcache_id_read, opcache_id_set(op_id), &want, 0,
			op)) {
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

void opcache_clear(void)
{
	pthread_rwlock_wrlock(&opcache_lock);
	memset(opcache_by_name_slots, 0, sizeof(opcache_by_name_slots));
	memset(opcache_by_id_slots, 0, sizeof(opcache_by_id_slots));
	for (size_t i = 0; i < OPCACHE_SLOTS; i++) {
		atomic_store_explicit(&opcache_name_read[i], 0, memory_order_relaxed);
		atomic_store_explicit(&opcache_id_read[i], 0, memory_order_relaxed);
	}
	pthread_rwlock_unlock(&opcache_lock);
}
