"""RabbitMQ consumers under chaos, with and without idemd (run by tests/queue.sh).

One file, three roles:

* ``chaos.py --messages N --seed S --work DIR`` (the orchestrator): starts a
  payment stub (HTTP, records every call: the message id, the key and the
  attempt it was sent, the time; never deduplicates), publishes N payment
  messages with a publisher that retries (a seeded share of messages is
  published twice with the same message id, as after a lost confirm), runs
  four consumer processes and a chaos loop that SIGKILLs them and restarts
  them, then checks the stub's record against the consumers' journal. It
  does this twice on two queues: once with consumers that use idemd
  (``Client.consume``), once with plain consumers (pay, then ack).
* ``chaos.py consumer idemd|plain INSTANCE``: one consumer process, manual
  acks, prefetch. Per delivery a seeded RNG decides whether it kills
  itself with SIGKILL and where: before the payment, after the payment and
  before idemd's completion, or after the completion and before the ack.
  It journals (one write(2) per line, so a SIGKILL loses none) "pay" before
  each payment (message id and idemd attempt) and "acked" once the
  message's complete was acknowledged (or its claim replayed a completed
  record; without idemd: once acked).

What is counted is executions per MESSAGE ID at the stub, not per key. The
journal says, for every consumer that died of SIGKILL (its own or the
chaos loop's), which messages it had between a payment and its
acknowledged complete when it died. Checked with idemd: every message was
paid; a message executed more than once had as many kills between its
payment and complete as it has extra executions, and every execution but
one is by an attempt whose holder was killed with it open (any other
duplicate fails the run); no message is executed after its complete was
acknowledged; no attempt is executed twice; the queue is empty; idemd
holds one completed record per message and none in progress. Without
idemd: every message was paid and some were executed twice (asserted > 0:
the same chaos does produce duplicates, so the idemd checks could fail).

``--negative-control`` runs only the idemd consumers, each delivery under a
fresh idemd key (idemd then cannot tell a redelivery from a new message):
the duplicate checks must fail; tests/queue.sh runs it briefly and fails
the stage if they do not.

Environment (from tests/queue.sh): AMQP_PORT, IDEMD_URL, IDEMD_API_KEY;
the orchestrator passes STUB_URL, QUEUE, OPERATION, CHAOS_SEED, CHAOS_RATE,
CHAOS_EVENTS, CHAOS_CALM, CHAOS_RANDOM_KEYS to the consumers. Exit status
0 when every check holds; figures.json in the work directory holds the
figures and, per kill, the messages it left between payment and complete.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import urlsplit

import pika

CONSUMERS = 4
PREFETCH = 50          # unacked deliveries per consumer
BATCH = 20             # deliveries per batch claim
RECLAIM_AFTER = 0.5    # seconds before a delivery found in progress is claimed again
LEASE_SECONDS = 3      # a dead consumer's claims are taken over after this
SELF_KILL_RATE = 0.004  # per delivery: probability of dying at one of the points
EXTERNAL_KILL_EVERY = 350  # mean payments between SIGKILLs from the chaos loop
PUBLISH_RETRY_RATE = 0.03  # share of messages the publisher sends twice
RESEND_GAP = PREFETCH      # messages between a message and its resend
POINTS = ("before_effect", "after_effect", "after_complete")
IDLE_EXIT_SECONDS = LEASE_SECONDS + 2  # calm consumers leave after this long idle


def amqp_params() -> pika.ConnectionParameters:
    return pika.ConnectionParameters(host="127.0.0.1", port=int(os.environ["AMQP_PORT"]),
                                     heartbeat=30, blocked_connection_timeout=30,
                                     connection_attempts=10, retry_delay=0.2)


# ------------------------------------------------------------------ stub

class Stub:
    """The payment provider: records (queue, message id, key) for every call."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # per queue: (message id, key, attempt or None, monotonic time of the call)
        self.calls: Dict[str, List[Tuple[str, str, Optional[int], float]]] = defaultdict(list)
        self.paid: Dict[str, set[str]] = defaultdict(set)
        self.cut_short = 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # Headers and body go out in two writes: without this, Nagle
                # and the client's delayed ACK add 40 ms to every call.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                n = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(n)
                try:
                    # A consumer killed between the headers and the body
                    # leaves a request cut short: no payment is made for it.
                    body = json.loads(data) if len(data) == n else None
                except ValueError:
                    body = None
                key = self.headers.get("Idempotency-Key", "")
                if not isinstance(body, dict) or not body.get("message_id") or not key:
                    stub.cut_short += 1
                    self.send_error(400)
                    return
                queue = self.path.rsplit("/", 1)[-1]
                attempt = body.get("attempt")
                with stub.lock:
                    stub.calls[queue].append((str(body["message_id"]), key,
                                              attempt if isinstance(attempt, int) else None,
                                              time.monotonic()))
                    stub.paid[queue].add(str(body["message_id"]))
                    charge = "ch_%d" % len(stub.calls[queue])
                out = json.dumps({"charge": charge}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
                    super().handle_error(request, client_address)  # a killed consumer is not news

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def call_count(self, queue: str) -> int:
        with self.lock:
            return len(self.calls[queue])

    def paid_count(self, queue: str) -> int:
        with self.lock:
            return len(self.paid[queue])

    def snapshot(self, queue: str) -> List[Tuple[str, str, Optional[int], float]]:
        with self.lock:
            return list(self.calls[queue])


# ------------------------------------------------------------------ publisher

def publish(queue: str, n: int, seed: int) -> int:
    """Publishes N persistent messages, committed in transactions of 250
    (a commit is the broker's confirmation of the chunk); a seeded share is
    sent again with the same message id, as a publisher does when a
    confirmation was lost: RESEND_GAP messages later, so that the copy
    lands in another consumer's prefetch window at about the time the
    first is being handled (two live consumers claiming one message at
    once). Returns the resends."""
    rng = random.Random("publisher:%d" % seed)
    conn = pika.BlockingConnection(amqp_params())
    ch = conn.channel()
    ch.queue_declare(queue, durable=True)
    ch.tx_select()
    resends = 0
    later: Dict[int, List[Tuple[bytes, pika.BasicProperties]]] = defaultdict(list)
    for i in range(n + RESEND_GAP):
        if i < n:
            mid = "pay-%05d" % i
            body = json.dumps({"message_id": mid, "amount": 100 + i % 900,
                               "currency": "EUR"}).encode()
            props = pika.BasicProperties(message_id=mid, delivery_mode=2,
                                         content_type="application/json")
            ch.basic_publish("", queue, body, props)
            if rng.random() < PUBLISH_RETRY_RATE:
                later[i + RESEND_GAP].append((body, props))
        for body, props in later.pop(i, []):
            ch.basic_publish("", queue, body, props)
            resends += 1
        if i % 250 == 249 or i == n + RESEND_GAP - 1:
            ch.tx_commit()
    conn.close()
    return resends


def queue_depth(queue: str) -> int:
    conn = pika.BlockingConnection(amqp_params())
    try:
        return int(conn.channel().queue_declare(queue, durable=True, passive=True).method.message_count)
    finally:
        conn.close()


# ------------------------------------------------------------------ consumer

class Payer:
    """Calls the stub over one kept-alive connection."""

    def __init__(self, url: str, queue: str) -> None:
        u = urlsplit(url)
        self.host, self.port, self.path = u.hostname or "127.0.0.1", u.port or 80, "/pay/" + queue
        self.conn: Optional[http.client.HTTPConnection] = None

    def pay(self, message: Dict[str, Any], key: str) -> str:
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
            try:
                self.conn.request("POST", self.path, json.dumps(message),
                                  {"Content-Type": "application/json", "Idempotency-Key": key})
                r = self.conn.getresponse()
                data = r.read()
                if r.status != 200:
                    raise RuntimeError("stub answered %d" % r.status)
                return str(json.loads(data)["charge"])
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")


def consumer(mode: str, instance: str) -> None:
    queue = os.environ["QUEUE"]
    rng = random.Random("%s:%s:%s" % (os.environ["CHAOS_SEED"], mode, instance))
    rate = float(os.environ["CHAOS_RATE"])
    calm_file = os.environ["CHAOS_CALM"]
    # the negative control: a fresh idemd key per delivery, so idemd cannot
    # recognise a redelivery (the checks must then fail)
    random_keys = os.environ.get("CHAOS_RANDOM_KEYS") == "1"
    events = os.open(os.environ["CHAOS_EVENTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    payer = Payer(os.environ["STUB_URL"], queue)

    def note(what: str) -> None:
        # one write(2) per line on an O_APPEND file: whole lines, in the
        # kernel before the next step, so a SIGKILL cannot lose one
        os.write(events, ("%s\n" % what).encode())

    def journal(what: str, mids: Any) -> None:
        """The journal the orchestrator reads back: "pay" before a payment
        is sent, "acked" once its complete was acknowledged (or a replay
        showed it completed), "open-end" when a message leaves this
        consumer unsettled otherwise; each with the monotonic time and
        this consumer's instance name."""
        if mids:
            note("%s %.6f %s %s" % (what, time.monotonic(), instance, " ".join(mids)))

    def die_at(plan: Dict[str, str], point: str, mid: str) -> None:
        if plan.get(mid) == point and not os.path.exists(calm_file):
            note("kill %s %s %s" % (point, mid, instance))
            os.kill(os.getpid(), signal.SIGKILL)

    import idemd  # clients/python/src, on PYTHONPATH
    client = idemd.Client(os.environ["IDEMD_URL"], os.environ["IDEMD_API_KEY"],
                          retry=idemd.Retry(attempts=6, base_delay=0.1))
    operation = os.environ["OPERATION"]

    conn = pika.BlockingConnection(amqp_params())
    ch = conn.channel()
    ch.basic_qos(prefetch_count=PREFETCH)
    fresh: List[Tuple[Any, Dict[str, Any]]] = []
    # Deliveries another consumer holds (409 in progress): kept unacked here
    # and claimed again a little later. Sent back to the queue instead, they
    # would come straight back to the head of it, to every consumer.
    deferred: List[Tuple[float, Any, Dict[str, Any]]] = []
    idle_since = time.monotonic()
    for method, _props, body in ch.consume(queue, inactivity_timeout=0.05):
        if method is not None:
            fresh.append((method, json.loads(body)))
            if len(fresh) < BATCH:
                continue
        now = time.monotonic()
        batch = fresh + [(d, m) for due, d, m in deferred if due <= now]
        deferred = [x for x in deferred if x[0] > now]
        fresh = []
        if not batch:
            if (not deferred and os.path.exists(calm_file)
                    and now - idle_since > IDLE_EXIT_SECONDS):
                break
            continue
        idle_since = now
        # The chaos plan of this batch: at most one point per delivery.
        plan = {m["message_id"]: rng.choice(POINTS) for _, m in batch if rng.random() < rate}
        if mode == "plain":
            for method, m in batch:
                die_at(plan, "before_effect", m["message_id"])
                journal("pay", [m["message_id"]])
                payer.pay(m, m["message_id"])
                die_at(plan, "after_effect", m["message_id"])
            for method, m in batch:
                die_at(plan, "after_complete", m["message_id"])  # after the payment, before the ack
                ch.basic_ack(method.delivery_tag)
                journal("acked", [m["message_id"]])
            continue

        def handler(m: Dict[str, Any], claim: idemd.BatchClaimResult) -> Dict[str, str]:
            die_at(plan, "before_effect", m["message_id"])
            assert claim.id is not None
            journal("pay", ["%s/%s" % (m["message_id"], claim.attempt)])
            # the record id (the same on every attempt) as the provider's
            # key, and the attempt, which the stub records with the call
            charge = payer.pay(dict(m, attempt=claim.attempt), claim.id)
            die_at(plan, "after_effect", m["message_id"])
            return {"charge": charge}

        def key(m: Dict[str, Any]) -> str:
            if random_keys:
                return "%s~%s" % (m["message_id"], os.urandom(6).hex())
            return str(m["message_id"])

        try:
            outcomes = client.consume(operation, [m for _, m in batch], key=key,
                                      handler=handler, request=lambda m: m)
        except idemd.IdemdError as e:
            # idemd unreachable or refusing after the client's retries: the
            # batch comes back later; what was paid is left unsettled
            note("retry consume %s" % e)
            journal("open-end", [m["message_id"] for _, m in batch])
            time.sleep(0.2)
            for method, _ in batch:
                ch.basic_nack(method.delivery_tag, requeue=True)
            continue
        journal("acked", [m["message_id"] for (_, m), o in zip(batch, outcomes)
                          if o.outcome in ("processed", "replayed")])
        journal("open-end", [m["message_id"] for (_, m), o in zip(batch, outcomes)
                             if o.outcome not in ("processed", "replayed", "in_progress")])
        for (method, m), o in zip(batch, outcomes):
            if o.outcome == "in_progress":
                note("busy %s" % m["message_id"])
                deferred.append((time.monotonic() + RECLAIM_AFTER, method, m))
                continue
            if o.retry:
                note("retry %s %s %s" % (o.outcome, m["message_id"], o.error))
                ch.basic_nack(method.delivery_tag, requeue=True)
                continue
            if o.outcome in ("rejected", "failed"):
                note("error %s %s %s %s" % (o.outcome, m["message_id"], o.code, o.error))
            elif o.outcome == "lost":
                note("lost %s" % m["message_id"])
            die_at(plan, "after_complete", m["message_id"])
            ch.basic_ack(method.delivery_tag)
    conn.close()


# ------------------------------------------------------------------ orchestrator

class Fleet:
    """Four consumer processes, restarted when they die; SIGKILLs at random times."""

    def __init__(self, mode: str, env: Dict[str, str], seed: int) -> None:
        self.mode, self.env = mode, env
        self.rng = random.Random("chaos:%s:%d" % (mode, seed))
        self.procs: List[Optional[subprocess.Popen[bytes]]] = [None] * CONSUMERS
        self.generation = 0
        self.external_kills = 0
        self.restarts = 0
        self.next_kill = self.rng.expovariate(1 / EXTERNAL_KILL_EVERY)
        self.names: Dict[int, str] = {}          # pid -> instance name
        self.every: Dict[str, subprocess.Popen[bytes]] = {}
        self.loop_killed: List[str] = []          # instances the chaos loop SIGKILLed
        self.stopped: List[str] = []              # instances still running at stop()

    def spawn(self, slot: int) -> None:
        self.generation += 1
        name = "%d.%d" % (slot, self.generation)
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "consumer", self.mode,
                              name], env=self.env)
        self.procs[slot] = p
        self.every[name] = p
        self.names[p.pid] = name

    def tick(self, calm: bool, progress: int = 0) -> int:
        """Restarts dead consumers (not after a clean exit when calm) and,
        unless calm, SIGKILLs one at random moments: when PROGRESS (calls
        that reached the stub) passes a random mark, so that a faster run
        gets as many kills as a slower one. Returns how many are live."""
        if not calm and progress >= self.next_kill:
            live = [p for p in self.procs if p is not None and p.poll() is None]
            if live:
                victim = self.rng.choice(live)
                victim.send_signal(signal.SIGKILL)
                self.external_kills += 1
                self.loop_killed.append(self.names[victim.pid])
            self.next_kill = progress + self.rng.expovariate(1 / EXTERNAL_KILL_EVERY)
        alive = 0
        for slot, p in enumerate(self.procs):
            if p is None:
                self.spawn(slot)
            elif p.poll() is not None:
                if calm and p.returncode == 0:
                    continue
                self.restarts += 1
                self.spawn(slot)
            alive += 1
        return alive

    def stop(self) -> None:
        for p in self.procs:
            if p is not None and p.poll() is None:
                self.stopped.append(self.names[p.pid])
                p.kill()
        for p in self.every.values():
            p.wait()

    def deaths(self) -> Dict[str, str]:
        """Instance -> how it was killed: every consumer that died of
        SIGKILL during the run (by its own chaos plan or the chaos loop)."""
        out = {}
        for name, p in self.every.items():
            if p.returncode == -signal.SIGKILL and name not in self.stopped:
                out[name] = "chaos loop" if name in self.loop_killed else "itself"
        return out


def run(mode: str, args: argparse.Namespace, stub: Stub, client: Any) -> Dict[str, Any]:
    label = mode + ("-random-keys" if args.negative_control else "")
    queue = "payments.%s" % label
    work = os.path.join(args.work, label)
    os.makedirs(work, exist_ok=True)
    calm = os.path.join(work, "calm")
    events = os.path.join(work, "events")
    operation = "payment.capture.%s" % label
    if mode == "idemd":
        client.put_operation(operation, token_ttl_seconds=3600, retention_seconds=86400,
                             lease_seconds=LEASE_SECONDS)
    t0 = time.monotonic()
    resends = publish(queue, args.messages, args.seed)
    published = time.monotonic() - t0
    env = dict(os.environ, QUEUE=queue, OPERATION=operation, STUB_URL=stub.url,
               CHAOS_SEED=str(args.seed), CHAOS_RATE=str(SELF_KILL_RATE),
               CHAOS_EVENTS=events, CHAOS_CALM=calm,
               CHAOS_RANDOM_KEYS="1" if args.negative_control else "0")
    fleet = Fleet(mode, env, args.seed)
    t1 = time.monotonic()
    deadline = t1 + args.deadline
    want = {"pay-%05d" % i for i in range(args.messages)}
    try:
        # Chaos until every message has been paid at least once...
        report = t1 + 10
        while time.monotonic() < deadline:
            fleet.tick(calm=False, progress=stub.call_count(queue))
            if stub.paid_count(queue) >= len(want):
                break
            if time.monotonic() >= report:
                report += 10
                print("%s: %d of %d paid after %.0f s" % (mode, stub.paid_count(queue), len(want),
                                                         time.monotonic() - t1), flush=True)
            time.sleep(0.05)
        chaos_seconds = time.monotonic() - t1
        # ...then calm: no more kills; consumers finish the redeliveries and
        # leave once idle for longer than a lease. Restart them until the
        # queue (nothing unacked: no consumer is left) is empty.
        open(calm, "w").close()
        while time.monotonic() < deadline:
            if fleet.tick(calm=True) == 0:
                if queue_depth(queue) == 0:
                    break
                for slot in range(CONSUMERS):
                    fleet.spawn(slot)
            time.sleep(0.1)
        else:
            raise SystemExit("%s: not drained within %d s" % (mode, args.deadline))
    finally:
        fleet.stop()
    total_seconds = time.monotonic() - t1
    lines = open(events).read().splitlines() if os.path.exists(events) else []
    kills: Dict[str, int] = defaultdict(int)
    for ln in lines:
        if ln.startswith("kill "):
            kills[ln.split()[1]] += 1
    return {"mode": mode, "label": label, "queue": queue, "operation": operation,
            "resends": resends, "publish_seconds": published, "chaos_seconds": chaos_seconds,
            "total_seconds": total_seconds, "kills": dict(kills),
            "external_kills": fleet.external_kills, "restarts": fleet.restarts,
            "errors": [ln for ln in lines if ln.startswith("error")],
            "retries": sum(1 for ln in lines if ln.startswith("retry")),
            "lost": sum(1 for ln in lines if ln.startswith("lost")),
            "busy": sum(1 for ln in lines if ln.startswith("busy")),
            "lines": lines, "deaths": fleet.deaths(),
            "calls": stub.snapshot(queue), "depth": queue_depth(queue)}


def analyse(r: Dict[str, Any], want: set[str]) -> None:
    """Executions per message id (the stub's calls) against the consumers'
    journal: which messages each killed consumer had between a payment and
    its acknowledged complete (ack, without idemd) when it died. Adds the
    figures to R."""
    open_: Dict[str, Dict[str, None]] = defaultdict(dict)  # instance -> open items, in order
    acked_at: Dict[str, float] = {}                        # message -> first acknowledgement
    payers: Dict[str, List[str]] = defaultdict(list)       # "mid/attempt" -> instances
    self_kill_point: Dict[str, str] = {}
    for ln in r["lines"]:
        f = ln.split()
        if f[0] == "kill" and len(f) >= 4:
            self_kill_point[f[3]] = f[1]
        if f[0] not in ("pay", "acked", "open-end"):
            continue
        t, inst, items = float(f[1]), f[2], f[3:]
        for it in items:
            mid = it.split("/")[0]
            if f[0] == "pay":
                open_[inst][it] = None
                payers[it].append(inst)
                continue
            for o in [o for o in open_[inst] if o.split("/")[0] == mid]:
                del open_[inst][o]
            if f[0] == "acked":
                acked_at[mid] = min(acked_at.get(mid, t), t)
    kills = []
    exposed: Dict[str, int] = defaultdict(int)
    exposed_items: set[str] = set()
    for inst, how in sorted(r["deaths"].items()):
        items = list(open_[inst])
        if how == "itself":
            how = "itself, %s" % self_kill_point.get(inst, "?")
        kills.append({"consumer": inst, "killed by": how, "between payment and complete": items})
        for it in items:
            exposed[it.split("/")[0]] += 1
            exposed_items.add(it)
    execs: Dict[str, List[Tuple[Optional[int], float]]] = defaultdict(list)
    for mid, _key, attempt, t in r["calls"]:
        execs[mid].append((attempt, t))
    dup = explained = 0
    unexplained: List[str] = []
    after_ack: List[str] = []
    same_attempt: List[str] = []
    for mid, ex in execs.items():
        n = len(ex)
        if n > 1:
            extra = n - 1
            ok = min(extra, exposed.get(mid, 0))
            if r["mode"] == "idemd":
                # and by attempt: every execution but one is by a holder
                # that was killed with this message open
                by_killed = sum(1 for a, _ in ex if "%s/%s" % (mid, a) in exposed_items)
                ok = min(ok, by_killed)
            dup += extra
            explained += ok
            if extra > ok:
                unexplained.append("%s: %d executions (attempts %s), %d kill(s) between its "
                                   "payment and complete" % (mid, n, [a for a, _ in ex],
                                                             exposed.get(mid, 0)))
        if mid in acked_at and any(t > acked_at[mid] for _, t in ex):
            after_ack.append(mid)
        attempts = [a for a, _ in ex if a is not None]
        if len(attempts) != len(set(attempts)):
            same_attempt.append(mid)
    hist: Dict[int, int] = defaultdict(int)
    for mid in want:
        hist[min(len(execs.get(mid, [])), 3)] += 1
    r.update({
        "executions": len(r["calls"]), "paid": len(set(execs) & want),
        "executed_once": hist[1], "executed_twice": hist[2], "executed_3plus": hist[3],
        "never_executed": hist[0], "unknown_messages": sorted(set(execs) - want)[:5],
        "duplicate_executions": dup, "duplicates_bounded_by_kills": explained,
        "duplicates_unexplained": dup - explained, "unexplained": unexplained,
        "executed_after_ack": after_ack, "same_attempt_twice": same_attempt,
        "kill_list": kills, "kills_total": len(kills),
        "kills_with_open": sum(1 for k in kills if k["between payment and complete"]),
        "open_at_kills": sum(len(k["between payment and complete"]) for k in kills),
        "messages_exposed": len(exposed),
        "acked": len(acked_at)})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--work", required=True)
    ap.add_argument("--deadline", type=int, default=180, help="seconds per run")
    ap.add_argument("--negative-control", action="store_true",
                    help="only the idemd run, with a fresh idemd key per delivery: idemd "
                         "cannot recognise a redelivery, so the idemd checks must fail")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)

    import idemd
    client = idemd.Client(os.environ["IDEMD_URL"], os.environ["IDEMD_API_KEY"])
    stub = Stub()
    failures: List[str] = []

    def check(ok: bool, what: str) -> None:
        print("  %s %s" % ("ok  " if ok else "FAIL", what))
        if not ok:
            failures.append(what)

    want = {"pay-%05d" % i for i in range(args.messages)}
    results = {}
    for mode in ("idemd",) if args.negative_control else ("idemd", "plain"):
        r = run(mode, args, stub, client)
        results[mode] = r
        analyse(r, want)
        print("\n%s: %d executions (stub calls) for %d messages (published in %.1f s)"
              % (r["label"], r["executions"], r["paid"], r["publish_seconds"]))
        check(r["paid"] == args.messages and not r["unknown_messages"],
              "%s: every message was paid (%d of %d)" % (r["label"], r["paid"], args.messages))
        check(r["depth"] == 0, "%s: the queue is empty at the end (%d left)"
              % (r["label"], r["depth"]))
        if mode == "idemd":
            check(r["duplicates_unexplained"] == 0,
                  "idemd: no message executed more than once without a consumer killed between "
                  "its payment and its acknowledged complete (%d such duplicate executions%s)"
                  % (r["duplicates_unexplained"],
                     ": " + "; ".join(r["unexplained"][:3]) if r["unexplained"] else ""))
            check(r["executed_once"] + r["executed_twice"] + r["executed_3plus"] == args.messages
                  and r["duplicate_executions"] <= r["open_at_kills"],
                  "idemd: duplicate executions (%d) bounded by the messages kills left between "
                  "payment and complete (%d)" % (r["duplicate_executions"], r["open_at_kills"]))
            check(not r["executed_after_ack"],
                  "idemd: no execution after the message's complete was acknowledged (%d: %s)"
                  % (len(r["executed_after_ack"]), r["executed_after_ack"][:3]))
            check(not r["same_attempt_twice"],
                  "idemd: no attempt executed twice (%d: %s)"
                  % (len(r["same_attempt_twice"]), r["same_attempt_twice"][:3]))
            check(not r["errors"], "idemd: no consumer errors (%s)" % r["errors"][:3])
            states: Dict[str, int] = defaultdict(int)
            for row in client.iter_records(operation=r["operation"], page_size=500):
                states[row["state"]] += 1
            r["records"] = dict(states)
            check(states.get("completed") == args.messages and len(states) == 1,
                  "idemd: %d completed records, none in progress (%s)" % (args.messages,
                                                                          dict(states)))
        else:
            check(r["duplicate_executions"] > 0,
                  "plain: the same chaos executes some messages more than once (%d duplicate "
                  "executions)" % r["duplicate_executions"])

    print("\nrequests cut short by a kill (not paid, 400): %d" % stub.cut_short)
    print_table(args, results)
    for mode, r in results.items():
        with_open = [k for k in r["kill_list"] if k["between payment and complete"]]
        print("\n%s: the %d kill(s) that left messages between payment and %s:"
              % (r["label"], len(with_open),
                 "acknowledged complete" if mode == "idemd" else "ack"))
        execs: Dict[str, int] = defaultdict(int)
        for mid, *_ in r["calls"]:
            execs[mid] += 1
        for k in with_open[:40]:
            items = k["between payment and complete"]
            shown = ", ".join("%s (%dx)" % (it, execs.get(it.split("/")[0], 0))
                              for it in items[:5])
            print("  consumer %-6s killed by %-26s %2d open: %s%s"
                  % (k["consumer"], k["killed by"], len(items), shown,
                     ", ..." if len(items) > 5 else ""))
        if len(with_open) > 40:
            print("  ... (%d more in figures.json)" % (len(with_open) - 40))
    figures = {m: {k: v for k, v in r.items() if k not in ("calls", "lines")}
               for m, r in results.items()}
    with open(os.path.join(args.work, "figures.json"), "w") as f:
        json.dump(figures, f, indent=1)
    if failures:
        print("\n%d check(s) failed" % len(failures))
        return 1
    print("\nall checks passed")
    return 0


def print_table(args: argparse.Namespace, results: Dict[str, Dict[str, Any]]) -> None:
    a = results["idemd"]
    b = results.get("plain")

    def row(name: str, key: Any, plain: Any = None) -> None:
        x = key(a) if callable(key) else a.get(key, "-")
        y = "-" if b is None else (plain(b) if callable(plain) else
                                   b.get(plain if plain is not None else key, "-"))
        print("  %-66s %12s %14s" % (name, x, y))

    print("\nqueue consumers under chaos: %d messages, %d consumers, prefetch %d, batches of %d, "
          "lease %d s, seed %d" % (args.messages, CONSUMERS, PREFETCH, BATCH, LEASE_SECONDS,
                                   args.seed))
    print("  %-66s %12s %14s" % ("", a["label"], "without idemd"))
    row("messages", lambda r: args.messages, lambda r: args.messages)
    row("publisher resends (same message id)", "resends")
    row("SIGKILL by the consumer itself, before the payment",
        lambda r: r["kills"].get("before_effect", 0), lambda r: r["kills"].get("before_effect", 0))
    row("SIGKILL by itself, after the payment, before complete (ack)",
        lambda r: r["kills"].get("after_effect", 0), lambda r: r["kills"].get("after_effect", 0))
    row("SIGKILL by itself, after complete, before the ack",
        lambda r: r["kills"].get("after_complete", 0), lambda r: "-")
    row("SIGKILL by itself, after the batch's payments, before its ack", lambda r: "-",
        lambda r: r["kills"].get("after_complete", 0))
    row("SIGKILL from the chaos loop (random moment)", "external_kills")
    row("consumers killed (all causes)", "kills_total")
    row("  of them with messages between payment and acknowledged complete", "kills_with_open")
    row("  messages they left there (summed over the kills)", "open_at_kills")
    row("consumer restarts", "restarts")
    row("deliveries another live consumer held (409, claimed again later)", "busy",
        lambda r: "-")
    row("batches or messages handed back to retry later", "retries", lambda r: "-")
    row("results stored too late (lease lost, another took over)", "lost", lambda r: "-")
    row("messages paid", "paid")
    row("executions (calls that reached the payment stub)", "executions")
    row("messages executed exactly once", "executed_once")
    row("messages executed twice", "executed_twice")
    row("messages executed three times or more", "executed_3plus")
    row("duplicate executions (executions - messages)", "duplicate_executions")
    row("  bounded by kills (a kill between its payment and complete)",
        "duplicates_bounded_by_kills")
    row("  with no kill there (idemd: must be 0)", "duplicates_unexplained")
    row("messages executed after their complete (ack) was acknowledged",
        lambda r: len(r["executed_after_ack"]), lambda r: len(r["executed_after_ack"]))
    row("seconds to publish", lambda r: "%.1f" % r["publish_seconds"],
        lambda r: "%.1f" % r["publish_seconds"])
    row("seconds from the first consumer to an empty queue", lambda r: "%.1f" % r["total_seconds"],
        lambda r: "%.1f" % r["total_seconds"])


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "consumer":
        consumer(sys.argv[2], sys.argv[3])
        sys.exit(0)
    sys.exit(main())
