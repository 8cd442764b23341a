/* Request JSON helpers: strict field checks shared by the handlers, each
 * replying 400 invalid_request with the field's name on failure, and the
 * JSON shapes handlers send back (times, stored responses).
 * Ownership: arguments are borrowed for the call; a json_t * returned is
 * owned (json_decref()). */
#ifndef IDEMD_REQJSON_H
#define IDEMD_REQJSON_H

#include <jansson.h>
#include <stdint.h>

#include "common.h"
#include "rfc3339.h"
#include "request.h"
#include "buf.h"
#include "store.h"

/* Refuses keys of OBJ not in ALLOWED (NULL-terminated). 0 or -1 (replied). */
int reqjson_only(struct request *req, json_t *obj, const char *const *allowed) IDEMD_WUR;

/* Integer field in [MIN, MAX]. *present tells whether it was there; a
 * missing field with REQUIRED set is an error. 0 or -1 (replied). */
int reqjson_int(struct request *req, json_t *obj, const char *name, int required, int64_t min,
		int64_t max, int64_t *out, int *present) IDEMD_WUR;

/* String field of MINLEN..MAXLEN bytes without NUL (borrowed from OBJ).
 * NULL when absent and optional; -1 (replied) on error. */
int reqjson_string(struct request *req, json_t *obj, const char *name, int required, size_t minlen,
		   size_t maxlen, const char **out) IDEMD_WUR;

/*
 * The checks above without a request, for checks whose refusal is not a
 * request's (a batch's items): -1 with the detail of the 400
 * invalid_request in WHY. A check built on them may leave WHY empty for
 * "could not be checked" (out of memory: 503 unavailable).
 */
#define REQJSON_WHY 512
int reqjson_only_why(json_t *obj, const char *const *allowed, char why[REQJSON_WHY]) IDEMD_WUR;
int reqjson_int_why(json_t *obj, const char *name, int required, int64_t min, int64_t max,
		    int64_t *out, int *present, char why[REQJSON_WHY]) IDEMD_WUR;
int reqjson_string_why(json_t *obj, const char *name, int required, size_t minlen, size_t maxlen,
		       const char **out, char why[REQJSON_WHY]) IDEMD_WUR;
/* Writes a formatted detail into WHY (cut at a character boundary when
 * long); returns -1, for the check to return. */
int reqjson_why(char why[REQJSON_WHY], const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* RC of such a check, recorded on REQ when it is -1: 400 invalid_request
 * with WHY, or 503 unavailable when WHY is empty. Returns RC. */
static inline int reqjson_refused(struct request *req, int rc, const char *why)
{
	if (rc < 0 && why[0] == '\0')
		request_unavailable(req);
	else if (rc < 0)
		request_fail(req, 400, "invalid_request", "%s", why);
	return rc;
}

/* A field of reqjson_flat(): NAME and TYPE in, the rest out. */
struct reqjson_field {
	const char *rf_name;
	enum { REQJSON_STRING, REQJSON_UINT } rf_type;
	int rf_present;
	const char *rf_str; /* REQJSON_STRING: the characters, borrowed, no quotes */
	size_t rf_len;
	int64_t rf_num; /* REQJSON_UINT */
};

/*
 * The fast way for the simplest bodies: 1 when S[0..LEN) is a JSON object
 * whose members are all among FIELDS (N of them), each at most once, with
 * string values of printable ASCII without escapes or integers from 0 to
 * 10^15 without sign, fraction or exponent, as their TYPE says; FIELDS are
 * then filled. 0 for anything else, valid JSON or not: the caller goes the
 * full way (jansson and the checks above), which answers it. A body taken
 * here parses with jansson to the same members and values.
 */
int reqjson_flat(const char *s, size_t len, struct reqjson_field *fields, size_t n);

/* A member of a flat object, as reqjson_members() reads it: characters
 * borrowed from the text, without quotes. */
struct reqjson_member {
	const char *rm_name;
	size_t rm_name_len;
	int rm_is_string;
	const char *rm_str; /* rm_is_string */
	size_t rm_len;
	int64_t rm_num; /* !rm_is_string */
};

/* reqjson_flat()'s reading for any member names: 1 when S[0..LEN) is such
 * an object of at most MAX members, read in order into OUT (*N of them),
 * else 0. */
int reqjson_members(const char *s, size_t len, struct reqjson_member *out, size_t max, size_t *n);

/* Writes the UTF-8 string S[0..LEN) as the body of a JSON string (quotes
 * excluded) the way jansson's json_dumps does, into OUT, which must hold
 * 6 * LEN bytes; returns the length written (no NUL). */
size_t reqjson_escape(char *out, const char *s, size_t len);

/* {"status","headers","body"|"body_base64"} of a stored response, owned
 * (json_decref()). */
json_t *reqjson_response(const struct stored_response *r);

/* Appends to B the text json_dumps(reqjson_response(R), JSON_COMPACT) would
 * give, without parsing what it need not: headers that are a flat object
 * of printable strings are copied member by member, and with OWN_BODY
 * (R's JSON body is idemd's own compact dump, made in this process) the
 * body is copied as it is. 0, or -1 (out of memory: B is failed). */
int reqjson_response_text(struct buf *b, const struct stored_response *r, int own_body) IDEMD_WUR;

/* What reqjson_etag() gives for a weak ETag: no counter is ever at it. */
#define REQJSON_ETAG_WEAK ((int64_t)-1)

/*
 * Parses an If-Match value holding one ETag "N": 0 with *OUT = N, or -1 when
 * it is not one. A weak W/"N" is 0 with *OUT = REQJSON_ETAG_WEAK: strong
 * comparison (RFC 9110) never matches it, so the precondition fails (412),
 * it is not a malformed request.
 */
int reqjson_etag(const char *value, int64_t *out) IDEMD_WUR;

/* Formats the strong ETag of VERSION into OUT ("\"7\""). */
void reqjson_etag_format(int64_t version, char *out, size_t outlen);

/* 1 when S matches [a-z0-9._-]{1,64}. */
int reqjson_valid_name(const char *s);

/* The operation name of path segment I (borrowed from REQ), or NULL after
 * recording 400 invalid_request: one rule for every {name} and {op} path
 * segment, checked before anything else about the operation. */
const char *reqjson_name_param(struct request *req, unsigned i) IDEMD_WUR;

/* The request body parsed as JSON within its memory budget (jsonmem.h):
 * owned (json_decref()), or NULL when it is not JSON (ERR says where; may be
 * NULL) or, *OVER 1, after replying 413 payload_too_large. */
json_t *reqjson_load_body(struct request *req, json_error_t *err, int *over) IDEMD_WUR;

/* Parses the request body as a JSON object of no members but ALLOWED's
 * (NULL-terminated; NULL: any), owned (json_decref()), or NULL after
 * replying 400 invalid_request (413 payload_too_large when its parse
 * outgrows the budget, jsonmem.h). An empty body parses as {}. */
json_t *http_body_object(struct request *req, const char *const *allowed);

#endif
