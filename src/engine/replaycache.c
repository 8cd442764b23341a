/* Replay cache: a 16-way set-associative table of response copies (and,
 * once asked for, one rendered reply and a request body that gave it)
 * under striped mutexes, with a tag array for cheap lookups. Each key may
 * live in either of two sets (two-choice hashing: a new entry goes
 * where there is room), so sets almost never overflow before the table is
 * full; when both are full the least recently used of the two sets'
 * entries goes. Writers lock both sets of a key; readers one set at a
 * time (an entry never moves, and a miss only costs a database read).
 * Everything an entry holds is one allocation, so turnover leaves few
 * holes in the heap. */
#include "replaycache.h"

#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

#define REPLAYCACHE_STRIPES 256

struct replaycache_entry {
	uint32_t re_tenant_id;
	uint8_t re_id[16];
	uint8_t re_used, re_has_fp, re_is_json, re_has_raw;
	uint8_t re_reply_kind; /* 0: no rendered reply */
	uint8_t re_fp[STORE_HASH_BYTES];
	uint8_t re_has_alias;
	uint8_t re_alias[STORE_HASH_BYTES]; /* replaycache_set_alias */
	int32_t re_status;
	int64_t re_expires_at;
	uint64_t re_tick; /* last use, for least-recently-used eviction */
	/* one block: headers NUL body NUL [reply NUL [raw]] */
	char *re_data;
	uint32_t re_headers_len, re_body_len, re_reply_len, re_raw_len;
};

static struct replaycache_entry replaycache_slots[REPLAYCACHE_SLOTS];
/* A short tag of each slot's key (0: empty), so that a lookup reads one
 * cache line of tags per set instead of every entry of the set. */
static _Alignas(64) uint32_t replaycache_tags[REPLAYCACHE_SLOTS];
static atomic_size_t replaycache_bytes; /* what the blocks hold */
/* ... per tenant (hashed slots): once the cache is full, a tenant that
 * holds more than half of it evicts its own entries, never another's, so
 * its large answers cannot evict every other tenant's; a lone tenant
 * still uses the whole cache */
#define REPLAYCACHE_TENANT_SLOTS 256
#define REPLAYCACHE_TENANT_MAX (REPLAYCACHE_MAX_BYTES / 2)
static atomic_size_t replaycache_tenant_bytes[REPLAYCACHE_TENANT_SLOTS];
static atomic_size_t replaycache_entries;
static atomic_uint_fast64_t replaycache_clock;
static pthread_mutex_t replaycache_locks[REPLAYCACHE_STRIPES] = { [0 ... REPLAYCACHE_STRIPES -
								   1] = PTHREAD_MUTEX_INITIALIZER };

#define REPLAYCACHE_SETS (REPLAYCACHE_SLOTS / REPLAYCACHE_WAYS)

/* Whether entry E is past its expiry (the mutant serves it anyway). A
 * macro, not a conditional around a brace: one in each branch of a
 * conditional blinds lizard (tests/static/functions.py). */
#ifdef IDEMD_MUTANT_REPLAY_IGNORES_EXPIRY
#define REPLAYCACHE_EXPIRED(e) 0
#else
#define REPLAYCACHE_EXPIRED(e) ((e)->re_expires_at <= idemd_unix_ms())
#endif

/* First slot of set WHICH (0 or 1) of the two that (TENANT, ID) may use. */
static size_t replaycache_set(uint32_t tenant_id, const uint8_t id[16], int which)
{
	uint64_t h;

	/* token ids are uniformly random: the first set from their first
	 * half, the second from a mix of their second half */
	memcpy(&h, id + (which ? 8 : 0), sizeof(h));
	if (which)
		h = (h * 0x9e3779b97f4a7c15ull) >> 29;
	return (size_t)((h ^ tenant_id) % REPLAYCACHE_SETS) * REPLAYCACHE_WAYS;
}

/* The tag of (TENANT, ID): bits of the id the set index does not use. */
static uint32_t replaycache_tag(uint32_t tenant_id, const uint8_t id[16])
{
	uint32_t t;

	memcpy(&t, id + 8, sizeof(t));
	return (t ^ (tenant_id * 0x9e3779b1u)) | 1u;
}

static pthread_mutex_t *replaycache_lock_of(size_t set)
{
	return &replaycache_locks[(set / REPLAYCACHE_WAYS) % REPLAYCACHE_STRIPES];
}

/* The two sets of a key, with their stripes locked (in address order). */
struct replaycache_pair {
	size_t rp_set[2];
	pthread_mutex_t *rp_lock[2]; /* rp_lock[1] NULL when both share one */
};

static void replaycache_pair_lock(struct replaycache_pair *p, uint32_t tenant_id,
				  const uint8_t id[16])
{
	p->rp_set[0] = replaycache_set(tenant_id, id, 0);
	p->rp_set[1] = replaycache_set(tenant_id, id, 1);
	pthread_mutex_t *a = replaycache_lock_of(p->rp_set[0]);
	pthread_mutex_t *b = replaycache_lock_of(p->rp_set[1]);
	if (a > b) {
		pthread_mutex_t *t = a;
		a = b;
		b = t;
	}
	p->rp_lock[0] = a;
	p->rp_lock[1] = a == b ? NULL : b;
	pthread_mutex_lock(a);
	if (p->rp_lock[1] != NULL)
		pthread_mutex_lock(p->rp_lock[1]);
}

static void replaycache_pair_unlock(struct replaycache_pair *p)
{
	if (p->rp_lock[1] != NULL)
		pthread_mutex_unlock(p->rp_lock[1]);
	pthread_mutex_unlock(p->rp_lock[0]);
}

/* Where the parts of E's block start. */
static const char *replaycache_body(const struct replaycache_entry *e)
{
	return e->re_data + e->re_headers_len + 1;
}

static const char *replaycache_reply(const struct replaycache_entry *e)
{
	return replaycache_body(e) + e->re_body_len + 1;
}

static const char *replaycache_raw(const struct replaycache_entry *e)
{
	return replaycache_reply(e) + e->re_reply_len + 1;
}

/* Bytes E holds, as counted against REPLAYCACHE_MAX_BYTES. */
static size_t replaycache_entry_bytes(const struct replaycache_entry *e)
{
	return e->re_used ? (size_t)e->re_headers_len + e->re_body_len + e->re_reply_len +
				    e->re_raw_len
			  : 0;
}

static void replaycache_drop(struct replaycache_entry *e)
{
	if (e->re_used)
		atomic_fetch_sub(&replaycache_entries, 1);
	atomic_fetch_sub(&replaycache_bytes, replaycache_entry_bytes(e));
	atomic_fetch_sub(&replaycache_tenant_bytes[e->re_tenant_id % REPLAYCACHE_TENANT_SLOTS],
			 replaycache_entry_bytes(e));
	free(e->re_data);
	memset(e, 0, sizeof(*e));
	replaycache_tags[e - replaycache_slots] = 0;
}

/*
 * A new block of E's headers and body followed by REPLY and RAW (either
 * NULL: none), each part NUL-terminated but RAW; NULL when out of memory.
 */
static char *replaycache_block(const char *headers, size_t headers_len, const void *body,
			       size_t body_len, const char *reply, size_t reply_len,
			       const void *raw, size_t raw_len)
{
	char *b = malloc(headers_len + body_len + reply_len + raw_len + 3);
	char *p = b;

	if (b == NULL)
		return NULL;
	memcpy(p, headers, headers_len);
	p += headers_len;
	*p++ = '\0';
	if (body_len > 0)
		memcpy(p, body, body_len);
	p += body_len;
	*p++ = '\0';
	if (reply_len > 0)
		memcpy(p, reply, reply_len);
	p += reply_len;
	*p++ = '\0';
	if (raw_len > 0)
		memcpy(p, raw, raw_len);
	return b;
}

/* Evicts entries round the table (a clock hand, one stripe locked at a
 * time) until NEED more bytes fit under the bound or a whole turn is done.
 * Called with no lock held. */
static void replaycache_make_room(size_t need, uint32_t tenant_id)
{
	static atomic_size_t hand;
	size_t slot = tenant_id % REPLAYCACHE_TENANT_SLOTS;
	atomic_size_t *mine = &replaycache_tenant_bytes[slot];

	/* when the cache is full, a tenant over its share makes room among
	 * its own entries (while there is room, one tenant may use it all) */
	for (size_t n = 0;
	     n < REPLAYCACHE_SLOTS && atomic_load(mine) + need > REPLAYCACHE_TENANT_MAX &&
	     atomic_load(&replaycache_bytes) + need > REPLAYCACHE_MAX_BYTES;
	     n++) {
		size_t i = atomic_fetch_add(&hand, 1) % REPLAYCACHE_SLOTS;
		pthread_mutex_t *lock = replaycache_lock_of(i - i % REPLAYCACHE_WAYS);
		pthread_mutex_lock(lock);
		if (replaycache_slots[i].re_used &&
		    replaycache_slots[i].re_tenant_id % REPLAYCACHE_TENANT_SLOTS == slot)
			replaycache_drop(&replaycache_slots[i]);
		pthread_mutex_unlock(lock);
	}
	for (size_t n = 0; n < REPLAYCACHE_SLOTS &&
			   atomic_load(&replaycache_bytes) + need > REPLAYCACHE_MAX_BYTES;
	     n++) {
		size_t i = atomic_fetch_add(&hand, 1) % REPLAYCACHE_SLOTS;
		pthread_mutex_t *lock = replaycache_lock_of(i - i % REPLAYCACHE_WAYS);
		pthread_mutex_lock(lock);
		if (replaycache_slots[i].re_used)
			replaycache_drop(&replaycache_slots[i]);
		pthread_mutex_unlock(lock);
	}
}

/* The live entry for (TENANT, ID) in SET, or NULL; drops it if it has
 * expired. Called with the set's lock held. */
static struct replaycache_entry *replaycache_find(size_t set, uint32_t tenant_id,
						  const uint8_t id[16])
{
	uint32_t tag = replaycache_tag(tenant_id, id);

	for (size_t w = 0; w < REPLAYCACHE_WAYS; w++) {
		if (replaycache_tags[set + w] != tag)
			continue;
		struct replaycache_entry *e = &replaycache_slots[set + w];
		if (!e->re_used || e->re_tenant_id != tenant_id || memcmp(e->re_id, id, 16) != 0)
			continue;
		/* the record's expiry by the database's clock (common.h) */
		if (REPLAYCACHE_EXPIRED(e)) {
			replaycache_drop(e);
			return NULL;
		}
		return e;
	}
	return NULL;
}

/* The live entry for (TENANT, ID) in either of its sets (locked), or NULL. */
static struct replaycache_entry *replaycache_find2(const struct replaycache_pair *p,
						   uint32_t tenant_id, const uint8_t id[16])
{
	struct replaycache_entry *e = replaycache_find(p->rp_set[0], tenant_id, id);

	if (e == NULL && p->rp_set[1] != p->rp_set[0])
		e = replaycache_find(p->rp_set[1], tenant_id, id);
	return e;
}

/* Readers: the live entry of (TENANT, ID) with the lock of its set held
 * (*LOCK; unlock it when done), or NULL with no lock held. */
static struct replaycache_entry *replaycache_find_locked(uint32_t tenant_id, const uint8_t id[16],
							 pthread_mutex_t **lock)
{
	for (int which = 0; which < 2; which++) {
		size_t set = replaycache_set(tenant_id, id, which);
		*lock = replaycache_lock_of(set);
		pthread_mutex_lock(*lock);
		struct replaycache_entry *e = replaycache_find(set, tenant_id, id);
		if (e != NULL)
			return e;
		pthread_mutex_unlock(*lock);
	}
	*lock = NULL;
	return NULL;
}

/* Fills FRESH with a copy of R for (TENANT, ID) and FP. 0, or -1 when R
 * is too large to cache or memory runs out. */
static int replaycache_fill(struct replaycache_entry *fresh, uint32_t tenant_id,
			    const uint8_t id[16], const uint8_t *fp,
			    const struct stored_response *r)
{
	const char *headers = r->sr_headers ? r->sr_headers : "{}";
	size_t headers_len = strlen(headers);

	memset(fresh, 0, sizeof(*fresh));
	if (r->sr_body_len > REPLAYCACHE_MAX_BODY)
		return -1;
	fresh->re_data = replaycache_block(headers, headers_len, r->sr_body, r->sr_body_len, NULL,
					   0, NULL, 0);
	if (fresh->re_data == NULL)
		return -1;
	fresh->re_tenant_id = tenant_id;
	memcpy(fresh->re_id, id, sizeof(fresh->re_id));
	fresh->re_has_fp = fp != NULL;
	if (fp != NULL)
		memcpy(fresh->re_fp, fp, sizeof(fresh->re_fp));
	fresh->re_status = r->sr_status;
	fresh->re_is_json = r->sr_is_json != 0;
	fresh->re_headers_len = (uint32_t)headers_len;
	fresh->re_body_len = (uint32_t)r->sr_body_len;
	fresh->re_tick = atomic_fetch_add(&replaycache_clock, 1);
	fresh->re_used = 1;
	return 0;
}

/* The slot a new entry for (TENANT, ID) takes in the sets of P (locked):
 * the key's own entry, else a free slot in the emptier set (while the
 * byte bound allows growth: ROOM), else the least recently used of both
 * sets, so a full cache keeps turning over instead of refusing newer
 * responses. */
static struct replaycache_entry *replaycache_victim(const struct replaycache_pair *p,
						    uint32_t tenant_id, const uint8_t id[16],
						    int room)
{
	struct replaycache_entry *victim = replaycache_find2(p, tenant_id, id);
	size_t best_free = 0;

	for (int k = 0; victim == NULL && room && k < 2; k++) {
		size_t nfree = 0;
		struct replaycache_entry *slot = NULL;
		for (size_t w = 0; w < REPLAYCACHE_WAYS; w++)
			if (replaycache_tags[p->rp_set[k] + w] == 0) {
				nfree++;
				if (slot == NULL)
					slot = &replaycache_slots[p->rp_set[k] + w];
			}
		if (nfree > best_free) {
			best_free = nfree;
			victim = slot;
		}
	}
	if (victim != NULL)
		return victim;
	victim = &replaycache_slots[p->rp_set[0]];
	for (int k = 0; k < 2; k++)
		for (size_t w = 0; w < REPLAYCACHE_WAYS; w++)
			if (replaycache_slots[p->rp_set[k] + w].re_tick < victim->re_tick)
				victim = &replaycache_slots[p->rp_set[k] + w];
	return victim;
}

void replaycache_put(uint32_t tenant_id, const uint8_t id[16], const uint8_t *fp,
		     const struct stored_response *r, int64_t expires_at)
{
	struct replaycache_entry fresh;

	if (replaycache_fill(&fresh, tenant_id, id, fp, r) != 0)
		return;
	fresh.re_expires_at = expires_at;

	struct replaycache_pair p;
	size_t need = replaycache_entry_bytes(&fresh);
	atomic_size_t *mine = &replaycache_tenant_bytes[tenant_id % REPLAYCACHE_TENANT_SLOTS];
	replaycache_make_room(need, tenant_id);
	if (atomic_load(mine) + need > REPLAYCACHE_TENANT_MAX &&
	    atomic_load(&replaycache_bytes) + need > REPLAYCACHE_MAX_BYTES) {
		/* the tenant's share is full of entries in use: not cached */
		free(fresh.re_data);
		return;
	}
	replaycache_pair_lock(&p, tenant_id, id);
	struct replaycache_entry *victim = replaycache_victim(
		&p, tenant_id, id, atomic_load(&replaycache_bytes) + need <= REPLAYCACHE_MAX_BYTES);
	if (atomic_load(&replaycache_bytes) - replaycache_entry_bytes(victim) + need >
	    REPLAYCACHE_MAX_BYTES) {
		/* even the eviction would not make room: keep what is there */
		replaycache_pair_unlock(&p);
		free(fresh.re_data);
		return;
	}
	replaycache_drop(victim);
	*victim = fresh;
	replaycache_tags[victim - replaycache_slots] = replaycache_tag(tenant_id, id);
	atomic_fetch_add(&replaycache_bytes, need);
	atomic_fetch_add(mine, need);
	atomic_fetch_add(&replaycache_entries, 1);
	replaycache_pair_unlock(&p);
}

static int replaycache_fp_equal(const struct replaycache_entry *e, const uint8_t *fp)
{
#ifdef IDEMD_MUTANT_REPLAY_IGNORES_FINGERPRINT
	return 1;
#endif
	return e->re_has_fp == (fp != NULL) &&
	       (fp == NULL || memcmp(e->re_fp, fp, STORE_HASH_BYTES) == 0);
}

/* A new copy of LEN bytes at S plus a NUL, or NULL. */
static char *replaycache_dup(const char *s, size_t len)
{
	char *d = malloc(len + 1);

	if (d != NULL) {
		memcpy(d, s, len);
		d[len] = '\0';
	}
	return d;
}

/* Copies E's response into OUT with fresh buffers. 0 or -1. */
static int replaycache_copy(struct stored_response *out, const struct replaycache_entry *e)
{
	memset(out, 0, sizeof(*out));
	out->sr_status = e->re_status;
	out->sr_is_json = e->re_is_json;
	out->sr_body_len = e->re_body_len;
	out->sr_headers = replaycache_dup(e->re_data, e->re_headers_len);
	out->sr_body = (unsigned char *)replaycache_dup(replaycache_body(e), e->re_body_len);
	if (out->sr_headers == NULL || out->sr_body == NULL) {
		store_response_free(out);
		return -1;
	}
	return 0;
}

enum replaycache_hit replaycache_lookup(uint32_t tenant_id, const uint8_t id[16], const uint8_t *fp,
					int kind, struct stored_response *out, char **reply,
					size_t *reply_len)
{
	pthread_mutex_t *lock;
	enum replaycache_hit ret = REPLAYCACHE_MISS;

	memset(out, 0, sizeof(*out));
	if (reply != NULL)
		*reply = NULL;
	struct replaycache_entry *e = replaycache_find_locked(tenant_id, id, &lock);
	if (e == NULL) {
		metrics_add(METRIC_REPLAY_CACHE_MISSES, 1);
		return REPLAYCACHE_MISS;
	}
	if (!replaycache_fp_equal(e, fp)) {
		ret = REPLAYCACHE_OTHER_FP;
	} else if (reply != NULL && kind > 0 && e->re_reply_kind == kind) {
		*reply = replaycache_dup(replaycache_reply(e), e->re_reply_len);
		*reply_len = e->re_reply_len;
		ret = *reply != NULL ? REPLAYCACHE_HIT : REPLAYCACHE_MISS;
	} else if (replaycache_copy(out, e) == 0) {
		ret = REPLAYCACHE_HIT;
	}
	if (ret == REPLAYCACHE_HIT)
		e->re_tick = atomic_fetch_add(&replaycache_clock, 1);
	pthread_mutex_unlock(lock);
	metrics_add(ret != REPLAYCACHE_MISS ? METRIC_REPLAY_CACHE_HITS : METRIC_REPLAY_CACHE_MISSES,
		    1);
	return ret;
}

int replaycache_has(uint32_t tenant_id, const uint8_t id[16])
{
	pthread_mutex_t *lock;
	struct replaycache_entry *e = replaycache_find_locked(tenant_id, id, &lock);

	if (e == NULL)
		return 0;
	pthread_mutex_unlock(lock);
	return 1;
}

/* Ends a lookup by a second name of the request (its bytes, or its body)
 * on E, whose set's LOCK is held: a HIT marks E used and is counted; a
 * miss goes on to replaycache_lookup, which counts it. */
static enum replaycache_hit replaycache_end_second(struct replaycache_entry *e,
						   pthread_mutex_t *lock, int hit)
{
	if (hit)
		e->re_tick = atomic_fetch_add(&replaycache_clock, 1);
	pthread_mutex_unlock(lock);
	if (!hit)
		return REPLAYCACHE_MISS;
	metrics_add(METRIC_REPLAY_CACHE_HITS, 1);
	return REPLAYCACHE_HIT;
}

void replaycache_set_alias(uint32_t tenant_id, const uint8_t id[16], const uint8_t *fp,
			   const uint8_t alias[STORE_HASH_BYTES])
{
	pthread_mutex_t *lock;
	struct replaycache_entry *e = replaycache_find_locked(tenant_id, id, &lock);

	if (e == NULL)
		return;
	if (replaycache_fp_equal(e, fp)) {
		memcpy(e->re_alias, alias, STORE_HASH_BYTES);
		e->re_has_alias = 1;
	}
	pthread_mutex_unlock(lock);
}

enum replaycache_hit replaycache_get_alias(uint32_t tenant_id, const uint8_t id[16],
					   const uint8_t alias[STORE_HASH_BYTES],
					   struct stored_response *out)
{
	pthread_mutex_t *lock;

	memset(out, 0, sizeof(*out));
	struct replaycache_entry *e = replaycache_find_locked(tenant_id, id, &lock);
	if (e == NULL)
		return REPLAYCACHE_MISS;
	return replaycache_end_second(
		e, lock,
		e->re_has_alias && sodium_memcmp(e->re_alias, alias, STORE_HASH_BYTES) == 0 &&
			replaycache_copy(out, e) == 0);
}

enum replaycache_hit replaycache_get_raw(uint32_t tenant_id, const uint8_t id[16], int kind,
					 const void *raw, size_t raw_len, char **reply,
					 size_t *reply_len)
{
	pthread_mutex_t *lock;

	*reply = NULL;
	struct replaycache_entry *e = replaycache_find_locked(tenant_id, id, &lock);
	if (e == NULL)
		return REPLAYCACHE_MISS;
	/* constant time: a stored body is the client's data, and timing must
	 * not tell how much of it a guess got right */
	if (kind > 0 && e->re_reply_kind == kind && e->re_has_raw && e->re_raw_len == raw_len &&
	    sodium_memcmp(replaycache_raw(e), raw, raw_len) == 0) {
		*reply = replaycache_dup(replaycache_reply(e), e->re_reply_len);
		*reply_len = e->re_reply_len;
	}
	return replaycache_end_second(e, lock, *reply != NULL);
}

/* What an entry's block holds past its headers and body. */
struct replaycache_parts {
	const char *rt_reply;
	size_t rt_reply_len;
	const void *rt_raw; /* NULL: none */
	size_t rt_raw_len;
};

/* Puts in T the body E's block is to hold: T's, unless it is too large
 * (or there is none), else the one E holds (or none). 1 when that is no
 * body or the one E holds already (compared in constant time: a stored
 * body is the client's data), 0 when it is a new one. */
static int replaycache_raw_of(const struct replaycache_entry *e, struct replaycache_parts *t)
{
	if (t->rt_raw != NULL && t->rt_raw_len > REPLAYCACHE_MAX_RAW)
		t->rt_raw = NULL;
	if (t->rt_raw == NULL && e->re_has_raw) {
		t->rt_raw = replaycache_raw(e);
		t->rt_raw_len = e->re_raw_len;
	}
	if (t->rt_raw == NULL) {
		t->rt_raw_len = 0;
		return 1;
	}
	return e->re_has_raw && e->re_raw_len == t->rt_raw_len &&
	       sodium_memcmp(replaycache_raw(e), t->rt_raw, t->rt_raw_len) == 0;
}

/* Turns T, a reply of KIND and the body that gave it, into what E's block
 * is to hold: the reply first attached stays; a body replaces the one
 * before, and one too large keeps the one before. 0 when that is new, -1
 * when E cannot take it or holds it already. Called with E's lock held. */
static int replaycache_parts_of(const struct replaycache_entry *e, int kind,
				struct replaycache_parts *t)
{
	if (kind <= 0 || kind > UINT8_MAX || (e->re_reply_kind != 0 && e->re_reply_kind != kind))
		return -1;
	if (e->re_reply_kind != 0) {
		t->rt_reply = replaycache_reply(e);
		t->rt_reply_len = e->re_reply_len;
	} else if (t->rt_reply_len > REPLAYCACHE_MAX_REPLY) {
		return -1;
	}
	if (replaycache_raw_of(e, t) && e->re_reply_kind != 0)
		return -1; /* nothing new */
	return 0;
}

/* Replaces E's block by one that holds T as a reply of KIND, when the
 * byte bound allows it and memory does. Called with E's lock held. */
static void replaycache_reblock(struct replaycache_entry *e, int kind,
				const struct replaycache_parts *t)
{
	size_t old = replaycache_entry_bytes(e);
	size_t now = (size_t)e->re_headers_len + e->re_body_len + t->rt_reply_len + t->rt_raw_len;

	if (atomic_load(&replaycache_bytes) - old + now > REPLAYCACHE_MAX_BYTES)
		return;
	char *b = replaycache_block(e->re_data, e->re_headers_len, replaycache_body(e),
				    e->re_body_len, t->rt_reply, t->rt_reply_len, t->rt_raw,
				    t->rt_raw_len);
	if (b == NULL)
		return;
	free(e->re_data);
	e->re_data = b;
	e->re_reply_kind = (uint8_t)kind;
	e->re_reply_len = (uint32_t)t->rt_reply_len;
	e->re_has_raw = t->rt_raw != NULL;
	e->re_raw_len = (uint32_t)t->rt_raw_len;
	atomic_fetch_add(&replaycache_bytes, now);
	atomic_fetch_sub(&replaycache_bytes, old);
	atomic_size_t *mine = &replaycache_tenant_bytes[e->re_tenant_id % REPLAYCACHE_TENANT_SLOTS];
	atomic_fetch_add(mine, now);
	atomic_fetch_sub(mine, old);
}

void replaycache_set_reply(uint32_t tenant_id, const uint8_t id[16], const uint8_t *fp, int kind,
			   const void *raw, size_t raw_len, const char *reply, size_t reply_len)
{
	pthread_mutex_t *lock;
	struct replaycache_entry *e = replaycache_find_locked(tenant_id, id, &lock);
	struct replaycache_parts t = { reply, reply_len, raw, raw_len };

	if (e == NULL)
		return;
	if (replaycache_fp_equal(e, fp) && replaycache_parts_of(e, kind, &t) == 0)
		replaycache_reblock(e, kind, &t);
	pthread_mutex_unlock(lock);
}

void replaycache_usage(size_t *bytes, size_t *entries)
{
	*bytes = atomic_load(&replaycache_bytes);
	*entries = atomic_load(&replaycache_entries);
}

void replaycache_clear(void)
{
	for (size_t i = 0; i < REPLAYCACHE_SLOTS; i++) {
		pthread_mutex_t *lock = replaycache_lock_of(i - i % REPLAYCACHE_WAYS);
		pthread_mutex_lock(lock);
		replaycache_drop(&replaycache_slots[i]);
		pthread_mutex_unlock(lock);
	}
}
