/* Logging: JSON lines on stderr, levels checked before formatting.
 * Ownership: arguments are borrowed for the call. */
#ifndef IDEMD_LOG_H
#define IDEMD_LOG_H

#include <jansson.h>

#include "common.h"

enum log_level { LOG_LEVEL_DEBUG, LOG_LEVEL_INFO, LOG_LEVEL_WARN, LOG_LEVEL_ERROR };

/* Lines below this level are neither formatted nor written (default
 * LOG_LEVEL_INFO; config "log_level"). Access lines are info. */
extern enum log_level log_min_level;

/* The level named NAME ("debug", "info", "warn", "error") into *OUT: 0, or
 * -1 when NAME is none of them. */
int log_level_parse(const char *name, enum log_level *out) IDEMD_WUR;

void log_write(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Like log_write, whatever log_min_level says: for the few lines an
 * operator asked for (the answer to a SIGHUP). */
void log_always(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The access log line of one request, built without allocating: time,
 * request id, W3C trace id (TRACE_ID, or NULL), method, route, status,
 * duration, the record it addressed
 * (RECORD: 32 hex, or NULL) and, when the request ended abnormally, how
 * (TERMINATED > 0). Lines are gathered per thread and
 * written whole, in order per thread, within about 60 ms, before any other
 * log line, and at exit (log_flush). */
void log_access(const char *request_id, const char *trace_id, const char *method, const char *route,
		unsigned status, double duration_ms, const char *record, int terminated);

/* Writes out every gathered access line now. */
void log_flush(void);

/* Writes FIELDS (borrowed) as one JSON line with "time" and "level" added. */
void log_json(enum log_level level, json_t *fields);

#define log_debug(...) \
	do { \
		if (log_min_level <= LOG_LEVEL_DEBUG) \
			log_write(LOG_LEVEL_DEBUG, __VA_ARGS__); \
	} while (0)
#define log_info(...) \
	do { \
		if (log_min_level <= LOG_LEVEL_INFO) \
			log_write(LOG_LEVEL_INFO, __VA_ARGS__); \
	} while (0)
#define log_warn(...) \
	do { \
		if (log_min_level <= LOG_LEVEL_WARN) \
			log_write(LOG_LEVEL_WARN, __VA_ARGS__); \
	} while (0)
#define log_error(...) log_write(LOG_LEVEL_ERROR, __VA_ARGS__)

#endif
