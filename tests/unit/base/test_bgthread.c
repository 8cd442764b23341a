/* Unit tests for background threads: a thread waiting on its condition
 * with a far deadline ends as soon as it is told to stop, a stop of a
 * thread never started does nothing, and deadlines carry into seconds. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "bgthread.h"
#include "unit.h"

static struct bgthread waiter = BGTHREAD_INITIALIZER;
static int rounds;

/* Waits an hour at a time until told to stop. */
static void *wait_long(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&waiter.lock);
	while (!waiter.stop) {
		struct timespec until = bgthread_deadline(3600 * 1000.0);
		rounds++;
		pthread_cond_timedwait(&waiter.wake, &waiter.lock, &until);
	}
	pthread_mutex_unlock(&waiter.lock);
	return NULL;
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void test_stop_wakes_the_thread(void **state)
{
	(void)state;
	assert_int_equal(bgthread_start(&waiter, wait_long), 0);
	assert_int_equal(waiter.running, 1);
	for (int i = 0; i < 200; i++) { /* until it waits */
		pthread_mutex_lock(&waiter.lock);
		int r = rounds;
		pthread_mutex_unlock(&waiter.lock);
		if (r > 0)
			break;
		nanosleep(&(struct timespec){ 0, 5000000L }, NULL);
	}
	double t0 = now_s();
	bgthread_stop(&waiter);
	assert_true(now_s() - t0 < 5.0);
	assert_int_equal(waiter.running, 0);
	assert_int_equal(waiter.stop, 1);
	bgthread_stop(&waiter); /* a second stop does nothing */
	/* started again, it runs again */
	assert_int_equal(bgthread_start(&waiter, wait_long), 0);
	assert_int_equal(waiter.stop, 0);
	bgthread_stop(&waiter);
}

static void test_stop_of_a_thread_never_started(void **state)
{
	struct bgthread idle = BGTHREAD_INITIALIZER;

	(void)state;
	bgthread_stop(&idle);
	assert_int_equal(idle.running, 0);
	assert_int_equal(idle.stop, 0);
}

static void test_deadline(void **state)
{
	struct timespec before, after;

	(void)state;
	for (double ms = 0; ms <= 2500; ms += 250) {
		clock_gettime(CLOCK_REALTIME, &before);
		struct timespec d = bgthread_deadline(ms);
		clock_gettime(CLOCK_REALTIME, &after);
		assert_true(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L);
		double lo = (double)before.tv_sec + (double)before.tv_nsec / 1e9 + ms / 1e3;
		double hi = (double)after.tv_sec + (double)after.tv_nsec / 1e9 + ms / 1e3;
		double got = (double)d.tv_sec + (double)d.tv_nsec / 1e9;
		assert_true(got >= lo - 1e-6 && got <= hi + 1e-6);
	}
}

UNIT_MAIN(cmocka_unit_test(test_stop_wakes_the_thread),
	  cmocka_unit_test(test_stop_of_a_thread_never_started), cmocka_unit_test(test_deadline))
