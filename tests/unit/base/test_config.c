/*
 * Unit tests for config.c: defaults, every key, every refusal with its exact
 * message, listen forms, routes, CORS origins, environment overrides and
 * config files. Most refusals are data-driven tables of (input, message).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"

#define DB "postgres://idemd@localhost/idemd"
#define ROUTE_OK \
	"{'method':'POST','path':'/orders','tenant':'shop'," \
	"'operation':'order.create','upstream':'http://127.0.0.1:9000'}"

struct err_case {
	const char *members; /* JSON object members, ' for " */
	const char *want;    /* the exact message */
};

static char tmpdir[256];

/* Returns a new string: S with every ' turned into ". */
static char *dq(const char *s)
{
	char *t = strdup(s), *p;

	assert_non_null(t);
	for (p = t; *p != '\0'; p++)
		if (*p == '\'')
			*p = '"';
	return t;
}

/* Returns a new JSON text: {"database_url": DB, MEMBERS}, ' for ". */
static char *with_db(const char *members)
{
	char *m = dq(members), *t;

	assert_true(asprintf(&t, "{\"database_url\":\"%s\"%s%s}", DB, m[0] != '\0' ? "," : "", m) >
		    0);
	free(m);
	return t;
}

static void parse_ok(struct config *cfg, const char *members)
{
	char err[512] = "", *text = with_db(members);

	int rc = config_parse(cfg, text, err, sizeof(err));

	if (rc != 0)
		print_error("unexpected error for %s: %s\n", text, err);
	free(text);
	if (rc != 0)
		fail();
}

/* Parses TEXT as is; expects failure with exactly WANT and a zeroed CFG. */
static void expect_parse_error(const char *text, const char *want)
{
	static const struct config zero;
	struct config cfg;
	char err[512] = "";

	memset(&cfg, 0xa5, sizeof(cfg));
	if (config_parse(&cfg, text, err, sizeof(err)) != -1) {
		print_error("accepted: %s\n", text);
		config_free(&cfg);
		fail();
	}
	if (strcmp(err, want) != 0) {
		print_error("input: %s\n  got: %s\n want: %s\n", text, err, want);
		fail();
	}
	assert_memory_equal(&cfg, &zero, sizeof(cfg));
}

static void run_err_cases(const struct err_case *cases, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		char *text = with_db(cases[i].members);

		expect_parse_error(text, cases[i].want);
		free(text);
	}
}

/* Writes CONTENT (LEN bytes) to tmpdir/NAME; returns the new path (see drop_file). */
static char *write_file(const char *name, const char *content, size_t len)
{
	char *path;
	FILE *f;

	assert_true(asprintf(&path, "%s/%s", tmpdir, name) > 0);
	assert_non_null(f = fopen(path, "wb"));
	assert_int_equal(fwrite(content, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
	return path;
}

static char *write_text(const char *name, const char *content)
{
	return write_file(name, content, strlen(content));
}

/* Removes and frees a path from write_file. */
static void drop_file(char *path)
{
	assert_int_equal(unlink(path), 0);
	free(path);
}

static int setup_all(void **state)
{
	const char *base = getenv("TMPDIR");

	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "%s/idemd-test-config-XXXXXX",
		 base != NULL && base[0] != '\0' ? base : "/tmp");
	if (mkdtemp(tmpdir) == NULL)
		return -1;
	unsetenv("IDEMD_LISTEN");
	unsetenv("IDEMD_DATABASE_URL");
	return 0;
}

static int teardown_all(void **state)
{
	(void)state;
	return rmdir(tmpdir);
}

/* Every test leaves the environment as it found it. */
static int clear_env(void **state)
{
	(void)state;
	unsetenv("IDEMD_LISTEN");
	unsetenv("IDEMD_DATABASE_URL");
	return 0;
}

static void test_defaults(void **state)
{
	struct config cfg;

	(void)state;
	parse_ok(&cfg, "");
	assert_string_equal(cfg.listen_host, "127.0.0.1");
	assert_int_equal(cfg.listen_port, 8080);
	assert_string_equal(cfg.database_url, DB);
	assert_int_equal(cfg.pool_size, 8);
	assert_int_equal(cfg.threads, config_default_threads());
	assert_true(cfg.threads >= 2);
	assert_int_equal(cfg.max_body_bytes, 1048576);
	assert_int_equal(cfg.sweep_interval_seconds, 60);
	assert_string_equal(cfg.master_key_file, "idemd.key");
	assert_null(cfg.cors_origins);
	assert_int_equal(cfg.n_cors_origins, 0);
	assert_null(cfg.routes);
	assert_int_equal(cfg.n_routes, 0);
	assert_int_equal(cfg.max_connections, 4096);
	assert_int_equal(cfg.connection_timeout_seconds, 30);
	assert_int_equal(cfg.max_connections_per_ip, 1024);
	assert_int_equal(cfg.max_inflight_body_bytes, 64 * 1024 * 1024);
	assert_int_equal(cfg.ipv6_client_prefix, 64);
	assert_int_equal(cfg.request_timeout_seconds, 30);
	assert_int_equal(cfg.database_timeout_ms, 10000);
	assert_int_equal(cfg.max_waiters, 10000);
	assert_null(cfg.listen_database_url);
	assert_true(cfg.issue_rate_per_second == 0.0);
	assert_int_equal(cfg.issue_burst, 100);
	assert_null(cfg.tls_cert_file);
	assert_null(cfg.tls_key_file);
	assert_string_equal(cfg.log_level, "info");
	config_free(&cfg);
}

static void test_every_key(void **state)
{
	struct config cfg;

	(void)state;
	parse_ok(&cfg, "'listen':'[::1]:9090','pool_size':1,'threads':256,"
		       "'max_body_bytes':67108864,'sweep_interval_seconds':86400,"
		       "'master_key_file':'/etc/idemd/master.key',"
		       "'cors_origins':['http://localhost:3000','https://shop.example'],"
		       "'routes':[" ROUTE_OK "],'max_connections':100000,"
		       "'connection_timeout_seconds':1,'issue_rate_per_second':2.5,"
		       "'max_connections_per_ip':0,'max_inflight_body_bytes':68719476736,"
		       "'request_timeout_seconds':3600,'ipv6_client_prefix':128,"
		       "'issue_burst':1000000,'tls_cert_file':'c.pem','tls_key_file':'k.pem'");
	assert_string_equal(cfg.listen_host, "::1");
	assert_int_equal(cfg.listen_port, 9090);
	assert_int_equal(cfg.pool_size, 1);
	assert_int_equal(cfg.threads, 256);
	assert_int_equal(cfg.max_body_bytes, 67108864);
	assert_int_equal(cfg.sweep_interval_seconds, 86400);
	assert_string_equal(cfg.master_key_file, "/etc/idemd/master.key");
	assert_int_equal(cfg.n_cors_origins, 2);
	assert_string_equal(cfg.cors_origins[0], "http://localhost:3000");
	assert_string_equal(cfg.cors_origins[1], "https://shop.example");
	assert_int_equal(cfg.n_routes, 1);
	assert_int_equal(cfg.max_connections, 100000);
	assert_int_equal(cfg.connection_timeout_seconds, 1);
	assert_int_equal(cfg.max_connections_per_ip, 0);
	assert_true(cfg.max_inflight_body_bytes == (size_t)68719476736ULL);
	assert_int_equal(cfg.request_timeout_seconds, 3600);
	assert_int_equal(cfg.ipv6_client_prefix, 128);
	assert_true(cfg.issue_rate_per_second == 2.5);
	assert_int_equal(cfg.issue_burst, 1000000);
	assert_string_equal(cfg.tls_cert_file, "c.pem");
	assert_string_equal(cfg.tls_key_file, "k.pem");
	config_free(&cfg);

	/* An integer is a number too; null means unset. */
	parse_ok(&cfg, "'issue_rate_per_second':7,'tls_cert_file':null,'tls_key_file':null");
	assert_true(cfg.issue_rate_per_second == 7.0);
	assert_null(cfg.tls_cert_file);
	config_free(&cfg);
}

static void test_unknown_and_types(void **state)
{
	static const struct err_case cases[] = {
		{ "'foo':1", "config: unknown key \"foo\"" },
		{ "'Pool_size':8", "config: unknown key \"Pool_size\"" },
		{ "'a\\nb\\\"c':1", "config: unknown key \"a?b?c\"" },
		{ "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx':1",
		  "config: unknown key \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...\"" },
		{ "'pool_size':'8'", "config: \"pool_size\" must be an integer" },
		{ "'pool_size':8.0", "config: \"pool_size\" must be an integer" },
		{ "'threads':true", "config: \"threads\" must be an integer" },
		{ "'max_body_bytes':null", "config: \"max_body_bytes\" must be an integer" },
		{ "'sweep_interval_seconds':[]",
		  "config: \"sweep_interval_seconds\" must be an integer" },
		{ "'max_connections':{}", "config: \"max_connections\" must be an integer" },
		{ "'connection_timeout_seconds':'30'",
		  "config: \"connection_timeout_seconds\" must be an integer" },
		{ "'issue_burst':1.5", "config: \"issue_burst\" must be an integer" },
		{ "'issue_rate_per_second':'1'",
		  "config: \"issue_rate_per_second\" must be a number" },
		{ "'listen':8080", "config: \"listen\" must be a string" },
		{ "'master_key_file':null", "config: \"master_key_file\" must be a string" },
		{ "'master_key_file':''", "config: \"master_key_file\" must not be empty" },
		{ "'tls_key_file':1", "config: \"tls_key_file\" must be a string or null" },
		{ "'tls_cert_file':''", "config: \"tls_cert_file\" must not be empty" },
		{ "'tls_cert_file':'c.pem'",
		  "config: \"tls_cert_file\" and \"tls_key_file\" must be set together" },
		{ "'tls_key_file':'k.pem'",
		  "config: \"tls_cert_file\" and \"tls_key_file\" must be set together" },
		{ "'cors_origins':'http://a'",
		  "config: \"cors_origins\" must be an array of strings" },
		{ "'routes':{}", "config: \"routes\" must be an array of objects" },
		{ "'routes':[1]", "config: \"routes[0]\" must be an object" },
	};

	(void)state;
	run_err_cases(cases, IDEMD_ARRAY_LEN(cases));
	expect_parse_error("{\"database_url\":5}", "config: \"database_url\" must be a string");
	expect_parse_error("{\"database_url\":\"\"}", "config: \"database_url\" must not be empty");
	expect_parse_error("[]", "config: top level must be a JSON object");
	expect_parse_error("[{\"database_url\":\"x\"}]", "config: top level must be a JSON object");
}

static void test_ranges(void **state)
{
	static const struct err_case cases[] = {
		{ "'pool_size':0", "config: \"pool_size\" must be between 1 and 256" },
		{ "'pool_size':257", "config: \"pool_size\" must be between 1 and 256" },
		{ "'pool_size':-9223372036854775808",
		  "config: \"pool_size\" must be between 1 and 256" },
		{ "'threads':0", "config: \"threads\" must be between 1 and 256" },
		{ "'threads':257", "config: \"threads\" must be between 1 and 256" },
		{ "'max_body_bytes':1023",
		  "config: \"max_body_bytes\" must be between 1024 and 67108864" },
		{ "'max_body_bytes':67108865",
		  "config: \"max_body_bytes\" must be between 1024 and 67108864" },
		{ "'sweep_interval_seconds':0",
		  "config: \"sweep_interval_seconds\" must be between 1 and 86400" },
		{ "'sweep_interval_seconds':86401",
		  "config: \"sweep_interval_seconds\" must be between 1 and 86400" },
		{ "'max_connections':0",
		  "config: \"max_connections\" must be between 1 and 100000" },
		{ "'max_connections':100001",
		  "config: \"max_connections\" must be between 1 and 100000" },
		{ "'connection_timeout_seconds':0",
		  "config: \"connection_timeout_seconds\" must be between 1 and 3600" },
		{ "'max_waiters':-1", "config: \"max_waiters\" must be between 0 and 1000000" },
		{ "'database_timeout_ms':99",
		  "config: \"database_timeout_ms\" must be between 100 and 600000" },
		{ "'request_timeout_seconds':0",
		  "config: \"request_timeout_seconds\" must be between 1 and 3600" },
		{ "'max_connections_per_ip':-1",
		  "config: \"max_connections_per_ip\" must be between 0 and 100000" },
		{ "'max_inflight_body_bytes':1048575",
		  "config: \"max_inflight_body_bytes\" must be between 1048576 and 68719476736" },
		{ "'ipv6_client_prefix':0",
		  "config: \"ipv6_client_prefix\" must be between 1 and 128" },
		{ "'ipv6_client_prefix':129",
		  "config: \"ipv6_client_prefix\" must be between 1 and 128" },
		{ "'connection_timeout_seconds':3601",
		  "config: \"connection_timeout_seconds\" must be between 1 and 3600" },
		{ "'issue_rate_per_second':-0.5",
		  "config: \"issue_rate_per_second\" must be between 0 and 1000000" },
		{ "'issue_rate_per_second':1000000.5",
		  "config: \"issue_rate_per_second\" must be between 0 and 1000000" },
		{ "'issue_burst':0", "config: \"issue_burst\" must be between 1 and 1000000" },
		{ "'issue_burst':1000001",
		  "config: \"issue_burst\" must be between 1 and 1000000" },
		{ "'log_level':'verbose'",
		  "config: \"log_level\" must be \"debug\", \"info\", \"warn\" or \"error\"" },
		{ "'log_level':'INFO'",
		  "config: \"log_level\" must be \"debug\", \"info\", \"warn\" or \"error\"" },
		{ "'log_level':3", "config: \"log_level\" must be a string" },
	};
	struct config cfg;

	(void)state;
	run_err_cases(cases, IDEMD_ARRAY_LEN(cases));
	parse_ok(
		&cfg,
		"'pool_size':256,'threads':1,'max_body_bytes':1024,"
		"'sweep_interval_seconds':1,'max_connections':1,"
		"'connection_timeout_seconds':3600,'issue_rate_per_second':1000000,'issue_burst':1");
	assert_int_equal(cfg.pool_size, 256);
	assert_int_equal(cfg.max_body_bytes, 1024);
	config_free(&cfg);
}

/* log_level takes each of the four names. */
static void test_log_level(void **state)
{
	static const char *const names[] = { "debug", "info", "warn", "error" };
	struct config cfg;
	char members[64];
	size_t i;

	(void)state;
	for (i = 0; i < IDEMD_ARRAY_LEN(names); i++) {
		snprintf(members, sizeof(members), "'log_level':'%s'", names[i]);
		parse_ok(&cfg, members);
		assert_string_equal(cfg.log_level, names[i]);
		config_free(&cfg);
	}
}

static void test_database_url_required(void **state)
{
	(void)state;
	expect_parse_error("{}",
			   "config: \"database_url\" is required (or set IDEMD_DATABASE_URL)");
	expect_parse_error("{\"pool_size\":4}",
			   "config: \"database_url\" is required (or set IDEMD_DATABASE_URL)");
	/* config_parse does not read the environment. */
	setenv("IDEMD_DATABASE_URL", DB, 1);
	expect_parse_error("{}",
			   "config: \"database_url\" is required (or set IDEMD_DATABASE_URL)");
}

static void test_invalid_json(void **state)
{
	struct config cfg;
	char err[512];

	(void)state;
	expect_parse_error("{\n\"pool_size\": 1,\n}",
			   "config: invalid JSON at line 3, column 1: string or '}' expected");
	expect_parse_error("{\"database_url\":\"x\",\"database_url\":\"y\"}",
			   "config: invalid JSON at line 1, column 34: duplicate object key");
	expect_parse_error("{\"pool_size\":99999999999999999999}",
			   "config: invalid JSON at line 1, column 33: too big integer");
	expect_parse_error("", "config: invalid JSON at line 1, column 0: "
			       "'[' or '{' expected near end of file");
	/* Errors never quote the input: a password in database_url stays out. */
	assert_int_equal(config_parse(&cfg,
				      "{\"database_url\":\"postgres://u:hunter2@db\xd1/idemd\"}",
				      err, sizeof(err)),
			 -1);
	assert_null(strstr(err, "hunter2"));
	assert_int_equal(config_parse(&cfg, "{\"database_url\":\"password=hunter2\\q\"}", err,
				      sizeof(err)),
			 -1);
	assert_null(strstr(err, "hunter2"));
	assert_null(strchr(err, '\n'));
	/* A NULL or tiny ERR buffer is allowed. */
	assert_int_equal(config_parse(&cfg, "{", NULL, 0), -1);
	assert_int_equal(config_parse(&cfg, "{", err, 4), -1);
	assert_string_equal(err, "con");
}

static void test_listen_forms(void **state)
{
	static const struct {
		const char *listen, *host;
		uint16_t port;
	} ok[] = {
		{ "127.0.0.1:8080", "127.0.0.1", 8080 },
		{ "0.0.0.0:1", "0.0.0.0", 1 },
		{ "localhost:65535", "localhost", 65535 },
		{ "db-1.internal:80", "db-1.internal", 80 },
		{ "[::1]:8080", "::1", 8080 },
		{ "[::]:80", "::", 80 },
		{ "[fe80::1:2]:443", "fe80::1:2", 443 },
		{ ":9000", "0.0.0.0", 9000 },
		{ "10.0.0.1:08080", "10.0.0.1", 8080 },
	};
	static const struct err_case bad[] = {
		{ "'listen':''",
		  "config: \"listen\" must be \"host:port\", \"[ipv6]:port\" or \":port\"" },
		{ "'listen':'127.0.0.1'",
		  "config: \"listen\" must be \"host:port\", \"[ipv6]:port\" or \":port\"" },
		{ "'listen':'[::1]'",
		  "config: \"listen\" must be \"host:port\", \"[ipv6]:port\" or \":port\"" },
		{ "'listen':'[::1]8080'",
		  "config: \"listen\" must be \"host:port\", \"[ipv6]:port\" or \":port\"" },
		{ "'listen':'127.0.0.1:0'",
		  "config: \"listen\" port must be a number between 1 and 65535" },
		{ "'listen':'127.0.0.1:65536'",
		  "config: \"listen\" port must be a number between 1 and 65535" },
		{ "'listen':'127.0.0.1:'",
		  "config: \"listen\" port must be a number between 1 and 65535" },
		{ "'listen':':'", "config: \"listen\" port must be a number between 1 and 65535" },
		{ "'listen':'127.0.0.1:80a'",
		  "config: \"listen\" port must be a number between 1 and 65535" },
		{ "'listen':'127.0.0.1:-1'",
		  "config: \"listen\" port must be a number between 1 and 65535" },
		{ "'listen':'127.0.0.1:+80'",
		  "config: \"listen\" port must be a number between 1 and 65535" },
		{ "'listen':'127.0.0.1:100000'",
		  "config: \"listen\" port must be a number between 1 and 65535" },
		{ "'listen':'127.0.0.1: 80'",
		  "config: \"listen\" port must be a number between 1 and 65535" },
		{ "'listen':'::1:8080'",
		  "config: \"listen\" must put an IPv6 address in brackets, e.g. \"[::1]:8080\"" },
		{ "'listen':'[nothex]:80'", "config: \"listen\" has an invalid IPv6 address" },
		{ "'listen':'[]:80'", "config: \"listen\" has an invalid IPv6 address" },
		{ "'listen':'[127.0.0.1]:80'", "config: \"listen\" has an invalid IPv6 address" },
		{ "'listen':'999.1.1.1:80'", "config: \"listen\" has an invalid host" },
		{ "'listen':'1.2.3:80'", "config: \"listen\" has an invalid host" },
		{ "'listen':'bad_host:80'", "config: \"listen\" has an invalid host" },
		{ "'listen':'a b:80'", "config: \"listen\" has an invalid host" },
		{ "'listen':'-x:80'", "config: \"listen\" has an invalid host" },
		{ "'listen':'*:80'", "config: \"listen\" has an invalid host" },
	};
	struct config cfg;
	size_t i;

	(void)state;
	for (i = 0; i < IDEMD_ARRAY_LEN(ok); i++) {
		char members[128];

		snprintf(members, sizeof(members), "'listen':'%s'", ok[i].listen);
		parse_ok(&cfg, members);
		assert_string_equal(cfg.listen_host, ok[i].host);
		assert_int_equal(cfg.listen_port, ok[i].port);
		config_free(&cfg);
	}
	run_err_cases(bad, IDEMD_ARRAY_LEN(bad));
}

static void test_env_overrides(void **state)
{
	struct config cfg;
	char err[512] = "", *path;

	(void)state;
	path = write_text("env.json", "{\"listen\":\"127.0.0.1:1\",\"database_url\":\"file-url\"}");

	assert_int_equal(config_load(&cfg, path, err, sizeof(err)), 0);
	assert_string_equal(cfg.listen_host, "127.0.0.1");
	assert_int_equal(cfg.listen_port, 1);
	assert_string_equal(cfg.database_url, "file-url");
	config_free(&cfg);

	setenv("IDEMD_LISTEN", "[::]:7000", 1);
	setenv("IDEMD_DATABASE_URL", "env-url", 1);
	assert_int_equal(config_load(&cfg, path, err, sizeof(err)), 0);
	assert_string_equal(cfg.listen_host, "::");
	assert_int_equal(cfg.listen_port, 7000);
	assert_string_equal(cfg.database_url, "env-url");
	config_free(&cfg);

	/* Empty variables count as unset. */
	setenv("IDEMD_LISTEN", "", 1);
	setenv("IDEMD_DATABASE_URL", "", 1);
	assert_int_equal(config_load(&cfg, path, err, sizeof(err)), 0);
	assert_int_equal(cfg.listen_port, 1);
	assert_string_equal(cfg.database_url, "file-url");
	config_free(&cfg);

	/* No file: defaults, with the database from the environment. */
	setenv("IDEMD_DATABASE_URL", "env-only", 1);
	setenv("IDEMD_LISTEN", ":8081", 1);
	assert_int_equal(config_load(&cfg, NULL, err, sizeof(err)), 0);
	assert_string_equal(cfg.database_url, "env-only");
	assert_string_equal(cfg.listen_host, "0.0.0.0");
	assert_int_equal(cfg.listen_port, 8081);
	assert_int_equal(cfg.pool_size, 8);
	assert_string_equal(cfg.master_key_file, "idemd.key");
	config_free(&cfg);

	/* An invalid IDEMD_LISTEN is an error naming it, even over a valid file. */
	setenv("IDEMD_LISTEN", "127.0.0.1:99999", 1);
	memset(&cfg, 0xa5, sizeof(cfg));
	assert_int_equal(config_load(&cfg, path, err, sizeof(err)), -1);
	assert_string_equal(err, "config: IDEMD_LISTEN port must be a number between 1 and 65535");
	assert_null(cfg.listen_host);
	assert_null(cfg.database_url);
	setenv("IDEMD_LISTEN", "localhost", 1);
	assert_int_equal(config_load(&cfg, NULL, err, sizeof(err)), -1);
	assert_string_equal(err, "config: IDEMD_LISTEN must be \"host:port\", "
				 "\"[ipv6]:port\" or \":port\"");

	/* No file and no variable: the database is still required. */
	unsetenv("IDEMD_LISTEN");
	unsetenv("IDEMD_DATABASE_URL");
	assert_int_equal(config_load(&cfg, NULL, err, sizeof(err)), -1);
	assert_string_equal(err,
			    "config: \"database_url\" is required (or set IDEMD_DATABASE_URL)");
	drop_file(path);
}

static void test_routes_valid(void **state)
{
	struct config cfg;
	const struct config_route *r;

	(void)state;
	parse_ok(&cfg,
		 "'routes':["
		 "{'method':'POST','path':'/orders','tenant':'shop',"
		 "'operation':'order.create','upstream':'https://api.shop.example/v2',"
		 "'store_headers':['Location','X-Order-Id','etag'],"
		 "'connect_timeout_ms':60000,'timeout_ms':600000,"
		 "'client_if_match':true,'trust_forwarded':true,'key':'header:X-GitHub-Delivery',"
		 "'scope_headers':['Authorization','X-Tenant'],'fingerprint':'json',"
		 "'release_on':['5xx',429,'4xx']},"
		 "{'method':'PUT','path':'/orders','tenant':'shop',"
		 "'operation':'order.replace_v2-x','upstream':'http://127.0.0.1:9000'},"
		 "{'method':'DELETE','path':'/v10/a~b/%41','tenant':'other tenant',"
		 "'operation':'a','upstream':'http://[::1]:9000/base?x=1',"
		 "'connect_timeout_ms':1,'timeout_ms':1}]");
	assert_int_equal(cfg.n_routes, 3);
	r = &cfg.routes[0];
	assert_string_equal(r->method, "POST");
	assert_string_equal(r->path, "/orders");
	assert_string_equal(r->tenant, "shop");
	assert_string_equal(r->operation, "order.create");
	assert_string_equal(r->upstream, "https://api.shop.example/v2");
	assert_int_equal(r->n_store_headers, 3);
	assert_string_equal(r->store_headers[0], "location");
	assert_string_equal(r->store_headers[1], "x-order-id");
	assert_string_equal(r->store_headers[2], "etag");
	assert_int_equal(r->connect_timeout_ms, 60000);
	assert_int_equal(r->timeout_ms, 600000);
	assert_true(r->client_if_match);
	assert_true(r->trust_forwarded);
	assert_string_equal(r->key, "header:X-GitHub-Delivery");
	assert_int_equal(r->n_scope_headers, 2);
	assert_string_equal(r->scope_headers[0], "authorization");
	assert_string_equal(r->scope_headers[1], "x-tenant");
	assert_string_equal(r->fingerprint, "json");
	assert_true(r->release_on[429] && r->release_on[400] && r->release_on[599]);
	assert_false(r->release_on[200] || r->release_on[399]);
	r = &cfg.routes[1];
	assert_false(r->client_if_match);
	assert_false(r->trust_forwarded);
	assert_string_equal(r->key, "token");
	assert_int_equal(r->n_scope_headers, 2);
	assert_string_equal(r->scope_headers[0], "authorization");
	assert_string_equal(r->scope_headers[1], "cookie");
	assert_string_equal(r->fingerprint, "auto");
	assert_true(r->release_on[500] && r->release_on[599]);
	assert_false(r->release_on[499] || r->release_on[429] || r->release_on[200]);
	assert_string_equal(r->method, "PUT");
	assert_null(r->store_headers);
	assert_int_equal(r->n_store_headers, 0);
	assert_int_equal(r->connect_timeout_ms, 1000);
	assert_int_equal(r->timeout_ms, 10000);
	r = &cfg.routes[2];
	assert_string_equal(r->path, "/v10/a~b/%41");
	assert_int_equal(r->connect_timeout_ms, 1);
	config_free(&cfg);
}

/*
 * Builds a config whose only route is ROUTE_OK with KEY set to VALUE (JSON,
 * ' for "), or removed when VALUE is NULL, and expects WANT.
 */
static void expect_route_error(const char *key, const char *value, const char *want)
{
	char *route_text = dq(ROUTE_OK), *text;
	json_t *root, *route;

	route = json_loads(route_text, 0, NULL);
	assert_non_null(route);
	free(route_text);
	if (value == NULL) {
		assert_int_equal(json_object_del(route, key), 0);
	} else {
		char *v = dq(value);
		json_t *jv = json_loads(v, JSON_DECODE_ANY, NULL);

		assert_non_null(jv);
		free(v);
		assert_int_equal(json_object_set_new(route, key, jv), 0);
	}
	root = json_pack("{s:s, s:[o]}", "database_url", DB, "routes", route);
	assert_non_null(root);
	text = json_dumps(root, 0);
	assert_non_null(text);
	expect_parse_error(text, want);
	free(text);
	json_decref(root);
}

static void test_routes_invalid(void **state)
{
	static const struct {
		const char *key, *value, *want;
	} cases[] = {
		{ "method", NULL, "config: \"routes[0].method\" is required" },
		{ "path", NULL, "config: \"routes[0].path\" is required" },
		{ "tenant", NULL, "config: \"routes[0].tenant\" is required" },
		{ "operation", NULL, "config: \"routes[0].operation\" is required" },
		{ "upstream", NULL, "config: \"routes[0].upstream\" is required" },
		{ "foo", "1", "config: unknown key \"routes[0].foo\"" },
		{ "method", "'post'",
		  "config: \"routes[0].method\" must be one of GET, POST, PUT, PATCH, DELETE" },
		{ "method", "'HEAD'",
		  "config: \"routes[0].method\" must be one of GET, POST, PUT, PATCH, DELETE" },
		{ "method", "1", "config: \"routes[0].method\" must be a string" },
		{ "path", "''", "config: \"routes[0].path\" must start with '/'" },
		{ "path", "'orders'", "config: \"routes[0].path\" must start with '/'" },
		{ "path", "'/a b'",
		  "config: \"routes[0].path\" must not contain whitespace, control or non-ASCII characters" },
		{ "path", "'/a\\tb'",
		  "config: \"routes[0].path\" must not contain whitespace, control or non-ASCII characters" },
		{ "path", "'/caf\\u00e9'",
		  "config: \"routes[0].path\" must not contain whitespace, control or non-ASCII characters" },
		{ "path", "'/orders?x=1'",
		  "config: \"routes[0].path\" must be an exact path without '?' or '#'" },
		{ "path", "'/orders#x'",
		  "config: \"routes[0].path\" must be an exact path without '?' or '#'" },
		{ "path", "'/v1'",
		  "config: \"routes[0].path\" must not be under /v1/ (reserved for the API)" },
		{ "path", "'/v1/'",
		  "config: \"routes[0].path\" must not be under /v1/ (reserved for the API)" },
		{ "path", "'/v1/tokens'",
		  "config: \"routes[0].path\" must not be under /v1/ (reserved for the API)" },
		{ "path", "'/healthz'",
		  "config: \"routes[0].path\" is reserved (/healthz, /readyz, /metrics)" },
		{ "path", "'/readyz'",
		  "config: \"routes[0].path\" is reserved (/healthz, /readyz, /metrics)" },
		{ "path", "'/metrics'",
		  "config: \"routes[0].path\" is reserved (/healthz, /readyz, /metrics)" },
		{ "tenant", "''", "config: \"routes[0].tenant\" must not be empty" },
		{ "tenant", "null", "config: \"routes[0].tenant\" must be a string" },
		{ "operation", "''",
		  "config: \"routes[0].operation\" must match [a-z0-9._-]{1,64}" },
		{ "operation", "'Order.create'",
		  "config: \"routes[0].operation\" must match [a-z0-9._-]{1,64}" },
		{ "operation", "'order create'",
		  "config: \"routes[0].operation\" must match [a-z0-9._-]{1,64}" },
		{ "operation", "'order/create'",
		  "config: \"routes[0].operation\" must match [a-z0-9._-]{1,64}" },
		{ "operation",
		  "'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'",
		  "config: \"routes[0].operation\" must match [a-z0-9._-]{1,64}" },
		{ "upstream", "'ftp://x'",
		  "config: \"routes[0].upstream\" must be an http:// or https:// URL" },
		{ "upstream", "'127.0.0.1:9000'",
		  "config: \"routes[0].upstream\" must be an http:// or https:// URL" },
		{ "upstream", "'HTTP://x'",
		  "config: \"routes[0].upstream\" must be an http:// or https:// URL" },
		{ "upstream", "''",
		  "config: \"routes[0].upstream\" must be an http:// or https:// URL" },
		{ "upstream", "'http://'",
		  "config: \"routes[0].upstream\" must name a host, e.g. \"http://127.0.0.1:9000\"" },
		{ "upstream", "'https:///x'",
		  "config: \"routes[0].upstream\" must name a host, e.g. \"http://127.0.0.1:9000\"" },
		{ "upstream", "'http://:80'",
		  "config: \"routes[0].upstream\" must name a host, e.g. \"http://127.0.0.1:9000\"" },
		{ "upstream", "'http://a b'",
		  "config: \"routes[0].upstream\" must not contain whitespace, control or non-ASCII characters" },
		{ "upstream", "'http://x/#frag'",
		  "config: \"routes[0].upstream\" must not have a fragment ('#')" },
		{ "store_headers", "'location'",
		  "config: \"routes[0].store_headers\" must be an array of strings" },
		{ "store_headers", "[1]",
		  "config: \"routes[0].store_headers[0]\" must be a string" },
		{ "store_headers", "['etag','']",
		  "config: \"routes[0].store_headers[1]\" must not be empty" },
		{ "store_headers", "['bad header']",
		  "config: \"routes[0].store_headers[0]\" must be a header name (letters, digits, !#$%&'*+-.^_`|~)" },
		{ "store_headers", "['a:b']",
		  "config: \"routes[0].store_headers[0]\" must be a header name (letters, digits, !#$%&'*+-.^_`|~)" },
		{ "store_headers", "['Set-Cookie']",
		  "config: \"routes[0].store_headers[0]\" names set-cookie, which is never stored (hop-by-hop, framing, Access-Control-*, Set-Cookie, or set by idemd itself)" },
		{ "store_headers", "['content-length']",
		  "config: \"routes[0].store_headers[0]\" names content-length, which is never stored (hop-by-hop, framing, Access-Control-*, Set-Cookie, or set by idemd itself)" },
		{ "store_headers", "['etag','Transfer-Encoding']",
		  "config: \"routes[0].store_headers[1]\" names transfer-encoding, which is never stored (hop-by-hop, framing, Access-Control-*, Set-Cookie, or set by idemd itself)" },
		{ "store_headers", "['access-control-allow-origin']",
		  "config: \"routes[0].store_headers[0]\" names access-control-allow-origin, which is never stored (hop-by-hop, framing, Access-Control-*, Set-Cookie, or set by idemd itself)" },
		{ "store_headers", "['connection']",
		  "config: \"routes[0].store_headers[0]\" names connection, which is never stored (hop-by-hop, framing, Access-Control-*, Set-Cookie, or set by idemd itself)" },
		{ "key", "'header:'",
		  "config: \"routes[0].key\" must be \"token\", \"body\", \"header:NAME\" or \"json:/POINTER\"" },
		{ "key", "'header:a b'",
		  "config: \"routes[0].key\" must be \"token\", \"body\", \"header:NAME\" or \"json:/POINTER\"" },
		{ "key", "'json:id'",
		  "config: \"routes[0].key\" must be \"token\", \"body\", \"header:NAME\" or \"json:/POINTER\"" },
		{ "key", "'cookie'",
		  "config: \"routes[0].key\" must be \"token\", \"body\", \"header:NAME\" or \"json:/POINTER\"" },
		{ "scope_headers", "['bad name']",
		  "config: \"routes[0].scope_headers[0]\" must be a header name" },
		{ "fingerprint", "'md5'",
		  "config: \"routes[0].fingerprint\" must be \"auto\", \"bytes\", \"json\" or \"none\"" },
		{ "release_on", "'5xx'",
		  "config: \"routes[0].release_on\" must be an array of statuses and classes like [\"5xx\", 429]" },
		{ "release_on", "[99]",
		  "config: \"routes[0].release_on[0]\" must be a status from 100 to 599 or a class \"1xx\" to \"5xx\"" },
		{ "release_on", "['6xx']",
		  "config: \"routes[0].release_on[0]\" must be a status from 100 to 599 or a class \"1xx\" to \"5xx\"" },
		{ "client_if_match", "'yes'",
		  "config: \"routes[0].client_if_match\" must be true or false" },
		{ "store_headers", "['X-A','x-a']",
		  "config: \"routes[0].store_headers[1]\" duplicates \"routes[0].store_headers[0]\"" },
		{ "connect_timeout_ms", "0",
		  "config: \"routes[0].connect_timeout_ms\" must be between 1 and 60000" },
		{ "connect_timeout_ms", "60001",
		  "config: \"routes[0].connect_timeout_ms\" must be between 1 and 60000" },
		{ "connect_timeout_ms", "'1000'",
		  "config: \"routes[0].connect_timeout_ms\" must be an integer" },
		{ "timeout_ms", "0",
		  "config: \"routes[0].timeout_ms\" must be between 1 and 600000" },
		{ "timeout_ms", "600001",
		  "config: \"routes[0].timeout_ms\" must be between 1 and 600000" },
		{ "timeout_ms", "1.5", "config: \"routes[0].timeout_ms\" must be an integer" },
	};
	size_t i;

	(void)state;
	for (i = 0; i < IDEMD_ARRAY_LEN(cases); i++)
		expect_route_error(cases[i].key, cases[i].value, cases[i].want);
}

static void test_routes_limits(void **state)
{
	static const struct err_case cases[] = {
		{ "'routes':[" ROUTE_OK "," ROUTE_OK "]",
		  "config: \"routes[1]\" duplicates \"routes[0]\" (POST /orders)" },
		{ "'routes':[" ROUTE_OK ",{'method':'GET'}]",
		  "config: \"routes[1].path\" is required" },
		{ "'routes':[" ROUTE_OK ",{'bar':1}]", "config: unknown key \"routes[1].bar\"" },
	};
	char path[1100], members[1300], *text;
	struct config cfg;
	json_t *root, *routes, *headers;
	size_t i;

	(void)state;
	run_err_cases(cases, IDEMD_ARRAY_LEN(cases));

	/* Path and operation at their longest. */
	path[0] = '/';
	memset(path + 1, 'p', 1023);
	path[1024] = '\0';
	snprintf(members, sizeof(members),
		 "'routes':[{'method':'GET','path':'%s',"
		 "'tenant':'t','operation':'%.64s','upstream':'http://u'}]",
		 path, "oooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooo");
	parse_ok(&cfg, members);
	assert_int_equal(strlen(cfg.routes[0].path), 1024);
	assert_int_equal(strlen(cfg.routes[0].operation), 64);
	config_free(&cfg);
	snprintf(members, sizeof(members), "'%sp'", path);
	expect_route_error("path", members,
			   "config: \"routes[0].path\" must be at most 1024 characters");

	/* At most 64 stored headers and 1024 routes. */
	root = json_pack("{s:s, s:[]}", "database_url", DB, "routes");
	routes = json_object_get(root, "routes");
	for (i = 0; i < 1025; i++) {
		char p[32];

		snprintf(p, sizeof(p), "/r%zu", i);
		json_array_append_new(routes, json_pack("{s:s,s:s,s:s,s:s,s:s}", "method", "POST",
							"path", p, "tenant", "t", "operation", "o",
							"upstream", "http://u"));
	}
	text = json_dumps(root, 0);
	expect_parse_error(text, "config: \"routes\" must have at most 1024 entries");
	free(text);
	json_array_remove(routes, 1024);
	text = json_dumps(root, 0);
	assert_int_equal(config_parse(&cfg, text, NULL, 0), 0);
	assert_int_equal(cfg.n_routes, 1024);
	config_free(&cfg);
	free(text);

	headers = json_array();
	for (i = 0; i < 65; i++) {
		char h[16];

		snprintf(h, sizeof(h), "x-h%zu", i);
		json_array_append_new(headers, json_string(h));
	}
	json_object_set_new(json_array_get(routes, 0), "store_headers", headers);
	text = json_dumps(root, 0);
	expect_parse_error(text,
			   "config: \"routes[0].store_headers\" must have at most 64 entries");
	free(text);
	json_decref(root);
}

static void test_cors_origins(void **state)
{
	static const struct err_case bad[] = {
		{ "'cors_origins':['*']",
		  "config: \"cors_origins[0]\" must name an origin; \"*\" is not allowed, list each origin" },
		{ "'cors_origins':['http://a.example',1]",
		  "config: \"cors_origins[1]\" must be a string" },
		{ "'cors_origins':['']", "config: \"cors_origins[0]\" must not be empty" },
		{ "'cors_origins':['http://a.example','HTTP://A.example:80']",
		  "config: \"cors_origins[1]\" duplicates \"cors_origins[0]\"" },
	};
	static const char *const bad_forms[] = {
		"null",
		"localhost:3000",
		"ftp://x.example",
		"//x.example",
		"http://",
		"http://x.example/",
		"http://x.example/app",
		"http://x.example?a",
		"http://x.example#a",
		"http://x.example:0",
		"http://x.example:65536",
		"http://x.example:",
		"http://x.example:80/",
		"http://user@x.example",
		"http://[zz]:1",
		"http://[::1",
		"http://a b",
		"http://x_y.example",
		"http://-x.example",
		"http://999.0.0.1",
	};
	static const struct {
		const char *in, *out;
	} ok[] = {
		{ "http://localhost:3000", "http://localhost:3000" },
		{ "https://App.Example.COM", "https://app.example.com" },
		{ "https://x.example:443", "https://x.example" },
		{ "http://x.example:80", "http://x.example" },
		{ "http://x.example:443", "http://x.example:443" },
		{ "https://x.example:8443", "https://x.example:8443" },
		{ "http://[::1]:3000", "http://[::1]:3000" },
		{ "http://127.0.0.1:8080", "http://127.0.0.1:8080" },
	};
	struct config cfg;
	char members[256], want[256];
	size_t i;

	(void)state;
	run_err_cases(bad, IDEMD_ARRAY_LEN(bad));
	for (i = 0; i < IDEMD_ARRAY_LEN(bad_forms); i++) {
		char *text;

		snprintf(members, sizeof(members), "'cors_origins':['%s']", bad_forms[i]);
		text = with_db(members);
		expect_parse_error(
			text,
			"config: \"cors_origins[0]\" must be an origin "
			"\"scheme://host[:port]\" without a path, e.g. \"https://app.example.com\"");
		free(text);
	}
	for (i = 0; i < IDEMD_ARRAY_LEN(ok); i++) {
		snprintf(members, sizeof(members), "'cors_origins':['%s']", ok[i].in);
		parse_ok(&cfg, members);
		assert_int_equal(cfg.n_cors_origins, 1);
		snprintf(want, sizeof(want), "%s", ok[i].out);
		assert_string_equal(cfg.cors_origins[0], want);
		config_free(&cfg);
	}
	parse_ok(&cfg, "'cors_origins':[]");
	assert_int_equal(cfg.n_cors_origins, 0);
	config_free(&cfg);
}

static void test_files(void **state)
{
	struct config cfg;
	char err[1024] = "", want[1024], *path, *big;
	size_t i;

	(void)state;

	/* A missing file names the path and the OS error. */
	assert_true(snprintf(want, sizeof(want), "%s/none.json", tmpdir) > 0);
	memset(&cfg, 0xa5, sizeof(cfg));
	assert_int_equal(config_load(&cfg, want, err, sizeof(err)), -1);
	assert_null(cfg.listen_host);
	snprintf(want, sizeof(want), "config: cannot open %s/none.json: %s", tmpdir,
		 strerror(ENOENT));
	assert_string_equal(err, want);

	/* A directory opens but cannot be read. */
	assert_int_equal(config_load(&cfg, tmpdir, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "config: cannot read %s: %s", tmpdir, strerror(EISDIR));
	assert_string_equal(err, want);

	/* Invalid JSON names the file, line and column. */
	path = write_text("bad.json", "{\n  \"pool_size\": 8\n  \"threads\": 2\n}\n");
	assert_int_equal(config_load(&cfg, path, err, sizeof(err)), -1);
	snprintf(want, sizeof(want),
		 "config: %s: invalid JSON at line 3, column 11: "
		 "'}' expected",
		 path);
	assert_string_equal(err, want);
	drop_file(path);

	path = write_text("empty.json", "");
	assert_int_equal(config_load(&cfg, path, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "invalid JSON at line 1"));
	drop_file(path);

	/* Key errors from a file read the same as from text. */
	path = write_text("unknown.json", "{\"database_url\":\"x\",\"foo\":1}");
	assert_int_equal(config_load(&cfg, path, err, sizeof(err)), -1);
	assert_string_equal(err, "config: unknown key \"foo\"");
	drop_file(path);

	/* Exactly CONFIG_MAX_FILE_BYTES loads; one byte more is refused. */
	big = malloc(CONFIG_MAX_FILE_BYTES + 1);
	assert_non_null(big);
	memset(big, ' ', CONFIG_MAX_FILE_BYTES + 1);
	i = (size_t)snprintf(big, 64, "{\"database_url\":\"x\"}");
	big[i] = ' ';
	path = write_file("max.json", big, CONFIG_MAX_FILE_BYTES);
	assert_int_equal(config_load(&cfg, path, err, sizeof(err)), 0);
	assert_string_equal(cfg.database_url, "x");
	config_free(&cfg);
	drop_file(path);
	path = write_file("big.json", big, CONFIG_MAX_FILE_BYTES + 1);
	assert_int_equal(config_load(&cfg, path, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "config: %s is larger than %d bytes", path,
		 CONFIG_MAX_FILE_BYTES);
	assert_string_equal(err, want);
	drop_file(path);
	free(big);

	/* A full file. */
	path = write_text(
		"good.json",
		"{\"listen\":\":9001\",\"database_url\":\"host=/run/pg dbname=idemd\","
		"\"routes\":[{\"method\":\"PATCH\",\"path\":\"/cart\",\"tenant\":\"shop\","
		"\"operation\":\"cart.update\",\"upstream\":\"http://cart:80\"}]}");
	assert_int_equal(config_load(&cfg, path, err, sizeof(err)), 0);
	assert_string_equal(cfg.listen_host, "0.0.0.0");
	assert_int_equal(cfg.listen_port, 9001);
	assert_string_equal(cfg.database_url, "host=/run/pg dbname=idemd");
	assert_int_equal(cfg.n_routes, 1);
	assert_string_equal(cfg.routes[0].method, "PATCH");
	config_free(&cfg);
	drop_file(path);
}

/* SIGHUP: keys marked reloadable take the file's value; every other key,
 * and the environment's overrides, keep the running one, and CHANGED names
 * those whose value in the file differs, in the table's order. */
static void test_reload(void **state)
{
	struct config old, cfg;
	char err[512] = "", changed[256] = "x", *path;

	(void)state;
	setenv("IDEMD_DATABASE_URL", "env-url", 1);
	path = write_text("reload.json", "{\"listen\":\":1\",\"pool_size\":4,\"issue_burst\":7,"
					 "\"admin_listen\":\"127.0.0.1:2\"}");
	assert_int_equal(config_load(&old, path, err, sizeof(err)), 0);
	drop_file(path);
	path = write_text("reload.json", "{\"listen\":\":3\",\"pool_size\":5,\"issue_burst\":9,"
					 "\"threads\":3,\"log_level\":\"warn\","
					 "\"cors_origins\":[\"http://A.example:80\"]}");
	assert_int_equal(
		config_reload(&cfg, &old, path, changed, sizeof(changed), err, sizeof(err)), 0);
	assert_string_equal(changed, "listen, pool_size, threads, admin_listen");
	assert_string_equal(cfg.listen_host, "0.0.0.0");
	assert_int_equal(cfg.listen_port, 1);
	assert_int_equal(cfg.pool_size, 4);
	assert_int_equal(cfg.threads, old.threads);
	assert_string_equal(cfg.admin_listen_host, "127.0.0.1");
	assert_int_equal(cfg.admin_listen_port, 2);
	assert_string_equal(cfg.database_url, "env-url");
	assert_int_equal(cfg.issue_burst, 9);
	assert_string_equal(cfg.log_level, "warn");
	assert_int_equal(cfg.n_cors_origins, 1);
	assert_string_equal(cfg.cors_origins[0], "http://a.example");
	config_free(&cfg);

	/* A file that fails as a whole changes nothing: CFG stays empty. */
	drop_file(path);
	path = write_text("reload.json", "{\"issue_burst\":0}");
	memset(&cfg, 0xa5, sizeof(cfg));
	assert_int_equal(
		config_reload(&cfg, &old, path, changed, sizeof(changed), err, sizeof(err)), -1);
	assert_string_equal(err, "config: \"issue_burst\" must be between 1 and 1000000");
	assert_null(cfg.listen_host);
	drop_file(path);
	path = write_text("reload.json", "[]");
	assert_int_equal(
		config_reload(&cfg, &old, path, changed, sizeof(changed), err, sizeof(err)), -1);
	assert_string_equal(err, "config: top level must be a JSON object");
	assert_string_equal(changed, "");
	drop_file(path);
	config_free(&old);
}

static void test_free_twice(void **state)
{
	struct config cfg;

	(void)state;
	memset(&cfg, 0, sizeof(cfg));
	config_free(&cfg);
	config_free(&cfg);
	config_free(NULL);
	parse_ok(&cfg, "'cors_origins':['http://a.example'],'routes':[" ROUTE_OK "]");
	config_free(&cfg);
	assert_null(cfg.listen_host);
	assert_null(cfg.routes);
	assert_int_equal(cfg.n_routes, 0);
	config_free(&cfg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_defaults, clear_env),
		cmocka_unit_test_teardown(test_every_key, clear_env),
		cmocka_unit_test_teardown(test_unknown_and_types, clear_env),
		cmocka_unit_test_teardown(test_ranges, clear_env),
		cmocka_unit_test_teardown(test_log_level, clear_env),
		cmocka_unit_test_teardown(test_database_url_required, clear_env),
		cmocka_unit_test_teardown(test_invalid_json, clear_env),
		cmocka_unit_test_teardown(test_listen_forms, clear_env),
		cmocka_unit_test_teardown(test_env_overrides, clear_env),
		cmocka_unit_test_teardown(test_routes_valid, clear_env),
		cmocka_unit_test_teardown(test_routes_invalid, clear_env),
		cmocka_unit_test_teardown(test_routes_limits, clear_env),
		cmocka_unit_test_teardown(test_cors_origins, clear_env),
		cmocka_unit_test_teardown(test_files, clear_env),
		cmocka_unit_test_teardown(test_reload, clear_env),
		cmocka_unit_test_teardown(test_free_twice, clear_env),
	};

	return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
