/* Unit tests for the operation cache (opcache.c): a miss reads the
 * database once and later reads are answered from memory; the janitor's
 * refresh reloads an entry read since it was loaded (so a change made on
 * another instance arrives without a request thread reading it), skips
 * one nobody read, loads an entry found under both indexes once, and
 * leaves the cache as it was when the database does not answer; and one
 * tenant cannot choose operations that evict another tenant's.
 *
 * The database is replaced by the two store functions below. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "opcache.h"
#include "unit.h"

/* ---------------------------------------------------------------- stand-ins */

static struct operation db_op; /* the one operation the database holds */
static int db_reads, db_down;

int store_operation_by_id(uint32_t op_id, struct operation *op, int *found)
{
	db_reads++;
	if (db_down)
		return -1;
	*found = op_id == db_op.op_id;
	if (*found)
		*op = db_op;
	return 0;
}

int store_operation_get(uint32_t tenant_id, const char *name, struct operation *op, int *found)
{
	db_reads++;
	if (db_down)
		return -1;
	*found = tenant_id == db_op.op_tenant_id && strcmp(name, db_op.op_name) == 0;
	if (*found)
		*op = db_op;
	return 0;
}

static void db_reset(uint32_t id, int lease)
{
	memset(&db_op, 0, sizeof(db_op));
	db_op.op_id = id;
	db_op.op_tenant_id = 3;
	snprintf(db_op.op_name, sizeof(db_op.op_name), "op-%u", id);
	db_op.op_lease_seconds = lease;
	db_reads = 0;
	db_down = 0;
}

/* ---------------------------------------------------------------- tests */

static void test_refresh_reloads_what_was_read(void **state)
{
	struct operation op;
	int found = 0;

	(void)state;
	db_reset(11, 30);
	assert_int_equal(opcache_by_id(11, &op, &found), 0);
	assert_true(found);
	assert_int_equal(db_reads, 1);
	assert_int_equal(opcache_by_id(11, &op, &found), 0);
	assert_int_equal(db_reads, 1); /* from memory */

	/* changed elsewhere: the refresh brings it, a request thread does not read */
	db_op.op_lease_seconds = 99;
	assert_int_equal(opcache_refresh(0), 0);
	assert_int_equal(db_reads, 2);
	assert_int_equal(opcache_by_id(11, &op, &found), 0);
	assert_int_equal(op.op_lease_seconds, 99);
	assert_int_equal(db_reads, 2);
	/* read by name and by id: the same entry, loaded once per refresh */
	assert_int_equal(opcache_by_name(3, "op-11", &op, &found), 0);
	assert_true(found);
	assert_int_equal(op.op_lease_seconds, 99);
	assert_int_equal(opcache_by_id(11, &op, &found), 0);
	assert_int_equal(db_reads, 2);
	assert_int_equal(opcache_refresh(0), 0);
	assert_int_equal(db_reads, 3);
}

static void test_refresh_skips_what_nobody_read(void **state)
{
	struct operation op;
	int found = 0;

	(void)state;
	db_reset(12, 30);
	assert_int_equal(opcache_by_name(3, "op-12", &op, &found), 0);
	assert_int_equal(db_reads, 1);
	/* loaded but not read since: nothing to reload */
	assert_int_equal(opcache_refresh(0), 0);
	assert_int_equal(db_reads, 1);
	/* not old enough yet for the janitor's age */
	assert_int_equal(opcache_by_name(3, "op-12", &op, &found), 0);
	assert_int_equal(opcache_refresh(OPCACHE_REFRESH_AGE), 0);
	assert_int_equal(db_reads, 1);
}

static void test_refresh_without_database_keeps_entries(void **state)
{
	struct operation op;
	int found = 0;

	(void)state;
	db_reset(13, 30);
	assert_int_equal(opcache_by_id(13, &op, &found), 0);
	assert_int_equal(opcache_by_id(13, &op, &found), 0);
	db_down = 1;
	assert_int_equal(opcache_refresh(0), -1);
	/* still answered from memory while fresh */
	assert_int_equal(opcache_by_id(13, &op, &found), 0);
	assert_true(found);
	assert_int_equal(op.op_lease_seconds, 30);
	/* back: reloaded on the next pass */
	db_down = 0;
	db_op.op_lease_seconds = 31;
	assert_int_equal(opcache_refresh(0), 0);
	assert_int_equal(opcache_by_id(13, &op, &found), 0);
	assert_int_equal(op.op_lease_seconds, 31);
}

/* FNV-1a of a tenant id and a name, modulo 1,024: where an unkeyed,
 * direct-mapped cache would put the operation, which anyone who knows the
 * tenant id and the name can compute. */
static unsigned fnv_slot(uint32_t tenant_id, const char *name)
{
	uint64_t h = 1469598103934665603ULL ^ tenant_id;

	for (const char *p = name; *p != '\0'; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	return (unsigned)(h % 1024);
}

/* Tenant 4 names 24 operations of the slot where an unkeyed cache keeps
 * tenant 3's "pay" (and ids 1,024 apart from its id) and uses them: pay
 * is still answered from memory, by name and by id. */
static void test_a_tenant_cannot_pick_another_tenants_slot(void **state)
{
	struct operation op, mine;
	int found = 0, made = 0;
	char name[32];

	(void)state;
	db_reset(40, 30);
	snprintf(db_op.op_name, sizeof(db_op.op_name), "pay");
	assert_int_equal(opcache_by_name(3, "pay", &op, &found), 0);
	assert_int_equal(opcache_by_id(40, &op, &found), 0);
	assert_int_equal(db_reads, 1);
	for (unsigned i = 0; made < 24; i++) {
		snprintf(name, sizeof(name), "evict-%u", i);
		if (fnv_slot(4, name) != fnv_slot(3, "pay"))
			continue;
		memset(&mine, 0, sizeof(mine));
		mine.op_id = 40 + 1024 * (uint32_t)++made;
		mine.op_tenant_id = 4;
		snprintf(mine.op_name, sizeof(mine.op_name), "%s", name);
		opcache_put(&mine); /* loaded, as its first use does */
		assert_int_equal(opcache_by_name(4, name, &op, &found), 0);
		assert_int_equal(opcache_by_id(mine.op_id, &op, &found), 0);
		assert_int_equal(opcache_by_name(3, "pay", &op, &found), 0);
		assert_true(found);
		assert_int_equal(opcache_by_id(40, &op, &found), 0);
		assert_true(found);
	}
	assert_int_equal(db_reads, 1);
}

UNIT_MAIN(cmocka_unit_test(test_refresh_reloads_what_was_read),
	  cmocka_unit_test(test_refresh_skips_what_nobody_read),
	  cmocka_unit_test(test_refresh_without_database_keeps_entries),
	  cmocka_unit_test(test_a_tenant_cannot_pick_another_tenants_slot))
