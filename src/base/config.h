/* Configuration: the JSON file (docs/configuration.md), environment overrides,
 * validation. */
#ifndef IDEMD_CONFIG_H
#define IDEMD_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

/* A config file larger than this is refused before it is parsed. */
#define CONFIG_MAX_FILE_BYTES (1024 * 1024)

/*
 * Ownership: every pointer below (strings, arrays, routes) is owned by the
 * struct config that holds it and is released by config_free(); callers
 * borrow them for as long as that config lives.
 */

struct config_route {
	char *method;	      /* "GET", "POST", "PUT", "PATCH" or "DELETE" */
	char *path;	      /* exact path, starts with '/', no query */
	char *tenant;	      /* tenant name */
	char *operation;      /* operation name, [a-z0-9._-]{1,64} */
	char *upstream;	      /* base URL, http:// or https:// */
	char **store_headers; /* lower-cased header names to store */
	size_t n_store_headers;
	long connect_timeout_ms; /* default 1000, 1..60000 */
	long timeout_ms;	 /* default 10000, 1..600000 */
	int client_if_match;	 /* default false: the client's If-Match is ignored */
	/* where a submit's key comes from: "token" (default), "header:NAME",
	 * "json:/POINTER" or "body" */
	char *key;
	char **scope_headers; /* lower-cased; default ["authorization", "cookie"] */
	size_t n_scope_headers;
	char *fingerprint;	       /* "auto" (default), "bytes", "json" or "none" */
	unsigned char release_on[600]; /* 1: that status releases the claim (default 5xx) */
	int trust_forwarded;	       /* default false: Forwarded, X-Real-IP, X-Forwarded-Host/
				  * -Proto/-Port from clients are dropped */
	/* seconds a stored 4xx answer is kept, when shorter than the
	 * operation's retention; -1 (default): 300 on derived-key routes,
	 * which anyone may call, the retention itself on token routes */
	int error_retention_seconds;
};

struct json_t;

struct config {
	/* the file's JSON as loaded (config_reload compares with it); owned */
	struct json_t *source;
	/*
	 * From "listen" (or IDEMD_LISTEN): "host:port" with an IPv4 literal or
	 * a host name (to be resolved), "[ipv6]:port" (listen_host holds the
	 * address without brackets), or ":port", which means every IPv4
	 * interface ("0.0.0.0"; write "[::]:port" for IPv6).
	 */
	char *listen_host;	    /* e.g. "127.0.0.1" */
	uint16_t listen_port;	    /* 1..65535 */
	char *database_url;	    /* required; secret (may hold a password) */
	int pool_size;		    /* default 8, 1..256 */
	int threads;		    /* default: one per core (at least 2), 1..256 */
	size_t max_body_bytes;	    /* default 1 MiB, 1024..64 MiB */
	int sweep_interval_seconds; /* default 60, 1..86400 */
	/* how long serve waits for an unreachable database at start: default
	 * 60, 0..3600 */
	int database_wait_seconds;
	/* how long an ended record's row stays as its fence (migrations/0011):
	 * default 604800 (7 days), 0..10 years */
	int fence_retention_seconds;
	char *master_key_file; /* default "idemd.key" */
	/*
	 * Exact origins as browsers send them: "scheme://host[:port]",
	 * lower-cased, default port (80, 443) removed. "*" is refused: every
	 * origin allowed to submit forms must be listed.
	 */
	char **cors_origins;
	size_t n_cors_origins;		/* at most 256 */
	struct config_route *routes;	/* method + path unique */
	size_t n_routes;		/* at most 1024 */
	int max_connections;		/* default 4096, 1..100000 */
	int connection_timeout_seconds; /* default 30, 1..3600 */
	int max_connections_per_ip;	/* default 1024, 0 (no cap)..100000 */
	size_t max_inflight_body_bytes; /* default 64 MiB, 1 MiB..64 GiB: bodies held at once */
	/* of those, what one client address may hold: default 0 = a quarter;
	 * behind a reverse proxy (every client one address) raise it */
	size_t max_inflight_body_bytes_per_client;
	/* and one tenant: default 0 = a half */
	size_t max_inflight_body_bytes_per_tenant;
	/* default 2, 0..1000 (0: no bound): listings and event pages one tenant
	 * runs at once (http_listing_take) */
	int max_listing_per_tenant;
	/* default 64, 1..128: the IPv6 prefix counted as one client (the
	 * per-client body share, the unknown-key lookups of one client) */
	int ipv6_client_prefix;
	int request_timeout_seconds;  /* default 30, 1..3600: a request arrives whole within it */
	double issue_rate_per_second; /* default 0 = unlimited, 0..1000000 */
	int issue_burst;	      /* default 100, 1..1000000 */
	/* per tenant: claims that reach the database (records made or taken
	 * over), gateway submits included; default 0 = unlimited */
	double claim_rate_per_second;
	int claim_burst;	  /* default 1000, 1..1000000 */
	int prepared_statements;  /* default true; false behind a transaction-pooling pgbouncer */
	long database_timeout_ms; /* default 10000, 100..600000: wait for one statement */
	/* default 1000, 100..60000: a gateway forward's deadline comes this long
	 * before its lease ends, time for the upstream's own queueing */
	long forward_margin_ms;
	int max_waiters;	   /* default 10000, 0..1000000: duplicates waiting at once */
	char *listen_database_url; /* NULL: database_url; secret; the waiters' LISTEN, which
				      * a transaction-pooling proxy cannot carry */
	char *log_level;	   /* "debug", "info" (default), "warn" or "error" */
	char *tls_cert_file;	   /* NULL = plain HTTP; set with tls_key_file */
	char *tls_key_file;
	/* "admin_listen": NULL (default) serves /metrics, /healthz and /readyz
	 * on the public listener; else only on this second, plain-HTTP one */
	char *admin_listen_host;
	uint16_t admin_listen_port;
	/* "tenant/operation" pairs (at most 64) whose metrics carry their own
	 * tenant and operation labels, beside the gateway routes' pairs; every
	 * other operation is counted under tenant="other",operation="other" */
	char **metrics_operations;
	size_t n_metrics_operations;
};

/*
 * Loads PATH (NULL: no file, defaults only) then applies IDEMD_LISTEN and
 * IDEMD_DATABASE_URL (an empty variable counts as unset). On error returns
 * -1 and writes a one-line message naming the offending key into ERR (size
 * ERRLEN; ERR may be NULL). CFG need not be initialised and its previous
 * content is not freed. CFG is filled on success and must be released with
 * config_free(); on failure it is left zeroed (nothing to free).
 */
int config_load(struct config *cfg, const char *path, char *err, size_t errlen) IDEMD_WUR;

/* Parses a JSON text: the rules of config_load without the file and the
 * environment (so "database_url" must be in TEXT). idemd loads files; this
 * is for the unit tests and the config fuzzer, which check those rules on
 * text without writing a file for each case. */
int config_parse(struct config *cfg, const char *text, char *err, size_t errlen) IDEMD_WUR;

/* Frees everything CFG owns and zeroes it; safe on a zeroed CFG and twice. */
void config_free(struct config *cfg);

/* SIGHUP: reads PATH again into *CFG, as config_load() does, except that
 * every key marked for restart only (no CFG_RELOAD in config.c's table:
 * listen, database_url, pool_size, threads, TLS files, admin_listen, ...)
 * and the environment's overrides keep OLD's values; CHANGED lists (", ")
 * those whose value in the file differs from what runs. 0, or -1 with ERR
 * set and *CFG empty: a config that fails as a whole changes nothing. */
int config_reload(struct config *cfg, const struct config *old, const char *path, char *changed,
		  size_t changed_len, char *err, size_t errlen) IDEMD_WUR;

/* The default of "threads": the number of online cores, at least 2. */
int config_default_threads(void);

#endif
