/* Unit tests for the log: access lines from many threads arrive whole and
 * in order per thread, within the age bound, and all of them by log_flush;
 * levels (log_level) write what is at or above them and format nothing
 * below. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>

#include <cmocka.h>
#include <jansson.h>

#include "log.h"

#define THREADS 6
#define LINES 3000

static char log_path[] = "/tmp/idemd-test-log.XXXXXX";
static int saved_stderr = -1;

static int setup(void **state)
{
	(void)state;
	int fd = mkstemp(log_path);
	if (fd < 0)
		return -1;
	saved_stderr = dup(STDERR_FILENO);
	dup2(fd, STDERR_FILENO);
	close(fd);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	log_flush();
	dup2(saved_stderr, STDERR_FILENO);
	close(saved_stderr);
	unlink(log_path);
	return 0;
}

static char *read_log(size_t *len)
{
	FILE *f = fopen(log_path, "rb");
	char *buf = malloc(16 * 1024 * 1024);

	assert_non_null(f);
	assert_non_null(buf);
	*len = fread(buf, 1, 16 * 1024 * 1024 - 1, f);
	buf[*len] = '\0';
	fclose(f);
	return buf;
}

static void *writer(void *arg)
{
	int t = (int)(intptr_t)arg;
	char id[32];

	for (int i = 0; i < LINES; i++) {
		snprintf(id, sizeof(id), "t%d-%d", t, i);
		log_access(id, NULL, "POST", "/v1/tokens/{}/claim", 200, 0.0125 * i, NULL,
			   i % 7 == 0 ? 3 : 0);
	}
	return NULL;
}

/* Every line parses, carries its fields, and each thread's lines come in
 * the order written. */
static void test_threads_whole_lines(void **state)
{
	pthread_t th[THREADS];
	int next[THREADS] = { 0 };
	size_t len;

	(void)state;
	for (int t = 0; t < THREADS; t++)
		assert_int_equal(pthread_create(&th[t], NULL, writer, (void *)(intptr_t)t), 0);
	for (int t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	log_flush();
	char *text = read_log(&len), *save = NULL;
	int count = 0;
	for (char *ln = strtok_r(text, "\n", &save); ln != NULL; ln = strtok_r(NULL, "\n", &save)) {
		json_error_t err;
		json_t *v = json_loads(ln, 0, &err);
		assert_non_null(v);
		const char *rid = json_string_value(json_object_get(v, "request_id"));
		int t, i;
		assert_int_equal(sscanf(rid, "t%d-%d", &t, &i), 2);
		assert_int_equal(i, next[t]);
		next[t]++;
		assert_int_equal(json_integer_value(json_object_get(v, "status")), 200);
		/* milliseconds with three decimals */
		json_t *d = json_object_get(v, "duration_ms");
		assert_true(json_is_real(d));
		assert_true(fabs(json_real_value(d) - 0.0125 * i) <= 0.0005 + 1e-9);
		const char *num = strstr(ln, "\"duration_ms\":") + strlen("\"duration_ms\":");
		const char *dot = strchr(num, '.');
		assert_non_null(dot);
		assert_int_equal(strspn(num, "0123456789"), (size_t)(dot - num));
		assert_int_equal(strspn(dot + 1, "0123456789"), 3);
		assert_true(dot[4] == ',' || dot[4] == '}');
		assert_int_equal(json_object_get(v, "terminated") != NULL, i % 7 == 0);
		json_decref(v);
		count++;
	}
	assert_int_equal(count, THREADS * LINES);
	free(text);
}

/* A lone line from a thread that then does nothing is written by the
 * flusher well within 100 ms. */
static void test_idle_line_written_soon(void **state)
{
	size_t before, after;
	struct timespec wait = { 0, 5 * 1000000L };

	(void)state;
	free(read_log(&before));
	log_access("lone", "4bf92f3577b34da6a3ce929d0e0e4736", "GET", "/healthz", 200, 0.5, NULL,
		   0);
	int waited = 0;
	for (; waited < 100; waited += 5) {
		char *text = read_log(&after);
		int found = strstr(text, "\"request_id\":\"lone\",\"trace_id\":"
					 "\"4bf92f3577b34da6a3ce929d0e0e4736\"") != NULL;
		free(text);
		if (found)
			break;
		nanosleep(&wait, NULL);
	}
	assert_true(waited < 100);
}

static int formatted;

/* An argument whose evaluation is counted: below the level, the line's
 * arguments are not even evaluated. */
static const char *counted(const char *s)
{
	formatted++;
	return s;
}

/* At each level, lines at or above it are written and the others are
 * neither formatted nor written; access lines are info. */
static void test_levels(void **state)
{
	static const char *const names[] = { "debug", "info", "warn", "error" };
	enum log_level level;
	char want[64], id[32];
	size_t len;

	(void)state;
	assert_int_equal(log_level_parse("verbose", &level), -1);
	assert_int_equal(log_level_parse("", &level), -1);
	assert_int_equal(log_level_parse("INFO", &level), -1);
	for (int min = 0; min < 4; min++) {
		assert_int_equal(log_level_parse(names[min], &level), 0);
		assert_int_equal((int)level, min);
		log_min_level = level;
		formatted = 0;
		log_debug("lv%d-%s", min, counted("debug"));
		log_info("lv%d-%s", min, counted("info"));
		log_warn("lv%d-%s", min, counted("warn"));
		log_error("lv%d-%s", min, counted("error"));
		assert_int_equal(formatted, 4 - min);
		snprintf(id, sizeof(id), "access-%d", min);
		log_access(id, NULL, "GET", "/healthz", 200, 0.5, NULL, 0);
	}
	log_min_level = LOG_LEVEL_INFO;
	log_flush();
	char *text = read_log(&len);
	for (int min = 0; min < 4; min++) {
		for (int at = 0; at < 4; at++) {
			snprintf(want, sizeof(want), "\"level\":\"%s\",\"msg\":\"lv%d-%s\"",
				 names[at], min, names[at]);
			assert_int_equal(strstr(text, want) != NULL, at >= min);
		}
		snprintf(want, sizeof(want), "\"request_id\":\"access-%d\"", min);
		assert_int_equal(strstr(text, want) != NULL, min <= LOG_LEVEL_INFO);
	}
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_threads_whole_lines),
		cmocka_unit_test(test_idle_line_written_soon),
		cmocka_unit_test(test_levels),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
