"""The Kafka stage's scenarios (tests/kafka.sh starts the broker, idemd and
PostgreSQL, and exports KAFKA_BOOTSTRAP, IDEMD_URL, IDEMD_API_KEY and
LEDGER_DSN).

Each scenario has its own topic (3 partitions), consumer group and idemd
operation; it produces --events events, runs consumer processes
(tests/kafka/consumer.py; with --jvm-classpath the five main scenarios run
again with tests/kafka/jvm, with --kafka-python three of them on
kafka-python) on a timeline, kills some of them, and waits
until the group has committed every partition to its end. Then it checks, from
the ledger table (one row per effect), that every event's effect ran
exactly once, and counts redeliveries from the deliveries table (a record
delivered again, or an event id the producer sent twice): a scenario whose
redelivery did not happen proves nothing and fails. One more scenario kills
a consumer between effects and their completion, the window no one closes
from outside: there exactly the effects it left run twice, each time with
the same claim id (what a downstream service deduplicates on). A negative
control runs the first scenario's first kill with consumers that do not
use idemd: there the ledger must show events counted twice, or the stage
fails.
"""

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time

import confluent_kafka
import psycopg
from confluent_kafka.admin import AdminClient, NewTopic

import idemd

HERE = os.path.dirname(os.path.abspath(__file__))
PARTITIONS = 3


def sql(db, q, *args):
    return db.execute(q, args).fetchall()


RUNNING = []   # every consumer started, stopped on the way out whatever happens


class Scenario:
    def __init__(self, name, lease, key_header="", duplicates=0, jvm=None, window=0,
                 library=""):
        self.window = window   # effects a kill leaves without their completion
        self.base = name
        self.library = library  # the Python consumer's, "" for confluent-kafka
        if jvm:
            name += "-jvm"
        elif library:
            name += "-" + library
        self.name, self.lease, self.key_header, self.duplicates = name, lease, key_header, duplicates
        self.topic, self.group, self.operation = "t-" + name, "g-" + name, "kafka." + name
        self.jvm = jvm     # the JVM consumer's classpath, or None for the Python one
        self.procs = {}


def create_topic(admin, topic):
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result(30)
    deadline = time.time() + 30
    while time.time() < deadline:  # leaders elected: a consumer will find them
        md = admin.list_topics(topic, timeout=5).topics.get(topic)
        if md and md.error is None and len(md.partitions) == PARTITIONS and all(
                p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.1)
    raise RuntimeError("topic %s has no leaders" % topic)


def produce(bootstrap, s, events, rng):
    """events events, then s.duplicates of them again (same event id and
    body: a producer that retried after a timeout). Returns the count sent."""
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    bodies = []
    for i in range(events):
        eid = "%s-%05d" % (s.name, i)
        bodies.append((eid, json.dumps({"event_id": eid, "n": i, "amount": 1 + i % 7})))
    sent = list(bodies)
    for eid, body in rng.sample(bodies, s.duplicates):
        sent.insert(rng.randrange(len(sent) // 2, len(sent) + 1), (eid, body))
    for eid, body in sent:
        p.produce(s.topic, body.encode(), key=eid.encode(), headers=[("event-id", eid.encode())])
        p.poll(0)
    if p.flush(30) != 0:
        raise RuntimeError("the producer did not flush")
    return len(sent)


def start(s, name, work, *extra, no_idemd=False):
    if s.jvm:
        args = ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", s.jvm,
                "KafkaConsumerMain", "--work", work]
    else:
        args = [sys.executable, os.path.join(HERE, "consumer.py")]
    args += ["--scenario", s.name, "--topic", s.topic, "--group", s.group, "--name", name,
             "--operation", s.operation]
    if s.key_header:
        args += ["--key-header", s.key_header]
    if s.library:
        args += ["--library", s.library]
    if no_idemd:
        args.append("--no-idemd")
    args += list(extra)
    log = open(os.path.join(work, "%s-%s.log" % (s.name, name)), "w")
    s.procs[name] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    RUNNING.append(s.procs[name])
    return s.procs[name]


def stop_all():
    for p in RUNNING:
        if p.poll() is None:
            p.kill()
            p.wait()


def load_jvm_files(db, s, work):
    """The JVM consumers' effect and delivery files, into the ledger tables."""
    for fn in sorted(os.listdir(work)):
        parts = fn.split(".")
        if len(parts) < 4 or parts[1] != s.name:
            continue
        path, consumer = os.path.join(work, fn), parts[2]
        with open(path) as f:
            if parts[0] == "ledger":
                rows = [ln.rstrip("\n").split("\t") for ln in f if ln.strip()]
                with db.cursor() as c:
                    c.executemany("INSERT INTO ledger (scenario, event_id, part, off, consumer, attempt,"
                                  " claim_id) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                                  [(s.name, e, int(p), int(o), consumer, int(a), i)
                                   for e, p, o, a, i in rows])
            elif parts[0] == "deliveries":
                rows = [ln.split() for ln in f if ln.strip()]
                with db.cursor() as c:
                    c.executemany("INSERT INTO deliveries (scenario, consumer, part, off)"
                                  " VALUES (%s, %s, %s, %s)",
                                  [(s.name, consumer, int(p), int(o)) for p, o in rows])
            elif parts[0] == "counts" and fn.endswith(".json"):
                db.execute("INSERT INTO counts (scenario, consumer, counts) VALUES (%s, %s, %s)",
                           (s.name, consumer, f.read()))


def wait_dead(proc, limit=60):
    """A consumer that kills itself at its --die point."""
    try:
        proc.wait(limit)
    except subprocess.TimeoutExpired:
        raise RuntimeError("a consumer did not reach its --die point: %s" % proc.args) from None
    if proc.returncode not in (-signal.SIGKILL, 137):  # 137: the JVM's halt, had kill failed
        raise RuntimeError("a consumer exited with %s, not SIGKILL: %s" % (proc.returncode, proc.args))
    return proc.returncode


def wait_delivered(db, s, name, limit=30):
    """Until consumer NAME has polled something (it is in the group)."""
    deadline = time.time() + limit
    while time.time() < deadline:
        if s.jvm:
            f = os.path.join(s.work, "deliveries.%s.%s.tsv" % (s.name, name))
            if os.path.exists(f) and os.path.getsize(f) > 0:
                return
        elif sql(db, "SELECT 1 FROM deliveries WHERE scenario = %s AND consumer = %s LIMIT 1",
                 s.name, name):
            return
        time.sleep(0.05)
    raise RuntimeError("consumer %s of %s polled nothing in %d s" % (name, s.name, limit))


def caught_up(bootstrap, s):
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": s.group,
                                  "enable.auto.commit": False})
    try:
        tps = [confluent_kafka.TopicPartition(s.topic, p) for p in range(PARTITIONS)]
        done = c.committed(tps, timeout=5)
        for tp in done:
            _, high = c.get_watermark_offsets(tp, timeout=5)
            if tp.offset < high:
                return False
        return True
    finally:
        c.close()


def finish(bootstrap, s, limit):
    """Waits until the group committed everything, then stops its consumers."""
    deadline = time.time() + limit
    ok = False
    while time.time() < deadline:
        if caught_up(bootstrap, s):
            ok = True
            break
        for name, p in s.procs.items():
            if p.poll() is not None and p.returncode not in (0, 137, 143, -signal.SIGKILL):
                raise RuntimeError("consumer %s exited with %s" % (name, p.returncode))
        time.sleep(0.3)
    for p in s.procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in s.procs.values():
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return ok


# ---------------------------------------------------------------- scenarios
# Each returns nothing; it starts and kills consumers. "k:claimed:N" dies
# holding the N-th new batch's claims before any effect; "completed:N"
# after that batch's completions are stored, before the offset commit.

def kill_restart(s, work, db, no_idemd=False):
    """One consumer with a static group.instance.id, SIGKILLed mid-batch
    twice (after completing a batch and before committing it; holding a
    batch's claims), restarted at once each time."""
    inst = ["--instance-id", "static-" + s.name, "--batch", "200"]
    wait_dead(start(s, "life1", work, *inst, "--die", "completed:3", no_idemd=no_idemd))
    if no_idemd:
        start(s, "life2", work, *inst, no_idemd=True)
        return
    wait_dead(start(s, "life2", work, *inst, "--die", "claimed:2"))
    start(s, "life3", work, *inst)


def rebalance(s, work, db):
    """Two consumers; one is SIGKILLed holding its claims: after its session
    times out, the other gets its partitions and takes its records over
    once their lease ends."""
    start(s, "a", work, "--batch", "50", "--pace", "0.2")
    wait_delivered(db, s, "a")
    wait_dead(start(s, "b", work, "--batch", "50", "--pace", "0.2", "--die", "claimed:2"))


def join_leave(s, work, db):
    """One consumer throughout; a second joins, a third joins and dies
    after completing its first batch (before committing it), the second
    leaves (closes: its revoke commits), a fourth joins late."""
    pace = ["--batch", "40", "--pace", "0.3"]
    start(s, "a", work, *pace)
    wait_delivered(db, s, "a")
    b = start(s, "b", work, *pace)
    wait_delivered(db, s, "b")
    wait_dead(start(s, "c", work, *pace, "--die", "completed:1"))
    b.send_signal(signal.SIGTERM)
    b.wait(20)
    start(s, "d", work, *pace)


def slow_handler(s, work, db):
    """A handler that sleeps 5 s, past max.poll.interval.ms (3 s): its
    consumer loses its partitions to the other one, its effects still run
    once (its claims are held meanwhile) and its commit is refused."""
    poll = ["--batch", "100", "--pace", "0.15", "--max-poll-ms", "3000"]
    start(s, "a", work, *poll, "--stall", "2:5")
    wait_delivered(db, s, "a")
    start(s, "b", work, *poll)


def kill_in_handler(s, work, db):
    """The window no one closes from outside: a consumer killed after 30
    effects of a batch and before the batch's completion. Its restart takes
    the batch over after the lease and runs those 30 effects again, each
    with the same claim id (the key a downstream service deduplicates
    on); every other event once."""
    inst = ["--instance-id", "static-" + s.name, "--batch", "100"]
    wait_dead(start(s, "life1", work, *inst, "--die", "effect:2:%d" % s.window))
    start(s, "life2", work, *inst)


def producer_dups(s, work, db):
    """A producer that sent 10 % of the events twice; keyed by a header."""
    start(s, "a", work, "--batch", "200", "--pace", "0.05")
    time.sleep(0.5)
    start(s, "b", work, "--batch", "200", "--pace", "0.05")


# ---------------------------------------------------------------- checks

def tally(db, s, events, sent):
    once = sql(db, "SELECT count(*) FILTER (WHERE n = 1) FROM (SELECT count(*) AS n"
                   " FROM ledger WHERE scenario = %s GROUP BY event_id) x", s.name)[0][0]
    effects, distinct = sql(db, "SELECT count(*), count(DISTINCT event_id) FROM ledger"
                                " WHERE scenario = %s", s.name)[0]
    deliveries, offsets, again = sql(
        db, "SELECT sum(n), count(*), count(*) FILTER (WHERE n > 1) FROM (SELECT count(*) AS n"
            " FROM deliveries WHERE scenario = %s GROUP BY part, off) x", s.name)[0]
    takeovers = sql(db, "SELECT count(*) FROM ledger WHERE scenario = %s AND attempt > 1",
                    s.name)[0][0]
    # events with two effects carrying one claim id, attempts 1 and 2
    same_claim = sql(db, "SELECT count(*) FROM (SELECT event_id FROM ledger WHERE scenario = %s"
                         " GROUP BY event_id HAVING count(*) = 2 AND count(DISTINCT claim_id) = 1"
                         " AND min(attempt) = 1 AND max(attempt) = 2) x", s.name)[0][0]
    counts = [c for (c,) in sql(db, "SELECT counts FROM counts WHERE scenario = %s", s.name)]
    agg = {}
    for c in counts:
        for k, v in c.items():
            agg[k] = agg.get(k, 0) + v
    return dict(events=events, sent=sent, effects=effects, distinct=distinct, once=once,
                deliveries=int(deliveries), offsets=offsets, redelivered=again,
                producer_dups=sent - events, takeovers=takeovers, same_claim=same_claim,
                replayed=agg.get("replayed", 0), retried=agg.get("retried", 0),
                commit_failures=agg.get("commit_failures", 0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--work", required=True)
    ap.add_argument("--kafka-python", action="store_true",
                    help="also run three scenarios with kafka-python's consumer")
    ap.add_argument("--jvm-classpath", default="",
                    help="also run every scenario with the JVM consumer (tests/kafka/jvm)")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        return run_all(a)
    finally:
        stop_all()


def run_all(a):
    os.makedirs(a.work, exist_ok=True)
    rng = random.Random(a.seed)
    bootstrap = os.environ["KAFKA_BOOTSTRAP"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    client = idemd.Client(os.environ["IDEMD_URL"], os.environ["IDEMD_API_KEY"])
    db = psycopg.connect(os.environ["LEDGER_DSN"], autocommit=True)
    db.execute("CREATE TABLE ledger (scenario text, event_id text, part int, off bigint,"
               " consumer text, claim_id text, attempt int, at timestamptz DEFAULT clock_timestamp())")
    db.execute("CREATE TABLE deliveries (scenario text, consumer text, part int, off bigint)")
    db.execute("CREATE TABLE counts (scenario text, consumer text, counts jsonb,"
               " PRIMARY KEY (scenario, consumer))")

    plan = []
    for jvm in [None] + ([a.jvm_classpath] if a.jvm_classpath else []):
        plan += [(Scenario("kill-restart", lease=3, jvm=jvm), kill_restart),
                 (Scenario("rebalance", lease=3, jvm=jvm), rebalance),
                 (Scenario("join-leave", lease=3, jvm=jvm), join_leave),
                 (Scenario("slow-handler", lease=20, jvm=jvm), slow_handler),
                 (Scenario("producer-dups", lease=3, key_header="event-id",
                           duplicates=a.events // 10, jvm=jvm), producer_dups)]
        if not jvm:
            plan.append((Scenario("kill-in-handler", lease=3, window=30), kill_in_handler))
    if a.kafka_python:  # three of the scenarios with kafka-python's consumer
        plan += [(Scenario("kill-restart", lease=3, library="kafka-python"), kill_restart),
                 (Scenario("rebalance", lease=3, library="kafka-python"), rebalance),
                 (Scenario("slow-handler", lease=20, library="kafka-python"), slow_handler)]
    failures = []
    rows = []
    for s, run in plan:
        s.work = a.work
        t0 = time.time()
        create_topic(admin, s.topic)
        client.put_operation(s.operation, token_ttl_seconds=3600, retention_seconds=86400,
                             lease_seconds=s.lease)
        sent = produce(bootstrap, s, a.events, rng)
        run(s, a.work, db)
        caught = finish(bootstrap, s, 90)
        if s.jvm:
            load_jvm_files(db, s, a.work)
        t = tally(db, s, a.events, sent)
        t["seconds"] = round(time.time() - t0, 1)
        rows.append((s.name, t))
        bad = []
        if not caught:
            bad.append("the group did not commit every partition to its end")
        if t["distinct"] != a.events:
            bad.append("%d events of %d have an effect" % (t["distinct"], a.events))
        if s.window:
            if (t["effects"] != a.events + s.window or t["once"] != a.events - s.window
                    or t["same_claim"] != s.window):
                bad.append("%d effects, %d events once, %d twice with one claim id: not the %d"
                           " the kill left between effect and completion" % (
                               t["effects"], t["once"], t["same_claim"], s.window))
        elif t["effects"] != a.events or t["once"] != a.events:
            bad.append("%d effects for %d events" % (t["effects"], a.events))
        if t["redelivered"] + t["producer_dups"] == 0:
            bad.append("nothing was delivered twice: the scenario proves nothing")
        if s.base == "slow-handler" and t["commit_failures"] == 0:
            bad.append("no commit was refused: the handler did not outlive max.poll.interval.ms")
        failures += ["%s: %s" % (s.name, b) for b in bad]
        print("%-14s %s%s" % (s.name, json.dumps(t), "" if not bad else "  FAIL: " + "; ".join(bad)),
              flush=True)

    # The negative control: kill-restart's first kill, without idemd.
    s = Scenario("no-idemd", lease=3)
    s.work = a.work
    create_topic(admin, s.topic)
    sent = produce(bootstrap, s, a.events, rng)
    kill_restart(s, a.work, db, no_idemd=True)
    finish(bootstrap, s, 90)
    t = tally(db, s, a.events, sent)
    print("%-14s %s" % (s.name, json.dumps(t)), flush=True)
    if t["effects"] > a.events and t["once"] < a.events:
        print("negative control: without idemd %d events were counted twice (%d effects for %d"
              " events), as they must be" % (a.events - t["once"], t["effects"], a.events))
    else:
        failures.append("negative control: without idemd every event counted once: it cannot tell")

    print("\n| scenario | events | sent twice by the producer | deliveries | records"
          " delivered again | replayed | sought back (409) | taken over | commits refused |"
          " effects | events with one effect | twice, one claim id |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, t in rows + [(s.name, t)]:
        print("| %s | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d |" % (
            name, t["events"], t["producer_dups"], t["deliveries"], t["redelivered"],
            t["replayed"], t["retried"], t["takeovers"], t["commit_failures"], t["effects"],
            t["once"], t["same_claim"]))
    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
