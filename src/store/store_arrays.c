/* PostgreSQL array literals built as text ({...}), one per parameter of
 * a batched statement: the element types, and the columns of a batch of
 * claims and of completions, all built here. */
#include "store_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void store_array_put(struct buf *a, const char *s, size_t n)
{
	/* a failure marks the buffer; store_arrays_close reports it */
	(void)buf_add(a, s, n);
}

/* Starts the next element: '{' before the first, ',' before the others. */
static void store_array_next(struct buf *a)
{
	store_array_put(a, a->b_len == 0 ? "{" : ",", 1);
}

void store_array_i64(struct buf *a, int64_t v)
{
	char num[24];

	store_array_next(a);
	store_array_put(a, num, (size_t)snprintf(num, sizeof(num), "%" PRId64, v));
}

void store_array_null(struct buf *a)
{
	store_array_next(a);
	store_array_put(a, "NULL", 4);
}

/* A quoted element; '"' and '\' are escaped with '\'. */
void store_array_text(struct buf *a, const char *s, size_t n)
{
	store_array_next(a);
	store_array_put(a, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		size_t run = i;
		while (run < n && s[run] != '"' && s[run] != '\\')
			run++;
		store_array_put(a, s + i, run - i);
		if (run == n)
			break;
		store_array_put(a, "\\", 1);
		store_array_put(a, s + run, 1);
		i = run;
	}
	store_array_put(a, "\"", 1);
}

/* A bytea element in hex input form: "\\x0a1b..." (the backslash escaped). */
void store_array_bytea(struct buf *a, const uint8_t *p, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	char chunk[128];

	store_array_next(a);
	store_array_put(a, "\"\\\\x", 4);
	for (size_t i = 0; i < n;) {
		size_t k = 0;
		for (; i < n && k < sizeof(chunk); i++) {
			chunk[k++] = hex[p[i] >> 4];
			chunk[k++] = hex[p[i] & 15];
		}
		store_array_put(a, chunk, k);
	}
	store_array_put(a, "\"", 1);
}

void store_array_bool(struct buf *a, int v)
{
	store_array_next(a);
	store_array_put(a, v ? "t" : "f", 1);
}

/* Closes every array of ARRS; -1 if building any of them failed. */
int store_arrays_close(struct buf *arrs, size_t n)
{
	int rc = 0;

	for (size_t i = 0; i < n; i++) {
		store_array_put(&arrs[i], "}", 1);
		if (arrs[i].b_failed)
			rc = -1;
	}
	return rc;
}

int store_claim_arrays(struct buf *arrs, const struct claim_args *const *a, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const struct claim_args *c = a[i];
		store_array_i64(&arrs[0], c->tenant_id);
		store_array_bytea(&arrs[1], c->token_id, 16);
		store_array_i64(&arrs[2], c->operation_id);
		if (c->subject != NULL)
			store_array_text(&arrs[3], c->subject, strlen(c->subject));
		else
			store_array_null(&arrs[3]);
		if (c->fingerprint != NULL)
			store_array_bytea(&arrs[4], c->fingerprint, STORE_HASH_BYTES);
		else
			store_array_null(&arrs[4]);
		store_array_i64(&arrs[5], c->token_expires_at);
		store_array_i64(&arrs[6], c->lease_seconds);
		if (c->version_key != NULL)
			store_array_text(&arrs[7], c->version_key, strlen(c->version_key));
		else
			store_array_null(&arrs[7]);
		if (c->has_expected)
			store_array_i64(&arrs[8], c->expected);
		else
			store_array_null(&arrs[8]);
		store_array_bool(&arrs[9], c->require_version);
		store_array_bool(&arrs[10], c->wait);
		store_array_text(&arrs[11], STORE_BY(c->by), strlen(STORE_BY(c->by)));
		store_array_i64(&arrs[12], c->audit_seconds);
		if (c->seen_ms > 0)
			store_array_i64(&arrs[13], c->seen_ms);
		else
			store_array_null(&arrs[13]);
		store_array_i64(&arrs[14], c->holder);
		store_array_i64(&arrs[15], c->retention_seconds);
	}
	return store_arrays_close(arrs, STORE_CLAIM_ARRAYS);
}

int store_complete_arrays(struct buf *arrs, const struct complete_args *const *a, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const struct complete_args *c = a[i];
		const struct stored_response *resp = c->resp;
		store_array_i64(&arrs[0], c->tenant_id);
		store_array_bytea(&arrs[1], c->token_id, 16);
		store_array_i64(&arrs[2], c->attempt);
		store_array_i64(&arrs[3], resp->sr_status);
		store_array_text(&arrs[4], resp->sr_headers, strlen(resp->sr_headers));
		store_array_bytea(&arrs[5], resp->sr_body, resp->sr_body ? resp->sr_body_len : 0);
		store_array_bool(&arrs[6], resp->sr_is_json);
		/* an exact retention N travels as -1 - N (migrations/0011,
		 * idemd.complete) */
		store_array_i64(&arrs[7], c->retention_exact ? -1 - (int64_t)c->retention_seconds
							     : c->retention_seconds);
		store_array_text(&arrs[8], STORE_BY(c->by), strlen(STORE_BY(c->by)));
		store_array_i64(&arrs[9], c->audit_seconds);
	}
	return store_arrays_close(arrs, 10);
}
