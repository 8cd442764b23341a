/*
 * Gateway, routes and submit: the route table (added to the router), the
 * header-phase check, and the submit on the HTTP thread: the record a
 * request names (token or derived key), its fingerprint, the replay cache,
 * then the claim queued. gateway_forward.c builds the forward once the
 * claim holds; gateway_finish.c writes the outcome.
 *
 * A job's life: gateway_submit() claims the token and suspends the
 * connection; gateway_claimed() (batcher thread) builds the job and hands it
 * to upstream.c; when the call ends a finisher writes the outcome, builds
 * the reply into the request, frees the job and resumes the connection.
 * After that nothing here touches the request.
 */
#include "gateway.h"
#include "gateway_int.h"

#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "answer.h"
#include "callerkey.h"
#include "config.h"
#include "fingerprint.h"
#include "headers.h"
#include "request.h"
#include "jsonmem.h"
#include "log.h"
#include "opcache.h"
#include "reqjson.h"
#include "retire.h"
#include "engine.h"

/* One config's routes. A table a reload replaced is freed once no request
 * begun before it runs (retire_add: a forward's request stays suspended
 * until the forward ends, so no forward holds one of its routes either);
 * when that is out of memory it stays, linked, until gateway_stop(). */
struct gateway_table {
	struct gateway_route *routes;
	size_t n_routes;
	struct gateway_table *prev;
};

static struct {
	const struct config *_Atomic cfg;
	struct gateway_table *tables;	       /* the newest first; the main thread's */
	struct gateway_table *_Atomic current; /* the newest, for any thread */
	int started;			       /* the upstream thread and the finishers */
} gw;

static void gateway_submit(struct request *req);

/* BLAKE2b-256 of "g:" METHOD "\n" PATH[?QUERY] "\n" BODY. */
static void gateway_fingerprint(const struct request *req, const char *query,
				uint8_t out[FINGERPRINT_BYTES])
{
	crypto_generichash_state st;

	crypto_generichash_init(&st, NULL, 0, FINGERPRINT_BYTES);
	crypto_generichash_update(&st, (const unsigned char *)"g:", 2);
	crypto_generichash_update(&st, (const unsigned char *)req->req_method,
				  strlen(req->req_method));
	crypto_generichash_update(&st, (const unsigned char *)"\n", 1);
	crypto_generichash_update(&st, (const unsigned char *)req->req_path, strlen(req->req_path));
	if (*query != '\0') {
		crypto_generichash_update(&st, (const unsigned char *)"?", 1);
		crypto_generichash_update(&st, (const unsigned char *)query, strlen(query));
	}
	crypto_generichash_update(&st, (const unsigned char *)"\n", 1);
	if (req->req_body_len > 0)
		crypto_generichash_update(&st, (const unsigned char *)req->req_body,
					  req->req_body_len);
	crypto_generichash_final(&st, out, FINGERPRINT_BYTES);
}

/* ---------------------------------------------------------------- submit */

/* What a gateway submit needs once its claim went through. */
struct gateway_pending {
	const struct gateway_route *gp_route;
	struct token gp_token;
	struct operation gp_op;
	char *gp_query;
	struct curl_slist *gp_headers; /* built on the request's thread */
};

static void gateway_pending_free(struct gateway_pending *p)
{
	if (p == NULL)
		return;
	free(p->gp_query);
	curl_slist_free_all(p->gp_headers);
	free(p);
}

/* Request thread: the forward could not start (out of memory). */
static void gateway_unavailable(struct request *req, void *arg)
{
	(void)arg;
	request_unavailable(req);
}

/* Batcher thread: the claim was granted (RES), and the forward starts; the
 * connection stays suspended until gateway_finish. RES NULL: the claim was
 * answered otherwise, on the request's thread (engine_claim). Returns 1:
 * this side resumes the connection. */
static int gateway_claimed(struct request *req, const struct claim_result *res, void *arg)
{
	struct gateway_pending *p = arg;
	int keep = 0;

	if (res != NULL) {
		struct gateway_job *j = gateway_job_new(req, p->gp_route, &p->gp_token, &p->gp_op,
							res, p->gp_query, &p->gp_headers,
							gw.cfg->max_body_bytes,
							gw.cfg->forward_margin_ms);
		keep = 1;
		if (j == NULL) {
			gateway_release(p->gp_route, p->gp_token.id, res->cr_attempt, req->req_id);
			http_resume_then(req, gateway_unavailable, NULL);
		} else {
			clock_gettime(CLOCK_MONOTONIC, &j->gj_sent);
			if (upstream_call(&j->gj_call) < 0) {
				/* stopping: resumed at once with 503 */
				j->gj_stopped = 1;
				gateway_finish(j);
			}
		}
	}
	gateway_pending_free(p);
	return keep;
}

/* What the header phase reads of every header: how many are named NAME
 * (NULL: none counted), the first one's value kept as req_h_route_key for
 * the submit, into *N; and the first of idemd's own headers spelt with '_'
 * into *ALIAS (looked for only when a name holds '_'). 0, or -1 (out of
 * memory). */
static int gateway_scan_headers(struct request *req, const char *name, int *n, const char **alias)
{
	struct headers_field *f;
	size_t nf;

	if (http_fields(req, 0, &f, &nf) < 0)
		return -1;
	for (size_t i = 0; i < nf; i++) {
		if (name != NULL && strcasecmp(f[i].hf_name, name) == 0 && (*n)++ == 0)
			req->req_h_route_key = f[i].hf_value;
		if (req->req_has_underscore && *alias == NULL && headers_is_alias(f[i].hf_name))
			*alias = f[i].hf_name;
	}
	free(f);
	return 0;
}

/* Header phase: what refuses a submit before its body is read. */
static int gateway_token_address(struct request *req, const struct gateway_route *gr,
				 struct token *t, struct operation *op);

static int gateway_check_headers(struct request *req)
{
	const struct gateway_route *gr = (const struct gateway_route *)req->req_route;
	int header_key = gr->gr_key == GATEWAY_KEY_HEADER;
	int n = header_key ? 0 : req->req_n_idempotency_key;
	const char *name = header_key ? gr->gr_key_arg : "Idempotency-Key";
	const char *alias = NULL;

	if ((header_key || req->req_has_underscore) &&
	    gateway_scan_headers(req, header_key ? name : NULL, &n, &alias) < 0) {
		request_unavailable(req);
		return -1;
	}
	if (gr->gr_key == GATEWAY_KEY_TOKEN || header_key) {
		if (n == 0) {
			const char *what = header_key ? "key" : "token";
			request_fail(req, 400, "idempotency_key_missing", "send the %s as %s: <%s>",
				     what, name, what);
			return -1;
		}
		if (n > 1) {
			request_fail(req, 400, "invalid_request", "send exactly one %s header",
				     name);
			return -1;
		}
	}
	if (alias != NULL) {
		request_fail(req, 400, "invalid_request",
			     "header %s is refused: idemd's own headers cannot be spelt with '_'",
			     alias);
		return -1;
	}
	/* no unauthenticated request holds a body budget: a token is verified
	 * (signature, tenant, operation) before any body byte is reserved, and
	 * the route's tenant shares the budget like an API key's */
	req->req_tenant_id = gr->gr_tenant_id;
	if (gr->gr_key == GATEWAY_KEY_TOKEN) {
		struct token t;
		struct operation op;
		if (gateway_token_address(req, gr, &t, &op) < 0)
			return -1;
	}
	return 0;
}

/* The record a token route's submit names: the verified token, for the
 * route's tenant and operation. The header phase verifies the token and
 * keeps it on the request, where the submit takes it. 0, or -1 after
 * replying. */
static int gateway_token_address(struct request *req, const struct gateway_route *gr,
				 struct token *t, struct operation *op)
{
	char text[TOKEN_MAX_CHARS + 1];
	int found;

	if (req->req_token == NULL) {
		/* gateway_check_headers() has seen exactly one Idempotency-Key */
		if (token_from_header(req->req_h_idempotency_key, text, sizeof(text)) < 0) {
			answer_problem(req, OUTCOME_TOKEN_MALFORMED, NULL);
			return -1;
		}
		if (engine_verify(req, text, t) < 0)
			return -1;
		req->req_token = malloc(sizeof(*req->req_token));
		if (req->req_token != NULL) /* else verified again at the submit */
			*req->req_token = *t;
	} else {
		*t = *req->req_token;
	}
	if (opcache_by_id(t->operation_id, op, &found) < 0) {
		request_unavailable(req);
		return -1;
	}
	if (!found || op->op_tenant_id != gr->gr_tenant_id ||
	    strcmp(op->op_name, gr->gr_cfg->operation) != 0) {
		answer_problem(req, OUTCOME_TOKEN_OTHER_OPERATION, NULL);
		return -1;
	}
	if (!headers_arg_ok(t->subject)) {
		request_fail(req, 400, "invalid_request",
			     "the token's subject cannot be forwarded as a header value");
		return -1;
	}
	return 0;
}

/* The submit's fingerprint as the route's "fingerprint" says: BYTES_FP,
 * the canonical JSON of the body, or none (*FP NULL); "auto" (the default,
 * the rule of the API and the clients: the same JSON meaning is the same
 * request) the canonical JSON of a JSON body, else BYTES_FP. 0, or -1
 * after replying. */
static int gateway_route_fingerprint(struct request *req, const struct gateway_route *gr,
				     const char *query, const uint8_t *bytes_fp, json_t **doc,
				     uint8_t *out, const uint8_t **fp)
{
	const char *mode = gr->gr_cfg->fingerprint;

	*fp = NULL;
	if (strcmp(mode, "none") == 0)
		return 0;
	if (strcmp(mode, "json") != 0 && strcmp(mode, "auto") != 0) {
		*fp = bytes_fp;
		return 0;
	}
	if (gateway_body_doc(req, doc) < 0)
		return -1;
	if (*doc == NULL && strcmp(mode, "auto") == 0) {
		*fp = bytes_fp;
		return 0;
	}
	if (*doc == NULL) {
		request_fail(req, 400, "invalid_request",
			     "this route fingerprints a JSON body: send one");
		return -1;
	}
	if (fingerprint_of_json(*doc, out) < 0) {
		request_unavailable(req);
		return -1;
	}
	if (strcmp(mode, "auto") == 0) {
		/* the query is part of the request too (the method and the path
		 * are the route's own) */
		crypto_generichash_state st;
		crypto_generichash_init(&st, NULL, 0, FINGERPRINT_BYTES);
		crypto_generichash_update(&st, (const unsigned char *)"a:", 2);
		crypto_generichash_update(&st, (const unsigned char *)query, strlen(query));
		crypto_generichash_update(&st, (const unsigned char *)"\n", 1);
		crypto_generichash_update(&st, out, FINGERPRINT_BYTES);
		crypto_generichash_final(&st, out, FINGERPRINT_BYTES);
	}
	*fp = out;
	return 0;
}

/* What the claim's forward needs, built on the request's thread from the
 * request's headers F (N of them): owned (gateway_pending_free()), taking
 * *QUERY (set to NULL), or NULL after replying 503. */
static struct gateway_pending *gateway_pending_new(struct request *req,
						   const struct gateway_route *gr,
						   const struct token *t,
						   const struct operation *op, char **query,
						   const struct headers_field *f, size_t n)
{
	struct gateway_pending *p = calloc(1, sizeof(*p));

	if (p == NULL) {
		request_unavailable(req);
		return NULL;
	}
	p->gp_route = gr;
	p->gp_token = *t;
	p->gp_op = *op;
	p->gp_query = *query;
	*query = NULL;
	p->gp_headers = gateway_request_headers(req, gr, t, f, n);
	if (p->gp_headers == NULL) {
		request_unavailable(req);
		gateway_pending_free(p);
		return NULL;
	}
	return p;
}

/* The request's headers into *F (N of them, owned: free()), read once for
 * a submit's scope and forward (*READ says they are): 0, or -1 after
 * replying 503. */
static int gateway_headers_once(struct request *req, struct headers_field **f, size_t *n, int *read)
{
	if (*read)
		return 0;
	if (http_fields(req, 0, f, n) < 0) {
		request_unavailable(req);
		return -1;
	}
	*read = 1;
	return 0;
}

static void gateway_submit(struct request *req)
{
	const struct gateway_route *gr = (const struct gateway_route *)req->req_route;
	char *query = NULL;
	uint8_t bytes_fp[FINGERPRINT_BYTES], json_fp[FINGERPRINT_BYTES];
	const uint8_t *fp;
	struct gateway_pending *p = NULL;
	struct token t;
	struct operation op;
	json_t *doc = NULL;
	struct headers_field *hf = NULL;
	size_t hn = 0;
	int hf_read = 0;

	req->req_no_if_match = !gr->gr_cfg->client_if_match;
	/* the route, not an API key, names the tenant */
	req->req_tenant_id = gr->gr_tenant_id;
	http_set_by(req, gr->gr_by);
	if (gateway_query(req, &query) < 0) {
		request_unavailable(req);
		goto done;
	}
	/* a derived key's scope reads the headers before the replay cache
	 * (a replay then costs no copy of them on other routes) */
	if (gr->gr_key != GATEWAY_KEY_TOKEN && gr->gr_cfg->n_scope_headers > 0 &&
	    gateway_headers_once(req, &hf, &hn, &hf_read) < 0)
		goto done;
	gateway_fingerprint(req, query, bytes_fp);
	if ((gr->gr_key == GATEWAY_KEY_TOKEN
		     ? gateway_token_address(req, gr, &t, &op)
		     : gateway_derived_address(req, gr, bytes_fp, hf, hn, &doc, &t, &op)) < 0 ||
	    engine_replay_alias(req, &t, bytes_fp, &gateway_replay) < 0 ||
	    gateway_route_fingerprint(req, gr, query, bytes_fp, &doc, json_fp, &fp) < 0)
		goto done;
	/* a duplicate with the same bytes is answered by them next time,
	 * without parsing its body (engine_replay_alias) */
	if (engine_claim_cached_as(req, &t, fp, fp == json_fp ? bytes_fp : NULL, &gateway_replay) <
	    0)
		goto done;
	if (gateway_headers_once(req, &hf, &hn, &hf_read) < 0 ||
	    (p = gateway_pending_new(req, gr, &t, &op, &query, hf, hn)) == NULL)
		goto done;
	/* the claim runs in a batch; gateway_claimed() goes on from there */
	if (engine_claim(req, &t, &op, fp, &gateway_replay, gateway_claimed, 1, p) == 0)
		p = NULL;
done:
	json_decref(doc);
	gateway_pending_free(p);
	free(hf);
	free(query);
}

/* ---------------------------------------------------------------- table */

/* The URL a route forwards to: the upstream as written when it has a path,
 * else the upstream with the route's path appended (before any query). */
static char *gateway_target(const struct config_route *r)
{
	const char *u = r->upstream, *auth = strstr(u, "://") + 3;
	size_t alen = strcspn(auth, "/?");
	const char *rest = auth + alen;
	size_t plen = strcspn(rest, "?");
	struct buf b = { 0 };

	if (plen > 1) /* a path other than "/" */
		return strdup(u);
	if (buf_add(&b, u, (size_t)(auth + alen - u)) < 0 || buf_str(&b, r->path) < 0 ||
	    buf_str(&b, rest + plen) < 0) {
		buf_free(&b);
		return NULL;
	}
	return b.b_data;
}

/* URL for log lines: any user:password in it replaced by "***". */
static void gateway_url_for_log(const char *url, char *out, size_t outlen)
{
	const char *auth = strstr(url, "://") + 3;
	size_t alen = strcspn(auth, "/?");
	const char *at = memchr(auth, '@', alen);

	if (at == NULL)
		snprintf(out, outlen, "%s", url);
	else
		snprintf(out, outlen, "%.*s***%s", (int)(auth - url), url, at);
}

static void gateway_table_free(struct gateway_table *t)
{
	for (size_t i = 0; t != NULL && i < t->n_routes; i++) {
		free(t->routes[i].gr_target);
		free(t->routes[i].gr_by);
	}
	if (t != NULL)
		free(t->routes);
	free(t);
}

/* Frees table ARG and the ones linked from it. */
static void gateway_tables_free(void *arg)
{
	struct gateway_table *t = arg;

	while (t != NULL) {
		struct gateway_table *prev = t->prev;
		gateway_table_free(t);
		t = prev;
	}
}

static void gateway_free_routes(void)
{
	router_clear_added();
	atomic_store(&gw.current, NULL);
	gateway_tables_free(gw.tables);
	gw.tables = NULL;
}

/* Whether a forward of TIMEOUT_MS, with MARGIN_MS, does not fit in a
 * lease of LEASE_SECONDS. */
static int gateway_route_outlives(long timeout_ms, long margin_ms, int lease_seconds)
{
#ifdef IDEMD_MUTANT_ROUTE_OUTLIVES_LEASE
	return 0;
#endif
	return timeout_ms + margin_ms > (long)lease_seconds * 1000;
}

const char *gateway_derived_route(uint32_t tenant_id, const char *operation)
{
	const struct gateway_table *t = atomic_load(&gw.current);
	for (size_t i = 0; t != NULL && i < t->n_routes; i++) {
		const struct gateway_route *gr = &t->routes[i];
		if (gr->gr_tenant_id == tenant_id && gr->gr_key != GATEWAY_KEY_TOKEN &&
		    strcmp(gr->gr_cfg->operation, operation) == 0)
			return gr->gr_by + 6; /* "route:" */
	}
	return NULL;
}

/* Route GR's key (gr_key) and its header name or JSON pointer (gr_key_arg)
 * from the config's KEY: token, body, header:NAME or json:/POINTER. */
static void gateway_route_key(struct gateway_route *gr, const char *key)
{
	gr->gr_key = strcmp(key, "token") == 0	       ? GATEWAY_KEY_TOKEN
		     : strcmp(key, "body") == 0	       ? GATEWAY_KEY_BODY
		     : strncmp(key, "header:", 7) == 0 ? GATEWAY_KEY_HEADER
						       : GATEWAY_KEY_JSON;
	gr->gr_key_arg = gr->gr_key == GATEWAY_KEY_HEADER ? key + 7
			 : gr->gr_key == GATEWAY_KEY_JSON ? key + 5
							  : NULL;
}

/* Resolves the tenant of R, routes[I], into GR and checks its operation:
 * one that does not exist yet is only warned about; one whose lease a
 * forward could outlive, or with a version_key on a route of derived keys,
 * is refused. 0, or -1 (logged). */
static int gateway_route_resolve(size_t i, const struct config_route *r, struct gateway_route *gr,
				 long margin_ms)
{
	struct operation op;
	int found;

	if (store_tenant_by_name(r->tenant, &gr->gr_tenant_id, &found) < 0) {
		log_error("gateway: the database is unavailable; cannot resolve route tenants");
		return -1;
	}
	if (!found) {
		log_error("gateway: routes[%zu] (%s %s) names tenant \"%s\", which does not "
			  "exist; create it with 'idemd tenant create %s' or fix the config",
			  i, r->method, r->path, r->tenant, r->tenant);
		return -1;
	}
	if (store_operation_get(gr->gr_tenant_id, r->operation, &op, &found) < 0) {
		log_error("gateway: the database is unavailable; cannot check route operations");
		return -1;
	}
	if (!found)
		log_warn("gateway: routes[%zu] (%s %s): tenant \"%s\" has no operation \"%s\" "
			 "yet; submits are refused until it is created with PUT "
			 "/v1/operations/%s",
			 i, r->method, r->path, r->tenant, r->operation, r->operation);
	else if (gateway_route_outlives(r->timeout_ms, margin_ms, op.op_lease_seconds)) {
		log_error("gateway: routes[%zu] (%s %s): its timeout_ms %ld and forward_margin_ms "
			  "%ld do not fit in operation \"%s\"'s lease_seconds %d: a "
			  "forward could outlive its claim and run beside the next one; "
			  "lower timeout_ms or raise lease_seconds (PUT /v1/operations/%s)",
			  i, r->method, r->path, r->timeout_ms, margin_ms, r->operation,
			  op.op_lease_seconds, r->operation);
		return -1;
	} else if (gr->gr_key != GATEWAY_KEY_TOKEN && op.op_has_version_key) {
		/* a derived key carries no subject: every submit would be 400 */
		log_error("gateway: routes[%zu] (%s %s): operation \"%s\" guards the "
			  "version counter \"%s\", which needs each submit's subject, and a "
			  "route with \"key\": \"%s\" has none; give the route \"key\": "
			  "\"token\" (a token carries its subject) or use an operation "
			  "without version_key",
			  i, r->method, r->path, r->operation, op.op_version_key, r->key);
		return -1;
	}
	return 0;
}

/* Whether every route of T still fits in its operation's lease, with
 * MARGIN_MS: 0, or -1 (logged). */
static int gateway_routes_fit(const struct gateway_table *t, long margin_ms)
{
	for (size_t i = 0; i < t->n_routes; i++) {
		const struct gateway_route *gr = &t->routes[i];
		struct operation op;
		int found;
		if (store_operation_get(gr->gr_tenant_id, gr->gr_cfg->operation, &op, &found) < 0) {
			log_error("gateway: the database is unavailable; cannot check route "
				  "operations");
			return -1;
		}
		if (found && gateway_route_outlives(gr->gr_cfg->timeout_ms, margin_ms,
						    op.op_lease_seconds)) {
			log_error("gateway: routes[%zu] (%s): operation \"%s\"'s lease_seconds %d "
				  "was just shortened below its timeout_ms %ld and "
				  "forward_margin_ms %ld",
				  i, gr->gr_by + 6, gr->gr_cfg->operation, op.op_lease_seconds,
				  gr->gr_cfg->timeout_ms, margin_ms);
			return -1;
		}
	}
	return 0;
}

/* Builds CFG's routes (tenants resolved, operations checked) and makes
 * them the ones requests match, in one swap; on failure nothing changes.
 * 0 or -1. */
static int gateway_load_routes(const struct config *cfg)
{
	struct gateway_table *t = calloc(1, sizeof(*t));

	if (t == NULL ||
	    (cfg->n_routes > 0 && (t->routes = calloc(cfg->n_routes, sizeof(*t->routes))) == NULL))
		goto fail;
	t->n_routes = cfg->n_routes;
	for (size_t i = 0; i < cfg->n_routes; i++) {
		const struct config_route *r = &cfg->routes[i];
		struct gateway_route *gr = &t->routes[i];
		char shown[256];

		gr->gr_route.method = r->method;
		gr->gr_route.pattern = r->path;
		gr->gr_route.handler = gateway_submit;
		gr->gr_route.auth = ROUTE_PUBLIC;
		gr->gr_route.headers = gateway_check_headers;
		gr->gr_route.opaque_body = 1;
		if (router_add(&gr->gr_route) < 0)
			goto fail;
		gr->gr_cfg = r;
		gateway_route_key(gr, r->key);
		if (asprintf(&gr->gr_by, "route:%s %s", r->method, r->path) < 0) {
			gr->gr_by = NULL;
			goto fail;
		}
		if ((gr->gr_target = gateway_target(r)) == NULL)
			goto fail;
		if (gateway_route_resolve(i, r, gr, cfg->forward_margin_ms) < 0)
			goto fail;
		gateway_url_for_log(gr->gr_target, shown, sizeof(shown));
		log_info("gateway: %s %s -> %s (tenant %s, operation %s)", r->method, r->path,
			 shown, r->tenant, r->operation);
	}
	/* the needs first, then the leases once more: a lease shortened
	 * between the check above and the needs' write is seen here */
	if (gateway_needs_publish(t->routes, t->n_routes, cfg->forward_margin_ms) < 0 ||
	    gateway_routes_fit(t, cfg->forward_margin_ms) < 0 || router_publish() < 0) {
		const struct gateway_table *cur = atomic_load(&gw.current);
		if (cur != NULL && gateway_needs_publish(cur->routes, cur->n_routes,
							 gw.cfg->forward_margin_ms) < 0)
			log_warn("gateway: the running routes' lease needs stay as last written");
		goto fail;
	}
	struct gateway_table *old = gw.tables;
	gw.tables = t;
	atomic_store(&gw.current, t);
	if (old != NULL && retire_add(gateway_tables_free, old) < 0)
		t->prev = old;
	return 0;
fail:
	router_discard();
	gateway_table_free(t);
	return -1;
}

/* ---------------------------------------------------------------- start, stop */

int gateway_start(const struct config *cfg)
{
	gw.cfg = cfg;
	if (cfg->n_routes == 0)
		return 0;
	if (gateway_load_routes(cfg) < 0 || upstream_start() < 0 || gateway_finish_start() < 0)
		goto fail;
	gw.started = 1;
	return 0;
fail:
	gateway_stop();
	return -1;
}

int gateway_reload(const struct config *cfg)
{
	if (gateway_load_routes(cfg) < 0)
		return -1;
	gw.cfg = cfg;
	/* the first routes of a process that started without any */
	if (!gw.started && cfg->n_routes > 0) {
		if (upstream_start() < 0 || gateway_finish_start() < 0) {
			log_error("gateway: cannot start the upstream thread for the new routes");
			return -1;
		}
		gw.started = 1;
	}
	return 0;
}

void gateway_drain(void)
{
	/* every call ends, and with it is queued for the finishers */
	upstream_drain();
	gateway_finish_stop();
}

void gateway_stop(void)
{
	gateway_drain();
	upstream_stop();
	gateway_needs_drop();
	gateway_free_routes();
}
