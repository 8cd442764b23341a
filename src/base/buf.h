/*
 * A growable byte buffer, NUL-terminated once anything was added. A failed
 * append keeps what was there and marks the buffer failed, so a caller may
 * append several pieces and check once (b_failed): that is why buf_add()
 * and buf_str() alone of the fallible functions are not IDEMD_WUR.
 *
 * Ownership: b_data is owned by the buffer until buf_take() returns it,
 * owned, to the caller; buf_free() frees it. A zeroed struct buf is an empty buffer.
 */
#ifndef IDEMD_BUF_H
#define IDEMD_BUF_H

#include <stddef.h>

#include "common.h"

struct buf {
	char *b_data; /* NULL while nothing was added */
	size_t b_len; /* bytes held, the NUL not counted */
	size_t b_cap;
	int b_failed; /* an append ran out of memory */
};

/* Appends LEN bytes of DATA: 0, or -1 (out of memory; the buffer is then
 * failed and every later append is refused). */
int buf_add(struct buf *b, const void *data, size_t len);

/* buf_add() of the string S without its NUL. */
int buf_str(struct buf *b, const char *s);

/* The data, owned: the caller frees it with free() (NULL when nothing was
 * added); leaves B empty. */
char *buf_take(struct buf *b) IDEMD_WUR;

/* Frees the data; B is empty afterwards. */
void buf_free(struct buf *b);

#endif
