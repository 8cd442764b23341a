/*
 * Config checks: the per-string rules of the key tables (methods, paths,
 * operation names, upstream URLs, header names, route keys, fingerprint
 * modes, CORS origins) and the listen addresses (their forms).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* strdup, strndup, explicit_bzero */
#endif

#include "config_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "headers.h"
#include "log.h"

#define LISTEN_FORMS "must be \"host:port\", \"[ipv6]:port\" or \":port\""
#define MAX_PATH_LEN 1024
#define MAX_URL_LEN 2048

/* True when every byte is visible ASCII (no space, control or non-ASCII). */
static bool is_visible(const char *s)
{
	for (; *s != '\0'; s++)
		if ((unsigned char)*s <= 0x20 || (unsigned char)*s >= 0x7f)
			return false;
	return true;
}

/* Parses a whole string as a port 1..65535, decimal digits only. */
static int parse_port(const char *s, uint16_t *port)
{
	unsigned long n = 0;
	size_t i;

	for (i = 0; s[i] != '\0'; i++) {
		if (s[i] < '0' || s[i] > '9' || i >= 5)
			return -1;
		n = n * 10 + (unsigned long)(s[i] - '0');
	}
	if (i == 0 || n < 1 || n > 65535)
		return -1;
	*port = (uint16_t)n;
	return 0;
}

/* An IPv4 literal (checked with inet_pton) or a DNS name: [A-Za-z0-9.-]. */
static bool valid_hostname(const char *h, size_t n)
{
	char buf[256];
	struct in_addr a4;
	bool numeric = true;
	size_t i;

	if (n == 0 || n > 253)
		return false;
	for (i = 0; i < n; i++) {
		char c = h[i];

		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-')
			numeric = false;
		else if (!((c >= '0' && c <= '9') || c == '.'))
			return false;
	}
	if (!numeric)
		return h[0] != '-' && h[0] != '.';
	memcpy(buf, h, n);
	buf[n] = '\0';
	return inet_pton(AF_INET, buf, &a4) == 1;
}

/*
 * Splits a listen address. Accepted: "host:port" (IPv4 literal or host
 * name), "[ipv6]:port" (host returned without brackets) and ":port", which
 * means every IPv4 interface, "0.0.0.0", as in Go; "[::]:port" is the IPv6
 * equivalent. Returns NULL on success or the reason it is refused.
 */
static const char *parse_listen(const char *s, const char **host, size_t *hostlen, uint16_t *port)
{
	const char *colon;

	if (s[0] == '[') {
		const char *close = strchr(s, ']');
		char buf[INET6_ADDRSTRLEN];
		struct in6_addr a6;
		size_t n;

		if (close == NULL || close[1] != ':')
			return LISTEN_FORMS;
		n = (size_t)(close - s - 1);
		if (n == 0 || n >= sizeof(buf))
			return "has an invalid IPv6 address";
		memcpy(buf, s + 1, n);
		buf[n] = '\0';
		if (inet_pton(AF_INET6, buf, &a6) != 1)
			return "has an invalid IPv6 address";
		*host = s + 1;
		*hostlen = n;
		colon = close + 1;
	} else {
		colon = strrchr(s, ':');
		if (colon == NULL)
			return LISTEN_FORMS;
		*hostlen = (size_t)(colon - s);
		*host = s;
		if (memchr(s, ':', *hostlen) != NULL)
			return "must put an IPv6 address in brackets, e.g. \"[::1]:8080\"";
		if (*hostlen == 0) {
			*host = "0.0.0.0";
			*hostlen = strlen(*host);
		} else if (!valid_hostname(s, *hostlen)) {
			return "has an invalid host";
		}
	}
	if (parse_port(colon + 1, port) == -1)
		return "port must be a number between 1 and 65535";
	return NULL;
}

int config_store_address(char **host, uint16_t *port, const char *s, const char *label, char *err,
			 size_t errlen)
{
	const char *h, *why;
	size_t hostlen;
	uint16_t p;
	char *copy;

	if ((why = parse_listen(s, &h, &hostlen, &p)) != NULL)
		return config_fail(err, errlen, "%s %s", label, why);
	if ((copy = strndup(h, hostlen)) == NULL)
		return config_fail(err, errlen, "out of memory");
	free(*host);
	*host = copy;
	*port = p;
	return 0;
}

const char *config_check_method(char *s)
{
	static const char *const methods[] = { "GET", "POST", "PUT", "PATCH", "DELETE" };
	size_t i;

	for (i = 0; i < IDEMD_ARRAY_LEN(methods); i++)
		if (strcmp(s, methods[i]) == 0)
			return NULL;
	return "must be one of GET, POST, PUT, PATCH, DELETE";
}

/* An exact path outside the API's own namespace. */
const char *config_check_path(char *s)
{
	static const char *const reserved[] = { "/healthz", "/readyz", "/metrics" };
	size_t i;

	if (s[0] != '/')
		return "must start with '/'";
	if (strlen(s) > MAX_PATH_LEN)
		return "must be at most 1024 characters";
	if (!is_visible(s))
		return "must not contain whitespace, control or non-ASCII characters";
	if (strpbrk(s, "?#") != NULL)
		return "must be an exact path without '?' or '#'";
	if (strcmp(s, "/v1") == 0 || strncmp(s, "/v1/", 4) == 0)
		return "must not be under /v1/ (reserved for the API)";
	for (i = 0; i < IDEMD_ARRAY_LEN(reserved); i++)
		if (strcmp(s, reserved[i]) == 0)
			return "is reserved (/healthz, /readyz, /metrics)";
	return NULL;
}

const char *config_check_operation(char *s)
{
	size_t i;

	for (i = 0; s[i] != '\0'; i++) {
		char c = s[i];

		if (i >= 64 || !((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
				 c == '_' || c == '-'))
			return "must match [a-z0-9._-]{1,64}";
	}
	return i == 0 ? "must match [a-z0-9._-]{1,64}" : NULL;
}

/* "http://" or "https://", a host, visible ASCII only, no fragment. */
const char *config_check_upstream(char *s)
{
	size_t skip;

	if (strncmp(s, "http://", 7) == 0)
		skip = 7;
	else if (strncmp(s, "https://", 8) == 0)
		skip = 8;
	else
		return "must be an http:// or https:// URL";
	if (strlen(s) > MAX_URL_LEN)
		return "must be at most 2048 characters";
	if (!is_visible(s))
		return "must not contain whitespace, control or non-ASCII characters";
	if (s[skip] == '\0' || strchr("/?#:@", s[skip]) != NULL)
		return "must name a host, e.g. \"http://127.0.0.1:9000\"";
	if (strchr(s, '#') != NULL)
		return "must not have a fragment ('#')";
	return NULL;
}

/* An HTTP field name (RFC 9110 token), lower-cased in place. */
const char *config_check_header_name(char *s)
{
	static const char tchar[] = "!#$%&'*+-.^_`|~";
	const char *start = s;

	for (; *s != '\0'; s++) {
		if (*s >= 'A' && *s <= 'Z')
			*s = (char)(*s - 'A' + 'a');
		else if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
			   strchr(tchar, *s) != NULL))
			return "must be a header name (letters, digits, !#$%&'*+-.^_`|~)";
	}
	if (headers_never_stored(start)) {
		/* config loading is single-threaded: one message buffer will do */
		static char msg[192];
		snprintf(msg, sizeof(msg),
			 "names %.64s, which is never stored (hop-by-hop, "
			 "framing, Access-Control-*, Set-Cookie, or set by idemd itself)",
			 start);
		return msg;
	}
	return NULL;
}

/* A route's key source: token, body, header:NAME (a header name), or
 * json:/POINTER (an RFC 6901 JSON Pointer). */
const char *config_check_route_key(char *s)
{
	if (strcmp(s, "token") == 0 || strcmp(s, "body") == 0)
		return NULL;
	if (strncmp(s, "header:", 7) == 0 && headers_is_token(s + 7, strlen(s + 7)))
		return NULL;
	if (strncmp(s, "json:/", 6) == 0 && is_visible(s + 5))
		return NULL;
	return "must be \"token\", \"body\", \"header:NAME\" or \"json:/POINTER\"";
}

/* A header name, lower-cased in place. */
const char *config_check_scope_header(char *s)
{
	if (!headers_is_token(s, strlen(s)))
		return "must be a header name";
	for (; *s != '\0'; s++)
		if (*s >= 'A' && *s <= 'Z')
			*s = (char)(*s - 'A' + 'a');
	return NULL;
}

const char *config_check_fingerprint(char *s)
{
	if (strcmp(s, "auto") == 0 || strcmp(s, "bytes") == 0 || strcmp(s, "json") == 0 ||
	    strcmp(s, "none") == 0)
		return NULL;
	return "must be \"auto\", \"bytes\", \"json\" or \"none\"";
}

/* Lower-cases the ASCII letters of S in place. */
static void lower_ascii(char *s)
{
	for (; *s != '\0'; s++)
		if (*s >= 'A' && *s <= 'Z')
			*s = (char)(*s - 'A' + 'a');
}

/* Past the bracketed IPv6 literal HOST starts with ("[addr]", as inet_pton
 * reads it): the byte after the ']', or NULL when it is not a valid one. */
static char *ipv6_literal_end(char *host)
{
	struct in6_addr a6;
	char buf[INET6_ADDRSTRLEN];
	char *end;
	size_t n;

	if ((end = strchr(host, ']')) == NULL)
		return NULL;
	n = (size_t)(end - host - 1);
	if (n == 0 || n >= sizeof(buf))
		return NULL;
	memcpy(buf, host + 1, n);
	buf[n] = '\0';
	if (inet_pton(AF_INET6, buf, &a6) != 1)
		return NULL;
	return end + 1;
}

/*
 * An origin as browsers serialise it: "http(s)://host[:port]", nothing after.
 * Lower-cased in place; the scheme's default port is removed so that
 * comparing with the Origin header is an exact string compare. "*" is
 * refused on purpose: each origin allowed to use the gateway is listed.
 */
const char *config_check_origin(char *s)
{
	static const char form[] = "must be an origin \"scheme://host[:port]\" without a path, "
				   "e.g. \"https://app.example.com\"";
	char *host, *end;
	const char *defport;
	uint16_t port;

	if (strcmp(s, "*") == 0)
		return "must name an origin; \"*\" is not allowed, list each origin";
	lower_ascii(s);
	if (strncmp(s, "http://", 7) == 0) {
		host = s + 7;
		defport = "80";
	} else if (strncmp(s, "https://", 8) == 0) {
		host = s + 8;
		defport = "443";
	} else {
		return form;
	}
	if (host[0] == '[') {
		if ((end = ipv6_literal_end(host)) == NULL)
			return form;
	} else {
		end = host + strcspn(host, ":");
		if (!valid_hostname(host, (size_t)(end - host)))
			return form;
	}
	if (*end == ':') {
		if (parse_port(end + 1, &port) == -1)
			return form;
		if (strcmp(end + 1, defport) == 0)
			*end = '\0';
	} else if (*end != '\0') {
		return form;
	}
	return NULL;
}

const char *config_check_log_level(char *s)
{
	enum log_level level;

	if (log_level_parse(s, &level) == 0)
		return NULL;
	return "must be \"debug\", \"info\", \"warn\" or \"error\"";
}

/* "tenant/operation": a tenant name ([A-Za-z0-9._-]{1,64}), a slash, an
 * operation name. */
const char *config_check_metrics_operation(char *s)
{
	char *slash = strchr(s, '/');

	if (slash == NULL || slash == s || slash - s > 64)
		return "must be \"tenant/operation\"";
	for (char *p = s; p < slash; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '.' || *p == '_' || *p == '-'))
			return "must be \"tenant/operation\" with a tenant of [A-Za-z0-9._-]";
	return config_check_operation(slash + 1);
}
