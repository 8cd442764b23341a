-- pgbench_db_replay.sql: diagnostic, the database half of a replay without
-- idemd: idemd.claim of an already completed record (rows of
-- pgbench_db_setup.sql), one transaction each. A completed record is read
-- without a lock, so this writes nothing.
\set i random(1, 10000)
SELECT * FROM idemd.claim(ARRAY[0], ARRAY[decode(lpad(to_hex(:i::bigint), 32, '0'), 'hex')],
       ARRAY[1], ARRAY['user-42'],
       ARRAY['\x00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff'::bytea],
       ARRAY[extract(epoch FROM now())::bigint + 3600], ARRAY[60], ARRAY[NULL::text],
       ARRAY[NULL::bigint], ARRAY[false], ARRAY[false]);
