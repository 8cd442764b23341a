-- 0018: the sweeper ends lives, deletes fences and moves rows a batch at a
-- time, and writes the events of the lives it ends a batch at a time.
--
-- idemd.sweep (0017) worked through its batch in a PL/pgSQL loop, one
-- statement per row, and the trigger records_ended wrote each ended
-- record's events with two more statements. Ending a life cost about 675
-- microseconds of PostgreSQL's time, several first submits' worth: a
-- service taking more first submits a second than its sweeper could end
-- would never catch up (bench/sweep.sh). The time went to three things:
--   - Statements run one row at a time. Every statement that writes a
--     table prepares that table's CHECK constraints again (records has
--     nine, record_events two), and starts an executor.
--   - Functions in SQL called from PL/pgSQL or a trigger (idemd.end_life,
--     idemd.keep_told_events, idemd_audit_until): PostgreSQL plans an SQL
--     function's statement again on every such call, where PL/pgSQL keeps
--     its plans for the session.
--   - The trigger's own statements, per ended record.
-- Now a batch is four statements, whatever its size: two in
-- idemd.end_lives (the events its ended records told kept as rows; the
-- lives ended and their 'expired' events written), one DELETE of the
-- fences past their retention, one UPDATE giving every other row its next
-- time. records_ended is dropped: lives end through
-- idemd.end_lives alone (idemd.end_life, which idemd.claim_locked calls,
-- is one record of it). The functions that stay row by row are PL/pgSQL.
-- The events written, their seq, times and retention are as before.
-- (Lines tagged "-- mutant:" are replaced in a mutant build: tests/mutants.sh.)

-- --------------------------------------------------------- idemd.told_events
-- The events record P_REC tells in its own columns (0013) whose retention
-- has not passed: what the end of its life keeps as rows. An SQL function
-- that PostgreSQL inlines into the statement that reads it, so it is
-- planned with that statement.
CREATE FUNCTION idemd.told_events(p_rec records)
RETURNS TABLE (seq bigint, at timestamptz, event text, attempt int, status int, by text,
               trace text, until timestamptz)
LANGUAGE sql
STABLE
AS $$
    SELECT t.seq, t.at, t.event, t.attempt, t.status, t.by, t.trace, t.until
      FROM (VALUES (p_rec.claimed_seq, p_rec.created_at, 'claimed', 1, NULL::int,
                    p_rec.claimed_by, p_rec.claimed_trace,
                    coalesce(p_rec.claimed_until,
                             p_rec.created_at + idemd.audit_interval(p_rec.operation_id))),
                   (p_rec.completed_seq, p_rec.completed_at, 'completed', p_rec.attempt,
                    p_rec.response_status, p_rec.completed_by, p_rec.completed_trace,
                    coalesce(p_rec.completed_until,
                             p_rec.completed_at + idemd.audit_interval(p_rec.operation_id))))
           AS t(seq, at, event, attempt, status, by, trace, until)
     WHERE t.seq IS NOT NULL
       AND t.until > now()
$$;

-- ----------------------------------------------------- idemd.keep_told_events
-- As in 0014 (the deletion of a live record: idemd_record_expired), in
-- PL/pgSQL so that the trigger does not plan it each time.
CREATE OR REPLACE FUNCTION idemd.keep_told_events(p_old records) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO record_events (tenant_id, token_id, seq, at, event, attempt, status, phase, by,
                               trace_id, expires_at)
    SELECT p_old.tenant_id, p_old.token_id, t.seq, t.at, t.event, t.attempt, t.status, NULL,
           t.by, t.trace, t.until
      FROM idemd.told_events(p_old) t;
END;
$$;

-- ----------------------------------------------------------- idemd.end_lives
-- Ends the life of each record named by P_TENANTS[i], P_IDS[i] that is
-- live and past its expires_at, as idemd.end_life did one record (0017):
-- the events it told are kept as rows and its 'expired' event written
-- (what the trigger records_ended did row by row, dropped below: lives end
-- here alone), then it becomes a fence, looked at again P_KEEP after its
-- life ended. Returns how many it ended. Its callers hold the records'
-- locks already (idemd.sweep its batch, idemd.claim_locked its record),
-- and a record past its expires_at takes no write that changes what it
-- tells, so the two statements see the same records.
CREATE FUNCTION idemd.end_lives(p_tenants int[], p_ids bytea[], p_keep interval DEFAULT '0')
RETURNS int
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_n   int;
BEGIN
    INSERT INTO record_events (tenant_id, token_id, seq, at, event, attempt, status, phase, by,
                               trace_id, expires_at)
    SELECT rec.tenant_id, rec.token_id, t.seq, t.at, t.event, t.attempt, t.status, NULL,
           t.by, t.trace, t.until
      FROM records rec
      JOIN unnest(p_tenants, p_ids) AS x(tenant_id, token_id)
        ON rec.tenant_id = x.tenant_id AND rec.token_id = x.token_id
     CROSS JOIN LATERAL idemd.told_events(rec) t
     WHERE rec.state <> 'expired' AND rec.expires_at <= v_now  -- mutant:told_events_lost     WHERE false
       FOR UPDATE OF rec;
    WITH ended AS (
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
               claimed_seq        = NULL,
               claimed_by         = NULL,
               claimed_trace      = NULL,
               claimed_until      = NULL,
               completed_seq      = NULL,
               completed_at       = NULL,
               completed_by       = NULL,
               completed_trace    = NULL,
               completed_until    = NULL,
               sweep_at           = rec.expires_at + p_keep,  -- mutant:fences_swept_at_once                sweep_at           = rec.expires_at,
               updated_at         = clock_timestamp()
          FROM unnest(p_tenants, p_ids) AS x(tenant_id, token_id)
         WHERE rec.tenant_id = x.tenant_id AND rec.token_id = x.token_id
           AND rec.state <> 'expired' AND rec.expires_at <= v_now
     RETURNING rec.tenant_id, rec.token_id, rec.attempt, rec.operation_id)
    INSERT INTO record_events (tenant_id, token_id, event, attempt, by, expires_at)
    SELECT e.tenant_id, e.token_id, 'expired', e.attempt, 'sweeper',
           coalesce(idemd_audit_until(e.operation_id), now())
      FROM ended e;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END;
$$;

DROP TRIGGER records_ended ON records;
DROP FUNCTION idemd.record_ended();

-- ------------------------------------------------------------ idemd.end_life
-- One record (idemd.claim_locked ends the life it finds over).
CREATE OR REPLACE FUNCTION idemd.end_life(p_tenant int, p_id bytea, p_keep interval DEFAULT '0')
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM idemd.end_lives(ARRAY[p_tenant], ARRAY[p_id], p_keep);
END;
$$;

-- --------------------------------------------------------- idemd_audit_until
-- As in 0007, in PL/pgSQL, for the same reason.
CREATE OR REPLACE FUNCTION idemd_audit_until(p_operation int) RETURNS timestamptz
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN (SELECT now() + make_interval(secs => coalesce(o.audit_retention_seconds,
                                                          o.retention_seconds))
              FROM operations o WHERE o.id = p_operation);
END;
$$;

-- --------------------------------------------------------------- idemd.sweep
-- Same arguments, results and order as in 0017. The batch is taken and
-- locked first; then its live records past their expires_at end their
-- lives, its fences P_KEEP past their end are deleted, and every other row
-- of it is given its next time, one statement each.
CREATE OR REPLACE FUNCTION idemd.sweep(p_limit int, p_keep int, p_after text DEFAULT NULL,
                                       p_late int DEFAULT 0)
RETURNS TABLE (ended int, deleted int, moved int, last text)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now     timestamptz := clock_timestamp();
    v_keep    interval := make_interval(secs => greatest(p_keep, 0));
    v_at      timestamptz := '-infinity';
    v_tenant  int := -2147483648;
    v_id      bytea := '';
    v_tenants int[];
    v_ids     bytea[];
    v_states  text[];
    v_ends    timestamptz[];
    v_sweeps  timestamptz[];
    v_n       int;
BEGIN
    ended := 0; deleted := 0; moved := 0;
    IF NOT pg_try_advisory_xact_lock(7428137) THEN
        ended := -1;
        RETURN NEXT; RETURN;
    END IF;
    IF p_after IS NOT NULL THEN
        v_at := CASE split_part(p_after, ' ', 1) WHEN '-inf' THEN '-infinity'::timestamptz
                ELSE timestamptz 'epoch' + (split_part(p_after, ' ', 1) || ' microseconds')::interval
                END;
        v_tenant := split_part(p_after, ' ', 2)::int;
        v_id := decode(split_part(p_after, ' ', 3), 'hex');
    END IF;
    SELECT array_agg(b.tenant_id ORDER BY b.sweep_at, b.tenant_id, b.token_id),
           array_agg(b.token_id ORDER BY b.sweep_at, b.tenant_id, b.token_id),
           array_agg(b.state ORDER BY b.sweep_at, b.tenant_id, b.token_id),
           array_agg(b.expires_at ORDER BY b.sweep_at, b.tenant_id, b.token_id),
           array_agg(b.sweep_at ORDER BY b.sweep_at, b.tenant_id, b.token_id),
           count(*)
      INTO v_tenants, v_ids, v_states, v_ends, v_sweeps, v_n
      FROM (SELECT rec.tenant_id, rec.token_id, rec.state, rec.expires_at, rec.sweep_at
              FROM records rec
             WHERE rec.sweep_at <= v_now - make_interval(secs => greatest(p_late, 0))
               AND (rec.sweep_at, rec.tenant_id, rec.token_id) > (v_at, v_tenant, v_id)
             ORDER BY rec.sweep_at, rec.tenant_id, rec.token_id
             LIMIT greatest(p_limit, 0)
               FOR UPDATE SKIP LOCKED) b;
    IF v_n = 0 THEN
        RETURN NEXT; RETURN;
    END IF;
    v_at := v_sweeps[v_n]; v_tenant := v_tenants[v_n]; v_id := v_ids[v_n];
    ended := idemd.end_lives(
        ARRAY(SELECT v_tenants[i] FROM generate_subscripts(v_ids, 1) i
               WHERE v_states[i] <> 'expired' AND v_ends[i] <= v_now ORDER BY i),
        ARRAY(SELECT v_ids[i] FROM generate_subscripts(v_ids, 1) i
               WHERE v_states[i] <> 'expired' AND v_ends[i] <= v_now ORDER BY i),
        v_keep);
    DELETE FROM records rec
     USING generate_subscripts(v_ids, 1) i
     WHERE rec.tenant_id = v_tenants[i] AND rec.token_id = v_ids[i]
       AND v_states[i] = 'expired'
       AND v_ends[i] + v_keep <= v_now;  -- mutant:fences_swept_at_once        AND true;
    GET DIAGNOSTICS deleted = ROW_COUNT;
    UPDATE records rec
       SET sweep_at = CASE WHEN v_states[i] = 'expired' THEN v_ends[i] + v_keep ELSE v_ends[i] END
      FROM generate_subscripts(v_ids, 1) i
     WHERE rec.tenant_id = v_tenants[i] AND rec.token_id = v_ids[i]
       AND CASE WHEN v_states[i] = 'expired' THEN v_ends[i] + v_keep > v_now
                ELSE v_ends[i] > v_now END;
    GET DIAGNOSTICS moved = ROW_COUNT;
    last := CASE WHEN isfinite(v_at)
                 THEN (extract(epoch FROM v_at) * 1000000)::bigint::text ELSE '-inf' END
            || ' ' || v_tenant || ' ' || encode(v_id, 'hex');
    RETURN NEXT;
END;
$$;
