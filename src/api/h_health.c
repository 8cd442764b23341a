/* Health, readiness and metrics endpoints (no authentication). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "handlers.h"
#include "keys.h"
#include "metrics.h"
#include "migrate.h"
#include "rfc3339.h"
#include "replaycache.h"
#include "replaycount.h"
#include "waiters.h"

void h_healthz(struct request *req)
{
	http_reply_json(req, 200, json_pack("{s:s}", "status", "ok"));
}

/* The running configuration, for /readyz: {"generation", "last_reload"
 * ("none", "ok" or "refused"), "last_reload_at"?}. New. */
static json_t *h_readyz_config(void)
{
	struct metrics_config c;

	metrics_config_get(&c);
	json_t *o = json_pack("{s:I,s:s}", "generation", (json_int_t)c.mc_generation, "last_reload",
			      c.mc_last_ok < 0 ? "none"
			      : c.mc_last_ok   ? "ok"
					       : "refused");
	if (o != NULL && c.mc_last_at > 0)
		json_object_set_new(o, "last_reload_at",
				    rfc3339_json((int64_t)c.mc_last_at * 1000));
	return o;
}

void h_readyz(struct request *req)
{
	const char *reason = NULL;
	struct migrate_check chk;

	/* a schema ahead of this binary (applied by a newer idemd during a
	 * rolling upgrade) is ready; behind, changed or ahead by a migration
	 * marked breaking is not */
	if (!db_ping() || migrate_check(&chk) < 0)
		reason = "database unreachable";
	else if (chk.state == MIGRATE_BEHIND || chk.state == MIGRATE_CHANGED)
		reason = "schema not current";
	else if (chk.state == MIGRATE_TOO_OLD)
		reason = "schema too new (breaking migration)";
	else if (!keys_ready())
		reason = "no signing key loaded";
	if (reason != NULL) {
		http_reply_json(req, 503,
				json_pack("{s:s,s:s,s:o*}", "status", "not_ready", "reason", reason,
					  "config", h_readyz_config()));
		http_set_header(req, "Retry-After", "1");
		return;
	}
	http_reply_json(req, 200,
			json_pack("{s:s,s:o*}", "status", "ready", "config", h_readyz_config()));
}

void h_metrics(struct request *req)
{
	struct metrics_gauges g = { 0 };
	char *text;

	replaycache_usage(&g.mg_cache_bytes, &g.mg_cache_entries);
	replaycount_usage(&g.mg_replay_pending, &g.mg_replay_dropped);
	g.mg_waiters = waiters_count();
	db_pool_usage(&g.mg_pool_size, &g.mg_pool_in_use, &g.mg_pool_waiting);
	text = metrics_render(&g);

	if (text == NULL) {
		http_reply_empty(req, 500);
		return;
	}
	http_reply_bytes(req, 200, "text/plain; version=0.0.4", text, strlen(text));
	free(text);
}
