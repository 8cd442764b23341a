/* Version keys: validation and expansion of an operation's version_key
 * template ("orders:{subject}") for one subject.
 * Ownership: arguments are borrowed for the call; OUT is the caller's. */
#ifndef IDEMD_VERSIONKEY_H
#define IDEMD_VERSIONKEY_H

#include <stddef.h>

#include "common.h"

#define VERSIONKEY_MAX 512

/* 1 when KEY is 1..VERSIONKEY_MAX printable ASCII characters (no space). */
int versionkey_valid(const char *key);

/* Writes TEMPLATE with each "{subject}" replaced by SUBJECT into OUT.
 * Returns 0, or -1 when the result is not a valid key. */
int versionkey_expand(const char *tmpl, const char *subject, char *out, size_t outlen) IDEMD_WUR;

#endif
