-- 0007: the audit trail.
--
-- One row per state change of a record, written in the same transaction as
-- the change: claimed, taken_over, extended, checkpoint, completed,
-- released, revoked (by the statements in src/store.c, which name who did
-- it: "api_key:<id>" or "route:<METHOD> <path>", never a secret) and
-- expired (a trigger, when the sweeper deletes the record). Events are kept
-- until the operation's audit_retention_seconds (default: its
-- retention_seconds; up to 10 years) past the event, which may outlive the
-- record, and are swept in batches like records.

ALTER TABLE operations
    ADD COLUMN audit_retention_seconds int NULL
        CHECK (audit_retention_seconds BETWEEN 0 AND 315360000);

CREATE TABLE record_events (
    tenant_id   int         NOT NULL,
    token_id    bytea       NOT NULL,
    seq         bigserial   NOT NULL,
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    event       text        NOT NULL
                            CHECK (event IN ('claimed', 'taken_over', 'extended', 'checkpoint',
                                             'completed', 'released', 'revoked', 'expired')),
    attempt     int         NULL,
    status      int         NULL,
    phase       text        NULL,
    by          text        NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, token_id, seq)
);
CREATE INDEX record_events_expiry_idx ON record_events (expires_at);

-- When an event of operation p_operation written now may be swept.
CREATE FUNCTION idemd_audit_until(p_operation int) RETURNS timestamptz
LANGUAGE sql STABLE
AS $$
    SELECT now() + make_interval(secs => coalesce(o.audit_retention_seconds,
                                                  o.retention_seconds))
      FROM operations o WHERE o.id = p_operation
$$;

CREATE FUNCTION idemd_record_expired() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO record_events (tenant_id, token_id, event, attempt, by, expires_at)
    VALUES (OLD.tenant_id, OLD.token_id, 'expired', OLD.attempt, 'sweeper',
            coalesce(idemd_audit_until(OLD.operation_id), now()));
    RETURN NULL;
END;
$$;

-- Only the sweeper deletes records of a live tenant; a deleted tenant's
-- events go with it (idemd_tenant_delete below), so the trigger skips
-- that case by session setting.
CREATE TRIGGER records_expired
    AFTER DELETE ON records
    FOR EACH ROW
    WHEN (current_setting('idemd.deleting_tenant', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION idemd_record_expired();

CREATE OR REPLACE FUNCTION idemd_tenant_delete(p_name text)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_id int;
BEGIN
    SELECT t.id INTO v_id FROM tenants t WHERE t.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM set_config('idemd.deleting_tenant', 'on', true);
    DELETE FROM records rec WHERE rec.tenant_id = v_id;
    PERFORM set_config('idemd.deleting_tenant', 'off', true);
    DELETE FROM record_events ev WHERE ev.tenant_id = v_id;
    DELETE FROM versions ver WHERE ver.tenant_id = v_id;
    DELETE FROM tenants t WHERE t.id = v_id;
    RETURN true;
END;
$$;

-- Deletes at most p_limit expired events; how many.
CREATE FUNCTION idemd_sweep_events(p_limit int) RETURNS int
LANGUAGE sql
AS $$
    WITH d AS (
        DELETE FROM record_events ev
         WHERE (ev.tenant_id, ev.token_id, ev.seq) IN (
               SELECT e.tenant_id, e.token_id, e.seq FROM record_events e
                WHERE e.expires_at < now()
                ORDER BY e.expires_at LIMIT p_limit
                  FOR UPDATE SKIP LOCKED)
        RETURNING 1)
    SELECT count(*)::int FROM d
$$;
