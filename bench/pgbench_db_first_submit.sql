-- pgbench_db_first_submit.sql: diagnostic, the database half of a direct
-- first submit without idemd: the claim and the completion of a fresh
-- random token over one-element arrays, as idemd sends them for batches
-- (the plain-SQL statements claim_fresh and complete_current of
-- src/store/store.c, their audit events told by the record's own columns:
-- migrations/0013; sweep_at for a retention of 86400 s, so that the
-- completion is a HOT update: migrations/0017), two transactions (tenant
-- 0). A batch of one goes through claim_one and complete_one instead (the
-- same statements with their one element read by subscript, the
-- completion without complete_current's locking step:
-- docs/performance.md); costmodel.sh makes its batches of 32 from this.
-- Throughput here is the ceiling idemd's first submit can reach with the
-- current SQL and no batching; the gap between it and bench's
-- first_submit is idemd's own (or, above it, what batching buys).
\set k random(1000000, 9000000000000000)
WITH x AS (SELECT * FROM unnest(ARRAY[0], ARRAY[decode(lpad(to_hex(:k::bigint), 32, '0'), 'hex')],
       ARRAY[1], ARRAY['user-42'],
       ARRAY['\x00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff'::bytea],
       ARRAY[extract(epoch FROM now())::bigint + 3600], ARRAY[60]) WITH ORDINALITY
       AS x(tenant, id, op, subject, fp, expires, lease, i)),
     ins AS (INSERT INTO records AS rec (tenant_id, token_id, operation_id, subject, state,
                 fingerprint, attempt, lease_expires_at, version_claimed, token_expires_at,
                 expires_at, sweep_at, created_at, updated_at, claimed_seq, claimed_by,
                 claimed_trace)
             SELECT x.tenant, x.id, x.op, x.subject, 'in_progress', x.fp, 1,
                    now() + make_interval(secs => x.lease), NULL, to_timestamp(x.expires),
                    greatest(to_timestamp(x.expires), now() + make_interval(secs => x.lease)),
                    greatest(to_timestamp(x.expires), now() + interval '86400 seconds'),
                    now(), now(), nextval('record_events_seq_seq'), 'api_key:1', NULL
               FROM x WHERE x.lease > 0 AND to_timestamp(x.expires) > now() ORDER BY x.i
             ON CONFLICT (tenant_id, token_id) DO NOTHING
             RETURNING rec.tenant_id, rec.token_id, rec.lease_expires_at),
     got AS (SELECT x.i, ins.lease_expires_at FROM ins
               JOIN x ON x.tenant = ins.tenant_id AND x.id = ins.token_id),
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
WITH u AS (SELECT * FROM unnest(ARRAY[0], ARRAY[decode(lpad(to_hex(:k::bigint), 32, '0'), 'hex')],
       ARRAY[1], ARRAY[201], ARRAY['{"location": "/orders/1001"}'::jsonb],
       ARRAY[convert_to('{"order_id":1001,"total":"19.99","currency":"EUR"}', 'UTF8')],
       ARRAY[true], ARRAY[86400]) WITH ORDINALITY
       AS x(tenant, id, attempt, status, headers, body, is_json, retention, i)),
     locked AS (SELECT rec.tenant_id, rec.token_id FROM records rec
                 WHERE (rec.tenant_id, rec.token_id) IN (SELECT u.tenant, u.id FROM u)
                   AND rec.state = 'in_progress'
                 ORDER BY rec.tenant_id, rec.token_id FOR UPDATE),
     upd AS (UPDATE records rec
                SET state = 'completed', lease_expires_at = NULL, response_status = u.status,
                    response_headers = u.headers, response_body = u.body,
                    response_is_json = coalesce(u.is_json, false),
                    expires_at = greatest(now() + make_interval(secs => u.retention),
                                          rec.token_expires_at),
                    sweep_at = least(rec.sweep_at,
                                     greatest(now() + make_interval(secs => u.retention),
                                              rec.token_expires_at)),
                    updated_at = now(), completed_at = clock_timestamp(),
                    completed_seq = nextval('record_events_seq_seq'),
                    completed_by = 'api_key:1', completed_trace = NULL
               FROM u JOIN locked l ON l.tenant_id = u.tenant AND l.token_id = u.id
              WHERE rec.tenant_id = u.tenant AND rec.token_id = u.id
                AND rec.state = 'in_progress' AND rec.attempt = u.attempt
                AND u.status BETWEEN 100 AND 599 AND u.retention >= 0
             RETURNING u.i, rec.response_status, rec.response_headers, rec.response_body,
                       rec.response_is_json, rec.expires_at, rec.fingerprint)
SELECT 'completed', response_status, response_headers, response_body, response_is_json,
       (extract(epoch from expires_at) * 1000)::bigint, fingerprint, i FROM upd ORDER BY i;
