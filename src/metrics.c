/* Metrics: lock-free counters, rendered on demand for GET /metrics. */
#include "metrics.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static atomic_long metrics_counters[METRIC_COUNT];
static atomic_long metrics_by_class[6]; /* 0 = no reply, 1xx .. 5xx */
static atomic_long metrics_duration_us;
static atomic_long metrics_requests; /* every answered or ended request, any status */

static const char *const metrics_names[METRIC_COUNT] = {
	"idemd_tokens_issued_total", "idemd_claims_total", "idemd_replays_total",
	"idemd_conflicts_total", "idemd_completions_total", "idemd_releases_total",
	"idemd_revocations_total", "idemd_records_swept_total",
	"idemd_db_unavailable_total", "idemd_db_batches_total", "idemd_db_batch_jobs_total",
	"idemd_request_timeouts_total",
};

void metrics_add(enum metrics_counter c, long n)
{
	atomic_fetch_add_explicit(&metrics_counters[c], n, memory_order_relaxed);
}

void metrics_request(unsigned status, double ms)
{
	unsigned cls = status / 100;

	atomic_fetch_add_explicit(&metrics_by_class[cls < 6 ? cls : 0], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&metrics_duration_us, (long)(ms * 1000.0), memory_order_relaxed);
	atomic_fetch_add_explicit(&metrics_requests, 1, memory_order_relaxed);
}

char *metrics_render(void)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (f == NULL)
		return NULL;
	for (int i = 0; i < METRIC_COUNT; i++)
		fprintf(f, "# TYPE %s counter\n%s %ld\n", metrics_names[i], metrics_names[i],
			atomic_load(&metrics_counters[i]));
	fprintf(f, "# TYPE idemd_http_requests_total counter\n");
	for (int c = 1; c < 6; c++)
		fprintf(f, "idemd_http_requests_total{class=\"%dxx\"} %ld\n", c,
			atomic_load(&metrics_by_class[c]));
	fprintf(f, "# TYPE idemd_http_request_duration_seconds_sum counter\n"
		   "idemd_http_request_duration_seconds_sum %.6f\n"
		   "# TYPE idemd_http_request_duration_seconds_count counter\n"
		   "idemd_http_request_duration_seconds_count %ld\n",
		(double)atomic_load(&metrics_duration_us) / 1e6, atomic_load(&metrics_requests));
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}
