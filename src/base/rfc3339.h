/* RFC 3339 times (rfc3339.c).
 * Ownership: OUT is the caller's; rfc3339_json() returns an owned value. */
#ifndef IDEMD_RFC3339_H
#define IDEMD_RFC3339_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"

/* RFC 3339 UTC time of unix milliseconds; owned: the caller releases it
 * with json_decref(). */
json_t *rfc3339_json(int64_t unix_ms);

/* Room for rfc3339_text()'s text and its NUL. */
#define RFC3339_MAX 40

/* The text of rfc3339_json(), "2024-01-02T03:04:05.678Z", into OUT;
 * returns its length. Needs no lock (gmtime_r takes the time zone lock). */
size_t rfc3339_text(int64_t unix_ms, char out[RFC3339_MAX]);

#endif
