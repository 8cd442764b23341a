"""Kafka consumers (confluent-kafka, or kafka-python): each record's effect once.

A poll's records are claimed in one batch call, keyed by the event's own id
(a header or a JSON member) or by ``topic/partition/offset``; records
completed before are skipped (their stored outcome is handed back); the
handler runs once for each new record and its outcome is completed in one
batch call; only then are the offsets committed, synchronously::

    consumer = confluent_kafka.Consumer({..., "enable.auto.commit": False})
    kafka = idemd.kafka.Processor(client, "spend.add", key_field="event_id")
    kafka.subscribe(consumer, ["ad-events"])   # commits what is done on revoke
    while True:
        records = consumer.consume(500, timeout=1.0)
        kafka.process(consumer, records, add_spend)

Nothing here imports confluent_kafka until an offset is committed (install
it with ``pip install idemd[kafka]``); the consumer and the records are
used through the methods confluent-kafka's ``Consumer`` and ``Message``
have, so any object with them serves (the unit tests pass fakes).

kafka-python works too (``library="kafka-python"``, found by itself from a
``kafka.KafkaConsumer`` handed to :meth:`Processor.subscribe` or
:meth:`Processor.process`): its records' attributes are read for the
methods, ``poll()``'s ``{partition: [records]}`` is taken as it comes, its
commits and seeks take ``kafka.TopicPartition`` and ``OffsetAndMetadata``,
and ``subscribe`` passes a ``kafka.ConsumerRebalanceListener``.
"""

from __future__ import annotations

import json
import threading
import time
from typing import (Any, Callable, Dict, Iterable, List, Mapping, Optional, Protocol,
                    Sequence, Tuple, Union)

from ._flows import MessageOutcome, ReleaseOn
from .types import BatchClaimResult, StoredResponse

__all__ = ["Processor", "process", "RecordKeyError", "RecordError", "Counts"]

CONFLUENT = "confluent-kafka"
KAFKA_PYTHON = "kafka-python"

# librdkafka's "end of partition" event (KafkaError._PARTITION_EOF), which
# consume() hands out with enable.partition.eof: not a record, skipped.
_PARTITION_EOF = -191


class KafkaRecord(Protocol):
    """What the helper reads of a record (confluent_kafka.Message)."""

    def topic(self) -> Optional[str]: ...
    def partition(self) -> Optional[int]: ...
    def offset(self) -> Optional[int]: ...
    def value(self) -> Optional[bytes]: ...
    def headers(self) -> Optional[List[Tuple[str, Optional[bytes]]]]: ...
    def error(self) -> Any: ...


class KafkaConsumer(Protocol):
    """What the helper calls on a consumer (confluent_kafka.Consumer,
    kafka.KafkaConsumer)."""

    def commit(self, *args: Any, **kwargs: Any) -> Any: ...
    def seek(self, *args: Any) -> Any: ...


class RecordKeyError(ValueError):
    """A record lacks the key the helper was told to use (no such header,
    a value that is not JSON or not an object, no such member). Raised
    before anything of the batch is claimed: the caller's bug, or a poison
    record to dead-letter, never something to skip silently."""

    def __init__(self, record: KafkaRecord, why: str) -> None:
        self.record = record
        self.where = coordinates(record)
        super().__init__("record %s: %s" % (self.where, why))


class RecordError(RuntimeError):
    """consume() handed out an error event instead of a record."""

    def __init__(self, error: Any) -> None:
        self.kafka_error = error
        super().__init__("the consumer reported an error: %s" % (error,))


def field(record: Any, name: str) -> Any:
    """A record's ``topic``, ``partition``, ``offset``, ``value``,
    ``headers`` or ``error``: a method of confluent-kafka's Message, an
    attribute of kafka-python's ConsumerRecord (which has no error)."""
    v = getattr(record, name, None)
    return v() if callable(v) else v


def coordinates(record: KafkaRecord) -> str:
    """``topic/partition/offset``: the record's place in the log."""
    return "%s/%s/%s" % (field(record, "topic"), field(record, "partition"),
                         field(record, "offset"))


def library_of(consumer: Any) -> Optional[str]:
    """``kafka-python`` for a ``kafka.KafkaConsumer`` (or a subclass),
    ``confluent-kafka`` for a ``confluent_kafka.Consumer``, else None."""
    for cls in type(consumer).__mro__:
        top = cls.__module__.split(".")[0]
        if top == "kafka":
            return KAFKA_PYTHON
        if top == "confluent_kafka" or top == "cimpl":
            return CONFLUENT
    return None


class Counts:
    """What a :class:`Processor` did, summed over its calls."""

    def __init__(self) -> None:
        self.records = 0        # records handed to process()
        self.processed = 0      # the handler ran and its outcome is stored
        self.replayed = 0       # completed before: skipped, stored outcome returned
        self.retried = 0        # in progress elsewhere, or released: sought back
        self.failed = 0         # the handler raised (released or stored)
        self.rejected = 0       # idemd refused the claim for good
        self.lost = 0           # ran, but the lease had run out (another completes it)
        self.commits = 0        # synchronous commits that succeeded
        self.commit_failures = 0  # commits refused (the group moved on)

    def as_dict(self) -> Dict[str, int]:
        return dict(vars(self))


Handler = Callable[[KafkaRecord, BatchClaimResult], Any]


class Processor:
    """Runs a handler once per Kafka event, committing offsets after idemd
    stored the outcomes.

    The key is ``prefix`` + the event's id: the value of header
    ``key_header``, or member ``key_field`` of the JSON object in the
    record's value, or what ``key(record)`` returns; with none of them,
    ``topic/partition/offset`` (which holds for redeliveries, not for a
    producer that sends an event twice). ``request``, ``fingerprint`` and
    ``subject`` are as for :meth:`Client.consume`. ``topic_partition``
    builds the offsets committed and sought: confluent_kafka's
    ``TopicPartition`` unless given. ``library`` names the client
    (``"confluent-kafka"`` or ``"kafka-python"``), found from the consumer
    when not given.

    Commit offsets only through it (``enable.auto.commit`` false). A record
    answered ``in_progress`` (another consumer holds it, or held it and
    died, until its lease ends) or released after a failure is sought back,
    with what follows it in its partition: the next poll delivers it again,
    after ``retry_delay`` seconds, doubled for each call in a row that
    seeks the same partition back, up to ``max_retry_delay``. A refused commit (the group rebalanced
    away from this consumer, for instance after ``max.poll.interval.ms``)
    is counted, not raised: the outcomes are stored, so the partition's
    next owner replays those records without running their effects.
    """

    def __init__(self, client: Any, operation: str, *, key_header: Optional[str] = None,
                 key_field: Optional[str] = None,
                 key: Optional[Callable[[KafkaRecord], str]] = None, prefix: str = "",
                 request: Optional[Callable[[KafkaRecord], Any]] = None,
                 fingerprint: Optional[Callable[[KafkaRecord], str]] = None,
                 subject: Optional[Callable[[KafkaRecord], str]] = None,
                 release_on: ReleaseOn = (Exception,), retry_delay: float = 0.2,
                 max_retry_delay: float = 5.0,
                 on_replay: Optional[Callable[[KafkaRecord, Optional[StoredResponse]], Any]] = None,
                 topic_partition: Optional[Callable[[str, int, int], Any]] = None,
                 library: Optional[str] = None) -> None:
        if sum(x is not None for x in (key_header, key_field, key)) > 1:
            raise ValueError("name at most one of key_header, key_field and key")
        if library not in (None, CONFLUENT, KAFKA_PYTHON):
            raise ValueError("library is %r or %r, not %r" % (CONFLUENT, KAFKA_PYTHON, library))
        # Which client's calls to make: given, or found from the first
        # consumer seen (confluent-kafka's for any other object).
        self.library = library
        self.client = client
        self.operation = operation
        self.key_header = key_header
        self.key_field = key_field
        self.key_fn = key
        self.prefix = prefix
        self.request = request
        self.fingerprint = fingerprint
        self.subject = subject
        self.release_on = release_on
        self.retry_delay = retry_delay
        self.max_retry_delay = max_retry_delay
        # Per partition: process() calls in a row that sought it back.
        self._retry_rounds: Dict[Tuple[str, int], int] = {}
        self.on_replay = on_replay
        self.counts = Counts()
        # Offsets whose records are settled but whose commit did not happen
        # (refused, or interrupted): committed again on revoke.
        self._uncommitted: Dict[Tuple[str, int], int] = {}
        self._lock = threading.Lock()
        # confluent_kafka.TopicPartition unless given, looked up on first use.
        self.topic_partition = topic_partition

    # ------------------------------------------------------------ keys

    def key_of(self, record: KafkaRecord) -> str:
        """The idemd key of ``record``; :class:`RecordKeyError` if it has none."""
        if self.key_fn is not None:
            k = self.key_fn(record)
            if not isinstance(k, str) or not k:
                raise RecordKeyError(record, "the key function returned %r, not a text" % (k,))
            return self.prefix + k
        if self.key_header is not None:
            return self.prefix + self._header_key(record, self.key_header)
        if self.key_field is not None:
            return self.prefix + self._field_key(record, self.key_field)
        return self.prefix + coordinates(record)

    @staticmethod
    def _header_key(record: KafkaRecord, name: str) -> str:
        for h, v in field(record, "headers") or []:
            if h != name:
                continue
            if not v:
                raise RecordKeyError(record, "header %r is empty" % name)
            try:
                return v.decode("utf-8") if isinstance(v, bytes) else str(v)
            except UnicodeDecodeError:
                raise RecordKeyError(record, "header %r is not UTF-8" % name) from None
        raise RecordKeyError(record, "no header %r" % name)

    @staticmethod
    def _field_key(record: KafkaRecord, name: str) -> str:
        raw = field(record, "value")
        if raw is None:
            raise RecordKeyError(record, "no value (a tombstone?), so no member %r" % name)
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise RecordKeyError(record, "the value is not JSON (%s)" % e) from None
        if not isinstance(doc, dict):
            raise RecordKeyError(record, "the value is JSON but not an object")
        if name not in doc:
            raise RecordKeyError(record, "the value has no member %r" % name)
        v = doc[name]
        if isinstance(v, bool) or not isinstance(v, (str, int)) or v == "":
            raise RecordKeyError(record, "member %r is %r, not a text or an integer" % (name, v))
        return str(v)

    # ------------------------------------------------------------ process

    def process(self, consumer: KafkaConsumer,
                records: Union[Iterable[KafkaRecord], Mapping[Any, Iterable[KafkaRecord]]],
                handler: Handler, *, commit: bool = True) -> List[MessageOutcome[KafkaRecord]]:
        """Claims ``records`` (one poll's) as one batch, runs
        ``handler(record, claim)`` for the new ones, completes them, then
        commits each partition's offset past its settled records (with
        ``commit`` false the caller commits :meth:`offsets`). Returns one
        :class:`~idemd.MessageOutcome` per record, in order. ``records``
        may be kafka-python's ``poll()`` answer, ``{partition: [records]}``."""
        self._library(consumer)
        if isinstance(records, Mapping):
            records = [r for rs in records.values() for r in rs]
        batch: List[KafkaRecord] = []
        for r in records:
            err = field(r, "error")
            if err is None:
                batch.append(r)
            elif _error_code(err) != _PARTITION_EOF:
                raise RecordError(err)
        if not batch:
            return []
        keys = {id(r): self.key_of(r) for r in batch}  # every key checked first
        outcomes: List[MessageOutcome[KafkaRecord]] = self.client.consume(
            self.operation, batch, key=lambda r: keys[id(r)], handler=handler,
            request=self.request, fingerprint=self.fingerprint, subject=self.subject,
            release_on=self.release_on)
        self._count(outcomes)
        # The completions are stored (consume returned): the offsets may move.
        settled, retry = self._positions(outcomes)
        with self._lock:
            self._uncommitted.update(settled)
        if commit:
            self.commit(consumer)
        for tp in settled:
            if tp not in retry:  # the partition moved on
                self._retry_rounds.pop(tp, None)
        if retry:
            self._seek(consumer, retry)
            rounds = max(self._retry_rounds.get(tp, 0) for tp in retry)
            for tp in retry:
                self._retry_rounds[tp] = self._retry_rounds.get(tp, 0) + 1
            delay = min(self.retry_delay * 2 ** min(rounds, 30), self.max_retry_delay)
            if delay > 0:
                time.sleep(delay)
        return outcomes

    def _count(self, outcomes: Sequence[MessageOutcome[KafkaRecord]]) -> None:
        c = self.counts
        c.records += len(outcomes)
        for o in outcomes:
            if o.retry:
                c.retried += 1
            if o.outcome == "replayed":
                c.replayed += 1
                if self.on_replay is not None:
                    self.on_replay(o.message, o.response)
            elif o.outcome in ("processed", "failed", "rejected", "lost"):
                setattr(c, o.outcome, getattr(c, o.outcome) + 1)

    @staticmethod
    def _positions(outcomes: Sequence[MessageOutcome[KafkaRecord]]
                   ) -> Tuple[Dict[Tuple[str, int], int], Dict[Tuple[str, int], int]]:
        """Per partition: the offset to commit (past the settled records
        before the first to deliver again), and where to seek back to."""
        settled: Dict[Tuple[str, int], int] = {}
        retry: Dict[Tuple[str, int], int] = {}
        for o in sorted(outcomes, key=lambda o: (str(field(o.message, "topic")),
                                                 field(o.message, "partition") or 0,
                                                 field(o.message, "offset") or 0)):
            r = o.message
            tp = (str(field(r, "topic")), int(field(r, "partition") or 0))
            off = int(field(r, "offset") or 0)
            if tp in retry:
                continue
            if o.retry:
                retry[tp] = off
            else:
                settled[tp] = off + 1
        return settled, retry

    def offsets(self) -> List[Any]:
        """The TopicPartitions (with offsets) settled and not committed yet."""
        with self._lock:
            return [self._tp(t, p, o) for (t, p), o in sorted(self._uncommitted.items())]

    def commit(self, consumer: KafkaConsumer,
               only: Optional[Iterable[Tuple[str, int]]] = None) -> bool:
        """Commits the settled offsets (of partitions ``only``, if given),
        synchronously. False (and counted) when the broker refused."""
        with self._lock:
            todo = {tp: o for tp, o in self._uncommitted.items()
                    if only is None or tp in set(only)}
        if not todo:
            return True
        try:
            if self._library(consumer) == KAFKA_PYTHON:
                from kafka import OffsetAndMetadata, TopicPartition
                consumer.commit(offsets={TopicPartition(t, p): OffsetAndMetadata(o, "", -1)
                                         for (t, p), o in sorted(todo.items())})
            else:
                consumer.commit(offsets=[self._tp(t, p, o) for (t, p), o in sorted(todo.items())],
                                asynchronous=False)
        except (TypeError, AttributeError, ImportError):
            raise  # not the broker's refusal: a consumer without commit(offsets=...)
        except Exception:  # confluent_kafka.KafkaException: the group moved on
            self.counts.commit_failures += 1
            with self._lock:  # the partitions' new owners replay from their offsets
                for tp in todo:
                    if self._uncommitted.get(tp) == todo[tp]:
                        del self._uncommitted[tp]
            return False
        self.counts.commits += 1
        with self._lock:
            for tp, o in todo.items():
                if self._uncommitted.get(tp) == o:
                    del self._uncommitted[tp]
        return True

    def _seek(self, consumer: KafkaConsumer, retry: Dict[Tuple[str, int], int]) -> None:
        kafka_python = self._library(consumer) == KAFKA_PYTHON
        for (t, p), off in retry.items():
            try:
                if kafka_python:
                    from kafka import TopicPartition
                    consumer.seek(TopicPartition(t, p), off)
                else:
                    consumer.seek(self._tp(t, p, off))
            except Exception:  # no longer assigned: the new owner reads it
                pass

    def _library(self, consumer: Any) -> str:
        if self.library is None:
            self.library = library_of(consumer) or CONFLUENT
        return self.library

    def _tp(self, topic: str, partition: int, offset: int) -> Any:
        if self.topic_partition is None:
            from confluent_kafka import TopicPartition
            self.topic_partition = TopicPartition
        return self.topic_partition(topic, partition, offset)

    # ------------------------------------------------------------ rebalances

    def on_revoke(self, consumer: KafkaConsumer, partitions: Sequence[Any]) -> None:
        """``on_revoke`` callback: commits what is settled on the revoked
        partitions, so that their new owner starts right after it. (A
        process() call finishes its batch before the next poll, where
        revocations are delivered, so no claim is held across one.)"""
        self.commit(consumer, [(tp.topic, tp.partition) for tp in partitions])

    def on_lost(self, consumer: KafkaConsumer, partitions: Sequence[Any]) -> None:
        """``on_lost`` callback: the partitions are already someone else's,
        a commit would be refused; forget their offsets (the outcomes are
        stored, the new owner replays those records)."""
        with self._lock:
            for tp in partitions:
                self._uncommitted.pop((tp.topic, tp.partition), None)

    def subscribe(self, consumer: Any, topics: Sequence[str], **kwargs: Any) -> None:
        """``consumer.subscribe(topics)`` with this processor's rebalance
        callbacks (for kafka-python, a ``ConsumerRebalanceListener``)."""
        if self._library(consumer) == KAFKA_PYTHON:
            from kafka import ConsumerRebalanceListener
            proc = self

            class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
                def on_partitions_revoked(self, revoked: Any) -> None:
                    proc.on_revoke(consumer, list(revoked))

                def on_partitions_assigned(self, assigned: Any) -> None:
                    pass

            consumer.subscribe(list(topics), listener=Listener(), **kwargs)
            return
        consumer.subscribe(list(topics), on_revoke=self.on_revoke, on_lost=self.on_lost, **kwargs)


def process(client: Any, operation: str, consumer: KafkaConsumer,
            records: Iterable[KafkaRecord], handler: Handler,
            **options: Any) -> List[MessageOutcome[KafkaRecord]]:
    """One batch through a :class:`Processor` made for it (``options`` are
    its keyword arguments); a long-running consumer keeps one Processor and
    passes its ``on_revoke`` to ``subscribe``."""
    return Processor(client, operation, **options).process(consumer, records, handler)


def _error_code(err: Any) -> Any:
    code = getattr(err, "code", None)
    return code() if callable(code) else code
