/* Batcher: group commit for claims and completes. Requests queue their
 * claim or complete; a few batcher threads each take whatever has queued up
 * meanwhile and run it as one statement (one transaction, one commit), so
 * that concurrent requests share the cost of a durable commit instead of
 * weakening it. Nothing is acknowledged before its commit.
 * Ownership: a job and everything it points to (the results and bj_rcs,
 * which it fills in) stay the submitter's, borrowed by the batcher until its
 * bj_done has run. */
#ifndef IDEMD_BATCHER_H
#define IDEMD_BATCHER_H

#include "common.h"
#include "store.h"
#include "workq.h"

enum batcher_kind { BATCHER_CLAIM, BATCHER_COMPLETE };

struct batcher_job {
	enum batcher_kind bj_kind;
	const struct claim_args *bj_claim; /* BATCHER_CLAIM, borrowed */
	struct claim_result *bj_claim_result;
	const struct complete_args *bj_complete; /* BATCHER_COMPLETE, borrowed */
	struct complete_result *bj_complete_result;
	int bj_rc; /* 0, or -1: the database did not answer */
	/*
	 * A set (one batch request): BJ_N > 0 elements, bj_claim /
	 * bj_claim_result (or the complete pair) pointing to arrays of BJ_N,
	 * run as one statement on their own; bj_rcs[i] is element i's rc.
	 */
	size_t bj_n;
	int *bj_rcs;
	/* Called on a batcher thread once the result is known (committed). */
	void (*bj_done)(struct batcher_job *j);
	struct workq_item bj_item; /* queue link, the batcher's own */
};

/* Starts THREADS batcher threads. 0 or -1. */
int batcher_start(int threads) IDEMD_WUR;
/* Runs everything still queued, then stops the threads. */
void batcher_stop(void);

/* Most elements of a set, and of a batch request. */
#define BATCHER_SET_MAX 500

/* Queues J (borrowed until its bj_done has run; bj_done may free it); its
 * bj_done runs later on a batcher thread. After batcher_stop() (or when not
 * started) J runs at once on this thread. */
void batcher_submit(struct batcher_job *j);

#endif
