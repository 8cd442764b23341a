/* HTTP header rules: which names and values are valid, which headers are
 * hop-by-hop, which a gateway forward sends upstream, and which may be
 * stored with a response and replayed. Pure functions, no I/O.
 * Ownership: arguments are borrowed for the call, except a tiling's BLOCK,
 * borrowed until headers_tiling_end(); the list headers_forward() fills is
 * owned: the caller frees it with curl_slist_free_all(). */
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

/*
 * Whether a request's header section, as its parser left it in place,
 * holds nothing but the fields the parser reported. The parser this is
 * for (libmicrohttpd 0.9.75) turns each line end (CRLF, or a bare LF)
 * into one or two NULs and each field's colon into a NUL, and reports a
 * field by pointers into that block. It cuts a value at a NUL byte (what
 * follows is dropped) and joins an obs-fold line (one that starts with a
 * space or a tab) onto the name before it, copied elsewhere; in both cases
 * bytes of the block belong to no field, which this finds.
 *
 * Begin with the BLOCK of LEN bytes (borrowed until end) and where the
 * request line ends in it (FIRST: its first line-end byte); give each
 * field, in the order the parser read them (NAME and VALUE as reported,
 * NAME_LEN and VALUE_LEN their lengths); end says 1 when the fields and
 * their line ends covered the block exactly, with the empty line last,
 * else 0. A NUL right before a bare LF looks like CRLF and passes (nothing
 * follows it in its line, so nothing is dropped).
 */
struct headers_tiling {
	const char *ht_block;
	size_t ht_len;
	size_t ht_at; /* the current line end */
	int ht_ok;
};
void headers_tiling_begin(struct headers_tiling *t, const char *block, size_t len, size_t first);
void headers_tiling_field(struct headers_tiling *t, const char *name, size_t name_len,
			  const char *value, size_t value_len);
int headers_tiling_end(const struct headers_tiling *t);

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
 * list, owned (curl_slist_free_all()); otherwise *OUT is NULL.
 */
int headers_forward(const struct headers_field *fields, size_t n,
		    const struct headers_forward_args *a, struct curl_slist **out) IDEMD_WUR;

#endif
