/* W3C Trace Context (traceparent): the trace a request belongs to, read
 * from the caller's header or started here, and idemd's own span in it,
 * which goes upstream and back to the caller. No allocation.
 * Ownership: arguments are borrowed for the call. */
#ifndef IDEMD_TRACECTX_H
#define IDEMD_TRACECTX_H

#include "common.h"

#define TRACECTX_HEADER_LEN 55 /* "00-" 32 hex "-" 16 hex "-" 2 hex */

struct tracectx {
	char tc_trace_id[33]; /* 32 lowercase hex, never all zero */
	char tc_span_id[17];  /* idemd's span: 16 lowercase hex, never all zero */
	char tc_flags[3];     /* the caller's trace flags, "00" when started here */
};

/* TC for a request whose traceparent header is HEADER (NULL: none): the
 * caller's trace id and flags when HEADER is valid (version 00, or a later
 * version read as 00 as the specification asks), else a new trace; always
 * a new span id. */
void tracectx_begin(struct tracectx *tc, const char *header);

/* Writes "00-<trace>-<span>-<flags>" (TRACECTX_HEADER_LEN + 1 bytes). */
void tracectx_format(const struct tracectx *tc, char out[TRACECTX_HEADER_LEN + 1]);

#endif
