/* cli.c: the operator subcommands, each run once from main() with the
 * loaded config: migrate, tenant create/list/delete/key add/key revoke,
 * keys rotate, master-key rotate, records. Each returns the process's exit status.
 * Ownership: arguments are borrowed for the call. */
#ifndef IDEMD_CLI_H
#define IDEMD_CLI_H

#include <stdint.h>

#include "config.h"

/* Exit status of a usage error (and of a refusal the operator must fix). */
#define EXIT_USAGE 2

/* STATUS: only compare the database with the migrations compiled in. */
int cli_migrate(const struct config *cfg, int status) IDEMD_WUR;
int cli_tenant_create(const struct config *cfg, const char *name) IDEMD_WUR;
int cli_tenant_list(const struct config *cfg) IDEMD_WUR;
int cli_tenant_delete(const struct config *cfg, const char *name) IDEMD_WUR;
int cli_tenant_key_add(const struct config *cfg, const char *name) IDEMD_WUR;
int cli_tenant_key_revoke(const struct config *cfg, const char *name, uint32_t key_id) IDEMD_WUR;
int cli_keys_rotate(const struct config *cfg) IDEMD_WUR;
int cli_master_key_rotate(const struct config *cfg, const char *new_file) IDEMD_WUR;
/* check-config: every route's tenant exists (read from the database when it
 * can be reached; when it cannot, says so and checks nothing). 0, or
 * EXIT_USAGE after naming each route whose tenant is unknown. */
int cli_check_routes(const struct config *cfg) IDEMD_WUR;

/* `idemd records show ID | events ID | list | release ID` (cli_records.c);
 * ARGS as on the command line ("records", SUB, ID?), the options as given
 * (NULL: absent). */
struct cli_records_opts {
	const char *tenant, *operation, *state, *older_than, *limit, *attempt, *format;
};
int cli_records(const struct config *cfg, const char *const *args, int nargs,
		const struct cli_records_opts *o) IDEMD_WUR;

#endif
