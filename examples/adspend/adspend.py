"""Ad-spend aggregation: a Kafka consumer that sums each campaign's spend
into PostgreSQL, with idemd (each event counted once) or without.

    python3 adspend.py produce  --topic ad-events --events 3000 --duplicates 150
    python3 adspend.py consume  --topic ad-events --group spend [--no-idemd]
                                [--die-after N]
    python3 adspend.py report   [--table campaign_spend]

Events are JSON: {"event_id", "campaign_id", "spend_amount", "timestamp"},
spend_amount in cents. `produce` sends some events twice (same event_id, as
a producer does that retried after a timeout); `consume` adds each event's
spend to its campaign's row and commits offsets after each poll;
--die-after N kills the consumer (SIGKILL, from itself) after the N-th
poll's effects and before its offset commit, the moment a crash costs a
redelivery. Without idemd that poll is counted again when the consumer
comes back; with it, the redelivered events are replayed and not added.

Environment: KAFKA_BOOTSTRAP (127.0.0.1:9092), ADSPEND_DSN (a libpq
conninfo for the consumer's own database), IDEMD_URL and IDEMD_API_KEY.
Needs confluent-kafka and psycopg (pip install 'idemd[kafka]' 'psycopg[binary]').
"""

import argparse
import datetime
import json
import os
import random
import signal
import sys

import confluent_kafka
import psycopg

import idemd
import idemd.kafka

BOOTSTRAP = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")


def produce(a):
    rng = random.Random(a.seed)
    p = confluent_kafka.Producer({"bootstrap.servers": BOOTSTRAP, "linger.ms": 5})
    t0 = datetime.datetime(2026, 11, 30, tzinfo=datetime.timezone.utc)
    events = []
    for i in range(a.events):
        events.append({"event_id": "click-%06d" % i,
                       "campaign_id": "campaign-%d" % rng.randrange(a.campaigns),
                       "spend_amount": rng.randrange(5, 500),
                       "timestamp": (t0 + datetime.timedelta(seconds=i)).isoformat()})
    sent = list(events)
    for e in rng.sample(events, a.duplicates):  # the producer's retries
        sent.insert(rng.randrange(len(sent) // 2, len(sent) + 1), e)
    for e in sent:
        p.produce(a.topic, json.dumps(e).encode(), key=e["campaign_id"].encode())
        p.poll(0)
    p.flush(30)
    print("sent %d events (%d distinct)" % (len(sent), len(events)))


def consume(a):
    db = psycopg.connect(os.environ["ADSPEND_DSN"], autocommit=True)
    db.execute("CREATE TABLE IF NOT EXISTS %s (campaign_id text PRIMARY KEY,"
               " spend bigint NOT NULL, events int NOT NULL)" % a.table)
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": BOOTSTRAP, "group.id": a.group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "group.instance.id": a.group + "-1"})

    def add_spend(record, claim=None):
        e = json.loads(record.value())
        db.execute("INSERT INTO %s VALUES (%%s, %%s, 1) ON CONFLICT (campaign_id) DO UPDATE"
                   " SET spend = %s.spend + excluded.spend, events = %s.events + 1"
                   % (a.table, a.table, a.table), (e["campaign_id"], e["spend_amount"]))
        return {"campaign_id": e["campaign_id"], "added": e["spend_amount"]}

    polls = 0

    class DiesBeforeCommit:
        """The consumer, killed before the commit of the --die-after-th poll."""

        def commit(self, *args, **kwargs):
            if polls == a.die_after:
                os.kill(os.getpid(), signal.SIGKILL)
            return consumer.commit(*args, **kwargs)

        def seek(self, tp):
            consumer.seek(tp)

    if a.no_idemd:
        consumer.subscribe([a.topic])
    else:
        client = idemd.Client(os.environ["IDEMD_URL"], os.environ["IDEMD_API_KEY"])
        client.put_operation("spend.add", token_ttl_seconds=3600,
                             retention_seconds=7 * 86400, lease_seconds=30)
        spend = idemd.kafka.Processor(client, "spend.add", key_field="event_id",
                                      prefix="spend:")
        spend.subscribe(consumer, [a.topic])
    idle = 0
    while idle < a.idle_polls:
        records = [r for r in consumer.consume(500, timeout=1.0) if r.error() is None]
        if not records:
            idle += 1
            continue
        idle = 0
        polls += 1
        if a.no_idemd:
            for r in records:
                add_spend(r)
            DiesBeforeCommit().commit(asynchronous=False)
        else:
            spend.process(DiesBeforeCommit(), records, add_spend)
    consumer.close()
    if not a.no_idemd:
        c = spend.counts
        print("processed %d, replayed %d" % (c.processed, c.replayed))


def report(a):
    db = psycopg.connect(os.environ["ADSPEND_DSN"])
    for campaign, spend, events in db.execute(
            "SELECT campaign_id, spend, events FROM %s ORDER BY campaign_id" % a.table):
        print("%-12s %8d cents  %5d events" % (campaign, spend, events))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("produce")
    p.add_argument("--topic", default="ad-events")
    p.add_argument("--events", type=int, default=3000)
    p.add_argument("--duplicates", type=int, default=150)
    p.add_argument("--campaigns", type=int, default=5)
    p.add_argument("--seed", type=int, default=7)
    c = sub.add_parser("consume")
    c.add_argument("--topic", default="ad-events")
    c.add_argument("--group", default="spend")
    c.add_argument("--table", default="campaign_spend")
    c.add_argument("--no-idemd", action="store_true")
    c.add_argument("--die-after", type=int, default=0)
    c.add_argument("--idle-polls", type=int, default=3, help="stop after so many empty polls")
    r = sub.add_parser("report")
    r.add_argument("--table", default="campaign_spend")
    a = ap.parse_args()
    {"produce": produce, "consume": consume, "report": report}[a.cmd](a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
