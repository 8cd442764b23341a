/* Problem replies: RFC 9457 application/problem+json with a stable code. */
#ifndef IDEMD_PROBLEM_H
#define IDEMD_PROBLEM_H

#include "request.h"

/* Replies STATUS with CODE (snake_case) and a formatted detail. */
void problem_reply(struct request *req, unsigned status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* 503 unavailable with Retry-After: 1. */
void problem_unavailable(struct request *req);

/* Builds the problem document (new reference), for unit tests and replays. */
json_t *problem_document(unsigned status, const char *code, const char *detail);

/* Title of a status code ("Not Found"), never NULL. */
const char *problem_title(unsigned status);

#endif
