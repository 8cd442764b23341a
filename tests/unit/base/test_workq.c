/* Unit tests for the work queue: FIFO order, a take of matching items past
 * others, pushes refused once closed while takers still empty the queue,
 * waiting takers woken by a push and by the close, and many producers and
 * consumers losing nothing; the worker threads that serve a queue. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "workq.h"
#include "unit.h"

struct job {
	int kind;
	int n;
	struct workq_item item;
};

static int same_kind(const struct workq_item *first, const struct workq_item *it)
{
	return WORKQ_CJOB(first, struct job, item)->kind == WORKQ_CJOB(it, struct job, item)->kind;
}

static void test_order_and_match(void **state)
{
	struct workq q = WORKQ_INITIALIZER;
	struct job jobs[6];
	int closed;

	(void)state;
	assert_int_equal(workq_push(&q, &jobs[0].item), -1); /* closed until opened */
	workq_open(&q);
	for (int i = 0; i < 6; i++) {
		jobs[i].kind = i % 2;
		jobs[i].n = i;
		assert_int_equal(workq_push(&q, &jobs[i].item), 0);
	}
	/* the head and the later items of its kind, at most 2 */
	struct workq_item *it = workq_take(&q, 2, same_kind, 0, &closed);
	assert_false(closed);
	assert_ptr_equal(WORKQ_JOB(it, struct job, item), &jobs[0]);
	assert_ptr_equal(WORKQ_JOB(it->wi_next, struct job, item), &jobs[2]);
	assert_null(it->wi_next->wi_next);
	/* one at a time, in order: 1, 3, 4, 5 */
	int want[] = { 1, 3, 4, 5 };
	for (int i = 0; i < 4; i++) {
		it = workq_take(&q, 1, NULL, 0, NULL);
		assert_non_null(it);
		assert_int_equal(WORKQ_JOB(it, struct job, item)->n, want[i]);
	}
	assert_null(workq_take(&q, 1, NULL, 0, NULL));
	/* the tail is right after a take: a push lands at the end */
	assert_int_equal(workq_push(&q, &jobs[0].item), 0);
	assert_int_equal(workq_push(&q, &jobs[1].item), 0);
	it = workq_take(&q, (size_t)-1, NULL, 0, NULL);
	assert_int_equal(WORKQ_JOB(it, struct job, item)->n, 0);
	assert_int_equal(WORKQ_JOB(it->wi_next, struct job, item)->n, 1);
}

/* Prefers jobs whose kind is not *ARG (the batcher's "another tenant"). */
static int other_kind(const struct workq_item *it, void *arg)
{
	return WORKQ_CJOB(it, struct job, item)->kind != *(int *)arg;
}

/* workq_take_pick: the first preferred item goes first, its matches after
 * it follow; what was passed over stays in order; the tail stays right. */
static void test_pick_passes_over_the_head(void **state)
{
	struct workq q = WORKQ_INITIALIZER;
	struct job jobs[6];
	int last = 0;

	(void)state;
	workq_open(&q);
	for (int i = 0; i < 6; i++) {
		jobs[i].kind = i < 4 ? 0 : 1; /* four of kind 0 (a flood), then two of kind 1 */
		jobs[i].n = i;
		assert_int_equal(workq_push(&q, &jobs[i].item), 0);
	}
	struct workq_item *it = workq_take_pick(&q, 8, same_kind, other_kind, &last, 0, NULL);
	assert_int_equal(WORKQ_JOB(it, struct job, item)->n, 4);
	assert_int_equal(WORKQ_JOB(it->wi_next, struct job, item)->n, 5);
	assert_null(it->wi_next->wi_next);
	last = 1; /* nothing of another kind than 0 left: the head */
	it = workq_take_pick(&q, 1, same_kind, other_kind, &last, 0, NULL);
	assert_int_equal(WORKQ_JOB(it, struct job, item)->n, 0);
	assert_int_equal(workq_push(&q, &jobs[4].item), 0);
	it = workq_take(&q, (size_t)-1, NULL, 0, NULL);
	int want[] = { 1, 2, 3, 4 };
	for (int i = 0; i < 4; i++, it = it->wi_next)
		assert_int_equal(WORKQ_JOB(it, struct job, item)->n, want[i]);
	assert_null(it);
}

static void test_close_drains(void **state)
{
	struct workq q = WORKQ_INITIALIZER;
	struct job a, b;
	int closed;

	(void)state;
	workq_open(&q);
	assert_int_equal(workq_push(&q, &a.item), 0);
	workq_close(&q);
	assert_int_equal(workq_push(&q, &b.item), -1);
	/* still taken after the close, then nothing, without blocking */
	assert_ptr_equal(workq_take(&q, 1, NULL, 1, &closed), &a.item);
	assert_true(closed);
	assert_null(workq_take(&q, 1, NULL, 1, &closed));
}

#define PRODUCERS 4
#define CONSUMERS 3
#define PER_PRODUCER 20000

static struct workq shared = WORKQ_INITIALIZER;
static struct job pool[PRODUCERS][PER_PRODUCER];
static int seen[PRODUCERS][PER_PRODUCER];
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;

static void *producer(void *arg)
{
	int p = (int)(intptr_t)arg;

	for (int i = 0; i < PER_PRODUCER; i++) {
		pool[p][i].kind = p;
		pool[p][i].n = i;
		if (workq_push(&shared, &pool[p][i].item) != 0)
			return (void *)1;
	}
	return NULL;
}

static void *consumer(void *arg)
{
	int last[PRODUCERS];

	(void)arg;
	for (int p = 0; p < PRODUCERS; p++)
		last[p] = -1;
	for (;;) {
		struct workq_item *it =
			workq_take(&shared, 1 + (size_t)(intptr_t)arg, NULL, 1, NULL);
		if (it == NULL)
			return NULL;
		for (; it != NULL; it = it->wi_next) {
			struct job *j = WORKQ_JOB(it, struct job, item);
			/* each producer's items come out in the order pushed */
			if (j->n <= last[j->kind])
				return (void *)1;
			last[j->kind] = j->n;
			pthread_mutex_lock(&seen_lock);
			seen[j->kind][j->n]++;
			pthread_mutex_unlock(&seen_lock);
		}
	}
}

static void test_threads(void **state)
{
	pthread_t prod[PRODUCERS], cons[CONSUMERS];
	void *rc;

	(void)state;
	workq_open(&shared);
	for (int c = 0; c < CONSUMERS; c++)
		assert_int_equal(pthread_create(&cons[c], NULL, consumer, (void *)(intptr_t)c), 0);
	for (int p = 0; p < PRODUCERS; p++)
		assert_int_equal(pthread_create(&prod[p], NULL, producer, (void *)(intptr_t)p), 0);
	for (int p = 0; p < PRODUCERS; p++) {
		pthread_join(prod[p], &rc);
		assert_null(rc);
	}
	workq_close(&shared);
	for (int c = 0; c < CONSUMERS; c++) {
		pthread_join(cons[c], &rc);
		assert_null(rc);
	}
	for (int p = 0; p < PRODUCERS; p++)
		for (int i = 0; i < PER_PRODUCER; i++)
			assert_int_equal(seen[p][i], 1);
}

/* Workers: each item pushed before the stop is taken once, the stop
 * joins them all, and a count out of range starts none. */
#define WORKER_ITEMS 1000
static struct workq served = WORKQ_INITIALIZER;
static atomic_int n_served;

static void *worker(void *arg)
{
	(void)arg;
	for (;;) {
		struct workq_item *it = workq_take(&served, 1, NULL, 1, NULL);
		if (it == NULL)
			return NULL;
		atomic_fetch_add(&n_served, 1);
	}
}

static void test_workers(void **state)
{
	static struct workq_item items[WORKER_ITEMS];
	struct workq_workers w = { 0 };

	(void)state;
	assert_int_equal(workq_workers_start(&w, &served, 0, worker, NULL, "test"), -1);
	assert_int_equal(
		workq_workers_start(&w, &served, WORKQ_MAX_WORKERS + 1, worker, NULL, "test"), -1);
	assert_int_equal(workq_workers_start(&w, &served, 3, worker, NULL, "test"), 0);
	assert_int_equal(w.ww_n, 3);
	for (int i = 0; i < WORKER_ITEMS; i++)
		assert_int_equal(workq_push(&served, &items[i]), 0);
	workq_workers_stop(&w);
	assert_int_equal(w.ww_n, 0);
	assert_int_equal(atomic_load(&n_served), WORKER_ITEMS);
	/* closed: a push is refused */
	assert_int_equal(workq_push(&served, &items[0]), -1);
}

UNIT_MAIN(cmocka_unit_test(test_order_and_match), cmocka_unit_test(test_pick_passes_over_the_head),
	  cmocka_unit_test(test_close_drains), cmocka_unit_test(test_threads),
	  cmocka_unit_test(test_workers))
