/* Router: maps method and path to a handler; knows which routes need an
 * API key and which take a JSON body.
 * Ownership: arguments are borrowed for the call unless noted. */
#ifndef IDEMD_ROUTER_H
#define IDEMD_ROUTER_H

#include <stddef.h>

#include "request.h"

enum route_auth { ROUTE_PUBLIC, ROUTE_API_KEY };

struct route {
	const char *method;
	const char *pattern; /* "{}" matches one non-empty segment; logged as the route */
	void (*handler)(struct request *req);
	enum route_auth auth;
	/* optional: checks on the headers alone, before any body byte is
	 * read (after authentication); 0 goes on, -1 after replying */
	int (*headers)(struct request *req);
	int opaque_body; /* any media type (gateway routes); else a body is JSON */
	int arg;	 /* for the handler (req->req_route->arg): which of the
			  * actions it serves this route runs; 0: none */
};

/* The API's own routes: TABLE (N of them, borrowed for good), set once
 * before serving. */
void router_set_table(const struct route *table, size_t n);

/*
 * Adds route R (borrowed until router_clear_added(), or router_discard()
 * when it is not published) to the set being built, which router_publish()
 * then puts ahead of the API's own table in one swap: the gateway registers
 * its routes so, at start and on each reload. An added route matches its
 * exact path and method only (no HEAD for GET, no "{}"). One builder at a
 * time. 0, or -1 out of memory.
 */
int router_add(const struct route *r) IDEMD_WUR;
/* Makes the set built so far the one requests match (the previous one is
 * kept until router_clear_added). 0, or -1 out of memory. */
int router_publish(void) IDEMD_WUR;

/* Drops the set being built (a reload that failed half way). */
void router_discard(void);

/* Forgets every added route (at stop, when no request runs). */
void router_clear_added(void);

/*
 * Finds the route for METHOD (HEAD counts as GET for the API's routes) and
 * the raw PATH. On a match returns it (borrowed from the table) and stores
 * the segments matched by "{}", percent-decoded, into PARAMS (owned: the
 * caller frees each with free()) and their decoded lengths into LENS (a
 * decoded NUL makes strlen() shorter than the length).
 * Otherwise returns NULL with *STATUS 404 (also when out of memory), or 405
 * and ALLOW set to the comma-separated methods the path accepts.
 */
const struct route *router_match(const char *method, const char *path,
				 char *params[HTTP_MAX_PARAMS], size_t lens[HTTP_MAX_PARAMS],
				 unsigned *status, char *allow, size_t allowlen);

/* Percent-decodes S (LEN bytes) into a NUL-terminated string, owned
 * (free()); *OUTLEN is the decoded length. An escape that is not two hex
 * digits is kept as it is. NULL when out of memory. */
char *router_decode(const char *s, size_t len, size_t *outlen);

#endif
