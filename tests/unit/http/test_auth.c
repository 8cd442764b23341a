/* Unit tests for API keys: generation, hashing, and auth_check with its
 * cache, its per-connection memo and their recheck after AUTH_RECHECK_MS.
 *
 * store_tenant_by_key is replaced at link time by a cmocka mock below:
 * auth.o needs only that symbol from store.o, so the archive's store.o is
 * never pulled in and no database is touched. A call the test did not
 * queue a will_return() for fails the test, which is how "the database was
 * not asked" is checked. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sodium.h>

#include "auth.h"
#include "store.h"

/* Valid-looking keys of the right length (fixed, so their cache slots are). */
static const char key_a[] = "idk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
static const char key_b[] = "idk_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB";

static int clear_cache(void **state);
static void expect_lookup(const char *key, int rc, int found, uint32_t tenant);

int store_tenant_by_key(const uint8_t key_hash[STORE_HASH_BYTES], uint32_t *tenant_id,
			uint32_t *key_id, int *found)
{
	check_expected(key_hash);
	int rc = mock_type(int);
	*found = mock_type(int);
	uint32_t t = mock_type(uint32_t);
	if (rc == 0 && *found) {
		*tenant_id = t;
		*key_id = t + 1000; /* each test tenant's key has id tenant + 1000 */
	}
	return rc;
}

/* The database's keys as store_api_keys_sum and store_api_keys_all answer
 * them (auth_refresh); known_fail makes both fail. */
static struct api_key_row known_rows[4];
static size_t known_n;
static int64_t known_sum_calls, known_all_calls;
static int known_fail;

int store_api_keys_sum(int64_t *count, int64_t *sum)
{
	known_sum_calls++;
	*count = (int64_t)known_n;
	*sum = 0;
	for (size_t i = 0; i < known_n; i++)
		*sum += known_rows[i].ak_key_id;
	return known_fail ? -1 : 0;
}

int store_api_keys_all(struct api_key_row **keys, size_t *n)
{
	known_all_calls++;
	if (known_fail)
		return -1;
	*keys = calloc(known_n + 1, sizeof(**keys));
	memcpy(*keys, known_rows, known_n * sizeof(**keys));
	*n = known_n;
	return 0;
}

/* Makes the database hold KEY (tenant T, key id T + 1000) as row I. */
static void known_put(size_t i, const char *key, uint32_t t)
{
	auth_key_hash(key, strlen(key), known_rows[i].ak_hash);
	known_rows[i].ak_tenant_id = t;
	known_rows[i].ak_key_id = t + 1000;
	if (i >= known_n)
		known_n = i + 1;
}

/* The clock auth.c reads for AUTH_RECHECK_MS, moved by the tests. */
static int64_t fake_now_ms = 1000000;

static int64_t fake_clock(void)
{
	return fake_now_ms;
}

static int clear_cache(void **state)
{
	(void)state;
	auth_cache_clear();
	auth_set_clock(fake_clock);
	known_n = 0;
	known_fail = 0;
	return 0;
}

/* The next store lookup must be for KEY's hash and answers RC, FOUND, TENANT. */
static void expect_lookup(const char *key, int rc, int found, uint32_t tenant)
{
	static uint8_t hashes[8][32];
	static size_t next;
	uint8_t *h = hashes[next++ % 8];

	auth_key_hash(key, strlen(key), h);
	expect_memory(store_tenant_by_key, key_hash, h, 32);
	will_return(store_tenant_by_key, rc);
	will_return(store_tenant_by_key, found);
	will_return(store_tenant_by_key, tenant);
}

static void test_generate_format(void **state)
{
	char key[AUTH_KEY_CHARS + 1];

	(void)state;
	assert_int_equal(sizeof(key_a) - 1, AUTH_KEY_CHARS);
	for (int i = 0; i < 200; i++) {
		memset(key, '#', sizeof(key));
		auth_key_generate(key, sizeof(key));
		assert_int_equal(strlen(key), AUTH_KEY_CHARS);
		assert_memory_equal(key, AUTH_KEY_PREFIX, 4);
		size_t alnum = strspn(key + 4,
				      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
				      "0123456789-_");
		assert_int_equal(alnum, AUTH_KEY_CHARS - 4);
	}
}

/* The 43 characters decode back to 32 bytes. */
static void test_generate_decodes(void **state)
{
	char key[AUTH_KEY_CHARS + 1];
	unsigned char raw[32];
	size_t len = 0;

	(void)state;
	auth_key_generate(key, sizeof(key));
	assert_int_equal(sodium_base642bin(raw, sizeof(raw), key + 4, AUTH_KEY_CHARS - 4, NULL,
					   &len, NULL, sodium_base64_VARIANT_URLSAFE_NO_PADDING),
			 0);
	assert_int_equal(len, 32);
}

static void test_generate_unique(void **state)
{
	char keys[64][AUTH_KEY_CHARS + 1];

	(void)state;
	for (size_t i = 0; i < 64; i++) {
		auth_key_generate(keys[i], sizeof(keys[i]));
		for (size_t j = 0; j < i; j++)
			assert_string_not_equal(keys[i], keys[j]);
	}
}

/* A larger buffer is fine and still holds exactly one key. */
static void test_generate_large_buffer(void **state)
{
	char key[128];

	(void)state;
	memset(key, '#', sizeof(key));
	auth_key_generate(key, sizeof(key));
	assert_int_equal(strlen(key), AUTH_KEY_CHARS);
}

static void test_hash(void **state)
{
	uint8_t h1[32], h2[32], h3[32], ref[32];

	(void)state;
	auth_key_hash(key_a, strlen(key_a), h1);
	auth_key_hash(key_a, strlen(key_a), h2);
	assert_memory_equal(h1, h2, 32);
	/* it is BLAKE2b-256 of the key text, unkeyed */
	assert_int_equal(crypto_generichash(ref, 32, (const unsigned char *)key_a, strlen(key_a),
					    NULL, 0),
			 0);
	assert_memory_equal(h1, ref, 32);
	/* a different key, a different hash */
	auth_key_hash(key_b, strlen(key_b), h3);
	assert_memory_not_equal(h1, h3, 32);
	/* only LEN bytes count */
	auth_key_hash("abcdef", 3, h1);
	auth_key_hash("abc", 3, h2);
	assert_memory_equal(h1, h2, 32);
	auth_key_hash("abd", 3, h3);
	assert_memory_not_equal(h1, h3, 32);
	/* the empty key has the well-known BLAKE2b-256("") digest */
	static const uint8_t empty[32] = {
		0x0e, 0x57, 0x51, 0xc0, 0x26, 0xe5, 0x43, 0xb2, 0xe8, 0xab, 0x2e,
		0xb0, 0x60, 0x99, 0xda, 0xa1, 0xd1, 0xe5, 0xdf, 0x47, 0x77, 0x8f,
		0x77, 0x87, 0xfa, 0xab, 0x45, 0xcd, 0xf1, 0x2f, 0xe3, 0xa8,
	};
	auth_key_hash("", 0, h1);
	assert_memory_equal(h1, empty, 32);
}

/* Wrong lengths are refused before any lookup (the mock would fail). */
static void test_check_wrong_length(void **state)
{
	char key[AUTH_KEY_CHARS + 2];
	uint32_t tenant = 0xabcdef;

	(void)state;
	assert_int_equal(auth_check("", 0, &tenant), AUTH_DENIED);
	assert_int_equal(auth_check("idk_", 0, &tenant), AUTH_DENIED);
	assert_int_equal(auth_check("Bearer", 0, &tenant), AUTH_DENIED);
	memcpy(key, key_a, sizeof(key_a));
	key[AUTH_KEY_CHARS - 1] = '\0';
	assert_int_equal(auth_check(key, 0, &tenant), AUTH_DENIED);
	memcpy(key, key_a, sizeof(key_a));
	key[AUTH_KEY_CHARS] = 'A';
	key[AUTH_KEY_CHARS + 1] = '\0';
	assert_int_equal(auth_check(key, 0, &tenant), AUTH_DENIED);
	assert_int_equal(tenant, 0xabcdef);
}

static void test_check_found_then_cached(void **state)
{
	uint32_t tenant = 0;

	(void)state;
	expect_lookup(key_a, 0, 1, 7);
	assert_int_equal(auth_check(key_a, 0, &tenant), AUTH_OK);
	assert_int_equal(tenant, 7);
	/* second time from the cache: no lookup queued, none may happen */
	tenant = 0;
	assert_int_equal(auth_check(key_a, 0, &tenant), AUTH_OK);
	assert_int_equal(tenant, 7);
	/* a second key gets its own lookup and entry */
	expect_lookup(key_b, 0, 1, 9);
	assert_int_equal(auth_check(key_b, 0, &tenant), AUTH_OK);
	assert_int_equal(tenant, 9);
	assert_int_equal(auth_check(key_a, 0, &tenant), AUTH_OK);
	assert_int_equal(tenant, 7);
	assert_int_equal(auth_check(key_b, 0, &tenant), AUTH_OK);
	assert_int_equal(tenant, 9);
}

/* An unknown key is refused again without a lookup for AUTH_NEGATIVE_MS,
 * then asked about again: a key created meanwhile works within a second. */
static void test_check_unknown_remembered_briefly(void **state)
{
	uint32_t tenant = 0x55;

	(void)state;
	expect_lookup(key_a, 0, 0, 0);
	assert_int_equal(auth_check(key_a, 0, &tenant), AUTH_DENIED);
	assert_int_equal(tenant, 0x55);
	fake_now_ms += AUTH_NEGATIVE_MS - 1;
	assert_int_equal(auth_check(key_a, 0, &tenant), AUTH_DENIED); /* no lookup */
	fake_now_ms += 1;
	expect_lookup(key_a, 0, 1, 3);
	assert_int_equal(auth_check(key_a, 0, &tenant), AUTH_OK);
	assert_int_equal(tenant, 3);
}

/* Keys in neither cache: at most AUTH_LOOKUPS_PER_SECOND lookups a second,
 * the rest "unavailable" (503, retry) without touching the database. */
static void test_unknown_lookups_bounded(void **state)
{
	char key[AUTH_KEY_CHARS + 1];
	uint32_t tenant = 0;

	(void)state;
	fake_now_ms = (fake_now_ms / 1000 + 1) * 1000;
	/* from many clients, each within its share: the whole budget */
	for (int i = 0; i <= AUTH_LOOKUPS_PER_SECOND; i++) {
		size_t client = (size_t)(i / AUTH_LOOKUPS_PER_CLIENT);
		snprintf(key, sizeof(key), "idk_%043d", i);
		if (i < AUTH_LOOKUPS_PER_SECOND) {
			expect_lookup(key, 0, 0, 0);
			assert_int_equal(auth_check(key, client, &tenant), AUTH_DENIED);
		} else {
			assert_int_equal(auth_check(key, client, &tenant), AUTH_UNAVAILABLE);
		}
	}
	fake_now_ms += 1000;
	expect_lookup(key, 0, 0, 0);
	assert_int_equal(auth_check(key, 0, &tenant), AUTH_DENIED);
}

/* One client sending made-up keys as fast as it can gets its share of the
 * lookups a second and no more: a new genuine key from another client is
 * still looked up, in the same second. */
static void test_one_client_takes_only_its_share(void **state)
{
	char key[AUTH_KEY_CHARS + 1];
	uint32_t tenant = 0;

	(void)state;
	fake_now_ms = (fake_now_ms / 1000 + 1) * 1000;
	for (int i = 0; i < 3 * AUTH_LOOKUPS_PER_SECOND; i++) {
		snprintf(key, sizeof(key), "idk_%043d", i);
		if (i < AUTH_LOOKUPS_PER_CLIENT) {
			expect_lookup(key, 0, 0, 0);
			assert_int_equal(auth_check(key, 7, &tenant), AUTH_DENIED);
		} else {
			assert_int_equal(auth_check(key, 7, &tenant), AUTH_UNAVAILABLE);
		}
	}
	expect_lookup(key_a, 0, 1, 42);
	assert_int_equal(auth_check(key_a, 8, &tenant), AUTH_OK);
	assert_int_equal(tenant, 42);
	/* the next second, the flooding client has its share again */
	fake_now_ms += 1000;
	expect_lookup(key, 0, 0, 0);
	assert_int_equal(auth_check(key, 7, &tenant), AUTH_DENIED);
}

/* A store failure is "unavailable", not "denied", and is not cached. */
static void test_check_unavailable(void **state)
{
	uint32_t tenant = 0;

	(void)state;
	expect_lookup(key_a, -1, 0, 0);
	assert_int_equal(auth_check(key_a, 0, &tenant), AUTH_UNAVAILABLE);
	expect_lookup(key_a, 0, 1, 11);
	assert_int_equal(auth_check(key_a, 0, &tenant), AUTH_OK);
	assert_int_equal(tenant, 11);
}

/* A key that differs from a cached one in one character is looked up. */
static void test_check_near_miss(void **state)
{
	char other[sizeof(key_a)];
	uint32_t tenant = 0;

	(void)state;
	expect_lookup(key_a, 0, 1, 7);
	assert_int_equal(auth_check(key_a, 0, &tenant), AUTH_OK);
	memcpy(other, key_a, sizeof(key_a));
	other[AUTH_KEY_CHARS - 1] = 'B';
	expect_lookup(other, 0, 0, 0);
	assert_int_equal(auth_check(other, 0, &tenant), AUTH_DENIED);
}

static void test_cache_clear(void **state)
{
	uint32_t tenant = 0;

	(void)state;
	expect_lookup(key_a, 0, 1, 7);
	assert_int_equal(auth_check(key_a, 0, &tenant), AUTH_OK);
	auth_cache_clear();
	expect_lookup(key_a, 0, 1, 8);
	assert_int_equal(auth_check(key_a, 0, &tenant), AUTH_OK);
	assert_int_equal(tenant, 8);
}

/* A memo answers its own key without the cache; another key, a denied
 * one, or a cleared cache goes the full way; wiping empties it. */
static void test_memo(void **state)
{
	struct auth_memo memo = { 0 };
	char other[sizeof(key_a)];
	uint32_t tenant = 0;

	(void)state;
	expect_lookup(key_a, 0, 1, 7);
	assert_int_equal(auth_check_memo(key_a, 0, &memo, &tenant), AUTH_OK);
	assert_int_equal(tenant, 7);
	assert_memory_equal(memo.am_key, key_a, AUTH_KEY_CHARS);
	/* the next request with the key is answered by the memo itself */
	memo.am_tenant_id = 99;
	tenant = 0;
	assert_int_equal(auth_check_memo(key_a, 0, &memo, &tenant), AUTH_OK);
	assert_int_equal(tenant, 99);
	/* one character off: looked up, denied, memo kept for key_a */
	memcpy(other, key_a, sizeof(key_a));
	other[AUTH_KEY_CHARS - 1] = 'B';
	expect_lookup(other, 0, 0, 0);
	assert_int_equal(auth_check_memo(other, 0, &memo, &tenant), AUTH_DENIED);
	/* a longer text that starts with the key is no match */
	char longer[AUTH_KEY_CHARS + 2];
	memcpy(longer, key_a, AUTH_KEY_CHARS);
	longer[AUTH_KEY_CHARS] = 'x';
	longer[AUTH_KEY_CHARS + 1] = '\0';
	assert_int_equal(auth_check_memo(longer, 0, &memo, &tenant), AUTH_DENIED);
	/* clearing the cache makes the memo stale: the database is asked */
	auth_cache_clear();
	expect_lookup(key_a, 0, 1, 8);
	assert_int_equal(auth_check_memo(key_a, 0, &memo, &tenant), AUTH_OK);
	assert_int_equal(tenant, 8);
	auth_memo_wipe(&memo);
	assert_int_equal(memo.am_gen, 0);
	assert_int_equal(memo.am_key[0], 0);
}

/* A known key is asked about again after AUTH_RECHECK_MS: revoked, it is
 * refused and forgotten; still there, it is believed for another period. */
static void test_recheck_revoked(void **state)
{
	uint32_t tenant = 0;

	(void)state;
	expect_lookup(key_a, 0, 1, 7);
	assert_int_equal(auth_check(key_a, 0, &tenant), AUTH_OK);
	fake_now_ms += AUTH_RECHECK_MS - 1;
	assert_int_equal(auth_check(key_a, 0, &tenant), AUTH_OK); /* cached, no lookup */
	fake_now_ms += 1;
	expect_lookup(key_a, 0, 1, 7);
	assert_int_equal(auth_check(key_a, 0, &tenant), AUTH_OK);
	fake_now_ms += AUTH_RECHECK_MS;
	expect_lookup(key_a, 0, 0, 0); /* revoked meanwhile */
	assert_int_equal(auth_check(key_a, 0, &tenant), AUTH_DENIED);
	/* forgotten, and refused without asking for a second */
	assert_int_equal(auth_check(key_a, 0, &tenant), AUTH_DENIED);
	fake_now_ms += AUTH_NEGATIVE_MS;
	expect_lookup(key_a, 0, 0, 0);
	assert_int_equal(auth_check(key_a, 0, &tenant), AUTH_DENIED);
}

/* While the database cannot answer a recheck, a known key stays accepted
 * and is asked about again a second later. */
static void test_recheck_unavailable(void **state)
{
	uint32_t tenant = 0;

	(void)state;
	expect_lookup(key_a, 0, 1, 7);
	assert_int_equal(auth_check(key_a, 0, &tenant), AUTH_OK);
	fake_now_ms += AUTH_RECHECK_MS;
	expect_lookup(key_a, -1, 0, 0);
	tenant = 0;
	assert_int_equal(auth_check(key_a, 0, &tenant), AUTH_OK);
	assert_int_equal(tenant, 7);
	fake_now_ms += 999;
	assert_int_equal(auth_check(key_a, 0, &tenant), AUTH_OK); /* no lookup */
	fake_now_ms += 1;
	expect_lookup(key_a, 0, 0, 0);
	assert_int_equal(auth_check(key_a, 0, &tenant), AUTH_DENIED);
}

/* A connection's memo expires with its entry: a key revoked while a
 * keep-alive connection goes on using it is refused after the recheck. */
static void test_memo_recheck(void **state)
{
	struct auth_memo memo = { 0 };
	uint32_t tenant = 0;

	(void)state;
	expect_lookup(key_a, 0, 1, 7);
	assert_int_equal(auth_check_memo(key_a, 0, &memo, &tenant), AUTH_OK);
	fake_now_ms += AUTH_RECHECK_MS - 1;
	assert_int_equal(auth_check_memo(key_a, 0, &memo, &tenant), AUTH_OK); /* memo */
	fake_now_ms += 1;
	expect_lookup(key_a, 0, 0, 0);
	assert_int_equal(auth_check_memo(key_a, 0, &memo, &tenant), AUTH_DENIED);
	/* refused now: refused again without a lookup for a second */
	assert_int_equal(auth_check_memo(key_a, 0, &memo, &tenant), AUTH_DENIED);
	/* a memo filled from a cache entry expires when that entry was
	 * confirmed, not when the memo was filled */
	struct auth_memo m2 = { 0 };
	expect_lookup(key_b, 0, 1, 9);
	assert_int_equal(auth_check(key_b, 0, &tenant), AUTH_OK);
	fake_now_ms += AUTH_RECHECK_MS - 10;
	assert_int_equal(auth_check_memo(key_b, 0, &m2, &tenant), AUTH_OK); /* from the cache */
	fake_now_ms += 10;
	expect_lookup(key_b, 0, 1, 9);
	assert_int_equal(auth_check_memo(key_b, 0, &m2, &tenant), AUTH_OK);
	auth_memo_wipe(&memo);
	auth_memo_wipe(&m2);
}

/* Issue 38: while one client address spends its whole lookup share on
 * made-up keys, a genuine key from that same address that no request used
 * yet (every key, right after a start) is answered from the known set, with
 * no lookup at all. */
static void test_known_key_never_waits_on_the_share(void **state)
{
	char key[AUTH_KEY_CHARS + 1];
	uint32_t tenant = 0;

	(void)state;
	known_put(0, key_a, 42);
	known_put(1, key_b, 43);
	assert_int_equal(auth_refresh(), 0);
	fake_now_ms = (fake_now_ms / 1000 + 1) * 1000;
	for (int i = 0; i < 2 * AUTH_LOOKUPS_PER_CLIENT; i++) {
		snprintf(key, sizeof(key), "idk_%043d", i);
		if (i < AUTH_LOOKUPS_PER_CLIENT)
			expect_lookup(key, 0, 0, 0);
		assert_int_equal(auth_check(key, 7, &tenant),
				 i < AUTH_LOOKUPS_PER_CLIENT ? AUTH_DENIED : AUTH_UNAVAILABLE);
	}
	/* no expect_lookup: the database is not asked */
	for (int i = 0; i < 20; i++) {
		assert_int_equal(auth_check(key_a, 7, &tenant), AUTH_OK);
		assert_int_equal(tenant, 42);
	}
	assert_int_equal(auth_check(key_b, 7, &tenant), AUTH_OK);
	assert_int_equal(tenant, 43);
}

/* The set is read again only when the keys' count or id sum changed; a key
 * added then is known without a lookup, a key removed is refused. */
static void test_known_set_follows_the_database(void **state)
{
	char key[AUTH_KEY_CHARS + 1];
	uint32_t tenant = 0;

	(void)state;
	known_put(0, key_a, 42);
	assert_int_equal(auth_refresh(), 0);
	int64_t reads = known_all_calls;
	assert_int_equal(auth_refresh(), 0);
	assert_int_equal(known_all_calls, reads); /* nothing changed: not read */
	known_put(1, key_b, 43);
	assert_int_equal(auth_refresh(), 0);
	assert_int_equal(known_all_calls, reads + 1);
	assert_int_equal(auth_check(key_b, 3, &tenant), AUTH_OK);
	assert_int_equal(tenant, 43);
	/* key_a revoked: gone from the next set, refused after a lookup that
	 * is not the set's (its share is spent) */
	known_rows[0] = known_rows[1];
	known_n = 1;
	assert_int_equal(auth_refresh(), 0);
	fake_now_ms = (fake_now_ms / 1000 + 1) * 1000;
	for (int i = 0; i < AUTH_LOOKUPS_PER_CLIENT; i++) {
		snprintf(key, sizeof(key), "idk_%043d", i);
		expect_lookup(key, 0, 0, 0);
		assert_int_equal(auth_check(key, 3, &tenant), AUTH_DENIED);
	}
	assert_int_equal(auth_check(key_a, 3, &tenant), AUTH_UNAVAILABLE);
	assert_int_equal(auth_check(key_b, 3, &tenant), AUTH_OK);
	/* a failed read keeps the set as it was */
	known_fail = 1;
	assert_int_equal(auth_refresh(), -1);
	assert_int_equal(auth_check(key_b, 3, &tenant), AUTH_OK);
}

/* A set not confirmed for AUTH_RECHECK_MS (the janitor late) is asked
 * about key by key, outside the share: a revoked key is refused in time and
 * a genuine one still accepted. */
static void test_known_set_stale_rechecks(void **state)
{
	uint32_t tenant = 0;

	(void)state;
	known_put(0, key_a, 42);
	known_put(1, key_b, 43);
	assert_int_equal(auth_refresh(), 0);
	fake_now_ms += AUTH_RECHECK_MS + 1;
	expect_lookup(key_a, 0, 0, 0); /* revoked meanwhile */
	assert_int_equal(auth_check(key_a, 3, &tenant), AUTH_DENIED);
	assert_int_equal(auth_check(key_a, 3, &tenant), AUTH_DENIED); /* remembered */
	expect_lookup(key_b, 0, 1, 43);
	assert_int_equal(auth_check(key_b, 3, &tenant), AUTH_OK);
	assert_int_equal(auth_check(key_b, 3, &tenant), AUTH_OK); /* cached */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_generate_format),
		cmocka_unit_test(test_generate_decodes),
		cmocka_unit_test(test_generate_unique),
		cmocka_unit_test(test_generate_large_buffer),
		cmocka_unit_test(test_hash),
		cmocka_unit_test_setup(test_check_wrong_length, clear_cache),
		cmocka_unit_test_setup(test_check_found_then_cached, clear_cache),
		cmocka_unit_test_setup(test_check_unknown_remembered_briefly, clear_cache),
		cmocka_unit_test_setup(test_unknown_lookups_bounded, clear_cache),
		cmocka_unit_test_setup(test_one_client_takes_only_its_share, clear_cache),
		cmocka_unit_test_setup(test_check_unavailable, clear_cache),
		cmocka_unit_test_setup(test_check_near_miss, clear_cache),
		cmocka_unit_test_setup(test_cache_clear, clear_cache),
		cmocka_unit_test_setup(test_memo, clear_cache),
		cmocka_unit_test_setup(test_recheck_revoked, clear_cache),
		cmocka_unit_test_setup(test_recheck_unavailable, clear_cache),
		cmocka_unit_test_setup(test_memo_recheck, clear_cache),
		cmocka_unit_test_setup(test_known_key_never_waits_on_the_share, clear_cache),
		cmocka_unit_test_setup(test_known_set_follows_the_database, clear_cache),
		cmocka_unit_test_setup(test_known_set_stale_rechecks, clear_cache),
	};

	if (sodium_init() < 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
