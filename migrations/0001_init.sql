-- 0001_init.sql: initial idemd schema.
--
-- Tables: tenants, api_keys, operations, signing_keys, records (one row per
-- submitted token), versions (per-tenant If-Match counters).
--
-- Every state-changing token operation is one PL/pgSQL function, so each is
-- one round trip and one transaction:
--   idemd_claim, idemd_complete, idemd_release, idemd_revoke,
--   idemd_version_bump, and idemd_sweep for the expiry sweeper.
--
-- Concurrency rules (they are what makes "one token, one execution" hold
-- across any number of callers and processes sharing the database):
--   * A record is always locked before a version counter (claim locks the
--     record, then the counter; version_bump locks only the counter), so the
--     functions cannot deadlock with each other.
--   * A record that does not exist yet is "locked" by inserting it with
--     INSERT ... ON CONFLICT DO NOTHING; whoever loses the insert race waits
--     for the winner and then re-reads the row with SELECT ... FOR UPDATE.
--   * Outcomes other than a successful change write nothing: every check
--     that can fail runs before the first write, except the version check of
--     a brand-new claim, whose placeholder row is deleted again in the same
--     transaction (net effect: nothing).
--   * All times come from now() (the transaction's start time).
--
-- Applied by `idemd migrate` inside one transaction.

-- ---------------------------------------------------------------- tables

CREATE TABLE tenants (
    id          serial      PRIMARY KEY,
    name        text        NOT NULL UNIQUE CHECK (name <> ''),
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    key_hash    bytea       PRIMARY KEY CHECK (octet_length(key_hash) = 32),
    tenant_id   int         NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX api_keys_tenant_idx ON api_keys (tenant_id);

CREATE TABLE operations (
    id                 serial      PRIMARY KEY,
    tenant_id          int         NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name               text        NOT NULL CHECK (name <> ''),
    token_ttl_seconds  int         NOT NULL CHECK (token_ttl_seconds > 0),
    retention_seconds  int         NOT NULL CHECK (retention_seconds >= 0),
    lease_seconds      int         NOT NULL CHECK (lease_seconds > 0),
    version_key        text        NULL CHECK (version_key <> ''),
    require_version    boolean     NOT NULL DEFAULT false,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name)
);

CREATE TABLE signing_keys (
    id          serial      PRIMARY KEY,
    sealed      bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    retired_at  timestamptz NULL
);

-- No foreign keys on the two hot tables: the tenant and operation ids come
-- from authenticated requests and signed tokens, and an FK check would take
-- a share lock on the tenant row in every claim.
CREATE TABLE records (
    tenant_id         int         NOT NULL,
    token_id          bytea       NOT NULL CHECK (octet_length(token_id) = 16),
    operation_id      int         NOT NULL,
    subject           text        NOT NULL
                                  CHECK (octet_length(subject) BETWEEN 1 AND 128),
    state             text        NOT NULL
                                  CHECK (state IN ('in_progress', 'issued',
                                                   'completed', 'revoked')),
    fingerprint       bytea       NULL,
    attempt           int         NOT NULL CHECK (attempt >= 0),
    lease_expires_at  timestamptz NULL,
    version_claimed   bigint      NULL CHECK (version_claimed >= 0),
    response_status   int         NULL CHECK (response_status BETWEEN 100 AND 599),
    response_headers  jsonb       NULL,
    response_body     bytea       NULL,
    response_is_json  boolean     NULL,
    token_expires_at  timestamptz NOT NULL,
    expires_at        timestamptz NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, token_id),
    CONSTRAINT records_lease_iff_in_progress
        CHECK ((state = 'in_progress') = (lease_expires_at IS NOT NULL)),
    CONSTRAINT records_response_iff_completed
        CHECK ((state = 'completed') = (response_status IS NOT NULL))
);
CREATE INDEX records_expires_at_idx ON records (expires_at);

CREATE TABLE versions (
    tenant_id   int         NOT NULL,
    key         text        NOT NULL CHECK (key <> ''),
    version     bigint      NOT NULL CHECK (version >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key)
);

-- ------------------------------------------------------------- idemd_claim
--
-- Start (or take over) the operation of one token.  Checks, in order:
-- existing record revoked -> 'revoked'; fingerprint differs ->
-- 'fingerprint_mismatch'; completed -> 'replay' (wins over expiry and the
-- version check); in progress under a live lease -> 'in_progress'; then, for
-- a new claim or a takeover (no record, released, or lease ran out): token
-- expired -> 'expired'; version precondition -> 'version_required' /
-- 'version_mismatch'; else 'claimed' with attempt = old attempt + 1.
-- Only 'claimed' writes anything.
--
-- p_version_key: counter name with {subject} already substituted, NULL when
-- the operation guards no counter.  p_expected: If-Match value or the
-- version carried by the token, NULL when neither.  When the operation guards
-- a counter the claim bumps it, except on a takeover whose earlier attempt
-- already bumped it from V to V+1 and nobody has bumped it since (then the
-- precondition V is accepted and the counter stays at V+1).
--
-- Result columns per outcome:
--   claimed:          attempt, lease_expires_at, current_version (after bump)
--   replay:           attempt, lease_expires_at (= record expiry), resp_status,
--                     resp_headers, resp_body, resp_is_json
--   in_progress:      attempt, lease_expires_at, retry_after (seconds, >= 1)
--   version_mismatch: current_version
--   others:           nothing (all NULL)
CREATE FUNCTION idemd_claim(
    p_tenant          int,
    p_token           bytea,
    p_operation       int,
    p_subject         text,
    p_fingerprint     bytea,
    p_token_expires   timestamptz,
    p_lease_seconds   int,
    p_version_key     text,
    p_expected        bigint,
    p_require_version boolean)
RETURNS TABLE (
    outcome          text,
    attempt          int,
    lease_expires_at timestamptz,
    retry_after      int,
    resp_status      int,
    resp_headers     jsonb,
    resp_body        bytea,
    resp_is_json     boolean,
    current_version  bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now       timestamptz := now();
    v_lease     timestamptz;
    r           records%ROWTYPE;
    v_existing  boolean := false;   -- a record existed and is locked
    v_inserted  boolean := false;   -- we inserted a fresh record (locked)
    v_cur       bigint;
    v_has_row   boolean;
    v_claimed   bigint;
    v_new       bigint;
    v_tries     int := 0;
BEGIN
    IF p_lease_seconds IS NULL OR p_lease_seconds <= 0 THEN
        RAISE EXCEPTION 'idemd_claim: lease must be positive'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_token_expires IS NULL THEN
        RAISE EXCEPTION 'idemd_claim: token expiry must not be NULL'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_lease := v_now + make_interval(secs => p_lease_seconds);

    -- Fast path, no lock: completed and revoked are final states (only the
    -- sweeper removes such a record), so their duplicates are answered by a
    -- plain read that writes nothing and waits for nobody.
    SELECT * INTO r
      FROM records rec
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token
       AND rec.state IN ('completed', 'revoked');
    IF FOUND THEN
        IF r.state = 'revoked' THEN
            outcome := 'revoked';
        ELSIF r.fingerprint IS DISTINCT FROM p_fingerprint THEN
            outcome := 'fingerprint_mismatch';
        ELSE
            outcome          := 'replay';
            attempt          := r.attempt;
            lease_expires_at := r.expires_at;
            resp_status      := r.response_status;
            resp_headers     := r.response_headers;
            resp_body        := r.response_body;
            resp_is_json     := r.response_is_json;
        END IF;
        RETURN NEXT; RETURN;
    END IF;

    LOOP
        v_tries := v_tries + 1;
        IF v_tries > 100 THEN
            RAISE EXCEPTION 'idemd_claim: record kept changing under us'
                USING ERRCODE = 'serialization_failure';
        END IF;

        SELECT * INTO r
          FROM records rec
         WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token
           FOR UPDATE;
        v_existing := FOUND;

        IF v_existing THEN
            -- the fast path above saw no final record, but one may have
            -- become final since: check again under the lock
            IF r.state = 'revoked' THEN
                outcome := 'revoked';
                RETURN NEXT; RETURN;
            END IF;
            IF r.fingerprint IS DISTINCT FROM p_fingerprint THEN
                outcome := 'fingerprint_mismatch';
                RETURN NEXT; RETURN;
            END IF;
            IF r.state = 'completed' THEN
                outcome      := 'replay';
                attempt      := r.attempt;
                -- for a replay this column carries the end of retention,
                -- until which the response may be cached
                lease_expires_at := r.expires_at;
                resp_status  := r.response_status;
                resp_headers := r.response_headers;
                resp_body    := r.response_body;
                resp_is_json := r.response_is_json;
                RETURN NEXT; RETURN;
            END IF;
            IF r.state = 'in_progress' AND r.lease_expires_at > v_now THEN
                outcome          := 'in_progress';
                attempt          := r.attempt;
                lease_expires_at := r.lease_expires_at;
                retry_after      := greatest(1, ceil(extract(epoch FROM
                                        r.lease_expires_at - v_now)))::int;
                RETURN NEXT; RETURN;
            END IF;
            -- issued (released) or lease ran out: takeover
        END IF;

        -- New claim or takeover: checks that need no lock on the counter.
        IF p_token_expires <= v_now THEN
            outcome := 'expired';
            RETURN NEXT; RETURN;
        END IF;
        IF p_version_key IS NOT NULL AND p_expected IS NULL
           AND p_require_version THEN
            outcome := 'version_required';
            RETURN NEXT; RETURN;
        END IF;

        EXIT WHEN v_existing;

        -- No record: take the slot by inserting it.  A concurrent claimer
        -- that inserted first makes us wait for it; if it committed we find
        -- no row inserted here and go round again to read its record.
        INSERT INTO records AS rec
               (tenant_id, token_id, operation_id, subject, state,
                fingerprint, attempt, lease_expires_at, version_claimed,
                token_expires_at, expires_at, created_at, updated_at)
        VALUES (p_tenant, p_token, p_operation, p_subject, 'in_progress',
                p_fingerprint, 1, v_lease, NULL,
                p_token_expires, greatest(p_token_expires, v_lease),
                v_now, v_now)
        ON CONFLICT (tenant_id, token_id) DO NOTHING;
        IF FOUND THEN
            v_inserted := true;
            EXIT;
        END IF;
    END LOOP;

    -- The record is locked (existing) or freshly inserted by us.
    IF p_version_key IS NOT NULL THEN
        LOOP
            SELECT ver.version INTO v_cur
              FROM versions ver
             WHERE ver.tenant_id = p_tenant AND ver.key = p_version_key
               FOR UPDATE;
            v_has_row := FOUND;
            IF NOT v_has_row THEN
                v_cur := 0;
            END IF;

            IF v_existing AND r.version_claimed IS NOT NULL
               AND coalesce(p_expected, r.version_claimed) = r.version_claimed
               AND v_cur = r.version_claimed + 1 THEN
                -- Takeover: the earlier attempt already bumped V -> V+1.
                v_claimed := r.version_claimed;
                v_new     := v_cur;
                EXIT;
            END IF;

            IF p_expected IS NOT NULL AND v_cur <> p_expected THEN
                IF v_inserted THEN
                    DELETE FROM records rec
                     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token;
                END IF;
                outcome         := 'version_mismatch';
                current_version := v_cur;
                RETURN NEXT; RETURN;
            END IF;

            v_claimed := v_cur;
            IF v_has_row THEN
                UPDATE versions ver
                   SET version = ver.version + 1, updated_at = v_now
                 WHERE ver.tenant_id = p_tenant AND ver.key = p_version_key
                RETURNING ver.version INTO v_new;
                EXIT;
            END IF;
            INSERT INTO versions AS ver (tenant_id, key, version, updated_at)
            VALUES (p_tenant, p_version_key, 1, v_now)
            ON CONFLICT (tenant_id, key) DO NOTHING;
            IF FOUND THEN
                v_new := 1;
                EXIT;
            END IF;
            -- Someone created the counter meanwhile: lock it and decide again.
        END LOOP;
    END IF;

    IF v_inserted THEN
        IF v_claimed IS NOT NULL THEN
            UPDATE records rec
               SET version_claimed = v_claimed
             WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token;
        END IF;
        attempt := 1;
    ELSE
        UPDATE records rec
           SET state            = 'in_progress',
               attempt          = rec.attempt + 1,
               lease_expires_at = v_lease,
               fingerprint      = p_fingerprint,
               operation_id     = p_operation,
               subject          = p_subject,
               version_claimed  = v_claimed,
               response_status  = NULL,
               response_headers = NULL,
               response_body    = NULL,
               response_is_json = NULL,
               token_expires_at = p_token_expires,
               expires_at       = greatest(p_token_expires, v_lease),
               updated_at       = v_now
         WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token
        RETURNING rec.attempt INTO attempt;
    END IF;

    outcome          := 'claimed';
    lease_expires_at := v_lease;
    current_version  := v_new;
    RETURN NEXT; RETURN;
END;
$$;

-- ---------------------------------------------------------- idemd_complete
--
-- Store the outcome of the current attempt.
--   'completed'         stored now; the stored response is returned
--   'already_completed' same attempt already completed: stored response
--   'lease_lost'        record exists but its attempt differs (fenced out)
--   'not_in_progress'   no record, or issued/revoked with this attempt
-- The record is kept for retention_seconds, and never less than until the
-- token itself expires, so that a completed token can never be claimed and
-- executed a second time.
CREATE FUNCTION idemd_complete(
    p_tenant            int,
    p_token             bytea,
    p_attempt           int,
    p_status            int,
    p_headers           jsonb,
    p_body              bytea,
    p_is_json           boolean,
    p_retention_seconds int)
RETURNS TABLE (
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
    v_now timestamptz := now();
    r     records%ROWTYPE;
BEGIN
    IF p_status IS NULL OR p_status NOT BETWEEN 100 AND 599 THEN
        RAISE EXCEPTION 'idemd_complete: status must be 100..599'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_retention_seconds IS NULL OR p_retention_seconds < 0 THEN
        RAISE EXCEPTION 'idemd_complete: retention must not be negative'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    SELECT * INTO r
      FROM records rec
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token
       FOR UPDATE;
    IF NOT FOUND THEN
        outcome := 'not_in_progress';
        RETURN NEXT; RETURN;
    END IF;
    IF r.attempt IS DISTINCT FROM p_attempt THEN
        outcome := 'lease_lost';
        RETURN NEXT; RETURN;
    END IF;
    IF r.state = 'completed' THEN
        outcome      := 'already_completed';
        resp_status  := r.response_status;
        resp_headers := r.response_headers;
        resp_body    := r.response_body;
        resp_is_json := r.response_is_json;
        expires_at   := r.expires_at;
        fingerprint  := r.fingerprint;
        RETURN NEXT; RETURN;
    END IF;
    IF r.state <> 'in_progress' THEN
        outcome := 'not_in_progress';
        RETURN NEXT; RETURN;
    END IF;

    UPDATE records rec
       SET state            = 'completed',
           lease_expires_at = NULL,
           response_status  = p_status,
           response_headers = p_headers,
           response_body    = p_body,
           response_is_json = coalesce(p_is_json, false),
           expires_at       = greatest(v_now + make_interval(secs => p_retention_seconds),
                                       rec.token_expires_at),
           updated_at       = v_now
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token
    RETURNING rec.response_status, rec.response_headers, rec.response_body,
              rec.response_is_json, rec.expires_at, rec.fingerprint
         INTO resp_status, resp_headers, resp_body, resp_is_json, expires_at, fingerprint;

    outcome := 'completed';
    RETURN NEXT; RETURN;
END;
$$;

-- ----------------------------------------------------------- idemd_release
--
-- Give a claim back after a retryable failure: 'released' (state issued,
-- lease cleared, attempt and fingerprint kept) | 'lease_lost' (record exists,
-- attempt differs) | 'not_in_progress' (no record, or not in progress:
-- issued, revoked or completed).
CREATE FUNCTION idemd_release(p_tenant int, p_token bytea, p_attempt int)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    r records%ROWTYPE;
BEGIN
    SELECT * INTO r
      FROM records rec
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token
       FOR UPDATE;
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
       SET state            = 'issued',
           lease_expires_at = NULL,
           expires_at       = rec.token_expires_at,
           updated_at       = now()
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token;
    RETURN 'released';
END;
$$;

-- ------------------------------------------------------------ idemd_revoke
--
-- Revoke a token: 'revoked' (no record yet, issued/released, an in-progress
-- record whose lease has run out, or already revoked; idempotent) |
-- 'in_use' (in progress under a live lease, or completed).  A revoked record
-- is kept until the token expires.
CREATE FUNCTION idemd_revoke(
    p_tenant        int,
    p_token         bytea,
    p_operation     int,
    p_subject       text,
    p_token_expires timestamptz)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_now   timestamptz := now();
    r       records%ROWTYPE;
    v_tries int := 0;
BEGIN
    IF p_token_expires IS NULL THEN
        RAISE EXCEPTION 'idemd_revoke: token expiry must not be NULL'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    LOOP
        v_tries := v_tries + 1;
        IF v_tries > 100 THEN
            RAISE EXCEPTION 'idemd_revoke: record kept changing under us'
                USING ERRCODE = 'serialization_failure';
        END IF;

        INSERT INTO records AS rec
               (tenant_id, token_id, operation_id, subject, state, attempt,
                token_expires_at, expires_at, created_at, updated_at)
        VALUES (p_tenant, p_token, p_operation, p_subject, 'revoked', 0,
                p_token_expires, p_token_expires, v_now, v_now)
        ON CONFLICT (tenant_id, token_id) DO NOTHING;
        IF FOUND THEN
            RETURN 'revoked';
        END IF;

        SELECT * INTO r
          FROM records rec
         WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token
           FOR UPDATE;
        IF FOUND THEN
            EXIT;
        END IF;
        -- The row was swept between the insert and the select: try again.
    END LOOP;

    IF r.state = 'revoked' THEN
        RETURN 'revoked';
    END IF;
    IF r.state = 'completed'
       OR (r.state = 'in_progress' AND r.lease_expires_at > v_now) THEN
        RETURN 'in_use';
    END IF;

    UPDATE records rec
       SET state            = 'revoked',
           lease_expires_at = NULL,
           expires_at       = rec.token_expires_at,
           updated_at       = v_now
     WHERE rec.tenant_id = p_tenant AND rec.token_id = p_token;
    RETURN 'revoked';
END;
$$;

-- ------------------------------------------------------ idemd_version_bump
--
-- Compare-and-increment a counter: ok = true and the new version when the
-- current version (0 for an unknown key) equals p_expected; otherwise
-- ok = false and the current version.
CREATE FUNCTION idemd_version_bump(p_tenant int, p_key text, p_expected bigint)
RETURNS TABLE (ok boolean, version bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := now();
    v_ver bigint;
BEGIN
    IF p_expected IS NULL THEN
        RAISE EXCEPTION 'idemd_version_bump: expected version must not be NULL'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    LOOP
        UPDATE versions ver
           SET version = ver.version + 1, updated_at = v_now
         WHERE ver.tenant_id = p_tenant AND ver.key = p_key
           AND ver.version = p_expected
        RETURNING ver.version INTO v_ver;
        IF FOUND THEN
            ok := true; version := v_ver;
            RETURN NEXT; RETURN;
        END IF;

        SELECT ver.version INTO v_ver
          FROM versions ver
         WHERE ver.tenant_id = p_tenant AND ver.key = p_key;
        IF FOUND THEN
            IF v_ver = p_expected THEN
                CONTINUE;   -- changed back under us (cannot happen: counters only grow)
            END IF;
            ok := false; version := v_ver;
            RETURN NEXT; RETURN;
        END IF;

        IF p_expected <> 0 THEN
            ok := false; version := 0;
            RETURN NEXT; RETURN;
        END IF;
        INSERT INTO versions AS ver (tenant_id, key, version, updated_at)
        VALUES (p_tenant, p_key, 1, v_now)
        ON CONFLICT (tenant_id, key) DO NOTHING;
        IF FOUND THEN
            ok := true; version := 1;
            RETURN NEXT; RETURN;
        END IF;
        -- Created concurrently: compare against it.
    END LOOP;
END;
$$;

-- ------------------------------------------------------------- idemd_sweep
--
-- Delete at most p_limit records whose expires_at has passed; rows locked by
-- a running claim/complete are skipped, never waited for.  Returns the
-- number of rows deleted; call again while it returns p_limit.
CREATE FUNCTION idemd_sweep(p_limit int)
RETURNS int
LANGUAGE sql
AS $$
    WITH victims AS (
        SELECT rec.tenant_id, rec.token_id
          FROM records rec
         WHERE rec.expires_at < now()
         ORDER BY rec.expires_at
         LIMIT greatest(p_limit, 0)
           FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM records d
         USING victims v
         WHERE d.tenant_id = v.tenant_id AND d.token_id = v.token_id
           AND d.expires_at < now()
        RETURNING 1
    )
    SELECT count(*)::int FROM gone;
$$;

-- -------------------------------------------------------- idemd_first_key
--
-- Insert the first signing key unless one exists, serialised by an advisory
-- lock so that concurrent `idemd migrate` runs create exactly one.  Returns
-- the new key's id, or 0 when a key already existed.
CREATE FUNCTION idemd_first_key(p_sealed bytea)
RETURNS int
LANGUAGE plpgsql
AS $$
DECLARE
    v_id int;
BEGIN
    PERFORM pg_advisory_xact_lock(7428138);
    IF EXISTS (SELECT 1 FROM signing_keys) THEN
        RETURN 0;
    END IF;
    INSERT INTO signing_keys (sealed) VALUES (p_sealed) RETURNING id INTO v_id;
    RETURN v_id;
END;
$$;
