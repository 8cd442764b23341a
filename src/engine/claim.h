/* The claim core: a claim described as data goes to the database in a
 * batch with others (or is settled by the replay cache), a duplicate of a
 * claim in progress waits when asked, and it ends in an outcome
 * (base/outcome.h) with what an answer of it needs. It knows nothing of
 * HTTP: engine.c turns a request into a claim_in and the outcome into the
 * answer.
 * Ownership: a claim_in is copied by claim_new() but for ci_by, borrowed
 * until the claim is freed; a claim is the caller's (claim_free), its
 * claim_out the claim's; what else is passed is borrowed for the call. */
#ifndef IDEMD_CLAIM_H
#define IDEMD_CLAIM_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "outcome.h"
#include "replaycache.h"
#include "store.h"
#include "token.h"
#include "versionkey.h"

/* Renders the reply a duplicate of a completed claim of T gets from its
 * stored response R: new text of *LEN bytes (free()), or NULL. */
typedef char *(*claim_render_fn)(const struct stored_response *r, const struct token *t,
				 size_t *len);

struct claim_in {
	struct token ci_token; /* the record */
	/* its operation when the caller has read it (borrowed for
	 * claim_new(), which copies what it needs), else NULL: read there */
	const struct operation *ci_op;
	int ci_has_fp;
	uint8_t ci_fp[STORE_HASH_BYTES];
	int ci_has_if_match;
	int64_t ci_if_match; /* the version If-Match names (parsed by the caller) */
	int ci_wait_asked;   /* seconds the caller would wait (-1: the operation's wait) */
	const char *ci_by;   /* who, for the audit trail */
	/* the fence that holds the record while this process lives (a
	 * gateway forward: store_fence_holder), or 0: the lease alone */
	int32_t ci_holder;
	/* a replay's reply, rendered once per cached record and kept there
	 * with kind CI_KIND (above 0; 0 and NULL: none, the stored response
	 * alone) */
	int ci_kind;
	claim_render_fn ci_render;
};

/* What a claim ended in. */
struct claim_out {
	enum outcome co_outcome; /* CLAIMED, REPLAY or a refusal; UNAVAILABLE: no database */
	struct outcome_values co_values;
	struct claim_result co_res; /* CLAIMED: attempt, lease; REPLAY: cr_response */
	/* REPLAY: the reply CI_RENDER made (or the replay cache held), or NULL
	 * (none rendered yet); take it by setting it NULL */
	char *co_reply;
	size_t co_reply_len;
	int co_from_cache; /* REPLAY: answered by this instance's replay cache */
	int co_waited;	   /* seconds of waiting that were allowed (0: none) */
};

struct claim;

/* Called once when claim C has its outcome O (C's, valid until C is
 * freed), on a batcher or the waiters' thread. */
typedef void (*claim_done_fn)(struct claim *c, struct claim_out *o, void *arg);

/* Why claim_new() refused: an outcome, or with INVALID set a 400 whose
 * detail it is (a literal). */
struct claim_refusal {
	enum outcome cf_outcome;
	const char *cf_invalid;
};

/*
 * The claim IN, checked against its operation: the claim, owned
 * (claim_free()), or NULL with *WHY said (OPERATION_UNKNOWN, UNAVAILABLE, a
 * malformed If-Match or version key).
 */
struct claim *claim_new(const struct claim_in *in, struct claim_refusal *why) IDEMD_WUR;

/* Queues C for the database; DONE(C, its outcome, ARG) runs once. */
void claim_submit(struct claim *c, claim_done_fn done, void *arg);

void claim_free(struct claim *c);

/* The outcome of claim RES (a caller key's when IS_KEY), with the values
 * its answer names in *V: what a single claim and a batch item answer. */
enum outcome claim_outcome(const struct claim_result *res, int is_key, struct outcome_values *v);

/*
 * The claim arguments of T under policy OP into A: fingerprint FP (NULL:
 * none), the precondition IF_MATCH (NULL: the version T carries, if any);
 * VKEY receives the expanded counter name. A borrows T, FP and VKEY for as
 * long as it is used. NULL, or why the claim is refused (400
 * invalid_request, a literal).
 */
const char *claim_args_fill(const struct token *t, const struct operation *op, const uint8_t *fp,
			    const int64_t *if_match, char vkey[VERSIONKEY_MAX + 1],
			    struct claim_args *a);

/* Renders with RENDER the reply of T's (fingerprint FP) response R and
 * keeps it in the replay cache as KIND, with the request body RAW
 * (RAW_LEN bytes; NULL: none) that matched it: new text of *LEN bytes
 * (free()), or NULL. */
char *claim_render_kept(const struct token *t, const uint8_t *fp, int kind, claim_render_fn render,
			const struct stored_response *r, const void *raw, size_t raw_len,
			size_t *len);

/*
 * The replay cache's word on a claim of T with fingerprint FP, counted:
 * REPLAYCACHE_HIT with R (and, when REPLY is not NULL, the reply of KIND
 * kept with it) as replaycache_lookup() fills them; REPLAYCACHE_OTHER_FP;
 * or REPLAYCACHE_MISS (the database decides).
 */
enum replaycache_hit claim_cached(const struct token *t, const uint8_t *fp, int kind,
				  struct stored_response *r, char **reply, size_t *len);

/* Counts the database's result RES of a claim of T (fingerprint FP; it
 * WAITED first; the replay came FROM_CACHE) once, and keeps a replay the
 * database gave in the replay cache: what a single claim and a batch item
 * share. */
void claim_settled(const struct token *t, const uint8_t *fp, const struct claim_result *res,
		   int waited, int from_cache);

/* Counts one duplicate of T answered with its stored response: its record's
 * replay count (replaycount.c), idemd_replays_total and
 * idemd_duplicates_total, outcome "waited" when WAITED (it waited with
 * Prefer: wait), else "replayed". */
void claim_count_replay(const struct token *t, int waited);

#endif
