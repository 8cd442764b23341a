#!/usr/bin/env bash
# The Prometheus stage: deploy/prometheus/ checked with promtool (check
# config, check rules, test rules against rules_test.yml), then a real
# Prometheus (Debian's `prometheus`) scraping a running idemd's admin_listen
# and the count of duplicates idemd stopped read back through Prometheus'
# HTTP API.
#
# tests/run.sh calls it with IDEMD_TEST_PGHOST and IDEMD_TEST_PGUSER set (its
# throwaway cluster); run alone, it starts its own cluster with deploy/pg.sh.
# Everything listens on 127.0.0.1 and is stopped on exit, failure included.
# Ends with "prometheus: N passed, N failed"; exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BIN=${IDEMD_BIN:-$ROOT/build/idemd}
PROMETHEUS=${PROMETHEUS:-/usr/bin/prometheus}
PROMTOOL=${PROMTOOL:-/usr/bin/promtool}

say() { printf '\n==> %s\n' "$*"; }
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
bad() { failed=$((failed + 1)); echo "FAILED: $*" >&2; }
for b in "$BIN" "$PROMETHEUS" "$PROMTOOL"; do
  [ -x "$b" ] || { echo "prometheus.sh: $b not found" >&2; exit 1; }
done

# shellcheck source=tests/lib/stage.sh
. tests/lib/stage.sh
stage_start prometheus || exit 1

# ---------------------------------------------------------------- promtool
say "promtool: check config, check rules, test rules (deploy/prometheus)"
if (cd deploy/prometheus && "$PROMTOOL" check config prometheus.yml); then
  ok "promtool check config"; else bad "promtool check config"; fi
if (cd deploy/prometheus && "$PROMTOOL" check rules idemd-rules.yml); then
  ok "promtool check rules"; else bad "promtool check rules"; fi
if (cd deploy/prometheus && "$PROMTOOL" test rules rules_test.yml); then
  ok "promtool test rules"; else bad "promtool test rules"; fi

# ---------------------------------------------------------------- idemd
pg_use || { echo "prometheus.sh: PostgreSQL did not start" >&2; exit 1; }

say "idemd with admin_listen, and a few duplicates"
pg_createdb idemd_prom || exit 1
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port) ADMIN=$(free_port) PROM=$(free_port)
cat >"$TMP/idemd.json" <<EOF
{"listen": "127.0.0.1:$PORT", "admin_listen": "127.0.0.1:$ADMIN",
 "database_url": "host=$IDEMD_TEST_PGHOST dbname=$DB user=$IDEMD_TEST_PGUSER",
 "master_key_file": "$TMP/master.key", "pool_size": 2, "threads": 2,
 "metrics_operations": ["acme/orders.pay"]}
EOF
"$BIN" --config "$TMP/idemd.json" migrate >/dev/null 2>"$TMP/migrate.log" ||
  { cat "$TMP/migrate.log" >&2; exit 1; }
KEY=$("$BIN" --config "$TMP/idemd.json" tenant create acme | tail -n 1 | jq -r .api_key) || exit 1
api() {  # METHOD PATH [BODY]
  curl -fsS -X "$1" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    ${3:+--data "$3"} "http://127.0.0.1:$PORT$2"
}
# the operation exists before idemd starts, so its labels resolve at once
"$BIN" --config "$TMP/idemd.json" serve 2>"$TMP/idemd.log" &
pids+=($!)
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$ADMIN/readyz" >/dev/null && break; sleep 0.1; done
api PUT /v1/operations/orders.pay '{"token_ttl_seconds":600,"retention_seconds":3600,"lease_seconds":30}' >/dev/null ||
  { echo "prometheus.sh: idemd did not start:" >&2; cat "$TMP/idemd.log" >&2; exit 1; }
# restart so that the operation's labels are resolved at the first pass
kill "${pids[0]}"; wait "${pids[0]}"; pids=()
"$BIN" --config "$TMP/idemd.json" serve 2>"$TMP/idemd.log" &
pids+=($!)
for _ in $(seq 100); do
  # read whole before grep: grep -q stops early, and under pipefail the
  # write error it gives curl would fail the pipeline
  m=$(curl -fs "http://127.0.0.1:$ADMIN/metrics") || m=
  grep -qx 'idemd_metrics_pairs_unresolved 0' <<<"$m" && break
  sleep 0.1
done
TOKEN=$(api POST /v1/tokens '{"operation":"orders.pay","subject":"u1"}' | jq -r .token)
api POST "/v1/tokens/$TOKEN/claim" '{"request":{"n":1}}' >/dev/null &&
  api POST "/v1/tokens/$TOKEN/complete" '{"attempt":1,"status":201,"body":{"ok":true}}' >/dev/null ||
  { echo "prometheus.sh: claim/complete failed" >&2; cat "$TMP/idemd.log" >&2; exit 1; }
REPLAYS=7
for _ in $(seq $REPLAYS); do api POST "/v1/tokens/$TOKEN/claim" '{"request":{"n":1}}' >/dev/null; done
want='idemd_duplicates_total{tenant="acme",operation="orders.pay",outcome="replayed"}'
m=$(curl -fs "http://127.0.0.1:$ADMIN/metrics") || m=
if grep -qxF "$want $REPLAYS" <<<"$m"; then
  ok "admin_listen /metrics: $want $REPLAYS"
else
  bad "admin_listen /metrics lacks $want $REPLAYS"
fi

# ---------------------------------------------------------------- Prometheus
say "prometheus on 127.0.0.1:$PROM scraping idemd's admin_listen every second"
cat >"$TMP/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $ROOT/deploy/prometheus/idemd-rules.yml
scrape_configs:
  - job_name: idemd
    static_configs:
      - targets: ["127.0.0.1:$ADMIN"]
EOF
"$PROMETHEUS" --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/tsdb" \
  --web.listen-address="127.0.0.1:$PROM" >"$TMP/prometheus.log" 2>&1 &
pids+=($!)
query='sum(idemd_duplicates_total{job="idemd",tenant="acme",operation="orders.pay",outcome="replayed"})'
got="" answer=""
for _ in $(seq 60); do
  answer=$(curl -fsG "http://127.0.0.1:$PROM/api/v1/query" --data-urlencode "query=$query" 2>/dev/null)
  got=$(printf '%s' "$answer" | jq -r '.data.result[0].value[1] // empty' 2>/dev/null)
  [ -n "$got" ] && break
  sleep 0.5
done
echo "query: $query"
echo "answer: $answer"
if [ "$got" = "$REPLAYS" ]; then
  ok "Prometheus reads back idemd_duplicates_total = $got"
else
  bad "Prometheus read back '$got', want $REPLAYS"; tail -n 20 "$TMP/prometheus.log" >&2
fi
up=$(curl -fsG "http://127.0.0.1:$PROM/api/v1/query" --data-urlencode 'query=up{job="idemd"}' |
     jq -r '.data.result[0].value[1] // empty')
if [ "$up" = 1 ]; then ok "up{job=\"idemd\"} = 1"; else bad "up{job=\"idemd\"} = '$up'"; fi
rules=$(curl -fs "http://127.0.0.1:$PROM/api/v1/rules" | jq '[.data.groups[].rules[]] | length')
if [ "${rules:-0}" -ge 6 ]; then ok "the alert rules are loaded ($rules)"; else bad "rules loaded: '$rules'"; fi

echo
echo "prometheus: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
