#!/usr/bin/env bash
# The mutant stage: idemd built with one safety mechanism deliberately
# broken at a time (CMake -DIDEMD_MUTANT=NAME: #ifdef IDEMD_MUTANT_<NAME> in
# src/, "-- mutant:NAME" lines in migrations/), and the safety tests run
# against each build until one fails. A mutant that no test catches fails
# the stage: a safety test that no broken build can fail proves nothing.
#
#   fence_resets          a new life of a key starts at attempt 1 again
#   no_fence              complete/release/extend/checkpoint ignore the attempt
#   lease_from_txn_start  leases from the transaction's start, acknowledged
#                         and forwarded however little of them is left
#   admit_in_progress     a claim of a record in progress under a live lease
#                         is granted as a takeover
#   release_after_2xx     an upstream 2xx that cannot be stored is released
#                         (and so run again) instead of stored as a 502
#   replay_ignores_expiry the replay cache serves answers past their expiry
#   told_events_lost      the end of a life drops the claimed and completed
#                         events its record told (migrations/0013) instead of
#                         keeping them as rows: the audit trail loses them
#
# Needs the PostgreSQL cluster of tests/run.sh (IDEMD_TEST_PGHOST etc.).
# One build tree (build-mutant) for all: switching mutants recompiles only
# the files holding a mutant point. Prints a table mutant -> the test that
# caught it; ends with "mutants: N of N caught".
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
DIR=${IDEMD_MUTANT_BUILD:-$ROOT/build-mutant}
PY=${PYTHON:-python3}

# The safety tests, fastest and most pointed first; each mutant runs them
# in this order until one fails.
SAFETY=(test_exactly_once test_claims test_concurrency test_long_work test_keys test_gateway)
# the audit trail's own mutant runs its own test
tests_of() { case "$1" in told_events_lost) echo test_audit ;; *) echo "${SAFETY[@]}" ;; esac; }
MUTANTS=(fence_resets no_fence lease_from_txn_start admit_in_progress release_after_2xx
         replay_ignores_expiry told_events_lost)

if [ -z "${IDEMD_TEST_PGHOST:-}" ]; then
  echo "mutants.sh: IDEMD_TEST_PGHOST is not set (run from tests/run.sh)" >&2; exit 1
fi
TMP=$(mktemp -d /tmp/idemd-mutants.XXXXXX) || exit 1
trap 'rm -rf "$TMP"' EXIT

caught=0 table=()
for m in "${MUTANTS[@]}"; do
  printf '\n==> mutant %s: building\n' "$m"
  if ! { cmake -S . -B "$DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIDEMD_MUTANT="$m" \
           >"$TMP/cmake.log" 2>&1 && cmake --build "$DIR" -j2 --target idemd >"$TMP/build.log" 2>&1; }; then
    cat "$TMP/cmake.log" "$TMP/build.log" >&2
    table+=("$m|BUILD FAILED"); continue
  fi
  by=""
  for t in $(tests_of "$m"); do
    printf '    %s ... ' "$t"
    if IDEMD_BIN="$DIR/idemd" IDEMD_SOURCE_DIR="$ROOT" timeout 300 \
         "$PY" "tests/integration/$t.py" >"$TMP/$m.$t.log" 2>&1; then
      echo "passed (did not notice)"
    else
      echo "FAILED: caught"
      # the failing test cases, for the table
      cases=$(grep -oE '^(FAIL|ERROR): [a-z_0-9]+' "$TMP/$m.$t.log" | sed -E 's/^(FAIL|ERROR): //' |
              sort -u | head -n 3 | paste -sd, -)
      by="$t${cases:+ ($cases)}"
      break
    fi
  done
  if [ -n "$by" ]; then
    caught=$((caught + 1)); table+=("$m|$by")
  else
    table+=("$m|NOT CAUGHT")
  fi
done
# the tree is left as a plain build, so that nothing mistakes it for a release
cmake -S . -B "$DIR" -DIDEMD_MUTANT= >/dev/null 2>&1

printf '\n%-22s %s\n' "mutant" "caught by"
for row in "${table[@]}"; do printf '%-22s %s\n' "${row%%|*}" "${row#*|}"; done
echo "mutants: $caught of ${#MUTANTS[@]} caught"
[ "$caught" -eq "${#MUTANTS[@]}" ]
