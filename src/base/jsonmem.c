/* jansson's allocator with a budget per parse (jsonmem.h). Blocks are the
 * C library's own (what jansson hands out, json_dumps() included, is freed
 * with free() as before); inside jsonmem_load() every allocation counts
 * against the thread's budget and frees do not count back, so the budget
 * bounds what a parse allocates in all, growth of its buffers included. */
#include "jsonmem.h"

#include <stdlib.h>

static _Thread_local int budget_on;
static _Thread_local size_t budget_left;
static _Thread_local int budget_over;

static void *jsonmem_malloc(size_t n)
{
	if (budget_on) {
		if (n > budget_left) {
			budget_over = 1;
			return NULL;
		}
		budget_left -= n;
	}
	return malloc(n);
}

void jsonmem_init(void)
{
	json_set_alloc_funcs(jsonmem_malloc, free);
}

size_t jsonmem_budget(size_t len)
{
	if (len > (SIZE_MAX - JSONMEM_FLOOR) / JSONMEM_FACTOR)
		return SIZE_MAX;
	return JSONMEM_FLOOR + JSONMEM_FACTOR * len;
}

json_t *jsonmem_load(const char *buf, size_t len, size_t flags, json_error_t *err, int *over)
{
	budget_on = 1;
	budget_left = jsonmem_budget(len);
	budget_over = 0;
	json_t *v = json_loadb(buf, len, flags, err);
	budget_on = 0;
	*over = budget_over;
	if (budget_over && v != NULL) {
		/* an allocation jansson did without is still a refusal */
		json_decref(v);
		v = NULL;
	}
	return v;
}
