-- pgbench_db_setup.sql: rows for the database-only diagnostics: 10,000
-- completed records of tenant 0 (a tenant id idemd never hands out, so
-- these rows never meet the benchmark's own), ids 1..10000 as 16 bytes.
DELETE FROM records WHERE tenant_id = 0;
INSERT INTO records (tenant_id, token_id, operation_id, subject, state, fingerprint,
                     attempt, response_status, response_headers, response_body,
                     response_is_json, token_expires_at, expires_at)
SELECT 0, decode(lpad(to_hex(g), 32, '0'), 'hex'), 1, 'user-42', 'completed',
       '\x00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff'::bytea, 1,
       201, '{"location": "/orders/1001"}'::jsonb,
       convert_to('{"order_id":1001,"total":"19.99","currency":"EUR"}', 'UTF8'), true,
       now() + interval '1 hour', now() + interval '2 days'
  FROM generate_series(1, 10000) AS g;
