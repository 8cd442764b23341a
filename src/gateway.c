/*
 * Gateway: route table, token checks and claim on the HTTP thread, the
 * forward on the forwarder thread (libcurl multi), and the outcome (store
 * or release, reply, resume) on the finisher threads.
 *
 * A job's life: gateway_submit() claims the token, builds the job and
 * suspends the connection; the forwarder runs the transfer; a finisher
 * writes the outcome, builds the reply into the request, frees the job and
 * resumes the connection, after which nothing here touches the request.
 */
#include "gateway.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "config.h"
#include "fingerprint.h"
#include "http.h"
#include "log.h"
#include "opcache.h"
#include "problem.h"
#include "router.h"
#include "store.h"
#include "token.h"
#include "tokenreq.h"

#define GATEWAY_FINISHERS 4
#define GATEWAY_HEADER_VALUE_MAX 8192
#define GATEWAY_HEADER_NAME_MAX 128
#define GATEWAY_LEASE_MARGIN_MS 500
#define GATEWAY_MIN_TIMEOUT_MS 100

struct gateway_route {
	struct route gr_route;             /* first member: handlers get &gr_route */
	const struct config_route *gr_cfg; /* borrowed from the config */
	uint32_t gr_tenant_id;
	char *gr_target;                   /* URL the request goes to, before its query */
};

/* A growable byte buffer (NUL-terminated when non-empty). */
struct gateway_buf {
	char *gb_data;
	size_t gb_len, gb_cap;
};

struct gateway_job {
	struct gateway_job *gj_next;
	struct request *gj_req;            /* borrowed; suspended until the job ends */
	const struct gateway_route *gj_route;
	uint8_t gj_token_id[TOKEN_ID_BYTES];
	int gj_attempt;
	int gj_retention_seconds;
	long gj_timeout_ms;
	char *gj_url;
	struct curl_slist *gj_headers;
	int gj_stopped;                    /* refused: the gateway is stopping */
	/* filled by the transfer */
	CURLcode gj_code;
	long gj_status;
	int gj_sent;                       /* the request left for the upstream */
	int gj_resend_refused;             /* libcurl wanted to send it a second time */
	int gj_too_big;
	json_t *gj_resp_headers;           /* the headers kept: lower-cased names */
	struct gateway_buf gj_body;
};

static struct {
	const struct config *cfg;
	struct gateway_route *routes;
	size_t n_routes;
	int curl_ready;
	int running;                       /* threads started and not yet drained */
	pthread_mutex_t lock;
	pthread_cond_t done_cond;
	struct gateway_job *in_head, *in_tail;     /* for the forwarder */
	struct gateway_job *done_head, *done_tail; /* for the finishers */
	int stopping, finishers_stop;
	CURLM *multi;
	CURL **idle;                       /* easy handles kept for reuse (forwarder only) */
	size_t n_idle, cap_idle;
	pthread_t forwarder;
	pthread_t finishers[GATEWAY_FINISHERS];
	int n_finishers;
} gw = { .lock = PTHREAD_MUTEX_INITIALIZER, .done_cond = PTHREAD_COND_INITIALIZER };

static void gateway_submit(struct request *req);

/* ---------------------------------------------------------------- headers */

/* Request headers never forwarded: hop-by-hop ones (RFC 9110 7.6.1) and
 * those idemd sets itself. Proxy-* and the names listed in Connection too. */
static const char *const gateway_drop_request[] = {
	"connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade",
	"host", "content-length", "expect", "accept-encoding",
	"idempotency-key", "idempotency-subject", "x-forwarded-for", "x-request-id",
};

/* Response headers never stored: hop-by-hop ones, framing, and those idemd
 * owns (CORS, Idempotent-Replayed, X-Request-Id). */
static const char *const gateway_drop_response[] = {
	"connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade",
	"content-length", "idempotent-replayed", "x-request-id",
};

static int gateway_in_list(const char *name, const char *const *list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcasecmp(name, list[i]) == 0)
			return 1;
	return 0;
}

static int gateway_never_stored(const char *lname)
{
	return gateway_in_list(lname, gateway_drop_response, IDEMD_ARRAY_LEN(gateway_drop_response)) ||
	       strncmp(lname, "proxy-", 6) == 0 || strncmp(lname, "access-control-", 15) == 0;
}

/* Whether the upstream's header LNAME (lower case) is kept with the answer:
 * Content-Type and Content-Encoding always (the body means nothing without
 * them), plus the route's store_headers. */
static int gateway_keeps(const struct gateway_route *gr, const char *lname)
{
	if (gateway_never_stored(lname))
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

/* Collects the comma-separated names of every Connection header. */
struct gateway_conn_names {
	char names[1024];
};

static enum MHD_Result gateway_connection_cb(void *cls, enum MHD_ValueKind kind,
					     const char *key, const char *value)
{
	struct gateway_conn_names *c = cls;
	size_t used = strlen(c->names);

	(void)kind;
	if (strcasecmp(key, "Connection") == 0 && value != NULL)
		snprintf(c->names + used, sizeof(c->names) - used, ",%s", value);
	return MHD_YES;
}

/* 1 when NAME is one of the comma-separated tokens of LIST. */
static int gateway_listed(const char *list, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = list; *p != '\0';) {
		p += strspn(p, ", \t");
		size_t len = strcspn(p, ", \t");
		if (len == n && strncasecmp(p, name, n) == 0)
			return 1;
		p += len;
	}
	return 0;
}

struct gateway_req_headers {
	struct gateway_conn_names conn;
	struct curl_slist *list;
	struct gateway_buf xff;
	int has_content_type;
	int failed;
};

static enum MHD_Result gateway_header_cb(void *cls, enum MHD_ValueKind kind,
					 const char *key, const char *value)
{
	struct gateway_req_headers *h = cls;
	struct gateway_buf line = { 0 };

	(void)kind;
	if (value == NULL)
		value = "";
	if (strcasecmp(key, "X-Forwarded-For") == 0) {
		if (*value != '\0' && ((h->xff.gb_len > 0 && gateway_buf_str(&h->xff, ", ") < 0) ||
				       gateway_buf_str(&h->xff, value) < 0))
			h->failed = 1;
		return MHD_YES;
	}
	if (gateway_in_list(key, gateway_drop_request, IDEMD_ARRAY_LEN(gateway_drop_request)) ||
	    strncasecmp(key, "proxy-", 6) == 0 || gateway_listed(h->conn.names, key))
		return MHD_YES;
	if (strcasecmp(key, "Content-Type") == 0)
		h->has_content_type = 1;
	/* "Name;" is how libcurl sends a header with an empty value */
	if (gateway_buf_str(&line, key) < 0 ||
	    gateway_buf_str(&line, *value != '\0' ? ": " : ";") < 0 ||
	    gateway_buf_str(&line, value) < 0) {
		h->failed = 1;
	} else {
		struct curl_slist *l = curl_slist_append(h->list, line.gb_data);
		if (l == NULL)
			h->failed = 1;
		else
			h->list = l;
	}
	free(line.gb_data);
	return MHD_YES;
}

static int gateway_append(struct curl_slist **list, const char *name, const char *value)
{
	struct gateway_buf line = { 0 };
	int ret = -1;

	if (gateway_buf_str(&line, name) == 0 && gateway_buf_str(&line, value) == 0) {
		struct curl_slist *l = curl_slist_append(*list, line.gb_data);
		if (l != NULL) {
			*list = l;
			ret = 0;
		}
	}
	free(line.gb_data);
	return ret;
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

/*
 * The headers sent upstream: the client's minus the dropped ones, plus
 * Idempotency-Key (the token id), Idempotency-Subject, X-Forwarded-For and
 * X-Request-Id. New list (curl_slist_free_all), or NULL.
 */
static struct curl_slist *gateway_request_headers(struct request *req, const struct token *t)
{
	struct gateway_req_headers h = { 0 };
	char hex[2 * TOKEN_ID_BYTES + 1], ip[INET6_ADDRSTRLEN + 1];

	MHD_get_connection_values(req->req_conn, MHD_HEADER_KIND, gateway_connection_cb, &h.conn);
	MHD_get_connection_values(req->req_conn, MHD_HEADER_KIND, gateway_header_cb, &h);
	token_id_hex(t->id, hex);
	gateway_client_ip(req->req_conn, ip, sizeof(ip));
	if (h.xff.gb_len > 0 && gateway_buf_str(&h.xff, ", ") < 0)
		h.failed = 1;
	if (h.failed || gateway_buf_str(&h.xff, ip) < 0 ||
	    gateway_append(&h.list, "Idempotency-Key: ", hex) < 0 ||
	    gateway_append(&h.list, "Idempotency-Subject: ", t->subject) < 0 ||
	    gateway_append(&h.list, "X-Forwarded-For: ", h.xff.gb_data) < 0 ||
	    gateway_append(&h.list, "X-Request-Id: ", req->req_id) < 0 ||
	    gateway_append(&h.list, "Expect:", "") < 0 ||
	    (!h.has_content_type && gateway_append(&h.list, "Content-Type:", "") < 0)) {
		curl_slist_free_all(h.list);
		h.list = NULL;
	}
	free(h.xff.gb_data);
	return h.list;
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
static void gateway_reply_response(struct request *req, const struct stored_response *r,
				   const char *replayed)
{
	const char *name;
	json_t *v, *headers = json_loads(r->sr_headers ? r->sr_headers : "{}", 0, NULL);
	int has_type = 0;

	http_reply_bytes(req, (unsigned)r->sr_status, NULL, r->sr_body, r->sr_body_len);
	if (req->rep_response == NULL) {
		json_decref(headers);
		return;
	}
	json_object_foreach(headers, name, v) {
		if (!json_is_string(v))
			continue;
		MHD_add_response_header(req->rep_response, name, json_string_value(v));
		if (strcasecmp(name, "content-type") == 0)
			has_type = 1;
	}
	json_decref(headers);
	if (!has_type && r->sr_is_json)
		MHD_add_response_header(req->rep_response, "Content-Type", "application/json");
	if (replayed != NULL)
		http_set_header(req, "Idempotent-Replayed", replayed);
}

static void gateway_replay(struct request *req, const struct stored_response *r)
{
	gateway_reply_response(req, r, "true");
}

/* ---------------------------------------------------------------- jobs */

static void gateway_job_free(struct gateway_job *j)
{
	if (j == NULL)
		return;
	free(j->gj_url);
	curl_slist_free_all(j->gj_headers);
	json_decref(j->gj_resp_headers);
	free(j->gj_body.gb_data);
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

/* Builds the job for a request that now holds the claim RES. NULL on OOM. */
static struct gateway_job *gateway_job_new(struct request *req, const struct gateway_route *gr,
					   const struct token *t, const struct operation *op,
					   const struct claim_result *res, const char *query)
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
	/* a forward never outlives its lease: past it, a duplicate may take over */
	int64_t left = res->cr_lease_expires_at - gateway_now_ms() - GATEWAY_LEASE_MARGIN_MS;
	j->gj_timeout_ms = gr->gr_cfg->timeout_ms;
	if (left < j->gj_timeout_ms)
		j->gj_timeout_ms = left > GATEWAY_MIN_TIMEOUT_MS ? (long)left : GATEWAY_MIN_TIMEOUT_MS;
	if (gateway_buf_str(&url, gr->gr_target) < 0 ||
	    (*query != '\0' && (gateway_buf_str(&url, strchr(gr->gr_target, '?') ? "&" : "?") < 0 ||
				gateway_buf_str(&url, query) < 0))) {
		free(url.gb_data);
		free(j);
		return NULL;
	}
	j->gj_url = url.gb_data;
	j->gj_headers = gateway_request_headers(req, t);
	j->gj_resp_headers = json_object();
	if (j->gj_headers == NULL || j->gj_resp_headers == NULL) {
		gateway_job_free(j);
		return NULL;
	}
	return j;
}

/* Gives the claim back so that the same token can be submitted again. */
static void gateway_release(const struct gateway_job *j)
{
	enum release_outcome outcome;

	if (store_release(j->gj_route->gr_tenant_id, j->gj_token_id, j->gj_attempt, &outcome) < 0)
		log_warn("gateway: request %s: the claim could not be released (database "
			 "unavailable); it frees itself when its lease ends", j->gj_req->req_id);
	else if (outcome != RELEASE_DONE)
		log_warn("gateway: request %s: attempt %d no longer held the claim",
			 j->gj_req->req_id, j->gj_attempt);
}

/* The upstream answered 2xx-4xx: store it, then answer with what was stored. */
static void gateway_store(struct gateway_job *j)
{
	struct request *req = j->gj_req;
	struct stored_response resp = { 0 }, stored = { 0 };
	enum complete_outcome outcome;
	int64_t expires_at;

	resp.sr_status = (int)j->gj_status;
	resp.sr_headers = json_dumps(j->gj_resp_headers, JSON_COMPACT | JSON_SORT_KEYS);
	resp.sr_body = (unsigned char *)j->gj_body.gb_data;
	resp.sr_body_len = j->gj_body.gb_len;
	if (resp.sr_headers == NULL) {
		gateway_release(j);
		problem_unavailable(req);
		return;
	}
	if (store_complete(j->gj_route->gr_tenant_id, j->gj_token_id, j->gj_attempt, &resp,
			   j->gj_retention_seconds, &outcome, &stored, &expires_at) < 0) {
		/* the upstream acted but nothing is stored: the claim stays until
		 * its lease ends, then a retry forwards again with the same
		 * Idempotency-Key, which the upstream must recognise */
		log_warn("gateway: request %s: the upstream answered %ld but the outcome could "
			 "not be stored (database unavailable)", req->req_id, j->gj_status);
		problem_unavailable(req);
		free(resp.sr_headers);
		return;
	}
	free(resp.sr_headers);
	switch (outcome) {
	case COMPLETE_STORED:
	case COMPLETE_ALREADY:
		gateway_reply_response(req, &stored, "false");
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
	store_response_free(&stored);
}

/* Writes the outcome of a finished (or refused) forward and resumes. */
static void gateway_finish(struct gateway_job *j)
{
	struct request *req = j->gj_req;
	long max = (long)gw.cfg->max_body_bytes;

	if (j->gj_stopped) {
		gateway_release(j);
		problem_unavailable(req);
	} else if (j->gj_code == CURLE_OK && j->gj_status >= 200 && j->gj_status <= 499) {
		gateway_store(j);
	} else if (j->gj_code == CURLE_OK && j->gj_status >= 500 && j->gj_status <= 599) {
		/* passed through, not stored: the same token may try again */
		gateway_release(j);
		struct stored_response pass = { (int)j->gj_status, NULL,
			(unsigned char *)j->gj_body.gb_data, j->gj_body.gb_len, 0 };
		pass.sr_headers = json_dumps(j->gj_resp_headers, JSON_COMPACT);
		gateway_reply_response(req, &pass, NULL);
		free(pass.sr_headers);
	} else {
		gateway_release(j);
		if (j->gj_too_big) {
			problem_reply(req, 502, "upstream_invalid",
				      "the upstream's answer exceeds %ld bytes", max);
		} else if (j->gj_code == CURLE_OK) {
			problem_reply(req, 502, "upstream_invalid",
				      "the upstream answered with status %ld", j->gj_status);
		} else if (j->gj_resend_refused) {
			problem_reply(req, 502, "upstream_unavailable",
				      "the upstream closed the connection without answering");
		} else if (j->gj_code == CURLE_OPERATION_TIMEDOUT && j->gj_sent) {
			problem_reply(req, 504, "upstream_timeout",
				      "the upstream did not answer within %ld ms", j->gj_timeout_ms);
		} else {
			problem_reply(req, 502, "upstream_unavailable",
				      "the upstream could not be reached: %s",
				      curl_easy_strerror(j->gj_code));
		}
		log_warn("gateway: request %s: %s %s: %s (request %s)", req->req_id,
			 req->req_method, req->req_path,
			 j->gj_too_big ? "answer too large" :
			 j->gj_resend_refused ? "connection closed without an answer" :
			 curl_easy_strerror(j->gj_code),
			 j->gj_sent ? "sent" : "not sent");
	}
	gateway_job_free(j);
	http_resume(req);
}

/* ---------------------------------------------------------------- forwarder */

static size_t gateway_on_body(char *data, size_t size, size_t n, void *arg)
{
	struct gateway_job *j = arg;
	size_t len = size * n;

	if (j->gj_body.gb_len + len > gw.cfg->max_body_bytes) {
		j->gj_too_big = 1;
		return 0;
	}
	return gateway_buf_add(&j->gj_body, data, len) == 0 ? len : 0;
}

static size_t gateway_on_header(char *data, size_t size, size_t n, void *arg)
{
	struct gateway_job *j = arg;
	size_t len = size * n;
	char name[GATEWAY_HEADER_NAME_MAX + 1];

	if (len >= 5 && memcmp(data, "HTTP/", 5) == 0) {
		/* a new response (after 100 Continue): forget the previous one */
		json_object_clear(j->gj_resp_headers);
		return len;
	}
	const char *colon = memchr(data, ':', len);
	size_t nlen = colon ? (size_t)(colon - data) : 0;
	if (nlen == 0 || nlen > GATEWAY_HEADER_NAME_MAX || data[0] == ' ' || data[0] == '\t')
		return len;
	for (size_t i = 0; i < nlen; i++)
		name[i] = (char)((data[i] >= 'A' && data[i] <= 'Z') ? data[i] - 'A' + 'a' : data[i]);
	name[nlen] = '\0';
	if (!gateway_keeps(j->gj_route, name))
		return len;
	const char *v = colon + 1, *end = data + len;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
		end--;
	struct gateway_buf val = { 0 };
	const char *prev = json_string_value(json_object_get(j->gj_resp_headers, name));
	if ((prev == NULL || (gateway_buf_str(&val, prev) == 0 && gateway_buf_str(&val, ", ") == 0)) &&
	    gateway_buf_add(&val, v, (size_t)(end - v)) == 0 && val.gb_data != NULL &&
	    val.gb_len <= GATEWAY_HEADER_VALUE_MAX) {
		json_t *s = json_stringn(val.gb_data, val.gb_len);
		if (s == NULL || json_object_set_new(j->gj_resp_headers, name, s) < 0)
			log_warn("gateway: request %s: upstream header %s dropped (not UTF-8)",
				 j->gj_req->req_id, name);
	}
	free(val.gb_data);
	return len;
}

static int gateway_on_prereq(void *arg, char *primary_ip, char *local_ip, int primary_port,
			     int local_port)
{
	struct gateway_job *j = arg;

	(void)primary_ip;
	(void)local_ip;
	(void)primary_port;
	(void)local_port;
	/* libcurl resends on a fresh connection when a reused one closes
	 * without an answer; the upstream may have acted, so that second send
	 * is the client's decision (same token, same Idempotency-Key), not ours */
	if (j->gj_sent) {
		j->gj_resend_refused = 1;
		return CURL_PREREQFUNC_ABORT;
	}
	j->gj_sent = 1;
	return CURL_PREREQFUNC_OK;
}

static void gateway_to_finishers(struct gateway_job *j)
{
	pthread_mutex_lock(&gw.lock);
	if (gw.done_tail != NULL)
		gw.done_tail->gj_next = j;
	else
		gw.done_head = j;
	gw.done_tail = j;
	j->gj_next = NULL;
	pthread_cond_signal(&gw.done_cond);
	pthread_mutex_unlock(&gw.lock);
}

/* Starts J's transfer on the multi handle (forwarder thread). */
static void gateway_transfer_start(struct gateway_job *j)
{
	struct request *req = j->gj_req;
	const struct config_route *r = j->gj_route->gr_cfg;
	CURL *e = gw.n_idle > 0 ? gw.idle[--gw.n_idle] : curl_easy_init();

	if (e == NULL) {
		j->gj_code = CURLE_OUT_OF_MEMORY;
		gateway_to_finishers(j);
		return;
	}
	/* keeps the handle's live connections and DNS cache */
	curl_easy_reset(e);
	curl_easy_setopt(e, CURLOPT_URL, j->gj_url);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	/* below the usual 5 s keep-alive of upstream servers, so that an idle
	 * connection is not reused just as the upstream closes it */
	curl_easy_setopt(e, CURLOPT_MAXAGE_CONN, 4L);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, r->connect_timeout_ms);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, j->gj_timeout_ms);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, j->gj_headers);
	curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, req->req_method);
	if (req->req_body_len > 0 || strcmp(req->req_method, "POST") == 0 ||
	    strcmp(req->req_method, "PUT") == 0 || strcmp(req->req_method, "PATCH") == 0) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->req_body ? req->req_body : "");
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->req_body_len);
	} else {
		curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
	}
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, gateway_on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, j);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, gateway_on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, j);
	curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, gateway_on_prereq);
	curl_easy_setopt(e, CURLOPT_PREREQDATA, j);
	curl_easy_setopt(e, CURLOPT_PRIVATE, j);
	if (curl_multi_add_handle(gw.multi, e) != CURLM_OK) {
		curl_easy_cleanup(e);
		j->gj_code = CURLE_OUT_OF_MEMORY;
		gateway_to_finishers(j);
	}
}

/* Moves finished transfers to the finishers; keeps their handles. */
static void gateway_collect(void)
{
	CURLMsg *m;
	int left;

	while ((m = curl_multi_info_read(gw.multi, &left)) != NULL) {
		if (m->msg != CURLMSG_DONE)
			continue;
		CURL *e = m->easy_handle;
		CURLcode code = m->data.result;
		char *p = NULL;
		curl_easy_getinfo(e, CURLINFO_PRIVATE, &p);
		struct gateway_job *j = (struct gateway_job *)(void *)p;
		j->gj_code = code;
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &j->gj_status);
		curl_multi_remove_handle(gw.multi, e);
		if (gw.n_idle == gw.cap_idle) {
			size_t cap = gw.cap_idle ? gw.cap_idle * 2 : 16;
			CURL **idle = realloc(gw.idle, cap * sizeof(*idle));
			if (idle != NULL) {
				gw.idle = idle;
				gw.cap_idle = cap;
			}
		}
		if (gw.n_idle < gw.cap_idle)
			gw.idle[gw.n_idle++] = e;
		else
			curl_easy_cleanup(e);
		gateway_to_finishers(j);
	}
}

static void *gateway_forwarder(void *arg)
{
	int running = 0;

	(void)arg;
	for (;;) {
		pthread_mutex_lock(&gw.lock);
		struct gateway_job *jobs = gw.in_head;
		int stopping = gw.stopping;
		gw.in_head = gw.in_tail = NULL;
		pthread_mutex_unlock(&gw.lock);
		while (jobs != NULL) {
			struct gateway_job *next = jobs->gj_next;
			gateway_transfer_start(jobs);
			jobs = next;
		}
		curl_multi_perform(gw.multi, &running);
		gateway_collect();
		/* once stopping is seen no job can be queued any more */
		if (stopping && running == 0)
			break;
		curl_multi_poll(gw.multi, NULL, 0, 1000, NULL);
	}
	return NULL;
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

/* Queues J for the forwarder; -1 when the gateway is stopping. */
static int gateway_enqueue(struct gateway_job *j)
{
	pthread_mutex_lock(&gw.lock);
	int ok = gw.running && !gw.stopping;
	if (ok) {
		j->gj_next = NULL;
		if (gw.in_tail != NULL)
			gw.in_tail->gj_next = j;
		else
			gw.in_head = j;
		gw.in_tail = j;
	}
	pthread_mutex_unlock(&gw.lock);
	if (!ok)
		return -1;
	curl_multi_wakeup(gw.multi);
	return 0;
}

/* ---------------------------------------------------------------- submit */

/* 1 when S can travel as a header value unchanged. */
static int gateway_header_safe(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || s[0] == ' ' || s[n - 1] == ' ')
		return 0;
	for (; *s != '\0'; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f)
			return 0;
	return 1;
}

static void gateway_submit(struct request *req)
{
	const struct gateway_route *gr = (const struct gateway_route *)req->req_route;
	char text[TOKEN_MAX_CHARS + 1], *query = NULL;
	uint8_t fp[FINGERPRINT_BYTES];
	struct token t;
	struct operation op;
	struct claim_result res;
	int found, n = http_header_count(req, "Idempotency-Key");

	if (n == 0) {
		problem_reply(req, 400, "idempotency_key_missing",
			      "send the token as Idempotency-Key: <token>");
		return;
	}
	if (n > 1) {
		problem_reply(req, 400, "invalid_request", "send exactly one Idempotency-Key header");
		return;
	}
	if (token_from_header(http_header(req, "Idempotency-Key"), text, sizeof(text)) < 0) {
		problem_reply(req, 400, "token_malformed", "the token is not a valid idemd token");
		return;
	}
	/* the route, not an API key, names the tenant the token must belong to */
	req->req_tenant_id = gr->gr_tenant_id;
	if (tokenreq_verify(req, text, &t) < 0)
		return;
	if (opcache_by_id(t.operation_id, &op, &found) < 0) {
		problem_unavailable(req);
		return;
	}
	if (!found || op.op_tenant_id != gr->gr_tenant_id ||
	    strcmp(op.op_name, gr->gr_cfg->operation) != 0) {
		problem_reply(req, 403, "token_scope_mismatch",
			      "the token is for another operation than this route's");
		return;
	}
	if (!gateway_header_safe(t.subject)) {
		problem_reply(req, 400, "invalid_request",
			      "the token's subject cannot be forwarded as a header value");
		return;
	}
	if (gateway_query(req, &query) < 0) {
		problem_unavailable(req);
		return;
	}
	gateway_fingerprint(req, query, fp);
	if (tokenreq_claim_with(req, &t, fp, gateway_replay, &res) != 1)
		goto done;
	struct gateway_job *j = gateway_job_new(req, gr, &t, &op, &res, query);
	if (j == NULL) {
		struct gateway_job tmp = { .gj_req = req, .gj_route = gr, .gj_attempt = res.cr_attempt };
		memcpy(tmp.gj_token_id, t.id, TOKEN_ID_BYTES);
		gateway_release(&tmp);
		problem_unavailable(req);
		goto done;
	}
	http_suspend(req);
	if (gateway_enqueue(j) < 0) {
		j->gj_stopped = 1;
		gateway_finish(j);
	}
done:
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
	for (size_t i = 0; i < gw.n_routes; i++)
		free(gw.routes[i].gr_target);
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
		gr->gr_cfg = r;
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
		for (size_t k = 0; k < r->n_store_headers; k++)
			if (gateway_never_stored(r->store_headers[k]))
				log_warn("gateway: routes[%zu] (%s %s): store_headers \"%s\" is never "
					 "stored (hop-by-hop, framing or set by idemd)", i, r->method,
					 r->path, r->store_headers[k]);
		gateway_url_for_log(gr->gr_target, shown, sizeof(shown));
		log_info("gateway: %s %s -> %s (tenant %s, operation %s)", r->method, r->path,
			 shown, r->tenant, r->operation);
	}
	return 0;
}

const struct route *gateway_match(const char *method, const char *path, unsigned *status,
				  char *allow, size_t allowlen)
{
	size_t used = 0;

	if (allowlen > 0)
		allow[0] = '\0';
	for (size_t i = 0; i < gw.n_routes; i++) {
		const struct gateway_route *gr = &gw.routes[i];
		if (strcmp(gr->gr_route.pattern, path) != 0)
			continue;
		if (strcmp(gr->gr_route.method, method) == 0)
			return &gr->gr_route;
		size_t mlen = strlen(gr->gr_route.method);
		if (used + mlen + 3 < allowlen) {
			if (used > 0) {
				memcpy(allow + used, ", ", 2);
				used += 2;
			}
			memcpy(allow + used, gr->gr_route.method, mlen + 1);
			used += mlen;
		}
	}
	*status = used > 0 ? 405 : 404;
	return NULL;
}

/* ---------------------------------------------------------------- start, stop */

int gateway_start(const struct config *cfg)
{
	gw.cfg = cfg;
	if (cfg->n_routes == 0)
		return 0;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		log_error("gateway: libcurl could not be initialised");
		return -1;
	}
	gw.curl_ready = 1;
	if (gateway_load_routes(cfg) < 0)
		goto fail;
	gw.multi = curl_multi_init();
	if (gw.multi == NULL)
		goto fail;
	gw.stopping = 0;
	gw.finishers_stop = 0;
	if (pthread_create(&gw.forwarder, NULL, gateway_forwarder, NULL) != 0) {
		log_error("gateway: cannot start the forwarder thread");
		goto fail;
	}
	gw.running = 1;
	for (int i = 0; i < GATEWAY_FINISHERS; i++) {
		if (pthread_create(&gw.finishers[i], NULL, gateway_finisher, NULL) != 0) {
			log_error("gateway: cannot start a finisher thread");
			gateway_stop();
			return -1;
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
	pthread_mutex_lock(&gw.lock);
	int running = gw.running;
	gw.stopping = 1;
	pthread_mutex_unlock(&gw.lock);
	if (!running)
		return;
	curl_multi_wakeup(gw.multi);
	pthread_join(gw.forwarder, NULL);
	pthread_mutex_lock(&gw.lock);
	gw.finishers_stop = 1;
	pthread_cond_broadcast(&gw.done_cond);
	pthread_mutex_unlock(&gw.lock);
	for (int i = 0; i < gw.n_finishers; i++)
		pthread_join(gw.finishers[i], NULL);
	gw.n_finishers = 0;
	pthread_mutex_lock(&gw.lock);
	gw.running = 0;
	pthread_mutex_unlock(&gw.lock);
}

void gateway_stop(void)
{
	gateway_drain();
	while (gw.n_idle > 0)
		curl_easy_cleanup(gw.idle[--gw.n_idle]);
	free(gw.idle);
	gw.idle = NULL;
	gw.cap_idle = 0;
	if (gw.multi != NULL)
		curl_multi_cleanup(gw.multi);
	gw.multi = NULL;
	gateway_free_routes();
	if (gw.curl_ready)
		curl_global_cleanup();
	gw.curl_ready = 0;
}
