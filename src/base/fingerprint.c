/* Request fingerprints: domain-separated BLAKE2b-256 of strings and JSON. */
#include "fingerprint.h"

#include <stdlib.h>
#include <string.h>

#include <sodium.h>

static void fingerprint_hash(const char *prefix, const char *s, size_t len,
			     uint8_t out[FINGERPRINT_BYTES]);

static void fingerprint_hash(const char *prefix, const char *s, size_t len,
			     uint8_t out[FINGERPRINT_BYTES])
{
	crypto_generichash_state st;

	/* Unkeyed BLAKE2b-256 cannot fail. */
	(void)crypto_generichash_init(&st, NULL, 0, FINGERPRINT_BYTES);
	(void)crypto_generichash_update(&st, (const unsigned char *)prefix, strlen(prefix));
	(void)crypto_generichash_update(&st, (const unsigned char *)s, len);
	(void)crypto_generichash_final(&st, out, FINGERPRINT_BYTES);
}

void fingerprint_of_string(const char *s, size_t len, uint8_t out[FINGERPRINT_BYTES])
{
	fingerprint_hash("s:", s, len, out);
}

char *fingerprint_canonical_json(const json_t *v)
{
	/* JSON_SORT_KEYS sorts with a bytewise compare, recursively. */
	return json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY);
}

int fingerprint_of_json(const json_t *v, uint8_t out[FINGERPRINT_BYTES])
{
	char *text = fingerprint_canonical_json(v);

	if (text == NULL)
		return -1;
	fingerprint_hash("j:", text, strlen(text), out);
	free(text);
	return 0;
}
