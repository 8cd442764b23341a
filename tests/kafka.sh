#!/usr/bin/env bash
# The Kafka stage: a real broker redelivers, consumers are killed, rebalanced,
# stalled past max.poll.interval.ms and fed duplicates by their producer, and
# every event's effect (a row in a ledger table) still happens exactly once
# (tests/kafka/scenarios.py: Python consumers using idemd.kafka on
# confluent-kafka, the same on kafka-python for three of them, then JVM
# ones using dev.idemd.client.kafka on kafka-clients, tests/kafka/jvm). A negative control follows: the same
# consumer without idemd must count some events twice, or the stage fails.
# A transactional consume-transform-produce worker is killed inside a Kafka
# transaction (tests/kafka/transactions.py): its output topic holds each
# event once, yet its effect outside Kafka ran twice without idemd. Then
# the ad-spend example (examples/adspend) runs with a kill in the middle,
# with and without idemd, and both sums are checked.
#
# Starts, all on 127.0.0.1 and all stopped on exit (failure included), pid by
# pid: a PostgreSQL cluster (unless IDEMD_TEST_PGHOST/IDEMD_TEST_PGUSER name
# one, as tests/run.sh does), one idemd on a fresh database, and a single-node
# Apache Kafka broker in KRaft mode (broker and controller in one JVM) on two
# free ports. The broker's jars and the JVM consumer's (kafka-clients,
# jackson) come from Maven Central into build/kafka, confluent-kafka,
# kafka-python and psycopg from PyPI into build/kafka/venv; all are kept
# for the next run.
# The JVM consumer is compiled with clients/jvm/idemd-client's sources.
# Ends with "kafka: ok" or "kafka: FAILED".
# KAFKA_EVENTS (2000 per scenario), KAFKA_TX_EVENTS (1000) and KAFKA_SEED
# (17) tune the run.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BIN=${IDEMD_BIN:-$ROOT/build/idemd}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
KAFKA_VERSION=3.9.1
CACHE=$ROOT/build/kafka
LIB=$CACHE/lib-$KAFKA_VERSION
JLIB=$CACHE/jvm-lib-$KAFKA_VERSION
VENV=$CACHE/venv
PIP_PKGS=("confluent-kafka==2.16.1" "kafka-python==3.0.12" "psycopg[binary]==3.2.13")

say() { printf '\n==> [%ds] %s\n' "$SECONDS" "$*"; }
die() { echo "kafka.sh: $*" >&2; echo "kafka: FAILED"; exit 1; }
[ -x "$BIN" ] || die "$BIN not built"
command -v java >/dev/null || die "java is not installed (bash deploy/deps.sh --test)"
command -v mvn >/dev/null || die "mvn is not installed (bash deploy/deps.sh --test)"

TMP=$(mktemp -d /tmp/idemd-kafka.XXXXXX) || exit 1
chmod 711 "$TMP"
# shellcheck source=tests/lib/pg.sh
. tests/lib/pg.sh
pids=() DB='' kafka_pid=''
# shellcheck disable=SC2317
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  if [ -n "$kafka_pid" ]; then
    kill "$kafka_pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$kafka_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$kafka_pid" 2>/dev/null; wait "$kafka_pid" 2>/dev/null
  fi
  pg_cleanup
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# ---------------------------------------------------------------- caches
mkdir -p "$CACHE"
if [ -f "$LIB/.complete" ]; then
  echo "broker jars: cached in ${LIB#"$ROOT"/} ($(find "$LIB" -name '*.jar' | wc -l) jars)"
else
  say "broker jars: kafka_2.13 $KAFKA_VERSION from Maven Central into ${LIB#"$ROOT"/}"
  rm -rf "$LIB" && mkdir -p "$TMP/pom"
  # slf4j-reload4j: without a logging binding the broker logs nothing (and
  # its ready line never comes).
  cat >"$TMP/pom/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.idemd</groupId><artifactId>kafka-broker</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>1.7.36</version></dependency>
  </dependencies>
</project>
EOF
  timeout 300 mvn -B -q -f "$TMP/pom/pom.xml" -Dmaven.repo.local="$CACHE/m2" \
    dependency:copy-dependencies -DoutputDirectory="$LIB" -DincludeScope=runtime ||
    die "the broker's jars could not be fetched"
  touch "$LIB/.complete"
fi
if [ -f "$JLIB/.complete" ]; then
  echo "JVM consumer jars: cached in ${JLIB#"$ROOT"/} ($(find "$JLIB" -name '*.jar' | wc -l) jars)"
else
  say "JVM consumer jars: kafka-clients $KAFKA_VERSION and jackson-databind from Maven Central"
  rm -rf "$JLIB" && mkdir -p "$TMP/jpom"
  # idemd-client's own dependencies (clients/jvm/idemd-client/pom.xml).
  cat >"$TMP/jpom/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.idemd</groupId><artifactId>kafka-jvm-consumer</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-clients</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>com.fasterxml.jackson.core</groupId><artifactId>jackson-databind</artifactId><version>2.19.2</version></dependency>
  </dependencies>
</project>
EOF
  timeout 300 mvn -B -q -f "$TMP/jpom/pom.xml" -Dmaven.repo.local="$CACHE/m2" \
    dependency:copy-dependencies -DoutputDirectory="$JLIB" -DincludeScope=runtime ||
    die "the JVM consumer's jars could not be fetched"
  touch "$JLIB/.complete"
fi
# The JVM consumer, compiled with the client's sources as they are here.
mkdir -p "$TMP/jvm-classes"
# shellcheck disable=SC2046
timeout 120 javac -nowarn -d "$TMP/jvm-classes" -cp "$JLIB/*" \
  $(find clients/jvm/idemd-client/src/main/java -name '*.java') tests/kafka/jvm/KafkaConsumerMain.java \
  >"$TMP/javac.out" 2>&1 || { cat "$TMP/javac.out" >&2; die "the JVM consumer did not compile"; }
if "$VENV/bin/python" -c 'import confluent_kafka, kafka, psycopg' 2>/dev/null &&
   [ "$(cat "$VENV/.pkgs" 2>/dev/null)" = "${PIP_PKGS[*]}" ]; then
  echo "python venv: cached in ${VENV#"$ROOT"/} (confluent-kafka $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("confluent-kafka"))'))"
else
  say "python venv: ${PIP_PKGS[*]} from PyPI into ${VENV#"$ROOT"/}"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV" && timeout 300 "$VENV/bin/pip" install -q --disable-pip-version-check "${PIP_PKGS[@]}" ||
    die "pip install failed"
  echo "${PIP_PKGS[*]}" >"$VENV/.pkgs"
fi

# ---------------------------------------------------------------- idemd
pg_use || die "PostgreSQL did not start"
say "starting idemd on a fresh database"
pg_createdb idemd_kafka || die "CREATE DATABASE failed"
IDEMD_PORT=$(free_port)
cat >"$TMP/idemd.json" <<EOF
{"listen": "127.0.0.1:$IDEMD_PORT",
 "database_url": "host=$IDEMD_TEST_PGHOST dbname=$DB user=$IDEMD_TEST_PGUSER",
 "master_key_file": "$TMP/master.key", "pool_size": 8, "threads": 8}
EOF
"$BIN" --config "$TMP/idemd.json" migrate >/dev/null 2>"$TMP/migrate.log" ||
  { cat "$TMP/migrate.log" >&2; die "idemd migrate failed"; }
IDEMD_API_KEY=$("$BIN" --config "$TMP/idemd.json" tenant create ads |
  "$PY" -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["api_key"])') ||
  die "idemd tenant create failed"
"$BIN" --config "$TMP/idemd.json" serve 2>"$TMP/idemd.log" &
pids+=($!)
for _ in $(seq 100); do
  curl -fs "http://127.0.0.1:$IDEMD_PORT/readyz" >/dev/null && break
  sleep 0.1
done
curl -fs "http://127.0.0.1:$IDEMD_PORT/readyz" >/dev/null || { cat "$TMP/idemd.log" >&2; die "idemd did not start"; }

# ---------------------------------------------------------------- Kafka
say "starting Kafka $KAFKA_VERSION (KRaft, one node, loopback only)"
K=$TMP/kafka
mkdir -p "$K/data"
KAFKA_PORT=$(free_port) CONTROLLER_PORT=$(free_port)
# group.min.session.timeout.ms lowered from 6 s so that a dead member is
# noticed in 2 s; the cleaner's buffer from 128 MiB, to fit a 256 MiB heap.
cat >"$K/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$K/data
num.partitions=3
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
auto.create.topics.enable=false
log.cleaner.dedupe.buffer.size=16777216
EOF
cat >"$K/log4j.properties" <<EOF
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=$K/server.log
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
EOF
CLUSTER_ID=$("$PY" -c 'import base64,os; print(base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("="))')
JAVA_OPTS=(-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 "-Dlog4j.configuration=file:$K/log4j.properties")
timeout 60 java "${JAVA_OPTS[@]}" -cp "$LIB/*" kafka.tools.StorageTool format -t "$CLUSTER_ID" \
  -c "$K/server.properties" >"$K/format.out" 2>&1 || { cat "$K/format.out" >&2; die "kafka storage format failed"; }
started=$SECONDS
java "${JAVA_OPTS[@]}" -cp "$LIB/*" kafka.Kafka "$K/server.properties" >"$K/stdout" 2>&1 &
kafka_pid=$!
up=0
while [ $((SECONDS - started)) -lt 60 ] && kill -0 "$kafka_pid" 2>/dev/null; do
  if grep -qs 'Kafka Server started' "$K/server.log"; then up=1; break; fi
  sleep 0.2
done
if [ "$up" != 1 ]; then
  tail -n 40 "$K/server.log" "$K/stdout" >&2 2>/dev/null
  die "Kafka did not start"
fi
echo "Kafka ready in $((SECONDS - started)) s on 127.0.0.1:$KAFKA_PORT"

# ---------------------------------------------------------------- the test
export IDEMD_URL=http://127.0.0.1:$IDEMD_PORT IDEMD_API_KEY
export KAFKA_BOOTSTRAP=127.0.0.1:$KAFKA_PORT
export LEDGER_DSN="host=$IDEMD_TEST_PGHOST dbname=$DB user=$IDEMD_TEST_PGUSER"
export PYTHONPATH=$ROOT/clients/python/src PYTHONDONTWRITEBYTECODE=1
say "consumers killed, rebalanced, stalled and fed duplicates (Python, kafka-python, JVM), then without idemd"
mkdir -p "$TMP/work"
timeout 330 "$VENV/bin/python" tests/kafka/scenarios.py --events "${KAFKA_EVENTS:-2000}" \
  --seed "${KAFKA_SEED:-17}" --work "$TMP/work" --kafka-python \
  --jvm-classpath "$TMP/jvm-classes:$JLIB/*" ||
  { echo "--- idemd log (tail)" >&2; tail -n 20 "$TMP/idemd.log" >&2; die "a scenario failed"; }

say "Kafka's transactions: the output exactly once, an effect outside Kafka not (without idemd)"
timeout 240 "$VENV/bin/python" tests/kafka/transactions.py --events "${KAFKA_TX_EVENTS:-1000}" ||
  die "the transactions scenario failed"

say "the ad-spend example (examples/adspend): a kill in the middle, with and without idemd"
ADSPEND_DSN=$LEDGER_DSN timeout 120 "$VENV/bin/python" examples/adspend/check.py ||
  die "the ad-spend example failed"
echo "kafka: ok (${SECONDS} s)"
