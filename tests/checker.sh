#!/usr/bin/env bash
# The history checker stage (tests/checker/): two idemd instances on one
# fresh database, several clients per key on both, faults all along (idemd
# SIGKILL and SIGSTOP, pg_terminate_backend, PostgreSQL crash-restarts,
# stalls inside PostgreSQL), one instance's clock 3 s off, batch claims and
# completions, waiters, audit trail reads under changing retention, an
# upstream that breaks after its status line or outlives the lease; every
# request and answer recorded, then a checker proves from the history alone
# that no key was granted twice, no acknowledged completion was lost or
# changed, no stale holder wrote, no gateway key ran twice or overlapped,
# and every acknowledged transition is in its audit trail once
# (tests/checker/check.py says exactly what).
#
# Uses the PostgreSQL cluster that IDEMD_TEST_PGHOST/IDEMD_TEST_PGUSER name
# (tests/run.sh sets them, and IDEMD_TEST_PGCTL/IDEMD_TEST_PGDATA for the
# crash-restarts), else starts a throwaway one (deploy/pg.sh). Needs only
# Debian's python3. IDEMD_BIN (default build/idemd); CHECKER_DURATION
# (seconds of workload, default 150: about 3 minutes in all);
# CHECKER_SEED; CHECKER_KEEP=1 keeps the history and logs.
# The last line is "checker: N histories, N operations, ..., N faults, N
# violations"; exits non-zero on any violation.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
export IDEMD_BIN=${IDEMD_BIN:-$ROOT/build/idemd}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
DURATION=${CHECKER_DURATION:-150}

die() { echo "checker.sh: $*" >&2; echo "checker: FAILED"; exit 1; }
[ -x "$IDEMD_BIN" ] || die "$IDEMD_BIN not built"

TMP=$(mktemp -d /tmp/idemd-checker.XXXXXX) || exit 1
chmod 711 "$TMP"
# shellcheck source=tests/lib/pg.sh
. tests/lib/pg.sh
# shellcheck disable=SC2317
cleanup() {
  pg_cleanup
  if [ "${CHECKER_KEEP:-0}" = 1 ] || [ "${keep:-0}" = 1 ]; then
    echo "checker.sh: history and logs kept in $TMP/run"
    rm -rf "$TMP/pg"
  else
    rm -rf "$TMP"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

pg_use || die "PostgreSQL did not start"
export CHECKER_DURATION=$DURATION CHECKER_OUT=$TMP/run PYTHONDONTWRITEBYTECODE=1

keep=0
timeout -k 30 $((DURATION + 240)) "$PY" tests/checker/run.py
rc=$?
if [ "$rc" -eq 124 ]; then echo "checker.sh: timed out" >&2; fi
if [ "$rc" -ne 0 ]; then keep=1; fi
exit "$rc"
