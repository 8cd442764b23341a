-- 0005: long work. The current attempt of a record in progress may extend
-- its lease and leave checkpoints (recovery points): the latest one is kept
-- with the record and handed to the next attempt on a takeover, so that it
-- resumes from the last completed phase instead of starting over.
--
-- Both functions fence like idemd_complete: only the current attempt may
-- write ('lease_lost' otherwise), only a record in progress ('not_in_progress'
-- otherwise); a current attempt whose lease ran out but that nobody took
-- over yet is still accepted. Nothing is written on a refusal.

ALTER TABLE records
    ADD COLUMN checkpoint_phase   text  NULL
        CHECK (octet_length(checkpoint_phase) BETWEEN 1 AND 64),
    ADD COLUMN checkpoint_data    jsonb NULL,
    ADD COLUMN checkpoint_attempt int   NULL;

-- 'extended' with the new lease end | 'lease_lost' | 'not_in_progress'
CREATE FUNCTION idemd_extend(p_tenant int, p_token bytea, p_attempt int, p_lease_seconds int)
RETURNS TABLE (outcome text, lease_expires_at timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    r     records%ROWTYPE;
    v_end timestamptz := now() + make_interval(secs => p_lease_seconds);
BEGIN
    IF p_lease_seconds IS NULL OR p_lease_seconds <= 0 THEN
        RAISE EXCEPTION 'idemd_extend: lease must be positive'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO r FROM records rec
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token FOR UPDATE;
    IF NOT FOUND THEN
        outcome := 'not_in_progress'; RETURN NEXT; RETURN;
    END IF;
    IF r.attempt IS DISTINCT FROM p_attempt THEN
        outcome := 'lease_lost'; RETURN NEXT; RETURN;
    END IF;
    IF r.state <> 'in_progress' THEN
        outcome := 'not_in_progress'; RETURN NEXT; RETURN;
    END IF;
    UPDATE records rec
       SET lease_expires_at = v_end,
           expires_at       = greatest(rec.expires_at, v_end),
           updated_at       = now()
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token;
    outcome := 'extended';
    lease_expires_at := v_end;
    RETURN NEXT;
END;
$$;

-- 'saved' | 'lease_lost' | 'not_in_progress'
CREATE FUNCTION idemd_checkpoint(p_tenant int, p_token bytea, p_attempt int, p_phase text,
                                 p_data jsonb)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    r records%ROWTYPE;
BEGIN
    SELECT * INTO r FROM records rec
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'not_in_progress';
    END IF;
    IF r.attempt IS DISTINCT FROM p_attempt THEN
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
