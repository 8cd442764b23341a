/* Metrics: lock-free counters and histograms, rendered on demand for GET
 * /metrics. Histogram buckets are kept per bucket (not cumulative) and
 * summed when rendered, so an observation is one bucket, the sum and the
 * count: three relaxed atomic additions. */
#include "metrics.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"

#define METRICS_MAX_BUCKETS 16
#define METRICS_RESOLVE_ALL_SECONDS 300

struct metrics_hist {
	atomic_long mh_bucket[METRICS_MAX_BUCKETS]; /* observations in (le[i-1], le[i]] */
	atomic_long mh_count;
	atomic_long mh_sum; /* in units of the scale below */
};

/* A histogram's bucket bounds (the last one +Inf, implicit) and the unit of
 * its sum (1e6: microseconds of a value in seconds). */
struct metrics_layout {
	const double *ml_le;
	int ml_n;
	double ml_scale;
};

static const double metrics_le_request[] = { 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
					     0.1,    0.25,  0.5,    1,	   2.5,	 5,	10 };
static const double metrics_le_dbwait[] = { 0.0001, 0.0005, 0.001, 0.005, 0.01,
					    0.05,   0.1,    0.25,  0.5,	  1 };
static const double metrics_le_batch[] = { 1, 2, 4, 8, 16, 32, 64, 128, 256, 512 };
static const double metrics_le_upstream[] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
					      0.5,   1,	   2.5,	  5,	10,  30 };
#define LAYOUT(le, scale) \
	{ \
		le, (int)(sizeof(le) / sizeof(le[0])), scale \
	}
static const struct metrics_layout ml_request = LAYOUT(metrics_le_request, 1e6);
static const struct metrics_layout ml_dbwait = LAYOUT(metrics_le_dbwait, 1e6);
static const struct metrics_layout ml_batch = LAYOUT(metrics_le_batch, 1);
static const struct metrics_layout ml_upstream = LAYOUT(metrics_le_upstream, 1e6);

/* Route slots: METRICS_ROUTES routes as first seen, then "unmatched" (no
 * route) and "other" (the table was full). */
#define SLOT_UNMATCHED METRICS_ROUTES
#define SLOT_OTHER (METRICS_ROUTES + 1)
#define N_SLOTS (METRICS_ROUTES + 2)
#define N_CLASSES 6 /* no reply, 1xx .. 5xx */
#define N_UPSTREAM_OUTCOMES 11

/* Pair slots: the named pairs, then "other". */
struct metrics_pair {
	char *mp_tenant, *mp_operation; /* owned; set by metrics_init */
	atomic_ullong mp_key;		/* tenant id << 32 | operation id; 0 unresolved */
};

static atomic_long metrics_counters[METRIC_COUNT];
static atomic_long metrics_by_class[N_CLASSES];
/* the routes seen, by their method and pattern text (copies: a reload
 * frees the configuration a gateway route's strings live in); a slot's
 * pattern is published after its method */
static struct {
	char *mr_method;
	_Atomic(char *) mr_pattern;
} metrics_routes[METRICS_ROUTES];
static pthread_mutex_t metrics_routes_lock = PTHREAD_MUTEX_INITIALIZER;
static void metrics_pairs_free(void);
static struct metrics_hist metrics_request_hist[N_SLOTS][N_CLASSES];
static struct metrics_hist metrics_upstream_hist[N_SLOTS];
static atomic_long metrics_upstream_calls[N_SLOTS][N_UPSTREAM_OUTCOMES];
static struct metrics_hist metrics_dbwait_hist;
static struct metrics_hist metrics_batch_hist;
static struct metrics_pair metrics_pairs[METRICS_PAIRS];
static size_t metrics_n_pairs;
static atomic_long metrics_dups[METRICS_PAIRS + 1][METRICS_DUP_COUNT];
static atomic_long metrics_stuck[METRICS_PAIRS + 1];
static atomic_int metrics_db_ok = 1;
static time_t metrics_resolved_all;

static const char *const metrics_dup_names[METRICS_DUP_COUNT] = {
	"replayed",
	"in_progress",
	"fingerprint_mismatch",
	"waited",
};
static const char *const metrics_upstream_outcomes[N_UPSTREAM_OUTCOMES] = {
	"1xx",	   "2xx",    "3xx",	  "4xx",     "5xx",    "unreachable",
	"timeout", "failed", "too_large", "invalid", "broken",
};
static const char *const metrics_class_names[N_CLASSES] = {
	"none", "1xx", "2xx", "3xx", "4xx", "5xx",
};

static const struct {
	const char *name, *help;
} metrics_counter_info[METRIC_COUNT] = {
	{ "idemd_tokens_issued_total", "Tokens issued." },
	{ "idemd_claims_total", "Claims that started a first submit (or took one over)." },
	{ "idemd_replays_total", "Duplicates answered with a stored response." },
	{ "idemd_conflicts_total", "Duplicates answered 409: their first submit in progress." },
	{ "idemd_completions_total", "Records completed." },
	{ "idemd_releases_total", "Claims released." },
	{ "idemd_revocations_total", "Tokens revoked." },
	{ "idemd_records_swept_total", "Expired records deleted by the sweeper." },
	{ "idemd_db_unavailable_total",
	  "Requests answered 503 unavailable because PostgreSQL did not answer (or, rarely, memory ran out)." },
	{ "idemd_db_batches_total", "Batched claim and complete statements run." },
	{ "idemd_db_batch_jobs_total", "Jobs run in batched statements." },
	{ "idemd_request_timeouts_total", "Connections closed by request_timeout_seconds." },
	{ "idemd_connections_refused_total",
	  "Connections shut down at once: their client held max_connections_per_ip." },
	{ "idemd_replay_cache_hits_total",
	  "Replay cache lookups that answered (or refused) a duplicate." },
	{ "idemd_replay_cache_misses_total", "Replay cache lookups that had to ask PostgreSQL." },
};

/* ---------------------------------------------------------------- labels */

static void metrics_add_pair(const char *tenant, size_t tlen, const char *operation)
{
	for (size_t i = 0; i < metrics_n_pairs; i++)
		if (strlen(metrics_pairs[i].mp_tenant) == tlen &&
		    strncmp(metrics_pairs[i].mp_tenant, tenant, tlen) == 0 &&
		    strcmp(metrics_pairs[i].mp_operation, operation) == 0)
			return;
	if (metrics_n_pairs == METRICS_PAIRS)
		return;
	struct metrics_pair *p = &metrics_pairs[metrics_n_pairs];
	p->mp_tenant = strndup(tenant, tlen);
	p->mp_operation = strdup(operation);
	if (p->mp_tenant == NULL || p->mp_operation == NULL) {
		free(p->mp_tenant);
		free(p->mp_operation);
		p->mp_tenant = p->mp_operation = NULL;
		return;
	}
	atomic_store(&p->mp_key, 0);
	metrics_n_pairs++;
}

void metrics_init(const struct config *cfg)
{
	metrics_pairs_free();
	for (size_t i = 0; i < cfg->n_metrics_operations; i++) {
		const char *s = cfg->metrics_operations[i], *slash = strchr(s, '/');
		if (slash != NULL)
			metrics_add_pair(s, (size_t)(slash - s), slash + 1);
	}
	for (size_t i = 0; i < cfg->n_routes; i++)
		metrics_add_pair(cfg->routes[i].tenant, strlen(cfg->routes[i].tenant),
				 cfg->routes[i].operation);
	metrics_resolved_all = 0;
}

void metrics_shutdown(void)
{
	metrics_pairs_free();
	for (size_t i = 0; i < METRICS_ROUTES; i++) {
		free(atomic_exchange(&metrics_routes[i].mr_pattern, NULL));
		free(metrics_routes[i].mr_method);
		metrics_routes[i].mr_method = NULL;
	}
}

static void metrics_pairs_free(void)
{
	for (size_t i = 0; i < metrics_n_pairs; i++) {
		free(metrics_pairs[i].mp_tenant);
		free(metrics_pairs[i].mp_operation);
		metrics_pairs[i].mp_tenant = metrics_pairs[i].mp_operation = NULL;
	}
	metrics_n_pairs = 0;
}

size_t metrics_pairs_to_resolve(int all)
{
	time_t now = time(NULL);

	if (all || now - metrics_resolved_all >= METRICS_RESOLVE_ALL_SECONDS) {
		metrics_resolved_all = now;
		return metrics_n_pairs;
	}
	for (size_t i = 0; i < metrics_n_pairs; i++)
		if (atomic_load_explicit(&metrics_pairs[i].mp_key, memory_order_relaxed) == 0)
			return metrics_n_pairs;
	return 0;
}

void metrics_pair_name(size_t i, const char **tenant, const char **operation)
{
	*tenant = metrics_pairs[i].mp_tenant;
	*operation = metrics_pairs[i].mp_operation;
}

void metrics_pair_resolved(size_t i, uint32_t tenant_id, uint32_t operation_id)
{
	atomic_store(&metrics_pairs[i].mp_key,
		     ((unsigned long long)tenant_id << 32) | operation_id);
}

/* The pair slot of (TENANT_ID, OPERATION_ID): a named pair, else "other". */
static size_t metrics_pair_slot(uint32_t tenant_id, uint32_t operation_id)
{
	unsigned long long key = ((unsigned long long)tenant_id << 32) | operation_id;

	for (size_t i = 0; i < metrics_n_pairs; i++)
		if (atomic_load_explicit(&metrics_pairs[i].mp_key, memory_order_relaxed) == key)
			return i;
	return METRICS_PAIRS;
}

/* The slot of the route METHOD PATTERN (equal text: a route reloaded from
 * a new configuration keeps its slot), taken on first sight: found without
 * a lock, taken under one. */
static size_t metrics_route_slot(const char *method, const char *pattern)
{
	if (pattern == NULL)
		return SLOT_UNMATCHED;
	size_t h = 5381;
	for (const char *c = method; *c != '\0'; c++)
		h = h * 33 + (unsigned char)*c;
	for (const char *c = pattern; *c != '\0'; c++)
		h = h * 33 + (unsigned char)*c;
	h %= METRICS_ROUTES;
	for (size_t probe = 0; probe < METRICS_ROUTES; probe++) {
		size_t i = (h + probe) % METRICS_ROUTES;
		const char *cur =
			atomic_load_explicit(&metrics_routes[i].mr_pattern, memory_order_acquire);
		if (cur != NULL && strcmp(cur, pattern) == 0 &&
		    strcmp(metrics_routes[i].mr_method, method) == 0)
			return i;
		if (cur != NULL)
			continue;
		int mine = 0;
		pthread_mutex_lock(&metrics_routes_lock);
		cur = atomic_load_explicit(&metrics_routes[i].mr_pattern, memory_order_relaxed);
		if (cur == NULL) {
			char *m = strdup(method), *p = strdup(pattern);
			if (m == NULL || p == NULL) {
				free(m);
				free(p);
				pthread_mutex_unlock(&metrics_routes_lock);
				return SLOT_OTHER;
			}
			metrics_routes[i].mr_method = m;
			atomic_store_explicit(&metrics_routes[i].mr_pattern, p,
					      memory_order_release);
			mine = 1;
		}
		pthread_mutex_unlock(&metrics_routes_lock);
		if (mine ||
		    (strcmp(cur, pattern) == 0 && strcmp(metrics_routes[i].mr_method, method) == 0))
			return i;
	}
	return SLOT_OTHER;
}

/* ---------------------------------------------------------------- updates */

static void metrics_observe(struct metrics_hist *h, const struct metrics_layout *l, double v)
{
	int b = 0;

	while (b < l->ml_n && v > l->ml_le[b])
		b++;
	atomic_fetch_add_explicit(&h->mh_bucket[b], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->mh_count, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->mh_sum, (long)(v * l->ml_scale), memory_order_relaxed);
}

void metrics_add(enum metrics_counter c, long n)
{
	atomic_fetch_add_explicit(&metrics_counters[c], n, memory_order_relaxed);
}

void metrics_request(const char *method, const char *pattern, unsigned status, double ms)
{
	unsigned cls = status / 100;

	if (cls >= N_CLASSES)
		cls = 0;
	atomic_fetch_add_explicit(&metrics_by_class[cls], 1, memory_order_relaxed);
	metrics_observe(&metrics_request_hist[metrics_route_slot(method, pattern)][cls],
			&ml_request, ms / 1000.0);
}

void metrics_duplicate(uint32_t tenant_id, uint32_t operation_id, enum metrics_dup outcome)
{
	atomic_fetch_add_explicit(
		&metrics_dups[metrics_pair_slot(tenant_id, operation_id)][outcome], 1,
		memory_order_relaxed);
}

void metrics_set_db_up(int up)
{
	atomic_store(&metrics_db_ok, up);
}

void metrics_set_stuck(const struct metrics_stuck *rows, size_t n)
{
	long sums[METRICS_PAIRS + 1] = { 0 };

	for (size_t i = 0; i < n; i++)
		sums[metrics_pair_slot(rows[i].ms_tenant_id, rows[i].ms_operation_id)] +=
			(long)rows[i].ms_count;
	for (size_t i = 0; i <= METRICS_PAIRS; i++)
		atomic_store_explicit(&metrics_stuck[i], sums[i], memory_order_relaxed);
}

void metrics_db_wait(double seconds)
{
	metrics_observe(&metrics_dbwait_hist, &ml_dbwait, seconds);
}

void metrics_batch(size_t n)
{
	metrics_observe(&metrics_batch_hist, &ml_batch, (double)n);
}

void metrics_upstream(const char *method, const char *pattern, enum metrics_upstream_outcome o,
		      long status, double seconds)
{
	size_t slot = metrics_route_slot(method, pattern);
	int k = (int)o;

	if (o == METRICS_UPSTREAM_ANSWERED)
		k = status >= 100 && status < 600 ? (int)(status / 100) - 1 : 9;
	else if (k < 5 || k >= N_UPSTREAM_OUTCOMES)
		k = 9;
	atomic_fetch_add_explicit(&metrics_upstream_calls[slot][k], 1, memory_order_relaxed);
	metrics_observe(&metrics_upstream_hist[slot], &ml_upstream, seconds);
}

/* ---------------------------------------------------------------- render */

static void metrics_family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The labels of route slot I as method="...",route="..." (no braces).
 * Paths are config-checked or the API's own: no quote or backslash. */
static void metrics_route_labels(size_t i, char *buf, size_t len)
{
	const char *pattern = i < METRICS_ROUTES ? atomic_load(&metrics_routes[i].mr_pattern)
						 : NULL;

	if (pattern != NULL)
		snprintf(buf, len, "method=\"%s\",route=\"%s\"", metrics_routes[i].mr_method,
			 pattern);
	else
		snprintf(buf, len, "method=\"other\",route=\"%s\"",
			 i == SLOT_UNMATCHED ? "unmatched" : "other");
}

static void metrics_pair_labels(size_t i, char *buf, size_t len)
{
	if (i < metrics_n_pairs)
		snprintf(buf, len, "tenant=\"%s\",operation=\"%s\"", metrics_pairs[i].mp_tenant,
			 metrics_pairs[i].mp_operation);
	else
		snprintf(buf, len, "tenant=\"other\",operation=\"other\"");
}

/* One histogram's series under LABELS ("" or a list without braces). */
static void metrics_hist_render(FILE *f, const char *name, const char *labels,
				const struct metrics_hist *h, const struct metrics_layout *l)
{
	const char *sep = labels[0] ? "," : "";
	long cum = 0;

	for (int b = 0; b <= l->ml_n; b++) {
		cum += atomic_load_explicit(&h->mh_bucket[b], memory_order_relaxed);
		if (b < l->ml_n)
			fprintf(f, "%s_bucket{%s%sle=\"%g\"} %ld\n", name, labels, sep, l->ml_le[b],
				cum);
		else
			fprintf(f, "%s_bucket{%s%sle=\"+Inf\"} %ld\n", name, labels, sep, cum);
	}
	/* the count is the +Inf bucket's, so that the two always agree */
	fprintf(f, "%s_sum%s%s%s %.6f\n%s_count%s%s%s %ld\n", name, labels[0] ? "{" : "", labels,
		labels[0] ? "}" : "", (double)atomic_load(&h->mh_sum) / l->ml_scale, name,
		labels[0] ? "{" : "", labels, labels[0] ? "}" : "", cum);
}

static void metrics_render_requests(FILE *f)
{
	char labels[512];

	metrics_family(f, "idemd_http_requests_total", "counter",
		       "HTTP requests answered, by status class.");
	for (int c = 1; c < N_CLASSES; c++)
		fprintf(f, "idemd_http_requests_total{class=\"%s\"} %ld\n", metrics_class_names[c],
			atomic_load(&metrics_by_class[c]));
	metrics_family(f, "idemd_http_request_duration_seconds", "histogram",
		       "Time from a request's first byte to its end, by route and status class "
		       "(class \"none\": ended without a reply).");
	for (size_t s = 0; s < N_SLOTS; s++)
		for (int c = 0; c < N_CLASSES; c++) {
			const struct metrics_hist *h = &metrics_request_hist[s][c];
			if (atomic_load_explicit(&h->mh_count, memory_order_relaxed) == 0)
				continue;
			size_t n;
			metrics_route_labels(s, labels, sizeof(labels));
			n = strlen(labels);
			snprintf(labels + n, sizeof(labels) - n, ",class=\"%s\"",
				 metrics_class_names[c]);
			metrics_hist_render(f, "idemd_http_request_duration_seconds", labels, h,
					    &ml_request);
		}
}

static void metrics_render_upstream(FILE *f)
{
	char labels[512];

	metrics_family(f, "idemd_upstream_requests_total", "counter",
		       "Gateway forwards by route and outcome (status class, or why no answer).");
	for (size_t s = 0; s < N_SLOTS; s++)
		for (int o = 0; o < N_UPSTREAM_OUTCOMES; o++) {
			long v = atomic_load(&metrics_upstream_calls[s][o]);
			if (v == 0)
				continue;
			metrics_route_labels(s, labels, sizeof(labels));
			fprintf(f, "idemd_upstream_requests_total{%s,outcome=\"%s\"} %ld\n", labels,
				metrics_upstream_outcomes[o], v);
		}
	metrics_family(f, "idemd_upstream_duration_seconds", "histogram",
		       "Time a gateway forward took, by route.");
	for (size_t s = 0; s < N_SLOTS; s++) {
		if (atomic_load(&metrics_upstream_hist[s].mh_count) == 0)
			continue;
		metrics_route_labels(s, labels, sizeof(labels));
		metrics_hist_render(f, "idemd_upstream_duration_seconds", labels,
				    &metrics_upstream_hist[s], &ml_upstream);
	}
}

static void metrics_render_records(FILE *f, const struct metrics_gauges *g)
{
	char labels[256];

	metrics_family(f, "idemd_duplicates_total", "counter",
		       "Duplicates idemd stopped, by tenant, operation and outcome (replayed, "
		       "in_progress, fingerprint_mismatch, waited); unnamed operations are "
		       "tenant=\"other\",operation=\"other\".");
	for (size_t p = 0; p <= metrics_n_pairs; p++) {
		size_t slot = p < metrics_n_pairs ? p : METRICS_PAIRS;
		metrics_pair_labels(p, labels, sizeof(labels));
		for (int o = 0; o < METRICS_DUP_COUNT; o++)
			fprintf(f, "idemd_duplicates_total{%s,outcome=\"%s\"} %ld\n", labels,
				metrics_dup_names[o], atomic_load(&metrics_dups[slot][o]));
	}
	metrics_family(f, "idemd_records_stuck", "gauge",
		       "Records in progress past their lease (counted every 15 s).");
	for (size_t p = 0; p <= metrics_n_pairs; p++) {
		metrics_pair_labels(p, labels, sizeof(labels));
		fprintf(f, "idemd_records_stuck{%s} %ld\n", labels,
			atomic_load(&metrics_stuck[p < metrics_n_pairs ? p : METRICS_PAIRS]));
	}
	size_t unresolved = 0;
	for (size_t p = 0; p < metrics_n_pairs; p++)
		unresolved += atomic_load(&metrics_pairs[p].mp_key) == 0;
	metrics_family(f, "idemd_metrics_pairs_unresolved", "gauge",
		       "Named tenant/operation pairs (metrics_operations, routes) whose tenant or "
		       "operation does not exist (yet): their counts go to \"other\".");
	fprintf(f, "idemd_metrics_pairs_unresolved %zu\n", unresolved);
	metrics_family(f, "idemd_waiters", "gauge",
		       "Duplicates waiting for the answer of a record in progress (max_waiters).");
	fprintf(f, "idemd_waiters %d\n", g->mg_waiters);
	size_t pending = g->mg_replay_pending;
	long dropped = g->mg_replay_dropped;
	metrics_family(
		f, "idemd_replay_counts_pending", "gauge",
		"Records whose replay count waits in memory for its next flush (or is being written).");
	fprintf(f, "idemd_replay_counts_pending %zu\n", pending);
	metrics_family(f, "idemd_replay_counts_dropped_total", "counter",
		       "Replays not counted in records.replays (the in-memory table was full).");
	fprintf(f, "idemd_replay_counts_dropped_total %ld\n", dropped);
}

static struct {
	atomic_long generation, reloads, failed, retired;
	atomic_int last_ok;
	_Atomic int64_t last_at;
} metrics_cfg = { .generation = 1, .last_ok = -1 };

void metrics_config_reloaded(long generation, int ok, int64_t at)
{
	atomic_store(&metrics_cfg.generation, generation);
	atomic_fetch_add(&metrics_cfg.reloads, 1);
	if (!ok)
		atomic_fetch_add(&metrics_cfg.failed, 1);
	atomic_store(&metrics_cfg.last_ok, ok);
	atomic_store(&metrics_cfg.last_at, at);
}

void metrics_config_retired(long n)
{
	atomic_store(&metrics_cfg.retired, n);
}

void metrics_config_get(struct metrics_config *out)
{
	out->mc_generation = atomic_load(&metrics_cfg.generation);
	out->mc_last_ok = atomic_load(&metrics_cfg.last_ok);
	out->mc_last_at = atomic_load(&metrics_cfg.last_at);
	out->mc_reloads = atomic_load(&metrics_cfg.reloads);
	out->mc_failed = atomic_load(&metrics_cfg.failed);
	out->mc_retired = atomic_load(&metrics_cfg.retired);
}

static void metrics_render_config(FILE *f)
{
	struct metrics_config c;

	metrics_config_get(&c);
	metrics_family(f, "idemd_config_generation", "gauge",
		       "The running configuration: 1 at start, one more per reload (SIGHUP) put "
		       "into force.");
	fprintf(f, "idemd_config_generation %ld\n", c.mc_generation);
	metrics_family(f, "idemd_config_last_reload_successful", "gauge",
		       "1 when the last reload was put into force (or none happened yet), 0 when "
		       "it was refused and the running configuration stayed.");
	fprintf(f, "idemd_config_last_reload_successful %d\n", c.mc_last_ok != 0);
	metrics_family(f, "idemd_config_last_reload_timestamp_seconds", "gauge",
		       "When the last reload was tried (unix time; 0: none yet).");
	fprintf(f, "idemd_config_last_reload_timestamp_seconds %lld\n", (long long)c.mc_last_at);
	metrics_family(f, "idemd_config_reloads_total", "counter",
		       "Reloads tried (SIGHUP with a config file), refused ones included.");
	fprintf(f, "idemd_config_reloads_total %ld\n", c.mc_reloads);
	metrics_family(f, "idemd_config_reloads_failed_total", "counter",
		       "Reloads refused (the running configuration stayed).");
	fprintf(f, "idemd_config_reloads_failed_total %ld\n", c.mc_failed);
	metrics_family(f, "idemd_config_retired", "gauge",
		       "Replaced configurations not freed yet: a request that began before their "
		       "replacement is still running.");
	fprintf(f, "idemd_config_retired %ld\n", c.mc_retired);
}

static void metrics_render_db(FILE *f, const struct metrics_gauges *g)
{
	int size = g->mg_pool_size, in_use = g->mg_pool_in_use, waiting = g->mg_pool_waiting;

	metrics_family(f, "idemd_db_up", "gauge",
		       "1 when the last periodic query (every 15 s) reached PostgreSQL, else 0.");
	fprintf(f, "idemd_db_up %d\n", atomic_load(&metrics_db_ok));
	metrics_family(f, "idemd_db_pool_connections", "gauge",
		       "Connections of the database pool.");
	fprintf(f, "idemd_db_pool_connections %d\n", size);
	metrics_family(f, "idemd_db_pool_in_use", "gauge", "Pool connections running a statement.");
	fprintf(f, "idemd_db_pool_in_use %d\n", in_use);
	metrics_family(f, "idemd_db_pool_waiting", "gauge",
		       "Threads waiting for a free pool connection.");
	fprintf(f, "idemd_db_pool_waiting %d\n", waiting);
	metrics_family(f, "idemd_db_pool_wait_seconds", "histogram",
		       "Time taken to get a pool connection (or to give up after 1 s).");
	metrics_hist_render(f, "idemd_db_pool_wait_seconds", "", &metrics_dbwait_hist, &ml_dbwait);
	metrics_family(f, "idemd_db_batch_size", "histogram",
		       "Jobs per batched claim or complete statement.");
	metrics_hist_render(f, "idemd_db_batch_size", "", &metrics_batch_hist, &ml_batch);
}

char *metrics_render(const struct metrics_gauges *g)
{
	char *buf = NULL;
	size_t len = 0, bytes = g->mg_cache_bytes, entries = g->mg_cache_entries;
	FILE *f = open_memstream(&buf, &len);

	if (f == NULL)
		return NULL;
	for (int i = 0; i < METRIC_COUNT; i++) {
		metrics_family(f, metrics_counter_info[i].name, "counter",
			       metrics_counter_info[i].help);
		fprintf(f, "%s %ld\n", metrics_counter_info[i].name,
			atomic_load(&metrics_counters[i]));
	}
	metrics_family(f, "idemd_replay_cache_bytes", "gauge", "Bytes held by the replay cache.");
	fprintf(f, "idemd_replay_cache_bytes %zu\n", bytes);
	metrics_family(f, "idemd_replay_cache_entries", "gauge", "Responses in the replay cache.");
	fprintf(f, "idemd_replay_cache_entries %zu\n", entries);
	metrics_render_requests(f);
	metrics_render_records(f, g);
	metrics_render_db(f, g);
	metrics_render_upstream(f);
	metrics_render_config(f);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}
