-- 0002: shorter paths for the common case of each state-machine step.
--
-- idemd_claim: a fresh token (no record yet, not expired, no version
-- counter) is claimed by one INSERT ... ON CONFLICT DO NOTHING instead of
-- two reads and then the insert; a token that has a record, or that needs
-- the expiry or counter checks, takes the unchanged full path, which the
-- body below keeps verbatim from 0001 after the new first step.
--
-- idemd_complete: the current attempt of an in-progress record is stored by
-- one UPDATE guarded by state and attempt; only when that touches nothing
-- does the function read the record to say why (unchanged answers).

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
LANGUAGE plpgsql
AS $$
DECLARE
    v_now       timestamptz := now();
    v_lease     timestamptz;
    r           records%ROWTYPE;
    v_existing  boolean := false;   -- a record existed and is locked
    v_inserted  boolean := false;   -- we inserted a fresh record (locked)
    v_cur       bigint;
    v_has_row   boolean;
    v_claimed   bigint;
    v_new       bigint;
    v_tries     int := 0;
BEGIN
    IF p_lease_seconds IS NULL OR p_lease_seconds <= 0 THEN
        RAISE EXCEPTION 'idemd_claim: lease must be positive'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_token_expires IS NULL THEN
        RAISE EXCEPTION 'idemd_claim: token expiry must not be NULL'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_lease := v_now + make_interval(secs => p_lease_seconds);

    -- Fresh token, the first submit's case: take the slot at once.  With a
    -- record in place this inserts nothing (and writes nothing), and the
    -- full path below decides.
    IF p_version_key IS NULL AND p_token_expires > v_now THEN
        INSERT INTO records AS rec
               (tenant_id, token_id, operation_id, subject, state,
                fingerprint, attempt, lease_expires_at, version_claimed,
                token_expires_at, expires_at, created_at, updated_at)
        VALUES (p_tenant, p_token, p_operation, p_subject, 'in_progress',
                p_fingerprint, 1, v_lease, NULL,
                p_token_expires, greatest(p_token_expires, v_lease),
                v_now, v_now)
        ON CONFLICT (tenant_id, token_id) DO NOTHING;
        IF FOUND THEN
            outcome          := 'claimed';
            attempt          := 1;
            lease_expires_at := v_lease;
            RETURN NEXT; RETURN;
        END IF;
    END IF;
    -- Fast path, no lock: completed and revoked are final states (only the
    -- sweeper removes such a record), so their duplicates are answered by a
    -- plain read that writes nothing and waits for nobody.
    SELECT * INTO r
      FROM records rec
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token
       AND rec.state IN ('completed', 'revoked');
    IF FOUND THEN
        IF r.state = 'revoked' THEN
            outcome := 'revoked';
        ELSIF r.fingerprint IS DISTINCT FROM p_fingerprint THEN
            outcome := 'fingerprint_mismatch';
        ELSE
            outcome          := 'replay';
            attempt          := r.attempt;
            lease_expires_at := r.expires_at;
            resp_status      := r.response_status;
            resp_headers     := r.response_headers;
            resp_body        := r.response_body;
            resp_is_json     := r.response_is_json;
        END IF;
        RETURN NEXT; RETURN;
    END IF;

    LOOP
        v_tries := v_tries + 1;
        IF v_tries > 100 THEN
            RAISE EXCEPTION 'idemd_claim: record kept changing under us'
                USING ERRCODE = 'serialization_failure';
        END IF;

        SELECT * INTO r
          FROM records rec
         WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token
           FOR UPDATE;
        v_existing := FOUND;

        IF v_existing THEN
            -- the fast path above saw no final record, but one may have
            -- become final since: check again under the lock
            IF r.state = 'revoked' THEN
                outcome := 'revoked';
                RETURN NEXT; RETURN;
            END IF;
            IF r.fingerprint IS DISTINCT FROM p_fingerprint THEN
                outcome := 'fingerprint_mismatch';
                RETURN NEXT; RETURN;
            END IF;
            IF r.state = 'completed' THEN
                outcome      := 'replay';
                attempt      := r.attempt;
                -- for a replay this column carries the end of retention,
                -- until which the response may be cached
                lease_expires_at := r.expires_at;
                resp_status  := r.response_status;
                resp_headers := r.response_headers;
                resp_body    := r.response_body;
                resp_is_json := r.response_is_json;
                RETURN NEXT; RETURN;
            END IF;
            IF r.state = 'in_progress' AND r.lease_expires_at > v_now THEN
                outcome          := 'in_progress';
                attempt          := r.attempt;
                lease_expires_at := r.lease_expires_at;
                retry_after      := greatest(1, ceil(extract(epoch FROM
                                        r.lease_expires_at - v_now)))::int;
                RETURN NEXT; RETURN;
            END IF;
            -- issued (released) or lease ran out: takeover
        END IF;

        -- New claim or takeover: checks that need no lock on the counter.
        IF p_token_expires <= v_now THEN
            outcome := 'expired';
            RETURN NEXT; RETURN;
        END IF;
        IF p_version_key IS NOT NULL AND p_expected IS NULL
           AND p_require_version THEN
            outcome := 'version_required';
            RETURN NEXT; RETURN;
        END IF;

        EXIT WHEN v_existing;

        -- No record: take the slot by inserting it.  A concurrent claimer
        -- that inserted first makes us wait for it; if it committed we find
        -- no row inserted here and go round again to read its record.
        INSERT INTO records AS rec
               (tenant_id, token_id, operation_id, subject, state,
                fingerprint, attempt, lease_expires_at, version_claimed,
                token_expires_at, expires_at, created_at, updated_at)
        VALUES (p_tenant, p_token, p_operation, p_subject, 'in_progress',
                p_fingerprint, 1, v_lease, NULL,
                p_token_expires, greatest(p_token_expires, v_lease),
                v_now, v_now)
        ON CONFLICT (tenant_id, token_id) DO NOTHING;
        IF FOUND THEN
            v_inserted := true;
            EXIT;
        END IF;
    END LOOP;

    -- The record is locked (existing) or freshly inserted by us.
    IF p_version_key IS NOT NULL THEN
        LOOP
            SELECT ver.version INTO v_cur
              FROM versions ver
             WHERE ver.tenant_id = p_tenant AND ver.key = p_version_key
               FOR UPDATE;
            v_has_row := FOUND;
            IF NOT v_has_row THEN
                v_cur := 0;
            END IF;

            IF v_existing AND r.version_claimed IS NOT NULL
               AND coalesce(p_expected, r.version_claimed) = r.version_claimed
               AND v_cur = r.version_claimed + 1 THEN
                -- Takeover: the earlier attempt already bumped V -> V+1.
                v_claimed := r.version_claimed;
                v_new     := v_cur;
                EXIT;
            END IF;

            IF p_expected IS NOT NULL AND v_cur <> p_expected THEN
                IF v_inserted THEN
                    DELETE FROM records rec
                     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token;
                END IF;
                outcome         := 'version_mismatch';
                current_version := v_cur;
                RETURN NEXT; RETURN;
            END IF;

            v_claimed := v_cur;
            IF v_has_row THEN
                UPDATE versions ver
                   SET version = ver.version + 1, updated_at = v_now
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
            -- Someone created the counter meanwhile: lock it and decide again.
        END LOOP;
    END IF;

    IF v_inserted THEN
        IF v_claimed IS NOT NULL THEN
            UPDATE records rec
               SET version_claimed = v_claimed
             WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token;
        END IF;
        attempt := 1;
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
               token_expires_at = p_token_expires,
               expires_at       = greatest(p_token_expires, v_lease),
               updated_at       = v_now
         WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token
        RETURNING rec.attempt INTO attempt;
    END IF;

    outcome          := 'claimed';
    lease_expires_at := v_lease;
    current_version  := v_new;
    RETURN NEXT; RETURN;
END;
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
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := now();
    r     records%ROWTYPE;
BEGIN
    IF p_status IS NULL OR p_status NOT BETWEEN 100 AND 599 THEN
        RAISE EXCEPTION 'idemd_complete: status must be 100..599'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_retention_seconds IS NULL OR p_retention_seconds < 0 THEN
        RAISE EXCEPTION 'idemd_complete: retention must not be negative'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- The current attempt of an in-progress record: store it now.
    UPDATE records rec
       SET state            = 'completed',
           lease_expires_at = NULL,
           response_status  = p_status,
           response_headers = p_headers,
           response_body    = p_body,
           response_is_json = coalesce(p_is_json, false),
           expires_at       = greatest(v_now + make_interval(secs => p_retention_seconds),
                                       rec.token_expires_at),
           updated_at       = v_now
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token
       AND rec.state = 'in_progress' AND rec.attempt = p_attempt
    RETURNING rec.response_status, rec.response_headers, rec.response_body,
              rec.response_is_json, rec.expires_at, rec.fingerprint
         INTO resp_status, resp_headers, resp_body, resp_is_json, expires_at, fingerprint;
    IF FOUND THEN
        outcome := 'completed';
        RETURN NEXT; RETURN;
    END IF;

    -- Nothing stored: say why.  The record is locked so that the answer
    -- holds at least until this transaction ends.
    SELECT * INTO r
      FROM records rec
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token
       FOR UPDATE;
    IF NOT FOUND THEN
        outcome := 'not_in_progress';
        RETURN NEXT; RETURN;
    END IF;
    IF r.attempt IS DISTINCT FROM p_attempt THEN
        outcome := 'lease_lost';
        RETURN NEXT; RETURN;
    END IF;
    IF r.state = 'completed' THEN
        outcome      := 'already_completed';
        resp_status  := r.response_status;
        resp_headers := r.response_headers;
        resp_body    := r.response_body;
        resp_is_json := r.response_is_json;
        expires_at   := r.expires_at;
        fingerprint  := r.fingerprint;
        RETURN NEXT; RETURN;
    END IF;
    outcome := 'not_in_progress';
    RETURN NEXT; RETURN;
END;
$$;
