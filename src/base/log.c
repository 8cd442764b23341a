/* Logging: one JSON object per line on stderr. Messages never carry secrets:
 * callers pass ids and names, never tokens or keys. Access lines are
 * gathered per thread and written in batches of whole lines (see
 * log_buf below); every other line first writes out what is gathered. */
#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum log_level log_min_level = LOG_LEVEL_INFO;

static const char *const log_level_names[] = { "debug", "info", "warn", "error" };

int log_level_parse(const char *name, enum log_level *out)
{
	for (size_t i = 0; i < sizeof(log_level_names) / sizeof(log_level_names[0]); i++) {
		if (strcmp(name, log_level_names[i]) == 0) {
			*out = (enum log_level)i;
			return 0;
		}
	}
	return -1;
}

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

/*
 * Access line buffers: one per thread, under its own lock (taken by the
 * flusher thread too, so almost never contended). A buffer is written out
 * with one write(2) of whole lines when the next line would not fit, when
 * its oldest line is LOG_BUF_MAX_AGE_MS old (by the writing thread or the
 * flusher, which looks every LOG_BUF_TICK_MS), before any other log line,
 * and at exit. A write holds at most PIPE_BUF bytes, so lines stay whole
 * even when stderr is a pipe shared with other writers.
 */
#define LOG_BUF_BYTES 4096 /* PIPE_BUF on Linux */
#define LOG_BUF_MAX_AGE_MS 40
#define LOG_BUF_TICK_MS 20

struct log_buf {
	pthread_mutex_t lb_lock;
	size_t lb_len;
	int64_t lb_since_ms; /* monotonic time of the oldest line held */
	atomic_int lb_owned; /* a live thread writes into it */
	struct log_buf *lb_next;
	char lb_data[LOG_BUF_BYTES];
};

static _Atomic(struct log_buf *) log_bufs; /* never shrinks: reused, not freed */
static _Thread_local struct log_buf *log_mine;
static pthread_once_t log_buf_once = PTHREAD_ONCE_INIT;
static pthread_key_t log_buf_key;
static atomic_int log_buf_ready; /* flusher running: buffering allowed */

static int64_t log_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Writes LEN bytes of DATA to stderr, across short writes and EINTR. */
static void log_out(const char *data, size_t len)
{
	while (len > 0) {
		ssize_t w = write(STDERR_FILENO, data, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return; /* nowhere to report a failed log write */
		data += w;
		len -= (size_t)w;
	}
}

/* Writes out B's lines; B's lock held. */
static void log_buf_drain(struct log_buf *b)
{
	if (b->lb_len > 0)
		log_out(b->lb_data, b->lb_len);
	b->lb_len = 0;
}

/* Writes out every buffer's lines (all when ALL, else the old enough). */
static void log_buf_flush(int all)
{
	int64_t now = all ? 0 : log_mono_ms();

	for (struct log_buf *b = atomic_load(&log_bufs); b != NULL; b = b->lb_next) {
		pthread_mutex_lock(&b->lb_lock);
		if (b->lb_len > 0 && (all || now - b->lb_since_ms >= LOG_BUF_MAX_AGE_MS))
			log_buf_drain(b);
		pthread_mutex_unlock(&b->lb_lock);
	}
}

static void *log_flusher(void *arg)
{
	struct timespec tick = { 0, LOG_BUF_TICK_MS * 1000000L };

	(void)arg;
	for (;;) {
		nanosleep(&tick, NULL);
		log_buf_flush(0);
	}
	return NULL;
}

static void log_buf_at_exit(void)
{
	log_buf_flush(1);
}

/* Thread exit: the lines go out and the buffer is free for another thread. */
static void log_buf_release(void *arg)
{
	struct log_buf *b = arg;

	pthread_mutex_lock(&b->lb_lock);
	log_buf_drain(b);
	pthread_mutex_unlock(&b->lb_lock);
	atomic_store(&b->lb_owned, 0);
}

static void log_buf_start(void)
{
	pthread_t t;
	pthread_attr_t attr;
	sigset_t all, old;

	if (pthread_key_create(&log_buf_key, log_buf_release) != 0)
		return;
	if (pthread_attr_init(&attr) != 0)
		return;
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	/* the flusher takes no signals: they stay with the thread that waits */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if (pthread_create(&t, &attr, log_flusher, NULL) == 0 && atexit(log_buf_at_exit) == 0)
		atomic_store(&log_buf_ready, 1);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
}

/* This thread's buffer, or NULL (then lines are written at once). */
static struct log_buf *log_buf_mine(void)
{
	if (log_mine != NULL)
		return log_mine;
	pthread_once(&log_buf_once, log_buf_start);
	if (!atomic_load(&log_buf_ready))
		return NULL;
	struct log_buf *b;
	for (b = atomic_load(&log_bufs); b != NULL; b = b->lb_next) {
		int free_ = 0;
		if (atomic_compare_exchange_strong(&b->lb_owned, &free_, 1))
			break;
	}
	if (b == NULL) {
		b = calloc(1, sizeof(*b));
		if (b == NULL || pthread_mutex_init(&b->lb_lock, NULL) != 0) {
			free(b);
			return NULL;
		}
		atomic_store(&b->lb_owned, 1);
		b->lb_next = atomic_load(&log_bufs);
		while (!atomic_compare_exchange_weak(&log_bufs, &b->lb_next, b))
			;
	}
	if (pthread_setspecific(log_buf_key, b) != 0) {
		atomic_store(&b->lb_owned, 0);
		return NULL;
	}
	log_mine = b;
	return b;
}

/* Adds one whole line (at most LOG_BUF_BYTES) to this thread's buffer. */
static void log_buf_add(const char *line, size_t n)
{
	struct log_buf *b = log_buf_mine();

	if (b == NULL) {
		log_out(line, n);
		return;
	}
	int64_t now = log_mono_ms();
	pthread_mutex_lock(&b->lb_lock);
	if (b->lb_len + n > LOG_BUF_BYTES)
		log_buf_drain(b);
	if (b->lb_len == 0)
		b->lb_since_ms = now;
	memcpy(b->lb_data + b->lb_len, line, n);
	b->lb_len += n;
	if (now - b->lb_since_ms >= LOG_BUF_MAX_AGE_MS)
		log_buf_drain(b);
	pthread_mutex_unlock(&b->lb_lock);
}

void log_flush(void)
{
	log_buf_flush(1);
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
		/* one fputs per line keeps lines whole across threads; access
		 * lines gathered so far go first */
		size_t n = strlen(text);
		text[n] = '\0';
		log_buf_flush(1);
		fprintf(stderr, "%s\n", text);
		free(text);
	}
	json_decref(line);
}

static void log_vwrite(enum log_level level, const char *fmt, va_list ap)
{
	char msg[1024];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	json_t *fields = json_pack("{s:s}", "msg", msg);
	if (fields == NULL)
		return;
	log_json(level, fields);
	json_decref(fields);
}

void log_write(enum log_level level, const char *fmt, ...)
{
	va_list ap;

	if (level < log_min_level)
		return;
	va_start(ap, fmt);
	log_vwrite(level, fmt, ap);
	va_end(ap);
}

void log_always(enum log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vwrite(level, fmt, ap);
	va_end(ap);
}

/* Appends S as a JSON string body (quotes excluded) to BUF at *N, leaving
 * room for 7 more bytes. */
static void log_escape(char *buf, size_t len, size_t *n, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	size_t k = *n; /* a local: stores through BUF cannot change it */

	for (; *s != '\0' && k + 7 < len; s++) {
		unsigned char c = (unsigned char)*s;
		if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
			buf[k++] = (char)c;
		} else if (c == '"' || c == '\\') {
			buf[k++] = '\\';
			buf[k++] = (char)c;
		} else {
			memcpy(buf + k, "\\u00", 4);
			buf[k + 4] = hex[c >> 4];
			buf[k + 5] = hex[c & 15];
			k += 6;
		}
	}
	*n = k;
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

void log_access(const char *request_id, const char *trace_id, const char *method, const char *route,
		unsigned status, double duration_ms, const char *record, int terminated)
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
	if (trace_id != NULL && trace_id[0] != '\0') {
		LOG_LIT(line, sizeof(line), &n, "\",\"trace_id\":\"");
		log_escape(line, sizeof(line), &n, trace_id);
	}
	LOG_LIT(line, sizeof(line), &n, "\",\"method\":\"");
	log_escape(line, sizeof(line) - 200, &n, method);
	LOG_LIT(line, sizeof(line), &n, "\",\"route\":\"");
	log_escape(line, sizeof(line) - 100, &n, route);
	LOG_LIT(line, sizeof(line), &n, "\",\"status\":");
	log_uint(line, sizeof(line), &n, status);
	/* milliseconds with three decimals (rounded to the microsecond) */
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
	if (record != NULL && record[0] != '\0') {
		LOG_LIT(line, sizeof(line), &n, ",\"record\":\"");
		log_escape(line, sizeof(line) - 40, &n, record);
		LOG_LIT(line, sizeof(line), &n, "\"");
	}
	if (terminated > 0) {
		LOG_LIT(line, sizeof(line), &n, ",\"terminated\":");
		log_uint(line, sizeof(line), &n, (unsigned)terminated);
	}
	if (n > sizeof(line) - 2)
		n = sizeof(line) - 2; /* the line still ends */
	LOG_LIT(line, sizeof(line), &n, "}\n");
	log_buf_add(line, n);
}
