"""Kafka's transactions against an effect outside Kafka (run by tests/kafka.sh,
the environment as for tests/kafka/scenarios.py).

A consume-transform-produce worker reads an input topic and, per poll, in one
Kafka transaction: runs an effect outside Kafka for each event (a row in a
ledger table, standing for an HTTP call or a payment), produces one output
record per event, and sends the poll's offsets to the transaction. It is
SIGKILLed in its third poll after the effects and the outputs, before the
commit, then restarted with the same transactional.id (which aborts the open
transaction). Run twice: with the effect done plainly, and with it claimed
through idemd.kafka (the output then made from the stored outcome, so a
replayed event is produced again without running its effect).

Checks: the output topic, read_committed, holds every event exactly once in
both runs (Kafka's exactly once); the plain effect ran twice for the killed
transaction's events (and the stage fails if it did not), the idemd one
exactly once.
"""

import argparse
import json
import os
import signal
import subprocess
import sys

import confluent_kafka
import psycopg
from confluent_kafka.admin import AdminClient, NewTopic

import idemd
import idemd.kafka

BOOTSTRAP = os.environ["KAFKA_BOOTSTRAP"]


def worker(a):
    db = psycopg.connect(os.environ["LEDGER_DSN"], autocommit=True)
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": BOOTSTRAP, "group.id": a.group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
        "session.timeout.ms": 2000, "heartbeat.interval.ms": 400})
    producer = confluent_kafka.Producer({"bootstrap.servers": BOOTSTRAP,
                                         "transactional.id": a.group + "-tx"})
    producer.init_transactions(30)  # fences a dead predecessor, aborts its transaction
    proc = None
    if a.mode == "idemd":
        client = idemd.Client(os.environ["IDEMD_URL"], os.environ["IDEMD_API_KEY"])
        proc = idemd.kafka.Processor(client, a.operation, key_field="event_id")
    # The offsets go with the transaction: no commit of the helper's, on
    # revoke either.
    consumer.subscribe([a.input])

    def effect(event):
        db.execute("INSERT INTO tx_ledger (mode, event_id) VALUES (%s, %s)",
                   (a.mode, event["event_id"]))

    def handler(record, claim):
        event = json.loads(record.value())
        effect(event)
        return {"event_id": event["event_id"], "doubled": event["n"] * 2}

    polls = idle = 0
    while idle < 6:
        records = [r for r in consumer.consume(200, timeout=0.5) if r.error() is None]
        if not records:
            idle += 1
            continue
        idle = 0
        polls += 1
        producer.begin_transaction()
        if proc is None:
            outputs = []
            for r in records:
                event = json.loads(r.value())
                effect(event)
                outputs.append({"event_id": event["event_id"], "doubled": event["n"] * 2})
        else:
            outcomes = proc.process(consumer, records, handler, commit=False)
            if any(o.retry or o.outcome not in ("processed", "replayed") for o in outcomes):
                raise RuntimeError("unexpected outcomes: %s" % [o.outcome for o in outcomes])
            outputs = [o.result if o.outcome == "processed" else o.response["body"]
                       for o in outcomes]
        for out in outputs:
            producer.produce(a.output, json.dumps(out).encode())
        if polls == a.die:
            producer.flush(10)  # the outputs are in the log, uncommitted
            os.kill(os.getpid(), signal.SIGKILL)
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
    consumer.close()
    return 0


def read_all(topic, isolation):
    c = confluent_kafka.Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "count-" + topic,
                                  "enable.auto.commit": False, "isolation.level": isolation})
    md = c.list_topics(topic, timeout=10).topics[topic]
    c.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
              for p in md.partitions])
    ids, idle = [], 0
    while idle < 3:
        batch = c.consume(1000, timeout=1.0)
        if not batch:
            idle += 1
        for r in batch:
            if r.error() is None:
                ids.append(json.loads(r.value())["event_id"])
    c.close()
    return ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--mode", choices=("plain", "idemd"), default="plain")
    ap.add_argument("--input", default="")
    ap.add_argument("--output", default="")
    ap.add_argument("--group", default="")
    ap.add_argument("--operation", default="")
    ap.add_argument("--die", type=int, default=0)
    ap.add_argument("--events", type=int, default=1000)
    a = ap.parse_args()
    if a.worker:
        return worker(a)

    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    db = psycopg.connect(os.environ["LEDGER_DSN"], autocommit=True)
    db.execute("CREATE TABLE tx_ledger (mode text, event_id text)")
    client = idemd.Client(os.environ["IDEMD_URL"], os.environ["IDEMD_API_KEY"])
    client.put_operation("kafka.transactions", token_ttl_seconds=3600,
                         retention_seconds=86400, lease_seconds=30)
    failures, rows = [], []
    for mode in ("plain", "idemd"):
        src, dst = "tx-in-" + mode, "tx-out-" + mode
        for f in admin.create_topics([NewTopic(t, 3, 1) for t in (src, dst)]).values():
            f.result(30)
        p = confluent_kafka.Producer({"bootstrap.servers": BOOTSTRAP})
        for i in range(a.events):
            eid = "tx-%s-%05d" % (mode, i)
            p.produce(src, json.dumps({"event_id": eid, "n": i}).encode(), key=eid.encode())
        p.flush(30)
        args = [sys.executable, os.path.abspath(__file__), "--worker", "--mode", mode,
                "--input", src, "--output", dst, "--group", "tx-" + mode,
                "--operation", "kafka.transactions"]
        first = subprocess.run(args + ["--die", "3"], timeout=120)
        if first.returncode != -signal.SIGKILL:
            failures.append("%s: the worker was to be killed, it exited %s" % (mode, first.returncode))
        second = subprocess.run(args, timeout=120)
        if second.returncode != 0:
            failures.append("%s: the restarted worker exited %s" % (mode, second.returncode))
        committed = read_all(dst, "read_committed")
        everything = read_all(dst, "read_uncommitted")
        effects = sql_count(db, "SELECT count(*) FROM tx_ledger WHERE mode = %s", mode)
        twice = sql_count(db, "SELECT count(*) FROM (SELECT event_id FROM tx_ledger WHERE mode = %s"
                              " GROUP BY event_id HAVING count(*) > 1) x", mode)
        rows.append((mode, a.events, len(everything), len(committed), len(set(committed)),
                     effects, twice))
        if len(committed) != a.events or len(set(committed)) != a.events:
            failures.append("%s: the committed output holds %d records, %d distinct, for %d events"
                            % (mode, len(committed), len(set(committed)), a.events))
        if len(everything) <= len(committed):
            failures.append("%s: no aborted output in the log: the kill fell outside a transaction"
                            % mode)
        if mode == "idemd" and (effects != a.events or twice):
            failures.append("idemd: %d effects for %d events" % (effects, a.events))
        if mode == "plain" and twice == 0:
            failures.append("plain: no effect ran twice: the control cannot tell")
    print("| effect outside Kafka | events | output records in the log | output, read_committed"
          " | distinct | effects | events whose effect ran twice |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| %s | %d | %d | %d | %d | %d | %d |" % r)
    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


def sql_count(db, q, *args):
    return db.execute(q, args).fetchone()[0]


if __name__ == "__main__":
    sys.exit(main())
