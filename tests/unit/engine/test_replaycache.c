/* Unit tests for the replay cache: hits, tenant separation, fingerprints,
 * expiry, eviction within a full set, rendered replies and body keys. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "replaycache.h"
#include "unit.h"

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char headers_text[] = "{\"location\":\"/o/1\"}";
static unsigned char body_text[64];

/* A response whose body is BODY (copied into a static buffer). */
static struct stored_response response(const char *body)
{
	struct stored_response r = { 0 };

	r.sr_status = 201;
	r.sr_headers = headers_text;
	r.sr_body_len = strlen(body);
	memcpy(body_text, body, r.sr_body_len);
	r.sr_body = body_text;
	r.sr_is_json = 1;
	return r;
}

static void id_of(uint8_t id[16], unsigned n)
{
	memset(id, 0, 16);
	memcpy(id, &n, sizeof(n));
	id[15] = (uint8_t)n;
}

static void test_hit_is_a_copy(void **state)
{
	uint8_t id[16], fp[STORE_HASH_BYTES];
	struct stored_response r = response("{\"id\":1}"), out;

	(void)state;
	replaycache_clear();
	id_of(id, 1);
	memset(fp, 7, sizeof(fp));
	replaycache_put(5, id, fp, &r, now_ms() + 60000);
	assert_int_equal(replaycache_lookup(5, id, fp, 0, &out, NULL, NULL), 1);
	assert_int_equal(out.sr_status, 201);
	assert_string_equal(out.sr_headers, "{\"location\":\"/o/1\"}");
	assert_int_equal(out.sr_body_len, 8);
	assert_memory_equal(out.sr_body, "{\"id\":1}", 8);
	assert_true(out.sr_is_json);
	assert_ptr_not_equal(out.sr_body, r.sr_body);
	store_response_free(&out);
}

/* What the cache holds is counted, and drops back to nothing when cleared. */
static void test_usage(void **state)
{
	uint8_t id[16], other[16];
	struct stored_response r = response("{\"id\":1}");
	size_t bytes, entries;

	(void)state;
	replaycache_clear();
	replaycache_usage(&bytes, &entries);
	assert_int_equal(bytes, 0);
	assert_int_equal(entries, 0);
	id_of(id, 1);
	id_of(other, 2);
	replaycache_put(5, id, NULL, &r, now_ms() + 60000);
	replaycache_put(5, other, NULL, &r, now_ms() + 60000);
	replaycache_put(5, other, NULL, &r, now_ms() + 60000); /* replaces its own */
	replaycache_usage(&bytes, &entries);
	assert_int_equal(entries, 2);
	assert_int_equal(bytes, 2 * (strlen(headers_text) + 8));
	replaycache_set_reply(5, id, NULL, 1, "body", 4, "reply", 5);
	replaycache_usage(&bytes, &entries);
	assert_int_equal(bytes, 2 * (strlen(headers_text) + 8) + 4 + 5);
	replaycache_clear();
	replaycache_usage(&bytes, &entries);
	assert_int_equal(bytes, 0);
	assert_int_equal(entries, 0);
}

static void test_other_tenant_never_served(void **state)
{
	uint8_t id[16];
	struct stored_response r = response("{}"), out = { 0 };

	(void)state;
	replaycache_clear();
	id_of(id, 2);
	replaycache_put(5, id, NULL, &r, now_ms() + 60000);
	assert_int_equal(replaycache_lookup(6, id, NULL, 0, &out, NULL, NULL), 0);
	assert_int_equal(replaycache_lookup(5, id, NULL, 0, &out, NULL, NULL), 1);
	store_response_free(&out);
}

static void test_fingerprint_mismatch(void **state)
{
	uint8_t id[16], fp[STORE_HASH_BYTES], other[STORE_HASH_BYTES];
	struct stored_response r = response("{}"), out = { 0 };

	(void)state;
	replaycache_clear();
	id_of(id, 3);
	memset(fp, 1, sizeof(fp));
	memset(other, 2, sizeof(other));
	replaycache_put(5, id, fp, &r, now_ms() + 60000);
	assert_int_equal(replaycache_lookup(5, id, other, 0, &out, NULL, NULL), 2);
	assert_int_equal(replaycache_lookup(5, id, NULL, 0, &out, NULL, NULL), 2);
	/* stored without a fingerprint: a submit with one is a mismatch too */
	id_of(id, 4);
	replaycache_put(5, id, NULL, &r, now_ms() + 60000);
	assert_int_equal(replaycache_lookup(5, id, fp, 0, &out, NULL, NULL), 2);
}

static void test_expired_not_served(void **state)
{
	uint8_t id[16];
	struct stored_response r = response("{}"), out = { 0 };

	(void)state;
	replaycache_clear();
	id_of(id, 5);
	replaycache_put(5, id, NULL, &r, now_ms() - 1);
	assert_int_equal(replaycache_lookup(5, id, NULL, 0, &out, NULL, NULL), 0);
}

static void test_many_entries_and_eviction(void **state)
{
	uint8_t id[16];
	struct stored_response r = response("{\"n\":12345}"), out = { 0 };
	int hits = 0;

	(void)state;
	replaycache_clear();
	for (unsigned i = 0; i < 3 * REPLAYCACHE_SLOTS; i++) {
		id_of(id, 1000 + i);
		replaycache_put(9, id, NULL, &r, now_ms() + 60000 + i);
	}
	for (unsigned i = 0; i < 3 * REPLAYCACHE_SLOTS; i++) {
		id_of(id, 1000 + i);
		if (replaycache_lookup(9, id, NULL, 0, &out, NULL, NULL) == 1) {
			assert_memory_equal(out.sr_body, "{\"n\":12345}", 11);
			store_response_free(&out);
			hits++;
		}
	}
	/* bounded by the table, and the newest entries are kept */
	assert_true(hits > 0 && hits <= REPLAYCACHE_SLOTS);
	id_of(id, 1000 + 3 * REPLAYCACHE_SLOTS - 1);
	assert_int_equal(replaycache_lookup(9, id, NULL, 0, &out, NULL, NULL), 1);
	store_response_free(&out);
	replaycache_clear();
}

/* At the byte bound the cache keeps taking the newest responses (evicting
 * in their sets) and never holds more than the bound. */
/* One tenant's large answers evict its own entries, not another's: each
 * holds at most half of the cache. */
static void test_tenant_share(void **state)
{
	static unsigned char big[60 * 1024];
	uint8_t id[16];
	struct stored_response r = { .sr_status = 200,
				     .sr_headers = headers_text,
				     .sr_body = big,
				     .sr_body_len = sizeof(big) },
			       out;
	unsigned kept = 0;

	(void)state;
	replaycache_clear();
	memset(big, 'y', sizeof(big));
	for (unsigned i = 0; i < 20; i++) {
		id_of(id, 70000 + i);
		replaycache_put(8, id, NULL, &r, now_ms() + 60000);
	}
	for (unsigned i = 0; i < 3 * (REPLAYCACHE_MAX_BYTES / sizeof(big)); i++) {
		id_of(id, 80000 + i);
		replaycache_put(9, id, NULL, &r, now_ms() + 60000);
		/* the flooding tenant's own newest answer is still served */
		assert_int_equal(replaycache_lookup(9, id, NULL, 0, &out, NULL, NULL), 1);
		store_response_free(&out);
	}
	for (unsigned i = 0; i < 20; i++) {
		id_of(id, 70000 + i);
		if (replaycache_lookup(8, id, NULL, 0, &out, NULL, NULL) == 1) {
			store_response_free(&out);
			kept++;
		}
	}
	assert_int_equal(kept, 20);
}

static void test_byte_bound_turns_over(void **state)
{
	static unsigned char big[60 * 1024];
	uint8_t id[16];
	struct stored_response r = { .sr_status = 200,
				     .sr_headers = headers_text,
				     .sr_body = big,
				     .sr_body_len = sizeof(big) },
			       out;
	unsigned n = 3 * (REPLAYCACHE_MAX_BYTES / sizeof(big)), hits = 0;

	(void)state;
	replaycache_clear();
	memset(big, 'x', sizeof(big));
	for (unsigned i = 0; i < n; i++) {
		id_of(id, 50000 + i);
		replaycache_put(3, id, NULL, &r, now_ms() + 60000);
		/* the response just stored is served */
		assert_int_equal(replaycache_lookup(3, id, NULL, 0, &out, NULL, NULL), 1);
		assert_int_equal(out.sr_body_len, sizeof(big));
		store_response_free(&out);
	}
	for (unsigned i = 0; i < n; i++) {
		id_of(id, 50000 + i);
		if (replaycache_lookup(3, id, NULL, 0, &out, NULL, NULL) == 1) {
			store_response_free(&out);
			hits++;
		}
	}
	assert_true(hits > 0);
	assert_true(hits * sizeof(big) <= REPLAYCACHE_MAX_BYTES);
	replaycache_clear();
}

/* The rendered reply and a request body: lookup returns the reply instead
 * of the response, and the raw path hits only for that body (byte for
 * byte), tenant and id. */
static void test_reply_and_raw_key(void **state)
{
	uint8_t id[16], other[16], fp[STORE_HASH_BYTES];
	char raw[40], raw2[40];
	struct stored_response r = response("{\"id\":1}"), out;
	char *reply;
	size_t len;

	(void)state;
	replaycache_clear();
	id_of(id, 1);
	id_of(other, 2);
	memset(fp, 7, sizeof(fp));
	memset(raw, 1, sizeof(raw));
	memset(raw2, 2, sizeof(raw2));
	replaycache_put(5, id, fp, &r, now_ms() + 60000);
	/* no reply yet: the response, and no raw hit */
	assert_int_equal(replaycache_lookup(5, id, fp, 1, &out, &reply, &len), 1);
	assert_null(reply);
	assert_int_equal(out.sr_body_len, 8);
	store_response_free(&out);
	assert_int_equal(replaycache_get_raw(5, id, 1, raw, sizeof(raw), &reply, &len), 0);
	assert_null(reply);

	replaycache_set_reply(5, id, fp, 1, raw, sizeof(raw), "{\"state\":\"completed\"}", 21);
	assert_int_equal(replaycache_lookup(5, id, fp, 1, &out, &reply, &len), 1);
	assert_non_null(reply);
	assert_int_equal(len, 21);
	assert_string_equal(reply, "{\"state\":\"completed\"}");
	assert_null(out.sr_body);
	free(reply);
	/* a lookup of kind 0 still gives the response */
	assert_int_equal(replaycache_lookup(5, id, fp, 0, &out, NULL, NULL), 1);
	assert_int_equal(out.sr_body_len, 8);
	store_response_free(&out);

	assert_int_equal(replaycache_get_raw(5, id, 1, raw, sizeof(raw), &reply, &len), 1);
	assert_string_equal(reply, "{\"state\":\"completed\"}");
	free(reply);
	assert_int_equal(replaycache_get_raw(5, id, 1, raw2, sizeof(raw2), &reply, &len), 0);
	/* a prefix, or one byte more, is another body */
	assert_int_equal(replaycache_get_raw(5, id, 1, raw, sizeof(raw) - 1, &reply, &len), 0);
	char longer[sizeof(raw) + 1];
	memcpy(longer, raw, sizeof(raw));
	longer[sizeof(raw)] = 1;
	assert_int_equal(replaycache_get_raw(5, id, 1, longer, sizeof(longer), &reply, &len), 0);
	assert_int_equal(replaycache_get_raw(6, id, 1, raw, sizeof(raw), &reply, &len), 0);
	assert_int_equal(replaycache_get_raw(5, other, 1, raw, sizeof(raw), &reply, &len), 0);

	/* another key that gave the same fingerprint replaces the first; the
	 * reply stays the one first rendered */
	replaycache_set_reply(5, id, fp, 1, raw2, sizeof(raw2), "{\"other\":1}", 11);
	assert_int_equal(replaycache_get_raw(5, id, 1, raw, sizeof(raw), &reply, &len), 0);
	assert_int_equal(replaycache_get_raw(5, id, 1, raw2, sizeof(raw2), &reply, &len), 1);
	assert_string_equal(reply, "{\"state\":\"completed\"}");
	free(reply);

	/* a fresh put of the same key forgets reply and body key */
	replaycache_put(5, id, fp, &r, now_ms() + 60000);
	assert_int_equal(replaycache_get_raw(5, id, 1, raw2, sizeof(raw2), &reply, &len), 0);
}

/* A reply or key is attached only under the entry's own fingerprint, and
 * never outlives the entry's expiry. */
static void test_raw_key_rules(void **state)
{
	uint8_t id[16], fp[STORE_HASH_BYTES], fp2[STORE_HASH_BYTES];
	char raw[40];
	struct stored_response r = response("{\"id\":1}"), out;
	char *reply;
	size_t len;

	(void)state;
	replaycache_clear();
	id_of(id, 3);
	memset(fp, 7, sizeof(fp));
	memset(fp2, 8, sizeof(fp2));
	memset(raw, 1, sizeof(raw));
	replaycache_put(5, id, fp, &r, now_ms() + 60000);
	replaycache_set_reply(5, id, fp2, 1, raw, sizeof(raw), "x", 1);
	replaycache_set_reply(5, id, NULL, 1, raw, sizeof(raw), "x", 1);
	assert_int_equal(replaycache_get_raw(5, id, 1, raw, sizeof(raw), &reply, &len), 0);
	assert_int_equal(replaycache_lookup(5, id, fp2, 1, &out, &reply, &len), 2);
	assert_null(reply);

	/* without a fingerprint: only a lookup without one matches */
	replaycache_put(5, id, NULL, &r, now_ms() + 60000);
	replaycache_set_reply(5, id, NULL, 1, raw, sizeof(raw), "y", 1);
	assert_int_equal(replaycache_get_raw(5, id, 1, raw, sizeof(raw), &reply, &len), 1);
	free(reply);
	assert_int_equal(replaycache_lookup(5, id, fp, 1, &out, &reply, &len), 2);

	/* expired: nothing, and attaching does not revive it */
	replaycache_put(5, id, fp, &r, now_ms() - 1);
	replaycache_set_reply(5, id, fp, 1, raw, sizeof(raw), "z", 1);
	assert_int_equal(replaycache_get_raw(5, id, 1, raw, sizeof(raw), &reply, &len), 0);
	assert_int_equal(replaycache_lookup(5, id, fp, 1, &out, &reply, &len), 0);
	replaycache_clear();
}

/* A record replayed by routes of two envelope forms: each lookup gets the
 * rendered reply of its own kind or the response to render it from, never
 * the other form's; the first kind attached stays. */
static void test_reply_kinds_apart(void **state)
{
	uint8_t id[16];
	char raw[8] = "{\"a\":1}";
	struct stored_response r = response("{\"id\":1}"), out;
	char *reply;
	size_t len;

	(void)state;
	replaycache_clear();
	id_of(id, 4);
	replaycache_put(5, id, NULL, &r, now_ms() + 60000);
	replaycache_set_reply(5, id, NULL, 2, raw, sizeof(raw), "keyed", 5);
	replaycache_set_reply(5, id, NULL, 1, raw, sizeof(raw), "direct", 6);
	assert_int_equal(replaycache_lookup(5, id, NULL, 2, &out, &reply, &len), 1);
	assert_non_null(reply);
	assert_int_equal(len, 5);
	assert_memory_equal(reply, "keyed", 5);
	free(reply);
	/* kind 1 has no reply here: the response comes back instead */
	assert_int_equal(replaycache_lookup(5, id, NULL, 1, &out, &reply, &len), 1);
	assert_null(reply);
	assert_int_equal(out.sr_body_len, 8);
	store_response_free(&out);
	assert_int_equal(replaycache_get_raw(5, id, 1, raw, sizeof(raw), &reply, &len), 0);
	assert_int_equal(replaycache_get_raw(5, id, 2, raw, sizeof(raw), &reply, &len), 1);
	free(reply);
	/* kind 0 asks for no reply */
	assert_int_equal(replaycache_lookup(5, id, NULL, 0, &out, &reply, &len), 1);
	assert_null(reply);
	store_response_free(&out);
	replaycache_clear();
}

/* Keys of one set: all REPLAYCACHE_WAYS are kept; one more evicts the
 * least recently used, and the rest stay. */
static void test_full_set(void **state)
{
	/* keys that share both of their sets: 2 x WAYS slots between them */
	enum { N = 2 * REPLAYCACHE_WAYS };
	const uint64_t sets = REPLAYCACHE_SLOTS / REPLAYCACHE_WAYS;
	uint8_t id[N + 1][16];
	struct stored_response r = response("{\"s\":1}"), out;

	(void)state;
	replaycache_clear();
	for (unsigned k = 0; k <= N; k++) {
		uint64_t h = (k + 1) * sets + 5; /* same first set for every k */
		memset(id[k], 0, 16);		 /* same second set (bytes 8..15) */
		memcpy(id[k], &h, sizeof(h));
	}
	for (unsigned k = 0; k < N; k++)
		replaycache_put(3, id[k], NULL, &r, now_ms() + 60000);
	/* both sets are used before anything is evicted */
	for (unsigned k = 0; k < N; k++) {
		assert_int_equal(replaycache_lookup(3, id[k], NULL, 0, &out, NULL, NULL), 1);
		store_response_free(&out);
	}
	/* id[1] is now the least recently used of the two sets */
	assert_int_equal(replaycache_lookup(3, id[0], NULL, 0, &out, NULL, NULL), 1);
	store_response_free(&out);
	replaycache_put(3, id[N], NULL, &r, now_ms() + 60000);
	for (unsigned k = 0; k <= N; k++) {
		int got = replaycache_lookup(3, id[k], NULL, 0, &out, NULL, NULL);
		assert_int_equal(got, k == 1 ? 0 : 1);
		if (got == 1)
			store_response_free(&out);
	}
	/* putting a cached key again replaces it in place */
	replaycache_put(3, id[0], NULL, &r, now_ms() + 60000);
	for (unsigned k = 0; k <= N; k++) {
		int got = replaycache_lookup(3, id[k], NULL, 0, &out, NULL, NULL);
		assert_int_equal(got, k == 1 ? 0 : 1);
		if (got == 1)
			store_response_free(&out);
	}
	replaycache_clear();
}

UNIT_MAIN(cmocka_unit_test(test_hit_is_a_copy), cmocka_unit_test(test_other_tenant_never_served),
	  cmocka_unit_test(test_fingerprint_mismatch), cmocka_unit_test(test_expired_not_served),
	  cmocka_unit_test(test_many_entries_and_eviction), cmocka_unit_test(test_full_set),
	  cmocka_unit_test(test_tenant_share), cmocka_unit_test(test_byte_bound_turns_over),
	  cmocka_unit_test(test_reply_and_raw_key), cmocka_unit_test(test_usage),
	  cmocka_unit_test(test_raw_key_rules), cmocka_unit_test(test_reply_kinds_apart))
