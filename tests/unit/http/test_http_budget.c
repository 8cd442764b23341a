/* Unit tests for the client slots of the body budget and of the unknown-key
 * lookups (http_client_slot_of): an IPv4 address is one client, an
 * IPv4-mapped IPv6 address is its IPv4 address, and an IPv6 client is a
 * prefix of ipv6_client_prefix bits. The hash is keyed with random bytes,
 * so "different clients" is checked over many addresses: 64 of them may
 * not all land in one of the 1,024 slots, nor repeat the slots of the
 * fixed public key the hash used before. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <netinet/in.h>
#include <sodium.h>

#include "http_int.h"

#define MANY 64

static struct sockaddr_in6 v6(const char *text);
static struct sockaddr_in v4(const char *text);
static size_t slot6(const char *text, int prefix);
static size_t distinct(const size_t *slots, size_t n);

static struct sockaddr_in6 v6(const char *text)
{
	struct sockaddr_in6 sa;

	memset(&sa, 0, sizeof(sa));
	sa.sin6_family = AF_INET6;
	assert_int_equal(inet_pton(AF_INET6, text, &sa.sin6_addr), 1);
	return sa;
}

static struct sockaddr_in v4(const char *text)
{
	struct sockaddr_in sa;

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	assert_int_equal(inet_pton(AF_INET, text, &sa.sin_addr), 1);
	return sa;
}

static size_t slot6(const char *text, int prefix)
{
	struct sockaddr_in6 sa = v6(text);
	size_t s = http_client_slot_of((const struct sockaddr *)(const void *)&sa, prefix);

	assert_true(s < HTTP_CLIENT_SLOTS);
	return s;
}

static size_t distinct(const size_t *slots, size_t n)
{
	size_t d = 0;

	for (size_t i = 0; i < n; i++) {
		size_t j = 0;
		while (j < i && slots[j] != slots[i])
			j++;
		d += j == i;
	}
	return d;
}

static void test_one_64_is_one_client(void **state)
{
	size_t s = slot6("2001:db8:1:2::1", 64);
	char text[64];

	(void)state;
	assert_int_equal(slot6("2001:db8:1:2:ffff:ffff:ffff:fffe", 64), s);
	assert_int_equal(slot6("2001:db8:1:2:8000::", 64), s);
	for (unsigned i = 0; i < MANY; i++) {
		snprintf(text, sizeof(text), "2001:db8:1:2:%x:%x::%x", i * 977, i, i + 1);
		assert_int_equal(slot6(text, 64), s);
	}
}

static void test_other_64s_are_other_clients(void **state)
{
	size_t slots[MANY];
	char text[64];

	(void)state;
	for (unsigned i = 0; i < MANY; i++) {
		snprintf(text, sizeof(text), "2001:db8:1:%x::1", i);
		slots[i] = slot6(text, 64);
	}
	assert_true(distinct(slots, MANY) > MANY / 2);
	/* and the bit right before the prefix's end counts */
	for (unsigned i = 0; i < MANY; i++) {
		snprintf(text, sizeof(text), "2001:db8:%x:1::1", i);
		slots[i] = slot6(text, 64);
	}
	assert_true(distinct(slots, MANY) > MANY / 2);
}

static void test_prefix_128_separates_hosts(void **state)
{
	size_t slots[MANY];
	char text[64];

	(void)state;
	for (unsigned i = 0; i < MANY; i++) {
		snprintf(text, sizeof(text), "2001:db8:1:2::%x", i + 1);
		slots[i] = slot6(text, 128);
	}
	assert_true(distinct(slots, MANY) > MANY / 2);
	for (unsigned i = 0; i < MANY; i++) {
		snprintf(text, sizeof(text), "2001:db8:1:2::%x", i + 1);
		slots[i] = slot6(text, 64);
	}
	assert_int_equal(distinct(slots, MANY), 1);
}

static void test_prefix_not_on_a_byte(void **state)
{
	(void)state;
	/* /60: 2001:db8:1:20 … 2001:db8:1:2f are one client */
	assert_int_equal(slot6("2001:db8:1:20::1", 60), slot6("2001:db8:1:2f:ffff::9", 60));
	/* /1: the whole lower half of the space */
	assert_int_equal(slot6("2001:db8::1", 1), slot6("::2", 1));
	/* out of range is clamped, never read past the address */
	assert_int_equal(slot6("2001:db8::1", 0), slot6("2001:db8::1", 1));
	assert_int_equal(slot6("2001:db8::1", 500), slot6("2001:db8::1", 128));
}

static void test_ipv4_mapped_is_its_ipv4_address(void **state)
{
	char text[64];
	size_t slots[MANY];

	(void)state;
	for (unsigned i = 0; i < MANY; i++) {
		snprintf(text, sizeof(text), "192.0.2.%u", i + 1);
		struct sockaddr_in a = v4(text);
		size_t s4 = http_client_slot_of((const struct sockaddr *)(const void *)&a, 64);
		snprintf(text, sizeof(text), "::ffff:192.0.2.%u", i + 1);
		/* a /64 would make every mapped address one client */
		assert_int_equal(slot6(text, 64), s4);
		slots[i] = s4;
	}
	assert_true(distinct(slots, MANY) > MANY / 2);
}

static void test_key_is_not_the_public_one(void **state)
{
	static const unsigned char old_key[crypto_shorthash_KEYBYTES] = "idemd-body-slot!";
	unsigned same = 0;
	char text[32];

	(void)state;
	for (unsigned i = 0; i < MANY; i++) {
		snprintf(text, sizeof(text), "198.51.100.%u", i + 1);
		struct sockaddr_in a = v4(text);
		uint64_t h;
		crypto_shorthash((unsigned char *)&h, (const unsigned char *)&a.sin_addr,
				 sizeof(a.sin_addr), old_key);
		same += http_client_slot_of((const struct sockaddr *)(const void *)&a, 64) ==
			(size_t)(h % HTTP_CLIENT_SLOTS);
	}
	assert_true(same < MANY / 2);
}

static void test_no_address_is_slot_0(void **state)
{
	struct sockaddr other;

	(void)state;
	memset(&other, 0, sizeof(other));
	other.sa_family = AF_UNIX;
	assert_int_equal(http_client_slot_of(NULL, 64), 0);
	assert_int_equal(http_client_slot_of(&other, 64), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_64_is_one_client),
		cmocka_unit_test(test_other_64s_are_other_clients),
		cmocka_unit_test(test_prefix_128_separates_hosts),
		cmocka_unit_test(test_prefix_not_on_a_byte),
		cmocka_unit_test(test_ipv4_mapped_is_its_ipv4_address),
		cmocka_unit_test(test_key_is_not_the_public_one),
		cmocka_unit_test(test_no_address_is_slot_0),
	};

	if (sodium_init() < 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
