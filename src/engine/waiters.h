/*
 * Waiters: duplicates that wait for the first submit's outcome instead of
 * getting 409 (Prefer: wait=N, or the operation's wait_seconds). A waiting
 * request holds no thread: its connection stays suspended and its waiter
 * sits in this module's list until one of these wakes it:
 *   - the record it waits for leaves "in progress" (completed or released),
 *     on any instance: PostgreSQL notifies channel idemd_records (a trigger,
 *     migrations/0006) and one thread here LISTENs;
 *   - the holder's lease ends (it may have died: a takeover is due);
 *   - its deadline passes.
 * The owner's wake callback then runs (on this module's thread) and either
 * claims again or answers. While the LISTEN connection is down, waiters are
 * woken every 250 ms to look again, so none waits past its deadline.
 *
 * Ownership: arguments are borrowed for the call, but for a struct waiter:
 * owned by the caller, it is borrowed by this module from waiters_add() to
 * its wake call, which only links it; the wake callback may free it.
 */
#ifndef IDEMD_WAITERS_H
#define IDEMD_WAITERS_H

#include <stdint.h>

#include "common.h"

struct config;

struct waiter {
	uint32_t w_tenant;
	uint8_t w_id[16];      /* the record */
	int64_t w_deadline_ms; /* unix ms: past it, EXPIRED is 1 */
	int64_t w_retry_ms;    /* unix ms: look again then (the lease's end) */
	/* called once per waiters_add(), on the waiters' thread */
	void (*w_wake)(struct waiter *w, int expired);
	struct waiter *w_next; /* the module's */
	int w_due;	       /* the module's */
};

/* Opens the LISTEN connection and starts the thread. -1 after logging. */
int waiters_start(const struct config *cfg) IDEMD_WUR;

/* Links W until it is woken: 0, or -1 when max_waiters are waiting or the
 * module is stopping (the caller answers 409 at once). SINCE_MS (unix ms)
 * is when the claim that saw "in progress" started: a notification of the
 * record received since then wakes W at once. */
int waiters_add(struct waiter *w, int64_t since_ms) IDEMD_WUR;

/* Wakes every waiter as expired (each answers 409) and refuses new ones:
 * before the HTTP daemon stops (no connection may stay suspended). */
void waiters_drain(void);

/* waiters_drain(), then stops the thread and closes the connection. */
void waiters_stop(void);

/* How many are waiting now (for /metrics and tests). */
int waiters_count(void);

#endif
