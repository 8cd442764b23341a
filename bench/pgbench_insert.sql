-- pgbench_insert.sql: baseline B. One-row INSERT ... ON CONFLICT DO NOTHING
-- of a fresh random 16-byte key into bench_records, a copy of idemd's
-- records table (same columns, constraints and indexes), one transaction
-- (one synchronous commit) each, like the row an idemd first claim writes.
-- Run with: pgbench -M prepared -n -c 8 -j 2 -T 10 -f pgbench_insert.sql
INSERT INTO bench_records
       (tenant_id, token_id, operation_id, subject, state, fingerprint, attempt,
        lease_expires_at, token_expires_at, expires_at, created_at, updated_at)
VALUES (1, uuid_send(gen_random_uuid()), 1, 'user-42', 'in_progress',
        '\x00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff'::bytea, 1,
        now() + interval '30 seconds', now() + interval '1 hour',
        now() + interval '1 hour', now(), now())
ON CONFLICT (tenant_id, token_id) DO NOTHING;
