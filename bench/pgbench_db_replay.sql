-- pgbench_db_replay.sql: diagnostic, the database half of a replay without
-- idemd: idemd_claim of an already completed record (rows of
-- pgbench_db_setup.sql), one transaction each.
\set i random(1, 10000)
SELECT * FROM idemd_claim(0, decode(lpad(to_hex(:i::bigint), 32, '0'), 'hex'), 1, 'user-42',
       '\x00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff'::bytea,
       now() + interval '1 hour', 60, NULL, NULL, false);
