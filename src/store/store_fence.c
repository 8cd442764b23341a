/* The fence session (store_fence.h). Its thread connects, takes
 * pg_try_advisory_lock(STORE_FENCE_CLASS, id) with an id drawn at random
 * (again only if another live process holds that one), and then checks
 * every STORE_FENCE_BEAT_MS that the session still answers. While a check
 * waits (a paused backend, a stall) the lock is still held, and so is the
 * fence; once the session is known to be gone the fence is dropped before
 * anything else, and taken again, under the same id, on a new session. */
#include "store_fence.h"

#include <libpq-fe.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bgthread.h"
#include "db.h"
#include "log.h"

/* The first key of the fence's lock: "idmd" (migrations/0020). */
#define STORE_FENCE_CLASS 1768189284
#define STORE_FENCE_BEAT_MS 500

static struct {
	struct bgthread bg;
	char *conninfo;
	int32_t id;	      /* drawn once; the thread's */
	_Atomic int32_t held; /* ID while the lock is held, else 0 */
} fence = { .bg = BGTHREAD_INITIALIZER };

/* A new id, never 0 or negative. */
static int32_t store_fence_draw(void)
{
	return (int32_t)(randombytes_uniform(0x7ffffffe) + 1);
}

/* Runs SQL on PG; 1 when it answered "t". */
static int store_fence_true(PGconn *pg, const char *sql)
{
	PGresult *r = PQexec(pg, sql);
	int yes = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 &&
		  strcmp(PQgetvalue(r, 0, 0), "t") == 0;

	PQclear(r);
	return yes;
}

/* Takes the lock on PG: 0, or -1 (a failed session, or after a few ids
 * another process holds each). A new session keeps the id it had: its
 * records are fenced again. */
static int store_fence_lock(PGconn *pg)
{
	char sql[96];

	/* a dead client's session ends within seconds on the server's side
	 * too, so that its lock does not outlive it by TCP's default hours */
	PQclear(PQexec(pg, "SET tcp_keepalives_idle = 5; SET tcp_keepalives_interval = 2; "
			   "SET tcp_keepalives_count = 3; SET tcp_user_timeout = 11000"));
	for (int tries = 0; tries < 4; tries++) {
		snprintf(sql, sizeof(sql), "SELECT pg_try_advisory_lock(%d, %d)", STORE_FENCE_CLASS,
			 (int)fence.id);
		if (store_fence_true(pg, sql))
			return 0;
		if (PQstatus(pg) != CONNECTION_OK)
			return -1;
		/* another live process has this id (or this process's last session
		 * is not gone yet on the server's side: its records stay fenced) */
		if (tries == 1)
			fence.id = store_fence_draw();
	}
	return -1;
}

/* Waits MS unless told to stop: 1 when told. */
static int store_fence_rest(int ms)
{
	struct timespec until = bgthread_deadline(ms);
	int stop;

	pthread_mutex_lock(&fence.bg.lock);
	if (!fence.bg.stop)
		pthread_cond_timedwait(&fence.bg.wake, &fence.bg.lock, &until);
	stop = fence.bg.stop;
	pthread_mutex_unlock(&fence.bg.lock);
	return stop;
}

static void *store_fence_thread(void *arg)
{
	PGconn *pg = NULL;

	(void)arg;
	do {
		if (pg != NULL && store_fence_true(pg, "SELECT true"))
			continue;
		if (pg != NULL) {
			atomic_store(&fence.held, 0);
			log_warn("fence: the fence session was lost; gateway forwards wait for a "
				 "new one");
			PQfinish(pg);
		}
		pg = db_connect(fence.conninfo);
		if (pg != NULL && store_fence_lock(pg) == 0) {
			atomic_store(&fence.held, fence.id);
			log_info("fence: holding fence %d", (int)fence.id);
		} else if (pg != NULL) {
			PQfinish(pg);
			pg = NULL;
		}
	} while (!store_fence_rest(STORE_FENCE_BEAT_MS));
	atomic_store(&fence.held, 0);
	PQfinish(pg);
	return NULL;
}

int store_fence_start(const char *conninfo)
{
	fence.conninfo = strdup(conninfo);
	if (fence.conninfo == NULL)
		return -1;
	fence.id = store_fence_draw();
	if (bgthread_start(&fence.bg, store_fence_thread) < 0) {
		free(fence.conninfo);
		fence.conninfo = NULL;
		return -1;
	}
	for (int i = 0; i < 40 && atomic_load(&fence.held) == 0; i++)
		store_fence_rest(50);
	return 0;
}

void store_fence_stop(void)
{
	bgthread_stop(&fence.bg);
	free(fence.conninfo);
	fence.conninfo = NULL;
}

int32_t store_fence_holder(void)
{
	return atomic_load(&fence.held);
}
