/* idemd: the command line, its arguments and their dispatch. One table
 * of options (the config's model: a row per name), one of commands and
 * one of the command groups whose next word picks one; the commands
 * themselves are in src/cli/. */
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

/* The command line, parsed. ARGS: the words that are not options. */
struct main_args {
	const char *ma_config;
	const char *ma_origin; /* where ma_config came from, for check-config */
	const char *ma_new;
	const char *ma_args[8];
	int ma_nargs;
	int ma_status;
	int ma_records_opt; /* 1 once a records option was given */
	uint32_t ma_key_id;
	struct cli_records_opts ma_ropts;
	enum cmd ma_cmd;
};

/* A command: its words, how many operands follow them (NEEDS says what
 * they are when some are missing), and how "takes no more arguments"
 * names it. */
static const struct main_command {
	const char *mc_words;
	int mc_operands;
	const char *mc_needs;
	const char *mc_what;
	enum cmd mc_cmd;
} main_commands[] = {
	{ "serve", 0, NULL, "serve", CMD_SERVE },
	{ "migrate", 0, NULL, "migrate", CMD_MIGRATE },
	{ "check-config", 0, NULL, "check-config", CMD_CHECK_CONFIG },
	{ "tenant create", 1, "a NAME", "tenant create NAME", CMD_TENANT_CREATE },
	{ "tenant list", 0, NULL, "tenant list", CMD_TENANT_LIST },
	{ "tenant delete", 1, "a NAME", "tenant delete NAME", CMD_TENANT_DELETE },
	{ "tenant key add", 1, "a NAME", "tenant key add NAME", CMD_TENANT_KEY_ADD },
	{ "tenant key revoke", 2, "a NAME and a KEY_ID", "tenant key revoke NAME KEY_ID",
	  CMD_TENANT_KEY_REVOKE },
	{ "keys rotate", 0, NULL, "keys rotate", CMD_KEYS_ROTATE },
	{ "master-key rotate", 0, NULL, "master-key rotate", CMD_MASTER_KEY_ROTATE },
	{ "records list", 0, NULL, "records list", CMD_RECORDS },
	{ "records show", 1, "a record ID", "records ... ID", CMD_RECORDS },
	{ "records events", 1, "a record ID", "records ... ID", CMD_RECORDS },
	{ "records release", 1, "a record ID", "records ... ID", CMD_RECORDS },
};

/* The words that need one more to name a command, and what that can be. */
static const struct main_group {
	const char *mg_words;
	const char *mg_choices;
} main_groups[] = {
	{ "tenant", "create, list, delete or key" },
	{ "tenant key", "add or revoke" },
	{ "keys", "rotate" },
	{ "master-key", "rotate --new FILE" },
	{ "records", "show, events, list or release" },
};

/* How many words ARGS starts with WORDS (space-separated) by; 0 if not all. */
static int main_words_match(const char *words, const char *const *args, int nargs)
{
	int n = 0;

	for (const char *w = words; *w != '\0'; n++) {
		size_t len = strcspn(w, " ");
		if (n >= nargs || strlen(args[n]) != len || strncmp(args[n], w, len) != 0)
			return 0;
		w += len + (w[len] == ' ');
	}
	return n;
}

/* Maps the words of the command line to a command; EXIT_USAGE after saying
 * what is wrong. */
static int parse_command(const char *const *args, int nargs, enum cmd *cmd)
{
	const struct main_group *group = NULL;
	int words = 0;

	for (size_t k = 0; k < IDEMD_ARRAY_LEN(main_commands); k++) {
		const struct main_command *c = &main_commands[k];
		int n = main_words_match(c->mc_words, args, nargs);
		if (n == 0)
			continue;
		if (nargs < n + c->mc_operands)
			return usage_error("%s needs %s", c->mc_words, c->mc_needs);
		if (nargs > n + c->mc_operands)
			return usage_error("%s takes no more arguments, got '%s'", c->mc_what,
					   args[n + c->mc_operands]);
		*cmd = c->mc_cmd;
		return 0;
	}
	for (size_t k = 0; k < IDEMD_ARRAY_LEN(main_groups); k++) {
		int n = main_words_match(main_groups[k].mg_words, args, nargs);
		if (n > words) {
			group = &main_groups[k];
			words = n;
		}
	}
	if (group == NULL)
		return usage_error("unknown command '%s'", args[0]);
	if (nargs == words)
		return usage_error("%s needs a command: %s", group->mg_words, group->mg_choices);
	return usage_error("unknown %s command '%s' (%s)", group->mg_words, args[words],
			   group->mg_choices);
}

/* An option: --help and --version answer at once; a flag sets an int; a
 * value (--name VALUE or --name=VALUE, NOUN says what it is) sets a
 * string. RECORDS: one of the records command's options. */
enum main_opt_kind { MAIN_OPT_HELP, MAIN_OPT_VERSION, MAIN_OPT_FLAG, MAIN_OPT_VALUE };

static const struct main_option {
	const char *mo_name;
	enum main_opt_kind mo_kind;
	size_t mo_off; /* in struct main_args */
	const char *mo_noun;
	int mo_records;
} main_options[] = {
#define MAIN_RECORDS(name, field) \
	{ \
		name, MAIN_OPT_VALUE, offsetof(struct main_args, ma_ropts.field), "a value", 1 \
	}
	{ "--help", MAIN_OPT_HELP, 0, NULL, 0 },
	{ "-h", MAIN_OPT_HELP, 0, NULL, 0 },
	{ "--version", MAIN_OPT_VERSION, 0, NULL, 0 },
	{ "--config", MAIN_OPT_VALUE, offsetof(struct main_args, ma_config), "a FILE", 0 },
	{ "--new", MAIN_OPT_VALUE, offsetof(struct main_args, ma_new), "a FILE", 0 },
	{ "--status", MAIN_OPT_FLAG, offsetof(struct main_args, ma_status), NULL, 0 },
	MAIN_RECORDS("--tenant", tenant),
	MAIN_RECORDS("--operation", operation),
	MAIN_RECORDS("--state", state),
	MAIN_RECORDS("--older-than", older_than),
	MAIN_RECORDS("--limit", limit),
	MAIN_RECORDS("--attempt", attempt),
	MAIN_RECORDS("--format", format),
#undef MAIN_RECORDS
};

/* The row of main_options that A names (for a value, also as --name=...);
 * NULL if none. */
static const struct main_option *main_option_find(const char *a)
{
	for (size_t k = 0; k < IDEMD_ARRAY_LEN(main_options); k++) {
		const struct main_option *o = &main_options[k];
		size_t n = strlen(o->mo_name);
		if (strncmp(a, o->mo_name, n) != 0)
			continue;
		if (a[n] == '\0' || (a[n] == '=' && o->mo_kind == MAIN_OPT_VALUE))
			return o;
	}
	return NULL;
}

/* Applies option O, named by ARGV[*I], to M; moves *I past a value taken
 * from the next argument. 0 to go on, else -1 with *EXIT_CODE set (0 after
 * --help or --version). */
static int main_option_apply(struct main_args *m, const struct main_option *o, int argc,
			     char **argv, int *i, int *exit_code)
{
	const char *a = argv[*i], *eq = strchr(a, '=');
	const char *v = eq != NULL ? eq + 1 : *i + 1 < argc ? argv[*i + 1] : NULL;

	*exit_code = 0;
	switch (o->mo_kind) {
	case MAIN_OPT_HELP:
		fputs(usage_line, stdout);
		fputs(usage_more, stdout);
		return -1;
	case MAIN_OPT_VERSION:
		printf("idemd %s\n", IDEMD_VERSION);
		return -1;
	case MAIN_OPT_FLAG:
		*(int *)(void *)((char *)m + o->mo_off) = 1;
		return 0;
	case MAIN_OPT_VALUE:
	default:
		break;
	}
	if (v == NULL || v[0] == '\0') {
		*exit_code = usage_error("%s needs %s", o->mo_name, o->mo_noun);
		return -1;
	}
	*(const char **)(void *)((char *)m + o->mo_off) = v;
	if (o->mo_off == offsetof(struct main_args, ma_config))
		m->ma_origin = "--config";
	m->ma_records_opt |= o->mo_records;
	if (eq == NULL)
		(*i)++;
	return 0;
}

/* Reads ARGV into M: options through main_options, the other words into
 * ma_args. 0 to go on, else -1 with *EXIT_CODE set. */
static int main_parse(struct main_args *m, int argc, char **argv, int *exit_code)
{
	*exit_code = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const struct main_option *o = main_option_find(a);

		if (o != NULL) {
			if (main_option_apply(m, o, argc, argv, &i, exit_code) < 0)
				return -1;
			continue;
		}
		if (a[0] == '-' && a[1] != '\0')
			*exit_code = usage_error("unknown option '%s'", a);
		else if (m->ma_nargs == (int)IDEMD_ARRAY_LEN(m->ma_args))
			*exit_code = usage_error("too many arguments, from '%s' on", a);
		else
			m->ma_args[m->ma_nargs++] = a;
		if (*exit_code != 0)
			return -1;
	}
	if (m->ma_nargs == 0) {
		*exit_code = usage_error("no command given");
		return -1;
	}
	*exit_code = parse_command(m->ma_args, m->ma_nargs, &m->ma_cmd);
	return *exit_code != 0 ? -1 : 0;
}

/* The options that go only with one command, and what that command needs
 * beyond its words; EXIT_USAGE after saying what is wrong. */
static int main_check(struct main_args *m)
{
	if (m->ma_records_opt && m->ma_cmd != CMD_RECORDS)
		return usage_error(
			"--tenant, --operation, --state, --older-than, --limit, --attempt "
			"and --format go only with records");
	if (m->ma_status && m->ma_cmd != CMD_MIGRATE)
		return usage_error("--status goes only with migrate, alone");
	if (m->ma_new != NULL && m->ma_cmd != CMD_MASTER_KEY_ROTATE)
		return usage_error("--new goes only with master-key rotate");
	if (m->ma_cmd == CMD_MASTER_KEY_ROTATE && m->ma_new == NULL)
		return usage_error("master-key rotate needs --new FILE (the new master key file; "
				   "created with a fresh key if missing)");
	if (m->ma_cmd == CMD_TENANT_KEY_REVOKE && parse_key_id(m->ma_args[4], &m->ma_key_id) < 0)
		return usage_error("KEY_ID must be a positive integer (as tenant list shows it), "
				   "not '%s'",
				   m->ma_args[4]);
	return 0;
}

/* Where a config file was looked for, in order, when none was given. */
static const char config_searched[] = "looked for --config FILE, $IDEMD_CONFIG, ./idemd.json "
				      "and ./.idemd/idemd.json (the quick start's)";

/* With no --config: $IDEMD_CONFIG, else ./idemd.json, else the quick
 * start's ./.idemd/idemd.json, else none (defaults and the environment). */
static void main_find_config(struct main_args *m)
{
	if (m->ma_config != NULL)
		return;
	if (access("idemd.json", F_OK) == 0) {
		m->ma_config = "idemd.json";
		m->ma_origin = "./idemd.json";
	} else if (access(".idemd/idemd.json", F_OK) == 0) {
		m->ma_config = ".idemd/idemd.json";
		m->ma_origin = "./.idemd/idemd.json, the quick start's";
	}
}

static int main_check_config(const struct main_args *m, const struct config *cfg)
{
	int ret = cli_check_routes(cfg);

	if (ret != 0)
		return ret;
	if (m->ma_config != NULL)
		fprintf(stderr, "idemd: config file %s (from %s) is valid\n", m->ma_config,
			m->ma_origin);
	else
		fprintf(stderr,
			"idemd: no config file found (%s); the defaults with the "
			"environment are valid\n",
			config_searched);
	return 0;
}

/* Runs the command M names. */
static int main_run(const struct main_args *m, struct config *cfg)
{
	const char *const *args = m->ma_args;

	switch (m->ma_cmd) {
	case CMD_CHECK_CONFIG:
		return main_check_config(m, cfg);
	case CMD_SERVE:
		return serve(cfg, m->ma_config);
	case CMD_MIGRATE:
		return cli_migrate(cfg, m->ma_status);
	case CMD_TENANT_CREATE:
		return cli_tenant_create(cfg, args[2]);
	case CMD_TENANT_LIST:
		return cli_tenant_list(cfg);
	case CMD_TENANT_DELETE:
		return cli_tenant_delete(cfg, args[2]);
	case CMD_TENANT_KEY_ADD:
		return cli_tenant_key_add(cfg, args[3]);
	case CMD_TENANT_KEY_REVOKE:
		return cli_tenant_key_revoke(cfg, args[3], m->ma_key_id);
	case CMD_KEYS_ROTATE:
		return cli_keys_rotate(cfg);
	case CMD_RECORDS:
		return cli_records(cfg, args, m->ma_nargs, &m->ma_ropts);
	case CMD_MASTER_KEY_ROTATE:
	default:
		return cli_master_key_rotate(cfg, m->ma_new);
	}
}

int main(int argc, char **argv)
{
	struct main_args m = { .ma_config = getenv("IDEMD_CONFIG"), .ma_cmd = CMD_SERVE };
	struct config cfg;
	char err[512];
	int ret;

	/* before anything allocates through jansson */
	jsonmem_init();
	if (m.ma_config != NULL && m.ma_config[0] == '\0')
		m.ma_config = NULL;
	m.ma_origin = m.ma_config != NULL ? "$IDEMD_CONFIG" : "--config";
	if (main_parse(&m, argc, argv, &ret) < 0)
		return ret;
	if ((ret = main_check(&m)) != 0)
		return ret;
	main_find_config(&m);
	if (sodium_init() < 0) {
		fprintf(stderr, "idemd: libsodium could not be initialised\n");
		return 1;
	}
	if (config_load(&cfg, m.ma_config, err, sizeof(err)) < 0) {
		if (m.ma_config == NULL)
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
	ret = main_run(&m, &cfg);
	config_free(&cfg);
	return ret;
}
