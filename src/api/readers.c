/* The readers: a work queue served by READERS threads, each job's
 * statement run there and its answer built back on the HTTP worker. The
 * next job taken is the earliest of a tenant other than the one served
 * last, so one tenant's queue of listings does not stand before another's. */
#include "readers.h"

#include <stdatomic.h>

#include "log.h"

static struct workq readers_q = WORKQ_INITIALIZER;
static struct workq_workers readers_w;
static _Atomic uint32_t readers_last; /* the tenant whose job was taken last */

static int readers_other_tenant(const struct workq_item *it, void *arg)
{
	const struct reader_job *j = WORKQ_CJOB(it, struct reader_job, rj_item);

	(void)arg;
	return j->rj_tenant_id != atomic_load(&readers_last);
}

static void *readers_main(void *arg)
{
	struct workq_item *it;

	(void)arg;
	while ((it = workq_take_pick(&readers_q, 1, NULL, readers_other_tenant, NULL, 1, NULL)) !=
	       NULL) {
		struct reader_job *j = WORKQ_JOB(it, struct reader_job, rj_item);
		atomic_store(&readers_last, j->rj_tenant_id);
		j->rj_run(j);
		http_resume_then(j->rj_req, j->rj_answer, j);
	}
	return NULL;
}

int readers_start(void)
{
	if (workq_workers_start(&readers_w, &readers_q, READERS, readers_main, NULL, "reader") <
	    0) {
		log_error("readers: cannot start the reader threads");
		return -1;
	}
	return 0;
}

void readers_stop(void)
{
	workq_workers_stop(&readers_w);
}

void readers_submit(struct reader_job *j)
{
#ifdef IDEMD_MUTANT_LISTING_ON_WORKER
	j->rj_run(j);
	j->rj_answer(j->rj_req, j);
	return;
#endif
	http_suspend(j->rj_req);
	if (workq_push(&readers_q, &j->rj_item) == 0)
		return;
	/* not started, or stopped: run it here */
	j->rj_run(j);
	http_resume_then(j->rj_req, j->rj_answer, j);
}
