-- 0019: a new life of a fenced key is swept when it ends.
--
-- idemd.claim_locked starts a new life of a key whose life is over: of a
-- record past its expires_at that the sweeper has not reached yet, or of a
-- fence (0011), whose sweep_at is its deletion time, fence_retention_seconds
-- (7 days by default) after its end. It left sweep_at as it was (0017). A
-- completion or a release moves sweep_at to their own earlier end, but a
-- new life claimed and then abandoned (its holder gone, its lease run out)
-- was looked at again only at the fence's deletion time: its row, its
-- 'expired' event (stamped then, not at its end) and the events it told
-- (dropped by then, if the audit retention is shorter) waited up to
-- fence_retention_seconds. Now a new life takes its expiry as its sweep_at,
-- as the life's first claim sets it. (A fresh record's claim sets the
-- later end a completion kept the operation's retention would give it;
-- claim_locked is not told the retention, so the sweeper, finding such a
-- completed record alive, moves it once, off the request path.) A
-- takeover within a life leaves sweep_at as it is, as before, so that
-- update writes no index entry.
-- (Lines tagged "-- mutant:" are replaced in a mutant build: tests/mutants.sh.)

-- ------------------------------------------------------- idemd.claim_locked
-- As in 0015, and a new life sets sweep_at.
CREATE OR REPLACE FUNCTION idemd.claim_locked(
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
               sweep_at         = CASE WHEN v_life THEN greatest(p_expires, v_lease) ELSE rec.sweep_at END,  -- mutant:new_life_swept_late                sweep_at         = rec.sweep_at,
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
