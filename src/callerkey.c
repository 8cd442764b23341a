/* Caller keys: their form, and the record id each names. */
#include "callerkey.h"

#include <sodium.h>
#include <string.h>

int callerkey_valid(const char *key, size_t len)
{
	if (len == 0 || len > CALLERKEY_MAX)
		return 0;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)key[i] < 0x21 || (unsigned char)key[i] > 0x7e)
			return 0;
	return 1;
}

void callerkey_address(uint32_t tenant, const struct operation *op, const char *key, size_t len,
		       int64_t now, struct token *t)
{
	crypto_generichash_state st;
	uint32_t id = op->op_id;
	unsigned char be[4] = { (unsigned char)(id >> 24), (unsigned char)(id >> 16),
				(unsigned char)(id >> 8), (unsigned char)id };

	memset(t, 0, sizeof(*t));
	t->tenant_id = tenant;
	t->operation_id = op->op_id;
	crypto_generichash_init(&st, NULL, 0, TOKEN_ID_BYTES);
	crypto_generichash_update(&st, (const unsigned char *)"idemd caller key\n", 17);
	crypto_generichash_update(&st, be, sizeof(be));
	crypto_generichash_update(&st, (const unsigned char *)key, len);
	crypto_generichash_final(&st, t->id, TOKEN_ID_BYTES);
	t->expires_at = (uint32_t)(now + op->op_token_ttl_seconds);
}
