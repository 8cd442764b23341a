/* Operation cache: a small direct-mapped table under a read-write lock,
 * indexed twice (by name and by id) over the same entries. */
#include "opcache.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

#define OPCACHE_SLOTS 1024

struct opcache_entry {
	struct operation oe_op;
	time_t oe_loaded;
	int oe_used;
};

static struct opcache_entry opcache_by_name_slots[OPCACHE_SLOTS];
static struct opcache_entry opcache_by_id_slots[OPCACHE_SLOTS];
static pthread_rwlock_t opcache_lock = PTHREAD_RWLOCK_INITIALIZER;

static size_t opcache_name_slot(uint32_t tenant_id, const char *name)
{
	uint64_t h = 1469598103934665603ULL ^ tenant_id;

	for (const char *p = name; *p != '\0'; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	return (size_t)(h % OPCACHE_SLOTS);
}

static time_t opcache_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec;
}

void opcache_put(const struct operation *op)
{
	time_t now = opcache_now();

	pthread_rwlock_wrlock(&opcache_lock);
	struct opcache_entry *a =
		&opcache_by_name_slots[opcache_name_slot(op->op_tenant_id, op->op_name)];
	struct opcache_entry *b = &opcache_by_id_slots[op->op_id % OPCACHE_SLOTS];
	a->oe_op = *op;
	a->oe_loaded = now;
	a->oe_used = 1;
	*b = *a;
	pthread_rwlock_unlock(&opcache_lock);
}

static int opcache_fresh(const struct opcache_entry *e, time_t now)
{
	return e->oe_used && now - e->oe_loaded < OPCACHE_TTL_SECONDS;
}

int opcache_by_name(uint32_t tenant_id, const char *name, struct operation *op, int *found)
{
	time_t now = opcache_now();
	int hit = 0;

	pthread_rwlock_rdlock(&opcache_lock);
	const struct opcache_entry *e = &opcache_by_name_slots[opcache_name_slot(tenant_id, name)];
	if (opcache_fresh(e, now) && e->oe_op.op_tenant_id == tenant_id &&
	    strcmp(e->oe_op.op_name, name) == 0) {
		*op = e->oe_op;
		hit = 1;
	}
	pthread_rwlock_unlock(&opcache_lock);
	if (hit) {
		*found = 1;
		return 0;
	}
	if (store_operation_get(tenant_id, name, op, found) < 0)
		return -1;
	if (*found)
		opcache_put(op);
	return 0;
}

int opcache_by_id(uint32_t op_id, struct operation *op, int *found)
{
	time_t now = opcache_now();
	int hit = 0;

	pthread_rwlock_rdlock(&opcache_lock);
	const struct opcache_entry *e = &opcache_by_id_slots[op_id % OPCACHE_SLOTS];
	if (opcache_fresh(e, now) && e->oe_op.op_id == op_id) {
		*op = e->oe_op;
		hit = 1;
	}
	pthread_rwlock_unlock(&opcache_lock);
	if (hit) {
		*found = 1;
		return 0;
	}
	if (store_operation_by_id(op_id, op, found) < 0)
		return -1;
	if (*found)
		opcache_put(op);
	return 0;
}
