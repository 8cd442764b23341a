/* Background threads told to stop through their condition. */
#include "bgthread.h"

int bgthread_start(struct bgthread *t, void *(*fn)(void *))
{
	t->stop = 0;
	if (pthread_create(&t->thread, NULL, fn, NULL) != 0)
		return -1;
	t->running = 1;
	return 0;
}

void bgthread_stop(struct bgthread *t)
{
	if (!t->running)
		return;
	pthread_mutex_lock(&t->lock);
	t->stop = 1;
	pthread_cond_signal(&t->wake);
	pthread_mutex_unlock(&t->lock);
	pthread_join(t->thread, NULL);
	t->running = 0;
}

struct timespec bgthread_deadline(double ms)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	long long ns = until.tv_nsec + (long long)(ms * 1e6);
	until.tv_sec += (time_t)(ns / 1000000000LL);
	until.tv_nsec = (long)(ns % 1000000000LL);
	return until;
}
