/* A request's context: made from its headers (the ones read for every
 * request, found in one pass; its id and trace), and what a handler does
 * with it (request.h): who acts for the audit trail, and handing its
 * reply to another thread (suspend, resume). Its fields are read in
 * http_fields.c. */
#include "http_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "headers.h"
#include "randpool.h"
#include "retire.h"

atomic_int http_active;
atomic_int http_suspended;

/* The headers http_scan_header() picks out, where each goes, and for the
 * ones that must come once, where their count goes. */
static const struct {
	const char *name;
	size_t len, off, count_off;
} http_scanned[] = {
#define HTTP_SCANNED(name, field, count) \
	{ \
		name, sizeof(name) - 1, offsetof(struct request, field), count \
	}
	HTTP_SCANNED("Content-Length", req_h_content_length,
		     offsetof(struct request, req_n_content_length)),
	HTTP_SCANNED("Authorization", req_h_authorization, 0),
	HTTP_SCANNED("Content-Type", req_h_content_type, 0),
	HTTP_SCANNED("Origin", req_h_origin, 0),
	HTTP_SCANNED("X-Request-Id", req_h_request_id, 0),
	HTTP_SCANNED("Transfer-Encoding", req_h_transfer_encoding,
		     offsetof(struct request, req_n_transfer_encoding)),
	HTTP_SCANNED("Idempotency-Key", req_h_idempotency_key,
		     offsetof(struct request, req_n_idempotency_key)),
	HTTP_SCANNED("If-Match", req_h_if_match, offsetof(struct request, req_n_if_match)),
	HTTP_SCANNED("Prefer", req_h_prefer, 0),
#undef HTTP_SCANNED
};

/* What one pass over the headers carries: the request, and the check of
 * the raw header section (http_raw_begin). */
struct http_scan {
	struct request *hs_req;
	struct headers_tiling hs_raw;
	int hs_raw_on;
};

static enum MHD_Result http_scan_header(void *cls, enum MHD_ValueKind kind, const char *key,
					size_t n, const char *value, size_t value_len)
{
	struct http_scan *scan = cls;
	struct request *req = scan->hs_req;

	(void)kind;
	if (scan->hs_raw_on)
		headers_tiling_field(&scan->hs_raw, key, n, value, value_len);
	if (req->req_bad_header == NULL &&
	    (!headers_is_token(key, n) || (value != NULL && !headers_value_ok(value, value_len))))
		req->req_bad_header = key;
	if (memchr(key, '_', n) != NULL)
		req->req_has_underscore = 1;
	for (size_t i = 0; i < sizeof(http_scanned) / sizeof(http_scanned[0]); i++) {
		if (n != http_scanned[i].len || strcasecmp(key, http_scanned[i].name) != 0)
			continue;
		const char **slot = (const char **)(void *)((char *)req + http_scanned[i].off);
		if (*slot == NULL)
			*slot = value;
		if (http_scanned[i].count_off != 0)
			(*(int *)(void *)((char *)req + http_scanned[i].count_off))++;
		break;
	}
	return MHD_YES;
}

/*
 * libmicrohttpd 0.9.75 cuts a header value at a NUL byte (the rest of the
 * line is dropped: connection.c, process_broken_line and
 * connection_add_header take strlen of the value) and joins an obs-fold
 * line onto the field's name (process_broken_line appends it to `last`,
 * the name), and no option refuses either. What it leaves behind can be
 * read: the request's header section stays in place in its read buffer,
 * from the method (the request line's first byte) for
 * MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE bytes, line ends and colons
 * turned into NULs. headers_tiling (headers.c) checks that the reported
 * fields cover it exactly, so a cut value or a fold is refused as a bad
 * header. Tied to that parser: with another libmicrohttpd the check is
 * off (http_raw_supported) rather than refuse what it cannot read.
 */
static int http_raw_begin(struct http_scan *scan, struct MHD_Connection *conn, const char *method,
			  const char *version)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);

	if (!http_raw_supported() || ci == NULL || method == NULL || version == NULL)
		return 0;
	uintptr_t first = (uintptr_t)version + strlen(version) - (uintptr_t)method;
	headers_tiling_begin(&scan->hs_raw, method, ci->header_size,
			     first < ci->header_size ? (size_t)first : ci->header_size);
	return 1;
}

int http_raw_supported(void)
{
#if MHD_VERSION == 0x00097500
	static int supported = -1;

	if (supported < 0)
		supported = strcmp(MHD_get_version(), "0.9.75") == 0;
	return supported;
#else
	return 0;
#endif
}

void *http_target_seen(void *cls, const char *uri, struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct http_conn *c = ci != NULL ? ci->socket_context : NULL;

	(void)cls;
	if (c == NULL || uri == NULL)
		return NULL;
	c->hc_target = uri;
	c->hc_target_len = strlen(uri);
	c->hc_target_ctl = 0;
	for (size_t i = 0; i < c->hc_target_len; i++)
		if ((unsigned char)uri[i] < 0x20 || uri[i] == 0x7f)
			c->hc_target_ctl = 1;
	return NULL;
}

/* 1 when the target of the request whose VERSION libmicrohttpd reports
 * (C: its connection's state, NULL when that was out of memory) holds a
 * control byte, or cannot be shown not to. 0.9.75 ends the target with a
 * NUL where the space before the version was, so the version starts right
 * after what the log callback saw unless a NUL cut it earlier. */
static int http_target_bad(struct http_conn *c, const char *version)
{
	int bad = c == NULL || c->hc_target == NULL || c->hc_target_ctl;

	if (!bad && http_raw_supported() && version != c->hc_target + c->hc_target_len + 1)
		bad = 1;
	if (c != NULL)
		c->hc_target = NULL; /* the next request's is noted anew */
	return bad;
}

static int http_valid_request_id(const char *id)
{
	size_t n = strlen(id);

	if (n == 0 || n > HTTP_REQUEST_ID_MAX)
		return 0;
	return strspn(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

/* Requests alive per grace epoch (0 or 1), and the epoch new ones join. */
static atomic_long http_epoch_requests[2];
static atomic_uint http_epoch_now;
static unsigned http_epoch_waited; /* the epoch a grace period waits for */

void http_grace_begin(void)
{
	http_epoch_waited = atomic_fetch_xor(&http_epoch_now, 1u) & 1u;
	/* one grace period at a time: the one before was done, and freed
	 * what it waited for */
	retire_seal();
}

int http_grace_done(void)
{
	if (atomic_load(&http_epoch_requests[http_epoch_waited]) != 0)
		return 0;
	retire_sealed_run();
	return 1;
}

void http_epoch_leave(const struct request *req)
{
	atomic_fetch_sub(&http_epoch_requests[req->req_epoch], 1);
}

/* Each thread keeps the last request it freed for its next one (freed
 * with the thread): a request (about 1.9 KiB) is above malloc's small
 * sizes, and allocating one walked malloc's fast bins every time
 * (malloc_consolidate: 1.8 % of idemd's perf samples under the replay
 * load). AddressSanitizer builds keep no spare: there every request is
 * its own allocation, so a use after free is caught. */
#if defined(__SANITIZE_ADDRESS__) /* gcc */
#define HTTP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) /* clang */
#define HTTP_ASAN 1
#endif
#endif
static pthread_key_t http_spare_key;
static int http_spare_ok;
static pthread_once_t http_spare_once = PTHREAD_ONCE_INIT;

static void http_spare_init(void)
{
#ifndef HTTP_ASAN
	http_spare_ok = pthread_key_create(&http_spare_key, free) == 0;
#endif
}

/* A zeroed request: the thread's spare, or a new one; NULL when out of
 * memory. */
static struct request *http_request_alloc(void)
{
	pthread_once(&http_spare_once, http_spare_init);
	struct request *req = http_spare_ok ? pthread_getspecific(http_spare_key) : NULL;

	if (req == NULL)
		return calloc(1, sizeof(*req));
	(void)pthread_setspecific(http_spare_key, NULL);
	memset(req, 0, sizeof(*req));
	return req;
}

void http_request_free(struct request *req)
{
	if (req != NULL && http_spare_ok && pthread_getspecific(http_spare_key) == NULL &&
	    pthread_setspecific(http_spare_key, req) == 0)
		return;
	free(req);
}

struct request *http_request_new(struct MHD_Connection *conn, const char *url, const char *method,
				 const char *version)
{
	struct request *req = http_request_alloc();
	struct http_scan scan = { .hs_req = req };

	if (req == NULL)
		return NULL;
	/* counted before it reads any configuration (http_grace_begin); the
	 * epoch read again after the count, so that a grace period that
	 * began meanwhile either saw the count or began before every read */
	for (;;) {
		req->req_epoch = atomic_load(&http_epoch_now) & 1u;
		atomic_fetch_add(&http_epoch_requests[req->req_epoch], 1);
		if ((atomic_load(&http_epoch_now) & 1u) == req->req_epoch)
			break;
		atomic_fetch_sub(&http_epoch_requests[req->req_epoch], 1);
	}
	req->req_conn = conn;
	req->req_method = method;
	req->req_path = strdup(url);
	clock_gettime(CLOCK_MONOTONIC, &req->req_start);
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	req->req_conn_ctx = ci != NULL ? ci->socket_context : NULL;
	req->req_bad_target = http_target_bad(req->req_conn_ctx, version);
	scan.hs_raw_on = http_raw_begin(&scan, conn, method, version);
	MHD_get_connection_values_n(conn, MHD_HEADER_KIND, http_scan_header, &scan);
	if (scan.hs_raw_on && !headers_tiling_end(&scan.hs_raw) && req->req_bad_header == NULL)
		req->req_bad_header = "(a NUL in a value or an obs-fold)";
	const char *id = req->req_h_request_id;
	if (id != NULL && http_valid_request_id(id)) {
		snprintf(req->req_id, sizeof(req->req_id), "%s", id);
	} else {
		unsigned char raw[16];
		static const char hex[] = "0123456789abcdef";
		randpool_buf(raw, sizeof(raw));
		for (size_t i = 0; i < sizeof(raw); i++) {
			req->req_id[2 * i] = hex[raw[i] >> 4];
			req->req_id[2 * i + 1] = hex[raw[i] & 15];
		}
		req->req_id[2 * sizeof(raw)] = '\0';
	}
	if (req->req_path == NULL) {
		http_epoch_leave(req);
		http_request_free(req);
		return NULL;
	}
	tracectx_begin(&req->req_trace,
		       MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "traceparent"));
	atomic_fetch_add(&http_active, 1);
	return req;
}

void http_set_by(struct request *req, const char *by)
{
	size_t len = strlen(by), tlen = sizeof(req->req_trace.tc_trace_id) - 1;

	/* "BY\x1fTRACE", copied; a name too long for the buffer goes without
	 * its trace id, cut to fit */
	if (len + 1 + tlen < sizeof(req->req_by_buf)) {
		memcpy(req->req_by_buf, by, len);
		req->req_by_buf[len] = '\x1f';
		memcpy(req->req_by_buf + len + 1, req->req_trace.tc_trace_id, tlen + 1);
	} else {
		snprintf(req->req_by_buf, sizeof(req->req_by_buf), "%s", by);
	}
	req->req_by = req->req_by_buf;
}

void http_suspend(struct request *req)
{
	req->req_suspended = 1;
	atomic_fetch_add(&http_suspended, 1);
	MHD_suspend_connection(req->req_conn);
}

void http_resume(struct request *req)
{
	MHD_resume_connection(req->req_conn);
}

void http_resume_then(struct request *req, void (*fn)(struct request *req, void *arg), void *arg)
{
	req->req_on_resume = fn;
	req->req_on_resume_arg = arg;
	MHD_resume_connection(req->req_conn);
}
