#!/usr/bin/env bash
# The high-availability stage: tests/ha/test_ha.py against the real idemd
# binary (build/idemd, or $IDEMD_BIN). It starts, on 127.0.0.1 only, one
# etcd, two Patroni-managed PostgreSQL 15 nodes (synchronous mode), the
# history checker's upstream, two idemd nodes and HAProxy; runs the history
# checker's clients through HAProxy (several contending clients per key:
# tokens, caller keys, gateway routes; releases, extends, checkpoints, stale
# attempts, stalled workers) while it injects a switchover, a kill -9 of
# the primary's postmaster, a freeze of the primary longer than Patroni's
# ttl and a kill -9 of one idemd node; then checks the whole history with
# tests/checker/check.py; prints a summary table; and tears everything
# down, also on failure or timeout.
#
# Needs root (Patroni and PostgreSQL run as the postgres user, through
# setpriv) and the packages patroni, python3-etcd, etcd-server, etcd-client
# and haproxy (deploy/deps.sh --test installs them). Bounded: 600 s.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BIN=${IDEMD_BIN:-$ROOT/build/idemd}
LIMIT=${IDEMD_HA_TIMEOUT:-600}

if [ ! -x "$BIN" ]; then echo "ha.sh: $BIN not built" >&2; exit 1; fi
if [ "$(id -u)" -ne 0 ]; then echo "ha.sh: must run as root (setpriv to postgres)" >&2; exit 1; fi
for c in patroni patronictl etcd haproxy setpriv /usr/lib/postgresql/15/bin/postgres; do
  command -v "$c" >/dev/null 2>&1 || { echo "ha.sh: $c missing (deploy/deps.sh --test)" >&2; exit 1; }
done

TMP=$(mktemp -d /tmp/idemd-ha.XXXXXX) || exit 1
chmod 711 "$TMP"
export IDEMD_HA_TMP=$TMP PYTHONDONTWRITEBYTECODE=1
# shellcheck disable=SC2317
# ours PID: the process runs in $TMP or names it on its command line (a
# recorded PID that ended and was reused by another process is left alone)
ours() {
  [ "$(readlink "/proc/$1/cwd" 2>/dev/null)" = "$TMP" ] ||
    tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$TMP"
}
cleanup() {
  # the test tears its bed down itself; this is the fallback when it was
  # killed: every PID it recorded, and the postmasters Patroni detached
  local pid f
  for f in "$TMP"/*/data/postmaster.pid; do
    [ -f "$f" ] || continue
    pid=$(head -n 1 "$f")
    if [ -n "$pid" ] && ours "$pid"; then kill -CONT "$pid"; kill -KILL "$pid"; fi 2>/dev/null
  done
  if [ -f "$TMP/pids" ]; then
    while read -r pid; do
      if ours "$pid"; then kill -CONT "$pid"; kill -KILL "$pid"; fi 2>/dev/null
    done < "$TMP/pids"
  fi
  if [ "${keep:-0}" = 1 ]; then echo "ha.sh: logs kept in $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

keep=0
timeout -k 90 "$LIMIT" python3 tests/ha/test_ha.py "$BIN"
rc=$?
if [ "$rc" -eq 124 ]; then echo "ha.sh: timed out after $LIMIT s" >&2; fi
if [ "$rc" -ne 0 ]; then keep=1; fi
exit "$rc"
