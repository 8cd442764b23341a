/* Handler entry points, one per route (see router.c). Each replies exactly once.
 * Ownership: REQ is borrowed for the call, or until http_resume() when the
 * handler suspends it (http_suspend). */
#ifndef IDEMD_HANDLERS_H
#define IDEMD_HANDLERS_H

#include "request.h"

void h_healthz(struct request *req);
void h_readyz(struct request *req);
void h_metrics(struct request *req);

void h_operation_put(struct request *req);
void h_operation_get(struct request *req);
void h_operation_list(struct request *req);

void h_token_issue(struct request *req);
void h_token_get(struct request *req);
void h_token_revoke(struct request *req);
void h_token_claim(struct request *req);
/* complete, release, extend, checkpoint: the route's arg
 * (enum engine_action) says which */
void h_token_act(struct request *req);

void h_key_claim(struct request *req);
void h_key_act(struct request *req); /* as h_token_act */
void h_key_get(struct request *req);
void h_key_claims(struct request *req);
void h_key_completions(struct request *req);

void h_record_get(struct request *req);
void h_record_events(struct request *req);
void h_record_list(struct request *req);

void h_version_get(struct request *req);
void h_version_bump(struct request *req);

#endif
