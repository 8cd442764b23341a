#!/usr/bin/env bash
# The client libraries' stage: clients/python (mypy --strict, pytest),
# clients/node (tsc --noEmit, node --test), clients/go (go vet, go test) and,
# when clients/jvm/run-tests.sh exists, the JVM client, against the real
# idemd binary (build/idemd, or $IDEMD_BIN) and a real PostgreSQL. Each
# language's suite includes its runner of the shared conformance scenarios
# (clients/conformance/*.json); the stage ends with the table of scenario x
# language.
#
# tests/run.sh calls it with IDEMD_TEST_PGHOST and IDEMD_TEST_PGUSER set (its
# throwaway cluster); run alone, it starts its own cluster with deploy/pg.sh.
# It creates one database, two tenants and two idemd servers on it (the
# second with a tiny issue rate and in-flight body budget, for the retry
# tests; the main one also has a gateway route POST /shop/orders for
# tenant acme's order.create, forwarding to 127.0.0.1:$IDEMD_UPSTREAM_PORT,
# where the JVM suite's mobile-checkout test starts its own upstream),
# builds each client's release artifacts and installs the tests' apps from
# them, as from a registry: Python's sdist and wheel (pyproject-build, into
# build/python-dist; pip installs the checkout, the sdist and the wheel,
# each into a fresh virtualenv, build dependencies from PyPI; the tests run
# against the wheel's, which also gets FastAPI, Starlette, httpx2 and
# Django, pinned, for the integrations' tests), Node's npm pack tarball
# (build/node-pack; its file list is checked), installed with the pinned
# typescript and express into the test app build/node-clients, whose
# "npm test" runs the suite; the JVM's jars (with -sources and -javadoc
# jars) are installed into build/m2 by clients/jvm/run-tests.sh. Then it
# runs the suites.
# Go's build cache is build/go-cache, so a repeat is fast. Prints each
# runner's own summary lines and the conformance table; exits non-zero on
# any failure.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BIN=${IDEMD_BIN:-$ROOT/build/idemd}
# Debian's interpreter: python3-pytest and mypy are installed for it.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)

# The PyPA build frontend that makes Python's sdist and wheel.
python_build_version=1.6.1
# The web frameworks the Python integrations are tested under (their own
# test clients: FastAPI/Starlette's TestClient on httpx2, Django's Client).
python_web=(fastapi==0.163.2 starlette==1.10.0 httpx2==2.16.2 django==5.2.17)

say() { printf '\n==> [%ds] %s\n' "$SECONDS" "$*"; }
fail=0 problems=() results=()
if [ ! -x "$BIN" ]; then echo "clients.sh: $BIN not built" >&2; exit 1; fi

# shellcheck source=tests/lib/stage.sh
. tests/lib/stage.sh
stage_start clients || exit 1

pg_use || { echo "clients.sh: PostgreSQL did not start" >&2; exit 1; }

say "starting two idemd servers on a fresh database"
pg_createdb idemd_clients || exit 1
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT1=$(free_port) PORT2=$(free_port) UPSTREAM_PORT=$(free_port)
conninfo="host=$IDEMD_TEST_PGHOST dbname=$DB user=$IDEMD_TEST_PGUSER"
write_config() {  # FILE PORT EXTRA_JSON
  cat >"$1" <<EOF
{"listen": "127.0.0.1:$2", "database_url": "$conninfo",
 "master_key_file": "$TMP/master.key", "pool_size": 4, "threads": 4$3}
EOF
}
write_config "$TMP/main.json" "$PORT1" ""
write_config "$TMP/main-gateway.json" "$PORT1" ', "routes": [{"method": "POST", "path": "/shop/orders",
 "tenant": "acme", "operation": "order.create", "upstream": "http://127.0.0.1:'"$UPSTREAM_PORT"'/orders"}]'
# Issue rate 1/s with a burst of 1 (429 on the second issue); a body of more
# than 1 MiB is over the in-flight budget (503) yet within max_body_bytes.
write_config "$TMP/limited.json" "$PORT2" ', "issue_rate_per_second": 1, "issue_burst": 1,
 "max_inflight_body_bytes": 1048576, "max_body_bytes": 4194304'
"$BIN" --config "$TMP/main.json" migrate >/dev/null || exit 1
tenant() { "$BIN" --config "$TMP/main.json" tenant create "$1" |
           "$PY" -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["api_key"])'; }
IDEMD_API_KEY=$(tenant acme) && IDEMD_API_KEY_2=$(tenant globex) || exit 1
# The gateway route names tenant acme: serve the config holding it only now
# that the tenant exists.
mv "$TMP/main-gateway.json" "$TMP/main.json"
"$BIN" --config "$TMP/main.json" check-config >/dev/null || exit 1
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
export IDEMD_GATEWAY_URL=$IDEMD_URL IDEMD_UPSTREAM_PORT=$UPSTREAM_PORT
# The gateway route's operation (the JVM suite may PUT it again: same policy).
curl -fsS -o /dev/null -X PUT "$IDEMD_URL/v1/operations/order.create" \
  -H "Authorization: Bearer $IDEMD_API_KEY" -H 'Content-Type: application/json' \
  -d '{"token_ttl_seconds": 3600, "retention_seconds": 86400, "lease_seconds": 30}' ||
  { echo "clients.sh: cannot create operation order.create" >&2; exit 1; }

# ---------------------------------------------------------------- Python
say "python: sdist and wheel (pyproject-build) into build/python-dist; what they hold"
export PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# The release artifacts, as a maintainer makes them: build (pinned, from
# PyPI) writes the sdist, then builds the wheel from that sdist, each in an
# isolated environment with setuptools fetched from PyPI. Its script, not
# python -m build: the directory build/ here would shadow the module.
dist=build/python-dist
rm -rf "$dist" && mkdir -p "$dist"
sdist= whl=
if "$PY" -m venv "$TMP/venv-build" &&
   "$TMP/venv-build/bin/pip" install -q "build==$python_build_version" &&
   "$TMP/venv-build/bin/pyproject-build" clients/python --outdir "$dist" \
     >"$TMP/python-build.log" 2>&1 &&
   sdist=$(ls "$dist"/idemd-*.tar.gz) && whl=$(ls "$dist"/idemd-*.whl) &&
   "$PY" - "$sdist" "$whl" clients/python/src/idemd <<'PY'
import os, sys, tarfile, zipfile
sdist, whl, src = sys.argv[1:]
pkg = {f for f in os.listdir(src) if f.endswith(".py") or f == "py.typed"}
top = os.path.basename(sdist)[: -len(".tar.gz")]
with tarfile.open(sdist) as t:
    in_sdist = {n.removeprefix(top + "/") for n in t.getnames()}
with zipfile.ZipFile(whl) as z:
    in_whl = set(z.namelist())
bad = []
bad += [f"sdist lacks {f}" for f in ["pyproject.toml", "README.md", "PKG-INFO"] if f not in in_sdist]
bad += [f"sdist lacks src/idemd/{f}" for f in sorted(pkg) if f"src/idemd/{f}" not in in_sdist]
bad += [f"wheel lacks idemd/{f}" for f in sorted(pkg) if f"idemd/{f}" not in in_whl]
bad += [f"wheel holds {f}" for f in sorted(in_whl)
        if not (f.startswith("idemd/") and f.removeprefix("idemd/") in pkg or ".dist-info/" in f)]
print(f"  {os.path.basename(sdist)}: {len(in_sdist)} entries; "
      f"{os.path.basename(whl)}: {len(in_whl)} files")
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
PY
then
  results+=("python build: ok ($(basename "$sdist"), $(basename "$whl"))")
else
  cat "$TMP/python-build.log" 2>/dev/null | tail -n 30
  results+=("python build: FAILED"); problems+=("python build"); fail=1
fi
rm -rf clients/python/build clients/python/src/idemd.egg-info

say "python: pip install from the checkout, the sdist and the wheel (fresh virtualenvs)"
# pytest comes from the system (Debian's python3-pytest), hence
# --system-site-packages; idemd itself is not there. From the checkout and
# from the sdist pip builds the package (setuptools from PyPI): those two
# run in the background, beside the wheel's install; the wheel's virtualenv
# also gets the web frameworks, and the tests run against it.
imports='import idemd, idemd.aio, idemd.asgi, sys; sys.exit(0 if idemd.Client else 1)'
install_from() {  # NAME FROM: FROM into the fresh virtualenv $TMP/venv-NAME
  [ -n "$2" ] && "$PY" -m venv --system-site-packages "$TMP/venv-$1" &&
    "$TMP/venv-$1/bin/pip" install -q "$2" &&
    (cd "$TMP" && "$TMP/venv-$1/bin/python" -c "$imports")
}
install_from checkout clients/python >"$TMP/pip-checkout.log" 2>&1 & pip_checkout=$!
install_from sdist "$sdist" >"$TMP/pip-sdist.log" 2>&1 & pip_sdist=$!
pids+=("$pip_checkout" "$pip_sdist")
venv=$TMP/venv
if [ -n "$whl" ] && "$PY" -m venv --system-site-packages "$venv" &&
   "$venv/bin/pip" install -q "$whl" "${python_web[@]}"; then
  results+=("pip install $(basename "$whl"): ok")
else
  results+=("pip install the wheel: FAILED"); problems+=("python wheel"); fail=1
fi
for what in checkout sdist; do
  if [ "$what" = checkout ]; then pid=$pip_checkout from=clients/python; else pid=$pip_sdist from=${sdist#"$dist"/}; fi
  if wait "$pid"; then
    results+=("pip install $from: ok")
  else
    cat "$TMP/pip-$what.log"
    results+=("pip install from the $what: FAILED"); problems+=("pip install ($what)"); fail=1
  fi
done
rm -rf clients/python/build clients/python/src/idemd.egg-info

say "python: mypy --strict on the idemd package"
if mypy --config-file clients/python/pyproject.toml --strict --cache-dir "$TMP/mypy-cache" \
     clients/python/src/idemd; then
  results+=("mypy: ok")
else
  results+=("mypy: FAILED"); problems+=("mypy"); fail=1
fi

say "python: pytest (against the installed package)"
(cd clients/python && "$venv/bin/python" -m pytest -p no:cacheprovider -q -rA tests) 2>&1 |
  tee "$TMP/pytest.log" | grep -v '^PASSED ' 
rc=${PIPESTATUS[0]}
line=$(grep -E '^=*\s*[0-9]+ (passed|failed)|^=*\s*[0-9]+ .*(passed|failed|error)' "$TMP/pytest.log" | tail -n 1)
results+=("pytest: ${line:-no summary}")
if [ "$rc" -ne 0 ]; then problems+=("pytest"); fail=1; fi

# ---------------------------------------------------------------- Node
say "node: npm pack clients/node into build/node-pack; what the tarball holds"
# The release artifact: what npm publish would upload. The stage asserts
# that it holds what an application needs (the sources the exports name,
# their .d.ts, README.md) and nothing else (no tests, no examples, no
# node_modules), then installs the test app from it, as from a registry.
pack=build/node-pack
rm -rf "$pack" && mkdir -p "$pack"
tgz=
if npm pack --loglevel=error --json --pack-destination "$pack" ./clients/node >"$TMP/npm-pack.json" &&
   tgz=$pack/$("$PY" -c 'import json,sys; print(json.load(sys.stdin)[0]["filename"])' <"$TMP/npm-pack.json") &&
   tar -tzf "$tgz" >"$TMP/npm-pack.files" &&
   "$PY" - "$TMP/npm-pack.files" clients/node/package.json <<'PY'
import json, sys
files = {l.strip().removeprefix("package/") for l in open(sys.argv[1]) if l.strip()}
pkg = json.load(open(sys.argv[2]))
named = {"package.json", "README.md", pkg["types"].removeprefix("./")}
for entry in pkg["exports"].values():
    named |= {p.removeprefix("./") for p in entry.values()}
missing = sorted(named - files)
def allowed(f):
    return (f in named or f == "browser.md" or f.endswith(".d.ts") or
            (f.startswith("src/") and f.endswith(".js")))
extra = sorted(f for f in files if not allowed(f))
print("  " + " ".join(sorted(files)))
if missing:
    print("missing from the tarball:", *missing)
if extra:
    print("not for the tarball:", *extra)
sys.exit(1 if missing or extra else 0)
PY
then
  results+=("npm pack $(basename "$tgz"): ok ($(wc -l <"$TMP/npm-pack.files") files, no tests)")
else
  results+=("npm pack: FAILED"); problems+=("npm pack"); fail=1
fi

say "node: the test app installs idemd from the tarball (typescript, express; build/node-clients)"
# The test app is build/node-clients: its package.json is written here, and
# its "npm test" runs the package's tests against the idemd that npm
# installed from the tarball (files, not a link to clients/node).
# typescript and express are the versions clients/node's devDependencies pin.
nm=build/node-clients
dev() { node -p "require('./clients/node/package.json').devDependencies['$1']"; }
typescript_version=$(dev typescript) express_version=$(dev express)
mkdir -p "$nm"
rm -rf "$nm/package-lock.json" "$nm/node_modules/idemd"
printf '%s\n' '{"name": "idemd-client-tests", "private": true, "type": "module",' \
  ' "scripts": {"test": "node --test --test-reporter=spec test/*.test.js"}}' >"$nm/package.json"
if [ -n "$tgz" ] && [ -f "$tgz" ] &&
   npm install --prefix "$nm" --save-exact --no-audit --no-fund --loglevel=error \
     "typescript@$typescript_version" "express@$express_version" "$ROOT/$tgz" &&
   [ -f "$nm/node_modules/idemd/package.json" ] && [ ! -L "$nm/node_modules/idemd" ]; then
  results+=("node install from $(basename "$tgz"): ok")
else
  results+=("node install: FAILED"); problems+=("node install"); fail=1
fi

say "node: tsc --noEmit (the package's types and a program using them)"
if "$nm/node_modules/.bin/tsc" -p clients/node/tsconfig.json --noEmit; then
  results+=("tsc: ok")
else
  results+=("tsc: FAILED"); problems+=("tsc"); fail=1
fi

say "node: npm test in the test app (node --test)"
# The tests import "idemd" and "express" as an application would: run them
# from where npm installed both.
rm -rf "$nm/test" && cp -r clients/node/test "$nm/test"
npm test --prefix "$nm" --silent 2>&1 | tee "$TMP/node.log"
rc=${PIPESTATUS[0]}
np=$(sed -nE 's/^ℹ pass ([0-9]+)$/\1/p' "$TMP/node.log" | tail -n 1)
nf=$(sed -nE 's/^ℹ fail ([0-9]+)$/\1/p' "$TMP/node.log" | tail -n 1)
results+=("node --test: ${np:-?} passed, ${nf:-?} failed")
if [ "$rc" -ne 0 ]; then problems+=("node --test"); fail=1; fi

# ---------------------------------------------------------------- Go
say "go: go vet and go test ./... in clients/go (standard library only)"
export GOCACHE=$ROOT/build/go-cache GOFLAGS=-mod=mod GOTOOLCHAIN=local
mkdir -p "$GOCACHE"
if ! command -v go >/dev/null; then
  echo "clients.sh: no go command (Go 1.22 or newer is needed)" >&2
  results+=("go: FAILED (no go command)"); problems+=("go"); fail=1
  : >"$TMP/go.log"
elif (cd clients/go && go vet ./...); then
  results+=("go vet: ok")
else
  results+=("go vet: FAILED"); problems+=("go vet"); fail=1
fi
if command -v go >/dev/null; then
  (cd clients/go && go test -count=1 -v ./...) >"$TMP/go.log" 2>&1
  rc=$?
  grep -E '^(\s*--- (PASS|FAIL|SKIP)|FAIL|ok|PASS)' "$TMP/go.log" | grep -v -- '--- PASS: TestConformance/' || true
  gp=$(grep -cE '^\s*--- PASS' "$TMP/go.log") gf=$(grep -cE '^\s*--- FAIL' "$TMP/go.log")
  gs=$(grep -cE '^\s*--- SKIP' "$TMP/go.log")
  results+=("go test: $gp passed, $gf failed, $gs skipped (subtests included)")
  if [ "$rc" -ne 0 ] || [ "$gs" -ne 0 ]; then
    grep -vE '^\s*(=== |--- PASS)' "$TMP/go.log" | tail -n 60; problems+=("go test"); fail=1
  fi
fi

# ---------------------------------------------------------------- JVM
if [ -f clients/jvm/run-tests.sh ]; then
  say "jvm: bash clients/jvm/run-tests.sh (bounded by 900 s)"
  timeout 900 bash clients/jvm/run-tests.sh 2>&1 | tee "$TMP/jvm.log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ]; then results+=("jvm: ok"); else
    results+=("jvm: FAILED (exit $rc)"); problems+=("jvm"); fail=1; fi
fi

# ---------------------------------------------------------------- conformance table
say "conformance: scenario x language"
{
  printf '%-40s %-7s %-7s %-7s %s\n' scenario python node go jvm
  for f in clients/conformance/*.json; do
    n=$(basename "$f" .json)
    py=$(grep -qE "test_conformance\[$n\] PASSED|PASSED tests/test_conformance.py::test_conformance\[$n\]" "$TMP/pytest.log" && echo pass ||
         { grep -q "test_conformance\[$n\]" "$TMP/pytest.log" && echo FAIL || echo '?'; })
    nd=$(grep -qE "^\s*✔ conformance: $n " "$TMP/node.log" && echo pass ||
         { grep -qE "conformance: $n " "$TMP/node.log" && echo FAIL || echo '?'; })
    go=$(grep -qE -- "--- PASS: TestConformance/$n " "$TMP/go.log" && echo pass ||
         { grep -qE -- "--- FAIL: TestConformance/$n " "$TMP/go.log" && echo FAIL || echo '?'; })
    jv='-'
    if [ -f "$TMP/jvm.log" ]; then
      jv=$(grep -qiE "conformance.*\b$n\b.*(FAIL|✘)|(FAIL|✘).*\b$n\b" "$TMP/jvm.log" && echo FAIL ||
           { grep -qE "\b$n\b" "$TMP/jvm.log" && echo pass || echo '?'; })
    fi
    printf '%-40s %-7s %-7s %-7s %s\n' "$n" "$py" "$nd" "$go" "$jv"
  done
} | tee "$TMP/conformance.txt"
if grep -qE ' FAIL' "$TMP/conformance.txt"; then problems+=("conformance"); fail=1; fi

say "clients summary"
printf '  %s\n' "${results[@]}"
if [ "${#problems[@]}" -gt 0 ]; then printf '  FAILED: %s\n' "${problems[@]}"; fi
[ "$fail" -eq 0 ]
