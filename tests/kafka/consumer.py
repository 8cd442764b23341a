"""One consumer process of tests/kafka/scenarios.py.

Polls a topic in batches and, for each new event, inserts one row into the
ledger table (the effect the stage counts), on confluent-kafka or, with
--library kafka-python, on kafka-python. With idemd (the default) the
batch goes through idemd.kafka.Processor; with --no-idemd it does the effect
for every record, then commits. Every delivery is logged to the deliveries
table first, so the stage can count redeliveries across SIGKILLs.

--die POINT:N kills this process (SIGKILL, from itself) in its N-th batch
that holds a new record: "claimed" after the batch's claims and before any
effect (its claims stay held until their lease runs out), "completed" after
the batch's completions are stored and before its offsets are committed;
--die effect:N:K right after the batch's K-th effect, between effects and
their completion (the window where an effect runs again).
--stall N:SECONDS makes the handler of the N-th such batch sleep (past
max.poll.interval.ms). --pace SECONDS sleeps after each batch (so that
the group's members overlap). SIGTERM closes the consumer (leaving the group).
"""

import argparse
import ctypes
import json
import os
import signal
import sys
import time

import confluent_kafka
import psycopg

import idemd
import idemd.kafka


def parent_death_kills_me():
    """The stage's timeout kills the driver: take the consumers with it."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--operation", default="")
    ap.add_argument("--instance-id", default="")
    ap.add_argument("--key-header", default="")
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--max-poll-ms", type=int, default=300000)
    ap.add_argument("--die", default="")
    ap.add_argument("--stall", default="")
    ap.add_argument("--pace", type=float, default=0.0)
    ap.add_argument("--no-idemd", action="store_true")
    ap.add_argument("--library", default="confluent-kafka",
                    choices=("confluent-kafka", "kafka-python"))
    a = ap.parse_args()
    parent_death_kills_me()

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    die_point, die_batch, die_after = (a.die.split(":") + ["0", "0"])[:3] if a.die else ("", "0", "0")
    stall_batch, stall_s = (int(x) if i == 0 else float(x)
                            for i, x in enumerate(a.stall.split(":"))) if a.stall else (0, 0.0)

    db = psycopg.connect(os.environ["LEDGER_DSN"], autocommit=True)
    conf = {"bootstrap.servers": os.environ["KAFKA_BOOTSTRAP"], "group.id": a.group,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": 2000, "heartbeat.interval.ms": 400,
            "max.poll.interval.ms": a.max_poll_ms, "client.id": a.name}
    if a.instance_id:
        conf["group.instance.id"] = a.instance_id
    kp = a.library == "kafka-python"
    if kp:
        import kafka
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=conf["bootstrap.servers"], group_id=a.group,
            enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=2000,
            heartbeat_interval_ms=400, max_poll_interval_ms=a.max_poll_ms, client_id=a.name,
            max_poll_records=a.batch, group_instance_id=a.instance_id or None)
    else:
        consumer = confluent_kafka.Consumer(conf)
    field = idemd.kafka.field
    state = {"batch": 0, "new": False, "effects": 0}

    def effect(record, claim):
        ev = json.loads(field(record, "value"))
        db.execute("INSERT INTO ledger (scenario, event_id, part, off, consumer, claim_id, attempt)"
                   " VALUES (%s, %s, %s, %s, %s, %s, %s)",
                   (a.scenario, ev["event_id"], field(record, "partition"), field(record, "offset"),
                    a.name,
                    claim.id if claim else None, claim.attempt if claim else None))

    def handler(record, claim):
        if not state["new"]:
            state["new"] = True
            state["batch"] += 1
            if die_point == "claimed" and state["batch"] == int(die_batch):
                os.kill(os.getpid(), signal.SIGKILL)
            if state["batch"] == stall_batch:
                time.sleep(stall_s)
        effect(record, claim)
        state["effects"] += 1
        if die_point == "effect" and state["batch"] == int(die_batch) and \
                state["effects"] == int(die_after):
            os.kill(os.getpid(), signal.SIGKILL)
        return {"ok": True}

    class Killing:
        """The consumer, with a death before the commit of a chosen batch."""

        def commit(self, *args, **kwargs):
            if die_point == "completed" and state["new"] and state["batch"] == int(die_batch):
                os.kill(os.getpid(), signal.SIGKILL)
            return consumer.commit(*args, **kwargs)

        def seek(self, *args):
            return consumer.seek(*args)

    proc = None
    if a.no_idemd:
        consumer.subscribe([a.topic])
    else:
        client = idemd.Client(os.environ["IDEMD_URL"], os.environ["IDEMD_API_KEY"],
                              retry=idemd.Retry(attempts=8, base_delay=0.05))
        opts = {"key_header": a.key_header} if a.key_header else {"key_field": "event_id"}
        proc = idemd.kafka.Processor(client, a.operation, retry_delay=0.3, library=a.library,
                                     **opts)
        proc.subscribe(consumer, [a.topic])
    while not stop:
        if kp:
            records = [r for rs in consumer.poll(timeout_ms=500).values() for r in rs]
        else:
            records = [r for r in consumer.consume(a.batch, timeout=0.5) if r.error() is None]
        if not records:
            continue
        db.execute("INSERT INTO deliveries (scenario, consumer, part, off)"
                   " SELECT %s, %s, * FROM unnest(%s::int[], %s::bigint[])",
                   (a.scenario, a.name, [field(r, "partition") for r in records],
                    [field(r, "offset") for r in records]))
        state["new"] = False
        state["effects"] = 0
        if proc is not None:
            proc.process(Killing(), records, handler)
        else:
            state["new"] = True
            state["batch"] += 1
            for r in records:
                if state["batch"] == stall_batch and r is records[0]:
                    time.sleep(stall_s)
                effect(r, None)
            try:
                Killing().commit(asynchronous=False)
            except confluent_kafka.KafkaException:
                pass
        time.sleep(a.pace)
        if proc is not None:
            db.execute("INSERT INTO counts (scenario, consumer, counts) VALUES (%s, %s, %s)"
                       " ON CONFLICT (scenario, consumer) DO UPDATE SET counts = excluded.counts",
                       (a.scenario, a.name, json.dumps(proc.counts.as_dict())))
    consumer.close()  # leaves the group: on_revoke commits what is settled
    if proc is not None:
        db.execute("INSERT INTO counts (scenario, consumer, counts) VALUES (%s, %s, %s)"
                   " ON CONFLICT (scenario, consumer) DO UPDATE SET counts = excluded.counts",
                   (a.scenario, a.name, json.dumps(proc.counts.as_dict())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
