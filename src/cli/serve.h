/* idemd serve (serve.c).
 * Ownership: CFG and CONFIG_PATH are borrowed until serve() returns. */
#ifndef IDEMD_SERVE_H
#define IDEMD_SERVE_H

#include "common.h"

struct config;

/* Serves with CFG (loaded from CONFIG_PATH, or NULL: defaults and the
 * environment; SIGHUP reads it again) until SIGTERM or SIGINT: the exit
 * status. */
int serve(const struct config *cfg, const char *config_path) IDEMD_WUR;

#endif
