/*
 * The one table that turns an engine outcome (outcome.h) into an answer:
 * status, problem code, one detail text and the headers it carries. Every
 * path renders refusals through it: single requests (a recorded problem),
 * batch items (an item object) and gateway submits.
 * Ownership: arguments are borrowed for the call; codes returned are
 * literals.
 */
#ifndef IDEMD_ANSWER_H
#define IDEMD_ANSWER_H

#include <jansson.h>

#include "outcome.h"
#include "request.h"

/* The status OUTCOME answers with. */
unsigned answer_status(enum outcome o);

/* Records OUTCOME, a refusal, on REQ as its problem (request_fail) with
 * the headers it carries (Retry-After, ETag); V may be NULL. */
void answer_problem(struct request *req, enum outcome o, const struct outcome_values *v);

/* Adds "status" and, for a refusal, "code" and "detail" of OUTCOME to the
 * batch item ITEM. */
void answer_item(json_t *item, enum outcome o, const struct outcome_values *v);

#endif
