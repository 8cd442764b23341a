-- 0014: every audit event keeps the retention it was given when it happened.
--
-- An event row of record_events carries its own expires_at, set when it is
-- written (now + the operation's audit retention then). The two events a
-- record tells in its own columns (0013: 'claimed' of a fresh record,
-- 'completed') followed the operation's current retention instead: lowering
-- audit_retention_seconds hid them at once (a completed record's trail
-- showed only its rows, a live record's trail answered 404), raising it
-- again showed them again, and a life that ended meanwhile lost them for
-- good. From here on each told event has its deadline in the record, set by
-- the statement that tells it (src/store/store.c, claim_fresh and
-- complete_current), and keeps it: the view shows it until then, and the
-- end of a life writes it as a row with that deadline. Changing an
-- operation's retention affects only events written afterwards.
--
-- A told event without a deadline (a record this migration found, or one a
-- previous release running beside this one wrote) gets the deadline its
-- operation's retention gives it now, the rule it was told under.
-- (Lines tagged "-- mutant:" are replaced in a mutant build: tests/mutants.sh.)

ALTER TABLE records
    ADD COLUMN claimed_until   timestamptz NULL,
    ADD COLUMN completed_until timestamptz NULL;

UPDATE records r
   SET claimed_until   = CASE WHEN r.claimed_seq IS NOT NULL
                              THEN r.created_at + idemd.audit_interval(r.operation_id) END,
       completed_until = CASE WHEN r.completed_seq IS NOT NULL
                              THEN r.completed_at + idemd.audit_interval(r.operation_id) END
 WHERE r.claimed_seq IS NOT NULL OR r.completed_seq IS NOT NULL;

CREATE OR REPLACE VIEW idemd.events AS
    SELECT e.tenant_id, e.token_id, e.seq, e.at, e.event, e.attempt, e.status, e.phase,
           e.by, e.trace_id
      FROM record_events e
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

-- Writes the events record P_OLD tells as rows of record_events, each with
-- its own deadline, unless that has passed.
CREATE OR REPLACE FUNCTION idemd.keep_told_events(p_old records) RETURNS void
LANGUAGE sql
AS $$
    INSERT INTO record_events (tenant_id, token_id, seq, at, event, attempt, status, phase, by,
                               trace_id, expires_at)
    SELECT p_old.tenant_id, p_old.token_id, t.seq, t.at, t.event, t.attempt, t.status, NULL,
           t.by, t.trace, t.until
      FROM (VALUES (p_old.claimed_seq, p_old.created_at, 'claimed', 1, NULL::int,
                    p_old.claimed_by, p_old.claimed_trace,
                    coalesce(p_old.claimed_until,
                             p_old.created_at + idemd.audit_interval(p_old.operation_id))),
                   (p_old.completed_seq, p_old.completed_at, 'completed', p_old.attempt,
                    p_old.response_status, p_old.completed_by, p_old.completed_trace,
                    coalesce(p_old.completed_until,
                             p_old.completed_at + idemd.audit_interval(p_old.operation_id))))
           AS t(seq, at, event, attempt, status, by, trace, until)
     WHERE t.seq IS NOT NULL
       AND t.until > now()
$$;

-- A live record deleted (0007, 0011, 0013): its told events first become
-- rows, then 'expired'.
CREATE OR REPLACE FUNCTION idemd_record_expired() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM idemd.keep_told_events(OLD);  -- mutant:told_events_lost_on_delete     NULL;
    INSERT INTO record_events (tenant_id, token_id, event, attempt, by, expires_at)
    VALUES (OLD.tenant_id, OLD.token_id, 'expired', OLD.attempt, 'sweeper',
            coalesce(idemd_audit_until(OLD.operation_id), now()));
    RETURN NULL;
END;
$$;

-- The end of a life (0011, 0013) also clears the told events' deadlines.
CREATE OR REPLACE FUNCTION idemd.end_life(p_tenant int, p_id bytea) RETURNS void
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
           claimed_seq        = NULL,
           claimed_by         = NULL,
           claimed_trace      = NULL,
           claimed_until      = NULL,
           completed_seq      = NULL,
           completed_at       = NULL,
           completed_by       = NULL,
           completed_trace    = NULL,
           completed_until    = NULL,
           updated_at         = clock_timestamp()
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_id
       AND rec.state <> 'expired' AND rec.expires_at <= clock_timestamp()
$$;
