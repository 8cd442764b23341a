/* Metrics: process-wide counters, gauges and histograms exposed in the
 * Prometheus text format. Every update is a few relaxed atomic additions
 * (no lock); labels come from bounded sets fixed at start: routes (the
 * API's and the gateway's, at most METRICS_ROUTES), tenant/operation pairs
 * named in the config (at most METRICS_PAIRS), everything else "other".
 * Ownership: arguments are borrowed for the call unless a comment below says
 * until what; metrics_render() returns an owned string (free()). */
#ifndef IDEMD_METRICS_H
#define IDEMD_METRICS_H

#include <stddef.h>
#include <stdint.h>

struct config;

enum metrics_counter {
	METRIC_TOKENS_ISSUED,
	METRIC_CLAIMS,
	METRIC_REPLAYS,
	METRIC_CONFLICTS,
	METRIC_COMPLETIONS,
	METRIC_RELEASES,
	METRIC_REVOCATIONS,
	METRIC_SWEPT,
	METRIC_DB_UNAVAILABLE,
	METRIC_DB_BATCHES,
	METRIC_DB_BATCH_JOBS,
	METRIC_REQUEST_TIMEOUTS,
	METRIC_CONNECTIONS_REFUSED,
	METRIC_REPLAY_CACHE_HITS,
	METRIC_REPLAY_CACHE_MISSES,
	METRIC_COUNT
};

/* The outcome label of idemd_duplicates_total: a duplicate idemd stopped. */
enum metrics_dup {
	METRICS_DUP_REPLAYED,		  /* answered with the stored response */
	METRICS_DUP_IN_PROGRESS,	  /* 409: the first submit still runs */
	METRICS_DUP_FINGERPRINT_MISMATCH, /* 422: same key, another request */
	METRICS_DUP_WAITED,		  /* waited (Prefer: wait), then replayed */
	METRICS_DUP_COUNT
};

#define METRICS_ROUTES 192
#define METRICS_PAIRS 128

/* Names the labelled tenant/operation pairs: CFG's metrics_operations and
 * its gateway routes' pairs (strings copied). Call once before serving;
 * without it every pair is "other". */
void metrics_init(const struct config *cfg);
/* Frees what metrics_init copied. */
void metrics_shutdown(void);

/* The named pairs' ids are looked up by the janitor: how many pairs to
 * look up now (0: every one is known; all of them with ALL, and every few
 * minutes, for a tenant made again), each one's names (borrowed until
 * metrics_shutdown), and its ids once found. */
size_t metrics_pairs_to_resolve(int all);
void metrics_pair_name(size_t i, const char **tenant, const char **operation);
void metrics_pair_resolved(size_t i, uint32_t tenant_id, uint32_t operation_id);

void metrics_add(enum metrics_counter c, long n);

/* A request ended on the route METHOD PATTERN (PATTERN NULL: none matched;
 * both the route table's own strings, which stand for the route), its
 * STATUS (0: no reply), MS since its first byte. */
void metrics_request(const char *method, const char *pattern, unsigned status, double ms);

/* A duplicate of record (TENANT_ID, OPERATION_ID) stopped with OUTCOME. */
void metrics_duplicate(uint32_t tenant_id, uint32_t operation_id, enum metrics_dup outcome);

/* Records in progress past their lease, per tenant and operation. */
struct metrics_stuck {
	uint32_t ms_tenant_id, ms_operation_id;
	int64_t ms_count;
};

/* The periodic stuck-records count: ROWS (N of them, borrowed). */
void metrics_set_stuck(const struct metrics_stuck *rows, size_t n);

/* Whether the janitor's periodic check reached PostgreSQL (idemd_db_up). */
void metrics_set_db_up(int up);

/* The database pool: a wait for a connection of SECONDS. */
void metrics_db_wait(double seconds);

/* One batched statement of N jobs. */
void metrics_batch(size_t n);

/* How a gateway forward ended: answered (its label "1xx".."5xx" from its
 * status), or not. */
enum metrics_upstream_outcome {
	METRICS_UPSTREAM_ANSWERED,
	METRICS_UPSTREAM_UNREACHABLE = 5,
	METRICS_UPSTREAM_TIMEOUT,
	METRICS_UPSTREAM_FAILED,
	METRICS_UPSTREAM_TOO_LARGE,
	METRICS_UPSTREAM_INVALID,
	METRICS_UPSTREAM_BROKEN
};

/* A gateway forward on the route METHOD PATTERN ended with OUTCOME (and
 * STATUS when answered) after SECONDS. */
void metrics_upstream(const char *method, const char *pattern, enum metrics_upstream_outcome o,
		      long status, double seconds);

/* The running configuration: its generation (1 at start, one more per
 * reload put into force), the last reload's result and time, and how many
 * replaced configurations wait to be freed (serve.c). */
struct metrics_config {
	long mc_generation;
	int mc_last_ok;	    /* 1 put into force, 0 refused, -1 none yet */
	int64_t mc_last_at; /* unix seconds of the last reload (0: none) */
	long mc_reloads;    /* SIGHUPs that read the file */
	long mc_failed;	    /* of them refused */
	long mc_retired;    /* replaced configurations not freed yet */
};
void metrics_config_reloaded(long generation, int ok, int64_t at);
void metrics_config_retired(long n);
void metrics_config_get(struct metrics_config *out);

/* What the renderer samples from other modules (GET /metrics fills it). */
struct metrics_gauges {
	size_t mg_cache_bytes, mg_cache_entries; /* replaycache_usage */
	int mg_waiters;				 /* waiters_count */
	size_t mg_replay_pending;		 /* replaycount_usage */
	long mg_replay_dropped;
	int mg_pool_size, mg_pool_in_use, mg_pool_waiting; /* db_pool_usage */
};

/* Renders every metric and G (borrowed) into a string (owned: free() it),
 * or NULL. */
char *metrics_render(const struct metrics_gauges *g);

#endif
