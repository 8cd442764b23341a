-- mutant of migrations/0011_fences.sql: idemd.complete
-- idemd.complete completes a record past its expires_at (the plain-SQL
-- complete still refuses it): tests/mutants.sh, complete_fn_ignores_expiry.
-- A mutant build (CMakeLists.txt) applies this file after every migration;
-- tests/mutants.sh checks that it is the function as its migration (the
-- last to define it) holds, but for the lines marked "-- was:".
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
           AND rec.state = 'in_progress'  -- was:            AND rec.state = 'in_progress' AND rec.expires_at > v_now
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
