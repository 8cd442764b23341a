/*
 * Gateway, forward: what is sent upstream for a submit that holds its
 * claim, the headers (headers_forward), the query rebuilt and the URL, and
 * the job that upstream.c runs. Built on the batcher thread that answered
 * the claim; touches no libmicrohttpd state but the suspended request's
 * headers and arguments, read before the suspend's resume.
 */
#include "gateway_int.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "headers.h"
#include "request.h"

#define GATEWAY_MIN_TIMEOUT_MS 100

/* ---------------------------------------------------------------- headers */

/* The headers sent upstream (headers_forward): a new list, or NULL. */
struct curl_slist *gateway_request_headers(struct request *req, const struct gateway_route *gr,
					   const struct token *t, const struct headers_field *f,
					   size_t n)
{
	struct curl_slist *list = NULL;
	char hex[2 * TOKEN_ID_BYTES + 3], ip[INET6_ADDRSTRLEN + 1];

	/* one form on every route: the record id, 32 hex digits, bare */
	token_id_hex(t->id, hex);
	http_client_ip(req, ip, sizeof(ip));
	char traceparent[TRACECTX_HEADER_LEN + 1];
	tracectx_format(&req->req_trace, traceparent);
	struct headers_forward_args a = {
		.fa_token_id = hex,
		.fa_subject = t->subject_len > 0 ? t->subject : NULL,
		.fa_client_ip = ip,
		.fa_request_id = req->req_id,
		.fa_traceparent = traceparent,
		.fa_trust_forwarded = gr->gr_cfg->trust_forwarded,
	};
	if (headers_forward(f, n, &a, &list) != HEADERS_OK)
		list = NULL;
	return list;
}

/* ---------------------------------------------------------------- query */

/*
 * Appends S, an argument as libmicrohttpd hands it over (not percent-decoded,
 * http.c installs no unescaper, but with '+' turned into ' '), restoring the
 * text as sent: ' ' back to '+'; bytes a request line cannot carry raw are
 * percent-encoded for safety.
 */
static int gateway_query_text(struct buf *b, const char *s)
{
	static const char hexd[] = "0123456789ABCDEF";

	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;
		char enc[3] = { '%', hexd[c >> 4], hexd[c & 15] };
		int rc;
		if (c == ' ')
			rc = buf_add(b, "+", 1);
		else if (c > 0x20 && c < 0x7f)
			rc = buf_add(b, s, 1);
		else
			rc = buf_add(b, enc, 3);
		if (rc < 0)
			return -1;
	}
	return 0;
}

/*
 * The request's query string rebuilt from libmicrohttpd's arguments (it
 * keeps no raw copy): into *OUT as a new string ("" when there is none).
 * 0 or -1.
 */
int gateway_query(struct request *req, char **out)
{
	struct headers_field *f;
	struct buf q = { 0 };
	size_t n;
	int rc = 0;

	if (http_fields(req, 1, &f, &n) < 0)
		return -1;
	for (size_t i = 0; i < n && rc == 0; i++)
		if ((q.b_len > 0 && buf_str(&q, "&") < 0) ||
		    gateway_query_text(&q, f[i].hf_name) < 0 ||
		    (f[i].hf_value != NULL &&
		     (buf_str(&q, "=") < 0 || gateway_query_text(&q, f[i].hf_value) < 0)))
			rc = -1;
	free(f);
	if (rc < 0) {
		buf_free(&q);
		return -1;
	}
	*out = q.b_data != NULL ? q.b_data : strdup("");
	return *out != NULL ? 0 : -1;
}

/* ---------------------------------------------------------------- jobs */

void gateway_job_free(struct gateway_job *j)
{
	if (j == NULL)
		return;
	free(j->gj_url);
	curl_slist_free_all(j->gj_call.uc_headers);
	upstream_call_clear(&j->gj_call);
	free(j);
}

/* The URL of a forward into *OUT (new: free()): the route's TARGET, then
 * QUERY (may be "") after a '?', or a '&' when TARGET has a query; 0, or
 * -1 out of memory. */
static int gateway_forward_url(const char *target, const char *query, char **out)
{
	struct buf url = { 0 };

	if (buf_str(&url, target) < 0 ||
	    (*query != '\0' &&
	     (buf_str(&url, strchr(target, '?') ? "&" : "?") < 0 || buf_str(&url, query) < 0))) {
		buf_free(&url);
		return -1;
	}
	*out = url.b_data;
	return 0;
}

/* Sets C's timeout: the route's timeout_ms (CFG), cut to what the lease
 * that ends at LEASE_EXPIRES_AT (unix ms) leaves after MARGIN_MS; 0, or
 * -1 when that is too short for a forward to start. */
static int gateway_forward_timeout(struct upstream_call *c, const struct config_route *cfg,
				   int64_t lease_expires_at, long margin_ms)
{
	/* a forward never outlives its lease (past it, a duplicate may take
	 * over once this process is gone), and none starts on a lease too
	 * short for it: NULL then, and the claim is released (gateway.c) */
	int64_t left = lease_expires_at - idemd_unix_ms() - margin_ms;
	c->uc_timeout_ms = cfg->timeout_ms;
#ifdef IDEMD_MUTANT_FORWARD_ON_SPENT_LEASE
	if (left < GATEWAY_MIN_TIMEOUT_MS)
		left = GATEWAY_MIN_TIMEOUT_MS;
#endif
	if (left < GATEWAY_MIN_TIMEOUT_MS)
		return -1;
#ifndef IDEMD_MUTANT_FORWARD_UNCUT
	if (left < c->uc_timeout_ms)
		c->uc_timeout_ms = (long)left;
#endif
	return 0;
}

/* Appends "Idempotency-Timeout-Ms" (C's timeout, TOLD_MS) and
 * "Idempotency-Deadline" (when that ends, unix ms on the database's clock)
 * to C's headers; 0, or -1 out of memory or when C has no headers (the
 * list unchanged then). */
static int gateway_forward_deadline(struct upstream_call *c, long told_ms)
{
	/* the upstream learns when idemd stops waiting for its answer, so that
	 * a cooperating upstream stops by then: the key stays held until the
	 * lease ends, forward_margin_ms later (gateway_finish.c). A relative
	 * timeout counts from when the upstream reads the request, which its
	 * own queue may delay; the deadline does not move */
	char timeout[48], deadline[64];
	snprintf(timeout, sizeof(timeout), "Idempotency-Timeout-Ms: %ld", told_ms);
#ifdef IDEMD_MUTANT_DEADLINE_UNSENT
	snprintf(deadline, sizeof(deadline), "X-Idempotency-Unused: 0");
#else
	snprintf(deadline, sizeof(deadline), "Idempotency-Deadline: %lld",
		 (long long)(idemd_unix_ms() + told_ms));
#endif
	struct curl_slist *with = c->uc_headers ? curl_slist_append(c->uc_headers, timeout) : NULL;
	if (with == NULL)
		return -1;
	c->uc_headers = with;
	with = curl_slist_append(c->uc_headers, deadline);
	if (with == NULL)
		return -1;
	c->uc_headers = with;
	return 0;
}

/* What the upstream is told it has: C's timeout, cut to the lease (the
 * mutant tells the route's whole timeout_ms, CFG's). */
static long gateway_told_ms(const struct upstream_call *c, const struct config_route *cfg)
{
#ifdef IDEMD_MUTANT_TOLD_WHOLE_TIMEOUT
	return cfg->timeout_ms;
#endif
	(void)cfg;
	return c->uc_timeout_ms;
}

/* Builds the job for a request that now holds the claim RES; takes
 * *HEADERS (set to NULL). NULL on OOM or when too little of the lease is
 * left for a forward. Touches no libmicrohttpd state: it
 * runs on a batcher thread while the connection is suspended. */
struct gateway_job *gateway_job_new(struct request *req, const struct gateway_route *gr,
				    const struct token *t, const struct operation *op,
				    const struct claim_result *res, const char *query,
				    struct curl_slist **headers, size_t max_body, long margin_ms)
{
	struct gateway_job *j = calloc(1, sizeof(*j));

	if (j == NULL)
		return NULL;
	j->gj_req = req;
	j->gj_route = gr;
	memcpy(j->gj_token_id, t->id, TOKEN_ID_BYTES);
	j->gj_attempt = res->cr_attempt;
	j->gj_lease_expires_at = res->cr_lease_expires_at;
	j->gj_retention_seconds = op->op_retention_seconds;
	j->gj_audit_seconds = store_audit_seconds(op);
	if (gateway_forward_url(gr->gr_target, query, &j->gj_url) < 0) {
		free(j);
		return NULL;
	}

	struct upstream_call *c = &j->gj_call;
	c->uc_method = req->req_method;
	c->uc_url = j->gj_url;
	c->uc_body = req->req_body;
	c->uc_body_len = req->req_body_len;
	c->uc_headers = *headers;
	*headers = NULL;
	c->uc_connect_timeout_ms = gr->gr_cfg->connect_timeout_ms;
	if (gateway_forward_timeout(c, gr->gr_cfg, res->cr_lease_expires_at, margin_ms) < 0 ||
	    gateway_forward_deadline(c, gateway_told_ms(c, gr->gr_cfg)) < 0) {
		gateway_job_free(j);
		return NULL;
	}
	c->uc_max_body = max_body;
	c->uc_keep = gr->gr_cfg->store_headers;
	c->uc_n_keep = gr->gr_cfg->n_store_headers;
	c->uc_done = gateway_on_done;
	return j;
}
