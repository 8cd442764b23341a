/* Batcher: a queue of claim and complete jobs and the threads that run them
 * in batches. A thread takes every queued job of the kind at the head (up to
 * BATCHER_MAX), sorts them by token so that concurrent batches lock records
 * in the same order, and runs them in one statement. A batch that fails as a
 * whole (a lost connection, a deadlock) runs again one job at a time, so one
 * bad element never decides the others' answers. */
#include "batcher.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "metrics.h"

#define BATCHER_MAX 64

static struct {
	struct workq q;
	struct workq_workers threads;
} bt = { .q = WORKQ_INITIALIZER };

/* Orders claims (completes) by tenant, then token. */
static int batcher_cmp(const void *pa, const void *pb)
{
	const struct batcher_job *a = *(const struct batcher_job *const *)pa;
	const struct batcher_job *b = *(const struct batcher_job *const *)pb;
	uint32_t ta = a->bj_kind == BATCHER_CLAIM ? a->bj_claim->tenant_id
						  : a->bj_complete->tenant_id;
	uint32_t tb = b->bj_kind == BATCHER_CLAIM ? b->bj_claim->tenant_id
						  : b->bj_complete->tenant_id;
	const uint8_t *ia = a->bj_kind == BATCHER_CLAIM ? a->bj_claim->token_id
							: a->bj_complete->token_id;
	const uint8_t *ib = b->bj_kind == BATCHER_CLAIM ? b->bj_claim->token_id
							: b->bj_complete->token_id;

	if (ta != tb)
		return ta < tb ? -1 : 1;
	return memcmp(ia, ib, 16);
}

/* Runs one job on its own (its own transaction). */
static void batcher_run_one(struct batcher_job *j)
{
	if (j->bj_kind == BATCHER_CLAIM)
		j->bj_rc = store_claim(j->bj_claim, j->bj_claim_result);
	else
		j->bj_rc = store_complete(j->bj_complete, j->bj_complete_result);
}

/* Runs the N jobs (all of one kind) and calls each one's bj_done. */
static void batcher_run_batch(struct batcher_job **jobs, size_t n)
{
	char decided[BATCHER_MAX] = { 0 };
	int rc = -1;

	metrics_add(METRIC_DB_BATCHES, 1);
	metrics_add(METRIC_DB_BATCH_JOBS, (long)n);
	metrics_batch(n);
	log_debug("batcher: a batch of %zu %s", n,
		  jobs[0]->bj_kind == BATCHER_CLAIM ? "claims" : "completes");
	if (n > 1) {
		const struct claim_args *ca[BATCHER_MAX];
		struct claim_result *cr[BATCHER_MAX];
		const struct complete_args *pa[BATCHER_MAX];
		struct complete_result *pr[BATCHER_MAX];

		qsort(jobs, n, sizeof(*jobs), batcher_cmp);
		for (size_t i = 0; i < n; i++) {
			ca[i] = jobs[i]->bj_claim;
			cr[i] = jobs[i]->bj_claim_result;
			pa[i] = jobs[i]->bj_complete;
			pr[i] = jobs[i]->bj_complete_result;
		}
		if (jobs[0]->bj_kind == BATCHER_CLAIM)
			rc = store_claim_many(ca, cr, n, decided);
		else
			rc = store_complete_many(pa, pr, n, decided);
		if (rc < 0)
			log_warn("batcher: a batch of %zu failed; running what it left undecided "
				 "one by one",
				 n);
	}
	for (size_t i = 0; i < n; i++) {
		if (decided[i])
			jobs[i]->bj_rc = 0;
		else
			batcher_run_one(jobs[i]);
		jobs[i]->bj_done(jobs[i]);
	}
}

/* A claim that guards a version counter also locks the counter; such claims
 * run alone so that two batches can never wait on each other's counters.
 * A set is a batch of its own. */
static int batcher_alone(const struct batcher_job *j)
{
	return j->bj_n > 0 || (j->bj_kind == BATCHER_CLAIM && j->bj_claim->version_key != NULL);
}

/* For sorting a set's elements: their record. */
struct batcher_elem {
	uint32_t tenant_id;
	const uint8_t *id;
	size_t i;
};

static int batcher_elem_cmp(const void *pa, const void *pb)
{
	const struct batcher_elem *a = pa, *b = pb;

	if (a->tenant_id != b->tenant_id)
		return a->tenant_id < b->tenant_id ? -1 : 1;
	return memcmp(a->id, b->id, 16);
}

/* Runs set J's N elements in record order as one statement (one round
 * trip, one commit) and marks in SET_DECIDED (request order) those it
 * decided. */
static void batcher_run_sorted(struct batcher_job *j, size_t n, char *set_decided)
{
	struct batcher_elem *e = calloc(n, sizeof(*e));
	const void **args = calloc(n, sizeof(*args));
	void **res = calloc(n, sizeof(*res));
	char *decided = calloc(n, 1);
	int claims = j->bj_kind == BATCHER_CLAIM;

	if (e == NULL || args == NULL || res == NULL || decided == NULL)
		goto out;
	for (size_t i = 0; i < n; i++) {
		e[i].tenant_id = claims ? j->bj_claim[i].tenant_id : j->bj_complete[i].tenant_id;
		e[i].id = claims ? j->bj_claim[i].token_id : j->bj_complete[i].token_id;
		e[i].i = i;
	}
	qsort(e, n, sizeof(*e), batcher_elem_cmp);
	for (size_t k = 0; k < n; k++) {
		size_t i = e[k].i;
		args[k] = claims ? (const void *)&j->bj_claim[i] : (const void *)&j->bj_complete[i];
		res[k] = claims ? (void *)&j->bj_claim_result[i]
				: (void *)&j->bj_complete_result[i];
	}
	int rc = claims ? store_claim_many((const struct claim_args *const *)args,
					   (struct claim_result *const *)res, n, decided)
			: store_complete_many((const struct complete_args *const *)args,
					      (struct complete_result *const *)res, n, decided);
	if (rc < 0)
		log_warn("batcher: a set of %zu failed; running what it left undecided one by one",
			 n);
	for (size_t k = 0; k < n; k++)
		set_decided[e[k].i] = decided[k];
out:
	free(e);
	free(args);
	free(res);
	free(decided);
}

/* Runs set J: its elements in record order as one statement; what that
 * left undecided (it failed), each on its own. */
static void batcher_run_set(struct batcher_job *j)
{
	size_t n = j->bj_n;
	char *decided = calloc(n, 1);

	metrics_add(METRIC_DB_BATCHES, 1);
	metrics_add(METRIC_DB_BATCH_JOBS, (long)n);
	metrics_batch(n);
	log_debug("batcher: a set of %zu %s", n,
		  j->bj_kind == BATCHER_CLAIM ? "claims" : "completes");
	if (decided != NULL)
		batcher_run_sorted(j, n, decided);
	for (size_t i = 0; i < n; i++) {
		if (decided != NULL && decided[i])
			j->bj_rcs[i] = 0;
		else if (j->bj_kind == BATCHER_CLAIM)
			j->bj_rcs[i] = store_claim(&j->bj_claim[i], &j->bj_claim_result[i]);
		else
			j->bj_rcs[i] =
				store_complete(&j->bj_complete[i], &j->bj_complete_result[i]);
	}
	free(decided);
	j->bj_rc = 0;
	j->bj_done(j);
}

/* Whether queued job J runs in one batch with FIRST, the queue's head: of
 * its kind, and neither alone. */
static int batcher_match(const struct workq_item *first, const struct workq_item *it)
{
	const struct batcher_job *f = WORKQ_CJOB(first, struct batcher_job, bj_item);
	const struct batcher_job *j = WORKQ_CJOB(it, struct batcher_job, bj_item);

	return j->bj_kind == f->bj_kind && !batcher_alone(f) && !batcher_alone(j);
}

/* The tenant a job works for (a set's first element's: a set is one
 * tenant's request). */
static uint32_t batcher_tenant(const struct batcher_job *j)
{
	return j->bj_kind == BATCHER_CLAIM ? j->bj_claim->tenant_id : j->bj_complete->tenant_id;
}

/* Fair turns between tenants: after a batch led by tenant T, the next one
 * this thread takes is led by the earliest queued job of another tenant,
 * if one is near the head; so one tenant's flood of batches delays another
 * tenant's claim by at most one batch per thread. */
static int batcher_pick(const struct workq_item *it, void *arg)
{
	const uint32_t *last = arg;

	return batcher_tenant(WORKQ_CJOB(it, struct batcher_job, bj_item)) != *last;
}

static void *batcher_thread(void *arg)
{
	struct batcher_job *jobs[BATCHER_MAX];
	uint32_t last = 0; /* no tenant has id 0 */

	(void)arg;
	for (;;) {
		struct workq_item *it = workq_take_pick(&bt.q, BATCHER_MAX, batcher_match,
							batcher_pick, &last, 1, NULL);
		size_t n = 0;

		if (it == NULL)
			return NULL;
		for (; it != NULL; it = it->wi_next)
			jobs[n++] = WORKQ_JOB(it, struct batcher_job, bj_item);
		last = batcher_tenant(jobs[0]);
		if (jobs[0]->bj_n > 0)
			batcher_run_set(jobs[0]);
		else
			batcher_run_batch(jobs, n);
	}
}

int batcher_start(int threads)
{
	return workq_workers_start(&bt.threads, &bt.q, threads, batcher_thread, NULL, "batcher");
}

void batcher_stop(void)
{
	/* the threads run what is queued, then return */
	workq_workers_stop(&bt.threads);
}

void batcher_submit(struct batcher_job *j)
{
	if (workq_push(&bt.q, &j->bj_item) == 0)
		return;
	/* not started, or stopped: run it here */
	if (j->bj_n > 0) {
		batcher_run_set(j);
		return;
	}
	batcher_run_one(j);
	j->bj_done(j);
}
