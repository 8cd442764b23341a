-- pgbench_db_replay_functions.sql: diagnostic, as the db_replay of run.sh
-- (the claim of pgbench_db_first_submit.sql over a completed record) but
-- through the PL/pgSQL function idemd.claim of migrations/0009: what a
-- replay that missed the replay cache cost the database before the
-- plain-SQL claim, one transaction each. It writes nothing.
\set i random(1, 10000)
SELECT * FROM idemd.claim(ARRAY[0], ARRAY[decode(lpad(to_hex(:i::bigint), 32, '0'), 'hex')],
       ARRAY[1], ARRAY['user-42'],
       ARRAY['\x00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff'::bytea],
       ARRAY[extract(epoch FROM now())::bigint + 3600], ARRAY[60], ARRAY[NULL::text],
       ARRAY[NULL::bigint], ARRAY[false], ARRAY[false]);
