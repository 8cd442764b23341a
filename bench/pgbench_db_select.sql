-- pgbench_db_select.sql: diagnostic, a plain read of one completed record
-- by primary key (no row lock, so no transaction id and no commit flush):
-- what a replay costs the database when it is served by a lock-free read.
\set i random(1, 10000)
SELECT state, fingerprint, attempt, response_status, response_headers, response_body,
       response_is_json
  FROM records WHERE tenant_id = 0 AND token_id = decode(lpad(to_hex(:i::bigint), 32, '0'), 'hex');
