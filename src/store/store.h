/* Store: every SQL statement idemd runs against its tables, behind plain C
 * structs. Functions return 0 on success and -1 when the database could not
 * answer (the caller replies 503); "not found" is a result, not an error.
 * Ownership: arguments are borrowed for the call; what a function fills in
 * for the caller is owned by it and freed with what the function's comment
 * names (a store_*_free(), free(), json_decref()). */
#ifndef IDEMD_STORE_H
#define IDEMD_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "metrics.h"

#define STORE_NAME_MAX 64
#define STORE_KEY_MAX 200
#define STORE_HASH_BYTES 32

struct operation {
	uint32_t op_id;
	uint32_t op_tenant_id;
	char op_name[STORE_NAME_MAX + 1];
	int op_token_ttl_seconds;
	int op_retention_seconds;
	int op_lease_seconds;
	int op_has_version_key;
	char op_version_key[STORE_KEY_MAX + 1];
	int op_require_version;
	int op_wait_seconds;	/* 0..60: a duplicate in progress waits this long */
	int op_audit_retention; /* seconds audit events are kept; -1: retention_seconds */
};

/* How long an audit event of OP written now is kept, in seconds. */
static inline int store_audit_seconds(const struct operation *op)
{
	return op->op_audit_retention >= 0 ? op->op_audit_retention : op->op_retention_seconds;
}

struct stored_response {
	int sr_status;
	char *sr_headers;	/* JSON object text, owned (malloc) */
	unsigned char *sr_body; /* owned (malloc), NUL-terminated */
	size_t sr_body_len;
	int sr_is_json;
};

static inline void store_response_free(struct stored_response *r)
{
	free(r->sr_headers);
	free(r->sr_body);
	memset(r, 0, sizeof(*r));
}

/* Tenants and API keys. *exists = 1 (nothing written) when NAME is taken;
 * else *key_id is the id of the tenant's first API key. */
int store_tenant_create(const char *name, const uint8_t key_hash[STORE_HASH_BYTES],
			uint32_t *tenant_id, uint32_t *key_id, int *exists) IDEMD_WUR;

struct tenant_info {
	char ti_name[STORE_NAME_MAX + 1];
	int64_t ti_created_at; /* unix seconds */
	uint32_t *ti_key_ids;  /* owned, ascending */
	size_t ti_nkeys;
};
/* Fills an owned array (store_tenants_free()) with every tenant, by name. */
int store_tenant_list(struct tenant_info **tenants, size_t *n) IDEMD_WUR;
void store_tenants_free(struct tenant_info *tenants, size_t n);
/* Deletes the tenant NAME with its records, counters, operations and API
 * keys, in one transaction; *found = 0 (nothing written) when none. */
int store_tenant_delete(const char *name, int *found) IDEMD_WUR;
/* How many tenants there are and the sum of their ids, into *COUNT and
 * *SUM: a deletion (or a creation) anywhere changes them. 0, or -1. */
int store_tenants_sum(int64_t *count, int64_t *sum) IDEMD_WUR;
/* Deletes the records, audit events and version counters of tenant ids
 * that no longer exist (left by claims that raced a tenant's deletion),
 * their number into *DELETED (store_orphans.c). 0, or -1. */
int store_orphans_delete(int64_t *deleted) IDEMD_WUR;
/* Adds an API key to the tenant NAME; *found = 0 (nothing written) when none. */
int store_api_key_add(const char *tenant, const uint8_t key_hash[STORE_HASH_BYTES],
		      uint32_t *key_id, int *found) IDEMD_WUR;
/* Deletes API key KEY_ID of the tenant NAME; *key_found = 0 when the tenant
 * has no such key (nothing written). */
int store_api_key_revoke(const char *tenant, uint32_t key_id, int *tenant_found,
			 int *key_found) IDEMD_WUR;
/* *found = 0 when no key has that hash. */
int store_tenant_by_key(const uint8_t key_hash[STORE_HASH_BYTES], uint32_t *tenant_id,
			uint32_t *key_id, int *found) IDEMD_WUR;
int store_tenant_by_name(const char *name, uint32_t *tenant_id, int *found) IDEMD_WUR;
/* One API key as every instance keeps it in memory (auth.c). */
struct api_key_row {
	uint8_t ak_hash[STORE_HASH_BYTES];
	uint32_t ak_tenant_id;
	uint32_t ak_key_id;
};
/* Every API key: *KEYS is owned (free() it; NULL when there are none), *N
 * how many. -1 when the database did not answer. */
int store_api_keys_all(struct api_key_row **keys, size_t *n) IDEMD_WUR;
/* How many API keys there are and the sum of their ids: key ids only grow,
 * so any key added or removed changes the pair (one cheap read decides
 * whether store_api_keys_all is worth running). -1 when not answered. */
int store_api_keys_sum(int64_t *count, int64_t *sum) IDEMD_WUR;

/* Operations. */
/* A lease a live instance's gateway route cannot fit (idemd.op_put). */
struct op_refusal {
	char or_instance[128]; /* the instance, as store_route_needs_publish named it */
	char or_route[160];    /* "METHOD PATH" */
	int64_t or_need_ms;    /* its timeout_ms plus forward_margin_ms */
};
/* Creates or changes OP (op_id set). *REFUSED is set when a live
 * instance's route needs a longer lease than OP's: nothing changed then,
 * and *WHY names the route. 0, or -1 when the database did not answer. */
int store_operation_put(struct operation *op, int *created, int *refused,
			struct op_refusal *why) IDEMD_WUR;

/* A gateway route's need of its operation's lease, in ms. */
struct route_need {
	uint32_t rn_tenant_id;
	const char *rn_operation; /* borrowed for the call */
	const char *rn_route;	  /* "METHOD PATH", borrowed for the call */
	int64_t rn_need_ms;
};
/* Makes NEEDS (N of them) INSTANCE's, replacing what it had, valid 30 s
 * unless renewed. 0, or -1. */
int store_route_needs_publish(const char *instance, const struct route_need *needs,
			      size_t n) IDEMD_WUR;
/* Renews INSTANCE's needs for 30 s more; *SHORT is set to how many of them
 * their operation's lease no longer fits (a change made while this
 * instance was not counted). 0, or -1. */
int store_route_needs_renew(const char *instance, int *short_leases) IDEMD_WUR;
/* Deletes INSTANCE's needs (at stop). 0, or -1. */
int store_route_needs_drop(const char *instance) IDEMD_WUR;
int store_operation_get(uint32_t tenant_id, const char *name, struct operation *op,
			int *found) IDEMD_WUR;
int store_operation_by_id(uint32_t op_id, struct operation *op, int *found) IDEMD_WUR;
/* Fills an owned array (free()) with the tenant's operations, ordered by name. */
int store_operation_list(uint32_t tenant_id, struct operation **ops, size_t *n) IDEMD_WUR;

/* Signing keys, sealed under the master key. */
struct sealed_key {
	uint32_t sk_id;
	unsigned char *sk_sealed; /* owned */
	size_t sk_len;
	int64_t sk_created_at;
	int64_t sk_retired_at; /* 0 when active */
};
int store_keys_load(struct sealed_key **keys, size_t *n) IDEMD_WUR;
void store_keys_free(struct sealed_key *keys, size_t n);
/* Returns the newest key id (0 if none) cheaply, for change detection. */
int store_keys_newest(uint32_t *id) IDEMD_WUR;
/* Adds a new active key and marks every other active key retired now.
 * With FIRST_ONLY, adds it only when no key exists (*id = 0 otherwise). */
int store_key_insert(const unsigned char *sealed, size_t len, int first_only,
		     uint32_t *id) IDEMD_WUR;
/* How many signing keys exist; 0 when the schema is not there yet. */
int store_keys_count(int64_t *n) IDEMD_WUR;
/*
 * Replaces every signing key's sealed form at once: OLD (as store_keys_load
 * gave them, by id) gets SEALED[i] (LENS[i] bytes). *ok = 0, nothing
 * written, when the table no longer holds exactly OLD.
 */
int store_keys_reseal(const struct sealed_key *old, const unsigned char *const *sealed,
		      const size_t *lens, size_t n, int *ok) IDEMD_WUR;
/* Deletes keys retired more than MAX_AGE seconds ago. */
int store_keys_prune(int64_t max_age_seconds) IDEMD_WUR;

/* Records: the token state machine (SQL functions in migrations/). */
struct claim_args {
	uint32_t tenant_id;
	const uint8_t *token_id; /* 16 bytes: the record id (a token's id, or a caller key's) */
	uint32_t operation_id;
	const char *subject;	    /* NULL: none (a caller key sent without one) */
	const uint8_t *fingerprint; /* STORE_HASH_BYTES or NULL */
	int64_t token_expires_at;
	int lease_seconds;
	const char *version_key; /* NULL: the operation guards no counter */
	int has_expected;
	int64_t expected;
	int require_version;
	int wait;	   /* the caller waits if the record is in progress */
	const char *by;	   /* who, for the audit trail: "api_key:<id>" or "route:..." */
	int audit_seconds; /* how long its event is kept (store_audit_seconds) */
	/* the operation's retention: the sweeper first looks at the record
	 * when a completion at the claim would have ended its life
	 * (migrations/0017) */
	int retention_seconds;
	/* when the claim reached idemd, in unix ms on the database's clock
	 * (idemd_unix_ms; 0: at the statement): a record in progress is taken
	 * over only if its lease was already over then (migrations/0015) */
	int64_t seen_ms;
	/* a gateway claim: the id of this process's fence session
	 * (store_fence_holder), whose lock keeps the record in progress past
	 * its lease while the process lives (migrations/0020); 0: none, the
	 * lease alone fences the record (the direct API: the caller holds it) */
	int32_t holder;
};

enum claim_outcome {
	CLAIM_CLAIMED,
	CLAIM_REPLAY,
	CLAIM_IN_PROGRESS,
	CLAIM_REVOKED,
	CLAIM_FINGERPRINT_MISMATCH,
	CLAIM_EXPIRED,
	CLAIM_VERSION_MISMATCH,
	CLAIM_VERSION_REQUIRED,
	/* granted, but the lease had (nearly) run out by the time the commit
	 * returned: not acknowledged (the caller retries and takes over) */
	CLAIM_LEASE_SPENT
};
/* A claim is acknowledged only with at least this much of its lease left. */
#define STORE_LEASE_LEFT_MIN_MS 250

struct claim_result {
	enum claim_outcome cr_outcome;
	int cr_attempt;
	int64_t cr_lease_expires_at;  /* unix ms */
	int64_t cr_record_expires_at; /* unix ms, for CLAIM_REPLAY: end of retention */
	int cr_retry_after;
	int64_t cr_current_version;
	struct stored_response cr_response; /* for CLAIM_REPLAY */
	/* the latest checkpoint, on a takeover answered on the request's
	 * thread (engine.c fills it, owns it and releases it) */
	struct json_t *cr_checkpoint;
};

int store_claim(const struct claim_args *a, struct claim_result *r) IDEMD_WUR;

enum complete_outcome {
	COMPLETE_STORED,
	COMPLETE_ALREADY,
	COMPLETE_LEASE_LOST,
	COMPLETE_NOT_IN_PROGRESS,
	COMPLETE_NO_RECORD /* no record at all (a caller key never claimed) */
};

struct complete_args {
	uint32_t tenant_id;
	const uint8_t *token_id; /* 16 bytes */
	int attempt;
	const struct stored_response *resp;
	int retention_seconds;
	/* 1: the record is kept RETENTION_SECONDS from now, not held to its
	 * key's expiry as well (a refusal on a route anyone may call) */
	int retention_exact;
	const char *by;	   /* who, for the audit trail */
	int audit_seconds; /* how long its event is kept */
};

struct complete_result {
	enum complete_outcome cpr_outcome;
	struct stored_response cpr_stored; /* STORED and ALREADY: as the record holds it */
	int64_t cpr_expires_at;		   /* unix ms: end of retention */
	int cpr_has_fingerprint;
	uint8_t cpr_fingerprint[STORE_HASH_BYTES];
};

int store_complete(const struct complete_args *a, struct complete_result *r) IDEMD_WUR;

/*
 * The same for N claims (completes): the common cases in one statement, so
 * in one transaction with one commit, and the rest in a second. Elements
 * run in array order; the caller sorts them by token so that concurrent
 * batches lock records in the same order. Sets DECIDED[i] (N of them, the
 * caller's) for each element whose result is filled: what a statement that
 * committed decided. Returns 0 when every element is decided, or -1 (a
 * statement failed: nothing of its elements was written, and the caller
 * may run those, and only those, one by one; a record the first statement
 * made is its element's, decided, never found again by its own rerun).
 */
int store_claim_many(const struct claim_args *const *a, struct claim_result *const *r, size_t n,
		     char *decided) IDEMD_WUR;
int store_complete_many(const struct complete_args *const *a, struct complete_result *const *r,
			size_t n, char *decided) IDEMD_WUR;

enum release_outcome {
	RELEASE_DONE,
	RELEASE_LEASE_LOST,
	RELEASE_NOT_IN_PROGRESS,
	RELEASE_NO_RECORD /* no record at all (a caller key never claimed) */
};
/* Lets a gateway record in progress at ATTEMPT be taken over at its
 * lease's end even while this process lives (a forward given up with its
 * outcome unknown: nothing more will be recorded for it). 0, or -1. */
int store_unfence(uint32_t tenant_id, const uint8_t *token_id, int attempt) IDEMD_WUR;
int store_release(uint32_t tenant_id, const uint8_t *token_id, int attempt, const char *by,
		  enum release_outcome *outcome) IDEMD_WUR;

/* Long work of the current ATTEMPT (fenced like release; RELEASE_DONE when
 * written): a new lease of LEASE_SECONDS from now (*LEASE_EXPIRES_AT, unix
 * ms), or the latest checkpoint PHASE with DATA (JSON text, or NULL). */
int store_extend(uint32_t tenant_id, const uint8_t *token_id, int attempt, int lease_seconds,
		 const char *by, enum release_outcome *outcome,
		 int64_t *lease_expires_at) IDEMD_WUR;
int store_checkpoint(uint32_t tenant_id, const uint8_t *token_id, int attempt, const char *phase,
		     const char *data, const char *by, enum release_outcome *outcome) IDEMD_WUR;

/* *in_use = 1 when the token is in progress or completed (nothing written). */
int store_revoke(uint32_t tenant_id, const uint8_t *token_id, uint32_t operation_id,
		 const char *subject, int64_t token_expires_at, const char *by,
		 int *in_use) IDEMD_WUR;

struct record_view {
	int rv_found;
	char rv_state[16];
	int rv_attempt;
	int64_t rv_lease_expires_at; /* unix ms, 0 if none */
	int64_t rv_expires_at;
	int rv_has_subject;
	char rv_subject[129];
	uint32_t rv_operation_id;
	char *rv_checkpoint_phase; /* NULL: no checkpoint; owned, like the data */
	char *rv_checkpoint_data;  /* JSON text, or NULL */
	int rv_checkpoint_attempt;
	int64_t rv_replays; /* duplicates answered from the stored response (flushed) */
	struct stored_response rv_response;
};
/* Frees what a filled record_view owns. */
void store_record_view_free(struct record_view *v);
int store_record_get(uint32_t tenant_id, const uint8_t *token_id, struct record_view *v) IDEMD_WUR;

/* One page of a record's audit trail, oldest first: at most LIMIT events
 * after sequence number AFTER (0: from the first), as an owned JSON array of
 * {"at","event","attempt"?,"status"?,"phase"?,"by"}; *NEXT: the sequence
 * number the next page starts after, 0 when this page is the last. */
int store_events_get(uint32_t tenant_id, const uint8_t *token_id, int64_t after, int limit,
		     struct json_t **events, int64_t *next) IDEMD_WUR;
/* Filters of a record listing; NULL strings, a 0 operation, a negative
 * older_than are "any". RF_AFTER_*: the keyset cursor (the last row seen). */
struct record_filter {
	uint32_t rf_operation_id;
	const char *rf_state;
	const char *rf_subject;
	int64_t rf_older_than; /* seconds since the first claim */
	int rf_has_after;
	int64_t rf_after_us; /* created_at, unix microseconds */
	uint8_t rf_after_id[16];
};
struct record_row {
	uint8_t rr_id[16];
	uint32_t rr_operation_id;
	char rr_state[16];
	int rr_has_subject;
	char rr_subject[129];
	int rr_attempt;
	int64_t rr_lease_expires_at, rr_expires_at; /* unix ms */
	int64_t rr_created_us;			    /* the first claim, unix microseconds */
};
/* One page of a tenant's records, newest first claim first: an owned array
 * of *N rows (free()). */
int store_record_list(uint32_t tenant_id, const struct record_filter *f, size_t limit,
		      struct record_row **rows, size_t *n) IDEMD_WUR;

/* Deletes at most LIMIT events past their audit retention. */
int store_events_sweep(int limit, int *deleted) IDEMD_WUR;

/* Version counters. An unknown key is version 0. */
int store_version_get(uint32_t tenant_id, const char *key, int64_t *version) IDEMD_WUR;
int store_version_bump(uint32_t tenant_id, const char *key, int64_t expected, int *ok,
		       int64_t *version) IDEMD_WUR;

/* What one batch of the sweep did; sw_ended = -1 when another instance
 * holds the sweep lock (and it did nothing). */
struct store_swept {
	int sw_ended;	/* records past their expiry whose life it ended (fences now) */
	int sw_deleted; /* fences whose life ended KEEP_SECONDS ago or more */
	int sw_moved;	/* rows given their next time (a later expiry, a fence's deletion) */
	/* where the pass's next batch starts ("": from the first row); opaque */
	char sw_after[96];
};

/* One batch of the sweep (migrations/0017): at most LIMIT rows whose time
 * to be looked at is LATE_SECONDS past, after SWEPT->sw_after, in that
 * time's order, skipping locked ones, when no other instance is sweeping;
 * fills SWEPT. The batch had rows left over when the three counts add up
 * to LIMIT. */
int store_sweep(int limit, int keep_seconds, int late_seconds, struct store_swept *swept) IDEMD_WUR;

/* The queries of `idemd records` (store_cli.c). Their parameters, as
 * text (NULL: not given):
 *   RECORD, EVENTS: the record id (32 hex)
 *   LIST: tenant, operation, state, older-than seconds, limit
 *   RELEASE: the record id, the attempt, who ("cli:<user>")
 * *ROWS: an owned JSON array of one object per row. */
enum store_cli_query { STORE_CLI_RECORD, STORE_CLI_EVENTS, STORE_CLI_LIST, STORE_CLI_RELEASE };
int store_cli_rows(enum store_cli_query q, const char *const *values,
		   struct json_t **rows) IDEMD_WUR;

/* The database's clock, unix ms (clock_timestamp()). */
int store_clock(int64_t *db_ms) IDEMD_WUR;

/* Adds COUNTS[i] to the replay count of record (TENANT_IDS[i], IDS[i]), all
 * in one statement (records swept meanwhile are skipped). Sort the
 * elements by record first. */
int store_replays_add(size_t n, const uint32_t *tenant_ids, const uint8_t (*ids)[16],
		      const int64_t *counts) IDEMD_WUR;

/* Records in progress past their lease, per tenant and operation: an owned
 * array of *N rows (free()). */
int store_records_stuck(struct metrics_stuck **rows, size_t *n) IDEMD_WUR;

/* ANALYZEs records and record_events where autovacuum has fallen far
 * behind: changed by more rows since their last statistics than they held
 * then. Each connection keeps its plans until a table's statistics change,
 * and a plan made while records was empty reads all of it once it is
 * large. *ANALYZED: how many tables. 0 or -1. */
int store_refresh_statistics(int *analyzed) IDEMD_WUR;

#endif
