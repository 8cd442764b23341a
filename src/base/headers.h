/* HTTP header rules: which names and values are valid, which headers are
 * hop-by-hop, which a gateway forward sends upstream, and which may be
 * stored with a response and replayed. Pure functions, no I/O. */
#ifndef IDEMD_HEADERS_H
#define IDEMD_HEADERS_H

#include <curl/curl.h>
#include <stddef.h>

#include "common.h"

/* 1 when NAME (LEN bytes) is an RFC 9110 token: 1+ of tchar. */
int headers_is_token(const char *name, size_t len);

/* 1 when VALUE (LEN bytes) holds no control character but tab (no CR, LF,
 * NUL or DEL); bytes 0x80 and up (obs-text) are allowed. */
int headers_value_ok(const char *value, size_t len);

/* 1 when S can be a header value idemd sets itself: non-empty, no control
 * byte but tab (headers_value_ok), no surrounding space or tab (a parser
 * would strip it). */
int headers_arg_ok(const char *s);

/* 1 when NAME holds '_' and, read with '-' for '_', is a header idemd sets,
 * strips or frames by (Idempotency_Subject): such a name would reach an
 * upstream that folds '_' into '-' (CGI, WSGI) as the real header. */
int headers_is_alias(const char *name);

/* 1 when NAME is hop-by-hop: Connection, Keep-Alive, TE, Trailer,
 * Transfer-Encoding, Upgrade, Proxy-*, or listed in CONNECTION (the
 * comma-separated names of the message's Connection headers; may be NULL). */
int headers_hop_by_hop(const char *name, const char *connection);

/* 1 when a header named NAME is never stored with a response nor replayed:
 * hop-by-hop, Content-Length, Transfer-Encoding, Access-Control-*,
 * Set-Cookie, and the headers idemd sets on every answer itself
 * (Idempotent-Replayed, X-Request-Id). Case-insensitive. */
int headers_never_stored(const char *name);

/* One request header as the client sent it (both NUL-terminated, borrowed). */
struct headers_field {
	const char *hf_name;
	const char *hf_value;
};

/* What a forward adds of its own. Strings borrowed. */
struct headers_forward_args {
	const char *fa_token_id;    /* Idempotency-Key: the record id, 32 hex digits (quoted
				    * as an sf-string on routes with derived keys) */
	const char *fa_subject;	    /* Idempotency-Subject; NULL: none (a derived key) */
	const char *fa_client_ip;   /* appended to X-Forwarded-For */
	const char *fa_request_id;  /* X-Request-Id */
	const char *fa_traceparent; /* traceparent: the caller's trace, idemd's span; NULL: none */
	int fa_trust_forwarded;	    /* pass Forwarded, X-Real-IP, X-Forwarded-Host/-Proto/-Port */
};

enum {
	HEADERS_OK = 0,
	HEADERS_NOMEM = -1,
	HEADERS_INVALID = -2, /* a field or an argument cannot travel as a header */
};

/*
 * The header lines a forward sends upstream (libcurl's list syntax):
 * the client's N FIELDS minus hop-by-hop ones, framing (Host,
 * Content-Length, Expect), Accept-Encoding, and those idemd sets itself
 * (Idempotency-Key, Idempotency-Subject, X-Request-Id) or appends to
 * (X-Forwarded-For), and, unless trusted, Forwarded, X-Real-IP and
 * X-Forwarded-Host/-Proto/-Port; then idemd's own. On HEADERS_OK *OUT is a
 * new list (curl_slist_free_all); otherwise *OUT is NULL.
 */
int headers_forward(const struct headers_field *fields, size_t n,
		    const struct headers_forward_args *a, struct curl_slist **out) IDEMD_WUR;

#endif
