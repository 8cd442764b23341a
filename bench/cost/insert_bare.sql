-- insert_bare.sql: a claim's row, into a copy of records without indexes: one heap tuple and a commit.
\set k random(1, 9000000000000000)
INSERT INTO cost_bare
       (tenant_id, token_id, operation_id, subject, state, fingerprint, attempt,
        lease_expires_at, token_expires_at, expires_at, created_at, updated_at)
VALUES (1, decode(lpad(to_hex(:k::bigint), 32, '0'), 'hex'), 1, 'user-42', 'in_progress',
        '\x00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff'::bytea, 1,
        now() + interval '30 seconds', now() + interval '1 hour',
        now() + interval '1 hour', now(), now());
