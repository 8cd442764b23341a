/*
 * A work queue: an intrusive FIFO under one lock, shared by the batcher
 * (claims and completes), the upstream thread (forwards) and the gateway's
 * finishers (outcomes). An item is a struct workq_item embedded in the
 * caller's job; WORKQ_JOB() finds the job again.
 *
 * A queue is open or closed. A push to a closed queue is refused (the item
 * stays the caller's); takers still empty it, and a waiting take returns
 * nothing once it is closed and empty: that is how worker threads stop.
 *
 * Ownership: an item pushed is borrowed by the queue until a take returns
 * it; the queue owns no memory.
 */
#ifndef IDEMD_WORKQ_H
#define IDEMD_WORKQ_H

#include <pthread.h>
#include <stddef.h>

#include "common.h"

struct workq_item {
	struct workq_item *wi_next;
};

struct workq {
	pthread_mutex_t wq_lock;
	pthread_cond_t wq_cond;
	struct workq_item *wq_head, *wq_tail;
	int wq_open;
};

/* A queue as a static initialiser, closed until workq_open(). */
#define WORKQ_INITIALIZER \
	{ \
		PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, 0 \
	}

/* The job of type TYPE whose member MEMBER is the item IT (WORKQ_CJOB:
 * a const item, a const job). */
#define WORKQ_JOB(it, type, member) IDEMD_CONTAINER_OF(it, type, member)
#define WORKQ_CJOB(it, type, member) \
	((const type *)(const void *)((const char *)(it)-offsetof(type, member)))

/* Whether IT may be taken in one go with FIRST, the queue's head. */
typedef int (*workq_match_fn)(const struct workq_item *first, const struct workq_item *it);
/* Whether IT should go first (workq_take_pick). */
typedef int (*workq_pick_fn)(const struct workq_item *it, void *arg);

void workq_open(struct workq *q);

/* Closes Q and wakes every waiting take. */
void workq_close(struct workq *q);

/* Queues IT at the tail: 0, or -1 when Q is closed (IT stays the caller's). */
int workq_push(struct workq *q, struct workq_item *it) IDEMD_WUR;

/*
 * Takes the head and, after it, each later item MATCH accepts (MATCH NULL:
 * every one), at most MAX in all, in queue order, as a chain linked by
 * wi_next. With WAIT, blocks while Q is open and empty. Returns NULL when
 * there is nothing (with WAIT: only once Q is closed and empty). *CLOSED
 * (may be NULL) receives whether Q was closed at the take, under the same
 * lock. When items stay queued, another waiting take is woken.
 */
struct workq_item *workq_take(struct workq *q, size_t max, workq_match_fn match, int wait,
			      int *closed);

/* workq_take(), except that the first item taken is the earliest of the
 * first 256 that PICK accepts (when none does: the head), and the items
 * taken with it come from the queue after it: a taker that wants to be
 * fair (the batcher, between tenants) passes over the head. */
struct workq_item *workq_take_pick(struct workq *q, size_t max, workq_match_fn match,
				   workq_pick_fn pick, void *pick_arg, int wait, int *closed);

/* The threads that serve a queue: WORKQ_MAX_WORKERS at most. */
#define WORKQ_MAX_WORKERS 16
struct workq_workers {
	struct workq *ww_q; /* borrowed */
	pthread_t ww_threads[WORKQ_MAX_WORKERS];
	int ww_n;
};

/* Opens Q and starts N threads running FN(ARG) on it (FN takes until a
 * take returns nothing), WHO naming them in the log: 0, or -1 (N out of
 * range, or a thread that could not start: those started are stopped). */
int workq_workers_start(struct workq_workers *w, struct workq *q, int n, void *(*fn)(void *),
			void *arg, const char *who) IDEMD_WUR;

/* Closes the queue; each thread empties it and returns, and is joined. */
void workq_workers_stop(struct workq_workers *w);

#endif
