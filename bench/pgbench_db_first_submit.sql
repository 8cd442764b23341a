-- pgbench_db_first_submit.sql: diagnostic, the database half of a direct
-- first submit without idemd: idemd_claim of a fresh random token, then
-- idemd_complete of it, two transactions as idemd makes them (tenant 0).
-- Throughput here is the ceiling idemd's first submit can reach with the
-- current SQL; the gap between it and bench's first_submit is idemd's own.
\set k random(1000000, 9000000000000000)
SELECT * FROM idemd_claim(0, decode(lpad(to_hex(:k::bigint), 32, '0'), 'hex'), 1, 'user-42',
       '\x00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff'::bytea,
       now() + interval '1 hour', 60, NULL, NULL, false);
SELECT * FROM idemd_complete(0, decode(lpad(to_hex(:k::bigint), 32, '0'), 'hex'), 1, 201,
       '{"location": "/orders/1001"}'::jsonb,
       convert_to('{"order_id":1001,"total":"19.99","currency":"EUR"}', 'UTF8'), true, 86400);
