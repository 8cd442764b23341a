/* CORS: origin check, the headers of preflight answers and those added to
 * actual responses for configured browser origins (http.c replies). */
#include "cors.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "retire.h"

/* The origins in force, swapped whole on a reload (SIGHUP): a reader sees
 * one list or the other. The lists are the configs'; a set replaced is
 * freed once no request that may have read it runs (retire_add), or kept
 * for good, linked from its successor, when that is out of memory. */
struct cors_set {
	char *const *cs_origins;
	size_t cs_n;
	struct cors_set *cs_prev; /* a set it replaced, when not retired */
};
static struct cors_set cors_none;
static struct cors_set *_Atomic cors_now = &cors_none;

void cors_init(char *const *origins, size_t n)
{
	struct cors_set *s = malloc(sizeof(*s));

	if (s == NULL)
		return; /* out of memory at start or reload: the old list stays */
	s->cs_origins = origins;
	s->cs_n = n;
	s->cs_prev = atomic_load(&cors_now);
	atomic_store(&cors_now, s);
	if (s->cs_prev != &cors_none && retire_add(free, s->cs_prev) == 0)
		s->cs_prev = NULL;
}

const char *cors_allowed(const char *origin)
{
	const struct cors_set *s = atomic_load(&cors_now);

	if (origin == NULL)
		return NULL;
	for (size_t i = 0; i < s->cs_n; i++)
		if (strcmp(origin, s->cs_origins[i]) == 0)
			return s->cs_origins[i];
	return NULL;
}

int cors_is_preflight(const char *method, const char *origin, const char *request_method)
{
	return strcmp(method, "OPTIONS") == 0 && origin != NULL && request_method != NULL;
}

static size_t cors_add(struct cors_header *out, size_t n, const char *name, const char *value)
{
	out[n].ch_name = name;
	out[n].ch_value = value;
	return n + 1;
}

size_t cors_preflight_headers(const char *origin, const char *methods,
			      struct cors_header out[CORS_MAX_HEADERS])
{
	const char *allowed = cors_allowed(origin);
	size_t n = 0;

	if (allowed == NULL)
		return 0;
	n = cors_add(out, n, "Access-Control-Allow-Origin", allowed);
	n = cors_add(out, n, "Access-Control-Allow-Credentials", "true");
	n = cors_add(out, n, "Access-Control-Allow-Methods", methods);
	n = cors_add(out, n, "Access-Control-Allow-Headers", CORS_ALLOW_HEADERS);
	n = cors_add(out, n, "Access-Control-Max-Age", CORS_MAX_AGE_SECONDS);
	n = cors_add(out, n, "Vary", "Origin");
	return n;
}

size_t cors_response_headers(const char *origin, struct cors_header out[CORS_MAX_HEADERS])
{
	const char *allowed = cors_allowed(origin);
	size_t n = 0;

	if (origin == NULL || atomic_load(&cors_now)->cs_n == 0)
		return 0;
	n = cors_add(out, n, "Vary", "Origin");
	if (allowed == NULL)
		return n;
	n = cors_add(out, n, "Access-Control-Allow-Origin", allowed);
	n = cors_add(out, n, "Access-Control-Allow-Credentials", "true");
	n = cors_add(out, n, "Access-Control-Expose-Headers", CORS_EXPOSE_HEADERS);
	return n;
}

void cors_decorate(struct MHD_Response *resp, const char *origin)
{
	struct cors_header h[CORS_MAX_HEADERS];

	/* a preflight answer already carries its own set */
	if (MHD_get_response_header(resp, "Access-Control-Allow-Origin") != NULL)
		return;
	size_t n = cors_response_headers(origin, h);
	for (size_t i = 0; i < n; i++)
		MHD_add_response_header(resp, h[i].ch_name, h[i].ch_value);
}
