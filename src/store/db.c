/* Database pool. Every connection is used by one request at a time; waiting
 * for a free one, and for a statement's answer, is bounded so that a
 * stalled database turns into a quick 503, never a hang. */
#include "db.h"

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "metrics.h"

#define DB_ACQUIRE_WAIT_MS 1000
#define DB_RECONNECT_PAUSE_MS 200
/* a connection that answered less than this ago is not checked before use
 * (db_acquire): under load the check was one system call per statement */
#define DB_ALIVE_CHECK_IDLE_MS 100
/* a statement (a whole batch) unanswered after this is abandoned: its
 * connection is dropped, so the server rolls back whatever it had not
 * committed, and the caller answers 503 */
#define DB_STATEMENT_WAIT_MS_DEFAULT 10000

struct db_conn {
	PGconn *dc_pg;
	int dc_busy;
	int dc_broken;
	struct timespec dc_last_try;
	struct timespec dc_released; /* CLOCK_MONOTONIC, by db_release */
	uint8_t dc_prepared[DB_MAX_STATEMENTS];
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t freed;
	struct db_conn *conns;
	int size;
	char *conninfo;
	int prepared;
	long wait_ms; /* DB_STATEMENT_WAIT_MS_DEFAULT or database_timeout_ms */
	int waiting;  /* threads in db_acquire waiting for a free connection */
} db_pool = { PTHREAD_MUTEX_INITIALIZER,
	      PTHREAD_COND_INITIALIZER,
	      NULL,
	      0,
	      NULL,
	      1,
	      DB_STATEMENT_WAIT_MS_DEFAULT,
	      0 };

/* how many pooled connections were dropped because their server went away
 * or turned read-only: a sign that the primary may have moved */
static atomic_uint db_drops;

unsigned db_drop_count(void)
{
	return atomic_load(&db_drops);
}

int db_sqlstate_drops(const char *sqlstate)
{
	if (sqlstate == NULL || strlen(sqlstate) != 5)
		return 0;
	return strncmp(sqlstate, "08", 2) == 0 || /* connection exception */
	       strcmp(sqlstate, "25006") == 0 ||  /* read_only_sql_transaction */
	       strcmp(sqlstate, "57P01") == 0 ||  /* admin_shutdown */
	       strcmp(sqlstate, "57P02") == 0 ||  /* crash_shutdown */
	       strcmp(sqlstate, "57P03") == 0;	  /* cannot_connect_now */
}

/* Marks C broken, so that it is closed and reconnected on a later acquire
 * (where a multi-host database_url with target_session_attrs=read-write
 * finds the current primary), and counts the drop. */
static void db_drop(struct db_conn *c)
{
	if (!c->dc_broken)
		atomic_fetch_add(&db_drops, 1);
	c->dc_broken = 1;
}

void db_use_prepared(int on)
{
	db_pool.prepared = on;
}

void db_set_timeout(long ms)
{
	db_pool.wait_ms = ms;
}

/* CLOCK_MONOTONIC ms of the last successful connect of a pooled connection */
static _Atomic long long db_connected_at;

static long long db_ms(const struct timespec *t)
{
	return (long long)t->tv_sec * 1000 + t->tv_nsec / 1000000;
}

static long db_ms_since(const struct timespec *t)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (now.tv_sec - t->tv_sec) * 1000 + (now.tv_nsec - t->tv_nsec) / 1000000;
}

/* The last connection error, and whether to log each one (serve's wait
 * for the database says it once every few seconds instead). */
static pthread_mutex_t db_error_lock = PTHREAD_MUTEX_INITIALIZER;
static char db_error[256] = "no connection tried yet";
static atomic_int db_quiet;

void db_set_quiet(int quiet)
{
	atomic_store(&db_quiet, quiet);
}

const char *db_last_error(void)
{
	static __thread char copy[256];

	pthread_mutex_lock(&db_error_lock);
	snprintf(copy, sizeof(copy), "%s", db_error);
	pthread_mutex_unlock(&db_error_lock);
	return copy;
}

PGconn *db_connect(const char *conninfo)
{
	/* defaults first, so that the operator's conninfo (expanded from
	 * "dbname") overrides them: connect_timeout bounds a connect to an
	 * unreachable host, TCP keepalives find a peer that vanished */
	const char *keys[] = {
		"connect_timeout",     "application_name", "keepalives", "keepalives_idle",
		"keepalives_interval", "keepalives_count", "dbname",	 NULL
	};
	const char *vals[] = { "2", "idemd", "1", "10", "5", "3", conninfo, NULL };
	PGconn *pg = PQconnectdbParams(keys, vals, 1);

	if (pg == NULL)
		return NULL;
	if (PQstatus(pg) != CONNECTION_OK) {
		char msg[256];
		snprintf(msg, sizeof(msg), "%s", PQerrorMessage(pg));
		msg[strcspn(msg, "\n")] = '\0';
		pthread_mutex_lock(&db_error_lock);
		snprintf(db_error, sizeof(db_error), "%s", msg);
		pthread_mutex_unlock(&db_error_lock);
		if (!atomic_load(&db_quiet))
			log_warn("db: cannot connect: %s", msg);
		PQfinish(pg);
		return NULL;
	}
	return pg;
}

/* (Re)connects C if it is broken and the last try is not too recent. */
static void db_heal(struct db_conn *c)
{
	if (c->dc_pg != NULL && !c->dc_broken && PQstatus(c->dc_pg) == CONNECTION_OK)
		return;
	/* a connection that failed a moment ago waits before trying again,
	 * unless another one has connected since: the database is back */
	if (db_ms_since(&c->dc_last_try) < DB_RECONNECT_PAUSE_MS &&
	    atomic_load(&db_connected_at) <= db_ms(&c->dc_last_try))
		return;
	clock_gettime(CLOCK_MONOTONIC, &c->dc_last_try);
	if (c->dc_pg != NULL)
		PQfinish(c->dc_pg);
	c->dc_pg = db_connect(db_pool.conninfo);
	if (c->dc_pg != NULL) {
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		atomic_store(&db_connected_at, db_ms(&now));
	}
	/* non-blocking, so that db_wait() bounds sending as well as waiting */
	if (c->dc_pg != NULL && PQsetnonblocking(c->dc_pg, 1) != 0) {
		PQfinish(c->dc_pg);
		c->dc_pg = NULL;
	}
	c->dc_broken = c->dc_pg == NULL;
	memset(c->dc_prepared, 0, sizeof(c->dc_prepared));
}

int db_pool_init(const char *conninfo, int size)
{
	db_pool.conns = calloc((size_t)size, sizeof(*db_pool.conns));
	db_pool.conninfo = strdup(conninfo);
	if (db_pool.conns == NULL || db_pool.conninfo == NULL) {
		free(db_pool.conns);
		free(db_pool.conninfo);
		return -1;
	}
	db_pool.size = size;
	/* the others connect when first used, or at once when the first did:
	 * an unreachable database is said once, not once per connection */
	for (int i = 0; i < size; i++) {
		db_pool.conns[i].dc_broken = 1;
		if (i == 0 || db_pool.conns[0].dc_pg != NULL)
			db_heal(&db_pool.conns[i]);
	}
	return 0;
}

void db_pool_close(void)
{
	pthread_mutex_lock(&db_pool.lock);
	for (int i = 0; i < db_pool.size; i++)
		if (db_pool.conns[i].dc_pg != NULL)
			PQfinish(db_pool.conns[i].dc_pg);
	free(db_pool.conns);
	free(db_pool.conninfo);
	db_pool.conns = NULL;
	db_pool.conninfo = NULL;
	db_pool.size = 0;
	pthread_mutex_unlock(&db_pool.lock);
}

/* Whether idle connection PG is still open: a server that ended it sent
 * its farewell and closed the socket, which shows as a hang-up. */
static int db_alive(PGconn *pg)
{
	struct pollfd p = { PQsocket(pg), POLLIN | POLLRDHUP, 0 };

	if (PQstatus(pg) != CONNECTION_OK || p.fd < 0 || poll(&p, 1, 0) < 0)
		return 0;
	if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))
		return 0;
	return !(p.revents & POLLIN) || (PQconsumeInput(pg) == 1 && PQstatus(pg) == CONNECTION_OK);
}

/* The first idle connection of the pool, a healthy one before any other;
 * NULL when all are busy. Marks nothing; under db_pool.lock. */
static struct db_conn *db_pool_idle(void)
{
	for (int i = 0; i < db_pool.size; i++)
		if (!db_pool.conns[i].dc_busy && !db_pool.conns[i].dc_broken)
			return &db_pool.conns[i];
	for (int i = 0; i < db_pool.size; i++)
		if (!db_pool.conns[i].dc_busy)
			return &db_pool.conns[i];
	return NULL;
}

struct db_conn *db_acquire(void)
{
	struct timespec deadline, t0;
	struct db_conn *c = NULL;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_nsec += (long)DB_ACQUIRE_WAIT_MS * 1000000L;
	deadline.tv_sec += deadline.tv_nsec / 1000000000L;
	deadline.tv_nsec %= 1000000000L;

	pthread_mutex_lock(&db_pool.lock);
	while ((c = db_pool_idle()) == NULL) {
		db_pool.waiting++;
		int rc = pthread_cond_timedwait(&db_pool.freed, &db_pool.lock, &deadline);
		db_pool.waiting--;
		if (rc == ETIMEDOUT)
			break;
	}
	if (c != NULL)
		c->dc_busy = 1;
	pthread_mutex_unlock(&db_pool.lock);
	metrics_db_wait((double)db_ms_since(&t0) / 1000.0);
	if (c == NULL) {
		log_warn("db: no connection free within %d ms", DB_ACQUIRE_WAIT_MS);
		return NULL;
	}
	/* PostgreSQL may have closed an idle connection (a restart, an idle
	 * timeout): noticed here, before anything is sent, it is replaced at
	 * once instead of failing its next statement. One that answered a
	 * moment ago is taken as open: a server gone since fails the
	 * statement, as it fails those in flight. */
	if (!c->dc_broken && c->dc_pg != NULL &&
	    db_ms_since(&c->dc_released) >= DB_ALIVE_CHECK_IDLE_MS && !db_alive(c->dc_pg)) {
		db_drop(c);
		c->dc_last_try = (struct timespec){ 0, 0 };
	}
	db_heal(c);
	if (c->dc_broken) {
		db_release(c);
		return NULL;
	}
	return c;
}

void db_release(struct db_conn *c)
{
	if (c == NULL)
		return;
	if (!c->dc_broken && PQtransactionStatus(c->dc_pg) != PQTRANS_IDLE)
		c->dc_broken = 1; /* never hand out a connection inside a transaction */
	clock_gettime(CLOCK_MONOTONIC, &c->dc_released);
	pthread_mutex_lock(&db_pool.lock);
	c->dc_busy = 0;
	pthread_cond_signal(&db_pool.freed);
	pthread_mutex_unlock(&db_pool.lock);
}

static void db_log_error(const char *what, const char *name, const char *msg)
{
	char line[512];

	snprintf(line, sizeof(line), "%s", msg);
	line[strcspn(line, "\n")] = '\0';
	log_error("db: %s %s: %s", what, name, line);
}

static PGresult *db_check(struct db_conn *c, const struct db_stmt *stmt, PGresult *r);

/*
 * Collects the answer to what was just sent on C: its first result (the
 * rest are read and dropped), or NULL when the connection failed or no
 * answer came within database_timeout_ms. Either way the connection is
 * then marked broken and replaced on a later acquire.
 */
static PGresult *db_wait(struct db_conn *c, int sent, const char *name)
{
	PGconn *pg = c->dc_pg;
	PGresult *first = NULL;
	struct timespec start;

	clock_gettime(CLOCK_MONOTONIC, &start);
	if (!sent)
		goto broken;
	for (;;) {
		int pending = PQflush(pg);
		if (pending < 0)
			goto broken;
		while (pending == 0 && !PQisBusy(pg)) {
			PGresult *r = PQgetResult(pg);
			if (r == NULL)
				return first;
			if (first == NULL)
				first = r;
			else
				PQclear(r);
		}
		long left = db_pool.wait_ms - db_ms_since(&start);
		if (left <= 0) {
			log_error("db: %s: no answer within %ld ms; dropping the connection", name,
				  db_pool.wait_ms);
			goto broken;
		}
		struct pollfd p = { PQsocket(pg), (short)(POLLIN | (pending ? POLLOUT : 0)), 0 };
		int n = poll(&p, 1, (int)left);
		if ((n < 0 && errno != EINTR) || (n > 0 && PQconsumeInput(pg) == 0))
			goto broken;
	}
broken:
	PQclear(first);
	db_drop(c);
	return NULL;
}

PGresult *db_exec(struct db_conn *c, const struct db_stmt *stmt, const char *const *values,
		  const int *lengths, const int *formats)
{
	if (!db_pool.prepared) {
		int sent = PQsendQueryParams(c->dc_pg, stmt->sql, stmt->nparams, NULL, values,
					     lengths, formats, 0);
		return db_check(c, stmt, db_wait(c, sent, stmt->name));
	}
	if (!c->dc_prepared[stmt->index]) {
		int sent = PQsendPrepare(c->dc_pg, stmt->name, stmt->sql, stmt->nparams, NULL);
		PGresult *p = db_wait(c, sent, stmt->name);
		ExecStatusType st = p ? PQresultStatus(p) : PGRES_FATAL_ERROR;
		if (st != PGRES_COMMAND_OK) {
			db_log_error("prepare", stmt->name, PQerrorMessage(c->dc_pg));
			if (PQstatus(c->dc_pg) != CONNECTION_OK ||
			    (p != NULL &&
			     db_sqlstate_drops(PQresultErrorField(p, PG_DIAG_SQLSTATE))))
				db_drop(c);
			PQclear(p);
			return NULL;
		}
		PQclear(p);
		c->dc_prepared[stmt->index] = 1;
	}
	int sent = PQsendQueryPrepared(c->dc_pg, stmt->name, stmt->nparams, values, lengths,
				       formats, 0);
	return db_check(c, stmt, db_wait(c, sent, stmt->name));
}

/* Passes a successful result through; logs, clears and returns NULL
 * otherwise. A failure that says the server is going away, is read-only
 * (a standby, or a primary being demoted) or lost the connection drops
 * the connection: kept, it would fail every later statement too. The
 * statement ran in its own implicit transaction, so nothing of it stays. */
static PGresult *db_check(struct db_conn *c, const struct db_stmt *stmt, PGresult *r)
{
	ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
	if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
		return r;
	db_log_error("exec", stmt->name, PQerrorMessage(c->dc_pg));
	if (c->dc_broken || PQstatus(c->dc_pg) != CONNECTION_OK ||
	    (r != NULL && db_sqlstate_drops(PQresultErrorField(r, PG_DIAG_SQLSTATE)))) {
		if (!c->dc_broken)
			log_warn("db: dropping the connection (the server went away or is "
				 "read-only); the next one goes to the current primary");
		db_drop(c);
	}
	PQclear(r);
	return NULL;
}

PGresult *db_run(const struct db_stmt *stmt, const char *const *values, const int *lengths,
		 const int *formats)
{
	struct db_conn *c = db_acquire();

	if (c == NULL)
		return NULL;
	PGresult *r = db_exec(c, stmt, values, lengths, formats);
	db_release(c);
	return r;
}

int db_ping(void)
{
	/* writable, as target_session_attrs=read-write checks it: a standby
	 * (or a session made read-only) cannot take a claim */
	static const struct db_stmt ping = {
		0, "ping", "SELECT pg_catalog.current_setting('transaction_read_only') = 'off'", 0
	};
	struct db_conn *c = db_acquire();
	int ok;

	if (c == NULL)
		return 0;
	PGresult *r = db_exec(c, &ping, NULL, NULL, NULL);
	ok = r != NULL && PQntuples(r) == 1 && PQgetvalue(r, 0, 0)[0] == 't';
	if (r != NULL && !ok) {
		log_warn("db: the server is read-only (a standby?); dropping the connection");
		db_drop(c);
	}
	db_release(c);
	PQclear(r);
	return ok;
}

void db_pool_usage(int *size, int *in_use, int *waiting)
{
	pthread_mutex_lock(&db_pool.lock);
	*size = db_pool.size;
	*in_use = 0;
	for (int i = 0; i < db_pool.size; i++)
		*in_use += db_pool.conns[i].dc_busy != 0;
	*waiting = db_pool.waiting;
	pthread_mutex_unlock(&db_pool.lock);
}
