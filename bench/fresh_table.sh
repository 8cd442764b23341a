#!/usr/bin/env bash
# fresh_table.sh: first submits on a new deployment, window by window, as
# records grows from empty. Starts a private PostgreSQL (deploy/pg.sh), a
# static upstream (baseline_mhd) and idemd on a freshly migrated database
# with one gateway token route, then runs wrk (64 connections) for
# WINDOWS windows of 8 s, each on 70,000 fresh tokens, and prints the
# window's first submits/s, the rows of records and when autovacuum last
# analyzed it. It shows whether the plans idemd's connections made while
# records was empty outlive the table's growth (docs/operations.md).
#
#   bash bench/fresh_table.sh [--windows N] [--bin IDEMD]
#
# Needs what bench/run.sh needs (run it once first: it installs wrk and
# builds build-bench/idemd, the default binary). Leaves nothing running.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BENCH=$ROOT/bench
WINDOWS=9
BIN=$ROOT/build-bench/idemd
while [ $# -gt 0 ]; do
  case "$1" in
    --windows) WINDOWS=$2; shift ;;
    --bin) BIN=$2; shift ;;
    *) echo "fresh_table.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ -x "$BIN" ] || { echo "fresh_table.sh: no idemd at $BIN (run bench/run.sh once, or --bin)" >&2; exit 1; }

W=$(mktemp -d /tmp/idemd-fresh.XXXXXX)
chmod 711 "$W"              # PostgreSQL may run as another user
pg() { bash "$ROOT/deploy/pg.sh" "$@"; }
sql() { pg psql "$W/pg" -d idemd -qAt -c "$1"; }
UP= IP=
# shellcheck disable=SC2317
cleanup() {
  [ -n "$IP" ] && kill "$IP" 2>/dev/null
  [ -n "$UP" ] && kill "$UP" 2>/dev/null
  wait 2>/dev/null || true
  pg stop "$W/pg" >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT
pg init "$W/pg" >/dev/null
pg start "$W/pg" >/dev/null
pg createdb "$W/pg" idemd >/dev/null
read -r PORT UPORT < <(python3 "$BENCH/benchlib.py" free-ports 2)
cc -std=c11 -O2 -D_GNU_SOURCE -o "$W/upstream" "$BENCH/baseline_mhd.c" -lmicrohttpd
"$W/upstream" --port "$UPORT" --threads 1 --status 201 2>/dev/null &
UP=$!
python3 - "$W/idemd.json" "127.0.0.1:$PORT" "$(pg conninfo "$W/pg" idemd)" "$W/master.key" \
  "http://127.0.0.1:$UPORT" <<'PY'
import json, sys
path, listen, db, key, upstream = sys.argv[1:]
json.dump({"listen": listen, "database_url": db, "master_key_file": key,
           "max_connections": 4096, "max_connections_per_ip": 0,
           "sweep_interval_seconds": 86400,
           "routes": [{"method": "POST", "path": "/bench/orders", "tenant": "bench",
                       "operation": "gw.order.create", "upstream": upstream,
                       "store_headers": ["location"]}]}, open(path, "w"))
PY
"$BIN" --config "$W/idemd.json" migrate >"$W/migrate.log" 2>&1 || { cat "$W/migrate.log" >&2; exit 1; }
KEY=$("$BIN" --config "$W/idemd.json" tenant create bench \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["api_key"])')
"$BIN" --config "$W/idemd.json" serve 2>>"$W/idemd.log" &
IP=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fs -o /dev/null -X PUT "http://127.0.0.1:$PORT/v1/operations/gw.order.create" \
  -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
  -d '{"token_ttl_seconds":3600,"retention_seconds":86400,"lease_seconds":60}'
T0=$(date +%s)
echo "seconds  first submits/s  rows of records  autovacuum's last ANALYZE"
for _ in $(seq "$WINDOWS"); do
  python3 "$BENCH/benchlib.py" tokens "$PORT" "$KEY" gw.order.create 70000 "$W/tokens" >/dev/null
  line=$(BENCH_DIR=$BENCH BENCH_API_KEY=$KEY BENCH_OPERATION=gw.order.create \
    wrk -t2 -c64 -d8s -s "$BENCH/gateway_first.lua" "http://127.0.0.1:$PORT" -- "$W/tokens" 2 \
    2>&1 | sed -n 's/^BENCH_RESULT //p')
  rate=$(python3 -c 'import sys; r = dict(kv.split("=") for kv in sys.argv[1].split()); print("%.0f" % (int(r["ops"]) / (int(r["duration_us"]) / 1e6)))' "$line")
  printf '%7d  %15s  %15s  %s\n' "$(( $(date +%s) - T0 ))" "$rate" "$(sql 'SELECT count(*) FROM records')" \
    "$(sql "SELECT coalesce(to_char(last_autoanalyze, 'HH24:MI:SS'), 'never') FROM pg_stat_user_tables WHERE relname = 'records'")"
done
grep -o 'janitor: analyzed[^"]*' "$W/idemd.log" | sort | uniq -c || true
