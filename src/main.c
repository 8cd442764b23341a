/* idemd: command-line entry point — arguments, signals, start and stop;
 * the operator subcommands it dispatches to are in cli.c. */
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <time.h>
#include <stdarg.h>
#include <stddef.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "serve.h"
#include "config.h"
#include "db.h"
#include "jsonmem.h"
#include "log.h"

/* What a usage error prints after naming what is wrong. */
static const char usage_line[] =
	"usage: idemd [--config FILE] serve | migrate [--status] | check-config\n"
	"       idemd [--config FILE] tenant create NAME | tenant list | tenant delete NAME\n"
	"       idemd [--config FILE] tenant key add NAME | tenant key revoke NAME KEY_ID\n"
	"       idemd [--config FILE] keys rotate | master-key rotate --new FILE\n"
	"       idemd [--config FILE] records show ID | records events ID | records list [FILTERS]\n"
	"       idemd [--config FILE] records release ID --attempt N\n"
	"       idemd --help | --version\n";

static const char usage_more[] =
	"\n"
	"commands:\n"
	"  serve                  run the service (SIGTERM or SIGINT stops it cleanly; SIGHUP\n"
	"                         reloads the config file: routes, CORS, log level, quotas,\n"
	"                         body limits live, the rest named and kept until a restart)\n"
	"  migrate                apply pending migrations; create the master key file if missing\n"
	"                         (never while the database holds signing keys)\n"
	"  migrate --status       list migrations: applied, pending, or unknown (applied by a\n"
	"                         newer idemd); exit 0 when current or ahead, 1 when any pending\n"
	"  tenant create NAME     create a tenant; prints {\"tenant\",\"api_key\",\"key_id\"}\n"
	"  tenant list            one JSON object per line: {\"tenant\",\"created_at\",\"key_ids\"}\n"
	"  tenant delete NAME     delete a tenant with its API keys, operations, records, counters\n"
	"  tenant key add NAME    another API key; prints {\"tenant\",\"api_key\",\"key_id\"}\n"
	"  tenant key revoke NAME KEY_ID\n"
	"                         revoke one API key; every idemd refuses it within 10 s\n"
	"  keys rotate            make a new active signing key\n"
	"  master-key rotate --new FILE\n"
	"                         re-seal every signing key under the master key in FILE\n"
	"                         (created with a fresh key if missing), in one transaction\n"
	"  check-config           validate the config file; exit 0 if valid, 2 if not\n"
	"  records show ID        a record by its id (32 hex), across tenants, as JSON lines\n"
	"  records events ID      its audit trail, oldest first\n"
	"  records list           live records, newest claim first; filters: --tenant NAME\n"
	"                         --operation NAME --state in_progress|completed|issued|revoked\n"
	"                         --older-than SECONDS --limit N (default 100)\n"
	"  records release ID --attempt N\n"
	"                         give a stuck claim back (fenced: only the attempt that holds\n"
	"                         it); audited as by \"cli:<user>\"; exit 1 if refused\n"
	"                         (records: --format table for people, json lines by default)\n"
	"\n"
	"options:\n"
	"  --config FILE          config file (default: $IDEMD_CONFIG, else ./idemd.json, else\n"
	"                         ./.idemd/idemd.json, the quick start's, if present)\n"
	"  --help                 show this help\n"
	"  --version              show the version\n"
	"\n"
	"environment: IDEMD_LISTEN and IDEMD_DATABASE_URL override the file. The master key\n"
	"is read from $IDEMD_MASTER_KEY (64 hex characters) if set, else from\n"
	"$CREDENTIALS_DIRECTORY/master.key (systemd) if present, else from master_key_file.\n"
	"exit codes: 0 success, 1 runtime failure, 2 usage or configuration error.\n";

/* Names what is wrong, then the usage line; returns EXIT_USAGE. */
static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("idemd: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n\n%s", usage_line);
	return EXIT_USAGE;
}

/* Parses KEY_ID: a decimal number 1..2^31-1. */
static int parse_key_id(const char *s, uint32_t *id)
{
	char *end;

	if (s[0] < '0' || s[0] > '9')
		return -1;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno != 0 || *end != '\0' || v == 0 || v > INT32_MAX)
		return -1;
	*id = (uint32_t)v;
	return 0;
}

/* What the command line asks for. */
enum cmd {
	CMD_SERVE,
	CMD_MIGRATE,
	CMD_CHECK_CONFIG,
	CMD_TENANT_CREATE,
	CMD_TENANT_LIST,
	CMD_TENANT_DELETE,
	CMD_TENANT_KEY_ADD,
	CMD_TENANT_KEY_REVOKE,
	CMD_KEYS_ROTATE,
	CMD_MASTER_KEY_ROTATE,
	CMD_RECORDS,
};

/* Checks that ARGS[FROM..NARGS) is empty; else says which is too many. */
static int no_more(const char *what, const char *const *args, int nargs, int from)
{
	if (nargs <= from)
		return 0;
	usage_error("%s takes no more arguments, got '%s'", what, args[from]);
	return -1;
}

/* Maps the words of the command line to a command; EXIT_USAGE after saying
 * what is wrong. */
static int parse_command(const char *const *args, int nargs, enum cmd *cmd)
{
	const char *c = args[0];

	if (strcmp(c, "serve") == 0 || strcmp(c, "migrate") == 0 ||
	    strcmp(c, "check-config") == 0) {
		*cmd = c[0] == 's' ? CMD_SERVE : c[0] == 'm' ? CMD_MIGRATE : CMD_CHECK_CONFIG;
		return no_more(c, args, nargs, 1) < 0 ? EXIT_USAGE : 0;
	}
	if (strcmp(c, "tenant") == 0) {
		if (nargs < 2)
			return usage_error("tenant needs a command: create, list, delete or key");
		const char *sub = args[1];
		if (strcmp(sub, "list") == 0) {
			*cmd = CMD_TENANT_LIST;
			return no_more("tenant list", args, nargs, 2) < 0 ? EXIT_USAGE : 0;
		}
		if (strcmp(sub, "create") == 0 || strcmp(sub, "delete") == 0) {
			*cmd = sub[0] == 'c' ? CMD_TENANT_CREATE : CMD_TENANT_DELETE;
			if (nargs < 3)
				return usage_error("tenant %s needs a NAME", sub);
			return no_more(sub[0] == 'c' ? "tenant create NAME" : "tenant delete NAME",
				       args, nargs, 3) < 0
				       ? EXIT_USAGE
				       : 0;
		}
		if (strcmp(sub, "key") == 0) {
			if (nargs < 3)
				return usage_error("tenant key needs a command: add or revoke");
			if (strcmp(args[2], "add") == 0) {
				*cmd = CMD_TENANT_KEY_ADD;
				if (nargs < 4)
					return usage_error("tenant key add needs a NAME");
				return no_more("tenant key add NAME", args, nargs, 4) < 0
					       ? EXIT_USAGE
					       : 0;
			}
			if (strcmp(args[2], "revoke") == 0) {
				*cmd = CMD_TENANT_KEY_REVOKE;
				if (nargs < 5)
					return usage_error("tenant key revoke needs a NAME and a "
							   "KEY_ID");
				return no_more("tenant key revoke NAME KEY_ID", args, nargs, 5) < 0
					       ? EXIT_USAGE
					       : 0;
			}
			return usage_error("unknown tenant key command '%s' (add or revoke)",
					   args[2]);
		}
		return usage_error("unknown tenant command '%s' (create, list, delete or key)",
				   sub);
	}
	if (strcmp(c, "keys") == 0) {
		if (nargs < 2)
			return usage_error("keys needs a command: rotate");
		if (strcmp(args[1], "rotate") != 0)
			return usage_error("unknown keys command '%s' (rotate)", args[1]);
		*cmd = CMD_KEYS_ROTATE;
		return no_more("keys rotate", args, nargs, 2) < 0 ? EXIT_USAGE : 0;
	}
	if (strcmp(c, "records") == 0) {
		*cmd = CMD_RECORDS;
		if (nargs < 2)
			return usage_error(
				"records needs a command: show, events, list or release");
		const char *sub = args[1];
		if (strcmp(sub, "list") == 0)
			return no_more("records list", args, nargs, 2) < 0 ? EXIT_USAGE : 0;
		if (strcmp(sub, "show") == 0 || strcmp(sub, "events") == 0 ||
		    strcmp(sub, "release") == 0) {
			if (nargs < 3)
				return usage_error("records %s needs a record ID", sub);
			return no_more("records ... ID", args, nargs, 3) < 0 ? EXIT_USAGE : 0;
		}
		return usage_error("unknown records command '%s' (show, events, list or release)",
				   sub);
	}
	if (strcmp(c, "master-key") == 0) {
		if (nargs < 2)
			return usage_error("master-key needs a command: rotate --new FILE");
		if (strcmp(args[1], "rotate") != 0)
			return usage_error("unknown master-key command '%s' (rotate --new FILE)",
					   args[1]);
		*cmd = CMD_MASTER_KEY_ROTATE;
		return no_more("master-key rotate", args, nargs, 2) < 0 ? EXIT_USAGE : 0;
	}
	return usage_error("unknown command '%s'", c);
}

/* One of `records`' options (--name VALUE or --name=VALUE) into O:
 * 1 when A was one (*SEEN set to 1), 0 when not, -1 after saying what is
 * wrong (*SEEN -1). NEXT: the following argument, or NULL. */
static int main_records_option(const char *a, const char *next, struct cli_records_opts *o,
			       int *seen)
{
	static const struct {
		const char *name;
		size_t off;
	} opts[] = {
		{ "--tenant", offsetof(struct cli_records_opts, tenant) },
		{ "--operation", offsetof(struct cli_records_opts, operation) },
		{ "--state", offsetof(struct cli_records_opts, state) },
		{ "--older-than", offsetof(struct cli_records_opts, older_than) },
		{ "--limit", offsetof(struct cli_records_opts, limit) },
		{ "--attempt", offsetof(struct cli_records_opts, attempt) },
		{ "--format", offsetof(struct cli_records_opts, format) },
	};
	for (size_t k = 0; k < IDEMD_ARRAY_LEN(opts); k++) {
		size_t n = strlen(opts[k].name);
		if (strncmp(a, opts[k].name, n) != 0 || (a[n] != '\0' && a[n] != '='))
			continue;
		const char *v = a[n] == '=' ? a + n + 1 : next;
		if (v == NULL || v[0] == '\0') {
			usage_error("%s needs a value", opts[k].name);
			*seen = -1;
			return -1;
		}
		*(const char **)(void *)((char *)o + opts[k].off) = v;
		*seen = 1;
		return 1;
	}
	return 0;
}

/* Where the config file comes from, for check-config's report. */
static const char *config_origin = "--config";
/* Where a config file was looked for, in order, when none was given. */
static const char config_searched[] = "looked for --config FILE, $IDEMD_CONFIG, ./idemd.json "
				      "and ./.idemd/idemd.json (the quick start's)";

int main(int argc, char **argv)
{
	const char *config_path = getenv("IDEMD_CONFIG");
	const char *new_file = NULL;
	const char *args[8] = { NULL };
	int nargs = 0, status = 0;
	uint32_t key_id = 0;
	char err[512];
	struct config cfg;
	enum cmd cmd = CMD_SERVE;
	struct cli_records_opts ropts = { 0 };
	int records_opt = 0;

	/* before anything allocates through jansson */
	jsonmem_init();
	if (config_path != NULL && config_path[0] == '\0')
		config_path = NULL;
	if (config_path != NULL)
		config_origin = "$IDEMD_CONFIG";
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			fputs(usage_line, stdout);
			fputs(usage_more, stdout);
			return 0;
		}
		if (strcmp(a, "--version") == 0) {
			printf("idemd %s\n", IDEMD_VERSION);
			return 0;
		}
		if (strcmp(a, "--config") == 0 || strcmp(a, "--new") == 0) {
			if (i + 1 >= argc || argv[i + 1][0] == '\0')
				return usage_error("%s needs a FILE", a);
			if (a[2] == 'c') {
				config_path = argv[++i];
				config_origin = "--config";
			} else {
				new_file = argv[++i];
			}
		} else if (strncmp(a, "--config=", 9) == 0 || strncmp(a, "--new=", 6) == 0) {
			const char *v = strchr(a, '=') + 1;
			if (v[0] == '\0')
				return usage_error("%.*s needs a FILE", (int)(v - a - 1), a);
			if (a[2] == 'c') {
				config_path = v;
				config_origin = "--config";
			} else {
				new_file = v;
			}
		} else if (strcmp(a, "--status") == 0) {
			status = 1;
		} else if (main_records_option(a, i + 1 < argc ? argv[i + 1] : NULL, &ropts,
					       &records_opt) != 0) {
			if (records_opt < 0)
				return EXIT_USAGE;
			if (strchr(a, '=') == NULL)
				i++;
		} else if (a[0] == '-' && a[1] != '\0') {
			return usage_error("unknown option '%s'", a);
		} else if (nargs == (int)(sizeof(args) / sizeof(args[0]))) {
			return usage_error("too many arguments, from '%s' on", a);
		} else {
			args[nargs++] = a;
		}
	}
	if (nargs == 0)
		return usage_error("no command given");
	int rc = parse_command(args, nargs, &cmd);
	if (rc != 0)
		return rc;
	if (records_opt > 0 && cmd != CMD_RECORDS)
		return usage_error(
			"--tenant, --operation, --state, --older-than, --limit, --attempt "
			"and --format go only with records");
	if (status && cmd != CMD_MIGRATE)
		return usage_error("--status goes only with migrate, alone");
	if (new_file != NULL && cmd != CMD_MASTER_KEY_ROTATE)
		return usage_error("--new goes only with master-key rotate");
	if (cmd == CMD_MASTER_KEY_ROTATE && new_file == NULL)
		return usage_error("master-key rotate needs --new FILE (the new master key file; "
				   "created with a fresh key if missing)");
	if (cmd == CMD_TENANT_KEY_REVOKE && parse_key_id(args[4], &key_id) < 0)
		return usage_error("KEY_ID must be a positive integer (as tenant list shows it), "
				   "not '%s'",
				   args[4]);
	if (config_path == NULL && access("idemd.json", F_OK) == 0) {
		config_path = "idemd.json";
		config_origin = "./idemd.json";
	} else if (config_path == NULL && access(".idemd/idemd.json", F_OK) == 0) {
		config_path = ".idemd/idemd.json";
		config_origin = "./.idemd/idemd.json, the quick start's";
	}
	if (sodium_init() < 0) {
		fprintf(stderr, "idemd: libsodium could not be initialised\n");
		return 1;
	}
	if (config_load(&cfg, config_path, err, sizeof(err)) < 0) {
		if (config_path == NULL)
			fprintf(stderr,
				"idemd: no config file found (%s); from defaults and the "
				"environment: %s\n",
				config_searched, err);
		else
			fprintf(stderr, "idemd: %s\n", err);
		return EXIT_USAGE;
	}
	/* checked by config_load(): one of the four names */
	if (log_level_parse(cfg.log_level, &log_min_level) < 0)
		log_min_level = LOG_LEVEL_INFO;
	signal(SIGPIPE, SIG_IGN);
	/* every command's connections, not only serve's, may go through a
	 * transaction-pooling proxy and must be bounded */
	db_use_prepared(cfg.prepared_statements);
	db_set_timeout(cfg.database_timeout_ms);

	int ret;
	switch (cmd) {
	case CMD_CHECK_CONFIG:
		ret = cli_check_routes(&cfg);
		if (ret != 0)
			break;
		if (config_path != NULL)
			fprintf(stderr, "idemd: config file %s (from %s) is valid\n", config_path,
				config_origin);
		else
			fprintf(stderr,
				"idemd: no config file found (%s); the defaults with the "
				"environment are valid\n",
				config_searched);
		break;
	case CMD_SERVE:
		ret = serve(&cfg, config_path);
		break;
	case CMD_MIGRATE:
		ret = cli_migrate(&cfg, status);
		break;
	case CMD_TENANT_CREATE:
		ret = cli_tenant_create(&cfg, args[2]);
		break;
	case CMD_TENANT_LIST:
		ret = cli_tenant_list(&cfg);
		break;
	case CMD_TENANT_DELETE:
		ret = cli_tenant_delete(&cfg, args[2]);
		break;
	case CMD_TENANT_KEY_ADD:
		ret = cli_tenant_key_add(&cfg, args[3]);
		break;
	case CMD_TENANT_KEY_REVOKE:
		ret = cli_tenant_key_revoke(&cfg, args[3], key_id);
		break;
	case CMD_KEYS_ROTATE:
		ret = cli_keys_rotate(&cfg);
		break;
	case CMD_RECORDS:
		ret = cli_records(&cfg, args, nargs, &ropts);
		break;
	case CMD_MASTER_KEY_ROTATE:
	default:
		ret = cli_master_key_rotate(&cfg, new_file);
		break;
	}
	config_free(&cfg);
	return ret;
}
