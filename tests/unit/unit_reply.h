/* What a unit test reads of a request's reply: the real http_reply.c and
 * problem.c make it (neither needs a connection), and unit_reply() builds
 * it as http.c's send does, so a recorded problem becomes its
 * problem+json. Ownership: REQ is the test's; its reply goes with
 * unit_reply_free(). */
#ifndef IDEMD_UNIT_REPLY_H
#define IDEMD_UNIT_REPLY_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "http_int.h"
#include "problem.h"

/* Whether REQ has a reply or a recorded problem. */
static inline int unit_replied(const struct request *req)
{
	return req->rep_response != NULL || req->rep_problem.rp_status != 0;
}

/* The reply as it is sent: its status (fails the test without one). */
static inline unsigned unit_reply(struct request *req)
{
	problem_answer(req);
	assert_non_null(req->rep_response);
	return req->rep_status;
}

/* The reply's header NAME (borrowed until the reply goes), or NULL. */
static inline const char *unit_reply_header(struct request *req, const char *name)
{
	unit_reply(req);
	return MHD_get_response_header(req->rep_response, name);
}

/* How many headers the reply carries besides its Content-Type. */
static inline int unit_reply_headers(struct request *req)
{
	int typed = unit_reply_header(req, "Content-Type") != NULL;

	return MHD_get_response_headers(req->rep_response, NULL, NULL) - typed;
}

/* The reply's body as JSON (owned: json_decref()); fails the test if it
 * is not. */
static inline json_t *unit_reply_json(struct request *req)
{
	json_error_t err;

	unit_reply(req);
	json_t *v = json_loadb(req->rep_body, req->rep_len, JSON_DECODE_ANY, &err);
	if (v == NULL)
		fail_msg("reply body is not JSON: %.*s (%s)", (int)req->rep_len, req->rep_body,
			 err.text);
	return v;
}

/* The reply's problem code (fails the test if it is not a problem). */
static inline const char *unit_reply_code(struct request *req)
{
	unit_reply(req);
	assert_string_equal(unit_reply_header(req, "Content-Type"), "application/problem+json");
	assert_non_null(req->rep_code);
	return req->rep_code;
}

/* Whether the reply's body holds TEXT. */
static inline int unit_reply_holds(struct request *req, const char *text)
{
	size_t n = strlen(text);

	unit_reply(req);
	for (size_t i = 0; n <= req->rep_len && i <= req->rep_len - n; i++)
		if (memcmp(req->rep_body + i, text, n) == 0)
			return 1;
	return 0;
}

/* Forgets the reply, as a new request would start. */
static inline void unit_reply_free(struct request *req)
{
	http_clear_reply(req);
}

#endif
