-- setup.sql: the tables of the cost model's steps (bench/costmodel.sh):
-- copies of records without indexes, with its primary key only, with all
-- its indexes, and one filled with 100,000 completed records to update;
-- cost_hot, with only the indexes no claim or completion changes (for
-- costmodel.sh's first_submit_batch_hot);
-- plus an operation (id 1, of the tenant costmodel.sh creates) for the
-- first submit.
SET client_min_messages = warning;
CREATE TABLE cost_bare (LIKE records INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
CREATE TABLE cost_pk (LIKE records INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
                      PRIMARY KEY (tenant_id, token_id));
CREATE TABLE cost_records (LIKE records INCLUDING ALL) WITH (fillfactor = 80);
CREATE TABLE cost_hot (LIKE records INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
                       PRIMARY KEY (tenant_id, token_id)) WITH (fillfactor = 70);
CREATE INDEX cost_hot_tenant_created_idx ON cost_hot (tenant_id, created_at DESC, token_id DESC);
CREATE TABLE cost_upd (LIKE records INCLUDING ALL) WITH (fillfactor = 80);
INSERT INTO cost_upd (tenant_id, token_id, operation_id, subject, state, fingerprint,
                      attempt, response_status, response_headers, response_body,
                      response_is_json, token_expires_at, expires_at)
SELECT 0, decode(lpad(to_hex(g), 32, '0'), 'hex'), 1, 'user-42', 'completed',
       '\x00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff'::bytea, 1,
       201, '{"location": "/orders/1001"}'::jsonb,
       convert_to('{"order_id":1001,"total":"19.99","currency":"EUR"}', 'UTF8'), true,
       now() + interval '1 hour', now() + interval '2 days'
  FROM generate_series(1, 100000) AS g;
VACUUM ANALYZE cost_upd;
INSERT INTO operations (id, tenant_id, name, token_ttl_seconds, retention_seconds, lease_seconds)
VALUES (1, 1, 'order.create', 3600, 86400, 60) ON CONFLICT DO NOTHING;
