-- 0011: exactly once in the corners: fences that outlive a record's life,
-- leases counted from the clock at grant, expiry exact for every reader.
--
-- The fence. A holder proves its holding with the attempt number it was
-- granted, so an attempt number must never be granted twice for one key.
-- Until now the sweeper deleted a record once its expires_at passed, and
-- the next claim of the key made a fresh record at attempt 1: a holder of
-- an earlier life, stalled past its lease and the key's life, was "attempt
-- 1" again and its complete, release, extend and checkpoint were accepted.
-- From here on a record's life ends without the row going away: once
-- expires_at passes, the row is dead for every reader (each statement
-- reads only rows with expires_at in the future), and the sweeper turns it
-- into a fence (state 'expired', the stored answer, fingerprint and
-- checkpoint dropped, the attempt kept; idemd.end_life). The next claim of
-- the key meets the row (the fresh INSERT conflicts with it) and starts a
-- new life in idemd.claim_locked whose first attempt is the old life's
-- last + 1, with a 'claimed' event after the old life's 'expired'. Only
-- the very first life of a key starts at attempt 1. A fence is deleted
-- fence_retention_seconds (idemd's config, default 7 days) after its life
-- ended (idemd.sweep_fences): a holder stalled longer than that is the one
-- case no fence catches, written in ARCHITECTURE.md.
--
-- Leases. A lease is counted from clock_timestamp() at the write that
-- grants it, not from now() (the start of a transaction that may have
-- waited for locks); idemd also refuses to acknowledge a claim whose lease
-- has nearly run out by the time the commit returned (src/engine.c).
--
-- Lines tagged "-- mutant:NAME REPLACEMENT" are replaced by REPLACEMENT in
-- a build configured with -DIDEMD_MUTANT=NAME (tests/mutants.sh): the
-- mechanism the line implements, deliberately broken, to show that the test
-- suite notices. A release build embeds the line as written.

ALTER TABLE records DROP CONSTRAINT records_state_check;
ALTER TABLE records ADD CONSTRAINT records_state_check
    CHECK (state IN ('in_progress', 'issued', 'completed', 'revoked', 'expired'));

-- The sweeper's two walks: live records by expiry (every insert pays for
-- this one index, as it paid for records_expires_at_idx), fences by expiry.
DROP INDEX records_expires_at_idx;
CREATE INDEX records_live_expiry_idx ON records (expires_at) WHERE state <> 'expired';
CREATE INDEX records_fence_expiry_idx ON records (expires_at) WHERE state = 'expired';

-- ------------------------------------------------------------ idemd.end_life
-- Ends the life of one record that is past its expires_at: a fence that
-- keeps only what fences (tenant, id, operation, attempt, expires_at). The
-- state change writes the 'expired' event (trigger below) and wakes the
-- duplicates waiting for it (records_settled, 0009).
CREATE FUNCTION idemd.end_life(p_tenant int, p_id bytea) RETURNS void
LANGUAGE sql
AS $$
    UPDATE records rec
       SET state              = 'expired',
           lease_expires_at   = NULL,
           fingerprint        = NULL,
           version_claimed    = NULL,
           response_status    = NULL,
           response_headers   = NULL,
           response_body      = NULL,
           response_is_json   = NULL,
           checkpoint_phase   = NULL,
           checkpoint_data    = NULL,
           checkpoint_attempt = NULL,
           waited             = false,
           updated_at         = clock_timestamp()
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_id
       AND rec.state <> 'expired' AND rec.expires_at <= clock_timestamp()
$$;

CREATE FUNCTION idemd.record_ended() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO record_events (tenant_id, token_id, event, attempt, by, expires_at)
    VALUES (NEW.tenant_id, NEW.token_id, 'expired', NEW.attempt, 'sweeper',
            coalesce(idemd_audit_until(NEW.operation_id), now()));
    RETURN NULL;
END;
$$;

CREATE TRIGGER records_ended
    AFTER UPDATE OF state ON records
    FOR EACH ROW
    WHEN (NEW.state = 'expired' AND OLD.state IS DISTINCT FROM 'expired')
    EXECUTE FUNCTION idemd.record_ended();

-- A fence's deletion says nothing more (its 'expired' event was written when
-- its life ended); a live record deleted (a previous release's sweeper)
-- still leaves one.
DROP TRIGGER records_expired ON records;
CREATE TRIGGER records_expired
    AFTER DELETE ON records
    FOR EACH ROW
    WHEN (OLD.state <> 'expired'
          AND current_setting('idemd.silent_delete', true) IS DISTINCT FROM 'on'
          AND current_setting('idemd.deleting_tenant', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION idemd_record_expired();

-- ---------------------------------------------------- idemd_sweep_after
-- The sweep of 0002, same arguments and results (a previous release calls
-- it too): the records past their expiry become fences instead of going
-- away; "deleted" counts them.
CREATE OR REPLACE FUNCTION idemd_sweep_after(p_limit int, p_after timestamptz)
RETURNS TABLE (deleted int, last_expiry timestamptz)
LANGUAGE plpgsql
AS $$
BEGIN
    IF NOT pg_try_advisory_xact_lock(7428137) THEN
        deleted := -1;
        RETURN NEXT; RETURN;
    END IF;
    WITH victims AS (
        SELECT rec.tenant_id, rec.token_id, rec.expires_at
          FROM records rec
         WHERE rec.state <> 'expired'
           AND rec.expires_at < now()
           AND rec.expires_at >= coalesce(p_after, '-infinity')
         ORDER BY rec.expires_at
         LIMIT greatest(p_limit, 0)
           FOR UPDATE SKIP LOCKED
    ), ended AS (
        SELECT v.expires_at, idemd.end_life(v.tenant_id, v.token_id) FROM victims v
    )
    SELECT count(*)::int, max(e.expires_at) INTO deleted, last_expiry FROM ended e;
    RETURN NEXT; RETURN;
END;
$$;

-- ------------------------------------------------------ idemd.sweep_fences
-- Deletes at most P_LIMIT fences whose life ended more than P_KEEP seconds
-- ago; how many.
CREATE FUNCTION idemd.sweep_fences(p_limit int, p_keep int) RETURNS int
LANGUAGE sql
AS $$
    WITH d AS (
        DELETE FROM records rec
         WHERE (rec.tenant_id, rec.token_id) IN (
               SELECT f.tenant_id, f.token_id FROM records f
                WHERE f.state = 'expired'
                  AND f.expires_at < now() - make_interval(secs => p_keep)
                ORDER BY f.expires_at LIMIT p_limit
                  FOR UPDATE SKIP LOCKED)
           AND rec.state = 'expired'
        RETURNING 1)
    SELECT count(*)::int FROM d
$$;

-- ------------------------------------------------------- idemd.claim_locked
-- As in 0009, and: a record past its expires_at (fence or not yet swept)
-- is no record: its life ends here if the sweeper has not ended it, and
-- the claim starts a new life whose attempt is the old one's + 1. The
-- claim is decided and its lease counted by clock_timestamp(). FRESH: a
-- life started with this claim (its event is 'claimed', else 'taken_over').
DROP FUNCTION idemd.claim(int[], bytea[], int[], text[], bytea[], bigint[], int[], text[],
                          bigint[], boolean[], boolean[]);
DROP FUNCTION idemd.claim_locked(int, bytea, int, text, bytea, timestamptz, int, text, bigint,
                                 boolean, boolean, boolean);
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
    current_version  bigint,
    fresh            boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now     timestamptz := clock_timestamp();  -- mutant:lease_from_txn_start     v_now     timestamptz := now();
    v_lease   timestamptz := v_now + make_interval(secs => p_lease);
    r         records%ROWTYPE;
    v_cur     bigint;
    v_has_row boolean;
    v_claimed bigint;
    v_new     bigint;
    v_life    boolean := p_inserted;  -- a life of the record starts with this claim
BEGIN
    IF NOT p_inserted THEN
        -- completed and revoked are final (only the sweeper removes such a
        -- record): their duplicates are answered by a read that locks nothing
        SELECT * INTO r FROM records rec
         WHERE rec.tenant_id = p_tenant AND rec.token_id = p_id
           AND rec.state IN ('completed', 'revoked') AND rec.expires_at > v_now;
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
        IF r.expires_at <= v_now THEN
            -- the record's life is over, swept or not: this claim starts a
            -- new one, whose attempts go on from the old life's (the fence)
            IF r.state <> 'expired' THEN
                PERFORM idemd.end_life(p_tenant, p_id);
            END IF;
            v_life := true;
            r.state := 'expired';
            r.version_claimed := NULL;
        ELSIF r.state = 'revoked' THEN
            outcome := 'revoked'; RETURN NEXT; RETURN;
        END IF;
        IF NOT v_life AND r.fingerprint IS DISTINCT FROM p_fingerprint THEN
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
        IF NOT v_life AND r.state = 'in_progress' AND r.lease_expires_at > v_now THEN  -- mutant:admit_in_progress         IF false THEN
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
        fresh   := true;
        lease_expires_at := (SELECT rec.lease_expires_at FROM records rec
                              WHERE rec.tenant_id = p_tenant AND rec.token_id = p_id);
    ELSE
        UPDATE records rec
           SET state            = 'in_progress',
               attempt          = rec.attempt + 1,  -- mutant:fence_resets                attempt          = CASE WHEN v_life THEN 1 ELSE rec.attempt + 1 END,
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
               updated_at       = v_now,
               created_at       = CASE WHEN v_life THEN v_now ELSE rec.created_at END,
               replays          = CASE WHEN v_life THEN 0 ELSE rec.replays END
         WHERE rec.tenant_id = p_tenant AND rec.token_id = p_id
        RETURNING rec.attempt INTO attempt;
        fresh := v_life;
        lease_expires_at := v_lease;
    END IF;
    outcome         := 'claimed';
    current_version := v_new;
    RETURN NEXT; RETURN;
END;
$$;

-- -------------------------------------------------------------- idemd.claim
-- As in 0009, timed by clock_timestamp(); FRESH as in claim_locked.
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
    current_version  bigint,
    fresh            boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();  -- mutant:lease_from_txn_start     v_now timestamptz := now();
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
           NULL::int, NULL::int, NULL::jsonb, NULL::bytea, NULL::boolean, NULL::bigint,
           true
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

-- ----------------------------------------------------------- fenced writes
-- Complete, release, extend and checkpoint accept only the current attempt
-- of a LIVE record: a record past its expires_at answers 'lease_lost' to
-- every holder, whatever its attempt. No record at all is 'no_record' (a
-- caller key never claimed: 404), told apart from 'not_in_progress' in the
-- same statement, not by a read after it that a concurrent first claim
-- could answer differently.
CREATE OR REPLACE FUNCTION idemd_release(p_tenant int, p_token bytea, p_attempt int)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    r records%ROWTYPE;
BEGIN
    SELECT * INTO r FROM records rec
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'no_record';
    END IF;
    IF r.attempt IS DISTINCT FROM p_attempt THEN  -- mutant:no_fence     IF false THEN
        RETURN 'lease_lost';
    END IF;
    IF r.expires_at <= clock_timestamp() THEN  -- mutant:no_fence     IF false THEN
        RETURN 'lease_lost';
    END IF;
    IF r.state <> 'in_progress' THEN
        RETURN 'not_in_progress';
    END IF;
    UPDATE records rec
       SET state            = 'issued',
           lease_expires_at = NULL,
           expires_at       = rec.token_expires_at,
           updated_at       = now()
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token;
    RETURN 'released';
END;
$$;

CREATE OR REPLACE FUNCTION idemd_extend(p_tenant int, p_token bytea, p_attempt int,
                                        p_lease_seconds int)
RETURNS TABLE (outcome text, lease_expires_at timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    r     records%ROWTYPE;
    v_end timestamptz := clock_timestamp() + make_interval(secs => p_lease_seconds);
BEGIN
    IF p_lease_seconds IS NULL OR p_lease_seconds <= 0 THEN
        RAISE EXCEPTION 'idemd_extend: lease must be positive'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO r FROM records rec
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token FOR UPDATE;
    IF NOT FOUND THEN
        outcome := 'no_record'; RETURN NEXT; RETURN;
    END IF;
    IF r.attempt IS DISTINCT FROM p_attempt  -- mutant:no_fence     IF false
       OR r.expires_at <= clock_timestamp() THEN  -- mutant:no_fence        THEN
        outcome := 'lease_lost'; RETURN NEXT; RETURN;
    END IF;
    IF r.state <> 'in_progress' THEN
        outcome := 'not_in_progress'; RETURN NEXT; RETURN;
    END IF;
    UPDATE records rec
       SET lease_expires_at = v_end,
           expires_at       = greatest(rec.expires_at, v_end),
           updated_at       = now()
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token;
    outcome := 'extended';
    lease_expires_at := v_end;
    RETURN NEXT;
END;
$$;

CREATE OR REPLACE FUNCTION idemd_checkpoint(p_tenant int, p_token bytea, p_attempt int,
                                            p_phase text, p_data jsonb)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    r records%ROWTYPE;
BEGIN
    SELECT * INTO r FROM records rec
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'no_record';
    END IF;
    IF r.attempt IS DISTINCT FROM p_attempt  -- mutant:no_fence     IF false
       OR r.expires_at <= clock_timestamp() THEN  -- mutant:no_fence        THEN
        RETURN 'lease_lost';
    END IF;
    IF r.state <> 'in_progress' THEN
        RETURN 'not_in_progress';
    END IF;
    UPDATE records rec
       SET checkpoint_phase   = p_phase,
           checkpoint_data    = p_data,
           checkpoint_attempt = p_attempt,
           updated_at         = now()
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token;
    RETURN 'saved';
END;
$$;

-- ----------------------------------------------------------- idemd.complete
-- As in 0009, and only a live record is completed: one past its expires_at
-- answers 'lease_lost'. A negative retention -1 - N keeps the record N
-- seconds exactly, not as long as its key is valid (idemd's refusals on
-- routes anyone may call).
CREATE OR REPLACE FUNCTION idemd.complete(
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
    v_now     timestamptz := clock_timestamp();
    v_done    int[];
    v_status  int[];
    v_headers jsonb[];
    v_body    bytea[];
    v_is_json boolean[];
    v_expires timestamptz[];
    v_fp      bytea[];
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(p_status, p_retention) AS x(s, r)
              WHERE x.s IS NULL OR x.s NOT BETWEEN 100 AND 599 OR x.r IS NULL) THEN
        RAISE EXCEPTION 'idemd.complete: status must be 100..599, retention not NULL'
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
           AND l.state = 'in_progress' AND l.attempt = u.attempt  -- mutant:no_fence            AND l.state = 'in_progress'
         ORDER BY u.tenant, u.id, u.i
    ), upd AS (
        UPDATE records rec
           SET state            = 'completed',
               lease_expires_at = NULL,
               response_status  = p.status,
               response_headers = p.headers,
               response_body    = p.body,
               response_is_json = coalesce(p.is_json, false),
               -- a retention N >= 0 keeps the record N seconds and at
               -- least as long as its token or key is valid; -1 - N keeps
               -- it N seconds exactly (a refusal on a route anyone may call)
               expires_at       = CASE WHEN p.retention < 0
                                       THEN v_now + make_interval(secs => -1 - p.retention)
                                       ELSE greatest(v_now + make_interval(secs => p.retention),
                                                     rec.token_expires_at) END,
               updated_at       = v_now
          FROM pick p
         WHERE rec.tenant_id = p.tenant AND rec.token_id = p.id
           AND rec.state = 'in_progress' AND rec.expires_at > v_now
           AND rec.attempt = p.attempt  -- mutant:no_fence            AND true
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
           CASE WHEN rec.token_id IS NULL THEN 'no_record'
                WHEN rec.attempt IS DISTINCT FROM x.attempt THEN 'lease_lost'
                WHEN rec.expires_at <= v_now THEN 'lease_lost'
                WHEN rec.state = 'completed' THEN 'already_completed'
                -- in progress at this very attempt, yet the UPDATE above
                -- found nothing to complete: the claim that made it so
                -- committed after that statement's snapshot, so this
                -- complete came first, and is answered as what it found
                -- then: no record (a first life) or the life before
                -- (attempt - 1, a fence or a release: a stale attempt)
                WHEN rec.state = 'in_progress' AND rec.attempt = x.attempt
                    THEN CASE WHEN x.attempt = 1 THEN 'no_record' ELSE 'lease_lost' END
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

-- ------------------------------------------- the previous releases' entry point
-- 0009's wrapper selected every column of idemd.claim, which now has one more.
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
    SELECT c.i, c.outcome, c.attempt, c.lease_expires_at, c.retry_after, c.resp_status,
           c.resp_headers, c.resp_body, c.resp_is_json, c.current_version
      FROM idemd.claim(p_tenant, p_token, p_operation, p_subject, p_fingerprint,
                       p_token_expires, p_lease_seconds, p_version_key, p_expected,
                       p_require_version, NULL::boolean[]) c
$$;

-- ------------------------------------------------------------ idemd_revoke
-- As in 0001, and a record whose life ended is no record: 'expired' (204,
-- nothing written), whether or not the sweeper has reached it.
CREATE OR REPLACE FUNCTION idemd_revoke(
    p_tenant        int,
    p_token         bytea,
    p_operation     int,
    p_subject       text,
    p_token_expires timestamptz)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_now   timestamptz := clock_timestamp();
    r       records%ROWTYPE;
    v_tries int := 0;
BEGIN
    IF p_token_expires IS NULL THEN
        RAISE EXCEPTION 'idemd_revoke: token expiry must not be NULL'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    LOOP
        v_tries := v_tries + 1;
        IF v_tries > 100 THEN
            RAISE EXCEPTION 'idemd_revoke: record kept changing under us'
                USING ERRCODE = 'serialization_failure';
        END IF;

        INSERT INTO records AS rec
               (tenant_id, token_id, operation_id, subject, state, attempt,
                token_expires_at, expires_at, created_at, updated_at)
        VALUES (p_tenant, p_token, p_operation, p_subject, 'revoked', 0,
                p_token_expires, p_token_expires, v_now, v_now)
        ON CONFLICT (tenant_id, token_id) DO NOTHING;
        IF FOUND THEN
            RETURN 'revoked';
        END IF;

        SELECT * INTO r
          FROM records rec
         WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token
           FOR UPDATE;
        IF FOUND THEN
            EXIT;
        END IF;
        -- The row was swept between the insert and the select: try again.
    END LOOP;

    IF r.expires_at <= v_now THEN
        -- a life that ended (a fence, or not swept yet): nothing to revoke,
        -- and the same answer before and after the sweep; nothing written
        RETURN 'expired';
    END IF;
    IF r.state = 'revoked' THEN
        RETURN 'revoked';
    END IF;
    IF r.state = 'completed'
       OR (r.state = 'in_progress' AND r.lease_expires_at > v_now) THEN
        RETURN 'in_use';
    END IF;

    UPDATE records rec
       SET state            = 'revoked',
           lease_expires_at = NULL,
           expires_at       = rec.token_expires_at,
           updated_at       = v_now
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token;
    RETURN 'revoked';
END;
$$;

