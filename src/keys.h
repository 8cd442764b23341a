/* Keys: the master key file and the signing keys it protects. This module
 * is the only holder of key material; it signs and verifies tokens. */
#ifndef IDEMD_KEYS_H
#define IDEMD_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "token.h"

/* Longest a token can live; retired keys are kept at least this long. */
#define KEYS_MAX_TOKEN_TTL_SECONDS (30 * 86400)

/* Creates PATH with a fresh random master key (mode 0600) unless it exists.
 * *created tells which. */
int keys_master_create(const char *path, int *created) IDEMD_WUR;

/* Reads the master key from PATH into locked memory. Refuses a file that
 * group or others can read. */
int keys_init(const char *master_key_file) IDEMD_WUR;

/* Reloads the signing keys from the database when they changed. */
int keys_refresh(void) IDEMD_WUR;

/* Makes a new active signing key; *id is its key id. Needs keys_init(). */
int keys_rotate(uint32_t *id) IDEMD_WUR;

/* Makes the first signing key unless one exists; *id = 0 when one did. */
int keys_create_first(uint32_t *id) IDEMD_WUR;

/* 1 when at least one signing key is loaded. */
int keys_ready(void);

/* Signs T with the active key (sets t->key_id) into OUT. */
int keys_sign_token(struct token *t, char *out, size_t outlen) IDEMD_WUR;

/* Parses and verifies S: TOKEN_OK, TOKEN_MALFORMED or TOKEN_BAD_SIGNATURE
 * (also for an unknown key id). */
int keys_verify_token(const char *s, size_t len, struct token *t) IDEMD_WUR;

/* Wipes and frees all key material. */
void keys_shutdown(void);

#endif
