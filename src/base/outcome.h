/*
 * Outcomes: what became of a request on a record, as the engine decides
 * it, in words that know nothing of HTTP. http/answer.c is the one table
 * that turns each into an answer (status, problem code, one detail text,
 * headers), for single requests, batch items and gateway submits alike.

 *
 * Ownership: an outcome is a value; nothing here allocates.
 */
#ifndef IDEMD_OUTCOME_H
#define IDEMD_OUTCOME_H

#include <stdint.h>

enum outcome {
	OUTCOME_CLAIMED,	       /* the claim is granted */
	OUTCOME_REPLAY,		       /* a duplicate of a completed submit: its response */
	OUTCOME_STORED,		       /* a completion stored (or the same one again) */
	OUTCOME_IN_PROGRESS,	       /* another holder's lease still runs */
	OUTCOME_REVOKED,	       /* the token (or key) was revoked */
	OUTCOME_FINGERPRINT_MISMATCH,  /* the key was first used with another request */
	OUTCOME_TOKEN_EXPIRED,	       /* the token, or the key's record, is past its life */
	OUTCOME_KEY_LIFE_SPENT,	       /* a caller key's claim reached the database too late */
	OUTCOME_VERSION_MISMATCH,      /* the counter moved: ov_version is where it is */
	OUTCOME_VERSION_REQUIRED,      /* the operation needs If-Match */
	OUTCOME_LEASE_SPENT,	       /* granted too late for its lease: not acknowledged */
	OUTCOME_LEASE_LOST,	       /* ov_attempt is no longer the current attempt */
	OUTCOME_NOT_IN_PROGRESS,       /* the record is not claimed by ov_attempt */
	OUTCOME_COMPLETION_CONFLICT,   /* ov_attempt was completed with another response */
	OUTCOME_RECORD_NOT_FOUND,      /* a caller key never claimed (or forgotten) */
	OUTCOME_UNAVAILABLE,	       /* the database could not be asked */
	OUTCOME_TOKEN_MALFORMED,       /* not a token at all */
	OUTCOME_TOKEN_INVALID,	       /* a token whose signature does not verify */
	OUTCOME_TOKEN_OTHER_TENANT,    /* a token of another tenant */
	OUTCOME_TOKEN_OTHER_OPERATION, /* a token of another operation than the route's */
	OUTCOME_OPERATION_UNKNOWN,     /* the tenant has no operation of that name */
	/* a forward that ended without an answer to store (the claim given
	 * back); ov_number is the figure the detail names */
	OUTCOME_UPSTREAM_STATUS,      /* an answer with a status outside 200-599 */
	OUTCOME_UPSTREAM_MALFORMED,   /* an answer with a malformed header line */
	OUTCOME_UPSTREAM_TOO_LARGE,   /* an answer over ov_number bytes */
	OUTCOME_UPSTREAM_BROKE_OFF,   /* status ov_number (released), then cut */
	OUTCOME_UPSTREAM_UNREACHABLE, /* not sent */
	OUTCOME_UPSTREAM_FAILED,      /* the connection failed before an answer */
	OUTCOME_UPSTREAM_TIMEOUT,     /* no answer within ov_number ms */
	/* a forward whose outcome is unknown: the key stays held for
	 * ov_retry_after seconds (the rest of its lease) */
	OUTCOME_UPSTREAM_TIMEOUT_HELD, /* no answer within ov_number ms */
	OUTCOME_UPSTREAM_LOST_HELD,    /* the connection broke after the request was sent */
	OUTCOME_COUNT
};

/* The few values an answer needs besides its outcome. */
struct outcome_values {
	int ov_retry_after; /* IN_PROGRESS, UPSTREAM_*_HELD: seconds until the lease ends */
	int64_t ov_version; /* VERSION_MISMATCH: the counter's current version */
	int64_t ov_attempt; /* LEASE_LOST, NOT_IN_PROGRESS, COMPLETION_CONFLICT */
	int64_t ov_number;  /* UPSTREAM_*: the status, bytes or ms the detail names */
};

#endif
