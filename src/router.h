/* Router: maps method and path to a handler; knows which routes need an
 * API key and which take a JSON body. */
#ifndef IDEMD_ROUTER_H
#define IDEMD_ROUTER_H

#include <stddef.h>

#include "http.h"

enum route_auth { ROUTE_PUBLIC, ROUTE_API_KEY };

struct route {
	const char *method;
	const char *pattern;     /* "{}" matches one non-empty segment; logged as the route */
	void (*handler)(struct request *req);
	enum route_auth auth;
};

/*
 * Finds the route for METHOD and PATH. On a match returns it and stores the
 * segments matched by "{}" into PARAMS (new strings, freed by the caller).
 * Otherwise returns NULL with *STATUS 404, or 405 and ALLOW set to the
 * comma-separated methods the path accepts.
 */
const struct route *router_match(const char *method, const char *path,
				 char *params[HTTP_MAX_PARAMS], unsigned *status,
				 char *allow, size_t allowlen);

#endif
