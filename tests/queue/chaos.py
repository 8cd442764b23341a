"""RabbitMQ consumers under chaos, with and without idemd (run by tests/queue.sh).

One file, three roles:

* ``chaos.py --messages N --seed S --work DIR`` (the orchestrator): starts a
  payment stub (HTTP, records every call with the key it was sent, never
  deduplicates), publishes N payment messages with a publisher that
  retries (a seeded share of messages is published twice with the same
  message id, as after a lost confirm), runs four consumer processes and a
  chaos loop that SIGKILLs them and restarts them, then checks the stub's
  record. It does this twice on two queues: once with consumers that use
  idemd (``Client.consume``), once with plain consumers (pay, then ack).
* ``chaos.py consumer idemd|plain INSTANCE``: one consumer process, manual
  acks, prefetch. Per delivery a seeded RNG decides whether it kills
  itself with SIGKILL and where: before the payment, after the payment and
  before idemd's completion, or after the completion and before the ack.

Environment (from tests/queue.sh): AMQP_PORT, IDEMD_URL, IDEMD_API_KEY;
the orchestrator passes STUB_URL, QUEUE, OPERATION, CHAOS_SEED, CHAOS_RATE,
CHAOS_EVENTS, CHAOS_CALM to the consumers.

Checked with idemd: every message was paid; each message id reached the
stub under exactly one forwarded key (the idemd record id) and each key
belongs to one message; the queue is empty; idemd holds one completed
record per message and none in progress. Raw duplicate calls (the same
key twice: a consumer died between the payment and the completion) are
counted and printed. Without idemd: every message was paid and some were
paid twice (asserted > 0). Exit status 0 when every check holds.
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
        self.calls: Dict[str, List[Tuple[str, str]]] = defaultdict(list)
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
                with stub.lock:
                    stub.calls[queue].append((str(body["message_id"]), key))
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

    def snapshot(self, queue: str) -> List[Tuple[str, str]]:
        with self.lock:
            return list(self.calls[queue])


# ------------------------------------------------------------------ publisher

def publish(queue: str, n: int, seed: int) -> int:
    """Publishes N persistent messages, committed in transactions of 250
    (a commit is the broker's confirmation of the chunk); a seeded share is
    sent again with the same message id, as a publisher does when a
    confirmation was lost. Returns the resends."""
    rng = random.Random("publisher:%d" % seed)
    conn = pika.BlockingConnection(amqp_params())
    ch = conn.channel()
    ch.queue_declare(queue, durable=True)
    ch.tx_select()
    resends = 0
    for i in range(n):
        mid = "pay-%05d" % i
        body = json.dumps({"message_id": mid, "amount": 100 + i % 900, "currency": "EUR"}).encode()
        props = pika.BasicProperties(message_id=mid, delivery_mode=2,
                                     content_type="application/json")
        sends = 2 if rng.random() < PUBLISH_RETRY_RATE else 1
        for _ in range(sends):
            ch.basic_publish("", queue, body, props)
        resends += sends - 1
        if i % 250 == 249 or i == n - 1:
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
    events = os.open(os.environ["CHAOS_EVENTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    payer = Payer(os.environ["STUB_URL"], queue)

    def note(what: str) -> None:
        os.write(events, ("%s\n" % what).encode())

    def die_at(plan: Dict[str, str], point: str, mid: str) -> None:
        if plan.get(mid) == point and not os.path.exists(calm_file):
            note("kill %s %s" % (point, mid))
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
                payer.pay(m, m["message_id"])
                die_at(plan, "after_effect", m["message_id"])
            for method, m in batch:
                die_at(plan, "after_complete", m["message_id"])  # after the payment, before the ack
                ch.basic_ack(method.delivery_tag)
            continue

        def handler(m: Dict[str, Any], claim: idemd.BatchClaimResult) -> Dict[str, str]:
            die_at(plan, "before_effect", m["message_id"])
            assert claim.id is not None
            charge = payer.pay(m, claim.id)  # the record id: the same on every attempt
            die_at(plan, "after_effect", m["message_id"])
            return {"charge": charge}

        try:
            outcomes = client.consume(operation, [m for _, m in batch],
                                      key=lambda m: m["message_id"], handler=handler,
                                      request=lambda m: m, with_claim=True)
        except idemd.IdemdError as e:
            # idemd unreachable or refusing after the client's retries: the
            # batch comes back later; nothing was paid without a claim.
            note("retry consume %s" % e)
            time.sleep(0.2)
            for method, _ in batch:
                ch.basic_nack(method.delivery_tag, requeue=True)
            continue
        for (method, m), o in zip(batch, outcomes):
            if o.outcome == "in_progress":
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

    def spawn(self, slot: int) -> None:
        self.generation += 1
        self.procs[slot] = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "consumer", self.mode,
             "%d.%d" % (slot, self.generation)], env=self.env)

    def tick(self, calm: bool, progress: int = 0) -> int:
        """Restarts dead consumers (not after a clean exit when calm) and,
        unless calm, SIGKILLs one at random moments: when PROGRESS (calls
        that reached the stub) passes a random mark, so that a faster run
        gets as many kills as a slower one. Returns how many are live."""
        if not calm and progress >= self.next_kill:
            live = [p for p in self.procs if p is not None and p.poll() is None]
            if live:
                self.rng.choice(live).send_signal(signal.SIGKILL)
                self.external_kills += 1
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
                p.kill()
        for p in self.procs:
            if p is not None:
                p.wait()


def run(mode: str, args: argparse.Namespace, stub: Stub, client: Any) -> Dict[str, Any]:
    queue = "payments.%s" % mode
    work = os.path.join(args.work, mode)
    os.makedirs(work, exist_ok=True)
    calm = os.path.join(work, "calm")
    events = os.path.join(work, "events")
    operation = "payment.capture.%s" % mode
    if mode == "idemd":
        client.put_operation(operation, token_ttl_seconds=3600, retention_seconds=86400,
                             lease_seconds=LEASE_SECONDS)
    t0 = time.monotonic()
    resends = publish(queue, args.messages, args.seed)
    published = time.monotonic() - t0
    env = dict(os.environ, QUEUE=queue, OPERATION=operation, STUB_URL=stub.url,
               CHAOS_SEED=str(args.seed), CHAOS_RATE=str(SELF_KILL_RATE),
               CHAOS_EVENTS=events, CHAOS_CALM=calm)
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
    return {"mode": mode, "queue": queue, "operation": operation, "resends": resends,
            "publish_seconds": published, "chaos_seconds": chaos_seconds,
            "total_seconds": total_seconds, "kills": dict(kills),
            "external_kills": fleet.external_kills, "restarts": fleet.restarts,
            "errors": [ln for ln in lines if ln.startswith("error")],
            "retries": sum(1 for ln in lines if ln.startswith("retry")),
            "lost": sum(1 for ln in lines if ln.startswith("lost")),
            "calls": stub.snapshot(queue), "depth": queue_depth(queue)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--work", required=True)
    ap.add_argument("--deadline", type=int, default=180, help="seconds per run")
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
    for mode in ("idemd", "plain"):
        r = run(mode, args, stub, client)
        results[mode] = r
        by_msg: Dict[str, List[str]] = defaultdict(list)
        by_key: Dict[str, set[str]] = defaultdict(set)
        for mid, key in r["calls"]:
            by_msg[mid].append(key)
            by_key[key].add(mid)
        r["paid"] = len(set(by_msg) & want)
        r["raw_calls"] = len(r["calls"])
        r["raw_duplicates"] = len(r["calls"]) - len(by_msg)
        r["multi_key"] = sum(1 for keys in by_msg.values() if len(set(keys)) > 1)
        r["paid_twice"] = sum(1 for keys in by_msg.values() if len(keys) > 1)
        print("\n%s: %d stub calls for %d messages (published in %.1f s)"
              % (mode, r["raw_calls"], len(by_msg), r["publish_seconds"]))
        odd = [(mid, sorted(set(keys))) for mid, keys in by_msg.items()
               if mid not in want or len(set(keys)) > 1][:5]
        odd += [("keys " + key, sorted(mids)) for key, mids in by_key.items() if len(mids) > 1][:5]
        for what, detail in odd if mode == "idemd" else []:
            print("  odd: %s -> %s" % (what, detail))
        check(r["paid"] == args.messages and set(by_msg) <= want,
              "%s: every message was paid (%d of %d)" % (mode, r["paid"], args.messages))
        check(r["depth"] == 0, "%s: the queue is empty at the end (%d left)" % (mode, r["depth"]))
        if mode == "idemd":
            check(r["multi_key"] == 0,
                  "idemd: one forwarded key per message id (%d with more)" % r["multi_key"])
            check(all(len(m) == 1 for m in by_key.values()),
                  "idemd: each forwarded key belongs to one message id")
            check(not r["errors"], "idemd: no consumer errors (%s)" % r["errors"][:3])
            states: Dict[str, int] = defaultdict(int)
            for row in client.iter_records(operation=r["operation"], page_size=500):
                states[row["state"]] += 1
            r["records"] = dict(states)
            check(states.get("completed") == args.messages and len(states) == 1,
                  "idemd: %d completed records, none in progress (%s)" % (args.messages, dict(states)))
        else:
            check(r["paid_twice"] > 0,
                  "plain: the same chaos pays some messages twice (%d)" % r["paid_twice"])

    a, b = results["idemd"], results["plain"]

    def row(name: str, x: Any, y: Any) -> None:
        print("  %-58s %12s %14s" % (name, x, y))

    print("\nrequests cut short by a kill (not paid, 400): %d" % stub.cut_short)
    print("\nqueue consumers under chaos: %d messages, %d consumers, prefetch %d, batches of %d, seed %d"
          % (args.messages, CONSUMERS, PREFETCH, BATCH, args.seed))
    row("", "with idemd", "without idemd")
    row("publisher resends (same message id)", a["resends"], b["resends"])
    row("SIGKILL before the payment", a["kills"].get("before_effect", 0), b["kills"].get("before_effect", 0))
    row("SIGKILL after the payment, before complete", a["kills"].get("after_effect", 0), "-")
    row("SIGKILL after complete, before the ack", a["kills"].get("after_complete", 0), "-")
    row("SIGKILL after the payment, before the ack", "-",
        b["kills"].get("after_effect", 0) + b["kills"].get("after_complete", 0))
    row("SIGKILL from the chaos loop (random moment)", a["external_kills"], b["external_kills"])
    row("consumer restarts", a["restarts"], b["restarts"])
    row("batches or messages handed back to retry later", a["retries"], "-")
    row("results stored too late (lease lost, another took over)", a["lost"], "-")
    row("messages paid", a["paid"], b["paid"])
    row("calls that reached the payment stub", a["raw_calls"], b["raw_calls"])
    row("messages paid more than once (distinct keys)", a["multi_key"], b["paid_twice"])
    row("raw duplicate calls, same key (stub can dedupe)", a["raw_duplicates"], "-")
    row("seconds to publish", "%.1f" % a["publish_seconds"], "%.1f" % b["publish_seconds"])
    row("seconds from the first consumer to an empty queue", "%.1f" % a["total_seconds"],
        "%.1f" % b["total_seconds"])
    figures = {m: {k: v for k, v in r.items() if k not in ("calls", "errors")} for m, r in results.items()}
    with open(os.path.join(args.work, "figures.json"), "w") as f:
        json.dump(figures, f, indent=1)
    if failures:
        print("\n%d check(s) failed" % len(failures))
        return 1
    print("\nall checks passed")
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "consumer":
        consumer(sys.argv[2], sys.argv[3])
        sys.exit(0)
    sys.exit(main())
