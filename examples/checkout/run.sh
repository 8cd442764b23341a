#!/usr/bin/env bash
# Runs the checkout example: a private PostgreSQL, idemd (with the gateway
# route POST /orders -> the shop) and the shop, all on 127.0.0.1. Open the
# printed URL; Ctrl-C stops the shop, idemd and the database.
#
#   examples/checkout/run.sh
#
# Ports: IDEMD_PORT (8080: idemd's API and gateway), SHOP_PORT (8090: the
# page), SHOP_UPSTREAM_PORT (8091: the shop's POST /orders, for idemd only).
# State (database cluster, keys) is kept in .idemd/checkout; delete it to
# start over.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
STATE=$ROOT/.idemd/checkout
IDEMD_PORT=${IDEMD_PORT:-8080}
SHOP_PORT=${SHOP_PORT:-8090}
SHOP_UPSTREAM_PORT=${SHOP_UPSTREAM_PORT:-8091}
IDEMD_URL=http://127.0.0.1:$IDEMD_PORT
SHOP_URL=http://127.0.0.1:$SHOP_PORT
PIDS=()

say() { printf '\n==> %s\n' "$*"; }
die() { echo "checkout: $*" >&2; exit 1; }
pg() { bash "$ROOT/deploy/pg.sh" "$@"; }

# shellcheck disable=SC2317
cleanup() {
  trap - EXIT INT TERM
  for pid in "${PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [ -d "$STATE/pg" ] && pg status "$STATE/pg"; then
    say "stopping PostgreSQL"
    pg stop "$STATE/pg" || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# wait_http URL PID NAME [LOG]: until URL answers 200, or PID exits (then
# LOG, where PID's output went, is shown).
wait_http() {
  for _ in $(seq 150); do
    curl -fs -o /dev/null "$1" && return 0
    if ! kill -0 "$2" 2>/dev/null; then
      [ -z "${4:-}" ] || cat "$4" >&2
      die "$3 exited (see above); is its port in use?"
    fi
    sleep 0.2
  done
  die "$3 did not answer on $1"
}

say "checking packages"
bash deploy/deps.sh

say "building idemd and the shop"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIDEMD_WERROR=OFF -DIDEMD_SANITIZE=OFF >/dev/null
cmake --build build -j2 --target idemd checkout-shop

mkdir -p "$STATE"
chmod 711 "$ROOT/.idemd" "$STATE"   # PostgreSQL may run as another user (idemd-pg)
say "starting PostgreSQL in .idemd/checkout/pg"
pg init "$STATE/pg"
pg start "$STATE/pg"
pg createdb "$STATE/pg" idemd
pg createdb "$STATE/pg" shop

# idemd's config: the page comes from the shop's origin and submits to idemd's
# gateway, another origin, hence cors_origins. SETUP_CONF is the same without
# the route and CORS, for the idemd that creates the route's operation.
CONF=$STATE/idemd.json
SETUP_CONF=$STATE/idemd-setup.json
python3 - "$CONF" "$SETUP_CONF" "$IDEMD_PORT" "$(pg conninfo "$STATE/pg" idemd)" \
          "$STATE/master.key" "$SHOP_PORT" "$SHOP_UPSTREAM_PORT" <<'PY'
import json, sys
path, setup_path, port, db, key, shop, upstream = sys.argv[1:]
cfg = {
    "listen": "127.0.0.1:%s" % port,
    "database_url": db,
    "master_key_file": key,
}
setup = dict(cfg, pool_size=1)
cfg["cors_origins"] = ["http://127.0.0.1:%s" % shop, "http://localhost:%s" % shop]
cfg["routes"] = [{
    "method": "POST", "path": "/orders", "tenant": "shop",
    "operation": "order.create",
    "upstream": "http://127.0.0.1:%s" % upstream,
    "store_headers": ["location"],
    "timeout_ms": 10000,
}]
for p, c in ((path, cfg), (setup_path, setup)):
    with open(p, "w") as f:
        json.dump(c, f, indent=2)
        f.write("\n")
PY
IDEMD=(build/idemd --config "$CONF")

say "migrating idemd's database"
"${IDEMD[@]}" migrate
if [ ! -s "$STATE/shop.key" ]; then
  say "creating the tenant shop"
  out=$("${IDEMD[@]}" tenant create shop) || die "tenant create failed (delete .idemd/checkout to start over)"
  (umask 077 && printf '%s' "$out" |
     python3 -c 'import json,sys; print(json.load(sys.stdin)["api_key"])' > "$STATE/shop.key")
fi
KEY=$(cat "$STATE/shop.key")

# The gateway route needs its operation when idemd starts (else idemd warns
# that its submits are refused until it exists), and operations are made
# through the API: an idemd without the route creates it, then stops.
# order.create guards the counter orders:{subject}: a page rendered before
# the user's last order carries an old version and is refused 412.
say "creating the operation order.create"
build/idemd --config "$SETUP_CONF" serve 2>"$STATE/setup.log" &
PIDS+=($!)
wait_http "$IDEMD_URL/healthz" "${PIDS[-1]}" idemd "$STATE/setup.log"
if ! curl -fsS -o /dev/null -X PUT "$IDEMD_URL/v1/operations/order.create" \
       -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
       -d '{"token_ttl_seconds":3600,"retention_seconds":86400,"lease_seconds":30,"version_key":"orders:{subject}"}'; then
  cat "$STATE/setup.log" >&2
  die "could not create the operation order.create"
fi
kill -TERM "${PIDS[-1]}"
wait "${PIDS[-1]}" || { cat "$STATE/setup.log" >&2; die "idemd did not stop cleanly"; }
unset 'PIDS[-1]'

say "starting idemd on $IDEMD_URL"
"${IDEMD[@]}" serve &
PIDS+=($!)
wait_http "$IDEMD_URL/healthz" "${PIDS[-1]}" idemd

say "starting the shop on $SHOP_URL"
build/examples/checkout/checkout-shop \
  --listen "127.0.0.1:$SHOP_PORT" --upstream-listen "127.0.0.1:$SHOP_UPSTREAM_PORT" \
  --database-url "$(pg conninfo "$STATE/pg" shop)" \
  --idemd-url "$IDEMD_URL" --api-key-file "$STATE/shop.key" \
  --order-delay-ms "${SHOP_ORDER_DELAY_MS:-300}" &
PIDS+=($!)
wait_http "$SHOP_URL/healthz" "${PIDS[-1]}" "the shop"

cat <<EOF

The checkout is running: open $SHOP_URL/ (Ctrl-C stops everything).

  page      $SHOP_URL/            served by the shop, which asks idemd for a token as it renders
  gateway   $IDEMD_URL/orders     where the page submits (idemd claims, forwards once, replays)
  upstream  http://127.0.0.1:$SHOP_UPSTREAM_PORT/orders  the shop's order endpoint, for idemd only

Try: double-click Pay; open the page in two tabs and pay in both; or see the
orders with
  bash deploy/pg.sh psql .idemd/checkout/pg -d shop -c 'SELECT * FROM orders'
EOF
status=0
wait -n "${PIDS[@]}" || status=$?
echo "checkout: idemd or the shop stopped; stopping the rest" >&2
exit "$status"
