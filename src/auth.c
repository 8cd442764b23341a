/* Authentication. Keys are random (256 bits), so a plain BLAKE2b hash is a
 * safe at-rest form; lookups go by hash and the final comparison of the full
 * hash is constant-time. Known keys are cached; unknown ones always ask the
 * database (a new tenant made by the CLI works at once). */
#include "auth.h"

#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <string.h>

#include "store.h"

#define AUTH_CACHE_SLOTS 4096

struct auth_entry {
	uint8_t ae_hash[32];
	uint32_t ae_tenant_id;
	int ae_used;
};

static struct auth_entry auth_cache[AUTH_CACHE_SLOTS];
static pthread_rwlock_t auth_lock = PTHREAD_RWLOCK_INITIALIZER;
static atomic_uint auth_gen = 1; /* bumped by auth_cache_clear() */

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

int auth_check(const char *key, uint32_t *tenant_id)
{
	uint8_t hash[32];
	size_t len = strlen(key);
	int found = 0;

	if (len != AUTH_KEY_CHARS || strncmp(key, AUTH_KEY_PREFIX, 4) != 0)
		return AUTH_DENIED;
	auth_key_hash(key, len, hash);
	size_t slot = auth_slot(hash);

	pthread_rwlock_rdlock(&auth_lock);
	const struct auth_entry *e = &auth_cache[slot];
	if (e->ae_used && sodium_memcmp(e->ae_hash, hash, sizeof(hash)) == 0) {
		*tenant_id = e->ae_tenant_id;
		found = 1;
	}
	pthread_rwlock_unlock(&auth_lock);
	if (found)
		return AUTH_OK;

	if (store_tenant_by_key(hash, tenant_id, &found) < 0)
		return AUTH_UNAVAILABLE;
	if (!found)
		return AUTH_DENIED;
	pthread_rwlock_wrlock(&auth_lock);
	memcpy(auth_cache[slot].ae_hash, hash, sizeof(hash));
	auth_cache[slot].ae_tenant_id = *tenant_id;
	auth_cache[slot].ae_used = 1;
	pthread_rwlock_unlock(&auth_lock);
	return AUTH_OK;
}

int auth_check_memo(const char *key, struct auth_memo *memo, uint32_t *tenant_id)
{
	unsigned gen = atomic_load(&auth_gen);

	if (memo == NULL)
		return auth_check(key, tenant_id);
	unsigned char padded[sizeof(memo->am_key)] = { 0 };
	_Static_assert(AUTH_KEY_CHARS < sizeof(padded), "a key fits the memo");

	if (memo->am_gen == gen && strnlen(key, AUTH_KEY_CHARS + 1) == AUTH_KEY_CHARS) {
		memcpy(padded, key, AUTH_KEY_CHARS);
		int same = crypto_verify_64(memo->am_key, padded) == 0;
		sodium_memzero(padded, sizeof(padded));
		if (same) {
			*tenant_id = memo->am_tenant_id;
			return AUTH_OK;
		}
	}
	int rc = auth_check(key, tenant_id);
	if (rc == AUTH_OK) {
		/* auth_check accepts only keys of exactly AUTH_KEY_CHARS */
		memset(memo->am_key, 0, sizeof(memo->am_key));
		memcpy(memo->am_key, key, AUTH_KEY_CHARS);
		memo->am_tenant_id = *tenant_id;
		memo->am_gen = gen;
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
	atomic_fetch_add(&auth_gen, 1);
	pthread_rwlock_unlock(&auth_lock);
}
