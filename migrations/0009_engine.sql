-- 0009: the claim engine's SQL written once.
--
-- Until now a claim crossed idemd_claim_batch -> idemd_claim ->
-- idemd_claim_full (0001 renamed by 0002), and the fresh-claim INSERT and
-- the complete UPDATE were each written three times. From here on:
--
--   idemd.claim(arrays)     the one claim: n = 1 is a batch of one
--   idemd.complete(arrays)  the one complete
--   idemd_release, idemd_extend, idemd_checkpoint, idemd_revoke (0001/0005)
--                           were already written once and stay
--
-- idemd.claim makes each record by ONE set-based INSERT; only then does it
-- visit, one by one, the elements that need a look under the row lock (a
-- record existed, a version counter, a duplicate within the batch).
-- idemd.complete stores every current attempt by ONE set-based UPDATE and
-- only reads, without writing, to explain the elements it did not store.
--
-- Settled records notify waiting duplicates (0006) only when a duplicate
-- waits: PostgreSQL serialises the commits of every transaction that
-- notifies (one lock held through the commit's flush), which took group
-- commit away from every completion. A claim that will wait sets
-- records.waited under the row lock in the same statement that sees the
-- record in progress, so the completion, which needs that lock, either
-- finds the flag and notifies, or came first and the waiter's claim sees
-- the settled record.
--
-- The 0002 entry points (idemd_claim, idemd_claim_batch, idemd_complete,
-- idemd_complete_batch) stay, as thin wrappers, so that an idemd of the
-- previous release keeps serving during a rolling upgrade (its waiters set
-- no flag: they are woken at the holder's lease end instead). What nothing
-- calls any more is dropped: idemd_claim_full, idemd_complete_full,
-- idemd_sweep.

CREATE SCHEMA idemd;

ALTER TABLE records ADD COLUMN waited boolean NOT NULL DEFAULT false;

-- ------------------------------------------------------- idemd.claim_locked
--
-- One element of idemd.claim that the set-based INSERT did not settle:
-- P_INSERTED says whether that INSERT made its record (then it is locked by
-- us and guards a version counter), else a record may exist. The checks, in
-- order: revoked -> 'revoked'; fingerprint differs -> 'fingerprint_mismatch'
-- (wins over 'in_progress'); completed -> 'replay' (wins over expiry and the
-- version check); in progress under a live lease -> 'in_progress' (P_WAIT:
-- and mark the record waited); then, for a new claim or a takeover:
-- token expired -> 'expired'; version precondition -> 'version_required' /
-- 'version_mismatch'; else 'claimed' with attempt = old attempt + 1.
-- When the operation guards a counter the claim bumps it, except on a
-- takeover whose earlier attempt already bumped it from V to V+1 and nobody
-- has bumped it since (the precondition V is accepted, the counter stays).
--
-- Result columns per outcome:
--   claimed:          attempt, lease_expires_at, current_version (after bump)
--   replay:           attempt, lease_expires_at (= record expiry), resp_*
--   in_progress:      attempt, lease_expires_at, retry_after (seconds, >= 1)
--   version_mismatch: current_version
--   others:           nothing (all NULL)
CREATE FUNCTION idemd.claim_locked(
    p_tenant      int,
    p_id          bytea,
    p_operation   int,
    p_subject     text,
    p_fingerprint bytea,
    p_expires     timestamptz,
    p_lease       int,
    p_version_key text,
    p_expected    bigint,
    p_require     boolean,
    p_wait        boolean,
    p_inserted    boolean)
RETURNS TABLE (
    outcome          text,
    attempt          int,
    lease_expires_at timestamptz,
    retry_after      int,
    resp_status      int,
    resp_headers     jsonb,
    resp_body        bytea,
    resp_is_json     boolean,
    current_version  bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now     timestamptz := now();
    v_lease   timestamptz := now() + make_interval(secs => p_lease);
    r         records%ROWTYPE;
    v_cur     bigint;
    v_has_row boolean;
    v_claimed bigint;
    v_new     bigint;
BEGIN
    IF NOT p_inserted THEN
        -- completed and revoked are final (only the sweeper removes such a
        -- record): their duplicates are answered by a read that locks nothing
        SELECT * INTO r FROM records rec
         WHERE rec.tenant_id = p_tenant AND rec.token_id = p_id
           AND rec.state IN ('completed', 'revoked');
        IF NOT FOUND THEN
            SELECT * INTO r FROM records rec
             WHERE rec.tenant_id = p_tenant AND rec.token_id = p_id
               FOR UPDATE;
        END IF;
        IF NOT FOUND THEN
            -- no record, and the INSERT made none: the token expired, a
            -- version is required, or the record went (sweeper, tenant
            -- deleted) between the two statements: the batch runs again
            IF p_expires <= v_now THEN
                outcome := 'expired'; RETURN NEXT; RETURN;
            END IF;
            IF p_version_key IS NOT NULL AND p_expected IS NULL AND p_require THEN
                outcome := 'version_required'; RETURN NEXT; RETURN;
            END IF;
            RAISE EXCEPTION 'idemd.claim: the record changed under the claim'
                USING ERRCODE = 'serialization_failure';
        END IF;
        IF r.state = 'revoked' THEN
            outcome := 'revoked'; RETURN NEXT; RETURN;
        END IF;
        IF r.fingerprint IS DISTINCT FROM p_fingerprint THEN
            outcome := 'fingerprint_mismatch'; RETURN NEXT; RETURN;
        END IF;
        IF r.state = 'completed' THEN
            outcome          := 'replay';
            attempt          := r.attempt;
            -- for a replay: the end of retention, until which it may be cached
            lease_expires_at := r.expires_at;
            resp_status      := r.response_status;
            resp_headers     := r.response_headers;
            resp_body        := r.response_body;
            resp_is_json     := r.response_is_json;
            RETURN NEXT; RETURN;
        END IF;
        IF r.state = 'in_progress' AND r.lease_expires_at > v_now THEN
            IF p_wait AND NOT r.waited THEN
                UPDATE records rec SET waited = true
                 WHERE rec.tenant_id = p_tenant AND rec.token_id = p_id;
            END IF;
            outcome          := 'in_progress';
            attempt          := r.attempt;
            lease_expires_at := r.lease_expires_at;
            retry_after      := greatest(1, ceil(extract(epoch FROM
                                    r.lease_expires_at - v_now)))::int;
            RETURN NEXT; RETURN;
        END IF;
        -- issued (released) or the lease ran out: a takeover
        IF p_expires <= v_now THEN
            outcome := 'expired'; RETURN NEXT; RETURN;
        END IF;
        IF p_version_key IS NOT NULL AND p_expected IS NULL AND p_require THEN
            outcome := 'version_required'; RETURN NEXT; RETURN;
        END IF;
    END IF;

    IF p_version_key IS NOT NULL THEN
        LOOP
            SELECT ver.version INTO v_cur FROM versions ver
             WHERE ver.tenant_id = p_tenant AND ver.key = p_version_key
               FOR UPDATE;
            v_has_row := FOUND;
            IF NOT v_has_row THEN
                v_cur := 0;
            END IF;
            IF NOT p_inserted AND r.version_claimed IS NOT NULL
               AND coalesce(p_expected, r.version_claimed) = r.version_claimed
               AND v_cur = r.version_claimed + 1 THEN
                v_claimed := r.version_claimed;
                v_new     := v_cur;
                EXIT;
            END IF;
            IF p_expected IS NOT NULL AND v_cur <> p_expected THEN
                IF p_inserted THEN
                    -- never claimed: no 'expired' event for it (0007's trigger)
                    PERFORM set_config('idemd.silent_delete', 'on', true);
                    DELETE FROM records rec
                     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_id;
                    PERFORM set_config('idemd.silent_delete', 'off', true);
                END IF;
                outcome         := 'version_mismatch';
                current_version := v_cur;
                RETURN NEXT; RETURN;
            END IF;
            v_claimed := v_cur;
            IF v_has_row THEN
                UPDATE versions ver SET version = ver.version + 1, updated_at = v_now
                 WHERE ver.tenant_id = p_tenant AND ver.key = p_version_key
                RETURNING ver.version INTO v_new;
                EXIT;
            END IF;
            INSERT INTO versions AS ver (tenant_id, key, version, updated_at)
            VALUES (p_tenant, p_version_key, 1, v_now)
            ON CONFLICT (tenant_id, key) DO NOTHING;
            IF FOUND THEN
                v_new := 1;
                EXIT;
            END IF;
            -- someone created the counter meanwhile: lock it, decide again
        END LOOP;
    END IF;

    IF p_inserted THEN
        UPDATE records rec SET version_claimed = v_claimed
         WHERE rec.tenant_id = p_tenant AND rec.token_id = p_id;
        attempt := 1;
        lease_expires_at := (SELECT rec.lease_expires_at FROM records rec
                              WHERE rec.tenant_id = p_tenant AND rec.token_id = p_id);
    ELSE
        UPDATE records rec
           SET state            = 'in_progress',
               attempt          = rec.attempt + 1,
               lease_expires_at = v_lease,
               fingerprint      = p_fingerprint,
               operation_id     = p_operation,
               subject          = p_subject,
               version_claimed  = v_claimed,
               response_status  = NULL,
               response_headers = NULL,
               response_body    = NULL,
               response_is_json = NULL,
               token_expires_at = p_expires,
               expires_at       = greatest(p_expires, v_lease),
               waited           = false,
               updated_at       = v_now
         WHERE rec.tenant_id = p_tenant AND rec.token_id = p_id
        RETURNING rec.attempt INTO attempt;
        lease_expires_at := v_lease;
    END IF;
    outcome         := 'claimed';
    current_version := v_new;
    RETURN NEXT; RETURN;
END;
$$;

-- -------------------------------------------------------------- idemd.claim
--
-- Claims every element of the arrays in one transaction (idemd sends them
-- sorted by record, so that concurrent batches lock in the same order).
-- Every element that may start a record (token not expired, no version
-- required and missing; the first occurrence of its record in the batch)
-- is inserted by one statement; those that made a fresh record without a
-- counter are 'claimed' with attempt 1 at once, every other element goes
-- through idemd.claim_locked in array order, and sees what came before it.
-- Rows come back with i, the element's 1-based position, in any order.
-- P_EXPIRES: the token's (key's) expiry, unix seconds. P_WAIT: the caller
-- waits if it finds the record in progress.
CREATE FUNCTION idemd.claim(
    p_tenant      int[],
    p_id          bytea[],
    p_operation   int[],
    p_subject     text[],
    p_fingerprint bytea[],
    p_expires     bigint[],
    p_lease       int[],
    p_version_key text[],
    p_expected    bigint[],
    p_require     boolean[],
    p_wait        boolean[])
RETURNS TABLE (
    i                int,
    outcome          text,
    attempt          int,
    lease_expires_at timestamptz,
    retry_after      int,
    resp_status      int,
    resp_headers     jsonb,
    resp_body        bytea,
    resp_is_json     boolean,
    current_version  bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := now();
    v_new int[];   -- elements whose record the INSERT made
    v_vkey int[];  -- ... of them, those guarding a counter
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(p_lease, p_expires) AS x(l, e)
              WHERE x.l IS NULL OR x.l <= 0 OR x.e IS NULL) THEN
        RAISE EXCEPTION 'idemd.claim: lease must be positive, expiry not NULL'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    WITH u AS (
        SELECT x.*, row_number() OVER (PARTITION BY x.tenant, x.id ORDER BY x.i) AS nth
          FROM unnest(p_tenant, p_id, p_operation, p_subject, p_fingerprint, p_expires,
                      p_lease, p_version_key, p_expected, p_require)
               WITH ORDINALITY
               AS x(tenant, id, op, subject, fp, expires, lease, vkey, expected, req, i)
    ), fresh AS (
        SELECT u.*, v_now + make_interval(secs => u.lease) AS lease_end
          FROM u
         WHERE u.nth = 1 AND to_timestamp(u.expires) > v_now
           AND NOT (u.vkey IS NOT NULL AND u.expected IS NULL AND coalesce(u.req, false))
    ), ins AS (
        INSERT INTO records AS rec
               (tenant_id, token_id, operation_id, subject, state,
                fingerprint, attempt, lease_expires_at, version_claimed,
                token_expires_at, expires_at, created_at, updated_at)
        SELECT f.tenant, f.id, f.op, f.subject, 'in_progress',
               f.fp, 1, f.lease_end, NULL,
               to_timestamp(f.expires), greatest(to_timestamp(f.expires), f.lease_end),
               v_now, v_now
          FROM fresh f
         ORDER BY f.i
        ON CONFLICT (tenant_id, token_id) DO NOTHING
        RETURNING rec.tenant_id, rec.token_id
    )
    SELECT coalesce(array_agg(f.i::int), '{}'),
           coalesce(array_agg(f.i::int) FILTER (WHERE f.vkey IS NOT NULL), '{}')
      INTO v_new, v_vkey
      FROM fresh f JOIN ins ON ins.tenant_id = f.tenant AND ins.token_id = f.id;

    RETURN QUERY
    SELECT x.i::int, 'claimed'::text, 1, v_now + make_interval(secs => x.lease),
           NULL::int, NULL::int, NULL::jsonb, NULL::bytea, NULL::boolean, NULL::bigint
      FROM unnest(p_lease) WITH ORDINALITY AS x(lease, i)
     WHERE x.i = ANY (v_new) AND x.i <> ALL (v_vkey);

    IF cardinality(v_new) = cardinality(p_id) AND cardinality(v_vkey) = 0 THEN
        RETURN;   -- the common case: every element made a fresh record
    END IF;
    RETURN QUERY
    SELECT x.i::int, c.*
      FROM unnest(p_tenant, p_id, p_operation, p_subject, p_fingerprint, p_expires,
                  p_lease, p_version_key, p_expected, p_require, p_wait)
           WITH ORDINALITY
           AS x(tenant, id, op, subject, fp, expires, lease, vkey, expected, req, wait, i)
     CROSS JOIN LATERAL idemd.claim_locked(x.tenant, x.id, x.op, x.subject, x.fp,
                                           to_timestamp(x.expires), x.lease, x.vkey,
                                           x.expected, coalesce(x.req, false),
                                           coalesce(x.wait, false), x.i = ANY (v_vkey)) c
     WHERE x.i <> ALL (v_new) OR x.i = ANY (v_vkey)
     ORDER BY x.i;
END;
$$;

-- ----------------------------------------------------------- idemd.complete
--
-- Stores the outcome of the current attempt of every element, in one
-- transaction, by one UPDATE of the records in progress whose attempt
-- matches (the first such element of a record, in array order). Every
-- other element is explained by a read:
--   'completed'         stored now; the stored response is returned
--   'already_completed' this attempt was completed before: the stored response
--   'lease_lost'        the record's attempt differs (fenced out)
--   'not_in_progress'   no record, or issued/revoked with this attempt
-- A record is kept for retention_seconds, and never less than until its
-- token expires, so that a completed token can never run a second time.
-- Rows come back with i, the element's 1-based position, in any order.
CREATE FUNCTION idemd.complete(
    p_tenant    int[],
    p_id        bytea[],
    p_attempt   int[],
    p_status    int[],
    p_headers   jsonb[],
    p_body      bytea[],
    p_is_json   boolean[],
    p_retention int[])
RETURNS TABLE (
    i            int,
    outcome      text,
    resp_status  int,
    resp_headers jsonb,
    resp_body    bytea,
    resp_is_json boolean,
    expires_at   timestamptz,
    fingerprint  bytea)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now     timestamptz := now();
    v_done    int[];
    v_status  int[];
    v_headers jsonb[];
    v_body    bytea[];
    v_is_json boolean[];
    v_expires timestamptz[];
    v_fp      bytea[];
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(p_status, p_retention) AS x(s, r)
              WHERE x.s IS NULL OR x.s NOT BETWEEN 100 AND 599 OR x.r IS NULL OR x.r < 0) THEN
        RAISE EXCEPTION 'idemd.complete: status must be 100..599, retention >= 0'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    WITH u AS (
        SELECT x.*
          FROM unnest(p_tenant, p_id, p_attempt, p_status, p_headers, p_body, p_is_json,
                      p_retention)
               WITH ORDINALITY
               AS x(tenant, id, attempt, status, headers, body, is_json, retention, i)
    ), locked AS (
        -- every record of the batch, locked in record order (the order
        -- claims lock in), whatever the plan of the UPDATE below: two
        -- batches never wait on each other in a circle
        -- (only records in progress: the replay counts' UPDATE, which
        -- touches completed records only, never meets it)
        SELECT rec.tenant_id, rec.token_id, rec.state, rec.attempt
          FROM records rec
         WHERE (rec.tenant_id, rec.token_id) IN (SELECT u.tenant, u.id FROM u)
           AND rec.state = 'in_progress'
         ORDER BY rec.tenant_id, rec.token_id
           FOR UPDATE
    ), pick AS (
        SELECT DISTINCT ON (u.tenant, u.id) u.*
          FROM u JOIN locked l
            ON l.tenant_id = u.tenant AND l.token_id = u.id
           AND l.state = 'in_progress' AND l.attempt = u.attempt
         ORDER BY u.tenant, u.id, u.i
    ), upd AS (
        UPDATE records rec
           SET state            = 'completed',
               lease_expires_at = NULL,
               response_status  = p.status,
               response_headers = p.headers,
               response_body    = p.body,
               response_is_json = coalesce(p.is_json, false),
               expires_at       = greatest(v_now + make_interval(secs => p.retention),
                                           rec.token_expires_at),
               updated_at       = v_now
          FROM pick p
         WHERE rec.tenant_id = p.tenant AND rec.token_id = p.id
           AND rec.state = 'in_progress' AND rec.attempt = p.attempt
        RETURNING p.i, rec.response_status, rec.response_headers, rec.response_body,
                  rec.response_is_json, rec.expires_at, rec.fingerprint
    )
    SELECT coalesce(array_agg(upd.i::int), '{}'), array_agg(upd.response_status),
           array_agg(upd.response_headers), array_agg(upd.response_body),
           array_agg(upd.response_is_json), array_agg(upd.expires_at),
           array_agg(upd.fingerprint)
      INTO v_done, v_status, v_headers, v_body, v_is_json, v_expires, v_fp
      FROM upd;

    RETURN QUERY
    SELECT d.i, 'completed'::text, d.status, d.headers, d.body, d.is_json, d.expires, d.fp
      FROM unnest(v_done, v_status, v_headers, v_body, v_is_json, v_expires, v_fp)
           AS d(i, status, headers, body, is_json, expires, fp)
     WHERE d.i IS NOT NULL;

    IF cardinality(v_done) = cardinality(p_id) THEN
        RETURN;
    END IF;
    -- the rest, explained (this statement sees the UPDATE above)
    RETURN QUERY
    SELECT x.i::int,
           CASE WHEN rec.token_id IS NULL THEN 'not_in_progress'
                WHEN rec.attempt IS DISTINCT FROM x.attempt THEN 'lease_lost'
                WHEN rec.state = 'completed' THEN 'already_completed'
                ELSE 'not_in_progress' END,
           s.response_status, s.response_headers, s.response_body, s.response_is_json,
           s.expires_at, s.fingerprint
      FROM unnest(p_tenant, p_id, p_attempt) WITH ORDINALITY AS x(tenant, id, attempt, i)
      LEFT JOIN records rec ON rec.tenant_id = x.tenant AND rec.token_id = x.id
      LEFT JOIN LATERAL (SELECT rec.response_status, rec.response_headers, rec.response_body,
                                rec.response_is_json, rec.expires_at, rec.fingerprint
                          WHERE rec.state = 'completed' AND rec.attempt = x.attempt) s ON true
     WHERE x.i <> ALL (v_done)
     ORDER BY x.i;
END;
$$;

-- ------------------------------------------------------------ notifications
-- Only a record some duplicate waits for is announced when it settles.
DROP TRIGGER records_settled ON records;
CREATE TRIGGER records_settled
    AFTER UPDATE OF state ON records
    FOR EACH ROW
    WHEN (OLD.state = 'in_progress' AND NEW.state IS DISTINCT FROM 'in_progress'
          AND OLD.waited)
    EXECUTE FUNCTION idemd_record_settled();

-- A record deleted because it never was claimed (idemd.claim_locked) or
-- with its tenant leaves no 'expired' event.
DROP TRIGGER records_expired ON records;
CREATE TRIGGER records_expired
    AFTER DELETE ON records
    FOR EACH ROW
    WHEN (current_setting('idemd.silent_delete', true) IS DISTINCT FROM 'on'
          AND current_setting('idemd.deleting_tenant', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION idemd_record_expired();

-- ---------------------------------------- the previous release's entry points
-- Same arguments and results as in 0002; nothing waits through them.
CREATE OR REPLACE FUNCTION idemd_claim_batch(
    p_tenant          int[],
    p_token           bytea[],
    p_operation       int[],
    p_subject         text[],
    p_fingerprint     bytea[],
    p_token_expires   bigint[],
    p_lease_seconds   int[],
    p_version_key     text[],
    p_expected        bigint[],
    p_require_version boolean[])
RETURNS TABLE (
    i                int,
    outcome          text,
    attempt          int,
    lease_expires_at timestamptz,
    retry_after      int,
    resp_status      int,
    resp_headers     jsonb,
    resp_body        bytea,
    resp_is_json     boolean,
    current_version  bigint)
LANGUAGE sql
AS $$
    SELECT * FROM idemd.claim(p_tenant, p_token, p_operation, p_subject, p_fingerprint,
                              p_token_expires, p_lease_seconds, p_version_key, p_expected,
                              p_require_version, NULL::boolean[])
$$;

CREATE OR REPLACE FUNCTION idemd_claim(
    p_tenant          int,
    p_token           bytea,
    p_operation       int,
    p_subject         text,
    p_fingerprint     bytea,
    p_token_expires   timestamptz,
    p_lease_seconds   int,
    p_version_key     text,
    p_expected        bigint,
    p_require_version boolean)
RETURNS TABLE (
    outcome          text,
    attempt          int,
    lease_expires_at timestamptz,
    retry_after      int,
    resp_status      int,
    resp_headers     jsonb,
    resp_body        bytea,
    resp_is_json     boolean,
    current_version  bigint)
LANGUAGE sql
AS $$
    SELECT c.outcome, c.attempt, c.lease_expires_at, c.retry_after, c.resp_status,
           c.resp_headers, c.resp_body, c.resp_is_json, c.current_version
      FROM idemd.claim(ARRAY[p_tenant], ARRAY[p_token], ARRAY[p_operation],
                       ARRAY[p_subject], ARRAY[p_fingerprint],
                       ARRAY[floor(extract(epoch FROM p_token_expires))::bigint],
                       ARRAY[p_lease_seconds], ARRAY[p_version_key], ARRAY[p_expected],
                       ARRAY[p_require_version], ARRAY[false]) c
$$;

CREATE OR REPLACE FUNCTION idemd_complete_batch(
    p_tenant            int[],
    p_token             bytea[],
    p_attempt           int[],
    p_status            int[],
    p_headers           jsonb[],
    p_body              bytea[],
    p_is_json           boolean[],
    p_retention_seconds int[])
RETURNS TABLE (
    i            int,
    outcome      text,
    resp_status  int,
    resp_headers jsonb,
    resp_body    bytea,
    resp_is_json boolean,
    expires_at   timestamptz,
    fingerprint  bytea)
LANGUAGE sql
AS $$
    SELECT * FROM idemd.complete(p_tenant, p_token, p_attempt, p_status, p_headers, p_body,
                                 p_is_json, p_retention_seconds)
$$;

CREATE OR REPLACE FUNCTION idemd_complete(
    p_tenant            int,
    p_token             bytea,
    p_attempt           int,
    p_status            int,
    p_headers           jsonb,
    p_body              bytea,
    p_is_json           boolean,
    p_retention_seconds int)
RETURNS TABLE (
    outcome      text,
    resp_status  int,
    resp_headers jsonb,
    resp_body    bytea,
    resp_is_json boolean,
    expires_at   timestamptz,
    fingerprint  bytea)
LANGUAGE sql
AS $$
    SELECT c.outcome, c.resp_status, c.resp_headers, c.resp_body, c.resp_is_json,
           c.expires_at, c.fingerprint
      FROM idemd.complete(ARRAY[p_tenant], ARRAY[p_token], ARRAY[p_attempt],
                          ARRAY[p_status], ARRAY[p_headers], ARRAY[p_body],
                          ARRAY[p_is_json], ARRAY[p_retention_seconds]) c
$$;

DROP FUNCTION idemd_claim_full(int, bytea, int, text, bytea, timestamptz, int, text, bigint,
                               boolean);
DROP FUNCTION idemd_complete_full(int, bytea, int, int, jsonb, bytea, boolean, int);
DROP FUNCTION idemd_sweep(int);
