/* What a reload replaced, freed after a grace period: two lists, the one
 * added since the running grace period began and the one it waits for. */
#include "retire.h"

#include <stdlib.h>

struct retiree {
	void (*r_fn)(void *);
	void *r_arg;
	struct retiree *r_next;
};

/* the main thread's */
static struct retiree *retire_pending, *retire_sealed;

int retire_add(void (*fn)(void *), void *arg)
{
	struct retiree *r = malloc(sizeof(*r));

	if (r == NULL)
		return -1;
	r->r_fn = fn;
	r->r_arg = arg;
	r->r_next = retire_pending;
	retire_pending = r;
	return 0;
}

static void retire_run(struct retiree *r)
{
	while (r != NULL) {
		struct retiree *next = r->r_next;
		r->r_fn(r->r_arg);
		free(r);
		r = next;
	}
}

void retire_seal(void)
{
	/* nothing is left sealed: the grace period before ran it; should one
	 * begin early, what it sealed waits for this one too */
	struct retiree **tail = &retire_pending;

	while (*tail != NULL)
		tail = &(*tail)->r_next;
	*tail = retire_sealed;
	retire_sealed = retire_pending;
	retire_pending = NULL;
}

void retire_sealed_run(void)
{
	retire_run(retire_sealed);
	retire_sealed = NULL;
}

void retire_all_run(void)
{
	retire_run(retire_sealed);
	retire_run(retire_pending);
	retire_sealed = retire_pending = NULL;
}
