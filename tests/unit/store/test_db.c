/* Unit tests for the pool's error classification: which SQLSTATEs drop a
 * pooled connection (so that a multi-host database_url finds the new
 * primary after a failover) and which leave it in the pool. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "db.h"
#include "unit.h"

static void test_failover_states_drop(void **state)
{
	(void)state;
	/* the server is read-only: a standby, or a primary being demoted */
	assert_int_equal(db_sqlstate_drops("25006"), 1);
	/* the server is going away, crashed, or is starting / in recovery */
	assert_int_equal(db_sqlstate_drops("57P01"), 1);
	assert_int_equal(db_sqlstate_drops("57P02"), 1);
	assert_int_equal(db_sqlstate_drops("57P03"), 1);
	/* class 08: connection exceptions */
	assert_int_equal(db_sqlstate_drops("08000"), 1);
	assert_int_equal(db_sqlstate_drops("08003"), 1);
	assert_int_equal(db_sqlstate_drops("08006"), 1);
	assert_int_equal(db_sqlstate_drops("08P01"), 1);
}

static void test_other_errors_keep(void **state)
{
	(void)state;
	/* errors of the statement, not of the connection or the server */
	assert_int_equal(db_sqlstate_drops("23505"), 0); /* unique_violation */
	assert_int_equal(db_sqlstate_drops("40001"), 0); /* serialization_failure */
	assert_int_equal(db_sqlstate_drops("40P01"), 0); /* deadlock_detected */
	assert_int_equal(db_sqlstate_drops("57014"), 0); /* query_canceled */
	assert_int_equal(db_sqlstate_drops("25001"), 0); /* active_sql_transaction */
	assert_int_equal(db_sqlstate_drops("57P04"), 0); /* database_dropped */
	assert_int_equal(db_sqlstate_drops("P0001"), 0); /* raise_exception */
	assert_int_equal(db_sqlstate_drops("42P01"), 0); /* undefined_table */
}

static void test_malformed_keep(void **state)
{
	(void)state;
	assert_int_equal(db_sqlstate_drops(NULL), 0);
	assert_int_equal(db_sqlstate_drops(""), 0);
	assert_int_equal(db_sqlstate_drops("08"), 0);
	assert_int_equal(db_sqlstate_drops("080000"), 0);
	assert_int_equal(db_sqlstate_drops("2500"), 0);
	assert_int_equal(db_sqlstate_drops("57P01 "), 0);
}

UNIT_MAIN(cmocka_unit_test(test_failover_states_drop), cmocka_unit_test(test_other_errors_keep),
	  cmocka_unit_test(test_malformed_keep))
