/*
 * HTTP internals shared by http.c (the daemon and the request path),
 * http_conn.c (per-connection state and the request deadline reaper) and
 * http_reply.c (replies). Not for other modules: they see http.h.
 */
#ifndef IDEMD_HTTP_INT_H
#define IDEMD_HTTP_INT_H

#include <stdint.h>

#include "auth.h"
#include "http.h"

struct config;

/* What outlives one request on a connection. */
struct http_conn {
	struct auth_memo hc_auth;     /* the API key it last authenticated with */
	/* monotonic ms since which the connection has been receiving a
	 * request (opened, or answered its previous one); 0 while a request
	 * is being answered. The reaper closes it past request_timeout. */
	_Atomic int64_t hc_since;
	MHD_socket hc_fd;
	struct http_conn *hc_prev, *hc_next; /* in http_conns, under its lock */
};

/* http_conn.c */
/* Marks the request's connection as receiving a request (YES: its deadline
 * starts now) or being answered (0). */
void http_receiving(struct request *req, int yes);
/* libmicrohttpd's connection notification: makes or wipes its state. */
void http_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
		     enum MHD_ConnectionNotificationCode toe);
/* Starts the reaper (request_timeout_seconds of CFG, borrowed): 0, or -1
 * after logging. */
int http_conn_start(const struct config *cfg);
/* Stops the reaper; safe when not started. */
void http_conn_stop(void);

/* http_reply.c */
/* Drops the reply built so far. */
void http_clear_reply(struct request *req);

#endif
