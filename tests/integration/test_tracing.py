"""Integration tests: W3C Trace Context. One trace id through the client,
idemd (its answer and its access log line), the upstream and the audit
event; idemd's own span id on the answer and upstream; a new trace when
the caller sends none or an invalid one."""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import IdemdCase, assert_status, uniq  # noqa: E402
from test_gateway import Upstream  # noqa: E402

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


class Tracing(IdemdCase):

    @classmethod
    def setUpClass(cls):
        cls.up = cls.stop_after_class(Upstream())
        cls.extra_config = {"routes": [
            {"method": "POST", "path": "/orders", "tenant": "acme", "operation": "order.create",
             "upstream": "http://127.0.0.1:%d/ok" % cls.up.port}]}
        super().setUpClass()
        cls.define_operation("order.create")

    def test_one_trace_through_client_idemd_upstream_and_audit(self):
        issued = assert_status(self, self.client.post("/v1/tokens", {"operation": "order.create",
                                                                     "subject": "u1"}), 201)
        r = self.anon.post("/orders", {"sku": 1},
                           headers={"Idempotency-Key": issued["token"],
                                    "traceparent": "00-%s-%s-01" % (TRACE, PARENT),
                                    "tracestate": "vendor=x"})
        assert_status(self, r, 201)
        answer = r.header("traceparent")
        self.assertRegex(answer or "", r"^00-%s-[0-9a-f]{16}-01$" % TRACE)
        span = answer.split("-")[2]
        self.assertNotEqual(span, PARENT, "idemd answers with a span of its own")
        seen = self.up.requests(issued["id"])[0]
        hdrs = {k.lower(): v for k, v in seen["headers"]}
        self.assertEqual(hdrs.get("traceparent"), answer, "the upstream's parent is idemd's span")
        self.assertEqual(hdrs.get("tracestate"), "vendor=x")
        events = assert_status(self, self.client.get("/v1/records/%s/events" % issued["id"]),
                               200)["events"]
        self.assertEqual([e.get("trace_id") for e in events], [TRACE, TRACE])
        time.sleep(0.2)
        lines = [json.loads(ln) for ln in self.server.stderr_text().splitlines()
                 if ln.startswith("{")]
        access = [ln for ln in lines if ln.get("route") == "/orders"]
        self.assertEqual(access[-1].get("trace_id"), TRACE)

    def test_a_new_trace_without_a_valid_parent(self):
        for sent in (None, "00-%s-%s-01" % ("0" * 32, PARENT), "garbage"):
            h = {"traceparent": sent} if sent else {}
            r = self.client.get("/v1/operations", headers=h)
            assert_status(self, r, 200)
            tp = r.header("traceparent") or ""
            self.assertRegex(tp, r"^00-[0-9a-f]{32}-[0-9a-f]{16}-00$")
            self.assertNotEqual(tp.split("-")[1], "0" * 32)
        # an API claim carries the trace into its audit event too
        op = self.put_operation()
        p = "/v1/operations/%s/keys/%s/claim" % (op, uniq("k"))
        r = self.client.post(p, {}, headers={"traceparent": "00-%s-%s-00" % (TRACE, PARENT)})
        rid = assert_status(self, r, 201)["id"]
        ev = assert_status(self, self.client.get("/v1/records/%s/events" % rid), 200)["events"]
        self.assertEqual(ev[0]["trace_id"], TRACE)


if __name__ == "__main__":
    harness.main()
