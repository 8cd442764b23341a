#!/usr/bin/env bash
# The client libraries' stage: clients/python (mypy --strict, pytest) and
# clients/node (tsc --noEmit, node --test), against the real idemd binary
# (build/idemd, or $IDEMD_BIN) and a real PostgreSQL.
#
# tests/run.sh calls it with IDEMD_TEST_PGHOST and IDEMD_TEST_PGUSER set (its
# throwaway cluster); run alone, it starts its own cluster with deploy/pg.sh.
# It creates one database, two tenants and two idemd servers on it (the
# second with a tiny issue rate and in-flight body budget, for the retry
# tests), installs the Python package with pip into a virtualenv and the
# Node package with npm under build/node-clients (pinned typescript and
# express), and runs both suites. Prints pytest's and node's own summary
# lines and ends with "clients: N passed, N failed"; exits non-zero on any
# failure.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BIN=${IDEMD_BIN:-$ROOT/build/idemd}
# Debian's interpreter: python3-pytest and mypy are installed for it.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
PSQL=${IDEMD_TEST_PSQL:-/usr/lib/postgresql/15/bin/psql}
[ -x "$PSQL" ] || PSQL=psql

typescript_version=5.9.3
express_version=4.21.2

say() { printf '\n==> %s\n' "$*"; }
fail=0 problems=() results=()
if [ ! -x "$BIN" ]; then echo "clients.sh: $BIN not built" >&2; exit 1; fi

TMP=$(mktemp -d /tmp/idemd-clients.XXXXXX) || exit 1
chmod 711 "$TMP"
pids=() own_pg=0
# shellcheck disable=SC2317
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  if [ -n "${DB:-}" ]; then
    PGHOST=$IDEMD_TEST_PGHOST PGUSER=$IDEMD_TEST_PGUSER \
      "$PSQL" -X -q -d postgres -c "DROP DATABASE IF EXISTS \"$DB\" WITH (FORCE)" >/dev/null 2>&1
  fi
  if [ "$own_pg" = 1 ]; then bash deploy/pg.sh stop "$TMP/pg" >/dev/null 2>&1; fi
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -z "${IDEMD_TEST_PGHOST:-}" ] || [ -z "${IDEMD_TEST_PGUSER:-}" ]; then
  say "starting a throwaway PostgreSQL"
  bash deploy/pg.sh init "$TMP/pg" >/dev/null && bash deploy/pg.sh start "$TMP/pg" >/dev/null ||
    { echo "clients.sh: PostgreSQL did not start" >&2; exit 1; }
  own_pg=1
  IDEMD_TEST_PGHOST=$(bash deploy/pg.sh socket "$TMP/pg")
  IDEMD_TEST_PGUSER=$(bash deploy/pg.sh role "$TMP/pg")
fi

say "starting two idemd servers on a fresh database"
DB=idemd_clients_$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
PGHOST=$IDEMD_TEST_PGHOST PGUSER=$IDEMD_TEST_PGUSER \
  "$PSQL" -X -q -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE \"$DB\"" || exit 1
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT1=$(free_port) PORT2=$(free_port)
conninfo="host=$IDEMD_TEST_PGHOST dbname=$DB user=$IDEMD_TEST_PGUSER"
write_config() {  # FILE PORT EXTRA_JSON
  cat >"$1" <<EOF
{"listen": "127.0.0.1:$2", "database_url": "$conninfo",
 "master_key_file": "$TMP/master.key", "pool_size": 4, "threads": 4$3}
EOF
}
write_config "$TMP/main.json" "$PORT1" ""
# Issue rate 1/s with a burst of 1 (429 on the second issue); a body of more
# than 1 MiB is over the in-flight budget (503) yet within max_body_bytes.
write_config "$TMP/limited.json" "$PORT2" ', "issue_rate_per_second": 1, "issue_burst": 1,
 "max_inflight_body_bytes": 1048576, "max_body_bytes": 4194304'
"$BIN" --config "$TMP/main.json" migrate >/dev/null || exit 1
tenant() { "$BIN" --config "$TMP/main.json" tenant create "$1" |
           "$PY" -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["api_key"])'; }
IDEMD_API_KEY=$(tenant acme) && IDEMD_API_KEY_2=$(tenant globex) || exit 1
for n in main limited; do
  "$BIN" --config "$TMP/$n.json" serve 2>"$TMP/$n.log" &
  pids+=($!)
done
for port in "$PORT1" "$PORT2"; do
  for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break
    sleep 0.1
  done
  curl -fs "http://127.0.0.1:$port/healthz" >/dev/null ||
    { echo "clients.sh: idemd on port $port did not start:" >&2; cat "$TMP"/*.log >&2; exit 1; }
done
export IDEMD_URL=http://127.0.0.1:$PORT1 IDEMD_LIMITED_URL=http://127.0.0.1:$PORT2
export IDEMD_API_KEY IDEMD_API_KEY_2 IDEMD_SOURCE_DIR=$ROOT

# ---------------------------------------------------------------- Python
say "python: pip install clients/python (into a virtualenv)"
export PYTHONDONTWRITEBYTECODE=1
venv=$TMP/venv
if "$PY" -m venv --system-site-packages "$venv" &&
   # No package index is needed: the build uses the installed setuptools.
   "$venv/bin/pip" install -q --no-index --no-build-isolation --no-deps clients/python; then
  results+=("python install: ok")
else
  results+=("python install: FAILED"); problems+=("python install"); fail=1
fi
rm -rf clients/python/build clients/python/src/idemd.egg-info

say "python: mypy --strict on the idemd package"
if mypy --strict --cache-dir "$TMP/mypy-cache" clients/python/src/idemd; then
  results+=("mypy: ok")
else
  results+=("mypy: FAILED"); problems+=("mypy"); fail=1
fi

say "python: pytest (against the installed package)"
(cd clients/python && "$venv/bin/python" -m pytest -p no:cacheprovider -q tests) 2>&1 | tee "$TMP/pytest.log"
rc=${PIPESTATUS[0]}
line=$(grep -E '^=*\s*[0-9]+ (passed|failed)|^=*\s*[0-9]+ .*(passed|failed|error)' "$TMP/pytest.log" | tail -n 1)
results+=("pytest: ${line:-no summary}")
if [ "$rc" -ne 0 ]; then problems+=("pytest"); fail=1; fi

# ---------------------------------------------------------------- Node
say "node: npm install ./clients/node (with typescript and express, under build/node-clients)"
nm=build/node-clients
mkdir -p "$nm"
if npm install --prefix "$nm" --no-audit --no-fund --loglevel=error \
     "typescript@$typescript_version" "express@$express_version" "$ROOT/clients/node"; then
  results+=("node install: ok")
else
  results+=("node install: FAILED"); problems+=("node install"); fail=1
fi

say "node: tsc --noEmit (the package's types and a program using them)"
if "$nm/node_modules/.bin/tsc" -p clients/node/tsconfig.json --noEmit; then
  results+=("tsc: ok")
else
  results+=("tsc: FAILED"); problems+=("tsc"); fail=1
fi

say "node: node --test"
# The tests import "idemd" and "express" as an application would: run them
# from where npm installed both.
rm -rf "$nm/test" && cp -r clients/node/test "$nm/test"
node --test --test-reporter=spec "$nm"/test/*.test.js 2>&1 | tee "$TMP/node.log"
rc=${PIPESTATUS[0]}
np=$(sed -nE 's/^ℹ pass ([0-9]+)$/\1/p' "$TMP/node.log" | tail -n 1)
nf=$(sed -nE 's/^ℹ fail ([0-9]+)$/\1/p' "$TMP/node.log" | tail -n 1)
results+=("node --test: ${np:-?} passed, ${nf:-?} failed")
if [ "$rc" -ne 0 ]; then problems+=("node --test"); fail=1; fi

say "clients summary"
printf '  %s\n' "${results[@]}"
if [ "${#problems[@]}" -gt 0 ]; then printf '  FAILED: %s\n' "${problems[@]}"; fi
[ "$fail" -eq 0 ]
