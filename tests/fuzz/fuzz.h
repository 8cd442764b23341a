/*
 * Shared helpers for the libFuzzer drivers in this folder (not a driver:
 * only fuzz_*.c are built). Each driver includes this once.
 *
 * FUZZ_CHECK(cond) aborts with the failed condition, so a broken property
 * is reported by libFuzzer like a crash (with the input saved).
 * fuzz_init() makes runs deterministic: libsodium initialised once and
 * jansson's hash seed fixed, so object iteration order (and therefore the
 * code path taken for a given input) never depends on /dev/urandom.
 */
#ifndef IDEMD_FUZZ_H
#define IDEMD_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <sodium.h>

#define FUZZ_CHECK(cond)                                                    \
	do {                                                                \
		if (!(cond)) {                                              \
			fprintf(stderr, "%s:%d: property failed: %s\n",     \
			    __FILE__, __LINE__, #cond);                     \
			abort();                                            \
		}                                                           \
	} while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A driver's LLVMFuzzerInitialize: runs the statement STMT, returns 0. */
#define FUZZ_INITIALIZE(stmt)                                               \
	int LLVMFuzzerInitialize(int *argc, char ***argv)                   \
	{                                                                   \
		(void)argc;                                                 \
		(void)argv;                                                 \
		stmt;                                                       \
		return 0;                                                   \
	}

static inline void
fuzz_init(void)
{
	if (sodium_init() < 0)
		abort();
	json_object_seed(0x1de3d);
}

/*
 * The fixed signing key the token seeds were made with (bytes 0..31, see
 * gen_seeds.py). Not a secret: it exists only in the fuzz drivers.
 */
static inline void
fuzz_key(uint8_t key[32])
{
	for (int i = 0; i < 32; i++)
		key[i] = (uint8_t)i;
}

/* A new NUL-terminated copy of data[0..size) (free with free()). */
static inline char *
fuzz_strndup(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);

	if (s == NULL)
		abort();
	if (size > 0)
		memcpy(s, data, size);
	s[size] = '\0';
	return s;
}

/*
 * Splits data[0..size) at NUL bytes into at most n NUL-terminated pieces
 * (new strings in out[], free each); missing pieces are "". Returns the
 * number of pieces actually present in the input.
 */
static inline size_t
fuzz_split(const uint8_t *data, size_t size, char **out, size_t n)
{
	size_t i = 0, start = 0;

	for (size_t pos = 0; pos <= size && i < n; pos++) {
		if (pos == size || data[pos] == '\0') {
			out[i++] = fuzz_strndup(data + start, pos - start);
			start = pos + 1;
		}
	}
	for (size_t k = i; k < n; k++)
		out[k] = fuzz_strndup(NULL, 0);
	return i;
}

#endif
