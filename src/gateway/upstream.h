/*
 * Upstream: the HTTP client the gateway forwards with. Calls run on one
 * thread driving a libcurl multi handle, so any number are in flight at
 * once without holding any other thread, and connections to each upstream
 * are kept alive and reused (easy handles are recycled, the connection
 * cache lives in the multi handle).
 *
 * A call sends its request at most once: libcurl's automatic resend after
 * a reused connection closed without an answer is refused, because the
 * upstream may have acted on the first copy; the call then ends
 * UPSTREAM_FAILED with uc_sent set. An answer that is too large or has a
 * malformed header line is abandoned mid-way, which closes its connection
 * (nothing after it can be read as the start of another answer). An
 * answer whose final status line was read counts as answered whatever
 * happens to the rest of it (UPSTREAM_BROKEN): the upstream has acted. Hop-by-hop headers are the caller's to
 * drop (headers.h); redirects are not followed.
 *
 * Ownership: the struct upstream_call and everything its inputs point to
 * (uc_headers included) stay the caller's, borrowed by this module from
 * upstream_call() until uc_done has run. The results (uc_resp_headers,
 * uc_resp) are owned by the call and freed by upstream_call_clear().
 */
#ifndef IDEMD_UPSTREAM_H
#define IDEMD_UPSTREAM_H

#include <curl/curl.h>
#include <jansson.h>
#include <stddef.h>

#include "buf.h"
#include "common.h"
#include "workq.h"

enum upstream_result {
	UPSTREAM_ANSWERED,    /* uc_status, uc_resp_headers, uc_resp are set */
	UPSTREAM_UNREACHABLE, /* nothing was sent: no connection could be made */
	UPSTREAM_TIMEOUT,     /* sent, but no whole answer within uc_timeout_ms */
	UPSTREAM_FAILED,      /* sent, then the connection failed or closed */
	UPSTREAM_TOO_LARGE,   /* the answer's body exceeds uc_max_body */
	UPSTREAM_INVALID,     /* a header line of the answer is malformed */
	UPSTREAM_BROKEN,      /* a final status line (uc_status) was read, then the answer
			       * broke off: a cut body, a stall past uc_timeout_ms, a reset */
};

struct upstream_call {
	/* set by the caller */
	const char *uc_method;
	const char *uc_url;
	const char *uc_body; /* NULL when uc_body_len is 0 */
	size_t uc_body_len;
	struct curl_slist *uc_headers; /* "Name: value" lines sent as they are */
	long uc_connect_timeout_ms;
	long uc_timeout_ms; /* the whole exchange */
	size_t uc_max_body;
	/* the answer headers kept besides Content-Type and Content-Encoding
	 * (a body means nothing without them): lower-cased names, borrowed
	 * until uc_done has run (the route's store_headers: its config
	 * outlives the suspended request); a name headers_never_stored()
	 * lists never is */
	char *const *uc_keep;
	size_t uc_n_keep;
	/* called once, on the upstream thread, when the call has ended */
	void (*uc_done)(struct upstream_call *c);

	/* results */
	enum upstream_result uc_result;
	int uc_sent;	      /* the request left for the upstream */
	long uc_final_status; /* the status line of the final answer read (2xx-5xx), or 0 */
	char uc_error[CURL_ERROR_SIZE]; /* what went wrong, for logs */
	long uc_status;
	json_t *uc_resp_headers; /* kept headers, lower-cased names */
	struct buf uc_resp;	 /* the answer's body */

	/* private to upstream.c */
	struct workq_item uc_item; /* in the upstream thread's queue */
	int uc_resend_refused;
	int uc_too_large;
	int uc_invalid;
	int uc_interim;		 /* the answer being read is a 1xx */
	int uc_in_trailers;	 /* the final answer's header block has ended */
	char uc_connection[256]; /* names listed in the answer's Connection headers */
};

/* Starts the upstream thread. -1 after logging. */
int upstream_start(void) IDEMD_WUR;

/* Queues C (its result fields are reset). -1 when stopping or not
 * started: uc_done will not be called. Callable from any thread. */
int upstream_call(struct upstream_call *c) IDEMD_WUR;

/* Lets every queued and running call end, then stops the thread. New
 * calls are refused from the start. Safe to call more than once. */
void upstream_drain(void);

/* upstream_drain(), then frees libcurl's state. Safe when not started. */
void upstream_stop(void);

/* Frees the results of C. */
void upstream_call_clear(struct upstream_call *c);

#endif
