/* The record a derived-key route's submit names: its key (a header, a
 * JSON member of the body, or the body's hash), scoped by the route's
 * scope_headers, under the route's operation. */
#include "gateway_int.h"

#include <sodium.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "answer.h"
#include "callerkey.h"
#include "config.h"
#include "fingerprint.h"
#include "headers.h"
#include "opcache.h"
#include "reqjson.h"

/* *DOC: the body parsed as JSON, once (NULL when it is empty or not
 * JSON). 0, or -1 after replying 413 when its parse would take more memory
 * than its size allows (jsonmem.h). */
int gateway_body_doc(struct request *req, json_t **doc)
{
	int over;

	if (*doc != NULL || req->req_body_len == 0)
		return 0;
	*doc = reqjson_load_body(req, NULL, &over);
	return over ? -1 : 0;
}

/* The scope of a derived key: the route's scope_headers, each name then
 * every value of it in the request's headers F (N of them) in order,
 * hashed into OUT. */
static void gateway_scope(const struct gateway_route *gr, const struct headers_field *f, size_t n,
			  uint8_t out[32])
{
	crypto_generichash_state st;

	crypto_generichash_init(&st, NULL, 0, 32);
	for (size_t i = 0; i < gr->gr_cfg->n_scope_headers; i++) {
		const char *name = gr->gr_cfg->scope_headers[i];
		crypto_generichash_update(&st, (const unsigned char *)name, strlen(name) + 1);
		for (size_t k = 0; k < n; k++)
			if (strcasecmp(f[k].hf_name, name) == 0)
				crypto_generichash_update(&st, (const unsigned char *)f[k].hf_value,
							  strlen(f[k].hf_value) + 1);
		crypto_generichash_update(&st, (const unsigned char *)"\n", 1);
	}
	crypto_generichash_final(&st, out, 32);
}

/* The caller's key, from where the route says (its header, its JSON
 * member, or the body's hash BYTES_FP in hex; none for a token route),
 * into KEY (KEYLEN bytes), its length into *N: -1 when there is none, below -1 when it is
 * too long. 0, or -1 after replying (a malformed header, or a body too big
 * to parse; *DOC as gateway_body_doc leaves it). */
static int gateway_read_key(struct request *req, const struct gateway_route *gr,
			    const uint8_t *bytes_fp, json_t **doc, char *key, size_t keylen, int *n)
{
	*n = -1;
	switch (gr->gr_key) {
	case GATEWAY_KEY_HEADER: {
		/* gateway_check_headers() has seen exactly one */
		const char *value = req->req_h_route_key;
		*n = value != NULL ? callerkey_from_header(value, key, keylen) : -1;
		if (*n == -1 && value != NULL) {
			request_fail(
				req, 400, "idempotency_key_invalid",
				"%s must be a key of 1 to %d visible ASCII characters, bare or "
				"as a quoted string",
				gr->gr_key_arg, CALLERKEY_MAX);
			return -1;
		}
		break;
	}
	case GATEWAY_KEY_JSON:
		if (gateway_body_doc(req, doc) < 0)
			return -1;
		*n = *doc != NULL ? callerkey_from_json(*doc, gr->gr_key_arg, key, keylen) : -1;
		break;
	case GATEWAY_KEY_BODY:
		for (size_t i = 0; i < FINGERPRINT_BYTES; i++)
			snprintf(key + 2 * i, 3, "%02x", bytes_fp[i]);
		*n = 2 * FINGERPRINT_BYTES;
		break;
	case GATEWAY_KEY_TOKEN:
		break;
	}
	return 0;
}

/*
 * The record a derived-key route's submit names: the key from the header,
 * the JSON member or the request's hash (BYTES_FP), scoped by the route's
 * scope_headers, under the route's operation. *DOC receives the parsed
 * JSON body when one was parsed (the caller decrefs). 0, or -1 after
 * replying.
 */
int gateway_derived_address(struct request *req, const struct gateway_route *gr,
			    const uint8_t *bytes_fp, const struct headers_field *f, size_t nf,
			    json_t **doc, struct token *t, struct operation *op)
{
	char key[CALLERKEY_MAX + 2];
	uint8_t scope[32];
	int found, n;

	if (opcache_by_name(gr->gr_tenant_id, gr->gr_cfg->operation, op, &found) < 0) {
		request_unavailable(req);
		return -1;
	}
	if (!found) {
		answer_problem(req, OUTCOME_OPERATION_UNKNOWN, NULL);
		return -1;
	}
	if (gateway_read_key(req, gr, bytes_fp, doc, key, sizeof(key), &n) < 0)
		return -1;
	if (n == -1) {
		request_fail(req, 400, "idempotency_key_missing",
			     "the request carries no key at %s", gr->gr_cfg->key);
		return -1;
	}
	if (n < 0 || !callerkey_valid(key, (size_t)n) || strlen(key) != (size_t)n) {
		request_fail(req, 400, "idempotency_key_invalid",
			     "a key is 1 to %d characters of visible ASCII", CALLERKEY_MAX);
		return -1;
	}
	gateway_scope(gr, f, nf, scope);
	callerkey_address(gr->gr_tenant_id, op, key, (size_t)n, scope, idemd_unix_ms(), t);
	return 0;
}
