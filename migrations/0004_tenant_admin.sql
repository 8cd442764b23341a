-- 0004_tenant_admin.sql: API key ids, tenant deletion, master key rotation.
--
-- * api_keys.id: a tenant may hold several keys, and `idemd tenant key
--   revoke NAME KEY_ID` names one without showing it. Existing keys get ids
--   here, in the order they were made.
-- * idemd_tenant_delete: a tenant and everything of it, in one transaction.
--   records and versions carry no foreign key (see 0001), so they are
--   deleted by hand; api_keys and operations follow the tenant by cascade.
--   A later migration adding a per-tenant table must replace this function.
-- * idemd_reseal_keys: every signing key re-sealed under a new master key
--   at once, refused when the keys changed since they were read.

ALTER TABLE api_keys ADD COLUMN id int;
UPDATE api_keys SET id = k.n
  FROM (SELECT key_hash, row_number() OVER (ORDER BY created_at, key_hash) AS n
          FROM api_keys) k
 WHERE api_keys.key_hash = k.key_hash;
CREATE SEQUENCE api_keys_id_seq OWNED BY api_keys.id;
SELECT setval('api_keys_id_seq', coalesce((SELECT max(id) FROM api_keys), 0) + 1, false);
ALTER TABLE api_keys ALTER COLUMN id SET DEFAULT nextval('api_keys_id_seq'),
                     ALTER COLUMN id SET NOT NULL,
                     ADD CONSTRAINT api_keys_id_key UNIQUE (id);

-- ---------------------------------------------------- idemd_tenant_delete
--
-- Deletes the tenant named p_name and its records, counters, operations and
-- API keys. Returns false (nothing written) when there is no such tenant.
CREATE FUNCTION idemd_tenant_delete(p_name text)
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
    DELETE FROM records rec WHERE rec.tenant_id = v_id;
    DELETE FROM versions ver WHERE ver.tenant_id = v_id;
    DELETE FROM tenants t WHERE t.id = v_id;
    RETURN true;
END;
$$;

-- ----------------------------------------------------- idemd_reseal_keys
--
-- Replaces the sealed form of every signing key: p_ids[i] gets p_new[i].
-- p_old holds the sealed forms the caller opened; when the table no longer
-- holds exactly those keys with exactly those forms (a key rotated or
-- re-sealed meanwhile), nothing is written and the result is false. The
-- table lock makes a concurrent `keys rotate` wait for the commit.
CREATE FUNCTION idemd_reseal_keys(p_ids int[], p_old bytea[], p_new bytea[])
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    LOCK TABLE signing_keys IN EXCLUSIVE MODE;
    IF (SELECT coalesce(array_agg(k.id ORDER BY k.id), '{}') FROM signing_keys k)
           IS DISTINCT FROM p_ids
       OR (SELECT coalesce(array_agg(k.sealed ORDER BY k.id), '{}') FROM signing_keys k)
           IS DISTINCT FROM p_old THEN
        RETURN false;
    END IF;
    UPDATE signing_keys k SET sealed = u.sealed
      FROM unnest(p_ids, p_new) AS u(id, sealed)
     WHERE k.id = u.id;
    RETURN true;
END;
$$;
