/* The front of the record engine, request checks: a token's verification and scope,
 * a claim body's fingerprint, a stored headers object, and the per-tenant
 * quotas: token issuance and record claims (a token bucket per tenant slot
 * in a table of each). */
#include "engine.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "answer.h"
#include "config.h"
#include "fingerprint.h"
#include "headers.h"
#include "keys.h"
#include "reqjson.h"

#define ENGINE_RATE_SLOTS 4096
#define ENGINE_RATE_PROBES 8

static const struct config *_Atomic engine_cfg; /* swapped on a reload */

/* One token bucket per tenant, in a table probed from the tenant's id. */
struct engine_bucket {
	uint32_t tb_tenant_id;
	double tb_tokens;
	double tb_last;
};

static pthread_mutex_t engine_rate_lock = PTHREAD_MUTEX_INITIALIZER;
static struct engine_bucket engine_issue_buckets[ENGINE_RATE_SLOTS];
static struct engine_bucket engine_claim_buckets[ENGINE_RATE_SLOTS];

void engine_init(const struct config *cfg)
{
	engine_cfg = cfg;
}

int engine_verify(struct request *req, const char *text, struct token *t)
{
	size_t len = strlen(text);

	if (len == 0 || len > TOKEN_MAX_CHARS) {
		answer_problem(req, OUTCOME_TOKEN_MALFORMED, NULL);
		return -1;
	}
	int rc = keys_verify_token(text, len, t);
	if (rc == TOKEN_MALFORMED) {
		answer_problem(req, OUTCOME_TOKEN_MALFORMED, NULL);
		return -1;
	}
	if (rc != TOKEN_OK) {
		answer_problem(req, OUTCOME_TOKEN_INVALID, NULL);
		return -1;
	}
	if (t->tenant_id != req->req_tenant_id) {
		answer_problem(req, OUTCOME_TOKEN_OTHER_TENANT, NULL);
		return -1;
	}
	return 0;
}

int engine_from_path(struct request *req, struct token *t)
{
	if (strlen(req->req_params[0]) != req->req_param_lens[0]) {
		answer_problem(req, OUTCOME_TOKEN_MALFORMED, NULL);
		return -1;
	}
	if (engine_verify(req, req->req_params[0], t) < 0)
		return -1;
	http_note_record(req, t->id);
	return 0;
}

static double engine_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The tenant's bucket: its own if it has one among the probed slots, else a
 * free slot, else the one idle longest (only then does a tenant's bucket
 * start over). Called with the lock held. */
static struct engine_bucket *engine_bucket_of(struct engine_bucket *table, uint32_t tenant_id)
{
	struct engine_bucket *pick = NULL;

	for (size_t i = 0; i < ENGINE_RATE_PROBES; i++) {
		struct engine_bucket *b = &table[(tenant_id + i) % ENGINE_RATE_SLOTS];
		if (b->tb_last != 0 && b->tb_tenant_id == tenant_id)
			return b;
		if (pick == NULL || (pick->tb_last != 0 && b->tb_last < pick->tb_last))
			pick = b;
	}
	return pick;
}

/* Takes N from the tenant's bucket in TABLE (RATE per second, BURST): 0,
 * or -1 after replying 429 rate_limited (WHAT is limited) with Retry-After. */
static int engine_quota(struct request *req, struct engine_bucket *table, double rate, double burst,
			int n, const char *what)
{
	if (rate <= 0)
		return 0;
	double now = engine_now(), wait = 0;
	pthread_mutex_lock(&engine_rate_lock);
	struct engine_bucket *s = engine_bucket_of(table, req->req_tenant_id);
	if (s->tb_tenant_id != req->req_tenant_id || s->tb_last == 0) {
		s->tb_tenant_id = req->req_tenant_id;
		s->tb_tokens = burst;
		s->tb_last = now;
	}
	s->tb_tokens = fmin(burst, s->tb_tokens + (now - s->tb_last) * rate);
	s->tb_last = now;
	/* a batch larger than the burst goes from a full bucket and leaves it in
	 * debt, so batches cannot get round the rate */
	double need = fmin((double)n, burst);
	if (s->tb_tokens >= need)
		s->tb_tokens -= (double)n;
	else
		wait = (need - s->tb_tokens) / rate;
	pthread_mutex_unlock(&engine_rate_lock);
	if (wait == 0)
		return 0;
	char after[16];
	snprintf(after, sizeof(after), "%d", (int)ceil(wait));
	request_fail(req, 429, "rate_limited", "%s is limited to %g per second for this tenant",
		     what, rate);
	http_set_header(req, "Retry-After", after);
	return -1;
}

int engine_rate_check(struct request *req, int n)
{
	if (engine_cfg == NULL)
		return 0;
	return engine_quota(req, engine_issue_buckets, engine_cfg->issue_rate_per_second,
			    engine_cfg->issue_burst, n, "token issuance");
}

int engine_claim_quota(struct request *req, int n)
{
	if (engine_cfg == NULL)
		return 0;
	return engine_quota(req, engine_claim_buckets, engine_cfg->claim_rate_per_second,
			    engine_cfg->claim_burst, n, "claiming records");
}

int engine_fingerprint_why(json_t *body, uint8_t fp[STORE_HASH_BYTES], int *has_fp,
			   char why[REQJSON_WHY])
{
	const char *text;

	*has_fp = 0;
	if (reqjson_string_why(body, "fingerprint", 0, 1, 1024, &text, why) < 0)
		return -1;
	if (text != NULL) {
		fingerprint_of_string(text, strlen(text), fp);
		*has_fp = 1;
	} else if (json_object_get(body, "request") != NULL) {
		if (fingerprint_of_json(json_object_get(body, "request"), fp) < 0) {
			why[0] = '\0';
			return -1;
		}
		*has_fp = 1;
	}
	return 0;
}

int engine_fingerprint(struct request *req, json_t *body, uint8_t fp[STORE_HASH_BYTES], int *has_fp)
{
	char why[REQJSON_WHY];

	return reqjson_refused(req, engine_fingerprint_why(body, fp, has_fp, why), why);
}

int engine_check_headers_why(json_t *headers, size_t max, char why[REQJSON_WHY])
{
	const char *name;
	json_t *value;

	if (!json_is_object(headers) || json_object_size(headers) > max)
		return reqjson_why(why, "headers must be an object of at most %zu string values",
				   max);
	json_object_foreach(headers, name, value)
	{
		size_t n = strlen(name);
		if (n == 0 || n > 128 ||
		    strspn(name, "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
				 "abcdefghijklmnopqrstuvwxyz") != n)
			return reqjson_why(why, "a header name is not a valid token");
		if (headers_never_stored(name))
			return reqjson_why(why,
					   "header %s cannot be stored: hop-by-hop, framing, "
					   "Access-Control-*, Set-Cookie and idemd's own headers "
					   "never are",
					   name);
		const char *v = json_string_value(value);
		if (v == NULL || json_string_length(value) > 8192 ||
		    !headers_value_ok(v, json_string_length(value)))
			return reqjson_why(why, "header values must be strings without control "
						"characters (at most 8192 bytes)");
	}
	return 0;
}
