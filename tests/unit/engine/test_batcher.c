/* Unit tests for the batcher: which queued jobs share a batch, their order,
 * the one-by-one rerun of a failed batch, draining on stop and running
 * inline once stopped. The store functions are stand-ins that record their calls. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "batcher.h"
#include "unit.h"

#define MAX_CALLS 64

/* One recorded store call: its kind, size and the first token byte of each
 * element in the order the store saw them. */
struct call {
	char what[16];
	size_t n;
	uint8_t tokens[64];
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct call calls[MAX_CALLS];
	size_t ncalls;
	int gate_closed; /* the next store call waits until it opens */
	int in_store;	 /* a call is waiting at the gate */
	int fail_many;	 /* the *_many stand-ins fail as a whole */
	int done;	 /* bj_done callbacks so far */
} st = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static void record(const char *what, size_t n, const uint8_t *const *tokens)
{
	pthread_mutex_lock(&st.lock);
	struct call *c = &st.calls[st.ncalls++];
	snprintf(c->what, sizeof(c->what), "%s", what);
	c->n = n;
	for (size_t i = 0; i < n; i++)
		c->tokens[i] = tokens[i][0];
	while (st.gate_closed) {
		st.in_store = 1;
		pthread_cond_broadcast(&st.cond);
		pthread_cond_wait(&st.cond, &st.lock);
	}
	st.in_store = 0;
	pthread_mutex_unlock(&st.lock);
}

int store_claim(const struct claim_args *a, struct claim_result *r)
{
	const uint8_t *t[1] = { a->token_id };

	record("claim", 1, t);
	memset(r, 0, sizeof(*r));
	r->cr_outcome = CLAIM_CLAIMED;
	r->cr_attempt = 100 + a->token_id[0];
	return a->token_id[0] == 0xee ? -1 : 0;
}

int store_complete(const struct complete_args *a, struct complete_result *r)
{
	const uint8_t *t[1] = { a->token_id };

	record("complete", 1, t);
	memset(r, 0, sizeof(*r));
	r->cpr_outcome = COMPLETE_STORED;
	return 0;
}

int store_claim_many(const struct claim_args *const *a, struct claim_result *const *r, size_t n,
		     char *decided)
{
	const uint8_t *t[64] = { NULL };

	memset(decided, 0, n);
	for (size_t i = 0; i < n; i++)
		t[i] = a[i]->token_id;
	record("claim_many", n, t);
	if (st.fail_many)
		return -1;
	for (size_t i = 0; i < n; i++) {
		memset(r[i], 0, sizeof(*r[i]));
		r[i]->cr_outcome = CLAIM_CLAIMED;
		r[i]->cr_attempt = 200 + a[i]->token_id[0];
		/* a token id of 0xdd: left undecided by a second statement that failed */
		decided[i] = a[i]->token_id[0] != 0xdd;
	}
	for (size_t i = 0; i < n; i++)
		if (!decided[i])
			return -1;
	return 0;
}

int store_complete_many(const struct complete_args *const *a, struct complete_result *const *r,
			size_t n, char *decided)
{
	const uint8_t *t[64] = { NULL };

	memset(decided, 0, n);
	for (size_t i = 0; i < n; i++)
		t[i] = a[i]->token_id;
	record("complete_many", n, t);
	if (st.fail_many)
		return -1;
	for (size_t i = 0; i < n; i++) {
		memset(r[i], 0, sizeof(*r[i]));
		r[i]->cpr_outcome = COMPLETE_ALREADY;
		decided[i] = 1;
	}
	return 0;
}

/* A job with everything it points to. */
struct fixture_job {
	struct batcher_job job;
	uint8_t token[16];
	struct claim_args claim;
	struct claim_result claim_res;
	struct stored_response resp;
	struct complete_args complete;
	struct complete_result complete_res;
};

static void on_done(struct batcher_job *j)
{
	(void)j;
	pthread_mutex_lock(&st.lock);
	st.done++;
	pthread_cond_broadcast(&st.cond);
	pthread_mutex_unlock(&st.lock);
}

static void make_job(struct fixture_job *f, enum batcher_kind kind, uint8_t token,
		     const char *version_key)
{
	memset(f, 0, sizeof(*f));
	f->token[0] = token;
	f->claim.tenant_id = 1;
	f->claim.token_id = f->token;
	f->claim.subject = "user-1";
	f->claim.version_key = version_key;
	f->complete.tenant_id = 1;
	f->complete.token_id = f->token;
	f->complete.resp = &f->resp;
	f->job.bj_kind = kind;
	f->job.bj_claim = &f->claim;
	f->job.bj_claim_result = &f->claim_res;
	f->job.bj_complete = &f->complete;
	f->job.bj_complete_result = &f->complete_res;
	f->job.bj_done = on_done;
	f->job.bj_rc = 99;
}

static void reset(void)
{
	pthread_mutex_lock(&st.lock);
	st.ncalls = 0;
	st.gate_closed = 0;
	st.in_store = 0;
	st.fail_many = 0;
	st.done = 0;
	pthread_mutex_unlock(&st.lock);
}

static void close_gate(void)
{
	pthread_mutex_lock(&st.lock);
	st.gate_closed = 1;
	pthread_mutex_unlock(&st.lock);
}

static void wait_at_gate(void)
{
	pthread_mutex_lock(&st.lock);
	while (!st.in_store)
		pthread_cond_wait(&st.cond, &st.lock);
	pthread_mutex_unlock(&st.lock);
}

static void open_gate(void)
{
	pthread_mutex_lock(&st.lock);
	st.gate_closed = 0;
	pthread_cond_broadcast(&st.cond);
	pthread_mutex_unlock(&st.lock);
}

static void wait_done(int n)
{
	pthread_mutex_lock(&st.lock);
	while (st.done < n)
		pthread_cond_wait(&st.cond, &st.lock);
	pthread_mutex_unlock(&st.lock);
}

/* While one job is in the store, the jobs queued meanwhile form the next
 * batches: claims together (sorted by token), a claim guarding a version
 * counter alone, completes together. */
static void test_queued_jobs_share_a_batch(void **state)
{
	struct fixture_job f[7];

	(void)state;
	reset();
	assert_int_equal(batcher_start(1), 0);
	close_gate();
	make_job(&f[0], BATCHER_CLAIM, 0x01, NULL);
	batcher_submit(&f[0].job);
	wait_at_gate();
	make_job(&f[1], BATCHER_CLAIM, 0x30, NULL);
	make_job(&f[2], BATCHER_COMPLETE, 0x50, NULL);
	make_job(&f[3], BATCHER_CLAIM, 0x10, "stock:{subject}");
	make_job(&f[4], BATCHER_CLAIM, 0x20, NULL);
	make_job(&f[5], BATCHER_COMPLETE, 0x40, NULL);
	make_job(&f[6], BATCHER_CLAIM, 0x05, NULL);
	for (int i = 1; i < 7; i++)
		batcher_submit(&f[i].job);
	open_gate();
	wait_done(7);
	batcher_stop();

	assert_int_equal(st.ncalls, 4);
	assert_string_equal(st.calls[0].what, "claim");
	assert_string_equal(st.calls[1].what, "claim_many");
	assert_int_equal(st.calls[1].n, 3);
	assert_int_equal(st.calls[1].tokens[0], 0x05);
	assert_int_equal(st.calls[1].tokens[1], 0x20);
	assert_int_equal(st.calls[1].tokens[2], 0x30);
	assert_string_equal(st.calls[2].what, "complete_many");
	assert_int_equal(st.calls[2].n, 2);
	assert_int_equal(st.calls[2].tokens[0], 0x40);
	assert_int_equal(st.calls[2].tokens[1], 0x50);
	assert_string_equal(st.calls[3].what, "claim");
	assert_int_equal(st.calls[3].tokens[0], 0x10);
	/* every job got its own result */
	assert_int_equal(f[0].claim_res.cr_attempt, 101);
	assert_int_equal(f[6].claim_res.cr_attempt, 205);
	assert_int_equal(f[1].claim_res.cr_attempt, 248);
	assert_int_equal(f[3].claim_res.cr_attempt, 116);
	assert_int_equal(f[5].complete_res.cpr_outcome, COMPLETE_ALREADY);
	for (int i = 0; i < 7; i++)
		assert_int_equal(f[i].job.bj_rc, 0);
}

/* A batch that fails as a whole runs again job by job, each with its own
 * outcome (here one of them fails on its own too). */
static void test_failed_batch_runs_one_by_one(void **state)
{
	struct fixture_job f[4];

	(void)state;
	reset();
	assert_int_equal(batcher_start(1), 0);
	close_gate();
	make_job(&f[0], BATCHER_COMPLETE, 0x01, NULL);
	batcher_submit(&f[0].job);
	wait_at_gate();
	pthread_mutex_lock(&st.lock);
	st.fail_many = 1;
	pthread_mutex_unlock(&st.lock);
	make_job(&f[1], BATCHER_CLAIM, 0x22, NULL);
	make_job(&f[2], BATCHER_CLAIM, 0xee, NULL);
	make_job(&f[3], BATCHER_CLAIM, 0x11, NULL);
	for (int i = 1; i < 4; i++)
		batcher_submit(&f[i].job);
	open_gate();
	wait_done(4);
	batcher_stop();

	assert_int_equal(st.ncalls, 5);
	assert_string_equal(st.calls[1].what, "claim_many");
	assert_int_equal(st.calls[1].n, 3);
	for (int i = 2; i < 5; i++) {
		assert_string_equal(st.calls[i].what, "claim");
		assert_int_equal(st.calls[i].n, 1);
	}
	assert_int_equal(f[1].job.bj_rc, 0);
	assert_int_equal(f[1].claim_res.cr_attempt, 100 + 0x22);
	assert_int_equal(f[3].job.bj_rc, 0);
	assert_int_equal(f[2].job.bj_rc, -1);
}

/* A batch whose second statement failed keeps what its first decided:
 * only the undecided job runs again on its own, so a record the batch made
 * is never found again, in progress, by its own job's rerun. */
static void test_cut_batch_reruns_only_the_undecided(void **state)
{
	struct fixture_job f[4];

	(void)state;
	reset();
	assert_int_equal(batcher_start(1), 0);
	close_gate();
	make_job(&f[0], BATCHER_COMPLETE, 0x01, NULL);
	batcher_submit(&f[0].job);
	wait_at_gate();
	make_job(&f[1], BATCHER_CLAIM, 0x22, NULL);
	make_job(&f[2], BATCHER_CLAIM, 0xdd, NULL);
	make_job(&f[3], BATCHER_CLAIM, 0x11, NULL);
	for (int i = 1; i < 4; i++)
		batcher_submit(&f[i].job);
	open_gate();
	wait_done(4);
	batcher_stop();

	assert_int_equal(st.ncalls, 3);
	assert_string_equal(st.calls[1].what, "claim_many");
	assert_int_equal(st.calls[1].n, 3);
	assert_string_equal(st.calls[2].what, "claim");
	assert_int_equal(st.calls[2].tokens[0], 0xdd);
	/* the decided keep the batch's results, the rerun its own */
	assert_int_equal(f[1].claim_res.cr_attempt, 200 + 0x22);
	assert_int_equal(f[3].claim_res.cr_attempt, 200 + 0x11);
	assert_int_equal(f[2].claim_res.cr_attempt, 100 + 0xdd);
	for (int i = 1; i < 4; i++)
		assert_int_equal(f[i].job.bj_rc, 0);
}

/* Stopping runs everything still queued before the threads end. */
static void test_stop_drains_the_queue(void **state)
{
	struct fixture_job f[10];

	(void)state;
	reset();
	assert_int_equal(batcher_start(2), 0);
	close_gate();
	for (int i = 0; i < 10; i++) {
		make_job(&f[i], i % 2 ? BATCHER_COMPLETE : BATCHER_CLAIM, (uint8_t)(i + 1), NULL);
		batcher_submit(&f[i].job);
	}
	wait_at_gate();
	open_gate();
	batcher_stop();
	assert_int_equal(st.done, 10);
	for (int i = 0; i < 10; i++)
		assert_int_equal(f[i].job.bj_rc, 0);
}

/* A single job runs on its own; without threads (after stop) a job runs
 * inline, its callback before batcher_submit() returns. */
static void test_single_job_and_inline_when_stopped(void **state)
{
	struct fixture_job f;

	(void)state;
	reset();
	assert_int_equal(batcher_start(2), 0);
	make_job(&f, BATCHER_CLAIM, 0xee, NULL);
	batcher_submit(&f.job);
	wait_done(1);
	assert_int_equal(f.job.bj_rc, -1);
	assert_string_equal(st.calls[0].what, "claim");
	batcher_stop();

	make_job(&f, BATCHER_COMPLETE, 0x08, NULL);
	batcher_submit(&f.job);
	assert_int_equal(st.done, 2);
	assert_int_equal(f.job.bj_rc, 0);
	assert_int_equal(f.complete_res.cpr_outcome, COMPLETE_STORED);
	assert_int_equal(batcher_start(0), -1);
}

UNIT_MAIN(cmocka_unit_test(test_queued_jobs_share_a_batch),
	  cmocka_unit_test(test_failed_batch_runs_one_by_one),
	  cmocka_unit_test(test_cut_batch_reruns_only_the_undecided),
	  cmocka_unit_test(test_stop_drains_the_queue),
	  cmocka_unit_test(test_single_job_and_inline_when_stopped))
