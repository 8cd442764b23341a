/*
 * Gateway: the routes of config "routes". A request on a route carries a
 * token in Idempotency-Key; idemd claims it (the claim table of the direct
 * API), forwards the request to the route's upstream exactly once, stores
 * the upstream's final answer (2xx-4xx) and replays it to duplicates.
 *
 * Threads: the token checks and the claim run on the HTTP thread that
 * received the request; the connection is then suspended and the forward
 * queued for one forwarder thread (a libcurl multi handle: any number of
 * transfers at once, connections to the upstreams kept alive and reused).
 * When a transfer ends, one of a few finisher threads stores or releases
 * the claim, builds the reply and resumes the connection. A slow upstream
 * therefore holds only its own connections, never an HTTP thread.
 *
 * Ownership: arguments are borrowed for the call unless noted. The route
 * tables are owned by this module from gateway_start() to gateway_stop();
 * their routes are added to the router (router_add), which borrows them for
 * that long. A config passed in is borrowed until a grace period begun after
 * the next gateway_reload() is done (http_grace_begin), or until
 * gateway_stop().
 */
#ifndef IDEMD_GATEWAY_H
#define IDEMD_GATEWAY_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

struct config;
struct route;

/*
 * Resolves each route's tenant name (the database must be reachable) and
 * starts the forwarder and finisher threads. Returns -1 after logging when a
 * route names an unknown tenant, when its timeout_ms (and a margin) does not
 * fit in its operation's lease, or when a thread cannot start. An operation
 * that does not exist yet is only warned about: operations are created
 * through the running API, and a submit for it is refused until then.
 * Does nothing when the config has no routes.
 */
int gateway_start(const struct config *cfg) IDEMD_WUR;

/*
 * Lets every queued and running forward finish (each is bounded by its
 * route's timeout), stores their outcomes, resumes their connections and
 * stops the threads; the route table stays. Submits arriving afterwards are
 * released and answered 503. main.c calls it once HTTP stopped accepting
 * and before the daemon stops (no connection may stay suspended). Safe to
 * call more than once.
 */
void gateway_drain(void);

/* SIGHUP: CFG's routes replace the running ones in one swap (requests
 * already routed finish on the old ones, which are kept until
 * gateway_stop); CFG is borrowed as said above. 0, or -1 after logging:
 * the old routes keep serving. */
int gateway_reload(const struct config *cfg) IDEMD_WUR;

/* Renews this instance's route needs in the database (the janitor, every
 * second): PUT /v1/operations on any instance refuses a lease that a
 * live instance's route cannot fit (gateway_needs.c). */
void gateway_needs_renew(void);

/* "METHOD path" of a running route of TENANT_ID's OPERATION whose keys
 * come from requests (a derived key: no subject), or NULL: an operation
 * guarding a version counter cannot serve one (PUT /v1/operations
 * refuses, as start and reload refuse such a route). Callable from any
 * thread; the text is borrowed until gateway_stop(). */
const char *gateway_derived_route(uint32_t tenant_id, const char *operation);

/* gateway_drain(), then frees the route table and libcurl's state: call it
 * once no HTTP thread runs any more. Safe when not started and twice. */
void gateway_stop(void);

#endif
