-- pgbench_db_replay.sql: diagnostic, the database half of a replay without
-- idemd: the claim of an already completed record (rows of
-- pgbench_db_setup.sql) as idemd sends it when the replay cache misses
-- (claim_fresh of src/store.c over a one-element array: its INSERT finds
-- the record and makes nothing, its read answers the replay), one
-- transaction each. A completed record is read without a lock, so this
-- writes nothing.
\set i random(1, 10000)
WITH x AS (SELECT * FROM unnest(ARRAY[0], ARRAY[decode(lpad(to_hex(:i::bigint), 32, '0'), 'hex')],
       ARRAY[1], ARRAY['user-42'],
       ARRAY['\x00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff'::bytea],
       ARRAY[extract(epoch FROM now())::bigint + 3600], ARRAY[60]) WITH ORDINALITY
       AS x(tenant, id, op, subject, fp, expires, lease, i)),
     ins AS (INSERT INTO records AS rec (tenant_id, token_id, operation_id, subject, state,
                 fingerprint, attempt, lease_expires_at, version_claimed, token_expires_at,
                 expires_at, created_at, updated_at)
             SELECT x.tenant, x.id, x.op, x.subject, 'in_progress', x.fp, 1,
                    now() + make_interval(secs => x.lease), NULL, to_timestamp(x.expires),
                    greatest(to_timestamp(x.expires), now() + make_interval(secs => x.lease)),
                    now(), now()
               FROM x WHERE x.lease > 0 AND to_timestamp(x.expires) > now() ORDER BY x.i
             ON CONFLICT (tenant_id, token_id) DO NOTHING
             RETURNING rec.tenant_id, rec.token_id, rec.lease_expires_at),
     got AS (SELECT x.i, ins.lease_expires_at FROM ins
               JOIN x ON x.tenant = ins.tenant_id AND x.id = ins.token_id),
     ev AS (INSERT INTO record_events (tenant_id, token_id, event, attempt, status, phase, by,
                                       expires_at)
            SELECT 0, decode(lpad(to_hex(:i::bigint), 32, '0'), 'hex'), 'claimed', 1, NULL,
                   NULL, 'api_key:1', now() + make_interval(secs => 86400)
              FROM got g),
     old AS (SELECT x.i, 'replay' AS outcome, rec.attempt, rec.expires_at AS until,
                    rec.response_status, rec.response_headers, rec.response_body,
                    rec.response_is_json
               FROM x JOIN records rec ON rec.tenant_id = x.tenant AND rec.token_id = x.id
              WHERE rec.state = 'completed' AND rec.fingerprint IS NOT DISTINCT FROM x.fp)
SELECT outcome, attempt, (extract(epoch from until) * 1000)::bigint, NULL::int,
       response_status, response_headers, response_body, response_is_json, NULL::bigint, i
  FROM (SELECT g.i, 'claimed' AS outcome, 1 AS attempt, g.lease_expires_at AS until,
               NULL::int AS response_status, NULL::jsonb AS response_headers,
               NULL::bytea AS response_body, NULL::boolean AS response_is_json FROM got g
        UNION ALL SELECT * FROM old) r
 ORDER BY i;
