/* HTTP core: the libmicrohttpd daemon (http.c): start, reload, stop.
 * What a request is and how it is answered: request.h.
 * Ownership: arguments are borrowed, for as long as each function says. */
#ifndef IDEMD_HTTP_H
#define IDEMD_HTTP_H

#include "request.h"

struct config;

/* Starts the daemon; CFG is borrowed until http_stop() (the request
 * deadline reaper reads it until then, not the reloaded ones). */
int http_start(const struct config *cfg) IDEMD_WUR;
/* SIGHUP: the body limits and CORS origins of CFG from now on (what only a
 * restart changes, the listener and its threads, stays). CFG is borrowed
 * until a grace period begun after the next reload is done (below). */
void http_reload(const struct config *cfg);
/*
 * Grace periods, for what a reload replaces. Every read a request makes of
 * a configuration (or of what was built from one: routes, CORS sets)
 * happens between its context's creation and the end of its completion
 * callback, and a request loads those pointers only after it was counted.
 * http_grace_begin() starts counting the requests that begin from now on
 * apart; http_grace_done() says whether every request counted before that
 * has ended: then nothing unpublished before the begin can be read any
 * more and may be freed. One grace period at a time (the main thread's).
 */
void http_grace_begin(void);
int http_grace_done(void);
/* What a reload replaced and only requests read (a route table, a router
 * set, a CORS set) is handed to retire_add() (base/retire.h): the grace
 * period begun next seals it, the http_grace_done() that sees that period
 * done frees it, and http_stop() frees whatever is left. */
/* Stops accepting and waits (at most 30 s) for in-flight requests that are
 * not suspended to finish; idle keep-alive connections do not hold it. */
void http_quiesce(void);
/* Waits (at most 30 s) for every request to end, suspended ones included
 * (whoever resumes them must still run), then stops the daemon: 0. -1 when
 * some connection stayed suspended: the daemon runs on, and nothing its
 * requests may touch can be freed (the caller ends the process). */
int http_stop(void) IDEMD_WUR;

#endif
