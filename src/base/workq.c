/* The work queue of the batcher, the upstream thread and the gateway's
 * finishers: one lock, one condition, one intrusive list. */
#include "workq.h"

#include "log.h"

void workq_open(struct workq *q)
{
	pthread_mutex_lock(&q->wq_lock);
	q->wq_open = 1;
	pthread_mutex_unlock(&q->wq_lock);
}

void workq_close(struct workq *q)
{
	pthread_mutex_lock(&q->wq_lock);
	q->wq_open = 0;
	pthread_cond_broadcast(&q->wq_cond);
	pthread_mutex_unlock(&q->wq_lock);
}

int workq_push(struct workq *q, struct workq_item *it)
{
	it->wi_next = NULL;
	pthread_mutex_lock(&q->wq_lock);
	if (!q->wq_open) {
		pthread_mutex_unlock(&q->wq_lock);
		return -1;
	}
	if (q->wq_tail != NULL)
		q->wq_tail->wi_next = it;
	else
		q->wq_head = it;
	q->wq_tail = it;
	pthread_cond_signal(&q->wq_cond);
	pthread_mutex_unlock(&q->wq_lock);
	return 0;
}

struct workq_item *workq_take(struct workq *q, size_t max, workq_match_fn match, int wait,
			      int *closed)
{
	return workq_take_pick(q, max, match, NULL, NULL, wait, closed);
}

/* How far PICK looks into the queue for a better first item. */
#define WORKQ_PICK_SCAN 256

/* The link to the first item PICK prefers among the first WORKQ_PICK_SCAN
 * of Q, or to its head when PICK prefers none of them; under wq_lock. */
static struct workq_item **workq_pick_link(struct workq *q, workq_pick_fn pick, void *pick_arg)
{
	struct workq_item **l = &q->wq_head;

	for (size_t k = 0; *l != NULL && k < WORKQ_PICK_SCAN; k++, l = &(*l)->wi_next)
		if (pick(*l, pick_arg))
			return l;
	return &q->wq_head;
}

/* Unlinks up to MAX items from *LINK on: FIRST (the item *LINK points at)
 * and those after it that MATCH pairs with FIRST (all of them when MATCH is
 * NULL); returns them as a list in queue order, NULL for none. Leaves
 * wq_tail as it was; under wq_lock. */
static struct workq_item *workq_unlink_run(struct workq_item **link, struct workq_item *first,
					   size_t max, workq_match_fn match)
{
	struct workq_item *out = NULL, **out_tail = &out;
	size_t n = 0;

	while (*link != NULL && n < max) {
		struct workq_item *it = *link;
		if (n == 0 || match == NULL || match(first, it)) {
			*link = it->wi_next;
			it->wi_next = NULL;
			*out_tail = it;
			out_tail = &it->wi_next;
			n++;
		} else {
			link = &it->wi_next;
		}
	}
	return out;
}

struct workq_item *workq_take_pick(struct workq *q, size_t max, workq_match_fn match,
				   workq_pick_fn pick, void *pick_arg, int wait, int *closed)
{
	struct workq_item *first, *out, **link;

	pthread_mutex_lock(&q->wq_lock);
	while (wait && q->wq_head == NULL && q->wq_open)
		pthread_cond_wait(&q->wq_cond, &q->wq_lock);
	if (closed != NULL)
		*closed = !q->wq_open;
	first = q->wq_head;
	link = &q->wq_head;
	if (pick != NULL && first != NULL) {
		/* the first item PICK prefers, within the scan; the head else */
		link = workq_pick_link(q, pick, pick_arg);
		first = *link;
	}
	out = workq_unlink_run(link, first, max, match);
	if (q->wq_head == NULL) {
		q->wq_tail = NULL;
	} else if (match != NULL || pick != NULL) {
		/* the tail may have been taken: find it again */
		for (struct workq_item *it = q->wq_head; it != NULL; it = it->wi_next)
			q->wq_tail = it;
	}
	/* more left: let another taker start on it now */
	if (q->wq_head != NULL)
		pthread_cond_signal(&q->wq_cond);
	pthread_mutex_unlock(&q->wq_lock);
	return out;
}

int workq_workers_start(struct workq_workers *w, struct workq *q, int n, void *(*fn)(void *),
			void *arg, const char *who)
{
	if (n < 1 || n > WORKQ_MAX_WORKERS)
		return -1;
	w->ww_q = q;
	w->ww_n = 0;
	workq_open(q);
	for (int i = 0; i < n; i++) {
		if (pthread_create(&w->ww_threads[i], NULL, fn, arg) != 0) {
			log_error("%s: cannot start a thread", who);
			workq_workers_stop(w);
			return -1;
		}
		w->ww_n++;
	}
	return 0;
}

void workq_workers_stop(struct workq_workers *w)
{
	if (w->ww_q != NULL)
		workq_close(w->ww_q);
	for (int i = 0; i < w->ww_n; i++)
		pthread_join(w->ww_threads[i], NULL);
	w->ww_n = 0;
}
