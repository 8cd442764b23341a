/* Unit tests for the random pool: requests of any size are filled, across
 * refills, and no bytes are handed out twice. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "randpool.h"
#include "unit.h"

static void test_fills_and_differs(void **state)
{
	unsigned char a[16], b[16], zero[16] = { 0 };

	(void)state;
	randpool_buf(a, sizeof(a));
	randpool_buf(b, sizeof(b));
	assert_memory_not_equal(a, b, sizeof(a));
	assert_memory_not_equal(a, zero, sizeof(a));
}

/* Draws across several refills, in odd sizes, and checks that no 16-byte
 * block repeats (a reused pool position would). */
static void test_refills(void **state)
{
	enum { N = 3 * RANDPOOL_BYTES / 16 + 7 };
	static unsigned char ids[N][16];
	unsigned char big[RANDPOOL_BYTES + 100];

	(void)state;
	randpool_buf(big, 3); /* misalign the pool */
	for (size_t i = 0; i < N; i++)
		randpool_buf(ids[i], 16);
	for (size_t i = 0; i < N; i++)
		for (size_t j = i + 1; j < N; j++)
			assert_memory_not_equal(ids[i], ids[j], 16);
	randpool_buf(big, sizeof(big));
	assert_memory_not_equal(big, big + RANDPOOL_BYTES, 64);
	randpool_buf(big, 0);
}

UNIT_MAIN(cmocka_unit_test(test_fills_and_differs), cmocka_unit_test(test_refills))
