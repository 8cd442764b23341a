-- 0013: the two events almost every record has, told by the record itself.
--
-- A first submit used to write four rows: the record, its 'claimed' event,
-- the record's completion and its 'completed' event. The event rows were
-- the largest part of what a first submit costs PostgreSQL (bench/README.md,
-- "The database cost model": about 165 of 553 µs of CPU). From here on the
-- plain-SQL paths of src/store/store.c (a claim that makes a fresh record,
-- the completion of the current attempt) keep their event in the record's
-- own columns: its place in the trail (a seq drawn from the events' own
-- sequence, so it sorts among the others), who did it and the request's
-- trace id; when is the record's created_at (the claim) or completed_at,
-- and the attempt and status are the record's. Every other change (a
-- takeover, extend, checkpoint, release, revoke, the end of a life, a claim
-- or completion through the PL/pgSQL functions) still writes its row.
--
-- idemd.events is the audit trail as the API and the CLI read it: the rows
-- of record_events and the events the live records tell, each shown while
-- the operation's audit retention since it has not passed (as an event row
-- is kept until then). When a record's life ends (the sweeper makes it a
-- fence, idemd.end_life) or a live record is deleted, the trigger that
-- writes its 'expired' event first writes the events it told as rows, with
-- their seq, time, who and trace id, if their retention has not passed: the
-- trail outlives the record as before. (The line tagged "-- mutant:" is
-- replaced in a mutant build: tests/mutants.sh, told_events_lost.) A previous release running beside
-- this one reads record_events alone and does not see the events records
-- tell; what it writes, this one reads.

ALTER TABLE records
    ADD COLUMN claimed_seq     bigint      NULL,
    ADD COLUMN claimed_by      text        NULL,
    ADD COLUMN claimed_trace   text        NULL,
    ADD COLUMN completed_seq   bigint      NULL,
    ADD COLUMN completed_at    timestamptz NULL,
    ADD COLUMN completed_by    text        NULL,
    ADD COLUMN completed_trace text        NULL;

-- How long the events of operation P_OPERATION are kept.
CREATE FUNCTION idemd.audit_interval(p_operation int) RETURNS interval
LANGUAGE sql STABLE
AS $$
    SELECT make_interval(secs => coalesce(o.audit_retention_seconds, o.retention_seconds))
      FROM operations o WHERE o.id = p_operation
$$;

CREATE VIEW idemd.events AS
    SELECT e.tenant_id, e.token_id, e.seq, e.at, e.event, e.attempt, e.status, e.phase,
           e.by, e.trace_id
      FROM record_events e
    UNION ALL
    SELECT r.tenant_id, r.token_id, r.claimed_seq, r.created_at, 'claimed', 1, NULL::int,
           NULL::text, r.claimed_by, r.claimed_trace
      FROM records r JOIN operations o ON o.id = r.operation_id
     WHERE r.claimed_seq IS NOT NULL
       AND r.created_at + make_interval(secs => coalesce(o.audit_retention_seconds,
                                                         o.retention_seconds)) > now()
    UNION ALL
    SELECT r.tenant_id, r.token_id, r.completed_seq, r.completed_at, 'completed', r.attempt,
           r.response_status, NULL::text, r.completed_by, r.completed_trace
      FROM records r JOIN operations o ON o.id = r.operation_id
     WHERE r.completed_seq IS NOT NULL
       AND r.completed_at + make_interval(secs => coalesce(o.audit_retention_seconds,
                                                           o.retention_seconds)) > now();

-- Writes the events record P_OLD tells as rows of record_events (those whose
-- retention has not passed).
CREATE FUNCTION idemd.keep_told_events(p_old records) RETURNS void
LANGUAGE sql
AS $$
    INSERT INTO record_events (tenant_id, token_id, seq, at, event, attempt, status, phase, by,
                               trace_id, expires_at)
    SELECT p_old.tenant_id, p_old.token_id, t.seq, t.at, t.event, t.attempt, t.status, NULL,
           t.by, t.trace, t.at + idemd.audit_interval(p_old.operation_id)
      FROM (VALUES (p_old.claimed_seq, p_old.created_at, 'claimed', 1, NULL::int,
                    p_old.claimed_by, p_old.claimed_trace),
                   (p_old.completed_seq, p_old.completed_at, 'completed', p_old.attempt,
                    p_old.response_status, p_old.completed_by, p_old.completed_trace))
           AS t(seq, at, event, attempt, status, by, trace)
     WHERE t.seq IS NOT NULL
       AND t.at + idemd.audit_interval(p_old.operation_id) > now()
$$;

-- The end of a life (0011): the told events become rows, then 'expired'.
CREATE OR REPLACE FUNCTION idemd.record_ended() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM idemd.keep_told_events(OLD);  -- mutant:told_events_lost     NULL;
    INSERT INTO record_events (tenant_id, token_id, event, attempt, by, expires_at)
    VALUES (NEW.tenant_id, NEW.token_id, 'expired', NEW.attempt, 'sweeper',
            coalesce(idemd_audit_until(NEW.operation_id), now()));
    RETURN NULL;
END;
$$;

-- A live record deleted (0007, 0011): the same.
CREATE OR REPLACE FUNCTION idemd_record_expired() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM idemd.keep_told_events(OLD);
    INSERT INTO record_events (tenant_id, token_id, event, attempt, by, expires_at)
    VALUES (OLD.tenant_id, OLD.token_id, 'expired', OLD.attempt, 'sweeper',
            coalesce(idemd_audit_until(OLD.operation_id), now()));
    RETURN NULL;
END;
$$;

-- A fence tells nothing: the end of a life clears what the record told
-- (after the trigger above has kept it).
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
           completed_seq      = NULL,
           completed_at       = NULL,
           completed_by       = NULL,
           completed_trace    = NULL,
           updated_at         = clock_timestamp()
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_id
       AND rec.state <> 'expired' AND rec.expires_at <= clock_timestamp()
$$;
