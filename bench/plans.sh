#!/usr/bin/env bash
# plans.sh: what the first submit's two plain-SQL statements cost
# PostgreSQL in counts, not time: plans made per call, buffers read per
# call, and how many completions were HOT updates. Starts a private
# PostgreSQL (deploy/pg.sh) with pg_stat_statements, migrates a database
# with IDEMD, fills records with COMPLETED completed records and takes its
# statistics, then runs, in one session prepared as idemd's pooled
# connections prepare them (the statement texts are read out of IDEMD),
# CALLS first submits of batches of BATCH records: claim_fresh of fresh
# records, then complete_current of them, each its own transaction.
# Twice: with no other record in progress, then beside OTHERS records in
# progress added after the statistics were taken (as when long work
# piles up between two ANALYZEs).
#
#   bash bench/plans.sh [--bin IDEMD] [--calls N] [--batch N] [--others N]
#                       [--completed N] [--schema SQL]
#
# --schema runs SQL on the migrated database first: an experiment on the
# schema, such as indexes dropped to see which completions become HOT
# updates (docs/performance.md, "A completion without index entries").
#
# Prints a Markdown table (bench/README.md, "Plans and buffers per first
# submit"). Leaves nothing running.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=$ROOT/build/idemd
CALLS=2000 BATCH=1 OTHERS=20000 COMPLETED=100000 SCHEMA=
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN=$(readlink -f "$2"); shift ;;
    --calls) CALLS=$2; shift ;;
    --batch) BATCH=$2; shift ;;
    --others) OTHERS=$2; shift ;;
    --completed) COMPLETED=$2; shift ;;
    --schema) SCHEMA=$2; shift ;;
    *) echo "plans.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ -x "$BIN" ] || { echo "plans.sh: no idemd at $BIN (build it, or --bin)" >&2; exit 1; }

W=$(mktemp -d /tmp/idemd-plans.XXXXXX)
chmod 711 "$W"              # PostgreSQL may run as another user
pg() { bash "$ROOT/deploy/pg.sh" "$@"; }
sql() { pg psql "$W/pg" -d idemd -qAt -v ON_ERROR_STOP=1 -c "$1"; }
# shellcheck disable=SC2317
cleanup() {
  pg stop "$W/pg" >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT
pg init "$W/pg" >/dev/null
pg start "$W/pg" >/dev/null
pg psql "$W/pg" -d postgres -qAt -c "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'"
pg stop "$W/pg" >/dev/null
pg start "$W/pg" >/dev/null
pg psql "$W/pg" -d postgres -qAt -c "ALTER SYSTEM SET pg_stat_statements.track_planning = on" \
  -c "SELECT pg_reload_conf()" >/dev/null
pg createdb "$W/pg" idemd >/dev/null
printf '{"listen": "127.0.0.1:1", "database_url": "%s", "master_key_file": "%s"}\n' \
  "$(pg conninfo "$W/pg" idemd)" "$W/master.key" >"$W/idemd.json"
"$BIN" --config "$W/idemd.json" migrate >"$W/migrate.log" 2>&1 || { cat "$W/migrate.log" >&2; exit 1; }
sql "CREATE EXTENSION pg_stat_statements" >/dev/null
[ -z "$SCHEMA" ] || sql "$SCHEMA" >/dev/null

# The completed records, then the statistics; autovacuum kept out of
# records so that they stay as taken.
ROWS="INSERT INTO records (tenant_id, token_id, operation_id, subject, state, attempt,
  lease_expires_at, response_status, token_expires_at, expires_at)
  SELECT 1, decode(lpad(to_hex(g), 32, '0'), 'hex'), 1, 'u', %s, 1, %s, %s,
  now() + interval '1 hour', now() + interval '1 hour' FROM generate_series(%d, %d) g"
# shellcheck disable=SC2059
sql "ALTER TABLE records SET (autovacuum_enabled = false);
  $(printf "$ROWS" "'completed'" NULL 200 1000000000000 $((1000000000000 + COMPLETED - 1)));
  ANALYZE records" >/dev/null

# One session's script: prepare both statements, then CALLS first submits
# of BATCH fresh records from FIRST on.
script() {
  python3 - "$BIN" "$CALLS" "$BATCH" "$1" <<'PY'
import sys
import time
binary, calls, batch, first = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
expires = int(time.time()) + 3600  # tokens valid an hour, kept a day once completed
data = open(binary, "rb").read()

def statement(start, mark):
    found, at = [], data.find(start)
    while at >= 0:
        end = data.find(b"\0", at)
        if mark in data[at:end]:
            found.append(data[at:end].decode())
        at = data.find(start, end)
    assert len(found) == 1, (mark, len(found))
    return found[0]

def arr(items):
    return "'{%s}'" % ",".join(items)

print("PREPARE claim_fresh AS %s;" % statement(
    b"WITH x AS (", b"AS x(tenant, id, op, subject, fp, expires, lease, by, audit, retention, i)"))
print("PREPARE complete_current AS %s;" % statement(
    b"WITH u AS (", b"AS x(tenant, id, attempt, status, headers, body, is_json, retention, by, audit, i)"))
n = batch
for c in range(calls):
    ids = ['"\\\\x%032x"' % (first + c * batch + k) for k in range(n)]
    print("EXECUTE claim_fresh(%s);" % ", ".join([
        arr(["1"] * n), arr(ids), arr(["1"] * n), arr(["u"] * n), arr(["NULL"] * n),
        arr(["%d" % expires] * n), arr(["60"] * n), arr(["bench"] * n), arr(["3600"] * n),
        arr(["86400"] * n)]))
    print("EXECUTE complete_current(%s);" % ", ".join([
        arr(["1"] * n), arr(ids), arr(["1"] * n), arr(["200"] * n), arr(['"{}"'] * n),
        arr(['"\\\\x"'] * n), arr(["f"] * n), arr(["86400"] * n), arr(["bench"] * n),
        arr(["3600"] * n)]))
PY
}

# One round: reset the counters, run a session, read them back.
round() {
  sql "SELECT pg_stat_statements_reset(); SELECT pg_stat_reset()" >/dev/null
  script "$2" >"$W/script.sql"
  local lsn
  lsn=$(sql "SELECT pg_current_wal_lsn()")
  pg psql "$W/pg" -d idemd -qAt -v ON_ERROR_STOP=1 -f "$W/script.sql" >/dev/null
  sql "SELECT '- records in progress beside: $1: ' || round(pg_wal_lsn_diff(pg_current_wal_lsn(),
       '$lsn') / ($CALLS * $BATCH)) || ' bytes of WAL per first submit'" >>"$W/hot"
  sleep 1                   # table statistics reach the view
  sql "SELECT '$1', CASE WHEN query LIKE '%UPDATE records%' THEN 'complete_current'
       ELSE 'claim_fresh' END, calls, plans,
       round((shared_blks_hit + shared_blks_read)::numeric / calls, 1),
       round(mean_exec_time::numeric, 3), round(mean_plan_time::numeric, 3)
       FROM pg_stat_statements WHERE query LIKE '%AS x(tenant, id, %'
       ORDER BY 2" | tr '|' '\t'
  sql "SELECT '- records in progress beside: $1: ' || n_tup_upd || ' updates of records, '
       || n_tup_hot_upd || ' of them HOT' FROM pg_stat_user_tables
       WHERE relname = 'records'" >>"$W/hot"
}
TABLE='{ printf "| %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7 }'
FIRST=2000000000000

{
  echo "binary: $BIN; $CALLS first submits of $BATCH record(s), one session; records:" \
    "$COMPLETED completed, statistics taken then${SCHEMA:+; schema changed by: $SCHEMA}"
  echo
  echo "| records in progress beside | statement | calls | plans | buffers per call | ms per call | ms planning per plan |"
  echo "|---|---|---:|---:|---:|---:|---:|"
  round none $FIRST | awk -F'\t' "$TABLE"
  # shellcheck disable=SC2059
  sql "$(printf "$ROWS" "'in_progress'" "now() + interval '1 hour'" NULL 1 "$OTHERS")" >/dev/null
  round "$OTHERS" $((FIRST + CALLS * BATCH)) | awk -F'\t' "$TABLE"
  echo
  cat "$W/hot"
}
