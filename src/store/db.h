/* Database pool: a fixed set of libpq connections made at start, statements
 * prepared lazily per connection, transparent reconnect, bounded waits.
 * Ownership: arguments are borrowed for the call; a connection from
 * db_acquire() is owned until db_release() gives it back; db_exec()'s result
 * and db_connect()'s connection are owned (PQclear(), PQfinish()). */
#ifndef IDEMD_DB_H
#define IDEMD_DB_H

#include <libpq-fe.h>
#include <stdint.h>

#include "common.h"

/* A statement known to the pool. INDEX is unique and < DB_MAX_STATEMENTS. */
struct db_stmt {
	int index;
	const char *name;
	const char *sql;
	int nparams;
};

#define DB_MAX_STATEMENTS 64

struct db_conn;

/* Opens SIZE connections. A connection that fails now is retried on use,
 * so the pool starts even while PostgreSQL is down. */
int db_pool_init(const char *conninfo, int size) IDEMD_WUR;

/* Whether statements are prepared (default) or sent with their text each
 * time, as a transaction-pooling connection pooler needs. Call before
 * db_pool_init. */
void db_use_prepared(int on);
/* How long a statement may go unanswered before its connection is dropped
 * and the caller gets NULL (default 10 s). Call before db_pool_init. */
void db_set_timeout(long ms);
void db_pool_close(void);

/* Opens one connection outside the pool (for the CLI), owned: the caller
 * closes it with PQfinish(). NULL after logging. */
PGconn *db_connect(const char *conninfo);
/* With QUIET, a failed connection is not logged (db_last_error() keeps
 * what it said). */
void db_set_quiet(int quiet);
/* The last connection error's text: a per-thread copy, borrowed until the
 * calling thread's next db_last_error(). */
const char *db_last_error(void);

/* A healthy connection from the pool, waiting at most about a second;
 * owned until db_release() gives it back; NULL when none is free in time
 * or PostgreSQL cannot be reached. */
struct db_conn *db_acquire(void);
void db_release(struct db_conn *c);

/*
 * Runs STMT with text parameters (VALUES may hold NULLs; LENGTHS and FORMATS
 * may be NULL for all-text). Returns an owned result: the caller PQclear()s it,
 * or NULL when the connection failed (the connection is then marked broken
 * and reconnected on a later acquire). A result with an error status is
 * logged and cleared, and NULL returned.
 */
PGresult *db_exec(struct db_conn *c, const struct db_stmt *stmt, const char *const *values,
		  const int *lengths, const int *formats);
/* db_exec() on a pooled connection, which goes back at once; NULL also
 * when none could be had. */
PGresult *db_run(const struct db_stmt *stmt, const char *const *values, const int *lengths,
		 const int *formats);

/* The pool's size, connections handed out, threads waiting for one. */
void db_pool_usage(int *size, int *in_use, int *waiting);

/* 1 when a connection can run a trivial query now on a writable server
 * (a read-only one has its connection dropped). */
int db_ping(void) IDEMD_WUR;

/* 1 when a statement failing with SQLSTATE (may be NULL) means its
 * connection is no good any more and must be dropped: class 08 (connection
 * exception), 25006 (read-only: a standby or a demoted primary), 57P01,
 * 57P02, 57P03 (the server is shutting down, crashed or starting). */
int db_sqlstate_drops(const char *sqlstate);

/* How many pooled connections were dropped so far because their server
 * went away, stopped answering or turned read-only; a change tells other
 * connections (the waiters' LISTEN) that the primary may have moved. */
unsigned db_drop_count(void);

#endif
