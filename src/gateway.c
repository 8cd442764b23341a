/*
 * Gateway: route table, token checks and claim on the HTTP thread, the
 * request sent upstream (upstream.c runs it), and the outcome (store or
 * release, reply, resume) on the finisher threads.
 *
 * A job's life: gateway_submit() claims the token, builds the job and
 * suspends the connection; the upstream thread runs the call and hands the
 * job to a finisher, which writes the outcome, builds the reply into the
 * request, frees the job and resumes the connection. After that nothing
 * here touches the request.
 */
#include "gateway.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "batcher.h"
#include "callerkey.h"
#include "config.h"
#include "fingerprint.h"
#include "headers.h"
#include "http.h"
#include "log.h"
#include "metrics.h"
#include "opcache.h"
#include "problem.h"
#include "replaycache.h"
#include "reqjson.h"
#include "router.h"
#include "store.h"
#include "token.h"
#include "tokenreq.h"
#include "upstream.h"

#define GATEWAY_FINISHERS 4
#define GATEWAY_LEASE_MARGIN_MS 500
#define GATEWAY_MIN_TIMEOUT_MS 100

/* Where a route's submits get their key (config "key"). */
enum gateway_key { GATEWAY_KEY_TOKEN, GATEWAY_KEY_HEADER, GATEWAY_KEY_JSON, GATEWAY_KEY_BODY };

struct gateway_route {
	struct route gr_route;             /* first member: handlers get &gr_route */
	const struct config_route *gr_cfg; /* borrowed from the config */
	uint32_t gr_tenant_id;
	char *gr_target;                   /* URL the request goes to, before its query */
	enum gateway_key gr_key;
	const char *gr_key_arg;            /* the header name or JSON pointer, in gr_cfg */
	char *gr_by;                       /* "route:METHOD path", for the audit trail */
};

/* A growable byte buffer (NUL-terminated when non-empty). */
struct gateway_buf {
	char *gb_data;
	size_t gb_len, gb_cap;
};

struct gateway_job {
	struct upstream_call gj_call;      /* first member: the done callback gets it */
	struct gateway_job *gj_next;       /* in the finishers' queue */
	struct request *gj_req;            /* borrowed; suspended until the job ends */
	const struct gateway_route *gj_route;
	uint8_t gj_token_id[TOKEN_ID_BYTES];
	int gj_attempt;
	int gj_retention_seconds;
	int gj_audit_seconds;       /* how long its audit events are kept */
	char *gj_url;
	int gj_stopped;                    /* refused: the gateway is stopping */
	struct timespec gj_sent;           /* CLOCK_MONOTONIC: the forward's start */
	/* storing a final answer (gateway_store) */
	struct batcher_job gj_bj;
	struct stored_response gj_resp;    /* headers owned, body borrowed from gj_call */
	struct complete_args gj_cargs;
	struct complete_result gj_cres;
};

static struct {
	const struct config *cfg;
	struct gateway_route *routes;
	size_t n_routes;
	pthread_mutex_t lock;
	pthread_cond_t done_cond;
	struct gateway_job *done_head, *done_tail; /* for the finishers */
	int finishers_stop;
	pthread_t finishers[GATEWAY_FINISHERS];
	int n_finishers;
} gw = { .lock = PTHREAD_MUTEX_INITIALIZER, .done_cond = PTHREAD_COND_INITIALIZER };

static void gateway_submit(struct request *req);

/* ---------------------------------------------------------------- headers */

/* Whether the upstream's header LNAME (lower case) is kept with the answer:
 * Content-Type and Content-Encoding always (the body means nothing without
 * them), plus the route's store_headers. */
static int gateway_keeps(const void *arg, const char *lname)
{
	const struct gateway_route *gr = arg;

	if (headers_never_stored(lname))
		return 0;
	if (strcmp(lname, "content-type") == 0 || strcmp(lname, "content-encoding") == 0)
		return 1;
	for (size_t i = 0; i < gr->gr_cfg->n_store_headers; i++)
		if (strcmp(lname, gr->gr_cfg->store_headers[i]) == 0)
			return 1;
	return 0;
}

static int gateway_buf_add(struct gateway_buf *b, const void *data, size_t len)
{
	if (b->gb_len + len + 1 > b->gb_cap) {
		size_t cap = b->gb_cap ? b->gb_cap : 256;
		while (cap < b->gb_len + len + 1)
			cap *= 2;
		char *p = realloc(b->gb_data, cap);
		if (p == NULL)
			return -1;
		b->gb_data = p;
		b->gb_cap = cap;
	}
	memcpy(b->gb_data + b->gb_len, data, len);
	b->gb_len += len;
	b->gb_data[b->gb_len] = '\0';
	return 0;
}

static int gateway_buf_str(struct gateway_buf *b, const char *s)
{
	return gateway_buf_add(b, s, strlen(s));
}

static void gateway_client_ip(struct MHD_Connection *conn, char *out, size_t outlen)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);

	snprintf(out, outlen, "unknown");
	if (ci == NULL || ci->client_addr == NULL)
		return;
	const struct sockaddr *sa = ci->client_addr;
	if (sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, out,
			  (socklen_t)outlen);
	else if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, out,
			  (socklen_t)outlen);
}

/* Gathers the request's headers into a growing array. */
struct gateway_fields {
	struct headers_field *f;
	size_t n, cap;
	int failed;
};

static enum MHD_Result gateway_field_cb(void *cls, enum MHD_ValueKind kind, const char *key,
					const char *value)
{
	struct gateway_fields *g = cls;

	(void)kind;
	if (g->n == g->cap) {
		size_t cap = g->cap ? 2 * g->cap : 32;
		struct headers_field *p = realloc(g->f, cap * sizeof(*p));
		if (p == NULL) {
			g->failed = 1;
			return MHD_NO;
		}
		g->f = p;
		g->cap = cap;
	}
	g->f[g->n].hf_name = key;
	g->f[g->n].hf_value = value != NULL ? value : "";
	g->n++;
	return MHD_YES;
}

/* The headers sent upstream (headers_forward): a new list, or NULL. */
static struct curl_slist *gateway_request_headers(struct request *req,
						  const struct gateway_route *gr,
						  const struct token *t)
{
	struct gateway_fields g = { NULL, 0, 0, 0 };
	struct curl_slist *list = NULL;
	char hex[2 * TOKEN_ID_BYTES + 3], ip[INET6_ADDRSTRLEN + 1];

	MHD_get_connection_values(req->req_conn, MHD_HEADER_KIND, gateway_field_cb, &g);
	if (gr->gr_key == GATEWAY_KEY_TOKEN) {
		token_id_hex(t->id, hex);
	} else {
		/* a derived key's record id travels as an RFC 8941 sf-string */
		hex[0] = '"';
		token_id_hex(t->id, hex + 1);
		memcpy(hex + 1 + 2 * TOKEN_ID_BYTES, "\"", 2);
	}
	gateway_client_ip(req->req_conn, ip, sizeof(ip));
	struct headers_forward_args a = {
		.fa_token_id = hex, .fa_subject = t->subject_len > 0 ? t->subject : NULL,
		.fa_client_ip = ip,
		.fa_request_id = req->req_id, .fa_trust_forwarded = gr->gr_cfg->trust_forwarded,
	};
	if (!g.failed && headers_forward(g.f, g.n, &a, &list) != HEADERS_OK)
		list = NULL;
	free(g.f);
	return list;
}

/* ---------------------------------------------------------------- query */

/*
 * Appends S, an argument as libmicrohttpd hands it over (not percent-decoded,
 * http.c installs no unescaper, but with '+' turned into ' '), restoring the
 * text as sent: ' ' back to '+'; bytes a request line cannot carry raw are
 * percent-encoded for safety.
 */
static int gateway_query_text(struct gateway_buf *b, const char *s)
{
	static const char hexd[] = "0123456789ABCDEF";

	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;
		char enc[3] = { '%', hexd[c >> 4], hexd[c & 15] };
		int rc;
		if (c == ' ')
			rc = gateway_buf_add(b, "+", 1);
		else if (c > 0x20 && c < 0x7f)
			rc = gateway_buf_add(b, s, 1);
		else
			rc = gateway_buf_add(b, enc, 3);
		if (rc < 0)
			return -1;
	}
	return 0;
}

struct gateway_query {
	struct gateway_buf q;
	int failed;
};

static enum MHD_Result gateway_query_cb(void *cls, enum MHD_ValueKind kind,
					const char *key, const char *value)
{
	struct gateway_query *g = cls;

	(void)kind;
	if ((g->q.gb_len > 0 && gateway_buf_str(&g->q, "&") < 0) || gateway_query_text(&g->q, key) < 0 ||
	    (value != NULL && (gateway_buf_str(&g->q, "=") < 0 || gateway_query_text(&g->q, value) < 0)))
		g->failed = 1;
	return MHD_YES;
}

/*
 * The request's query string rebuilt from libmicrohttpd's arguments (it
 * keeps no raw copy): into *OUT as a new string ("" when there is none).
 * 0 or -1.
 */
static int gateway_query(struct request *req, char **out)
{
	struct gateway_query g = { { 0 }, 0 };

	MHD_get_connection_values(req->req_conn, MHD_GET_ARGUMENT_KIND, gateway_query_cb, &g);
	if (g.failed) {
		free(g.q.gb_data);
		return -1;
	}
	*out = g.q.gb_data != NULL ? g.q.gb_data : strdup("");
	return *out != NULL ? 0 : -1;
}

/* ---------------------------------------------------------------- replies */

/* Answers with a stored (or about to be stored) response R. */
/* The stored headers of a response, read without jansson when they are
 * simple (reqjson_flat_each): at most GATEWAY_FAST_HEADERS string members. */
#define GATEWAY_FAST_HEADERS 16
struct gateway_fast_headers {
	struct reqjson_member fh_m[GATEWAY_FAST_HEADERS];
	size_t fh_n;
};

static int gateway_fast_header(void *arg, const struct reqjson_member *m)
{
	struct gateway_fast_headers *h = arg;

	if (!m->rm_is_string || h->fh_n == GATEWAY_FAST_HEADERS || m->rm_name_len > 128 ||
	    m->rm_len > 8192)
		return 0;
	h->fh_m[h->fh_n++] = *m;
	return 1;
}

/* Adds header NAME: VALUE (not NUL-terminated, at most 128 and 8192
 * bytes: gateway_fast_header) to the reply unless it may not be replayed
 * (a record stored before that rule); 1 if it is Content-Type. */
static int gateway_add_header(struct request *req, const char *name, size_t name_len,
			      const char *value, size_t value_len)
{
	char n[129], v[8193];

	memcpy(n, name, name_len);
	n[name_len] = '\0';
	memcpy(v, value, value_len);
	v[value_len] = '\0';
	if (!headers_is_token(n, name_len) || !headers_value_ok(v, value_len) ||
	    headers_never_stored(n))
		return 0;
	MHD_add_response_header(req->rep_response, n, v);
	return strcasecmp(n, "content-type") == 0;
}

static void gateway_reply_response(struct request *req, const struct stored_response *r,
				   const char *replayed)
{
	const char *stored = r->sr_headers ? r->sr_headers : "{}";
	struct gateway_fast_headers fast = { .fh_n = 0 };
	int has_type = 0;

	http_reply_bytes(req, (unsigned)r->sr_status, NULL, r->sr_body, r->sr_body_len);
	if (req->rep_response == NULL)
		return;
	if (reqjson_flat_each(stored, strlen(stored), gateway_fast_header, &fast)) {
		for (size_t i = 0; i < fast.fh_n; i++)
			has_type |= gateway_add_header(req, fast.fh_m[i].rm_name,
						       fast.fh_m[i].rm_name_len,
						       fast.fh_m[i].rm_str, fast.fh_m[i].rm_len);
	} else {
		const char *name;
		json_t *v, *headers = json_loads(stored, 0, NULL);
		json_object_foreach(headers, name, v) {
			if (json_is_string(v) && strlen(name) <= 128 && json_string_length(v) <= 8192)
				has_type |= gateway_add_header(req, name, strlen(name),
							       json_string_value(v),
							       json_string_length(v));
		}
		json_decref(headers);
	}
	if (!has_type && r->sr_is_json)
		MHD_add_response_header(req->rep_response, "Content-Type", "application/json");
	if (replayed != NULL)
		http_set_header(req, "Idempotent-Replayed", replayed);
}

static void gateway_replay(struct request *req, const struct stored_response *r,
			   const struct token *t)
{
	(void)t;
	gateway_reply_response(req, r, "true");
}

/* ---------------------------------------------------------------- jobs */

static void gateway_job_free(struct gateway_job *j)
{
	if (j == NULL)
		return;
	free(j->gj_url);
	curl_slist_free_all(j->gj_call.uc_headers);
	upstream_call_clear(&j->gj_call);
	free(j);
}

static int64_t gateway_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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

static void gateway_on_done(struct upstream_call *c);

/* Builds the job for a request that now holds the claim RES; takes
 * *HEADERS (set to NULL). NULL on OOM. Touches no libmicrohttpd state: it
 * runs on a batcher thread while the connection is suspended. */
static struct gateway_job *gateway_job_new(struct request *req, const struct gateway_route *gr,
					   const struct token *t, const struct operation *op,
					   const struct claim_result *res, const char *query,
					   struct curl_slist **headers)
{
	struct gateway_job *j = calloc(1, sizeof(*j));
	struct gateway_buf url = { 0 };

	if (j == NULL)
		return NULL;
	j->gj_req = req;
	j->gj_route = gr;
	memcpy(j->gj_token_id, t->id, TOKEN_ID_BYTES);
	j->gj_attempt = res->cr_attempt;
	j->gj_retention_seconds = op->op_retention_seconds;
	j->gj_audit_seconds = store_audit_seconds(op);
	if (gateway_buf_str(&url, gr->gr_target) < 0 ||
	    (*query != '\0' && (gateway_buf_str(&url, strchr(gr->gr_target, '?') ? "&" : "?") < 0 ||
				gateway_buf_str(&url, query) < 0))) {
		free(url.gb_data);
		free(j);
		return NULL;
	}
	j->gj_url = url.gb_data;

	struct upstream_call *c = &j->gj_call;
	c->uc_method = req->req_method;
	c->uc_url = j->gj_url;
	c->uc_body = req->req_body;
	c->uc_body_len = req->req_body_len;
	c->uc_headers = *headers;
	*headers = NULL;
	c->uc_connect_timeout_ms = gr->gr_cfg->connect_timeout_ms;
	/* a forward never outlives its lease: past it, a duplicate may take over */
	int64_t left = res->cr_lease_expires_at - gateway_now_ms() - GATEWAY_LEASE_MARGIN_MS;
	c->uc_timeout_ms = gr->gr_cfg->timeout_ms;
	if (left < c->uc_timeout_ms)
		c->uc_timeout_ms = left > GATEWAY_MIN_TIMEOUT_MS ? (long)left : GATEWAY_MIN_TIMEOUT_MS;
	c->uc_max_body = gw.cfg->max_body_bytes;
	c->uc_keep = gateway_keeps;
	c->uc_keep_arg = gr;
	c->uc_done = gateway_on_done;
	if (c->uc_headers == NULL) {
		gateway_job_free(j);
		return NULL;
	}
	return j;
}

/* Gives the claim back so that the same token can be submitted again. */
static void gateway_release(const struct gateway_route *gr, const uint8_t *token_id,
			    int attempt, const char *request_id)
{
	enum release_outcome outcome;

	if (store_release(gr->gr_tenant_id, token_id, attempt, gr->gr_by, &outcome) < 0)
		log_warn("gateway: request %s: the claim could not be released (database "
			 "unavailable); it frees itself when its lease ends", request_id);
	else if (outcome != RELEASE_DONE)
		log_warn("gateway: request %s: attempt %d no longer held the claim", request_id,
			 attempt);
	else
		metrics_add(METRIC_RELEASES, 1);
}

static void gateway_job_release(const struct gateway_job *j)
{
	gateway_release(j->gj_route, j->gj_token_id, j->gj_attempt, j->gj_req->req_id);
}

/* Request thread, after the batch with the job's complete committed:
 * answers with what was stored, then frees the job. */
static void gateway_store_answer(struct request *req, void *arg)
{
	struct gateway_job *j = arg;
	struct complete_result *res = &j->gj_cres;

	if (j->gj_bj.bj_rc < 0) {
		/* the upstream acted but nothing is stored: the claim stays until
		 * its lease ends, then a retry forwards again with the same
		 * Idempotency-Key, which the upstream must recognise */
		log_warn("gateway: request %s: the upstream answered %ld but the outcome could "
			 "not be stored (database unavailable)", req->req_id, j->gj_call.uc_status);
		metrics_add(METRIC_DB_UNAVAILABLE, 1);
		problem_unavailable(req);
		goto done;
	}
	switch (res->cpr_outcome) {
	case COMPLETE_STORED:
	case COMPLETE_ALREADY:
		if (res->cpr_outcome == COMPLETE_STORED)
			metrics_add(METRIC_COMPLETIONS, 1);
		replaycache_put(j->gj_route->gr_tenant_id, j->gj_token_id,
				res->cpr_has_fingerprint ? res->cpr_fingerprint : NULL,
				&res->cpr_stored, res->cpr_expires_at);
		gateway_reply_response(req, &res->cpr_stored, "false");
		break;
	case COMPLETE_LEASE_LOST:
		problem_reply(req, 409, "lease_lost",
			      "the lease ran out and a newer attempt took the token over");
		break;
	case COMPLETE_NOT_IN_PROGRESS:
		problem_reply(req, 409, "not_in_progress", "the token is no longer claimed by attempt %d",
			      j->gj_attempt);
		break;
	}
done:
	free(j->gj_resp.sr_headers);
	store_response_free(&res->cpr_stored);
	gateway_job_free(j);
}

/* Batcher thread: the complete has its answer; resume at once. */
static void gateway_stored(struct batcher_job *bj)
{
	struct gateway_job *j = bj->bj_arg;

	http_resume_then(j->gj_req, gateway_store_answer, j);
}

/* The upstream answered 2xx-4xx: queue the complete (in a batch with other
 * completes); gateway_store_answer() answers once it committed. Returns 1
 * when queued (the job is no longer the caller's), 0 after answering. */
static int gateway_store(struct gateway_job *j)
{
	const struct upstream_call *c = &j->gj_call;

	j->gj_resp.sr_status = (int)c->uc_status;
	j->gj_resp.sr_headers = json_dumps(c->uc_resp_headers, JSON_COMPACT | JSON_SORT_KEYS);
	j->gj_resp.sr_body = (unsigned char *)c->uc_resp_body;
	j->gj_resp.sr_body_len = c->uc_resp_len;
	if (j->gj_resp.sr_headers == NULL) {
		gateway_job_release(j);
		problem_unavailable(j->gj_req);
		return 0;
	}
	j->gj_cargs.tenant_id = j->gj_route->gr_tenant_id;
	j->gj_cargs.token_id = j->gj_token_id;
	j->gj_cargs.attempt = j->gj_attempt;
	j->gj_cargs.resp = &j->gj_resp;
	j->gj_cargs.retention_seconds = j->gj_retention_seconds;
	j->gj_cargs.audit_seconds = j->gj_audit_seconds;
	j->gj_cargs.by = j->gj_route->gr_by;
	j->gj_bj.bj_kind = BATCHER_COMPLETE;
	j->gj_bj.bj_complete = &j->gj_cargs;
	j->gj_bj.bj_complete_result = &j->gj_cres;
	j->gj_bj.bj_done = gateway_stored;
	j->gj_bj.bj_arg = j;
	batcher_submit(&j->gj_bj);
	return 1;
}

/* Every outcome but a final answer gives the claim back, so the client may
 * retry with the same token; a 5xx is passed through unstored. */
static void gateway_not_final(struct gateway_job *j)
{
	const struct upstream_call *c = &j->gj_call;
	struct request *req = j->gj_req;

	gateway_job_release(j);
	if (j->gj_stopped) {
		problem_unavailable(req);
		return;
	}
	switch (c->uc_result) {
	case UPSTREAM_ANSWERED:
		/* an answer release_on names (5xx by default): passed through */
		if (c->uc_status >= 200 && c->uc_status <= 599) {
			struct stored_response pass = { (int)c->uc_status, NULL,
				(unsigned char *)c->uc_resp_body, c->uc_resp_len, 0 };
			pass.sr_headers = json_dumps(c->uc_resp_headers, JSON_COMPACT);
			gateway_reply_response(req, &pass, "false");
			free(pass.sr_headers);
			return;
		}
		problem_reply(req, 502, "upstream_invalid", "the upstream answered with status %ld",
			      c->uc_status);
		break;
	case UPSTREAM_INVALID:
		problem_reply(req, 502, "upstream_invalid",
			      "the upstream's answer has a malformed header line");
		break;
	case UPSTREAM_TOO_LARGE:
		problem_reply(req, 502, "upstream_invalid", "the upstream's answer exceeds %zu bytes",
			      c->uc_max_body);
		break;
	case UPSTREAM_UNREACHABLE:
		problem_reply(req, 502, "upstream_unavailable", "the upstream could not be reached");
		break;
	case UPSTREAM_FAILED:
		problem_reply(req, 502, "upstream_unavailable",
			      "the connection to the upstream failed before it answered");
		break;
	case UPSTREAM_TIMEOUT:
		problem_reply(req, 504, "upstream_timeout", "the upstream did not answer within %ld ms",
			      c->uc_timeout_ms);
		break;
	}
	/* the claim is given back: the same token may be submitted again */
	http_set_header(req, "Retry-After", "1");
	log_warn("gateway: request %s: %s %s: %s (%s)", req->req_id, req->req_method,
		 req->req_path, c->uc_error, c->uc_sent ? "request sent" : "request not sent");
}

/* Writes the outcome of a finished (or refused) forward and resumes. */
static void gateway_finish(struct gateway_job *j)
{
	const struct upstream_call *c = &j->gj_call;
	struct request *req = j->gj_req;

	if (!j->gj_stopped && c->uc_result == UPSTREAM_ANSWERED && c->uc_status >= 200 &&
	    c->uc_status <= 599 && !j->gj_route->gr_cfg->release_on[c->uc_status]) {
		if (gateway_store(j) == 1)
			return;
	} else {
		gateway_not_final(j);
	}
	gateway_job_free(j);
	http_resume(req);
}

/* ---------------------------------------------------------------- finishers */

/* Upstream thread: queues the ended call's job for a finisher. */
static void gateway_on_done(struct upstream_call *c)
{
	struct gateway_job *j = (struct gateway_job *)(void *)c;
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	metrics_upstream(&j->gj_route->gr_route, (int)c->uc_result, c->uc_status,
			 (double)(now.tv_sec - j->gj_sent.tv_sec) +
				 (double)(now.tv_nsec - j->gj_sent.tv_nsec) / 1e9);
	pthread_mutex_lock(&gw.lock);
	j->gj_next = NULL;
	if (gw.done_tail != NULL)
		gw.done_tail->gj_next = j;
	else
		gw.done_head = j;
	gw.done_tail = j;
	pthread_cond_signal(&gw.done_cond);
	pthread_mutex_unlock(&gw.lock);
}

static void *gateway_finisher(void *arg)
{
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&gw.lock);
		while (gw.done_head == NULL && !gw.finishers_stop)
			pthread_cond_wait(&gw.done_cond, &gw.lock);
		struct gateway_job *j = gw.done_head;
		if (j != NULL) {
			gw.done_head = j->gj_next;
			if (gw.done_head == NULL)
				gw.done_tail = NULL;
		}
		pthread_mutex_unlock(&gw.lock);
		if (j == NULL)
			return NULL;
		gateway_finish(j);
	}
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

/* Batcher thread: the claim is answered. When it succeeded, the forward
 * starts (the connection stays suspended until gateway_finish). */
static int gateway_claimed(struct request *req, const struct claim_result *res, void *arg)
{
	struct gateway_pending *p = arg;
	int keep = 0;

	if (res != NULL) {
		struct gateway_job *j = gateway_job_new(req, p->gp_route, &p->gp_token, &p->gp_op,
							res, p->gp_query, &p->gp_headers);
		if (j == NULL) {
			gateway_release(p->gp_route, p->gp_token.id, res->cr_attempt, req->req_id);
			problem_unavailable(req);
		} else {
			keep = 1;
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

/* Header phase: what refuses a submit before its body is read. */
static enum MHD_Result gateway_alias_cb(void *cls, enum MHD_ValueKind kind, const char *key,
					const char *value)
{
	const char **alias = cls;

	(void)kind;
	(void)value;
	if (headers_is_alias(key)) {
		*alias = key;
		return MHD_NO;
	}
	return MHD_YES;
}

/* Counts the headers named as cls->name (case-insensitive). */
struct gateway_count {
	const char *name;
	const char *value; /* the first */
	int n;
};

static enum MHD_Result gateway_count_cb(void *cls, enum MHD_ValueKind kind, const char *key,
					const char *value)
{
	struct gateway_count *c = cls;

	(void)kind;
	if (strcasecmp(key, c->name) == 0 && c->n++ == 0)
		c->value = value != NULL ? value : "";
	return MHD_YES;
}

static int gateway_check_headers(struct request *req)
{
	const struct gateway_route *gr = (const struct gateway_route *)req->req_route;
	const char *alias = NULL;
	int n = req->req_n_idempotency_key;
	const char *name = "Idempotency-Key";

	if (gr->gr_key == GATEWAY_KEY_HEADER) {
		struct gateway_count c = { gr->gr_key_arg, NULL, 0 };
		MHD_get_connection_values(req->req_conn, MHD_HEADER_KIND, gateway_count_cb, &c);
		n = c.n;
		name = gr->gr_key_arg;
		req->req_h_route_key = c.value; /* the one value, read by the submit */
	}
	if (gr->gr_key == GATEWAY_KEY_TOKEN || gr->gr_key == GATEWAY_KEY_HEADER) {
		if (n == 0) {
			problem_reply(req, 400, "idempotency_key_missing",
				      "send the %s as %s: <%s>",
				      gr->gr_key == GATEWAY_KEY_TOKEN ? "token" : "key", name,
				      gr->gr_key == GATEWAY_KEY_TOKEN ? "token" : "key");
			return -1;
		}
		if (n > 1) {
			problem_reply(req, 400, "invalid_request", "send exactly one %s header", name);
			return -1;
		}
	}
	if (req->req_has_underscore) {
		MHD_get_connection_values(req->req_conn, MHD_HEADER_KIND, gateway_alias_cb, &alias);
		if (alias != NULL) {
			problem_reply(req, 400, "invalid_request",
				      "header %s is refused: idemd's own headers cannot be spelt "
				      "with '_'", alias);
			return -1;
		}
	}
	return 0;
}

/* The record a token route's submit names: the verified token, for the
 * route's tenant and operation. 0, or -1 after replying. */
static int gateway_token_address(struct request *req, const struct gateway_route *gr,
				 struct token *t, struct operation *op)
{
	char text[TOKEN_MAX_CHARS + 1];
	int found;

	/* gateway_check_headers() has seen exactly one Idempotency-Key */
	if (token_from_header(req->req_h_idempotency_key, text, sizeof(text)) < 0) {
		problem_reply(req, 400, "token_malformed", "the token is not a valid idemd token");
		return -1;
	}
	if (tokenreq_verify(req, text, t) < 0)
		return -1;
	if (opcache_by_id(t->operation_id, op, &found) < 0) {
		problem_unavailable(req);
		return -1;
	}
	if (!found || op->op_tenant_id != gr->gr_tenant_id ||
	    strcmp(op->op_name, gr->gr_cfg->operation) != 0) {
		problem_reply(req, 403, "token_scope_mismatch",
			      "the token is for another operation than this route's");
		return -1;
	}
	if (!headers_arg_ok(t->subject)) {
		problem_reply(req, 400, "invalid_request",
			      "the token's subject cannot be forwarded as a header value");
		return -1;
	}
	return 0;
}

/* Hashes the name and every value of each of the route's scope_headers. */
struct gateway_scope {
	crypto_generichash_state st;
	const char *name;
};

static enum MHD_Result gateway_scope_cb(void *cls, enum MHD_ValueKind kind, const char *key,
					const char *value)
{
	struct gateway_scope *sc = cls;

	(void)kind;
	if (strcasecmp(key, sc->name) == 0 && value != NULL)
		crypto_generichash_update(&sc->st, (const unsigned char *)value, strlen(value) + 1);
	return MHD_YES;
}

static void gateway_scope(struct request *req, const struct gateway_route *gr, uint8_t out[32])
{
	struct gateway_scope sc;

	crypto_generichash_init(&sc.st, NULL, 0, 32);
	for (size_t i = 0; i < gr->gr_cfg->n_scope_headers; i++) {
		sc.name = gr->gr_cfg->scope_headers[i];
		crypto_generichash_update(&sc.st, (const unsigned char *)sc.name, strlen(sc.name) + 1);
		MHD_get_connection_values(req->req_conn, MHD_HEADER_KIND, gateway_scope_cb, &sc);
		crypto_generichash_update(&sc.st, (const unsigned char *)"\n", 1);
	}
	crypto_generichash_final(&sc.st, out, 32);
}

/*
 * The record a derived-key route's submit names: the key from the header,
 * the JSON member or the request's hash (BYTES_FP), scoped by the route's
 * scope_headers, under the route's operation. *DOC receives the parsed
 * JSON body when one was parsed (the caller decrefs). 0, or -1 after
 * replying.
 */
static int gateway_derived_address(struct request *req, const struct gateway_route *gr,
				   const uint8_t *bytes_fp, json_t **doc, struct token *t,
				   struct operation *op)
{
	char key[CALLERKEY_MAX + 2];
	uint8_t scope[32];
	int found, n = -1;

	if (opcache_by_name(gr->gr_tenant_id, gr->gr_cfg->operation, op, &found) < 0) {
		problem_unavailable(req);
		return -1;
	}
	if (!found) {
		problem_reply(req, 422, "operation_unknown", "the route's operation does not exist yet");
		return -1;
	}
	switch (gr->gr_key) {
	case GATEWAY_KEY_HEADER: {
		/* gateway_check_headers() has seen exactly one */
		const char *value = req->req_h_route_key;
		n = value != NULL ? callerkey_from_header(value, key, sizeof(key)) : -1;
		if (n == -1 && value != NULL) {
			problem_reply(req, 400, "idempotency_key_invalid",
				      "%s must be a key of 1 to %d visible ASCII characters, bare or "
				      "as a quoted string", gr->gr_key_arg, CALLERKEY_MAX);
			return -1;
		}
		break;
	}
	case GATEWAY_KEY_JSON:
		if (*doc == NULL && req->req_body_len > 0)
			*doc = json_loadb(req->req_body, req->req_body_len, JSON_REJECT_DUPLICATES, NULL);
		n = *doc != NULL ? callerkey_from_json(*doc, gr->gr_key_arg, key, sizeof(key)) : -1;
		break;
	case GATEWAY_KEY_BODY:
		for (size_t i = 0; i < FINGERPRINT_BYTES; i++)
			snprintf(key + 2 * i, 3, "%02x", bytes_fp[i]);
		n = 2 * FINGERPRINT_BYTES;
		break;
	case GATEWAY_KEY_TOKEN:
		break;
	}
	if (n == -1) {
		problem_reply(req, 400, "idempotency_key_missing", "the request carries no key at %s",
			      gr->gr_cfg->key);
		return -1;
	}
	if (n < 0 || !callerkey_valid(key, (size_t)n) || strlen(key) != (size_t)n) {
		problem_reply(req, 400, "idempotency_key_invalid",
			      "a key is 1 to %d characters of visible ASCII", CALLERKEY_MAX);
		return -1;
	}
	gateway_scope(req, gr, scope);
	callerkey_address(gr->gr_tenant_id, op, key, (size_t)n, scope, time(NULL), t);
	return 0;
}

/* The submit's fingerprint as the route's "fingerprint" says: BYTES_FP,
 * the canonical JSON of the body, or none (*FP NULL). 0, or -1 after
 * replying. */
static int gateway_route_fingerprint(struct request *req, const struct gateway_route *gr,
				     const uint8_t *bytes_fp, json_t **doc, uint8_t *out,
				     const uint8_t **fp)
{
	const char *mode = gr->gr_cfg->fingerprint;

	*fp = NULL;
	if (strcmp(mode, "none") == 0)
		return 0;
	if (strcmp(mode, "json") != 0) {
		*fp = bytes_fp;
		return 0;
	}
	if (*doc == NULL && req->req_body_len > 0)
		*doc = json_loadb(req->req_body, req->req_body_len, JSON_REJECT_DUPLICATES, NULL);
	if (*doc == NULL) {
		problem_reply(req, 400, "invalid_request",
			      "this route fingerprints a JSON body: send one");
		return -1;
	}
	if (fingerprint_of_json(*doc, out) < 0) {
		problem_unavailable(req);
		return -1;
	}
	*fp = out;
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

	req->req_no_if_match = !gr->gr_cfg->client_if_match;
	/* the route, not an API key, names the tenant */
	req->req_tenant_id = gr->gr_tenant_id;
	req->req_by = gr->gr_by;
	if (gateway_query(req, &query) < 0) {
		problem_unavailable(req);
		return;
	}
	gateway_fingerprint(req, query, bytes_fp);
	if ((gr->gr_key == GATEWAY_KEY_TOKEN ? gateway_token_address(req, gr, &t, &op)
	     : gateway_derived_address(req, gr, bytes_fp, &doc, &t, &op)) < 0 ||
	    gateway_route_fingerprint(req, gr, bytes_fp, &doc, json_fp, &fp) < 0)
		goto done;
	if (tokenreq_claim_cached(req, &t, fp, gateway_replay))
		goto done;
	p = calloc(1, sizeof(*p));
	if (p == NULL) {
		problem_unavailable(req);
		goto done;
	}
	p->gp_route = gr;
	p->gp_token = t;
	p->gp_op = op;
	p->gp_query = query;
	query = NULL;
	p->gp_headers = gateway_request_headers(req, gr, &t);
	if (p->gp_headers == NULL) {
		problem_unavailable(req);
		goto done;
	}
	/* the claim runs in a batch; gateway_claimed() goes on from there */
	if (tokenreq_claim_async(req, &t, fp, gateway_replay, gateway_claimed, 1, p) == 1)
		p = NULL;
done:
	json_decref(doc);
	gateway_pending_free(p);
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
	struct gateway_buf b = { 0 };

	if (plen > 1) /* a path other than "/" */
		return strdup(u);
	if (gateway_buf_add(&b, u, (size_t)(auth + alen - u)) < 0 ||
	    gateway_buf_str(&b, r->path) < 0 || gateway_buf_str(&b, rest + plen) < 0) {
		free(b.gb_data);
		return NULL;
	}
	return b.gb_data;
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

static void gateway_free_routes(void)
{
	for (size_t i = 0; i < gw.n_routes; i++) {
		free(gw.routes[i].gr_target);
		free(gw.routes[i].gr_by);
	}
	router_clear_added();
	free(gw.routes);
	gw.routes = NULL;
	gw.n_routes = 0;
}

/* Resolves the tenants and checks the operations of the configured routes. */
static int gateway_load_routes(const struct config *cfg)
{
	gw.routes = calloc(cfg->n_routes, sizeof(*gw.routes));
	if (gw.routes == NULL)
		return -1;
	gw.n_routes = cfg->n_routes;
	for (size_t i = 0; i < cfg->n_routes; i++) {
		const struct config_route *r = &cfg->routes[i];
		struct gateway_route *gr = &gw.routes[i];
		struct operation op;
		char shown[256];
		int found;

		gr->gr_route.method = r->method;
		gr->gr_route.pattern = r->path;
		gr->gr_route.handler = gateway_submit;
		gr->gr_route.auth = ROUTE_PUBLIC;
		gr->gr_route.headers = gateway_check_headers;
		gr->gr_route.opaque_body = 1;
		if (router_add(&gr->gr_route) < 0)
			return -1;
		gr->gr_cfg = r;
		gr->gr_key = strcmp(r->key, "token") == 0	 ? GATEWAY_KEY_TOKEN
			     : strcmp(r->key, "body") == 0	 ? GATEWAY_KEY_BODY
			     : strncmp(r->key, "header:", 7) == 0 ? GATEWAY_KEY_HEADER
								 : GATEWAY_KEY_JSON;
		gr->gr_key_arg = gr->gr_key == GATEWAY_KEY_HEADER ? r->key + 7
			       : gr->gr_key == GATEWAY_KEY_JSON	 ? r->key + 5
								 : NULL;
		if (asprintf(&gr->gr_by, "route:%s %s", r->method, r->path) < 0) {
			gr->gr_by = NULL;
			return -1;
		}
		if ((gr->gr_target = gateway_target(r)) == NULL)
			return -1;
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
				 "/v1/operations/%s", i, r->method, r->path, r->tenant, r->operation,
				 r->operation);
		else if ((long)op.op_lease_seconds * 1000 < r->connect_timeout_ms + r->timeout_ms)
			log_warn("gateway: routes[%zu] (%s %s): operation \"%s\" has a %d s lease, "
				 "shorter than the route's timeouts; forwards are cut at the lease",
				 i, r->method, r->path, r->operation, op.op_lease_seconds);
		gateway_url_for_log(gr->gr_target, shown, sizeof(shown));
		log_info("gateway: %s %s -> %s (tenant %s, operation %s)", r->method, r->path,
			 shown, r->tenant, r->operation);
	}
	return 0;
}

/* ---------------------------------------------------------------- start, stop */

int gateway_start(const struct config *cfg)
{
	gw.cfg = cfg;
	if (cfg->n_routes == 0)
		return 0;
	if (gateway_load_routes(cfg) < 0 || upstream_start() < 0)
		goto fail;
	gw.finishers_stop = 0;
	for (int i = 0; i < GATEWAY_FINISHERS; i++) {
		if (pthread_create(&gw.finishers[i], NULL, gateway_finisher, NULL) != 0) {
			log_error("gateway: cannot start a finisher thread");
			goto fail;
		}
		gw.n_finishers++;
	}
	return 0;
fail:
	gateway_stop();
	return -1;
}

void gateway_drain(void)
{
	/* every call ends, and with it is queued for the finishers */
	upstream_drain();
	pthread_mutex_lock(&gw.lock);
	gw.finishers_stop = 1;
	pthread_cond_broadcast(&gw.done_cond);
	pthread_mutex_unlock(&gw.lock);
	for (int i = 0; i < gw.n_finishers; i++)
		pthread_join(gw.finishers[i], NULL);
	gw.n_finishers = 0;
}

void gateway_stop(void)
{
	gateway_drain();
	upstream_stop();
	gateway_free_routes();
}
