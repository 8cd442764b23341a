/*
 * The one stand-in for libmicrohttpd in unit tests: it replaces
 * src/http_reply.c (http_reply_*, http_set_header) and the request-thread
 * calls of src/http.c (http_header, http_query, http_suspend, http_resume,
 * http_resume_then, http_note_record). Linked into a test (CMake's IDEMD_UNIT_FAKE_HTTP), its
 * definitions come first, so the archive's http_reply.o and http.o are
 * never pulled in and nothing is defined twice.
 *
 * Replies are captured in fake_http; a new reply replaces the last one and
 * its headers. Ownership: fake_http.fh_body is the fake's (freed by
 * fake_http_reset).
 */
#ifndef IDEMD_FAKE_HTTP_H
#define IDEMD_FAKE_HTTP_H

#include <jansson.h>
#include <stddef.h>

#include "request.h"

#define FAKE_HTTP_MAX_HEADERS 16

struct fake_http {
	/* the last reply */
	int fh_replies; /* replies made since the reset */
	unsigned fh_status;
	char fh_content_type[64];
	char *fh_body; /* NUL-terminated copy */
	size_t fh_body_len;
	int fh_n_headers;
	char fh_headers[FAKE_HTTP_MAX_HEADERS][2][256];
	/* the request side */
	const char *fh_req_headers[FAKE_HTTP_MAX_HEADERS][2]; /* what http_header() finds */
	int fh_n_req_headers;
	int fh_suspends, fh_resumes;
	/* the builder http_resume_then() was given, not yet run */
	void (*fh_then)(struct request *req, void *arg);
	void *fh_then_arg;
};

extern struct fake_http fake_http;

/* Forgets everything (a cmocka setup or teardown; STATE unused). */
int fake_http_reset(void **state);

/* The reply's body as JSON (new reference); fails the test if it is not. */
json_t *fake_http_json(void);

/* The reply's header NAME (case-insensitive), or NULL. */
const char *fake_http_header(const char *name);

/* Makes http_header() find NAME: VALUE (both borrowed until the reset). */
void fake_http_request_header(const char *name, const char *value);

/* Runs, on REQ, the builder http_resume_then() was given, as the HTTP
 * thread does when the connection is resumed. */
void fake_http_run_then(struct request *req);

#endif
