/* Health, readiness and metrics endpoints (no authentication). */
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "handlers.h"
#include "keys.h"
#include "metrics.h"
#include "migrate.h"

void h_healthz(struct request *req)
{
	http_reply_json(req, 200, json_pack("{s:s}", "status", "ok"));
}

void h_readyz(struct request *req)
{
	const char *reason = NULL;

	if (!db_ping())
		reason = "database unreachable";
	else if (migrate_schema_current() != 1)
		reason = "schema not current";
	else if (!keys_ready())
		reason = "no signing key loaded";
	if (reason != NULL) {
		http_reply_json(req, 503, json_pack("{s:s,s:s}", "status", "not_ready",
						    "reason", reason));
		http_set_header(req, "Retry-After", "1");
		return;
	}
	http_reply_json(req, 200, json_pack("{s:s}", "status", "ready"));
}

void h_metrics(struct request *req)
{
	char *text = metrics_render();

	if (text == NULL) {
		http_reply_empty(req, 500);
		return;
	}
	http_reply_bytes(req, 200, "text/plain; version=0.0.4", text, strlen(text));
	free(text);
}
