-- update_nonhot.sql: the same update moving expires_at, as a completion
-- does: not HOT, so a new entry in each index whose predicate holds
-- (primary key, live expiry, tenant listing: three); with its commit.
\set k random(1, 100000)
UPDATE cost_upd SET updated_at = now(), expires_at = expires_at + interval '1 second'
 WHERE tenant_id = 0 AND token_id = decode(lpad(to_hex(:k::bigint), 32, '0'), 'hex');
