"""Integration tests: SIGHUP reloads the config file. Under load: a route
added, one changed and one removed, CORS origins and a quota changed; the
answers are right on both sides of the reload; what only a restart changes
(listen, pool_size) is named in one log line and keeps its running value;
a config that fails as a whole (bad JSON, an unknown key, a route for a
tenant that does not exist) changes nothing."""

import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Client, IdemdCase, assert_status, free_port, uniq  # noqa: E402
from test_gateway import Upstream  # noqa: E402

OLD_ORIGIN = "https://old.example"
NEW_ORIGIN = "https://new.example"


class Reload(IdemdCase):
    start_server = False

    @classmethod
    def setUpClass(cls):
        cls.up = cls.stop_after_class(Upstream())
        super().setUpClass()

    def route(self, path, target, **kw):
        r = {"method": "POST", "path": path, "tenant": "acme", "operation": "order.create",
             "upstream": "http://127.0.0.1:%d%s" % (self.up.port, target),
             "key": "header:Idempotency-Key"}
        r.update(kw)
        return r

    def write(self, **cfg):
        self.idemd.write_config(**cfg)

    def reload(self, srv, expect):
        before = srv.stderr_text().count("serve: reload")
        srv.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while srv.stderr_text().count("serve: reload") == before:
            self.assertLess(time.monotonic(), deadline, "no reload line")
            time.sleep(0.05)
        line = [ln for ln in srv.stderr_text().splitlines() if "serve: reload" in ln][-1]
        self.assertIn(expect, line)
        return line

    def submit(self, c, path, key=None):
        return c.post(path, {"n": 1}, headers={"Idempotency-Key": key or uniq("k")})

    def metric(self, c, name):
        for ln in c.get("/metrics").body.decode().splitlines():
            if ln.startswith(name + " "):
                return float(ln.split()[1])
        self.fail("no %s in /metrics" % name)

    def test_reload_without_limit(self):
        """Issue 38: after 64 reloads the 65th only logged "64 reloads
        already" and ignored the file. Now 150 reloads, under load, each
        put in force; what they replaced is freed; /metrics and /readyz say
        the generation and the last result."""
        self.write(cors_origins=["https://gen0.example"], routes=[self.route("/r", "/g0")])
        srv = self.idemd.start()
        c = Client(srv.port, self.api_key)
        self.assertIn(c.put("/v1/operations/order.create", harness.DEFAULT_POLICY).status,
                      (200, 201))
        anon = Client(srv.port)
        stop, bad = threading.Event(), []

        def load():
            an = Client(srv.port)
            while not stop.is_set():
                r = self.submit(an, "/r")
                if r.status != 201:
                    bad.append(r.describe())
        ts = [threading.Thread(target=load) for _ in range(2)]
        for t in ts:
            t.start()
        n = 150
        try:
            for i in range(1, n + 1):
                self.write(cors_origins=["https://gen%d.example" % i],
                           routes=[self.route("/r", "/g%d" % i)])
                self.reload(srv, "reloaded")
        finally:
            stop.set()
            for t in ts:
                t.join(10)
        self.assertEqual(bad, [], "wrong answers around the reloads")
        self.assertEqual(self.submit(anon, "/r").status, 201)
        self.assertEqual(self.up.requests()[-1]["path"], "/g%d" % n, "the last reload in force")
        pre = anon.request("OPTIONS", "/v1/tokens", headers={
            "Origin": "https://gen%d.example" % n, "Access-Control-Request-Method": "POST"})
        self.assertEqual(pre.status, 204)
        self.assertEqual(self.metric(anon, "idemd_config_generation"), n + 1)
        self.assertEqual(self.metric(anon, "idemd_config_last_reload_successful"), 1)
        deadline = time.monotonic() + 5
        while self.metric(anon, "idemd_config_retired") > 0:
            self.assertLess(time.monotonic(), deadline, "replaced configurations not freed")
            time.sleep(0.2)
        j = assert_status(self, anon.get("/readyz"), 200)
        self.assertEqual((j["config"]["generation"], j["config"]["last_reload"]), (n + 1, "ok"))
        # a refused reload: the generation stays, the result says so
        with open(self.idemd.config_path, "w") as f:
            f.write('{"routes": [')
        self.reload(srv, "refused")
        self.assertEqual(self.metric(anon, "idemd_config_generation"), n + 1)
        self.assertEqual(self.metric(anon, "idemd_config_last_reload_successful"), 0)
        j = assert_status(self, anon.get("/readyz"), 200)
        self.assertEqual(j["config"]["last_reload"], "refused")
        self.assertEqual(self.submit(anon, "/r").status, 201)
        self.assertEqual(srv.stop(), 0)

    def test_reloads_give_their_memory_back(self):
        """A reload's route table, router set and CORS set are freed once
        no request can read them, as its config is: RSS after 1,000
        reloads of 30 routes is within 1 MiB of RSS after 10 (each reload
        kept about 15 KiB until the stop before, 15 MiB in 1,000)."""
        def routes(gen):
            return [self.route("/m%d" % i, "/g%d-%d" % (gen, i)) for i in range(30)]

        self.write(cors_origins=["https://gen0.example"], routes=routes(0))
        srv = self.idemd.start()
        c = Client(srv.port, self.api_key)
        self.assertIn(c.put("/v1/operations/order.create", harness.DEFAULT_POLICY).status,
                      (200, 201))
        anon = Client(srv.port)

        def reloads(first, last):
            for i in range(first, last + 1):
                self.write(cors_origins=["https://gen%d.example" % i], routes=routes(i))
                srv.proc.send_signal(signal.SIGHUP)
                deadline = time.monotonic() + 10
                while self.metric(anon, "idemd_config_generation") < i + 1:
                    self.assertLess(time.monotonic(), deadline, "reload %d not done" % i)
                    time.sleep(0.005)
            deadline = time.monotonic() + 5
            while self.metric(anon, "idemd_config_retired") > 0:
                self.assertLess(time.monotonic(), deadline, "replaced configurations not freed")
                time.sleep(0.2)
            return harness.rss_kib(srv.proc.pid)

        after10 = reloads(1, 10)
        after1000 = reloads(11, 1000)
        print("\n  RSS after 10 reloads %d KiB, after 1,000 %d KiB" % (after10, after1000),
              end="", file=sys.stderr)
        # AddressSanitizer's allocator keeps what is freed (its quarantine,
        # its size classes): there the reloads are run for its reports alone
        with open(harness.BIN, "rb") as f:
            sanitized = b"__asan_init" in f.read()
        if not sanitized:
            self.assertLess(after1000 - after10, 1024,
                            "1,000 reloads kept %d KiB" % (after1000 - after10))
        self.assertEqual(self.submit(anon, "/m7").status, 201)
        self.assertEqual(self.up.requests()[-1]["path"], "/g1000-7", "the last reload in force")
        self.assertEqual(srv.stop(), 0)

    def test_reload_under_load(self):
        base = {"cors_origins": [OLD_ORIGIN],
                "routes": [self.route("/a", "/a1"), self.route("/c", "/c1")]}
        self.write(**base)
        srv = self.idemd.start()
        c = Client(srv.port, self.api_key)
        assert_status(self, c.put("/v1/operations/order.create", harness.DEFAULT_POLICY), 201)
        op = self.put_operation(client=c)
        anon = Client(srv.port)
        self.assertEqual(self.submit(anon, "/a").status, 201)
        self.assertEqual(self.submit(anon, "/c").status, 201)
        self.assertEqual(self.submit(anon, "/b").status, 404)

        # load on both sides of the reload: API claims and submits to /a,
        # a route that exists before and after
        stop, bad, count = threading.Event(), [], [0]

        def load():
            cl, an = Client(srv.port, self.api_key), Client(srv.port)
            while not stop.is_set():
                rr = cl.post("/v1/operations/%s/keys/%s/claim" % (op, uniq("l")), {})
                ra = self.submit(an, "/a")
                count[0] += 2
                for x in (rr, ra):
                    if x.status != 201:
                        bad.append(x.describe())
        ts = [threading.Thread(target=load) for _ in range(3)]
        for t in ts:
            t.start()
        time.sleep(0.5)
        new_port = free_port()
        self.write(listen="127.0.0.1:%d" % new_port, pool_size=3,
                   cors_origins=[NEW_ORIGIN],
                   routes=[self.route("/a", "/a2"), self.route("/b", "/b1")])
        line = self.reload(srv, "reloaded")
        self.assertIn("listen", line)
        self.assertIn("pool_size", line)
        time.sleep(0.5)
        stop.set()
        for t in ts:
            t.join(10)
        self.assertEqual(bad, [], "wrong answers around the reload")
        print("\n  %d requests around the reload, all 201" % count[0], end="")

        # the new routes, on the old listener
        key = uniq("after")
        self.assertEqual(self.submit(anon, "/a", key).status, 201)
        self.assertEqual(self.up.requests()[-1]["path"], "/a2", "route /a changed upstream")
        self.assertEqual(self.submit(anon, "/b").status, 201)
        self.assertEqual(self.submit(anon, "/c").status, 404, "route /c removed")
        self.assertFalse(harness.port_open(new_port), "listen changed without a restart")
        pre = anon.request("OPTIONS", "/v1/tokens", headers={
            "Origin": NEW_ORIGIN, "Access-Control-Request-Method": "POST"})
        self.assertEqual(pre.status, 204)
        pre = anon.request("OPTIONS", "/v1/tokens", headers={
            "Origin": OLD_ORIGIN, "Access-Control-Request-Method": "POST"})
        self.assertEqual(pre.status, 403)

        # a quota, put in force by a reload
        with open(self.idemd.config_path) as f:
            good = f.read()
        cfg = json.loads(good)
        with open(self.idemd.config_path, "w") as f:
            json.dump(dict(cfg, claim_rate_per_second=1, claim_burst=1), f)
        self.reload(srv, "reloaded")
        codes = [c.post("/v1/operations/%s/keys/%s/claim" % (op, uniq("q")), {}).status
                 for _ in range(3)]
        self.assertIn(429, codes)
        with open(self.idemd.config_path, "w") as f:
            f.write(good)
        self.reload(srv, "reloaded")

        # configs that fail as a whole change nothing
        for broken in ('{"routes": [', json.dumps(dict(cfg, colour="red")),
                       json.dumps(dict(cfg, routes=cfg["routes"] + [
                           dict(self.route("/z", "/z"), tenant="nobody")]))):
            with open(self.idemd.config_path, "w") as f:
                f.write(broken)
            self.reload(srv, "refused")
            self.assertEqual(self.submit(anon, "/b").status, 201)
            self.assertEqual(self.submit(anon, "/c").status, 404)
        with open(self.idemd.config_path, "w") as f:
            f.write(good)
        self.assertEqual(srv.stop(), 0)


if __name__ == "__main__":
    harness.main()
