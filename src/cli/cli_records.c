/* `idemd records`: the on-call engineer's view of records and their audit
 * trail, with the config and database `serve` uses and no API key (see
 * cli.h). Output: one JSON object per line, or a table for people. */
#include "cli.h"

#include <jansson.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db.h"
#include "store.h"
#include "utf8.h"

static int cli_records_id_ok(const char *id)
{
	return strlen(id) == 32 && strspn(id, "0123456789abcdef") == 32;
}

/* Whether S is a decimal integer from MIN to MAX. */
static int cli_records_int_ok(const char *s, long long min, long long max)
{
	char *end;
	long long v = strtoll(s, &end, 10);

	return *s != '\0' && *end == '\0' && strspn(s, "0123456789") == strlen(s) && v >= min &&
	       v <= max;
}

/* The text of a table cell for V (NULL: "-"), escaped: tenant text never
 * reaches the terminal raw (utf8_escape_controls). New, or NULL. */
static char *cli_records_cell(const json_t *v)
{
	char *raw = v == NULL		? strdup("-")
		    : json_is_string(v) ? strdup(json_string_value(v))
					: json_dumps(v, JSON_ENCODE_ANY);
	char *text = raw != NULL ? utf8_escape_controls(raw, UTF8_ESCAPE_TEXT) : NULL;

	free(raw);
	return text;
}

/* Prints ROWS one JSON object a line, DEL and C1 escaped as well; 0, or
 * -1 when out of memory or stdout fails. */
static int cli_records_lines(json_t *rows)
{
	size_t i;
	json_t *row;

	json_array_foreach(rows, i, row)
	{
		char *raw = json_dumps(row, JSON_COMPACT | JSON_PRESERVE_ORDER);
		char *line = raw != NULL ? utf8_escape_controls(raw, UTF8_ESCAPE_JSON) : NULL;
		free(raw);
		if (line == NULL)
			return -1;
		puts(line);
		free(line);
	}
	return fflush(stdout) == 0 ? 0 : -1;
}

/* Prints ROWS as a table: a header line of the columns (each member of the
 * rows, in the order first seen), then a line a row, each column as wide
 * as its widest cell; 0, or -1 when stdout fails. */
static int cli_records_table(json_t *rows)
{
	json_t *cols = json_array(), *width = json_object(), *row, *v;
	const char *k;
	size_t i;

	json_array_foreach(rows, i, row)
	{
		json_object_foreach(row, k, v)
		{
			char *text = cli_records_cell(v);
			size_t w = text ? strlen(text) : 0, cur;
			free(text);
			json_t *have = json_object_get(width, k);
			if (have == NULL) {
				json_array_append_new(cols, json_string(k));
				cur = strlen(k); /* idemd's own names */
			} else {
				cur = (size_t)json_integer_value(have);
			}
			json_object_set_new(width, k,
					    json_integer((json_int_t)(w > cur ? w : cur)));
		}
	}
	for (int line = -1; line < (int)json_array_size(rows); line++) {
		size_t c;
		json_t *col;
		json_array_foreach(cols, c, col)
		{
			const char *name = json_string_value(col);
			int w = (int)json_integer_value(json_object_get(width, name));
			char *text = NULL;
			if (line >= 0)
				text = cli_records_cell(
					json_object_get(json_array_get(rows, (size_t)line), name));
			printf("%s%-*s", c > 0 ? "  " : "", w,
			       line < 0 ? name : (text ? text : ""));
			free(text);
		}
		putchar('\n');
	}
	json_decref(cols);
	json_decref(width);
	return fflush(stdout) == 0 ? 0 : -1;
}

/* Prints ROWS as JSON lines, or as a table with a column per member of
 * the first row (and of later rows, in the order first seen). Either way
 * no control character of a tenant's text reaches the terminal: JSON
 * escapes C0 and the lines escape DEL and C1 too (\u007f, \u0085, read
 * back as the same strings); a table cell shows each as \n, \e, \x07 or
 * \u009b. */
static int cli_records_print(json_t *rows, int table)
{
	return table ? cli_records_table(rows) : cli_records_lines(rows);
}

/* "cli:<user>": who released, for the audit trail. */
static void cli_records_by(char *out, size_t outlen)
{
	const char *user = getenv("SUDO_USER");
	struct passwd *pw = user == NULL ? getpwuid(geteuid()) : NULL;

	if (user == NULL)
		user = pw != NULL ? pw->pw_name : "unknown";
	snprintf(out, outlen, "cli:%s", user);
}

/* Whether STATE is one a record can be in (--state). */
static int cli_records_state_ok(const char *state)
{
	static const char *const states[] = { "in_progress", "completed", "issued", "revoked" };

	for (size_t i = 0; i < IDEMD_ARRAY_LEN(states); i++)
		if (strcmp(state, states[i]) == 0)
			return 1;
	return 0;
}

/* Checks the options O of records SUB (ID: its record id, or NULL; TABLE:
 * --format table) before anything is read: 0, or EXIT_USAGE after saying
 * what is wrong. */
static int cli_records_usage(const char *sub, const char *id, const struct cli_records_opts *o,
			     int table)
{
	if (o->format != NULL && !table && strcmp(o->format, "json") != 0)
		return fprintf(stderr, "idemd: --format is json or table\n"), EXIT_USAGE;
	if (id != NULL && !cli_records_id_ok(id))
		return fprintf(stderr, "idemd: a record id is 32 lowercase hex digits\n"),
		       EXIT_USAGE;
	if (o->older_than != NULL && !cli_records_int_ok(o->older_than, 0, 315360000))
		return fprintf(stderr, "idemd: --older-than is seconds, 0 to 315360000\n"),
		       EXIT_USAGE;
	if (o->limit != NULL && !cli_records_int_ok(o->limit, 1, 10000))
		return fprintf(stderr, "idemd: --limit is 1 to 10000\n"), EXIT_USAGE;
	if (o->state != NULL && !cli_records_state_ok(o->state))
		return fprintf(stderr, "idemd: --state is in_progress, completed, issued or "
				       "revoked\n"),
		       EXIT_USAGE;
	if (strcmp(sub, "release") == 0 &&
	    (o->attempt == NULL || !cli_records_int_ok(o->attempt, 1, 2147483647)))
		return fprintf(stderr, "idemd: records release needs --attempt N (the attempt "
				       "that holds it, as records show says)\n"),
		       EXIT_USAGE;
	return 0;
}

/* Runs the statement of records SUB (show, events, list or release) with
 * ID and the options O into *ROWS (owned: json_decref()); 0, or -1. */
static int cli_records_query(const char *sub, const char *id, const struct cli_records_opts *o,
			     json_t **rows)
{
	char by[80];

	if (strcmp(sub, "show") == 0 || strcmp(sub, "events") == 0) {
		const char *v[] = { id };
		return store_cli_rows(sub[0] == 's' ? STORE_CLI_RECORD : STORE_CLI_EVENTS, v, rows);
	}
	if (strcmp(sub, "list") == 0) {
		const char *v[] = { o->tenant, o->operation, o->state, o->older_than,
				    o->limit != NULL ? o->limit : "100" };
		return store_cli_rows(STORE_CLI_LIST, v, rows);
	}
	cli_records_by(by, sizeof(by));
	const char *v[] = { id, o->attempt, by };
	return store_cli_rows(STORE_CLI_RELEASE, v, rows);
}

int cli_records(const struct config *cfg, const char *const *args, int nargs,
		const struct cli_records_opts *o)
{
	const char *sub = args[1], *id = nargs > 2 ? args[2] : NULL;
	int table = o->format != NULL && strcmp(o->format, "table") == 0;
	json_t *rows = NULL;
	int ret = 1, usage = cli_records_usage(sub, id, o, table);

	if (usage != 0)
		return usage;
	if (db_pool_init(cfg->database_url, 1) < 0)
		return 1;
	if (cli_records_query(sub, id, o, &rows) < 0) {
		fprintf(stderr, "idemd: the database could not answer (is it migrated?)\n");
		goto out;
	}
	if (strcmp(sub, "list") != 0 && json_array_size(rows) == 0) {
		fprintf(stderr, "idemd: no live record (or audit trail) with id %s\n", id);
		goto out;
	}
	if (cli_records_print(rows, table) < 0)
		goto out;
	ret = 0;
	if (strcmp(sub, "release") == 0) {
		const char *outcome =
			json_string_value(json_object_get(json_array_get(rows, 0), "outcome"));
		ret = outcome != NULL && strcmp(outcome, "released") == 0 ? 0 : 1;
	}
out:
	json_decref(rows);
	db_pool_close();
	return ret;
}
