-- pgbench_db_first_submit_functions.sql: diagnostic, as
-- pgbench_db_first_submit.sql but through the PL/pgSQL functions
-- idemd.claim / idemd.complete of migrations/0009 (over one-element
-- arrays, each with its audit event), two transactions (tenant 0): what a
-- first submit cost the database before the plain-SQL paths, and what it
-- costs now for every claim or complete those paths do not settle.
\set k random(1000000, 9000000000000000)
WITH r AS (SELECT * FROM idemd.claim(ARRAY[0], ARRAY[decode(lpad(to_hex(:k::bigint), 32, '0'), 'hex')],
       ARRAY[1], ARRAY['user-42'],
       ARRAY['\x00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff'::bytea],
       ARRAY[extract(epoch FROM now())::bigint + 3600], ARRAY[60], ARRAY[NULL::text],
       ARRAY[NULL::bigint], ARRAY[false], ARRAY[false])),
     ev AS (INSERT INTO record_events (tenant_id, token_id, event, attempt, by, expires_at)
            SELECT 0, decode(lpad(to_hex(:k::bigint), 32, '0'), 'hex'), 'claimed', r.attempt,
                   'api_key:1', now() + make_interval(secs => 86400)
              FROM r WHERE r.outcome = 'claimed')
SELECT outcome, attempt, i FROM r ORDER BY i;
WITH r AS (SELECT * FROM idemd.complete(ARRAY[0], ARRAY[decode(lpad(to_hex(:k::bigint), 32, '0'), 'hex')],
       ARRAY[1], ARRAY[201], ARRAY['{"location": "/orders/1001"}'::jsonb],
       ARRAY[convert_to('{"order_id":1001,"total":"19.99","currency":"EUR"}', 'UTF8')],
       ARRAY[true], ARRAY[86400])),
     ev AS (INSERT INTO record_events (tenant_id, token_id, event, attempt, status, by, expires_at)
            SELECT 0, decode(lpad(to_hex(:k::bigint), 32, '0'), 'hex'), 'completed', 1, 201,
                   'api_key:1', now() + make_interval(secs => 86400)
              FROM r WHERE r.outcome = 'completed')
SELECT outcome, i FROM r ORDER BY i;
