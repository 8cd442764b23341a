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
#define BATCHER_MAX_THREADS 16

static struct {
	pthread_mutex_t lock;
	pthread_cond_t queued;
	struct batcher_job *head, *tail;
	pthread_t threads[BATCHER_MAX_THREADS];
	int nthreads;
	int running;
	int stopping;
} bt = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, { 0 }, 0, 0, 0 };

/* Orders claims (completes) by tenant, then token. */
static int batcher_cmp(const void *pa, const void *pb)
{
	const struct batcher_job *a = *(const struct batcher_job *const *)pa;
	const struct batcher_job *b = *(const struct batcher_job *const *)pb;
	uint32_t ta = a->bj_kind == BATCHER_CLAIM ? a->bj_claim->tenant_id : a->bj_complete->tenant_id;
	uint32_t tb = b->bj_kind == BATCHER_CLAIM ? b->bj_claim->tenant_id : b->bj_complete->tenant_id;
	const uint8_t *ia = a->bj_kind == BATCHER_CLAIM ? a->bj_claim->token_id : a->bj_complete->token_id;
	const uint8_t *ib = b->bj_kind == BATCHER_CLAIM ? b->bj_claim->token_id : b->bj_complete->token_id;

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
	int rc = -1;

	metrics_add(METRIC_DB_BATCHES, 1);
	metrics_add(METRIC_DB_BATCH_JOBS, (long)n);
	metrics_batch(n);
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
			rc = store_claim_many(ca, cr, n);
		else
			rc = store_complete_many(pa, pr, n);
		if (rc < 0)
			log_warn("batcher: a batch of %zu failed as a whole; running it one by one", n);
	}
	for (size_t i = 0; i < n; i++) {
		if (rc == 0)
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

/* Runs set J: its elements in record order as one statement (one round
 * trip, one commit); when that fails as a whole, each on its own. */
static void batcher_run_set(struct batcher_job *j)
{
	size_t n = j->bj_n;
	struct batcher_elem *e = calloc(n, sizeof(*e));
	const void **args = calloc(n, sizeof(*args));
	void **res = calloc(n, sizeof(*res));
	int rc = -1;

	metrics_add(METRIC_DB_BATCHES, 1);
	metrics_add(METRIC_DB_BATCH_JOBS, (long)n);
	metrics_batch(n);
	if (e != NULL && args != NULL && res != NULL) {
		for (size_t i = 0; i < n; i++) {
			const struct claim_args *ca = &j->bj_claim[i];
			const struct complete_args *pa = &j->bj_complete[i];
			e[i].tenant_id = j->bj_kind == BATCHER_CLAIM ? ca->tenant_id : pa->tenant_id;
			e[i].id = j->bj_kind == BATCHER_CLAIM ? ca->token_id : pa->token_id;
			e[i].i = i;
		}
		qsort(e, n, sizeof(*e), batcher_elem_cmp);
		for (size_t k = 0; k < n; k++) {
			size_t i = e[k].i;
			if (j->bj_kind == BATCHER_CLAIM) {
				args[k] = &j->bj_claim[i];
				res[k] = &j->bj_claim_result[i];
			} else {
				args[k] = &j->bj_complete[i];
				res[k] = &j->bj_complete_result[i];
			}
		}
		if (j->bj_kind == BATCHER_CLAIM)
			rc = store_claim_many((const struct claim_args *const *)args,
					      (struct claim_result *const *)res, n);
		else
			rc = store_complete_many((const struct complete_args *const *)args,
						 (struct complete_result *const *)res, n);
		if (rc < 0)
			log_warn("batcher: a set of %zu failed as a whole; running it one by one", n);
	}
	for (size_t i = 0; i < n; i++) {
		if (rc == 0)
			j->bj_rcs[i] = 0;
		else if (j->bj_kind == BATCHER_CLAIM)
			j->bj_rcs[i] = store_claim(&j->bj_claim[i], &j->bj_claim_result[i]);
		else
			j->bj_rcs[i] = store_complete(&j->bj_complete[i], &j->bj_complete_result[i]);
	}
	free(e);
	free(args);
	free(res);
	j->bj_rc = 0;
	j->bj_done(j);
}

/* Takes the next batch off the queue (lock held): the head job and every
 * later job of its kind, up to BATCHER_MAX. */
static size_t batcher_take(struct batcher_job **jobs)
{
	struct batcher_job **link = &bt.head;
	enum batcher_kind kind = bt.head->bj_kind;
	int alone = batcher_alone(bt.head);
	size_t n = 0;

	while (*link != NULL && n < BATCHER_MAX) {
		struct batcher_job *j = *link;
		if (j->bj_kind == kind && batcher_alone(j) == alone && (n == 0 || !alone)) {
			*link = j->bj_next;
			jobs[n++] = j;
		} else {
			link = &j->bj_next;
		}
	}
	bt.tail = NULL;
	for (struct batcher_job *j = bt.head; j != NULL; j = j->bj_next)
		bt.tail = j;
	return n;
}

static void *batcher_thread(void *arg)
{
	struct batcher_job *jobs[BATCHER_MAX];

	(void)arg;
	for (;;) {
		pthread_mutex_lock(&bt.lock);
		while (bt.head == NULL && !bt.stopping)
			pthread_cond_wait(&bt.queued, &bt.lock);
		if (bt.head == NULL) {
			pthread_mutex_unlock(&bt.lock);
			return NULL;
		}
		size_t n = batcher_take(jobs);
		/* more left: let another thread start on it now */
		if (bt.head != NULL)
			pthread_cond_signal(&bt.queued);
		pthread_mutex_unlock(&bt.lock);
		if (jobs[0]->bj_n > 0)
			batcher_run_set(jobs[0]);
		else
			batcher_run_batch(jobs, n);
	}
}

int batcher_start(int threads)
{
	if (threads < 1 || threads > BATCHER_MAX_THREADS)
		return -1;
	pthread_mutex_lock(&bt.lock);
	bt.stopping = 0;
	pthread_mutex_unlock(&bt.lock);
	for (int i = 0; i < threads; i++) {
		if (pthread_create(&bt.threads[i], NULL, batcher_thread, NULL) != 0) {
			log_error("batcher: cannot start a thread");
			bt.nthreads = i;
			batcher_stop();
			return -1;
		}
	}
	bt.nthreads = threads;
	pthread_mutex_lock(&bt.lock);
	bt.running = 1;
	pthread_mutex_unlock(&bt.lock);
	return 0;
}

void batcher_stop(void)
{
	pthread_mutex_lock(&bt.lock);
	bt.stopping = 1;
	bt.running = 0;
	pthread_cond_broadcast(&bt.queued);
	pthread_mutex_unlock(&bt.lock);
	for (int i = 0; i < bt.nthreads; i++)
		pthread_join(bt.threads[i], NULL);
	bt.nthreads = 0;
}

void batcher_submit(struct batcher_job *j)
{
	j->bj_next = NULL;
	pthread_mutex_lock(&bt.lock);
	if (!bt.running) {
		pthread_mutex_unlock(&bt.lock);
		if (j->bj_n > 0) {
			batcher_run_set(j);
			return;
		}
		batcher_run_one(j);
		j->bj_done(j);
		return;
	}
	if (bt.tail != NULL)
		bt.tail->bj_next = j;
	else
		bt.head = j;
	bt.tail = j;
	pthread_cond_signal(&bt.queued);
	pthread_mutex_unlock(&bt.lock);
}
