/* HTTP core: runs libmicrohttpd in epoll thread-pool mode, owns the
 * per-request context, enforces limits before routing, authenticates,
 * calls the handler, adds common headers and logs one line per request.
 * Connections and their deadline reaper are in http_conn.c, the replies in
 * http_reply.c, TLS and the admin listener's daemon in http_listen.c. */
#include "http.h"
#include "http_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <sys/socket.h>
#include <stddef.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "auth.h"
#include "config.h"
#include "cors.h"
#include "headers.h"
#include "log.h"
#include "metrics.h"
#include "problem.h"
#include "randpool.h"
#include "retire.h"
#include "router.h"
#include "token.h"

static struct MHD_Daemon *http_daemon;
static struct MHD_Daemon *http_admin_daemon;  /* admin_listen, or NULL */
static char http_admin_marker;		      /* the admin daemon's access cls */
static const struct config *_Atomic http_cfg; /* swapped on a reload */
static atomic_int http_stopping; /* set by http_quiesce: new requests get 503 and a close */
static int http_quiesced;

static double http_elapsed_ms(const struct timespec *start)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - start->tv_sec) * 1e3 +
	       (double)(now.tv_nsec - start->tv_nsec) / 1e6;
}

void http_reload(const struct config *cfg)
{
	http_budget_start(cfg);
	cors_init(cfg->cors_origins, cfg->n_cors_origins);
	http_cfg = cfg;
}

static int http_is_json_type(const char *ct)
{
	static const char json_type[] = "application/json";
	size_t n = sizeof(json_type) - 1;

	if (ct == NULL || strncasecmp(ct, json_type, n) != 0)
		return 0;
	return ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ';
}

/* Bearer token from the Authorization header, or NULL. */
static const char *http_bearer(const struct request *req)
{
	const char *h = req->req_h_authorization;

	if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0)
		return NULL;
	h += 7;
	while (*h == ' ')
		h++;
	return *h != '\0' ? h : NULL;
}

/* A CORS preflight for a gateway or API path: 1 after replying. */
static int http_preflight(struct request *req)
{
	char allow[64], *params[HTTP_MAX_PARAMS] = { NULL };
	size_t lens[HTTP_MAX_PARAMS];
	unsigned status = 404;

	if (!cors_is_preflight(req->req_method, req->req_h_origin,
			       http_header(req, "Access-Control-Request-Method")))
		return 0;
	/* no route takes OPTIONS: 405 names the methods the path accepts */
	(void)router_match("OPTIONS", req->req_path, params, lens, &status, allow, sizeof(allow));
	if (status != 405)
		return 0;
	struct cors_header h[CORS_MAX_HEADERS];
	size_t n = cors_preflight_headers(req->req_h_origin, allow, h);
	if (n == 0) {
		request_fail(req, 403, "cors_origin_denied",
			     "this origin is not listed in cors_origins");
		return 1;
	}
	http_reply_empty(req, 204);
	for (size_t i = 0; i < n; i++)
		http_set_header(req, h[i].ch_name, h[i].ch_value);
	return 1;
}

/* /healthz, /readyz and /metrics: what admin_listen serves. */
static int http_is_admin_route(const struct route *r)
{
	return r->auth == ROUTE_PUBLIC &&
	       (strcmp(r->pattern, "/healthz") == 0 || strcmp(r->pattern, "/readyz") == 0 ||
		strcmp(r->pattern, "/metrics") == 0);
}

/* Whether the request announces a body (a length above 0, or chunks). */
static int http_has_body(const struct request *req, unsigned long long declared)
{
	return declared > 0 || req->req_h_transfer_encoding != NULL;
}

/* The request's API key (Authorization: Bearer) checked, its tenant and
 * who acts set: 0, or -1 after replying (401 unauthorized, 503). The
 * connection's memo keeps the key it last authenticated with. */
static int http_authenticate(struct request *req)
{
	const char *key = http_bearer(req);
	struct auth_memo alone = { 0 };
	struct auth_memo *memo = req->req_conn_ctx ? &req->req_conn_ctx->hc_auth : &alone;
	int rc = key ? auth_check_memo(key, http_client_slot(req->req_conn), memo,
				       &req->req_tenant_id)
		     : AUTH_DENIED;
	char by[24];

	snprintf(by, sizeof(by), "api_key:%u", memo->am_key_id);
	http_set_by(req, by);
	auth_memo_wipe(&alone);
	if (rc == AUTH_UNAVAILABLE) {
		request_unavailable(req);
		return -1;
	}
	if (rc != AUTH_OK) {
		request_fail(req, 401, "unauthorized",
			     "send a valid API key as Authorization: Bearer <key>");
		http_set_header(req, "WWW-Authenticate", "Bearer");
		return -1;
	}
	return 0;
}

/* On the headers alone: route, then authentication, then the route's own
 * header checks. 1 after replying (no body byte is read then), else 0. */
static int http_route(struct request *req, unsigned long long declared)
{
	char allow[64];
	unsigned status = 404;

	if (http_preflight(req))
		return 1;
	req->req_route = router_match(req->req_method, req->req_path, req->req_params,
				      req->req_param_lens, &status, allow, sizeof(allow));
	/* with admin_listen, the operator's routes are there and only there */
	if (http_cfg->admin_listen_host != NULL &&
	    (req->req_route != NULL ? http_is_admin_route(req->req_route) : 0) != req->req_admin) {
		req->req_route = NULL;
		status = 404;
	}
	/* gateway bodies are opaque; the API's are JSON */
	if (req->req_route != NULL && !req->req_route->opaque_body &&
	    http_has_body(req, declared) && !http_is_json_type(req->req_h_content_type)) {
		request_fail(req, 415, "unsupported_media_type",
			     "send the body as application/json");
		return 1;
	}
	if (req->req_route == NULL) {
		if (status == 405) {
			request_fail(req, 405, "method_not_allowed", "use one of: %s", allow);
			http_set_header(req, "Allow", allow);
		} else {
			request_fail(req, 404, "not_found", "no such resource");
		}
		return 1;
	}
	if (req->req_route->auth == ROUTE_API_KEY && http_authenticate(req) < 0)
		return 1;
	return req->req_route->headers != NULL && req->req_route->headers(req) < 0;
}

static void http_busy(struct request *req)
{
	request_fail(req, 503, "unavailable",
		     "too many request bodies are being received; retry shortly");
	http_set_header(req, "Retry-After", "1");
}

/* An answer's body this large or larger is held against the body budget
 * until it is sent: a thousand clients that never read a large replay hold
 * at most the budget, not a copy each. */
#define HTTP_ANSWER_BUDGET_MIN (64 * 1024)

/* The whole request is in: the handler, unless a limit was passed. */
static void http_dispatch(struct request *req)
{
	if (req->req_body_too_large) {
		request_fail(req, 413, "payload_too_large", "the body exceeds %zu bytes",
			     http_cfg->max_body_bytes);
		return;
	}
	if (req->req_over_budget) {
		http_busy(req);
		return;
	}
	req->req_route->handler(req);
	if (req->rep_response == NULL && req->rep_problem.rp_status == 0 && !req->req_suspended)
		request_fail(req, 500, "internal", "the request could not be answered");
}

/* Sends what the request ended with: the one place where a problem a check
 * recorded becomes its answer (problem_answer). */
static enum MHD_Result http_send(struct request *req)
{
	if (req->rep_response == NULL)
		problem_answer(req);
	if (req->rep_response == NULL)
		return MHD_NO;
	/* the request's body has served: its bytes go back, the answer's
	 * are held instead */
	free(req->req_body);
	req->req_body = NULL;
	req->req_body_len = 0;
	http_budget_give(req);
	if (req->rep_len >= HTTP_ANSWER_BUDGET_MIN && !http_budget_take(req, req->rep_len)) {
		request_fail(req, 503, "unavailable",
			     "too many large answers are being sent; retry shortly");
		http_set_header(req, "Retry-After", "1");
		problem_answer(req);
		if (req->rep_response == NULL)
			return MHD_NO;
	}
	/* the answer must be taken within request_timeout_seconds too: the
	 * reaper cuts a connection that does not read it (http_conn.c) */
	http_receiving(req, 1);
	MHD_add_response_header(req->rep_response, "X-Request-Id", req->req_id);
	char traceparent[TRACECTX_HEADER_LEN + 1];
	tracectx_format(&req->req_trace, traceparent);
	MHD_add_response_header(req->rep_response, "traceparent", traceparent);
	MHD_add_response_header(req->rep_response, "Cache-Control", "no-store");
	/* RFC 7240: only in answer to a preference (an operation's own
	 * wait_seconds applied without one is not announced) */
	if (req->req_waited > 0 && req->req_h_prefer != NULL) {
		char applied[16];
		snprintf(applied, sizeof(applied), "wait=%d", req->req_waited);
		MHD_add_response_header(req->rep_response, "Preference-Applied", applied);
	}
	/* CORS headers answer an Origin only */
	if (req->req_h_origin != NULL)
		cors_decorate(req->rep_response, req->req_h_origin);
	return MHD_queue_response(req->req_conn, req->rep_status, req->rep_response);
}

/* What the checks of a request's framing decided. */
enum http_framing { HTTP_FRAMING_OK, HTTP_FRAMING_ANSWER, HTTP_FRAMING_CLOSE };

/* The checks of a request's header section that need neither its route nor
 * its length: a problem is recorded and the request answered at once, the
 * connection closed (CLOSE) where what follows on it cannot be trusted. */
static enum http_framing http_framing(struct request *req)
{
	if (atomic_load(&http_stopping)) {
		/* a keep-alive client's next request while stopping: no new work
		 * starts, the connection closes, so the stop is not outrun */
		request_fail(req, 503, "unavailable", "idemd is stopping; retry");
		http_set_header(req, "Retry-After", "1");
		return HTTP_FRAMING_CLOSE;
	}
	if (req->req_bad_target) {
		/* a NUL would cut it where a proxy before idemd may not (RFC 9112
		 * allows no control byte in a target): never routed nor forwarded */
		request_fail(req, 400, "invalid_request",
			     "the request target holds a NUL or another control character");
		return HTTP_FRAMING_CLOSE;
	}
	if (req->req_bad_header != NULL) {
		/* never echoed: it may hold control bytes */
		request_fail(req, 400, "invalid_request",
			     "a request header has a malformed name, a control character in "
			     "its value, or a line folded onto it");
		return HTTP_FRAMING_CLOSE;
	}
	/* two lengths, or a length beside chunked framing, make the end of the
	 * body ambiguous (request smuggling): refuse and close */
	if (req->req_n_content_length > 1 || req->req_n_transfer_encoding > 1 ||
	    (req->req_h_content_length != NULL && req->req_h_transfer_encoding != NULL)) {
		request_fail(req, 400, "invalid_request",
			     "conflicting Content-Length or Transfer-Encoding headers");
		return HTTP_FRAMING_CLOSE;
	}
	if (req->req_n_if_match > 1) {
		request_fail(req, 400, "invalid_request", "send one If-Match header");
		return HTTP_FRAMING_ANSWER;
	}
	/* chunked is the only coding idemd reads; any other (gzip, chunked)
	 * would leave the body's end to the connection's close */
	if (req->req_h_transfer_encoding != NULL &&
	    strcasecmp(req->req_h_transfer_encoding, "chunked") != 0) {
		request_fail(req, 400, "invalid_request",
			     "Transfer-Encoding must be chunked, alone");
		return HTTP_FRAMING_CLOSE;
	}
	/* a fragment is never sent in a request target (RFC 9110 7.1): one
	 * would count in a gateway fingerprint but not reach the upstream */
	if (strchr(req->req_path, '#') != NULL) {
		request_fail(req, 400, "invalid_request", "a request target has no fragment (#)");
		return HTTP_FRAMING_CLOSE;
	}
	return HTTP_FRAMING_OK;
}

/* First call of a request, its headers complete: everything that can be
 * decided without the body is, and answered at once (libmicrohttpd then
 * closes the connection rather than read a body nobody wants). */
static enum MHD_Result http_headers_in(struct request *req)
{
	const char *cl = req->req_h_content_length;
	unsigned long long declared = 0;

	switch (http_framing(req)) {
	case HTTP_FRAMING_CLOSE:
		goto close;
	case HTTP_FRAMING_ANSWER:
		goto answer;
	case HTTP_FRAMING_OK:
		break;
	}
	if (cl != NULL) {
		char *end;
		errno = 0;
		declared = strtoull(cl, &end, 10);
		if (errno != 0 || *end != '\0' || end == cl ||
		    declared > http_cfg->max_body_bytes) {
			request_fail(req, 413, "payload_too_large", "the body exceeds %zu bytes",
				     http_cfg->max_body_bytes);
			goto answer;
		}
	}
	if (http_route(req, declared))
		goto answer;
	if (declared > 0 && !http_budget_take(req, (size_t)declared)) {
		http_busy(req);
		goto answer;
	}
	return MHD_YES;
close:
	http_set_header(req, "Connection", "close");
answer:
	req->req_dispatched = 1;
	http_receiving(req, 0);
	return http_send(req);
}

/* N more bytes of the request's body, DATA: kept, or (past max_body_bytes
 * or the body budget) dropped with what came before, the answer then
 * saying why on the last call. */
static enum MHD_Result http_body_in(struct request *req, const char *data, size_t n)
{
	if (req->req_dispatched || req->req_body_too_large || req->req_over_budget)
		return MHD_YES; /* discard the rest; the answer goes out on the last call */
	if (req->req_body_len + n > http_cfg->max_body_bytes ||
	    (req->req_body_len + n > req->req_reserved &&
	     !http_budget_take(req, req->req_body_len + n - req->req_reserved))) {
		if (req->req_body_len + n > http_cfg->max_body_bytes)
			req->req_body_too_large = 1;
		else
			req->req_over_budget = 1;
		free(req->req_body);
		req->req_body = NULL;
		req->req_body_len = 0;
		return MHD_YES;
	}
	char *body = realloc(req->req_body, req->req_body_len + n + 1);
	if (body == NULL)
		return MHD_NO;
	memcpy(body + req->req_body_len, data, n);
	req->req_body = body;
	req->req_body_len += n;
	body[req->req_body_len] = '\0';
	return MHD_YES;
}

enum MHD_Result http_access(void *cls, struct MHD_Connection *conn, const char *url,
			    const char *method, const char *version, const char *upload_data,
			    size_t *upload_data_size, void **con_cls)
{
	struct request *req = *con_cls;

	if (req == NULL) {
		req = http_request_new(conn, url, method, version);
		if (req == NULL)
			return MHD_NO;
		req->req_admin = cls == &http_admin_marker;
		*con_cls = req;
		return http_headers_in(req);
	}
	if (*upload_data_size > 0) {
		size_t n = *upload_data_size;
		*upload_data_size = 0;
		return http_body_in(req, upload_data, n);
	}
	if (req->req_dispatched) {
		if (!req->req_suspended)
			return MHD_YES;
		/* called again after http_resume(): the reply is ready, or is
		 * built now (http_resume_then) */
		req->req_suspended = 0;
		atomic_fetch_sub(&http_suspended, 1);
		if (req->req_on_resume != NULL) {
			void (*fn)(struct request *, void *) = req->req_on_resume;
			req->req_on_resume = NULL;
			fn(req, req->req_on_resume_arg);
		}
		return http_send(req);
	}
	req->req_dispatched = 1;
	http_receiving(req, 0);
	http_dispatch(req);
	if (req->req_suspended)
		return MHD_YES;
	return http_send(req);
}

/* The one place a request context is freed; also writes the access log line. */
void http_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
		    enum MHD_RequestTerminationCode toe)
{
	struct request *req = *con_cls;

	(void)cls;
	(void)conn;
	if (req == NULL)
		return;
	if (req->req_on_resume != NULL) {
		/* the connection ended before its reply was built: let the
		 * builder release what it holds (its reply is dropped) */
		req->req_on_resume(req, req->req_on_resume_arg);
		req->req_on_resume = NULL;
	}
	if (req->req_suspended) {
		/* resumed, but the client had gone (libmicrohttpd ends such a
		 * connection without calling the handler again) */
		req->req_suspended = 0;
		atomic_fetch_sub(&http_suspended, 1);
	}
	double ms = http_elapsed_ms(&req->req_start);
	unsigned status =
		req->rep_response != NULL || req->rep_problem.rp_status != 0 ? req->rep_status : 0;
	metrics_request(req->req_route ? req->req_route->method : NULL,
			req->req_route ? req->req_route->pattern : NULL, status, ms);
	char record[33] = "";
	if (req->req_has_record)
		token_id_hex(req->req_record, record);
	log_access(req->req_id, req->req_trace.tc_trace_id, req->req_method,
		   req->req_route ? req->req_route->pattern : "unmatched", status, ms, record,
		   toe != MHD_REQUEST_TERMINATED_COMPLETED_OK ? (int)toe : 0);
	http_clear_reply(req);
	http_budget_give(req);
	http_listing_give(req);
	http_receiving(req, 1); /* the next request's time starts now */
	for (int i = 0; i < HTTP_MAX_PARAMS; i++)
		free(req->req_params[i]);
	free(req->req_path);
	free(req->req_body);
	free(req->req_token);
	http_epoch_leave(req); /* nothing of a configuration is read after this */
	http_request_free(req);
	*con_cls = NULL;
	atomic_fetch_sub(&http_active, 1);
}

/* Frees KEY (PEM text, or NULL), wiped first: a secret. */
static void http_key_free(char *key)
{
	if (key != NULL)
		sodium_memzero(key, strlen(key));
	free(key);
}

/* The API's daemon on listen_host:listen_port (TLS when configured), or
 * NULL after logging. */
/* max_connections_per_ip, for the API daemon's connection notification
 * (http_connection counts each client's connections; not reloadable) */
static int http_conn_cap;

static struct MHD_Daemon *http_api_start(const struct config *cfg)
{
	struct MHD_OptionItem tls[3];
	char *cert = NULL, *key = NULL;
	unsigned flags;
	struct addrinfo *ai =
		http_listen_address("listen", cfg->listen_host, cfg->listen_port, &flags);

	if (ai == NULL)
		return NULL;
	http_conn_cap = cfg->max_connections_per_ip;
	if (http_tls_options(cfg, tls, &cert, &key, &flags) < 0) {
		freeaddrinfo(ai);
		free(cert);
		/* a key read before the certificate failed is a secret too */
		http_key_free(key);
		return NULL;
	}
	struct MHD_Daemon *d = MHD_start_daemon(
		flags, cfg->listen_port, NULL, NULL, http_access, NULL, MHD_OPTION_EXTERNAL_LOGGER,
		http_mhd_log, NULL, MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_THREAD_POOL_SIZE,
		(unsigned)cfg->threads, MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->connection_timeout_seconds,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, HTTP_CONNECTION_MEMORY,
		MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u, MHD_OPTION_NOTIFY_COMPLETED, http_completed,
		NULL, MHD_OPTION_NOTIFY_CONNECTION, http_connection, &http_conn_cap,
		MHD_OPTION_UNESCAPE_CALLBACK, http_no_unescape, NULL, MHD_OPTION_URI_LOG_CALLBACK,
		http_target_seen, NULL, MHD_OPTION_ARRAY, tls, MHD_OPTION_END);
	freeaddrinfo(ai);
	/* libmicrohttpd has parsed the PEM data by now; the key text is wiped */
	http_key_free(key);
	free(cert);
	if (d == NULL)
		log_error("http: cannot listen on %s:%u", cfg->listen_host, cfg->listen_port);
	return d;
}

int http_start(const struct config *cfg)
{
	http_cfg = cfg;
	http_budget_start(cfg);
	cors_init(cfg->cors_origins, cfg->n_cors_origins);
	if ((http_daemon = http_api_start(cfg)) == NULL)
		return -1;
	if (cfg->admin_listen_host != NULL &&
	    (http_admin_daemon = http_admin_start(cfg, &http_admin_marker)) == NULL) {
		MHD_stop_daemon(http_daemon);
		http_daemon = NULL;
		return -1;
	}
	if (http_conn_start(cfg) < 0) {
		MHD_stop_daemon(http_daemon);
		http_daemon = NULL;
		if (http_admin_daemon != NULL)
			MHD_stop_daemon(http_admin_daemon);
		http_admin_daemon = NULL;
		return -1;
	}
	if (!http_raw_supported())
		log_warn("http: libmicrohttpd %s is not 0.9.75: header values cut at a NUL byte "
			 "and obs-fold lines are not refused",
			 MHD_get_version());
	log_info("http: listening on %s:%u (%s) with %d threads", cfg->listen_host,
		 cfg->listen_port, cfg->tls_cert_file ? "https" : "http", cfg->threads);
	return 0;
}

void http_quiesce(void)
{
	if (http_daemon == NULL || http_quiesced)
		return;
	http_quiesced = 1;
	atomic_store(&http_stopping, 1);
	MHD_socket fd = MHD_quiesce_daemon(http_daemon);
	if (fd != MHD_INVALID_SOCKET)
		close(fd);
	if (http_admin_daemon != NULL) {
		fd = MHD_quiesce_daemon(http_admin_daemon);
		if (fd != MHD_INVALID_SOCKET)
			close(fd);
	}
	for (int i = 0; i < 300 && atomic_load(&http_active) > atomic_load(&http_suspended); i++)
		usleep(100 * 1000);
}

int http_stop(void)
{
	if (http_daemon == NULL)
		return 0;
	http_quiesce();
	/* every request in flight ends: new ones are refused (http_stopping),
	 * suspended ones are resumed by their batch, forward or waiter, all
	 * still running (main.c stops them after this) */
	for (int i = 0; i < 300 && atomic_load(&http_active) > 0; i++)
		usleep(100 * 1000);
	if (http_admin_daemon != NULL) {
		MHD_stop_daemon(http_admin_daemon); /* its routes never suspend */
		http_admin_daemon = NULL;
	}
	if (atomic_load(&http_suspended) > 0) {
		/* libmicrohttpd aborts the process when stopped with a suspended
		 * connection, and what those connections' jobs hold must not be
		 * freed under them: the caller ends the process instead */
		log_error("http: %d connections still suspended 30 s into the stop",
			  atomic_load(&http_suspended));
		return -1;
	}
	MHD_stop_daemon(http_daemon);
	http_daemon = NULL;
	http_conn_stop();
	retire_all_run(); /* no request runs: what reloads replaced goes */
	return 0;
}
