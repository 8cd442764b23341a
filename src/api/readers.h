/* The readers: threads that run the statements which read many rows (a
 * record listing, a page of audit events) off the HTTP workers, so that a
 * slow one never holds a worker, nor the connections libmicrohttpd binds
 * to it, while other tenants' claims wait. Taken in turns between tenants.
 * Ownership: readers_submit() takes the job; its ANSWER frees it. */
#ifndef IDEMD_READERS_H
#define IDEMD_READERS_H

#include "common.h"
#include "request.h"
#include "workq.h"

#define READERS 2 /* threads: at most this many such statements at once */

/* A read to run: RUN on a reader thread (it fills what the job embeds),
 * then ANSWER on the request's HTTP worker (http_resume_then: it builds
 * the reply, or is called with the connection gone, and frees the job
 * either way). */
struct reader_job {
	struct workq_item rj_item;
	struct request *rj_req; /* borrowed; suspended until ANSWER */
	uint32_t rj_tenant_id;
	void (*rj_run)(struct reader_job *j);
	void (*rj_answer)(struct request *req, void *job);
};

/* Starts the threads: 0, or -1 after logging. */
int readers_start(void) IDEMD_WUR;
/* Stops them once no request is suspended on them (after http_stop). */
void readers_stop(void);
/* Suspends J's request and queues J (when the readers do not run, J is
 * run on this thread); the handler then returns without replying. */
void readers_submit(struct reader_job *j);

#endif
