/* The LISTEN session of the waiters: LISTEN idemd_records, the probe that
 * shows notifications arrive, and the wait for them. */
#include "store_listen.h"

#include <libpq-fe.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "db.h"

struct store_listener {
	PGconn *sl_pg;
};

/* Whether notifications reach PG: it notifies itself and waits up to
 * WAIT_MS for its own probe. */
static int store_listen_probe(PGconn *pg, int wait_ms)
{
	PGresult *r = PQexec(pg, "NOTIFY idemd_records, 'probe'");
	int sent = PQresultStatus(r) == PGRES_COMMAND_OK;
	int64_t until = idemd_unix_ms() + wait_ms;

	PQclear(r);
	while (sent && idemd_unix_ms() < until) {
		struct pollfd p = { PQsocket(pg), POLLIN, 0 };
		if (poll(&p, 1, 50) < 0 || PQconsumeInput(pg) == 0)
			return 0;
		PGnotify *n;
		while ((n = PQnotifies(pg)) != NULL) {
			int mine = strcmp(n->extra, "probe") == 0;
			PQfreemem(n);
			if (mine)
				return 1;
		}
	}
	return 0;
}

enum store_listen_open store_listen_open(const char *conninfo, int probe_ms,
					 struct store_listener **out)
{
	PGconn *pg = db_connect(conninfo);
	struct store_listener *l;

	*out = NULL;
	if (pg == NULL)
		return STORE_LISTEN_FAILED;
	PGresult *r = PQexec(pg, "LISTEN idemd_records");
	int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
	PQclear(r);
	if (ok && !store_listen_probe(pg, probe_ms)) {
		PQfinish(pg);
		return STORE_LISTEN_NOT_HEARD;
	}
	if (!ok || PQsetnonblocking(pg, 1) != 0 || (l = malloc(sizeof(*l))) == NULL) {
		PQfinish(pg);
		return STORE_LISTEN_FAILED;
	}
	l->sl_pg = pg;
	*out = l;
	return STORE_LISTEN_OK;
}

int store_listen_wait(struct store_listener *l, int tick_ms,
		      void (*heard)(void *arg, const char *payload), void *arg)
{
	struct pollfd p = { PQsocket(l->sl_pg), POLLIN, 0 };

	if (poll(&p, 1, tick_ms) > 0 && PQconsumeInput(l->sl_pg) == 0)
		return -1;
	PGnotify *n;
	while ((n = PQnotifies(l->sl_pg)) != NULL) {
		heard(arg, n->extra);
		PQfreemem(n);
	}
	return 0;
}

void store_listen_close(struct store_listener *l)
{
	if (l == NULL)
		return;
	PQfinish(l->sl_pg);
	free(l);
}
