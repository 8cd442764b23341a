/*
 * Configuration loading and validation. Every key is one row of a table
 * (name, setter, field, default, bounds, extra check): config_keys for the
 * top level, route_keys (config_routes.c) for each element of "routes". One generic walker,
 * load_object(), rejects unknown keys, applies the file value or the default
 * (written as JSON text and run through the same setter, so defaults obey the
 * same rules) and reports missing required keys. Environment overrides are
 * applied by config_load() after the file.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* strdup, strndup, explicit_bzero */
#endif

#include "config.h"
#include "config_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "headers.h"

static int load_root(struct config *cfg, json_t *root, char *err, size_t errlen);
static void secret_free(char *s);

#define CFG_FIELD(f) offsetof(struct config, f)

static const struct cfg_key config_keys[] = {
	{ .name = "listen", .set = config_set_listen, .def = "\"127.0.0.1:8080\"" },
	{ .name = "database_url",
	  .set = config_set_string,
	  .off = CFG_FIELD(database_url),
	  .flags = CFG_NONEMPTY },
	{ .name = "pool_size",
	  .set = config_set_int,
	  .off = CFG_FIELD(pool_size),
	  .def = "8",
	  .min = 1,
	  .max = 256 },
	/* no default here: one thread per core, see load_root() */
	{ .name = "threads",
	  .set = config_set_int,
	  .off = CFG_FIELD(threads),
	  .min = 1,
	  .max = 256 },
	{ .name = "max_body_bytes",
	  .set = config_set_size,
	  .off = CFG_FIELD(max_body_bytes),
	  .def = "1048576",
	  .min = 1024,
	  .max = 67108864,
	  .flags = CFG_RELOAD },
	{ .name = "sweep_interval_seconds",
	  .set = config_set_int,
	  .off = CFG_FIELD(sweep_interval_seconds),
	  .def = "60",
	  .min = 1,
	  .max = 86400 },
	{ .name = "database_wait_seconds",
	  .set = config_set_int,
	  .off = CFG_FIELD(database_wait_seconds),
	  .def = "60",
	  .min = 0,
	  .max = 3600 },
	{ .name = "fence_retention_seconds",
	  .set = config_set_int,
	  .off = CFG_FIELD(fence_retention_seconds),
	  .def = "604800",
	  .min = 0,
	  .max = 315360000 },
	{ .name = "master_key_file",
	  .set = config_set_string,
	  .off = CFG_FIELD(master_key_file),
	  .def = "\"idemd.key\"",
	  .flags = CFG_NONEMPTY },
	{ .name = "cors_origins",
	  .set = config_set_strlist,
	  .off = CFG_FIELD(cors_origins),
	  .count_off = CFG_FIELD(n_cors_origins),
	  .def = "[]",
	  .max = 256,
	  .check = config_check_origin,
	  .flags = CFG_RELOAD },
	{ .name = "routes",
	  .set = config_set_routes,
	  .def = "[]",
	  .max = 1024,
	  .flags = CFG_RELOAD },
	{ .name = "max_connections",
	  .set = config_set_int,
	  .off = CFG_FIELD(max_connections),
	  .def = "4096",
	  .min = 1,
	  .max = 100000 },
	{ .name = "connection_timeout_seconds",
	  .set = config_set_int,
	  .off = CFG_FIELD(connection_timeout_seconds),
	  .def = "30",
	  .min = 1,
	  .max = 3600 },
	{ .name = "max_connections_per_ip",
	  .set = config_set_int,
	  .off = CFG_FIELD(max_connections_per_ip),
	  .def = "1024",
	  .min = 0,
	  .max = 100000 },
	{ .name = "max_inflight_body_bytes",
	  .set = config_set_size,
	  .off = CFG_FIELD(max_inflight_body_bytes),
	  .def = "67108864",
	  .min = 1048576,
	  .max = 68719476736LL,
	  .flags = CFG_RELOAD },
	{ .name = "max_inflight_body_bytes_per_client",
	  .set = config_set_size,
	  .off = CFG_FIELD(max_inflight_body_bytes_per_client),
	  .def = "0",
	  .min = 0,
	  .max = 68719476736LL,
	  .flags = CFG_RELOAD },
	{ .name = "max_inflight_body_bytes_per_tenant",
	  .set = config_set_size,
	  .off = CFG_FIELD(max_inflight_body_bytes_per_tenant),
	  .def = "0",
	  .min = 0,
	  .max = 68719476736LL,
	  .flags = CFG_RELOAD },
	{ .name = "request_timeout_seconds",
	  .set = config_set_int,
	  .off = CFG_FIELD(request_timeout_seconds),
	  .def = "30",
	  .min = 1,
	  .max = 3600 },
	{ .name = "issue_rate_per_second",
	  .set = config_set_double,
	  .off = CFG_FIELD(issue_rate_per_second),
	  .def = "0",
	  .min = 0,
	  .max = 1000000,
	  .flags = CFG_RELOAD },
	{ .name = "issue_burst",
	  .set = config_set_int,
	  .off = CFG_FIELD(issue_burst),
	  .def = "100",
	  .min = 1,
	  .max = 1000000,
	  .flags = CFG_RELOAD },
	{ .name = "claim_rate_per_second",
	  .set = config_set_double,
	  .off = CFG_FIELD(claim_rate_per_second),
	  .def = "0",
	  .min = 0,
	  .max = 1000000,
	  .flags = CFG_RELOAD },
	{ .name = "claim_burst",
	  .set = config_set_int,
	  .off = CFG_FIELD(claim_burst),
	  .def = "1000",
	  .min = 1,
	  .max = 1000000,
	  .flags = CFG_RELOAD },
	{ .name = "max_waiters",
	  .set = config_set_int,
	  .off = CFG_FIELD(max_waiters),
	  .def = "10000",
	  .min = 0,
	  .max = 1000000 },
	{ .name = "database_timeout_ms",
	  .set = config_set_long,
	  .off = CFG_FIELD(database_timeout_ms),
	  .def = "10000",
	  .min = 100,
	  .max = 600000 },
	{ .name = "prepared_statements",
	  .set = config_set_bool,
	  .off = CFG_FIELD(prepared_statements),
	  .def = "true" },
	{ .name = "log_level",
	  .set = config_set_string,
	  .off = CFG_FIELD(log_level),
	  .def = "\"info\"",
	  .check = config_check_log_level,
	  .flags = CFG_RELOAD },
	{ .name = "tls_cert_file",
	  .set = config_set_string,
	  .off = CFG_FIELD(tls_cert_file),
	  .def = "null",
	  .flags = CFG_NONEMPTY | CFG_NULLABLE },
	{ .name = "tls_key_file",
	  .set = config_set_string,
	  .off = CFG_FIELD(tls_key_file),
	  .def = "null",
	  .flags = CFG_NONEMPTY | CFG_NULLABLE },
	{ .name = "listen_database_url",
	  .set = config_set_string,
	  .off = CFG_FIELD(listen_database_url),
	  .def = "null",
	  .flags = CFG_NONEMPTY | CFG_NULLABLE },
	{ .name = "admin_listen", .set = config_set_admin_listen, .def = "null" },
	{ .name = "metrics_operations",
	  .set = config_set_strlist,
	  .off = CFG_FIELD(metrics_operations),
	  .count_off = CFG_FIELD(n_metrics_operations),
	  .def = "[]",
	  .max = 64,
	  .check = config_check_metrics_operation },
};

/* Jansson's error text without the " near '...'" part, which quotes raw
 * input (a password in database_url, control bytes), kept to printable
 * ASCII. Writes into OUT. */
static const char *json_error_text(const char *text, char *out, size_t outlen)
{
	size_t n = 0;
	const char *near = strstr(text, " near '");
	size_t len = near ? (size_t)(near - text) : strlen(text);

	for (size_t i = 0; i < len && n + 1 < outlen; i++)
		out[n++] = (text[i] >= 0x20 && text[i] <= 0x7e) ? text[i] : '?';
	out[n] = '\0';
	return out;
}

/* The top level: keys, then rules that span keys. */
static int load_root(struct config *cfg, json_t *root, char *err, size_t errlen)
{
	if (!json_is_object(root))
		return config_fail(err, errlen, "top level must be a JSON object");
	if (config_load_object(cfg, config_keys, IDEMD_ARRAY_LEN(config_keys), root, "", err,
			       errlen) == -1)
		return -1;
	if ((cfg->tls_cert_file == NULL) != (cfg->tls_key_file == NULL))
		return config_fail(err, errlen,
				   "\"tls_cert_file\" and \"tls_key_file\" must be set together");
	if (cfg->threads == 0)
		cfg->threads = config_default_threads();
	return 0;
}

int config_default_threads(void)
{
	/* request threads never wait for the database (claims and completes
	 * go through the batcher), so one per core keeps every core busy
	 * without paying for switches between more threads than cores */
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n < 2 ? 2 : n > 256 ? 256 : (int)n;
}

/* What must hold once the file and the environment are both applied. */
static int check_required(const struct config *cfg, char *err, size_t errlen)
{
	if (cfg->database_url == NULL)
		return config_fail(err, errlen,
				   "\"database_url\" is required (or set IDEMD_DATABASE_URL)");
	if (cfg->admin_listen_host != NULL && cfg->admin_listen_port == cfg->listen_port &&
	    strcmp(cfg->admin_listen_host, cfg->listen_host) == 0)
		return config_fail(err, errlen, "\"admin_listen\" must differ from \"listen\"");
	return 0;
}

/* Reads at most CONFIG_MAX_FILE_BYTES of PATH into a new buffer (*OUT). */
static int read_file(const char *path, char **out, size_t *outlen, char *err, size_t errlen)
{
	char *buf = NULL;
	size_t len = 0;
	ssize_t n;
	int fd, ret = -1;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		return config_fail(err, errlen, "cannot open %s: %s", path, strerror(errno));
	if ((buf = malloc(CONFIG_MAX_FILE_BYTES + 1)) == NULL) {
		config_fail(err, errlen, "out of memory");
		goto done;
	}
	while (len <= CONFIG_MAX_FILE_BYTES) {
		n = read(fd, buf + len, CONFIG_MAX_FILE_BYTES + 1 - len);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1) {
			config_fail(err, errlen, "cannot read %s: %s", path, strerror(errno));
			goto done;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (len > CONFIG_MAX_FILE_BYTES) {
		config_fail(err, errlen, "%s is larger than %d bytes", path, CONFIG_MAX_FILE_BYTES);
		goto done;
	}
	*out = buf;
	*outlen = len;
	buf = NULL;
	ret = 0;
done:
	if (buf != NULL) {
		explicit_bzero(buf, len);
		free(buf);
	}
	close(fd);
	return ret;
}

int config_parse(struct config *cfg, const char *text, char *err, size_t errlen)
{
	struct config tmp = { 0 };
	json_error_t jerr;
	char etext[JSON_ERROR_TEXT_LENGTH];
	json_t *root;
	int ret = -1;

	memset(cfg, 0, sizeof(*cfg));
	if ((root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr)) == NULL)
		return config_fail(err, errlen, "invalid JSON at line %d, column %d: %s", jerr.line,
				   jerr.column, json_error_text(jerr.text, etext, sizeof(etext)));
	if (load_root(&tmp, root, err, errlen) == -1 || check_required(&tmp, err, errlen) == -1)
		goto done;
	*cfg = tmp;
	memset(&tmp, 0, sizeof(tmp));
	ret = 0;
done:
	config_free(&tmp);
	json_decref(root);
	return ret;
}

/* PATH's JSON (a new reference), or NULL with ERR set; the file's text is
 * wiped from memory either way (it may hold the database password). */
static json_t *config_parse_file(const char *path, char *err, size_t errlen)
{
	json_error_t jerr;
	char etext[JSON_ERROR_TEXT_LENGTH];
	json_t *root = NULL;
	char *buf = NULL;
	size_t len = 0;

	if (read_file(path, &buf, &len, err, errlen) == -1)
		return NULL;
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (root == NULL)
		config_fail(err, errlen, "%s: invalid JSON at line %d, column %d: %s", path,
			    jerr.line, jerr.column,
			    json_error_text(jerr.text, etext, sizeof(etext)));
	explicit_bzero(buf, len);
	free(buf);
	return root;
}

int config_load(struct config *cfg, const char *path, char *err, size_t errlen)
{
	struct config tmp = { 0 };
	json_t *root = NULL;
	const char *env;
	int ret = -1;

	memset(cfg, 0, sizeof(*cfg));
	if (path != NULL) {
		if ((root = config_parse_file(path, err, errlen)) == NULL)
			goto done;
	} else if ((root = json_object()) == NULL) {
		config_fail(err, errlen, "out of memory");
		goto done;
	}
	if (load_root(&tmp, root, err, errlen) == -1)
		goto done;
	if ((env = getenv("IDEMD_LISTEN")) != NULL && env[0] != '\0' &&
	    config_store_listen(&tmp, env, "IDEMD_LISTEN", err, errlen) == -1)
		goto done;
	if ((env = getenv("IDEMD_DATABASE_URL")) != NULL && env[0] != '\0') {
		char *copy = strdup(env);

		if (copy == NULL) {
			config_fail(err, errlen, "out of memory");
			goto done;
		}
		secret_free(tmp.database_url);
		tmp.database_url = copy;
	}
	if (check_required(&tmp, err, errlen) == -1)
		goto done;
	json_incref(root);
	tmp.source = root;
	*cfg = tmp;
	memset(&tmp, 0, sizeof(tmp));
	ret = 0;
done:
	config_free(&tmp);
	json_decref(root);
	return ret;
}

/* Frees a string that may hold a password, wiping it first. */
static void secret_free(char *s)
{
	if (s == NULL)
		return;
	explicit_bzero(s, strlen(s));
	free(s);
}

void config_free(struct config *cfg)
{
	size_t i;

	if (cfg == NULL)
		return;
	json_decref(cfg->source);
	free(cfg->listen_host);
	secret_free(cfg->database_url);
	secret_free(cfg->listen_database_url);
	free(cfg->master_key_file);
	config_strlist_free(cfg->cors_origins, cfg->n_cors_origins);
	for (i = 0; i < cfg->n_routes; i++)
		config_route_free(&cfg->routes[i]);
	free(cfg->routes);
	free(cfg->log_level);
	free(cfg->tls_cert_file);
	free(cfg->tls_key_file);
	free(cfg->admin_listen_host);
	config_strlist_free(cfg->metrics_operations, cfg->n_metrics_operations);
	memset(cfg, 0, sizeof(*cfg));
}

int config_reload(struct config *cfg, const struct config *old, const char *path, char *changed,
		  size_t changed_len, char *err, size_t errlen)
{
	struct config tmp = { 0 };
	json_t *root = NULL;
	size_t used = 0;
	int ret = -1;

	memset(cfg, 0, sizeof(*cfg));
	changed[0] = '\0';
	if ((root = config_parse_file(path, err, errlen)) == NULL)
		goto done;
	if (!json_is_object(root)) {
		config_fail(err, errlen, "top level must be a JSON object");
		goto done;
	}
	/* what only a restart changes keeps its value from the running config */
	for (size_t i = 0; i < IDEMD_ARRAY_LEN(config_keys); i++) {
		const struct cfg_key *k = &config_keys[i];
		json_t *was = old->source ? json_object_get(old->source, k->name) : NULL;
		json_t *now = json_object_get(root, k->name);
		if (k->flags & CFG_RELOAD)
			continue;
		if ((was == NULL) != (now == NULL) || (was != NULL && !json_equal(was, now))) {
			int n = snprintf(changed + used, changed_len - used, "%s%s",
					 used > 0 ? ", " : "", k->name);
			if (n > 0 && (size_t)n < changed_len - used)
				used += (size_t)n;
		}
		if (was != NULL)
			json_object_set(root, k->name, was);
		else
			json_object_del(root, k->name);
	}
	if (load_root(&tmp, root, err, errlen) == -1)
		goto done;
	/* the environment's overrides are not reloaded: the running values */
	free(tmp.listen_host);
	tmp.listen_host = old->listen_host ? strdup(old->listen_host) : NULL;
	tmp.listen_port = old->listen_port;
	secret_free(tmp.database_url);
	tmp.database_url = old->database_url ? strdup(old->database_url) : NULL;
	if ((old->listen_host != NULL && tmp.listen_host == NULL) ||
	    (old->database_url != NULL && tmp.database_url == NULL)) {
		config_fail(err, errlen, "out of memory");
		goto done;
	}
	if (check_required(&tmp, err, errlen) == -1)
		goto done;
	json_incref(root);
	tmp.source = root;
	*cfg = tmp;
	memset(&tmp, 0, sizeof(tmp));
	ret = 0;
done:
	config_free(&tmp);
	json_decref(root);
	return ret;
}
