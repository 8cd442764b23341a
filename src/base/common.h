/* Small definitions shared by every module: attributes and helpers.
 * Ownership: macros only; nothing here allocates. */
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

/* This host's wall clock in unix milliseconds. */
static inline int64_t idemd_local_unix_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* This host's monotonic clock in milliseconds: it never steps. */
static inline int64_t idemd_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The database's clock less this host's monotonic clock, and less its wall
 * clock, in ms, at the janitor's last measurement (janitor.c, every
 * second); 0 until then. Defined in rfc3339.c, with the other times. */
extern _Atomic int64_t idemd_clock_offset_ms;
extern _Atomic int64_t idemd_clock_skew_ms;

/* The clock records, tokens and leases are timed by: the database's, as
 * seen from here (this host's monotonic clock plus the measured offset),
 * so that an idemd host whose clock is off by seconds, or steps between
 * two measurements, still agrees with the database on what has expired;
 * this host's wall clock until the first measurement. (rfc3339.c) */
int64_t idemd_unix_ms(void);

#define IDEMD_VERSION "0.1.0"

#endif
