/* Metrics: process-wide counters exposed in Prometheus text format. */
#ifndef IDEMD_METRICS_H
#define IDEMD_METRICS_H

#include <stddef.h>

enum metrics_counter {
	METRIC_TOKENS_ISSUED, METRIC_CLAIMS, METRIC_REPLAYS, METRIC_CONFLICTS,
	METRIC_COMPLETIONS, METRIC_RELEASES, METRIC_REVOCATIONS, METRIC_SWEPT,
	METRIC_DB_UNAVAILABLE, METRIC_DB_BATCHES, METRIC_DB_BATCH_JOBS, METRIC_REQUEST_TIMEOUTS,
	METRIC_COUNT
};

void metrics_add(enum metrics_counter c, long n);
void metrics_request(unsigned status, double ms);

/* Renders all metrics into a new string (free()). */
char *metrics_render(void);

#endif
