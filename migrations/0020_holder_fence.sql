-- 0020: on the gateway, a holder that stalls keeps its key.
--
-- Until now the lease was the only fence between a holder and a takeover.
-- On the gateway idemd itself is the holder: it forwarded the request,
-- read the upstream's answer, and its completion may then wait (behind a
-- lock, in a paused backend, in a full queue) past the lease's end, while
-- a retry took the record over and forwarded it again. Time is not a
-- fence: a holder that stalls outlives any lease.
--
-- From here on a gateway claim names its HOLDER: the id of the serving
-- process's fence session, a database session of its own that holds the
-- session-level advisory lock (1768189284, holder) for as long as the
-- process lives (src/store/store_fence.c). A record in progress whose
-- holder's lock is still held is in progress, however long ago its lease
-- ended: a stalled holder keeps it (its session, paused or waiting, keeps
-- the lock); a holder that is gone (its process dead, its session ended)
-- loses it at the lease's end, as before. Claims of the direct API name no
-- holder (the caller holds the key) and are fenced by the lease alone.
--
-- Session locks do not survive their server: after PostgreSQL restarts
-- (crash recovery included) or a standby is promoted, no fence is held
-- until each live holder has taken its own again (within a second of
-- reaching the server). So a record claimed before the server began is
-- taken over only once a whole lease, and 5 s, have passed since it began,
-- and only if its holder has not taken its fence again by then.
-- (Lines tagged "-- mutant:" are replaced in a mutant build: tests/mutants.sh.)

ALTER TABLE records ADD COLUMN holder int;

-- ------------------------------------------------------- idemd.holder_lives
-- Whether the holder of a record in progress may still record the answer it
-- read: its fence session lives (it holds the lock; taking it here fails),
-- or the record was claimed (P_CLAIMED) before this server began taking
-- writes (its postmaster's start, or the last transaction replayed before a
-- promotion or after a crash) and the holder may not have taken its fence
-- again yet. P_NOW is the claim's clock. A lock this takes is the claiming
-- transaction's, and goes with it.
CREATE FUNCTION idemd.holder_lives(
    p_holder     int,
    p_claimed    timestamptz,
    p_lease_end  timestamptz,
    p_now        timestamptz)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_began timestamptz;
BEGIN
    IF p_holder IS NULL THEN
        RETURN false;
    END IF;
    IF NOT pg_try_advisory_xact_lock(1768189284, p_holder) THEN  -- mutant:holder_unfenced     IF false THEN
        RETURN true;
    END IF;
    v_began := greatest(pg_postmaster_start_time(),
                        coalesce(pg_last_xact_replay_timestamp(), '-infinity'));
    RETURN p_claimed < v_began
       AND p_now < v_began + (p_lease_end - p_claimed) + interval '5 seconds';
END;
$$;

-- ------------------------------------------------------- idemd.claim_locked
-- As in 0019, with P_HOLDER: a record in progress whose holder lives is in
-- progress past its lease, and a takeover records its own holder.
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
    p_seen        timestamptz,
    p_holder      int)
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
        -- in progress: under a live lease, or held by a live holder's fence
        -- (a gateway forward: idemd.holder_lives), however long it stalls
        IF NOT v_life AND r.state = 'in_progress' AND (r.lease_expires_at > v_seen OR idemd.holder_lives(r.holder, r.updated_at, r.lease_expires_at, v_now)) THEN  -- mutant:admit_in_progress         IF false THEN
            IF p_wait AND NOT r.waited THEN
                UPDATE records rec SET waited = true
                 WHERE rec.tenant_id = p_tenant AND rec.token_id = p_id;
            END IF;
            outcome          := 'in_progress';
            attempt          := r.attempt;
            -- a fenced holder past its lease: asked again in a second
            lease_expires_at := greatest(r.lease_expires_at, v_now + interval '1 second');
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
               sweep_at         = CASE WHEN v_life THEN greatest(p_expires, v_lease) ELSE rec.sweep_at END,  -- mutant:new_life_swept_late                sweep_at         = rec.sweep_at,
               waited           = false,
               holder           = p_holder,
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
-- As in 0015, with P_HOLDER (one per element; NULL or 0: none) written into
-- fresh records and handed on to claim_locked.
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
    p_seen        bigint[],
    p_holder      int[])
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
                      p_lease, p_version_key, p_expected, p_require, p_holder)
               WITH ORDINALITY
               AS x(tenant, id, op, subject, fp, expires, lease, vkey, expected, req, holder, i)
    ), fresh AS (
        SELECT u.*, v_now + make_interval(secs => u.lease) AS lease_end
          FROM u
         WHERE u.nth = 1 AND to_timestamp(u.expires) > v_now
           AND NOT (u.vkey IS NOT NULL AND u.expected IS NULL AND coalesce(u.req, false))
    ), ins AS (
        INSERT INTO records AS rec
               (tenant_id, token_id, operation_id, subject, state,
                fingerprint, attempt, lease_expires_at, version_claimed,
                token_expires_at, expires_at, created_at, updated_at, holder)
        SELECT f.tenant, f.id, f.op, f.subject, 'in_progress',
               f.fp, 1, f.lease_end, NULL,
               to_timestamp(f.expires), greatest(to_timestamp(f.expires), f.lease_end),
               v_now, v_now, nullif(f.holder, 0)
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
                  p_lease, p_version_key, p_expected, p_require, p_wait, p_seen, p_holder)
           WITH ORDINALITY
           AS x(tenant, id, op, subject, fp, expires, lease, vkey, expected, req, wait, seen,
                holder, i)
     CROSS JOIN LATERAL idemd.claim_locked(x.tenant, x.id, x.op, x.subject, x.fp,
                                           to_timestamp(x.expires), x.lease, x.vkey,
                                           x.expected, coalesce(x.req, false),
                                           coalesce(x.wait, false), x.i = ANY (v_vkey),
                                           to_timestamp(x.seen / 1000.0),
                                           nullif(x.holder, 0)) c
     WHERE x.i <> ALL (v_new) OR x.i = ANY (v_vkey)
     ORDER BY x.i;
END;
$$;

-- ------------------------------------------------------------- route_needs
-- What each running instance's gateway routes need of their operations'
-- leases: a route's timeout_ms plus forward_margin_ms. Each instance
-- writes its own rows at start and at each reload, renews them every
-- second (the janitor), and deletes them at stop; a row not renewed for
-- 30 s is an instance's that is gone, and counts no more. A lease change
-- (idemd.op_put) that a live row cannot fit is refused, naming it.
CREATE TABLE route_needs (
    instance   text        NOT NULL,
    tenant_id  int         NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    operation  text        NOT NULL,
    route      text        NOT NULL,
    need_ms    bigint      NOT NULL CHECK (need_ms > 0),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, operation, instance, route)
);
CREATE INDEX route_needs_instance ON route_needs (instance);

-- ------------------------------------------------------------ idemd.op_put
-- Creates or changes an operation, unless a live instance's route needs a
-- longer lease than P_LEASE: then nothing changes, and the row of the
-- route needing the most is returned (refused true). The operation's row
-- is locked first, so a route need written meanwhile has committed before
-- the next statement, in a snapshot of its own, looks for it.
CREATE FUNCTION idemd.op_put(
    p_tenant    int,
    p_name      text,
    p_ttl       int,
    p_retention int,
    p_lease     int,
    p_vkey      text,
    p_require   boolean,
    p_wait      int,
    p_audit     int)
RETURNS TABLE (
    id        int,
    created   boolean,
    refused   boolean,
    instance  text,
    route     text,
    need_ms   bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    n route_needs%ROWTYPE;
BEGIN
    PERFORM 1 FROM operations o WHERE o.tenant_id = p_tenant AND o.name = p_name FOR UPDATE;
    SELECT * INTO n FROM route_needs rn
     WHERE rn.tenant_id = p_tenant AND rn.operation = p_name
       AND rn.expires_at > clock_timestamp()
       AND rn.need_ms > p_lease::bigint * 1000  -- mutant:lease_below_route_needs        AND false
     ORDER BY rn.need_ms DESC, rn.instance, rn.route LIMIT 1;
    IF FOUND THEN
        RETURN QUERY SELECT NULL::int, false, true, n.instance, n.route, n.need_ms;
        RETURN;
    END IF;
    RETURN QUERY
    INSERT INTO operations AS o (tenant_id, name, token_ttl_seconds, retention_seconds,
                                 lease_seconds, version_key, require_version, wait_seconds,
                                 audit_retention_seconds)
    VALUES (p_tenant, p_name, p_ttl, p_retention, p_lease, p_vkey, p_require, p_wait,
            nullif(p_audit, -1))
    ON CONFLICT (tenant_id, name) DO UPDATE
       SET token_ttl_seconds = EXCLUDED.token_ttl_seconds,
           retention_seconds = EXCLUDED.retention_seconds,
           lease_seconds = EXCLUDED.lease_seconds,
           version_key = EXCLUDED.version_key,
           require_version = EXCLUDED.require_version,
           wait_seconds = EXCLUDED.wait_seconds,
           audit_retention_seconds = EXCLUDED.audit_retention_seconds,
           updated_at = now()
    RETURNING o.id, (o.xmax = 0), false, NULL::text, NULL::text, NULL::bigint;
END;
$$;
