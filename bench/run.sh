#!/usr/bin/env bash
# The idemd benchmark: one command, run from the repository root or anywhere.
#
#   bash bench/run.sh [--scale] [--profile] [--waiters | --waiters-only]
#                     [--duration S] [--runs N] [--keep]
#
# Builds a release idemd (build-bench/) and the trivial libmicrohttpd
# baseline, starts a private PostgreSQL 15 cluster in a temporary folder
# (default settings, fsync and synchronous_commit on), migrates it, creates a
# tenant and its operations, then measures on 127.0.0.1, each scenario
# --runs times (default 3) for --duration seconds (default 10), interleaved
# round by round, and reports medians:
#   baseline A  trivial MHD server, idemd's threading settings, same wrk load
#   baseline B  pgbench -M prepared -c 8 -j 2: one-row INSERT ... ON CONFLICT
#   idemd       issue; direct first submit (claim + complete of a fresh
#               token = one operation) at 16 and at 64 connections; claim
#               alone; replay; gateway first submit (16 and 64 connections)
#               and gateway replay (when the source has a gateway); the same
#               gateway with caller keys (route key "header:Idempotency-Key",
#               the IETF draft): first submit at 16 and 64 connections and
#               replay; claims of fresh caller keys, one per request and 100
#               per batch (POST /v1/operations/{op}/claims)
#   peer        Node + @node-idempotency/core + its Redis storage adapter in
#               front of a create-order handler (bench/peer/), Redis from
#               Debian with its default persistence (no AOF, so no fsync per
#               write; RDB snapshots): first submit at 16 and 64 connections
#               and replay, under the same wrk scripts as the IETF-key route
#   durable peer  the same peer on a second Redis with appendonly yes and
#               appendfsync always (every write on disk before the reply)
#   durability  first submits at 1, 16, 32 and 64 connections, side by side:
#               direct API, token route, IETF-key route, both peers
#   memory      2,000 keep-alive connections open; RSS after every round
# Writes bench/results/latest.md (raw outputs in bench/results/raw/).
#
#   --scale    afterwards: 10 million records (1 million of them expired;
#              BENCH_SCALE_ROWS changes the total for a quick check),
#              claim and replay again, then the sweeper ends the expired
#              million's lives and deletes their rows (fence_retention_seconds
#              0) while claims are measured; writes results/scale.md
#              (and latest.md, as without the flag)
#   --profile  afterwards: perf profiles of the direct first submit (idemd
#              alone with call graphs, and the whole machine by process)
#              into bench/results/raw/perf.*.txt
#   --waiters  afterwards: the waiter bench (bench/waiters.sh): 10,000
#              duplicates waiting (Prefer: wait) on one in-progress record,
#              one completion, the wake-up of each; on one idemd and across
#              two (results in latest.md with the rest)
#   --waiters-only  the waiter bench alone (writes results/waiters.md)
#   --keep     keep the temporary folder (cluster, logs, token files)
#   --pin      the database on cores of its own: PostgreSQL and both peers'
#              Redis on the upper half of the cores, idemd, the peers'
#              Node, the baselines' servers and the load generators on the
#              lower half (taskset); writes results/pinned.md instead of
#              latest.md
# Environment: BENCH_THREADS / BENCH_POOL_SIZE set idemd's threads /
# pool_size (default: idemd's own defaults; the baseline follows them).
# BENCH_WAITERS (default 10000) / BENCH_WAITER_ROUNDS (default 3) size the
# waiter bench (below 10,000 its targets get no verdict).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BENCH=$ROOT/bench
RAW=$BENCH/results/raw
BUILD=$ROOT/build-bench
PGBIN=/usr/lib/postgresql/15/bin

SCALE=0 PROFILE=0 KEEP=0 DUR=10 RUNS=3 WAITERS=0 PIN=0
while [ $# -gt 0 ]; do
  case "$1" in
    --scale) SCALE=1 ;;
    --profile) PROFILE=1 ;;
    --keep) KEEP=1 ;;
    --pin) PIN=1 ;;
    --waiters) WAITERS=1 ;;
    --waiters-only) WAITERS=2 ;;
    --duration) DUR=$2; shift ;;
    --runs) RUNS=$2; shift ;;
    -h|--help) sed -n '2,48s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
case "$DUR$RUNS" in *[!0-9]*) echo "run.sh: --duration and --runs take integers" >&2; exit 2 ;; esac
# --pin: DB_CPU runs a database, APP_CPU everything else (empty: no pinning)
DB_CPU=() APP_CPU=() PIN_NOTE="none: every process on every core"
if [ "$PIN" = 1 ]; then
  NCPU=$(nproc)
  [ "$NCPU" -ge 2 ] || { echo "run.sh: --pin needs 2 cores or more" >&2; exit 2; }
  HALF=$(( NCPU / 2 ))
  DB_CPU=(taskset -c "$HALF-$(( NCPU - 1 ))") APP_CPU=(taskset -c "0-$(( HALF - 1 ))")
  PIN_NOTE="PostgreSQL and Redis on cores $HALF-$(( NCPU - 1 )); idemd, Node, the baselines and the load generators on cores 0-$(( HALF - 1 ))"
fi

say() { printf '\n==> %s\n' "$*"; }
note() { printf '    %s\n' "$*"; }
die() { echo "run.sh: $*" >&2; exit 1; }
T0=$(date +%s)
LOAD0=$(cut -d' ' -f1 /proc/loadavg)

# ------------------------------------------------------------------ packages
say "checking packages"
bash deploy/deps.sh
extra=(wrk iproute2 procps curl redis-server nodejs)
[ "$PROFILE" = 1 ] && extra+=(linux-perf)
missing=()
for p in "${extra[@]}"; do
  st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [ "$st" = installed ] || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] || die "missing packages: ${missing[*]} (run as root: apt-get install ${missing[*]})"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi
if ! command -v npm >/dev/null; then   # Debian's nodejs ships npm apart
  [ "$(id -u)" -eq 0 ] || die "missing npm (run as root: apt-get install npm)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends npm
fi
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
[ "$(ulimit -n)" -ge 4200 ] || die "open-file limit $(ulimit -n) is too low for 2,000 connections"
[ "$WAITERS" = 0 ] || [ "$(ulimit -n)" -ge 11000 ] \
  || die "open-file limit $(ulimit -n) is too low for the waiter bench's 10,000 connections"

# --------------------------------------------------------------------- build
say "building a release idemd and the baseline"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DIDEMD_WERROR=OFF -DIDEMD_SANITIZE=OFF \
  >"$BUILD.cmake.log" 2>&1 || { cat "$BUILD.cmake.log" >&2; die "cmake failed"; }
rm -f "$BUILD.cmake.log"
cmake --build "$BUILD" -j2 --target idemd >/dev/null
cc -std=c11 -O2 -D_GNU_SOURCE -Wall -Wextra -o "$BUILD/baseline_mhd" "$BENCH/baseline_mhd.c" \
  $(pkg-config --cflags --libs libmicrohttpd) -lpthread
cc -std=c11 -O2 -D_GNU_SOURCE -Wall -Wextra -o "$BUILD/waiters_load" "$BENCH/waiters_load.c"
IDEMD_BIN=$BUILD/idemd
# the peer's packages, pinned by bench/peer/package-lock.json, installed
# into build-bench/peer/ (npm ci again only when the lock changed)
PEER_DIR=$BUILD/peer
mkdir -p "$PEER_DIR"
if ! cmp -s "$BENCH/peer/package-lock.json" "$PEER_DIR/package-lock.json" \
   || [ ! -d "$PEER_DIR/node_modules" ]; then
  cp "$BENCH/peer/package.json" "$BENCH/peer/package-lock.json" "$PEER_DIR/"
  (cd "$PEER_DIR" && npm ci --omit=dev --no-audit --no-fund >"$PEER_DIR/npm.log" 2>&1) \
    || { cat "$PEER_DIR/npm.log" >&2; die "npm ci of the peer failed"; }
fi

# ----------------------------------------------------------------- processes
WORK=$(mktemp -d /tmp/idemd-bench.XXXXXX)
chmod 711 "$WORK"            # PostgreSQL may run as another user (idemd-pg)
PGDIR=$WORK/pg
CONF=$WORK/idemd.json
IDEMD_PID= BASE_PID= UP_PID= PEER_PID= REDIS_PID= IDEMD2_PID= PEERD_PID= REDISD_PID=
mkdir -p "$RAW"
rm -f "$RAW"/*.txt "$RAW"/*.data "$RAW"/*.old 2>/dev/null || true
RESULTS=$RAW/results.txt
INFO=$RAW/info.txt
: >"$RESULTS"
: >"$INFO"

pg() { bash "$ROOT/deploy/pg.sh" "$@"; }
sql() { pg psql "$PGDIR" -d idemd -qAt -c "$1"; }

stop_pid() {  # stop_pid PID: TERM, wait up to 10 s, then KILL
  local pid=$1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# shellcheck disable=SC2317
cleanup() {
  trap - EXIT INT TERM
  stop_pid "$IDEMD_PID"; stop_pid "$BASE_PID"; stop_pid "$UP_PID"
  stop_pid "$IDEMD2_PID"; stop_pid "$PEER_PID"; stop_pid "$REDIS_PID"
  stop_pid "$PEERD_PID"; stop_pid "$REDISD_PID"
  if [ -d "$PGDIR" ]; then pg stop "$PGDIR" >/dev/null 2>&1 || true; fi
  if [ "$KEEP" = 1 ]; then
    echo "run.sh: kept $WORK" >&2
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

read -r PORT BPORT UPORT PEER_PORT REDIS_PORT PORT2 PEERD_PORT REDISD_PORT \
  < <(python3 "$BENCH/benchlib.py" free-ports 8)
URL=http://127.0.0.1:$PORT
BURL=http://127.0.0.1:$BPORT
PEER_URL=http://127.0.0.1:$PEER_PORT
PEERD_URL=http://127.0.0.1:$PEERD_PORT

say "starting PostgreSQL (private cluster, defaults, synchronous_commit on)"
pg init "$PGDIR"
"${DB_CPU[@]}" bash "$ROOT/deploy/pg.sh" start "$PGDIR"
pg createdb "$PGDIR" idemd
CONNINFO=$(pg conninfo "$PGDIR" idemd)

GATEWAY=0
[ -f "$ROOT/src/gateway/gateway.c" ] && GATEWAY=1
SWEEP_INTERVAL=86400
FENCE_RETENTION=604800

write_config() {  # write_config WITH_ROUTES
  python3 - "$CONF" "127.0.0.1:$PORT" "$CONNINFO" "$WORK/master.key" "$1" \
            "http://127.0.0.1:$UPORT" "$SWEEP_INTERVAL" "$FENCE_RETENTION" \
            "${BENCH_THREADS:-}" "${BENCH_POOL_SIZE:-}" <<'EOF'
import json, sys
path, listen, db, key, routes, upstream, sweep, fences, threads, pool = sys.argv[1:]
cfg = {"listen": listen, "database_url": db, "master_key_file": key,
       "max_connections": 4096, "max_connections_per_ip": 0,
       "connection_timeout_seconds": 30,
       "sweep_interval_seconds": int(sweep),
       "fence_retention_seconds": int(fences)}
if threads:
    cfg["threads"] = int(threads)
if pool:
    cfg["pool_size"] = int(pool)
if routes == "1":
    cfg["routes"] = [{"method": "POST", "path": "/bench/orders", "tenant": "bench",
                      "operation": "gw.order.create", "upstream": upstream,
                      "store_headers": ["location"]},
                     # the IETF draft: the caller's own Idempotency-Key
                     {"method": "POST", "path": "/bench/ietf-orders", "tenant": "bench",
                      "operation": "gw.ietf.create", "upstream": upstream,
                      "store_headers": ["location"], "key": "header:Idempotency-Key"}]
with open(path, "w") as f:
    json.dump(cfg, f, indent=2)
EOF
}

start_idemd() {
  "${APP_CPU[@]}" "$IDEMD_BIN" --config "$CONF" serve 2>>"$WORK/idemd.log" &
  IDEMD_PID=$!
  for _ in $(seq 100); do
    curl -fs "$URL/healthz" >/dev/null 2>&1 && return 0
    kill -0 "$IDEMD_PID" 2>/dev/null || break
    sleep 0.1
  done
  tail -n 20 "$WORK/idemd.log" >&2
  die "idemd did not start"
}

restart_idemd() { stop_pid "$IDEMD_PID"; IDEMD_PID=; start_idemd; }

say "migrating, creating a tenant and operations"
write_config 0
"$IDEMD_BIN" --config "$CONF" migrate >"$WORK/migrate.log" 2>&1 \
  || { cat "$WORK/migrate.log" >&2; die "migrate failed"; }
API_KEY=$("$IDEMD_BIN" --config "$CONF" tenant create bench \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["api_key"])')
export API_KEY
printf '%s\n' "$API_KEY" >"$WORK/api_key"   # for poking at a --keep folder by hand
start_idemd
for op in order.create gw.order.create gw.ietf.create; do
  code=$(curl -s -o "$WORK/op.out" -w '%{http_code}' -X PUT "$URL/v1/operations/$op" \
    -H "Authorization: Bearer $API_KEY" -H 'Content-Type: application/json' \
    -d '{"token_ttl_seconds":3600,"retention_seconds":86400,"lease_seconds":60}')
  case "$code" in 200|201) ;; *) cat "$WORK/op.out" >&2; die "PUT /v1/operations/$op: $code" ;; esac
done
TENANT_ID=$(sql "SELECT id FROM tenants WHERE name = 'bench'")
OP_ID=$(sql "SELECT id FROM operations WHERE name = 'order.create'")
GW_OP_ID=$(sql "SELECT id FROM operations WHERE name = 'gw.order.create'")
pg psql "$PGDIR" -d idemd -q -f "$BENCH/pgbench_setup.sql"
# database-only diagnostics (idemd's SQL functions driven by pgbench)
DIAG=1 DIAG_DUR=$(( DUR < 5 ? DUR : 5 ))
# the replay diagnostic: the first submit's claim statement, over the
# completed records of pgbench_db_setup.sql instead of fresh ones
{ printf -- '-- the claim of pgbench_db_first_submit.sql over a completed record\n'
  printf '\\set k random(1, 10000)\n'
  sed -n '/^WITH x AS/,/ORDER BY i;$/p' "$BENCH/pgbench_db_first_submit.sql"
} >"$WORK/pgbench_db_replay.sql"
pg psql "$PGDIR" -d idemd -q -f "$BENCH/pgbench_db_setup.sql" >"$WORK/diag.log" 2>&1 || {
  DIAG=0; note "database-only diagnostics skipped: $(head -c 200 "$WORK/diag.log")"; }

THREADS=$(sed -n 's/.*listening on .* with \([0-9]*\) threads.*/\1/p' "$WORK/idemd.log" | tail -n 1)
THREADS=${THREADS:-${BENCH_THREADS:-8}}
"${APP_CPU[@]}" "$BUILD/baseline_mhd" --port "$BPORT" --threads "$THREADS" --connections 4096 --timeout 30 \
  2>>"$WORK/baseline.log" &
BASE_PID=$!

GATEWAY_NOTE="not yet available (no gateway in this source)"
if [ "$GATEWAY" = 1 ]; then
  "${APP_CPU[@]}" "$BUILD/baseline_mhd" --port "$UPORT" --threads 1 --status 201 2>>"$WORK/upstream.log" &
  UP_PID=$!
  write_config 1
  if "$IDEMD_BIN" --config "$CONF" check-config >"$WORK/check.log" 2>&1; then
    restart_idemd
    GATEWAY_NOTE="route POST /bench/orders -> static upstream (baseline_mhd --status 201, 1 thread)"
  else
    GATEWAY=0
    GATEWAY_NOTE="not measured: the gateway route config was refused ($(head -c 200 "$WORK/check.log" | tr '\n|' '  '))"
    write_config 0
    note "$GATEWAY_NOTE"
  fi
fi
sleep 0.3
curl -fs "$BURL/" >/dev/null || die "baseline server did not start"

# The peer: Redis as Debian ships it (its /etc/redis/redis.conf, so its
# persistence defaults), on a private port and folder, and the Node server;
# the durable peer: the same on a second Redis that appends every write to
# its log and fsyncs it before answering (appendonly yes, appendfsync always)
# start_peer NAME REDIS_PORT PEER_PORT [REDIS ARGS...]: sets STARTED_REDIS,
# STARTED_PEER (pids) and STARTED (1 when the peer answers)
start_peer() {
  local name=$1 rport=$2 pport=$3
  shift 3
  mkdir -p "$WORK/$name"
  local rconf=()
  [ -r /etc/redis/redis.conf ] && rconf=(/etc/redis/redis.conf)
  "${DB_CPU[@]}" redis-server "${rconf[@]}" --port "$rport" --bind 127.0.0.1 --dir "$WORK/$name" \
    --daemonize no --supervised no --logfile "$WORK/$name/redis.log" \
    --pidfile "$WORK/$name/redis.pid" "$@" &
  STARTED_REDIS=$! STARTED=0
  for _ in $(seq 50); do
    redis-cli -p "$rport" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  NODE_PATH=$PEER_DIR/node_modules "${APP_CPU[@]}" node "$BENCH/peer/server.js" "$pport" "$rport" \
    2>>"$WORK/$name.log" &
  STARTED_PEER=$!
  for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$pport/healthz" >/dev/null 2>&1 && { STARTED=1; break; }
    kill -0 "$STARTED_PEER" 2>/dev/null || break
    sleep 0.1
  done
  REDIS_CONF_NOTE="${rconf[*]:-built-in defaults}"
}
rcfg() { redis-cli -p "$1" config get "$2" | sed -n 2p; }
PEER=0 PEERD=0 PEER_NOTE="not measured" REDIS_NOTE= REDISD_NOTE=
if [ "$WAITERS" != 2 ]; then
  start_peer peer "$REDIS_PORT" "$PEER_PORT"
  REDIS_PID=$STARTED_REDIS PEER_PID=$STARTED_PEER PEER=$STARTED
  REDIS_NOTE="redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') with $REDIS_CONF_NOTE: appendonly $(rcfg "$REDIS_PORT" appendonly) (so no fsync per write; appendfsync $(rcfg "$REDIS_PORT" appendfsync) would apply only with it), RDB snapshots save \"$(rcfg "$REDIS_PORT" save)\""
  if [ "$PEER" = 1 ]; then
    PEER_NOTE="node $(node --version), @node-idempotency/core and storage-adapter-redis as pinned by bench/peer/package-lock.json, one process, POST /orders -> 201 {order_id,...}"
  else
    PEER_NOTE="not measured: the peer did not start ($(tail -n 3 "$WORK/peer.log" | tr '\n|' '  '))"
    note "$PEER_NOTE"
  fi
  start_peer peerd "$REDISD_PORT" "$PEERD_PORT" --appendonly yes --appendfsync always \
    --save ''
  REDISD_PID=$STARTED_REDIS PEERD_PID=$STARTED_PEER PEERD=$STARTED
  REDISD_NOTE="the same peer on a second redis-server with appendonly $(rcfg "$REDISD_PORT" appendonly), appendfsync $(rcfg "$REDISD_PORT" appendfsync) (every write fsynced before Redis answers), no RDB snapshots; its log on the same disk as PostgreSQL's WAL"
  [ "$PEERD" = 1 ] || note "the durable peer did not start ($(tail -n 3 "$WORK/peerd.log" | tr '\n|' '  '))"
fi

# --------------------------------------------------------------- measuring
PSOCK=$(pg socket "$PGDIR")
PROLE=$(pg role "$PGDIR")

# CPU used so far (user + system, µs) by each process the bench started:
# idemd, every process of the PostgreSQL cluster, the gateway's upstream,
# both peers' Node and Redis; NAME=µs pairs
TICK_US=$(( 1000000 / $(getconf CLK_TCK) ))
cpu_of() {  # cpu_of PID...: their CPU in µs (processes gone count nothing)
  local t=0 line f p
  for p in "$@"; do
    [ -n "$p" ] && read -r line 2>/dev/null <"/proc/$p/stat" || continue
    line=${line##*) }   # past the command name, which may hold spaces
    read -r -a f <<<"$line"
    t=$(( t + f[11] + f[12] ))
  done
  echo $(( t * TICK_US ))
}
cpu_now() {
  local pm
  pm=$(head -n 1 "$PGDIR/data/postmaster.pid" 2>/dev/null)
  # shellcheck disable=SC2046
  echo "idemd=$(cpu_of "$IDEMD_PID") pg=$(cpu_of "$pm" $(pgrep -P "$pm")) up=$(cpu_of "$UP_PID")" \
    "node=$(cpu_of "$PEER_PID" "$PEERD_PID") redis=$(cpu_of "$REDIS_PID" "$REDISD_PID")" \
    "base=$(cpu_of "$BASE_PID")"
}
cpu_diff() {  # cpu_diff BEFORE AFTER TIMES_FILE: cpu_NAME_us=... of the run
  python3 - "$1" "$2" "$3" <<'EOF'
import re, sys
a = dict(kv.split("=") for kv in sys.argv[1].split())
b = dict(kv.split("=") for kv in sys.argv[2].split())
out = ["cpu_%s_us=%d" % (k, max(0, int(b[k]) - int(a.get(k, 0)))) for k in b]
# `times`: the shell's own, then its children's (wrk's): user and system
t = open(sys.argv[3]).read().split("\n")[1]
us = sum(float(m) * 60e6 + float(s) * 1e6 for m, s in re.findall(r"(\d+)m([\d.]+)s", t))
out.append("cpu_wrk_us=%d" % us)
print(" ".join(out))
EOF
}

# replay_cache_counts: idemd's replay cache hits and misses so far
replay_cache_counts() {
  curl -fs "$URL/metrics" | awk '/^idemd_replay_cache_hits_total / { h = $2 }
    /^idemd_replay_cache_misses_total / { m = $2 } END { print h + 0, m + 0 }'
}

# wrk_run NAME ROUND URL SCRIPT DURATION CONNECTIONS [SCRIPT ARGS...]
wrk_run() {
  local name=$1 round=$2 url=$3 script=$4 dur=$5 conns=$6
  shift 6
  local out=$RAW/$name.$round.txt lsn0 cache0=
  lsn0=$(sql "SELECT pg_current_wal_insert_lsn()")
  [ "$url" = "$URL" ] && cache0=$(replay_cache_counts)
  local cpu0
  cpu0=$(cpu_now)
  # wrk in a subshell of its own, whose children's CPU (wrk's) `times` tells
  ( BENCH_DIR=$BENCH BENCH_API_KEY=$API_KEY BENCH_OPERATION=order.create \
    "${APP_CPU[@]}" wrk -t"$(( conns < 2 ? conns : 2 ))" -c"$conns" -d"${dur}s" --timeout 5s --latency -s "$BENCH/$script" "$url" \
    -- "$@" >"$out" 2>&1 || true; times >"$out.times" )
  local cpu1 line
  cpu1=$(cpu_now)
  line=$(sed -n 's/^BENCH_RESULT //p' "$out" | tail -n 1)
  [ -n "$line" ] || { tail -n 5 "$out" >&2; die "wrk $name gave no result (see $out)"; }
  # WAL written meanwhile: what the database had to make durable
  line="$line wal_bytes=$(sql "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '$lsn0')::bigint")"
  line="$line $(cpu_diff "$cpu0" "$cpu1" "$out.times")"
  if [ -n "$cache0" ]; then  # how many of the run's lookups the cache answered
    local cache1
    cache1=$(replay_cache_counts)
    line="$line cache_hits=$(( ${cache1% *} - ${cache0% *} )) cache_misses=$(( ${cache1#* } - ${cache0#* } ))"
  fi
  # warm-ups and the perf-sampled --profile runs are not measurements
  case "$round" in warmup|profile*) ;; *) echo "$name $round $line" >>"$RESULTS" ;; esac
  LAST=$line
  python3 - "$name" "$round" "$line" <<'EOF'
import sys
name, rnd, line = sys.argv[1:]
r = dict(kv.split("=") for kv in line.split())
d = int(r["duration_us"]) / 1e6
ops = int(r["ops"])
bad = int(r["bad"]) + int(r["err_connect"]) + int(r["err_read"]) + int(r["err_timeout"])
st = int(r["err_status"]) if ops == 0 else 0
print("    %-22s %-7s %9.0f req/s %s p50 %.2f ms  p99 %.2f ms%s" % (
    name, rnd, int(r["requests"]) / d,
    ("%8.0f ops/s " % (ops / d)) if ops else "", int(r["p50_us"]) / 1e3,
    int(r["p99_us"]) / 1e3,
    ("  ERRORS %d" % (bad + st)) if bad + st else "") +
    ("  TOKENS RAN OUT" if int(r["exhausted"]) else ""))
EOF
}

# replay_warm SCRIPT ARGS...: one pass over a replay set through idemd,
# not measured. The rounds' first submits fill the replay cache with their
# own records in between, so without it a replay run began by asking
# PostgreSQL for its whole set (6 % of a direct replay run's requests, 12 %
# of a gateway replay run's, at 20,000 tokens a set); the sets are 10,000
# tokens, so that both fit in the cache together. A replay the cache
# misses is measured on its own: the db_replay diagnostic.
replay_warm() {
  local script=$1
  shift
  BENCH_DIR=$BENCH BENCH_API_KEY=$API_KEY BENCH_OPERATION=order.create \
    "${APP_CPU[@]}" wrk -t2 -c16 -d1s -s "$BENCH/$script" "$URL" -- "$@" >/dev/null 2>&1 || true
}

last_rate() {  # ops/s (or req/s) of the last wrk_run
  python3 -c '
import sys
r = dict(kv.split("=") for kv in sys.argv[1].split())
d = int(r["duration_us"]) / 1e6
print(int((int(r["ops"]) or int(r["requests"])) / d))' "$LAST"
}

# pgbench_run NAME ROUND SCRIPT DURATION [optional]: an optional run that
# fails (a diagnostic whose SQL no longer fits the schema) is noted, not fatal
pgbench_run() {
  local name=$1 round=$2 script=$3 dur=$4 optional=${5:-}
  local out=$RAW/$name.$round.txt lsn0
  lsn0=$(sql "SELECT pg_current_wal_insert_lsn()")
  if ! "${APP_CPU[@]}" "$PGBIN/pgbench" -h "$PSOCK" -U "$PROLE" -M prepared -n -c 8 -j 2 -T "$dur" \
       -f "$(case $script in /*) echo "$script" ;; *) echo "$BENCH/$script" ;; esac)" idemd \
       >"$out" 2>&1 || grep -q 'aborted' "$out"; then
    [ -n "$optional" ] || { cat "$out" >&2; die "pgbench $name failed"; }
    note "$name failed (see bench/results/raw/$name.$round.txt); skipped"
    DIAG=0
    return 0
  fi
  local tps lat
  tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$out" | tail -n 1)
  lat=$(sed -n 's/^latency average = \([0-9.]*\) ms.*/\1/p' "$out" | tail -n 1)
  local tx wal
  tx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$out" | tail -n 1)
  wal=$(sql "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '$lsn0')::bigint")
  echo "$name $round tps=$tps lat_avg_ms=$lat transactions=${tx:-0} wal_bytes=$wal" >>"$RESULTS"
  printf '    %-22s %-7s %9.0f tx/s   latency avg %s ms\n' "$name" "$round" "$tps" "$lat"
}

rss_sample() {  # rss_sample LABEL [extra key=value...]
  local label=$1
  shift
  # idemd gives freed heap back every 30 s (janitor: malloc_trim); wait for
  # that, so the figure is what idemd holds, not what the allocator has yet
  # to return, and rounds compare like with like
  sleep 31
  local rss hwm thr
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$IDEMD_PID/status")
  hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$IDEMD_PID/status")
  thr=$(awk '/^Threads:/ {print $2}' "/proc/$IDEMD_PID/status")
  # the replay cache fills toward its fixed bound over the first rounds
  local cache
  cache=$(curl -fs "$URL/metrics" | sed -n 's/^idemd_replay_cache_bytes \([0-9]*\)$/\1/p')
  echo "rss $label rss_kb=$rss hwm_kb=$hwm threads=$thr cache_bytes=${cache:-0} $*" >>"$RESULTS"
  awk -v l="$label" -v r="$rss" -v h="$hwm" -v t="$thr" 'BEGIN {
    printf "    idemd memory %-12s VmRSS %.1f MiB, VmHWM %.1f MiB, %d threads\n", l, r / 1024, h / 1024, t }'
}

TOKN=0
gen_tokens() {  # gen_tokens OPERATION COUNT -> prints the file name
  TOKN=$((TOKN + 1))
  local f=$WORK/tokens.$TOKN.txt
  python3 "$BENCH/benchlib.py" tokens "$PORT" "$API_KEY" "$1" "$2" "$f"
  echo "$f"
}

size_for() {  # tokens for one run at RATE ops/s (5x headroom: the machine's speed
              # swings; at least 40,000, which take about a second to issue)
  python3 -c 'import sys, math; r, d = int(sys.argv[1]), int(sys.argv[2]); print(max(40000, math.ceil(r * d * 5)))' "$1" "$DUR"
}

completed_ids() {  # completed_ids OP_ID FILE
  sql "SELECT encode(token_id, 'hex') FROM records WHERE tenant_id = $TENANT_ID AND operation_id = $1 AND state = 'completed'" >"$2"
}

# --waiters-only skips everything down to the waiter bench
if [ "$WAITERS" != 2 ]; then
say "warming up and sizing the token files"
wrk_run issue warmup "$URL" issue.lua 3 16
wrk_run baseline_a_issue warmup "$BURL" issue.lua 2 16
t=$(date +%s.%N)
f=$(gen_tokens order.create 20000)
note "issued 20,000 tokens in $(python3 -c "import time,sys; print('%.1f' % (time.time() - float(sys.argv[1])))" "$t") s"
wrk_run first_submit warmup "$URL" first_submit.lua 5 16 "$f" 2
FS_RATE=$(last_rate)
completed_ids "$OP_ID" "$WORK/ids.txt"
REPLAY=$WORK/replay.txt
n=$(python3 "$BENCH/benchlib.py" pick "$f" --ids "$WORK/ids.txt" --out "$REPLAY" --max 10000)
note "replay set: $n completed tokens"
[ "$n" -gt 0 ] || { tail -n 5 "$WORK/idemd.log" >&2; die "no token was completed in the warm-up"; }
f=$(gen_tokens order.create 40000)
wrk_run first_submit_c64 warmup "$URL" first_submit.lua 3 64 "$f" 2
FS64_RATE=$(last_rate)
f=$(gen_tokens order.create 20000)
wrk_run claim warmup "$URL" first_submit.lua 3 16 "$f" 2 claim-only
CL_RATE=$(last_rate)
if [ "$GATEWAY" = 1 ]; then
  f=$(gen_tokens gw.order.create 10000)
  wrk_run gw_first warmup "$URL" gateway_first.lua 3 16 "$f" 2
  GW_RATE=$(last_rate)
  f=$(gen_tokens gw.order.create 20000)
  wrk_run gw_first_c64 warmup "$URL" gateway_first.lua 3 64 "$f" 2
  GW64_RATE=$(last_rate)
  completed_ids "$GW_OP_ID" "$WORK/gwids.txt"
  GW_REPLAY=$WORK/gw_replay.txt
  n=$(python3 "$BENCH/benchlib.py" pick "$f" --ids "$WORK/gwids.txt" --out "$GW_REPLAY" --max 10000)
  note "gateway replay set: $n completed tokens"
  if [ "$n" -eq 0 ]; then
    GATEWAY=0
    GATEWAY_NOTE="not measured: no gateway first submit completed in the warm-up (see raw/gw_first.warmup.txt)"
    note "$GATEWAY_NOTE"
  fi
fi
if [ "$PEER" = 1 ]; then
  wrk_run peer_first warmup "$PEER_URL" keyed_first.lua 3 16 /orders pw
  [ "$PEERD" = 1 ] && wrk_run peerd_first warmup "$PEERD_URL" keyed_first.lua 3 16 /orders dw
  python3 "$BENCH/benchlib.py" seed-keys "$PEER_PORT" /orders pr 2000
fi
if [ "$GATEWAY" = 1 ]; then
  wrk_run gw_ietf_first warmup "$URL" keyed_first.lua 3 16 /bench/ietf-orders iw
  python3 "$BENCH/benchlib.py" seed-keys "$PORT" /bench/ietf-orders ir 2000
fi
wrk_run key_batch warmup "$URL" key_claims.lua 3 16 batch kbw 100
rss_sample warmup

for r in $(seq "$RUNS"); do
  say "round $r of $RUNS"
  wrk_run baseline_a_issue "r$r" "$BURL" issue.lua "$DUR" 16
  pgbench_run baseline_b "r$r" pgbench_insert.sql "$DUR"
  wrk_run issue "r$r" "$URL" issue.lua "$DUR" 16
  f=$(gen_tokens order.create "$(size_for "$FS_RATE")")
  wrk_run first_submit "r$r" "$URL" first_submit.lua "$DUR" 16 "$f" 2
  FS_RATE=$(( $(last_rate) > FS_RATE ? $(last_rate) : FS_RATE ))
  f=$(gen_tokens order.create "$(size_for "$FS64_RATE")")
  wrk_run first_submit_c64 "r$r" "$URL" first_submit.lua "$DUR" 64 "$f" 2
  FS64_RATE=$(( $(last_rate) > FS64_RATE ? $(last_rate) : FS64_RATE ))
  f=$(gen_tokens order.create "$(size_for "$CL_RATE")")
  wrk_run claim "r$r" "$URL" first_submit.lua "$DUR" 16 "$f" 2 claim-only
  CL_RATE=$(( $(last_rate) > CL_RATE ? $(last_rate) : CL_RATE ))
  wrk_run baseline_a_replay "r$r" "$BURL" replay.lua "$DUR" 16 "$REPLAY" 2
  replay_warm replay.lua "$REPLAY" 2
  wrk_run replay "r$r" "$URL" replay.lua "$DUR" 16 "$REPLAY" 2
  if [ "$GATEWAY" = 1 ]; then
    f=$(gen_tokens gw.order.create "$(size_for "$GW_RATE")")
    wrk_run gw_first "r$r" "$URL" gateway_first.lua "$DUR" 16 "$f" 2
    GW_RATE=$(( $(last_rate) > GW_RATE ? $(last_rate) : GW_RATE ))
    # the peer and the IETF-key route beside the token route, same load shape
    [ "$PEER" = 1 ] && wrk_run peer_first "r$r" "$PEER_URL" keyed_first.lua "$DUR" 16 /orders "p$r"
    wrk_run gw_ietf_first "r$r" "$URL" keyed_first.lua "$DUR" 16 /bench/ietf-orders "i$r"
    f=$(gen_tokens gw.order.create "$(size_for "$GW64_RATE")")
    wrk_run gw_first_c64 "r$r" "$URL" gateway_first.lua "$DUR" 64 "$f" 2
    GW64_RATE=$(( $(last_rate) > GW64_RATE ? $(last_rate) : GW64_RATE ))
    [ "$PEER" = 1 ] && wrk_run peer_first_c64 "r$r" "$PEER_URL" keyed_first.lua "$DUR" 64 /orders "q$r"
    wrk_run gw_ietf_first_c64 "r$r" "$URL" keyed_first.lua "$DUR" 64 /bench/ietf-orders "j$r"
    wrk_run baseline_a_gw_replay "r$r" "$BURL" gateway_replay.lua "$DUR" 16 "$GW_REPLAY" 2
    replay_warm gateway_replay.lua "$GW_REPLAY" 2
    wrk_run gw_replay "r$r" "$URL" gateway_replay.lua "$DUR" 16 "$GW_REPLAY" 2
    [ "$PEER" = 1 ] && wrk_run peer_replay "r$r" "$PEER_URL" keyed_replay.lua "$DUR" 16 /orders pr 2000
    replay_warm keyed_replay.lua /bench/ietf-orders ir 2000
    wrk_run gw_ietf_replay "r$r" "$URL" keyed_replay.lua "$DUR" 16 /bench/ietf-orders ir 2000
  fi
  if [ "$GATEWAY" = 1 ] && [ "$PEERD" = 1 ]; then
    # durability: first submits side by side at 1 and 32 connections (16 and
    # 64 are above), and the durable peer at all four
    wrk_run peerd_first "r$r" "$PEERD_URL" keyed_first.lua "$DUR" 16 /orders "d$r"
    wrk_run peerd_first_c64 "r$r" "$PEERD_URL" keyed_first.lua "$DUR" 64 /orders "e$r"
    for c in 32 1; do
      wrk_run "peerd_first_c$c" "r$r" "$PEERD_URL" keyed_first.lua "$DUR" "$c" /orders "d$c$r"
      wrk_run "peer_first_c$c" "r$r" "$PEER_URL" keyed_first.lua "$DUR" "$c" /orders "p$c$r"
      wrk_run "gw_ietf_first_c$c" "r$r" "$URL" keyed_first.lua "$DUR" "$c" /bench/ietf-orders \
        "i$c$r"
      f=$(gen_tokens gw.order.create "$(size_for "$GW64_RATE")")
      wrk_run "gw_first_c$c" "r$r" "$URL" gateway_first.lua "$DUR" "$c" "$f" 2
      f=$(gen_tokens order.create "$(size_for "$FS64_RATE")")
      wrk_run "first_submit_c$c" "r$r" "$URL" first_submit.lua "$DUR" "$c" "$f" 2
    done
  fi
  # caller keys on the direct API: one claim per request, then 100 per batch
  wrk_run key_claim "r$r" "$URL" key_claims.lua "$DUR" 16 single "kc$r"
  wrk_run key_batch "r$r" "$URL" key_claims.lua "$DUR" 16 batch "kb$r" 100
  if [ "$DIAG" = 1 ]; then
    pgbench_run db_first_submit "r$r" pgbench_db_first_submit.sql "$DIAG_DUR" optional
    pgbench_run db_first_submit_fn "r$r" pgbench_db_first_submit_functions.sql "$DIAG_DUR" optional
    pgbench_run db_replay "r$r" "$WORK/pgbench_db_replay.sql" "$DIAG_DUR" optional
    pgbench_run db_replay_fn "r$r" pgbench_db_replay_functions.sql "$DIAG_DUR" optional
    pgbench_run db_select "r$r" pgbench_db_select.sql "$DIAG_DUR" optional
  fi
  rss_sample "round$r"
done

say "2,000 concurrent keep-alive connections (GET /healthz)"
C2K_DUR=8
# c2000_run NAME URL PID: wrk -c2000; memory of PID read while all are open
c2000_run() {
  local name=$1 url=$2 pid=$3 port=${2##*:}
  local out=$RAW/$name.1.txt
  BENCH_DIR=$BENCH wrk -t2 -c2000 -d"${C2K_DUR}s" --timeout 5s --latency \
    -s "$BENCH/healthz.lua" "$url" >"$out" 2>&1 &
  local wpid=$!
  sleep $((C2K_DUR - 3))
  local est rss hwm line
  est=$(ss -Htn state established "( sport = :$port )" | wc -l)
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
  hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status")
  wait "$wpid" || true
  line=$(sed -n 's/^BENCH_RESULT //p' "$out" | tail -n 1)
  [ -n "$line" ] || die "wrk -c2000 gave no result (see $out)"
  echo "$name 1 $line established=$est rss_kb=$rss hwm_kb=$hwm" >>"$RESULTS"
  note "$name: $est connections established; VmRSS $((rss / 1024)) MiB, VmHWM $((hwm / 1024)) MiB"
}
c2000_run c2000 "$URL" "$IDEMD_PID"
c2000_run baseline_a_c2000 "$BURL" "$BASE_PID"
sleep 1
rss_sample after-c2000
fi  # the part --waiters-only skips

# ---------------------------------------------------------------- waiters
if [ "$WAITERS" != 0 ]; then
  # shellcheck source=bench/waiters.sh
  . "$BENCH/waiters.sh"
  waiters_bench
fi

# ---------------------------------------------------------------- profile
if [ "$PROFILE" = 1 ]; then
  say "profiling the direct first submit"
  f=$(gen_tokens order.create "$(size_for "$FS_RATE")")
  perf record -F 499 --call-graph dwarf,16384 -p "$IDEMD_PID" -o "$RAW/perf.idemd.data" \
    -- sleep 6 >"$RAW/perf.record.txt" 2>&1 &
  PERF_PID=$!
  wrk_run first_submit profile "$URL" first_submit.lua 8 16 "$f" 2
  wait "$PERF_PID" || true
  perf report -i "$RAW/perf.idemd.data" --no-children --stdio --sort dso,sym \
    --percent-limit 0.5 -g none >"$RAW/perf.idemd.self.txt" 2>/dev/null || true
  perf report -i "$RAW/perf.idemd.data" --children --stdio --sort sym \
    --percent-limit 2 -g none 2>/dev/null | grep -v '\] 0x0000' >"$RAW/perf.idemd.children.txt" || true
  f=$(gen_tokens order.create "$(size_for "$FS_RATE")")
  perf record -F 499 -a -g -o "$RAW/perf.all.data" -- sleep 6 >>"$RAW/perf.record.txt" 2>&1 &
  PERF_PID=$!
  wrk_run first_submit profile-all "$URL" first_submit.lua 8 16 "$f" 2
  wait "$PERF_PID" || true
  perf report -i "$RAW/perf.all.data" --no-children --stdio --sort comm \
    -g none >"$RAW/perf.all.comm.txt" 2>/dev/null || true
  perf report -i "$RAW/perf.all.data" --no-children --stdio --sort comm,dso,sym \
    --percent-limit 0.4 -g none >"$RAW/perf.all.sym.txt" 2>/dev/null || true
  rm -f "$RAW"/perf.*.data "$RAW"/perf.*.data.old
  note "profiles in bench/results/raw/perf.*.txt"
fi

# ------------------------------------------------------------------ scale
if [ "$SCALE" = 1 ]; then
  ROWS=${BENCH_SCALE_ROWS:-10000000}
  CH=$((ROWS / 10))
  say "scale: loading $((CH * 9)) live and $CH expired records"
  for chunk in $(seq 0 9); do
    lo=$((chunk * CH + 1)) hi=$(((chunk + 1) * CH))
    if [ "$chunk" -lt 9 ]; then exp="now() + interval '2 days' + (g % 86400) * interval '1 second'"
    # the expired million in the order it was written (records expire in
    # about the order they were created), an hour apart first to last
    else exp="now() - interval '1 day' + (g - $lo) * interval '3.6 milliseconds'"; fi
    sql "INSERT INTO records (tenant_id, token_id, operation_id, subject, state, fingerprint,
           attempt, lease_expires_at, version_claimed, response_status, response_headers,
           response_body, response_is_json, token_expires_at, expires_at, sweep_at, created_at,
           updated_at)
         SELECT $TENANT_ID, decode(lpad(to_hex(g), 32, '0'), 'hex'), $OP_ID, 'user-' || (g % 100000),
                'completed', NULL, 1, NULL, NULL, 201, '{\"location\": \"/orders/1\"}'::jsonb,
                convert_to('{\"order_id\":' || g || '}', 'UTF8'), true,
                least($exp, now() + interval '1 hour'), $exp, $exp, now(), now()
           FROM generate_series($lo, $hi) AS g
         ON CONFLICT DO NOTHING"
    note "loaded $hi rows ($(( $(date +%s) - T0 )) s since start)"
  done
  sql "VACUUM (ANALYZE) records"
  sql "CHECKPOINT"
  note "records: $(sql "SELECT count(*) FROM records"), expired: $(sql "SELECT count(*) FROM records WHERE expires_at < now()")"
  restart_idemd
  wrk_run replay scalewarm "$URL" replay.lua 3 16 "$REPLAY" 2
  for r in $(seq "$RUNS"); do
    f=$(gen_tokens order.create "$(size_for "$CL_RATE")")
    wrk_run scale_claim "r$r" "$URL" first_submit.lua "$DUR" 16 "$f" 2 claim-only
    wrk_run scale_replay "r$r" "$URL" replay.lua "$DUR" 16 "$REPLAY" 2
  done
  # the sweeper ends each expired life, then (its fence kept no longer)
  # deletes the row
  say "scale: the sweeper ends and deletes the expired million while claims are measured"
  before=$(sql "SELECT count(*) FROM records WHERE expires_at < now()")
  SWEEP_INTERVAL=1 FENCE_RETENTION=0
  write_config "$GATEWAY"
  restart_idemd
  s0=$(date +%s) worst=0 i=0
  while :; do
    i=$((i + 1))
    f=$(gen_tokens order.create "$(size_for "$CL_RATE")")
    wrk_run scale_sweep_claim "s$i" "$URL" first_submit.lua "$DUR" 16 "$f" 2 claim-only
    p99=$(sed -n 's/.*p99_us=\([0-9]*\).*/\1/p' <<<"$LAST")
    [ "$p99" -gt "$worst" ] && worst=$p99
    left=$(sql "SELECT count(*) FROM records WHERE expires_at < now() - interval '1 minute'")
    note "expired rows left: $left"
    [ "$left" -eq 0 ] && break
    [ $(( $(date +%s) - s0 )) -gt 900 ] && { note "sweeper not done after 15 minutes"; break; }
  done
  echo "scale_sweep 1 deleted=$((before - left)) seconds=$(( $(date +%s) - s0 )) worst_p99_us=$worst" >>"$RESULTS"
fi

# ----------------------------------------------------------------- report
say "writing the report"
{
  echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)"
  hv=$(lscpu | sed -n 's/^Hypervisor vendor: *//p' | head -n 1)
  echo "cores=$(nproc)${hv:+ ($hv guest)}"
  echo "load=1-minute load average $LOAD0 before the run, $(cut -d' ' -f1 /proc/loadavg) at its end (other work on the machine adds noise)"
  echo "kernel=$(uname -r)"
  echo "idemd=$("$IDEMD_BIN" --version) (CMAKE_BUILD_TYPE=Release)"
  echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src migrations CMakeLists.txt 2>/dev/null || echo ' + uncommitted changes')"
  echo "postgresql=$(sql 'SHOW server_version')"
  echo "pgsettings=fsync $(sql 'SHOW fsync'), synchronous_commit $(sql 'SHOW synchronous_commit'), shared_buffers $(sql 'SHOW shared_buffers'), wal_sync_method $(sql 'SHOW wal_sync_method'), commit_delay $(sql 'SHOW commit_delay')"
  echo "libmicrohttpd=$(pkg-config --modversion libmicrohttpd)"
  echo "libpq=$(pkg-config --modversion libpq)"
  echo "libsodium=$(pkg-config --modversion libsodium)"
  echo "jansson=$(pkg-config --modversion jansson)"
  echo "wrk=$(dpkg-query -W -f='${Version}' wrk)"
  echo "pgbench=$("$PGBIN/pgbench" --version)"
  echo "idemd_threads=$THREADS threads, pool_size ${BENCH_POOL_SIZE:-default}; baseline A: $THREADS threads, 4096 connections, timeout 30 s"
  echo "gateway=$GATEWAY_NOTE"
  echo "gateway_note=$GATEWAY_NOTE"
  echo "peer=$PEER_NOTE"
  [ -n "$REDIS_NOTE" ] && echo "redis=$REDIS_NOTE"
  [ -n "$REDISD_NOTE" ] && echo "durable_peer=$REDISD_NOTE"
  [ -n "${WAITERS_NOTE:-}" ] && echo "waiters=$WAITERS_NOTE"
  [ "$SCALE" = 1 ] && printf 'scale_rows=%s\n' "$(printf "%'d" "$ROWS" 2>/dev/null || echo "$ROWS")"
  echo "runs=$RUNS"
  [ "$WAITERS" = 2 ] && echo "mode=waiters-only"
  echo "duration=$DUR"
  echo "pinning=$PIN_NOTE"
  echo "notes=idemd writes its access log (one JSON line per request) to a file, as in production | the first-submit scripts rely on idemd echoing X-Request-Id | total time of this run: $(( $(date +%s) - T0 )) s"
} >"$INFO"
OUT=$BENCH/results/latest.md
[ "$PIN" = 1 ] && OUT=$BENCH/results/pinned.md
[ "$WAITERS" = 2 ] && OUT=$BENCH/results/waiters.md
python3 "$BENCH/benchlib.py" report "$RESULTS" "$OUT" >/dev/null
if [ "$SCALE" = 1 ]; then
  OUT=$BENCH/results/scale.md
  python3 "$BENCH/benchlib.py" report "$RESULTS" "$OUT" --scale >/dev/null
fi
cat "$OUT"
echo
echo "run.sh: wrote bench/results/$(basename "$OUT")$([ "$SCALE" = 1 ] && echo ' and bench/results/latest.md') in $(( $(date +%s) - T0 )) s"
