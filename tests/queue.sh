#!/usr/bin/env bash
# The queue-consumer stage: RabbitMQ redelivers, consumers are killed, and
# every payment still happens exactly once per message id, except where a
# kill fell between a payment and its acknowledged complete, and no more
# often than such kills (tests/queue/chaos.py). A short negative control
# follows: the same consumers with a fresh idemd key per delivery must
# fail those checks, or the stage fails.
#
# Starts, all on 127.0.0.1 and all stopped on exit (failure included): a
# PostgreSQL cluster (unless IDEMD_TEST_PGHOST/IDEMD_TEST_PGUSER name one, as
# tests/run.sh does), one idemd on a fresh database, a private epmd and a
# RabbitMQ node (Debian's rabbitmq-server, run from a temporary directory:
# its own HOME, cookie, Mnesia and logs). Then runs tests/queue/chaos.py with
# Debian's python3 (pika) and the idemd package from clients/python/src.
# Ends with "queue: ok" or "queue: FAILED"; exits non-zero on any failure.
# QUEUE_MESSAGES (10000), QUEUE_SEED (17) and QUEUE_CONTROL_MESSAGES (1500,
# the negative control's; 0 leaves it out) tune the run.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BIN=${IDEMD_BIN:-$ROOT/build/idemd}
PY=/usr/bin/python3
RABBIT=/usr/lib/rabbitmq/bin

say() { printf '\n==> %s\n' "$*"; }
die() { echo "queue.sh: $*" >&2; echo "queue: FAILED"; exit 1; }
[ -x "$BIN" ] || die "$BIN not built"
[ -x "$RABBIT/rabbitmq-server" ] || die "rabbitmq-server is not installed (bash deploy/deps.sh --test)"
"$PY" -c 'import pika' 2>/dev/null || die "python3-pika is not installed (bash deploy/deps.sh --test)"

TMP=$(mktemp -d /tmp/idemd-queue.XXXXXX) || exit 1
chmod 711 "$TMP"
# shellcheck source=tests/lib/pg.sh
. tests/lib/pg.sh
pids=() DB='' rabbit_pid='' epmd_pid=''
# shellcheck disable=SC2317
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  if [ -n "$rabbit_pid" ]; then
    kill "$rabbit_pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$rabbit_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$rabbit_pid" 2>/dev/null; wait "$rabbit_pid" 2>/dev/null
  fi
  # The Erlang VM's helpers (erl_child_setup, inet_gethost) die with it;
  # epmd is ours and goes last.
  if [ -n "$epmd_pid" ]; then kill "$epmd_pid" 2>/dev/null; wait "$epmd_pid" 2>/dev/null; fi
  pg_cleanup
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# ---------------------------------------------------------------- idemd
pg_use || die "PostgreSQL did not start"

say "starting idemd on a fresh database"
pg_createdb idemd_queue || die "CREATE DATABASE failed"
IDEMD_PORT=$(free_port)
cat >"$TMP/idemd.json" <<EOF
{"listen": "127.0.0.1:$IDEMD_PORT",
 "database_url": "host=$IDEMD_TEST_PGHOST dbname=$DB user=$IDEMD_TEST_PGUSER",
 "master_key_file": "$TMP/master.key", "pool_size": 8, "threads": 8}
EOF
"$BIN" --config "$TMP/idemd.json" migrate >/dev/null 2>"$TMP/migrate.log" ||
  { cat "$TMP/migrate.log" >&2; die "idemd migrate failed"; }
IDEMD_API_KEY=$("$BIN" --config "$TMP/idemd.json" tenant create shop |
  "$PY" -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["api_key"])') ||
  die "idemd tenant create failed"
"$BIN" --config "$TMP/idemd.json" serve 2>"$TMP/idemd.log" &
pids+=($!)
for _ in $(seq 100); do
  curl -fs "http://127.0.0.1:$IDEMD_PORT/readyz" >/dev/null && break
  sleep 0.1
done
curl -fs "http://127.0.0.1:$IDEMD_PORT/readyz" >/dev/null || { cat "$TMP/idemd.log" >&2; die "idemd did not start"; }

# ---------------------------------------------------------------- RabbitMQ
say "starting RabbitMQ (private epmd, loopback only)"
R=$TMP/rabbit
mkdir -p "$R/mnesia" "$R/log" "$R/home"
EPMD_PORT=$(free_port) AMQP_PORT=$(free_port) DIST_PORT=$(free_port)
echo '[].' >"$R/enabled_plugins"
: >"$R/rabbitmq-env.conf"
cat >"$R/rabbitmq.conf" <<EOF
loopback_users.guest = true
log.console = false
log.file.level = warning
EOF
export HOME=$R/home ERL_EPMD_PORT=$EPMD_PORT ERL_EPMD_ADDRESS=127.0.0.1
export RABBITMQ_NODENAME=idemdq@localhost RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
export RABBITMQ_NODE_PORT=$AMQP_PORT RABBITMQ_DIST_PORT=$DIST_PORT
export RABBITMQ_MNESIA_BASE=$R/mnesia RABBITMQ_LOG_BASE=$R/log
export RABBITMQ_CONFIG_FILE=$R/rabbitmq.conf RABBITMQ_ENABLED_PLUGINS_FILE=$R/enabled_plugins
export RABBITMQ_CONF_ENV_FILE=$R/rabbitmq-env.conf
export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
epmd -port "$EPMD_PORT" -address 127.0.0.1 &
epmd_pid=$!
sleep 0.3
kill -0 "$epmd_pid" 2>/dev/null || die "epmd did not start"
"$RABBIT/rabbitmq-server" >"$R/server.out" 2>&1 &
rabbit_pid=$!
started=$SECONDS
# await_startup fails at once while the node is not registered with epmd yet.
up=0
while [ $((SECONDS - started)) -lt 90 ] && kill -0 "$rabbit_pid" 2>/dev/null; do
  if "$RABBIT/rabbitmqctl" -q await_startup --timeout 60 >"$R/await.out" 2>&1; then up=1; break; fi
  sleep 1
done
if [ "$up" != 1 ]; then
  cat "$R/await.out" "$R/server.out" >&2
  tail -n 30 "$R"/log/*.log >&2 2>/dev/null
  die "RabbitMQ did not start"
fi
echo "RabbitMQ ready in $((SECONDS - started)) s on 127.0.0.1:$AMQP_PORT"

# ---------------------------------------------------------------- the test
say "consumers under chaos, with and without idemd"
export IDEMD_URL=http://127.0.0.1:$IDEMD_PORT IDEMD_API_KEY AMQP_PORT
export PYTHONPATH=$ROOT/clients/python/src PYTHONDONTWRITEBYTECODE=1
if ! "$PY" tests/queue/chaos.py --messages "${QUEUE_MESSAGES:-10000}" --seed "${QUEUE_SEED:-17}" \
     --work "$TMP/work"; then
  echo "--- idemd log (tail)" >&2; tail -n 20 "$TMP/idemd.log" >&2
  echo "queue: FAILED"
  exit 1
fi

CONTROL=${QUEUE_CONTROL_MESSAGES:-1500}
if [ "$CONTROL" -gt 0 ]; then
  say "negative control: a fresh idemd key per delivery (the duplicate checks must fail)"
  "$PY" tests/queue/chaos.py --negative-control --messages "$CONTROL" --seed "${QUEUE_SEED:-17}" \
    --work "$TMP/control" | tee "$TMP/control.out"
  rc=${PIPESTATUS[0]}
  if [ "$rc" = 1 ] && grep -q '^  FAIL idemd: no message executed more than once' "$TMP/control.out"; then
    echo "negative control: the duplicate check failed, as it must without idemd's keys"
  else
    echo "negative control: the duplicate check did not fail (exit $rc): it cannot tell" >&2
    echo "queue: FAILED"
    exit 1
  fi
fi
echo "queue: ok"
