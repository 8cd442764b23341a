/*
 * CORS: which browser origins may call idemd, and the headers that tell the
 * browser so. An origin is allowed when it equals one of config
 * "cors_origins" exactly (config.c normalises them the way browsers
 * serialise the Origin header). Allowed origins get credentials
 * (Access-Control-Allow-Credentials: true) so that a shop's cookies reach
 * its upstream through the gateway; other origins get no CORS headers at
 * all, and their preflights a 403 cors_origin_denied.
 *
 * Ownership: cors_init() borrows the origin strings for as long as the
 * module is used (the config outlives the daemon). Header names and values
 * handed out in struct cors_header are borrowed: static strings, the
 * configured origins, or the METHODS argument.
 */
#ifndef IDEMD_CORS_H
#define IDEMD_CORS_H

#include <microhttpd.h>
#include <stddef.h>

#define CORS_MAX_HEADERS 8
#define CORS_MAX_AGE_SECONDS "600"
#define CORS_ALLOW_HEADERS \
	"Content-Type, Idempotency-Key, If-Match, Prefer, Authorization, X-Request-Id"
#define CORS_EXPOSE_HEADERS \
	"Idempotent-Replayed, ETag, Retry-After, Preference-Applied, X-Request-Id"

struct cors_header {
	const char *ch_name;
	const char *ch_value;
};

/* Allows the N origins of ORIGINS (borrowed); N = 0 turns CORS off. */
void cors_init(char *const *origins, size_t n);

/* The configured origin equal to ORIGIN, or NULL (ORIGIN may be NULL). */
const char *cors_allowed(const char *origin);

/* 1 for a CORS preflight: OPTIONS carrying Origin and
 * Access-Control-Request-Method. */
int cors_is_preflight(const char *method, const char *origin, const char *request_method);

/*
 * Headers of the 204 answering a preflight from ORIGIN to a path accepting
 * METHODS ("GET, POST"). Returns how many were written to OUT; 0 when the
 * origin is not allowed.
 */
size_t cors_preflight_headers(const char *origin, const char *methods,
			      struct cors_header out[CORS_MAX_HEADERS]);

/*
 * Headers added to an actual response to a request carrying ORIGIN (NULL:
 * none): Vary: Origin whenever CORS is configured and an Origin was sent,
 * plus the Allow-Origin, Allow-Credentials and Expose-Headers trio when the
 * origin is allowed. Returns how many were written to OUT.
 */
size_t cors_response_headers(const char *origin, struct cors_header out[CORS_MAX_HEADERS]);

/* Adds cors_response_headers(ORIGIN) to RESP. */
void cors_decorate(struct MHD_Response *resp, const char *origin);

#endif
