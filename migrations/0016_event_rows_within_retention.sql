-- 0016: an event row past its retention is gone for readers at once.
--
-- The told events of a record (0014) are shown until their deadline; the
-- rows of record_events were shown until the janitor's event sweep deleted
-- them, so a sweep held up (a janitor whose connection still waits on a
-- frozen primary, a long sweep) kept events on the trail past the
-- retention they were given. The view now hides a row at its expires_at,
-- as it does a told event (those lines are 0014's, and carry its mutant
-- too); the sweep only frees the space.
-- (Lines tagged "-- mutant:" are replaced in a mutant build: tests/mutants.sh.)

CREATE OR REPLACE VIEW idemd.events AS
    SELECT e.tenant_id, e.token_id, e.seq, e.at, e.event, e.attempt, e.status, e.phase,
           e.by, e.trace_id
      FROM record_events e
     WHERE e.expires_at > now()  -- mutant:event_rows_unfiltered     WHERE true
    UNION ALL
    SELECT r.tenant_id, r.token_id, r.claimed_seq, r.created_at, 'claimed', 1, NULL::int,
           NULL::text, r.claimed_by, r.claimed_trace
      FROM records r
     WHERE r.claimed_seq IS NOT NULL
       AND coalesce(r.claimed_until, r.created_at + idemd.audit_interval(r.operation_id)) > now()  -- mutant:told_events_unfiltered        AND true
    UNION ALL
    SELECT r.tenant_id, r.token_id, r.completed_seq, r.completed_at, 'completed', r.attempt,
           r.response_status, NULL::text, r.completed_by, r.completed_trace
      FROM records r
     WHERE r.completed_seq IS NOT NULL
       AND coalesce(r.completed_until, r.completed_at + idemd.audit_interval(r.operation_id)) > now();  -- mutant:told_events_unfiltered        AND true;
