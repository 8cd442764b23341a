/* Authentication. Keys are random (256 bits), so a plain BLAKE2b hash is a
 * safe at-rest form; lookups go by hash and the final comparison of the full
 * hash is constant-time.
 *
 * Every key the database holds is kept in memory (the known set): loaded
 * before the listener opens (auth_refresh from serve.c) and read again by
 * the janitor once a second when the keys' count and id sum changed, so a
 * key added or revoked on any instance is seen within about a second. A
 * genuine key is answered from that set and never waits on the rate-limited
 * lookup below, whatever floods its address, even right after a start.
 *
 * A key in neither the set nor the cache asks the database (a key made in
 * the last second works at once), but a refused key is remembered for
 * AUTH_NEGATIVE_MS in a table of its own (a flood of unknown keys cannot
 * evict the known ones), and at most AUTH_LOOKUPS_PER_SECOND keys not in
 * either table are looked up per second, AUTH_LOOKUPS_PER_CLIENT of them for
 * one client (an IPv4 address, an IPv6 prefix: http_client_slot): beyond that the answer is 503 with Retry-After, so one
 * client sending made-up keys can neither turn every request into a
 * database query nor take the lookups a new genuine key needs. A key is
 * believed for AUTH_RECHECK_MS after the database last confirmed it (the
 * set's read or a lookup), then asked about again (not rate-limited: it was
 * known), so a revoked key stops working on every instance within seconds
 * even when the janitor is late; the per-connection memo keeps the time of
 * its entry's last confirmation and expires with it. */
#include "auth.h"

#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store.h"

#define AUTH_CACHE_SLOTS 4096

/* After a failed recheck, the next try is this much later. */
#define AUTH_RETRY_MS 1000
#define AUTH_NEGATIVE_SLOTS 4096

struct auth_entry {
	uint8_t ae_hash[32];
	uint32_t ae_tenant_id;
	uint32_t ae_key_id;
	int ae_used;
	int64_t ae_checked_ms; /* when the database last confirmed it */
};

static struct auth_entry auth_cache[AUTH_CACHE_SLOTS];
static pthread_rwlock_t auth_lock = PTHREAD_RWLOCK_INITIALIZER;
static atomic_uint auth_gen = 1; /* bumped by auth_cache_clear() */

/* Refused keys: hash and when; guarded by auth_lock too. */
static struct {
	uint8_t an_hash[32];
	int64_t an_at_ms;
} auth_refused[AUTH_NEGATIVE_SLOTS];
/* Lookups of keys in neither table in one second: all of them, and each
 * client slot's. */
struct auth_count {
	atomic_llong ac_second;
	atomic_int ac_n;
};
static struct auth_count auth_lookups;

/* The known set: an open-addressed table of every key's hash (linear
 * probing, at most half full), replaced whole by auth_refresh(); an entry
 * a recheck found gone is marked dead. Guarded by auth_lock. */
enum { AUTH_KNOWN_EMPTY = 0, AUTH_KNOWN_LIVE, AUTH_KNOWN_DEAD };
struct auth_known {
	struct api_key_row *ak_rows;
	uint8_t *ak_state;	  /* AUTH_KNOWN_* per row */
	size_t ak_cap;		  /* a power of two; 0: no set loaded */
	size_t ak_n;		  /* keys in it */
	int64_t ak_read_ms;	  /* auth clock at the read */
	int64_t ak_count, ak_sum; /* store_api_keys_sum() when read */
};
static struct auth_known auth_known;
static struct auth_count auth_client_lookups[AUTH_CLIENT_SLOTS];

/* Counts one more lookup in C's current second: 1 while that stays within
 * LIMIT, else 0. */
static int auth_count_one(struct auth_count *c, long long sec, int limit)
{
	long long cur = atomic_load(&c->ac_second);

	if (cur != sec && atomic_compare_exchange_strong(&c->ac_second, &cur, sec))
		atomic_store(&c->ac_n, 0);
	return atomic_fetch_add(&c->ac_n, 1) < limit;
}

/* The client's share first: a client past it takes nothing from the rest. */
static int auth_lookup_allowed(size_t client, int64_t now_ms)
{
	long long sec = now_ms / 1000;

	return auth_count_one(&auth_client_lookups[client % AUTH_CLIENT_SLOTS], sec,
			      AUTH_LOOKUPS_PER_CLIENT) &&
	       auth_count_one(&auth_lookups, sec, AUTH_LOOKUPS_PER_SECOND);
}

/* Whether HASH was refused less than AUTH_NEGATIVE_MS ago (SET: remember
 * that it was refused now). */
static int auth_refused_recently(const uint8_t hash[32], size_t slot, int64_t now_ms, int set)
{
	int hit;

	slot %= AUTH_NEGATIVE_SLOTS;
	if (set) {
		pthread_rwlock_wrlock(&auth_lock);
		memcpy(auth_refused[slot].an_hash, hash, 32);
		auth_refused[slot].an_at_ms = now_ms;
		pthread_rwlock_unlock(&auth_lock);
		return 1;
	}
	pthread_rwlock_rdlock(&auth_lock);
	hit = auth_refused[slot].an_at_ms != 0 &&
	      now_ms - auth_refused[slot].an_at_ms < AUTH_NEGATIVE_MS &&
	      sodium_memcmp(auth_refused[slot].an_hash, hash, 32) == 0;
	pthread_rwlock_unlock(&auth_lock);
	return hit;
}

static size_t auth_known_start(const uint8_t hash[32], size_t cap)
{
	size_t h;

	memcpy(&h, hash + 8, sizeof(h)); /* other bytes than auth_slot's */
	return h & (cap - 1);
}

/* The index of HASH in the known set, or -1. Under auth_lock. */
static long auth_known_find(const uint8_t hash[32])
{
	size_t cap = auth_known.ak_cap;

	if (cap == 0)
		return -1;
	for (size_t i = auth_known_start(hash, cap), n = 0; n < cap; i = (i + 1) & (cap - 1), n++) {
		if (auth_known.ak_state[i] == AUTH_KNOWN_EMPTY)
			return -1; /* an empty slot ends the probe */
		if (sodium_memcmp(auth_known.ak_rows[i].ak_hash, hash, 32) == 0)
			return auth_known.ak_state[i] == AUTH_KNOWN_LIVE ? (long)i : -1;
	}
	return -1;
}

static int64_t auth_clock_default(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t (*auth_now_ms)(void) = auth_clock_default;

void auth_set_clock(int64_t (*now_ms)(void))
{
	auth_now_ms = now_ms != NULL ? now_ms : auth_clock_default;
}

/* Builds a known set of the N keys in ROWS into K. 0, or -1 (no memory). */
static int auth_known_build(struct auth_known *k, const struct api_key_row *rows, size_t n)
{
	size_t cap = 16;

	while (cap < 2 * n)
		cap *= 2;
	memset(k, 0, sizeof(*k));
	k->ak_rows = calloc(cap, sizeof(*k->ak_rows));
	k->ak_state = calloc(cap, 1);
	if (k->ak_rows == NULL || k->ak_state == NULL) {
		free(k->ak_rows);
		free(k->ak_state);
		return -1;
	}
	k->ak_cap = cap;
	for (size_t j = 0; j < n; j++) {
		size_t i = auth_known_start(rows[j].ak_hash, cap);
		while (k->ak_state[i] != AUTH_KNOWN_EMPTY &&
		       memcmp(k->ak_rows[i].ak_hash, rows[j].ak_hash, 32) != 0)
			i = (i + 1) & (cap - 1);
		if (k->ak_state[i] == AUTH_KNOWN_EMPTY)
			k->ak_n++;
		k->ak_rows[i] = rows[j];
		k->ak_state[i] = AUTH_KNOWN_LIVE;
	}
	return 0;
}

int auth_refresh(void)
{
	int64_t count, sum, now = auth_now_ms();
	struct api_key_row *rows = NULL;
	struct auth_known next, old;
	size_t n = 0;

	if (store_api_keys_sum(&count, &sum) < 0)
		return -1;
	pthread_rwlock_rdlock(&auth_lock);
	int same = auth_known.ak_cap != 0 && auth_known.ak_count == count &&
		   auth_known.ak_sum == sum;
	pthread_rwlock_unlock(&auth_lock);
	if (same) {
		/* what the set holds was confirmed now */
		pthread_rwlock_wrlock(&auth_lock);
		if (auth_known.ak_count == count && auth_known.ak_sum == sum)
			auth_known.ak_read_ms = now;
		pthread_rwlock_unlock(&auth_lock);
		return 0;
	}
	if (store_api_keys_all(&rows, &n) < 0)
		return -1;
	int rc = auth_known_build(&next, rows, n);
	sodium_memzero(rows, n * sizeof(*rows));
	free(rows);
	if (rc < 0)
		return -1;
	/* the pair read before the rows: a key added between the two reads
	 * changes it again, and the next refresh reads the rows again */
	next.ak_count = count;
	next.ak_sum = sum;
	next.ak_read_ms = now;
	pthread_rwlock_wrlock(&auth_lock);
	old = auth_known;
	auth_known = next;
	pthread_rwlock_unlock(&auth_lock);
	free(old.ak_rows);
	free(old.ak_state);
	return 0;
}

void auth_key_generate(char *out, size_t outlen)
{
	unsigned char raw[32];

	randombytes_buf(raw, sizeof(raw));
	memcpy(out, AUTH_KEY_PREFIX, 4);
	sodium_bin2base64(out + 4, outlen - 4, raw, sizeof(raw),
			  sodium_base64_VARIANT_URLSAFE_NO_PADDING);
	sodium_memzero(raw, sizeof(raw));
}

void auth_key_hash(const char *key, size_t len, uint8_t out[32])
{
	crypto_generichash(out, 32, (const unsigned char *)key, len, NULL, 0);
}

static size_t auth_slot(const uint8_t hash[32])
{
	size_t s;

	memcpy(&s, hash, sizeof(s));
	return s % AUTH_CACHE_SLOTS;
}

/* Stores (or refreshes) the cache entry of HASH in SLOT. */
static void auth_cache_put(size_t slot, const uint8_t hash[32], uint32_t tenant_id, uint32_t key_id,
			   int64_t checked_ms)
{
	pthread_rwlock_wrlock(&auth_lock);
	memcpy(auth_cache[slot].ae_hash, hash, 32);
	auth_cache[slot].ae_tenant_id = tenant_id;
	auth_cache[slot].ae_key_id = key_id;
	auth_cache[slot].ae_used = 1;
	auth_cache[slot].ae_checked_ms = checked_ms;
	pthread_rwlock_unlock(&auth_lock);
}

/* Forgets the entry of HASH in SLOT, if it is still there, and its row of
 * the known set until the next read of the set. */
static void auth_cache_drop(size_t slot, const uint8_t hash[32])
{
	pthread_rwlock_wrlock(&auth_lock);
	struct auth_entry *e = &auth_cache[slot];
	if (e->ae_used && sodium_memcmp(e->ae_hash, hash, 32) == 0)
		sodium_memzero(e, sizeof(*e));
	long known = auth_known_find(hash);
	if (known >= 0)
		auth_known.ak_state[known] = AUTH_KNOWN_DEAD;
	pthread_rwlock_unlock(&auth_lock);
}

/* What memory says of the key whose hash is HASH (cache slot SLOT): its
 * tenant and key id, and when that was last confirmed, from the cache
 * entry or the known set, whichever was confirmed later. 1, or 0 when
 * neither holds it. */
static int auth_remembered(const uint8_t hash[32], size_t slot, uint32_t *tenant_id,
			   uint32_t *key_id, int64_t *checked)
{
	int cached = 0;

	pthread_rwlock_rdlock(&auth_lock);
	const struct auth_entry *e = &auth_cache[slot];
	if (e->ae_used && sodium_memcmp(e->ae_hash, hash, 32) == 0) {
		*tenant_id = e->ae_tenant_id;
		*key_id = e->ae_key_id;
		*checked = e->ae_checked_ms;
		cached = 1;
	}
	/* the known set, when it was confirmed later than the cache entry */
	long known = auth_known_find(hash);
	if (known >= 0 && (!cached || auth_known.ak_read_ms > *checked)) {
		*tenant_id = auth_known.ak_rows[known].ak_tenant_id;
		*key_id = auth_known.ak_rows[known].ak_key_id;
		*checked = auth_known.ak_read_ms;
		cached = 1;
	}
	pthread_rwlock_unlock(&auth_lock);
	return cached;
}

/* auth_check(); *CHECKED_MS: when the answer was last confirmed. */
static int auth_lookup(const char *key, size_t client, uint32_t *tenant_id, uint32_t *key_id,
		       int64_t *checked_ms)
{
	uint32_t cached_key = 0;
	uint8_t hash[32];
	size_t len = strlen(key);
	int found = 0;
	uint32_t cached_tenant = 0;
	int64_t checked = 0, now;

	if (len != AUTH_KEY_CHARS || strncmp(key, AUTH_KEY_PREFIX, 4) != 0)
		return AUTH_DENIED;
	auth_key_hash(key, len, hash);
	size_t slot = auth_slot(hash);
	int cached = auth_remembered(hash, slot, &cached_tenant, &cached_key, &checked);
	now = auth_now_ms();
	if (cached && now - checked < AUTH_RECHECK_MS) {
		*tenant_id = cached_tenant;
		*key_id = cached_key;
		*checked_ms = checked;
		return AUTH_OK;
	}

	if (!cached) {
		if (auth_refused_recently(hash, slot, now, 0))
			return AUTH_DENIED;
		if (!auth_lookup_allowed(client, now))
			return AUTH_UNAVAILABLE;
	}
	if (store_tenant_by_key(hash, tenant_id, key_id, &found) < 0) {
		if (!cached)
			return AUTH_UNAVAILABLE;
		/* the database cannot say it was revoked: keep the last answer,
		 * ask again in a second */
		checked = now - AUTH_RECHECK_MS + AUTH_RETRY_MS;
		auth_cache_put(slot, hash, cached_tenant, cached_key, checked);
		*tenant_id = cached_tenant;
		*key_id = cached_key;
		*checked_ms = checked;
		return AUTH_OK;
	}
	if (!found) {
		if (cached)
			auth_cache_drop(slot, hash);
		(void)auth_refused_recently(hash, slot, now, 1);
		return AUTH_DENIED;
	}
	auth_cache_put(slot, hash, *tenant_id, *key_id, now);
	*checked_ms = now;
	return AUTH_OK;
}

int auth_check(const char *key, size_t client, uint32_t *tenant_id)
{
	int64_t checked;
	uint32_t key_id;

	return auth_lookup(key, client, tenant_id, &key_id, &checked);
}

int auth_check_memo(const char *key, size_t client, struct auth_memo *memo, uint32_t *tenant_id)
{
	unsigned gen = atomic_load(&auth_gen);
	int64_t checked;

	if (memo == NULL)
		return auth_check(key, client, tenant_id);
	unsigned char padded[sizeof(memo->am_key)] = { 0 };
	_Static_assert(AUTH_KEY_CHARS < sizeof(padded), "a key fits the memo");

	if (memo->am_gen == gen && auth_now_ms() - memo->am_checked_ms < AUTH_RECHECK_MS &&
	    strnlen(key, AUTH_KEY_CHARS + 1) == AUTH_KEY_CHARS) {
		memcpy(padded, key, AUTH_KEY_CHARS);
		int same = crypto_verify_64(memo->am_key, padded) == 0;
		sodium_memzero(padded, sizeof(padded));
		if (same) {
			*tenant_id = memo->am_tenant_id;
			return AUTH_OK;
		}
	}
	uint32_t key_id = 0;
	int rc = auth_lookup(key, client, tenant_id, &key_id, &checked);
	if (rc == AUTH_OK) {
		/* auth_check accepts only keys of exactly AUTH_KEY_CHARS */
		memset(memo->am_key, 0, sizeof(memo->am_key));
		memcpy(memo->am_key, key, AUTH_KEY_CHARS);
		memo->am_tenant_id = *tenant_id;
		memo->am_key_id = key_id;
		memo->am_gen = gen;
		memo->am_checked_ms = checked;
	}
	return rc;
}

void auth_memo_wipe(struct auth_memo *memo)
{
	sodium_memzero(memo, sizeof(*memo));
}

void auth_cache_clear(void)
{
	pthread_rwlock_wrlock(&auth_lock);
	sodium_memzero(auth_cache, sizeof(auth_cache));
	sodium_memzero(auth_refused, sizeof(auth_refused));
	atomic_store(&auth_lookups.ac_second, -1);
	for (size_t i = 0; i < AUTH_CLIENT_SLOTS; i++)
		atomic_store(&auth_client_lookups[i].ac_second, -1);
	atomic_fetch_add(&auth_gen, 1);
	struct auth_known old = auth_known;
	memset(&auth_known, 0, sizeof(auth_known));
	pthread_rwlock_unlock(&auth_lock);
	free(old.ak_rows);
	free(old.ak_state);
}
