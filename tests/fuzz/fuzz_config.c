/*
 * libFuzzer driver for the config loader: config_parse on arbitrary text
 * (up to the first NUL, as config_parse takes a C string). Whatever the
 * outcome, config_free releases everything (LeakSanitizer checks) and is
 * safe to call twice. Properties: on failure the config is left zeroed and
 * the message starts with "config: ", is one line of printable ASCII and
 * fits the buffer, for any buffer size, and neither the outcome nor the
 * message depends on the letters of database_url (it may hold a password);
 * on success the documented bounds and normalisations hold.
 */
#include "fuzz.h"

#include "config.h"

static int
is_zeroed(const struct config *cfg)
{
	const unsigned char *p = (const unsigned char *)cfg;

	for (size_t i = 0; i < sizeof(*cfg); i++)
		if (p[i] != 0)
			return 0;
	return 1;
}

/* The message is one line of printable ASCII (it reaches logs and ttys). */
static int
is_one_line(const char *s)
{
	for (; *s != '\0'; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			return 0;
	return 1;
}

static int
has_upper(const char *s)
{
	for (; *s != '\0'; s++)
		if (*s >= 'A' && *s <= 'Z')
			return 1;
	return 0;
}

static void
check_ok(const struct config *cfg)
{
	FUZZ_CHECK(cfg->database_url != NULL && cfg->database_url[0] != '\0');
	FUZZ_CHECK(cfg->listen_host != NULL && cfg->listen_host[0] != '\0');
	FUZZ_CHECK(cfg->listen_port >= 1);
	FUZZ_CHECK(cfg->pool_size >= 1 && cfg->pool_size <= 256);
	FUZZ_CHECK(cfg->threads >= 1 && cfg->threads <= 256);
	FUZZ_CHECK(cfg->max_body_bytes >= 1024 && cfg->max_body_bytes <= 67108864);
	FUZZ_CHECK(cfg->sweep_interval_seconds >= 1 &&
	    cfg->sweep_interval_seconds <= 86400);
	FUZZ_CHECK(cfg->master_key_file != NULL && cfg->master_key_file[0] != '\0');
	FUZZ_CHECK(cfg->max_connections >= 1 && cfg->max_connections <= 100000);
	FUZZ_CHECK(cfg->connection_timeout_seconds >= 1 &&
	    cfg->connection_timeout_seconds <= 3600);
	FUZZ_CHECK(cfg->issue_rate_per_second >= 0 &&
	    cfg->issue_rate_per_second <= 1000000);
	FUZZ_CHECK(cfg->issue_burst >= 1 && cfg->issue_burst <= 1000000);
	FUZZ_CHECK((cfg->tls_cert_file == NULL) == (cfg->tls_key_file == NULL));
	FUZZ_CHECK(cfg->admin_listen_host == NULL || cfg->admin_listen_port != 0);
	FUZZ_CHECK(cfg->n_metrics_operations <= 64);
	for (size_t i = 0; i < cfg->n_metrics_operations; i++)
		FUZZ_CHECK(strchr(cfg->metrics_operations[i], '/') != NULL);
	FUZZ_CHECK(cfg->n_cors_origins <= 256);
	FUZZ_CHECK((cfg->n_cors_origins == 0) == (cfg->cors_origins == NULL));
	for (size_t i = 0; i < cfg->n_cors_origins; i++) {
		const char *o = cfg->cors_origins[i];

		FUZZ_CHECK(strncmp(o, "http://", 7) == 0 || strncmp(o, "https://", 8) == 0);
		FUZZ_CHECK(!has_upper(o));
		for (size_t j = 0; j < i; j++)
			FUZZ_CHECK(strcmp(o, cfg->cors_origins[j]) != 0);
	}
	FUZZ_CHECK(cfg->n_routes <= 1024);
	for (size_t i = 0; i < cfg->n_routes; i++) {
		const struct config_route *r = &cfg->routes[i];

		FUZZ_CHECK(r->method != NULL && r->path != NULL && r->path[0] == '/');
		FUZZ_CHECK(strncmp(r->path, "/v1/", 4) != 0 && strcmp(r->path, "/v1") != 0);
		FUZZ_CHECK(strpbrk(r->path, "?# ") == NULL);
		FUZZ_CHECK(r->tenant != NULL && r->tenant[0] != '\0');
		FUZZ_CHECK(r->operation != NULL);
		FUZZ_CHECK(strlen(r->operation) >= 1 && strlen(r->operation) <= 64);
		FUZZ_CHECK(r->upstream != NULL);
		FUZZ_CHECK(r->n_store_headers <= 64);
		for (size_t j = 0; j < r->n_store_headers; j++)
			FUZZ_CHECK(!has_upper(r->store_headers[j]));
		FUZZ_CHECK(r->connect_timeout_ms >= 1 && r->connect_timeout_ms <= 60000);
		FUZZ_CHECK(r->timeout_ms >= 1 && r->timeout_ms <= 600000);
		for (size_t j = 0; j < i; j++)
			FUZZ_CHECK(strcmp(r->method, cfg->routes[j].method) != 0 ||
			    strcmp(r->path, cfg->routes[j].path) != 0);
	}
}

/*
 * A copy of text where the letters of every "database_url" string value are
 * changed (g-z but n, r, t, u: never an escape letter or a hex digit, never
 * after a backslash), so the JSON stays exactly as valid as before, with the
 * same lengths. NULL when there is no such value.
 */
static char *
alter_database_url(const char *text)
{
	static const char letters[] = "ghijklmopqsvwxyz";
	const char *p = text;
	char *copy = NULL;

	while ((p = strstr(p, "\"database_url\"")) != NULL) {
		size_t i = (size_t)(p - text) + 14;

		p += 14;
		i += strspn(text + i, " \t\r\n");
		if (text[i] != ':')
			continue;
		i++;
		i += strspn(text + i, " \t\r\n");
		if (text[i] != '"')
			continue;
		if (copy == NULL && (copy = strdup(text)) == NULL)
			abort();
		for (i++; text[i] != '\0' && text[i] != '"'; i++) {
			const char *l;

			if (text[i] == '\\') {
				if (text[++i] == '\0')
					break;
				continue;
			}
			if ((l = strchr(letters, text[i])) != NULL)
				copy[i] = letters[((size_t)(l - letters) + 1) % 16];
		}
	}
	return copy;
}

/*
 * database_url may hold a password: whether the text parses and what the
 * message says must not depend on its letters.
 */
static void
check_secret(const char *text, int rc, const char *err)
{
	char *alt = alter_database_url(text), err2[256];
	struct config cfg;
	int rc2;

	if (alt == NULL)
		return;
	memset(err2, 0, sizeof(err2));
	rc2 = config_parse(&cfg, alt, err2, sizeof(err2));
	config_free(&cfg);
	FUZZ_CHECK(rc2 == rc);
	if (rc == -1 && strcmp(err, err2) != 0)
		fprintf(stderr, "message depends on database_url:\n  %s\n  %s\n",
		    err, err2);
	FUZZ_CHECK(rc == 0 || strcmp(err, err2) == 0);
	free(alt);
}

FUZZ_INITIALIZE(fuzz_init())

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_strndup(data, size), err[256], *small;
	size_t smalllen = size % 24;
	struct config cfg;
	int rc;

	memset(err, 0, sizeof(err));
	rc = config_parse(&cfg, text, err, sizeof(err));
	FUZZ_CHECK(rc == 0 || rc == -1);
	if (rc == 0) {
		check_ok(&cfg);
	} else {
		FUZZ_CHECK(is_zeroed(&cfg));
		FUZZ_CHECK(strncmp(err, "config: ", 8) == 0);
		FUZZ_CHECK(memchr(err, '\0', sizeof(err)) != NULL);
		FUZZ_CHECK(is_one_line(err));
	}
	config_free(&cfg);
	FUZZ_CHECK(is_zeroed(&cfg));
	config_free(&cfg);
	check_secret(text, rc, err);

	/* Failures again with a tiny message buffer of exactly smalllen bytes. */
	if (rc == -1) {
		small = malloc(smalllen > 0 ? smalllen : 1);
		FUZZ_CHECK(small != NULL);
		FUZZ_CHECK(config_parse(&cfg, text, small, smalllen) == -1);
		FUZZ_CHECK(is_zeroed(&cfg));
		if (smalllen > 0)
			FUZZ_CHECK(memchr(small, '\0', smalllen) != NULL);
		config_free(&cfg);
		free(small);
	}
	free(text);
	return 0;
}
