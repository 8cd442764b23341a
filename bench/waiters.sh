# waiters.sh: the waiter bench, sourced by run.sh (--waiters, --waiters-only)
# once its PostgreSQL, idemd and tenant are up; uses run.sh's variables and
# functions (IDEMD_BIN, CONF, PORT, PORT2, API_KEY, WORK, RESULTS, ...).
#
# 10,000 duplicates of one in-progress caller-key claim wait with
# "Prefer: wait=60" (waiters_load.c holds the connections), then the holder
# completes the record and every waiter should get the replay. Measured: the
# answers (counted by status and Idempotent-Replayed), the wake-up of each
# from the moment the completion's 200 was read, and idemd's VmRSS while all
# of them wait, 2 s after they are answered and closed, and 32 s after
# (once the janitor has given freed memory back). Then the
# same with the waiters spread over two idemd instances on the same
# database, the record claimed and completed on the first (the second
# learns of it through PostgreSQL's notification).
# Then the same load on a trivial libmicrohttpd server (waiters_floor).
# BENCH_WAITER_ROUNDS rounds (default 3) of all three, each on fresh
# processes; the report gives medians.
#
# Only the bench's configuration changes for this: max_connections 12000
# (default 4096) and max_connections_per_ip 0 (no cap; default 1024), as
# every waiter comes from 127.0.0.1; max_waiters stays at its default
# (10000), which admits exactly 10,000.

WAITERS_N=${BENCH_WAITERS:-10000}
WAITERS_ROUNDS=${BENCH_WAITER_ROUNDS:-3}
WAITERS_OP=wait.order.create
# the last RSS reading: after idemd's janitor has given freed memory back
# (JANITOR_TRIM_INTERVAL_SECONDS, 30 s)
WAITERS_TRIM_S=32

waiters_config() {  # waiters_config OUT LISTEN: the bench config, raised limits
  python3 - "$CONF" "$1" "$2" <<'PYEOF'
import json, sys
src, out, listen = sys.argv[1:]
with open(src) as f:
    cfg = json.load(f)
cfg["listen"] = listen
cfg["max_connections"] = 12000
cfg["max_connections_per_ip"] = 0
cfg.pop("routes", None)
with open(out, "w") as f:
    json.dump(cfg, f, indent=2)
PYEOF
}

waiters_start2() {  # a second idemd on PORT2, same database and master key
  "$IDEMD_BIN" --config "$WORK/idemd.waiters2.json" serve 2>>"$WORK/idemd2.log" &
  IDEMD2_PID=$!
  for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$PORT2/healthz" >/dev/null 2>&1 && return 0
    kill -0 "$IDEMD2_PID" 2>/dev/null || break
    sleep 0.1
  done
  tail -n 20 "$WORK/idemd2.log" >&2
  die "the second idemd did not start"
}

waiters_hold() {  # waiters_hold KEY: the first submit claims KEY (201) and holds it
  local code
  code=$(curl -s -o "$WORK/hold.out" -w '%{http_code}' -X POST \
    "$URL/v1/operations/$WAITERS_OP/keys/$1/claim" -H "Authorization: Bearer $API_KEY" \
    -H 'Content-Type: application/json' -d '{"request":{"sku":"A-1","qty":2}}')
  [ "$code" = 201 ] || { cat "$WORK/hold.out" >&2; die "the holder's claim answered $code"; }
}

waiters_batches() {  # database batches and jobs so far, all instances: "BATCHES JOBS"
  local p b=0 j=0 m
  for p in ${1//,/ }; do
    m=$(curl -fs "http://127.0.0.1:$p/metrics")
    b=$((b + $(sed -n 's/^idemd_db_batches_total \([0-9]*\)$/\1/p' <<<"$m")))
    j=$((j + $(sed -n 's/^idemd_db_batch_jobs_total \([0-9]*\)$/\1/p' <<<"$m")))
  done
  echo "$b $j"
}

waiters_run() {  # waiters_run NAME ROUND PORTS PIDS
  local name=$1 round=$2 ports=$3 pids=$4 key out line b0 j0 b1 j1
  key="w-$name-$round-$(date +%s%N)"
  out=$RAW/$name.$round.txt
  read -r b0 j0 < <(waiters_batches "$ports")
  waiters_hold "$key"
  "$BUILD/waiters_load" --ports "$ports" --pids "$pids" --n "$WAITERS_N" --op "$WAITERS_OP" \
    --key "$key" --api-key "$API_KEY" --wait 60 --settle-ms 3000 --timeout-s 45 \
    --trim-s "$WAITERS_TRIM_S" >"$out" 2>&1 || { cat "$out" >&2; die "waiters_load failed"; }
  line=$(sed -n 's/^WAITERS_RESULT //p' "$out" | tail -n 1)
  [ -n "$line" ] || { cat "$out" >&2; die "waiters_load gave no result"; }
  # claims and completes that went to PostgreSQL (the waiters' first claims,
  # the holder's claim and completion, and whatever waking costs)
  read -r b1 j1 < <(waiters_batches "$ports")
  line="$line db_batches=$((b1 - b0)) db_jobs=$((j1 - j0))"
  echo "$name $round $line" >>"$RESULTS"
  waiters_print "$name $round" "$line"
}

waiters_print() {  # waiters_print "NAME ROUND" LINE: one summary line
  python3 - "$1" "$2" <<'PYEOF'
import sys
name, line = sys.argv[1:]
r = dict(kv.split("=") for kv in line.split())
rss = " + ".join("%.1f" % (int(r[k]) / 1024) for k in sorted(r) if k.startswith("rss"))
rest = " + ".join("%.1f" % (int(r[k]) / 1024) for k in sorted(r) if k.startswith("rest"))
trim = " + ".join("%.1f" % (int(r[k]) / 1024) for k in sorted(r) if k.startswith("trim"))
print("    %-16s %s waiters: %s replayed, %s early, %s other, %s unanswered; wake-up "
      "p50 %.1f ms, p99 %.1f ms, max %.1f ms; VmRSS %s MiB, %s MiB 2 s after they were "
      "answered and closed, %s MiB later; connecting took %s ms; "
      "load generator CPU while answers came %.0f ms; database jobs %s in %s batches" % (
          name, r["n"], r["replayed"], r["answered_early"], r["other_status"],
          r["unanswered"], int(r["p50_us"]) / 1e3, int(r["p99_us"]) / 1e3,
          int(r["max_us"]) / 1e3, rss, rest or "?", trim or "?",
          r["connect_ms"], int(r["loader_cpu_us"]) / 1e3,
          r["db_jobs"], r["db_batches"]))
PYEOF
}

# The floor: the same load on baseline_mhd --park (a trivial libmicrohttpd
# server with idemd's daemon flags and threads that suspends every request
# and, on a completion, resumes them all and answers each with one static
# response), so the report can say what waking 10,000 suspended
# connections costs libmicrohttpd itself on this machine.
waiters_floor() {  # waiters_floor ROUND
  local port pid out line
  read -r port < <(python3 "$BENCH/benchlib.py" free-ports 1)
  "$BUILD/baseline_mhd" --port "$port" --threads "$THREADS" --connections 12000 --timeout 120 \
    --park 1 2>>"$WORK/baseline_park.log" &
  pid=$!
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
  out=$RAW/waiters_floor.$1.txt
  "$BUILD/waiters_load" --ports "$port" --pids "$pid" --n "$WAITERS_N" --op "$WAITERS_OP" \
    --key floor --api-key none --wait 60 --settle-ms 3000 --timeout-s 45 \
    >"$out" 2>&1 || { cat "$out" >&2; stop_pid "$pid"; die "waiters_load failed on the floor"; }
  stop_pid "$pid"
  line=$(sed -n 's/^WAITERS_RESULT //p' "$out" | tail -n 1)
  [ -n "$line" ] || { cat "$out" >&2; die "waiters_load gave no result on the floor"; }
  line="$line db_batches=0 db_jobs=0"
  echo "waiters_floor $1 $line" >>"$RESULTS"
  waiters_print "waiters_floor $1" "$line"
}

waiters_bench() {
  say "waiters: $WAITERS_N duplicates waiting on one record, then one completion"
  local code
  code=$(curl -s -o "$WORK/op.out" -w '%{http_code}' -X PUT "$URL/v1/operations/$WAITERS_OP" \
    -H "Authorization: Bearer $API_KEY" -H 'Content-Type: application/json' \
    -d '{"token_ttl_seconds":3600,"retention_seconds":86400,"lease_seconds":300}')
  case "$code" in 200|201) ;; *) cat "$WORK/op.out" >&2; die "PUT /v1/operations/$WAITERS_OP: $code" ;; esac
  local saved=$CONF
  waiters_config "$WORK/idemd.waiters.json" "127.0.0.1:$PORT"
  waiters_config "$WORK/idemd.waiters2.json" "127.0.0.1:$PORT2"
  CONF=$WORK/idemd.waiters.json
  local r
  for r in $(seq "$WAITERS_ROUNDS"); do
    # fresh processes each time: RSS without what an earlier run left
    restart_idemd
    sleep 1   # the LISTEN connection up
    waiters_run waiters_1 "r$r" "$PORT" "$IDEMD_PID"
    restart_idemd
    waiters_start2
    sleep 1
    waiters_run waiters_2 "r$r" "$PORT,$PORT2" "$IDEMD_PID,$IDEMD2_PID"
    stop_pid "$IDEMD2_PID"
    IDEMD2_PID=
    waiters_floor "r$r"
  done
  CONF=$saved
  restart_idemd
  WAITERS_NOTE="$WAITERS_ROUNDS rounds of $WAITERS_N waiters (waiters_load.c: one thread, epoll), Prefer: wait=60 on a caller-key claim held by a first claim; bench config raised max_connections to 12000 and max_connections_per_ip to 0 (no cap); max_waiters at its default 10000; wake-up = time from reading the completion's 200 to reading each waiter's answer"
}
