/* Router: the matcher, over the routes added (the gateway's) and the
 * API's own table (routes.c). */
#include "router.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "retire.h"

/* The API's own routes (routes.c), matched after the added ones. */
static const struct route *router_table;
static size_t router_table_n;

void router_set_table(const struct route *table, size_t n)
{
	router_table = table;
	router_table_n = n;
}

/* Matches PATH against PATTERN; on success records where each "{}" segment
 * starts and how long it is. */
static int router_pattern_match(const char *pattern, const char *path,
				const char *starts[HTTP_MAX_PARAMS], size_t lens[HTTP_MAX_PARAMS],
				int *nparams)
{
	int n = 0;

	while (*pattern != '\0') {
		if (pattern[0] == '{' && pattern[1] == '}') {
			size_t len = (size_t)(strchrnul(path, '/') - path);
			if (len == 0 || n == HTTP_MAX_PARAMS)
				return 0;
			starts[n] = path;
			lens[n] = len;
			n++;
			path += len;
			pattern += 2;
			continue;
		}
		if (*pattern != *path)
			return 0;
		pattern++;
		path++;
	}
	*nparams = n;
	return *path == '\0';
}

static int router_hex(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

char *router_decode(const char *s, size_t len, size_t *outlen)
{
	char *out = malloc(len + 1);
	size_t n = 0;

	if (out == NULL)
		return NULL;
	if (memchr(s, '%', len) == NULL) {
		/* nothing escaped: the common case (tokens are base64url) */
		memcpy(out, s, len);
		out[len] = '\0';
		*outlen = len;
		return out;
	}
	for (size_t i = 0; i < len; i++) {
		int hi, lo;
		if (s[i] == '%' && i + 2 < len && (hi = router_hex(s[i + 1])) >= 0 &&
		    (lo = router_hex(s[i + 2])) >= 0) {
			out[n++] = (char)(hi * 16 + lo);
			i += 2;
		} else {
			out[n++] = s[i];
		}
	}
	out[n] = '\0';
	*outlen = n;
	return out;
}

/* Routes added (the gateway's), matched before router_table: a set that
 * is being built (router_add), and the one requests match against, which
 * router_publish swaps whole (start, and each reload). A set that was in
 * force is freed once no request that may have matched it runs
 * (retire_add), or with router_clear_added when that is out of memory:
 * until then it is linked from its successor. */
struct router_set {
	const struct route **r;
	size_t n;
	struct router_set *prev;
};

static void router_set_free(void *arg)
{
	struct router_set *s = arg;

	free(s->r);
	free(s);
}

static struct router_set router_building;
static struct router_set *_Atomic router_added;

int router_add(const struct route *r)
{
	const struct route **p = realloc(router_building.r, (router_building.n + 1) * sizeof(*p));

	if (p == NULL)
		return -1;
	p[router_building.n++] = r;
	router_building.r = p;
	return 0;
}

int router_publish(void)
{
	struct router_set *s = malloc(sizeof(*s));

	if (s == NULL)
		return -1;
	*s = router_building;
	s->prev = atomic_load(&router_added);
	memset(&router_building, 0, sizeof(router_building));
	atomic_store(&router_added, s);
	if (s->prev != NULL && retire_add(router_set_free, s->prev) == 0)
		s->prev = NULL;
	return 0;
}

void router_discard(void)
{
	free(router_building.r);
	memset(&router_building, 0, sizeof(router_building));
}

void router_clear_added(void)
{
	struct router_set *s = atomic_exchange(&router_added, NULL);

	while (s != NULL) {
		struct router_set *prev = s->prev;
		router_set_free(s);
		s = prev;
	}
	free(router_building.r);
	memset(&router_building, 0, sizeof(router_building));
}

/* Appends METHOD to the comma-separated ALLOW (ALLOWLEN bytes), whose
 * length is *USED; a method that does not fit is left out. */
static void router_allow(char *allow, size_t allowlen, size_t *used, const char *method)
{
	size_t mlen = strlen(method);

	if (*used + mlen + 3 >= allowlen)
		return;
	if (*used > 0) {
		memcpy(allow + *used, ", ", 2);
		*used += 2;
	}
	memcpy(allow + *used, method, mlen + 1);
	*used += mlen;
}

/* Sets every one of the HTTP_MAX_PARAMS PARAMS to NULL, and their PLENS
 * to 0. */
static void router_params_clear(char *params[HTTP_MAX_PARAMS], size_t plens[HTTP_MAX_PARAMS])
{
	for (int k = 0; k < HTTP_MAX_PARAMS; k++) {
		params[k] = NULL;
		plens[k] = 0;
	}
}

/* Percent-decodes the N segments at STARTS (LENS bytes each) into PARAMS,
 * new strings (free()), their lengths in PLENS; 0, or -1 when one does not
 * decode, the ones before it then freed and set to NULL again. */
static int router_params_decode(const char *const starts[HTTP_MAX_PARAMS],
				const size_t lens[HTTP_MAX_PARAMS], int n,
				char *params[HTTP_MAX_PARAMS], size_t plens[HTTP_MAX_PARAMS])
{
	for (int k = 0; k < n; k++) {
		params[k] = router_decode(starts[k], lens[k], &plens[k]);
		if (params[k] == NULL) {
			for (int j = 0; j < k; j++) {
				free(params[j]);
				params[j] = NULL;
			}
			return -1;
		}
	}
	return 0;
}

const struct route *router_match(const char *method, const char *path,
				 char *params[HTTP_MAX_PARAMS], size_t plens[HTTP_MAX_PARAMS],
				 unsigned *status, char *allow, size_t allowlen)
{
	const char *starts[HTTP_MAX_PARAMS];
	size_t lens[HTTP_MAX_PARAMS];
	size_t used = 0;

	allow[0] = '\0';
	const struct router_set *added = atomic_load(&router_added);
	for (size_t i = 0; added != NULL && i < added->n; i++) {
		const struct route *r = added->r[i];
		if (strcmp(r->pattern, path) != 0)
			continue;
		if (strcmp(r->method, method) == 0) {
			router_params_clear(params, plens);
			return r;
		}
		router_allow(allow, allowlen, &used, r->method);
	}
	if (strcmp(method, "HEAD") == 0)
		method = "GET";
	for (size_t i = 0; i < router_table_n; i++) {
		const struct route *r = &router_table[i];
		int n;
		if (!router_pattern_match(r->pattern, path, starts, lens, &n))
			continue;
		if (strcmp(r->method, method) == 0) {
			router_params_clear(params, plens);
			if (router_params_decode(starts, lens, n, params, plens) != 0) {
				*status = 404;
				return NULL;
			}
			return r;
		}
		router_allow(allow, allowlen, &used, r->method);
		/* HEAD is served on every GET route of the table (above) */
		if (strcmp(r->method, "GET") == 0)
			router_allow(allow, allowlen, &used, "HEAD");
	}
	*status = used > 0 ? 405 : 404;
	return NULL;
}
