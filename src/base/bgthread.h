/* A background thread that runs until it is told to stop: the janitor,
 * the request deadline reaper, the replay counter. Its loop holds LOCK
 * while it reads STOP, and waits on WAKE with a deadline from
 * bgthread_deadline(); bgthread_stop() sets STOP, wakes it and joins it.
 * Ownership: the struct is its module's (a static), never freed. */
#ifndef IDEMD_BGTHREAD_H
#define IDEMD_BGTHREAD_H

#include <pthread.h>
#include <time.h>

#include "common.h"

struct bgthread {
	pthread_mutex_t lock; /* guards STOP, and whatever the module adds */
	pthread_cond_t wake;
	pthread_t thread;
	int stop;
	int running;
};

#define BGTHREAD_INITIALIZER \
	{ \
		.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER \
	}

/* Starts FN (its argument NULL) on T. 0, or -1 when no thread could be
 * made (T is then not running). */
int bgthread_start(struct bgthread *t, void *(*fn)(void *)) IDEMD_WUR;

/* Tells T's thread to stop, wakes it and waits for it to end; nothing
 * when it is not running. */
void bgthread_stop(struct bgthread *t);

/* The CLOCK_REALTIME time MS milliseconds from now, as
 * pthread_cond_timedwait() takes it. */
struct timespec bgthread_deadline(double ms);

#endif
