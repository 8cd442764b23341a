#!/usr/bin/env bash
# The published contract is exact: every answer idemd gives is checked
# against api/openapi.yaml, two ways.
#
# 1. The integration suite's HTTP traffic through a validating proxy
#    (tests/contract/proxy.py: a byte-for-byte TCP relay in front of each
#    idemd a test starts, whose copy of each exchange is validated with
#    openapi-core: status, Content-Type, body schema, declared headers, and
#    no undeclared header). The harness Client goes through it when
#    IDEMD_TEST_PROXY is set. Traffic that does not use the harness Client
#    bypasses it, because it is deliberately not well-formed HTTP, needs
#    its own connection handling (keep-alive, exact byte timing) or talks
#    to another process: harness.raw_http and the sockets or
#    http.client/urllib connections of test_gateway, test_gateway_hardening,
#    test_gateway_keys, test_hostile, test_hostile_tenants, test_http,
#    test_shutdown, test_startup and test_tenants (their Client traffic is
#    relayed), the upstreams' own ports, and programs the tests start
#    (curl, the client libraries). Tests that drive idemd only through its
#    CLI (test_cli, test_install, test_migrations, test_upgrade) are left
#    out: they have no HTTP traffic worth the time; so is test_hostile_ipv6,
#    whose idemd listens in a network namespace the relay cannot reach. The whole suite
#    otherwise: about 3 minutes with 3 modules at a time; the stage with
#    schemathesis, about 5 minutes.
#    Before that, the proxy must catch a copy of the document with one
#    wrong entry, so a proxy that validates nothing cannot pass.
#    After the suite, tests/contract/test_edges.py (the contract's
#    corners: limits from both sides, JSON edge values, HEAD, cursors on
#    a full last page, libmicrohttpd's own 414 and 431) goes through the
#    same proxy, and judges each request the other way round: the
#    document's verdict on it (openapi-core's request validator) must be
#    idemd's.
# 2. A property-based test generated from the document (schemathesis, a
#    few examples per operation, valid and invalid data, and the stateful
#    phase along the document's links) against a real idemd: no 5xx other
#    than a documented one, every status, Content-Type and body
#    documented, and data the document calls invalid refused. The formats
#    the document names beyond JSON Schema's (idemd-subject: bytes, not
#    characters) are taught to both validators and to the generator
#    (tests/contract/formats.py, st_hooks.py).
# 3. Stoplight Prism (@stoplight/prism-cli, pinned, in build/node like the
#    OpenAPI linter), a second reader of the document independent of
#    openapi-core, in its error mode (`prism proxy --errors`) on the
#    exchanges of 1 and 2: the relays record each request and idemd's
#    answer byte for byte (in 2 a relay that only records, so that
#    schemathesis keeps its pace), and tests/contract/prism_replay.py puts
#    Prism in front of a replay upstream that gives back the recorded
#    answers, sends every recorded request through it and counts Prism's
#    verdicts. Replayed, not live: in front of the suite Prism would change
#    what the tests see (it answers requests with malformed bodies, without
#    `Authorization: Bearer` or on paths outside the document itself, and
#    re-serialises answers), and one Prism per idemd the suite starts
#    costs 2-4 s each. Any Prism violation fails the stage: an Error (its
#    500 VIOLATIONS) or a Warning (`sl-violations`: a non-2xx status the
#    operation does not list). What Prism cannot check is counted by
#    reason and left to 1 (see prism_replay.py): paths and methods outside
#    the document (idemd's 404 and 405 there, gateway routes' OPTIONS),
#    gateway routes except through the stand-in path of their kind
#    (/orders, /payments, /webhooks/{source}: Prism matches requests to
#    the document's paths only, so a route on another path is checked
#    as the relay maps it), the any-path answers of `x-any-path-responses`
#    (an extension Prism does not read), and a recorded 501 (Prism mocks
#    instead). Before that, Prism must find violations in the wrong
#    document's exchanges of 1. 30-70 s for the 23,000 exchanges of the
#    suite and schemathesis on two cores; --no-prism leaves it out.
#
# Needs IDEMD_BIN (default build/idemd) and a PostgreSQL as tests/run.sh
# provides it (IDEMD_TEST_PGHOST, IDEMD_TEST_PGUSER, ...); without one it
# starts its own with deploy/pg.sh. openapi-core and schemathesis are
# installed, pinned, in build/contract-venv; Prism in build/node (npm).
# Exits non-zero on any violation or failure; the last line is
#   contract: N exchanges validated, N violations; schemathesis: N cases,
#   N failures; prism: N exchanges checked, N violations
# Options: --proxy-only, --schemathesis-only, --no-prism;
# IDEMD_CONTRACT_TESTS="a b" runs only those integration modules (names
# without .py).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD

OPENAPI_CORE_VERSION=0.23.1
SCHEMATHESIS_VERSION=4.32.5
# 5.14.2: the newest 5.x that runs on Node 18 and 20 (5.15 asks for 24)
PRISM_VERSION=5.14.2
run_proxy=1 run_st=1 run_prism=1
for arg in "$@"; do
  case "$arg" in
    --proxy-only) run_st=0 ;;
    --schemathesis-only) run_proxy=0 ;;
    --no-prism) run_prism=0 ;;
    -h|--help) sed -n '2,74p' "$0"; exit 0 ;;
    *) echo "contract.sh: unknown option: $arg" >&2; exit 2 ;;
  esac
done

export IDEMD_BIN=${IDEMD_BIN:-$ROOT/build/idemd}
export IDEMD_SOURCE_DIR=$ROOT
if [ ! -x "$IDEMD_BIN" ]; then echo "contract.sh: no idemd binary at $IDEMD_BIN" >&2; exit 1; fi

VENV=$ROOT/build/contract-venv
PY=$VENV/bin/python
if ! "$PY" -c "import openapi_core, schemathesis, sys
sys.exit(not (openapi_core.__version__ == '$OPENAPI_CORE_VERSION' and
              schemathesis.__version__ == '$SCHEMATHESIS_VERSION'))" 2>/dev/null; then
  echo "contract.sh: installing openapi-core $OPENAPI_CORE_VERSION and schemathesis $SCHEMATHESIS_VERSION in build/contract-venv"
  python3 -m venv "$VENV" &&
    "$VENV/bin/pip" install -q --disable-pip-version-check \
      "openapi-core==$OPENAPI_CORE_VERSION" "schemathesis==$SCHEMATHESIS_VERSION" "pyyaml==6.0.4" ||
    { echo "contract.sh: could not install the validators" >&2; exit 1; }
fi

PRISM=$ROOT/build/node/node_modules/.bin/prism
if [ "$run_prism" = 1 ] &&
   ! grep -qs "\"version\": \"$PRISM_VERSION\"" build/node/node_modules/@stoplight/prism-cli/package.json; then
  echo "contract.sh: installing @stoplight/prism-cli $PRISM_VERSION in build/node"
  npm install --prefix build/node --no-audit --no-fund --loglevel=error --save-exact \
    "@stoplight/prism-cli@$PRISM_VERSION" ||
    { echo "contract.sh: could not install Prism" >&2; exit 1; }
fi

# shellcheck source=tests/lib/stage.sh
. tests/lib/stage.sh
stage_start contract || exit 1

pg_use || { echo "contract.sh: PostgreSQL did not start" >&2; exit 1; }

status=0
exchanges=0 violations=0 cases=0 failures=0 prism_checked=0 prism_violations=0

# ---------------------------------------------------------------- 1. proxy
# start_proxy SPEC NAME [--no-check]: a proxy validating against SPEC (or
# not) and recording every exchange in $TMP/NAME.rec for Prism; sets
# IDEMD_TEST_PROXY
start_proxy() {
  "$PY" tests/contract/proxy.py --spec "$1" --report "$TMP/$2.jsonl" \
    --port-file "$TMP/$2.port" --record "$TMP/$2.rec" ${3:+"$3"} 2>"$TMP/$2.log" &
  pids+=($!)
  for _ in $(seq 100); do [ -s "$TMP/$2.port" ] && break; sleep 0.1; done
  if [ ! -s "$TMP/$2.port" ]; then
    cat "$TMP/$2.log" >&2; echo "contract.sh: the proxy did not start" >&2; exit 1
  fi
  export IDEMD_TEST_PROXY=127.0.0.1:$(cat "$TMP/$2.port")
}
proxy_stat() {  # FIELD: from the running proxy's /stats
  python3 -c "import json,sys,urllib.request
print(json.loads(urllib.request.urlopen('http://%s/stats' % sys.argv[1]).read())[sys.argv[2]])" \
    "$IDEMD_TEST_PROXY" "$1"
}
# prism SPEC NAME...: Prism's verdict on the exchanges recorded as NAME...
# (tests/contract/prism_replay.py); its counts in $TMP/prism-NAME.stats
prism() {
  local spec=$1 name=$2; shift 2
  local n
  for n in "$name" "$@"; do [ -e "$TMP/$n.rec" ] && cat "$TMP/$n.rec"; done >"$TMP/prism-$name.rec"
  timeout -k 10 300 "$PY" tests/contract/prism_replay.py --prism "$PRISM" --spec "$spec" \
    --record "$TMP/prism-$name.rec" --report "$TMP/prism-$name.jsonl" \
    --stats "$TMP/prism-$name.stats" --log "$TMP/prism-$name.log"
}
prism_stat() {  # NAME FIELD
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" \
    "$TMP/prism-$1.stats" "$2" 2>/dev/null || echo 0
}

if [ "$run_proxy" = 1 ]; then
  # First, that the proxy can fail: a copy of the document with one wrong
  # entry (every answer's Cache-Control documented as `private` instead of
  # `no-store`) must give violations on test_versions' traffic.
  echo "==> the proxy catches a wrong document"
  sed 's/^\(        const: \)no-store$/\1private/' api/openapi.yaml >"$TMP/wrong.yaml"
  if cmp -s api/openapi.yaml "$TMP/wrong.yaml"; then
    echo "contract.sh: could not make the wrong document" >&2; exit 1
  fi
  start_proxy "$TMP/wrong.yaml" wrong
  python3 tests/integration/test_versions.py >"$TMP/wrong-run.log" 2>&1
  caught=$(proxy_stat violations) seen=$(proxy_stat exchanges)
  kill "${pids[-1]}" 2>/dev/null
  echo "  wrong document: $caught violations in $seen exchanges"
  if [ "$caught" = 0 ] || [ "$seen" = 0 ]; then
    echo "contract.sh: the proxy did not catch a wrong document" >&2; status=1
  fi
  if [ "$run_prism" = 1 ]; then
    echo "==> Prism catches the wrong document (the same exchanges)"
    prism "$TMP/wrong.yaml" wrong >"$TMP/prism-wrong.out" 2>&1
    tail -n 1 "$TMP/prism-wrong.out" | sed 's/^/  /'
    if [ "$(prism_stat wrong errors)" = 0 ] || [ "$(prism_stat wrong checked)" = 0 ]; then
      cat "$TMP/prism-wrong.out"
      echo "contract.sh: Prism did not catch a wrong document" >&2; status=1
    fi
  fi

  echo "==> integration traffic through the validating proxy"
  start_proxy api/openapi.yaml proxy

  # Left out: CLI only (see above); the browser and client tests run
  # elsewhere with their own HTTP stacks; test_hostile_ipv6 serves from a
  # network namespace of its own, whose ports the relay cannot reach (its
  # answers are the API's own problems, checked in the release suite).
  skip=" test_cli test_install test_migrations test_upgrade test_hostile_ipv6 "
  # These stop the shared PostgreSQL or depend on leases and timeouts
  # (RUN_SERIAL in CMakeLists.txt): alone, after the others.
  serial=" test_ops_db test_faults_db test_faults_crash test_faults_storm test_faults_pgbouncer test_hostile "
  parallel_list=() serial_list=()
  if [ -n "${IDEMD_CONTRACT_TESTS:-}" ]; then
    read -r -a wanted <<<"$IDEMD_CONTRACT_TESTS"
  else
    wanted=()
    for f in tests/integration/test_*.py; do
      n=$(basename "$f" .py)
      case "$skip" in *" $n "*) continue ;; esac
      wanted+=("$n")
    done
  fi
  for n in "${wanted[@]}"; do
    case "$serial" in *" $n "*) serial_list+=("$n") ;; *) parallel_list+=("$n") ;; esac
  done
  t0=$SECONDS
  run_one() {  # NAME: runs one module, output to $TMP/NAME.log; prints a result line
    local n=$1 rc
    timeout -k 10 600 python3 "tests/integration/$n.py" >"$TMP/$n.log" 2>&1
    rc=$?
    case $rc in
      0) echo "  $n: ok" ;;
      77) echo "  $n: skipped" ;;
      *) echo "  $n: FAILED ($rc)"; touch "$TMP/failed.$n" ;;
    esac
  }
  export -f run_one
  export TMP
  printf '%s\n' "${parallel_list[@]}" | xargs -r -P "${IDEMD_CONTRACT_JOBS:-3}" -I{} bash -c 'run_one {}'
  for n in "${serial_list[@]}"; do run_one "$n"; done
  # The modules are the release suite's, which passed on their own
  # (ctest): here they only carry traffic for the relay to validate. When
  # several fail at once through the relay (connections reset under the
  # parallel load), each failed one runs once more, alone; a module that
  # fails twice fails the stage, and the first run's tail is kept.
  again=0
  for f in "$TMP"/failed.*; do
    [ -e "$f" ] || continue
    n=${f##*/failed.}
    mv "$TMP/$n.log" "$TMP/$n.first.log"
    rm -f "$f"
    again=$((again + 1))
    echo "  $n: running again alone (first run's last lines:)"
    tail -n 5 "$TMP/$n.first.log" | sed 's/^/      /'
    run_one "$n"
  done
  [ "$again" = 0 ] || echo "  ran $again module(s) a second time, alone"
  # the contract's corners (tests/contract/test_edges.py): limits from
  # both sides, JSON edge values, HEAD, cursors, libmicrohttpd's own
  # answers; the document's verdict on each request is idemd's
  if [ -z "${IDEMD_CONTRACT_TESTS:-}" ]; then
    if timeout -k 10 300 "$PY" tests/contract/test_edges.py >"$TMP/test_edges.log" 2>&1; then
      echo "  test_edges: ok"
    else
      echo "  test_edges: FAILED"; touch "$TMP/failed.test_edges"
    fi
  fi
  sleep 1  # let the relays finish the last connections
  exchanges=$(proxy_stat exchanges) violations=$(proxy_stat violations)
  echo "  proxy: $exchanges exchanges, $violations violations, by kind $(proxy_stat by_kind) ($((SECONDS - t0)) s)"
  for f in "$TMP"/failed.*; do
    [ -e "$f" ] || continue
    n=${f##*/failed.}
    echo "---- $n (last lines)"; tail -n 40 "$TMP/$n.log"
    status=1
  done
  if [ "$violations" != 0 ]; then
    echo "---- violations (one JSON object per exchange)"
    python3 - "$TMP/proxy.jsonl" <<'EOF'
import json, sys
seen = {}
for line in open(sys.argv[1]):
    v = json.loads(line)
    key = v["violation"][:300]
    seen.setdefault(key, []).append(v)
for key, vs in sorted(seen.items(), key=lambda kv: -len(kv[1])):
    v = vs[0]
    print("%4dx %s\n      e.g. %s -> %d %s" % (len(vs), v["violation"][:1200], v["request"],
                                               v["status"], v["body"][:200].replace("\n", " ")))
EOF
    status=1
  fi
  if [ -n "${IDEMD_CONTRACT_KEEP:-}" ]; then cp "$TMP/proxy.jsonl" "$IDEMD_CONTRACT_KEEP"; fi
  kill "${pids[-1]}" 2>/dev/null
  unset IDEMD_TEST_PROXY
fi

# ---------------------------------------------------------------- 2. schemathesis
# Against a real idemd (tests/contract/target.py: tenant, operations, a token
# route /orders and an IETF route /payments in front of a small upstream,
# CORS for https://shop.example). /webhooks/{source} is left out: it stands
# for any path, and a generated source is no configured route (404).
# Bounded: at most ST_EXAMPLES examples per operation and phase, and
# ST_MAX_TIME seconds for the fuzzing and stateful phases. The request
# timeout covers Prefer: wait=60.
if [ "$run_st" = 1 ]; then
  echo "==> schemathesis $SCHEMATHESIS_VERSION against a real idemd"
  python3 tests/contract/target.py "$TMP/target.json" 2>"$TMP/target.log" &
  target_pid=$!
  pids+=("$target_pid")
  for _ in $(seq 300); do [ -s "$TMP/target.json" ] && break; sleep 0.1; done
  if [ ! -s "$TMP/target.json" ]; then
    cat "$TMP/target.log" >&2; echo "contract.sh: idemd for schemathesis did not start" >&2; exit 1
  fi
  url=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['url'])" "$TMP/target.json")
  key=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['api_key'])" "$TMP/target.json")
  if [ "$run_prism" = 1 ]; then
    # through a relay of the proxy that only records the exchanges for
    # Prism (it passes the bytes as they are; validating them with
    # openapi-core as well cost a third of the cases on two cores)
    start_proxy api/openapi.yaml st --no-check
    url=$(python3 -c "import http.client,json,sys
t = json.load(open(sys.argv[1]))
host, _, port = sys.argv[2].rpartition(':')
c = http.client.HTTPConnection(host, int(port), timeout=10)
c.request('POST', '/register', json.dumps({'upstream': t['port'], 'config': t['config']}))
print('http://127.0.0.1:%d' % json.loads(c.getresponse().read())['port'])" "$TMP/target.json" "$IDEMD_TEST_PROXY")
  fi
  t0=$SECONDS
  # run in $TMP: schemathesis keeps its example database in ./.schemathesis.
  # One worker: with two, Hypothesis describes its strategies' lambdas by
  # parsing their source with ast in both threads at once, which CPython
  # 3.11 does not allow ("AST constructor recursion depth mismatch", a
  # Runtime Error of the tool, 3 of them in one CI run, none of idemd's)
  (cd "$TMP" && SCHEMATHESIS_TELEMETRY=false SCHEMATHESIS_HOOKS=st_hooks \
    PYTHONPATH="$ROOT/tests/contract${PYTHONPATH:+:$PYTHONPATH}" timeout -k 10 "$(( ${ST_MAX_TIME:-90} + 240 ))" \
    "$VENV/bin/st" run "$ROOT/api/openapi.yaml" --url "$url" -H "Authorization: Bearer $key" \
      --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance,negative_data_rejection \
      --mode all --phases examples,coverage,fuzzing,stateful \
      --exclude-path '/webhooks/{source}' \
      --max-examples "${ST_EXAMPLES:-10}" --max-time "${ST_MAX_TIME:-90}" --seed "${ST_SEED:-1}" \
      --workers 1 --request-timeout 65 --no-color --warnings off \
      >"$TMP/st.log" 2>&1)
  st_rc=$?
  sed -n '/^===* FAILURES\|^===* ERRORS/,/^===* SUMMARY/p' "$TMP/st.log" | head -n 400
  sed -n '/^===* SUMMARY/,$p' "$TMP/st.log"
  cases=$(sed -nE 's/^ *([0-9]+) generated.*/\1/p' "$TMP/st.log" | tail -n 1)
  failures=$(sed -nE 's/.* ([0-9]+) unique failures?.*/\1/p' "$TMP/st.log" | tail -n 1)
  errored=$(sed -nE 's/.* ([0-9]+) errored.*/\1/p' "$TMP/st.log" | tail -n 1)
  cases=${cases:-0} failures=$(( ${failures:-0} + ${errored:-0} ))
  echo "  schemathesis: $cases cases, $failures failures ($((SECONDS - t0)) s, exit $st_rc)"
  if [ "$run_prism" = 1 ]; then
    sleep 1
    echo "  recorded for Prism: $(proxy_stat recorded) exchanges"
    kill "${pids[-1]}" 2>/dev/null
    unset IDEMD_TEST_PROXY
  fi
  if [ "$st_rc" != 0 ] || [ "$failures" != 0 ] || [ "$cases" = 0 ]; then status=1; fi
  kill "$target_pid" 2>/dev/null; wait "$target_pid" 2>/dev/null
  if grep -q "did not exit 0\|idemd exited" "$TMP/target.log"; then
    cat "$TMP/target.log"; status=1
  fi
fi

# ---------------------------------------------------------------- 3. Prism
# Stoplight Prism (`prism proxy --errors`), a second reader of the
# document, on every exchange recorded above: see tests/contract/prism_replay.py.
if [ "$run_prism" = 1 ] && [ -e "$TMP/proxy.rec" -o -e "$TMP/st.rec" ]; then
  echo "==> Prism $PRISM_VERSION (prism proxy --errors) on the recorded exchanges"
  prism api/openapi.yaml proxy st
  rc=$?
  prism_checked=$(prism_stat proxy checked) prism_violations=$(prism_stat proxy violations)
  if [ "$rc" != 0 ] || [ "$prism_violations" != 0 ] || [ "$prism_checked" = 0 ]; then status=1; fi
fi

echo "contract: $exchanges exchanges validated, $violations violations; schemathesis: $cases cases, $failures failures; prism: $prism_checked exchanges checked, $prism_violations violations"
exit $status
