#!/usr/bin/env bash
# Runs the whole test suite: unit, integration and browser tests (ctest)
# against a throwaway PostgreSQL cluster, the mutants of the safety
# mechanisms, the history checker, the contract (every exchange against
# api/openapi.yaml, schemathesis, Prism), the OpenAPI lint, the client
# libraries, queue consumers against RabbitMQ, the examples of README.md
# and docs/ (run, their output compared with the page), the layering of
# src/, the Markdown link check, and, with --sanitize or when CI=true, the
# tests again under AddressSanitizer and UBSan.
# --no-browser (or IDEMD_SKIP_BROWSER=1) leaves out the headless Chromium test
# (browser.checkout), and with it the chromium package and playwright-core.
# Ends with the line "N passed, N failed"; exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD

sanitize=0 werror=OFF browser=1
if [ "${CI:-}" = true ]; then sanitize=1 werror=ON; fi
if [ -n "${IDEMD_SKIP_BROWSER:-}" ] && [ "$IDEMD_SKIP_BROWSER" != 0 ]; then browser=0; fi
for arg in "$@"; do
  case "$arg" in
    --sanitize) sanitize=1 ;;
    --no-browser) browser=0 ;;
    -h|--help) echo "usage: $0 [--sanitize] [--no-browser]"; exit 0 ;;
    *) echo "run.sh: unknown option: $arg" >&2; exit 2 ;;
  esac
done

passed=0 failed=0 skipped=0
results=() problems=() timings=()
START=$SECONDS
# timed NAME CMD...: runs CMD, then notes NAME's wall time for the table
# the summary ends with.
timed() {
  local name=$1 t0=$SECONDS rc; shift
  "$@"; rc=$?
  timings+=("$name|$((SECONDS - t0))")
  return "$rc"
}
say() { printf '\n==> %s\n' "$*"; }
pg() { bash "$ROOT/deploy/pg.sh" "$@"; }

# Tests left out: ctest -E arguments, and how many tests they are.
ctest_exclude=() excluded=0
deps_args=(--test)
if [ "$browser" = 0 ]; then
  ctest_exclude=(-E '^browser\.checkout$') excluded=1
  deps_args+=(--no-browser)
fi

timed dependencies bash deploy/deps.sh "${deps_args[@]}" || exit 1

# A throwaway cluster; under root PostgreSQL runs as idemd-pg, which must be
# able to reach it, hence 0711.
TMP=$(mktemp -d /tmp/idemd-test.XXXXXX) || exit 1
chmod 711 "$TMP"
# shellcheck disable=SC2317
cleanup() { pg stop "$TMP/pg" >/dev/null 2>&1; rm -rf "$TMP"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "starting a throwaway PostgreSQL"
if ! { pg init "$TMP/pg" && pg start "$TMP/pg"; }; then
  echo "run.sh: PostgreSQL did not start" >&2; exit 1
fi
IDEMD_TEST_PGHOST=$(pg socket "$TMP/pg")
IDEMD_TEST_PGUSER=$(pg role "$TMP/pg")
IDEMD_TEST_PSQL=/usr/lib/postgresql/15/bin/psql
IDEMD_TEST_PGDATA=$(readlink -f "$TMP/pg")/data
IDEMD_TEST_PGCTL="bash $(printf %q "$ROOT/deploy/pg.sh") pg_ctl $(printf %q "$TMP/pg")"
export IDEMD_TEST_PGHOST IDEMD_TEST_PGUSER IDEMD_TEST_PSQL IDEMD_TEST_PGDATA IDEMD_TEST_PGCTL

# suite NAME BUILD_DIR CMAKE_ARGS...: build a tree and run its ctest suite
# (bounded: the build 900 s, the tests 1800 s in all, each 600 s).
suite() { timed "$1" suite_run "$@"; }
suite_run() {
  local name=$1 dir=$2; shift 2
  say "building $dir ($name)"
  if ! { cmake -S . -B "$dir" "$@" >/dev/null && timeout 900 cmake --build "$dir" -j2; }; then
    results+=("$name: build FAILED"); problems+=("$name build"); return
  fi
  say "running $name tests"
  timeout -k 30 1800 ctest --test-dir "$dir" --output-on-failure -j1 --timeout 600 \
    "${ctest_exclude[@]}" 2>&1 |
    tee "$TMP/ctest.log"
  local rc=${PIPESTATUS[0]} line p=0 f=0 s
  line=$(sed -nE 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1 \2/p' "$TMP/ctest.log" | tail -n 1)
  s=$(grep -cE '^[[:space:]]+[0-9]+ - .+ \(Skipped\)$' "$TMP/ctest.log")
  if [ -n "$line" ]; then f=${line% *}; p=$(( ${line#* } - f - s )); fi
  s=$((s + excluded))
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
  results+=("$name: $p passed, $f failed, $s skipped")
  if [ "$excluded" -ne 0 ]; then
    results+=("$name: browser.checkout (headless Chromium) skipped (--no-browser)")
  fi
  if [ "$rc" -ne 0 ] || [ "$f" -ne 0 ]; then problems+=("$name tests"); fi
}

# stage NAME LIMIT CMD...: run one stage under timeout's LIMIT ("1200",
# "-k 60 600"; - for none), with IDEMD_BIN the release build's binary. The
# summary gets "NAME: ok" ("NAME: $STAGE_OK" when set) or "NAME: FAILED";
# a failure adds NAME, less any "(...)" tail, to the problem list.
stage() { timed "$1" stage_run "$@"; }
stage_run() {
  local name=$1 limit=$2 lim=(); shift 2
  if [ "$limit" != - ]; then read -ra lim <<<"timeout $limit"; fi
  if IDEMD_BIN="$ROOT/build/idemd" "${lim[@]}" "$@"; then
    results+=("$name: ${STAGE_OK:-ok}")
  else
    results+=("$name: FAILED"); problems+=("${name% (*}")
  fi
}

suite release build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIDEMD_WERROR="$werror" -DIDEMD_SANITIZE=OFF

say "mutants (tests/mutants.sh: each safety mechanism broken in turn must be caught)"
# Bounded: one build tree, each mutant recompiles a few files and runs the
# safety tests only until one fails.
STAGE_OK="all caught" stage mutants 1800 bash tests/mutants.sh

say "history checker (tests/checker.sh: contending clients, two instances, faults)"
# Bounded: its PostgreSQL, idemd instances and upstream are stopped on exit.
stage "history checker" "-k 60 600" bash tests/checker.sh

say "the published contract (tests/contract.sh: the suite through a validating relay, schemathesis, Prism)"
# Bounded: its idemd servers, relays and Prism are stopped on exit.
# Installs Prism (@stoplight/prism-cli, pinned) in build/node.
stage contract "-k 60 900" bash tests/contract.sh

say "linting api/openapi.yaml"
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true
# Pinned so that lint results do not change under us.
redocly_version=1.34.20
redocly=build/node/node_modules/.bin/redocly
if ! grep -qs "\"version\": \"$redocly_version\"" build/node/node_modules/@redocly/cli/package.json; then
  npm install --prefix build/node --no-audit --no-fund --loglevel=error "@redocly/cli@$redocly_version"
fi
stage "openapi lint" 300 "$redocly" lint api/openapi.yaml

say "Debian package (tests/package.sh)"
# builds, inspects, unpacks and runs the .deb; as root also installs it on
# this machine and purges it again (restored on failure too)
stage "debian package" 900 bash tests/package.sh

say "client libraries (clients/python, clients/node, clients/go, clients/jvm)"
stage "client libraries" 1200 bash tests/clients.sh

say "queue consumers under chaos (RabbitMQ, with and without idemd)"
# Bounded: RabbitMQ, idemd and the consumers it starts are stopped on exit,
# and timeout kills the whole stage (its servers included) if it hangs.
stage "queue consumers (RabbitMQ)" 480 bash tests/queue.sh

say "kafka consumers (a KRaft broker: kills, rebalances, a stalled handler, duplicates)"
# Bounded: the broker, idemd and the consumers it starts are stopped on exit;
# the broker's jars and the Python venv are cached in build/kafka.
stage "kafka consumers" 420 bash tests/kafka.sh

say "prometheus (promtool on deploy/prometheus, a real Prometheus scraping idemd)"
# Bounded: Prometheus and idemd listen on 127.0.0.1 and are stopped on exit.
stage prometheus 300 bash tests/prometheus.sh

say "high availability (tests/ha.sh: Patroni, etcd, HAProxy, faults under a storm)"
# Bounded: etcd, Patroni, PostgreSQL, idemd and HAProxy listen on 127.0.0.1
# and are stopped on exit, also when its own 900 s limit strikes.
stage "high availability" "-k 120 1000" bash tests/ha.sh

say "checking the C formatting (tests/static/format.sh, .clang-format)"
stage "c formatting" 300 bash tests/static/format.sh

say "checking the layers of src/ (tests/static/layers.py: includes run downward, no cycles)"
stage layers 120 python3 tests/static/layers.py

say "checking the size of src/'s functions (tests/static/functions.py: lizard, 60 lines, complexity 15)"
# Bounded: installs lizard (pinned) in build/lizard-venv on first use.
stage "function size" 300 python3 tests/static/functions.py

say "checking the problem codes against api/openapi.yaml"
stage "problem codes" 120 python3 tests/static/problem_codes.py

say "docs examples (tests/static/docs.py: README.md and docs/ run against idemd, outputs compared)"
# Bounded: its idemd listens on 127.0.0.1 and is stopped, its databases
# dropped, on exit.
stage "docs examples" "-k 30 300" python3 tests/static/docs.py

say "checking the links of the Markdown files"
stage "markdown links" 120 python3 tests/static/links.py

if [ "$sanitize" = 1 ]; then
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    suite sanitizer build-asan -DCMAKE_BUILD_TYPE=Debug -DIDEMD_WERROR=ON -DIDEMD_SANITIZE=ON

  say "unit tests under valgrind"
  # Bounded: 300 s a program.
  valgrind_units() {
    vg_fail=0 vg_count=0
    for t in build/test_*; do
      [ -x "$t" ] || continue
      vg_count=$((vg_count + 1))
      if ! timeout 300 valgrind -q --error-exitcode=99 --leak-check=full \
           --errors-for-leak-kinds=definite,indirect "$t" >"$TMP/valgrind.log" 2>&1; then
        cat "$TMP/valgrind.log"; vg_fail=$((vg_fail + 1))
      fi
    done
  }
  timed valgrind valgrind_units
  results+=("valgrind: $((vg_count - vg_fail)) of $vg_count unit test programs clean")
  if [ "$vg_fail" -ne 0 ] || [ "$vg_count" -eq 0 ]; then problems+=("valgrind"); fi

  say "fuzzing (${IDEMD_FUZZ_SECONDS:-30} s per target)"
  stage fuzz 900 bash tests/fuzz/run.sh "${IDEMD_FUZZ_SECONDS:-30}"
else
  results+=("sanitizer, valgrind, fuzz: skipped (use --sanitize)")
fi

say "summary"
printf '  %s\n' "${results[@]}"
echo
echo "  time per stage (s):"
for row in "${timings[@]}"; do printf '    %-34s %5d\n' "${row%%|*}" "${row#*|}"; done
printf '    %-34s %5d\n' "all (dependencies and setup included)" "$((SECONDS - START))"
if [ "${#problems[@]}" -gt 0 ]; then
  printf '  FAILED: %s\n' "${problems[@]}"
else
  echo "  all good"
fi
if [ "$skipped" -gt 0 ]; then
  echo "$passed passed, $failed failed, $skipped skipped"
else
  echo "$passed passed, $failed failed"
fi
[ "${#problems[@]}" -eq 0 ]
