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

/* The date and time to the second, formatted once per second per thread:
 * gmtime_r and strftime cost more than the rest of an access line. */
struct log_clock {
	time_t lc_sec;
	char lc_text[24]; /* "YYYY-MM-DDTHH:MM:SS" */
	size_t lc_len;
};

static _Thread_local struct log_clock log_clock = { .lc_sec = -1 };

/* Writes "YYYY-MM-DDTHH:MM:SS.mmmZ" (NUL-terminated) into BUF (LEN >= 32);
 * returns its length. */
static size_t log_now(char *buf, size_t len)
{
	struct timespec ts;
	struct log_clock *c = &log_clock;

	clock_gettime(CLOCK_REALTIME, &ts);
	if (ts.tv_sec != c->lc_sec) {
		struct tm tm;
		gmtime_r(&ts.tv_sec, &tm);
		c->lc_len = strftime(c->lc_text, sizeof(c->lc_text), "%Y-%m-%dT%H:%M:%S", &tm);
		c->lc_sec = ts.tv_sec;
	}
	if (len < c->lc_len + 6)
		return 0;
	unsigned ms = (unsigned)(ts.tv_nsec / 1000000);
	memcpy(buf, c->lc_text, c->lc_len);
	char *p = buf + c->lc_len;
	*p++ = '.';
	*p++ = (char)('0' + ms / 100);
	*p++ = (char)('0' + ms / 10 % 10);
	*p++ = (char)('0' + ms % 10);
	*p++ = 'Z';
	*p = '\0';
	return (size_t)(p - buf);
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

/* Appends S as a JSON string body (quotes excluded) to BUF at *N, leaving
 * room for 7 more bytes. */
static void log_escape(char *buf, size_t len, size_t *n, const char *s)
{
	static const char hex[] = "0123456789abcdef";

	for (; *s != '\0' && *n + 7 < len; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			buf[(*n)++] = '\\';
			buf[(*n)++] = (char)c;
		} else if (c < 0x20 || c >= 0x7f) {
			memcpy(buf + *n, "\\u00", 4);
			buf[*n + 4] = hex[c >> 4];
			buf[*n + 5] = hex[c & 15];
			*n += 6;
		} else {
			buf[(*n)++] = (char)c;
		}
	}
}

/* Appends the literal S to BUF at *N if it fits in LEN. */
static void log_lit(char *buf, size_t len, size_t *n, const char *s, size_t slen)
{
	if (*n + slen <= len) {
		memcpy(buf + *n, s, slen);
		*n += slen;
	}
}

#define LOG_LIT(buf, len, n, s) log_lit(buf, len, n, s, sizeof(s) - 1)

/* Appends the decimal digits of V to BUF at *N if they fit in LEN. */
static void log_uint(char *buf, size_t len, size_t *n, unsigned long long v)
{
	char tmp[24];
	size_t k = sizeof(tmp);

	do {
		tmp[--k] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	log_lit(buf, len, n, tmp + k, sizeof(tmp) - k);
}

void log_access(const char *request_id, const char *method, const char *route,
		unsigned status, double duration_ms, int terminated)
{
	char line[1024];
	size_t n;

	if (log_min_level > LOG_LEVEL_INFO)
		return;
	memcpy(line, "{\"time\":\"", 9);
	n = 9;
	n += log_now(line + n, sizeof(line) - n);
	LOG_LIT(line, sizeof(line), &n, "\",\"level\":\"info\",\"request_id\":\"");
	log_escape(line, sizeof(line), &n, request_id);
	LOG_LIT(line, sizeof(line), &n, "\",\"method\":\"");
	log_escape(line, sizeof(line) - 200, &n, method);
	LOG_LIT(line, sizeof(line), &n, "\",\"route\":\"");
	log_escape(line, sizeof(line) - 100, &n, route);
	LOG_LIT(line, sizeof(line), &n, "\",\"status\":");
	log_uint(line, sizeof(line), &n, status);
	/* milliseconds with three decimals, as %.3f would print them */
	if (!(duration_ms >= 0) || duration_ms > 1e12) {
		n += (size_t)snprintf(line + n, sizeof(line) - n, ",\"duration_ms\":%.3f",
				      duration_ms);
	} else {
		unsigned long long us = (unsigned long long)(duration_ms * 1000.0 + 0.5);
		char frac[4] = { (char)('0' + us / 100 % 10), (char)('0' + us / 10 % 10),
				 (char)('0' + us % 10), '\0' };
		LOG_LIT(line, sizeof(line), &n, ",\"duration_ms\":");
		log_uint(line, sizeof(line), &n, us / 1000);
		log_lit(line, sizeof(line), &n, ".", 1);
		log_lit(line, sizeof(line), &n, frac, 3);
	}
	if (terminated > 0) {
		LOG_LIT(line, sizeof(line), &n, ",\"terminated\":");
		log_uint(line, sizeof(line), &n, (unsigned)terminated);
	}
	if (n > sizeof(line) - 2)
		n = sizeof(line) - 2; /* the line still ends */
	LOG_LIT(line, sizeof(line), &n, "}\n");
	ssize_t w = write(STDERR_FILENO, line, n);
	(void)w; /* nowhere to report a failed log write */
}
