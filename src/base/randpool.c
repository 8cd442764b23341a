/* Random pool: a per-thread buffer of randombytes_buf output, refilled when
 * empty; bytes are wiped from the pool as they are handed out. */
#include "randpool.h"

#include <sodium.h>
#include <string.h>

static _Thread_local unsigned char randpool_pool[RANDPOOL_BYTES];
static _Thread_local size_t randpool_left; /* unused bytes at the pool's end */

void randpool_buf(void *out, size_t n)
{
	unsigned char *o = out;

	while (n > 0) {
		if (randpool_left == 0) {
			randombytes_buf(randpool_pool, sizeof(randpool_pool));
			randpool_left = sizeof(randpool_pool);
		}
		size_t take = n < randpool_left ? n : randpool_left;
		unsigned char *from = randpool_pool + sizeof(randpool_pool) - randpool_left;
		memcpy(o, from, take);
		sodium_memzero(from, take);
		randpool_left -= take;
		o += take;
		n -= take;
	}
}
