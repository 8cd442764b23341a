/* What a request's connection holds, read through libmicrohttpd: its
 * headers, its query arguments and its client's address (request.h).
 * Unit tests that build a request without a connection stand these in. */
#include "http_int.h"

#include "headers.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>

const char *http_header(const struct request *req, const char *name)
{
	return MHD_lookup_connection_value(req->req_conn, MHD_HEADER_KIND, name);
}

const char *http_query(const struct request *req, const char *name)
{
	return MHD_lookup_connection_value(req->req_conn, MHD_GET_ARGUMENT_KIND, name);
}

struct http_gather {
	struct headers_field *hg_f;
	size_t hg_n, hg_cap;
	int hg_headers; /* values never NULL */
};

static enum MHD_Result http_gather_cb(void *cls, enum MHD_ValueKind kind, const char *key,
				      const char *value)
{
	struct http_gather *g = cls;

	(void)kind;
	if (g->hg_n == g->hg_cap)
		return MHD_NO;
	g->hg_f[g->hg_n].hf_name = key;
	g->hg_f[g->hg_n].hf_value = value == NULL && g->hg_headers ? "" : value;
	g->hg_n++;
	return MHD_YES;
}

int http_fields(const struct request *req, int query, struct headers_field **out, size_t *n)
{
	enum MHD_ValueKind kind = query ? MHD_GET_ARGUMENT_KIND : MHD_HEADER_KIND;
	int count = MHD_get_connection_values(req->req_conn, kind, NULL, NULL);

	*out = NULL;
	*n = 0;
	if (count <= 0)
		return 0;
	struct http_gather g = { malloc((size_t)count * sizeof(*g.hg_f)), 0, (size_t)count,
				 !query };
	if (g.hg_f == NULL)
		return -1;
	MHD_get_connection_values(req->req_conn, kind, http_gather_cb, &g);
	*out = g.hg_f;
	*n = g.hg_n;
	return 0;
}

void http_client_ip(const struct request *req, char *out, size_t len)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(req->req_conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);

	snprintf(out, len, "unknown");
	if (ci == NULL || ci->client_addr == NULL)
		return;
	const struct sockaddr *sa = ci->client_addr;
	if (sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, out,
			  (socklen_t)len);
	else if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr,
			  out, (socklen_t)len);
}
