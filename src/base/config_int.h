/*
 * Config internals shared by config.c (the top-level key table, load and
 * free), config_routes.c (the routes' key table), config_set.c (the table
 * walker: one setter and one free per value type) and config_check.c
 * (string checks and listen addresses). Not for other modules.

 *
 * Ownership: as config.h says: what a setter stores is owned by the config
 * and freed by config_free(); the key tables are static.
 */
#ifndef IDEMD_CONFIG_INT_H
#define IDEMD_CONFIG_INT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* What a key holds, so how its value is checked, stored and freed. */
enum cfg_type {
	CFG_INT,	/* int, an integer within [min, max] */
	CFG_LONG,	/* long, likewise */
	CFG_SIZE,	/* size_t, likewise */
	CFG_DOUBLE,	/* double, any number within [min, max] */
	CFG_BOOL,	/* int, 0 or 1 */
	CFG_STRING,	/* char *, through check */
	CFG_STRLIST,	/* char **, at most max distinct non-empty strings; count at off2 */
	CFG_ADDRESS,	/* a listen address: host (char *) at off, port (uint16_t) at off2 */
	CFG_ROUTES,	/* struct config's routes (config_routes.c) */
	CFG_RELEASE_ON, /* unsigned char[600], statuses and classes */
};

/* Validates (and may normalise in place) a string; returns NULL or the reason. */
typedef const char *(*cfg_check)(char *s);

enum {
	CFG_NONEMPTY = 1 << 0, /* strings: "" refused */
	CFG_NULLABLE = 1 << 1, /* strings and addresses: null stores NULL */
	CFG_REQUIRED = 1 << 2, /* must be present in the object */
	CFG_RELOAD = 1 << 3,   /* top level: may change on SIGHUP (config_reload) */
	CFG_SECRET = 1 << 4    /* strings: wiped before they are freed */
};

/* One row of a key table: one key, its value's type, where it goes, its
 * default (JSON text, run through the same rules; NULL: none), its bounds
 * (lists: max = most entries), flags and per-string check. */
struct cfg_key {
	const char *name;
	enum cfg_type type;
	size_t off;  /* the field in the target struct */
	size_t off2; /* lists: the element count field; addresses: the port */
	const char *def;
	long long min;
	long long max;
	unsigned flags;
	cfg_check check;
};

/*
 * A row for field F of struct S, whose key is named as the field: type T,
 * default D, bounds LO and HI, flags FL, check CK. A list's (CFG_STRLIST,
 * CFG_ROUTES) count is the field n_F; the address NAME is stored in the
 * fields F_host and F_port.
 */
/* clang-format off */
#define CFG_KEY(S, f, t, d, lo, hi, fl, ck) { #f, CFG_##t, offsetof(S, f), 0, d, lo, hi, fl, ck }
#define CFG_LIST(S, f, t, d, hi, fl, ck) \
	{ #f, CFG_##t, offsetof(S, f), offsetof(S, n_##f), d, 0, hi, fl, ck }
#define CFG_ADDRESS_KEY(S, name, f, d, fl) \
	{ name, CFG_ADDRESS, offsetof(S, f##_host), offsetof(S, f##_port), d, 0, 0, fl, NULL }
/* clang-format on */

/* The field at OFF in the struct BASE. */
static inline void *cfg_field(void *base, size_t off)
{
	return (char *)base + off;
}

/* Writes "config: " and the message into ERR; returns -1. */
int config_fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Fills BASE from OBJ by the table KEYS: unknown keys are errors, absent
 * keys take their default, absent CFG_REQUIRED keys are errors. PREFIX is
 * put before key names in messages ("routes[0]."). (config_set.c) */
int config_load_object(void *base, const struct cfg_key *keys, size_t nkeys, json_t *obj,
		       const char *prefix, char *err, size_t errlen) IDEMD_WUR;
/* Frees what BASE holds by the table KEYS (not BASE itself). */
void config_free_object(void *base, const struct cfg_key *keys, size_t nkeys);
/* Parses S into *HOST (owned: free() it) and *PORT; LABEL names the source in
 * errors (config_check.c). */
int config_store_address(char **host, uint16_t *port, const char *s, const char *label, char *err,
			 size_t errlen) IDEMD_WUR;

/* The elements of a list (CFG_STRLIST, CFG_ROUTES): what it holds (for
 * "must be an array of WHAT"), the size of one, how element I of the new
 * array ARR is loaded from E (NAME: the list's key; ERR set on failure),
 * and how N of them with their array are freed. */
struct cfg_list {
	const char *what;
	size_t size;
	int (*load)(const struct cfg_key *k, void *arr, size_t i, json_t *e, const char *name,
		    char *err, size_t errlen);
	void (*free)(void *arr, size_t n);
};
/* The routes' (config_routes.c). */
extern const struct cfg_list config_route_list;

/* String checks (config_check.c): NULL, or the reason S is refused. */
const char *config_check_route_key(char *s);
const char *config_check_scope_header(char *s);
const char *config_check_fingerprint(char *s);
const char *config_check_method(char *s);
const char *config_check_path(char *s);
const char *config_check_operation(char *s);
const char *config_check_upstream(char *s);
const char *config_check_header_name(char *s);
const char *config_check_origin(char *s);
const char *config_check_log_level(char *s);
const char *config_check_metrics_operation(char *s);

#endif
