/* Small definitions shared by every module: attributes and helpers. */
#ifndef IDEMD_COMMON_H
#define IDEMD_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define IDEMD_WUR __attribute__((warn_unused_result))
#define IDEMD_UNUSED __attribute__((unused))
#define IDEMD_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
/* The TYPE whose member MEMBER is at PTR: how every callback finds its job
 * (a batcher job, a waiter, an upstream call, a queue item). */
#define IDEMD_CONTAINER_OF(ptr, type, member) \
	((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* The wall clock in unix milliseconds: what records, tokens and leases are
 * timed by. */
static inline int64_t idemd_unix_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#define IDEMD_VERSION "0.1.0"

#endif
