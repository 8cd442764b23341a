/* A request as the handlers see it: its context (struct request), its
 * headers and query, the reply helpers, and leaving the reply to another
 * thread. http.c runs the daemon that makes them.
 * Ownership: arguments are borrowed for the call unless noted; REQ is
 * owned by http.c, never freed by a handler. */
#ifndef IDEMD_REQUEST_H
#define IDEMD_REQUEST_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "token.h"
#include "tracectx.h"

struct headers_field;
struct route;

#define HTTP_REQUEST_ID_MAX 128
#define HTTP_MAX_PARAMS 2
/* Per-connection buffer for the request line and headers (larger: 431),
 * small so that thousands of open connections stay cheap. */
#define HTTP_CONNECTION_MEMORY ((size_t)16 * 1024)

#define REQUEST_PROBLEM_HEADERS 3

/* A problem found while handling a request (request_fail): the status, a
 * stable code, the detail, and the headers its answer carries (Retry-After,
 * Allow, WWW-Authenticate, Connection). Nothing is answered yet: checks
 * compute, and http.c turns this into the one problem+json answer
 * (problem_answer) as it sends. rp_status 0: none. */
struct request_problem {
	unsigned rp_status;
	const char *rp_code; /* a literal */
	char rp_detail[512];
	int rp_n_headers;
	char rp_name[REQUEST_PROBLEM_HEADERS][32];
	char rp_value[REQUEST_PROBLEM_HEADERS][128];
};

/* One per request: created on the first callback, freed in the completion
 * callback (http.c), nowhere else. Pointers are owned by it (freed with
 * it) unless noted. */
struct request {
	struct MHD_Connection *req_conn; /* borrowed */
	struct http_conn *req_conn_ctx;	 /* borrowed: the connection's own state, or NULL */
	const char *req_method;		 /* borrowed from libmicrohttpd */
	char *req_path;			 /* path as sent (not percent-decoded) */
	char req_id[HTTP_REQUEST_ID_MAX + 1];
	struct tracectx req_trace; /* the caller's trace (or a new one), idemd's span */
	char *req_body;		   /* NUL-terminated, may be NULL */
	size_t req_body_len;
	int req_body_too_large;
	int req_over_budget;			/* max_inflight_body_bytes would be passed */
	const struct route *req_route;		/* borrowed from the route table */
	char *req_params[HTTP_MAX_PARAMS];	/* path segments matched by {}, percent-decoded */
	size_t req_param_lens[HTTP_MAX_PARAMS]; /* decoded lengths: a NUL inside shows as strlen < len */
	/* the headers the core reads for every request, found in one pass
	 * over them (the first of each name; borrowed from libmicrohttpd) */
	const char *req_h_authorization, *req_h_content_length, *req_h_content_type, *req_h_origin,
		*req_h_request_id, *req_h_transfer_encoding, *req_h_idempotency_key,
		*req_h_if_match, *req_h_prefer;
	const char *req_h_route_key; /* a derived-key route's header (gateway) */
	/* a gateway token route's token, verified in the header phase and
	 * taken from here by its submit, or NULL (a pointer: most requests
	 * have none, and the request stays small) */
	struct token *req_token;
	int req_n_content_length;    /* how many Content-Length headers */
	int req_n_transfer_encoding; /* how many Transfer-Encoding headers */
	int req_n_idempotency_key;   /* how many Idempotency-Key headers */
	int req_n_if_match;	     /* how many If-Match headers */
	const char *req_bad_header;  /* borrowed: first header whose name or value is malformed */
	int req_has_underscore;	     /* some header name holds '_' */
	int req_bad_target;	     /* the request target holds a NUL or a control byte */
	int req_no_if_match;	     /* a gateway route that ignores If-Match */
	int req_waited;		     /* seconds of Prefer: wait applied (answer says so) */
	size_t req_reserved;	     /* body bytes counted against max_inflight_body_bytes */
	size_t req_budget_client;    /* its client address's slot (http_budget.c) */
	size_t req_budget_tenant;    /* 1 + its tenant's slot, 0: none */
	size_t req_listing;	     /* 1 + its tenant's slot in the listing share, 0: none */
	uint32_t req_tenant_id;	     /* set by authentication */
	/* who acts, for the audit trail, borrowed: "api_key:<id>" (set by
	 * authentication, in req_by_buf) or the gateway route's name */
	const char *req_by;
	char req_by_buf[320];
	struct timespec req_start;
	int req_dispatched;
	int req_admin;		/* came in on admin_listen */
	unsigned req_epoch;	/* which grace counter holds it (http_grace_begin) */
	uint8_t req_record[16]; /* the record addressed, logged */
	int req_has_record;	/* req_record holds one */
	int req_suspended;	/* another thread builds the reply (http_suspend) */
	/* set by http_resume_then(): builds the reply on the request's thread;
	 * the arg is borrowed */
	void (*req_on_resume)(struct request *req, void *arg);
	void *req_on_resume_arg;

	/* the reply being built: a problem a check found (request_fail), which
	 * http.c turns into the answer when it sends, or an answer built */
	struct request_problem rep_problem;
	const char *rep_code; /* a problem reply's code (a literal), else NULL */
	unsigned rep_status;
	const char *rep_body; /* borrowed: its body, held by rep_response */
	size_t rep_len;	      /* its body's bytes */
	struct MHD_Response *rep_response;
};

/* Sets who acts for the audit trail (BY: "api_key:<id>", "route:<METHOD>
 * <path>") with the request's trace id after a unit separator, which the
 * store splits into the event's by and trace_id columns. */
void http_set_by(struct request *req, const char *by);

/* Header of the request, or NULL (borrowed, valid during the request). */
const char *http_header(const struct request *req, const char *name);
/* A query argument as sent (not percent-decoded; '+' read as a space), or
 * NULL (borrowed, valid during the request). */
const char *http_query(const struct request *req, const char *name);

/* The request's headers (a value "" when empty) or, with QUERY, its query
 * arguments (a value NULL for one without "="), in the order they came:
 * *OUT a new array of *N, owned (free(); NULL when there are none), its
 * names and values borrowed, valid during the request. 0, or -1 (out of
 * memory). */
int http_fields(const struct request *req, int query, struct headers_field **out,
		size_t *n) IDEMD_WUR;

/* The client's address as text into OUT ("unknown" when there is none). */
void http_client_ip(const struct request *req, char *out, size_t len);

/* V as JSON text (json_dumps FLAGS) followed by a newline, so that
 * answers printed in a terminal end their line: owned (free()), its
 * length in *LEN (may be NULL); NULL when out of memory. */
char *http_json_text(const json_t *v, size_t flags, size_t *len);

/* The request fails with STATUS, CODE (snake_case, a literal) and a
 * formatted detail (cut to 511 bytes at a character boundary): recorded in
 * rep_problem, replacing any earlier reply; answered as problem+json when
 * the request is sent. A check calls it and returns -1; nothing else
 * replies for it. */
void request_fail(struct request *req, unsigned status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* request_fail() with 503 unavailable and Retry-After: 1: the database is
 * away. Counted here, once (idemd_db_unavailable_total), whichever path
 * found it away. */
void request_unavailable(struct request *req);

/* Replies. http_reply_json() takes BODY (json_decref()s it, also when it
 * fails); http_reply_bytes() copies DATA. Each replaces any earlier reply
 * (and a recorded problem). JSON bodies end with a newline. */
void http_reply_json(struct request *req, unsigned status, json_t *body);
void http_reply_bytes(struct request *req, unsigned status, const char *content_type,
		      const void *data, size_t len);
void http_reply_empty(struct request *req, unsigned status);
/* http_reply_bytes() that takes DATA (from malloc; free()d when the reply
 * is sent or replaced, or at once when it cannot be made) instead of
 * copying it. */
void http_reply_take(struct request *req, unsigned status, const char *content_type, char *data,
		     size_t len);

/* Adds a header to the reply built so far, or to the problem recorded
 * (copied); a later reply replaces it and its headers. Without either
 * there is nothing to add it to. */
void http_set_header(struct request *req, const char *name, const char *value);
/* The listing share, for the statements that read many rows (a record
 * listing, a page of audit events): one tenant runs at most
 * max_listing_per_tenant of them at once on this instance (0: no bound),
 * so one tenant's listings cannot hold every HTTP worker and pool
 * connection while another tenant's claims wait. Takes REQ's tenant's
 * share: 0, or -1 after recording 429 rate_limited with Retry-After: 1.
 * http_listing_give() gives it back once the statement has run (the end
 * of the request does too). */
int http_listing_take(struct request *req) IDEMD_WUR;
void http_listing_give(struct request *req);

/*
 * Leaves the reply to another thread: call from a handler, which then returns
 * without replying. The connection sleeps until that thread has built the
 * reply with the helpers above and called http_resume(); from then on it
 * must not touch REQ. The request context stays valid (and is freed by the
 * completion callback as usual).
 */
void http_suspend(struct request *req);
void http_resume(struct request *req);

/* http_resume(), with the reply left to build: FN(REQ, ARG) runs on the
 * request's own thread when it picks the connection up again, so the thread
 * that resumes spends no time on it. ARG is borrowed until FN has run. */
void http_resume_then(struct request *req, void (*fn)(struct request *req, void *arg), void *arg);

/* Notes the record (16-byte id) REQ addresses, for its access log line. */
static inline void http_note_record(struct request *req, const uint8_t id[16])
{
	memcpy(req->req_record, id, sizeof(req->req_record));
	req->req_has_record = 1;
}

#endif
