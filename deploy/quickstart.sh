#!/usr/bin/env bash
# Quick start: installs what is missing, builds idemd, keeps a private
# PostgreSQL cluster and config in .idemd/, creates a "demo" tenant with an
# "order.create" operation on first run, and runs idemd in the foreground.
# Ctrl-C stops idemd, then the cluster. Later runs reuse data and API key.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
STATE=$ROOT/.idemd
CONF=$STATE/idemd.json
IDEMD_PID=

say() { printf '\n==> %s\n' "$*"; }
die() { echo "quickstart: $*" >&2; exit 1; }
pg() { bash "$ROOT/deploy/pg.sh" "$@"; }

# shellcheck disable=SC2317
cleanup() {
  trap - EXIT INT TERM
  if [ -n "$IDEMD_PID" ] && kill -0 "$IDEMD_PID" 2>/dev/null; then
    say "stopping idemd"
    kill -TERM "$IDEMD_PID" 2>/dev/null || true
    wait "$IDEMD_PID" 2>/dev/null || true
  fi
  rm -f "$STATE/idemd.pid"
  if [ -d "$STATE/pg" ] && pg status "$STATE/pg"; then
    say "stopping PostgreSQL"
    pg stop "$STATE/pg" || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "checking packages"
bash deploy/deps.sh

# Only the server: the unit tests and the checkout example are built by
# tests/run.sh and examples/checkout/run.sh when they are wanted.
say "building idemd"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIDEMD_WERROR=OFF -DIDEMD_SANITIZE=OFF >/dev/null
cmake --build build -j2 --target idemd
IDEMD=(build/idemd --config "$CONF")

mkdir -p "$STATE"
chmod 711 "$STATE"   # PostgreSQL may run as another user (idemd-pg)
say "starting PostgreSQL in .idemd/pg"
pg init "$STATE/pg"
pg start "$STATE/pg"
pg createdb "$STATE/pg" idemd

if [ ! -f "$CONF" ]; then
  python3 - "$CONF" "${IDEMD_LISTEN:-127.0.0.1:8080}" "$(pg conninfo "$STATE/pg" idemd)" \
            "$STATE/master.key" <<'EOF'
import json, sys
path, listen, db, key = sys.argv[1:]
with open(path, "w") as f:
    json.dump({"listen": listen, "database_url": db, "master_key_file": key}, f, indent=2)
    f.write("\n")
EOF
  echo "wrote $CONF"
fi

say "migrating"
"${IDEMD[@]}" migrate

if [ ! -s "$STATE/demo.key" ]; then
  say "creating tenant demo"
  out=$("${IDEMD[@]}" tenant create demo) || die "tenant create failed (delete .idemd to start over)"
  key=$(printf '%s' "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["api_key"])')
  (umask 077 && printf '%s\n' "$key" > "$STATE/demo.key")
fi
KEY=$(cat "$STATE/demo.key")

listen=${IDEMD_LISTEN:-$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("listen", "127.0.0.1:8080"))' "$CONF")}
host=${listen%:*} port=${listen##*:}
case "$host" in ''|0.0.0.0|'*') host=127.0.0.1 ;; '[::]'|::) host='[::1]' ;; esac
BASE=http://$host:$port
# with admin_listen set, /healthz is served there and the public port answers 404
admin=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("admin_listen", ""))' "$CONF")
HEALTH=$BASE/healthz
if [ -n "$admin" ]; then
  ahost=${admin%:*} aport=${admin##*:}
  case "$ahost" in ''|0.0.0.0|'*') ahost=127.0.0.1 ;; '[::]'|::) ahost='[::1]' ;; esac
  HEALTH=http://$ahost:$aport/healthz
fi

say "starting idemd on $listen"
"${IDEMD[@]}" serve &
IDEMD_PID=$!
echo "$IDEMD_PID" > "$STATE/idemd.pid"    # for SIGHUP: kill -HUP $(cat .idemd/idemd.pid)
for _ in $(seq 150); do
  curl -fs -o /dev/null "$HEALTH" && break
  kill -0 "$IDEMD_PID" 2>/dev/null || die "idemd exited (its log above says why)"
  sleep 0.2
done
curl -fs -o /dev/null "$HEALTH" || die "idemd did not answer on $HEALTH"

AUTH="Authorization: Bearer $KEY"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "$AUTH" "$BASE/v1/operations/order.create")
if [ "$code" = 404 ]; then
  curl -fsS -o /dev/null -X PUT "$BASE/v1/operations/order.create" -H "$AUTH" \
       -H "Content-Type: application/json" \
       -d '{"token_ttl_seconds":3600,"retention_seconds":86400,"lease_seconds":30,"version_key":"orders:{subject}"}' \
    || die "could not create operation order.create"
fi

cat <<EOF

idemd is running on $BASE (Ctrl-C to stop it and its database).
Tenant "demo", operation "order.create". API key (also in .idemd/demo.key):

  $KEY

Issue a token:

  curl -s -X POST $BASE/v1/tokens -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" -d '{"operation":"order.create","subject":"user-42"}'

Then claim it with the token it returned:

  curl -s -X POST $BASE/v1/tokens/TOKEN/claim -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" -d '{"request":{"item":"book"}}'

EOF
status=0
wait "$IDEMD_PID" || status=$?
IDEMD_PID=
exit "$status"
