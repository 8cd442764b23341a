/* HTTP: the body budget. Bodies held in memory at once are bounded by
 * max_inflight_body_bytes, and shared: one client may hold at most
 * max_inflight_body_bytes_per_client of it (default a quarter) and one
 * tenant at most max_inflight_body_bytes_per_tenant (default a half), so
 * that no single caller, authenticated or not, can make every other
 * caller's writes wait for 503s. A client is an IPv4 address (an
 * IPv4-mapped IPv6 address counts as its IPv4 address) or an IPv6 prefix of
 * ipv6_client_prefix bits (default 64: one host's usual allocation, so a
 * host cannot become 2^64 clients). Clients and tenants are counted in
 * slots of a hash keyed at start with random bytes (a collision shares a
 * slot's share, never more; nobody can choose addresses that collide). The
 * same slots count auth.c's lookups of unknown keys. A reservation is given
 * back when its request ends. The listing share counts, per tenant slot,
 * the listings and event pages running (max_listing_per_tenant). */
#include "http_int.h"

#include <netinet/in.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>

#include "config.h"

static const struct config *_Atomic budget_cfg; /* swapped on a reload */
static atomic_size_t budget_all;
static atomic_size_t budget_client[HTTP_CLIENT_SLOTS];
static atomic_size_t budget_tenant[HTTP_CLIENT_SLOTS];
static atomic_int budget_listing[HTTP_CLIENT_SLOTS]; /* listings running, per tenant slot */

static unsigned char budget_slot_key[crypto_shorthash_KEYBYTES];
static pthread_once_t budget_slot_once = PTHREAD_ONCE_INIT;

static void budget_slot_key_draw(void)
{
	randombytes_buf(budget_slot_key, sizeof(budget_slot_key));
}

void http_budget_start(const struct config *cfg)
{
	pthread_once(&budget_slot_once, budget_slot_key_draw);
	budget_cfg = cfg;
}

size_t http_client_slot_of(const struct sockaddr *sa, int v6_prefix)
{
	unsigned char who[1 + 16] = { 0 }; /* 4 or 6, then the address or prefix */
	size_t n;
	uint64_t h;

	if (sa == NULL)
		return 0;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
		who[0] = 4;
		memcpy(who + 1, &in->sin_addr, 4);
		n = 1 + 4;
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
		const unsigned char *a = in6->sin6_addr.s6_addr;
		if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
			who[0] = 4;
			memcpy(who + 1, a + 12, 4);
			n = 1 + 4;
		} else {
			int bits = v6_prefix < 1 ? 1 : v6_prefix > 128 ? 128 : v6_prefix;
			who[0] = 6;
			memcpy(who + 1, a, (size_t)bits / 8);
			if (bits % 8 != 0)
				who[1 + bits / 8] =
					(unsigned char)(a[bits / 8] & (0xff00u >> (bits % 8)));
			n = 1 + 16;
		}
	} else {
		return 0;
	}
	pthread_once(&budget_slot_once, budget_slot_key_draw);
	crypto_shorthash((unsigned char *)&h, who, n, budget_slot_key);
	return (size_t)(h % HTTP_CLIENT_SLOTS);
}

size_t http_client_slot(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);

	if (ci == NULL)
		return 0;
	return http_client_slot_of(ci->client_addr, budget_cfg->ipv6_client_prefix);
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

void http_budget_return(struct request *req)
{
	atomic_fetch_sub(&budget_all, req->req_reserved);
	atomic_fetch_sub(&budget_client[req->req_budget_client], req->req_reserved);
	if (req->req_budget_tenant != 0)
		atomic_fetch_sub(&budget_tenant[req->req_budget_tenant - 1], req->req_reserved);
	req->req_reserved = 0;
}

int http_listing_take(struct request *req)
{
	int cap = budget_cfg->max_listing_per_tenant;
	size_t slot = req->req_tenant_id % HTTP_CLIENT_SLOTS;

#ifdef IDEMD_MUTANT_LISTING_UNSHARED
	cap = 0;
#endif
	if (cap <= 0 || req->req_tenant_id == 0 || req->req_listing != 0)
		return 0;
	if (atomic_fetch_add(&budget_listing[slot], 1) >= cap) {
		atomic_fetch_sub(&budget_listing[slot], 1);
		request_fail(req, 429, "rate_limited",
			     "this tenant already runs %d listings at once on this instance; retry",
			     cap);
		http_set_header(req, "Retry-After", "1");
		return -1;
	}
	req->req_listing = 1 + slot;
	return 0;
}

void http_listing_give(struct request *req)
{
	if (req->req_listing == 0)
		return;
	atomic_fetch_sub(&budget_listing[req->req_listing - 1], 1);
	req->req_listing = 0;
}
