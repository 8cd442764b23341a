/* The "routes" of the config: one table row per key of a gateway route
 * (route_keys), how one route is loaded (method + path unique) and how
 * they are freed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* strdup, strndup */
#endif

#include "config_int.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY(...) CFG_KEY(struct config_route, __VA_ARGS__)
#define LIST(...) CFG_LIST(struct config_route, __VA_ARGS__)

/* name (= field), type, default, min, max, flags, check */
static const struct cfg_key route_keys[] = {
	KEY(method, STRING, NULL, 0, 0, CFG_REQUIRED, config_check_method),
	KEY(path, STRING, NULL, 0, 0, CFG_REQUIRED, config_check_path),
	KEY(tenant, STRING, NULL, 0, 0, CFG_REQUIRED | CFG_NONEMPTY, NULL),
	KEY(operation, STRING, NULL, 0, 0, CFG_REQUIRED, config_check_operation),
	KEY(upstream, STRING, NULL, 0, 0, CFG_REQUIRED, config_check_upstream),
	LIST(store_headers, STRLIST, "[]", 64, 0, config_check_header_name),
	KEY(connect_timeout_ms, LONG, "1000", 1, 60000, 0, NULL),
	KEY(timeout_ms, LONG, "10000", 1, 600000, 0, NULL),
	KEY(client_if_match, BOOL, "false", 0, 0, 0, NULL),
	KEY(key, STRING, "\"token\"", 0, 0, 0, config_check_route_key),
	LIST(scope_headers, STRLIST, "[\"authorization\", \"cookie\"]", 16, 0,
	     config_check_scope_header),
	KEY(fingerprint, STRING, "\"auto\"", 0, 0, 0, config_check_fingerprint),
	KEY(release_on, RELEASE_ON, "[\"5xx\"]", 0, 600, 0, NULL),
	KEY(trust_forwarded, BOOL, "false", 0, 0, 0, NULL),
	KEY(error_retention_seconds, INT, "-1", -1, 315360000, 0, NULL),
};

static void routes_free(void *arr, size_t n)
{
	struct config_route *routes = arr;

	for (size_t i = 0; routes != NULL && i < n; i++)
		config_free_object(&routes[i], route_keys, IDEMD_ARRAY_LEN(route_keys));
	free(routes);
}

/* Route I: an object of route_keys, method + path unlike those before it. */
static int load_route(const struct cfg_key *k, void *arr, size_t i, json_t *e, const char *name,
		      char *err, size_t errlen)
{
	struct config_route *routes = arr;
	char prefix[64];

	(void)k;
	if (!json_is_object(e))
		return config_fail(err, errlen, "\"%s[%zu]\" must be an object", name, i);
	snprintf(prefix, sizeof(prefix), "%s[%zu].", name, i);
	if (config_load_object(&routes[i], route_keys, IDEMD_ARRAY_LEN(route_keys), e, prefix, err,
			       errlen) == -1)
		return -1;
	for (size_t j = 0; j < i; j++)
		if (strcmp(routes[i].method, routes[j].method) == 0 &&
		    strcmp(routes[i].path, routes[j].path) == 0)
			return config_fail(err, errlen,
					   "\"%s[%zu]\" duplicates \"%s[%zu]\" (%s %s)", name, i,
					   name, j, routes[i].method, routes[i].path);
	return 0;
}

const struct cfg_list config_route_list = { "objects", sizeof(struct config_route), load_route,
					    routes_free };
