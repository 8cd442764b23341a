-- insert_bare_twice.sql: two rows of insert_bare.sql in one transaction
-- (BEGIN and COMMIT are two statements more): against insert_bare.sql, one
-- heap tuple and two statements more, one commit less per row.
\set k random(1, 9000000000000000)
BEGIN;
INSERT INTO cost_bare
       (tenant_id, token_id, operation_id, subject, state, fingerprint, attempt,
        lease_expires_at, token_expires_at, expires_at, created_at, updated_at)
VALUES (1, decode(lpad(to_hex(:k::bigint), 32, '0'), 'hex'), 1, 'user-42', 'in_progress',
        '\x00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff'::bytea, 1,
        now() + interval '30 seconds', now() + interval '1 hour',
        now() + interval '1 hour', now(), now());
INSERT INTO cost_bare
       (tenant_id, token_id, operation_id, subject, state, fingerprint, attempt,
        lease_expires_at, token_expires_at, expires_at, created_at, updated_at)
VALUES (1, decode(lpad(to_hex(:k::bigint + 1), 32, '0'), 'hex'), 1, 'user-42', 'in_progress',
        '\x00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff'::bytea, 1,
        now() + interval '30 seconds', now() + interval '1 hour',
        now() + interval '1 hour', now(), now());
COMMIT;
