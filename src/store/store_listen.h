/*
 * The LISTEN session the waiters hear records settle on: PostgreSQL's
 * notifications on the channel idemd_records (migrations/0006, 0009: a
 * record that completes, is released or revoked while a duplicate waits
 * for it), whose payload is "tenant:hex id". All of its SQL is here.
 *
 * Ownership: a struct store_listener is its opener's until
 * store_listen_close(); one thread uses it at a time.
 */
#ifndef IDEMD_STORE_LISTEN_H
#define IDEMD_STORE_LISTEN_H

#include "common.h"

struct store_listener;

enum store_listen_open {
	STORE_LISTEN_OK,
	STORE_LISTEN_FAILED,	/* no connection, or LISTEN refused */
	STORE_LISTEN_NOT_HEARD, /* accepted, but its own probe never came back
				 * within the wait (a transaction-pooling proxy) */
};

/* Connects to CONNINFO, LISTENs, and waits up to PROBE_MS for a probe it
 * sends itself. *OUT is set with STORE_LISTEN_OK only. */
enum store_listen_open store_listen_open(const char *conninfo, int probe_ms,
					 struct store_listener **out);

/* Waits up to TICK_MS for notifications and calls HEARD(ARG, PAYLOAD) for
 * each (PAYLOAD borrowed for the call). 0, or -1 when the connection was
 * lost (close it and open another). */
int store_listen_wait(struct store_listener *l, int tick_ms,
		      void (*heard)(void *arg, const char *payload), void *arg) IDEMD_WUR;

/* Closes L (NULL: nothing). */
void store_listen_close(struct store_listener *l);

#endif
