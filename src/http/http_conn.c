/* HTTP connections: the state each keeps across its requests (the API
 * key memo, the deadline), the count of each client's connections (one
 * over max_connections_per_ip is shut down) and the reaper thread that
 * shuts down connections past request_timeout_seconds, receiving a
 * request or sending its answer. */
#include "http_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "bgthread.h"
#include "config.h"
#include "log.h"
#include "metrics.h"

static const struct config *http_conn_cfg;

/* Every open connection, for the reaper thread. */
static struct {
	struct bgthread reaper; /* its lock guards HEAD too */
	struct http_conn *head;
} http_conns = { .reaper = BGTHREAD_INITIALIZER };

/*
 * The reaper: a connection that has not delivered a whole request within
 * request_timeout_seconds of opening (or of its previous answer) is shut
 * down, however slowly it trickles; libmicrohttpd then sees the end of the
 * stream and closes it. Connections are unlinked under the lock before
 * their socket is closed, so a shut-down descriptor is never a reused one.
 */
static void *http_reaper(void *arg)
{
	int64_t limit = (int64_t)http_conn_cfg->request_timeout_seconds * 1000;

	(void)arg;
	pthread_mutex_lock(&http_conns.reaper.lock);
	while (!http_conns.reaper.stop) {
		struct timespec until = bgthread_deadline(250);
		pthread_cond_timedwait(&http_conns.reaper.wake, &http_conns.reaper.lock, &until);
		int64_t now = http_now_ms();
		for (struct http_conn *c = http_conns.head; c != NULL; c = c->hc_next) {
			int64_t since = atomic_load(&c->hc_since);
			if (since != 0 && now - since > limit) {
				atomic_store(&c->hc_since, 0);
				shutdown(c->hc_fd, SHUT_RDWR);
				metrics_add(METRIC_REQUEST_TIMEOUTS, 1);
			}
		}
	}
	pthread_mutex_unlock(&http_conns.reaper.lock);
	return NULL;
}

/* Connections open per client slot (http_client_slot), of the API daemon. */
static atomic_int http_conn_clients[HTTP_CLIENT_SLOTS];

/* Counts the connection C of CONN for its client; shuts it down when that
 * makes more than CAP (0: no cap). libmicrohttpd's own per-IP limit counts
 * each address apart, so a host with a /64 could hold every connection. */
static void http_conn_count(struct http_conn *c, struct MHD_Connection *conn, int cap)
{
#ifdef IDEMD_MUTANT_CONNECTIONS_PER_ADDRESS
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	c->hc_slot = ci != NULL ? http_client_slot_of(ci->client_addr, 128) : 0;
#else
	c->hc_slot = http_client_slot(conn);
#endif
	c->hc_counted = 1;
	int n = atomic_fetch_add(&http_conn_clients[c->hc_slot], 1) + 1;
	if (cap > 0 && n > cap) {
		/* before a byte is read: libmicrohttpd sees the end and closes it */
		shutdown(c->hc_fd, SHUT_RDWR);
		metrics_add(METRIC_CONNECTIONS_REFUSED, 1);
	}
}

/* A connection opens (its state is made) or closes (the state is wiped). */
void http_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
		     enum MHD_ConnectionNotificationCode toe)
{
	struct http_conn *c = *socket_context;

	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		/* NULL when out of memory: requests then go without a memo or a
		 * deadline (the idle timeout still holds) */
		c = ci != NULL ? calloc(1, sizeof(*c)) : NULL;
		*socket_context = c;
		if (c == NULL)
			return;
		c->hc_fd = ci->connect_fd;
		/* the kernel holds at most this much of an answer the client
		 * does not read; the rest stays with libmicrohttpd, counted in
		 * the body budget, until the deadline cuts the connection */
		int sndbuf = HTTP_SNDBUF_BYTES;
		if (setsockopt(c->hc_fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) != 0)
			log_debug("http: SO_SNDBUF not set");
		atomic_store(&c->hc_since, http_now_ms());
		if (cls != NULL)
			http_conn_count(c, conn, *(const int *)cls);
		pthread_mutex_lock(&http_conns.reaper.lock);
		c->hc_next = http_conns.head;
		if (c->hc_next != NULL)
			c->hc_next->hc_prev = c;
		http_conns.head = c;
		pthread_mutex_unlock(&http_conns.reaper.lock);
		return;
	}
	if (c != NULL) {
		pthread_mutex_lock(&http_conns.reaper.lock);
		if (c->hc_prev != NULL)
			c->hc_prev->hc_next = c->hc_next;
		else
			http_conns.head = c->hc_next;
		if (c->hc_next != NULL)
			c->hc_next->hc_prev = c->hc_prev;
		pthread_mutex_unlock(&http_conns.reaper.lock);
		if (c->hc_counted)
			atomic_fetch_sub(&http_conn_clients[c->hc_slot], 1);
		auth_memo_wipe(&c->hc_auth);
		free(c);
	}
	*socket_context = NULL;
}

int http_conn_start(const struct config *cfg)
{
	http_conn_cfg = cfg;
	if (bgthread_start(&http_conns.reaper, http_reaper) < 0) {
		log_error("http: cannot start the request deadline thread");
		return -1;
	}
	return 0;
}

void http_conn_stop(void)
{
	bgthread_stop(&http_conns.reaper);
}
