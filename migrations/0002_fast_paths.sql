-- 0002: shorter paths for the common case of each state-machine step, and
-- the batch and sweep functions the batcher and the janitor call.
--
-- The 0001 functions stay as they are, renamed *_full; idemd_claim and
-- idemd_complete become short front ends that take the common case in one
-- statement and hand every other case to the full function, unchanged.

ALTER FUNCTION idemd_claim(int, bytea, int, text, bytea, timestamptz, int, text, bigint, boolean)
    RENAME TO idemd_claim_full;
ALTER FUNCTION idemd_complete(int, bytea, int, int, jsonb, bytea, boolean, int)
    RENAME TO idemd_complete_full;

-- ------------------------------------------------------------- idemd_claim
--
-- A duplicate of a completed or revoked record is answered by the full
-- function's lock-free read; a fresh token (no record yet, not expired, no
-- version counter) is claimed by one INSERT ... ON CONFLICT DO NOTHING;
-- everything else (and a fresh token that lost the insert race) goes to
-- idemd_claim_full.  Same arguments and results as in 0001.
CREATE FUNCTION idemd_claim(
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
    v_now   timestamptz := now();
    v_lease timestamptz;
BEGIN
    IF p_version_key IS NULL AND p_token_expires > v_now AND p_lease_seconds > 0
       AND NOT EXISTS (SELECT 1 FROM records rec
                        WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token) THEN
        v_lease := v_now + make_interval(secs => p_lease_seconds);
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
    RETURN QUERY SELECT * FROM idemd_claim_full(p_tenant, p_token, p_operation, p_subject,
        p_fingerprint, p_token_expires, p_lease_seconds, p_version_key, p_expected,
        p_require_version);
END;
$$;

-- ---------------------------------------------------------- idemd_complete
--
-- The current attempt of an in-progress record is stored by one UPDATE
-- guarded by state and attempt; when that touches nothing,
-- idemd_complete_full reads the record and gives the unchanged answer.
CREATE FUNCTION idemd_complete(
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
BEGIN
    IF p_status BETWEEN 100 AND 599 AND p_retention_seconds >= 0 THEN
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
    END IF;
    RETURN QUERY SELECT * FROM idemd_complete_full(p_tenant, p_token, p_attempt, p_status,
        p_headers, p_body, p_is_json, p_retention_seconds);
END;
$$;

-- ------------------------------------------------------- idemd_claim_batch
--
-- idemd_claim for every element of the arrays, in one transaction (idemd's
-- batcher sends the claims that arrived together, sorted by token).  The
-- common case, a fresh token without a counter, is one set-based INSERT
-- for the whole batch; every other element (a record exists, a counter,
-- an expired token, the second occurrence of a token in the batch) then
-- goes through idemd_claim one by one, and sees the rows inserted first.
-- Rows come back with i, the element's 1-based position, in any order.
CREATE FUNCTION idemd_claim_batch(
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
LANGUAGE plpgsql
AS $$
DECLARE
    v_now  timestamptz := now();
    v_done int[];
BEGIN
    WITH u AS (
        SELECT x.*, row_number() OVER (PARTITION BY x.tenant, x.token ORDER BY x.i) AS nth
          FROM unnest(p_tenant, p_token, p_operation, p_subject, p_fingerprint,
                      p_token_expires, p_lease_seconds, p_version_key)
               WITH ORDINALITY
               AS x(tenant, token, op, subject, fp, expires, lease, vkey, i)
    ), fresh AS (
        SELECT u.*, v_now + make_interval(secs => u.lease) AS lease_end
          FROM u
         WHERE u.nth = 1 AND u.vkey IS NULL AND u.lease > 0
           AND to_timestamp(u.expires) > v_now
    ), ins AS (
        INSERT INTO records AS rec
               (tenant_id, token_id, operation_id, subject, state,
                fingerprint, attempt, lease_expires_at, version_claimed,
                token_expires_at, expires_at, created_at, updated_at)
        SELECT f.tenant, f.token, f.op, f.subject, 'in_progress',
               f.fp, 1, f.lease_end, NULL,
               to_timestamp(f.expires), greatest(to_timestamp(f.expires), f.lease_end),
               v_now, v_now
          FROM fresh f
         ORDER BY f.i
        ON CONFLICT (tenant_id, token_id) DO NOTHING
        RETURNING rec.tenant_id, rec.token_id
    )
    SELECT coalesce(array_agg(f.i::int), '{}')
      INTO v_done
      FROM fresh f JOIN ins ON ins.tenant_id = f.tenant AND ins.token_id = f.token;

    RETURN QUERY
    SELECT x.i::int, 'claimed'::text, 1,
           v_now + make_interval(secs => x.lease), NULL::int, NULL::int, NULL::jsonb,
           NULL::bytea, NULL::boolean, NULL::bigint
      FROM unnest(p_lease_seconds) WITH ORDINALITY AS x(lease, i)
     WHERE x.i = ANY (v_done);

    RETURN QUERY
    SELECT x.i::int, c.*
      FROM unnest(p_tenant, p_token, p_operation, p_subject, p_fingerprint,
                  p_token_expires, p_lease_seconds, p_version_key, p_expected,
                  p_require_version)
           WITH ORDINALITY
           AS x(tenant, token, op, subject, fp, expires, lease, vkey, expected, required, i)
     CROSS JOIN LATERAL idemd_claim(x.tenant, x.token, x.op, x.subject, x.fp,
                                    to_timestamp(x.expires), x.lease, x.vkey, x.expected,
                                    x.required) c
     WHERE x.i <> ALL (v_done)
     ORDER BY x.i;
END;
$$;

-- ---------------------------------------------------- idemd_complete_batch
--
-- idemd_complete for every element, in one transaction: one set-based
-- UPDATE stores every current in-progress attempt; the elements it did
-- not store (refusals, a token completed twice in the batch) go through
-- idemd_complete one by one for their answer.  Rows come back with i, the
-- element's 1-based position, in any order.
CREATE FUNCTION idemd_complete_batch(
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
    IF EXISTS (SELECT 1 FROM unnest(p_status) s WHERE s IS NULL OR s NOT BETWEEN 100 AND 599)
       OR EXISTS (SELECT 1 FROM unnest(p_retention_seconds) r WHERE r IS NULL OR r < 0) THEN
        RAISE EXCEPTION 'idemd_complete_batch: status must be 100..599, retention >= 0'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    WITH u AS (
        SELECT x.*, row_number() OVER (PARTITION BY x.tenant, x.token ORDER BY x.i) AS nth
          FROM unnest(p_tenant, p_token, p_attempt, p_status, p_headers, p_body, p_is_json,
                      p_retention_seconds)
               WITH ORDINALITY
               AS x(tenant, token, attempt, status, headers, body, is_json, retention, i)
    ), upd AS (
        UPDATE records rec
           SET state            = 'completed',
               lease_expires_at = NULL,
               response_status  = u.status,
               response_headers = u.headers,
               response_body    = u.body,
               response_is_json = coalesce(u.is_json, false),
               expires_at       = greatest(v_now + make_interval(secs => u.retention),
                                           rec.token_expires_at),
               updated_at       = v_now
          FROM u
         WHERE u.nth = 1 AND rec.tenant_id = u.tenant AND rec.token_id = u.token
           AND rec.state = 'in_progress' AND rec.attempt = u.attempt
        RETURNING u.i, rec.response_status, rec.response_headers, rec.response_body,
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

    RETURN QUERY
    SELECT x.i::int, c.*
      FROM unnest(p_tenant, p_token, p_attempt, p_status, p_headers, p_body, p_is_json,
                  p_retention_seconds)
           WITH ORDINALITY
           AS x(tenant, token, attempt, status, headers, body, is_json, retention, i)
     CROSS JOIN LATERAL idemd_complete(x.tenant, x.token, x.attempt, x.status, x.headers,
                                       x.body, x.is_json, x.retention) c
     WHERE x.i <> ALL (v_done)
     ORDER BY x.i;
END;
$$;

-- ------------------------------------------------------- idemd_sweep_after
--
-- idemd_sweep for one batch of a pass that goes on from P_AFTER, the
-- latest expiry the pass's previous batch deleted (NULL: from the start).
-- The index entries of rows deleted by earlier batches stay in
-- records_expires_at_idx until vacuum; scanning past them again made every
-- batch of a large backlog slower than the one before.  Rows skipped (a
-- claim held them) are found by the next pass, which starts over.
-- deleted = -1 when another instance is sweeping (advisory lock).
CREATE FUNCTION idemd_sweep_after(p_limit int, p_after timestamptz)
RETURNS TABLE (deleted int, last_expiry timestamptz)
LANGUAGE plpgsql
AS $$
BEGIN
    IF NOT pg_try_advisory_xact_lock(7428137) THEN
        deleted := -1;
        RETURN NEXT; RETURN;
    END IF;
    WITH victims AS (
        SELECT rec.tenant_id, rec.token_id
          FROM records rec
         WHERE rec.expires_at < now()
           AND rec.expires_at >= coalesce(p_after, '-infinity')
         ORDER BY rec.expires_at
         LIMIT greatest(p_limit, 0)
           FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM records d
         USING victims v
         WHERE d.tenant_id = v.tenant_id AND d.token_id = v.token_id
           AND d.expires_at < now()
        RETURNING d.expires_at
    )
    SELECT count(*)::int, max(g.expires_at) INTO deleted, last_expiry FROM gone g;
    RETURN NEXT; RETURN;
END;
$$;
