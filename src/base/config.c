/*
 * Configuration loading and validation. Every key is one row of a table
 * (name, type, field, default, bounds, flags, extra check): config_keys for
 * the top level, route_keys (config_routes.c) for each element of "routes".
 * One walker, config_load_object() (config_set.c), rejects unknown keys,
 * applies the file value or the default (written as JSON text and run
 * through the same setter, so defaults obey the same rules) and reports
 * missing required keys; config_free_object() frees by the same table.
 * Environment overrides are applied by config_load() after the file.
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

#define KEY(...) CFG_KEY(struct config, __VA_ARGS__)
#define LIST(...) CFG_LIST(struct config, __VA_ARGS__)
#define ADDRESS(...) CFG_ADDRESS_KEY(struct config, __VA_ARGS__)
#define GIB 1073741824LL

/* name (= field), type, default, min, max, flags (CFG_RELOAD: SIGHUP may
 * change it), check; in this order they are read, and named by
 * config_reload */
static const struct cfg_key config_keys[] = {
	ADDRESS("listen", listen, "\"127.0.0.1:8080\"", 0),
	KEY(database_url, STRING, NULL, 0, 0, CFG_NONEMPTY | CFG_SECRET, NULL),
	KEY(pool_size, INT, "8", 1, 256, 0, NULL),
	KEY(threads, INT, NULL, 1, 256, 0, NULL), /* no default: one per core, load_root() */
	KEY(max_body_bytes, SIZE, "1048576", 1024, 64 * 1048576, CFG_RELOAD, NULL),
	KEY(sweep_interval_seconds, INT, "60", 1, 86400, 0, NULL),
	KEY(database_wait_seconds, INT, "60", 0, 3600, 0, NULL),
	KEY(fence_retention_seconds, INT, "604800", 0, 315360000, 0, NULL),
	KEY(master_key_file, STRING, "\"idemd.key\"", 0, 0, CFG_NONEMPTY, NULL),
	LIST(cors_origins, STRLIST, "[]", 256, CFG_RELOAD, config_check_origin),
	LIST(routes, ROUTES, "[]", 1024, CFG_RELOAD, NULL),
	KEY(max_connections, INT, "4096", 1, 100000, 0, NULL),
	KEY(connection_timeout_seconds, INT, "30", 1, 3600, 0, NULL),
	KEY(max_connections_per_ip, INT, "1024", 0, 100000, 0, NULL),
	KEY(max_inflight_body_bytes, SIZE, "67108864", 1048576, 64 * GIB, CFG_RELOAD, NULL),
	KEY(max_inflight_body_bytes_per_client, SIZE, "0", 0, 64 * GIB, CFG_RELOAD, NULL),
	KEY(max_inflight_body_bytes_per_tenant, SIZE, "0", 0, 64 * GIB, CFG_RELOAD, NULL),
	KEY(ipv6_client_prefix, INT, "64", 1, 128, CFG_RELOAD, NULL),
	KEY(max_listing_per_tenant, INT, "2", 0, 1000, CFG_RELOAD, NULL),
	KEY(request_timeout_seconds, INT, "30", 1, 3600, 0, NULL),
	KEY(issue_rate_per_second, DOUBLE, "0", 0, 1000000, CFG_RELOAD, NULL),
	KEY(issue_burst, INT, "100", 1, 1000000, CFG_RELOAD, NULL),
	KEY(claim_rate_per_second, DOUBLE, "0", 0, 1000000, CFG_RELOAD, NULL),
	KEY(claim_burst, INT, "1000", 1, 1000000, CFG_RELOAD, NULL),
	KEY(max_waiters, INT, "10000", 0, 1000000, 0, NULL),
	KEY(database_timeout_ms, LONG, "10000", 100, 600000, 0, NULL),
	KEY(forward_margin_ms, LONG, "1000", 100, 60000, CFG_RELOAD, NULL),
	KEY(prepared_statements, BOOL, "true", 0, 0, 0, NULL),
	KEY(log_level, STRING, "\"info\"", 0, 0, CFG_RELOAD, config_check_log_level),
	KEY(tls_cert_file, STRING, "null", 0, 0, CFG_NONEMPTY | CFG_NULLABLE, NULL),
	KEY(tls_key_file, STRING, "null", 0, 0, CFG_NONEMPTY | CFG_NULLABLE, NULL),
	KEY(listen_database_url, STRING, "null", 0, 0, CFG_NONEMPTY | CFG_NULLABLE | CFG_SECRET,
	    NULL),
	ADDRESS("admin_listen", admin_listen, "null", CFG_NULLABLE),
	LIST(metrics_operations, STRLIST, "[]", 64, 0, config_check_metrics_operation),
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

/* The environment's overrides of "listen" and "database_url" (config_load). */
static int env_overrides(struct config *tmp, const struct config *old, char *err, size_t errlen)
{
	const char *env;
	char *copy;

	(void)old;
	if ((env = getenv("IDEMD_LISTEN")) != NULL && env[0] != '\0' &&
	    config_store_address(&tmp->listen_host, &tmp->listen_port, env, "IDEMD_LISTEN", err,
				 errlen) == -1)
		return -1;
	if ((env = getenv("IDEMD_DATABASE_URL")) == NULL || env[0] == '\0')
		return 0;
	if ((copy = strdup(env)) == NULL)
		return config_fail(err, errlen, "out of memory");
	secret_free(tmp->database_url);
	tmp->database_url = copy;
	return 0;
}

/* The environment's overrides are not reloaded: OLD's running values of
 * what they set (config_reload). */
static int running_overrides(struct config *tmp, const struct config *old, char *err, size_t errlen)
{
	free(tmp->listen_host);
	tmp->listen_host = old->listen_host ? strdup(old->listen_host) : NULL;
	tmp->listen_port = old->listen_port;
	secret_free(tmp->database_url);
	tmp->database_url = old->database_url ? strdup(old->database_url) : NULL;
	if ((old->listen_host != NULL && tmp->listen_host == NULL) ||
	    (old->database_url != NULL && tmp->database_url == NULL))
		return config_fail(err, errlen, "out of memory");
	return 0;
}

/*
 * Zeroes *CFG, then fills it from ROOT (a reference this takes; NULL: it
 * could not be read, ERR is set): its keys, OVERRIDES (NULL: none) with
 * OLD, then what must hold as a whole; CFG keeps ROOT as its source. 0, or
 * -1 with ERR set and *CFG zeroed.
 */
static int config_build(struct config *cfg, json_t *root,
			int (*overrides)(struct config *, const struct config *, char *, size_t),
			const struct config *old, char *err, size_t errlen)
{
	struct config tmp = { 0 };
	int ret = -1;

	memset(cfg, 0, sizeof(*cfg));
	if (root != NULL && load_root(&tmp, root, err, errlen) == 0 &&
	    (overrides == NULL || overrides(&tmp, old, err, errlen) == 0) &&
	    check_required(&tmp, err, errlen) == 0) {
		tmp.source = json_incref(root);
		*cfg = tmp;
		memset(&tmp, 0, sizeof(tmp));
		ret = 0;
	}
	config_free(&tmp);
	json_decref(root);
	return ret;
}

int config_parse(struct config *cfg, const char *text, char *err, size_t errlen)
{
	json_error_t jerr;
	char etext[JSON_ERROR_TEXT_LENGTH];
	json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);

	if (root == NULL)
		config_fail(err, errlen, "invalid JSON at line %d, column %d: %s", jerr.line,
			    jerr.column, json_error_text(jerr.text, etext, sizeof(etext)));
	return config_build(cfg, root, NULL, NULL, err, errlen);
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
	json_t *root = path != NULL ? config_parse_file(path, err, errlen) : json_object();

	if (path == NULL && root == NULL)
		config_fail(err, errlen, "out of memory");
	return config_build(cfg, root, env_overrides, NULL, err, errlen);
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
	if (cfg == NULL)
		return;
	json_decref(cfg->source);
	config_free_object(cfg, config_keys, IDEMD_ARRAY_LEN(config_keys));
	memset(cfg, 0, sizeof(*cfg));
}

/* Sets in ROOT every key only a restart changes as it is in OLD's source;
 * lists in CHANGED those whose value in ROOT differed. */
static void keep_running(json_t *root, const struct config *old, char *changed, size_t changed_len)
{
	size_t used = 0;

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
}

int config_reload(struct config *cfg, const struct config *old, const char *path, char *changed,
		  size_t changed_len, char *err, size_t errlen)
{
	json_t *root = config_parse_file(path, err, errlen);

	changed[0] = '\0';
	if (root != NULL && !json_is_object(root)) {
		config_fail(err, errlen, "top level must be a JSON object");
		json_decref(root);
		root = NULL;
	}
	if (root != NULL)
		keep_running(root, old, changed, changed_len);
	return config_build(cfg, root, running_overrides, old, err, errlen);
}
