/* Logging: one JSON object per line on stderr. Messages never carry secrets:
 * callers pass ids and names, never tokens or keys. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum log_level log_min_level = LOG_LEVEL_INFO;

static const char *const log_level_names[] = { "debug", "info", "warn", "error" };

static void log_now(char *buf, size_t len)
{
	struct timespec ts;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	size_t n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf + n, len - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

void log_json(enum log_level level, json_t *fields)
{
	char when[40];
	json_t *line = json_object();

	if (line == NULL)
		return;
	log_now(when, sizeof(when));
	json_object_set_new(line, "time", json_string(when));
	json_object_set_new(line, "level", json_string(log_level_names[level]));
	json_object_update(line, fields);
	char *text = json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
	if (text != NULL) {
		/* one fputs per line keeps lines whole across threads */
		size_t n = strlen(text);
		text[n] = '\0';
		fprintf(stderr, "%s\n", text);
		free(text);
	}
	json_decref(line);
}

void log_write(enum log_level level, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	if (level < log_min_level)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	json_t *fields = json_pack("{s:s}", "msg", msg);
	if (fields == NULL)
		return;
	log_json(level, fields);
	json_decref(fields);
}

/* Appends S as a JSON string body (quotes excluded) to BUF at *N. */
static void log_escape(char *buf, size_t len, size_t *n, const char *s)
{
	for (; *s != '\0' && *n + 7 < len; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			buf[(*n)++] = '\\';
			buf[(*n)++] = (char)c;
		} else if (c < 0x20 || c >= 0x7f) {
			*n += (size_t)snprintf(buf + *n, len - *n, "\\u%04x", c);
		} else {
			buf[(*n)++] = (char)c;
		}
	}
}

void log_access(const char *request_id, const char *method, const char *route,
		unsigned status, double duration_ms, int terminated)
{
	char line[1024], when[40];
	size_t n;

	if (log_min_level > LOG_LEVEL_INFO)
		return;
	log_now(when, sizeof(when));
	n = (size_t)snprintf(line, sizeof(line),
			     "{\"time\":\"%s\",\"level\":\"info\",\"request_id\":\"", when);
	log_escape(line, sizeof(line), &n, request_id);
	n += (size_t)snprintf(line + n, sizeof(line) - n, "\",\"method\":\"");
	log_escape(line, sizeof(line) - 200, &n, method);
	n += (size_t)snprintf(line + n, sizeof(line) - n, "\",\"route\":\"");
	log_escape(line, sizeof(line) - 100, &n, route);
	n += (size_t)snprintf(line + n, sizeof(line) - n,
			      "\",\"status\":%u,\"duration_ms\":%.3f", status, duration_ms);
	if (terminated > 0)
		n += (size_t)snprintf(line + n, sizeof(line) - n, ",\"terminated\":%d", terminated);
	n += (size_t)snprintf(line + n, sizeof(line) - n, "}\n");
	if (n > sizeof(line))
		n = sizeof(line);
	ssize_t w = write(STDERR_FILENO, line, n);
	(void)w; /* nowhere to report a failed log write */
}
