#!/usr/bin/env bash
# The operating figures of docs/operations.md: on a database of N
# records (default 10 million, P = 1000 of them in progress past their
# lease) it times migration 0010 (the replays column and the partial index
# of records in progress), migration 0017 (sweep_at and its index, the
# three indexes that kept completions from being HOT dropped), the
# idemd_records_stuck query (a read of the whole table since 0017), the
# first four sweep batches after 0017 (500 rows already there each given
# their time)
# and the worst-case replay count flush (16384 distinct records, the
# in-memory table's capacity, in one UPDATE).
#
#   IDEMD_TEST_PGHOST=… IDEMD_TEST_PGUSER=… bash bench/ops_figures.sh BUILD/idemd
#
# Creates and drops its own database on that cluster.
set -euo pipefail
N=${N:-10000000} P=${P:-1000}
BIN=$1
export PGHOST=$IDEMD_TEST_PGHOST PGUSER=$IDEMD_TEST_PGUSER
PSQL="/usr/lib/postgresql/15/bin/psql -X -q -v ON_ERROR_STOP=1"
DB=idemd_measure_$$
T=$(mktemp -d)
$PSQL -d postgres -c "CREATE DATABASE $DB"
trap '$PSQL -d postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)"; rm -rf "$T"' EXIT
echo "{\"database_url\":\"host=$PGHOST dbname=$DB user=$PGUSER\",\"master_key_file\":\"$T/k\"}" > $T/c.json
$BIN --config $T/c.json migrate 2>/dev/null
$PSQL -d $DB <<SQL
ALTER TABLE records DROP COLUMN replays;
ALTER TABLE records DROP COLUMN sweep_at;
CREATE INDEX records_live_expiry_idx ON records (expires_at) WHERE state <> 'expired';
CREATE INDEX records_fence_expiry_idx ON records (expires_at) WHERE state = 'expired';
INSERT INTO tenants(name) VALUES ('m');
INSERT INTO operations(tenant_id, name, token_ttl_seconds, retention_seconds, lease_seconds)
  SELECT id, 'op', 600, 86400, 30 FROM tenants;
\timing on
INSERT INTO records (tenant_id, token_id, operation_id, subject, state, attempt, lease_expires_at,
                     response_status, token_expires_at, expires_at, created_at)
SELECT 1, decode(md5(g::text), 'hex'), 1, 's' || (g % 1000),
       CASE WHEN g <= $P THEN 'in_progress' ELSE 'completed' END, 1,
       CASE WHEN g <= $P THEN now() - interval '1 minute' END,
       CASE WHEN g <= $P THEN NULL ELSE 201 END,
       now() + interval '1 day', now() + interval '1 day', now() - (g || ' seconds')::interval
FROM generate_series(1, $N) g;
VACUUM ANALYZE records;
\echo == migration 0010 on the table
BEGIN;
ALTER TABLE records ADD COLUMN replays bigint NOT NULL DEFAULT 0;
CREATE INDEX records_in_progress_lease_idx ON records (lease_expires_at) WHERE state = 'in_progress';
COMMIT;
\echo == migration 0017 on the table
BEGIN;
ALTER TABLE records ADD COLUMN sweep_at timestamptz NOT NULL DEFAULT '-infinity';
CREATE INDEX records_sweep_idx ON records (sweep_at, tenant_id, token_id);
DROP INDEX records_live_expiry_idx;
DROP INDEX records_fence_expiry_idx;
DROP INDEX records_in_progress_lease_idx;
COMMIT;
ANALYZE records;
SELECT pg_size_pretty(pg_relation_size('records_sweep_idx')) AS sweep_index_size;
\echo == the first sweep batches after 0017: the rows already there given their time, 500 a batch
SELECT ended, deleted, moved, last AS c FROM idemd.sweep(500, 604800) \gset
SELECT ended, deleted, moved, last AS c FROM idemd.sweep(500, 604800, :'c') \gset
SELECT ended, deleted, moved, last AS c FROM idemd.sweep(500, 604800, :'c') \gset
SELECT * FROM idemd.sweep(500, 604800, :'c');
\echo == stuck-records query (3 runs)
SELECT tenant_id, operation_id, count(*) FROM records WHERE state = 'in_progress' AND lease_expires_at < now() AND expires_at > now() GROUP BY tenant_id, operation_id LIMIT 10000;
SELECT tenant_id, operation_id, count(*) FROM records WHERE state = 'in_progress' AND lease_expires_at < now() AND expires_at > now() GROUP BY tenant_id, operation_id LIMIT 10000;
SELECT tenant_id, operation_id, count(*) FROM records WHERE state = 'in_progress' AND lease_expires_at < now() AND expires_at > now() GROUP BY tenant_id, operation_id LIMIT 10000;
EXPLAIN SELECT tenant_id, operation_id, count(*) FROM records WHERE state = 'in_progress' AND lease_expires_at < now() AND expires_at > now() GROUP BY tenant_id, operation_id LIMIT 10000;
\echo == one flush of 16384 records, the table capacity, 3 runs
\timing off
CREATE TEMP TABLE ids AS SELECT 1 AS t, decode(md5(g::text), 'hex') AS id, 3::bigint AS n
  FROM generate_series($P + 1, $N, ($N / 16384)) g LIMIT 16384;
SELECT array_agg(t ORDER BY id) AS ts, array_agg(id ORDER BY id) AS ids, array_agg(n ORDER BY id) AS ns FROM ids \gset
EXPLAIN UPDATE records r SET replays = r.replays + u.n FROM unnest(:'ts'::int[], :'ids'::bytea[], :'ns'::bigint[]) AS u(t, id, n) WHERE r.tenant_id = u.t AND r.token_id = u.id;
\timing on
UPDATE records r SET replays = r.replays + u.n FROM unnest(:'ts'::int[], :'ids'::bytea[], :'ns'::bigint[]) AS u(t, id, n) WHERE r.tenant_id = u.t AND r.token_id = u.id;
UPDATE records r SET replays = r.replays + u.n FROM unnest(:'ts'::int[], :'ids'::bytea[], :'ns'::bigint[]) AS u(t, id, n) WHERE r.tenant_id = u.t AND r.token_id = u.id;
UPDATE records r SET replays = r.replays + u.n FROM unnest(:'ts'::int[], :'ids'::bytea[], :'ns'::bigint[]) AS u(t, id, n) WHERE r.tenant_id = u.t AND r.token_id = u.id;
\timing off
SELECT sum(replays) AS replays_total, count(*) FILTER (WHERE replays > 0) AS records FROM records;
SQL
