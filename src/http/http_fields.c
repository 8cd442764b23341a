/* What a request's connection holds, read through libmicrohttpd: its
 * headers, its query arguments and its client's address (request.h).
 * Unit tests that build a request without a connection stand these in. */
#include "http_int.h"

#include <arpa/inet.h>
#include <stdio.h>

const char *http_header(const struct request *req, const char *name)
{
	return MHD_lookup_connection_value(req->req_conn, MHD_HEADER_KIND, name);
}

const char *http_query(const struct request *req, const char *name)
{
	return MHD_lookup_connection_value(req->req_conn, MHD_GET_ARGUMENT_KIND, name);
}

struct http_each {
	http_field_fn fn;
	void *arg;
	int headers; /* values never NULL */
};

static enum MHD_Result http_each_cb(void *cls, enum MHD_ValueKind kind, const char *key,
				    const char *value)
{
	const struct http_each *e = cls;

	(void)kind;
	if (e->headers && value == NULL)
		value = "";
	return e->fn(e->arg, key, value) == 0 ? MHD_YES : MHD_NO;
}

void http_each_header(const struct request *req, http_field_fn fn, void *arg)
{
	struct http_each e = { fn, arg, 1 };

	MHD_get_connection_values(req->req_conn, MHD_HEADER_KIND, http_each_cb, &e);
}

void http_each_query(const struct request *req, http_field_fn fn, void *arg)
{
	struct http_each e = { fn, arg, 0 };

	MHD_get_connection_values(req->req_conn, MHD_GET_ARGUMENT_KIND, http_each_cb, &e);
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
