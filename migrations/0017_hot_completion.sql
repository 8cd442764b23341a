-- 0017: a completion writes no index entry.
--
-- A completion changed state, lease_expires_at and expires_at, and each was
-- in an index of records (the sweeper's two expiry indexes, whose
-- predicates name state, and the in-progress lease index behind
-- idemd_records_stuck), so PostgreSQL could never make it a HOT update:
-- every completion wrote a new entry into every index of the table, on the
-- request's path (docs/performance.md, "A completion without index
-- entries"). Those three indexes go. What they served:
--
-- The sweeper walks sweep_at, the time it looks at a row next (a sweep
-- interval after it, below). The claim that makes a record sets it to the
-- earliest end a completion kept the operation's retention can give the
-- record (the token's expiry, or the claim's time plus the retention,
-- whichever is later; src/store/store.c, CLAIM_FROM_X), so that such a
-- completion leaves it as it is and the sweeper, a sweep interval on,
-- finds the record's life over unless the work took longer than that. A
-- completion moves sweep_at only to an earlier end (a shorter retention,
-- a refusal kept an exact time: COMPLETE_UPDATE), a release to the
-- token's expiry (idemd_release below). When it looks, the sweeper ends
-- the life of a record past its expires_at (a fence, whose sweep_at
-- becomes its deletion time), deletes a fence past
-- fence_retention_seconds, and moves any other row's sweep_at to its
-- expires_at (long work, or an extend, kept the record longer: one write,
-- in the sweeper's batch, off the request path). Readers never depended
-- on the sweep: a record past its expires_at is over for each of them at
-- once (0011). So a sweep_at later than expires_at only keeps the row's
-- space longer: by at most the retention for a claim never completed nor
-- given back (its expiry is its lease's end), by at most the fence's
-- retention for a new life of a fenced key (claimed again through
-- idemd.claim_locked, which leaves sweep_at as the first claim set it, as
-- idemd.complete does).
--
-- The rows already there take the column's default, -infinity, stored in
-- the catalogue (ADD COLUMN rewrites nothing, and writes wait only while
-- the index is built): the sweeper's first passes after this migration
-- give each its time, one write each, in its paced batches (docs/
-- operations.md has how long that takes). So do the rows written later
-- without sweep_at: a previous release's, and the PL/pgSQL claim and
-- revoke paths', which are not the common case. The index holds the
-- primary key after sweep_at, so that each batch of a pass goes on from
-- exactly the row where the one before it stopped, however many rows
-- share a sweep_at (all of them do, at first).
--
-- idemd_records_stuck counts records in progress past their lease
-- without an index (any index that finds records in progress has a key or
-- a predicate the completion changes): src/cli/janitor.c spaces the count
-- by what it costs.
-- (Lines tagged "-- mutant:" are replaced in a mutant build: tests/mutants.sh.)

ALTER TABLE records ADD COLUMN sweep_at timestamptz NOT NULL DEFAULT '-infinity';
CREATE INDEX records_sweep_idx ON records (sweep_at, tenant_id, token_id);
DROP INDEX records_live_expiry_idx;
DROP INDEX records_fence_expiry_idx;
DROP INDEX records_in_progress_lease_idx;

-- ------------------------------------------------------------ idemd.end_life
-- As in 0014, and the fence it leaves is looked at again P_KEEP after its
-- life ended (when idemd.sweep may delete it).
DROP FUNCTION idemd.end_life(int, bytea);
CREATE FUNCTION idemd.end_life(p_tenant int, p_id bytea, p_keep interval DEFAULT '0')
RETURNS void
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
           sweep_at           = rec.expires_at + p_keep,  -- mutant:fences_swept_at_once            sweep_at           = rec.expires_at,
           updated_at         = clock_timestamp()
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_id
       AND rec.state <> 'expired' AND rec.expires_at <= clock_timestamp()
$$;

-- --------------------------------------------------------------- idemd.sweep
-- The rows whose sweep_at is P_LATE seconds past (the janitor's sweep
-- interval: a record completed within it is then over), after the row
-- P_AFTER names (NULL: from the first), at most P_LIMIT of them, in
-- sweep_at order, skipping locked ones, when no other instance is
-- sweeping (ended = -1 otherwise): a live record past its expires_at ends
-- its life (ENDED), a fence whose life ended P_KEEP seconds ago or more is
-- deleted (DELETED), any other row is given its next time (MOVED). LAST
-- names the last row it took, where the pass's next batch starts (an
-- opaque text: microseconds since the epoch or -inf, tenant, id in hex),
-- so that no batch walks again the index entries that the batches before
-- it left behind: they stay until vacuum, and a walk from the first entry
-- each time made a large sweep quadratic (bench/README.md).
CREATE FUNCTION idemd.sweep(p_limit int, p_keep int, p_after text DEFAULT NULL,
                            p_late int DEFAULT 0)
RETURNS TABLE (ended int, deleted int, moved int, last text)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now    timestamptz := clock_timestamp();
    v_keep   interval := make_interval(secs => greatest(p_keep, 0));
    v_at     timestamptz := '-infinity';
    v_tenant int := -2147483648;
    v_id     bytea := '';
    r        record;
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
    FOR r IN SELECT rec.tenant_id, rec.token_id, rec.state, rec.expires_at, rec.sweep_at
               FROM records rec
              WHERE rec.sweep_at <= v_now - make_interval(secs => greatest(p_late, 0))
                AND (rec.sweep_at, rec.tenant_id, rec.token_id) > (v_at, v_tenant, v_id)
              ORDER BY rec.sweep_at, rec.tenant_id, rec.token_id
              LIMIT greatest(p_limit, 0)
                FOR UPDATE SKIP LOCKED LOOP
        v_at := r.sweep_at; v_tenant := r.tenant_id; v_id := r.token_id;
        IF r.state = 'expired' THEN
            IF r.expires_at + v_keep <= v_now THEN  -- mutant:fences_swept_at_once             IF true THEN
                DELETE FROM records rec
                 WHERE rec.tenant_id = r.tenant_id AND rec.token_id = r.token_id;
                deleted := deleted + 1;
            ELSE
                UPDATE records rec SET sweep_at = r.expires_at + v_keep
                 WHERE rec.tenant_id = r.tenant_id AND rec.token_id = r.token_id;
                moved := moved + 1;
            END IF;
        ELSIF r.expires_at <= v_now THEN
            PERFORM idemd.end_life(r.tenant_id, r.token_id, v_keep);
            ended := ended + 1;
        ELSE
            UPDATE records rec SET sweep_at = r.expires_at
             WHERE rec.tenant_id = r.tenant_id AND rec.token_id = r.token_id;
            moved := moved + 1;
        END IF;
    END LOOP;
    IF ended + deleted + moved > 0 THEN
        last := CASE WHEN isfinite(v_at)
                     THEN (extract(epoch FROM v_at) * 1000000)::bigint::text ELSE '-inf' END
                || ' ' || v_tenant || ' ' || encode(v_id, 'hex');
    END IF;
    RETURN NEXT;
END;
$$;

-- ------------------------------------------- the previous releases' entry points
-- Same arguments and results as before (0011): both run idemd.sweep, each
-- batch from the first row (P_AFTER and LAST_EXPIRY are not used), whose
-- fences are kept the default seven days under idemd_sweep_after, which is
-- not told the retention configured.
CREATE OR REPLACE FUNCTION idemd_sweep_after(p_limit int, p_after timestamptz)
RETURNS TABLE (deleted int, last_expiry timestamptz)
LANGUAGE sql
AS $$
    SELECT s.ended, NULL::timestamptz FROM idemd.sweep(p_limit, 604800) s
$$;

CREATE OR REPLACE FUNCTION idemd.sweep_fences(p_limit int, p_keep int) RETURNS int
LANGUAGE sql
AS $$
    SELECT greatest(s.deleted, 0) FROM idemd.sweep(p_limit, p_keep) s
$$;

-- ------------------------------------------------------------ idemd_release
-- As in 0011, and a record given back is swept when its token's validity
-- ends, not when a completion would have ended its life.
CREATE OR REPLACE FUNCTION idemd_release(p_tenant int, p_token bytea, p_attempt int)
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
    IF r.attempt IS DISTINCT FROM p_attempt THEN  -- mutant:no_fence     IF false THEN
        RETURN 'lease_lost';
    END IF;
    IF r.expires_at <= clock_timestamp() THEN  -- mutant:no_fence     IF false THEN
        RETURN 'lease_lost';
    END IF;
    IF r.state <> 'in_progress' THEN
        RETURN 'not_in_progress';
    END IF;
    UPDATE records rec
       SET state            = 'issued',
           lease_expires_at = NULL,
           expires_at       = rec.token_expires_at,
           sweep_at         = least(rec.sweep_at, rec.token_expires_at),
           updated_at       = now()
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token;
    RETURN 'released';
END;
$$;
