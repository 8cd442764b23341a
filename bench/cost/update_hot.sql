-- update_hot.sql: an update of a completed record that changes no indexed
-- column (updated_at): a heap-only tuple (HOT), no index entry; found by
-- its primary key; with its commit.
\set k random(1, 100000)
UPDATE cost_upd SET updated_at = now()
 WHERE tenant_id = 0 AND token_id = decode(lpad(to_hex(:k::bigint), 32, '0'), 'hex');
