/* HTTP: the body budget. Bodies held in memory at once are bounded by
 * max_inflight_body_bytes, and shared: one client address may hold at most
 * max_inflight_body_bytes_per_client of it (default a quarter) and one
 * tenant at most max_inflight_body_bytes_per_tenant (default a half), so that no single caller, authenticated or not, can
 * make every other caller's writes wait for 503s. Client addresses and
 * tenants are counted in hashed slots (a collision shares a slot's share,
 * never more). A reservation is given back when its request ends. */
#include "http_int.h"

#include <netinet/in.h>
#include <sodium.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>

#include "config.h"

static const struct config *_Atomic budget_cfg; /* swapped on a reload */
static atomic_size_t budget_all;
static atomic_size_t budget_client[HTTP_CLIENT_SLOTS];
static atomic_size_t budget_tenant[HTTP_CLIENT_SLOTS];

void http_budget_start(const struct config *cfg)
{
	budget_cfg = cfg;
}

size_t http_client_slot(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	uint64_t h = 0;

	if (ci == NULL || ci->client_addr == NULL)
		return 0;
	const struct sockaddr *sa = ci->client_addr;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
		crypto_shorthash((unsigned char *)&h, (const unsigned char *)&in->sin_addr,
				 sizeof(in->sin_addr), (const unsigned char *)"idemd-body-slot!");
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
		crypto_shorthash((unsigned char *)&h, (const unsigned char *)&in6->sin6_addr,
				 sizeof(in6->sin6_addr), (const unsigned char *)"idemd-body-slot!");
	}
	return (size_t)(h % HTTP_CLIENT_SLOTS);
}

/* Adds N to *COUNTER unless that passes LIMIT: 1, or 0. */
static int http_budget_add(atomic_size_t *counter, size_t n, size_t limit)
{
	size_t cur = atomic_load(counter);

	do {
		if (n > limit || cur > limit - n)
			return 0;
	} while (!atomic_compare_exchange_weak(counter, &cur, cur + n));
	return 1;
}

int http_budget_take(struct request *req, size_t n)
{
	size_t all = budget_cfg->max_inflight_body_bytes;
	size_t per_client = budget_cfg->max_inflight_body_bytes_per_client;

	size_t per_tenant = budget_cfg->max_inflight_body_bytes_per_tenant;
	if (per_client == 0 || per_client > all)
		per_client = per_client == 0 ? all / 4 : all;
	if (per_tenant == 0 || per_tenant > all)
		per_tenant = per_tenant == 0 ? all / 2 : all;
	if (req->req_reserved == 0) {
		req->req_budget_client = http_client_slot(req->req_conn);
		/* 0: no tenant known at the header phase */
		req->req_budget_tenant =
			req->req_tenant_id != 0 ? 1 + req->req_tenant_id % HTTP_CLIENT_SLOTS : 0;
	}
	atomic_size_t *client = &budget_client[req->req_budget_client];
	atomic_size_t *tenant =
		req->req_budget_tenant != 0 ? &budget_tenant[req->req_budget_tenant - 1] : NULL;
	if (!http_budget_add(client, n, per_client))
		return 0;
	if (tenant != NULL && !http_budget_add(tenant, n, per_tenant)) {
		atomic_fetch_sub(client, n);
		return 0;
	}
	if (!http_budget_add(&budget_all, n, all)) {
		atomic_fetch_sub(client, n);
		if (tenant != NULL)
			atomic_fetch_sub(tenant, n);
		return 0;
	}
	req->req_reserved += n;
	return 1;
}

void http_budget_give(struct request *req)
{
	if (req->req_reserved == 0)
		return;
	atomic_fetch_sub(&budget_all, req->req_reserved);
	atomic_fetch_sub(&budget_client[req->req_budget_client], req->req_reserved);
	if (req->req_budget_tenant != 0)
		atomic_fetch_sub(&budget_tenant[req->req_budget_tenant - 1], req->req_reserved);
	req->req_reserved = 0;
}
