"""Runs the ad-spend example end to end and checks its sums (tests/kafka.sh
runs it, with a broker, idemd and PostgreSQL; the environment as for
adspend.py).

Creates two topics holding the same events (some sent twice by the
producer), then for each: a consumer killed after its third poll's effects
and before that poll's offset commit, restarted, run to the end; once with
idemd (table campaign_spend), once without (campaign_spend_plain). Each
campaign's sum with idemd must equal the sum of its distinct events; the
sums without idemd must be larger (the killed poll and the producer's
duplicates counted twice), or the example shows nothing.
"""

import argparse
import json
import os
import subprocess
import sys

import confluent_kafka
import psycopg
from confluent_kafka.admin import AdminClient, NewTopic

HERE = os.path.dirname(os.path.abspath(__file__))
BOOTSTRAP = os.environ["KAFKA_BOOTSTRAP"]


def run(*args, die=False):
    p = subprocess.run([sys.executable, os.path.join(HERE, "adspend.py")] + list(args),
                       capture_output=True, text=True, timeout=60)
    out = (p.stdout + p.stderr).strip()
    if out:
        print("  " + out.replace("\n", "\n  "))
    if die and p.returncode != -9:
        raise SystemExit("the consumer was to be killed, it exited with %s" % p.returncode)
    if not die and p.returncode != 0:
        raise SystemExit("adspend.py %s failed (%s)" % (args[0], p.returncode))


def distinct_sums(topic):
    """Each campaign's spend over the topic's distinct event ids."""
    c = confluent_kafka.Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "check",
                                  "enable.auto.commit": False})
    md = c.list_topics(topic, timeout=10).topics[topic]
    c.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
              for p in md.partitions])
    seen, sums, total, idle = set(), {}, 0, 0
    while idle < 3:
        batch = c.consume(1000, timeout=1.0)
        if not batch:
            idle += 1
            continue
        for r in batch:
            if r.error() is not None:
                continue
            total += 1
            e = json.loads(r.value())
            if e["event_id"] in seen:
                continue
            seen.add(e["event_id"])
            sums[e["campaign_id"]] = sums.get(e["campaign_id"], 0) + e["spend_amount"]
    c.close()
    return sums, total, len(seen)


def main():
    argparse.ArgumentParser(description=__doc__).parse_args()
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    for f in admin.create_topics([NewTopic(t, 3, 1) for t in ("ad-events", "ad-events-plain")]).values():
        f.result(30)
    for topic in ("ad-events", "ad-events-plain"):
        print("producing into %s" % topic)
        run("produce", "--topic", topic)
    print("with idemd: killed after its third poll's effects, before its offset commit")
    run("consume", "--topic", "ad-events", "--group", "spend", "--die-after", "3", die=True)
    print("with idemd: restarted")
    run("consume", "--topic", "ad-events", "--group", "spend")
    print("without idemd: the same kill")
    run("consume", "--topic", "ad-events-plain", "--group", "spend-plain",
        "--table", "campaign_spend_plain", "--no-idemd", "--die-after", "3", die=True)
    print("without idemd: restarted")
    run("consume", "--topic", "ad-events-plain", "--group", "spend-plain",
        "--table", "campaign_spend_plain", "--no-idemd")

    want, sent, distinct = distinct_sums("ad-events")
    db = psycopg.connect(os.environ["ADSPEND_DSN"])
    got = dict(db.execute("SELECT campaign_id, spend FROM campaign_spend").fetchall())
    plain = dict(db.execute("SELECT campaign_id, spend FROM campaign_spend_plain").fetchall())
    counted = [db.execute("SELECT sum(events) FROM %s" % t).fetchone()[0]
               for t in ("campaign_spend", "campaign_spend_plain")]
    print("\n%d events sent, %d distinct" % (sent, distinct))
    print("| campaign | distinct events' spend | with idemd | without idemd |")
    print("|---|---:|---:|---:|")
    for k in sorted(want):
        print("| %s | %d | %d | %d |" % (k, want[k], got.get(k, 0), plain.get(k, 0)))
    print("| total | %d | %d | %d |" % (sum(want.values()), sum(got.values()), sum(plain.values())))
    print("| events counted | %d | %d | %d |" % (distinct, counted[0], counted[1]))
    ok = True
    if got != want:
        print("FAIL: with idemd the sums are not those of the distinct events")
        ok = False
    if sum(plain.values()) <= sum(want.values()):
        print("FAIL: without idemd nothing was counted twice: the example shows nothing")
        ok = False
    if ok:
        print("adspend: with idemd every campaign's sum is its distinct events' (%d cents);"
              " without idemd %d cents were counted twice" % (
                  sum(want.values()), sum(plain.values()) - sum(want.values())))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
