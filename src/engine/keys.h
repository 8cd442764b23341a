/* Keys: the master key file and the signing keys it protects. This module
 * is the only holder of key material; it signs and verifies tokens.
 * Ownership: arguments are borrowed for the call. */
#ifndef IDEMD_KEYS_H
#define IDEMD_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "token.h"

/* Longest a token can live; retired keys are kept at least this long. */
#define KEYS_MAX_TOKEN_TTL_SECONDS (30 * 86400)

/* What keys_refresh(), keys_check() and keys_rotate() return (after
 * logging, naming the master key's source) when the master key cannot open
 * a signing key of the database: the CLI exits 2, nothing written. */
#define KEYS_WRONG_MASTER (-2)

/* The master key may come, first found, from: */
#define KEYS_MASTER_ENV "IDEMD_MASTER_KEY"  /* its 64 hex characters */
#define KEYS_MASTER_CREDENTIAL "master.key" /* in $CREDENTIALS_DIRECTORY */
enum keys_source {
	KEYS_SRC_ENV,	     /* $IDEMD_MASTER_KEY */
	KEYS_SRC_CREDENTIAL, /* $CREDENTIALS_DIRECTORY/master.key (systemd) */
	KEYS_SRC_FILE,	     /* the config's master_key_file */
};

/* Where the master key comes from (decided once per process); *WHERE (may
 * be NULL) names it for messages ("the master key file PATH"), borrowed for
 * the process's life. PATH is the config's master_key_file. */
enum keys_source keys_master_source(const char *path, const char **where);

/* Creates PATH with a fresh random master key (mode 0600) unless it exists.
 * *created tells which. */
int keys_master_create(const char *path, int *created) IDEMD_WUR;

/* Reads the master key from its source (keys_master_source(PATH)) into
 * locked memory. Refuses a file that group or others can read; the
 * environment variable is wiped and removed once read. */
int keys_init(const char *master_key_file) IDEMD_WUR;

/* Reloads the signing keys from the database when they changed: 0, -1, or
 * KEYS_WRONG_MASTER. */
int keys_refresh(void) IDEMD_WUR;

/* Loads every signing key now: 0, -1, or KEYS_WRONG_MASTER. */
int keys_check(void) IDEMD_WUR;

/* Makes a new active signing key; *id is its key id. Needs keys_init().
 * KEYS_WRONG_MASTER (nothing written) when the master key cannot open the
 * existing keys. */
int keys_rotate(uint32_t *id) IDEMD_WUR;

/*
 * Re-seals every signing key under the master key in NEW_PATH (created,
 * mode 0600, with a fresh random key when missing: *created = 1), in one
 * transaction; *resealed is how many. KEYS_WRONG_MASTER (nothing written)
 * when the current master key cannot open them or NEW_PATH holds the
 * current key. Writes nothing else: the caller's master key stays as is.
 */
int keys_master_rotate(const char *new_path, int *created, size_t *resealed) IDEMD_WUR;

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
