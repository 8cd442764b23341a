#!/usr/bin/env bash
# The Debian package's stage: builds idemd_VERSION-1_ARCH.deb with CPack
# (build tree build-pkg: RelWithDebInfo, prefix /usr, only the idemd
# target), checks its control data and contents with dpkg-deb -I/-c,
# unpacks it with dpkg -x into a scratch root and runs the unpacked binary,
# copied alone into a directory with no source tree, through migrate, tenant
# create, serve and one issue/claim/complete/replay over HTTP against a real
# PostgreSQL; checks the unit with systemd-analyze verify where that exists.
#
# As root it also installs the package on this machine (dpkg -i): checks the
# idemd user, the owners and modes of /etc/idemd, its config and master key,
# that the idemd user can read them and another user cannot, runs the
# installed /usr/bin/idemd with the installed config, then purges the
# package (dpkg -P) and removes what purge keeps on purpose (the master key,
# the idemd user) when they were not there before; also when a step fails.
# It refuses to run that part when idemd is already installed or
# /etc/idemd exists. Not root: that part is reported as not run, and under
# CI=true that is a failure.
#
# tests/run.sh calls it with IDEMD_TEST_PGHOST and IDEMD_TEST_PGUSER set; run
# alone, it starts its own cluster with deploy/pg.sh. Ends with "package: N
# passed, N failed"; exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BUILD=${IDEMD_PACKAGE_BUILD_DIR:-$ROOT/build-pkg}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
PSQL=${IDEMD_TEST_PSQL:-/usr/lib/postgresql/15/bin/psql}
[ -x "$PSQL" ] || PSQL=psql

say() { printf '\n==> %s\n' "$*"; }
passed=0 failed=0
ok() { echo "ok: $*"; passed=$((passed + 1)); }
bad() { echo "FAILED: $*" >&2; failed=$((failed + 1)); }
check() {  # DESCRIPTION COMMAND...: counts it; returns the command's success
  local what=$1; shift
  if "$@"; then ok "$what"; else bad "$what"; return 1; fi
}

TMP=$(mktemp -d /tmp/idemd-package.XXXXXX) || exit 1
chmod 711 "$TMP"
pids=() dbs=() own_pg=0
machine=0 had_user=1
# shellcheck disable=SC2317
cleanup() {
  local p d
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  if [ "$machine" = 1 ]; then restore_machine; fi
  for d in "${dbs[@]}"; do
    PGHOST=$IDEMD_TEST_PGHOST PGUSER=$IDEMD_TEST_PGUSER \
      "$PSQL" -X -q -d postgres -c "DROP DATABASE IF EXISTS \"$d\" WITH (FORCE)" >/dev/null 2>&1
  done
  if [ "$own_pg" = 1 ]; then bash deploy/pg.sh stop "$TMP/pg" >/dev/null 2>&1; fi
  rm -rf "$TMP"
}
# dpkg ARGS, waiting up to 3 minutes while another dpkg or apt holds its lock
dpkg_w() {
  local out rc
  for _ in $(seq 1 90); do
    out=$(timeout 300 dpkg "$@" 2>&1)
    rc=$?
    printf '%s\n' "$out"
    grep -q 'dpkg frontend lock\|lock was locked by another process' <<<"$out" || return "$rc"
    echo "package.sh: dpkg is locked by another process; waiting" >&2
    sleep 2
  done
  return 1
}
# shellcheck disable=SC2317
restore_machine() {
  machine=0
  dpkg_w -P idemd >/dev/null 2>&1
  rm -rf /etc/idemd
  if [ "$had_user" = 0 ]; then
    userdel idemd >/dev/null 2>&1
    groupdel idemd >/dev/null 2>&1
  fi
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for tool in cmake cpack dpkg-deb dpkg-shlibdeps curl; do
  command -v "$tool" >/dev/null || { echo "package.sh: $tool is not installed" >&2; exit 1; }
done

if [ -z "${IDEMD_TEST_PGHOST:-}" ] || [ -z "${IDEMD_TEST_PGUSER:-}" ]; then
  say "starting a throwaway PostgreSQL"
  if ! { bash deploy/pg.sh init "$TMP/pg" >/dev/null && bash deploy/pg.sh start "$TMP/pg" >/dev/null; }; then
    echo "package.sh: PostgreSQL did not start" >&2; exit 1
  fi
  own_pg=1
  IDEMD_TEST_PGHOST=$(bash deploy/pg.sh socket "$TMP/pg")
  IDEMD_TEST_PGUSER=$(bash deploy/pg.sh role "$TMP/pg")
fi

say "building the package (cpack -G DEB in $BUILD)"
rm -f "$BUILD"/idemd_*.deb
if ! { cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr \
         -DIDEMD_SYSTEMD_UNIT_DIR=/lib/systemd/system -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON \
         >/dev/null &&
       cmake --build "$BUILD" -j2 --target idemd >/dev/null &&
       (cd "$BUILD" && cpack -G DEB >"$TMP/cpack.log" 2>&1); }; then
  cat "$TMP/cpack.log" 2>/dev/null
  echo "package.sh: the package did not build" >&2
  echo "package: 0 passed, 1 failed"
  exit 1
fi
debs=("$BUILD"/idemd_*.deb)
DEB=${debs[0]}
if [ "${#debs[@]}" -ne 1 ] || [ ! -f "$DEB" ]; then
  echo "package.sh: expected one idemd_*.deb in $BUILD, found: ${debs[*]}" >&2; exit 1
fi
echo "built $DEB ($(stat -c %s "$DEB") bytes)"
# the same tree as Debian revision 2, to upgrade the installed package to
mkdir -p "$TMP/rev2"
if ! (cd "$BUILD" && cpack -G DEB -D CPACK_DEBIAN_PACKAGE_RELEASE=2 \
        -D CPACK_PACKAGE_DIRECTORY="$TMP/rev2" >"$TMP/cpack2.log" 2>&1); then
  cat "$TMP/cpack2.log"; echo "package.sh: revision 2 did not build" >&2; exit 1
fi
DEB2=$(echo "$TMP"/rev2/idemd_*-2_*.deb)

say "dpkg-deb -I"
dpkg-deb -I "$DEB" | tee "$TMP/info"
depends=$(dpkg-deb -f "$DEB" Depends)
for lib in libmicrohttpd12 libpq5 libsodium23 libjansson4 libcurl4 libc6; do
  check "Depends names $lib" grep -Eq "(^|, )$lib( \(|,|$)" <<<"$depends"
done
check "Package is idemd" test "$(dpkg-deb -f "$DEB" Package)" = idemd
check "Version is the project's, Debian revision 1" \
  grep -Eq '^[0-9]+\.[0-9]+\.[0-9]+-1$' <<<"$(dpkg-deb -f "$DEB" Version)"
mkdir -p "$TMP/control"
dpkg-deb -e "$DEB" "$TMP/control"
check "conffiles: the config and its example" \
  test "$(cat "$TMP/control/conffiles")" = "$(printf '/etc/idemd/idemd.json\n/etc/idemd/idemd.json.example')"
for s in postinst prerm postrm; do
  check "$s present and executable" test -x "$TMP/control/$s"
done
check "postinst passes sh -n" sh -n "$TMP/control/postinst"

say "dpkg-deb -c"
dpkg-deb -c "$DEB" | tee "$TMP/contents"
has() {  # MODE PATH: a line of dpkg-deb -c with that mode, owner root/root and path
  grep -Eq "^$1 root/root +[0-9]+ [0-9-]+ [0-9:]+ \./$2\$" "$TMP/contents"
}
check "/usr/bin/idemd 0755" has -rwxr-xr-x usr/bin/idemd
check "/lib/systemd/system/idemd.service" has -rw-r--r-- lib/systemd/system/idemd.service
check "/usr/lib/sysusers.d/idemd.conf" has -rw-r--r-- usr/lib/sysusers.d/idemd.conf
check "/etc/idemd/idemd.json 0640 (root:idemd from the postinst)" has -rw-r----- etc/idemd/idemd.json
check "no master key in the package" bash -c "! grep -q master.key '$TMP/contents'"
check "nothing under /usr/local or /work" bash -c "! grep -Eq '\./(usr/local|work)/' '$TMP/contents'"
if command -v lintian >/dev/null; then
  say "lintian (information only)"
  timeout 300 lintian --no-tag-display-limit "$DEB" || true
else
  echo "lintian: not installed, not run"
fi

# exercise BINARY CONFIG_ARGS... -- ENV...: migrate, tenant create, serve,
# then issue/claim/complete/replay over HTTP; run from $WORK.
DBN=0
exercise() {
  local bin=$1 cfg=$2 label=$3 db port key srv tok body rc
  shift 3
  DBN=$((DBN + 1))
  db=idemd_package_${DBN}_$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
  PGHOST=$IDEMD_TEST_PGHOST PGUSER=$IDEMD_TEST_PGUSER \
    "$PSQL" -X -q -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE \"$db\"" || return 1
  dbs+=("$db")
  port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  local -a env=(env -i PATH=/usr/bin:/bin "IDEMD_LISTEN=127.0.0.1:$port"
    "IDEMD_DATABASE_URL=host=$IDEMD_TEST_PGHOST dbname=$db user=$IDEMD_TEST_PGUSER" "$@")
  (cd "$WORK" && timeout 60 "${env[@]}" "$bin" --config "$cfg" migrate) 2>&1 | tail -n 3
  rc=${PIPESTATUS[0]}
  check "$label: migrate exits 0" test "$rc" = 0 || return 1
  key=$(cd "$WORK" && timeout 60 "${env[@]}" "$bin" --config "$cfg" tenant create pkg |
        "$PY" -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])["api_key"])')
  check "$label: tenant create" test -n "$key" || return 1
  (cd "$WORK" && exec "${env[@]}" "$bin" --config "$cfg" serve 2>"$TMP/serve-$DBN.log") &
  srv=$!
  pids+=("$srv")
  local ready=0
  for _ in $(seq 1 100); do
    if curl -fsS -o /dev/null "http://127.0.0.1:$port/readyz" 2>/dev/null; then ready=1; break; fi
    kill -0 "$srv" 2>/dev/null || break
    sleep 0.1
  done
  check "$label: serve ready" test "$ready" = 1 || { cat "$TMP/serve-$DBN.log"; return 1; }
  req() {  # METHOD PATH BODY -> "STATUS REPLAYED_HEADER\nBODY" in $TMP/resp
    curl -sS -o "$TMP/body" -D "$TMP/headers" -X "$1" -H "Authorization: Bearer $key" \
      -H 'Content-Type: application/json' --data "$3" "http://127.0.0.1:$port$2" \
      -w '%{http_code}'
  }
  check "$label: PUT operation 201" test "$(req PUT /v1/operations/pkg.op \
    '{"token_ttl_seconds":3600,"retention_seconds":86400,"lease_seconds":30}')" = 201
  check "$label: issue 201" test "$(req POST /v1/tokens '{"operation":"pkg.op","subject":"u1"}')" = 201
  tok=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["token"])' "$TMP/body")
  check "$label: claim 201" test "$(req POST "/v1/tokens/$tok/claim" '{}')" = 201
  check "$label: complete 200" test "$(req POST "/v1/tokens/$tok/complete" \
    '{"attempt":1,"status":201,"body":{"order":42}}')" = 200
  check "$label: duplicate claim replays 200" test "$(req POST "/v1/tokens/$tok/claim" '{}')" = 200
  check "$label: Idempotent-Replayed: true" grep -qi '^Idempotent-Replayed: true' "$TMP/headers"
  body=$("$PY" -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["response"]["body"]))' "$TMP/body")
  check "$label: the stored body comes back" test "$body" = '{"order": 42}'
  kill -TERM "$srv"
  wait "$srv"
  rc=$?
  check "$label: serve exits 0 on SIGTERM" test "$rc" = 0
}

say "dpkg -x into a scratch root; the binary alone, away from the source tree"
SCRATCH=$TMP/root WORK=$TMP/work
mkdir -p "$SCRATCH" "$WORK"
dpkg -x "$DEB" "$SCRATCH"
cp "$SCRATCH/usr/bin/idemd" "$WORK/idemd"
check "unpacked binary resolves its libraries" bash -c "! ldd '$WORK/idemd' | grep -q 'not found'"
check "binary does not name the source tree's migrations" \
  bash -c "! grep -aq '$ROOT/migrations' '$WORK/idemd'"
"$PY" - "$SCRATCH/etc/idemd/idemd.json" "$WORK/idemd.json" "$WORK/master.key" <<'EOF'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["master_key_file"] = sys.argv[3]
json.dump(cfg, open(sys.argv[2], "w"))
EOF
exercise "$WORK/idemd" "$WORK/idemd.json" "scratch root"
check "migrate made the master key 0600" test "$(stat -c %a "$WORK/master.key")" = 600

verify_unit() {  # UNIT BINARY LABEL
  if ! command -v systemd-analyze >/dev/null; then
    echo "systemd-analyze: not installed, unit not verified"; return 0
  fi
  local copy=$TMP/idemd.service out rc
  sed "s|/usr/bin/idemd|$2|" "$1" >"$copy"
  out=$(timeout 60 systemd-analyze verify "$copy" 2>&1)
  rc=$?
  echo "systemd-analyze verify ($3) exit $rc: ${out:-(printed nothing)}"
  check "systemd-analyze verify ($3): exit 0, nothing printed" test "$rc" = 0 -a -z "$out"
}
verify_unit "$SCRATCH/lib/systemd/system/idemd.service" "$WORK/idemd" "scratch root"

say "dpkg -i on this machine, then dpkg -P"
if [ "$(id -u)" -ne 0 ]; then
  echo "machine install: not run (needs root)"
  if [ "${CI:-}" = true ]; then bad "machine install (CI runs as root)"; fi
elif dpkg-query -W -f='${db:Status-Status}' idemd 2>/dev/null | grep -qv '^not-installed$' ||
     [ -e /etc/idemd ]; then
  bad "machine install: idemd is already installed here or /etc/idemd exists; not touched"
else
  getent passwd idemd >/dev/null || had_user=0
  machine=1
  if dpkg_w -i "$DEB"; then
    ok "dpkg -i"
    # shellcheck disable=SC2016
    check "user idemd exists, a system user with no login shell" \
      bash -c '[ "$(getent passwd idemd | cut -d: -f3)" -lt 1000 ] &&
               getent passwd idemd | grep -Eq ":(/usr/sbin/nologin|/sbin/nologin|/bin/false)$"'
    check "/etc/idemd root:idemd 0750" test "$(stat -c '%U:%G %a' /etc/idemd)" = "root:idemd 750"
    check "/etc/idemd/idemd.json root:idemd 0640" \
      test "$(stat -c '%U:%G %a' /etc/idemd/idemd.json)" = "root:idemd 640"
    check "/etc/idemd/master.key idemd:idemd 0600" \
      test "$(stat -c '%U:%G %a' /etc/idemd/master.key)" = "idemd:idemd 600"
    check "master key: 64 hex characters" grep -Eqx '[0-9a-f]{64}' /etc/idemd/master.key
    check "the idemd user reads the config and the key" \
      runuser -u idemd -- sh -c 'cat /etc/idemd/idemd.json /etc/idemd/master.key >/dev/null'
    check "user nobody reads neither" \
      runuser -u nobody -- sh -c '! cat /etc/idemd/idemd.json 2>/dev/null && ! cat /etc/idemd/master.key 2>/dev/null'
    check "check-config as idemd on the installed config" \
      runuser -u idemd -- /usr/bin/idemd --config /etc/idemd/idemd.json check-config
    check "dpkg -V idemd: files as packaged" dpkg -V idemd
    WORK=$TMP/machine
    mkdir -p "$WORK"
    exercise /usr/bin/idemd /etc/idemd/idemd.json "installed"
    verify_unit /lib/systemd/system/idemd.service /usr/bin/idemd "installed"
    key_before=$(cat /etc/idemd/master.key)
    # an upgrade keeps the operator's config, the master key and the modes
    sed -i 's/127.0.0.1:8080/127.0.0.1:8181/' /etc/idemd/idemd.json
    if check "dpkg -i of revision 2 over revision 1" dpkg_w -i "$DEB2"; then
      check "upgraded: version 0.1.0-2" \
        test "$(dpkg-query -W -f='${Version}' idemd)" = "$(dpkg-deb -f "$DEB2" Version)"
      check "upgraded: the edited config kept" grep -q '127.0.0.1:8181' /etc/idemd/idemd.json
      check "upgraded: the master key kept" test "$(cat /etc/idemd/master.key)" = "$key_before"
      check "upgraded: owners and modes kept" test "$(stat -c '%U:%G %a' /etc/idemd \
        /etc/idemd/idemd.json /etc/idemd/master.key | tr '\n' ' ')" = \
        "root:idemd 750 root:idemd 640 idemd:idemd 600 "
    fi
    check "dpkg -P" dpkg_w -P idemd
    check "purged: binary, unit and config gone" \
      test ! -e /usr/bin/idemd -a ! -e /lib/systemd/system/idemd.service -a ! -e /etc/idemd/idemd.json
    check "purge kept the master key" test "$(cat /etc/idemd/master.key 2>/dev/null)" = "$key_before"
  else
    bad "dpkg -i"
  fi
  restore_machine
  check "machine restored: no idemd package, no /etc/idemd" \
    bash -c "! dpkg-query -W -f='\${db:Status-Status}' idemd 2>/dev/null | grep -q '^installed' && test ! -e /etc/idemd"
  if [ "$had_user" = 0 ]; then
    check "machine restored: no idemd user" bash -c '! getent passwd idemd >/dev/null'
  fi
fi

echo
echo "package: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
