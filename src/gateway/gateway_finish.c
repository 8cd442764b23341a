/*
 * Gateway, finish: the outcome of a forward. A final answer (2xx-4xx
 * unless release_on) is queued as a complete for the batcher from the
 * upstream thread and replied once it committed; anything else goes to the
 * finisher threads, which release the claim and answer 502/504/5xx. Also
 * the replies built from a stored answer.
 */
#include "answer.h"
#include "gateway_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "config.h"
#include "headers.h"
#include "request.h"
#include "log.h"
#include "metrics.h"
#include "problem.h"
#include "replaycache.h"
#include "reqjson.h"

#define GATEWAY_FINISHERS 4

static struct {
	struct workq q; /* ended calls, for the finishers */
	struct workq_workers finishers;
} gw = { .q = WORKQ_INITIALIZER };

/* ---------------------------------------------------------------- replies */

/* The stored headers of a response are read without jansson when they are
 * simple (reqjson_members): at most GATEWAY_FAST_HEADERS string members,
 * names of at most 128 bytes, values of at most 8192. */
#define GATEWAY_FAST_HEADERS 16
static int gateway_fast_headers(const char *stored, struct reqjson_member *m, size_t *n)
{
	if (!reqjson_members(stored, strlen(stored), m, GATEWAY_FAST_HEADERS, n))
		return 0;
	for (size_t i = 0; i < *n; i++)
		if (!m[i].rm_is_string || m[i].rm_name_len > 128 || m[i].rm_len > 8192)
			return 0;
	return 1;
}

/* Adds header NAME: VALUE (not NUL-terminated, at most 128 and 8192
 * bytes: gateway_fast_headers) to the reply unless it may not be replayed
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
	http_set_header(req, n, v);
	return strcasecmp(n, "content-type") == 0;
}

/* Answers with a stored (or about to be stored) response R. */
static void gateway_reply_response(struct request *req, const struct stored_response *r,
				   const char *replayed)
{
	const char *stored = r->sr_headers ? r->sr_headers : "{}";
	struct reqjson_member fast[GATEWAY_FAST_HEADERS];
	size_t n_fast;
	int has_type = 0;

	http_reply_bytes(req, (unsigned)r->sr_status, NULL, r->sr_body, r->sr_body_len);
	if (req->rep_response == NULL)
		return;
	if (gateway_fast_headers(stored, fast, &n_fast)) {
		for (size_t i = 0; i < n_fast; i++)
			has_type |= gateway_add_header(req, fast[i].rm_name, fast[i].rm_name_len,
						       fast[i].rm_str, fast[i].rm_len);
	} else {
		const char *name;
		json_t *v, *headers = json_loads(stored, 0, NULL);
		json_object_foreach(headers, name, v)
		{
			if (json_is_string(v) && strlen(name) <= 128 &&
			    json_string_length(v) <= 8192)
				has_type |= gateway_add_header(req, name, strlen(name),
							       json_string_value(v),
							       json_string_length(v));
		}
		json_decref(headers);
	}
	if (!has_type && r->sr_is_json)
		http_set_header(req, "Content-Type", "application/json");
	if (replayed != NULL)
		http_set_header(req, "Idempotent-Replayed", replayed);
}

static void gateway_replay_send(struct request *req, const struct stored_response *r)
{
	gateway_reply_response(req, r, "true");
}

const struct engine_replay gateway_replay = { 0, NULL, gateway_replay_send };

/* Gives the claim back so that the same token can be submitted again. */
void gateway_release(const struct gateway_route *gr, const uint8_t *token_id, int attempt,
		     const char *request_id)
{
	enum release_outcome outcome;

	if (store_release(gr->gr_tenant_id, token_id, attempt, gr->gr_by, &outcome) < 0)
		log_warn("gateway: request %s: the claim could not be released (database "
			 "unavailable); it frees itself when its lease ends",
			 request_id);
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

static _Atomic int gateway_stopping; /* the finishers are told to stop */

/* Finisher: writes J's completion until the database answers (each try
 * bounded by database_timeout_ms, a second apart) or the gateway stops;
 * then frees J. The key stays held by this process's fence meanwhile. */
static void gateway_complete_again(struct gateway_job *j)
{
	struct timespec pause = { 1, 0 };
	int rc = -1;

	for (int tries = 1; rc < 0; tries++) {
		int last = atomic_load(&gateway_stopping);
		if (!last)
			nanosleep(&pause, NULL);
		rc = store_complete(&j->gj_cargs, &j->gj_cres);
		if (rc == 0 && (j->gj_cres.cpr_outcome == COMPLETE_STORED ||
				j->gj_cres.cpr_outcome == COMPLETE_ALREADY)) {
			/* the tenant from the job's own copy: the route table may be
			 * a replaced one, freed since the request was answered */
			engine_completion_keep(j->gj_cargs.tenant_id, j->gj_token_id, &j->gj_cres);
			log_info("gateway: request %s: the upstream's answer was stored at try %d",
				 j->gj_redo_id, tries + 1);
		} else if (rc == 0) {
			log_warn("gateway: request %s: attempt %d no longer held the key when its "
				 "answer was stored again",
				 j->gj_redo_id, j->gj_attempt);
		} else if (last) {
			log_error(
				"gateway: request %s: stopping with the upstream's answer not "
				"stored; once this process is gone the key may be forwarded again",
				j->gj_redo_id);
			break;
		}
	}
	free(j->gj_redo_by);
	free(j->gj_resp.sr_headers);
	store_response_free(&j->gj_cres.cpr_stored);
	gateway_job_free(j);
}

/* Hands J, whose request is answered, to a finisher that writes its
 * completion again (gateway_complete_again): 0, or -1 (then J is still
 * the caller's). */
static int gateway_redo(struct gateway_job *j)
{
	j->gj_redo_by = j->gj_cargs.by != NULL ? strdup(j->gj_cargs.by) : NULL;
	if (j->gj_cargs.by != NULL && j->gj_redo_by == NULL)
		return -1;
	snprintf(j->gj_redo_id, sizeof(j->gj_redo_id), "%s", j->gj_req->req_id);
	j->gj_cargs.by = j->gj_redo_by;
	j->gj_req = NULL;   /* answered: no longer the job's */
	j->gj_route = NULL; /* nor the route, which a reload may free */
	j->gj_redo = 1;
	store_response_free(&j->gj_cres.cpr_stored);
	memset(&j->gj_cres, 0, sizeof(j->gj_cres));
	if (workq_push(&gw.q, &j->gj_item) == 0)
		return 0;
	free(j->gj_redo_by);
	j->gj_redo_by = NULL;
	return -1;
}

/* A forward whose outcome is unknown is given up: nothing more will be
 * recorded for it, so the record keeps only its lease (which outlasts the
 * deadline the upstream was told), not this process's fence. */
static void gateway_job_unfence(const struct gateway_job *j)
{
	if (store_unfence(j->gj_route->gr_tenant_id, j->gj_token_id, j->gj_attempt) < 0)
		log_warn("gateway: request %s: the key could not be let go (database "
			 "unavailable); it stays held until this process stops",
			 j->gj_req->req_id);
}

/* Request thread, after the batch with the job's complete committed:
 * answers with what was stored, then frees the job. */
static void gateway_store_answer(struct request *req, void *arg)
{
	struct gateway_job *j = arg;
	struct complete_result *res = &j->gj_cres;
	/* a gateway client is never told an internal code: whatever holds
	 * the key now, its answer is replayed once it is stored */
	struct outcome_values again = { .ov_retry_after = 1 };

	if (j->gj_bj.bj_rc < 0) {
		/* the upstream acted but nothing is stored yet: the key stays
		 * held by this process's fence while a finisher writes the
		 * outcome again (gateway_redo); the client retries meanwhile */
		log_warn("gateway: request %s: the upstream answered %ld but the outcome could "
			 "not be stored yet (database unavailable); storing it again",
			 req->req_id, j->gj_call.uc_status);
		request_unavailable(req);
		if (gateway_redo(j) == 0)
			return;
		goto done;
	}
	switch (res->cpr_outcome) {
	case COMPLETE_STORED:
	case COMPLETE_ALREADY:
		engine_completion_keep(j->gj_route->gr_tenant_id, j->gj_token_id, res);
		gateway_reply_response(req, &res->cpr_stored, "false");
		break;
	case COMPLETE_LEASE_LOST:
	case COMPLETE_NOT_IN_PROGRESS:
	case COMPLETE_NO_RECORD:
		/* this process's fence was lost (its session ended) and another
		 * attempt holds the key */
		log_warn("gateway: request %s: attempt %d no longer held the key when its "
			 "answer was stored",
			 req->req_id, j->gj_attempt);
		answer_problem(req, OUTCOME_IN_PROGRESS, &again);
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
	struct gateway_job *j = IDEMD_CONTAINER_OF(bj, struct gateway_job, gj_bj);

	http_resume_then(j->gj_req, gateway_store_answer, j);
}

/* The upstream answered with a final status, but the answer cannot be
 * stored (too large, a malformed header line, or it broke off after its
 * status line: cut, stalled past the timeout, reset): the upstream acted, so
 * what is stored instead, and replayed to every duplicate, is a 502
 * upstream_answer_unstorable problem; the key is never forwarded again.
 * Turns the call's answer into that problem. 0, or -1 out of memory. */
static int gateway_unstorable(struct gateway_job *j)
{
	struct upstream_call *c = &j->gj_call;
	char detail[160];

	const char *why = c->uc_result == UPSTREAM_TOO_LARGE ? "too large"
			  : c->uc_result == UPSTREAM_INVALID ? "a malformed header line"
							     : "it broke off before its end";
	snprintf(detail, sizeof(detail),
		 "the upstream answered %ld, but its answer could not be stored (%s); the "
		 "request is not forwarded again",
		 c->uc_status, why);
	json_t *doc = problem_document(502, "upstream_answer_unstorable", detail);
	char *text = doc != NULL ? json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(doc);
	if (text == NULL)
		return -1;
	log_warn("gateway: request %s: %s", j->gj_req->req_id, detail);
	buf_free(&c->uc_resp);
	c->uc_resp.b_data = text;
	c->uc_resp.b_len = c->uc_resp.b_cap = strlen(text);
	c->uc_status = 502;
	return 0;
}

/* How long the answer STATUS of route GR is kept: the operation's
 * RETENTION, or the route's error_retention_seconds for a 4xx when shorter
 * (by default 300 s on derived-key routes, which anyone may call: their
 * refusals are not kept for the whole retention). */
static int gateway_retention(const struct gateway_route *gr, int status, int retention)
{
	int keep = gr->gr_cfg->error_retention_seconds;

	if (status < 400 || status > 499)
		return retention;
	if (keep < 0)
		keep = gr->gr_key == GATEWAY_KEY_TOKEN ? retention : 300;
	return keep < retention ? keep : retention;
}

/* The upstream answered 2xx-4xx: queue the complete (in a batch with other
 * completes); gateway_store_answer() answers once it committed. Returns 0
 * when queued (the job is no longer the caller's), -1 when nothing could be
 * (out of memory). */
static int gateway_store(struct gateway_job *j)
{
	struct upstream_call *c = &j->gj_call;
	/* the upstream's own status chooses the retention, also when its
	 * answer is stored as a 502: a refusal too large to store is kept as
	 * long as the refusal would have been, not the operation's retention */
	int judged = (int)c->uc_status;

	if (c->uc_result != UPSTREAM_ANSWERED && gateway_unstorable(j) < 0)
		return -1; /* out of memory: nothing to store, and nothing safe to say */
	j->gj_resp.sr_status = (int)c->uc_status;
#ifdef IDEMD_MUTANT_UNSTORABLE_KEPT_LONG
	judged = j->gj_resp.sr_status;
#endif
	j->gj_resp.sr_headers =
		c->uc_result == UPSTREAM_ANSWERED
			? json_dumps(c->uc_resp_headers, JSON_COMPACT | JSON_SORT_KEYS)
			: strdup("{\"Content-Type\":\"application/problem+json\"}");
	j->gj_resp.sr_body = (unsigned char *)c->uc_resp.b_data;
	j->gj_resp.sr_body_len = c->uc_resp.b_len;
	if (j->gj_resp.sr_headers == NULL) {
		gateway_job_release(j);
		return -1;
	}
	j->gj_cargs.tenant_id = j->gj_route->gr_tenant_id;
	j->gj_cargs.token_id = j->gj_token_id;
	j->gj_cargs.attempt = j->gj_attempt;
	j->gj_cargs.resp = &j->gj_resp;
	j->gj_cargs.retention_seconds =
		gateway_retention(j->gj_route, judged, j->gj_retention_seconds);
	/* a key's record may end before the key would (a new life then runs
	 * anew); a token's stays while the token is valid */
	j->gj_cargs.retention_exact = j->gj_route->gr_key != GATEWAY_KEY_TOKEN &&
				      j->gj_cargs.retention_seconds < j->gj_retention_seconds;
	j->gj_cargs.audit_seconds = j->gj_audit_seconds;
	j->gj_cargs.by = j->gj_req->req_by; /* the route, and the request's trace */
	j->gj_bj.bj_kind = BATCHER_COMPLETE;
	j->gj_bj.bj_complete = &j->gj_cargs;
	j->gj_bj.bj_complete_result = &j->gj_cres;
	j->gj_bj.bj_done = gateway_stored;
	batcher_submit(&j->gj_bj);
	return 0;
}

/* Whether the upstream may still be acting on J's forward: the request
 * was sent and no answer came back (a timeout, a connection that broke or
 * closed before a status line). idemd cannot stop it, so the claim is not
 * given back: the key stays held until the lease ends, by which time the
 * forward's own deadline (Idempotency-Timeout-Ms, gateway_forward.c) has
 * passed, and only then may a retry take over and forward again. */
static int gateway_outcome_unknown(const struct gateway_job *j)
{
	const struct upstream_call *c = &j->gj_call;

#ifdef IDEMD_MUTANT_RELEASE_UNKNOWN_OUTCOME
	return 0;
#endif
#ifdef IDEMD_MUTANT_RELEASE_ON_CLOSE
	/* a connection closed before any status line releases the key */
	return !j->gj_stopped && c->uc_sent && c->uc_result == UPSTREAM_TIMEOUT;
#endif
	return !j->gj_stopped && c->uc_sent &&
	       (c->uc_result == UPSTREAM_TIMEOUT || c->uc_result == UPSTREAM_FAILED);
}

/* Answers a forward whose outcome is unknown: the claim stays held until
 * its lease ends (Retry-After says when). */
static void gateway_held(struct gateway_job *j)
{
	const struct upstream_call *c = &j->gj_call;
	struct request *req = j->gj_req;
	int64_t left_ms = j->gj_lease_expires_at - idemd_unix_ms();
	struct outcome_values v = {
		.ov_retry_after = left_ms > 0 ? (int)((left_ms + 999) / 1000) : 1,
		.ov_number = c->uc_timeout_ms,
	};

	answer_problem(req,
		       c->uc_result == UPSTREAM_TIMEOUT ? OUTCOME_UPSTREAM_TIMEOUT_HELD
							: OUTCOME_UPSTREAM_LOST_HELD,
		       &v);
	log_warn("gateway: request %s: %s %s: %s (request sent, outcome unknown): attempt %d "
		 "keeps the key until its lease ends in %d s",
		 req->req_id, req->req_method, req->req_path, c->uc_error, j->gj_attempt,
		 v.ov_retry_after);
}

/* Each upstream result: its answer when it is not stored
 * (gateway_not_final) and its label in idemd_upstream_requests_total. */
static const struct {
	enum outcome outcome;
	enum metrics_upstream_outcome metric;
} gateway_results[] = {
	[UPSTREAM_ANSWERED] = { OUTCOME_UPSTREAM_STATUS, METRICS_UPSTREAM_ANSWERED },
	[UPSTREAM_INVALID] = { OUTCOME_UPSTREAM_MALFORMED, METRICS_UPSTREAM_INVALID },
	[UPSTREAM_TOO_LARGE] = { OUTCOME_UPSTREAM_TOO_LARGE, METRICS_UPSTREAM_TOO_LARGE },
	[UPSTREAM_BROKEN] = { OUTCOME_UPSTREAM_BROKE_OFF, METRICS_UPSTREAM_BROKEN },
	[UPSTREAM_UNREACHABLE] = { OUTCOME_UPSTREAM_UNREACHABLE, METRICS_UPSTREAM_UNREACHABLE },
	[UPSTREAM_FAILED] = { OUTCOME_UPSTREAM_FAILED, METRICS_UPSTREAM_FAILED },
	[UPSTREAM_TIMEOUT] = { OUTCOME_UPSTREAM_TIMEOUT, METRICS_UPSTREAM_TIMEOUT },
};

/* Answers every outcome but a final answer, whose claim was given back
 * (gateway_finish), so the client may retry with the same token; a 5xx is
 * passed through unstored. */
static void gateway_not_final(struct gateway_job *j)
{
	const struct upstream_call *c = &j->gj_call;
	struct request *req = j->gj_req;
	struct outcome_values v = { .ov_number = c->uc_status };

	/* an answer release_on names (5xx by default): passed through */
	if (c->uc_result == UPSTREAM_ANSWERED && c->uc_status >= 200 && c->uc_status <= 599) {
		struct stored_response pass = { (int)c->uc_status, NULL,
						(unsigned char *)c->uc_resp.b_data,
						c->uc_resp.b_len, 0 };
		pass.sr_headers = json_dumps(c->uc_resp_headers, JSON_COMPACT);
		gateway_reply_response(req, &pass, "false");
		free(pass.sr_headers);
		return;
	}
	if (c->uc_result == UPSTREAM_TOO_LARGE)
		v.ov_number = (int64_t)c->uc_max_body;
	else if (c->uc_result == UPSTREAM_TIMEOUT)
		v.ov_number = c->uc_timeout_ms;
	/* a status release_on names (or a refusal on a derived-key route) that
	 * then broke off is given back like it; every one carries Retry-After:
	 * 1, since the same token may be submitted again */
	answer_problem(req, gateway_results[c->uc_result].outcome, &v);
	log_warn("gateway: request %s: %s %s: %s (%s)", req->req_id, req->req_method, req->req_path,
		 c->uc_error, c->uc_sent ? "request sent" : "request not sent");
}

/* Whether J's forward ended with an answer to store: 2xx-4xx unless the
 * route's release_on names it (stored as 502 upstream_answer_unstorable
 * when the answer itself cannot be: gateway_unstorable). */
static int gateway_final(const struct gateway_job *j)
{
	const struct upstream_call *c = &j->gj_call;

#ifdef IDEMD_MUTANT_RELEASE_AFTER_2XX
	int answered = c->uc_result == UPSTREAM_ANSWERED || c->uc_result == UPSTREAM_BROKEN;
#else
	/* an answer too large or malformed still says the upstream acted */
	int answered = c->uc_result == UPSTREAM_ANSWERED || c->uc_result == UPSTREAM_TOO_LARGE ||
		       c->uc_result == UPSTREAM_INVALID || c->uc_result == UPSTREAM_BROKEN;
#endif
#ifdef IDEMD_MUTANT_RELEASE_AFTER_BROKEN_ANSWER
	answered = answered && c->uc_result != UPSTREAM_BROKEN;
#endif
	/* on a derived-key route anyone may send any key: an upstream that
	 * refuses the caller (401, 403: a forged webhook's bad signature) must
	 * not block the genuine request that follows with the same key */
	if (j->gj_route->gr_key != GATEWAY_KEY_TOKEN &&
	    (c->uc_status == 401 || c->uc_status == 403))
		return 0;
	return !j->gj_stopped && answered && c->uc_status >= 200 && c->uc_status <= 599 &&
	       !j->gj_route->gr_cfg->release_on[c->uc_status];
}

/* Request thread: answers a forward that stored nothing, then frees the
 * job. */
static void gateway_answer(struct request *req, void *arg)
{
	struct gateway_job *j = arg;

	if (j->gj_unavailable || j->gj_stopped)
		request_unavailable(req);
	else if (gateway_outcome_unknown(j))
		gateway_held(j);
	else
		gateway_not_final(j);
	gateway_job_free(j);
}

/* Writes the outcome of a finished (or refused) forward: a final answer is
 * stored (gateway_store_answer answers it), a forward whose outcome is
 * unknown keeps the claim, any other gives it back; then the request's own
 * thread answers (gateway_answer). */
void gateway_finish(struct gateway_job *j)
{
	const struct upstream_call *c = &j->gj_call;
	struct request *req = j->gj_req;

	log_debug("gateway: request %s: %s %s: the upstream call ended (%s, status %ld)",
		  req->req_id, req->req_method, req->req_path,
		  c->uc_result == UPSTREAM_ANSWERED ? "answered" : c->uc_error, c->uc_status);
	if (gateway_final(j)) {
		if (gateway_store(j) == 0)
			return;
		j->gj_unavailable = 1;
	} else if (!gateway_outcome_unknown(j)) {
		gateway_job_release(j);
	} else {
		gateway_job_unfence(j);
	}
	http_resume_then(req, gateway_answer, j);
}

/* ---------------------------------------------------------------- finishers */

/* Upstream thread: an answer to store goes to the batcher from here (one
 * thread hand-off fewer per submit; only when out of memory does it release
 * the claim here); every other outcome releases the claim (a database
 * call) or keeps it held (gateway_held), on a finisher. */
void gateway_on_done(struct upstream_call *c)
{
	struct gateway_job *j = IDEMD_CONTAINER_OF(c, struct gateway_job, gj_call);
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	metrics_upstream(j->gj_route->gr_route.method, j->gj_route->gr_route.pattern,
			 gateway_results[c->uc_result].metric, c->uc_status,
			 (double)(now.tv_sec - j->gj_sent.tv_sec) +
				 (double)(now.tv_nsec - j->gj_sent.tv_nsec) / 1e9);
	/* closed only after the upstream thread ended: never refused */
	if (gateway_final(j) || workq_push(&gw.q, &j->gj_item) < 0)
		gateway_finish(j);
}

static void *gateway_finisher(void *arg)
{
	(void)arg;
	for (;;) {
		struct workq_item *it = workq_take(&gw.q, 1, NULL, 1, NULL);

		if (it == NULL)
			return NULL;
		struct gateway_job *j = WORKQ_JOB(it, struct gateway_job, gj_item);
		if (j->gj_redo)
			gateway_complete_again(j);
		else
			gateway_finish(j);
	}
}

int gateway_finish_start(void)
{
	return workq_workers_start(&gw.finishers, &gw.q, GATEWAY_FINISHERS, gateway_finisher, NULL,
				   "gateway finisher");
}

void gateway_finish_stop(void)
{
	/* the finishers empty the queue (a completion still unanswered is
	 * tried once more), then return */
	atomic_store(&gateway_stopping, 1);
	workq_workers_stop(&gw.finishers);
}
