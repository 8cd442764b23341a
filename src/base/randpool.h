/* Random pool: non-secret random bytes (request ids, token ids) served from
 * a per-thread buffer filled by randombytes_buf, so that a request costs no
 * getrandom(2) call. Keys and other secrets must use randombytes_buf.
 * Ownership: OUT is borrowed for the call. */
#ifndef IDEMD_RANDPOOL_H
#define IDEMD_RANDPOOL_H

#include <stddef.h>

#define RANDPOOL_BYTES 4096

/* Fills OUT with N random bytes; each byte of the pool is handed out once. */
void randpool_buf(void *out, size_t n);

#endif
