/* The API's own routes: method, path pattern, handler, authentication,
 * and the action of the handlers that serve several.
 * router.c matches them after the gateway's. */
#include "routes.h"

#include "engine.h"
#include "handlers.h"
#include "router.h"

static const struct route routes_api[] = {
	{ "GET", "/healthz", h_healthz, ROUTE_PUBLIC, NULL, 0, 0 },
	{ "GET", "/readyz", h_readyz, ROUTE_PUBLIC, NULL, 0, 0 },
	{ "GET", "/metrics", h_metrics, ROUTE_PUBLIC, NULL, 0, 0 },
	{ "POST", "/v1/tokens", h_token_issue, ROUTE_API_KEY, NULL, 0, 0 },
	{ "GET", "/v1/tokens/{}", h_token_get, ROUTE_API_KEY, NULL, 0, 0 },
	{ "DELETE", "/v1/tokens/{}", h_token_revoke, ROUTE_API_KEY, NULL, 0, 0 },
	{ "POST", "/v1/tokens/{}/claim", h_token_claim, ROUTE_API_KEY, NULL, 0, 0 },
	{ "POST", "/v1/tokens/{}/complete", h_token_act, ROUTE_API_KEY, NULL, 0, ENGINE_COMPLETE },
	{ "POST", "/v1/tokens/{}/release", h_token_act, ROUTE_API_KEY, NULL, 0, ENGINE_RELEASE },
	{ "POST", "/v1/tokens/{}/extend", h_token_act, ROUTE_API_KEY, NULL, 0, ENGINE_EXTEND },
	{ "POST", "/v1/tokens/{}/checkpoint", h_token_act, ROUTE_API_KEY, NULL, 0,
	  ENGINE_CHECKPOINT },
	{ "GET", "/v1/records", h_record_list, ROUTE_API_KEY, NULL, 0, 0 },
	{ "GET", "/v1/records/{}", h_record_get, ROUTE_API_KEY, NULL, 0, 0 },
	{ "GET", "/v1/records/{}/events", h_record_events, ROUTE_API_KEY, NULL, 0, 0 },
	{ "GET", "/v1/versions/{}", h_version_get, ROUTE_API_KEY, NULL, 0, 0 },
	{ "POST", "/v1/versions/{}", h_version_bump, ROUTE_API_KEY, NULL, 0, 0 },
	{ "GET", "/v1/operations", h_operation_list, ROUTE_API_KEY, NULL, 0, 0 },
	{ "GET", "/v1/operations/{}", h_operation_get, ROUTE_API_KEY, NULL, 0, 0 },
	{ "PUT", "/v1/operations/{}", h_operation_put, ROUTE_API_KEY, NULL, 0, 0 },
	{ "POST", "/v1/operations/{}/claims", h_key_claims, ROUTE_API_KEY, NULL, 0, 0 },
	{ "POST", "/v1/operations/{}/completions", h_key_completions, ROUTE_API_KEY, NULL, 0, 0 },
	{ "GET", "/v1/operations/{}/keys/{}", h_key_get, ROUTE_API_KEY, NULL, 0, 0 },
	{ "POST", "/v1/operations/{}/keys/{}/claim", h_key_claim, ROUTE_API_KEY, NULL, 0, 0 },
	{ "POST", "/v1/operations/{}/keys/{}/complete", h_key_act, ROUTE_API_KEY, NULL, 0,
	  ENGINE_COMPLETE },
	{ "POST", "/v1/operations/{}/keys/{}/release", h_key_act, ROUTE_API_KEY, NULL, 0,
	  ENGINE_RELEASE },
	{ "POST", "/v1/operations/{}/keys/{}/extend", h_key_act, ROUTE_API_KEY, NULL, 0,
	  ENGINE_EXTEND },
	{ "POST", "/v1/operations/{}/keys/{}/checkpoint", h_key_act, ROUTE_API_KEY, NULL, 0,
	  ENGINE_CHECKPOINT },
};

void routes_init(void)
{
	router_set_table(routes_api, IDEMD_ARRAY_LEN(routes_api));
}
