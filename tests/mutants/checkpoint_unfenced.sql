-- mutant of migrations/0011_fences.sql: idemd_checkpoint
-- The checkpoint's own fence broken, the other fenced writes kept:
-- tests/mutants.sh, checkpoint_unfenced. A mutant build (CMakeLists.txt)
-- applies this file after every migration; tests/mutants.sh checks that it
-- is the function as its migration (the last to define it) holds, but for
-- the lines marked "-- was:".
CREATE OR REPLACE FUNCTION idemd_checkpoint(p_tenant int, p_token bytea, p_attempt int,
                                            p_phase text, p_data jsonb)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    r records%ROWTYPE;
BEGIN
    SELECT * INTO r FROM records rec
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'no_record';
    END IF;
    IF false  -- was:     IF r.attempt IS DISTINCT FROM p_attempt  -- mutant:no_fence     IF false
       THEN  -- was:        OR r.expires_at <= clock_timestamp() THEN  -- mutant:no_fence        THEN
        RETURN 'lease_lost';
    END IF;
    IF r.state <> 'in_progress' THEN
        RETURN 'not_in_progress';
    END IF;
    UPDATE records rec
       SET checkpoint_phase   = p_phase,
           checkpoint_data    = p_data,
           checkpoint_attempt = p_attempt,
           updated_at         = now()
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token;
    RETURN 'saved';
END;
$$;
