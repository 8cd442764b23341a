/* The growable byte buffer every module builds text and bodies in. */
#include "buf.h"

#include <stdlib.h>
#include <string.h>

#define BUF_FIRST_CAP 256

int buf_add(struct buf *b, const void *data, size_t len)
{
	if (b->b_failed || len >= (size_t)-1 - b->b_len) {
		b->b_failed = 1;
		return -1;
	}
	if (len + 1 > b->b_cap - b->b_len || b->b_data == NULL) {
		size_t cap = b->b_cap ? b->b_cap : BUF_FIRST_CAP;
		while (cap - b->b_len < len + 1) {
			if (cap > ((size_t)-1) / 2) {
				b->b_failed = 1;
				return -1;
			}
			cap *= 2;
		}
		char *p = realloc(b->b_data, cap);
		if (p == NULL) {
			b->b_failed = 1;
			return -1;
		}
		b->b_data = p;
		b->b_cap = cap;
	}
	if (len > 0)
		memcpy(b->b_data + b->b_len, data, len);
	b->b_len += len;
	b->b_data[b->b_len] = '\0';
	return 0;
}

int buf_str(struct buf *b, const char *s)
{
	return buf_add(b, s, strlen(s));
}

char *buf_take(struct buf *b)
{
	char *data = b->b_data;

	memset(b, 0, sizeof(*b));
	return data;
}

void buf_free(struct buf *b)
{
	free(b->b_data);
	memset(b, 0, sizeof(*b));
}
