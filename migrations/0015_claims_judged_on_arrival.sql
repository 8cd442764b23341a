-- 0015: a claim is judged when it reached idemd, not when the database got
-- round to it.
--
-- A claim of a record in progress takes it over when the lease is over.
-- Until now "over" was measured when claim_locked ran. A claim that waited
-- (in idemd's batch queue while every connection was busy, on a lock, in a
-- stall inside PostgreSQL) could so take over a lease that was live when
-- the claim came, and win the race against the holder's completion that
-- had waited beside it: a gateway forward that the upstream had answered
-- in time was then forwarded again (tests/checker, check 6f, under a
-- records lock held past the lease). From here on each element carries
-- when it reached idemd (P_SEEN: unix ms on the database's clock, which
-- idemd tracks), and a lease counts as live if it was live then or now
-- (the earlier of the two), so waiting never turns a live lease into a
-- takeover. Only the takeover is judged so: a granted lease still starts
-- at its grant (0011), and a record's life ends by the clock.
--
-- The functions of 0011 stay beside these (a release before this one,
-- still running during an upgrade, calls them).
-- (Lines tagged "-- mutant:" are replaced in a mutant build: tests/mutants.sh.)

-- ------------------------------------------------------- idemd.claim_locked
-- As in 0011, with P_SEEN: the in-progress test uses the earlier of it and
-- the clock.
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
    p_inserted    boolean,
    p_seen        timestamptz)
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
    -- a lease is judged live or over when the claim reached idemd (P_SEEN, on
    -- the database's clock), never later: a claim that waited (in idemd's
    -- queue, on a lock, in a stall) does not take over a lease that was live
    -- when it came, so the holder's completion that waited beside it lands
    v_seen    timestamptz := least(v_now, coalesce(p_seen, v_now));  -- mutant:takeover_judged_late     v_seen    timestamptz := v_now;
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
        IF NOT v_life AND r.state = 'in_progress' AND r.lease_expires_at > v_seen THEN  -- mutant:admit_in_progress         IF false THEN
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
-- As in 0011, with P_SEEN (one per element; NULL: the clock) handed on to
-- claim_locked.
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
    p_wait        boolean[],
    p_seen        bigint[])
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
                  p_lease, p_version_key, p_expected, p_require, p_wait, p_seen)
           WITH ORDINALITY
           AS x(tenant, id, op, subject, fp, expires, lease, vkey, expected, req, wait, seen, i)
     CROSS JOIN LATERAL idemd.claim_locked(x.tenant, x.id, x.op, x.subject, x.fp,
                                           to_timestamp(x.expires), x.lease, x.vkey,
                                           x.expected, coalesce(x.req, false),
                                           coalesce(x.wait, false), x.i = ANY (v_vkey),
                                           to_timestamp(x.seen / 1000.0)) c
     WHERE x.i <> ALL (v_new) OR x.i = ANY (v_vkey)
     ORDER BY x.i;
END;
$$;
