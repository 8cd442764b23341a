/* The front of the record engine: the steps every request on a record
 * shares, for the direct API (tokens, caller keys, batches) and gateway
 * routes alike: verifying a token and its scope, the claim (decided by the
 * engine's claim core, engine/claim.c) and its answer, complete, release,
 * extend and checkpoint. A record is (tenant, operation, record id); a
 * token is one way to name it, a caller key or a derived gateway key
 * another: the engine does not care which.
 * Ownership: arguments are borrowed for the call unless noted. */
#ifndef IDEMD_ENGINE_H
#define IDEMD_ENGINE_H

#include <jansson.h>
#include <stdint.h>

#include "common.h"
#include "outcome.h"
#include "reqjson.h"
#include "request.h"
#include "store.h"
#include "token.h"
#include "versionkey.h"

struct config;

/* CFG is borrowed until a grace period begun after the next engine_init()
 * is done (http_reload). */
void engine_init(const struct config *cfg);

/*
 * Return rule of the engine: 0 carry on (for engine_claim: the request is
 * suspended and will be answered), -1 the request has its outcome: a
 * problem recorded with request_fail (an error, a refusal; http.c answers
 * it), or an answer built (from the cache). "Replying" below means either.
 * engine_claimed_fn alone differs: it says who resumes the connection.
 */

/* Verifies TEXT as a token of the request's tenant. 0, or -1 after replying
 * 400 token_malformed, 403 token_invalid or 403 token_scope_mismatch. */
int engine_verify(struct request *req, const char *text, struct token *t) IDEMD_WUR;

/* engine_verify() on the {token} path segment. */
int engine_from_path(struct request *req, struct token *t) IDEMD_WUR;

/*
 * How a route answers a duplicate of a completed claim of T from its
 * stored response R (both borrowed for the call): either with a JSON
 * envelope that RENDER makes (text of *LEN bytes, owned: free() it; NULL
 * when out of memory), sent with 200 and Idempotent-Replayed: true, or by
 * SEND, which replies itself (the gateway's stored response). An envelope
 * is rendered once per cached record and kept with it, tagged KIND (above
 * 0, one per envelope form): so thousands of duplicates, such as the
 * waiters of one record, cost one rendering.
 */
struct engine_replay {
	int er_kind;
	char *(*er_render)(const struct stored_response *r, const struct token *t, size_t *len);
	void (*er_send)(struct request *req, const struct stored_response *r);
};
/* the envelope kinds */
#define ENGINE_REPLAY_DIRECT 1 /* the direct API's */
#define ENGINE_REPLAY_KEY 2    /* the caller-key API's */

/* Called when an asynchronous claim has its answer, with the connection
 * still suspended. RES is the granted claim (borrowed for the call): build
 * the reply or start more work, and return 0 to have the connection
 * resumed now or 1 when the callee takes over resuming it (http_resume,
 * http_resume_then). RES is NULL when the claim was answered otherwise
 * (409, 410, replay...): only release ARG, and return 0. It runs on the
 * request's own thread, but for a granted claim with KEEPS 1
 * (engine_claim), which runs on the batcher thread and answers nothing
 * there. */
typedef int (*engine_claimed_fn)(struct request *req, const struct claim_result *res, void *arg);

/*
 * A completed submit never changes: answers a claim of T with fingerprint
 * FP (NULL: none) from the replay cache when it can. -1 after replying (the
 * cached response through REPLAY, NULL: the direct API's envelope; or 422
 * for another request's fingerprint), 0 when the database must be asked
 * (engine_claim).
 */
int engine_claim_cached(struct request *req, const struct token *t, const uint8_t *fp,
			const struct engine_replay *replay) IDEMD_WUR;
/* engine_claim_cached() for a request that ALIAS (a hash of its exact
 * bytes, borrowed) names too: a hit keeps ALIAS with the cached record, so
 * that engine_replay_alias() answers the next duplicate with those bytes
 * without working out its fingerprint (a route's that parses the body). */
int engine_claim_cached_as(struct request *req, const struct token *t, const uint8_t *fp,
			   const uint8_t *alias, const struct engine_replay *replay) IDEMD_WUR;
/* -1 after replying, when an earlier duplicate of T with ALIAS was
 * answered from the replay cache (REPLAY replies by its er_send; a
 * rendering REPLAY is never answered so); 0: go the full way. */
int engine_replay_alias(struct request *req, const struct token *t, const uint8_t *alias,
			const struct engine_replay *replay) IDEMD_WUR;

/*
 * Claims T (under operation OP when the caller has read it, else NULL: it
 * is read here) with fingerprint FP (NULL: none), honouring If-Match, without
 * blocking the request thread (after engine_claim_cached found nothing):
 * the checks run now;
 * the database step runs on a batcher thread (in a batch with other
 * claims) while the connection is suspended, every outcome is answered
 * (REPLAY answers a duplicate of a completed claim), and CLAIMED is called
 * in every case. Every answer is built on the request's own thread after
 * the resume; with KEEPS 1 a granted claim's CLAIMED runs on the batcher
 * thread instead, where it may keep the connection suspended (the
 * gateway's forward) and answers nothing; such a claim is held by this
 * process, and carries its fence (store_fence_holder): while the fence is
 * not held, it is answered 503 at once.
 * REPLAY NULL: the direct API's envelope. T, OP and FP are copied; REPLAY is
 * borrowed until CLAIMED has run. Returns 0 when the request is suspended
 * (CLAIMED takes ARG), -1 after replying at once (validation; CLAIMED is not
 * called and ARG stays owned by the caller).
 */
int engine_claim(struct request *req, const struct token *t, const struct operation *op,
		 const uint8_t *fp, const struct engine_replay *replay, engine_claimed_fn claimed,
		 int keeps, void *arg) IDEMD_WUR;

/*
 * Answers a claim of T from the replay cache without parsing the body:
 * when a cached completed response of T was last matched by a body with
 * these exact bytes, the body would give the same fingerprint, so the
 * answer is the same. Returns -1 after replying, 0 when the full way must
 * run.
 */
int engine_replay_raw(struct request *req, const struct token *t) IDEMD_WUR;

/* What POST .../complete, .../release, .../extend and .../checkpoint do
 * to a record: a route's arg names one, engine_act runs it (the functions
 * below). */
enum engine_action { ENGINE_COMPLETE = 1, ENGINE_RELEASE, ENGINE_EXTEND, ENGINE_CHECKPOINT };
void engine_act(struct request *req, const struct token *t, int is_key, enum engine_action a);

/*
 * POST .../complete and .../release of the record T addresses (a token, or
 * a caller key when IS_KEY: a record never claimed is then 404
 * record_not_found). Reads the body, runs the step (complete: batched,
 * answered after the commit) and replies.
 */
void engine_complete(struct request *req, const struct token *t, int is_key);
/* A completion RES of (TENANT, ID) that committed (stored now, or the same
 * one before): counts it and keeps its stored response in the replay cache
 * for the duplicates that follow. */
void engine_completion_keep(uint32_t tenant_id, const uint8_t id[16],
			    const struct complete_result *res);
void engine_release(struct request *req, const struct token *t, int is_key);
/* POST .../extend {"attempt","lease_seconds"?} (at most, and by default,
 * the operation's lease) and .../checkpoint {"attempt","phase","data"?}
 * (phase 1..64 of [a-z0-9._-], data any JSON up to 64 KiB) of the current
 * attempt; fenced like release. */
void engine_extend(struct request *req, const struct token *t, int is_key);
void engine_checkpoint(struct request *req, const struct token *t, int is_key);

/* The state introspection shows for RV at NOW_MS (unix ms): completed,
 * revoked, in_progress (a live lease), and otherwise issued, or with
 * LAPSED "lease_expired" for one in progress whose lease ran out. */
const char *engine_record_state(const struct record_view *rv, int64_t now_ms, int lapsed);

/* Adds to introspection O what STATE shows of RV: lease_expires_at,
 * response, checkpoint (O may be NULL). */
void engine_record_fields(json_t *o, const struct record_view *rv, const char *state);

/* The latest checkpoint of RV as {"phase","data","attempt"}, owned
 * (json_decref()), or NULL when it has none. */
json_t *engine_checkpoint_json(const struct record_view *rv);

/* The fingerprint of a claim body: its "fingerprint" string, else the
 * canonical JSON of its "request", else none (*HAS_FP 0). 0, or -1 after
 * replying. */
int engine_fingerprint(struct request *req, json_t *body, uint8_t fp[STORE_HASH_BYTES],
		       int *has_fp) IDEMD_WUR;
/* engine_fingerprint() without a request (a batch's items): 0, or -1
 * with the detail of a 400 invalid_request in WHY, or WHY empty when the
 * fingerprint could not be computed (out of memory: 503 unavailable). */
int engine_fingerprint_why(json_t *body, uint8_t fp[STORE_HASH_BYTES], int *has_fp,
			   char why[REQJSON_WHY]) IDEMD_WUR;

/* Validates a completion (BODY: attempt, status, headers, body or
 * body_base64, and EXTRA when not NULL) into *ATTEMPT and RESP (headers
 * text and body owned: store_response_free). 0, or -1 after replying. */
int engine_complete_parse(struct request *req, json_t *body, const char *extra, int64_t *attempt,
			  struct stored_response *resp) IDEMD_WUR;
/* engine_complete_parse() without a request (a batch's items): 0, or -1
 * with WHY as engine_fingerprint_why() leaves it (RESP may hold what was
 * made: store_response_free it either way). */
int engine_complete_parse_why(json_t *body, const char *extra, int64_t *attempt,
			      struct stored_response *resp, char why[REQJSON_WHY]) IDEMD_WUR;

/* 1 when a repeated completion A says what the stored one B says: same
 * status, headers (as JSON values) and body bytes. */
int engine_same_response(const struct stored_response *a, const struct stored_response *b);

/* Checks a headers object of a completion: at most MAX string values
 * with token names, none that is never stored. 0, or -1 with the detail
 * of a 400 invalid_request in WHY. */
int engine_check_headers_why(json_t *headers, size_t max, char why[REQJSON_WHY]) IDEMD_WUR;

/* Token issuance rate limit per tenant, N tokens at once (a request for
 * more than the burst needs a full bucket and leaves it in debt): 0
 * allowed, -1 after replying 429. */
int engine_rate_check(struct request *req, int n) IDEMD_WUR;
/* The tenant's quota of claims that reach the database (config
 * claim_rate_per_second, claim_burst; replays answered from memory are not
 * counted): 0, or -1 after replying 429 rate_limited with Retry-After. */
int engine_claim_quota(struct request *req, int n) IDEMD_WUR;

#endif
