/*
 * Gateway internals shared by its three parts: gateway.c (route table and
 * submit, on the HTTP thread), gateway_forward.c (the request sent
 * upstream, built on the batcher thread) and gateway_finish.c (the outcome,
 * on the finisher threads). Not for other modules: they see gateway.h.
 * Ownership: arguments are borrowed for the call unless noted.
 */
#ifndef IDEMD_GATEWAY_INT_H
#define IDEMD_GATEWAY_INT_H

#include <curl/curl.h>
#include <stdint.h>
#include <time.h>

#include "batcher.h"
#include "buf.h"
#include "engine.h"
#include "router.h"
#include "store.h"
#include "token.h"
#include "upstream.h"

struct config_route;
struct request;

/* Where a route's submits get their key (config "key"). */
enum gateway_key { GATEWAY_KEY_TOKEN, GATEWAY_KEY_HEADER, GATEWAY_KEY_JSON, GATEWAY_KEY_BODY };

struct gateway_route {
	struct route gr_route;		   /* first member: handlers get &gr_route */
	const struct config_route *gr_cfg; /* borrowed from the config */
	uint32_t gr_tenant_id;
	char *gr_target; /* URL the request goes to, before its query; owned */
	enum gateway_key gr_key;
	const char *gr_key_arg; /* the header name or JSON pointer, in gr_cfg */
	char *gr_by;		/* "route:METHOD path", for the audit trail; owned */
};

/* A forward: gj_route is borrowed; gj_url and the call's headers and
 * results are owned, freed with the job (gateway_job_free()); gj_resp's
 * headers are freed by the step that stores them. */
struct gateway_job {
	struct upstream_call gj_call;
	struct workq_item gj_item; /* in the finishers' queue */
	struct request *gj_req;	   /* borrowed; suspended until the job ends */
	const struct gateway_route *gj_route;
	uint8_t gj_token_id[TOKEN_ID_BYTES];
	int gj_attempt;
	int64_t gj_lease_expires_at; /* ms, idemd_unix_ms(): the claim's lease */
	int gj_retention_seconds;
	int gj_audit_seconds; /* how long its audit events are kept */
	char *gj_url;
	int gj_stopped;		 /* refused: the gateway is stopping */
	int gj_unavailable;	 /* a final answer that could not be queued to store */
	struct timespec gj_sent; /* CLOCK_MONOTONIC: the forward's start */
	/* storing a final answer (gateway_store) */
	struct batcher_job gj_bj;
	struct stored_response gj_resp; /* headers owned, body borrowed from gj_call */
	struct complete_args gj_cargs;
	struct complete_result gj_cres;
	/* a completion the database did not answer, written again by a
	 * finisher after the request was answered 503 (gateway_redo): what
	 * the request lent it, copied */
	int gj_redo;
	char *gj_redo_by;
	char gj_redo_id[HTTP_REQUEST_ID_MAX + 1];
};

/* gateway_needs.c */
/* Writes what ROUTES (N of them) need of their operations' leases, with
 * MARGIN_MS, as this instance's, replacing what it had. 0, or -1 (logged). */
int gateway_needs_publish(const struct gateway_route *routes, size_t n, long margin_ms) IDEMD_WUR;
/* Deletes this instance's needs (at stop). */
void gateway_needs_drop(void);

/* gateway_forward.c */
/* The headers sent upstream (headers_forward) from the request's F (N of
 * them, http_fields()): owned (curl_slist_free_all()), or NULL. */
struct curl_slist *gateway_request_headers(struct request *req, const struct gateway_route *gr,
					   const struct token *t, const struct headers_field *f,
					   size_t n);
/* The request's query string rebuilt: into *OUT, owned (free()); "" when
 * there is none. 0 or -1. */
int gateway_query(struct request *req, char **out) IDEMD_WUR;
/* Builds the job for a request that now holds the claim RES, owned
 * (gateway_job_free()); REQ (its body too) and GR are borrowed until the job
 * ends. Takes *HEADERS, setting it to NULL, unless it fails before that
 * (then *HEADERS stays the caller's). The forward's deadline comes
 * MARGIN_MS (forward_margin_ms) before the lease ends at the latest. NULL
 * on OOM. Runs on a batcher thread. */
struct gateway_job *gateway_job_new(struct request *req, const struct gateway_route *gr,
				    const struct token *t, const struct operation *op,
				    const struct claim_result *res, const char *query,
				    struct curl_slist **headers, size_t max_body, long margin_ms);
void gateway_job_free(struct gateway_job *j);

/* gateway_finish.c */
/* Replays answer with the stored response itself (status, headers, body). */
extern const struct engine_replay gateway_replay;
/* Gives the claim back so that the same token can be submitted again. */
void gateway_release(const struct gateway_route *gr, const uint8_t *token_id, int attempt,
		     const char *request_id);
/* Writes the outcome of a finished (or refused) forward and resumes;
 * takes J. */
void gateway_finish(struct gateway_job *j);
/* Upstream thread: queues the ended call's job for a finisher; takes the
 * job C is in. */
void gateway_on_done(struct upstream_call *c);
/* Starts the finisher threads: 0, or -1 after logging. */
int gateway_finish_start(void) IDEMD_WUR;
/* Lets the finishers empty their queue and joins them. */
void gateway_finish_stop(void);

/* gateway_keys.c: the record a derived-key route's submit names (its key
 * from a header, the body's JSON or its hash BYTES_FP, scoped by the
 * request's headers F (N of them) and under the route's operation), *DOC
 * the body parsed when it was, owned (json_decref()); and *DOC parsed once
 * within its memory budget (NULL: empty or not JSON), owned likewise. Each
 * 0, or -1 after replying. */
int gateway_derived_address(struct request *req, const struct gateway_route *gr,
			    const uint8_t *bytes_fp, const struct headers_field *f, size_t n,
			    json_t **doc, struct token *t, struct operation *op) IDEMD_WUR;
int gateway_body_doc(struct request *req, json_t **doc) IDEMD_WUR;

#endif
