/* What a reload replaced, freed once nothing can read it. The HTTP layer's
 * grace periods (http_grace_begin, http_grace_done) say when: what was
 * added before a grace period began is sealed by its begin and freed when
 * it is done. Main thread only (reloads and grace periods are its).
 * Ownership: retire_add() takes ARG on success; FN frees it. */
#ifndef IDEMD_RETIRE_H
#define IDEMD_RETIRE_H

#include "common.h"

/* Has FN(ARG) called once every request begun before the next grace
 * period's begin has ended. 0, or -1 out of memory: then FN is never
 * called, and ARG stays the caller's. */
int retire_add(void (*fn)(void *), void *arg) IDEMD_WUR;
/* A grace period begins: what was added since the last one is sealed for
 * it (the one before has run what it sealed). */
void retire_seal(void);
/* The grace period is done: what it sealed is freed. */
void retire_sealed_run(void);
/* The stop, once no request runs: everything added is freed. */
void retire_all_run(void);

#endif
