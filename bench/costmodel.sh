#!/usr/bin/env bash
# The database cost model of a first submit: what PostgreSQL spends, in CPU
# microseconds of the backend that does the work, on each kind of step a
# first submit is made of, measured on this machine, and their sum against
# the real thing (idemd's two SQL calls with their audit events).
#
#   bash bench/costmodel.sh [--seconds S] [--rounds N]
#
# Starts a private PostgreSQL 15 cluster (defaults: fsync and
# synchronous_commit on) in a temporary folder, migrates it with idemd's
# migrations, and runs each step as a pgbench script with one client
# (-M prepared) for S seconds (default 6), N rounds (default 3), rounds
# interleaved, after a 2 s warm-up of each. The CPU of the pgbench client's backend is read from
# /proc/<pid>/stat (user + system, its whole life) and divided by the
# transactions pgbench reports; medians of the rounds. Background processes (WAL writer, checkpointer) are not
# counted: a commit's flush is the backend's own in this setup.
#
# Steps (bench/cost/*.sql): a statement that writes nothing; a one-row
# insert into a copy of records without indexes (one transaction, so with a
# commit), and two such inserts in one transaction; the same insert with
# the primary key only, and with all five indexes of records (four take an
# entry for a row in progress); an update of a completed record's
# unindexed column (HOT) and of its expires_at (not HOT: three index
# entries); the first submit as idemd sends it (two statements, two
# transactions, their audit events told by the record's columns:
# bench/pgbench_db_first_submit.sql), as it sent it before migration 0013
# (each event a row of its own: cost/first_submit_rows.sql) and through the
# PL/pgSQL functions (..._functions.sql).
# Writes bench/results/costmodel.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BENCH=$ROOT/bench
SECS=6 ROUNDS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECS=$2; shift ;;
    --rounds) ROUNDS=$2; shift ;;
    -h|--help) sed -n '2,27s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "costmodel.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
case "$SECS$ROUNDS" in *[!0-9]*) echo "costmodel.sh: integers, please" >&2; exit 2 ;; esac
[ "$SECS" -ge 3 ] || { echo "costmodel.sh: --seconds 3 or more" >&2; exit 2; }

PGBIN=/usr/lib/postgresql/15/bin
bash deploy/deps.sh >/dev/null
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j2 --target idemd >/dev/null

WORK=$(mktemp -d /tmp/idemd-cost.XXXXXX)
chmod 711 "$WORK"
PGDIR=$WORK/pg
pg() { bash "$ROOT/deploy/pg.sh" "$@"; }
# shellcheck disable=SC2317
cleanup() { pg stop "$PGDIR" >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT
pg init "$PGDIR" >/dev/null
pg start "$PGDIR" >/dev/null
pg createdb "$PGDIR" idemd >/dev/null
SOCK=$(pg socket "$PGDIR")
ROLE=$(pg role "$PGDIR")
sql() { "$PGBIN/psql" -h "$SOCK" -U "$ROLE" -d "${2:-idemd}" -qAt -c "$1"; }
printf '{"database_url": "%s", "master_key_file": "%s"}\n' "$(pg conninfo "$PGDIR" idemd)" \
  "$WORK/master.key" >"$WORK/idemd.json"
{ build/idemd --config "$WORK/idemd.json" migrate &&
  build/idemd --config "$WORK/idemd.json" tenant create cost; } >"$WORK/migrate.log" 2>&1 \
  || { cat "$WORK/migrate.log" >&2; exit 1; }
"$PGBIN/psql" -h "$SOCK" -U "$ROLE" -d idemd -qAt -v ON_ERROR_STOP=1 \
  -f "$BENCH/cost/setup.sql" >/dev/null

# NAME@C: C clients (pgbench -j 2), the CPU of one of them per its share of
# the transactions: what group commit (one flush for several) leaves
STEPS=(statement insert_bare insert_bare_twice insert_pk insert_records update_hot
       update_nonhot first_submit first_submit_rows first_submit_fn insert_bare@8
       first_submit@8 first_submit_rows@8 first_submit_batch@2 first_submit_batch_hot@2)
script_of() {  # the first submits are the bench's own database diagnostics
  case "$1" in
    first_submit) echo "$BENCH/pgbench_db_first_submit.sql" ;;
    first_submit_fn) echo "$BENCH/pgbench_db_first_submit_functions.sql" ;;
    first_submit_batch|first_submit_batch_hot) echo "$WORK/$1.sql" ;;
    *) echo "$BENCH/cost/$1.sql" ;;
  esac
}
# the first submit over batches of 32, on records and on cost_hot
# (setup.sql), made from the bench's own one-element script
python3 "$BENCH/benchlib.py" batch-script "$BENCH/pgbench_db_first_submit.sql" records \
  >"$WORK/first_submit_batch.sql"
python3 "$BENCH/benchlib.py" batch-script "$BENCH/pgbench_db_first_submit.sql" cost_hot \
  >"$WORK/first_submit_batch_hot.sql"
RESULTS=$WORK/results.txt
: >"$RESULTS"
# measure STEP ROUND: the CPU of a client's backend over its whole life
# (read every 10 ms until it is gone, so at most 10 ms of it missed), and
# the transactions pgbench reports (divided by the clients)
measure() {
  local step=$1 round=$2 out=$WORK/$1.$2.txt clients=1
  case "$step" in *@*) clients=${step#*@} ;; esac
  "$PGBIN/pgbench" -h "$SOCK" -U "$ROLE" -M prepared -n -c "$clients" \
    -j "$(( clients < 2 ? 1 : 2 ))" -T "$SECS" -f "$(script_of "${step%@*}")" idemd >"$out" 2>&1 &
  local bench=$! pid line f ticks total=0
  # pgbench opens a connection of its own first and closes it: each
  # backend it had is followed until it is gone, and their CPU added
  while kill -0 "$bench" 2>/dev/null; do
    pid=$(sql "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench'
               ORDER BY backend_start LIMIT 1" postgres)
    if [ -z "$pid" ]; then sleep 0.02; continue; fi
    ticks=0
    while read -r line 2>/dev/null <"/proc/$pid/stat"; do
      read -r -a f <<<"$line"
      ticks=$(( f[13] + f[14] ))
      sleep 0.01
    done
    total=$((total + ticks))
  done
  wait "$bench" || { cat "$out" >&2; exit 1; }
  local tx
  tx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$out")
  [ "$round" = warmup ] && return 0
  echo "$step $round $(( total * 1000000 / $(getconf CLK_TCK) )) $(( ${tx:-0} / clients ))" \
    >>"$RESULTS"
}
SECS_MEASURED=$SECS SECS=2
for s in "${STEPS[@]}"; do measure "$s" warmup; done
# statistics of the tables the warm-ups filled: a plan made while a table
# was empty (a sequential scan) would otherwise stay until autovacuum's
# next ANALYZE
sql "ANALYZE" >/dev/null
SECS=$SECS_MEASURED
for r in $(seq "$ROUNDS"); do
  for s in "${STEPS[@]}"; do
    measure "$s" "$r"
    tail -n 1 "$RESULTS" | awk '{ printf "    %-18s round %s: %6.1f µs per transaction (%d)\n", $1, $2, $3 / ($4 ? $4 : 1), $4 }'
  done
done
python3 "$BENCH/benchlib.py" costmodel "$RESULTS" "$BENCH/results/costmodel.md" \
  "$(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -n 1), PostgreSQL $(sql 'SHOW server_version'), $SECS s x $ROUNDS rounds, $(date -u '+%Y-%m-%d')"
cat "$BENCH/results/costmodel.md"
