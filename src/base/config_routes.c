/* The "routes" of the config: one table row per key of a gateway route
 * (route_keys), the setter of the array (method + path unique), and
 * freeing a route. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* strdup, strndup */
#endif

#include "config_int.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUTE_FIELD(f) offsetof(struct config_route, f)

static const struct cfg_key route_keys[] = {
	{ .name = "method",
	  .set = config_set_string,
	  .off = ROUTE_FIELD(method),
	  .flags = CFG_REQUIRED,
	  .check = config_check_method },
	{ .name = "path",
	  .set = config_set_string,
	  .off = ROUTE_FIELD(path),
	  .flags = CFG_REQUIRED,
	  .check = config_check_path },
	{ .name = "tenant",
	  .set = config_set_string,
	  .off = ROUTE_FIELD(tenant),
	  .flags = CFG_REQUIRED | CFG_NONEMPTY },
	{ .name = "operation",
	  .set = config_set_string,
	  .off = ROUTE_FIELD(operation),
	  .flags = CFG_REQUIRED,
	  .check = config_check_operation },
	{ .name = "upstream",
	  .set = config_set_string,
	  .off = ROUTE_FIELD(upstream),
	  .flags = CFG_REQUIRED,
	  .check = config_check_upstream },
	{ .name = "store_headers",
	  .set = config_set_strlist,
	  .off = ROUTE_FIELD(store_headers),
	  .count_off = ROUTE_FIELD(n_store_headers),
	  .def = "[]",
	  .max = 64,
	  .check = config_check_header_name },
	{ .name = "connect_timeout_ms",
	  .set = config_set_long,
	  .off = ROUTE_FIELD(connect_timeout_ms),
	  .def = "1000",
	  .min = 1,
	  .max = 60000 },
	{ .name = "timeout_ms",
	  .set = config_set_long,
	  .off = ROUTE_FIELD(timeout_ms),
	  .def = "10000",
	  .min = 1,
	  .max = 600000 },
	{ .name = "client_if_match",
	  .set = config_set_bool,
	  .off = ROUTE_FIELD(client_if_match),
	  .def = "false" },
	{ .name = "key",
	  .set = config_set_string,
	  .off = ROUTE_FIELD(key),
	  .def = "\"token\"",
	  .check = config_check_route_key },
	{ .name = "scope_headers",
	  .set = config_set_strlist,
	  .off = ROUTE_FIELD(scope_headers),
	  .count_off = ROUTE_FIELD(n_scope_headers),
	  .def = "[\"authorization\", \"cookie\"]",
	  .max = 16,
	  .check = config_check_scope_header },
	{ .name = "fingerprint",
	  .set = config_set_string,
	  .off = ROUTE_FIELD(fingerprint),
	  .def = "\"bytes\"",
	  .check = config_check_fingerprint },
	{ .name = "release_on",
	  .set = config_set_release_on,
	  .off = ROUTE_FIELD(release_on),
	  .def = "[\"5xx\"]",
	  .max = 600 },
	{ .name = "trust_forwarded",
	  .set = config_set_bool,
	  .off = ROUTE_FIELD(trust_forwarded),
	  .def = "false" },
	{ .name = "error_retention_seconds",
	  .set = config_set_int,
	  .off = ROUTE_FIELD(error_retention_seconds),
	  .def = "-1",
	  .min = -1,
	  .max = 315360000 },
};

/* An array of route objects (route_keys), method + path unique. */
int config_set_routes(const struct cfg_key *k, void *base, json_t *v, const char *name, char *err,
		      size_t errlen)
{
	struct config *cfg = base;
	struct config_route *routes = NULL;
	char prefix[64];
	json_t *e;
	size_t n, i, j;
	int ret = -1;

	if (!json_is_array(v))
		return config_fail(err, errlen, "\"%s\" must be an array of objects", name);
	n = json_array_size(v);
	if (n > (size_t)k->max)
		return config_fail(err, errlen, "\"%s\" must have at most %lld entries", name,
				   k->max);
	if (n > 0 && (routes = calloc(n, sizeof(*routes))) == NULL)
		return config_fail(err, errlen, "out of memory");
	json_array_foreach(v, i, e)
	{
		if (!json_is_object(e)) {
			config_fail(err, errlen, "\"%s[%zu]\" must be an object", name, i);
			goto done;
		}
		snprintf(prefix, sizeof(prefix), "%s[%zu].", name, i);
		if (config_load_object(&routes[i], route_keys, IDEMD_ARRAY_LEN(route_keys), e,
				       prefix, err, errlen) == -1)
			goto done;
		for (j = 0; j < i; j++) {
			if (strcmp(routes[i].method, routes[j].method) == 0 &&
			    strcmp(routes[i].path, routes[j].path) == 0) {
				config_fail(err, errlen,
					    "\"%s[%zu]\" duplicates \"%s[%zu]\" (%s %s)", name, i,
					    name, j, routes[i].method, routes[i].path);
				goto done;
			}
		}
	}
	for (i = 0; i < cfg->n_routes; i++)
		config_route_free(&cfg->routes[i]);
	free(cfg->routes);
	cfg->routes = routes;
	cfg->n_routes = n;
	routes = NULL;
	ret = 0;
done:
	if (routes != NULL) {
		for (i = 0; i < n; i++)
			config_route_free(&routes[i]);
		free(routes);
	}
	return ret;
}

void config_route_free(struct config_route *r)
{
	free(r->method);
	free(r->path);
	free(r->tenant);
	free(r->operation);
	free(r->upstream);
	config_strlist_free(r->store_headers, r->n_store_headers);
	config_strlist_free(r->scope_headers, r->n_scope_headers);
	free(r->key);
	free(r->fingerprint);
	memset(r, 0, sizeof(*r));
}
