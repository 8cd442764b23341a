"""idemd.kafka against a real idemd, with a fake Kafka consumer and fake
records (tests/kafka.sh runs the helper against a real broker)."""

import json
import sys

import pytest

import idemd
import idemd.kafka
from conftest import uniq


class Rec:
    """A confluent_kafka.Message as the helper reads it."""

    def __init__(self, offset, value=None, headers=None, topic="t", partition=0, error=None):
        self._o, self._v, self._h, self._t, self._p, self._e = (
            offset, value, headers, topic, partition, error)

    def topic(self):
        return self._t

    def partition(self):
        return self._p

    def offset(self):
        return self._o

    def value(self):
        return self._v

    def headers(self):
        return self._h

    def error(self):
        return self._e


class TP:
    def __init__(self, topic, partition, offset=-1001):
        self.topic, self.partition, self.offset = topic, partition, offset

    def __eq__(self, other):
        return (self.topic, self.partition, self.offset) == (other.topic, other.partition, other.offset)

    def __repr__(self):
        return "TP(%r, %r, %r)" % (self.topic, self.partition, self.offset)


class FakeConsumer:
    def __init__(self, refuse=False):
        self.commits, self.seeks, self.refuse = [], [], refuse
        self.subscribed = None

    def commit(self, offsets=None, asynchronous=True):
        assert asynchronous is False, "the helper commits synchronously"
        if self.refuse:
            raise RuntimeError("KafkaError{code=UNKNOWN_MEMBER_ID}")
        self.commits.append(sorted((tp.topic, tp.partition, tp.offset) for tp in offsets))

    def seek(self, tp):
        self.seeks.append((tp.topic, tp.partition, tp.offset))

    def subscribe(self, topics, on_revoke=None, on_lost=None):
        self.subscribed = (topics, on_revoke, on_lost)


def processor(client, op, **kw):
    return idemd.kafka.Processor(client, op, retry_delay=0, topic_partition=TP, **kw)


def event(eid, **more):
    return json.dumps(dict(event_id=eid, **more)).encode()


def test_new_records_run_once_then_replay_and_offsets_follow(client, op):
    ran = []
    p = processor(client, op, key_field="event_id")
    recs = [Rec(0, event("e1", n=1)), Rec(1, event("e2", n=2)),
            Rec(5, event("e3"), partition=1)]
    c = FakeConsumer()
    out = p.process(c, recs, lambda r, claim: ran.append(r.offset()) or {"ok": r.offset()})
    assert [o.outcome for o in out] == ["processed"] * 3 and ran == [0, 1, 5]
    assert c.commits == [[("t", 0, 2), ("t", 1, 6)]] and c.seeks == []
    # the same events again (a redelivery): skipped, stored outcome handed back
    seen = []
    p2 = processor(client, op, key_field="event_id", on_replay=lambda r, resp: seen.append(resp))
    out = p2.process(c, recs, lambda r, claim: ran.append("again"))
    assert [o.outcome for o in out] == ["replayed"] * 3 and ran == [0, 1, 5]
    assert [s["body"] for s in seen] == [{"ok": 0}, {"ok": 1}, {"ok": 5}]
    assert p2.counts.replayed == 3 and p2.counts.processed == 0 and p2.counts.commits == 1


def test_duplicate_event_ids_from_the_producer_run_once(client, op):
    ran = []
    p = processor(client, op, key_header="event-id")
    h = lambda eid: [("trace", b"x"), ("event-id", eid.encode())]  # noqa: E731
    recs = [Rec(0, b"a", h("ev-1")), Rec(1, b"b", h("ev-2")), Rec(2, b"a", h("ev-1"))]
    c = FakeConsumer()
    p.process(c, recs, lambda r, claim: ran.append(r.offset()))
    p.process(c, [Rec(3, b"a", h("ev-2"))], lambda r, claim: ran.append(r.offset()))
    assert ran == [0, 1] and c.commits == [[("t", 0, 3)], [("t", 0, 4)]]


def test_default_key_is_topic_partition_offset(client, op):
    p = processor(client, op, prefix="spend:")
    r = Rec(7, b"not json", topic="ads", partition=2)
    assert p.key_of(r) == "spend:ads/2/7"
    out = p.process(FakeConsumer(), [r], lambda r, claim: None)
    assert out[0].key == "spend:ads/2/7" and out[0].outcome == "processed"


def test_in_progress_is_sought_back_and_not_committed(client, op):
    held = uniq("e")
    client.claim_key(op, held)  # another consumer holds it (its lease runs)
    p = processor(client, op, key_field="event_id")
    recs = [Rec(10, event("a-" + held)), Rec(11, event(held)), Rec(12, event("b-" + held)),
            Rec(3, event("c-" + held), partition=1)]
    c = FakeConsumer()
    out = p.process(c, recs, lambda r, claim: None)
    assert [o.outcome for o in out] == ["processed", "in_progress", "processed", "processed"]
    # partition 0 commits up to the held record and is read again from it
    assert c.commits == [[("t", 0, 11), ("t", 1, 4)]] and c.seeks == [("t", 0, 11)]
    assert p.counts.retried == 1


def test_released_failure_is_delivered_again(client, op):
    class Boom(Exception):
        pass

    def handler(r, claim):
        if r.offset() == 1:
            raise Boom()

    p = processor(client, op)
    c = FakeConsumer()
    out = p.process(c, [Rec(0), Rec(1), Rec(2)], handler)
    assert [o.outcome for o in out] == ["processed", "failed", "processed"]
    assert c.commits == [[("t", 0, 1)]] and c.seeks == [("t", 0, 1)]
    out = p.process(c, [Rec(1), Rec(2)], lambda r, claim: None)  # redelivered
    assert [o.outcome for o in out] == ["processed", "replayed"]
    assert c.commits[-1] == [("t", 0, 3)]


def test_a_refused_commit_is_counted_and_the_outcomes_stay_stored(client, op):
    p = processor(client, op, key_field="event_id")
    eid = uniq("e")
    out = p.process(FakeConsumer(refuse=True), [Rec(0, event(eid))], lambda r, claim: 1)
    assert out[0].outcome == "processed" and p.counts.commit_failures == 1
    assert p.offsets() == []
    # the partition's next owner reads the record again: replayed
    out = processor(client, op, key_field="event_id").process(
        FakeConsumer(), [Rec(0, event(eid))], lambda r, claim: 2)
    assert out[0].outcome == "replayed" and out[0].response["body"] == 1


def test_revoke_commits_what_is_settled_on_the_revoked_partitions(client, op):
    p = processor(client, op)
    c = FakeConsumer()
    p.process(c, [Rec(0), Rec(4, partition=1)], lambda r, claim: None, commit=False)
    assert c.commits == [] and p.offsets() == [TP("t", 0, 1), TP("t", 1, 5)]
    p.on_revoke(c, [TP("t", 1)])
    assert c.commits == [[("t", 1, 5)]] and p.offsets() == [TP("t", 0, 1)]
    p.on_lost(c, [TP("t", 0)])
    assert p.offsets() == []
    p.subscribe(c, ["t"])
    assert c.subscribed == (["t"], p.on_revoke, p.on_lost)


@pytest.mark.parametrize("rec,why", [
    (Rec(0, b"plain text"), "not JSON"),
    (Rec(0, b"[1, 2]"), "not an object"),
    (Rec(0, event("x")[:-1] + b', "other": 1}'), None),
    (Rec(0, json.dumps({"id": "x"}).encode()), "no member 'event_id'"),
    (Rec(0, json.dumps({"event_id": None}).encode()), "not a text or an integer"),
    (Rec(0, None), "tombstone"),
])
def test_bad_json_key_is_a_clear_error(client, op, rec, why):
    p = processor(client, op, key_field="event_id")
    if why is None:
        assert p.key_of(rec) == "x"
        return
    ran = []
    with pytest.raises(idemd.kafka.RecordKeyError, match=why) as e:
        p.process(FakeConsumer(), [Rec(1, event("fine")), rec], lambda r, claim: ran.append(1))
    assert "t/0/0" in str(e.value) and ran == []
    # nothing of the batch was claimed: the good record is still new
    assert p.process(FakeConsumer(), [Rec(1, event("fine"))], lambda r, c: 1)[0].outcome in (
        "processed", "replayed")


def test_missing_header_is_a_clear_error(client, op):
    p = processor(client, op, key_header="event-id")
    with pytest.raises(idemd.kafka.RecordKeyError, match="no header 'event-id'"):
        p.process(FakeConsumer(), [Rec(0, b"{}", [("other", b"1")])], lambda r, c: None)
    with pytest.raises(idemd.kafka.RecordKeyError, match="empty"):
        p.key_of(Rec(0, b"{}", [("event-id", b"")]))
    with pytest.raises(ValueError):
        idemd.kafka.Processor(client, op, key_header="a", key_field="b")


def test_error_events_raise_and_partition_eof_is_skipped(client, op):
    class Err:
        def __init__(self, code):
            self._c = code

        def code(self):
            return self._c

        def __str__(self):
            return "KafkaError(%d)" % self._c

    p = processor(client, op)
    assert p.process(FakeConsumer(), [Rec(0, error=Err(-191))], lambda r, c: None) == []
    with pytest.raises(idemd.kafka.RecordError, match="KafkaError"):
        p.process(FakeConsumer(), [Rec(0, error=Err(-195))], lambda r, c: None)


def test_process_function(client, op):
    c = FakeConsumer()
    p_out = idemd.kafka.process(client, op, c, [], lambda r, claim: None)
    assert p_out == [] and c.commits == []


def test_retry_delay_doubles_while_records_are_held(client, op, monkeypatch):
    slept = []
    monkeypatch.setattr(idemd.kafka.time, "sleep", slept.append)
    held = uniq("e")
    client.claim_key(op, held)
    p = idemd.kafka.Processor(client, op, key_field="event_id", topic_partition=TP,
                              retry_delay=0.5, max_retry_delay=3)
    for _ in range(5):
        p.process(FakeConsumer(), [Rec(0, event(held))], lambda r, claim: None)
    assert slept == [0.5, 1.0, 2.0, 3, 3]
    # another partition's progress does not reset it; the partition's own does
    p.process(FakeConsumer(), [Rec(7, event("p1-" + held), partition=1)], lambda r, claim: None)
    p.process(FakeConsumer(), [Rec(0, event(held))], lambda r, claim: None)
    assert slept[-1] == 3
    p.process(FakeConsumer(), [Rec(1, event("other-" + held))], lambda r, claim: None)
    p.process(FakeConsumer(), [Rec(0, event(held))], lambda r, claim: None)
    assert slept[-1] == 0.5


def test_a_consumer_without_commit_offsets_is_a_bug_not_a_refusal(client, op):
    class Old:
        def commit(self):  # no offsets=, asynchronous=
            pass

        def seek(self, tp):
            pass

    p = processor(client, op)
    with pytest.raises(TypeError):
        p.process(Old(), [Rec(0)], lambda r, claim: None)
    assert p.counts.commit_failures == 0


# ---------------------------------------------------------------- kafka-python

class KpRecord:
    """A kafka-python ConsumerRecord: attributes, no error."""

    def __init__(self, offset, value=None, headers=(), topic="t", partition=0):
        self.topic, self.partition, self.offset = topic, partition, offset
        self.value, self.headers = value, list(headers)


@pytest.fixture
def fake_kafka(monkeypatch):
    """The names idemd.kafka imports from kafka-python."""
    import collections
    import types
    mod = types.ModuleType("kafka")
    mod.TopicPartition = collections.namedtuple("TopicPartition", "topic partition")
    mod.OffsetAndMetadata = collections.namedtuple("OffsetAndMetadata",
                                                   "offset metadata leader_epoch")

    class ConsumerRebalanceListener:
        pass

    mod.ConsumerRebalanceListener = ConsumerRebalanceListener
    monkeypatch.setitem(sys.modules, "kafka", mod)
    return mod


class KpConsumer:
    def __init__(self):
        self.commits, self.seeks, self.listener = [], [], None

    def commit(self, offsets=None, timeout_ms=None):
        self.commits.append(sorted((tp.topic, tp.partition, om.offset) for tp, om in offsets.items()))

    def seek(self, partition, offset):
        self.seeks.append((partition.topic, partition.partition, offset))

    def subscribe(self, topics=(), pattern=None, listener=None):
        self.listener = listener


def test_kafka_python_poll_commit_seek_and_listener(client, op, fake_kafka):
    held = uniq("e")
    client.claim_key(op, held)
    p = idemd.kafka.Processor(client, op, key_field="event_id", retry_delay=0,
                              library="kafka-python")
    c = KpConsumer()
    p.subscribe(c, ["t"])
    assert isinstance(c.listener, fake_kafka.ConsumerRebalanceListener)
    polled = {fake_kafka.TopicPartition("t", 0): [KpRecord(0, event("a-" + held)),
                                                  KpRecord(1, event(held))],
              fake_kafka.TopicPartition("t", 1): [KpRecord(4, event("b-" + held), partition=1)]}
    out = p.process(c, polled, lambda r, claim: r.offset)
    assert [o.outcome for o in out] == ["processed", "in_progress", "processed"]
    assert c.commits == [[("t", 0, 1), ("t", 1, 5)]] and c.seeks == [("t", 0, 1)]
    # revoked through the listener: nothing left to commit, nothing refused
    c.listener.on_partitions_revoked({fake_kafka.TopicPartition("t", 0)})
    assert p.counts.commit_failures == 0


def test_kafka_python_found_by_itself_and_keyed_by_header(client, op, fake_kafka):
    class KafkaConsumer(KpConsumer):
        pass

    KafkaConsumer.__module__ = "kafka.consumer.group"
    assert idemd.kafka.library_of(KafkaConsumer()) == "kafka-python"
    assert idemd.kafka.library_of(FakeConsumer()) is None
    eid = uniq("e")
    p = idemd.kafka.Processor(client, op, key_header="event-id", retry_delay=0)
    c = KafkaConsumer()
    recs = [KpRecord(0, b"x", [("event-id", eid.encode())]),
            KpRecord(1, b"x", [("event-id", eid.encode())])]
    out = p.process(c, recs, lambda r, claim: None)
    assert p.library == "kafka-python" and [o.outcome for o in out] == ["processed"] * 2
    assert c.commits == [[("t", 0, 2)]]
    with pytest.raises(idemd.kafka.RecordKeyError, match="no header"):
        p.process(c, [KpRecord(2, b"x")], lambda r, claim: None)
