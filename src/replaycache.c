/* Replay cache: a 16-way set-associative table of owned response copies
 * (and, once asked for, the rendered direct API reply) under striped
 * mutexes, with a tag array for cheap lookups. Each key may live in either
 * of two sets (two-choice hashing: a new entry goes where there is room),
 * so sets almost never overflow before the table is full; when both are
 * full the least recently used of the two sets' entries goes. */
#include "replaycache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPLAYCACHE_STRIPES 256

struct replaycache_entry {
	uint32_t re_tenant_id;
	uint8_t re_id[16];
	int re_has_fp;
	uint8_t re_fp[STORE_HASH_BYTES];
	int64_t re_expires_at;
	uint64_t re_tick;               /* last use, for least-recently-used eviction */
	struct stored_response re_resp; /* sr_body from malloc here */
	char *re_reply;                 /* rendered direct API reply, or NULL */
	size_t re_reply_len;
	char *re_raw;                   /* a request body as sent that gave re_fp, or NULL */
	size_t re_raw_len;
	int re_used;
};

static struct replaycache_entry replaycache_slots[REPLAYCACHE_SLOTS];
/* A short tag of each slot's key (0: empty), so that a lookup reads one
 * cache line of tags per set instead of every entry of the set. */
static _Alignas(64) uint32_t replaycache_tags[REPLAYCACHE_SLOTS];
static atomic_size_t replaycache_bytes; /* bodies and headers held */
static atomic_uint_fast64_t replaycache_clock;
static pthread_mutex_t replaycache_locks[REPLAYCACHE_STRIPES] = {
	[0 ... REPLAYCACHE_STRIPES - 1] = PTHREAD_MUTEX_INITIALIZER
};

#define REPLAYCACHE_SETS (REPLAYCACHE_SLOTS / REPLAYCACHE_WAYS)

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

static int64_t replaycache_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static size_t replaycache_size(const struct stored_response *r)
{
	return r->sr_body_len + (r->sr_headers ? strlen(r->sr_headers) : 0);
}

/* Bytes E holds, as counted against REPLAYCACHE_MAX_BYTES. */
static size_t replaycache_entry_bytes(const struct replaycache_entry *e)
{
	return e->re_used ? replaycache_size(&e->re_resp) + e->re_reply_len + e->re_raw_len : 0;
}

static void replaycache_drop(struct replaycache_entry *e)
{
	atomic_fetch_sub(&replaycache_bytes, replaycache_entry_bytes(e));
	free(e->re_reply);
	free(e->re_raw);
	free(e->re_resp.sr_headers);
	free(e->re_resp.sr_body);
	memset(e, 0, sizeof(*e));
	replaycache_tags[e - replaycache_slots] = 0;
}

static struct replaycache_entry *replaycache_find(size_t set, uint32_t tenant_id,
						  const uint8_t id[16]);
static struct replaycache_entry *replaycache_find2(const struct replaycache_pair *p,
						   uint32_t tenant_id, const uint8_t id[16]);

/* Copies SRC into DST with freshly allocated buffers. 0 or -1. */
static int replaycache_copy(struct stored_response *dst, const struct stored_response *src)
{
	*dst = *src;
	dst->sr_headers = strdup(src->sr_headers ? src->sr_headers : "{}");
	dst->sr_body = malloc(src->sr_body_len + 1);
	if (dst->sr_headers == NULL || dst->sr_body == NULL) {
		free(dst->sr_headers);
		free(dst->sr_body);
		memset(dst, 0, sizeof(*dst));
		return -1;
	}
	if (src->sr_body_len > 0)
		memcpy(dst->sr_body, src->sr_body, src->sr_body_len);
	dst->sr_body[src->sr_body_len] = '\0';
	return 0;
}

/* Evicts entries round the table (a clock hand, one stripe locked at a
 * time) until NEED more bytes fit under the bound or a whole turn is done.
 * Called with no lock held. */
static void replaycache_make_room(size_t need)
{
	static atomic_size_t hand;

	for (size_t n = 0; n < REPLAYCACHE_SLOTS &&
	     atomic_load(&replaycache_bytes) + need > REPLAYCACHE_MAX_BYTES; n++) {
		size_t i = atomic_fetch_add(&hand, 1) % REPLAYCACHE_SLOTS;
		pthread_mutex_t *lock =
			&replaycache_locks[(i / REPLAYCACHE_WAYS) % REPLAYCACHE_STRIPES];
		pthread_mutex_lock(lock);
		if (replaycache_slots[i].re_used)
			replaycache_drop(&replaycache_slots[i]);
		pthread_mutex_unlock(lock);
	}
}

void replaycache_put(uint32_t tenant_id, const uint8_t id[16], const uint8_t *fp,
		     const struct stored_response *r, int64_t expires_at)
{
	struct replaycache_entry fresh = { 0 };

	if (r->sr_body_len > REPLAYCACHE_MAX_BODY || replaycache_copy(&fresh.re_resp, r) < 0)
		return;
	fresh.re_tenant_id = tenant_id;
	memcpy(fresh.re_id, id, sizeof(fresh.re_id));
	fresh.re_has_fp = fp != NULL;
	if (fp != NULL)
		memcpy(fresh.re_fp, fp, sizeof(fresh.re_fp));
	fresh.re_expires_at = expires_at;
	fresh.re_tick = atomic_fetch_add(&replaycache_clock, 1);
	fresh.re_used = 1;

	struct replaycache_pair p;
	replaycache_make_room(replaycache_size(&fresh.re_resp));
	replaycache_pair_lock(&p, tenant_id, id);
	/* the key's own entry, else a free slot in the emptier set (while the
	 * byte bound allows growth), else the least recently used of both
	 * sets: a full cache keeps turning over instead of refusing newer
	 * responses */
	size_t need = replaycache_size(&fresh.re_resp);
	int room = atomic_load(&replaycache_bytes) + need <= REPLAYCACHE_MAX_BYTES;
	struct replaycache_entry *victim = replaycache_find2(&p, tenant_id, id);
	if (victim == NULL && room) {
		size_t best_free = 0;
		for (int k = 0; k < 2; k++) {
			size_t nfree = 0;
			struct replaycache_entry *slot = NULL;
			for (size_t w = 0; w < REPLAYCACHE_WAYS; w++)
				if (replaycache_tags[p.rp_set[k] + w] == 0) {
					nfree++;
					if (slot == NULL)
						slot = &replaycache_slots[p.rp_set[k] + w];
				}
			if (nfree > best_free) {
				best_free = nfree;
				victim = slot;
			}
		}
	}
	if (victim == NULL) {
		victim = &replaycache_slots[p.rp_set[0]];
		for (int k = 0; k < 2; k++)
			for (size_t w = 0; w < REPLAYCACHE_WAYS; w++)
				if (replaycache_slots[p.rp_set[k] + w].re_tick < victim->re_tick)
					victim = &replaycache_slots[p.rp_set[k] + w];
	}
	size_t freed = replaycache_entry_bytes(victim);
	if (atomic_load(&replaycache_bytes) - freed + need > REPLAYCACHE_MAX_BYTES) {
		/* even the eviction would not make room: keep what is there */
		replaycache_pair_unlock(&p);
		free(fresh.re_resp.sr_headers);
		free(fresh.re_resp.sr_body);
		return;
	}
	replaycache_drop(victim);
	*victim = fresh;
	replaycache_tags[victim - replaycache_slots] = replaycache_tag(tenant_id, id);
	atomic_fetch_add(&replaycache_bytes, replaycache_size(&fresh.re_resp));
	replaycache_pair_unlock(&p);
}

/* The live entry for (TENANT, ID) in its set, or NULL; drops it if it has
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
		if (e->re_expires_at <= replaycache_now_ms()) {
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

static int replaycache_fp_equal(const struct replaycache_entry *e, const uint8_t *fp)
{
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

int replaycache_lookup(uint32_t tenant_id, const uint8_t id[16], const uint8_t *fp,
		       struct stored_response *out, char **reply, size_t *reply_len)
{
	struct replaycache_pair p;
	int ret = 0;

	memset(out, 0, sizeof(*out));
	if (reply != NULL)
		*reply = NULL;
	replaycache_pair_lock(&p, tenant_id, id);
	struct replaycache_entry *e = replaycache_find2(&p, tenant_id, id);
	if (e == NULL) {
		ret = 0;
	} else if (!replaycache_fp_equal(e, fp)) {
		ret = 2;
	} else if (reply != NULL && e->re_reply != NULL) {
		*reply = replaycache_dup(e->re_reply, e->re_reply_len);
		*reply_len = e->re_reply_len;
		ret = *reply != NULL;
	} else if (replaycache_copy(out, &e->re_resp) == 0) {
		ret = 1;
	}
	if (ret == 1)
		e->re_tick = atomic_fetch_add(&replaycache_clock, 1);
	replaycache_pair_unlock(&p);
	return ret;
}

int replaycache_get(uint32_t tenant_id, const uint8_t id[16], const uint8_t *fp,
		    struct stored_response *out)
{
	return replaycache_lookup(tenant_id, id, fp, out, NULL, NULL);
}

int replaycache_get_raw(uint32_t tenant_id, const uint8_t id[16], const void *raw,
			size_t raw_len, char **reply, size_t *reply_len)
{
	struct replaycache_pair p;
	int ret = 0;

	*reply = NULL;
	replaycache_pair_lock(&p, tenant_id, id);
	struct replaycache_entry *e = replaycache_find2(&p, tenant_id, id);
	if (e != NULL && e->re_raw != NULL && e->re_reply != NULL && e->re_raw_len == raw_len &&
	    memcmp(e->re_raw, raw, raw_len) == 0) {
		*reply = replaycache_dup(e->re_reply, e->re_reply_len);
		*reply_len = e->re_reply_len;
		if (*reply != NULL) {
			e->re_tick = atomic_fetch_add(&replaycache_clock, 1);
			ret = 1;
		}
	}
	replaycache_pair_unlock(&p);
	return ret;
}

void replaycache_set_reply(uint32_t tenant_id, const uint8_t id[16], const uint8_t *fp,
			   const void *raw, size_t raw_len, const char *reply, size_t reply_len)
{
	struct replaycache_pair p;
	char *copy = NULL;

	replaycache_pair_lock(&p, tenant_id, id);
	struct replaycache_entry *e = replaycache_find2(&p, tenant_id, id);
	if (e == NULL || !replaycache_fp_equal(e, fp))
		goto out;
	if (e->re_reply == NULL) {
		if (reply_len > REPLAYCACHE_MAX_REPLY ||
		    atomic_load(&replaycache_bytes) + reply_len > REPLAYCACHE_MAX_BYTES ||
		    (copy = replaycache_dup(reply, reply_len)) == NULL)
			goto out;
		e->re_reply = copy;
		e->re_reply_len = reply_len;
		atomic_fetch_add(&replaycache_bytes, reply_len);
	}
	if (raw != NULL && raw_len <= REPLAYCACHE_MAX_RAW &&
	    (e->re_raw == NULL || e->re_raw_len != raw_len ||
	     memcmp(e->re_raw, raw, raw_len) != 0) &&
	    atomic_load(&replaycache_bytes) + raw_len <= REPLAYCACHE_MAX_BYTES &&
	    (copy = replaycache_dup(raw, raw_len)) != NULL) {
		atomic_fetch_sub(&replaycache_bytes, e->re_raw_len);
		free(e->re_raw);
		e->re_raw = copy;
		e->re_raw_len = raw_len;
		atomic_fetch_add(&replaycache_bytes, raw_len);
	}
out:
	replaycache_pair_unlock(&p);
}

void replaycache_clear(void)
{
	for (size_t i = 0; i < REPLAYCACHE_SLOTS; i++) {
		pthread_mutex_t *lock =
			&replaycache_locks[(i / REPLAYCACHE_WAYS) % REPLAYCACHE_STRIPES];
		pthread_mutex_lock(lock);
		replaycache_drop(&replaycache_slots[i]);
		pthread_mutex_unlock(lock);
	}
}
