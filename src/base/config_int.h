/*
 * Config internals shared by config.c (the key tables, the walker, load
 * and free), config_set.c (one setter per value type) and config_check.c
 * (string checks and the listen address). Not for other modules.
 */
#ifndef IDEMD_CONFIG_INT_H
#define IDEMD_CONFIG_INT_H

#include <jansson.h>
#include <stddef.h>

#include "config.h"

struct cfg_key;

/* Stores V into the field K describes in BASE; NAME is the key as shown in errors. */
typedef int (*cfg_setter)(const struct cfg_key *k, void *base, json_t *v, const char *name,
			  char *err, size_t errlen);

/* Validates (and may normalise in place) a string; returns NULL or the reason. */
typedef const char *(*cfg_check)(char *s);

enum {
	CFG_NONEMPTY = 1 << 0, /* strings: "" refused */
	CFG_NULLABLE = 1 << 1, /* strings: null stores NULL */
	CFG_REQUIRED = 1 << 2, /* must be present in the object */
	CFG_RELOAD = 1 << 3    /* top level: may change on SIGHUP (config_reload) */
};

struct cfg_key {
	const char *name;
	cfg_setter set;
	size_t off;	  /* the field in the target struct */
	size_t count_off; /* lists: the element count field */
	const char *def;  /* default as JSON text; NULL: none */
	long long min;	  /* numbers: bounds; lists: max = most entries */
	long long max;
	unsigned flags;
	cfg_check check; /* strings and string lists: per-value check */
};

/* Writes "config: " and the message into ERR; returns -1. */
int config_fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Copies at most 64 bytes of SRC for an error line into DST (N bytes). */
void config_copy_printable(char *dst, size_t n, const char *src);
void config_strlist_free(char **list, size_t n);
/* Fills BASE from OBJ by the table KEYS (config.c). */
int config_load_object(void *base, const struct cfg_key *keys, size_t nkeys, json_t *obj,
		       const char *prefix, char *err, size_t errlen);
/* Parses S into cfg->listen_host and listen_port (config_check.c). */
int config_store_listen(struct config *cfg, const char *s, const char *label, char *err,
			size_t errlen);

/* Frees what a route holds (config_routes.c). */
void config_route_free(struct config_route *r);

/* Setters (config_set.c; config_set_routes in config_routes.c,
 * config_set_listen and config_set_admin_listen in config_check.c). */
int config_set_int(const struct cfg_key *, void *, json_t *, const char *, char *, size_t);
int config_set_long(const struct cfg_key *, void *, json_t *, const char *, char *, size_t);
int config_set_size(const struct cfg_key *, void *, json_t *, const char *, char *, size_t);
int config_set_double(const struct cfg_key *, void *, json_t *, const char *, char *, size_t);
int config_set_bool(const struct cfg_key *, void *, json_t *, const char *, char *, size_t);
int config_set_string(const struct cfg_key *, void *, json_t *, const char *, char *, size_t);
int config_set_strlist(const struct cfg_key *, void *, json_t *, const char *, char *, size_t);
int config_set_listen(const struct cfg_key *, void *, json_t *, const char *, char *, size_t);
int config_set_admin_listen(const struct cfg_key *, void *, json_t *, const char *, char *, size_t);
int config_set_routes(const struct cfg_key *, void *, json_t *, const char *, char *, size_t);
int config_set_release_on(const struct cfg_key *, void *, json_t *, const char *, char *, size_t);

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
