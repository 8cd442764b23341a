/* Unit tests for the replay counts: counts per record summed in memory and
 * written in one call per flush, sorted by record; a refused flush keeps
 * its counts for the next one; stop writes what is left; a full table
 * drops and counts. store_replays_add is a stand-in that records its calls. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "replaycount.h"
#include "store.h"
#include "unit.h"

static struct {
	int calls;
	int fail;	  /* the next calls fail */
	size_t n;	  /* of the last call */
	int64_t total;	  /* sum of all counts written */
	int sorted;	  /* every call's elements in (tenant, id) order */
	uint32_t tenant0; /* the first element of the last call */
	uint8_t id0[16];
	int64_t count0;
} st;

int store_replays_add(size_t n, const uint32_t *tenant_ids, const uint8_t (*ids)[16],
		      const int64_t *counts)
{
	st.calls++;
	if (st.fail)
		return -1;
	st.n = n;
	for (size_t i = 0; i < n; i++) {
		st.total += counts[i];
		if (i > 0 &&
		    (tenant_ids[i - 1] > tenant_ids[i] ||
		     (tenant_ids[i - 1] == tenant_ids[i] && memcmp(ids[i - 1], ids[i], 16) >= 0)))
			st.sorted = 0;
	}
	if (n > 0) {
		st.tenant0 = tenant_ids[0];
		memcpy(st.id0, ids[0], 16);
		st.count0 = counts[0];
	}
	return 0;
}

static void id_of(unsigned v, uint8_t id[16])
{
	memset(id, 0, 16);
	/* the hash reads the first bytes: vary them, as a MAC's would */
	for (int i = 0; i < 4; i++)
		id[i] = (uint8_t)(v >> (8 * i));
	id[15] = 0x5a;
}

static int setup(void **state)
{
	(void)state;
	memset(&st, 0, sizeof(st));
	st.sorted = 1;
	return replaycount_start();
}

static int teardown(void **state)
{
	(void)state;
	replaycount_stop();
	return 0;
}

static void counts_summed_per_record_in_one_sorted_call(void **state)
{
	uint8_t a[16], b[16];
	size_t pending;
	long dropped;

	(void)state;
	id_of(7, a);
	id_of(3, b);
	for (int i = 0; i < 5; i++)
		replaycount_add(2, a);
	replaycount_add(2, b);
	replaycount_add(1, a); /* another tenant: another record */
	replaycount_usage(&pending, &dropped);
	assert_int_equal(pending, 3);
	assert_int_equal(replaycount_flush(), 0);
	assert_int_equal(st.calls, 1);
	assert_int_equal(st.n, 3);
	assert_int_equal(st.total, 7);
	assert_true(st.sorted);
	assert_int_equal(st.tenant0, 1);
	assert_memory_equal(st.id0, a, 16);
	assert_int_equal(st.count0, 1);
	replaycount_usage(&pending, &dropped);
	assert_int_equal(pending, 0);
	/* nothing pending: no statement */
	assert_int_equal(replaycount_flush(), 0);
	assert_int_equal(st.calls, 1);
}

static void refused_flush_keeps_counts(void **state)
{
	uint8_t a[16];
	size_t pending;
	long dropped;

	(void)state;
	id_of(11, a);
	replaycount_add(4, a);
	replaycount_add(4, a);
	st.fail = 1;
	assert_int_equal(replaycount_flush(), -1);
	replaycount_add(4, a); /* arrives while the database is away */
	replaycount_usage(&pending, &dropped);
	assert_int_equal(pending, 1);
	st.fail = 0;
	assert_int_equal(replaycount_flush(), 0);
	assert_int_equal(st.n, 1);
	assert_int_equal(st.total, 3);
	assert_int_equal(dropped, 0);
}

static void stop_writes_what_is_left(void **state)
{
	uint8_t a[16];

	(void)state;
	id_of(99, a);
	for (int i = 0; i < 9; i++)
		replaycount_add(5, a);
	replaycount_stop();
	assert_int_equal(st.total, 9);
	/* after stop, counting is a no-op */
	replaycount_add(5, a);
	replaycount_stop();
	assert_int_equal(st.total, 9);
	assert_int_equal(replaycount_start(), 0);
}

static void full_table_drops_and_counts(void **state)
{
	uint8_t id[16];
	size_t pending;
	long dropped0, dropped;

	(void)state;
	replaycount_usage(&pending, &dropped0);
	st.fail = 1; /* the flusher cannot empty it meanwhile */
	for (unsigned i = 0; i < REPLAYCOUNT_CAPACITY + 10; i++) {
		id_of(i + 1, id);
		replaycount_add(1, id);
	}
	/* the flusher may have tried (and failed) meanwhile, and merged its
	 * share back: which replays were dropped depends on when, but every
	 * one of them is either pending or counted as dropped. A flush of our
	 * own waits for one in flight to end. */
	assert_int_equal(replaycount_flush(), -1);
	replaycount_usage(&pending, &dropped);
	assert_true(pending <= REPLAYCOUNT_CAPACITY - 1);
	assert_true(dropped - dropped0 >= 11);
	assert_int_equal((long)pending + (dropped - dropped0), REPLAYCOUNT_CAPACITY + 10);
	st.fail = 0;
	assert_int_equal(replaycount_flush(), 0);
	assert_int_equal(st.total, (long)pending);
}

UNIT_MAIN(cmocka_unit_test_setup_teardown(counts_summed_per_record_in_one_sorted_call, setup,
					  teardown),
	  cmocka_unit_test_setup_teardown(refused_flush_keeps_counts, setup, teardown),
	  cmocka_unit_test_setup_teardown(stop_writes_what_is_left, setup, teardown),
	  cmocka_unit_test_setup_teardown(full_table_drops_and_counts, setup, teardown))
