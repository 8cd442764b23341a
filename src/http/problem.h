/* Problem answers: RFC 9457 application/problem+json with a stable code.
 * Checks record a problem with request_fail() (request.h); http.c turns it
 * into the answer here, in one place.
 * Ownership: arguments are borrowed for the call. */
#ifndef IDEMD_PROBLEM_H
#define IDEMD_PROBLEM_H

#include "request.h"

/* Turns the problem REQ recorded (request_fail) into its problem+json
 * answer, with the headers set on it; nothing when no problem is recorded
 * or an answer is already built. */
void problem_answer(struct request *req);

/* Builds the problem document, owned (json_decref()), for unit tests and
 * replays; NULL when DETAIL is not valid UTF-8 or out of memory. */
json_t *problem_document(unsigned status, const char *code, const char *detail);

/* Title of a status code ("Not Found"), never NULL. */
const char *problem_title(unsigned status);

#endif
