/*
 * Gateway, route needs: what this instance's routes need of their
 * operations' leases (timeout_ms plus forward_margin_ms), written to the
 * database under this instance's name at start and each reload, renewed
 * by the janitor every second, deleted at stop, so that no instance can
 * shorten a lease that a live instance's route needs (idemd.op_put,
 * migrations/0020).
 */
#include "gateway.h"
#include "gateway_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "config.h"
#include "log.h"

static struct {
	pthread_mutex_t lock; /* publish (main thread) against renew (janitor) */
	char instance[128];   /* "host/pid", set at the first publish */
	int published;
	int short_logged; /* leases found too short, last said */
} needs = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* This instance's name: its host and process id. */
static void gateway_needs_name(void)
{
	char host[64];

	if (needs.instance[0] != '\0')
		return;
	if (gethostname(host, sizeof(host)) < 0)
		snprintf(host, sizeof(host), "localhost");
	host[sizeof(host) - 1] = '\0';
	snprintf(needs.instance, sizeof(needs.instance), "%s/%ld", host, (long)getpid());
}

int gateway_needs_publish(const struct gateway_route *routes, size_t n, long margin_ms)
{
	struct route_need *rn = calloc(n > 0 ? n : 1, sizeof(*rn));
	int rc = -1;

	if (rn == NULL)
		return -1;
	for (size_t i = 0; i < n; i++) {
		rn[i].rn_tenant_id = routes[i].gr_tenant_id;
		rn[i].rn_operation = routes[i].gr_cfg->operation;
		rn[i].rn_route = routes[i].gr_by + 6; /* "route:" */
		rn[i].rn_need_ms = routes[i].gr_cfg->timeout_ms + margin_ms;
	}
	pthread_mutex_lock(&needs.lock);
	gateway_needs_name();
	rc = store_route_needs_publish(needs.instance, rn, n);
	if (rc == 0)
		needs.published = 1;
	pthread_mutex_unlock(&needs.lock);
	if (rc < 0)
		log_error("gateway: the routes' lease needs could not be written (database "
			  "unavailable)");
	free(rn);
	return rc;
}

void gateway_needs_renew(void)
{
	int short_leases = 0;

	pthread_mutex_lock(&needs.lock);
	if (needs.published && store_route_needs_renew(needs.instance, &short_leases) == 0 &&
	    short_leases != needs.short_logged) {
		needs.short_logged = short_leases;
		if (short_leases > 0)
			log_error(
				"gateway: %d route(s) of this instance (%s) need a longer lease than "
				"their operation has now; their forwards are cut to the lease: "
				"raise lease_seconds (PUT /v1/operations/NAME) or reload",
				short_leases, needs.instance);
	}
	pthread_mutex_unlock(&needs.lock);
}

void gateway_needs_drop(void)
{
	pthread_mutex_lock(&needs.lock);
	if (needs.published && store_route_needs_drop(needs.instance) < 0)
		log_warn("gateway: the routes' lease needs could not be deleted; they count for "
			 "30 s more");
	needs.published = 0;
	pthread_mutex_unlock(&needs.lock);
}
