#!/usr/bin/env bash
# The sweeper's cost per row (docs/operations.md): on a database of N
# completed records (default 50,000) past their expiry, each telling its
# 'claimed' and 'completed' events within their retention, it times full
# sweep passes of idemd.sweep in batches of 500, as the janitor runs them:
#   1. every life ended (the told events kept as rows, 'expired' written);
#   2. the fences given their next time (fence_retention_seconds ahead);
#   3. the fences deleted (their retention passed).
# A checkpoint comes before each pass, so that its first writes to a page
# pay for the page's image in the WAL as a sweep of old rows does.
#
#   IDEMD_TEST_PGHOST=… IDEMD_TEST_PGUSER=… bash bench/sweep.sh BUILD/idemd
#
# Creates and drops its own database on that cluster. Prints one line per
# pass: rows, batches, seconds, microseconds per row.
set -euo pipefail
N=${N:-50000}
BIN=$1
export PGHOST=$IDEMD_TEST_PGHOST PGUSER=$IDEMD_TEST_PGUSER
PSQL="/usr/lib/postgresql/15/bin/psql -X -q -A -t -v ON_ERROR_STOP=1"
DB=idemd_sweep_$$
T=$(mktemp -d)
$PSQL -d postgres -c "CREATE DATABASE $DB"
trap '$PSQL -d postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)"; rm -rf "$T"' EXIT
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$T/k"
chmod 600 "$T/k"
echo "{\"database_url\":\"host=$PGHOST dbname=$DB user=$PGUSER\",\"master_key_file\":\"$T/k\"}" > "$T/c.json"
$BIN --config "$T/c.json" migrate 2>/dev/null
$PSQL -d $DB <<SQL
INSERT INTO tenants(name) VALUES ('m');
INSERT INTO operations(tenant_id, name, token_ttl_seconds, retention_seconds, lease_seconds)
  SELECT id, 'op', 600, 86400, 30 FROM tenants;
INSERT INTO records (tenant_id, token_id, operation_id, subject, state, attempt,
                     response_status, response_body, token_expires_at, expires_at, created_at,
                     sweep_at, claimed_seq, claimed_by, claimed_until, completed_seq,
                     completed_at, completed_by, completed_until)
SELECT t.id, decode(md5(g::text), 'hex'), o.id, 's' || (g % 1000), 'completed', 1,
       201, convert_to('{"order_id":"abcdefgh","amount":1234}', 'UTF8'),
       now() - interval '2 days', now() - interval '1 day', now() - interval '3 days',
       now() - interval '1 day', g, 'api_key:1', now() + interval '1 day', $N + g,
       now() - interval '2 days', 'api_key:1', now() + interval '1 day'
  FROM generate_series(1, $N) g, tenants t, operations o;
VACUUM ANALYZE records;
SQL

# sweep KEEP: one full pass on one connection, each batch its own
# transaction and going on from the last, as the janitor runs them (a few
# empty batches at the end cost next to nothing); prints rows, batches and
# the start and end times.
sweep() {
	local keep=$1 t0 t1 out
	t0=$(date +%s.%N)
	out=$({
		printf '%s\n' "\\set c ''" "\\set rows 0" "\\set batches 0"
		for _ in $(seq $((N / 500 + 2))); do
			echo "SELECT ended + deleted + moved AS n, coalesce(last, :'c') AS c FROM idemd.sweep(500, $keep, nullif(:'c', '')) \\gset"
			echo "SELECT :rows + :n AS rows, :batches + (:n > 0)::int AS batches \\gset"
		done
		echo "\\echo :rows :batches"
	} | $PSQL -d $DB)
	t1=$(date +%s.%N)
	echo "$out $t0 $t1"
}
report() {
	read -r rows batches t0 t1 <<<"$2"
	awk -v name="$1" -v r="$rows" -v b="$batches" -v t0="$t0" -v t1="$t1" 'BEGIN {
		s = t1 - t0; printf "%-34s %7d rows %4d batches %7.2f s %7.1f us/row\n", name, r, b, s, (r ? s * 1e6 / r : 0) }'
}
$PSQL -d $DB -c CHECKPOINT
report "lives ended" "$(sweep 604800)"
$PSQL -d $DB -c "UPDATE records SET sweep_at = '-infinity'" -c "VACUUM ANALYZE records" -c CHECKPOINT
report "fences given their next time" "$(sweep 604800)"
$PSQL -d $DB -c "UPDATE records SET sweep_at = '-infinity'" -c "VACUUM ANALYZE records" -c CHECKPOINT
report "fences deleted" "$(sweep 0)"
echo "events: $($PSQL -d $DB -c "SELECT string_agg(event || ' ' || n, ', ' ORDER BY event) FROM (SELECT event, count(*) n FROM record_events GROUP BY 1) e")"
