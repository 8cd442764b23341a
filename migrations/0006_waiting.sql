-- 0006: duplicates that wait for the answer.
--
-- An operation's wait_seconds (0..60, default 0) is how long a duplicate of
-- an in-progress submit waits for its outcome when it sends no
-- Prefer: wait=N. Waiting duplicates may sit on any idemd instance: when a
-- record leaves "in progress" (completed or released) PostgreSQL notifies
-- channel idemd_records with "tenant:record id in hex", delivered at commit,
-- and every instance's waiters thread (src/waiters.c) LISTENs to it.

ALTER TABLE operations
    ADD COLUMN wait_seconds int NOT NULL DEFAULT 0 CHECK (wait_seconds BETWEEN 0 AND 60);

CREATE FUNCTION idemd_record_settled() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_notify('idemd_records', NEW.tenant_id || ':' || encode(NEW.token_id, 'hex'));
    RETURN NULL;
END;
$$;

CREATE TRIGGER records_settled
    AFTER UPDATE OF state ON records
    FOR EACH ROW
    WHEN (OLD.state = 'in_progress' AND NEW.state IS DISTINCT FROM 'in_progress')
    EXECUTE FUNCTION idemd_record_settled();
