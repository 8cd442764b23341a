/*
 * Configuration loading and validation. Every key is one row of a table
 * (name, setter, field, default, bounds, extra check): config_keys for the
 * top level, route_keys for each element of "routes". One generic walker,
 * load_object(), rejects unknown keys, applies the file value or the default
 * (written as JSON text and run through the same setter, so defaults obey the
 * same rules) and reports missing required keys. Environment overrides are
 * applied by config_load() after the file.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* strdup, strndup, explicit_bzero */
#endif

#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "headers.h"

struct cfg_key;

/* Stores V into the field K describes in BASE; NAME is the key as shown in errors. */
typedef int (*cfg_setter)(const struct cfg_key *k, void *base, json_t *v,
    const char *name, char *err, size_t errlen);

/* Validates (and may normalise in place) a string; returns NULL or the reason. */
typedef const char *(*cfg_check)(char *s);

enum {
	CFG_NONEMPTY = 1 << 0, /* strings: "" refused */
	CFG_NULLABLE = 1 << 1, /* strings: null stores NULL */
	CFG_REQUIRED = 1 << 2  /* must be present in the object */
};

struct cfg_key {
	const char *name;
	cfg_setter set;
	size_t off;       /* the field in the target struct */
	size_t count_off; /* lists: the element count field */
	const char *def;  /* default as JSON text; NULL: none */
	long long min;    /* numbers: bounds; lists: max = most entries */
	long long max;
	unsigned flags;
	cfg_check check;  /* strings and string lists: per-value check */
};

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void copy_printable(char *dst, size_t n, const char *src);
static void *field(void *base, size_t off);
static bool is_visible(const char *s);
static int parse_port(const char *s, uint16_t *port);
static bool valid_hostname(const char *h, size_t n);
static const char *parse_listen(const char *s, const char **host, size_t *hostlen,
    uint16_t *port);
static int store_listen(struct config *cfg, const char *s, const char *label,
    char *err, size_t errlen);
static int get_integer(const struct cfg_key *k, json_t *v, const char *name,
    long long *out, char *err, size_t errlen);
static int set_int(const struct cfg_key *, void *, json_t *, const char *, char *, size_t);
static int set_long(const struct cfg_key *, void *, json_t *, const char *, char *, size_t);
static int set_size(const struct cfg_key *, void *, json_t *, const char *, char *, size_t);
static int set_double(const struct cfg_key *, void *, json_t *, const char *, char *, size_t);
static int set_bool(const struct cfg_key *, void *, json_t *, const char *, char *, size_t);
static int set_string(const struct cfg_key *, void *, json_t *, const char *, char *, size_t);
static int set_strlist(const struct cfg_key *, void *, json_t *, const char *, char *, size_t);
static int set_listen(const struct cfg_key *, void *, json_t *, const char *, char *, size_t);
static int set_admin_listen(const struct cfg_key *, void *, json_t *, const char *, char *,
    size_t);
static const char *check_metrics_operation(char *s);
static int set_routes(const struct cfg_key *, void *, json_t *, const char *, char *, size_t);
static int set_release_on(const struct cfg_key *, void *, json_t *, const char *, char *,
    size_t);
static const char *check_route_key(char *s);
static const char *check_scope_header(char *s);
static const char *check_fingerprint(char *s);
static const char *check_method(char *s);
static const char *check_path(char *s);
static const char *check_operation(char *s);
static const char *check_upstream(char *s);
static const char *check_header_name(char *s);
static const char *check_origin(char *s);
static int load_object(void *base, const struct cfg_key *keys, size_t nkeys,
    json_t *obj, const char *prefix, char *err, size_t errlen);
static int load_root(struct config *cfg, json_t *root, char *err, size_t errlen);
static int check_required(const struct config *cfg, char *err, size_t errlen);
static int read_file(const char *path, char **out, size_t *outlen, char *err,
    size_t errlen);
static void strlist_free(char **list, size_t n);
static void route_free(struct config_route *r);
static void secret_free(char *s);

#define CFG_FIELD(f) offsetof(struct config, f)
#define ROUTE_FIELD(f) offsetof(struct config_route, f)

static const struct cfg_key config_keys[] = {
	{ .name = "listen", .set = set_listen, .def = "\"127.0.0.1:8080\"" },
	{ .name = "database_url", .set = set_string,
	  .off = CFG_FIELD(database_url), .flags = CFG_NONEMPTY },
	{ .name = "pool_size", .set = set_int, .off = CFG_FIELD(pool_size),
	  .def = "8", .min = 1, .max = 256 },
	/* no default here: one thread per core, see load_root() */
	{ .name = "threads", .set = set_int, .off = CFG_FIELD(threads),
	  .min = 1, .max = 256 },
	{ .name = "max_body_bytes", .set = set_size, .off = CFG_FIELD(max_body_bytes),
	  .def = "1048576", .min = 1024, .max = 67108864 },
	{ .name = "sweep_interval_seconds", .set = set_int,
	  .off = CFG_FIELD(sweep_interval_seconds), .def = "60", .min = 1, .max = 86400 },
	{ .name = "master_key_file", .set = set_string, .off = CFG_FIELD(master_key_file),
	  .def = "\"idemd.key\"", .flags = CFG_NONEMPTY },
	{ .name = "cors_origins", .set = set_strlist, .off = CFG_FIELD(cors_origins),
	  .count_off = CFG_FIELD(n_cors_origins), .def = "[]", .max = 256,
	  .check = check_origin },
	{ .name = "routes", .set = set_routes, .def = "[]", .max = 1024 },
	{ .name = "max_connections", .set = set_int, .off = CFG_FIELD(max_connections),
	  .def = "4096", .min = 1, .max = 100000 },
	{ .name = "connection_timeout_seconds", .set = set_int,
	  .off = CFG_FIELD(connection_timeout_seconds), .def = "30", .min = 1, .max = 3600 },
	{ .name = "max_connections_per_ip", .set = set_int,
	  .off = CFG_FIELD(max_connections_per_ip), .def = "1024", .min = 0, .max = 100000 },
	{ .name = "max_inflight_body_bytes", .set = set_size,
	  .off = CFG_FIELD(max_inflight_body_bytes), .def = "67108864", .min = 1048576,
	  .max = 68719476736LL },
	{ .name = "request_timeout_seconds", .set = set_int,
	  .off = CFG_FIELD(request_timeout_seconds), .def = "30", .min = 1, .max = 3600 },
	{ .name = "issue_rate_per_second", .set = set_double,
	  .off = CFG_FIELD(issue_rate_per_second), .def = "0", .min = 0, .max = 1000000 },
	{ .name = "issue_burst", .set = set_int, .off = CFG_FIELD(issue_burst),
	  .def = "100", .min = 1, .max = 1000000 },
	{ .name = "max_waiters", .set = set_int, .off = CFG_FIELD(max_waiters),
	  .def = "10000", .min = 0, .max = 1000000 },
	{ .name = "database_timeout_ms", .set = set_long,
	  .off = CFG_FIELD(database_timeout_ms), .def = "10000", .min = 100, .max = 600000 },
	{ .name = "prepared_statements", .set = set_bool,
	  .off = CFG_FIELD(prepared_statements), .def = "true" },
	{ .name = "tls_cert_file", .set = set_string, .off = CFG_FIELD(tls_cert_file),
	  .def = "null", .flags = CFG_NONEMPTY | CFG_NULLABLE },
	{ .name = "tls_key_file", .set = set_string, .off = CFG_FIELD(tls_key_file),
	  .def = "null", .flags = CFG_NONEMPTY | CFG_NULLABLE },
	{ .name = "listen_database_url", .set = set_string,
	  .off = CFG_FIELD(listen_database_url), .def = "null",
	  .flags = CFG_NONEMPTY | CFG_NULLABLE },
	{ .name = "admin_listen", .set = set_admin_listen, .def = "null" },
	{ .name = "metrics_operations", .set = set_strlist,
	  .off = CFG_FIELD(metrics_operations), .count_off = CFG_FIELD(n_metrics_operations),
	  .def = "[]", .max = 64, .check = check_metrics_operation },
};

static const struct cfg_key route_keys[] = {
	{ .name = "method", .set = set_string, .off = ROUTE_FIELD(method),
	  .flags = CFG_REQUIRED, .check = check_method },
	{ .name = "path", .set = set_string, .off = ROUTE_FIELD(path),
	  .flags = CFG_REQUIRED, .check = check_path },
	{ .name = "tenant", .set = set_string, .off = ROUTE_FIELD(tenant),
	  .flags = CFG_REQUIRED | CFG_NONEMPTY },
	{ .name = "operation", .set = set_string, .off = ROUTE_FIELD(operation),
	  .flags = CFG_REQUIRED, .check = check_operation },
	{ .name = "upstream", .set = set_string, .off = ROUTE_FIELD(upstream),
	  .flags = CFG_REQUIRED, .check = check_upstream },
	{ .name = "store_headers", .set = set_strlist, .off = ROUTE_FIELD(store_headers),
	  .count_off = ROUTE_FIELD(n_store_headers), .def = "[]", .max = 64,
	  .check = check_header_name },
	{ .name = "connect_timeout_ms", .set = set_long,
	  .off = ROUTE_FIELD(connect_timeout_ms), .def = "1000", .min = 1, .max = 60000 },
	{ .name = "timeout_ms", .set = set_long, .off = ROUTE_FIELD(timeout_ms),
	  .def = "10000", .min = 1, .max = 600000 },
	{ .name = "client_if_match", .set = set_bool, .off = ROUTE_FIELD(client_if_match),
	  .def = "false" },
	{ .name = "key", .set = set_string, .off = ROUTE_FIELD(key), .def = "\"token\"",
	  .check = check_route_key },
	{ .name = "scope_headers", .set = set_strlist, .off = ROUTE_FIELD(scope_headers),
	  .count_off = ROUTE_FIELD(n_scope_headers), .def = "[\"authorization\"]", .max = 16,
	  .check = check_scope_header },
	{ .name = "fingerprint", .set = set_string, .off = ROUTE_FIELD(fingerprint),
	  .def = "\"bytes\"", .check = check_fingerprint },
	{ .name = "release_on", .set = set_release_on, .off = ROUTE_FIELD(release_on),
	  .def = "[\"5xx\"]", .max = 600 },
	{ .name = "trust_forwarded", .set = set_bool, .off = ROUTE_FIELD(trust_forwarded),
	  .def = "false" },
};

#define LISTEN_FORMS "must be \"host:port\", \"[ipv6]:port\" or \":port\""
#define MAX_PATH_LEN 1024
#define MAX_URL_LEN 2048

/* Jansson's error text without the " near '...'" part, which quotes raw
 * input (a password in database_url, control bytes), kept to printable
 * ASCII. Writes into OUT. */
static const char *json_error_text(const char *text, char *out, size_t outlen)
{
	size_t n = 0;
	const char *near = strstr(text, " near '");
	size_t len = near ? (size_t)(near - text) : strlen(text);

	for (size_t i = 0; i < len && n + 1 < outlen; i++)
		out[n++] = (text[i] >= 0x20 && text[i] <= 0x7e) ? text[i] : '?';
	out[n] = '\0';
	return out;
}

/* Writes "config: " and the message into ERR; returns -1. */
static int
fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (err == NULL || errlen == 0)
		return -1;
	n = snprintf(err, errlen, "config: ");
	if (n < 0 || (size_t)n >= errlen)
		return -1;
	va_start(ap, fmt);
	vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

/* Copies at most 64 bytes of SRC for an error line, '?' for unprintable bytes. */
static void
copy_printable(char *dst, size_t n, const char *src)
{
	size_t i;

	for (i = 0; i + 1 < n && i < 64 && src[i] != '\0'; i++)
		dst[i] = (src[i] >= 0x20 && src[i] < 0x7f && src[i] != '"') ? src[i] : '?';
	if (src[i] != '\0' && i + 4 < n) {
		memcpy(dst + i, "...", 3);
		i += 3;
	}
	dst[i] = '\0';
}

static void *
field(void *base, size_t off)
{
	return (char *)base + off;
}

/* True when every byte is visible ASCII (no space, control or non-ASCII). */
static bool
is_visible(const char *s)
{
	for (; *s != '\0'; s++)
		if ((unsigned char)*s <= 0x20 || (unsigned char)*s >= 0x7f)
			return false;
	return true;
}

/* Parses a whole string as a port 1..65535, decimal digits only. */
static int
parse_port(const char *s, uint16_t *port)
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
static bool
valid_hostname(const char *h, size_t n)
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
static const char *
parse_listen(const char *s, const char **host, size_t *hostlen, uint16_t *port)
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

/* Parses S into cfg->listen_host and listen_port; LABEL names the source. */
static int
store_listen(struct config *cfg, const char *s, const char *label, char *err,
    size_t errlen)
{
	const char *host, *why;
	size_t hostlen;
	uint16_t port;
	char *copy;

	if ((why = parse_listen(s, &host, &hostlen, &port)) != NULL)
		return fail(err, errlen, "%s %s", label, why);
	if ((copy = strndup(host, hostlen)) == NULL)
		return fail(err, errlen, "out of memory");
	free(cfg->listen_host);
	cfg->listen_host = copy;
	cfg->listen_port = port;
	return 0;
}

/* Reads an integer within [k->min, k->max]. */
static int
get_integer(const struct cfg_key *k, json_t *v, const char *name,
    long long *out, char *err, size_t errlen)
{
	long long n = 0;

	if (!json_is_integer(v))
		return fail(err, errlen, "\"%s\" must be an integer", name);
	n = (long long)json_integer_value(v);
	if (n < k->min || n > k->max)
		return fail(err, errlen, "\"%s\" must be between %lld and %lld",
		    name, k->min, k->max);
	*out = n;
	return 0;
}

static int
set_int(const struct cfg_key *k, void *base, json_t *v, const char *name,
    char *err, size_t errlen)
{
	long long n = 0;

	if (get_integer(k, v, name, &n, err, errlen) == -1)
		return -1;
	*(int *)field(base, k->off) = (int)n;
	return 0;
}

static int
set_long(const struct cfg_key *k, void *base, json_t *v, const char *name,
    char *err, size_t errlen)
{
	long long n = 0;

	if (get_integer(k, v, name, &n, err, errlen) == -1)
		return -1;
	*(long *)field(base, k->off) = (long)n;
	return 0;
}

static int
set_size(const struct cfg_key *k, void *base, json_t *v, const char *name,
    char *err, size_t errlen)
{
	long long n = 0;

	if (get_integer(k, v, name, &n, err, errlen) == -1)
		return -1;
	*(size_t *)field(base, k->off) = (size_t)n;
	return 0;
}

/* Integers and reals alike, within [k->min, k->max]. */
static int
set_double(const struct cfg_key *k, void *base, json_t *v, const char *name,
    char *err, size_t errlen)
{
	double d;

	if (!json_is_number(v))
		return fail(err, errlen, "\"%s\" must be a number", name);
	d = json_number_value(v);
	if (!(d >= (double)k->min && d <= (double)k->max))
		return fail(err, errlen, "\"%s\" must be between %lld and %lld",
		    name, k->min, k->max);
	*(double *)field(base, k->off) = d;
	return 0;
}

static int
set_bool(const struct cfg_key *k, void *base, json_t *v, const char *name,
    char *err, size_t errlen)
{
	if (!json_is_boolean(v))
		return fail(err, errlen, "\"%s\" must be true or false", name);
	*(int *)field(base, k->off) = json_is_true(v);
	return 0;
}

/* A string (copied), null if CFG_NULLABLE, then k->check if any. */
static int
set_string(const struct cfg_key *k, void *base, json_t *v, const char *name,
    char *err, size_t errlen)
{
	char **dst = field(base, k->off);
	const char *why;
	char *s;

	if (json_is_null(v) && (k->flags & CFG_NULLABLE)) {
		free(*dst);
		*dst = NULL;
		return 0;
	}
	if (!json_is_string(v))
		return fail(err, errlen, "\"%s\" must be a string%s", name,
		    (k->flags & CFG_NULLABLE) ? " or null" : "");
	if ((k->flags & CFG_NONEMPTY) && json_string_length(v) == 0)
		return fail(err, errlen, "\"%s\" must not be empty", name);
	if ((s = strdup(json_string_value(v))) == NULL)
		return fail(err, errlen, "out of memory");
	if (k->check != NULL && (why = k->check(s)) != NULL) {
		free(s);
		return fail(err, errlen, "\"%s\" %s", name, why);
	}
	free(*dst);
	*dst = s;
	return 0;
}

/* "release_on": statuses (100..599) and classes ("1xx".."5xx") after which
 * a forward's claim is released rather than its answer stored. */
static int
set_release_on(const struct cfg_key *k, void *base, json_t *v, const char *name,
    char *err, size_t errlen)
{
	unsigned char *on = field(base, k->off);
	json_t *e;
	size_t i;

	if (!json_is_array(v))
		return fail(err, errlen, "\"%s\" must be an array of statuses and classes "
		    "like [\"5xx\", 429]", name);
	memset(on, 0, 600);
	json_array_foreach(v, i, e) {
		const char *s = json_string_value(e);
		if (json_is_integer(e) && json_integer_value(e) >= 100 &&
		    json_integer_value(e) <= 599) {
			on[json_integer_value(e)] = 1;
		} else if (s != NULL && strlen(s) == 3 && s[0] >= '1' && s[0] <= '5' &&
		    s[1] == 'x' && s[2] == 'x') {
			memset(on + (s[0] - '0') * 100, 1, 100);
		} else {
			return fail(err, errlen, "\"%s[%zu]\" must be a status from 100 to 599 "
			    "or a class \"1xx\" to \"5xx\"", name, i);
		}
	}
	return 0;
}

/* An array of at most k->max distinct non-empty strings, each passing k->check. */
static int
set_strlist(const struct cfg_key *k, void *base, json_t *v, const char *name,
    char *err, size_t errlen)
{
	char ***dst = field(base, k->off);
	size_t *count = field(base, k->count_off);
	char **list = NULL;
	char ename[128];
	const char *why;
	json_t *e;
	size_t n, i, j;
	int ret = -1;

	if (!json_is_array(v))
		return fail(err, errlen, "\"%s\" must be an array of strings", name);
	n = json_array_size(v);
	if (n > (size_t)k->max)
		return fail(err, errlen, "\"%s\" must have at most %lld entries",
		    name, k->max);
	if (n > 0 && (list = calloc(n, sizeof(*list))) == NULL)
		return fail(err, errlen, "out of memory");
	json_array_foreach(v, i, e) {
		snprintf(ename, sizeof(ename), "%s[%zu]", name, i);
		if (!json_is_string(e)) {
			fail(err, errlen, "\"%s\" must be a string", ename);
			goto done;
		}
		if (json_string_length(e) == 0) {
			fail(err, errlen, "\"%s\" must not be empty", ename);
			goto done;
		}
		if ((list[i] = strdup(json_string_value(e))) == NULL) {
			fail(err, errlen, "out of memory");
			goto done;
		}
		if (k->check != NULL && (why = k->check(list[i])) != NULL) {
			fail(err, errlen, "\"%s\" %s", ename, why);
			goto done;
		}
		for (j = 0; j < i; j++) {
			if (strcmp(list[i], list[j]) == 0) {
				fail(err, errlen, "\"%s\" duplicates \"%s[%zu]\"",
				    ename, name, j);
				goto done;
			}
		}
	}
	strlist_free(*dst, *count);
	*dst = list;
	*count = n;
	list = NULL;
	ret = 0;
done:
	strlist_free(list, n);
	return ret;
}

static int
set_listen(const struct cfg_key *k, void *base, json_t *v, const char *name,
    char *err, size_t errlen)
{
	char label[64];

	(void)k;
	if (!json_is_string(v))
		return fail(err, errlen, "\"%s\" must be a string", name);
	snprintf(label, sizeof(label), "\"%s\"", name);
	return store_listen(base, json_string_value(v), label, err, errlen);
}

/* "admin_listen": null, or an address in the form of "listen". */
static int
set_admin_listen(const struct cfg_key *k, void *base, json_t *v, const char *name,
    char *err, size_t errlen)
{
	struct config *cfg = base;
	const char *host, *why;
	size_t hostlen;
	uint16_t port;
	char *copy;

	(void)k;
	if (json_is_null(v))
		return 0;
	if (!json_is_string(v))
		return fail(err, errlen, "\"%s\" must be a string or null", name);
	if ((why = parse_listen(json_string_value(v), &host, &hostlen, &port)) != NULL)
		return fail(err, errlen, "\"%s\" %s", name, why);
	if ((copy = strndup(host, hostlen)) == NULL)
		return fail(err, errlen, "out of memory");
	free(cfg->admin_listen_host);
	cfg->admin_listen_host = copy;
	cfg->admin_listen_port = port;
	return 0;
}

/* "tenant/operation": a tenant name ([A-Za-z0-9._-]{1,64}), a slash, an
 * operation name. */
static const char *
check_metrics_operation(char *s)
{
	char *slash = strchr(s, '/');

	if (slash == NULL || slash == s || slash - s > 64)
		return "must be \"tenant/operation\"";
	for (char *p = s; p < slash; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') || *p == '.' || *p == '_' || *p == '-'))
			return "must be \"tenant/operation\" with a tenant of [A-Za-z0-9._-]";
	return check_operation(slash + 1);
}

/* An array of route objects (route_keys), method + path unique. */
static int
set_routes(const struct cfg_key *k, void *base, json_t *v, const char *name,
    char *err, size_t errlen)
{
	struct config *cfg = base;
	struct config_route *routes = NULL;
	char prefix[64];
	json_t *e;
	size_t n, i, j;
	int ret = -1;

	if (!json_is_array(v))
		return fail(err, errlen, "\"%s\" must be an array of objects", name);
	n = json_array_size(v);
	if (n > (size_t)k->max)
		return fail(err, errlen, "\"%s\" must have at most %lld entries",
		    name, k->max);
	if (n > 0 && (routes = calloc(n, sizeof(*routes))) == NULL)
		return fail(err, errlen, "out of memory");
	json_array_foreach(v, i, e) {
		if (!json_is_object(e)) {
			fail(err, errlen, "\"%s[%zu]\" must be an object", name, i);
			goto done;
		}
		snprintf(prefix, sizeof(prefix), "%s[%zu].", name, i);
		if (load_object(&routes[i], route_keys, IDEMD_ARRAY_LEN(route_keys),
		    e, prefix, err, errlen) == -1)
			goto done;
		for (j = 0; j < i; j++) {
			if (strcmp(routes[i].method, routes[j].method) == 0 &&
			    strcmp(routes[i].path, routes[j].path) == 0) {
				fail(err, errlen, "\"%s[%zu]\" duplicates \"%s[%zu]\" (%s %s)",
				    name, i, name, j, routes[i].method, routes[i].path);
				goto done;
			}
		}
	}
	for (i = 0; i < cfg->n_routes; i++)
		route_free(&cfg->routes[i]);
	free(cfg->routes);
	cfg->routes = routes;
	cfg->n_routes = n;
	routes = NULL;
	ret = 0;
done:
	if (routes != NULL) {
		for (i = 0; i < n; i++)
			route_free(&routes[i]);
		free(routes);
	}
	return ret;
}

static const char *
check_method(char *s)
{
	static const char *const methods[] = { "GET", "POST", "PUT", "PATCH", "DELETE" };
	size_t i;

	for (i = 0; i < IDEMD_ARRAY_LEN(methods); i++)
		if (strcmp(s, methods[i]) == 0)
			return NULL;
	return "must be one of GET, POST, PUT, PATCH, DELETE";
}

/* An exact path outside the API's own namespace. */
static const char *
check_path(char *s)
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

static const char *
check_operation(char *s)
{
	size_t i;

	for (i = 0; s[i] != '\0'; i++) {
		char c = s[i];

		if (i >= 64 || !((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		    c == '.' || c == '_' || c == '-'))
			return "must match [a-z0-9._-]{1,64}";
	}
	return i == 0 ? "must match [a-z0-9._-]{1,64}" : NULL;
}

/* "http://" or "https://", a host, visible ASCII only, no fragment. */
static const char *
check_upstream(char *s)
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
static const char *
check_header_name(char *s)
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
		snprintf(msg, sizeof(msg), "names %.64s, which is never stored (hop-by-hop, "
			 "framing, Access-Control-*, Set-Cookie, or set by idemd itself)", start);
		return msg;
	}
	return NULL;
}

/* A route's key source: token, body, header:NAME (a header name), or
 * json:/POINTER (an RFC 6901 JSON Pointer). */
static const char *
check_route_key(char *s)
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
static const char *
check_scope_header(char *s)
{
	if (!headers_is_token(s, strlen(s)))
		return "must be a header name";
	for (; *s != '\0'; s++)
		if (*s >= 'A' && *s <= 'Z')
			*s = (char)(*s - 'A' + 'a');
	return NULL;
}

static const char *
check_fingerprint(char *s)
{
	if (strcmp(s, "bytes") == 0 || strcmp(s, "json") == 0 || strcmp(s, "none") == 0)
		return NULL;
	return "must be \"bytes\", \"json\" or \"none\"";
}

/*
 * An origin as browsers serialise it: "http(s)://host[:port]", nothing after.
 * Lower-cased in place; the scheme's default port is removed so that
 * comparing with the Origin header is an exact string compare. "*" is
 * refused on purpose: each origin allowed to use the gateway is listed.
 */
static const char *
check_origin(char *s)
{
	static const char form[] =
	    "must be an origin \"scheme://host[:port]\" without a path, "
	    "e.g. \"https://app.example.com\"";
	char *p, *host, *end;
	const char *defport;
	uint16_t port;

	if (strcmp(s, "*") == 0)
		return "must name an origin; \"*\" is not allowed, list each origin";
	for (p = s; *p != '\0'; p++)
		if (*p >= 'A' && *p <= 'Z')
			*p = (char)(*p - 'A' + 'a');
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
		struct in6_addr a6;
		char buf[INET6_ADDRSTRLEN];
		size_t n;

		if ((end = strchr(host, ']')) == NULL)
			return form;
		n = (size_t)(end - host - 1);
		if (n == 0 || n >= sizeof(buf))
			return form;
		memcpy(buf, host + 1, n);
		buf[n] = '\0';
		if (inet_pton(AF_INET6, buf, &a6) != 1)
			return form;
		end++;
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

/*
 * Fills BASE from OBJ by the table KEYS: unknown keys are errors, absent
 * keys take their default, absent CFG_REQUIRED keys are errors. PREFIX is
 * put before key names in messages ("routes[0].").
 */
static int
load_object(void *base, const struct cfg_key *keys, size_t nkeys, json_t *obj,
    const char *prefix, char *err, size_t errlen)
{
	char name[128], shown[72];
	const char *key;
	json_t *v;
	size_t i;
	int rc;

	json_object_foreach(obj, key, v) {
		for (i = 0; i < nkeys; i++)
			if (strcmp(key, keys[i].name) == 0)
				break;
		if (i == nkeys) {
			copy_printable(shown, sizeof(shown), key);
			return fail(err, errlen, "unknown key \"%s%s\"", prefix, shown);
		}
	}
	for (i = 0; i < nkeys; i++) {
		const struct cfg_key *k = &keys[i];

		snprintf(name, sizeof(name), "%s%s", prefix, k->name);
		if ((v = json_object_get(obj, k->name)) != NULL) {
			rc = k->set(k, base, v, name, err, errlen);
		} else if (k->flags & CFG_REQUIRED) {
			return fail(err, errlen, "\"%s\" is required", name);
		} else if (k->def != NULL) {
			json_t *def = json_loads(k->def, JSON_DECODE_ANY, NULL);

			if (def == NULL)
				return fail(err, errlen, "bad built-in default for \"%s\"", name);
			rc = k->set(k, base, def, name, err, errlen);
			json_decref(def);
		} else {
			rc = 0;
		}
		if (rc == -1)
			return -1;
	}
	return 0;
}

/* The top level: keys, then rules that span keys. */
static int
load_root(struct config *cfg, json_t *root, char *err, size_t errlen)
{
	if (!json_is_object(root))
		return fail(err, errlen, "top level must be a JSON object");
	if (load_object(cfg, config_keys, IDEMD_ARRAY_LEN(config_keys), root, "",
	    err, errlen) == -1)
		return -1;
	if ((cfg->tls_cert_file == NULL) != (cfg->tls_key_file == NULL))
		return fail(err, errlen,
		    "\"tls_cert_file\" and \"tls_key_file\" must be set together");
	if (cfg->threads == 0)
		cfg->threads = config_default_threads();
	return 0;
}

int
config_default_threads(void)
{
	/* request threads never wait for the database (claims and completes
	 * go through the batcher), so one per core keeps every core busy
	 * without paying for switches between more threads than cores */
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n < 2 ? 2 : n > 256 ? 256 : (int)n;
}

/* What must hold once the file and the environment are both applied. */
static int
check_required(const struct config *cfg, char *err, size_t errlen)
{
	if (cfg->database_url == NULL)
		return fail(err, errlen,
		    "\"database_url\" is required (or set IDEMD_DATABASE_URL)");
	if (cfg->admin_listen_host != NULL && cfg->admin_listen_port == cfg->listen_port &&
	    strcmp(cfg->admin_listen_host, cfg->listen_host) == 0)
		return fail(err, errlen, "\"admin_listen\" must differ from \"listen\"");
	return 0;
}

/* Reads at most CONFIG_MAX_FILE_BYTES of PATH into a new buffer (*OUT). */
static int
read_file(const char *path, char **out, size_t *outlen, char *err, size_t errlen)
{
	char *buf = NULL;
	size_t len = 0;
	ssize_t n;
	int fd, ret = -1;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		return fail(err, errlen, "cannot open %s: %s", path, strerror(errno));
	if ((buf = malloc(CONFIG_MAX_FILE_BYTES + 1)) == NULL) {
		fail(err, errlen, "out of memory");
		goto done;
	}
	while (len <= CONFIG_MAX_FILE_BYTES) {
		n = read(fd, buf + len, CONFIG_MAX_FILE_BYTES + 1 - len);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1) {
			fail(err, errlen, "cannot read %s: %s", path, strerror(errno));
			goto done;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (len > CONFIG_MAX_FILE_BYTES) {
		fail(err, errlen, "%s is larger than %d bytes", path,
		    CONFIG_MAX_FILE_BYTES);
		goto done;
	}
	*out = buf;
	*outlen = len;
	buf = NULL;
	ret = 0;
done:
	if (buf != NULL) {
		explicit_bzero(buf, len);
		free(buf);
	}
	close(fd);
	return ret;
}

int
config_parse(struct config *cfg, const char *text, char *err, size_t errlen)
{
	struct config tmp = { 0 };
	json_error_t jerr;
	char etext[JSON_ERROR_TEXT_LENGTH];
	json_t *root;
	int ret = -1;

	memset(cfg, 0, sizeof(*cfg));
	if ((root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr)) == NULL)
		return fail(err, errlen, "invalid JSON at line %d, column %d: %s",
		    jerr.line, jerr.column, json_error_text(jerr.text, etext, sizeof(etext)));
	if (load_root(&tmp, root, err, errlen) == -1 ||
	    check_required(&tmp, err, errlen) == -1)
		goto done;
	*cfg = tmp;
	memset(&tmp, 0, sizeof(tmp));
	ret = 0;
done:
	config_free(&tmp);
	json_decref(root);
	return ret;
}

int
config_load(struct config *cfg, const char *path, char *err, size_t errlen)
{
	struct config tmp = { 0 };
	json_error_t jerr;
	char etext[JSON_ERROR_TEXT_LENGTH];
	json_t *root = NULL;
	const char *env;
	char *buf = NULL;
	size_t len = 0;
	int ret = -1;

	memset(cfg, 0, sizeof(*cfg));
	if (path != NULL) {
		if (read_file(path, &buf, &len, err, errlen) == -1)
			goto done;
		root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
		if (root == NULL) {
			fail(err, errlen, "%s: invalid JSON at line %d, column %d: %s",
			    path, jerr.line, jerr.column, json_error_text(jerr.text, etext, sizeof(etext)));
			goto done;
		}
	} else if ((root = json_object()) == NULL) {
		fail(err, errlen, "out of memory");
		goto done;
	}
	if (load_root(&tmp, root, err, errlen) == -1)
		goto done;
	if ((env = getenv("IDEMD_LISTEN")) != NULL && env[0] != '\0' &&
	    store_listen(&tmp, env, "IDEMD_LISTEN", err, errlen) == -1)
		goto done;
	if ((env = getenv("IDEMD_DATABASE_URL")) != NULL && env[0] != '\0') {
		char *copy = strdup(env);

		if (copy == NULL) {
			fail(err, errlen, "out of memory");
			goto done;
		}
		secret_free(tmp.database_url);
		tmp.database_url = copy;
	}
	if (check_required(&tmp, err, errlen) == -1)
		goto done;
	*cfg = tmp;
	memset(&tmp, 0, sizeof(tmp));
	ret = 0;
done:
	config_free(&tmp);
	json_decref(root);
	if (buf != NULL) {
		explicit_bzero(buf, len);
		free(buf);
	}
	return ret;
}

static void
strlist_free(char **list, size_t n)
{
	size_t i;

	if (list == NULL)
		return;
	for (i = 0; i < n; i++)
		free(list[i]);
	free(list);
}

static void
route_free(struct config_route *r)
{
	free(r->method);
	free(r->path);
	free(r->tenant);
	free(r->operation);
	free(r->upstream);
	strlist_free(r->store_headers, r->n_store_headers);
	strlist_free(r->scope_headers, r->n_scope_headers);
	free(r->key);
	free(r->fingerprint);
	memset(r, 0, sizeof(*r));
}

/* Frees a string that may hold a password, wiping it first. */
static void
secret_free(char *s)
{
	if (s == NULL)
		return;
	explicit_bzero(s, strlen(s));
	free(s);
}

void
config_free(struct config *cfg)
{
	size_t i;

	if (cfg == NULL)
		return;
	free(cfg->listen_host);
	secret_free(cfg->database_url);
	secret_free(cfg->listen_database_url);
	free(cfg->master_key_file);
	strlist_free(cfg->cors_origins, cfg->n_cors_origins);
	for (i = 0; i < cfg->n_routes; i++)
		route_free(&cfg->routes[i]);
	free(cfg->routes);
	free(cfg->tls_cert_file);
	free(cfg->tls_key_file);
	free(cfg->admin_listen_host);
	strlist_free(cfg->metrics_operations, cfg->n_metrics_operations);
	memset(cfg, 0, sizeof(*cfg));
}
